#!/bin/bash
# Session 18, one device call (issues 15, 16): the exponentials of the prep and grad1 computed
# unconditionally and selected afterwards, and one paired hi + lo split (chunk.cuh's
# dr_exp_note, dr_split_pair; the same bits in the emulator) against main 09a9f37's files, with
# kernel_ab (parity test, KDA bench, per-kernel profile, GPU fingerprints, 3:1 hybrid); then the
# 3:1 hybrid's per-op profile with the decay gate's vector kernels (default) and its scalar ones
# (HYBRID_GATE_REF=1), the same build, to measure c67d7cb in one call.
# Here, before the call:
#   mkdir -p out/devrun/old out/devrun/data && rm -f out/devrun/old/*
#   for f in $FILES; do git show 09a9f37:$f > out/devrun/old/$(basename $f); done
#   cp out/data/brown_* out/devrun/data/
# Call: carry out/devrun/old, out/devrun/data; `bash results/bench/prep-s18/run.sh` (~300 s)
set -u
export NCCL_NVLS_ENABLE=0
FILES="kernels/delta_rule/chunk.cuh kernels/delta_rule/chunk_prep_mma.cu kernels/delta_rule/chunk_grad_mma.cu kernels/delta_rule/chunk_grad.cuh kernels/delta_rule/walk.cuh"
nvidia-smi -L
AB_FILES="$FILES" bash scripts/kernel_ab.sh 2>&1
make -j16 hybrid > /tmp/b_new.log 2>&1 || { tail -20 /tmp/b_new.log; exit 1; }
prof() {  # the 3:1 hybrid's per-op profile at B64 T1024, label $1
    OUT=/tmp/bh_$1 BENCH_CASES=3:1-T1024 BENCH_PROFILE=1 bash scripts/bench_hybrid.sh > /dev/null 2>&1
    grep -E '^(decay_gate|delta_chunk|short_conv|gated_rmsnorm)' /tmp/bh_$1/bench/logs/profile-3-1-T1024.log | sed "s/\$/  ($1)/"
}
HYBRID_GATE_REF=1 prof gate-scalar
prof gate-vector
ls -l $OUT; echo "total $SECONDS s"
