"""What the peer benchmark scripts share (bench_fla_kda.py, bench_fla_hybrid.py,
bench_torch_moe.py, bench_summary_hybrid.py): integer arguments in a range, the timing of one
pass (median and min over repetitions, each timed alone), and the JSON file rewritten whole after
every case, so that a run stopped by a timeout keeps what it measured."""
import argparse
import json
import os
import time


def int_in(lo, hi):
    """An argparse type: an integer in [lo, hi]."""
    def f(s):
        try:
            v = int(s)
        except ValueError:
            v = lo - 1
        if not lo <= v <= hi:
            raise argparse.ArgumentTypeError(f"an integer in [{lo}, {hi}], not '{s}'")
        return v
    return f


def time_pass(torch, fn, warmup, reps, cuda=True, setup=None):
    """(median, min) in ms of `reps` calls of fn after `warmup` untimed ones, each timed alone:
    CUDA events on the current stream, or the host clock when cuda is False. With setup, each
    call (warm-up and timed) is fn(setup()), setup run first, untimed and synchronized: a
    backward timed alone on a fresh forward's graph, for example."""
    def once():
        arg = None if setup is None else (setup(),)
        if cuda:
            torch.cuda.synchronize()
        call = fn if arg is None else (lambda: fn(*arg))
        if cuda:
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            call()
            b.record()
            b.synchronize()
            return a.elapsed_time(b)
        t0 = time.perf_counter()
        call()
        return (time.perf_counter() - t0) * 1e3

    for _ in range(warmup):
        once()
    ts = [once() for _ in range(reps)]
    ts.sort()
    n = len(ts)
    return (ts[n // 2] if n % 2 else 0.5 * (ts[n // 2 - 1] + ts[n // 2])), ts[0]


def write_json(path, obj):
    """obj to path through a temporary file and a rename: a reader never sees half a file."""
    with open(path + ".tmp", "w") as f:
        json.dump(obj, f, indent=1)
    os.replace(path + ".tmp", path)
