#!/bin/bash
# One device call that measures ours and fla's KDA / GDN (make bench-kda) in the same call and
# brings fla's Triton autotune choices back (scripts/triton_cache.sh pack-tuned), so that later
# calls skip fla's autotuning (~440 s cold for chunk_kda's three benchmark shapes; BENCHMARKS.md,
# "H200: chunkwise KDA and GDN against fla", its paragraph on the cache). Before the call: fetch
# fla, `sh ../shared/peers/prepare_fla.sh FLA_GIT_DIR out/peers/fla`, `git -C FLA_GIT_DIR rev-parse
# --short HEAD > out/peers/fla/COMMIT` (else the JSON says "commit unknown"), and, if an earlier call
# brought newer choices back, copy triton_tuned.tgz into out/devrun/triton/ (else the ones kept
# here, results/bench/fla-cache/triton_tuned.tgz, serve). Call: carry out/peers/fla (and
# out/devrun/triton when there). After it: copy $OUT/triton_tuned.tgz into out/devrun/triton/ for
# the next call, or over results/bench/fla-cache/triton_tuned.tgz to keep it. Session 29's call (the whole cache then, of which the
# fifth part did not come back: a call returns at most 8 files): results/bench/fla-cache/call1/.
export NCCL_NVLS_ENABLE=0; set -u
[ -d out/peers/fla ] || { echo "out/peers/fla missing: prepare and carry it"; exit 1; }
export TRITON_CACHE_DIR=/tmp/tc TRITON_CACHE_AUTOTUNING=1
# (a carried cache first, else the autotune choices kept in the repository: session 29's, fla
# bc3b101d, Triton 3.6, sm_90; Triton ignores any whose kernel, version or target differ)
if [ -d out/devrun/triton ]; then sh scripts/triton_cache.sh unpack out/devrun/triton $TRITON_CACHE_DIR
else sh scripts/triton_cache.sh unpack results/bench/fla-cache $TRITON_CACHE_DIR; fi
make -j16 out/build/gpu/bench_delta_rule > $OUT/build.log 2>&1 || { tail -30 $OUT/build.log; exit 1; }
echo "built at $SECONDS s"
make bench-kda FLA_DIR=out/peers/fla KDA_FLA_TIMEOUT=$((560 - SECONDS)) > $OUT/bench_kda.log 2>&1
echo "bench-kda rc $? at $SECONDS s"
cp out/bench/kda_*.json $OUT/ 2>/dev/null
tail -40 $OUT/bench_kda.log
[ -d $TRITON_CACHE_DIR ] && sh scripts/triton_cache.sh pack-tuned $TRITON_CACHE_DIR $OUT
echo "total $SECONDS s"
