#!/bin/bash
# session 14 (issue 18): MQAR at 16 pairs (T 128, V 1024, lr 3e-4, 1000 steps: session 12's probe,
# results/ablation/mqar-p16) for more seeds of 1:1 (it left the plateau at seeds 0 and 1, at 0.85
# and 0.52) and for 7:1 (not run at 16 pairs yet): seeds 2 and 3, seed 2 of each model first.
# usage (one device call): bash results/ablation/mqar-p16-more/run.sh SECONDS   (EXPORT:
# $OUT/mqar-p16-more.tgz; FROM resumes the committed folder; the runner builds ./hybrid if missing)
# (session 14 ran seed 2 with the same settings, copying the folder by hand before FROM existed)
set -u
export NCCL_NVLS_ENABLE=0
EXPORT=$OUT/mqar-p16-more.tgz RUN_TASKS=mqar RUN_MODELS="1-1 7-1" BASELINE= SEEDS="2 3" \
    MQAR_CONF=results/ablation/mqar-p16/mqar-t128-v1024.conf MQAR_PAIRS=16 MQAR_LRS=3e-4 MQAR_EVAL_PAIRS="8 16 32" \
    FROM=results/ablation/mqar-p16-more OUT=out/ablation/mqar-p16-more BUDGET=$((${1:-560} - 10)) PLOT=0 \
    scripts/ablate_gpu.sh 2>&1 | tail -n 12
ls -l $OUT; echo "total $SECONDS s"
