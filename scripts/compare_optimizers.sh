#!/bin/sh
# AdamW vs Muon on one config: trains the config with each optimizer at each learning
# rate of a small sweep on the same tokens (same seed, same data order), keeps the best
# lr of each optimizer by final validation loss, and writes a table (results.md) and a
# PNG of the two best runs' loss curves.
#
# usage: scripts/compare_optimizers.sh CONFIG.conf [extra `hybrid train` options ...]
# environment:
#   ADAMW_LRS  default "1e-3 3e-3 6e-3"
#   MUON_LRS   default "1e-3 3e-3 6e-3"   (Muon's Moonlight scale lets AdamW's lr carry over)
#   OUT        default out/compare/<config name>
#   HYBRID     the CLI, default ./hybrid
set -eu
cd "$(dirname "$0")/.."
[ $# -ge 1 ] || { echo "usage: scripts/compare_optimizers.sh CONFIG.conf [--key value ...]" >&2; exit 2; }
CONFIG=$1
shift
[ -f "$CONFIG" ] || { echo "compare_optimizers: $CONFIG: no such config" >&2; exit 1; }
ADAMW_LRS=${ADAMW_LRS:-"1e-3 3e-3 6e-3"}
MUON_LRS=${MUON_LRS:-"1e-3 3e-3 6e-3"}
HYBRID=${HYBRID:-./hybrid}
PY=/usr/bin/python3
name=$(basename "$CONFIG" .conf)
OUT=${OUT:-out/compare/$name}
"$PY" -c "import matplotlib" 2>/dev/null ||
    { echo "compare_optimizers: the PNG needs matplotlib for $PY (apt-get install python3-matplotlib)" >&2; exit 1; }
[ -x "$HYBRID" ] || make hybrid
mkdir -p "$OUT"

final_val() { grep '"val_loss"' "$1" | tail -n 1 | sed 's/.*"val_loss": \([0-9.eE+-]*\).*/\1/'; }

printf '| optimizer | lr | final val loss | final train loss |\n| --- | --- | --- | --- |\n' > "$OUT/sweep.md"
for opt in adamw muon; do
    lrs=$ADAMW_LRS
    [ $opt = muon ] && lrs=$MUON_LRS
    for lr in $lrs; do
        run="$OUT/$opt-$lr"
        echo "[compare] $opt lr $lr -> $run"
        rm -rf "$run"
        "$HYBRID" train "$CONFIG" --optimizer $opt --lr "$lr" --out_dir "$run" --checkpoint_every 0 \
            --sample_tokens 16 "$@" > "$run.log" 2>&1 || { echo "[compare] $opt lr $lr failed: see $run.log" >&2; exit 1; }
        v=$(final_val "$run/metrics.jsonl")
        t=$(grep '"loss"' "$run/metrics.jsonl" | tail -n 1 | sed 's/.*"loss": \([0-9.eE+-]*\).*/\1/')
        echo "| $opt | $lr | $v | $t |" >> "$OUT/sweep.md"
        echo "$opt $lr $v" >> "$OUT/sweep.tsv.tmp"
    done
done
mv "$OUT/sweep.tsv.tmp" "$OUT/sweep.tsv"
best() { grep "^$1 " "$OUT/sweep.tsv" | sort -g -k3 | head -n 1; }
ba=$(best adamw)
bm=$(best muon)
{
    echo "Config \`$CONFIG\` $*, same seed and data order for every run."
    echo
    echo "| optimizer | best lr | final val loss |"
    echo "| --- | --- | --- |"
    echo "| AdamW | $(echo "$ba" | cut -d' ' -f2) | $(echo "$ba" | cut -d' ' -f3) |"
    echo "| Muon (+ AdamW on embeddings, norms, biases) | $(echo "$bm" | cut -d' ' -f2) | $(echo "$bm" | cut -d' ' -f3) |"
    echo
    echo "The whole sweep:"
    echo
    cat "$OUT/sweep.md"
} > "$OUT/results.md"
"$PY" scripts/plot_losses.py --out "$OUT/curves.png" --title "AdamW vs Muon: $name" \
    "AdamW lr $(echo "$ba" | cut -d' ' -f2)=$OUT/adamw-$(echo "$ba" | cut -d' ' -f2)/metrics.jsonl" \
    "Muon lr $(echo "$bm" | cut -d' ' -f2)=$OUT/muon-$(echo "$bm" | cut -d' ' -f2)/metrics.jsonl"
cat "$OUT/results.md"
echo "[compare] wrote $OUT/results.md and $OUT/curves.png"
