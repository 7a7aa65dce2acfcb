#!/usr/bin/env python3
"""`make bench-hybrid`'s bookkeeping (scripts/bench_hybrid.sh; BENCHMARKS.md, "H200: the 3:1 hybrid
against fla").

  bench_summary_hybrid.py record OURS.json CASE B T LAYERS RC LOG METRICS
      adds (or replaces) CASE's record in OURS.json from one `hybrid train` run: RC its exit status,
      LOG its stdout+stderr, METRICS its metrics.jsonl. ms/step: the median of steps 9..N of the
      per-step times (B*T / the metrics' tok_per_s: each step's host-clock time, from before its
      zero_grad to after the device synchronize that ends it; the data loader's next batch included),
      the steps fla's peer takes (ts[8:]); peak: the log's "backend peak" (our CUDA allocator's
      high-water mark). A run that died on "has no ... op family yet" is "refused" with that message.
      delta_rule_arith: "split" where the log has the trainer's note for HYBRID_DR_BF16=0 (the split
      hi + lo products), else "one MMA" (the default since session 27; docs/delta-rule.md, "The
      default arithmetic").
  bench_summary_hybrid.py table OURS.json FLA.json
      the side-by-side (Markdown rows for BENCHMARKS.md): ours, fla, ratio ours/fla of tok/s (above 1:
      ours is faster) and of peak memory (below 1: ours is smaller). Targets (issue 16): on 3:1 at
      T1024 and T4096, ours >= 2x fla's tok/s and memory <= fla's: each said met, NOT met or not
      measured (the exit status is 0 either way: a missed target is a result, not a failed run).
"""
import json
import os
import re
import sys

from bench_common import write_json

TARGET_CASES = ("3:1-T1024", "3:1-T4096")
TARGET_SPEEDUP = 2.0


def load(path):
    if not os.path.isfile(path):
        return None
    return json.load(open(path))


def record(path, case, B, T, layers, rc, log, metrics):
    B, T, rc = int(B), int(T), int(rc)
    d = load(path) or dict(impl="hybrid.c", trainer="./hybrid train", records=[])
    text = open(log, errors="replace").read() if os.path.isfile(log) else ""
    split = "HYBRID_DR_BF16=0: the chunkwise delta rule runs the split" in text
    r = dict(case=case, B=B, T=T, layers=layers, delta_rule_arith="split" if split else "one MMA")
    errors = [l[len("hybrid: error: "):] for l in text.splitlines() if l.startswith("hybrid: error: ")]
    steps = []
    if os.path.isfile(metrics):
        for line in open(metrics):
            try:
                m = json.loads(line)
            except ValueError:
                continue
            if "tok_per_s" in m and m.get("tok_per_s", 0) > 0:
                steps.append((m["step"], B * T / m["tok_per_s"] * 1e3))
    if rc != 0 and errors and re.search(r"has no .* op family yet", errors[-1]):
        r.update(status="refused", reason=errors[-1])
    elif rc != 0 or len(steps) < 9:
        why = errors[-1] if errors else (text.strip().splitlines() or ["no output"])[-1]
        r.update(status="FAIL", reason=f"exit {rc}, {len(steps)} steps logged: {why}"[:800])
    else:
        steps.sort()
        timed = sorted(ms for s, ms in steps if s >= 9)
        med = timed[len(timed) // 2] if len(timed) % 2 else 0.5 * (timed[len(timed) // 2 - 1] + timed[len(timed) // 2])
        pm = re.search(r"backend peak ([0-9.]+) GiB", text)
        pp = re.search(r"\| ([0-9.]+)M parameters \|", text)
        r.update(status="ok", ms_per_step=round(med, 3), tok_per_s=round(B * T / med * 1e3, 1),
                 peak_mem_gib=float(pm.group(1)) if pm else None, params_m=float(pp.group(1)) if pp else None,
                 median_of=f"steps 9..{steps[-1][0]}", step_ms=[round(ms, 3) for s, ms in steps])
    d["records"] = [x for x in d["records"] if x["case"] != case] + [r]
    write_json(path, d)
    if r["status"] == "ok":
        mem = f"{r['peak_mem_gib']:.2f} GiB" if r["peak_mem_gib"] is not None else "not in the log (not CUDA)"
        print(f"ours {case:11s} B={B} T={T} {layers}: {r['ms_per_step']:.1f} ms/step  {r['tok_per_s']:,.0f} tok/s  "
              f"backend peak {mem}  (delta rule: {r['delta_rule_arith']})")
    else:
        print(f"ours {case:11s} B={B} T={T} {layers}: {r['status']}: {r['reason']}")


def table(ours_path, fla_path):
    ours, fla = load(ours_path), load(fla_path)
    if ours is None:
        print(f"note: {ours_path} is missing: ours not measured")
    if fla is None:
        print(f"note: {fla_path} is missing: fla not measured (set FLA_DIR)")
    o = {r["case"]: r for r in (ours or {}).get("records", [])}
    f = {r["case"]: r for r in (fla or {}).get("records", [])}
    if fla:
        print(f"fla {fla.get('fla_version', '?')} commit {fla.get('fla_commit', '?')}, torch {fla.get('torch', '?')}, "
              f"triton {fla.get('triton', '?')}, {fla.get('device', '?')}")

    def cell(r, key, fmt):
        if r is None:
            return "not measured"
        if r["status"] != "ok":  # said once, in the ms/step column
            return f"{r['status']}: {r.get('reason') or r.get('error', '')}" if key == "ms_per_step" else "-"
        v = r.get(key)
        return fmt(v) if v is not None else "?"

    def ratio(a, b, key):
        if a is None or b is None or a["status"] != "ok" or b["status"] != "ok" or not a.get(key) or not b.get(key):
            return "-"
        return f"{a[key] / b[key]:.2f}x"

    print("| case | B | T | ours ms/step | ours tok/s | ours peak GiB | fla ms/step | fla tok/s | fla peak GiB "
          "| tok/s ours/fla | memory ours/fla |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    cases = list(dict.fromkeys(list(o) + list(f)))
    for c in cases:
        a, b = o.get(c), f.get(c)
        B, T = (a or b)["B"], (a or b)["T"]
        print(f"| {c} | {B} | {T} | {cell(a, 'ms_per_step', lambda v: f'{v:.1f}')} "
              f"| {cell(a, 'tok_per_s', lambda v: f'{v / 1e3:.1f}k')} | {cell(a, 'peak_mem_gib', lambda v: f'{v:.2f}')} "
              f"| {cell(b, 'ms_per_step', lambda v: f'{v:.1f}')} | {cell(b, 'tok_per_s', lambda v: f'{v / 1e3:.1f}k')} "
              f"| {cell(b, 'peak_mem_gib', lambda v: f'{v:.2f}')} | {ratio(a, b, 'tok_per_s')} "
              f"| {ratio(a, b, 'peak_mem_gib')} |")
    met = True
    for c in TARGET_CASES:
        a, b = o.get(c), f.get(c)
        if not (a and b and a["status"] == "ok" and b["status"] == "ok"):
            print(f"target {c}: not measured on both sides")
            met = False
            continue
        sp = a["tok_per_s"] / b["tok_per_s"]
        mem_ok = a.get("peak_mem_gib") is not None and a["peak_mem_gib"] <= b["peak_mem_gib"]
        print(f"target {c}: tok/s {sp:.2f}x fla (want >= {TARGET_SPEEDUP:.0f}x: {'met' if sp >= TARGET_SPEEDUP else 'NOT met'}); "
              f"memory {a.get('peak_mem_gib')} vs {b['peak_mem_gib']} GiB ({'met' if mem_ok else 'NOT met'})")
        met = met and sp >= TARGET_SPEEDUP and mem_ok
    print("peak: ours, the CUDA backend allocator's high-water mark (`backend peak`); fla, "
          "torch.cuda.max_memory_allocated()")
    arith = sorted({r.get("delta_rule_arith", "not recorded") for r in o.values()})
    print(f"ours: the delta rule in {' and '.join(arith)} arithmetic (HYBRID_DR_BF16; fla: one MMA a product)")
    print(f"targets: {'all met' if met else 'not all met'}")
    return 0


def main(argv):
    if len(argv) == 10 and argv[1] == "record":
        record(*argv[2:])
        return 0
    if len(argv) == 4 and argv[1] == "table":
        return table(argv[2], argv[3])
    sys.exit(__doc__)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
