#!/bin/sh
# CPU throughput of a config: trains `steps` steps on the Brown shards and prints the
# median tokens/s over the steps after the first (warm-up), from the metrics log.
# usage: scripts/bench_cpu_tiny.sh [CONFIG] [STEPS] [extra --key value ...]
set -e
config=${1:-configs/gpt2-tiny.conf}
steps=${2:-20}
[ $# -ge 2 ] && shift 2 || shift $#
out=out/bench/cpu-$(basename "$config" .conf)
rm -rf "$out"; mkdir -p out/bench
./hybrid train "$config" --steps "$steps" --warmup_steps 0 --val_every 0 --val_data '' --sample_tokens 1 \
    --checkpoint_every 0 --log_every 1000 --out_dir "$out" "$@" > "$out.log" 2>&1 || { cat "$out.log"; exit 1; }
grep -o '"tok_per_s": [0-9.]*' "$out/metrics.jsonl" | tail -n +2 | awk '{print $2}' | sort -n |
    awk '{v[NR]=$1} END {m = NR % 2 ? v[(NR+1)/2] : (v[NR/2] + v[NR/2+1]) / 2;
         printf "%s: median %.0f tok/s over %d steps (min %.0f, max %.0f)\n", "'"$config"'", m, NR, v[1], v[NR]}'
