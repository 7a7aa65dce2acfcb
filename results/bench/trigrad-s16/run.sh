#!/bin/bash
# session 16, call 4: the triangular-inverse gradient's uniform loops (the tree: main 0b6b101 +
# that change of chunk.cuh, committed after the call) against 0b6b101's chunk.cuh
# (out/devrun/old/) (kernel_ab: test, bench, profile, fingerprints, hybrid), then `make bench` (GPT-2
# 124M, ours and PyTorch in the same call) if the time allows.
set -u
export NCCL_NVLS_ENABLE=0
nvidia-smi -L
AB_FILES="kernels/delta_rule/chunk.cuh" bash scripts/kernel_ab.sh 2>&1
left=$((540 - SECONDS)); echo "make bench with $left s at $SECONDS s"
if [ $left -gt 200 ]; then
    timeout $left make -j16 bench > /tmp/bench.log 2>&1; echo "make bench rc $?"
    grep -v '^\s*$' /tmp/bench.log | grep -iE 'ms/step|tok/s|ratio|hybrid\.c|pytorch|MFU|peak|x$|speed' | tail -25
    cp out/bench/hybrid.json out/bench/pytorch.json $OUT/ 2>/dev/null
    grep -E '^\s*(matmul|attention|crossentropy|layernorm|add_layernorm|adamw|gelu|total|encoder|fused)' /tmp/bench.log | head -20
fi
echo "total $SECONDS s"
