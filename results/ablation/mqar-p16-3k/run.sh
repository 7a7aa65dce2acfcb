#!/bin/bash
# session 13 (issue 18): MQAR at 16 pairs (T 128, V 1024, lr 3e-4) for 3000 steps, the two models
# that stayed on the plateau in session 12's 1000-step probe (3:1, 1:0); seed 0 of each first.
# usage (session 13, two device calls of 540 and 450 s): bash results/ablation/mqar-p16-3k/run.sh SECONDS   (EXPORT: $OUT/mqar-p16-3k.tgz; resumes from
# results/ablation/mqar-p16-3k when that exists)
set -u
export NCCL_NVLS_ENABLE=0
LIM=${1:-560}
[ -x ./hybrid ] || make -j16 hybrid > /dev/null 2>&1 || { echo build failed; exit 1; }
echo "built at $SECONDS s"
mkdir -p out/ablation
[ ! -d results/ablation/mqar-p16-3k ] || { rm -rf out/ablation/mqar-p16-3k; cp -r results/ablation/mqar-p16-3k out/ablation/; }
EXPORT=$OUT/mqar-p16-3k.tgz RUN_TASKS=mqar RUN_MODELS="3-1 1-0" BASELINE= SEEDS="0 1" MQAR_STEPS=3000 \
    MQAR_CONF=results/ablation/mqar-p16/mqar-t128-v1024.conf MQAR_PAIRS=16 MQAR_LRS=3e-4 MQAR_EVAL_PAIRS="8 16 32" \
    OUT=out/ablation/mqar-p16-3k BUDGET=$((LIM - SECONDS - 10)) PLOT=0 scripts/ablate_gpu.sh 2>&1 | tail -n 40
ls -l $OUT; echo "total $SECONDS s"
