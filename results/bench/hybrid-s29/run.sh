#!/bin/bash
# One device call: the 3:1 hybrid (configs/bench-kda-3-1.conf) of ours at B64 T1024 and B16 T4096
# (`make bench-hybrid`'s cases, scripts/bench_hybrid.sh), then fla's KDAForCausalLM on the same
# cases in the same call with whatever time is left (its Triton cache, if carried as
# out/devrun/triton/, unpacked first; packed back into $OUT at the end so the next call skips
# fla's autotuning), then the side-by-side table. Issue 16.
# Call: carry out/peers/fla (prepared by ../shared/peers/prepare_fla.sh, with its commit in
# out/peers/fla/COMMIT: `git -C FLA_GIT_DIR rev-parse --short HEAD`) and out/devrun/triton
# when there. Outputs: $OUT/hybrid.tgz (logs, JSON), $OUT/triton_tuned.tgz (fla's autotune
# choices: scripts/triton_cache.sh pack-tuned; session 29's call packed the whole cache instead).
export NCCL_NVLS_ENABLE=0; set -u
export TRITON_CACHE_DIR=/tmp/tc TRITON_CACHE_AUTOTUNING=1
# (a carried cache first, else the autotune choices kept in the repository: session 29's, fla
# bc3b101d, Triton 3.6, sm_90; Triton ignores any whose kernel, version or target differ)
if [ -d out/devrun/triton ]; then sh scripts/triton_cache.sh unpack out/devrun/triton $TRITON_CACHE_DIR
else sh scripts/triton_cache.sh unpack results/bench/fla-cache $TRITON_CACHE_DIR; fi
make -j16 hybrid > /tmp/build.log 2>&1 || { tail -30 /tmp/build.log; exit 1; }
echo "built at $SECONDS s"
R=/tmp/bh; mkdir -p $R
OUT=$R BENCH_CASES=3:1-T1024,3:1-T4096 bash scripts/bench_hybrid.sh > $R/ours.log 2>&1
echo "ours rc $? at $SECONDS s"; grep -E "tok/s|refused|FAIL" $R/ours.log | head
if [ -d out/peers/fla ]; then
    FLA_PEER=out/peers/fla timeout $((540 - SECONDS)) python3 -u scripts/bench_fla_hybrid.py \
        --cases 3:1-T1024,3:1-T4096 --steps 25 --json $R/bench/hybrid_fla.json > $R/fla.log 2>&1
    echo "fla rc $? at $SECONDS s"; tail -4 $R/fla.log
fi
python3 scripts/bench_summary_hybrid.py table $R/bench/hybrid_ours.json $R/bench/hybrid_fla.json
cp /tmp/build.log $R/
(cd $R && tar czf $OUT/hybrid.tgz *.log bench/*.json bench/logs 2>/dev/null)
[ -d $TRITON_CACHE_DIR ] && sh scripts/triton_cache.sh pack-tuned $TRITON_CACHE_DIR $OUT
echo "total $SECONDS s"
