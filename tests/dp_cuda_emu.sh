#!/bin/sh
# Data parallelism on the CUDA backend's code, on the CPU: ./hybrid train --device cuda with the
# CUDA emulator as its plugin (out/build/emu/libhybrid_cuda_emu.so; docs/cuda.md, "The CPU
# emulator"), ./hybrid's MPI collectives standing in for NCCL. A GPT-2-shaped model (2 layers, d
# 64) trained 4 steps on 1 rank with 2 accumulation steps, on 2 ranks, and on 2 ranks with ZeRO-1,
# the same global batch and the same micro-batch shape:
#   - 1 rank vs DP 2: every logged loss and gradient norm the same number. The gradients are
#     fp32 (docs/cuda.md, "Precision"): one rank adds micro-batch 2's into micro-batch 1's, two
#     ranks sum theirs in the all-reduce, the same fp32 addition either way. With bf16 gradients
#     (or a collective that summed them in bf16) the two differ from step 2 on.
#   - DP 2 vs DP 2 with ZeRO-1: the same losses and norms and the same final weights, bit for bit:
#     the fp32 gradients reduce-scattered into each rank's window (grad_sync's DT_FLOAT, offsets in
#     gradient elements), AdamW on the window, the bf16 weights gathered back.
# Without mpirun, or without the emulated plugin (SANITIZE builds): "skipped: ..." and 77.
set -u
name=dp_cuda_emu
. tests/cuda_emu/mpi_run_env.sh
args="configs/gpt2-tiny.conf --device cuda --layers AA --d_model 64 --n_head 2 --vocab_size 1000
      --padded_vocab_size 0 --seq_len 32 --batch_size 2 --total_batch_size 128 --steps 4 --warmup_steps 1
      --shuffle false --train_data $tmp/data/t_train_*.bin --val_data '' --sample_tokens 0 --log_every 1"
eval "$hybrid" train $args --out_dir "$tmp/g1" > "$tmp/g1.log" 2>&1 || { cat "$tmp/g1.log"; fail "the 1-rank run"; }
for z in false true; do
    eval HYBRID_DIST_TIMEOUT=120 timeout 300 mpirun --oversubscribe -np 2 -x HYBRID_CUDA_PLUGIN -x OMP_NUM_THREADS \
        -x HYBRID_EMU_DEVICES=2 "$hybrid" train $args --zero $z --out_dir "$tmp/dp2_$z" > "$tmp/dp2_$z.log" 2>&1 ||
        { cat "$tmp/dp2_$z.log"; fail "the 2-rank run (zero = $z)"; }
    grep -q "backend cuda-bf16" "$tmp/dp2_$z.log" && grep -q "2 rank(s) over mpi" "$tmp/dp2_$z.log" ||
        { cat "$tmp/dp2_$z.log"; fail "the 2-rank run (zero = $z) was not the CUDA backend over MPI"; }
done
grep -q "ZeRO-1" "$tmp/dp2_true.log" || { cat "$tmp/dp2_true.log"; fail "the zero = true run did not shard AdamW's state"; }
/usr/bin/python3 - "$tmp" <<'PY' || exit 1
import json, sys
t = sys.argv[1]
def steps(run):
    rows = [json.loads(l) for l in open(f"{t}/{run}/metrics.jsonl")]
    return [(r["step"], r["loss"], r["grad_norm"]) for r in rows if "grad_norm" in r]
g1, dp, zero = steps("g1"), steps("dp2_false"), steps("dp2_true")
if [s for s, _, _ in g1] != [1, 2, 3, 4]:
    sys.exit(f"FAIL: the 1-rank run logged steps {[s for s, _, _ in g1]}, not 1-4")
print("step: loss, grad norm (1 rank | dp 2 | dp 2 zero-1)")
for a, b, c in zip(g1, dp, zero):
    print(f"  {a[0]}: {a[1]:.9g} {a[2]:.9g} | {b[1]:.9g} {b[2]:.9g} | {c[1]:.9g} {c[2]:.9g}")
if g1 != dp:
    sys.exit("FAIL: dp 2 logged other losses or gradient norms than 1 rank with 2 accumulation steps")
if zero != dp:
    sys.exit("FAIL: dp 2 with ZeRO-1 logged other losses or gradient norms than dp 2")
PY
cmp -s "$tmp/dp2_false/checkpoints/step_00000004/model.safetensors" "$tmp/dp2_true/checkpoints/step_00000004/model.safetensors" ||
    fail "dp 2 with ZeRO-1 ended with other weights than dp 2"
echo "dp_cuda_emu: ok (1 rank = dp 2 = dp 2 with zero-1 on the emulated CUDA backend over MPI, fp32 gradients)"
