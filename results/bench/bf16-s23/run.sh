#!/bin/bash
# Session 23, call 3 (device): the delta-rule forward in one MMA a product (HYBRID_DR_BF16=1,
# kernels/delta_rule/chunk.cuh's dr_mma3x; branch dr-bf16). test_delta_rule (the new bf16 forward
# checks), the GPU fingerprints against call 1's (results/bench/plugin-s23/fp.txt: the split
# arithmetic's machine code is unchanged, 29 of 29 kernels, so training must keep its bits), our
# KDA / GDN at the three shapes in both arithmetics, then fla (bc3b101, carried as out/peers/fla)
# at the same shapes, KDA only, in the time left.
export NCCL_NVLS_ENABLE=0; set -u
make -j16 hybrid out/build/gpu/test_delta_rule out/build/gpu/bench_delta_rule > /tmp/b.log 2>&1 || { tail -30 /tmp/b.log; exit 1; }
echo "built $SECONDS s"
out/build/gpu/test_delta_rule > $OUT/tdr.log 2>&1; echo "test_delta_rule rc $?"; tail -1 $OUT/tdr.log
grep -E "FAIL" $OUT/tdr.log | head -5
grep "one MMA a product" $OUT/tdr.log | awk '{print $(NF-3)}' | sort -g | tail -1 | sed 's/^/worst one-MMA error: /'
. scripts/kernel_compare_lib.sh; kernel_data; kernel_fingerprints $OUT/fp.txt
kernel_fp_verdict $OUT/fp.txt results/bench/plugin-s23/fp.txt; echo "fingerprints at $SECONDS s"
out/build/gpu/bench_delta_rule --kinds kda,gdn --json $OUT/ours_split.json > $OUT/ours_split.log 2>&1
HYBRID_DR_BF16=1 out/build/gpu/bench_delta_rule --kinds kda,gdn --json $OUT/ours_bf16.json > $OUT/ours_bf16.log 2>&1
HYBRID_DR_BF16=1 HYBRID_CUDA_PROFILE=1 out/build/gpu/bench_delta_rule --kinds kda --shape 64,1024,6,128,128 --reps 5 > $OUT/prof_bf16.log 2>&1
HYBRID_CUDA_PROFILE=1 out/build/gpu/bench_delta_rule --kinds kda --shape 64,1024,6,128,128 --reps 5 > $OUT/prof_split.log 2>&1
python3 scripts/bench_summary_kda.py $OUT/ours_bf16.json $OUT/ours_split.json 2>&1 | head -40
echo "ours at $SECONDS s"
TRITON_CACHE_DIR=/tmp/tc FLA_PEER=out/peers/fla timeout $((585-SECONDS)) python3 -u scripts/bench_fla_kda.py --kinds kda \
    --json $OUT/fla.json > $OUT/fla.log 2>&1; echo "fla rc $?"
python3 scripts/bench_summary_kda.py $OUT/ours_bf16.json $OUT/fla.json 2>&1 | head -40
echo "total $SECONDS s"
