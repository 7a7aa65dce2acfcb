#!/bin/bash
# Prepared in session 18, run in session 19's call 1 (issue 16; the numbers: BENCHMARKS.md, the
# hybrid section; its output in s19/; that call's tree also held the then uncommitted dr_exp of
# c684ac0, in both builds): act.cuh's branch-free activations at the same bits
# (0d7397a: the decay gate's forward and backward, the gated norm, beta; the short
# convolution's machine code unchanged) against main 0703355's files, in one device call:
# kernel_ab (its parity test and KDA bench do not touch these kernels; the GPU fingerprints of
# kda-tiny and kl-xs-3-1 do, and must be EQUAL), then the 3:1 hybrid's per-op profile with the
# new files and with the old (decay_gate_fwd / _bwd 1.55 / 3.14 ms a step and gated_rmsnorm
# fwd / bwd 2.28 / 4.45 in session 18's call 2).
# Here, before the call:
#   mkdir -p out/devrun/old out/devrun/data && rm -f out/devrun/old/*
#   for f in $FILES; do git show 0703355:$f > out/devrun/old/$(basename $f); done
#   cp out/data/brown_* out/devrun/data/
#   AB_CHECK=1 AB_FILES="$FILES" bash scripts/kernel_ab.sh   # the old set builds with the tree (checked in session 18)
# Call: carry out/devrun/old, out/devrun/data; `bash results/bench/act-s18/run.sh` (~330 s)
set -u
export NCCL_NVLS_ENABLE=0
FILES="kernels/delta_rule/act.cuh kernels/delta_rule/short_conv.cu kernels/delta_rule/layer_ops.cu"
nvidia-smi -L
prof() {  # the 3:1 hybrid's per-op profile at B64 T1024 with the ./hybrid built now, label $1
    OUT=/tmp/bh_$1 BENCH_CASES=3:1-T1024 BENCH_PROFILE=1 bash scripts/bench_hybrid.sh > /dev/null 2>&1
    grep -E '^(decay_gate|gated_rmsnorm|short_conv|beta_)' /tmp/bh_$1/bench/logs/profile-3-1-T1024.log | sed "s/\$/  ($1)/"
}
AB_FILES="$FILES" AB_HYBRID=0 bash scripts/kernel_ab.sh 2>&1
prof old  # kernel_ab leaves ./hybrid built from the old files (the tree's files restored)
make -j16 hybrid > /tmp/b_new.log 2>&1 || { tail -20 /tmp/b_new.log; exit 1; }
prof new
ls -l $OUT; echo "total $SECONDS s"
