#!/bin/bash
# session 14 (issue 15/16): grad2 with the chunk's k and q staged in shared memory, against main's
# kernels in one call: test_delta_rule, the KDA benchmark, the GPU loss fingerprints of the new and
# the old kernels (must be equal bit for bit), the 3:1 hybrid with both.
# usage: put main's chunk_grad_mma.cu, chunk_grad.cuh, chunk_grad_ref_mma.cu in out/devrun/old/, the
# Brown shards of `make data` in out/devrun/data/; carry out/devrun: bash results/bench/grad2-kq/run.sh
set -u
export NCCL_NVLS_ENABLE=0
F="chunk_grad_mma.cu chunk_grad.cuh chunk_grad_ref_mma.cu"
mkdir -p out/data && cp out/devrun/data/* out/data/
mkdir -p out/devrun/new; for f in $F; do cp kernels/delta_rule/$f out/devrun/new/; done
B="hybrid out/build/gpu/test_delta_rule out/build/gpu/bench_delta_rule"
hyb() {  # the 3:1 hybrid, B64 T1024: ms/step, tok/s, peak
  BENCH_CASES=3:1-T1024 OUT=/tmp/bh$1 bash scripts/bench_hybrid.sh > /dev/null 2>&1
  grep -o '"ms_per_step": [0-9.]*\|"tok_per_s": [0-9.]*\|"peak_mem_gib": [0-9.]*' /tmp/bh$1/bench/hybrid_ours.json | tr '\n' ' '; echo " ($1)"
}
make -j16 $B > /tmp/build.log 2>&1 || { tail -30 /tmp/build.log; echo build failed; exit 1; }
echo "built at $SECONDS s"
out/build/gpu/test_delta_rule > /tmp/test_delta_rule.log 2>&1; echo "test_delta_rule rc $? at $SECONDS s"; tail -1 /tmp/test_delta_rule.log
out/build/gpu/bench_delta_rule --kinds kda 2>&1 | grep -E '^kda'
HYBRID_CUDA_PROFILE=1 out/build/gpu/bench_delta_rule --shape 8,4096,16,128,128 --kinds kda --reps 3 --warmup 1 2>&1 | grep 'delta_chunk/' | tail -5
for c in kda-tiny kl-xs-3-1; do sh scripts/loss_fingerprint.sh --device cuda configs/$c.conf >> $OUT/fp_new.txt 2>&1; done
hyb new
for f in $F; do cp out/devrun/old/$f kernels/delta_rule/; done
make -j16 $B > /tmp/build_old.log 2>&1 || { tail -30 /tmp/build_old.log; echo old build failed; exit 1; }
for c in kda-tiny kl-xs-3-1; do sh scripts/loss_fingerprint.sh --device cuda configs/$c.conf >> $OUT/fp_old.txt 2>&1; done
if cmp -s $OUT/fp_new.txt $OUT/fp_old.txt; then echo "FINGERPRINTS EQUAL"; else echo "FINGERPRINTS DIFFER"; diff $OUT/fp_old.txt $OUT/fp_new.txt | head -20; fi
echo "== old kernels [$SECONDS s]"
out/build/gpu/bench_delta_rule --shape 8,4096,16,128,128 --kinds kda 2>&1 | grep -E "^kda"
hyb old
for f in $F; do cp out/devrun/new/$f kernels/delta_rule/; done
echo "total $SECONDS s"
