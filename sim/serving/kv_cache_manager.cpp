#include "sim/serving/kv_cache_manager.h"

#include "sim/engine/check.h"

namespace moesim {

void KvCacheManager::grow(Request& r, std::int64_t computed) {
  const std::int64_t need = blocks_needed(r, computed);
  MOESIM_CHECK(need <= free_, "KV blocks allocated beyond the pool");
  free_ -= need;
  r.blocks += need;
}

}  // namespace moesim
