#!/usr/bin/env python3
"""Compare hybrid.c's logits and loss with Hugging Face transformers on an exported model.

usage: check_hf_gpt2.py HF_DIR TOKENS.i32 B T OUR_PREFIX LOSSES_JSON
HF_DIR comes from `./hybrid export --hf`; OUR_PREFIX_{cpu,cuda}.f32 and LOSSES_JSON from
tests/gpu/dump_logits. transformers runs in fp32 (no TF32). Exits 1 when our CPU logits
differ from HF's by more than 1e-4 (RMS relative) or our CUDA (bf16) logits by more than
2e-2, or a loss by more than 1e-4 (CPU) / 5e-3 (CUDA) relative.
"""
import json
import sys

import numpy as np
import torch
import torch.nn.functional as F
from transformers import GPT2LMHeadModel


def main():
    hf_dir, tok_path, B, T, prefix, losses_path = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), \
        sys.argv[5], sys.argv[6]
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    model = GPT2LMHeadModel.from_pretrained(hf_dir, torch_dtype=torch.float32).to(dev).eval()
    V = model.config.vocab_size
    seq = np.fromfile(tok_path, dtype=np.int32).reshape(B, T + 1)
    x = torch.tensor(seq[:, :T], dtype=torch.long, device=dev)
    y = torch.tensor(seq[:, 1:], dtype=torch.long, device=dev)
    with torch.no_grad():
        ref = model(x).logits.float()  # (B, T, V)
    ref_loss = F.cross_entropy(ref.reshape(-1, V), y.reshape(-1)).item()
    ours = json.load(open(losses_path))
    vp = ours["vp"]
    ok = True
    print(f"transformers {__import__('transformers').__version__}, torch {torch.__version__}, device {dev}")
    print(f"HF loss {ref_loss:.6f}")
    for name, tol_z, tol_l in (("cpu", 1e-4, 1e-4), ("cuda", 2e-2, 5e-3)):
        z = np.fromfile(f"{prefix}_{name}.f32", dtype=np.float32).reshape(B, T, vp)[:, :, :V]
        z = torch.tensor(z, device=dev)
        err = ((z - ref).norm() / ref.norm()).item()
        loss = ours[f"loss_{name}"]
        lerr = abs(loss - ref_loss) / abs(ref_loss)
        good = err <= tol_z and lerr <= tol_l
        ok &= good
        print(f"ours ({name:4s}): loss {loss:.6f} (rel diff {lerr:.2e}, tol {tol_l:.0e}); "
              f"logits rel-rms vs HF {err:.2e} (tol {tol_z:.0e}) {'ok' if good else 'FAIL'}")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
