#!/usr/bin/env bash
# `make bench-hybrid` (BENCHMARKS.md, "H200: the 3:1 hybrid against fla"): our training step
# (`./hybrid train --device cuda`, the trainer itself) against fla's KDAForCausalLM on the same
# architecture (configs/bench-kda-3-1.conf: 16 layers, d 768, KDA 6 x 128, softmax attention at
# layers 3/7/11/15 with 6 heads, SwiGLU 2048, RMSNorm, tied 50304 vocab, no biases), then the
# side-by-side table. JSON under $OUT/bench/: hybrid_ours.json, hybrid_fla.json.
#
# Cases (the names of scripts/bench_fla_hybrid.py):
#   3:1-T1024  KKKA x4, B64 T1024      3:1-T4096  KKKA x4, B16 T4096
#   1:0-T4096  K x16,   B16 T4096      0:1-T4096  A x16,   B16 T4096
#   KKKM-T1024 KKKM x4 (KDA:MLA 3:1, the MLA keys of configs/kl-s-3-1.conf, dense SwiGLU, no MoE or
#              AttnRes), B64 T1024: ours only (fla has no MLA); while the CUDA backend does not hand
#              out the MLA family the trainer refuses it, recorded as "refused: <its message>".
# Ours: BENCH_STEPS (25) steps of one micro-batch on synthetic tokens (uniform in [0, 50257), an
# llm.c-format shard written once to $OUT/bench/synth/, as fla's peer draws torch.randint(0, 50257);
# each step reads a new batch, the peer reuses one); bf16 with fp32 master weights and AdamW (lr 3e-4,
# betas 0.9/0.999, wd 0.01, no clipping: the peer's torch defaults); the median of steps 9..25 of the
# per-step times in metrics.jsonl (the peer's ts[8:]); the backend peak the trainer prints. The run's
# final checkpoint (written after the last timed step) is deleted.
# fla: when FLA_DIR is set (prepare_fla.sh's OUT_DIR, or an fla checkout), scripts/bench_fla_hybrid.py
# (fla_hybrid_bench.py's measurement with --json) under TRITON_CACHE_DIR (default $OUT/triton-cache:
# keep it between device calls, Triton autotunes at every new shape) and FLA_TIMEOUT if set.
# BENCH_PROFILE=1: after each case of ours, a 6-step run with HYBRID_CUDA_PROFILE=1 prints the GPU
# time of each op (logs/profile-<case>.log; not in the timed run, whose events it would perturb).
# Environment: OUT (out), HYBRID (./hybrid), BENCH_DEVICE (cuda; cpu with BENCH_HYBRID_ARGS shrinking
# the model is the plumbing check), BENCH_PLUMBING (set: every case B1 T64, its pattern once), BENCH_STEPS (25), BENCH_CASES (comma-separated subset),
# BENCH_HYBRID_ARGS (extra --key value overrides for every case of ours), BENCH_MLA_ARGS (the KKKM case's
# MLA keys; default kl-s-3-1.conf's).
# Exits 1 if a run of ours or fla's failed (refused and skipped cases, and missed targets, do not).
set -u
OUT=${OUT:-out}
HYBRID=${HYBRID:-./hybrid}
DEVICE=${BENCH_DEVICE:-cuda}
STEPS=${BENCH_STEPS:-25}
CASES=${BENCH_CASES:-3:1-T1024,3:1-T4096,1:0-T4096,0:1-T4096,KKKM-T1024}
CONF=configs/bench-kda-3-1.conf
B_DIR=$OUT/bench
OURS=$B_DIR/hybrid_ours.json
FLA=$B_DIR/hybrid_fla.json
SYNTH=$B_DIR/synth/synth_train_000000.bin
read -r -a MLA_ARGS <<< "${BENCH_MLA_ARGS:---mla_kv_rank 384 --mla_q_rank 384 --mla_qk_nope_dim 128 --mla_rope_dim 64 --mla_v_dim 128 --mla_rope false --mla_gate true}"
read -r -a EXTRA <<< "${BENCH_HYBRID_ARGS:-}"

[ "$STEPS" -ge 9 ] 2>/dev/null || { echo "bench_hybrid: BENCH_STEPS must be at least 9 (the median is over steps 9..)"; exit 2; }
[ -x "$HYBRID" ] || { echo "bench_hybrid: $HYBRID is missing: make hybrid"; exit 2; }
mkdir -p "$B_DIR/synth" "$B_DIR/logs" "$B_DIR/runs"
rm -f "$OURS" "$FLA"

# synthetic tokens: enough for the largest batch (64 x 1024) over every step without a wrap
if [ ! -s "$SYNTH" ]; then
    python3 - "$SYNTH" <<'PY' || { echo "bench_hybrid: could not write the synthetic shard"; exit 2; }
import random, sys
sys.path.insert(0, "scripts")
from shard_io import write_shard
r = random.Random(1)
write_shard(sys.argv[1], (r.randrange(50257) for _ in range(2 * 1024 * 1024)))
PY
fi

st=0
want() { case ",$CASES," in *",$1,"*) return 0 ;; esac; return 1; }
# one training run of a case: layers B T steps out_dir log [extra overrides...]
train_case() {
    local layers=$1 B=$2 T=$3 steps=$4 dir=$5 log=$6
    shift 6
    "$HYBRID" train "$CONF" --layers "$layers" --batch_size "$B" --seq_len "$T" --context_length "$T" \
        --steps "$steps" --log_every 1 --train_data "$B_DIR/synth/synth_train_*.bin" --out_dir "$dir" \
        --device "$DEVICE" --overwrite "$@" ${EXTRA[@]+"${EXTRA[@]}"} > "$log" 2>&1
}

ours() {  # case layers B T [extra overrides...]
    local name=$1 layers=$2 B=$3 T=$4
    shift 4
    want "$name" || return 0
    if [ -n "${BENCH_PLUMBING:-}" ]; then B=1 T=64 layers="${layers% x*} x1"; fi  # the CPU check of this script
    local tag=${name//:/-}
    local dir=$B_DIR/runs/$tag log=$B_DIR/logs/ours-$tag.log
    echo "== ours $name: layers '$layers' B=$B T=$T, $STEPS steps on $DEVICE"
    train_case "$layers" "$B" "$T" "$STEPS" "$dir" "$log" "$@"
    local rc=$?
    tail -n 4 "$log"
    python3 scripts/bench_summary_hybrid.py record "$OURS" "$name" "$B" "$T" "$layers" "$rc" "$log" \
        "$dir/metrics.jsonl" || st=1
    if [ $rc -ne 0 ] && ! grep -q "op family yet" "$log"; then st=1; fi
    rm -rf "$dir/checkpoints"
    if [ -n "${BENCH_PROFILE:-}" ] && [ $rc -eq 0 ]; then  # the per-op GPU time, in a separate short run
        local plog=$B_DIR/logs/profile-$tag.log
        HYBRID_CUDA_PROFILE=1 train_case "$layers" "$B" "$T" 6 "$dir-profile" "$plog" --sample_tokens 0 "$@"
        sed -n '/GPU time per step/,/^total/p' "$plog" | head -40
        rm -rf "$dir-profile"
    fi
}
ours 3:1-T1024 "KKKA x4" 64 1024
ours 3:1-T4096 "KKKA x4" 16 4096
ours 1:0-T4096 "K x16" 16 4096
ours 0:1-T4096 "A x16" 16 4096
ours KKKM-T1024 "KKKM x4" 64 1024 "${MLA_ARGS[@]}"

if [ -n "${FLA_DIR:-${FLA_PEER:-}}" ]; then
    echo "== fla KDAForCausalLM (${FLA_DIR:-$FLA_PEER})"
    case "$OUT" in /*) abs_out=$OUT ;; *) abs_out=$(pwd)/$OUT ;; esac
    TRITON_CACHE_DIR=${TRITON_CACHE_DIR:-$abs_out/triton-cache} FLA_PEER=${FLA_DIR:-$FLA_PEER} \
        ${FLA_TIMEOUT:+timeout "$FLA_TIMEOUT"} python3 -u scripts/bench_fla_hybrid.py --cases "$CASES" \
        --steps "$STEPS" --json "$FLA" || st=1
else
    echo "bench_hybrid: FLA_DIR not set: fla not measured (FLA_DIR=out/peers/fla make bench-hybrid)"
fi
echo "== side by side (tok/s ratio above 1: ours faster; memory ratio below 1: ours smaller)"
python3 scripts/bench_summary_hybrid.py table "$OURS" "$FLA"
exit $st
