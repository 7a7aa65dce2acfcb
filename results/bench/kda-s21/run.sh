#!/bin/bash
# Issue 15: main's KDA kernels (d40187a's, unchanged since) and fla in one device call, all three
# benchmark shapes, KDA only (session 21, call 3, 377 s wall, Triton cache cold).
# Here first: fetch github:fla-org/flash-linear-attention (bc3b101) and
#   sh ../shared/peers/prepare_fla.sh <its git folder> out/peers/fla      # carry: out/peers/fla
# On the device (the command of the call, as given to it):
nvidia-smi -L; export NCCL_NVLS_ENABLE=0; s=$SECONDS
make -j16 out/build/gpu/bench_delta_rule > /tmp/b.log 2>&1 || { tail -30 /tmp/b.log; exit 1; }
echo "build $((SECONDS-s)) s"
FLA_DIR=out/peers/fla TRITON_CACHE_DIR=/tmp/tc KDA_FLA_TIMEOUT=$((560-SECONDS)) KDA_BENCH_ARGS="--kinds kda" \
    make bench-kda 2>&1 | tail -40
cp out/bench/*.json $OUT/; echo "total $SECONDS s"
# Back here: kda_ours.json, kda_fla.json; summary.md = scripts/bench_summary_kda.py of the two.
