#include "sim/serving/kv_transfer.h"

#include "sim/engine/check.h"

namespace moesim {

KvTransferSize kv_transfer_size(const ModelSpec& m, Precision kv, std::int64_t tokens, int dest_tp) {
  MOESIM_CHECK(dest_tp >= 1 && tokens >= 0, "kv transfer: tp >= 1 and tokens >= 0");
  KvTransferSize s;
  s.bytes = m.kv_bytes_per_token(kv) * double(tokens);
  double share = 1.0;
  if (m.attention == AttentionKind::kGqa) {
    const int heads_per_gpu = (m.num_kv_heads + dest_tp - 1) / dest_tp;
    share = double(heads_per_gpu) / m.num_kv_heads;
  }
  s.bytes_per_dest_gpu = s.bytes * share;
  s.wire_bytes = s.bytes_per_dest_gpu * dest_tp;
  return s;
}

}  // namespace moesim
