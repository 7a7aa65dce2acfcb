#!/usr/bin/env python3
"""Plain PyTorch GPT-2 training that reproduces a `hybrid train` run step for step.

It starts from hybrid's own initial weights and replays its data order, so the two loss
curves differ only by arithmetic (bf16 rounding, kernel order):

  - weights: a hybrid checkpoint folder (model.safetensors + config.conf), normally the
    step-0 checkpoint that `hybrid train --save-init` writes (on CUDA those are the bf16
    parameters hybrid's fp32 master starts from). The safetensors file is parsed here with
    numpy and its CRC-32 checked; no safetensors package is needed.
  - hyperparameters: every key is read from that checkpoint's config.conf (the full config
    of the run): shapes, batch, accumulation, steps, AdamW betas/eps/weight decay, lr,
    warmup + schedule, clipping, val_every/val_batches, data globs, shuffle and seed.
  - data: data/loader.c replayed exactly: llm.c shards (256 x int32 header, uint16 tokens),
    one sample = B*T+1 tokens at sample*B*T, and with shuffle on the same per-epoch
    Fisher-Yates permutations from the same xorshift64* generator (model/rng.h).
  - optimizer: AdamW with hybrid's groups (weight decay on matrices and embeddings only,
    optim/optimizer.c), global-norm clipping as optim/optimizer.c (scale = clip / norm
    when norm > clip), lr from optim/schedule.c.
  - loss: mean cross-entropy over the vocab_size real columns (padding columns of the
    padded embedding never count), averaged over the accumulation micro-batches.
  - validation: the first val_batches windows of the val shards, in order, as train.c.

The model is the GPT-2 hybrid builds for `layers = A xN` with layernorm, learned
positions, tanh-GELU MLP, biases and tied embeddings (what checkpoints/export_hf.c
accepts). --dtype bf16 (default): bf16 autocast over fp32 weights; --dtype fp32: plain fp32
(with TF32 off), for checking against hybrid's CPU reference.

It writes OUT_DIR/metrics.jsonl in train/metrics.c's shape: one line per step
{"step", "loss", "lr", "grad_norm", "tokens", "tok_per_s", "elapsed_s"} and
{"step", "val_loss"} after each validation pass. SIGTERM/SIGINT or --max-seconds end the run
after the current step.

usage: pytorch_train_gpt2.py --init CHECKPOINT_DIR --out_dir DIR [--device cuda|cpu]
                             [--dtype bf16|fp32] [--compile] [--max-seconds S] [--steps N]
"""
import argparse
import glob
import json
import math
import os
import signal
import struct
import sys
import time
import zlib

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from shard_io import HEADER_BYTES, shard_tokens  # noqa: E402

MASK64 = (1 << 64) - 1


# ---------------------------------------------------------------- hybrid's files

def read_config(path):
    """config.conf as written by config_write: `key = value` lines."""
    cfg = {}
    with open(path) as f:
        for line in f:
            line = line.split("#", 1)[0].strip()
            if not line:
                continue
            key, sep, value = line.partition("=")
            if not sep:
                sys.exit(f"{path}: not a `key = value` line: {line!r}")
            cfg[key.strip()] = value.strip()
    return cfg


def read_safetensors(path):
    """name -> float32 numpy array; checks hybrid's CRC-32 of the data section when present."""
    with open(path, "rb") as f:
        blob = f.read()
    (hlen,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + hlen])
    data = memoryview(blob)[8 + hlen:]
    meta = header.pop("__metadata__", {}) or {}
    crc = meta.get("hybrid.crc32")
    if crc is not None and zlib.crc32(data) != int(crc, 16):
        sys.exit(f"{path}: CRC-32 mismatch (the file is corrupted)")
    out = {}
    for name, info in header.items():
        if info["dtype"] != "F32":
            sys.exit(f"{path}: {name} has dtype {info['dtype']}, expected F32")
        lo, hi = info["data_offsets"]
        out[name] = np.frombuffer(data[lo:hi], dtype="<f4").reshape(info["shape"])
    return out


def read_shard(path):
    """A token shard's tokens (scripts/shard_io.py checks the header and the size), mapped."""
    ntok = shard_tokens(path)
    return np.memmap(path, dtype="<u2", mode="r", offset=HEADER_BYTES, shape=(ntok,))


# ---------------------------------------------------------------- data/loader.c, replayed

class Rng:
    """model/rng.h: splitmix64-scrambled seed, xorshift64* output."""

    def __init__(self, seed):
        z = (seed + 0x9E3779B97F4A7C15) & MASK64
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
        z ^= z >> 31
        self.state = z if z else 0x2545F4914F6CDD1D

    def u64(self):
        x = self.state
        x ^= x >> 12
        x ^= (x << 25) & MASK64
        x ^= x >> 27
        self.state = x
        return (x * 0x2545F4914F6CDD1D) & MASK64

    def below(self, n):
        return self.u64() % n


def permute(n, seed, epoch, salt):
    perm = list(range(n))
    r = Rng((seed ^ ((epoch * 0x9E3779B97F4A7C15) & MASK64) ^ ((salt * 0xC2B2AE3D27D4EB4F) & MASK64)) & MASK64)
    for i in range(n, 1, -1):
        j = r.below(i)
        perm[i - 1], perm[j] = perm[j], perm[i - 1]
    return perm


class Loader:
    """data/loader.c for one rank (world = 1): same windows, same order, same epochs."""

    def __init__(self, pattern, B, T, vocab_size, shuffle, seed):
        self.paths = sorted(glob.glob(pattern))
        if not self.paths:
            sys.exit(f"{pattern}: no shard files match this pattern (run `make data`)")
        self.B, self.T, self.shuffle, self.seed = B, T, shuffle, seed
        self.shards = [read_shard(p) for p in self.paths]
        self.nsamples = [(len(t) - 1) // (B * T) if len(t) > 0 else 0 for t in self.shards]
        for p, t, n in zip(self.paths, self.shards, self.nsamples):
            if n == 0:
                sys.exit(f"{p}: {len(t)} tokens is too small for one batch of {B} x {T} + 1 tokens")
            if int(t.max()) >= vocab_size:
                sys.exit(f"{p}: a token id is >= vocab_size {vocab_size}")
        self.seek(0, 0, 0)

    def _prepare_epoch(self):
        n = len(self.paths)
        self.shard_order = permute(n, self.seed, self.epoch, 0x5AD5) if self.shuffle else list(range(n))

    def _prepare_shard(self):
        s = self.shard_order[self.shard]
        n = self.nsamples[s]
        self.sample_order = permute(n, self.seed, self.epoch, 1 + s) if self.shuffle else list(range(n))

    def seek(self, epoch, shard, sample):
        self.epoch, self.shard, self.sample = epoch, shard, sample
        self._prepare_epoch()
        self._prepare_shard()

    def samples_per_epoch(self):
        return sum(self.nsamples)

    def next(self):
        """(inputs, targets) as int64 arrays of shape (B, T); also the window's start (for tests)."""
        BT = self.B * self.T
        s = self.shard_order[self.shard]
        start = self.sample_order[self.sample] * BT
        buf = np.asarray(self.shards[s][start:start + BT + 1], dtype=np.int64)
        self.sample += 1
        if self.sample >= self.nsamples[s]:
            self.sample = 0
            self.shard += 1
            if self.shard >= len(self.paths):
                self.shard = 0
                self.epoch += 1
                self._prepare_epoch()
            self._prepare_shard()
        return buf[:-1].reshape(self.B, self.T), buf[1:].reshape(self.B, self.T), (s, start)


# ---------------------------------------------------------------- optim/schedule.c

def lr_at_step(cfg, step):
    peak = float(cfg["lr"])
    floor = peak * float(cfg["final_lr_frac"])
    warm, total = int(cfg["warmup_steps"]), int(cfg["steps"])
    sched = cfg["lr_schedule"]
    if step < warm:
        return peak * (step + 1) / warm
    if sched == "constant":
        return peak
    if sched == "wsd":
        decay_start = total - int(round(float(cfg["wsd_decay_frac"]) * total))
        decay_start = max(decay_start, warm)
        if step < decay_start or decay_start >= total:
            return peak
        q = (step - decay_start) / (total - decay_start)
        return floor + (peak - floor) * (1.0 - math.sqrt(q))
    p = (step - warm) / (total - warm) if total > warm else 1.0
    p = min(p, 1.0)
    if sched == "cosine":
        return floor + (peak - floor) * 0.5 * (1.0 + math.cos(math.pi * p))
    return peak - (peak - floor) * p


# ---------------------------------------------------------------- the model

class Attention(nn.Module):
    def __init__(self, C, NH):
        super().__init__()
        self.C, self.NH = C, NH
        self.c_attn = nn.Linear(C, 3 * C)
        self.c_proj = nn.Linear(C, C)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.c_attn(x).split(C, dim=2)
        q, k, v = (t.view(B, T, self.NH, C // self.NH).transpose(1, 2) for t in (q, k, v))
        if hasattr(F, "scaled_dot_product_attention"):
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:  # torch < 2.0
            att = (q @ k.transpose(-2, -1)) / math.sqrt(C // self.NH)
            mask = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()
            att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
            y = att @ v
        return self.c_proj(y.transpose(1, 2).contiguous().view(B, T, C))


class Block(nn.Module):
    def __init__(self, C, NH, H, eps):
        super().__init__()
        self.ln_1, self.attn, self.ln_2 = nn.LayerNorm(C, eps=eps), Attention(C, NH), nn.LayerNorm(C, eps=eps)
        self.c_fc, self.c_proj = nn.Linear(C, H), nn.Linear(H, C)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.c_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, L, C, NH, H, V, VP, CTX, eps):
        super().__init__()
        self.V = V
        self.wte, self.wpe = nn.Embedding(VP, C), nn.Embedding(CTX, C)
        self.h = nn.ModuleList(Block(C, NH, H, eps) for _ in range(L))
        self.ln_f = nn.LayerNorm(C, eps=eps)

    def forward(self, idx, targets):
        pos = torch.arange(idx.shape[1], device=idx.device)
        x = self.wte(idx) + self.wpe(pos)
        for b in self.h:
            x = b(x)
        logits = F.linear(self.ln_f(x), self.wte.weight)  # tied lm_head
        logits = logits[..., :self.V]  # the padding columns never count
        return F.cross_entropy(logits.reshape(-1, self.V).float(), targets.reshape(-1))


def check_gpt2(cfg):
    layers = cfg["layers"].replace(" ", "")
    ok = (cfg["norm"] == "layernorm" and cfg["position"] == "learned" and cfg["mlp"] == "gelu"
          and cfg["bias"] == "true" and cfg["tie_embeddings"] == "true" and int(cfg["attn_res_block"]) == 0
          and int(cfg["moe_experts"]) == 0 and cfg["optimizer"] == "adamw")
    if not ok:
        sys.exit("pytorch_train_gpt2.py: the checkpoint's config is not a GPT-2 trained with AdamW")
    for key in ("lr_matrix", "lr_embed", "lr_norm", "lr_bias"):
        if float(cfg[key]) != 0:
            sys.exit(f"pytorch_train_gpt2.py: per-group {key} is not supported here")
    for key in ("wd_matrix", "wd_embed", "wd_norm", "wd_bias"):
        if float(cfg[key]) >= 0:
            sys.exit(f"pytorch_train_gpt2.py: per-group {key} is not supported here")
    return layers


def n_layers(spec):
    """`A x12` or `AAAA`: the number of layers (all softmax attention)."""
    spec = spec.strip()
    if "x" in spec:
        pat, _, rep = spec.partition("x")
        pat, rep = pat.strip(), int(rep)
    else:
        pat, rep = spec, 1
    if set(pat) != {"A"}:
        sys.exit(f"pytorch_train_gpt2.py: layers = {spec}: only softmax attention ('A') layers are supported")
    return len(pat) * rep


def load_weights(model, weights, L):
    """hybrid's parameter names -> this model; every tensor used once, shapes checked."""
    names = {"embed.tok.weight": "wte.weight", "embed.pos.weight": "wpe.weight",
             "norm_f.weight": "ln_f.weight", "norm_f.bias": "ln_f.bias"}
    parts = {"norm1": "ln_1", "attn.qkv": "attn.c_attn", "attn.out": "attn.c_proj", "norm2": "ln_2",
             "mlp.up": "c_fc", "mlp.down": "c_proj"}
    for l in range(L):
        for ours, theirs in parts.items():
            for kind in ("weight", "bias"):
                names[f"blocks.{l}.{ours}.{kind}"] = f"h.{l}.{theirs}.{kind}"
    state = model.state_dict()
    if set(names) != set(weights):
        sys.exit(f"checkpoint tensors differ from GPT-2's: missing {sorted(set(names) - set(weights))}, "
                 f"extra {sorted(set(weights) - set(names))}")
    if set(names.values()) != set(state):
        sys.exit(f"internal: parameter names differ: {sorted(set(state) ^ set(names.values()))}")
    with torch.no_grad():
        for ours, theirs in names.items():
            w = torch.from_numpy(np.array(weights[ours]))
            if tuple(w.shape) != tuple(state[theirs].shape):
                sys.exit(f"{ours}: shape {tuple(w.shape)}, the model has {tuple(state[theirs].shape)}")
            state[theirs].copy_(w)


# ---------------------------------------------------------------- training

def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--init", required=True, help="hybrid checkpoint folder (model.safetensors + config.conf)")
    ap.add_argument("--out_dir", required=True)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--dtype", choices=("bf16", "fp32"), default="bf16")
    ap.add_argument("--compile", action="store_true", help="torch.compile the model")
    ap.add_argument("--max-seconds", type=float, default=0, help="stop after the step that passes this (0 = off)")
    ap.add_argument("--steps", type=int, default=0, help="stop after this many steps (0 = the config's steps)")
    ap.add_argument("--threads", type=int, default=0, help="torch CPU threads (0 = torch's default)")
    ap.add_argument("--dump-order", type=int, default=0, metavar="N",
                    help="print the first N training windows as `shard start` lines and exit (for tests)")
    args = ap.parse_args()

    cfg = read_config(os.path.join(args.init, "config.conf"))
    check_gpt2(cfg)
    L = n_layers(cfg["layers"])
    C, NH, V, VP = int(cfg["d_model"]), int(cfg["n_head"]), int(cfg["vocab_size"]), int(cfg["padded_vocab_size"])
    H, CTX, eps = int(cfg["mlp_hidden"]), int(cfg["context_length"]), float(cfg["norm_eps"])
    B, T = int(cfg["batch_size"]), int(cfg["seq_len"])
    total = int(cfg["total_batch_size"]) or B * T
    if total % (B * T):
        sys.exit(f"total_batch_size {total} is not a multiple of {B} x {T}")
    accum = total // (B * T)
    steps = int(cfg["steps"])
    end_step = min(steps, args.steps) if args.steps else steps
    seed, shuffle = int(cfg["seed"]), cfg["shuffle"] == "true"
    val_every, val_batches_cfg = int(cfg["val_every"]), int(cfg["val_batches"])
    log_every = int(cfg["log_every"])
    clip, wd = float(cfg["grad_clip"]), float(cfg["weight_decay"])

    train = Loader(cfg["train_data"], B, T, V, shuffle, seed)
    if args.dump_order:
        for _ in range(args.dump_order):
            print(*train.next()[2])
        return
    val, val_batches = None, 0
    if cfg.get("val_data"):
        val = Loader(cfg["val_data"], B, T, V, False, 0)
        avail = val.samples_per_epoch()
        val_batches = val_batches_cfg if val_batches_cfg and val_batches_cfg < avail else avail

    if args.threads:
        torch.set_num_threads(args.threads)
    dev = torch.device(args.device)
    torch.backends.cuda.matmul.allow_tf32 = args.dtype == "bf16"
    torch.backends.cudnn.allow_tf32 = args.dtype == "bf16"
    model = GPT(L, C, NH, H, V, VP, CTX, eps)
    load_weights(model, read_safetensors(os.path.join(args.init, "model.safetensors")), L)
    model.to(dev)
    run_model = torch.compile(model) if args.compile else model

    # optim/optimizer.c: weight decay on matrices and embeddings (the 2-D tensors), none on
    # norms and biases; one lr for all (lr_<group> unset)
    decay = [p for p in model.parameters() if p.dim() == 2]
    no_decay = [p for p in model.parameters() if p.dim() != 2]
    kw = dict(lr=float(cfg["lr"]), betas=(float(cfg["beta1"]), float(cfg["beta2"])), eps=float(cfg["adam_eps"]))
    if dev.type == "cuda":
        kw["fused"] = True
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": wd}, {"params": no_decay, "weight_decay": 0.0}], **kw)
    params = list(model.parameters())

    def autocast():
        if args.dtype == "bf16":
            return torch.autocast(dev.type, dtype=torch.bfloat16)
        return torch.autocast(dev.type, enabled=False)

    def to_dev(a):
        t = torch.from_numpy(a)
        return t.pin_memory().to(dev, non_blocking=True) if dev.type == "cuda" else t

    def evaluate():
        val.seek(0, 0, 0)
        s = torch.zeros((), dtype=torch.float64, device=dev)
        with torch.no_grad(), autocast():
            for _ in range(val_batches):
                x, y, _ = val.next()
                s += run_model(to_dev(x), to_dev(y)).double()
        return (s / val_batches).item()

    stop = {"flag": False}

    def on_signal(sig, frame):
        stop["flag"] = True

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)

    os.makedirs(args.out_dir, exist_ok=True)
    log = open(os.path.join(args.out_dir, "metrics.jsonl"), "w")
    print(f"pytorch {torch.__version__} | {L} layers, d_model {C}, {NH} heads | "
          f"{sum(p.numel() for p in params) / 1e6:.2f}M parameters | {args.device} {args.dtype}"
          f"{' compiled' if args.compile else ''}")
    print(f"batch: {B} x {T} tokens x {accum} accumulation step(s) = {total} tokens per step; "
          f"{end_step} steps; {val_batches} val batches every {val_every}")
    sys.stdout.flush()
    run_start, tokens = time.time(), 0
    for step in range(end_step):
        t0 = time.time()
        lr = lr_at_step(cfg, step)
        for g in opt.param_groups:
            g["lr"] = lr
        opt.zero_grad(set_to_none=True)
        loss = torch.zeros((), dtype=torch.float64, device=dev)
        for _ in range(accum):
            x, y, _ = train.next()
            with autocast():
                l = run_model(to_dev(x), to_dev(y))
            (l / accum).backward()
            loss += l.detach().double() / accum
        grads = [p.grad for p in params if p.grad is not None]
        # in double, as hybrid's sum_squares (an fp32 reduction over the 38M-element
        # embedding gradient is off by ~1e-5 relative on the CPU)
        norm = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g, dtype=torch.float64) for g in grads]))
        if clip > 0:  # optim/optimizer.c: scale = clip / norm only when norm > clip
            scale = torch.where(norm > clip, clip / norm, torch.ones_like(norm)).float()
            for g in grads:
                g.mul_(scale)
        opt.step()
        loss_v, norm_v = loss.item(), norm.item()  # one sync per step, as hybrid's
        if not math.isfinite(loss_v):
            sys.exit(f"step {step + 1}: the training loss is {loss_v}")
        dt, tokens = time.time() - t0, tokens + total
        elapsed = time.time() - run_start
        n = step + 1
        log.write(f'{{"step": {n}, "loss": {loss_v:.9g}, "lr": {lr:.9g}, "grad_norm": {norm_v:.9g}, '
                  f'"tokens": {tokens}, "tok_per_s": {total / dt:.1f}, "elapsed_s": {elapsed:.3f}}}\n')
        log.flush()
        if n % log_every == 0 or n == end_step:
            print(f"step {n:5d}/{steps} | loss {loss_v:.4f} | lr {lr:.3e} | norm {norm_v:.4f} | "
                  f"{total / dt:.0f} tok/s | {elapsed:.1f} s")
            sys.stdout.flush()
        if val is not None and ((val_every and n % val_every == 0) or n == steps or n == end_step):
            v = evaluate()
            log.write(f'{{"step": {n}, "val_loss": {v:.9g}}}\n')
            log.flush()
            print(f"step {n:5d}/{steps} | val loss {v:.4f} ({val_batches} batches)")
            sys.stdout.flush()
        if stop["flag"] or (args.max_seconds and elapsed > args.max_seconds):
            print(f"stopped after step {n} ({'signal' if stop['flag'] else 'time limit'})")
            if val is not None and not ((val_every and n % val_every == 0) or n == steps or n == end_step):
                v = evaluate()
                log.write(f'{{"step": {n}, "val_loss": {v:.9g}}}\n')
                log.flush()
                print(f"step {n:5d}/{steps} | val loss {v:.4f} ({val_batches} batches)")
            break
    log.close()
    elapsed = time.time() - run_start
    print(f"done: {tokens} tokens in {elapsed:.1f} s ({tokens / elapsed:.0f} tok/s including validation)")


if __name__ == "__main__":
    main()
