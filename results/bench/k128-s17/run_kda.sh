#!/bin/bash
# session 17, call 3 (issue 15): the anchor in the same call as main's kernels after the K = V =
# 128 instances (a714c29): make bench-kda --kinds kda, ours then fla bc3b101d (prepared copy
# carried as out/peers/fla, its Triton cache of session 15 as out/tc/tc.tgz), fla bounded by
# the call's time.
set -u
export NCCL_NVLS_ENABLE=0
export TRITON_CACHE_DIR=/tmp/tc
tar xzf out/tc/tc.tgz -C /tmp && echo "Triton cache carried in"
nvidia-smi -L
make -j16 out/build/gpu/bench_delta_rule > /tmp/b.log 2>&1 || { tail -30 /tmp/b.log; exit 1; }
echo "built at $SECONDS s"
make bench-kda KDA_BENCH_ARGS="--kinds kda" FLA_DIR=out/peers/fla KDA_FLA_TIMEOUT=$((${LIMIT:-380} - SECONDS)) 2>&1 | tail -40
echo "bench at $SECONDS s"
cp out/bench/kda_*.json $OUT/ 2>/dev/null
ls -l $OUT; echo "total $SECONDS s"
