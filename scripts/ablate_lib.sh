# Shell functions shared by scripts/ablate_ratio.sh and scripts/real_run_hybrid.sh (sourced,
# not run): config files edited key by key, `hybrid inspect` read back, the KDA:MLA layer
# pattern of a ratio, the GPT-2 of matched active parameters, what a run will use. POSIX sh;
# $HYBRID is the CLI, $ARGS the extra `hybrid train` options (setting, tokens_per_step).

# conf_set FILE KEY VALUE: FILE's KEY line (any, with its comment) replaced by `KEY = VALUE`,
# appended at the end. An empty VALUE writes `KEY =` (an empty string: train_data for MQAR).
conf_set() {
    sed "/^[[:space:]]*$2[[:space:]]*=/d" "$1" > "$1.tmp.$$" && mv "$1.tmp.$$" "$1"
    if [ -n "$3" ]; then echo "$2 = $3" >> "$1"; else echo "$2 =" >> "$1"; fi
}

# conf_get FILE KEY: the value of KEY in FILE (the comment and surrounding blanks removed)
conf_get() {
    sed -n "s/^[[:space:]]*$2[[:space:]]*=[[:space:]]*\([^#]*\).*/\1/p" "$1" | tail -n 1 | sed 's/[[:space:]]*$//'
}

# conf_merge FILE FRAGMENT: every `key = value` line of FRAGMENT set in FILE (as conf_set
# does: FILE's lines of those keys removed, FRAGMENT's appended without their comments)
conf_merge() {
    awk 'function key(l) { sub(/^[ \t]*/, "", l); sub(/[ \t]*=.*/, "", l); return l }
        FNR == NR { sub(/#.*/, ""); if ($0 !~ /=/) next; k = key($0); v = $0; sub(/^[^=]*=[ \t]*/, "", v)
                    sub(/[ \t]*$/, "", v); if (!(k in val)) order[++n] = k; val[k] = v; next }
        !($0 ~ /=/ && key($0) in val) { print }
        END { for (i = 1; i <= n; i++) print order[i] " =" (val[order[i]] == "" ? "" : " " val[order[i]]) }' "$2" "$1" > "$1.tmp.$$" &&
        mv "$1.tmp.$$" "$1"
}

# inspect_field INSPECT.txt FIELD: one number from `hybrid inspect` output.
#   params, embedding, nonemb, active, active_nonemb (= the totals for a dense model),
#   mflop (training FLOPs per token), d_model, layers (the pattern, e.g. "KKKM x4")
inspect_field() {
    case $2 in
        params) sed -n 's/^parameters: \([0-9]*\) total.*/\1/p' "$1" ;;
        embedding) sed -n 's/^parameters: .*, \([0-9]*\) in embeddings.*/\1/p' "$1" ;;
        nonemb) sed -n 's/^parameters: .*, \([0-9]*\) non-embedding$/\1/p' "$1" ;;
        active)
            v=$(sed -n 's/^active per token.*: \([0-9]*\) (.*/\1/p' "$1")
            [ -n "$v" ] && echo "$v" || inspect_field "$1" params ;;
        active_nonemb)
            v=$(sed -n 's/^active per token.*, \([0-9]*\) non-embedding.*/\1/p' "$1")
            [ -n "$v" ] && echo "$v" || inspect_field "$1" nonemb ;;
        mflop) sed -n 's/^training FLOPs.*(\([0-9.]*\) MFLOP)$/\1/p' "$1" ;;
        d_model) sed -n '1s/.* d_model \([0-9]*\) .*/\1/p' "$1" ;;
        layers) sed -n '1s/^layers: \(.*\) ([0-9]*)  d_model.*/\1/p' "$1" ;;
        *) echo "inspect_field: unknown field $2" >&2; return 1 ;;
    esac
}

# models_row TAG RATIO INSPECT [INSPECT_MQAR [VARIANT]]: a line of models.tsv
# (scripts/ablate_summary.py reads it; models_header is its first line); RATIO "-" for the
# GPT-2 baseline; VARIANT "-" for a model of the family as configured, "rope" for the 0:1 arm
# with RoPE on its MLA (scripts/ablate_ratio.sh, ROPE_ARM), which shares its ratio with 0:1
models_header() { printf 'model\tlayers\tparams\tactive\tactive_nonemb\tmflop_lm\tmflop_mqar\tratio\tvariant\n'; }
models_row() {
    mq=-
    [ -z "${4:-}" ] || [ ! -f "$4" ] || mq=$(inspect_field "$4" mflop)
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$1" "$(inspect_field "$3" layers)" "$(inspect_field "$3" params)" \
        "$(inspect_field "$3" active)" "$(inspect_field "$3" active_nonemb)" "$(inspect_field "$3" mflop)" "$mq" "$2" \
        "${5:--}"
}

# ratio_pattern RATIO LAYERS: "3:1" 16 -> "KKKM x4" (KDA:MLA; the period a+b must divide LAYERS)
ratio_pattern() {
    a=${1%%:*} b=${1##*:}
    case "$a$b" in *[!0-9]*|'') echo "bad ratio '$1' (want KDA:MLA like 3:1)" >&2; return 1;; esac
    p=$((a + b))
    [ "$p" -gt 0 ] && [ $(($2 % p)) -eq 0 ] || { echo "ratio $1 does not tile $2 layers" >&2; return 1; }
    unit=""
    i=0; while [ $i -lt "$a" ]; do unit="${unit}K"; i=$((i + 1)); done
    i=0; while [ $i -lt "$b" ]; do unit="${unit}M"; i=$((i + 1)); done
    echo "$unit x$(($2 / p))"
}

# gpt2_conf BASE OUT D L H: OUT = BASE with its model keys replaced by GPT-2's (A layers,
# LayerNorm, learned positions, GELU MLP of 4d, biases, no MoE, plain residuals) at width D,
# L layers and H heads. Everything else (vocabulary, context, tying, init and every training
# key) stays BASE's, so the baseline trains exactly as the family does.
gpt2_conf() {
    cp "$1" "$2"
    conf_set "$2" layers "A x$4"
    conf_set "$2" d_model "$3"
    conf_set "$2" n_head "$5"
    conf_set "$2" norm layernorm
    conf_set "$2" position learned
    conf_set "$2" mlp gelu
    conf_set "$2" mlp_hidden $(($3 * 4))
    conf_set "$2" bias true
    conf_set "$2" moe_experts 0
    conf_set "$2" attn_res_block 0
}

# gpt2_match BASE TARGET OUT D H [--key value ...]: the depth L whose GPT-2 (gpt2_conf at
# width D, H heads, with the given overrides) has the active non-embedding parameter count
# closest to TARGET, from `hybrid inspect` at 1 and 2 layers (the count is linear in L);
# writes OUT (that config) and OUT.inspect, prints L. With MATCH_FRAG set, each inspected
# config is OUT with that fragment merged (a task's seq_len, vocabulary), OUT itself is not.
gpt2_match() {
    base=$1 target=$2 out=$3 d=$4 h=$5
    shift 5
    c2=
    for l in 1 2 0; do
        [ "$l" != 0 ] || l=$(awk -v t="$target" -v c="$c1" -v s="$((c2 - c1))" \
            'BEGIN { l = 1 + int((t - c) / s + 0.5); print (l < 1) ? 1 : l }')
        gpt2_conf "$base" "$out" "$d" "$l" "$h"
        m=${out%.conf}.match.conf
        cp "$out" "$m"
        [ -z "${MATCH_FRAG:-}" ] || conf_merge "$m" "$MATCH_FRAG"
        "$HYBRID" inspect "$m" "$@" > "$out.inspect" 2>&1 || { cat "$out.inspect" >&2; return 1; }
        rm -f "$m"
        c1=${c2:-} c2=$(inspect_field "$out.inspect" active_nonemb)
    done
    echo "$l"
}

# arg_value KEY: the value of --KEY among the extra `hybrid train` options in $ARGS, if given
arg_value() {
    k=$1
    # shellcheck disable=SC2086
    set -- $ARGS
    while [ $# -gt 1 ]; do [ "$1" = "--$k" ] && { echo "$2"; return; }; shift; done
}

# setting CONF KEY: what a run of CONF with the options $ARGS uses for KEY (the option if given,
# else the config's; empty when neither sets it, i.e. the trainer's default)
setting() {
    v=$(arg_value "$2")
    if [ -n "$v" ]; then echo "$v"; else conf_get "$1" "$2"; fi
}

# tokens_per_step CONF: total_batch_size, or one micro-batch (batch_size x seq_len) when 0
tokens_per_step() {
    tb=$(setting "$1" total_batch_size)
    [ -n "$tb" ] && [ "$tb" != 0 ] || tb=$(($(setting "$1" batch_size) * $(setting "$1" seq_len)))
    echo "$tb"
}

# last_step METRICS: the step of the last training line of a metrics.jsonl (empty if none)
last_step() { [ -f "$1" ] && grep '"loss"' "$1" | tail -n 1 | sed -n 's/^{"step": \([0-9]*\),.*/\1/p'; }

# pct A B: A relative to B in percent, signed, one decimal ("+2.0")
pct() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%+.1f", 100 * (a - b) / b }'; }
