#!/bin/bash
# Session 35's one call, for a budget that may hold only one machine start: the GPU parity binaries
# (`make test-gpu` with HYBRID_GPU_OPS_ONLY=1: every tests/gpu/test_*.c but test_model; the fp32
# parameter gradients' first GPU run, and the cublas mode's per-expert weight gradients) while
# main before the fp32 gradients (5a8267a) builds beside them, then
# results/bench/fp32-grads-s34/run.sh on what time is left (T0: this call's start).
# Call: carry out/base-5a8267a.tgz and out/data. Outputs: $OUT/fp32-grads.tgz (every log).
export NCCL_NVLS_ENABLE=0; set -u
export T0=$(date +%s)
(mkdir -p /tmp && tar xzf out/base-5a8267a.tgz -C /tmp && cd /tmp/base &&
    nice make -j6 out/build/gpu/bench_gpt2 out/build/gpu/bench_moe > $OUT/build-base.log 2>&1) &
make -j16 HYBRID_GPU_OPS_ONLY=1 test-gpu > $OUT/test-gpu-ops.log 2>&1
echo "make test-gpu (the binaries) rc $? at $(( $(date +%s) - T0 )) s"; tail -14 $OUT/test-gpu-ops.log
cp out/build/gpu/*.log $OUT/ 2>/dev/null
wait
echo "base built at $(( $(date +%s) - T0 )) s"
bash results/bench/fp32-grads-s34/run.sh
