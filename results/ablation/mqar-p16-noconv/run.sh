#!/bin/bash
# session 16 (issue 18), prepared, not yet run: MQAR at 16 pairs (T 128, V 1024, lr 3e-4, 1000
# steps: session 12's probe, results/ablation/mqar-p16) for 1:1 with the KDA layers' short
# convolution cut to one tap (conv1.conf: conv_size = 1, so no token mixing before the MLA
# layers), seeds 0 and 1. 1:1 with conv_size 4 recalls at 4 of 4 seeds (0.52-0.89), while the
# all-MLA 0:1 stays on the plateau with and without RoPE (docs/ablation.md, "MQAR at 16 pairs:
# 0:1, all attention (session 15)"): if 1:1 stays on the plateau without the convolution's
# token shift, that is what the attention-only model lacks.
# usage (one device call, ~100 s): bash results/ablation/mqar-p16-noconv/run.sh SECONDS
# (EXPORT: $OUT/mqar-p16-noconv.tgz; FROM resumes the committed folder once it has runs.tsv)
set -u
export NCCL_NVLS_ENABLE=0
[ -f results/ablation/mqar-p16-noconv/runs.tsv ] && from=results/ablation/mqar-p16-noconv || from=
EXPORT=$OUT/mqar-p16-noconv.tgz RUN_TASKS=mqar RUN_MODELS="1-1" BASELINE= SEEDS="0 1" ROPE_ARM=0 \
    MODEL_CONF=results/ablation/mqar-p16-noconv/conv1.conf \
    MQAR_CONF=results/ablation/mqar-p16/mqar-t128-v1024.conf MQAR_PAIRS=16 MQAR_LRS=3e-4 MQAR_EVAL_PAIRS="8 16 32" \
    FROM=$from OUT=out/ablation/mqar-p16-noconv BUDGET=$((${1:-560} - 10)) PLOT=0 \
    scripts/ablate_gpu.sh 2>&1 | tail -n 12
ls -l $OUT; echo "total $SECONDS s"
