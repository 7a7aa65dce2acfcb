#!/bin/bash
# session 17, call 2: the K = V = 128 instances of the delta-rule kernels (prep, grad1, grad2,
# output, walk, reverse walk; branch k128) against main's (kernel_ab: test, bench, profile,
# fingerprints, hybrid), then the MoE text sweep continued (kl-xs-moe, carried) with the hybrid
# kernel_ab built last: main's kernels, as in call 1.
set -u
export NCCL_NVLS_ENABLE=0
nvidia-smi -L
AB_FILES="kernels/delta_rule/chunk_prep_mma.cu kernels/delta_rule/chunk_grad_mma.cu kernels/delta_rule/chunk_fwd_mma.cu kernels/delta_rule/chunk_bwalk_mma.cu" bash scripts/kernel_ab.sh 2>&1
mkdir -p out && tar xJf out/devrun/prose.txz -C out
left=$((585 - SECONDS)); echo "moe sweep with $left s at $SECONDS s"
if [ $left -gt 100 ]; then
    EXPORT=$OUT/kl-xs-moe.tgz MOE=1 RUN_TASKS=lm OUT=out/ablation/kl-xs-moe BUDGET=$left PLOT=0 scripts/ablate_gpu.sh 2>&1 | grep -v '^|' | tail -8
fi
ls -l $OUT; echo "total $SECONDS s"
