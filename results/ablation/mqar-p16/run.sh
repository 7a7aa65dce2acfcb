#!/bin/bash
# session 12, device call 2 (issue 18): MQAR at 16 pairs (T 128, V 1024), the models that learn the
# task at 8 pairs (1:1, 3:1, 1:0), lr 3e-4 (their best at 8 pairs), seeds 0 and 1 (at 16 pairs the
# seed decides whether a run leaves the plateau in 1000 steps: docs/mqar.md).
# usage: bash out/devrun/s12_2.sh SECONDS   (EXPORT: $OUT/mqar-p16.tgz)
set -u
export NCCL_NVLS_ENABLE=0
LIM=${1:-560}
[ -x ./hybrid ] || make -j16 hybrid > /dev/null 2>&1 || { echo build failed; exit 1; }
echo "built at $SECONDS s"
mkdir -p out/ablation
[ ! -d results/ablation/mqar-p16 ] || { rm -rf out/ablation/mqar-p16; cp -r results/ablation/mqar-p16 out/ablation/; }
EXPORT=$OUT/mqar-p16.tgz RUN_TASKS=mqar RUN_MODELS="1-1 3-1 1-0" BASELINE= SEEDS="0 1" \
    MQAR_CONF=out/devrun/mqar-t128-v1024.conf MQAR_PAIRS=16 MQAR_LRS=3e-4 MQAR_EVAL_PAIRS="8 16 32" \
    OUT=out/ablation/mqar-p16 BUDGET=$((LIM - SECONDS - 10)) PLOT=0 scripts/ablate_gpu.sh 2>&1 | tail -n 40
ls -l $OUT; echo "total $SECONDS s"
