#!/bin/bash
# session 16 (issue 15 memory), device call 1: the delta-rule workspace aliasing (main 7d2abbc,
# debce14: dQ, dK, dG, dA in the forward's spent bf16 pairs, dL in T) against 2ba41de's
# chunk.cuh, through scripts/kernel_ab.sh (test_delta_rule on the H200, the KDA benchmark with
# its MiB column, the per-kernel profile, the GPU loss fingerprints of kda-tiny and kl-xs-3-1 of
# both: fp_new.txt, fp_old.txt, equal; the 3:1 hybrid of both), then the 0:1 RoPE arm of the
# 16-pair MQAR probe (results/ablation/mqar-p16-attn). The tree was main at 92a58c2.
# usage: git show 2ba41de:kernels/delta_rule/chunk.cuh > out/devrun/old/chunk.cuh, the Brown
# shards in out/devrun/data/; carry out/devrun.
set -u
export NCCL_NVLS_ENABLE=0
nvidia-smi -L
AB_FILES="kernels/delta_rule/chunk.cuh" bash scripts/kernel_ab.sh 2>&1
left=$((575 - SECONDS)); echo "mqar with $left s at $SECONDS s"
[ $left -gt 130 ] && bash results/ablation/mqar-p16-attn/run.sh $left
echo "total $SECONDS s"
