"""Reads a hybrid.c metrics.jsonl (train/metrics.c): one JSON object per line, blank lines
skipped, a line that is not JSON stops the script naming the file and line."""
import json
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
