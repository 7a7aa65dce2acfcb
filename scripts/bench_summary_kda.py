#!/usr/bin/env python3
"""The side-by-side of `make bench-kda`: our chunkwise KDA / GDN (tests/gpu/bench_delta_rule.c)
against fla (scripts/bench_fla_kda.py), as Markdown rows ready for BENCHMARKS.md.

usage: bench_summary_kda.py OURS.json FLA.json

Either file may be missing or hold failed cases: those cells say so. Ratios are ours / fla
(below 1: ours is faster or smaller). Ours may hold each case in two arithmetics (the records'
"arith": split, the hi + lo products; bf16, one bf16 MMA a product as fla: bench_delta_rule
--arith); each gets its row against the same fla record (records without the field are split).
Targets (issue 15), KDA only: forward and forward+backward <= 0.6x fla's median at every shape;
memory (forward+backward) <= fla's; judged for each arithmetic.
"""
import json
import os
import sys

TARGET = 0.6


def load(path, who, arith):
    """records by (kind, B, T, H, K, V, pass), and with arith: (.., pass, arithmetic)"""
    if not os.path.isfile(path):
        print(f"note: {path} is missing: {who} not measured")
        return None, {}
    d = json.load(open(path))
    recs = {}
    for r in d.get("records", []):
        key = (r["kind"], r["B"], r["T"], r["H"], r["K"], r["V"], r["pass"])
        recs[key + ((r.get("arith", "split"),) if arith else ())] = r
    return d, recs


def ok(r):
    return r is not None and r.get("status", "ok") == "ok"


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    ours_meta, ours = load(sys.argv[1], "hybrid.c", True)
    fla_meta, fla = load(sys.argv[2], "fla", False)
    if ours_meta and ours_meta.get("emulated"):
        print("WARNING: our numbers come from the CPU emulator build: they are not GPU timings")
    if fla_meta:
        print(f"fla {fla_meta.get('fla_version', '?')} commit {fla_meta.get('fla_commit', '?')}, torch "
              f"{fla_meta.get('torch', '?')}, triton {fla_meta.get('triton', '?')}, {fla_meta.get('device', '?')}")
    for name, m in (("hybrid.c", ours_meta), ("fla", fla_meta)):
        if m:
            print(f"{name}: {m.get('reps')} timed repetitions after {m.get('warmup')} warm-up, chunk {m.get('chunk')}")
    ours_cases = {k[:7] for k in ours}
    keys = list(ours) + [k + ("—",) for k in fla if k not in ours_cases]
    order = {"kda": 0, "gdn": 1}
    ariths = {"split": 0, "bf16": 1}
    passes = {"fwd": 0, "bwd": 1, "fwdbwd": 2}
    shapes = []
    for k in keys:
        if k[1:6] not in shapes:
            shapes.append(k[1:6])
    keys.sort(key=lambda k: (order.get(k[0], 9), shapes.index(k[1:6]), ariths.get(k[7], 9), passes.get(k[6], 9)))

    print()
    print("| kind | B, T, H, K=V | arithmetic | pass | ours ms (median / min) | fla ms (median / min) | ours / fla "
          "| target | ours MiB | fla MiB | memory ours / fla |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    missed, checked = [], 0
    for k in keys:
        kind, B, T, H, K, V, p, a = k
        o, f = ours.get(k), fla.get(k[:7])

        def ms(r, who):
            if r is None:
                return "not measured"
            if not ok(r):
                return "FAIL"
            return f"{r['median_ms']:.3f} / {r['min_ms']:.3f}"

        def mib(r):
            return f"{r['peak_bytes'] / 2**20:.0f}" if ok(r) else "—"

        ratio = o["median_ms"] / f["median_ms"] if ok(o) and ok(f) and f["median_ms"] > 0 else None
        mratio = o["peak_bytes"] / f["peak_bytes"] if ok(o) and ok(f) and f["peak_bytes"] > 0 else None
        target = "—"
        if kind == "kda" and p in ("fwd", "fwdbwd"):
            if ratio is None:
                target = f"<= {TARGET}x: not measured"
            else:
                checked += 1
                target = f"<= {TARGET}x: {'met' if ratio <= TARGET else 'NOT met'}"
                if ratio > TARGET:
                    missed.append(f"{kind} {B},{T},{H},{K},{V} {a} {p} {ratio:.2f}x")
            if p == "fwdbwd" and mratio is not None:
                target += f"; memory <= fla: {'met' if mratio <= 1 else 'NOT met'}"
                if mratio > 1:
                    missed.append(f"{kind} {B},{T},{H},{K},{V} {a} memory {mratio:.2f}x")
        shape = f"{B}, {T}, {H}, {K}" + ("" if K == V else f" (V {V})")
        print(f"| {kind.upper()} | {shape} | {a} | {p} | {ms(o, 'ours')} | {ms(f, 'fla')} | "
              f"{f'{ratio:.2f}x' if ratio is not None else '—'} | {target} | {mib(o)} | {mib(f)} | "
              f"{f'{mratio:.2f}x' if mratio is not None else '—'} |")
    print()
    print("ms: median and min over the timed repetitions, CUDA events around each call. MiB: ours = backend "
          "memory the pass needs (inputs, outputs, gradients, workspace); fla = torch.cuda.max_memory_allocated "
          "during the pass, inputs included.")
    if missed:
        print("targets not met: " + "; ".join(missed))
    elif checked:
        print(f"every KDA target measured here is met ({checked} time comparisons)")
    else:
        print("no KDA target could be checked: a side is missing or failed")


if __name__ == "__main__":
    main()
