#!/bin/bash
# Session 24, call 1 (device): `make bench-kda` in its two-arithmetic form (bench_delta_rule
# --arith split,bf16, session 23) next to fla (bc3b101, carried as out/peers/fla) in the same call,
# KDA only; fla's Triton cache (compiled kernels and autotuning results) tarred under $OUT so that
# later calls carry it instead of paying the ~460 s cold autotune again.
export NCCL_NVLS_ENABLE=0; set -u
mkdir -p /tmp/tc
export TRITON_CACHE_DIR=/tmp/tc TRITON_CACHE_AUTOTUNING=1 FLA_COMMIT=bc3b101
make -j16 out/build/gpu/bench_delta_rule > $OUT/build.log 2>&1 || { tail -30 $OUT/build.log; exit 1; }
echo "built at $SECONDS s"
# ours takes ~40 s; fla gets the rest up to ~575 s
KDA_BENCH_ARGS="--kinds kda" FLA_DIR=out/peers/fla KDA_FLA_TIMEOUT=$((535 - SECONDS)) make bench-kda > $OUT/bench_kda.log 2>&1
echo "bench-kda rc $? at $SECONDS s"
cp out/bench/kda_ours.json out/bench/kda_fla.json $OUT/ 2>/dev/null
tar czf $OUT/triton_kda.tgz -C /tmp tc && ls -la $OUT
tail -40 $OUT/bench_kda.log
echo "total $SECONDS s"
