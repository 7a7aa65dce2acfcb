#!/bin/bash
# session 13, call 3 (issue 15/16): the prep's triangular inverse with uniform loops and grad1's
# step 4 through shared memory: test_delta_rule, the KDA benchmark, the loss fingerprints of the
# new and the old kernels (must be equal bit for bit), the hybrid benchmark (and classifier 8192).
# usage (main at the commit that adds this folder; out/devrun/old/ held the kernels of a1af08a,
# out/devrun/data/ the Brown shards of `make data`, both carried): bash results/bench/kda-s13/run.sh SECONDS
set -u
export NCCL_NVLS_ENABLE=0
LIM=${1:-480}
mkdir -p out/data && cp out/devrun/data/* out/data/
cp kernels/delta_rule/chunk_fwd_mma.cu kernels/delta_rule/chunk_grad_mma.cu kernels/delta_rule/chunk.cuh out/devrun/new/
B="hybrid out/build/gpu/test_delta_rule out/build/gpu/bench_delta_rule"
make -j16 $B > $OUT/build.log 2>&1 || { tail -30 $OUT/build.log; echo build failed; exit 1; }
echo "built at $SECONDS s"
out/build/gpu/test_delta_rule > $OUT/test_delta_rule.log 2>&1; echo "test_delta_rule rc $? at $SECONDS s"; tail -2 $OUT/test_delta_rule.log
out/build/gpu/bench_delta_rule --kinds kda 2>&1 | grep -E '^(kda|gdn)'
HYBRID_CUDA_PROFILE=1 out/build/gpu/bench_delta_rule --shape 8,4096,16,128,128 --kinds kda --reps 3 --warmup 1 2>&1 | grep 'delta_chunk/' | tail -5
for c in kda-tiny kl-xs-3-1; do sh scripts/loss_fingerprint.sh --device cuda configs/$c.conf >> $OUT/fp_new.txt 2>&1; done
echo "fingerprints (new) at $SECONDS s"
cp out/devrun/old/* kernels/delta_rule/
make -j16 $B > $OUT/build_old.log 2>&1 || { tail -30 $OUT/build_old.log; echo old build failed; exit 1; }
for c in kda-tiny kl-xs-3-1; do sh scripts/loss_fingerprint.sh --device cuda configs/$c.conf >> $OUT/fp_old.txt 2>&1; done
if cmp -s $OUT/fp_new.txt $OUT/fp_old.txt; then echo "FINGERPRINTS EQUAL"; else echo "FINGERPRINTS DIFFER"; diff $OUT/fp_old.txt $OUT/fp_new.txt | head -20; fi
echo "== old kernels [$SECONDS s]"
out/build/gpu/bench_delta_rule --shape 8,4096,16,128,128 --kinds kda 2>&1 | grep -E "^kda"
cp out/devrun/new/* kernels/delta_rule/
make -j16 hybrid > $OUT/build_new2.log 2>&1 || { echo rebuild failed; exit 1; }
echo "== hybrid [$SECONDS s]"
for c in 0 8192; do [ $SECONDS -lt $((LIM - 50)) ] || break
  BENCH_CASES=3:1-T1024 BENCH_HYBRID_ARGS="--classifier_chunk $c" OUT=/tmp/cc$c bash scripts/bench_hybrid.sh > /dev/null 2>&1
  cp /tmp/cc$c/bench/hybrid_ours.json $OUT/hybrid_cc$c.json; grep -o '"ms_per_step": [0-9.]*\|"tok_per_s": [0-9.]*\|"peak_mem_gib": [0-9.]*' $OUT/hybrid_cc$c.json | tr '\n' ' '; echo " (classifier_chunk $c)"
done
echo "total $SECONDS s"
