#!/usr/bin/env python3
"""fla's KDAForCausalLM forward, translated literally into pure Python (float64, no torch).

usage: fla_kda_reference.py MODEL_DIR TOKENS.i32 B T ROW OUR_PREFIX

Reads a `hybrid export --fla` folder (config.json + F32 model.safetensors) and computes the
logits of row ROW of TOKENS.i32 (B rows of T+1 int32 tokens, inputs [:T]) the way fla's code
does (fla-org/flash-linear-attention: models/kda/modeling_kda.py KDABlock and KDAForCausalLM,
layers/kda.py KimiDeltaAttention, ops/kda/naive.py naive_recurrent_kda, ops/kda/gate.py,
modules RMSNorm, ShortConvolution (SiLU), FusedRMSNormGated (sigmoid), GatedMLP (swish)), then
compares them with ours from OUR_PREFIX_cpu.f32 (tests/gpu/dump_logits ... cpu). It checks
the export's names and layouts and our K layer against fla's math where no GPU or torch is
at hand; tests/gpu/check_fla_export.sh runs it beside fla itself. Exits 1 when the relative
RMS difference of the logits exceeds 1e-5 (ours is float, this is double: about 3e-7 seen).
Slow (pure Python): keep T and the model small.
"""
import array
import json
import math
import struct
import sys


def load(d):
    raw = open(f"{d}/model.safetensors", "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    tensors = {}
    for name, v in json.loads(raw[8:8 + n]).items():
        if name == "__metadata__":
            continue
        if v["dtype"] != "F32":
            sys.exit(f"{d}/model.safetensors: {name} is {v['dtype']}, this reference reads F32")
        a = array.array("f")
        a.frombytes(raw[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]])
        tensors[name] = (list(a), v["shape"])
    return json.load(open(f"{d}/config.json")), tensors


def sigmoid(a):
    return 1 / (1 + math.exp(-a)) if a >= 0 else math.exp(a) / (1 + math.exp(a))


def silu(a):
    return a * sigmoid(a)


def softplus(a):
    return math.log1p(math.exp(a)) if a < 20 else a  # torch's threshold 20


def forward(cfg, W, ids):
    def rows(name):  # a Linear weight (out, in) as a list of rows
        a, s = W[name]
        return [a[r * s[1]:(r + 1) * s[1]] for r in range(s[0])]

    def linear(X, name, bias=None):
        M, b = rows(name), W[bias][0] if bias else None
        return [[sum(x * w for x, w in zip(xr, mr)) + (b[j] if b else 0.0) for j, mr in enumerate(M)] for xr in X]

    def rmsnorm(X, name):  # fla RMSNorm: x * rsqrt(mean(x^2) + eps) * w
        w = W[name][0]
        return [[xi / math.sqrt(sum(y * y for y in x) / len(x) + eps) * wi for xi, wi in zip(x, w)] for x in X]

    def short_conv(X, name):  # depthwise causal Conv1d (D, 1, Wk), w[.., Wk-1] on the current token, then SiLU
        a, (D, _, Wk) = W[name]
        return [[silu(sum(a[c * Wk + j] * X[t - Wk + 1 + j][c] for j in range(Wk) if t - Wk + 1 + j >= 0))
                 for c in range(D)] for t in range(len(X))]

    C, L, H, K = cfg["hidden_size"], cfg["num_hidden_layers"], cfg["num_heads"], cfg["head_dim"]
    V, eps, lb, T = int(K * cfg["expand_v"]), cfg["norm_eps"], cfg["lower_bound"], len(ids)
    if cfg.get("attn") or cfg.get("attnres_block_size") or cfg.get("num_v_heads") not in (None, H):
        sys.exit("this reference covers KDA-only models without AttnRes or GVA")
    E = rows("model.embeddings.weight")
    x = [list(E[t]) for t in ids]
    for l in range(L):
        p = f"model.layers.{l}."
        residual, h = x, rmsnorm(x, p + "attn_norm.weight")
        q = short_conv(linear(h, p + "attn.q_proj.weight"), p + "attn.q_conv1d.weight")
        k = short_conv(linear(h, p + "attn.k_proj.weight"), p + "attn.k_conv1d.weight")
        v = short_conv(linear(h, p + "attn.v_proj.weight"), p + "attn.v_conv1d.weight")
        g = linear(linear(h, p + "attn.f_proj.0.weight"), p + "attn.f_proj.1.weight")
        beta = linear(h, p + "attn.b_proj.weight")
        z = linear(linear(h, p + "attn.g_proj.0.weight"), p + "attn.g_proj.1.weight", p + "attn.g_proj.1.bias")
        A, dt, w_o = W[p + "attn.A_log"][0], W[p + "attn.dt_bias"][0], W[p + "attn.o_norm.weight"][0]
        y = [[0.0] * (H * V) for _ in range(T)]
        for hh in range(H):  # "(h d)" head layout; naive_recurrent_kda per head
            S = [[0.0] * V for _ in range(K)]
            for t in range(T):
                qh, kh = q[t][hh * K:(hh + 1) * K], k[t][hh * K:(hh + 1) * K]
                vh = v[t][hh * V:(hh + 1) * V]
                qn, kn = math.sqrt(sum(a * a for a in qh) + 1e-6), math.sqrt(sum(a * a for a in kh) + 1e-6)
                qh, kh = [a / qn * K ** -0.5 for a in qh], [a / kn for a in kh]  # l2norm_fwd, scale K^-1/2
                gg = [g[t][hh * K + i] + dt[hh * K + i] for i in range(K)]
                gg = [lb * sigmoid(math.exp(A[hh]) * a) for a in gg] if lb is not None \
                    else [-math.exp(A[hh]) * softplus(a) for a in gg]
                b = sigmoid(beta[t][hh])
                S = [[S[i][j] * math.exp(gg[i]) for j in range(V)] for i in range(K)]
                u = [vh[j] - sum(kh[i] * S[i][j] for i in range(K)) for j in range(V)]
                S = [[S[i][j] + b * kh[i] * u[j] for j in range(V)] for i in range(K)]
                o = [sum(qh[i] * S[i][j] for i in range(K)) for j in range(V)]
                r = 1 / math.sqrt(sum(a * a for a in o) / V + eps)  # FusedRMSNormGated, sigmoid gate
                for j in range(V):
                    y[t][hh * V + j] = o[j] * r * w_o[j] * sigmoid(z[t][hh * V + j])
        x = [[a + b for a, b in zip(r_, o_)] for r_, o_ in zip(residual, linear(y, p + "attn.o_proj.weight"))]
        residual, h = x, rmsnorm(x, p + "mlp_norm.weight")
        gate, up = linear(h, p + "mlp.gate_proj.weight"), linear(h, p + "mlp.up_proj.weight")
        m = linear([[silu(a) * b for a, b in zip(gr, ur)] for gr, ur in zip(gate, up)], p + "mlp.down_proj.weight")
        x = [[a + b for a, b in zip(r_, o_)] for r_, o_ in zip(residual, m)]
    return linear(rmsnorm(x, "model.norm.weight"), "lm_head.weight")


def main():
    d, tok_path, B, T, row, prefix = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), \
        int(sys.argv[5]), sys.argv[6]
    cfg, W = load(d)
    toks = array.array("i")
    toks.frombytes(open(tok_path, "rb").read())
    ref = forward(cfg, W, toks[row * (T + 1):row * (T + 1) + T])
    ours = array.array("f")
    ours.frombytes(open(f"{prefix}_cpu.f32", "rb").read())
    V = cfg["vocab_size"]
    vp = len(ours) // (B * T)
    num = den = worst = 0.0
    for t in range(T):
        for j in range(V):
            a, b = ref[t][j], ours[(row * T + t) * vp + j]
            num, den, worst = num + (a - b) ** 2, den + a * a, max(worst, abs(a - b))
    err = math.sqrt(num / den)
    ok = err <= 1e-5
    print(f"fla reference (pure Python, float64), row {row}, T={T}: logits rel-rms vs ours {err:.2e} (tol 1e-05), "
          f"max abs {worst:.2e} {'ok' if ok else 'FAIL'}")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
