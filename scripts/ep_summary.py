#!/usr/bin/env python3
"""Summary of scripts/bench_ep_gpu.sh (expert parallelism on the GPUs of one host): the first 20
losses of EP 2 (and EP 2 x DP 2) against 1 GPU with the same global batch, tok/s and memory per
GPU of 1 GPU, DP 2 and EP 2, the all-to-all's time from the profiled EP 2 run, and the
checkpoints resumed across EP sizes against the uninterrupted runs.
Usage: ep_summary.py RESULT_DIR NGPU B T CONFIG"""
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from metrics_io import median_tok_per_s, run_losses, run_memory  # noqa: E402

res, ng, B, T, config = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
BAR = 1e-4  # issue 17: EP on GPUs against EP 1 with the same global batch, 20 steps


def losses(name):
    return run_losses(f"{res}/{name}")


def memory(name):
    peak, used = run_memory(f"{res}/{name}.log")
    return f"{peak:.2f} / {used:.2f}"


def tok_per_s(name):  # median over the steps after the first five
    return median_tok_per_s(f"{res}/{name}")


def compare(a, b, what, n=20):
    la, lb = losses(a)[:n], losses(b)[:n]
    if len(la) < n or len(lb) < n:
        print(f"{what}: {len(la)} and {len(lb)} losses logged, {n} expected: NOT met")
        return False
    d = max(abs(x["loss"] - y["loss"]) for x, y in zip(la, lb))
    ok = d <= BAR
    print(f"{what}: first {n} losses max |diff| {d:.2e} (bar {BAR:.0e}: {'met' if ok else 'NOT met'}); "
          f"{la[0]['loss']:.4f} -> {la[-1]['loss']:.4f} and {lb[0]['loss']:.4f} -> {lb[-1]['loss']:.4f}")
    return ok


print(f"\n{config}, {B} x {T} tokens per GPU per micro-batch (median tok/s of steps 6+)")
print("| run | GPUs | experts per GPU | tok/s | tok/s per GPU | backend peak / device in use per GPU (GiB) |")
print("| --- | --- | --- | --- | --- | --- |")
for name, n, experts in (("g1", 1, "all"), ("dp2", 2, "all (replicated)"), ("ep2", 2, "half (EP 2)")):
    t = tok_per_s(name)
    print(f"| {name} | {n} | {experts} | {t / 1e3:.1f}k | {t / n / 1e3:.1f}k | {memory(name)} |")
with open(f"{res}/ep2prof.log") as f:
    m = re.search(r"^nccl_alltoallv\s+([0-9.]+)\s+([0-9.]+)\s+([0-9.]+)%", f.read(), re.M)
print("\nthe all-to-all (EP 2, HYBRID_CUDA_PROFILE=1, per step on one rank): " +
      (f"{m.group(1)} ms in {m.group(2)} calls, {m.group(3)}% of the ops' time" if m else "not in the profile"))
ok = compare("g1acc2", "ep2", "\nEP 2 on 2 GPUs vs 1 GPU with the same global batch (2 accumulation steps)")
ok &= compare("g1acc2", "dp2", "DP 2 (replicated experts) vs the same 1-GPU run")
if ng >= 4:
    ok &= compare("g1acc4", "ep2dp2", "EP 2 x DP 2 on 4 GPUs vs 1 GPU with 4 accumulation steps")
ok &= compare("ep2", "ep2to1", "an EP 2 checkpoint resumed on 1 GPU vs the uninterrupted EP 2 run")
ok &= compare("g1b2", "g1to2", "a 1-GPU checkpoint resumed on EP 2 vs the uninterrupted 1-GPU run")
sys.exit(0 if ok else 1)
