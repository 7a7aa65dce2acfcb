#!/bin/bash
# Session 22, call 5 (device): the final tree (the gated RMSNorm backward's next-row loads, the
# convolution's backward at two channels a thread): test_delta_rule_layer, the convolution alone
# (three rounds), then the 3:1 hybrid at B64 T1024 with fla's KDAForCausalLM in the same call
# (`BENCH_CASES=3:1-T1024`, fla at bc3b101 prepared by ../shared/peers/prepare_fla.sh, carried as
# out/peers/fla; Triton's cache cold, written under $OUT/tc).
export NCCL_NVLS_ENABLE=0; set -u
B=out/build/gpu/bench_delta_rule
make -j16 hybrid $B out/build/gpu/test_delta_rule_layer > /tmp/b.log 2>&1 || { tail -20 /tmp/b.log; exit 1; }
echo "built $SECONDS s"; out/build/gpu/test_delta_rule_layer 2>&1 | grep -E "FAIL|checks passed" | tail -8
for i in 1 2 3; do $B --conv 64,1024,768,4 --reps 50 --warmup 5 2>&1 | grep '^conv' | tr '\n' ' '; echo; done
OUT=$OUT/hb BENCH_CASES=3:1-T1024 FLA_DIR=out/peers/fla TRITON_CACHE_DIR=$OUT/tc FLA_TIMEOUT=$((575-SECONDS)) \
    bash scripts/bench_hybrid.sh > $OUT/hb.log 2>&1; echo "bench_hybrid rc $? at $SECONDS s"
tail -8 $OUT/hb.log
