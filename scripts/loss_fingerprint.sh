#!/bin/sh
# The first N training losses of configs, and a hash of the weights and optimizer state
# after step N: a refactor that changes no numbers leaves this output identical, bit for
# bit (the hash covers every weight and moment after N steps, so equal hashes mean every
# step was equal). Usage:
#   scripts/loss_fingerprint.sh [-n N] [--device cuda] [--set KEY VALUE ...] CONFIG.conf ... > fingerprint.txt
# Runs ./hybrid (HYBRID=path to use another binary) in a scratch folder under out/;
# --set passes a config override to every run (e.g. --set val_data "" to leave validation out).
set -eu
n=20
extra=""
hybrid=${HYBRID:-./hybrid}
while [ $# -gt 0 ]; do
    case "$1" in
        -n) n=$2; shift 2 ;;
        --device) extra="$extra --device $2"; shift 2 ;;
        --set) extra="$extra --$2 '$3'"; shift 3 ;;
        *) break ;;
    esac
done
[ $# -gt 0 ] || { echo "usage: $0 [-n N] [--device cuda] [--set KEY VALUE ...] CONFIG.conf ..." >&2; exit 2; }
for conf in "$@"; do
    dir=out/fingerprint/$(basename "$conf" .conf)
    rm -rf "$dir"; mkdir -p "$dir"
    eval "\"\$hybrid\" train \"\$conf\" --stop_at_step \"\$n\" --log_every 1 --val_every 0 --sample_tokens 0 \
        --checkpoint_every 0 --keep_checkpoints 1 --out_dir \"\$dir\" $extra" > "$dir/train.log" 2>&1 ||
        { echo "$conf: training failed, see $dir/train.log" >&2; exit 1; }
    ck=$(ls -d "$dir"/checkpoints/step_* | tail -n 1)
    echo "== $conf ($n steps$extra)"
    sed -n 's/.*"step": \([0-9]*\), "loss": \([^,]*\), "lr": [^,]*, "grad_norm": \([^,]*\),.*/\1 loss \2 norm \3/p' \
        "$dir/metrics.jsonl"
    echo "weights   $(sha256sum < "$ck/model.safetensors" | cut -c1-16)"
    echo "optimizer $(sha256sum < "$ck/optimizer.safetensors" | cut -c1-16)"
done
