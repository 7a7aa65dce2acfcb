"""Reads a hybrid.c metrics.jsonl (train/metrics.c): one JSON object per line, blank lines
skipped, a line that is not JSON stops the script naming the file and line. And what the
multi-rank summaries (dp_summary.py, ep_summary.py) read of a run: its loss records, its median
tokens per second, its memory line."""
import json
import re
import statistics
import sys


def records(path):
    with open(path) as f:
        for n, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            try:
                yield json.loads(line)
            except json.JSONDecodeError as e:
                sys.exit(f"{path}:{n}: not JSON ({e})")


def run_losses(run_dir):
    """A run's step records (those with a loss), in order."""
    return [r for r in records(f"{run_dir}/metrics.jsonl") if "loss" in r]


def median_tok_per_s(run_dir, skip=5):
    """The median tokens per second of a run's steps after the first `skip`."""
    return statistics.median(r["tok_per_s"] for r in run_losses(run_dir)[skip:])


def run_memory(log_path):
    """(backend peak, device in use) in GiB from a run's log (train.c's memory line), NaN if absent."""
    with open(log_path) as f:
        m = re.search(r"backend peak ([0-9.]+) GiB; device in use ([0-9.]+)", f.read())
    return (float(m.group(1)), float(m.group(2))) if m else (float("nan"), float("nan"))
