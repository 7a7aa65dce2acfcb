#!/usr/bin/env python3
"""fla's chunk_kda and chunk_gated_delta_rule, timed as tests/gpu/bench_delta_rule.c times ours
(`make bench-kda`; BENCHMARKS.md, "H200: chunkwise KDA and GDN against fla").

usage: FLA_PEER=OUT_DIR python3 -u scripts/bench_fla_kda.py [--shape B,T,H,K,V]... [--kinds kda,gdn]
           [--reps N] [--warmup N] [--chunk C] [--seed S] [--json FILE]

FLA_PEER (or FLA_DIR): a prepared copy of fla (flasrc/ = fla's tree,
shim/ = a flash_attn stand-in; sys.path gets both, as fla_hybrid_bench.py does) or an fla
checkout (a folder with fla/). The commit printed comes from OUT_DIR/COMMIT (write it when
preparing: `git -C FLA_GIT_DIR rev-parse HEAD > OUT_DIR/COMMIT`), $FLA_COMMIT, or the checkout's
git; else "unknown". Set TRITON_CACHE_DIR to a kept folder: Triton autotunes every kernel at
every new shape on the first call (minutes), and the warm-up runs absorb that.

Same shapes, defaults and CLI as bench_delta_rule (the Makefile passes KDA_BENCH_ARGS to both).
Inputs, bf16, as fla's tests make them (the same distributions as ours; not the same numbers):
q, k = F.normalize(randn, dim=-1) (use_qk_l2norm_in_kernel=False, so both sides get normalised
q, k and do the same work); v = randn; beta = sigmoid(randn); KDA g = logsigmoid(randn) per
channel (fla tests/ops/test_kda.py), GDN g = logsigmoid(rand) per head (tests/ops/test_gdn.py);
do = randn; scale K^-0.5; no initial state, output_final_state=False; chunk 64.
Passes, each repetition timed alone with CUDA events, median and min in ms after the warm-up:
  fwd     o = f(q, k, v, g, beta) with the inputs requiring grad (training's forward: fla saves
          what its backward needs)
  bwd     torch.autograd.grad(o, (q, k, v, g, beta), do, retain_graph=True) on one forward's graph
          (the backward of sum(o * do))
  fwdbwd  both, a new forward each time
peak_bytes: torch.cuda.max_memory_allocated() during the pass minus what was allocated before the
inputs were made (inputs included; fwd before do exists; bwd with the forward's graph and o held).
A case that raises prints FAIL with the error and the run goes on (its records say FAIL); the
JSON file is rewritten after every case, so a run stopped by a timeout keeps what it measured.
"""
import argparse
import importlib.util
import os
import sys
import traceback

from bench_common import int_in, time_pass, write_json
from fla_peer import add_fla_to_path

DEFAULT_SHAPES = [(8, 4096, 16, 128, 128), (2, 16384, 16, 128, 128), (64, 1024, 6, 128, 128)]
PASSES = ("fwd", "bwd", "fwdbwd")


def parse_args(argv):
    def shape(s):
        try:
            v = tuple(int(x) for x in s.split(","))
        except ValueError:
            v = ()
        if len(v) != 5 or min(v) < 1 or v[0] * v[1] * v[2] * max(v[3], v[4]) > 4e9:
            raise argparse.ArgumentTypeError(f"wants five positive integers B,T,H,K,V, not '{s}'")
        return v

    def kinds(s):
        ks = [k for k in s.split(",") if k]
        bad = [k for k in ks if k not in ("kda", "gdn")]
        if bad or not ks:
            raise argparse.ArgumentTypeError(f"a comma-separated subset of kda,gdn, not '{s}'")
        return [k for k in ("kda", "gdn") if k in ks]

    p = argparse.ArgumentParser(description="fla chunk_kda / chunk_gated_delta_rule timings (make bench-kda)")
    p.add_argument("--shape", type=shape, action="append", help="B,T,H,K,V (repeatable)")
    p.add_argument("--kinds", type=kinds, default=["kda", "gdn"])
    p.add_argument("--reps", type=int_in(1, 100000), default=20)
    p.add_argument("--warmup", type=int_in(0, 100000), default=5)
    p.add_argument("--chunk", type=int_in(1, 1024), default=64)
    p.add_argument("--seed", type=int_in(0, 1 << 30), default=1)
    p.add_argument("--json")
    # ours only (bench_delta_rule: the split or the one-MMA arithmetic); accepted so that the same
    # KDA_BENCH_ARGS reach both sides: fla has its one arithmetic
    p.add_argument("--arith", help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    a.shape = a.shape or DEFAULT_SHAPES
    return a


def make_inputs(torch, F, kind, B, T, H, K, V, seed):
    gen = torch.Generator(device="cuda")
    gen.manual_seed(seed)
    bf = torch.bfloat16

    def randn(*shape):
        return torch.randn(*shape, generator=gen, device="cuda", dtype=torch.float32)

    q = F.normalize(randn(B, T, H, K), p=2, dim=-1).to(bf)
    k = F.normalize(randn(B, T, H, K), p=2, dim=-1).to(bf)
    v = randn(B, T, H, V).to(bf)
    beta = randn(B, T, H).sigmoid().to(bf)
    if kind == "kda":
        g = F.logsigmoid(randn(B, T, H, K)).to(bf)
    else:
        g = F.logsigmoid(torch.rand(B, T, H, generator=gen, device="cuda", dtype=torch.float32)).to(bf)
    return [x.requires_grad_(True) for x in (q, k, v, g, beta)]


def main():
    args = parse_args(sys.argv[1:])
    root, src, commit = add_fla_to_path("bench_fla_kda")
    import torch
    import torch.nn.functional as F
    import triton

    import fla
    from fla.ops.gated_delta_rule import chunk_gated_delta_rule
    from fla.ops.kda import chunk_kda

    print(f"fla {getattr(fla, '__version__', '?')} commit {commit} from {src}")
    chunk_o = os.path.join(src, "fla", "ops", "common", "chunk_o.py")
    if os.path.isfile(chunk_o) and "if False and g is not None and IS_NVIDIA_HOPPER" in open(chunk_o).read():
        print("fla: the Hopper/Triton guard of the gated chunk backward is bypassed in this copy (prepare_fla.sh): "
              "timing only, its gradients on Hopper with this Triton are not to be trusted (fla issue #640)")
    extra = [m for m in ("flash_kda", "tilelang", "flash_qla") if importlib.util.find_spec(m) is not None]
    print(f"fla optional backends importable: {', '.join(extra) if extra else 'none (fla runs its Triton kernels)'}")
    print(f"torch {torch.__version__}, triton {triton.__version__}, {torch.cuda.get_device_name()}, "
          f"TRITON_CACHE_DIR={os.environ.get('TRITON_CACHE_DIR', '(unset: ~/.triton/cache)')}")
    print(f"bf16 inputs, chunk {args.chunk}, no initial/final state; {args.reps} timed repetitions after "
          f"{args.warmup} warm-up, each timed alone (CUDA events); seed {args.seed}")
    print(f"{'kind':4s} {'B,T,H,K,V':22s} {'pass':7s} {'median ms':>10s} {'min ms':>10s} {'memory MiB':>11s}",
          flush=True)

    fns = {"kda": chunk_kda, "gdn": chunk_gated_delta_rule}
    records = []
    meta = dict(impl="fla", fla_version=getattr(fla, "__version__", "?"), fla_commit=commit, torch=torch.__version__,
                triton=triton.__version__, device=torch.cuda.get_device_name(), reps=args.reps, warmup=args.warmup,
                chunk=args.chunk, records=records)

    def save():  # after every case: a run killed by a timeout keeps what it measured
        if args.json:
            write_json(args.json, meta)

    for si, (B, T, H, K, V) in enumerate(args.shape):
        for kind in args.kinds:
            shape = f"{B},{T},{H},{K},{V}"
            done = set()
            try:
                torch.cuda.synchronize()
                torch.cuda.empty_cache()
                base = torch.cuda.memory_allocated()
                inputs = make_inputs(torch, F, kind, B, T, H, K, V, args.seed * 1000003 + si * 16)
                kw = dict(scale=K ** -0.5, initial_state=None, output_final_state=False,
                          use_qk_l2norm_in_kernel=False)
                if args.chunk != 64:
                    kw["chunk_size"] = args.chunk

                def fwd():
                    return fns[kind](*inputs, **kw)[0]

                do = None
                for p in PASSES:
                    if p == "fwd":
                        run = fwd
                    elif p == "bwd":
                        if do is None:
                            gen = torch.Generator(device="cuda")
                            gen.manual_seed(args.seed * 1000003 + si * 16 + 7)
                            do = torch.randn(B, T, H, V, generator=gen, device="cuda").to(torch.bfloat16)
                        o_graph = fwd()

                        def run():
                            return torch.autograd.grad(o_graph, inputs, do, retain_graph=True)
                    else:
                        o_graph = None  # fwdbwd builds its own graphs

                        def run():
                            return torch.autograd.grad(fwd(), inputs, do)
                    torch.cuda.synchronize()
                    torch.cuda.reset_peak_memory_stats()
                    med, mn = time_pass(torch, run, args.warmup, args.reps)
                    peak = torch.cuda.max_memory_allocated() - base
                    records.append(dict(kind=kind, B=B, T=T, H=H, K=K, V=V, **{"pass": p}, status="ok",
                                        median_ms=round(med, 4), min_ms=round(mn, 4), peak_bytes=int(peak)))
                    done.add(p)
                    print(f"{kind:4s} {shape:22s} {p:7s} {med:10.3f} {mn:10.3f} {peak / 2**20:11.1f}", flush=True)
            except Exception as e:  # one failing case: say so, record it, go on
                err = f"{type(e).__name__}: {e}"
                print(f"FAIL {kind} {shape}: {err}\n{traceback.format_exc()[-1500:]}", flush=True)
                for p in PASSES:
                    if p not in done:
                        records.append(dict(kind=kind, B=B, T=T, H=H, K=K, V=V, **{"pass": p}, status="FAIL",
                                            error=err[:500]))
            finally:
                inputs = do = o_graph = None
                torch.cuda.synchronize()
                torch.cuda.empty_cache()
                save()
    print("memory MiB: torch.cuda.max_memory_allocated() during the pass, minus what was allocated before the "
          "inputs (inputs, outputs, gradients, saved tensors and fla's intermediates)")
    if args.json:
        print(f"wrote {args.json}")
    return 1 if any(r["status"] != "ok" for r in records) else 0


if __name__ == "__main__":
    sys.exit(main())
