#!/bin/bash
# session 14 (issue 18): MQAR at 16 pairs (T 128, V 1024, lr 3e-4, 1000 steps: session 12's probe,
# results/ablation/mqar-p16) for more seeds of 1:1 (it left the plateau at seeds 0 and 1, at 0.85
# and 0.52) and for 7:1 (not run at 16 pairs yet): seeds 2 and 3, seed 2 of each model first.
# usage (one device call): bash results/ablation/mqar-p16-more/run.sh SECONDS   (EXPORT:
# $OUT/mqar-p16-more.tgz; resumes from results/ablation/mqar-p16-more when it holds runs)
set -u
export NCCL_NVLS_ENABLE=0
LIM=${1:-560}
[ -x ./hybrid ] || make -j16 hybrid > /dev/null 2>&1 || { echo build failed; exit 1; }
echo "built at $SECONDS s"
mkdir -p out/ablation
[ ! -f results/ablation/mqar-p16-more/runs.tsv ] || { rm -rf out/ablation/mqar-p16-more; cp -r results/ablation/mqar-p16-more out/ablation/; }
EXPORT=$OUT/mqar-p16-more.tgz RUN_TASKS=mqar RUN_MODELS="1-1 7-1" BASELINE= SEEDS="2 3" \
    MQAR_CONF=results/ablation/mqar-p16/mqar-t128-v1024.conf MQAR_PAIRS=16 MQAR_LRS=3e-4 MQAR_EVAL_PAIRS="8 16 32" \
    OUT=out/ablation/mqar-p16-more BUDGET=$((LIM - SECONDS - 10)) PLOT=0 scripts/ablate_gpu.sh 2>&1 | tail -n 12
ls -l $OUT; echo "total $SECONDS s"
