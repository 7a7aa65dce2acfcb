#!/usr/bin/env python3
"""Summary of scripts/bench_dp_gpu.sh: tok/s per GPU, scaling efficiency, memory per GPU,
and the first 20 losses of the largest run against one GPU with the same global batch."""
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from metrics_io import median_tok_per_s, run_losses, run_memory  # noqa: E402

res, ng, B, T = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])


def metrics(name):
    return run_losses(f"{res}/{name}")


def memory(name):
    return run_memory(f"{res}/{name}.log")


def tok_per_s(name):  # median over the steps after the first five
    return median_tok_per_s(f"{res}/{name}")


base = tok_per_s("g1")
print(f"\nGPT-2 124M, {B} x {T} tokens per GPU per step, bf16, AdamW (median tok/s of steps 6+)")
print("| GPUs | ZeRO-1 | tok/s | tok/s per GPU | scaling efficiency | backend peak / device in use per GPU (GiB) |")
print("| --- | --- | --- | --- | --- | --- |")
rows = [("g1", 1, "-")]
for n in (2, 4, 8):
    if n <= ng:
        rows += [(f"g{n}", n, "off"), (f"g{n}z", n, "on")]
for name, n, z in rows:
    t = tok_per_s(name)
    peak, used = memory(name)
    print(f"| {n} | {z} | {t / 1e3:.1f}k | {t / n / 1e3:.1f}k | {t / (n * base) * 100:.1f}% | {peak:.2f} / {used:.2f} |")
if ng >= 2:
    a, b = metrics(f"g1acc{ng}")[:20], metrics(f"g{ng}")[:20]
    d = [abs(x["loss"] - y["loss"]) for x, y in zip(a, b)]
    print(f"\nfirst 20 losses, {ng} GPUs vs 1 GPU with the same global batch ({ng} accumulation steps): "
          f"max |diff| {max(d):.2e}, mean {statistics.mean(d):.2e}; "
          f"losses {a[0]['loss']:.4f} -> {a[-1]['loss']:.4f} (1 GPU) and {b[0]['loss']:.4f} -> {b[-1]['loss']:.4f}")
    za, zb = metrics(f"g{ng}")[:20], metrics(f"g{ng}z")[:20]
    dz = max(abs(x["loss"] - y["loss"]) for x, y in zip(za, zb))
    print(f"ZeRO-1 on vs off ({ng} GPUs), first 20 losses: max |diff| {dz:.2e}")
