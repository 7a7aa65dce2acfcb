#!/bin/bash
# Session 23, call 4 (device, the session's last ~480 s): one MMA a product in the forward and
# the backward (HYBRID_DR_BF16=1; branch dr-bf16 at 429d4f1). test_delta_rule (the bf16 forward
# and backward checks), our KDA at the three shapes in both arithmetics (fla is not re-run:
# its cold Triton autotune took the whole of call 3, whose fla numbers the summary pairs with),
# the per-kernel profile at the training shape, then the 3:1 hybrid's step in both arithmetics.
export NCCL_NVLS_ENABLE=0; set -u
make -j16 hybrid out/build/gpu/test_delta_rule out/build/gpu/bench_delta_rule > /tmp/b.log 2>&1 || { tail -30 /tmp/b.log; exit 1; }
echo "built $SECONDS s"
out/build/gpu/test_delta_rule > /tmp/tdr.log 2>&1; echo "test_delta_rule rc $?"; tail -1 /tmp/tdr.log
grep -E "FAIL" /tmp/tdr.log | head -5; grep "one MMA a product" /tmp/tdr.log > $OUT/tdr_bf16.txt
for w in "forward o" "forward hT" "backward dq" "backward dk" "backward dv" "backward dg" "backward dbeta" "backward dh0"; do
  grep "$w, one MMA" /tmp/tdr.log | awk -v w="$w" '{print $(NF-3)}' | sort -g | tail -1 | sed "s/^/worst $w: /"; done
out/build/gpu/bench_delta_rule --kinds kda --json $OUT/ours_split.json > $OUT/ours_split.log 2>&1
HYBRID_DR_BF16=1 out/build/gpu/bench_delta_rule --kinds kda --json $OUT/ours_bf16.json > $OUT/ours_bf16.log 2>&1
HYBRID_DR_BF16=1 HYBRID_CUDA_PROFILE=1 out/build/gpu/bench_delta_rule --kinds kda --shape 64,1024,6,128,128 --reps 5 > $OUT/prof_bf16.log 2>&1
python3 scripts/bench_summary_kda.py $OUT/ours_bf16.json $OUT/ours_split.json 2>&1 | grep "| KDA"
echo "ours at $SECONDS s"
. scripts/kernel_compare_lib.sh; kernel_data
for m in 0 1; do
  HYBRID_DR_BF16=$m OUT=/tmp/bh$m BENCH_CASES=3:1-T1024 bash scripts/bench_hybrid.sh > /tmp/bh$m.log 2>&1
  echo "HYBRID_DR_BF16=$m: $(grep -o '"ms_per_step": [0-9.]*\|"tok_per_s": [0-9.]*\|"peak_mem_gib": [0-9.]*' /tmp/bh$m/bench/hybrid_ours.json | tr '\n' ' ')"
  grep -E "loss" /tmp/bh$m/bench/logs/*.log 2>/dev/null | grep "step  *[0-9]*/" | tail -2
done
echo "total $SECONDS s"
