#!/bin/bash
# session 14 (issue 18): is 3:1's 16-pair MQAR plateau at lr 3e-4 (results/ablation/mqar-p16-3k) a
# learning-rate effect? 3:1 at lr 1e-4 and 1e-3, 16 pairs (T 128, V 1024), 3000 steps, seed 0.
# usage (one device call): bash results/ablation/mqar-p16-3k-lr/run.sh SECONDS   (EXPORT: $OUT/mqar-p16-3k-lr.tgz;
# resumes from results/ablation/mqar-p16-3k-lr when it holds runs)
set -u
export NCCL_NVLS_ENABLE=0
LIM=${1:-560}
[ -x ./hybrid ] || make -j16 hybrid > /dev/null 2>&1 || { echo build failed; exit 1; }
echo "built at $SECONDS s"
mkdir -p out/ablation
[ ! -f results/ablation/mqar-p16-3k-lr/runs.tsv ] || { rm -rf out/ablation/mqar-p16-3k-lr; cp -r results/ablation/mqar-p16-3k-lr out/ablation/; }
EXPORT=$OUT/mqar-p16-3k-lr.tgz RUN_TASKS=mqar RUN_MODELS="3-1" BASELINE= SEEDS="0" MQAR_STEPS=3000 \
    MQAR_CONF=results/ablation/mqar-p16/mqar-t128-v1024.conf MQAR_PAIRS=16 MQAR_LRS="1e-4 1e-3" MQAR_EVAL_PAIRS="8 16 32" \
    OUT=out/ablation/mqar-p16-3k-lr BUDGET=$((LIM - SECONDS - 10)) PLOT=0 scripts/ablate_gpu.sh 2>&1 | tail -n 40
ls -l $OUT; echo "total $SECONDS s"
