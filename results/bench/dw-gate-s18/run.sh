#!/bin/bash
# Run in session 18 (call1.txt): the `ab` half's old build failed (15e61a4's chunk.cuh predates
# the DR_KV_FIXED names the tree's chunk_bwalk_mma.cu uses: old files must be a consistent set,
# every file that changed since); what it did measure: test_delta_rule 2200 checks on the H200,
# the KDA bench's memory rows 4022.2 / 3990.5 / 3111.5 MiB, and GPU fingerprints equal to
# session 17's (out/s17/call2, before d41eced and c67d7cb): both changes keep the bits. The gate's
# same-call A/B is in results/bench/prep-s18 (HYBRID_GATE_REF=1 against the default). As prepared:
# Prepared in session 17 (issues 15, 16): device calls measuring session 17's two
# unmeasured same-bits changes against 15e61a4's files: grad1's dW in bf16 (d41eced: chunk.cuh,
# chunk_grad_mma.cu, chunk_grad_ref_mma.cu) and the decay gate's vector kernels (c67d7cb:
# layer_ops.cu). kernel_ab (test, KDA bench, per-kernel profile, fingerprints, 3:1 hybrid), the
# hybrid's per-op profile with the old then the new files (decay_gate_fwd / _bwd: 3.3 / 3.1 ms a
# step before); and in a second call `make bench-kda --kinds kda` with fla (the memory rows:
# expected 4022 / 3990.5 / 3111.5 MiB by the benchmark's count).
# Here, before the call:
#   mkdir -p out/devrun/old out/devrun/data && rm -f out/devrun/old/*
#   for f in kernels/delta_rule/chunk.cuh kernels/delta_rule/chunk_grad_mma.cu \
#            kernels/delta_rule/chunk_grad_ref_mma.cu kernels/delta_rule/layer_ops.cu; do
#       git show 15e61a4:$f > out/devrun/old/$(basename $f); done
#   cp out/data/brown_* out/devrun/data/                # `make data` first if out/ is gone
# Two calls, because the tracked tree (28 MB since session 17) and all of the carry (39 MB) pass
# the 64 MiB a call takes:
#   bash results/bench/dw-gate-s18/run.sh ab    carry out/devrun/old, out/devrun/data (~360 s)
#   bash results/bench/dw-gate-s18/run.sh fla   carry out/peers/fla (prepare_fla.sh, with COMMIT)
#                                               and out/tc/tc.tgz (fla's Triton cache) (~150 s)
set -u
export NCCL_NVLS_ENABLE=0
FILES="kernels/delta_rule/chunk.cuh kernels/delta_rule/chunk_grad_mma.cu kernels/delta_rule/chunk_grad_ref_mma.cu kernels/delta_rule/layer_ops.cu"
nvidia-smi -L
if [ "${1:-ab}" = fla ]; then
    export TRITON_CACHE_DIR=/tmp/tc
    [ -f out/tc/tc.tgz ] && tar xzf out/tc/tc.tgz -C /tmp && echo "Triton cache carried in"
    make -j16 out/build/gpu/bench_delta_rule > /tmp/b.log 2>&1 || { tail -30 /tmp/b.log; exit 1; }
    make bench-kda KDA_BENCH_ARGS="--kinds kda" FLA_DIR=out/peers/fla KDA_FLA_TIMEOUT=$((${LIMIT:-560} - SECONDS)) 2>&1 | grep '^|'
    cp out/bench/kda_*.json $OUT/ 2>/dev/null
    ls -l $OUT; echo "total $SECONDS s"
    exit 0
fi
AB_FILES="$FILES" bash scripts/kernel_ab.sh 2>&1
# kernel_ab leaves ./hybrid built from the old files and the tree's files restored (new)
prof() {  # the 3:1 hybrid's per-op profile at B64 T1024 with the ./hybrid built now
    OUT=/tmp/bh_$1 BENCH_CASES=3:1-T1024 BENCH_PROFILE=1 bash scripts/bench_hybrid.sh > /dev/null 2>&1
    grep -E '^(decay_gate|delta_chunk/grad|delta_chunk_bwd|short_conv|gated_rmsnorm)' /tmp/bh_$1/bench/logs/profile-3-1-T1024.log | sed "s/\$/  ($1)/"
}
prof old
make -j16 hybrid > /tmp/b_new.log 2>&1 || { tail -20 /tmp/b_new.log; exit 1; }
prof new
ls -l $OUT; echo "total $SECONDS s"
