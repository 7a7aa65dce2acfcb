#!/bin/bash
# Session 24, call 2 (device; the session's last ~560 s after call 1's retries): the one-MMA
# prep's diagonal blocks on tensor cores (branch dr-diag-mma), in order of need: test_delta_rule
# (every case, the mixed-gate ones, the check that the tensor-core blocks ran), KDA at the three
# shapes in both arithmetics, the one-MMA per-kernel profile at the training shape, the GPU loss
# fingerprints (the split arithmetic's bits must not move: against
# results/bench/plugin-s23/fp.txt), the 3:1 hybrid's step in the one-MMA arithmetic, GDN. fla is
# not re-run (its cold Triton autotune alone is ~460 s): call 1 measured it.
export NCCL_NVLS_ENABLE=0; set -u
make -j16 hybrid out/build/gpu/test_delta_rule out/build/gpu/bench_delta_rule > /tmp/b.log 2>&1 || { tail -30 /tmp/b.log; exit 1; }
echo "built $SECONDS s"
out/build/gpu/test_delta_rule > $OUT/tdr.log 2>&1; echo "test_delta_rule rc $?"; tail -1 $OUT/tdr.log
grep -E "FAIL" $OUT/tdr.log | head -5
for w in "forward o" "forward hT" "backward dq" "backward dk" "backward dv" "backward dg" "backward dbeta" "backward dh0"; do
  grep "$w, one MMA a product  " $OUT/tdr.log | awk -v w="$w" '{print $(NF-3)}' | sort -g | tail -1 | sed "s/^/worst one-MMA $w: /"; done
echo "tests at $SECONDS s"
out/build/gpu/bench_delta_rule --kinds kda --json $OUT/ours.json > $OUT/ours.log 2>&1; echo "bench rc $?"
python3 scripts/bench_summary_kda.py $OUT/ours.json results/bench/diag-s24/call1/kda_fla.json 2>&1 | grep "| KDA"
HYBRID_CUDA_PROFILE=1 out/build/gpu/bench_delta_rule --arith bf16 --kinds kda --shape 64,1024,6,128,128 --reps 5 > $OUT/prof_bf16.log 2>&1
echo "ours at $SECONDS s"
. scripts/kernel_compare_lib.sh; kernel_data; kernel_fingerprints $OUT/fp.txt
kernel_fp_verdict $OUT/fp.txt results/bench/plugin-s23/fp.txt; echo "fingerprints at $SECONDS s"
HYBRID_DR_BF16=1 OUT=/tmp/bh BENCH_CASES=3:1-T1024 bash scripts/bench_hybrid.sh > /tmp/bh.log 2>&1
echo "3:1 hybrid, HYBRID_DR_BF16=1: $(grep -o '"ms_per_step": [0-9.]*\|"tok_per_s": [0-9.]*\|"peak_mem_gib": [0-9.]*' /tmp/bh/bench/hybrid_ours.json | tr '\n' ' ')"
echo "hybrid at $SECONDS s"
out/build/gpu/bench_delta_rule --kinds gdn --json $OUT/gdn.json > $OUT/gdn.log 2>&1
python3 scripts/bench_summary_kda.py $OUT/gdn.json 2>&1 | grep "| GDN"
echo "total $SECONDS s"
