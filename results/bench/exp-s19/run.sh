#!/bin/bash
# Session 19, one device call (issues 18 and 15). First the rest of the MoE text sweep
# (results/ablation/kl-xs-moe/run.sh) on main 3b46b74's kernels, so that every run of the sweep
# ran the same code. Then the delta-rule chunk kernels' exponentials on the special-function
# unit (chunk.cuh, dr_exp: x log2(e), then ex2.approx.ftz, two instructions where expf is
# eight; it CHANGES the bits) against those six files, with kernel_ab (parity test, KDA bench,
# per-kernel profile, GPU fingerprints: they DIFFER, and the diff shows how far the first 20
# losses move), then the layer and whole-model GPU tests on the new kernels.
# Here, before the call:
#   mkdir -p out/devrun/old_exp && for f in $FILES; do git show 3b46b74:$f > out/devrun/old_exp/$(basename $f); done
#   cp out/data/brown_* out/devrun/data/; the prose tarball as results/ablation/kl-xs-moe/run.sh says
# Call: carry out/devrun; `bash results/bench/exp-s19/run.sh SWEEP_SECONDS` (~380; the rest ~200 s)
set -u
export NCCL_NVLS_ENABLE=0
FILES="kernels/delta_rule/chunk.cuh kernels/delta_rule/chunk_prep_mma.cu kernels/delta_rule/chunk_grad1_mma.cu
kernels/delta_rule/chunk_grad2_mma.cu kernels/delta_rule/chunk_grad_ref_mma.cu kernels/delta_rule/chunk_grad.cuh"
nvidia-smi -L
NEW=$(mktemp -d)
for f in $FILES; do cp $f $NEW/ && cp out/devrun/old_exp/$(basename $f) $f; done
bash results/ablation/kl-xs-moe/run.sh ${1:-380}
for f in $FILES; do cp $NEW/$(basename $f) $f; done
echo "== sweep done at $SECONDS s"
AB_HYBRID=0 AB_OLD=out/devrun/old_exp AB_FILES="$(echo $FILES)" bash scripts/kernel_ab.sh 2>&1
make -j16 out/build/gpu/test_delta_rule_layer out/build/gpu/test_model > /tmp/b_t.log 2>&1 || { tail -20 /tmp/b_t.log; exit 1; }
for t in test_delta_rule_layer test_model; do
    out/build/gpu/$t > /tmp/$t.log 2>&1
    echo "$t rc $? at $SECONDS s"; tail -2 /tmp/$t.log
done
echo "exp-s19 total $SECONDS s"
