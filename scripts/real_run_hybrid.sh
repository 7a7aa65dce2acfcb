#!/bin/sh
# A real run of the hybrid (docs/ablation.md, "A real run: KL-XS 3:1 next to GPT-2"): the KL-XS
# KDA:MLA 3:1 model, dense, trains for a wall-clock budget on one GPU; then a GPT-2 of the
# same active non-embedding parameters (scripts/ablate_lib.sh, gpt2_match) trains on the same
# tokens in the same order (same batches, seed and step count), so the two loss curves lie
# over each other token for token. The counterpart of scripts/real_run_gpt2.sh.
#
# usage: [OUT=dir] [BUDGET=s] [CORPUS=prose|brown] scripts/real_run_hybrid.sh [--key value ...]
#   --key value      options for both `hybrid train` runs (e.g. --lr 2e-3)
#   BUDGET           seconds of hybrid training (default 300); the step count is set from a
#                    short probe run's median tok/s (PROBE_STEPS, default 12), so the cosine
#                    schedule ends when the budget does; STEPS=n skips the probe
#   CORPUS           prose (out/data/prose_*, make data CORPUS=prose) or brown (out/data/brown_*,
#                    make data); default prose when its shards are there, else brown
#   DEVICE           cuda (default) or cpu (a dry run of the whole path with MODEL_CONF)
#   MODEL_CONF       a config fragment over configs/kl-xs-3-1.conf (e.g. a smaller model)
#   OUT              default out/real-run-hybrid
#   BUILD            1: `make -j hybrid` first (default when ./hybrid is missing)
#   INSTALL_DOCS     1: copy OUT/docs/ into the repository's docs/ at the end
#   PLOT             0: no PNG and no matplotlib check (the device machine has no matplotlib);
#                    the run prints the command that draws it later from OUT/docs/real-run/
# Writes OUT/run/{3-1,gpt2}/ (the runs), OUT/{hybrid,gpt2}.conf, OUT/models.tsv,
# OUT/summary.md and, for the docs, OUT/docs/img/real-run-kl-xs-3-1.png and
# OUT/docs/real-run/kl-xs-3-1/ (summary.md, both metrics.jsonl, both logs, run.log): after a
# run on the device machine, `cp -r <its OUT>/docs/. docs/` puts them where docs/ablation.md
# shows them.
set -eu
cd "$(dirname "$0")/.."
. scripts/ablate_lib.sh

START=$(date +%s)
OUT=${OUT:-out/real-run-hybrid}
BUDGET=${BUDGET:-300}
DEVICE=${DEVICE:-cuda}
HYBRID=./hybrid
PROBE_STEPS=${PROBE_STEPS:-12}
PY=/usr/bin/python3
[ -x "$PY" ] || PY=python3
ARGS="$*"
for a in "$@"; do
    case $a in --out_dir|--layers|--resume|--steps)
        echo "real_run_hybrid: $a is set by the script (OUT, STEPS); leave it out" >&2; exit 2;;
    esac
done
if [ -z "${CORPUS:-}" ]; then
    CORPUS=brown
    ! ls out/data/prose_train_*.bin > /dev/null 2>&1 || CORPUS=prose
fi
mkdir -p "$OUT"
: > "$OUT/run.log"
say() { echo "[real-run-hybrid $(($(date +%s) - START))s] $*" | tee -a "$OUT/run.log"; }
ls out/data/"$CORPUS"_train_*.bin out/data/"$CORPUS"_val_*.bin > /dev/null 2>&1 ||
    { say "no $CORPUS shards under out/data: run \`make data$([ "$CORPUS" = brown ] || echo " CORPUS=$CORPUS")\` first (the device machine cannot)"; exit 1; }
PLOT=${PLOT:-1}
[ "$PLOT" = 0 ] || "$PY" -c "import matplotlib" 2>/dev/null ||
    { say "the loss-curve PNG needs matplotlib for $PY (apt-get install python3-matplotlib, or PLOT=0)"; exit 1; }
if [ "${BUILD:-0}" = 1 ] || [ ! -x "$HYBRID" ]; then
    say "building"
    make -j"$(nproc 2>/dev/null || echo 2)" hybrid > "$OUT/build.log" 2>&1 || { tail -n 20 "$OUT/build.log"; exit 1; }
fi
[ "$DEVICE" != cuda ] || nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee -a "$OUT/run.log"

# the two configs: KL-XS 3:1 dense with the run's training keys; GPT-2 of matched active
# parameters, every non-model key the same. Brown's validation split (65,384 tokens) holds no
# window of 64 x 1024 tokens, so on Brown a step is 4 micro-batches of 16 (as gpt2-124m-brown).
H=$OUT/hybrid.conf
cp configs/kl-xs-3-1.conf "$H"
conf_set "$H" moe_experts 0
[ -z "${MODEL_CONF:-}" ] || conf_merge "$H" "$MODEL_CONF"
cat > "$OUT/train.frag" <<EOF
batch_size       = $([ "$CORPUS" = brown ] && echo 16 || echo 64)
seq_len          = 1024
total_batch_size = 65536
lr               = 1e-3
lr_schedule      = cosine
final_lr_frac    = 0.1
train_data       = out/data/${CORPUS}_train_*.bin
val_data         = out/data/${CORPUS}_val_*.bin
val_batches      = 0
checkpoint_every = 0
keep_checkpoints = 1
log_every        = 25
sample_tokens    = 64
device           = $DEVICE
out_dir          = $OUT/run/3-1
EOF
conf_merge "$H" "$OUT/train.frag"
"$HYBRID" inspect "$H" "$@" > "$OUT/inspect_hybrid.txt" 2>&1 || { cat "$OUT/inspect_hybrid.txt"; exit 1; }
target=$(inspect_field "$OUT/inspect_hybrid.txt" active_nonemb)
d=$(inspect_field "$OUT/inspect_hybrid.txt" d_model)
G=$OUT/gpt2.conf
l=$(gpt2_match "$H" "$target" "$G" "$d" $((d % 64 == 0 ? d / 64 : 1)) "$@")
conf_set "$G" out_dir "$OUT/run/gpt2"
mv "$G.inspect" "$OUT/inspect_gpt2.txt"
got=$(inspect_field "$OUT/inspect_gpt2.txt" active_nonemb)
say "KL-XS 3:1 dense: $(inspect_field "$OUT/inspect_hybrid.txt" layers), $target active non-embedding parameters"
say "GPT-2: d_model $d, $l layers: $got ($(pct "$got" "$target")%); corpus $CORPUS, device $DEVICE, budget ${BUDGET}s"
models_header > "$OUT/models.tsv"
models_row 3-1 3:1 "$OUT/inspect_hybrid.txt" >> "$OUT/models.tsv"
models_row gpt2 - "$OUT/inspect_gpt2.txt" >> "$OUT/models.tsv"

# the step count: what the budget buys at the probe's median tok/s
tps=$(tokens_per_step "$H")
if [ -z "${STEPS:-}" ]; then
    rm -rf "$OUT/probe"
    say "probe: $PROBE_STEPS steps of the hybrid"
    # shellcheck disable=SC2086
    "$HYBRID" train "$H" --steps "$PROBE_STEPS" --warmup_steps 1 --val_every 0 --val_data "" --sample_tokens 0 \
        --log_every 1 --out_dir "$OUT/probe" $ARGS > "$OUT/probe.log" 2>&1 || { tail -n 20 "$OUT/probe.log"; exit 1; }
    rate=$(grep -o '"tok_per_s": [0-9.]*' "$OUT/probe/metrics.jsonl" | tail -n +3 | awk '{print $2}' | sort -g |
        awk '{a[NR] = $1} END {print a[int((NR + 1) / 2)]}')
    rm -rf "$OUT/probe"
    STEPS=$(awk -v b="$BUDGET" -v r="$rate" -v t="$tps" 'BEGIN { s = int(b * r / t); print (s < 2) ? 2 : s }')
    say "probe: $rate tok/s -> $STEPS steps of $tps tokens in ${BUDGET}s"
fi
for c in "$H" "$G"; do
    conf_set "$c" steps "$STEPS"
    conf_set "$c" warmup_steps $((STEPS / 20 + 1))
    conf_set "$c" val_every $((STEPS / 15 + 1))
done

# the runs: the hybrid, then GPT-2 on the same tokens; each stopped (SIGTERM: it finishes its
# step and writes a checkpoint) if it overruns its share by half
train() {  # CONF TAG LIMIT
    rm -rf "$OUT/run/$2"
    say "$2: $STEPS steps (at most $3 s)"
    # shellcheck disable=SC2086
    timeout -s TERM -k 60 "$3" "$HYBRID" train "$1" $ARGS > "$OUT/$2.log" 2>&1 ||
        say "$2: exit status $? (see $OUT/$2.log)"
    say "$2: $(grep -a '^step .*val loss' "$OUT/$2.log" | tail -n 1)"
}
train "$H" 3-1 $((BUDGET * 3 / 2 + 60))
train "$G" gpt2 $((BUDGET * 3 / 2 + 60))

"$PY" scripts/ablate_summary.py runs "$OUT" \
    "KL-XS 3:1 (dense) next to GPT-2 of matched active parameters, $STEPS steps x $tps tokens of $CORPUS ($DEVICE)"
docs=$OUT/docs/real-run/kl-xs-3-1
mkdir -p "$docs" "$OUT/docs/img"
png=$OUT/docs/img/real-run-kl-xs-3-1.png title="KL-XS 3:1 dense vs GPT-2, same tokens ($CORPUS)"
curves_h="KL-XS 3:1=$docs/hybrid_metrics.jsonl" curves_g="GPT-2 (${l}L d$d)=$docs/gpt2_metrics.jsonl"
cp "$OUT/summary.md" "$OUT/hybrid.conf" "$OUT/gpt2.conf" "$docs/"
cp "$OUT/run/3-1/metrics.jsonl" "$docs/hybrid_metrics.jsonl"
cp "$OUT/run/gpt2/metrics.jsonl" "$docs/gpt2_metrics.jsonl"
cp "$OUT/3-1.log" "$docs/hybrid.log"
cp "$OUT/gpt2.log" "$docs/gpt2.log"
if [ "$PLOT" = 0 ]; then
    png="(none: PLOT=0)"
    say "PLOT=0: no PNG; draw it where matplotlib is, from the repository root (paths as here):"
    say "  python3 scripts/plot_losses.py --out docs/img/real-run-kl-xs-3-1.png --diff --title \"$title\" \"$curves_h\" \"$curves_g\""
else
    "$PY" scripts/plot_losses.py --out "$png" --diff --title "$title" "$curves_h" "$curves_g"
fi
cat "$OUT/summary.md"
say "done: $OUT/summary.md, $png"
cp "$OUT/run.log" "$docs/run.log"
if [ "${INSTALL_DOCS:-0}" = 1 ]; then cp -r "$OUT/docs/." docs/; fi
