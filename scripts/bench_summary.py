#!/usr/bin/env python3
"""Prints the hybrid.c vs PyTorch table of `make bench` from the two JSON results."""
import json
import sys

ours, ref = (json.load(open(p)) for p in sys.argv[1:3])
print(f"{'':12s} {'ms/step':>9s} {'tok/s':>10s} {'MFU':>7s} {'peak GiB':>9s}")
for r in (ours, ref):
    print(f"{r['impl']:12s} {r['ms_per_step']:9.2f} {r['tok_per_s'] / 1e3:9.1f}k {100 * r['mfu']:6.1f}% "
          f"{r['peak_mem_gib']:9.2f}")
print(f"hybrid.c / PyTorch throughput: {ours['tok_per_s'] / ref['tok_per_s']:.3f}x (target >= 1.3x, issue 19)")
if "muon_step_ms" in ours:
    print(f"optimizer step alone: AdamW {ours['adamw_step_ms']:.2f} ms, Muon {ours['muon_step_ms']:.2f} ms "
          f"(overhead {ours['muon_step_ms'] - ours['adamw_step_ms']:.2f} ms, "
          f"{100 * (ours['muon_step_ms'] - ours['adamw_step_ms']) / ours['ms_per_step']:.1f}% of a step)")
