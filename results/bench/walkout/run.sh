#!/bin/bash
# The first device call for branch dr-grad1-pipe (on dr-walk-out; written in session 24, which had
# no device time left to run it): the branches' three one-MMA kernel changes (grad2's diagonal
# blocks on tensor cores; o in the forward walk; grad1's stage 3 pipelined) against main's be27f90
# versions of the four files they touch,
# in the one-MMA arithmetic (HYBRID_DR_BF16=1: the bench rows, the profile and the 3:1 hybrid;
# test_delta_rule pins its own arithmetic for each check), then the split arithmetic's GPU loss
# fingerprints against session 23's (they must be EQUAL: the split instances are byte for byte
# main's). The fingerprints kernel_ab.sh prints for new against old are the one-MMA ones and
# DIFFER by design (grad2's one-MMA diagonal changes dq, dk, dg).
# Before the call, here: out/devrun/old_s24/ holds `git show be27f90:<file>` of the four files
# (made in session 24; if out/ is gone, make it again), the Brown shards in out/devrun/data/.
# Call: carry out/devrun.
export NCCL_NVLS_ENABLE=0; set -u
HYBRID_DR_BF16=1 AB_OLD=out/devrun/old_s24 \
    AB_FILES="kernels/delta_rule/chunk_grad2_mma.cu kernels/delta_rule/chunk_grad.cuh kernels/delta_rule/chunk_fwd_mma.cu kernels/delta_rule/chunk_grad1_mma.cu" \
    bash scripts/kernel_ab.sh
# (kernel_ab.sh puts the tree's files back when it ends: rebuild with them, split fingerprints)
make -j16 hybrid > /tmp/b2.log 2>&1 || { tail -20 /tmp/b2.log; exit 1; }
. scripts/kernel_compare_lib.sh; kernel_data
HYBRID_DR_BF16=0 kernel_fingerprints $OUT/fp_split.txt
kernel_fp_verdict $OUT/fp_split.txt results/bench/plugin-s23/fp.txt
echo "total $SECONDS s"
