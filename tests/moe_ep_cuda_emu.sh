#!/bin/sh
# Expert parallelism on the CUDA backend's code, on the CPU: ./hybrid train --device cuda with
# the CUDA emulator as its plugin (out/build/emu/libhybrid_cuda_emu.so; docs/cuda.md, "The CPU
# emulator"), whose collectives are ./hybrid's MPI ones on bf16 elements in place of NCCL (the
# only part of the GPU path this leaves out). A tiny KKKM MoE model (8 experts top-2, d 64)
# trained 4 steps on 1 rank with 2 accumulation steps, and on 2 ranks with expert_parallel 2
# (each rank 4 of the 8 experts, the tokens exchanged both ways) on the same global batch:
#   - step 1's loss is the same number: the forward has nothing that depends on which rank a
#     token is on (an expert's GEMM rows do not see each other), so a token sent to the wrong
#     expert or back to the wrong place shows here;
#   - steps 2-4 within 1e-3 relative: the updates differ by bf16 roundings of the gradients (one
#     rank adds the second micro-batch's gradients into the first's op by op; two ranks sum
#     theirs once), measured at most 7.6e-5 (2026-12-05).
# Without mpirun, or without the emulated plugin (SANITIZE builds): "skipped: ..." and 77.
set -u
hybrid=${HYBRID:-./hybrid}
plugin=${BUILD:-out/build}/emu/libhybrid_cuda_emu.so
[ -x "$hybrid" ] || { echo "FAIL: $hybrid is not built"; exit 1; }
[ -f "$plugin" ] || { echo "skipped: moe_ep_cuda_emu: no $plugin (make $plugin; not in SANITIZE builds)"; exit 77; }
command -v mpirun > /dev/null 2>&1 ||
    { echo "skipped: moe_ep_cuda_emu: no mpirun (Debian: openmpi-bin libopenmpi-dev)"; exit 77; }
case $plugin in /*) ;; *) plugin=$(pwd)/$plugin ;; esac
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1 HYBRID_CUDA_PLUGIN="$plugin"
tmp=$(mktemp -d /tmp/hybrid_ep_emu.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

mkdir -p "$tmp/data"
/usr/bin/python3 - "$tmp/data/t_train_000000.bin" <<'PY' || fail "could not write the token shard"
import random, sys
sys.path.insert(0, "scripts")
from shard_io import write_shard
r = random.Random(3)
write_shard(sys.argv[1], [r.randrange(1000) for _ in range(20000)])
PY
args="configs/hybrid-tiny.conf --device cuda --layers KKKM --d_model 64 --n_head 1 --vocab_size 1000
      --padded_vocab_size 0 --batch_size 2 --seq_len 32 --total_batch_size 128 --steps 4 --warmup_steps 1
      --shuffle false --train_data $tmp/data/t_train_*.bin --val_data '' --sample_tokens 0 --log_every 1"
eval "$hybrid" train $args --out_dir "$tmp/g1" > "$tmp/g1.log" 2>&1 || { cat "$tmp/g1.log"; fail "the 1-rank run"; }
eval HYBRID_DIST_TIMEOUT=120 timeout 300 mpirun --oversubscribe -np 2 -x HYBRID_CUDA_PLUGIN -x OMP_NUM_THREADS \
    -x HYBRID_EMU_DEVICES=2 "$hybrid" train $args --expert_parallel 2 --out_dir "$tmp/ep2" > "$tmp/ep2.log" 2>&1 ||
    { cat "$tmp/ep2.log"; fail "the expert-parallel run on 2 ranks"; }
grep -q "sharded over expert_parallel 2: each rank holds 4 of 8 experts" "$tmp/ep2.log" ||
    { cat "$tmp/ep2.log"; fail "the 2-rank run did not shard the experts"; }
grep -q "backend cuda-bf16" "$tmp/ep2.log" && grep -q "2 rank(s) over mpi" "$tmp/ep2.log" ||
    { cat "$tmp/ep2.log"; fail "the 2-rank run was not the CUDA backend over MPI"; }
/usr/bin/python3 - "$tmp/g1/metrics.jsonl" "$tmp/ep2/metrics.jsonl" <<'PY' || exit 1
import sys
sys.path.insert(0, "scripts")
from metrics_io import records
a = [r["loss"] for r in records(sys.argv[1]) if "loss" in r]
b = [r["loss"] for r in records(sys.argv[2]) if "loss" in r]
if len(a) != 4 or len(b) != 4:
    sys.exit(f"FAIL: {len(a)} and {len(b)} losses logged, not 4 each")
print("losses, 1 rank:", " ".join(f"{x:.7f}" for x in a))
print("losses, ep 2:  ", " ".join(f"{x:.7f}" for x in b))
if a[0] != b[0]:
    sys.exit(f"FAIL: step 1's loss differs ({a[0]} vs {b[0]}): the expert-parallel forward is not the local one")
worst = max(abs(x - y) / abs(x) for x, y in zip(a[1:], b[1:]))
print(f"steps 2-4: worst relative difference {worst:.2e} (bar 1e-3)")
if not worst <= 1e-3:
    sys.exit(f"FAIL: the expert-parallel losses drift {worst:.2e} from the 1-rank run's (bar 1e-3)")
PY
echo "moe_ep_cuda_emu: ok (ep 2 on the emulated CUDA backend over MPI: step 1 equal, steps 2-4 within 1e-3)"
