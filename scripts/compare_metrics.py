#!/usr/bin/env python3
"""Compares two metrics logs of the same run (e.g. hybrid.c and scripts/pytorch_train_gpt2.py
from the same initial weights on the same batches): the steps both reached, train and
validation losses step by step, and speed.

usage: compare_metrics.py [--json FILE] LABEL_A=PATH/metrics.jsonl LABEL_B=PATH/metrics.jsonl

Prints, over the common steps: the largest |train loss difference| (overall, in the first
10 steps, in the first 100, and its step), the mean |difference|, the same for the
validation loss, each run's first/final/best validation loss, and each run's median
tok/s over its steps (the per-step number both logs carry, validation excluded).
Standard library only.
"""
import argparse
import json
import statistics
import sys

from metrics_io import records


def read(path):
    train, val = {}, {}
    for r in records(path):
        if "loss" in r:
            train[r["step"]] = r
        if "val_loss" in r:
            val[r["step"]] = r["val_loss"]
    return train, val


def worst(diffs):
    """(max |d|, its step, mean |d|) over a {step: d} dict."""
    if not diffs:
        return float("nan"), None, float("nan")
    step = max(diffs, key=lambda s: abs(diffs[s]))
    return abs(diffs[step]), step, statistics.mean(abs(d) for d in diffs.values())


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--json", help="also write the numbers as JSON here")
    ap.add_argument("runs", nargs=2, help="LABEL=PATH/metrics.jsonl")
    a = ap.parse_args()
    labels, logs = [], []
    for spec in a.runs:
        label, sep, path = spec.partition("=")
        if not sep:
            label, path = path, spec
        labels.append(label)
        logs.append(read(path))
    (ta, va), (tb, vb) = logs
    common = sorted(set(ta) & set(tb))
    if not common:
        sys.exit("compare_metrics.py: the two logs have no step in common")
    d = {s: ta[s]["loss"] - tb[s]["loss"] for s in common}
    out = {"labels": labels, "common_steps": len(common), "last_common_step": common[-1]}
    for name, cut in (("all", None), ("first10", 10), ("first100", 100)):
        m, s, mean = worst({k: v for k, v in d.items() if cut is None or k <= cut})
        out[f"train_max_abs_diff_{name}"], out[f"train_max_abs_diff_{name}_step"] = m, s
        out[f"train_mean_abs_diff_{name}"] = mean
    vcommon = sorted(set(va) & set(vb))
    vm, vs, vmean = worst({s: va[s] - vb[s] for s in vcommon})
    out.update(val_common=len(vcommon), val_max_abs_diff=vm, val_max_abs_diff_step=vs, val_mean_abs_diff=vmean)
    for label, (t, v) in zip(labels, logs):
        steps = sorted(t)
        best = min(v, key=v.get) if v else None
        out[label] = {
            "steps": steps[-1] if steps else 0,
            "final_train_loss": t[steps[-1]]["loss"] if steps else None,
            "first_val": v[min(v)] if v else None,
            "final_val": v[max(v)] if v else None, "final_val_step": max(v) if v else None,
            "best_val": v[best] if v else None, "best_val_step": best,
            "median_tok_per_s": statistics.median(t[s]["tok_per_s"] for s in steps[1:]) if len(steps) > 1 else None,
            "elapsed_s": t[steps[-1]].get("elapsed_s") if steps else None,
        }
    A, B = labels
    print(f"{A} vs {B}: {len(common)} common steps (last {common[-1]})")
    for name in ("first10", "first100", "all"):
        print(f"  train loss |{A} - {B}| {name:>8}: max {out[f'train_max_abs_diff_{name}']:.4g} "
              f"(step {out[f'train_max_abs_diff_{name}_step']}), mean {out[f'train_mean_abs_diff_{name}']:.4g}")
    print(f"  val loss |{A} - {B}| over {len(vcommon)} passes: max {vm:.4g} (step {vs}), mean {vmean:.4g}")
    for label in labels:
        r = out[label]
        if r["best_val"] is not None:
            print(f"  {label}: {r['steps']} steps, final train {r['final_train_loss']:.4f}, val first "
                  f"{r['first_val']:.4f}, best {r['best_val']:.4f} (step {r['best_val_step']}), final "
                  f"{r['final_val']:.4f} (step {r['final_val_step']})", end="")
        else:
            print(f"  {label}: {r['steps']} steps, final train {r['final_train_loss']:.4f}", end="")
        if r["median_tok_per_s"]:
            print(f", median {r['median_tok_per_s'] / 1e3:.1f}k tok/s, {r['elapsed_s']:.0f} s", end="")
        print()
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)
            f.write("\n")


if __name__ == "__main__":
    main()
