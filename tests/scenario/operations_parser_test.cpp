// deployment.autoscale pools take one instance's capacity in requests or in tokens per second, not both.
#include <catch2/catch.hpp>
#include <string>

#include "sim/scenario/scenario_parser.h"
#include "tests/scenario/parse_error.h"

using namespace moesim;

namespace {

Json autoscaled(const Json& pool) {
  Json j = Json::parse(R"({
    "model": "qwen3-30b-a3b",
    "cluster": {"gpu": "h100-sxm", "nodes": 2, "gpus_per_node": 4},
    "deployment": {"ep_size": 4},
    "workload": {"arrival": {"kind": "poisson", "rate_per_s": 5},
                 "prompt_tokens": {"kind": "fixed", "tokens": 100},
                 "output_tokens": {"kind": "fixed", "tokens": 10}},
    "run": {"requests": 10}})");
  j["deployment"]["autoscale"] = Json{{"pools", Json::array({pool})}};
  return j;
}

}  // namespace

TEST_CASE("an autoscaled pool's capacity is in requests or in tokens per second, exactly one") {
  const ScenarioSpec s = parse_scenario(autoscaled(Json{{"capacity_tokens_per_s", 5000}}), "").spec;
  REQUIRE(s.autoscale.pools.size() == 1);
  CHECK(s.autoscale.pools[0].capacity_tokens_per_s == 5000);
  CHECK(s.autoscale.pools[0].capacity_req_per_s == 0);
  const std::string both =
      parse_error_of(autoscaled(Json{{"capacity_tokens_per_s", 5000}, {"capacity_req_per_s", 2}}));
  CHECK(both.rfind("deployment.autoscale.pools[0]: give capacity_req_per_s or capacity_tokens_per_s", 0) ==
        0);
  const std::string neither = parse_error_of(autoscaled(Json{{"min_instances", 1}}));
  CHECK(neither.rfind("deployment.autoscale.pools[0]: give capacity_req_per_s or capacity_tokens_per_s", 0) ==
        0);
  CHECK(parse_error_of(autoscaled(Json{{"capacity_tokens_per_s", -1}}))
            .rfind("deployment.autoscale.pools[0].capacity_tokens_per_s", 0) == 0);
}
