#!/usr/bin/env python3
"""The PyTorch reference of the MoE layer, timed as tests/gpu/bench_moe.c times ours (`make bench-moe`;
BENCHMARKS.md, "H200: the MoE layer against PyTorch").

usage: python3 -u scripts/bench_torch_moe.py [--config FILE] [--shape config[:N] | C,E,K,M,S,N]...
           [--reps N] [--warmup N] [--seed S] [--impl auto|grouped_mm|loop] [--no-compile]
           [--device cuda|cpu] [--list] [--json FILE]

Same shapes, defaults and CLI as bench_moe (the Makefile passes MOE_BENCH_ARGS to both): the
config's own MoE shape (configs/kl-s-3-1.conf's d_model, moe_experts, moe_top_k, moe_hidden,
moe_shared * moe_shared_hidden, N = batch_size * seq_len) and 2048,64,8,1024,0,16384. The config's
router options are used too (moe_router sigmoid|softmax, moe_renorm, moe_route_scale); SiTU experts,
the latent variant (moe_latent_dim > 0) and the balance loss (moe_aux_loss_coef > 0) are refused:
this reference is variant A with SwiGLU, which is what KL-S is. --list prints the shapes and exits
(no torch needed: the check of the config parsing).

The layer (model/moe.c's equations; docs/hybrid.md, "MoE channel mixer"), bf16 parameters and
activations, the router scores in fp32:
  logits = x Wr^T; s = sigmoid(logits) (or softmax); sel = top-k of s + bias (bias zero, no grad)
  w = s[sel], renormalised (/ (sum + 1e-20)) when moe_renorm and K > 1, times moe_route_scale
  slots sorted by expert (stable argsort of sel), xp = x[slot's token]
  h = xp W13_e^T, a = silu(gate) * up, y = a W2_e^T per expert e over its rows
  out = sum over a token's slots of w * y (index_add_) + the shared SwiGLU MLP of x (when S > 0)
The expert GEMMs: torch.nn.functional.grouped_mm, else torch._grouped_mm (2D x 3D with int32
offsets; the weights passed as the transposed views of (E, 2M, C) and (E, C, M), the column-major
operand these kernels want) when --impl auto finds one on CUDA; else (--impl loop, or neither
exists, or on the CPU) a loop over the experts on the sorted rows (the row counts read back to
the host once per forward). The layer runs under torch.compile unless --no-compile; a compile that
fails at the first call falls back to eager, and the JSON says which ran ("compiled").

Inputs, as bench_moe makes them (the same distributions, not the same numbers): x, dout = randn
(N, C); Wr, W13, shared up ~ normal(0, init_std); W2, shared down ~ normal(0, init_std / sqrt(2))
(the one-block model's residual std); the selection bias zero: a random router, natural load
(printed: max and min expert rows over the mean).
Passes, each repetition timed alone with CUDA events (a wall clock on the CPU), median and min in ms
after the warm-up:
  fwd     out = layer(x) with the parameters and x requiring grad (training's forward)
  bwd     torch.autograd.grad(out, (x, params), dout) alone, on a fresh forward's graph each time
          (the forward runs untimed before it; no retain_graph: a compiled layer's backward may
          free its donated buffers, so one graph cannot be backpropagated twice)
  fwdbwd  both, a new forward each time
peak_bytes: torch.cuda.max_memory_allocated() during the pass minus what was allocated before
the parameters were made (parameters, inputs, saved tensors, gradients; 0 on the CPU).
A case that raises prints FAIL with the error and the run goes on; the JSON file is rewritten
after every case, so a run stopped by a timeout keeps what it measured.
"""
import argparse
import math
import os
import sys
import traceback

from bench_common import int_in, time_pass, write_json

PASSES = ("fwd", "bwd", "fwdbwd")
LARGE = "2048,64,8,1024,0,16384"


def read_config(path):
    """The `key = value` lines of a config file (train/config.c's format: '#' starts a comment)."""
    keys = {}
    with open(path) as f:
        for n, line in enumerate(f, 1):
            line = line.split("#", 1)[0].strip()
            if not line:
                continue
            if "=" not in line:
                sys.exit(f"bench_torch_moe: {path}:{n}: not a 'key = value' line")
            k, v = line.split("=", 1)
            keys[k.strip().replace("-", "_")] = v.strip()
    return keys


def config_moe(keys, path):
    """The MoE keys with train/config.c's defaults."""
    def num(k, default, conv=int):
        try:
            return conv(keys.get(k, default))
        except ValueError:
            sys.exit(f"bench_torch_moe: {path}: {k} = '{keys[k]}' is not a number")

    def flag(k, default):
        v = keys.get(k, default).lower()
        if v not in ("true", "false", "1", "0", "yes", "no"):
            sys.exit(f"bench_torch_moe: {path}: {k} = '{v}' is not a boolean")
        return v in ("true", "1", "yes")

    c = dict(C=num("d_model", "768"), E=num("moe_experts", "0"), K=num("moe_top_k", "2"),
             M=num("moe_hidden", "0"), shared=num("moe_shared", "1"), shared_hidden=num("moe_shared_hidden", "0"),
             latent=num("moe_latent_dim", "0"), renorm=flag("moe_renorm", "true"),
             router=keys.get("moe_router", "sigmoid"), scale=num("moe_route_scale", "1.0", float),
             aux=num("moe_aux_loss_coef", "0", float), mlp=keys.get("mlp", "gelu"),
             init_std=num("init_std", "0.02", float), batch_size=num("batch_size", "4"), seq_len=num("seq_len", "1024"))
    if c["E"] < 1:
        sys.exit(f"bench_torch_moe: {path} has no MoE (moe_experts = {c['E']})")
    if c["router"] not in ("sigmoid", "softmax"):
        sys.exit(f"bench_torch_moe: {path}: moe_router = '{c['router']}' (sigmoid or softmax)")
    c["S"] = c["shared"] * (c["shared_hidden"] or c["M"])
    return c


def parse_args(argv):
    def shape(s):
        if s == "config" or s.startswith("config:"):
            n = s[7:]
            if n and (not n.isdigit() or int(n) < 1):
                raise argparse.ArgumentTypeError(f"'config:N' wants a positive N, not '{s}'")
            return ("config", int(n) if n else 0)
        try:
            v = tuple(int(x) for x in s.split(","))
        except ValueError:
            v = ()
        if len(v) != 6 or min(v[:4]) < 1 or v[5] < 1 or v[4] < 0 or v[2] > v[1]:
            raise argparse.ArgumentTypeError(f"wants 'config', 'config:N' or six integers C,E,K,M,S,N "
                                             f"(positive; S >= 0; K <= E), not '{s}'")
        return v

    p = argparse.ArgumentParser(description="PyTorch MoE layer timings (make bench-moe)")
    p.add_argument("--config", default="configs/kl-s-3-1.conf")
    p.add_argument("--shape", type=shape, action="append", help="config[:N] or C,E,K,M,S,N (repeatable)")
    p.add_argument("--reps", type=int_in(1, 100000), default=20)
    p.add_argument("--warmup", type=int_in(0, 100000), default=5)
    p.add_argument("--profile-reps", type=int_in(0, 100000), default=5, help="accepted for bench_moe's CLI; unused")
    p.add_argument("--seed", type=int_in(0, 1 << 30), default=1)
    p.add_argument("--impl", choices=("auto", "grouped_mm", "loop"), default="auto")
    p.add_argument("--no-compile", action="store_true")
    p.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    p.add_argument("--list", action="store_true", help="print the shapes and exit")
    p.add_argument("--json")
    a = p.parse_args(argv)
    if not os.path.isfile(a.config):
        p.error(f"--config: cannot read '{a.config}'")
    a.shape = a.shape or [("config", 0), shape(LARGE)]
    return a


def resolve_shapes(args):
    """(name, opts) per shape: the config's options with the shape's MoE keys, as bench_moe builds them."""
    base = config_moe(read_config(args.config), args.config)
    out = []
    for s in args.shape:
        c = dict(base)
        if s[0] == "config":
            c["N"] = s[1] or c["batch_size"] * c["seq_len"]
            name = "config"
        else:
            c.update(C=s[0], E=s[1], K=s[2], M=s[3], S=s[4], N=s[5], latent=0)
            name = "large" if ",".join(map(str, s)) == LARGE else "custom"
        if c["K"] > c["E"]:
            sys.exit(f"bench_torch_moe: top-k {c['K']} > {c['E']} experts")
        out.append((name, c))
    return out


def refuse(c):
    """The configurations this reference does not implement, or None."""
    if c["latent"]:
        return f"the latent variant (moe_latent_dim = {c['latent']}) is not in this reference"
    if c["mlp"] == "situ":
        return "SiTU experts are not in this reference (SwiGLU only)"
    if c["aux"] > 0:
        return f"the balance loss (moe_aux_loss_coef = {c['aux']}) is not in this reference"
    return None


def find_grouped_mm(torch, F):
    for where, mod, name in (("torch.nn.functional.grouped_mm", F, "grouped_mm"), ("torch._grouped_mm", torch, "_grouped_mm")):
        fn = getattr(mod, name, None)
        if fn is not None:
            return where, fn
    return None, None


def make_layer(torch, F, c, gmm):
    K, E, M, scale, renorm, softmax = c["K"], c["E"], c["M"], c["scale"], c["renorm"], c["router"] == "softmax"

    def experts(xp, counts, offs, w13, w2):
        if gmm is not None:
            h = gmm(xp, w13.transpose(1, 2), offs=offs)
            g, u = h.chunk(2, dim=-1)
            return gmm(F.silu(g) * u, w2.transpose(1, 2), offs=offs)
        ys, r0 = [], 0
        for e, n in enumerate(counts.tolist()):  # the sorted per-expert loop
            if n:
                h = xp[r0:r0 + n] @ w13[e].t()
                g, u = h.chunk(2, dim=-1)
                ys.append((F.silu(g) * u) @ w2[e].t())
            r0 += n
        return torch.cat(ys, 0)

    def layer(x, wr, bias, w13, w2, wsu, wsd):
        logits = (x @ wr.t()).float()
        s = logits.softmax(-1) if softmax else logits.sigmoid()
        with torch.no_grad():
            sel = torch.topk(s + bias, K, dim=-1, sorted=True).indices  # selection only: no gradient
        w = s.gather(1, sel)
        if renorm and K > 1:
            w = w / (w.sum(-1, keepdim=True) + 1e-20)
        w = w * scale
        flat = sel.reshape(-1)
        order = torch.argsort(flat, stable=True)
        tok = order // K
        counts = torch.zeros(E, dtype=flat.dtype, device=flat.device).scatter_add_(0, flat, torch.ones_like(flat))
        offs = torch.cumsum(counts, 0).to(torch.int32)
        y = experts(x[tok], counts, offs, w13, w2)
        y = y * w.reshape(-1)[order].unsqueeze(-1).to(y.dtype)
        out = torch.zeros_like(x).index_add(0, tok, y)
        if wsu is not None:
            g, u = (x @ wsu.t()).chunk(2, dim=-1)
            out = out + (F.silu(g) * u) @ wsd.t()
        return out

    return layer


def main():
    args = parse_args(sys.argv[1:])
    shapes = resolve_shapes(args)
    if args.list:
        for name, c in shapes:
            print(f"{name}: C {c['C']}, E {c['E']}, top-{c['K']}, expert hidden {c['M']}, shared hidden {c['S']}, "
                  f"N {c['N']}, {c['router']} router{' renormalised' if c['renorm'] else ''}, scale {c['scale']}"
                  f"{', latent ' + str(c['latent']) if c['latent'] else ''}; {refuse(c) or 'runs'}")
        return 0
    import torch
    import torch.nn.functional as F

    dev = torch.device(args.device)
    if args.device == "cuda" and not torch.cuda.is_available():
        sys.exit("bench_torch_moe: no CUDA device visible (--device cpu runs the plumbing check)")
    cuda = args.device == "cuda"
    gname, gmm = find_grouped_mm(torch, F)
    if args.impl == "grouped_mm" and (gmm is None or not cuda):
        sys.exit(f"bench_torch_moe: --impl grouped_mm: {'this torch has none' if gmm is None else 'CUDA only'}")
    if args.impl == "loop" or not cuda:
        gmm = None
    impl = gname if gmm is not None else "per-expert loop"
    devname = torch.cuda.get_device_name() if cuda else "cpu"
    print(f"PyTorch MoE layer: torch {torch.__version__}, {devname}; expert GEMMs: {impl} (grouped matmul in this "
          f"torch: {gname or 'none'}); torch.compile {'off' if args.no_compile else 'on'}")
    print(f"bf16, config {args.config}; {args.reps} timed repetitions after {args.warmup} warm-up, each timed alone "
          f"({'CUDA events' if cuda else 'wall clock'}); seed {args.seed}")

    records = []
    meta = dict(impl="pytorch", torch=torch.__version__, device=devname, gemm=impl, grouped_mm_available=gname,
                reps=args.reps, warmup=args.warmup, config=args.config, records=records, shapes=[])

    def save():
        if args.json:
            write_json(args.json, meta)

    def sync():
        if cuda:
            torch.cuda.synchronize()

    status = 0
    for si, (name, c) in enumerate(shapes):
        C, E, K, M, S, N = c["C"], c["E"], c["K"], c["M"], c["S"], c["N"]
        key = dict(name=name, C=C, E=E, K=K, M=M, S=S, N=N)
        print(f"\n== {name}: C {C}, E {E}, top-{K}, expert hidden {M}, shared hidden {S}, N {N} tokens, "
              f"{c['router']} router{' renormalised' if c['renorm'] else ''}, SwiGLU")
        why = refuse(c)
        if why:
            print(f"SKIP: {why}")
            records.extend(dict(**key, **{"pass": p}, status="SKIP", error=why) for p in PASSES)
            save()
            continue
        done, params = set(), None
        try:
            sync()
            if cuda:
                torch.cuda.empty_cache()
            base = torch.cuda.memory_allocated() if cuda else 0
            gen = torch.Generator(device=dev)
            gen.manual_seed(args.seed * 1000003 + si * 16)
            bf = torch.bfloat16
            std, ostd = c["init_std"], c["init_std"] / math.sqrt(2.0)

            def normal(shape, s):
                return (torch.randn(*shape, generator=gen, device=dev) * s).to(bf).requires_grad_(True)

            params = [normal((E, C), std), None, normal((E, 2 * M, C), std), normal((E, C, M), ostd),
                      normal((2 * S, C), std) if S else None, normal((C, S), ostd) if S else None]
            params[1] = torch.zeros(E, device=dev)  # the selection bias (state, no gradient)
            x = torch.randn(N, C, generator=gen, device=dev).to(bf).requires_grad_(True)
            dout = torch.randn(N, C, generator=gen, device=dev).to(bf)
            wrt = [x] + [p for p in params if p is not None and p.requires_grad]
            layer = make_layer(torch, F, c, gmm)
            compiled = False
            if not args.no_compile:
                try:
                    cl = torch.compile(layer)
                    cl(x, *params)  # compiles now: a failure falls back to eager
                    layer, compiled = cl, True
                except Exception as e:  # noqa: BLE001 (any compile failure)
                    print(f"note: torch.compile failed ({type(e).__name__}: {str(e)[:300]}): eager", flush=True)
            with torch.no_grad():  # the load of this router
                logits = (x @ params[0].t()).float()
                s = logits.softmax(-1) if c["router"] == "softmax" else logits.sigmoid()
                cnt = torch.bincount(torch.topk(s, K, dim=-1).indices.reshape(-1), minlength=E).float()
                lmax, lmin = (cnt.max() / cnt.mean()).item(), (cnt.min() / cnt.mean()).item()
            print(f"load: {N * K} slots over {E} experts, max {lmax:.2f}x and min {lmin:.2f}x the mean; "
                  f"{'compiled' if compiled else 'eager'}")
            meta["shapes"].append(dict(**key, compiled=compiled, load_max_over_mean=round(lmax, 4),
                                       load_min_over_mean=round(lmin, 4)))
            print(f"{'pass':16s} {'median ms':>10s} {'min ms':>10s} {'memory MiB':>11s}", flush=True)

            def fwd():
                return layer(x, *params)

            for p in PASSES:
                setup = None
                if p == "fwd":
                    run = fwd
                elif p == "bwd":
                    setup = fwd

                    def run(out):
                        return torch.autograd.grad(out, wrt, dout)
                else:

                    def run():
                        return torch.autograd.grad(fwd(), wrt, dout)
                sync()
                if cuda:
                    torch.cuda.reset_peak_memory_stats()
                med, mn = time_pass(torch, run, args.warmup, args.reps, cuda, setup)
                peak = torch.cuda.max_memory_allocated() - base if cuda else 0
                records.append(dict(**key, **{"pass": p}, status="ok", median_ms=round(med, 4), min_ms=round(mn, 4),
                                    peak_bytes=int(peak)))
                done.add(p)
                print(f"{p:16s} {med:10.3f} {mn:10.3f} {peak / 2**20:11.1f}", flush=True)
        except Exception as e:  # noqa: BLE001 (one failing case: say so, record it, go on)
            err = f"{type(e).__name__}: {e}"
            print(f"FAIL {name}: {err}\n{traceback.format_exc()[-1500:]}", flush=True)
            records.extend(dict(**key, **{"pass": p}, status="FAIL", error=err[:500]) for p in PASSES if p not in done)
            status = 1
        finally:
            params = x = dout = layer = None
            sync()
            if cuda:
                torch.cuda.empty_cache()
            save()
    print("\nmemory MiB: torch.cuda.max_memory_allocated() during the pass, minus what was allocated before the "
          "parameters (parameters, inputs, saved tensors, gradients)")
    if args.json:
        print(f"wrote {args.json}")
    return status


if __name__ == "__main__":
    sys.exit(main())
