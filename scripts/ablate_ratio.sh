#!/bin/sh
# KDA:MLA ratio ablation (docs/ablation.md; docs/hybrid.md, "The KDA:MLA ablation"; the Kimi
# Linear report's Table 1) with the `hybrid` CLI: one base config at each ratio (only `layers`
# changes), optionally a GPT-2 of matched active parameters, for the same token budget, over a
# learning-rate sweep and several seeds, on a text corpus and optionally on MQAR (docs/mqar.md).
# Writes a table (results.md, results.tsv, runs.tsv) and PNGs (loss curves, val loss and MQAR
# accuracy against the ratio). Resumable: a finished run is skipped, an interrupted one
# continues from its checkpoint (--resume auto), so one sweep can span several invocations.
#
# usage: scripts/ablate_ratio.sh [BASE.conf] [extra `hybrid train` options ...]
#        scripts/ablate_gpu.sh [BASE.conf] [...]        the same with the GPU sweep's defaults
#   BASE.conf   default configs/hybrid-tiny.conf (8 layers, CPU-sized); PRESET=gpu:
#               configs/$FAMILY-3-1.conf
# The extra options go to every `hybrid train` and `inspect` (all models, both tasks); the
# runner sets --lr, --seed, --out_dir and --resume itself, and `layers` per model.
# environment (defaults without PRESET; PRESET=gpu's in brackets):
#   RATIOS      KDA:MLA ratios, "0:1 1:1 3:1 7:1 1:0"
#   LAYERS      layers per model (every ratio's period a+b must divide it), 8 [16]
#   MODEL_CONF  a config fragment over the base config for every family model (the baseline
#               takes its width, vocabulary and context from it), e.g. a smaller model
#   MOE         empty: the base config's MoE; 0: dense (moe_experts = 0); 1: keep MoE [0]
#   BASELINE    empty: none; gpt2: a GPT-2 (A layers, LayerNorm, learned positions, GELU,
#               biases) at the family's width whose active non-embedding parameters match the
#               MATCH ratio's (default 3:1, else the first ratio) [gpt2]
#   ROPE_ARM    1: with 0:1 among RATIOS, one more model, 0-1-rope ("KDA:MLA 0:1 + RoPE"): the
#               0:1 model with RoPE on its MLA's decoupled slice (mla_rope = true; the KL
#               family's MLA is NoPE, so its all-MLA end has no position signal); the same
#               tasks, lrs, seeds and budget as every model; 0: none; default 0 [1]
#   LRS         learning rates of the sweep, in increasing order, default the base config's lr
#               [PRESET=gpu: 2.5e-4 5e-4 1e-3 2e-3 4e-3]
#   LR_SWEEP    all: every model at every lr; grow: each model's sweep starts at the middle lr
#               and takes the lrs beside its best so far until the best has a finished run on
#               each side (or is at an end of LRS), so lrs far from a model's optimum are not
#               run and LRS can reach wide [all; PRESET=gpu: grow]
#   SEEDS       seeds, default the base config's seed [0 1]
#   SEED_SWEEP  best: the lr sweep at the first seed, the other seeds at each model's best lr;
#               all: every lr at every seed (best lr by the mean over seeds) [best]
#   STEPS       optimizer steps of a text run (tokens = STEPS x total_batch_size) [250]
#   CORPUS      text shards out/data/$CORPUS_{train,val}_*.bin; default the config's [prose]
#   LM_CONF     a config fragment (key = value lines) over the base config for the text
#               task [the preset's: B 64 x T 1024 = 65,536 tokens a step, warm-up 25]
#   MQAR_PAIRS  > 0 adds the MQAR task: train at this many pairs [8]
#   MQAR_CONF   fragment for the MQAR task [vocab 256, T 64, B 256, 1000 steps]
#   MQAR_LRS    the MQAR task's lr sweep, default LRS [PRESET=gpu: 3e-5 1e-4 3e-4 1e-3]
#   MQAR_STEPS  optimizer steps of an MQAR run, default the fragment's
#   MQAR_EVAL_PAIRS  pair counts for `hybrid eval-mqar` after MQAR training (those that fit
#               the fragment's length, 4 P <= T) [4 8 16]
#   MQAR_EVAL_SEQUENCES  sequences per evaluation, 1000
#   RUN_TASKS   the tasks whose runs this invocation trains: "lm", "mqar" or both (default: every
#               task of the sweep); the models, configs and tables stay the whole sweep's, so a
#               later invocation without it trains the rest (e.g. RUN_TASKS=mqar for an MQAR probe)
#   RUN_MODELS  the models whose runs this invocation trains, by folder name (e.g. "0-1 0-1-rope
#               gpt2"; default all): the same for models, e.g. a new lr for the low-edge rows
#               only, with every model (and the GPT-2 match) still in the tables
#   DEVICE, THREADS  written into every model config (device, threads) [cuda]
#   GPUS        e.g. "0 1 2 3": that many runs at once, one per GPU (CUDA_VISIBLE_DEVICES); a GPU
#               named twice runs two at once, which did not pay for KL-XS on one H200 (docs/ablation.md)
#   BUDGET      seconds: no run starts after BUDGET, and a run still going then is stopped
#               with SIGTERM (it writes a checkpoint; the next invocation resumes it)
#   FIT         1 (with BUDGET): a run whose estimated time (PLAN's estimate) exceeds the budget
#               left is not started; shorter runs after it still are. For the device machine,
#               where a stopped run's checkpoint is lost with the machine [1 with PRESET=gpu;
#               default 0]
#   PLAN        1: print the runs, tokens and estimated time (and device calls of CALL_S
#               seconds, default BUDGET or 540) and stop; nothing is trained
#   KEEP_CKPT   0: delete a run's checkpoints once it is finished (and evaluated) [0]; default 1
#   RETRY_FAILED 1: retry runs marked failed (a diverged lr is marked failed, not retried)
#   EXPORT      a folder to copy OUT into at the end, without checkpoints (what another machine
#               needs to skip the finished runs), or a file name ending in .tgz: one gzipped tar
#               of the same (the device's $OUT returns at most 8 files, two folders deep: use
#               EXPORT=$OUT/<name>.tgz there, set before OUT=...); refused if it lies inside OUT
#   OUT         output folder, out/ablation/<base name> [out/ablation/$FAMILY-dense|-moe]
#   FROM        an earlier invocation's folder (an EXPORT copy, e.g. one committed under
#               results/ablation/): copied into OUT first when OUT holds no sweep yet (no
#               runs.tsv), so a sweep resumes on a fresh machine; left alone (and said so) when
#               OUT already holds one; refused unless it holds a runs.tsv
#   HYBRID      the CLI, default ./hybrid (built with `make` if missing)
#   PLOT        0 skips the PNGs (and the matplotlib check)
# Layout: OUT/<model>/{lm,mqar}.conf (the model's config for each task), inspect*.txt;
# OUT/<model>/<task>/lr<LR>_s<SEED>/ one run (metrics.jsonl, train.log, checkpoints, a `done`
# or `failed` marker, mqar_eval.jsonl); <model> is the ratio with '-' (3-1), 0-1-rope (ROPE_ARM)
# or gpt2.
set -eu
cd "$(dirname "$0")/.."
. scripts/ablate_lib.sh

START=$(date +%s)
PRESET=${PRESET:-}
BASE=
case "${1:-}" in *.conf) BASE=$1; shift;; esac
RATIOS=${RATIOS:-"0:1 1:1 3:1 7:1 1:0"}
HYBRID=${HYBRID:-./hybrid}
PLOT=${PLOT:-1}
PLAN=${PLAN:-0}
GPUS=${GPUS:-}
BUDGET=${BUDGET:-}
RETRY_FAILED=${RETRY_FAILED:-0}
[ "$PRESET" != gpu ] || FIT=${FIT:-1}
FIT=${FIT:-0}
SEED_SWEEP=${SEED_SWEEP:-best}
MQAR_EVAL_SEQUENCES=${MQAR_EVAL_SEQUENCES:-1000}
if [ "$PRESET" = gpu ]; then
    FAMILY=${FAMILY:-kl-xs}
    BASE=${BASE:-configs/$FAMILY-3-1.conf}
    LAYERS=${LAYERS:-16}
    MOE=${MOE-0}
    BASELINE=${BASELINE-gpt2}
    ROPE_ARM=${ROPE_ARM:-1}
    LRS=${LRS:-"2.5e-4 5e-4 1e-3 2e-3 4e-3"}
    MQAR_LRS=${MQAR_LRS:-"3e-5 1e-4 3e-4 1e-3"}
    LR_SWEEP=${LR_SWEEP:-grow}
    SEEDS=${SEEDS:-"0 1"}
    STEPS=${STEPS:-250}
    CORPUS=${CORPUS-prose}
    MQAR_PAIRS=${MQAR_PAIRS-8}
    MQAR_EVAL_PAIRS=${MQAR_EVAL_PAIRS:-"4 8 16"}
    DEVICE=${DEVICE:-cuda}
    KEEP_CKPT=${KEEP_CKPT:-0}
    OUT=${OUT:-out/ablation/$FAMILY-$([ "$MOE" = 0 ] && echo dense || echo moe)}
elif [ -n "$PRESET" ]; then
    echo "ablate: unknown PRESET '$PRESET' (gpu, or unset)" >&2; exit 2
fi
BASE=${BASE:-configs/hybrid-tiny.conf}
[ -f "$BASE" ] || { echo "ablate: $BASE: no such config" >&2; exit 1; }
name=$(basename "$BASE" .conf)
LAYERS=${LAYERS:-8}
MOE=${MOE:-}
BASELINE=${BASELINE:-}
ROPE_ARM=${ROPE_ARM:-0}
LRS=${LRS:-$(conf_get "$BASE" lr)}
LRS=${LRS:-6e-4}
SEEDS=${SEEDS:-$(conf_get "$BASE" seed)}
SEEDS=${SEEDS:-1337}
CORPUS=${CORPUS:-}
MQAR_PAIRS=${MQAR_PAIRS:-0}
MQAR_LRS=${MQAR_LRS:-$LRS}
LR_SWEEP=${LR_SWEEP:-all}
case $LR_SWEEP in all|grow) ;; *) echo "ablate: unknown LR_SWEEP '$LR_SWEEP' (all, grow)" >&2; exit 2;; esac
# an lr list: positive numbers in increasing order (the edge flags and LR_SWEEP=grow's
# neighbours are positions in it)
check_lrs() {  # NAME "LR ..."
    echo "$2" | awk -v name="$1" '
        NF == 0 { printf "ablate: %s is empty\n", name; exit 1 }
        { for (i = 1; i <= NF; i++) {
            if ($i !~ /^[0-9]*\.?[0-9]+([eE][-+]?[0-9]+)?$/ || $i + 0 <= 0) { printf "ablate: %s: \"%s\" is not a positive learning rate\n", name, $i; exit 1 }
            if (i > 1 && $i + 0 <= $(i - 1) + 0) { printf "ablate: %s must be in increasing order (%s after %s)\n", name, $i, $(i - 1); exit 1 } } }' >&2
}
check_lrs LRS "$LRS" || exit 2
check_lrs MQAR_LRS "$MQAR_LRS" || exit 2
MQAR_EVAL_PAIRS=${MQAR_EVAL_PAIRS:-"$MQAR_PAIRS"}
KEEP_CKPT=${KEEP_CKPT:-1}
OUT=${OUT:-out/ablation/$name}
PY=/usr/bin/python3
[ -x "$PY" ] || PY=python3

for a in "$@"; do
    case $a in --lr|--seed|--out_dir|--layers|--resume|--overwrite|--mqar_pairs)
        echo "ablate: $a is set by the runner (LRS, SEEDS, OUT, RATIOS, MQAR_PAIRS); leave it out" >&2; exit 2;;
    esac
done
case $SEED_SWEEP in best|all) ;; *) echo "ablate: SEED_SWEEP is best or all, not '$SEED_SWEEP'" >&2; exit 2;; esac
# the copy for another machine must lie outside the folder it copies (else it lands inside OUT
# and never comes back: in a command prefix `OUT=x EXPORT=$OUT/y.tgz`, $OUT is already x)
if [ -n "${EXPORT:-}" ]; then
    case "$(realpath -m "$EXPORT")/" in "$(realpath -m "$OUT")"/*)
        echo "ablate: EXPORT=$EXPORT lies inside OUT=$OUT: the copy would be made inside the folder it copies;" \
             "name EXPORT outside it (on the device: EXPORT=\$OUT/<name>.tgz before OUT=..., which changes \$OUT)" >&2
        exit 2;;
    esac
fi
case $ROPE_ARM in 0|1) ;; *) echo "ablate: ROPE_ARM is 0 or 1, not '$ROPE_ARM'" >&2; exit 2;; esac
if [ -n "${FROM:-}" ]; then
    [ -f "$FROM/runs.tsv" ] || { echo "ablate: FROM=$FROM holds no runs.tsv: not a sweep folder to resume from" >&2; exit 2; }
fi
# --device and --threads among the extra options also go to eval-mqar
EVAL_OPTS=""
prev=""
for a in "$@"; do
    case $prev in --device|--threads) EVAL_OPTS="$EVAL_OPTS $prev $a";; esac
    prev=$a
done
[ -n "$EVAL_OPTS" ] || { [ -z "${DEVICE:-}" ] || EVAL_OPTS="--device $DEVICE"; [ -z "${THREADS:-}" ] || EVAL_OPTS="$EVAL_OPTS --threads $THREADS"; }

# fail before hours of training, not after
if [ "$PLAN" != 1 ]; then
    "$PY" -c "import sys" 2>/dev/null || { echo "ablate: the tables need python3" >&2; exit 1; }
    if [ "$PLOT" != 0 ] && ! "$PY" -c "import matplotlib" 2>/dev/null; then
        echo "ablate: the PNGs need matplotlib for $PY, which is missing." >&2
        echo "  Debian/Ubuntu: apt-get install python3-matplotlib   (or run with PLOT=0 for the tables only)" >&2
        exit 1
    fi
fi
if [ ! -x "$HYBRID" ]; then
    [ "$HYBRID" = ./hybrid ] || { echo "ablate: $HYBRID is not executable" >&2; exit 1; }
    make -j"$(nproc 2>/dev/null || echo 2)" hybrid
fi
if [ -n "${FROM:-}" ] && [ "$(realpath -m "$FROM")" != "$(realpath -m "$OUT")" ]; then
    if [ -f "$OUT/runs.tsv" ]; then
        echo "ablate: OUT=$OUT already holds a sweep: FROM=$FROM not copied over it"
    else
        mkdir -p "$OUT" && cp -R "$FROM"/. "$OUT"/
        echo "ablate: OUT=$OUT seeded from FROM=$FROM"
    fi
fi
mkdir -p "$OUT"
say() { echo "[ablate $(($(date +%s) - START))s] $*"; }

# ---- the task fragments ----
LM_FRAG=$OUT/lm-task.conf
if [ -n "${LM_CONF:-}" ]; then
    cp "$LM_CONF" "$LM_FRAG"
elif [ "$PRESET" = gpu ]; then
    cat > "$LM_FRAG" <<'EOF'
# the text task of scripts/ablate_gpu.sh (docs/ablation.md): 65,536 tokens a step
batch_size       = 64
seq_len          = 1024
total_batch_size = 65536
warmup_steps     = 25
lr_schedule      = cosine
final_lr_frac    = 0.1
val_every        = 50
val_batches      = 0
checkpoint_every = 125
keep_checkpoints = 1
log_every        = 25
sample_tokens    = 0
EOF
else
    : > "$LM_FRAG"
fi
[ -z "${STEPS:-}" ] || echo "steps = $STEPS" >> "$LM_FRAG"
[ -z "$CORPUS" ] || printf 'train_data = out/data/%s_train_*.bin\nval_data = out/data/%s_val_*.bin\n' \
    "$CORPUS" "$CORPUS" >> "$LM_FRAG"
TASKS=lm
MQAR_FRAG=$OUT/mqar-task.conf
if [ "$MQAR_PAIRS" -gt 0 ] 2>/dev/null; then
    TASKS="lm mqar"
    if [ -n "${MQAR_CONF:-}" ]; then
        cp "$MQAR_CONF" "$MQAR_FRAG"
    else
        cat > "$MQAR_FRAG" <<'EOF'
# the MQAR task (docs/ablation.md, "MQAR: what the runs show"): the same models over a 256-token
# vocabulary, 64-token sequences, 256 sequences (16,384 tokens) a step: the size the tiny models
# solve (docs/mqar.md). At vocabulary 1024 or 8192 with 256-token sequences and 32 pairs no
# KL-XS model left chance in 1000 steps.
vocab_size           = 256
padded_vocab_size    = 256
seq_len              = 64
batch_size           = 256
total_batch_size     = 16384
steps                = 1000
warmup_steps         = 50
lr_schedule          = cosine
final_lr_frac        = 0.1
mqar_train_sequences = 400000
mqar_val_sequences   = 1024
mqar_seed            = 0
val_every            = 100
val_batches          = 0
checkpoint_every     = 500
keep_checkpoints     = 1
log_every            = 50
sample_tokens        = 0
EOF
    fi
    # one micro-batch a step unless the fragment says otherwise (not the text task's batch)
    grep -q '^[[:space:]]*total_batch_size[[:space:]]*=' "$MQAR_FRAG" || echo "total_batch_size = 0" >> "$MQAR_FRAG"
    printf 'mqar_pairs = %s\ntrain_data =\nval_data =\n' "$MQAR_PAIRS" >> "$MQAR_FRAG"
    [ -z "${MQAR_STEPS:-}" ] || echo "steps = $MQAR_STEPS" >> "$MQAR_FRAG"
fi

# RUN_TASKS / RUN_MODELS: the part of the sweep this invocation trains
in_words() { case " $2 " in *" $1 "*) return 0 ;; esac; return 1; }  # WORD LIST
check_subset() {  # VAR LIST ALL WHAT [HINT]: every word of LIST is one of ALL, or exit naming VAR
    for w in $2; do
        in_words "$w" "$3" || { echo "ablate: $1 names '$w', not $4 ($3)${5:+; $5}" >&2; exit 2; }
    done
}
RUN_TASKS=${RUN_TASKS:-$TASKS}
check_subset RUN_TASKS "$RUN_TASKS" "$TASKS" "a task of this sweep" "mqar needs MQAR_PAIRS > 0"
runs_task() { in_words "$1" "$RUN_TASKS"; }
runs_model() { in_words "$1" "$RUN_MODELS"; }

# ---- the models: one config per model and task, and what `hybrid inspect` says of it ----
model_conf() {  # TAG TASK -> OUT/TAG/TASK.conf from OUT/TAG/model.conf
    cp "$OUT/$1/model.conf" "$OUT/$1/$2.conf"
    conf_merge "$OUT/$1/$2.conf" "$OUT/$2-task.conf"
    [ -z "${DEVICE:-}" ] || conf_set "$OUT/$1/$2.conf" device "$DEVICE"
    [ -z "${THREADS:-}" ] || conf_set "$OUT/$1/$2.conf" threads "$THREADS"
    conf_set "$OUT/$1/$2.conf" out_dir "$OUT/$1/$2"
    mt=$1 mk=$2
    shift 2
    "$HYBRID" inspect "$OUT/$mt/$mk.conf" "$@" > "$OUT/$mt/inspect_$mk.txt" 2>&1
}
MODELS=""
models_header > "$OUT/models.tsv"
add_model() {  # TAG RATIO VARIANT [extra options]
    tag=$1 ratio=$2 variant=$3
    shift 3
    for t in $TASKS; do
        model_conf "$tag" "$t" "$@" || {
            echo "ablate: model $tag ($t) rejected by hybrid inspect:" >&2
            tail -n 3 "$OUT/$tag/inspect_$t.txt" >&2
            grep -q "unknown layer type 'K'" "$OUT/$tag/inspect_$t.txt" &&
                echo "  (this build has no KDA layers yet: merge the \`layers\` branch)" >&2
            [ "$variant" != rope ] || echo "  (the RoPE arm needs an even mla_rope_dim >= 2; ROPE_ARM=0 leaves it out)" >&2
            exit 1
        }
    done
    models_row "$tag" "$ratio" "$OUT/$tag/inspect_lm.txt" "$OUT/$tag/inspect_mqar.txt" "$variant" >> "$OUT/models.tsv"
    MODELS="${MODELS:+$MODELS }$tag"
}
match_ratio=${MATCH:-}
for r in $RATIOS; do
    layers=$(ratio_pattern "$r" "$LAYERS") || exit 1
    tag=$(echo "$r" | tr : -)
    mkdir -p "$OUT/$tag"
    cp "$BASE" "$OUT/$tag/model.conf"
    [ -z "${MODEL_CONF:-}" ] || conf_merge "$OUT/$tag/model.conf" "$MODEL_CONF"
    conf_set "$OUT/$tag/model.conf" layers "$layers"
    [ -z "$MOE" ] || [ "$MOE" != 0 ] || conf_set "$OUT/$tag/model.conf" moe_experts 0
    add_model "$tag" "$r" - "$@"
    # the RoPE arm right after 0:1 (its row next to 0:1's in the tables): the same model.conf
    # with the MLA's decoupled slice rotated (docs/hybrid.md, "RoPE on the decoupled slice");
    # (mla_rope adds no parameters and touches no other model's config, so no other run's
    # identity changes)
    if [ "$ROPE_ARM" = 1 ] && [ "$r" = 0:1 ]; then
        if [ "$(conf_get "$OUT/$tag/model.conf" mla_rope)" = true ]; then
            say "ROPE_ARM: the 0:1 model already has mla_rope = true; no separate RoPE arm"
        else
            mkdir -p "$OUT/$tag-rope"
            cp "$OUT/$tag/model.conf" "$OUT/$tag-rope/model.conf"
            conf_set "$OUT/$tag-rope/model.conf" mla_rope true
            add_model "$tag-rope" "$r" rope "$@"
        fi
    fi
    [ -n "$match_ratio" ] || match_ratio=$r
    case " $RATIOS " in *" 3:1 "*) [ -n "${MATCH:-}" ] || match_ratio=3:1;; esac
done
: > "$OUT/match.txt"
if [ "$BASELINE" = gpt2 ]; then
    mt=$(echo "$match_ratio" | tr : -)
    target=$(inspect_field "$OUT/$mt/inspect_lm.txt" active_nonemb)
    d=${BASELINE_D:-$(inspect_field "$OUT/$mt/inspect_lm.txt" d_model)}
    h=${BASELINE_HEADS:-$((d % 64 == 0 ? d / 64 : 1))}
    mkdir -p "$OUT/gpt2"
    cp "$OUT/$mt/model.conf" "$OUT/gpt2/base.conf"
    l=$(MATCH_FRAG=$LM_FRAG gpt2_match "$OUT/gpt2/base.conf" "$target" "$OUT/gpt2/model.conf" "$d" "$h" "$@") || exit 1
    got=$(inspect_field "$OUT/gpt2/model.conf.inspect" active_nonemb)
    rm -f "$OUT/gpt2/model.conf.inspect"
    echo "GPT-2 baseline: d_model $d, $l layers, $h heads: $got active non-embedding parameters against $target of KDA:MLA $match_ratio ($(pct "$got" "$target")%)" \
        > "$OUT/match.txt"
    say "$(cat "$OUT/match.txt")"
    add_model gpt2 - - "$@"
elif [ -n "$BASELINE" ]; then
    echo "ablate: unknown BASELINE '$BASELINE' (gpt2, or empty)" >&2; exit 2
fi
{
    printf 'base\t%s\ntasks\t%s\nlrs\t%s\nmqar_lrs\t%s\nseeds\t%s\nseed_sweep\t%s\nlr_sweep\t%s\n' "$BASE" "$TASKS" \
        "$LRS" "$MQAR_LRS" "$SEEDS" "$SEED_SWEEP" "$LR_SWEEP"
    printf 'mqar_pairs\t%s\nmqar_eval_pairs\t%s\nmoe\t%s\nlayers\t%s\noptions\t%s\n' "$MQAR_PAIRS" \
        "$MQAR_EVAL_PAIRS" "${MOE:-config}" "$LAYERS" "$*"
} > "$OUT/sweep.tsv"

RUN_MODELS=${RUN_MODELS:-$MODELS}
check_subset RUN_MODELS "$RUN_MODELS" "$MODELS" "a model of this sweep"

# ---- the runs ----
# a run's identity: its config, the extra options, lr and seed; a run folder made with
# another identity is refused rather than silently skipped or resumed
identity() {  # TAG TASK LR SEED
    cat "$OUT/$1/$2.conf"
    printf 'options: %s\nlr: %s\nseed: %s\n' "$ARGS" "$3" "$4"
}
# what two identities are compared on: the settings, not their spelling (comments, blank lines,
# spaces around '=') nor where the folder lies (out_dir), so a finished run moved into another
# sweep folder of the same settings, or a config whose comments changed, is still that run
identity_settings() {  # < IDENTITY
    sed -e 's/#.*//' -e 's/^[[:space:]]*//' -e 's/[[:space:]]*$//' -e 's/[[:space:]]*=[[:space:]]*/ = /' |
        { grep -v -e '^$' -e '^out_dir = ' || true; }  # (an empty identity: nothing, not an exit)
}
ARGS="$*"
lrs_of() { if [ "$1" = mqar ]; then echo "$MQAR_LRS"; else echo "$LRS"; fi; }
first_seed=$(echo "$SEEDS" | awk '{print $1}')
# the sweep's lrs centre first (the middle one, then outwards): a budget that ends early still
# leaves every model at one lr
centre_out() { echo "$1" | awk '{ n = NF; m = int((n + 1) / 2); printf "%s", $m; for (d = 1; d < n; d++) { if (m - d >= 1) printf " %s", $(m - d); if (m + d <= n) printf " %s", $(m + d) } print "" }'; }

evals_missing() {  # DIR CONF: the eval pair counts not yet in DIR/mqar_eval.jsonl
    T=$(setting "$2" seq_len) V=$(setting "$2" vocab_size)
    for p in $MQAR_EVAL_PAIRS; do
        [ $((4 * p)) -le "$T" ] && [ $((2 * p + 2)) -le "$V" ] || continue
        grep -q "\"pairs\": $p," "$1/mqar_eval.jsonl" 2>/dev/null || echo "$p"
    done
}
left() { echo $((BUDGET - ($(date +%s) - START))); }
limited() {  # COMMAND...: under `timeout` until the budget, if there is one
    if [ -z "$BUDGET" ]; then "$@"; return; fi
    l=$(left)
    [ "$l" -ge 1 ] || l=1
    timeout -s TERM -k 120 "$l" "$@"
}

# run_job TASK TAG LR SEED: 0 finished (now or before), 1 failed, 2 stopped by the budget
run_job() {
    task=$1 tag=$2 lr=$3 seed=$4
    conf=$OUT/$tag/$task.conf
    dir=$OUT/$tag/$task/lr${lr}_s$seed
    what="$task $tag lr $lr seed $seed"
    if [ -f "$dir/identity" ]; then
        old=$(identity_settings < "$dir/identity")
        new=$(identity "$tag" "$task" "$lr" "$seed" | identity_settings)
        if [ "$old" != "$new" ]; then
            echo "ablate: $dir was made with another config or options:" >&2
            printf '%s\n' "$old" > "$dir/identity.old"
            printf '%s\n' "$new" | diff "$dir/identity.old" - | sed 's/^/  /' >&2
            rm -f "$dir/identity.old"
            echo "  remove it or choose another OUT" >&2
            return 3
        fi
    fi
    [ ! -f "$dir/done" ] || return 0
    if [ -f "$dir/failed" ]; then
        [ "$RETRY_FAILED" = 1 ] || return 1
        rm -f "$dir/failed"
    fi
    if [ -n "$BUDGET" ] && [ "$(left)" -le 0 ]; then return 2; fi
    mkdir -p "$dir"
    identity "$tag" "$task" "$lr" "$seed" > "$dir/identity"
    steps=$(setting "$conf" steps)
    need_train=1
    if [ "$(last_step "$dir/metrics.jsonl")" = "$steps" ]; then
        need_train=0
        # an MQAR run not yet evaluated needs its final checkpoint
        [ "$task" != mqar ] || [ -z "$(evals_missing "$dir" "$conf")" ] || [ -d "$dir/checkpoints" ] || need_train=1
    fi
    if [ $need_train = 1 ]; then
        from=$(ls -d "$dir"/checkpoints/step_* 2>/dev/null | tail -n 1 | sed 's/.*step_0*\([0-9]\)/\1/')
        say "$what: training ${from:+from step $from }to step $steps"
        set +e
        # shellcheck disable=SC2086
        limited "$HYBRID" train "$conf" --lr "$lr" --seed "$seed" --out_dir "$dir" --resume auto $ARGS \
            >> "$dir/train.log" 2>&1
        rc=$?
        set -e
        if [ "$(last_step "$dir/metrics.jsonl")" != "$steps" ]; then
            if [ $rc = 124 ] || [ $rc = 137 ] || grep -q "^interrupted after step" "$dir/train.log"; then
                say "$what: stopped by the budget at step $(last_step "$dir/metrics.jsonl"); the next invocation resumes it"
                return 2
            fi
            echo "exit status $rc at step $(last_step "$dir/metrics.jsonl"): $(grep -a 'error' "$dir/train.log" | tail -n 1)" > "$dir/failed"
            say "$what: FAILED ($(cat "$dir/failed")); see $dir/train.log"
            return 1
        fi
    fi
    if [ "$task" = mqar ]; then
        for p in $(evals_missing "$dir" "$conf"); do
            if [ -n "$BUDGET" ] && [ "$(left)" -le 0 ]; then return 2; fi
            # shellcheck disable=SC2086
            limited "$HYBRID" eval-mqar "$dir" --pairs "$p" --sequences "$MQAR_EVAL_SEQUENCES" \
                --jsonl "$dir/mqar_eval.jsonl" $EVAL_OPTS > /dev/null 2>> "$dir/eval.log" || {
                grep -q "\"pairs\": $p," "$dir/mqar_eval.jsonl" 2>/dev/null ||
                    { say "$what: eval-mqar --pairs $p failed (see $dir/eval.log)"; return 2; }
            }
        done
    fi
    [ "$KEEP_CKPT" != 0 ] || rm -rf "$dir/checkpoints"
    echo "finished $(date -u +%Y-%m-%dT%H:%M:%SZ)" > "$dir/done"
    say "$what: done ($(grep '"val_loss"' "$dir/metrics.jsonl" | tail -n 1 | sed 's/^{"step": [0-9]*, //; s/}$//'))"
    return 0
}

# the jobs of phase 1 (the lr sweep) and phase 2 (the other seeds at the best lr), one a line
phase1() {
    for task in $TASKS; do
        runs_task "$task" || continue
        for lr in $(centre_out "$(lrs_of "$task")"); do
            for tag in $MODELS; do
                runs_model "$tag" || continue
                if [ "$SEED_SWEEP" = all ]; then
                    for s in $SEEDS; do echo "$task $tag $lr $s"; done
                else
                    echo "$task $tag $lr $first_seed"
                fi
            done
        done
    done
}
best_lr() { "$PY" scripts/ablate_summary.py best "$OUT" "$1" "$2" 2>/dev/null || true; }
lr_state() {  # TASK TAG LR: done, needed, skip or maybe (ablate_summary.py's Sweep.lr_state)
    "$PY" scripts/ablate_summary.py lr-state "$OUT" "$1" "$2" "$3"
}
# every lr's state in one reading of the folder (a line "TASK TAG LR STATE" each) into FILE, and
# one looked up there: a Python start and a pass over every run's metrics an lr cost ~0.5 s,
# 77 of them a PLAN and up to that a phase-1 pass
lr_states_to() { "$PY" scripts/ablate_summary.py lr-states "$OUT" > "$1"; }  # FILE
lr_state_in() { awk -v t="$2" -v m="$3" -v l="$4" '$1 == t && $2 == m && $3 == l { print $4 }' "$1"; }  # FILE TASK TAG LR
phase2() {
    [ "$SEED_SWEEP" = best ] || return 0
    for task in $TASKS; do
        runs_task "$task" || continue
        for tag in $MODELS; do
            runs_model "$tag" || continue
            b=$(best_lr "$task" "$tag")
            for s in $SEEDS; do
                [ "$s" = "$first_seed" ] && continue
                if [ -n "$b" ]; then echo "$task $tag $b $s"; else echo "$task $tag ? $s"; fi
            done
        done
    done
}

# ---- the plan: runs, tokens and estimated time ----
# tok/s estimates until a run has measured its own (its median tok/s): FLOP-scaled from the
# H200 numbers of 2026-11-29/12-01 (BENCHMARKS.md): a 16-layer d768 3:1 KDA:softmax model at
# 100k tok/s with 973.9 MFLOP/token for any model with K or M layers, GPT-2 124M at 564.3k
# tok/s with 798.8 MFLOP/token for pure softmax attention; on the CPU 616 tok/s at 43.8.
# The RoPE arm (0-1-rope), until it has measured its own, takes 0:1's measured
# tok/s: the same model, plus a rotation of the q and k rope slices, which is tiny next to the
# attention (kernels/mla/rope.cu).
est_toks() {  # TAG TASK: "TOK/S HOW"
    m=""
    for from in "$1" "${1%-rope}"; do
        for f in "$OUT/$from/$2"/*/metrics.jsonl; do
            [ -f "$f" ] || continue
            m=$(grep -o '"tok_per_s": [0-9.]*' "$f" | awk '{print $2}' | sort -g | awk '{a[NR]=$1} END {if (NR) print a[int((NR+1)/2)]}')
            [ -z "$m" ] || break
        done
        [ -z "$m" ] || break
    done
    if [ -n "$m" ]; then
        if [ "$from" = "$1" ]; then echo "$m measured"; else echo "$m $from measured"; fi
        return
    fi
    f=$(awk -F'\t' -v t="$1" -v c="$([ "$2" = mqar ] && echo 7 || echo 6)" '$1 == t {print $c}' "$OUT/models.tsv")
    dev=$(setting "$OUT/$1/$2.conf" device)
    if [ "$dev" = cuda ]; then
        case $(awk -F'\t' -v t="$1" '$1 == t {print $2}' "$OUT/models.tsv") in
            *K*|*M*) awk -v f="$f" 'BEGIN { printf "%.0f estimated\n", 100000 * 973.9 / f }' ;;
            *) awk -v f="$f" 'BEGIN { printf "%.0f estimated\n", 564300 * 798.8 / f }' ;;
        esac
    else
        awk -v f="$f" 'BEGIN { printf "%.0f estimated\n", 616 * 43.8 / f }'
    fi
}
OVERHEAD_S=${OVERHEAD_S:-20}   # per run: start-up, validation, checkpoints, MQAR evaluations
# job_estimate TASK TAG LR SEED: "STATUS TOKENS_LEFT EST_S TOK/S HOW..." (status todo, partial
# (a checkpoint to resume from), done or failed; EST_S 0 unless there is something to train)
job_estimate() {
    conf=$OUT/$2/$1.conf
    dir=$OUT/$2/$1/lr${3}_s$4
    steps=$(setting "$conf" steps)
    tps=$(tokens_per_step "$conf")
    st=todo
    [ ! -f "$dir/failed" ] || st=failed
    [ ! -f "$dir/done" ] || st="done"
    done_steps=0
    [ ! -d "$dir/checkpoints" ] || done_steps=$(last_step "$dir/metrics.jsonl")
    [ -n "$done_steps" ] || done_steps=0
    [ "$done_steps" = 0 ] || [ $st != todo ] || st=partial
    left_tok=$(((steps - done_steps) * tps))
    [ $st = todo ] || [ $st = partial ] || left_tok=0
    rate_how=$(est_toks "$2" "$1")
    est=$(echo "$rate_how" | awk -v n="$left_tok" -v o="$OVERHEAD_S" '{ printf "%.0f", (n > 0) ? n / $1 + o : 0 }')
    echo "$st $left_tok $est $rate_how"
}
plan() {
    CALL_S=${CALL_S:-${BUDGET:-540}}
    { phase1 | sed 's/^/1 /'; phase2 | sed 's/^/2 /'; } > "$OUT/plan.jobs"
    [ "$LR_SWEEP" != grow ] || lr_states_to "$OUT/plan.states"
    printf 'task\tmodel\tlr\tseed\tstatus\ttokens_left\ttok_per_s\test_s\n' > "$OUT/plan.tsv"
    while read -r ph task tag lr seed; do
        # shellcheck disable=SC2046
        set -- $(job_estimate "$task" "$tag" "$lr" "$seed")
        st=$1 left_tok=$2 est=$3 rate=$4
        shift 4
        # LR_SWEEP=grow: an lr the sweep finished without is skipped; one that may still be
        # called for ("maybe") is counted, so the estimate is an upper bound while sweeps grow
        if [ "$ph" = 1 ] && [ "$LR_SWEEP" = grow ] && { [ "$st" = todo ] || [ "$st" = partial ]; }; then
            case $(lr_state_in "$OUT/plan.states" "$task" "$tag" "$lr") in
                skip) st=skip left_tok=0 est=0 ;;
                maybe) st=maybe ;;
            esac
        fi
        printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$task" "$tag" "$lr" "$seed" "$st" "$left_tok" "$rate ($*)" "$est" \
            >> "$OUT/plan.tsv"
    done < "$OUT/plan.jobs"
    {
        echo "Plan of $OUT ($(echo "$MODELS" | wc -w) models: $MODELS; tasks: $TASKS$([ "$RUN_TASKS" = "$TASKS" ] || echo ", this invocation: $RUN_TASKS"))"
        echo "  text: $(setting "$OUT/$(echo $MODELS | cut -d' ' -f1)/lm.conf" steps) steps x $(tokens_per_step "$OUT/$(echo $MODELS | cut -d' ' -f1)/lm.conf") tokens per run; lrs $LRS; seeds $SEEDS ($SEED_SWEEP)"
        [ "$TASKS" = lm ] || echo "  MQAR: $MQAR_PAIRS pairs, $(setting "$OUT/$(echo $MODELS | cut -d' ' -f1)/mqar.conf" steps) steps x $(tokens_per_step "$OUT/$(echo $MODELS | cut -d' ' -f1)/mqar.conf") tokens per run; lrs $MQAR_LRS; eval at pairs $MQAR_EVAL_PAIRS"
        [ ! -s "$OUT/match.txt" ] || echo "  $(cat "$OUT/match.txt")"
        echo
        printf '%-5s %-8s %-7s %-5s %-8s %14s %24s %8s\n' task model lr seed status tokens_left "tok/s" "est s"
        tail -n +2 "$OUT/plan.tsv" | while IFS="$(printf '\t')" read -r a b c d e f g h; do
            printf '%-5s %-8s %-7s %-5s %-8s %14s %24s %8s\n' "$a" "$b" "$c" "$d" "$e" "$f" "$g" "$h"
        done
        echo
        tail -n +2 "$OUT/plan.tsv" | awk -F'\t' -v call="$CALL_S" -v g="$(echo "$GPUS" | wc -w)" '
            { runs++; if ($5 == "done") done++; if ($5 == "failed") failed++; if ($5 == "skip") skip++
              if ($5 == "maybe") maybe++; tok += $6; s += $8 }
            END {
                if (g < 1) g = 1
                printf "runs: %d (%d done, %d failed, %d to run", runs, done, failed, runs - done - failed - skip
                if (maybe) printf ", %d of them only if a sweep grows to them", maybe
                if (skip) printf "; %d lrs skipped: their sweep finished without them", skip
                printf "); tokens to train: %.1fM\n", tok / 1e6
                printf "estimated time: %.0f s (%.1f min) on %d GPU(s)", s / g, s / g / 60, g
                printf "; about %d invocation(s) of %d s (BUDGET)\n", (s > 0) ? int(s / g / call) + 1 : 0, call
            }'
        [ "$LR_SWEEP" != grow ] || echo "(LR_SWEEP=grow: each sweep from its middle lr outwards until its best has a finished run on each side)"
        echo "(\"? \" lr: the best lr of the sweep, known once its runs are done; tok/s estimated"
        echo " until a run of that model measured its own; $OVERHEAD_S s per run added for start-up,"
        echo " validation, checkpoints and evaluation)"
    } | tee "$OUT/plan.txt"
}
if [ "$PLAN" = 1 ]; then plan; exit 0; fi

# ---- run the jobs: phase 1, then phase 2; on several GPUs, job i on worker i mod n ----
for t in $RUN_TASKS; do
    [ "$t" = lm ] || continue
    td=$(setting "$OUT/$(echo $MODELS | cut -d' ' -f1)/lm.conf" train_data)
    # shellcheck disable=SC2086
    ls $td > /dev/null 2>&1 || { echo "ablate: no shards match train_data = $td (make data, or make data CORPUS=prose)" >&2; exit 1; }
done
run_list() {  # FILE PHASE: run its jobs (OUT/.stopped when the budget ended one)
    n=$(echo "$GPUS" | wc -w)
    if [ "$n" -le 1 ]; then
        [ -z "$GPUS" ] || export CUDA_VISIBLE_DEVICES=$GPUS
        worker 0 1 "$1" "$2"
        return
    fi
    w=0
    for g in $GPUS; do
        CUDA_VISIBLE_DEVICES=$g worker $w "$n" "$1" "$2" &
        w=$((w + 1))
    done
    wait
}
worker() {  # INDEX COUNT FILE PHASE
    i=0
    # LR_SWEEP=grow: the states of this pass, read again after each run this worker finishes;
    # an lr about to be run is asked afresh (another GPU's worker may have moved its best)
    states=$OUT/.lr_states.$1
    [ "$4" != 1 ] || [ "$LR_SWEEP" != grow ] || lr_states_to "$states"
    while read -r task tag lr seed; do
        [ $((i % $2)) = "$1" ] || { i=$((i + 1)); continue; }
        i=$((i + 1))
        [ "$lr" != "?" ] || continue
        # LR_SWEEP=grow: phase 1 runs an lr only once the model's runs so far call for it
        # (a finished run still goes through run_job: its identity check)
        if [ "$4" = 1 ] && [ "$LR_SWEEP" = grow ]; then
            st=$(lr_state_in "$states" "$task" "$tag" "$lr")
            [ "$st" != needed ] || st=$(lr_state "$task" "$tag" "$lr")
            case $st in skip|maybe) continue;; esac
        fi
        d=$OUT/$tag/$task/lr${lr}_s$seed
        finished=0
        [ ! -f "$d/done" ] && [ ! -f "$d/failed" ] || finished=1
        # not `set +e; run_job; rc=$?`: run_job turns errexit back on after its training
        # command, so its `return 2` (stopped by the budget) would end the whole script
        # before the tables and the EXPORT copy; on the left of `||` errexit does not apply
        # FIT: a run that would not finish in the budget left is not started (on the device
        # its checkpoint would not outlive the machine); a shorter one after it may be
        if [ -n "$BUDGET" ] && [ "$FIT" = 1 ]; then
            est=$(job_estimate "$task" "$tag" "$lr" "$seed" | awk '{print $3}')
            if [ "$est" -gt "$(left)" ]; then
                say "$task $tag lr $lr seed $seed: not started: about $est s to train, $(left) s of the budget left (FIT=1)"
                touch "$OUT/.unfit"
                continue
            fi
        fi
        rc=0
        run_job "$task" "$tag" "$lr" "$seed" < /dev/null || rc=$?
        # a run finished in this pass: with LR_SWEEP=grow it may call for another lr
        if [ $finished = 0 ] && { [ -f "$d/done" ] || [ -f "$d/failed" ]; }; then
            touch "$OUT/.progress"
            [ "$4" != 1 ] || [ "$LR_SWEEP" != grow ] || lr_states_to "$states"
        fi
        if [ $rc = 3 ]; then touch "$OUT/.refused"; exit 3; fi
        if [ $rc = 2 ]; then touch "$OUT/.stopped"; break; fi
    done < "$3"
}
rm -f "$OUT/.stopped" "$OUT/.refused" "$OUT/.unfit" "$OUT/.progress"
phase1 > "$OUT/phase1.jobs"
# phase 1 again while a pass finished a run (LR_SWEEP=grow: the lrs it called for; every run
# already finished, the pass is only the identity checks)
while :; do
    rm -f "$OUT/.progress"
    run_list "$OUT/phase1.jobs" 1
    [ ! -f "$OUT/.refused" ] || exit 3
    [ "$LR_SWEEP" = grow ] && [ -f "$OUT/.progress" ] && [ ! -f "$OUT/.stopped" ] || break
done
rm -f "$OUT/.progress" "$OUT"/.lr_states.*
if [ ! -f "$OUT/.stopped" ]; then
    phase2 > "$OUT/phase2.jobs"
    run_list "$OUT/phase2.jobs" 2
    [ ! -f "$OUT/.refused" ] || exit 3
fi

# ---- tables and plots ----
if [ "$PLOT" = 0 ]; then "$PY" scripts/ablate_summary.py table "$OUT" --no-plot; else "$PY" scripts/ablate_summary.py table "$OUT"; fi
cat "$OUT/results.md"
if [ -n "${EXPORT:-}" ]; then
    case "$EXPORT" in
    *.tgz)
        mkdir -p "$(dirname "$EXPORT")"
        (cd "$(dirname "$OUT")" && tar --exclude=checkpoints -czf - "$(basename "$OUT")") > "$EXPORT.part"
        mv "$EXPORT.part" "$EXPORT"
        say "archived $OUT without checkpoints as $EXPORT ($(wc -c < "$EXPORT") bytes)" ;;
    *)
        mkdir -p "$EXPORT"
        (cd "$(dirname "$OUT")" && tar --exclude=checkpoints -cf - "$(basename "$OUT")") | tar -C "$EXPORT" -xf -
        say "copied $OUT without checkpoints to $EXPORT/$(basename "$OUT")" ;;
    esac
fi
if [ -f "$OUT/.stopped" ] || [ -f "$OUT/.unfit" ]; then
    say "the budget ended the invocation: run the same command again to continue"
    exit 0
fi
nfail=$(find "$OUT" -name failed | wc -l)
[ "$nfail" -eq 0 ] || { say "$nfail run(s) failed (a diverged lr is expected at the sweep's edge; see runs.tsv)"; exit 1; }
say "all runs done"
