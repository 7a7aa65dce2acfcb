#!/bin/bash
# session 16, call 5: grad1's swizzled Gamma tile (the tree: main b766a5f + that change of
# chunk_grad_mma.cu, committed after the call) against b766a5f's chunk_grad_mma.cu
# (out/devrun/old/; kernel_ab: fp_new.txt, fp_old.txt equal), then the 3:1 hybrid at B16 T4096
# (ours only: hybrid_t4096_ours.json) if the time allows.
set -u
export NCCL_NVLS_ENABLE=0
nvidia-smi -L
AB_FILES="kernels/delta_rule/chunk_grad_mma.cu" bash scripts/kernel_ab.sh 2>&1
echo "at $SECONDS s"
if [ $SECONDS -lt 240 ]; then
    BENCH_CASES=3:1-T4096 OUT=/tmp/h4 timeout 90 bash scripts/bench_hybrid.sh > /tmp/h4.log 2>&1; echo "hybrid T4096 rc $?"
    cat /tmp/h4/bench/hybrid_ours.json 2>/dev/null; cp /tmp/h4/bench/hybrid_ours.json $OUT/hybrid_t4096_ours.json 2>/dev/null
fi
echo "total $SECONDS s"
