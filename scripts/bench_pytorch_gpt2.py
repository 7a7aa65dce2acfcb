#!/usr/bin/env python3
"""PyTorch baseline for `make bench`: GPT-2 124M training throughput on one GPU.

The same work per step as tests/gpu/bench_gpt2.c: B x T random tokens, forward, loss,
backward, global-norm clipping (1.0), AdamW (lr 6e-4, betas 0.9/0.95, wd 0.1). PyTorch
the fast way: bf16 autocast over fp32 weights, torch.compile, scaled_dot_product_attention
(flash backend, causal), fused AdamW, padded vocabulary 50304, tied embeddings.
MFU uses hybrid.c's FLOPs/token formula (params_flops_per_token: 6 x matmul weights incl.
the lm_head + 6 L C T for causal attention) against 989.4 TFLOP/s dense bf16.

usage: bench_pytorch_gpt2.py [--batch 64] [--seq 1024] [--steps 20] [--warmup 5] [--json FILE]
"""
import argparse
import json
import statistics
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

L, C, NH, V, VP, CTX = 12, 768, 12, 50257, 50304, 1024
PEAK = 989.4e12


class Attention(nn.Module):
    def __init__(self):
        super().__init__()
        self.c_attn = nn.Linear(C, 3 * C)
        self.c_proj = nn.Linear(C, C)

    def forward(self, x):
        B, T, _ = x.shape
        q, k, v = self.c_attn(x).split(C, dim=2)
        q, k, v = (t.view(B, T, NH, C // NH).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.c_proj(y.transpose(1, 2).contiguous().view(B, T, C))


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln_1, self.attn, self.ln_2 = nn.LayerNorm(C), Attention(), nn.LayerNorm(C)
        self.c_fc, self.c_proj = nn.Linear(C, 4 * C), nn.Linear(4 * C, C)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.c_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(VP, C), nn.Embedding(CTX, C)
        self.blocks = nn.ModuleList(Block() for _ in range(L))
        self.ln_f = nn.LayerNorm(C)
        self.lm_head = nn.Linear(C, VP, bias=False)
        self.lm_head.weight = self.wte.weight
        for name, p in self.named_parameters():
            if p.dim() == 2:
                std = 0.02 / (2 * L) ** 0.5 if name.endswith("c_proj.weight") else 0.02
                nn.init.normal_(p, 0.0, std)

    def forward(self, idx, targets):
        pos = torch.arange(idx.shape[1], device=idx.device)
        x = self.wte(idx) + self.wpe(pos)
        for b in self.blocks:
            x = b(x)
        logits = self.lm_head(self.ln_f(x))
        return F.cross_entropy(logits.view(-1, VP).float(), targets.view(-1))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--json")
    a = ap.parse_args()
    torch.manual_seed(0)
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    dev = "cuda"
    model = GPT().to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=6e-4, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1, fused=True)
    cmodel = torch.compile(model)
    from torch.nn.attention import SDPBackend, sdpa_kernel

    def step():
        x = torch.randint(0, V, (a.batch, a.seq), device=dev)
        y = torch.randint(0, V, (a.batch, a.seq), device=dev)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = cmodel(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss

    times = []
    with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
        t_compile = time.time()
        for _ in range(a.warmup):
            step()
        torch.cuda.synchronize()
        t_compile = time.time() - t_compile
        torch.cuda.reset_peak_memory_stats()
        for _ in range(a.steps):
            torch.cuda.synchronize()
            t0 = time.time()
            loss = step()
            torch.cuda.synchronize()
            times.append((time.time() - t0) * 1e3)
    med = statistics.median(times)
    tps = a.batch * a.seq / (med / 1e3)
    fpt = 6.0 * (L * 12 * C * C + VP * C) + L * 6.0 * C * a.seq
    mfu = fpt * tps / PEAK
    peak = torch.cuda.max_memory_allocated() / 2**30
    print(f"PyTorch {torch.__version__} GPT-2 124M  B={a.batch} T={a.seq} bf16 autocast, torch.compile, "
          f"SDPA flash, fused AdamW; {a.steps} timed steps after {a.warmup} warm-up ({t_compile:.0f} s, compile incl.)")
    print(f"  ms/step median {med:.2f} (mean {statistics.mean(times):.2f}) | {tps / 1e3:.1f}k tok/s | "
          f"MFU {100 * mfu:.1f}% ({fpt / 1e6:.1f} MFLOP/token) | peak allocated {peak:.2f} GiB | "
          f"last loss {loss.item():.4f}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"impl": "pytorch", "version": torch.__version__, "B": a.batch, "T": a.seq,
                       "ms_per_step": med, "tok_per_s": tps, "mfu": mfu, "peak_mem_gib": peak}, f)
            f.write("\n")


if __name__ == "__main__":
    main()
