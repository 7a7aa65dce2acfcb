#!/bin/sh
# usage: tests/gpu/check_fla_export.sh FLA_DIR      (or FLA_DIR=... make test-gpu)
# FLA_DIR: a flash-linear-attention checkout (a folder with fla/), or a prepared copy with
# flasrc/ (fla's tree) and optionally shim/ (a flash_attn stand-in; KDA layers do not need it).
# Trains two small K-layer models for 8 steps on the CPU (so norms, gate biases, A_log and
# dt_bias have left their init), exports each with `hybrid export --fla`, loads it with
# transformers' AutoModelForCausalLM (fla's KDAForCausalLM, transformers 5 fix applied at
# import) and compares fla's logits and loss on the GPU with ours on the same tokens (CPU float:
# the export's names and layouts are what is checked, against our reference arithmetic; our
# CUDA KDA is held to the CPU by test_delta_rule and test_model), with Triton's fp32 dots in
# ieee and in tf32 (scripts/check_fla_kda.py: tolerances and why).
# First, row 0 of each also goes through scripts/fla_kda_reference.py (fla's forward written
# out in pure Python, float64): when fla disagrees but the reference agrees, the difference
# is in fla's kernels or the loading, not in the export's names and layouts.
#   a: K x2, tied embeddings, softplus gate, K = V = 64, conv 4
#   b: K x3, untied, lower-bound gate -5 (fla's safe_gate), V = 2K (expand_v 2), conv 3, eps 1e-5
# Run from the repository root after `make hybrid out/build/gpu/dump_logits`; needs torch,
# numpy, triton, einops, transformers and a GPU. FLA_VARIANTS (default "a b"), FLA_MODES
# (default "ieee tf32") and FLA_EXPORT_OUT (default out/test-gpu/fla-export) pick a part, so
# that parts can run side by side while Triton compiles.
FLA=${1:-${FLA_DIR:-}}
[ -n "$FLA" ] || { echo "usage: tests/gpu/check_fla_export.sh FLA_DIR (an fla checkout, or a copy with flasrc/)"; exit 2; }
BUILD=${BUILD:-out/build}
D=${FLA_EXPORT_OUT:-out/test-gpu/fla-export}
[ -x ./hybrid ] && [ -x "$BUILD/gpu/dump_logits" ] || { echo "check_fla_export: build first: make hybrid $BUILD/gpu/dump_logits"; exit 2; }
rm -rf $D
mkdir -p $D/data
python3 - "$D" <<'PY' || exit 1
import sys, numpy as np
sys.path.insert(0, "scripts")
from shard_io import write_shard
d = sys.argv[1]
rng = np.random.default_rng(7)
write_shard(f"{d}/data/train_000000.bin", rng.integers(0, 1024, 100000, dtype=np.uint16).tolist())
rng.integers(0, 1024, (4, 129), dtype=np.int32).tofile(f"{d}/tokens.i32")
PY
COMMON="--norm rmsnorm --position none --mlp swiglu --bias false --vocab_size 1024 --padded_vocab_size 0
        --context_length 256 --d_model 128 --n_head 2 --linear_heads 2 --reset_at_eot false --seq_len 128
        --batch_size 4 --total_batch_size 512 --steps 8 --warmup_steps 0 --lr 1e-2 --val_every 0 --sample_tokens 4
        --checkpoint_every 8"
CACHE=${TRITON_CACHE_DIR:-$PWD/out/triton-cache}
status=0
for v in ${FLA_VARIANTS:-a b}; do
    case $v in
    a) MODEL="--layers 'K x2' --tie_embeddings true" ;;
    b) MODEL="--layers 'K x3' --tie_embeddings false --linear_value_dim 128 --conv_size 3 --kda_gate_lower_bound -5 --norm_eps 1e-5" ;;
    esac
    echo "== $v: $MODEL"
    if ! eval ./hybrid train $COMMON $MODEL --train_data "'$D/data/train_*.bin'" --out_dir $D/run_$v > $D/train_$v.log 2>&1 ||
        ! ./hybrid export --fla $D/fla_$v $D/run_$v/checkpoints/step_00000008 > $D/export_$v.log 2>&1 ||
        ! "$BUILD/gpu/dump_logits" $D/run_$v/checkpoints/step_00000008 $D/tokens.i32 4 128 $D/ours_$v cpu > $D/losses_$v.json; then
        status=1
        echo "FAILED: $v: $(tail -n 1 $D/train_$v.log) $(tail -n 1 $D/export_$v.log 2>/dev/null)"
        continue
    fi
    python3 scripts/fla_kda_reference.py $D/fla_$v $D/tokens.i32 4 128 0 $D/ours_$v || status=1
    for mode in ${FLA_MODES:-ieee tf32}; do
        if [ $mode = ieee ]; then f32="TRITON_F32_DEFAULT=ieee"; else f32="-u TRITON_F32_DEFAULT"; fi
        env $f32 TRITON_CACHE_DIR=$CACHE/$mode \
            python3 scripts/check_fla_kda.py "$FLA" $D/fla_$v $D/tokens.i32 4 128 $D/ours_$v $D/losses_$v.json || status=1
    done
done
[ $status = 0 ] && echo "check_fla_export: fla's KDAForCausalLM computes our losses on both exports" ||
    echo "check_fla_export: FAILED"
exit $status
