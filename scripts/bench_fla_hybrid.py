#!/usr/bin/env python3
"""fla's KDAForCausalLM training step, measured the way the project's fla peer measurement does
(the method: BENCHMARKS.md, "H200: the 3:1 hybrid against fla"; `make bench-hybrid`), with a
JSON record per case.

usage: FLA_PEER=OUT_DIR python3 -u scripts/bench_fla_hybrid.py [--cases NAME,...] [--steps N] [--json FILE]

FLA_PEER (or FLA_DIR): a prepared copy of fla (prepare_fla.sh's OUT_DIR: flasrc/ = fla's tree,
shim/ = a flash_attn stand-in over torch SDPA) or an fla checkout (a folder with fla/), handled as
scripts/bench_fla_kda.py handles it (the commit from OUT_DIR/COMMIT, $FLA_COMMIT or git). Set
TRITON_CACHE_DIR to a kept folder (the Makefile: out/triton-cache): Triton autotunes every kernel at
every new shape on its first call, inside the untimed first steps.

The model and the step are the peer script's, unchanged: KDAConfig(hidden_size=768,
num_hidden_layers=16, num_heads=6, head_dim=128, vocab_size=50304, max_position_embeddings=T,
intermediate_size=2048, tie_word_embeddings=True, attn={'layers': ..., 'num_heads': 6} or None);
TF32 matmuls allowed; torch.optim.AdamW(lr=3e-4, fused=True); one random batch
torch.randint(0, 50257, (B, T)) reused every step; a step = bf16-autocast forward with labels,
backward, optimizer step, zero_grad(set_to_none=True), between two torch.cuda.synchronize() on the
host clock; 25 steps, the median of steps 9..25 (ts[8:]: 17 steps, sorted[8]); tok/s = B*T /
median; peak = torch.cuda.max_memory_allocated() over the case (reset after each).
Cases (names as scripts/bench_hybrid.sh's):
  3:1-T1024 (B64), 3:1-T4096 (B16): softmax attention at layers 3, 7, 11, 15 (KKKA x4)
  1:0-T4096 (B16): pure KDA (K x16)      0:1-T4096 (B16): pure attention (A x16)
  KKKM-T1024: skipped (KDAForCausalLM has only KDA and softmax-attention layers: no MLA)
A case that raises prints FAIL and the run goes on; the JSON file is rewritten after every case.
Exits 1 if a case failed (skipped cases do not count).
"""
import argparse
import os
import sys
import time
import traceback

from bench_common import write_json

from fla_peer import add_fla_to_path

L, D, V = 16, 768, 50304
CASES = [  # name, attention layers (None: fla cannot express the config; the reason instead), B, T
    ("3:1-T1024", [3, 7, 11, 15], 64, 1024),
    ("3:1-T4096", [3, 7, 11, 15], 16, 4096),
    ("1:0-T4096", [], 16, 4096),
    ("0:1-T4096", list(range(16)), 16, 4096),
    ("KKKM-T1024", "KDAForCausalLM (fla/models/kda) builds only KDA and softmax-attention layers: it has no MLA", 64,
     1024),
]


def main():
    p = argparse.ArgumentParser(description="fla KDAForCausalLM training step (make bench-hybrid)")
    p.add_argument("--cases", help="comma-separated subset of: " + ",".join(c[0] for c in CASES))
    p.add_argument("--steps", type=int, default=25, help="steps per case; the median is over steps 9.. (default 25)")
    p.add_argument("--json")
    a = p.parse_args()
    names = [c[0] for c in CASES]
    want = a.cases.split(",") if a.cases else names
    bad = [n for n in want if n not in names]
    if bad:
        p.error(f"unknown case(s) {','.join(bad)}; the cases: {','.join(names)}")
    if a.steps < 9:
        p.error("--steps must be at least 9 (the median is over steps 9..)")
    root, src, commit = add_fla_to_path("bench_fla_hybrid")
    import torch
    import triton
    import fla
    from fla.models import KDAConfig, KDAForCausalLM
    KDAForCausalLM._tied_weights_keys = {'lm_head.weight': 'model.embeddings.weight'}  # transformers 5 wants a dict
    torch.backends.cuda.matmul.allow_tf32 = True

    print(f"fla {getattr(fla, '__version__', '?')} commit {commit} from {src}")
    print(f"torch {torch.__version__}, triton {triton.__version__}, {torch.cuda.get_device_name()}, "
          f"TRITON_CACHE_DIR={os.environ.get('TRITON_CACHE_DIR', '(unset: ~/.triton/cache)')}", flush=True)
    records = []
    meta = dict(impl="fla", model="KDAForCausalLM", fla_version=getattr(fla, "__version__", "?"), fla_commit=commit,
                torch=torch.__version__, triton=triton.__version__, device=torch.cuda.get_device_name(),
                steps=a.steps, median_of=f"steps 9..{a.steps}", records=records)

    def save():  # after every case: a run killed by a timeout keeps what it measured
        if a.json:
            write_json(a.json, meta)

    def run(name, attn_layers, B, T, steps):  # fla_hybrid_bench.py's run(), returning its numbers
        cfg = KDAConfig(hidden_size=D, num_hidden_layers=L, num_heads=6, head_dim=128, vocab_size=V,
                        max_position_embeddings=T, intermediate_size=2048, tie_word_embeddings=True,
                        attn={'layers': attn_layers, 'num_heads': 6} if attn_layers else None)
        m = KDAForCausalLM(cfg).cuda().train()
        n = sum(p.numel() for p in m.parameters())
        opt = torch.optim.AdamW(m.parameters(), lr=3e-4, fused=True)
        x = torch.randint(0, 50257, (B, T), device='cuda')
        ts = []
        for s in range(steps):
            torch.cuda.synchronize(); t0 = time.time()
            with torch.autocast('cuda', dtype=torch.bfloat16):
                loss = m(input_ids=x, labels=x).loss
            loss.backward(); opt.step(); opt.zero_grad(set_to_none=True)
            torch.cuda.synchronize(); ts.append(time.time() - t0)
        dt = sorted(ts[8:])[len(ts[8:]) // 2]
        mem = torch.cuda.max_memory_allocated() / 2**30
        print(f"{name:10s} B={B} T={T} params={n/1e6:.1f}M  {dt*1e3:.1f} ms/step  {B*T/dt:,.0f} tok/s  "
              f"peak {mem:.1f} GiB  loss {loss.item():.2f}", flush=True)
        rec = dict(case=name, B=B, T=T, status="ok", params=n, ms_per_step=round(dt * 1e3, 3),
                   tok_per_s=round(B * T / dt, 1), peak_mem_gib=round(mem, 3), last_loss=round(loss.item(), 4),
                   step_ms=[round(t * 1e3, 3) for t in ts])
        del m, opt; torch.cuda.empty_cache(); torch.cuda.reset_peak_memory_stats()
        return rec

    failed = 0
    for name, layers, B, T in CASES:
        if name not in want:
            continue
        if isinstance(layers, str):
            print(f"{name:10s} skipped: {layers}", flush=True)
            records.append(dict(case=name, B=B, T=T, status="skipped", reason=layers))
        else:
            try:
                records.append(run(name, layers, B, T, a.steps))
            except Exception as e:
                failed = 1
                print("FAIL", name, T, traceback.format_exc()[-1500:], flush=True)
                records.append(dict(case=name, B=B, T=T, status="FAIL", error=f"{type(e).__name__}: {e}"[:500]))
                torch.cuda.empty_cache(); torch.cuda.reset_peak_memory_stats()
        save()
    if a.json:
        print(f"wrote {a.json}")
    return failed


if __name__ == "__main__":
    sys.exit(main())
