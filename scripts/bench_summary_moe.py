#!/usr/bin/env python3
"""The side-by-side of `make bench-moe`: our MoE layer (tests/gpu/bench_moe.c) against the PyTorch
reference (scripts/bench_torch_moe.py), as Markdown tables ready for BENCHMARKS.md.

usage: bench_summary_moe.py OURS.json TORCH.json
       bench_summary_moe.py model METRICS.jsonl [SKIP]   (`make bench-moe-model`: the whole model's
           median tok/s and ms/step over the steps after the first SKIP (default 2) of a train run)
       bench_summary_moe.py paths NAME=OURS.json ...   (several bench_moe runs of ours, e.g. the GEMM
           modes and switches of results/bench/wgmma-s25/run.sh: per shape, each profiled grouped
           GEMM and GLU pass and the layer's forward+backward side by side, the fastest marked; runs
           named STEM1, STEM2, ... (repeats of one build, e.g. results/bench/wgmma-s26/run3.sh's
           alternating rounds) get a second table: each stem's median over its runs, the spread)

Either file may be missing or hold failed cases: those cells say so. Targets (issue 17 item 4):
  layer:  the MoE layer's forward+backward >= 1.5x the PyTorch reference's speed (torch ms / ours ms)
  GEMMs:  the grouped expert GEMMs at >= 70% of the dense-GEMM throughput at the same FLOPs
          (bench_moe's dense cuBLAS set / its grouped GEMM kernels, profiled)
"""
import json
import os
import re
import sys

LAYER_TARGET = 1.5
GEMM_TARGET = 0.7
PASSES = ("fwd", "bwd", "fwdbwd")
CATS = ("router", "permute", "experts", "combine", "dense", "other")


def load(path, who):
    if not os.path.isfile(path):
        print(f"note: {path} is missing: {who} not measured")
        return None, {}, {}
    d = json.load(open(path))
    recs, shapes = {}, {}
    for r in d.get("records", []):
        if r:
            recs[(r["C"], r["E"], r["K"], r["M"], r["S"], r["N"], r["pass"])] = r
    for s in d.get("shapes", []):
        shapes[(s["C"], s["E"], s["K"], s["M"], s["S"], s["N"])] = s
    return d, recs, shapes


def ok(r):
    return r is not None and r.get("status", "ok") == "ok"


def ms(r):
    if r is None:
        return "not measured"
    if not ok(r):
        return r.get("status", "FAIL")
    return f"{r['median_ms']:.3f} / {r['min_ms']:.3f}"


def model(path, skip):
    """The training throughput of a `hybrid train` run from its metrics.jsonl."""
    if not os.path.isfile(path):
        print(f"the model run wrote no {path}: not measured")
        return 1
    rows = [json.loads(line) for line in open(path) if line.strip()]
    steps = [r for r in rows if "tok_per_s" in r and r.get("step", 0) > skip]
    if not steps:
        print(f"{path}: no training step after step {skip}: not measured")
        return 1
    tps = sorted(r["tok_per_s"] for r in steps)
    med = median(tps)
    tokens = steps[-1]["tokens"] - (steps[0]["tokens"] if len(steps) > 1 else 0)
    print(f"whole model: median {med / 1e3:.1f}k tok/s over steps {steps[0]['step']}..{steps[-1]['step']} "
          f"(min {tps[0] / 1e3:.1f}k, max {tps[-1] / 1e3:.1f}k; {tokens / max(len(steps) - 1, 1):.0f} tokens a step)")
    return 0


GEMM_PARTS = ("gemm_fwd13", "glu_fwd", "gemm_fwd2", "gemm_dgrad2", "gemm_wgrad2", "glu_bwd", "gemm_dgrad13",
              "gemm_wgrad13")


def paths(args):
    """Several runs of ours side by side: where each grouped GEMM is fastest. A part a run does not
    have (the GLU fused into its GEMMs) is 0 there: compare gemm_fwd13 + glu_fwd and gemm_dgrad2 +
    glu_bwd together across runs that fuse and runs that do not."""
    runs = []
    for a in args:
        if "=" not in a:
            sys.exit(f"bench_summary_moe.py paths: expected NAME=FILE, got {a}")
        name, path = a.split("=", 1)
        d, recs, shapes = load(path, name)
        if d and d.get("emulated"):
            print(f"WARNING: {name} comes from the CPU emulator build: not GPU timings")
        runs.append((name, d, recs, shapes))
    keys = []
    for _, _, _, shapes in runs:
        keys += [k for k in shapes if k not in keys]
    if not keys:
        print("no shape measured")
        return 1
    for k in keys:
        C, E, K, M, S, N = k
        print(f"\nC {C}, E {E}, top-{K}, expert hidden {M}, shared {S}, N {N} (ms per forward+backward, profiled; "
              f"* the fastest)")
        names = [r[0] for r in runs]
        print("| part | " + " | ".join(names) + " |")
        print("| --- |" + " ---: |" * len(names))
        rows = [(p, [r[3].get(k, {}).get("ops_ms", {}).get("moe_experts/" + p) for r in runs]) for p in GEMM_PARTS]
        rows.append(("fwd13 + glu_fwd", [None if rows[0][1][i] is None else rows[0][1][i] + (rows[1][1][i] or 0)
                                         for i in range(len(runs))]))
        rows.append(("dgrad2 + glu_bwd", [None if rows[3][1][i] is None else rows[3][1][i] + (rows[5][1][i] or 0)
                                          for i in range(len(runs))]))
        rows.append(("grouped GEMMs (all)", [r[3].get(k, {}).get("grouped_gemm_ms") for r in runs]))
        layer = []
        for r in runs:
            rec = r[2].get(k + ("fwdbwd",))
            layer.append(rec["median_ms"] if ok(rec) else None)
        rows.append(("layer fwd+bwd (median)", layer))
        for part, vals in rows:
            have = [v for v in vals if v]
            best = min(have) if have else None
            cells = ["-" if v is None else (f"{v:.3f}" + (" *" if v == best else "")) for v in vals]
            print(f"| {part} | " + " | ".join(cells) + " |")
        repeated_medians(names, rows)
    return 0


def median(v):
    v = sorted(v)
    n = len(v)
    return v[n // 2] if n % 2 else 0.5 * (v[n // 2 - 1] + v[n // 2])


def repeated_medians(names, rows):
    """Runs named STEM1, STEM2, ... are repeats of one build (alternated with the others, so a drift
    of the machine falls on every stem alike): per stem with two runs or more, each part's median
    over its runs and their spread (min-max), the smallest median marked."""
    stems = {}
    for i, name in enumerate(names):
        m = re.fullmatch(r"(.*?)(\d+)", name)
        if m:
            stems.setdefault(m.group(1), []).append(i)
    stems = {st: idx for st, idx in stems.items() if len(idx) > 1}
    if not stems:
        return
    print("\nmedians over the repeated runs (min-max in brackets; * the smallest median)")
    print("| part | " + " | ".join(f"{st} ({len(idx)} runs)" for st, idx in stems.items()) + " |")
    print("| --- |" + " ---: |" * len(stems))
    for part, vals in rows:
        meds = {}
        for st, idx in stems.items():
            have = [vals[i] for i in idx if vals[i] is not None]
            meds[st] = (median(have), min(have), max(have)) if have else None
        best = min((m[0] for m in meds.values() if m), default=None)
        cells = ["-" if m is None else f"{m[0]:.3f}" + (" *" if m[0] == best else "") + f" ({m[1]:.3f}-{m[2]:.3f})"
                 for m in meds.values()]
        print(f"| {part} | " + " | ".join(cells) + " |")


def main():
    if len(sys.argv) in (3, 4) and sys.argv[1] == "model":
        sys.exit(model(sys.argv[2], int(sys.argv[3]) if len(sys.argv) == 4 else 2))
    if len(sys.argv) >= 3 and sys.argv[1] == "paths":
        sys.exit(paths(sys.argv[2:]))
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    om, ours, oshapes = load(sys.argv[1], "hybrid.c")
    tm, torch, tshapes = load(sys.argv[2], "PyTorch")
    if om and om.get("emulated"):
        print("WARNING: our numbers come from the CPU emulator build: they are not GPU timings")
    if tm:
        print(f"PyTorch {tm.get('torch', '?')} on {tm.get('device', '?')}: expert GEMMs {tm.get('gemm', '?')} "
              f"(grouped matmul in this torch: {tm.get('grouped_mm_available') or 'none'})")
    for name, m in (("hybrid.c", om), ("PyTorch", tm)):
        if m:
            print(f"{name}: {m.get('reps')} timed repetitions after {m.get('warmup')} warm-up, config {m.get('config')}")
    if om:
        print(f"hybrid.c expert GEMMs: {om.get('moe_gemm', 'own')} (HYBRID_MOE_GEMM)")
    shapes = []
    for k in list(ours) + list(torch):
        if k[:6] not in shapes:
            shapes.append(k[:6])

    def label(s):
        C, E, K, M, S, N = s
        name = next((r.get("name") for k, r in list(ours.items()) + list(torch.items()) if k[:6] == s), "")
        return f"{name + ': ' if name else ''}C {C}, E {E}, top-{K}, m {M}, shared {S}, N {N}"

    missed, checked = [], 0
    print()
    print("| shape | pass | ours ms (median / min) | PyTorch ms (median / min) | speed-up (PyTorch / ours) | target "
          "| ours MiB | PyTorch MiB |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for s in shapes:
        for p in PASSES:
            o, t = ours.get(s + (p,)), torch.get(s + (p,))
            sp = t["median_ms"] / o["median_ms"] if ok(o) and ok(t) and o["median_ms"] > 0 else None
            target = "—"
            if p == "fwdbwd":
                if sp is None:
                    target = f">= {LAYER_TARGET}x: not measured"
                else:
                    checked += 1
                    target = f">= {LAYER_TARGET}x: {'met' if sp >= LAYER_TARGET else 'NOT met'}"
                    if sp < LAYER_TARGET:
                        missed.append(f"{label(s)}: layer {sp:.2f}x")
            omib = f"{o['peak_bytes'] / 2**20:.0f}" if ok(o) else "—"
            tmib = f"{t['peak_bytes'] / 2**20:.0f}" if ok(t) and t.get("peak_bytes") else "—"
            print(f"| {label(s)} | {p} | {ms(o)} | {ms(t)} | {f'{sp:.2f}x' if sp is not None else '—'} | {target} "
                  f"| {omib} | {tmib} |")

    print()
    print("| shape | routed GEMM GFLOP (fwd+bwd) | dense cuBLAS ms | TFLOP/s | grouped GEMM kernels ms | TFLOP/s "
          "| efficiency | target | experts op ms (GEMMs + GLU) | op-level efficiency | load max / min over mean |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for s in shapes:
        x, d, e = oshapes.get(s), ours.get(s + ("dense_fwdbwd",)), ours.get(s + ("experts_fwdbwd",))
        if not x or not ok(d):
            print(f"| {label(s)} | not measured | | | | | | >= {GEMM_TARGET:.0%}: not measured | | | |")
            continue
        fl = x["routed_gemm_flops_fwdbwd"]
        g = x.get("grouped_gemm_ms", 0)
        eff = x.get("grouped_gemm_efficiency", 0)
        if x.get("profile_reps", 0) > 0 and g > 0:
            checked += 1
            target = f">= {GEMM_TARGET:.0%}: {'met' if eff >= GEMM_TARGET else 'NOT met'}"
            if eff < GEMM_TARGET:
                missed.append(f"{label(s)}: grouped GEMMs {eff:.0%} of dense")
            gcell, gtf, ecell = f"{g:.3f}", f"{fl / (g * 1e9):.0f}", f"{eff:.0%}"
        else:
            target, gcell, gtf, ecell = f">= {GEMM_TARGET:.0%}: not profiled", "—", "—", "—"
        print(f"| {label(s)} | {fl / 1e9:.1f} | {d['median_ms']:.3f} | {fl / (d['median_ms'] * 1e9):.0f} | {gcell} "
              f"| {gtf} | {ecell} | {target} | {e['median_ms']:.3f} | {x.get('experts_op_efficiency', 0):.0%} "
              f"| {x.get('load_max_over_mean', 0):.2f} / {x.get('load_min_over_mean', 0):.2f} |")

    print()
    print("Ours, forward+backward by part (profiled repetitions, ms and share of the ops' sum):")
    print()
    print("| shape | " + " | ".join(CATS) + " | of experts: grouped GEMMs / GLU | sum |")
    print("| --- |" + " --- |" * (len(CATS) + 2))
    for s in shapes:
        x = oshapes.get(s)
        if not x or not x.get("profile_reps"):
            continue
        b = x["breakdown_ms"]
        tot = sum(b.get(c, 0) for c in CATS) or 1
        cells = " | ".join(f"{b.get(c, 0):.3f} ({100 * b.get(c, 0) / tot:.0f}%)" for c in CATS)
        print(f"| {label(s)} | {cells} | {x['grouped_gemm_ms']:.3f} / {x['experts_glu_ms']:.3f} | {tot:.3f} |")
    print()
    print("ms: median and min over the timed repetitions, CUDA events around each call. MiB: ours = the MoE "
          "layer's backend memory for the pass (parameters, gradients, saved activations, scratch, inputs and "
          "outputs); PyTorch = torch.cuda.max_memory_allocated during the pass. Router = its ops + the logits matmul "
          "(timed alone); dense = the other matmuls (shared experts) and their GLU.")
    if missed:
        print("targets not met: " + "; ".join(missed))
    elif checked:
        print(f"every target measured here is met ({checked} checks)")
    else:
        print("no target could be checked: a side is missing or failed")


if __name__ == "__main__":
    main()
