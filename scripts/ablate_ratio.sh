#!/bin/sh
# KDA:MLA ratio ablation (docs/hybrid.md, "The KDA:MLA ablation"; the Kimi Linear report's
# Table 1) with the `hybrid` CLI: trains one base config at each ratio for the same token
# budget, then writes a table of final validation losses (results.md, results.tsv) and a PNG of
# the loss curves.
#
# usage: scripts/ablate_ratio.sh [BASE.conf] [extra `hybrid train` options ...]
#   BASE.conf   default configs/hybrid-tiny.conf (8 layers, CPU-sized)
# environment:
#   RATIOS   KDA:MLA ratios to run, default "0:1 1:1 3:1 7:1 1:0"
#   LAYERS   layers per model (every ratio's period a+b must divide it), default 8
#   STEPS    optimizer steps per run (the token budget is STEPS x total_batch_size), default:
#            the base config's `steps`
#   OUT      output folder, default out/ablation/<base name>
#   HYBRID   the CLI, default ./hybrid (built with `make` if missing)
#   PLOT     0 skips the PNG (and the matplotlib check)
# Each ratio's config is the base config with only its `layers` line replaced
# (OUT/<ratio>/config.conf); its run lives in OUT/<ratio>/run (metrics.jsonl, checkpoints),
# its console output in OUT/<ratio>/train.log. Ratios with KDA ('K') need a build whose
# `layers` accepts K (the `layers` branch); a ratio that fails is marked in the table and
# the script exits non-zero after writing everything else.
set -eu
cd "$(dirname "$0")/.."

BASE=configs/hybrid-tiny.conf
case "${1:-}" in *.conf) BASE=$1; shift;; esac
[ -f "$BASE" ] || { echo "ablate_ratio: $BASE: no such config" >&2; exit 1; }
RATIOS=${RATIOS:-"0:1 1:1 3:1 7:1 1:0"}
LAYERS=${LAYERS:-8}
HYBRID=${HYBRID:-./hybrid}
PLOT=${PLOT:-1}
name=$(basename "$BASE" .conf)
OUT=${OUT:-out/ablation/$name}
PY=/usr/bin/python3

# fail before hours of training, not after: the plotting step needs matplotlib
if [ "$PLOT" != 0 ] && ! { [ -x "$PY" ] && "$PY" -c "import matplotlib" 2>/dev/null; }; then
    echo "ablate_ratio: the loss-curve PNG needs matplotlib for $PY, which is missing." >&2
    echo "  Debian/Ubuntu: apt-get install python3-matplotlib   (or run with PLOT=0 for the table only)" >&2
    exit 1
fi
if [ ! -x "$HYBRID" ]; then
    [ "$HYBRID" = ./hybrid ] || { echo "ablate_ratio: $HYBRID is not executable" >&2; exit 1; }
    make hybrid
fi

# "3:1" -> "KKKM x2" for LAYERS = 8
pattern() {
    a=${1%%:*} b=${1##*:}
    case "$a$b" in *[!0-9]*|'') echo "ablate_ratio: bad ratio '$1' (want KDA:MLA like 3:1)" >&2; return 1;; esac
    p=$((a + b))
    [ "$p" -gt 0 ] && [ $((LAYERS % p)) -eq 0 ] || {
        echo "ablate_ratio: ratio $1 does not tile $LAYERS layers" >&2; return 1; }
    unit=""
    i=0; while [ $i -lt "$a" ]; do unit="${unit}K"; i=$((i + 1)); done
    i=0; while [ $i -lt "$b" ]; do unit="${unit}M"; i=$((i + 1)); done
    echo "$unit x$((LAYERS / p))"
}

mkdir -p "$OUT"
step_opt=""
[ -n "${STEPS:-}" ] && step_opt="--steps $STEPS"
failed=0
printf 'ratio\tlayers\tparams\tactive_nonemb\tmflop_per_token\ttokens\tfinal_train_loss\tfinal_val_loss\tstatus\n' \
    > "$OUT/results.tsv"
plots=""
for r in $RATIOS; do
    tag=$(echo "$r" | tr : -)
    dir="$OUT/$tag"
    mkdir -p "$dir"
    layers=$(pattern "$r")
    # the one changed line
    sed "s/^layers[ =].*/layers = $layers/" "$BASE" > "$dir/config.conf"
    grep -q "^layers = $layers\$" "$dir/config.conf" || echo "layers = $layers" >> "$dir/config.conf"
    echo "== KDA:MLA $r: layers = $layers"
    params=- active=- mflop=- tokens=- loss=- val=- status=ok
    if "$HYBRID" inspect "$dir/config.conf" "$@" > "$dir/inspect.txt" 2>&1; then
        params=$(sed -n 's/^parameters: \([0-9]*\) total.*/\1/p' "$dir/inspect.txt")
        active=$(sed -n 's/^active per token.*, \([0-9]*\) non-embedding.*/\1/p' "$dir/inspect.txt")
        [ -n "$active" ] || active=$(sed -n 's/^parameters: .*, \([0-9]*\) non-embedding$/\1/p' "$dir/inspect.txt")
        mflop=$(sed -n 's/^training FLOPs.*(\([0-9.]*\) MFLOP)$/\1/p' "$dir/inspect.txt")
        rm -rf "$dir/run"
        # shellcheck disable=SC2086
        if "$HYBRID" train "$dir/config.conf" --out_dir "$dir/run" $step_opt "$@" > "$dir/train.log" 2>&1; then
            m="$dir/run/metrics.jsonl"
            tokens=$(grep '"loss"' "$m" | tail -n 1 | sed -n 's/.*"tokens": \([0-9]*\).*/\1/p')
            loss=$(grep '"loss"' "$m" | tail -n 1 | sed -n 's/.*"loss": \([-0-9.e+]*\).*/\1/p')
            val=$(grep '"val_loss"' "$m" | tail -n 1 | sed -n 's/.*"val_loss": \([-0-9.e+]*\).*/\1/p')
            [ -n "$val" ] || val=-
            plots="$plots $r=$m"
            echo "   final train loss $loss, val loss $val ($tokens tokens)"
        else
            status="train failed (see $dir/train.log)"
        fi
    else
        status="config rejected (see $dir/inspect.txt)"
    fi
    if [ "$status" != ok ]; then
        failed=$((failed + 1))
        echo "   $status:" >&2
        tail -n 3 "$dir/inspect.txt" "$dir/train.log" 2>/dev/null | sed 's/^/   | /' >&2
        if grep -q "unknown layer type 'K'" "$dir/inspect.txt" 2>/dev/null; then
            echo "   (this build has no KDA layers yet: merge the \`layers\` branch)" >&2
        fi
    fi
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$r" "$layers" "$params" "$active" "$mflop" "$tokens" "$loss" \
        "$val" "$status" >> "$OUT/results.tsv"
done

# the table, as Markdown
{
    echo "# KDA:MLA ablation of $BASE"
    echo
    echo "Same config and token budget for every ratio; only \`layers\` changes. Lower is better."
    echo
    echo "| KDA:MLA | layers | params | active non-emb | MFLOP/token | tokens | final train loss | final val loss | status |"
    echo "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |"
    tail -n +2 "$OUT/results.tsv" | while IFS="$(printf '\t')" read -r r l p a f t tl vl s; do
        echo "| $r | \`$l\` | $p | $a | $f | $t | $tl | $vl | $s |"
    done
} > "$OUT/results.md"
cat "$OUT/results.md"

if [ "$PLOT" != 0 ] && [ -n "$plots" ]; then
    # shellcheck disable=SC2086
    "$PY" scripts/plot_losses.py --out "$OUT/loss_curves.png" --title "KDA:MLA ablation ($name)" $plots
fi
[ "$failed" -eq 0 ] || { echo "ablate_ratio: $failed ratio(s) did not run" >&2; exit 1; }
