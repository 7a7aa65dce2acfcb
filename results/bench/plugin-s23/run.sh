#!/bin/bash
# Session 23, call 1 (device): the CUDA backend as a dlopen'd plugin (branch cuda-plugin).
# The GPU fingerprints of kda-tiny and kl-xs-3-1 against session 22's call 6 (the plugin must
# change no bits), the 3:1 hybrid's step, then make test-gpu (test_model drives
# ./hybrid train --device cuda with stop and --resume, through the plugin).
export NCCL_NVLS_ENABLE=0; set -u
make -j16 hybrid > /tmp/b.log 2>&1 || { tail -20 /tmp/b.log; exit 1; }
echo "built $SECONDS s"; ls -la out/build/libhybrid_cuda.so
. scripts/kernel_compare_lib.sh; kernel_data; kernel_fingerprints $OUT/fp.txt
kernel_fp_verdict $OUT/fp.txt results/bench/grn-s22/fp_call6.txt; echo "fingerprints at $SECONDS s"
OUT=/tmp/bp BENCH_CASES=3:1-T1024 bash scripts/bench_hybrid.sh > /tmp/bp.log 2>&1
grep -o '"ms_per_step": [0-9.]*\|"tok_per_s": [0-9.]*\|"peak_mem_gib": [0-9.]*' /tmp/bp/bench/hybrid_ours.json | tr '\n' ' '; echo
echo "bench at $SECONDS s"
timeout 330 make -j16 test-gpu > $OUT/test_gpu.log 2>&1; echo "test-gpu rc $?"
grep -E "passed|FAIL|failed|skipped" $OUT/test_gpu.log | tail -30
echo "total $SECONDS s"
