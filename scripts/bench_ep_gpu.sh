#!/usr/bin/env bash
# Expert parallelism on the GPUs of one host (issue 17: its EP parity and the EP 2 run), the
# KL-S (MoE) 3:1 model (configs/kl-s-3-1.conf) on the Brown shards (out/data, `make data`),
# through `hybrid train` under mpirun, one process per GPU; expert_parallel ranks share out each
# MoE layer's experts and exchange the tokens over NCCL (docs/distributed.md, "Expert
# parallelism"):
#   1. the first 20 losses of EP 2 on 2 GPUs against 1 GPU with the same global batch (2
#      accumulation steps; the data unshuffled, so both read the same sequences in the same
#      order): issue 17's bar is 1e-4;
#   2. tokens per second and memory per GPU: 1 GPU, EP 2, and DP 2 with every expert on both
#      GPUs (expert_parallel 1), each with B sequences of T tokens per GPU;
#   3. the all-to-all's time: EP 2 for 6 steps under HYBRID_CUDA_PROFILE=1 (the per-op table's
#      nccl_alltoallv row, the exchange's grouped send/receive on the compute stream);
#   4. checkpoints across EP sizes: EP 2 stopped at step 10 resumes on 1 GPU (batch_size 2B: the
#      ranks x batch_size a resume keeps) to step 20, against the uninterrupted EP 2 run, and a
#      1-GPU checkpoint (batch_size 2B) resumes on EP 2, against the uninterrupted 1-GPU run;
#   5. with 4 GPUs: EP 2 x DP 2 against 1 GPU with 4 accumulation steps.
# Usage: scripts/bench_ep_gpu.sh [RESULT_DIR]   (B, T, STEPS, NGPU, CONFIG from the environment;
# a dry run on the CPU: DEVICE=cpu NGPU=2 B=2 T=64 CONFIG=configs/hybrid-tiny.conf).
set -euo pipefail
cd "$(dirname "$0")/.."
export NCCL_NVLS_ENABLE=0 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
RES=${1:-out/bench/ep}
NG=${NGPU:-$(nvidia-smi -L | wc -l)}
DEVICE=${DEVICE:-cuda}
CONFIG=${CONFIG:-configs/kl-s-3-1.conf}
B=${B:-16}
T=${T:-1024}
STEPS=${STEPS:-20}
[ "$NG" -ge 2 ] || { echo "bench_ep_gpu: expert parallelism needs 2 GPUs or more; $NG here"; exit 1; }
mkdir -p "$RES"
run() {  # name ranks batch_size extra-args...: a fresh out_dir each time
    local name=$1 np=$2 b=$3
    shift 3
    local cmd=(./hybrid train "$CONFIG" --device "$DEVICE" --batch_size "$b" --seq_len "$T" --steps "$STEPS"
               --warmup_steps 5 --shuffle false --val_data '' --sample_tokens 0 --log_every 1 --keep_checkpoints 2
               --out_dir "$RES/$name" "$@")
    rm -rf "$RES/$name"
    if [ "$np" = 0 ]; then "${cmd[@]}" > "$RES/$name.log" 2>&1
    else mpirun --oversubscribe -np "$np" -x NCCL_NVLS_ENABLE -x HYBRID_CUDA_PROFILE "${cmd[@]}" > "$RES/$name.log" 2>&1; fi
    echo "$name: $(grep -E '^step +[0-9]+/' "$RES/$name.log" | tail -1)"
}
# resumed NAME FROM ranks batch_size extra-args...: run NAME from run FROM's checkpoint at step
# $half; its metrics.jsonl (the steps after it) then gets FROM's steps in front, so it reads whole
resumed() {
    local name=$1 from=$2
    shift 2
    run "$name" "$@" --resume "$RES/$from/$(printf 'checkpoints/step_%08d' "$half")"
    cat "$RES/$from/metrics.jsonl" "$RES/$name/metrics.jsonl" > "$RES/$name/metrics.whole"
    mv "$RES/$name/metrics.whole" "$RES/$name/metrics.jsonl"
}
G=$((2 * B * T))  # the global batch of the 2-GPU runs
export HYBRID_CUDA_PROFILE=0

# 1, 2: the same global batch on 1 GPU (2 accumulation steps), on EP 2, and DP 2 with replicated experts
run g1acc2 0 "$B" --total_batch_size $G
run ep2 2 "$B" --total_batch_size $G --expert_parallel 2
grep -q "expert_parallel 2" "$RES/ep2.log" || { echo "ep2: the run was not expert-parallel"; exit 1; }
run dp2 2 "$B" --total_batch_size $G
run g1 0 "$B" --total_batch_size $((B * T))

# 3. the all-to-all's time (6 steps; profiled runs are slower, so their tok/s is not used; the
# profile is the GPU's: on the CPU the variable is ignored)
HYBRID_CUDA_PROFILE=1 STEPS=6 run ep2prof 2 "$B" --total_batch_size $G --expert_parallel 2

# 4. checkpoints across EP sizes: stopped halfway on one size, resumed on the other
half=$((STEPS / 2))
run ep2stop 2 "$B" --total_batch_size $G --expert_parallel 2 --stop_at_step "$half"
resumed ep2to1 ep2stop 0 $((2 * B)) --total_batch_size $G
run g1b2 0 $((2 * B)) --total_batch_size $G
run g1stop 0 $((2 * B)) --total_batch_size $G --stop_at_step "$half"
resumed g1to2 g1stop 2 "$B" --total_batch_size $G --expert_parallel 2

# 5. EP 2 x DP 2
if [ "$NG" -ge 4 ]; then
    run g1acc4 0 "$B" --total_batch_size $((2 * G))
    run ep2dp2 4 "$B" --total_batch_size $((2 * G)) --expert_parallel 2
fi
python3 scripts/ep_summary.py "$RES" "$NG" "$B" "$T" "$CONFIG"
