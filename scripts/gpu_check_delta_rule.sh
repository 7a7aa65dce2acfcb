#!/bin/bash
# The delta-rule family's whole GPU check in one go, sized for one short device call (about
# 60 s on the H200): build, the parity programs (tensor-core and SIMT paths), the benchmark of
# ours, configs/kda-tiny.conf for 40 steps on --device cuda (with a 16-token cached sample), then
# test_core. Logs and kda_ours.json go to $OUT (default out/gpu-check). Run from the repository
# root on a machine with a GPU; the Brown shards (out/data, `make data`) must be there for the
# training step. Results of 2026-12-01: docs/kda.md, "On the GPU".
set -o pipefail
OUT=${OUT:-out/gpu-check}
mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0
T0=$(date +%s)
stamp() { echo "=== $1 ($(($(date +%s) - T0)) s)"; }
stamp build
timeout 300 make -j16 hybrid out/build/gpu/test_delta_rule out/build/gpu/test_delta_rule_layer \
    out/build/gpu/bench_delta_rule out/build/gpu/test_core > "$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; exit 1; }
stamp test_delta_rule
timeout 120 out/build/gpu/test_delta_rule > "$OUT/test_delta_rule.log" 2>&1
echo "rc=$?"; grep -E "FAIL|checks passed|total" "$OUT/test_delta_rule.log" | tail -12
stamp test_delta_rule_layer
timeout 60 out/build/gpu/test_delta_rule_layer > "$OUT/test_delta_rule_layer.log" 2>&1
echo "rc=$?"; grep -E "FAIL|checks passed|total" "$OUT/test_delta_rule_layer.log" | tail -8
stamp bench
timeout 120 out/build/gpu/bench_delta_rule --reps 5 --warmup 2 --json "$OUT/kda_ours.json" > "$OUT/bench.log" 2>&1
echo "rc=$?"; tail -22 "$OUT/bench.log"
stamp kda-tiny
timeout 60 ./hybrid train configs/kda-tiny.conf --device cuda --steps 40 --val_every 0 --sample_tokens 16 \
    --checkpoint_every 0 --out_dir /tmp/kda-tiny-gpu-check --overwrite --log_every 5 > "$OUT/kda_tiny.log" 2>&1
echo "rc=$?"; tail -12 "$OUT/kda_tiny.log"
stamp test_core
timeout 120 out/build/gpu/test_core > "$OUT/test_core.log" 2>&1
echo "rc=$?"; tail -2 "$OUT/test_core.log"
stamp done
