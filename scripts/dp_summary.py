#!/usr/bin/env python3
"""Summary of scripts/bench_dp_gpu.sh: tok/s per GPU, scaling efficiency, memory per GPU,
and the first 20 losses of the largest run against one GPU with the same global batch."""
import json
import re
import statistics
import sys

res, ng, B, T = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])


def metrics(name):
    with open(f"{res}/{name}/metrics.jsonl") as f:
        return [json.loads(l) for l in f if '"loss"' in l]


def memory(name):
    with open(f"{res}/{name}.log") as f:
        m = re.search(r"backend peak ([0-9.]+) GiB; device in use ([0-9.]+)", f.read())
    return (float(m.group(1)), float(m.group(2))) if m else (float("nan"), float("nan"))


def tok_per_s(name):  # median over the steps after the first five
    return statistics.median(r["tok_per_s"] for r in metrics(name)[5:])


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
