#!/bin/bash
# The device call for branch dr-walkout2 (issue 15): two one-MMA kernel changes, o formed in the
# forward's walk (chunk_fwd_mma.cu) and grad1's stage 3 pipelined (chunk_grad1_mma.cu), against
# main's versions of the two files, in the one-MMA arithmetic (HYBRID_DR_BF16=1; test_delta_rule
# pins its own arithmetic for each check). Both changes keep the bits (emulated hashes), so the
# one-MMA GPU loss fingerprints of new and old must be EQUAL. (Session 26's first call ran the
# branch dr-grad1-pipe, which also put grad2's diagonal blocks on tensor cores: grad2 went 1.874 ->
# 2.207 ms at B8 T4096 H16, so that change was dropped; its split fingerprints were EQUAL to
# session 23's.)
# Before the call, here: out/devrun/old_s24/ holds `git show main:<file>` of the two files, the
# Brown shards in out/devrun/data/. Call: carry out/devrun.
export NCCL_NVLS_ENABLE=0; set -u
HYBRID_DR_BF16=1 AB_OLD=out/devrun/old_s24 \
    AB_FILES="kernels/delta_rule/chunk_fwd_mma.cu kernels/delta_rule/chunk_grad1_mma.cu" \
    bash scripts/kernel_ab.sh
echo "total $SECONDS s"
