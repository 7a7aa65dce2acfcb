#!/bin/sh
# Builds Hugging Face GPT2LMHeadModel folders with transformers (no network: a GPT2Config,
# random init with a fixed seed, every parameter then moved by N(0, 0.02) so biases and norms
# are not 0 and 1; saved by save_pretrained as safetensors in F32, in BF16, and untied),
# imports each with `hybrid import --hf`, and compares transformers' logits and loss with ours
# (CPU float and CUDA bf16) on the same tokens with scripts/check_hf_gpt2.py and its
# tolerances (CPU: 1e-4 relative RMS logits / 1e-4 relative loss; CUDA bf16: 2e-2 / 5e-3).
# Run from the repository root after `make` (`make test-gpu` runs it); needs torch, numpy and
# transformers.
BUILD=${BUILD:-out/build}
D=out/test-gpu/import-hf
[ -x ./hybrid ] && [ -x "$BUILD/gpu/dump_logits" ] || { echo "check_import_hf: build first: make hybrid $BUILD/gpu/dump_logits"; exit 2; }
rm -rf $D
mkdir -p $D
python3 - "$D" <<'PY' || exit 1
import sys, numpy as np, torch
from transformers import GPT2Config, GPT2LMHeadModel
d = sys.argv[1]
for name, tied, dtype in (("f32", True, torch.float32), ("bf16", True, torch.bfloat16), ("untied", False, torch.float32)):
    torch.manual_seed(0)
    cfg = GPT2Config(vocab_size=50257, n_positions=256, n_embd=128, n_layer=2, n_head=4, n_inner=None,
                     activation_function="gelu_new", resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
                     layer_norm_epsilon=1e-5, tie_word_embeddings=tied)
    m = GPT2LMHeadModel(cfg)
    with torch.no_grad():
        for p in m.parameters():
            p.add_(0.02 * torch.randn_like(p))
    m = m.to(dtype)
    try:
        m.save_pretrained(f"{d}/hf_{name}", safe_serialization=True)
    except TypeError:  # a transformers without the argument writes safetensors anyway
        m.save_pretrained(f"{d}/hf_{name}")
np.random.default_rng(7).integers(0, 50257, (4, 129), dtype=np.int32).tofile(f"{d}/tokens.i32")
PY
status=0
for v in f32 bf16 untied; do
    echo "== $v: $(ls $D/hf_$v | tr '\n' ' ')"
    if ./hybrid import --hf $D/hf_$v $D/ck_$v > $D/import_$v.log 2>&1 &&
        "$BUILD/gpu/dump_logits" $D/ck_$v $D/tokens.i32 4 128 $D/ours_$v > $D/losses_$v.json &&
        python3 scripts/check_hf_gpt2.py $D/hf_$v $D/tokens.i32 4 128 $D/ours_$v $D/losses_$v.json; then
        :
    else
        status=1
        echo "FAILED: $v ($(tail -n 1 $D/import_$v.log))"
    fi
done
[ $status = 0 ] && echo "check_import_hf: f32, bf16 and untied GPT2LMHeadModel folders import to the same logits" ||
    echo "check_import_hf: FAILED"
exit $status
