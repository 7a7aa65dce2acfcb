#!/bin/bash
# Prepared in session 19, run in session 20 (issue 15; BENCHMARKS.md: the walks' FULL instances
# measured slower and were taken out): the whole-chunk (FULL) instances of the prep,
# output, grad1, grad2, walk and reverse-walk kernels (chunk.cuh, dr_full_chunks; the same bits)
# against main 4dadb721's six files (dr_exp already in both), in one device call: kernel_ab (parity test with
# its new T = 1024 whole-chunk case, the KDA bench at B8 T4096, where every chunk is whole, the
# per-kernel profile, the GPU fingerprints, which must be EQUAL: kl-xs-3-1 trains at T 1024
# without resets, so its K = V = 128 layers take the FULL instances; the 3:1 hybrid).
# Here, before the call:
#   mkdir -p out/devrun/old_full out/devrun/data
#   for f in $FILES; do git show 4dadb721:$f > out/devrun/old_full/$(basename $f); done
#   cp out/data/brown_* out/devrun/data/
#   AB_CHECK=1 AB_OLD=out/devrun/old_full AB_FILES="$FILES" bash scripts/kernel_ab.sh
# Call: carry out/devrun/old_full, out/devrun/data; `bash results/bench/full-s20/run.sh` (~250 s)
set -u
export NCCL_NVLS_ENABLE=0
FILES="kernels/delta_rule/chunk.cuh kernels/delta_rule/chunk_prep_mma.cu kernels/delta_rule/chunk_fwd_mma.cu
kernels/delta_rule/chunk_grad1_mma.cu kernels/delta_rule/chunk_grad2_mma.cu kernels/delta_rule/chunk_bwalk_mma.cu"
nvidia-smi -L
AB_OLD=out/devrun/old_full AB_FILES="$(echo $FILES)" bash scripts/kernel_ab.sh 2>&1
echo "full-s20 total $SECONDS s"
