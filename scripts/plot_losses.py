#!/usr/bin/python3
"""Loss curves from hybrid's metrics logs (OUT_DIR/metrics.jsonl) into one PNG.

usage: scripts/plot_losses.py --out curves.png [--title T] LABEL=PATH/metrics.jsonl ...

Each run gets one colour: its training loss per step as a thin line and its validation
loss as a thicker line with markers, against tokens seen. Needs matplotlib (Debian:
`apt-get install python3-matplotlib`, used through /usr/bin/python3).
"""
import argparse
import json
import sys

try:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
except ImportError:
    sys.exit("plot_losses.py: matplotlib is missing (Debian: apt-get install python3-matplotlib, "
             "then run with /usr/bin/python3)")


def read_run(path):
    """(tokens, train loss) and (tokens, val loss) pairs; val lines get the tokens of their step."""
    train, val, tokens_at = [], [], {}
    with open(path) as f:
        for n, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as e:
                sys.exit(f"{path}:{n}: not JSON ({e})")
            step = rec.get("step")
            if "loss" in rec:
                tokens_at[step] = rec.get("tokens", step)
                train.append((tokens_at[step], rec["loss"]))
            if "val_loss" in rec:
                val.append((tokens_at.get(step, step), rec["val_loss"]))
    return train, val


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, help="PNG to write")
    ap.add_argument("--title", default="loss curves")
    ap.add_argument("runs", nargs="+", help="LABEL=PATH/metrics.jsonl")
    args = ap.parse_args()
    fig, ax = plt.subplots(figsize=(9, 5.5), dpi=120)
    plotted = 0
    for i, spec in enumerate(args.runs):
        label, sep, path = spec.partition("=")
        if not sep:
            label, path = spec, spec
        try:
            train, val = read_run(path)
        except OSError as e:
            print(f"plot_losses.py: skipping {label}: {e}", file=sys.stderr)
            continue
        colour = f"C{i % 10}"
        if train:
            ax.plot(*zip(*train), color=colour, linewidth=0.8, alpha=0.45)
        if val:
            ax.plot(*zip(*val), color=colour, linewidth=2.0, marker="o", markersize=3, label=f"{label} (val)")
        elif train:
            ax.plot([], [], color=colour, label=f"{label} (train)")
        plotted += bool(train or val)
    if not plotted:
        sys.exit("plot_losses.py: no run had any loss to plot")
    ax.set_xlabel("tokens")
    ax.set_ylabel("loss (nats/token)")
    ax.set_title(args.title + "  (thin: train, thick: validation)")
    ax.grid(True, alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(args.out)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
