#!/bin/bash
# Session 18, the last device call (issues 15, 16): the tree's kernels (a1d4d5f plus dr_eval,
# chunk.cuh: the exponentials that the compiler sank back into branches pinned before their
# selects, and common.cuh's bf16x2_to_float2; main 7f024cb) measured next to fla in the same call, with the parity test, the GPU loss
# fingerprints (to compare with call 2's, out/s18/call2/fp_new.txt: the same bits expected),
# the per-kernel profile and the 3:1 hybrid at B64 T1024.
# Carry (the Triton cache recompressed with xz, 27.9 -> 12.1 MB, so that everything fits the
# 64 MiB a call takes next to the 29 MB tree):
#   out/peers/fla (prepare_fla.sh, with COMMIT), out/tc/tc.txz (fla's Triton cache, session 15),
#   out/devrun/data (the Brown shards of `make data`)
set -u
export NCCL_NVLS_ENABLE=0
nvidia-smi -L
. scripts/kernel_compare_lib.sh
kernel_data
export TRITON_CACHE_DIR=/tmp/tc
tar xJf out/tc/tc.txz -C /tmp && echo "Triton cache carried in"
make -j16 hybrid out/build/gpu/test_delta_rule out/build/gpu/bench_delta_rule > /tmp/b.log 2>&1 || { tail -30 /tmp/b.log; exit 1; }
echo "== built at $SECONDS s"
out/build/gpu/test_delta_rule > /tmp/t.log 2>&1; echo "test_delta_rule rc $?"; tail -1 /tmp/t.log
kernel_fingerprints "$OUT/fp.txt"; echo "== fingerprints at $SECONDS s"
HYBRID_CUDA_PROFILE=1 out/build/gpu/bench_delta_rule --shape 8,4096,16,128,128 --kinds kda --reps 3 --warmup 1 2>&1 | grep 'delta_chunk/'
make bench-kda KDA_BENCH_ARGS="--kinds kda" FLA_DIR=out/peers/fla \
    KDA_FLA_TIMEOUT=$((${LIMIT:-540} - 90 - SECONDS)) 2>&1 | grep '^|'
cp out/bench/kda_*.json $OUT/ 2>/dev/null
echo "== bench-kda at $SECONDS s"
if [ $SECONDS -lt $((${LIMIT:-540} - 80)) ]; then
    BENCH_CASES=3:1-T1024 OUT=/tmp/bh bash scripts/bench_hybrid.sh > /dev/null 2>&1
    grep -o '"ms_per_step": [0-9.]*\|"tok_per_s": [0-9.]*\|"peak_mem_gib": [0-9.]*' /tmp/bh/bench/hybrid_ours.json | tr '\n' ' '; echo " (3:1 B64 T1024)"
fi
ls -l $OUT; echo "total $SECONDS s"
