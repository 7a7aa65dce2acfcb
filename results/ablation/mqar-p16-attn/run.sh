#!/bin/bash
# session 15 (issue 18): MQAR at 16 pairs (T 128, V 1024, lr 3e-4, 1000 steps: session 12's probe,
# results/ablation/mqar-p16) for 0:1 (all 16 mixers MLA; on the plateau at 8 pairs in the T 64
# sweep, not run at T 128 yet): does all-attention recall where 1:1 does? Seeds 0 and 1.
# Session 15 ran it with RUN_MODELS="0-1" (both stayed on the plateau); the models are now "0-1
# 0-1-rope": a run resumes the committed folder, skips the finished 0:1 runs and trains the RoPE
# arm (~100 s), which tells "no positions" from "attention needs more steps".
# usage (one device call): bash results/ablation/mqar-p16-attn/run.sh SECONDS   (EXPORT:
# $OUT/mqar-p16-attn.tgz; FROM resumes the committed folder once it exists; the runner builds
# ./hybrid if missing)
set -u
export NCCL_NVLS_ENABLE=0
[ -f results/ablation/mqar-p16-attn/runs.tsv ] && from=results/ablation/mqar-p16-attn || from=
EXPORT=$OUT/mqar-p16-attn.tgz RUN_TASKS=mqar RUN_MODELS="0-1 0-1-rope" BASELINE= SEEDS="0 1" \
    MQAR_CONF=results/ablation/mqar-p16/mqar-t128-v1024.conf MQAR_PAIRS=16 MQAR_LRS=3e-4 MQAR_EVAL_PAIRS="8 16 32" \
    FROM=$from OUT=out/ablation/mqar-p16-attn BUDGET=$((${1:-560} - 10)) PLOT=0 \
    scripts/ablate_gpu.sh 2>&1 | tail -n 12
ls -l $OUT; echo "total $SECONDS s"
