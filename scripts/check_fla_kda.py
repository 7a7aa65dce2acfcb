#!/usr/bin/env python3
"""Compare hybrid.c's logits and loss with fla's KDAForCausalLM on a `hybrid export --fla` folder.

usage: check_fla_kda.py FLA_DIR MODEL_DIR TOKENS.i32 B T OUR_PREFIX LOSSES_JSON

FLA_DIR: a flash-linear-attention checkout (a folder with fla/), or a prepared copy with
flasrc/ (fla's tree) and optionally shim/ (a flash_attn stand-in; KDA layers do not need it). MODEL_DIR comes from `./hybrid export --fla`;
OUR_PREFIX_cpu.f32 and LOSSES_JSON from `tests/gpu/dump_logits ... cpu` (our CPU float
reference: the CUDA backend has no KDA kernels yet).

The model is loaded unchanged through transformers' AutoModelForCausalLM (fla registers
model_type "kda"); the loading must report no missing, unexpected or mismatched tensors and
every parameter must equal the file bit for bit (transformers must not re-initialise A_log or
dt_bias). Then fla runs in fp32 on the GPU over the B x T tokens with its recurrent kernel
(fused_recurrent_kda, forced) and with its chunk kernel (chunk_kda), and over the first 48
tokens of each row (fused_recurrent, which eval mode picks for q_len <= 64); the logits and mean
cross-entropy are compared with ours. Our logits must match fla's recurrence to the tolerance
below; against fla's chunk form the bar is that plus the chunk form's own measured distance
from the recurrence on the same tokens (the triangle inequality): fla's chunk_kda differs from
its own recurrence by about 1e-4 even with ieee dots, an error of fla's kernel, not of the
export (which the recurrence and scripts/fla_kda_reference.py check to 1e-4 and 1e-5).

Tolerances (relative RMS of the logits over the real vocabulary, relative loss):
  TRITON_F32_DEFAULT=ieee   1e-4 / 1e-4: fla's Triton dots in full fp32, like our CPU float
                            reference; what is left is fp32 rounding in a different order
                            (the same bounds as scripts/check_hf_gpt2.py's CPU check).
  default (tf32)            5e-3 / 1e-3: Triton rounds fp32 dot operands to tf32 (10-bit
                            mantissa, unit roundoff 2^-11 = 4.9e-4); the KDA chunk form chains
                            a few such products per layer (Aqk, the WY inverse, the state
                            update, the output), a few units of 4.9e-4 on the mixer output,
                            diluted by the residual stream. The loss is a mean over many rows
                            of a function with gradient (softmax - onehot), so its relative
                            error is far below the logits'.
Exits 1 on a loading problem or an error above the tolerance of the mode it runs in.
"""
import json
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F

from fla_peer import add_fla_to_path


def load(model_dir):
    import transformers
    from transformers import AutoModelForCausalLM

    from fla.models import KDAForCausalLM  # registers model_type "kda" with the Auto classes
    if int(transformers.__version__.split(".")[0]) >= 5 and isinstance(KDAForCausalLM._tied_weights_keys, list):
        # fla declares a list; transformers 5 wants {tied name: source name}
        KDAForCausalLM._tied_weights_keys = {"lm_head.weight": "model.embeddings.weight"}
    try:
        model, info = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32, output_loading_info=True)
    except TypeError:  # transformers before `dtype`
        model, info = AutoModelForCausalLM.from_pretrained(model_dir, torch_dtype=torch.float32,
                                                           output_loading_info=True)
    ok = type(model).__name__ == "KDAForCausalLM"
    print(f"transformers {transformers.__version__}, torch {torch.__version__}, loaded {type(model).__name__}")
    tied = bool(getattr(model.config, "tie_word_embeddings", False))
    for key in ("missing_keys", "unexpected_keys", "mismatched_keys", "error_msgs"):
        got = info.get(key) if isinstance(info, dict) else getattr(info, key, None)
        got = [k for k in (got or []) if not (tied and k == "lm_head.weight")]  # the tied copy we also write
        if got:
            print(f"loading problem: transformers reported {key}: {got}")
            ok = False
    from safetensors.torch import load_file
    stored = load_file(os.path.join(model_dir, "model.safetensors"))
    params = dict(model.named_parameters(remove_duplicate=False))
    differ = [n for n, t in stored.items()
              if n not in params or params[n].shape != t.shape or not torch.equal(params[n].detach().cpu(), t)]
    if differ:
        print(f"loading problem: after from_pretrained these parameters differ from model.safetensors: {differ}")
        print("  (continuing with the file's tensors put in by load_state_dict, to compare the numbers)")
        model.load_state_dict(stored, strict=False)
        ok = False
    if set(params) - set(stored):
        print(f"loading problem: parameters not in model.safetensors: {sorted(set(params) - set(stored))}")
        ok = False
    return model, ok


def main():
    fla_dir, model_dir, tok_path, B, T, prefix, losses_path = sys.argv[1], sys.argv[2], sys.argv[3], \
        int(sys.argv[4]), int(sys.argv[5]), sys.argv[6], sys.argv[7]
    add_fla_to_path("check_fla_kda", fla_dir)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    if not torch.cuda.is_available():
        sys.exit("check_fla_kda: fla's kernels need a GPU (Triton) and none is visible")
    model, ok = load(model_dir)
    model = model.cuda().eval()
    V = model.config.vocab_size
    ieee = os.environ.get("TRITON_F32_DEFAULT", "") == "ieee"
    tol_z, tol_l = (1e-4, 1e-4) if ieee else (5e-3, 1e-3)
    print(f"Triton fp32 dots: {'ieee (TRITON_F32_DEFAULT=ieee)' if ieee else 'default (tf32)'}; "
          f"tolerances logits {tol_z:.0e}, loss {tol_l:.0e}")

    seq = np.fromfile(tok_path, dtype=np.int32).reshape(B, T + 1)
    x = torch.tensor(seq[:, :T], dtype=torch.long, device="cuda")
    y = torch.tensor(seq[:, 1:], dtype=torch.long, device="cuda")
    ours = json.load(open(losses_path))
    z_all = np.fromfile(f"{prefix}_cpu.f32", dtype=np.float32).reshape(B, T, ours["vp"])[:, :, :V]
    z_all = torch.tensor(z_all, device="cuda", dtype=torch.float64)
    def fla_logits(n, mode):
        for m in model.modules():  # the KDA layers: eval picks fused_recurrent for n <= 64, else .mode
            if hasattr(m, "mode") and m.mode in ("chunk", "fused_recurrent"):
                m.mode = mode
        with torch.no_grad():
            return model(input_ids=x[:, :n]).logits.double()

    def rel_rms(a, b):
        return ((a - b).norm() / b.norm()).item()

    # fla's two kernels on the same T: the chunk form's own error against its recurrence
    rec_T, chunk_T = fla_logits(T, "fused_recurrent"), fla_logits(T, "chunk")
    d_fla = rel_rms(chunk_T, rec_T)
    print(f"fla chunk vs fla recurrent (T={T}): logits rel-rms {d_fla:.2e} (fla's chunk kernel against its own "
          f"recurrence)")
    # ours against fla's recurrence (T and 48) to the mode's tolerance; against fla's chunk form
    # to that plus the chunk form's own distance from the recurrence (the triangle inequality;
    # 1% for the two norms)
    for name, n, ref, tol in (("recurrent", T, rec_T, tol_z), ("recurrent", min(48, T), fla_logits(min(48, T), "chunk"), tol_z),
                              ("chunk", T, chunk_T, None)):
        z = z_all[:, :n]
        if tol is None:
            tol = max(tol_z, 1.01 * (err_rec_T + d_fla))
        ref_loss = F.cross_entropy(ref.reshape(-1, V), y[:, :n].reshape(-1)).item()
        loss = ours["loss_cpu"] if n == T else F.cross_entropy(z.reshape(-1, V), y[:, :n].reshape(-1)).item()
        err = rel_rms(z, ref)
        if name == "recurrent" and n == T:
            err_rec_T = err
        lerr = abs(loss - ref_loss) / abs(ref_loss)
        good = err <= tol and lerr <= tol_l and np.isfinite(err)
        ok &= good
        print(f"fla {name:9s} (T={n:3d}): loss {ref_loss:.6f}; ours (cpu) {loss:.6f}, rel diff {lerr:.2e} "
              f"(tol {tol_l:.0e}); logits rel-rms {err:.2e} (tol {tol:.2e}), max abs "
              f"{(z - ref).abs().max().item():.2e} {'ok' if good else 'FAIL'}")
    if ieee and not ok:
        print("(if the errors are at the tf32 level, this Triton may ignore TRITON_F32_DEFAULT)")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
