#!/bin/bash
# session 15 (issue 15/16): grad2's fill by column pairs and grad1's stage 2 by V tiles of 64
# (main 2ba41de + fedecf1's timers, "mid"; kept), and the same with grad1's stage 3 in two
# cp.async commit groups (branch tip 339c0e1, "tip"; measured, not kept), against main 41065c6's
# chunk_grad_mma.cu ("old"), in one device call: scripts/kernel_ab.sh (test_delta_rule, KDA
# benchmark, per-kernel profile, fingerprints of both, the 3:1 hybrid of both) with the tip in the
# tree, then the kept version alone (fingerprints, benchmark, profile). fp_new.txt here is the
# tip's, fp_mid.txt the kept version's, fp_old.txt main's: all three equal.
# usage: the tip's chunk_grad_mma.cu in the tree, main's in out/devrun/old/, the kept one in
# out/devrun/mid/, the Brown shards in out/devrun/data/; carry out/devrun.
set -u
export NCCL_NVLS_ENABLE=0
nvidia-smi -L
AB_FILES="kernels/delta_rule/chunk_grad_mma.cu" bash scripts/kernel_ab.sh 2>&1
echo "== mid (no two commit groups) at $SECONDS s"
F=kernels/delta_rule/chunk_grad_mma.cu
cp $F /tmp/tip.cu; cp out/devrun/mid/chunk_grad_mma.cu $F
make -j16 hybrid out/build/gpu/bench_delta_rule > /tmp/b_mid.log 2>&1 || { tail -20 /tmp/b_mid.log; echo mid build failed; }
for c in kda-tiny kl-xs-3-1; do sh scripts/loss_fingerprint.sh --device cuda configs/$c.conf >> $OUT/fp_mid.txt 2>&1; done
if cmp -s $OUT/fp_mid.txt $OUT/fp_old.txt; then echo "MID FINGERPRINTS EQUAL"; else echo "MID FINGERPRINTS DIFFER"; fi
out/build/gpu/bench_delta_rule --shape 8,4096,16,128,128 --kinds kda 2>&1 | grep -E "^kda"
HYBRID_CUDA_PROFILE=1 out/build/gpu/bench_delta_rule --shape 8,4096,16,128,128 --kinds kda --reps 3 --warmup 1 2>&1 | grep 'delta_chunk/'
cp /tmp/tip.cu $F
echo "total $SECONDS s"
