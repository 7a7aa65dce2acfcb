#!/usr/bin/env bash
# Data parallelism on the GPUs of one host (issues 8 and 9), GPT-2 124M on the Brown shards
# (out/data, from `make data`), through `hybrid train` under mpirun, one process per GPU:
#   1. world of one: `hybrid train` and `mpirun -np 1 hybrid train` (NCCL initialised) must
#      log identical losses;
#   2. weak scaling: B sequences of T tokens per GPU, 1, 2, 4, 8 GPUs (as many as there
#      are), ZeRO-1 off and on: tok/s per GPU (median over the steps after the warm-up),
#      scaling efficiency, memory per GPU;
#   3. the first 20 losses of the N-GPU run against 1 GPU with the same global batch
#      (the data unshuffled, so both read the same sequences in the same order)
#      (gradient accumulation over N micro-batches).
# Usage: scripts/bench_dp_gpu.sh [RESULT_DIR]   (B, STEPS, NGPU from the environment; a dry
# run of the script on the CPU: DEVICE=cpu NGPU=2 B=2 CONFIG=configs/gpt2-tiny.conf ...)
set -euo pipefail
cd "$(dirname "$0")/.."
export NCCL_NVLS_ENABLE=0 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
RES=${1:-out/bench/dp}
NG=${NGPU:-$(nvidia-smi -L | wc -l)}
DEVICE=${DEVICE:-cuda}
CONFIG=${CONFIG:-configs/gpt2-124m.conf}
COMM=$([ "$DEVICE" = cuda ] && echo nccl || echo mpi)
B=${B:-64}
T=${T:-1024}
STEPS=${STEPS:-30}
mkdir -p "$RES"
run() {  # name ranks extra-args...
    local name=$1 np=$2
    shift 2
    local cmd=(./hybrid train "$CONFIG" --device "$DEVICE" --batch_size "$B" --seq_len $T --steps "$STEPS"
               --warmup_steps 5 --shuffle false --val_data '' --sample_tokens 1 --keep_checkpoints 1 --out_dir "$RES/$name" "$@")
    rm -rf "$RES/$name"
    if [ "$np" = 0 ]; then "${cmd[@]}" > "$RES/$name.log" 2>&1
    else mpirun --oversubscribe -np "$np" -x NCCL_NVLS_ENABLE "${cmd[@]}" > "$RES/$name.log" 2>&1; fi
    echo "$name: $(grep -E '^step +[0-9]+/' "$RES/$name.log" | tail -1)"
}

# 1. world of one, with and without the launcher (10 steps)
STEPS_SAVE=$STEPS
STEPS=10
run plain 0 --total_batch_size $((B * T))
run mpi1 1 --total_batch_size $((B * T))
STEPS=$STEPS_SAVE
grep -q "distributed: 1 rank(s) over $COMM" "$RES/mpi1.log" || { echo "mpi1: $COMM was not initialised"; exit 1; }
strip() { sed 's/, "tokens".*//' "$1"; }
if [ "$(strip "$RES/plain/metrics.jsonl")" = "$(strip "$RES/mpi1/metrics.jsonl")" ]; then
    echo "world of one: mpirun -np 1 ($COMM) logs the same losses as the plain run (10 steps, identical)"
else
    echo "world of one: the losses DIFFER"; diff <(strip "$RES/plain/metrics.jsonl") <(strip "$RES/mpi1/metrics.jsonl") || true
    exit 1
fi

# 2. weak scaling, 3. same global batch on one GPU
run g1 0 --total_batch_size $((B * T))
for n in 2 4 8; do
    [ "$n" -le "$NG" ] || break
    run "g$n" "$n" --total_batch_size $((n * B * T))
    run "g${n}z" "$n" --total_batch_size $((n * B * T)) --zero true
done
if [ "$NG" -ge 2 ]; then run "g1acc$NG" 0 --total_batch_size $((NG * B * T)); fi
python3 scripts/dp_summary.py "$RES" "$NG" "$B" "$T"
