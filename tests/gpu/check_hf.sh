#!/bin/sh
# Trains a small GPT-2 for 3 steps on the GPU, exports it with `hybrid export --hf`, and
# compares transformers' logits/loss with ours (CPU float and CUDA bf16) on the same
# tokens (scripts/check_hf_gpt2.py). Run from the repository root by `make test-gpu`.
set -e
BUILD=${BUILD:-out/build}
[ -x ./hybrid ] || { echo "check_hf: build first: make hybrid"; exit 2; }
D=out/test-gpu/hf
rm -rf $D
mkdir -p $D/data
python3 - "$D" <<'PY'
import sys, numpy as np
sys.path.insert(0, "scripts")
from shard_io import write_shard
d = sys.argv[1]
rng = np.random.default_rng(7)
for name, n in (("train", 200000), ("val", 20000)):
    write_shard(f"{d}/data/{name}_000000.bin", rng.integers(0, 50257, n, dtype=np.uint16).tolist())
rng.integers(0, 50257, (4, 129), dtype=np.int32).tofile(f"{d}/tokens.i32")
PY
./hybrid train configs/gpt2-tiny.conf --device cuda --layers 'A x2' --d_model 128 --n_head 2 --seq_len 128 \
    --batch_size 4 --total_batch_size 512 --steps 3 --warmup_steps 1 --lr 1e-3 --val_every 0 --val_batches 1 \
    --sample_tokens 4 --train_data "$D/data/train_*.bin" --val_data "$D/data/val_*.bin" --out_dir $D/run \
    --checkpoint_every 3 > $D/train.log
./hybrid export --hf $D/hf $D/run/checkpoints/step_00000003
$BUILD/gpu/dump_logits $D/run/checkpoints/step_00000003 $D/tokens.i32 4 128 $D/ours > $D/losses.json
python3 scripts/check_hf_gpt2.py $D/hf $D/tokens.i32 4 128 $D/ours $D/losses.json
