#!/bin/bash
# Session 36's first call: what session 35 left for the device, in one call. The build of
# everything it needs at once, then out/build/gpu/test_moe (the forced mixed-rule cases and dW13's
# fp32 bar on a GPU for the first time, ~50 s), then results/bench/mixed-wgrad/run.sh (the mixed
# rule's composed layer at both shapes against HYBRID_MOE_GEMM=own, then the KL-S (MoE) 3:1 model;
# on an H200 its KL-S lines are also issue 17's 70% target). Call: carry out/data.
# Outputs: $OUT/mixed-wgrad.tgz (every log, test_moe's too).
export NCCL_NVLS_ENABLE=0; set -u
nvidia-smi --query-gpu=name --format=csv,noheader
make -j16 hybrid out/build/gpu/bench_moe out/build/gpu/test_moe > $OUT/build-all.log 2>&1 ||
    { tail -30 $OUT/build-all.log; exit 1; }
echo "built at $SECONDS s"
timeout 150 out/build/gpu/test_moe > $OUT/test_moe.log 2>&1
echo "test_moe rc $? at $SECONDS s"; grep -v "^  " $OUT/test_moe.log | tail -5
bash results/bench/mixed-wgrad/run.sh
echo "done at $SECONDS s"
