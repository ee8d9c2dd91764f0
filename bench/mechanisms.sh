# The experts-in-the-loop mechanisms as `--set` values, shared by the benchmark scripts (sourced, not run).
COACT='workload.expert_popularity.coactivation={"group_size":8,"rho":0.5}'
DRIFT='workload.expert_popularity.drift={"half_life_s":600}'
TIERS='experts.tiers={"hbm_expert_gib":36,"cold_home":"host_dram"}'
QUANT='experts.quantization={"hot":"fp8","warm":"int8","cold":"int4"}'
export COACT DRIFT TIERS QUANT
