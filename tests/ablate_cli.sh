#!/bin/sh
# The ratio-ablation runner (scripts/ablate_ratio.sh, docs/ablation.md) end to end on the CPU at
# toy sizes: three KDA:MLA ratios over 2 layers of width 64 (MoE) and the matched GPT-2, a
# two-lr sweep and two seeds, on synthetic shards and on MQAR with evaluations at three pair
# counts; then the table's rows, the plan, that a second invocation with the 0:1 RoPE arm
# added (ROPE_ARM=1) trains only the arm's runs and leaves the other rows as they were, that
# RUN_TASKS and RUN_MODELS limit an invocation to one task's or some models' runs, that a
# run killed after a checkpoint resumes to the same numbers, and that BUDGET stops launching runs.
# Run from the repository root after ./hybrid is built (HYBRID=path overrides).
set -u
hybrid=${HYBRID:-./hybrid}
[ -x "$hybrid" ] || { echo "FAIL: $hybrid is not built"; exit 1; }
case $hybrid in /*) ;; *) hybrid=$(pwd)/$hybrid;; esac
tmp=$(mktemp -d /tmp/hybrid_ablate.XXXXXX)
trap '[ -n "${KEEP_TMP:-}" ] || rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

# write_shard FILE N SEED: a token shard (scripts/shard_io.py) of N tokens below 64 in a noisy
# cycle that a model can learn
write_shard() {
    /usr/bin/python3 - "$@" <<'PY'
import random, sys
sys.path.insert(0, "scripts")
from shard_io import write_shard
path, n, seed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
r, t, toks = random.Random(seed), 0, []
for _ in range(n):
    t = (t * 7 + 3 + (r.randrange(64) if r.random() < 0.25 else 0)) % 64
    toks.append(t)
write_shard(path, toks)
PY
}
mkdir -p "$tmp/data"
write_shard "$tmp/data/t_train_000000.bin" 20000 1
write_shard "$tmp/data/t_val_000000.bin" 3000 2
[ "$(od -An -tu4 -N12 "$tmp/data/t_train_000000.bin" | tr -s ' ')" = " 20240520 1 20000" ] || fail "shard header"

# every call of the CLI, logged with its arguments: "train ..." or "eval-mqar ..." lines show
# what an invocation did
cat > "$tmp/hybrid" <<EOF
#!/bin/sh
echo "\$*" >> "$tmp/calls"
exec "$hybrid" "\$@"
EOF
chmod +x "$tmp/hybrid"
cat > "$tmp/model.conf" <<'EOF'
d_model = 64
n_head = 2
linear_heads = 2
mla_kv_rank = 32
mla_q_rank = 32
mla_qk_nope_dim = 16
mla_rope_dim = 8
mla_v_dim = 16
mlp_hidden = 128
moe_experts = 4
moe_hidden = 32
moe_shared_hidden = 32
vocab_size = 64
padded_vocab_size = 64
context_length = 64
EOF
cat > "$tmp/lm.conf" <<EOF
batch_size = 2
seq_len = 32
total_batch_size = 64
steps = 4
warmup_steps = 1
val_every = 2
val_batches = 2
checkpoint_every = 2
log_every = 2
sample_tokens = 0
train_data = $tmp/data/t_train_*.bin
val_data = $tmp/data/t_val_*.bin
EOF
cat > "$tmp/mqar.conf" <<'EOF'
vocab_size = 32
padded_vocab_size = 32
seq_len = 32
batch_size = 4
steps = 4
warmup_steps = 1
mqar_train_sequences = 256
mqar_val_sequences = 16
val_every = 2
checkpoint_every = 2
log_every = 2
sample_tokens = 0
EOF
plot=0
/usr/bin/python3 -c "import matplotlib" 2>/dev/null && plot=1
ablate() {  # OUT [VAR=value ...]: the full toy sweep into OUT, console in OUT.log
    o=$1
    shift
    env OUT="$o" HYBRID="$tmp/hybrid" LAYERS=2 RATIOS="0:1 1:1 1:0" BASELINE=gpt2 LRS="2e-3 4e-3" SEEDS="0 1" \
        MODEL_CONF="$tmp/model.conf" LM_CONF="$tmp/lm.conf" MQAR_PAIRS=4 MQAR_CONF="$tmp/mqar.conf" \
        MQAR_EVAL_PAIRS="2 4 8" MQAR_EVAL_SEQUENCES=16 PLOT=$plot "$@" \
        sh scripts/ablate_ratio.sh configs/kl-xs-3-1.conf --threads 1 > "$o.log" 2>&1
}
calls() { grep -c "^$1 " "$tmp/calls" 2>/dev/null || true; }
out=$tmp/sweep

# the plan: every run listed, nothing trained
: > "$tmp/calls"
ablate "$out" PLAN=1 || { cat "$out.log"; fail "PLAN=1 exited with an error"; }
grep -q "^runs: 24 (0 done, 0 failed, 24 to run); tokens to train: 0.0M" "$out.log" || { cat "$out.log"; fail "plan totals"; }
grep -q "GPT-2 baseline: d_model 64, 1 layers, 1 heads" "$out.log" || fail "plan: the GPT-2 match"
[ "$(calls train)" = 0 ] || fail "PLAN=1 trained"
echo "plan: 24 runs (16 of the lr sweep + 8 of the second seed), nothing trained"

# RUN_TASKS: a task this sweep does not have is refused before anything is made
ablate "$tmp/bad" RUN_TASKS=text && fail "RUN_TASKS=text was accepted"
grep -q "RUN_TASKS names 'text', not a task of this sweep (lm mqar); mqar needs MQAR_PAIRS > 0" "$tmp/bad.log" || { cat "$tmp/bad.log"; fail "RUN_TASKS=text: no clear error"; }
ablate "$tmp/bad" RUN_TASKS=mqar MQAR_PAIRS=0 && fail "RUN_TASKS=mqar without MQAR was accepted"
[ "$(calls train)" = 0 ] || fail "a refused RUN_TASKS trained"

# the whole sweep, in two invocations: RUN_TASKS=mqar trains the MQAR runs only (both phases),
# then a plain invocation the text runs
: > "$tmp/calls"
ablate "$out" RUN_TASKS=mqar || { tail -n 30 "$out.log"; fail "RUN_TASKS=mqar exited with an error"; }
[ "$(calls train)" = 12 ] || fail "RUN_TASKS=mqar trained $(calls train) runs, not the 12 MQAR runs"
[ "$(grep '^train ' "$tmp/calls" | grep -c '/mqar/')" = 12 ] || fail "RUN_TASKS=mqar trained a text run"
[ -z "$(ls -d "$out"/*/lm/lr* 2>/dev/null)" ] || fail "RUN_TASKS=mqar made text run folders"
ablate "$out" || { tail -n 30 "$out.log"; fail "the sweep exited with an error"; }
[ "$(grep '^train ' "$tmp/calls" | tail -n 12 | grep -c '/lm/')" = 12 ] || fail "the second invocation did not train the 12 text runs"
[ "$(calls train)" = 24 ] || fail "the sweep trained $(calls train) runs, not 24 (2 lrs + 1 seed, 4 models, 2 tasks)"
[ "$(calls eval-mqar)" = 36 ] || fail "$(calls eval-mqar) MQAR evaluations, not 12 runs x 3 pair counts"
tsv=$out/results.tsv
[ "$(wc -l < "$tsv")" = 5 ] || fail "results.tsv: $(wc -l < "$tsv") lines, not a header and 4 models"
[ "$(cut -f1 "$tsv" | tr '\n' ,)" = "model,KDA:MLA 0:1,KDA:MLA 1:1,KDA:MLA 1:0,GPT-2," ] || fail "results.tsv rows: $(cut -f1 "$tsv")"
for c in params active_nonemb mflop_per_token tok_per_s lm_val_mean lm_val_min lm_val_max mqar_acc_2_mean mqar_acc_8_max runs_done; do
    head -n 1 "$tsv" | tr '\t' '\n' | grep -qx "$c" || fail "results.tsv has no column $c"
done
awk -F'\t' 'NR > 1 && ($(NF - 2) != 6 || $(NF - 1) != 0 || $NF != 6) { exit 1 }' "$tsv" || fail "a model has not 6 of 6 runs done"
awk -F'\t' 'NR == 1 { for (i = 1; i <= NF; i++) c[$i] = i }
    NR > 1 && ($c["lm_seeds"] != 2 || $c["mqar_seeds"] != 2 || $c["lm_val_mean"] !~ /^[0-9]+\.[0-9]+$/ ||
               $c["mqar_acc_4_mean"] !~ /^[01]\.[0-9]+$/) { exit 1 }' "$tsv" || fail "results.tsv values: $(cat "$tsv")"
[ "$(grep -c '^| KDA:MLA \|^| GPT-2 ' "$out/results.md")" = 12 ] || fail "results.md: not 4 models in each of its 3 tables"
[ "$(tail -n +2 "$out/runs.tsv" | wc -l)" = 32 ] || fail "runs.tsv: not 32 runs"
[ "$(grep -c '	done	' "$out/runs.tsv")" = 24 ] || fail "runs.tsv: not 24 runs done"
ls "$out"/*/mqar/*/mqar_eval.jsonl > /dev/null || fail "no mqar_eval.jsonl"
for f in "$out"/*/mqar/*/mqar_eval.jsonl; do [ "$(wc -l < "$f")" = 3 ] || fail "$f: not 3 evaluations"; done
if [ $plot = 1 ]; then
    for p in loss_curves val_vs_ratio mqar_vs_ratio; do [ -s "$out/$p.png" ] || fail "no $p.png"; done
fi
echo "sweep: 24 runs, 36 MQAR evaluations, results.tsv/md with 4 models$([ $plot = 1 ] && echo ", 3 PNGs")"

# again, now with the 0:1 RoPE arm (ROPE_ARM=1, the GPU preset's default; off by default here,
# as above: the 0:1 model with mla_rope = true, one more model of the same sweep): the plan and
# the invocation see the 24 finished runs as done, and only the arm's own runs are trained and
# evaluated; no run folder is refused, and the other rows and the GPT-2 match (to 0:1 here,
# the first ratio) stay as they were
cp "$tsv" "$tmp/first.tsv"
cp "$out/match.txt" "$tmp/match.txt"
rm -f "$out/val_vs_ratio.png" "$out/mqar_vs_ratio.png"
: > "$tmp/calls"
ablate "$out" ROPE_ARM=1 PLAN=1 || { cat "$out.log"; fail "ROPE_ARM=1 PLAN=1 exited with an error"; }
grep -q "^runs: 30 (24 done, 0 failed, 6 to run)" "$out.log" || { cat "$out.log"; fail "ROPE_ARM=1: plan totals"; }
ablate "$out" ROPE_ARM=1 || { tail -n 30 "$out.log"; fail "ROPE_ARM=1 exited with an error"; }
[ "$(calls train)" = 6 ] || fail "ROPE_ARM=1 trained $(calls train) runs, not the arm's 6 (2 lrs + 1 seed, 2 tasks)"
[ "$(calls eval-mqar)" = 9 ] || fail "ROPE_ARM=1: $(calls eval-mqar) MQAR evaluations, not 3 runs x 3 pair counts"
[ "$(grep '^train \|^eval-mqar ' "$tmp/calls" | grep -vc '/0-1-rope/')" = 0 ] ||
    fail "the second invocation trained or evaluated a finished run again"
grep -q "^mla_rope = true$" "$out/0-1-rope/lm.conf" || fail "the RoPE arm's config has no mla_rope = true"
grep -q "^mla_rope *= *false" "$out/0-1/lm.conf" || fail "ROPE_ARM=1 changed the 0:1 model's mla_rope"
for t in lm mqar; do
    [ -z "$(diff "$out/0-1/$t.conf" "$out/0-1-rope/$t.conf" | grep '^[<>]' | grep -v '^. *\(mla_rope\|out_dir\) *=')" ] ||
        fail "the RoPE arm's $t.conf differs from 0:1's in more than mla_rope (and out_dir)"
done
# the same init and batches, so only the rotation can make the first losses differ
first_loss() { sed -n '1s/.*"loss": \([0-9.]*\),.*/\1/p' "$out/$1/lm/lr2e-3_s0/metrics.jsonl"; }
[ -n "$(first_loss 0-1-rope)" ] && [ "$(first_loss 0-1-rope)" != "$(first_loss 0-1)" ] ||
    fail "the RoPE arm's first loss $(first_loss 0-1-rope) is 0:1's $(first_loss 0-1): mla_rope had no effect"
cmp -s "$out/match.txt" "$tmp/match.txt" || fail "ROPE_ARM=1 changed the GPT-2 match: $(cat "$out/match.txt")"
[ "$(cut -f1 "$tsv" | tr '\n' ,)" = "model,KDA:MLA 0:1,KDA:MLA 0:1 + RoPE,KDA:MLA 1:1,KDA:MLA 1:0,GPT-2," ] ||
    fail "ROPE_ARM=1: results.tsv rows: $(cut -f1 "$tsv")"
grep -v "RoPE" "$tsv" | cmp -s - "$tmp/first.tsv" ||
    { diff "$tmp/first.tsv" "$tsv"; fail "the second invocation changed the other models' rows of results.tsv"; }
awk -F'\t' 'NR == 1 { for (i = 1; i <= NF; i++) c[$i] = i }
    $1 ~ /RoPE/ { n++; if ($c["ratio"] != "0:1" || $c["runs_done"] != 6 || $c["lm_seeds"] != 2 ||
                            $c["lm_val_mean"] !~ /^[0-9]+\.[0-9]+$/ || $c["mqar_acc_4_mean"] !~ /^[01]\.[0-9]+$/) exit 1 }
    END { if (n != 1) exit 1 }' "$tsv" || fail "results.tsv: the RoPE row: $(grep RoPE "$tsv")"
[ "$(grep -c '^| KDA:MLA 0:1 + RoPE ' "$out/results.md")" = 3 ] || fail "results.md: the RoPE arm is not a row of its 3 tables"
if [ $plot = 1 ]; then
    for p in val_vs_ratio mqar_vs_ratio; do [ -s "$out/$p.png" ] || fail "ROPE_ARM=1: no $p.png"; done
fi
echo "resume: a second invocation skips all 24 runs; with ROPE_ARM=1 it trains the RoPE arm's 6 only, its own row"

# a run killed after its step-2 checkpoint (in step 4: its last step, final checkpoint and
# marker gone) resumes from step 2 and ends with the same numbers (resume is bit-exact)
run=$out/1-1/lm/lr4e-3_s0
[ -d "$run/checkpoints/step_00000002" ] || fail "no step-2 checkpoint in $run"
rm -rf "$run/done" "$run/checkpoints/step_00000004"
awk '!/^{"step": 4,/' "$run/metrics.jsonl" > "$tmp/m" && cp "$tmp/m" "$run/metrics.jsonl"
: > "$tmp/calls"
ablate "$out" || { tail -n 30 "$out.log"; fail "the resuming invocation exited with an error"; }
[ "$(calls train)" = 1 ] || fail "resuming one run: $(calls train) trainings"
grep -q "lm 1-1 lr 4e-3 seed 0: training from step 2 to step 4" "$out.log" || fail "the runner did not resume from step 2"
# every column but tok/s (the 8th, a timing)
cut -f1-7,9- "$tsv" > "$tmp/again.tsv"
cut -f1-7,9- "$tmp/first.tsv" | cmp -s - "$tmp/again.tsv" ||
    { diff "$tmp/first.tsv" "$tsv"; fail "the resumed run changed results.tsv"; }
echo "resume: a run killed after step 2 continues from its checkpoint to the same final losses"

# a sweep that gains an lr: its tables keep every row, the best lr of the lrs run so far marked
# as such, while the seed-1 runs wait for the whole sweep (the strict best, which phase 2 uses);
# the sweep's own folder, last of the tests on it
: > "$tmp/calls"
ablate "$out" LRS="1e-3 2e-3 4e-3" BUDGET=0 PLOT=0 || { tail -n 30 "$out.log"; fail "LRS with a new lr, BUDGET=0: an error"; }
[ "$(calls train)" = 0 ] || fail "BUDGET=0 trained"
awk -F'\t' 'NR == 1 { for (i = 1; i <= NF; i++) c[$i] = i }
    NR > 1 && ($c["lm_best_lr"] !~ /^[24]e-3$/ || $c["lm_lr_note"] !~ /so far: 2 of 3 lrs run/ ||
               $c["lm_val_mean"] !~ /^[0-9]+\.[0-9]+$/ || $c["mqar_best_lr"] == "-") { exit 1 }' "$tsv" ||
    fail "an extended sweep's table lost its rows or its 'so far' note: $(cat "$tsv")"
[ -z "$(/usr/bin/python3 scripts/ablate_summary.py best "$out" lm 1-1)" ] ||
    fail "the strict best lr of an unfinished sweep is not empty (phase 2 would train seed 1 too early)"
echo "extended sweep: the tables keep every model at its best lr so far, marked; phase 2 waits"

# BUDGET: no run starts once it is spent; the next invocation does the rest. The old
# behaviour too: no LRS, SEEDS or baseline (the config's lr and seed, one run per ratio)
small() {
    env OUT="$tmp/small" HYBRID="$tmp/hybrid" LAYERS=2 RATIOS="0:1 1:1" MODEL_CONF="$tmp/model.conf" \
        LM_CONF="$tmp/lm.conf" PLOT=0 "$@" sh scripts/ablate_ratio.sh configs/hybrid-tiny.conf --threads 1 \
        > "$tmp/small.log" 2>&1
}
: > "$tmp/calls"
small BUDGET=0 || { cat "$tmp/small.log"; fail "BUDGET=0 exited with an error"; }
[ "$(calls train)" = 0 ] || fail "BUDGET=0 trained"
grep -q "the budget ended the invocation" "$tmp/small.log" || fail "BUDGET=0: no message"
small RUN_MODELS=2-1 && fail "RUN_MODELS=2-1 (not a model of the sweep) was accepted"
grep -q "RUN_MODELS names '2-1', not a model of this sweep (0-1 1-1)" "$tmp/small.log" || { cat "$tmp/small.log"; fail "RUN_MODELS=2-1: no clear error"; }
small EXPORT="$tmp/small/copy.tgz" && fail "an EXPORT inside OUT was accepted"
grep -q "ablate: EXPORT=$tmp/small/copy.tgz lies inside OUT=$tmp/small" "$tmp/small.log" || { cat "$tmp/small.log"; fail "EXPORT inside OUT: no clear error"; }
small EXPORT="$tmp/small" && fail "EXPORT = OUT was accepted"
[ "$(calls train)" = 0 ] || fail "a refused EXPORT trained"
small RUN_MODELS=1-1 || { cat "$tmp/small.log"; fail "RUN_MODELS=1-1 exited with an error"; }
[ "$(calls train)" = 1 ] && grep -q '^train .*/1-1/lm/' "$tmp/calls" || fail "RUN_MODELS=1-1 trained $(calls train) runs, not 1-1's one"
[ "$(wc -l < "$tmp/small/results.tsv")" = 3 ] || fail "RUN_MODELS=1-1: results.tsv has not both models"
small || { cat "$tmp/small.log"; fail "the small sweep exited with an error"; }
[ "$(calls train)" = 2 ] || fail "the small sweep trained $(calls train) runs in all, not 2"
[ -f "$tmp/small/1-1/lm/lr3e-3_s1337/done" ] || fail "the small sweep's run is not lr 3e-3 (hybrid-tiny's), seed 1337"
[ "$(wc -l < "$tmp/small/results.tsv")" = 3 ] || fail "small results.tsv: not 2 models"
echo "budget: BUDGET=0 starts nothing; RUN_MODELS=1-1 trains 1-1's run only, the next invocation the other; config lr and seed by default"

# FIT=1: a run whose estimated time exceeds the budget left is not started (the estimate is
# PLAN's: tokens / tok/s + OVERHEAD_S, so OVERHEAD_S sets it here); without FIT it starts
: > "$tmp/calls"
small OUT="$tmp/fit" BUDGET=60 FIT=1 OVERHEAD_S=1000 || { cat "$tmp/small.log"; fail "FIT=1 with no run fitting exited with an error"; }
[ "$(calls train)" = 0 ] || fail "FIT=1 started a run estimated at over 1000 s with a budget of 60"
grep -q "1-1 lr 3e-3 seed 1337: not started: about 10[0-9][0-9] s to train, [0-9]* s of the budget left (FIT=1)" "$tmp/small.log" ||
    { cat "$tmp/small.log"; fail "FIT=1: no message for the run not started"; }
grep -q "the budget ended the invocation" "$tmp/small.log" || fail "FIT=1: no 'run again' message"
small OUT="$tmp/fit" BUDGET=3000 FIT=1 OVERHEAD_S=1000 || { cat "$tmp/small.log"; fail "FIT=1 with every run fitting exited with an error"; }
[ "$(calls train)" = 2 ] || fail "FIT=1 with a budget of 3000 s trained $(calls train) runs of ~1000 s estimated, not 2"
: > "$tmp/calls"
small OUT="$tmp/nofit" BUDGET=60 OVERHEAD_S=1000 || { cat "$tmp/small.log"; fail "BUDGET without FIT exited with an error"; }
[ "$(calls train)" = 2 ] || fail "without FIT the runs were not started"
echo "FIT: a run estimated beyond the budget left is not started; with room, or without FIT, it is"

# a finished run made with other settings is refused, not skipped or mixed
: > "$tmp/calls"
small STEPS=5 && fail "a run folder of 4 steps was accepted for STEPS=5"
grep -q "was made with another config or options" "$tmp/small.log" || { cat "$tmp/small.log"; fail "STEPS=5: no refusal"; }
[ "$(calls train)" = 0 ] || fail "STEPS=5 trained"
echo "identity: a run folder of other settings is refused"

# FROM: a finished sweep's folder seeds a new OUT (the device machine's fresh checkout resuming a
# committed sweep): nothing trains again; an OUT that already holds a sweep is not overwritten;
# a FROM that is no sweep folder is refused before anything trains
: > "$tmp/calls"
small OUT="$tmp/seeded" FROM="$tmp/small" || { cat "$tmp/small.log"; fail "FROM: exited with an error"; }
grep -q "ablate: OUT=$tmp/seeded seeded from FROM=$tmp/small" "$tmp/small.log" || { cat "$tmp/small.log"; fail "FROM: not seeded"; }
[ "$(calls train)" = 0 ] || fail "FROM: the seeded sweep's finished runs trained again"
[ "$(wc -l < "$tmp/seeded/results.tsv")" = 3 ] || fail "FROM: the seeded results.tsv has not both models"
echo "marker" > "$tmp/seeded/kept"
small OUT="$tmp/seeded" FROM="$tmp/small" || { cat "$tmp/small.log"; fail "FROM over a sweep: exited with an error"; }
grep -q "already holds a sweep: FROM=$tmp/small not copied over it" "$tmp/small.log" || fail "FROM over a sweep: no note"
[ -f "$tmp/seeded/kept" ] || fail "FROM over a sweep: OUT was replaced"
small OUT="$tmp/seeded2" FROM="$tmp/nowhere" && fail "FROM without runs.tsv was accepted"
grep -q "ablate: FROM=$tmp/nowhere holds no runs.tsv" "$tmp/small.log" || { cat "$tmp/small.log"; fail "FROM without runs.tsv: no clear error"; }
[ ! -e "$tmp/seeded2" ] || fail "a refused FROM made OUT"
echo "FROM: a committed sweep seeds a fresh OUT; an OUT with a sweep is kept; a non-sweep FROM is refused"

# ... but the same settings in another spelling or another place are the same runs: a finished
# sweep moved to another folder (every out_dir differs), one identity's comments and spaces changed
cp -r "$tmp/small" "$tmp/moved"
f=$(ls "$tmp"/moved/1-1/lm/*/identity)
sed -i -e '1i # a comment added after the run' -e 's/^\([a-z_]*\) = /\1   =   /' "$f"
: > "$tmp/calls"
small OUT="$tmp/moved" || { cat "$tmp/small.log"; fail "a moved sweep folder was refused"; }
[ "$(calls train)" = 0 ] || fail "a moved sweep folder trained again"
[ "$(wc -l < "$tmp/moved/results.tsv")" = 3 ] || fail "the moved sweep's results.tsv has not both models"
echo "identity: a sweep moved to another folder, or an identity respelled, keeps its runs"

# a budget that ends mid-run (the device machine's case): the run stops at a checkpoint, the
# invocation still writes its tables and EXPORT's copy (without checkpoints) and exits 0
sed 's/^steps = .*/steps = 100000/; s/^checkpoint_every = .*/checkpoint_every = 20/' "$tmp/lm.conf" > "$tmp/lm_long.conf"
small OUT="$tmp/cut" LM_CONF="$tmp/lm_long.conf" BUDGET=3 EXPORT="$tmp/export" ||
    { cat "$tmp/small.log"; fail "a budget that ended a run exited with an error"; }
grep -q "stopped by the budget at step [0-9]*; the next invocation resumes it" "$tmp/small.log" ||
    { cat "$tmp/small.log"; fail "BUDGET=3: the run was not stopped mid-way"; }
grep -q "the budget ended the invocation" "$tmp/small.log" || fail "BUDGET=3: no message"
[ -f "$tmp/export/cut/results.md" ] || { cat "$tmp/small.log"; fail "BUDGET=3: EXPORT has no results.md"; }
[ -z "$(find "$tmp/export" -name checkpoints)" ] || fail "EXPORT copied checkpoints"
ls -d "$tmp"/cut/0-1/lm/*/checkpoints/step_* > /dev/null 2>&1 || fail "BUDGET=3: the stopped run left no checkpoint to resume"
echo "budget mid-run: the run stops at a checkpoint, the tables and the EXPORT copy are still written"

# EXPORT=<file>.tgz: one archive (the device returns at most 8 files): the same content
small OUT="$tmp/cut" LM_CONF="$tmp/lm_long.conf" BUDGET=3 EXPORT="$tmp/arch/cut.tgz" ||
    { cat "$tmp/small.log"; fail "EXPORT=.tgz: exited with an error"; }
[ -f "$tmp/arch/cut.tgz" ] && [ ! -e "$tmp/arch/cut.tgz.part" ] || { cat "$tmp/small.log"; fail "EXPORT=.tgz: no archive"; }
tar tzf "$tmp/arch/cut.tgz" > "$tmp/arch.list" || fail "EXPORT=.tgz: not a gzipped tar"
grep -qx "cut/results.md" "$tmp/arch.list" || fail "EXPORT=.tgz: no cut/results.md in the archive"
! grep -q checkpoints "$tmp/arch.list" || fail "EXPORT=.tgz archived checkpoints"
echo "EXPORT=<file>.tgz: one archive of the same, without checkpoints"
# LR_SWEEP=grow, the rule alone (scripts/ablate_summary.py's lr-state and best) on a made-up
# sweep folder: lrs 1e-3 .. 1.6e-2, the final val losses written as finished runs
g=$tmp/grow
mkdir -p "$g"
printf 'base\tx.conf\ntasks\tlm\nlrs\t1e-3 2e-3 4e-3 8e-3 1.6e-2\nmqar_lrs\t1e-3\nseeds\t0 1\nseed_sweep\tbest\nlr_sweep\tgrow\n' > "$g/sweep.tsv"
printf 'model\tlayers\tparams\tactive\tactive_nonemb\tmflop_lm\tmflop_mqar\tratio\tvariant\nm\tK\t1\t1\t1\t1\t1\t1:0\t-\n' > "$g/models.tsv"
finish() {  # LR VAL: a finished seed-0 run of model m at LR with that final val loss
    mkdir -p "$g/m/lm/lr$1_s0"
    printf '{"step": 1, "loss": 5.0}\n{"step": 1, "val_loss": %s}\n' "$2" > "$g/m/lm/lr$1_s0/metrics.jsonl"
    echo finished > "$g/m/lm/lr$1_s0/done"
}
states() { for lr in 1e-3 2e-3 4e-3 8e-3 1.6e-2; do printf '%s ' "$(/usr/bin/python3 scripts/ablate_summary.py lr-state "$g" lm m $lr)"; done; }
best() { /usr/bin/python3 scripts/ablate_summary.py best "$g" lm m; }
[ "$(states)" = "maybe maybe needed maybe maybe " ] || fail "grow, nothing run: $(states) (only the middle lr needed)"
finish 4e-3 3.0
[ "$(states)" = "maybe needed done needed maybe " ] || fail "grow, the middle run: $(states)"
[ -z "$(best)" ] || fail "grow: a best lr ($(best)) before the sweep is finished"
finish 2e-3 2.5
finish 8e-3 3.5
[ "$(states)" = "needed done done done maybe " ] || fail "grow, best 2e-3: $(states) (1e-3 needed, 1.6e-2 not yet)"
finish 1e-3 2.8
[ "$(states)" = "done done done done skip " ] || fail "grow, finished: $(states)"
[ "$(best)" = 2e-3 ] || fail "grow: best lr '$(best)' of a finished sweep, not 2e-3"
/usr/bin/python3 scripts/ablate_summary.py table "$g" --no-plot || fail "grow: table"
grep -q '^| KDA:MLA 1:0 | 2.8000 | 2.5000 | 3.0000 | 3.5000 | - |$' "$g/results.md" || { cat "$g/results.md"; fail "grow: the sweep table"; }
awk -F'\t' 'NR == 1 { for (i = 1; i <= NF; i++) c[$i] = i }
    NR == 2 && ($c["lm_best_lr"] != "2e-3" || $c["lm_lr_note"] != "" || $c["runs_total"] != 5) { exit 1 }' "$g/results.tsv" ||
    fail "grow: results.tsv's best lr and note: $(sed -n 2p "$g/results.tsv")"
finish 1e-3 2.4   # the best moves to the low end: the sweep is finished there (edge), not grown past it
[ "$(states)" = "done done done done skip " ] && [ "$(best)" = 1e-3 ] || fail "grow, best at the low end: $(states), best $(best)"
sed -i 's/^lr_sweep\tgrow$/lr_sweep\tall/' "$g/sweep.tsv"
[ "$(states)" = "done done done done needed " ] && [ -z "$(best)" ] || fail "lr_sweep all: $(states), best '$(best)' (every lr needed first)"
echo "LR_SWEEP=grow: the middle lr first, then beside the best; finished once the best has a run on each side"
# and through the runner: the plan (centre-out order) counts only the middle lr as certain; the invocation trains
# the lrs the rule calls for (the folder's states read once a pass and after each run) and no other
: > "$tmp/calls"
small OUT="$tmp/grown" RATIOS="1:0" LRS="5e-4 1e-3 2e-3 4e-3 8e-3" SEEDS=0 LR_SWEEP=grow PLAN=1 ||
    { cat "$tmp/small.log"; fail "LR_SWEEP=grow PLAN=1 exited with an error"; }
[ "$(awk -F'\t' 'NR > 1 { printf "%s:%s ", $3, $5 }' "$tmp/grown/plan.tsv")" = "2e-3:todo 1e-3:maybe 4e-3:maybe 5e-4:maybe 8e-3:maybe " ] ||
    { cat "$tmp/grown/plan.tsv"; fail "LR_SWEEP=grow PLAN=1: not the middle lr alone as todo"; }
small OUT="$tmp/grown" RATIOS="1:0" LRS="5e-4 1e-3 2e-3 4e-3 8e-3" SEEDS=0 LR_SWEEP=grow ||
    { cat "$tmp/small.log"; fail "LR_SWEEP=grow exited with an error"; }
/usr/bin/python3 scripts/ablate_summary.py lr-states "$tmp/grown" > "$tmp/grown.states"
# (five lrs: the sweep from the middle reaches both ends only if its best crosses from one side
# to the other; these seeded toy runs do not, so at least one lr is skipped)
ran=$(awk '$1 == "lm" && $4 == "done"' "$tmp/grown.states" | wc -l)
[ "$ran" -ge 3 ] && [ "$ran" -le 4 ] && [ "$(calls train)" = "$ran" ] && ! grep -qv ' done$\| skip$' "$tmp/grown.states" ||
    { cat "$tmp/grown.states"; fail "LR_SWEEP=grow: trained $(calls train), states above (every lr done or skipped, 3-4 run)"; }
! ls "$tmp/grown"/.lr_states.* > /dev/null 2>&1 || fail "LR_SWEEP=grow left its state files"
echo "LR_SWEEP=grow through the runner: $ran of 5 lrs trained, the rest skipped"

# lr lists: numbers in increasing order, else a clear error before anything runs
: > "$tmp/calls"
small OUT="$tmp/lrs" LRS="2e-3 1e-3" && fail "LRS in decreasing order was accepted"
grep -q "ablate: LRS must be in increasing order (1e-3 after 2e-3)" "$tmp/small.log" || { cat "$tmp/small.log"; fail "LRS order: no clear error"; }
small OUT="$tmp/lrs" MQAR_LRS="1e-3 fast" && fail "MQAR_LRS with a word was accepted"
grep -q 'ablate: MQAR_LRS: "fast" is not a positive learning rate' "$tmp/small.log" || { cat "$tmp/small.log"; fail "MQAR_LRS word: no clear error"; }
[ "$(calls train)" = 0 ] || fail "a refused lr list trained"
echo "lr lists: out of order or not a number, refused with the list's name"
# probes: the finished MQAR runs of several folders of one setting, a row each, folder by folder;
# folders whose MQAR tasks differ are refused with both file names
probe() {  # FOLDER MODEL RATIO SEED ACC: one finished MQAR run with eval-mqar accuracy ACC at 16 pairs
    mkdir -p "$1/$2/mqar/lr3e-4_s$4"
    printf 'mqar_pairs = 16\n' > "$1/mqar-task.conf"
    printf 'tasks\tmqar\nseeds\t0 1 2 3\nlrs\t1e-3\nmqar_lrs\t3e-4\nmqar_pairs\t16\nmqar_eval_pairs\t16\n' > "$1/sweep.tsv"
    [ -f "$1/models.tsv" ] || printf 'model\tlayers\tparams\tactive\tactive_nonemb\tmflop_lm\tmflop_mqar\tratio\tvariant\n' > "$1/models.tsv"
    cut -f1 "$1/models.tsv" | grep -qx "$2" || printf '%s\tK\t1\t1\t1\t1\t1\t%s\t-\n' "$2" "$3" >> "$1/models.tsv"
    printf '{"step": 1, "loss": 3.0}\n{"step": 1, "val_loss": 2.0, "mqar_accuracy": %s}\n' "$5" > "$1/$2/mqar/lr3e-4_s$4/metrics.jsonl"
    printf '{"pairs": 16, "accuracy": %s}\n' "$5" > "$1/$2/mqar/lr3e-4_s$4/mqar_eval.jsonl"
    echo finished > "$1/$2/mqar/lr3e-4_s$4/done"
}
probe "$tmp/pa" 1-1 1:1 0 0.85
probe "$tmp/pa" 1-0 1:0 0 0.078
probe "$tmp/pb" 1-1 1:1 2 0.72
mkdir -p "$tmp/pb/1-1/mqar/lr3e-4_s3"  # unfinished: no done marker, not a row
/usr/bin/python3 scripts/ablate_summary.py probes "$tmp/p.png" t "$tmp/pa" "$tmp/pb" --no-plot > "$tmp/probes.tsv" ||
    fail "probes exited with an error"
[ "$(cut -f2-4,7 "$tmp/probes.tsv" | tr '\t\n' ',;')" = "model,lr,seed,acc_16;KDA:MLA 1:1,3e-4,0,0.850;KDA:MLA 1:0,3e-4,0,0.078;KDA:MLA 1:1,3e-4,2,0.720;" ] ||
    { cat "$tmp/probes.tsv"; fail "probes: the rows"; }
[ ! -e "$tmp/p.png" ] || fail "probes --no-plot drew a PNG"
printf 'mqar_pairs = 32\n' > "$tmp/pb/mqar-task.conf"
/usr/bin/python3 scripts/ablate_summary.py probes "$tmp/p.png" t "$tmp/pa" "$tmp/pb" --no-plot > "$tmp/probes.log" 2>&1 &&
    fail "probes accepted two folders with different MQAR tasks"
grep -q "ablate_summary probes: $tmp/pb/mqar-task.conf differs from $tmp/pa/mqar-task.conf" "$tmp/probes.log" ||
    { cat "$tmp/probes.log"; fail "probes, different tasks: no clear error"; }
echo "probes: the finished runs of two folders, a row each; different MQAR tasks refused"
echo "ablate_cli: ok"
