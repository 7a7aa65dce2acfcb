#!/usr/bin/env bash
# A real run (docs/cuda.md, "A real run: GPT-2 124M on the Brown corpus, next to PyTorch"):
# hybrid.c trains GPT-2 on the Brown shards while PyTorch (scripts/pytorch_train_gpt2.py)
# trains the same model from hybrid's own initial weights on the same batches in the same
# order, so their loss curves can be laid over each other.
#
# usage: [OUT=dir] scripts/real_run_gpt2.sh [CONFIG] [--key value ...]
#
#   CONFIG           default configs/gpt2-124m-brown.conf; --key value pairs go to
#                    `hybrid train` and so, through the step-0 checkpoint's config.conf, to
#                    PyTorch as well (e.g. --steps 1500 for a shorter run)
#   OUT              where the logs and metrics go (default out/real-run/results)
#   DEVICE           cuda (default) or cpu (a dry run of the whole path on a small config)
#   MODE             parallel: hybrid on GPU 0, PyTorch on GPU 1 at the same time (the
#                    default when two GPUs are visible); serial: one after the other
#   BUDGET           seconds for the whole script (default 500); each trainer is stopped
#                    (SIGTERM: it finishes its step and writes what it has) before then
#   BUILD            1 (default): `make -j16` first; 0: use the ./hybrid that is there
#   PT_FLAGS         PyTorch options (default: --compile on cuda, --dtype fp32 on cpu)
#   SKIP_PYTORCH     1: hybrid alone (its init is deterministic, so an earlier PyTorch run
#                    from the same config and seed still compares)
#
# Needs `make data` done (out/data/brown_*; the device machine cannot run it) and, for a
# sample as text, out/vocab. Writes to OUT: run.log (this script), hybrid.log,
# pytorch.log, hybrid_metrics.jsonl, pytorch_metrics.jsonl, summary.txt, summary.json.
set -u -o pipefail
cd "$(dirname "$0")/.."

CONFIG=configs/gpt2-124m-brown.conf
if [ $# -gt 0 ] && [ "${1%.conf}" != "$1" ]; then CONFIG=$1; shift; fi
OUT=${OUT:-out/real-run/results}
DEVICE=${DEVICE:-cuda}
BUDGET=${BUDGET:-500}
BUILD=${BUILD:-1}
RUN=out/real-run
START=$(date +%s)
DEADLINE=$((START + BUDGET))
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
PY=${PYTHON:-python3}

mkdir -p "$OUT"
exec > >(tee -a "$OUT/run.log") 2>&1
say() { echo "[real-run $(( $(date +%s) - START ))s] $*"; }
left() { echo $((DEADLINE - $(date +%s))); }

ls out/data/brown_train_*.bin out/data/brown_val_*.bin >/dev/null 2>&1 ||
    { say "no Brown shards under out/data: run \`make data\` first (it needs the network and PCRE2)"; exit 1; }

NGPU=0
if [ "$DEVICE" = cuda ]; then
    nvidia-smi -L
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
    NGPU=$(nvidia-smi -L | grep -c '^GPU')
    nvcc --version | tail -n 1
fi
$PY -c 'import torch; print("torch", torch.__version__, "| cuda devices:", torch.cuda.device_count())'
MODE=${MODE:-$([ "$NGPU" -ge 2 ] || [ "$DEVICE" = cpu ] && echo parallel || echo serial)}
PT_FLAGS=${PT_FLAGS:-$([ "$DEVICE" = cuda ] && echo --compile || echo --dtype fp32)}
HYB_GPU=0
PT_GPU=$([ "$MODE" = parallel ] && [ "$NGPU" -ge 2 ] && echo 1 || echo 0)
say "config $CONFIG $* | device $DEVICE | mode $MODE (hybrid GPU $HYB_GPU, PyTorch GPU $PT_GPU) | budget ${BUDGET}s"

if [ "$BUILD" = 1 ]; then
    say "building"
    make -j16 || { say "build failed"; exit 1; }
fi
[ -x ./hybrid ] || { say "./hybrid is not built"; exit 1; }

rm -rf "$RUN/hybrid" "$RUN/pytorch" "$RUN/init"
mkdir -p "$RUN"
copy_metrics() {
    [ -f "$RUN/hybrid/metrics.jsonl" ] && cp "$RUN/hybrid/metrics.jsonl" "$OUT/hybrid_metrics.jsonl"
    [ -f "$RUN/pytorch/metrics.jsonl" ] && cp "$RUN/pytorch/metrics.jsonl" "$OUT/pytorch_metrics.jsonl"
    return 0
}

# hybrid: --save-init writes checkpoint step_00000000 (the initial weights) before step 1.
# In serial mode it gets half of what is left; SIGTERM makes it finish the step and stop.
HYB_LIMIT=$(( $(left) - 20 ))
[ "$MODE" = serial ] && HYB_LIMIT=$(( ($(left) - 60) / 2 ))
say "hybrid: up to ${HYB_LIMIT}s"
( CUDA_VISIBLE_DEVICES=$HYB_GPU timeout -s TERM -k 60 "$HYB_LIMIT" \
    ./hybrid train "$CONFIG" --device "$DEVICE" --out_dir "$RUN/hybrid" --save-init "$@" 2>&1 |
    tee "$OUT/hybrid.log" ) &
HYB_PID=$!

INIT=$RUN/hybrid/checkpoints/step_00000000
for _ in $(seq 1 240); do
    [ -f "$INIT/model.safetensors" ] && break
    kill -0 $HYB_PID 2>/dev/null || break
    sleep 0.5
done
[ -f "$INIT/model.safetensors" ] || { say "hybrid wrote no step-0 checkpoint"; wait $HYB_PID; exit 1; }
mkdir -p "$RUN/init"
cp "$INIT/model.safetensors" "$INIT/config.conf" "$RUN/init/"  # a copy that no pruning can remove
say "initial weights: $RUN/init ($(du -h "$RUN/init/model.safetensors" | cut -f1))"

( while true; do copy_metrics; sleep 10; done ) &
COPIER=$!

run_pytorch() {
    local limit=$(( $(left) - 15 ))
    say "pytorch: up to ${limit}s"
    CUDA_VISIBLE_DEVICES=$PT_GPU timeout -s TERM -k 30 "$limit" \
        "$PY" scripts/pytorch_train_gpt2.py --init "$RUN/init" --out_dir "$RUN/pytorch" --device "$DEVICE" \
        --max-seconds $((limit - 25)) $PT_FLAGS 2>&1 | tee "$OUT/pytorch.log"
}

if [ "${SKIP_PYTORCH:-0}" = 1 ]; then
    wait $HYB_PID
    say "hybrid ended (PyTorch skipped)"
elif [ "$MODE" = parallel ]; then
    run_pytorch
    say "pytorch ended; waiting for hybrid"
    wait $HYB_PID
    say "hybrid ended"
else
    wait $HYB_PID
    say "hybrid ended"
    run_pytorch
    say "pytorch ended"
fi
kill $COPIER 2>/dev/null
wait $COPIER 2>/dev/null
copy_metrics
grep -a "^sample:" "$OUT/hybrid.log" | tail -n 1
if [ -f "$OUT/hybrid_metrics.jsonl" ] && [ -f "$OUT/pytorch_metrics.jsonl" ]; then
    $PY scripts/compare_metrics.py --json "$OUT/summary.json" hybrid="$OUT/hybrid_metrics.jsonl" \
        pytorch="$OUT/pytorch_metrics.jsonl" | tee "$OUT/summary.txt"
fi
say "done"
