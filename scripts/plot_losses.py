#!/usr/bin/python3
"""Loss curves from hybrid's metrics logs (OUT_DIR/metrics.jsonl) into one PNG.

usage: scripts/plot_losses.py --out curves.png [--title T] [--x tokens|step] [--diff]
                              [--logy] LABEL=PATH/metrics.jsonl ...

Each run gets one colour: its training loss per step as a thin line and its validation
loss as a thicker line with markers, against tokens seen (or the step, --x step).
--diff adds a lower panel with the first run's train and val loss minus each other run's,
at the steps both logged. Needs matplotlib (Debian:
`apt-get install python3-matplotlib`, used through /usr/bin/python3).
"""
import argparse
import sys

from metrics_io import records

try:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
except ImportError:
    sys.exit("plot_losses.py: matplotlib is missing (Debian: apt-get install python3-matplotlib, "
             "then run with /usr/bin/python3)")


def read_run(path, x="tokens"):
    """(x, train loss) and (x, val loss) pairs, x = tokens seen or the step; val lines get the
    tokens of their step."""
    train, val, tokens_at = [], [], {}
    for rec in records(path):
        step = rec.get("step")
        if "loss" in rec:
            tokens_at[step] = rec.get("tokens", step) if x == "tokens" else step
            train.append((tokens_at[step], rec["loss"]))
        if "val_loss" in rec:
            val.append((tokens_at.get(step, step), rec["val_loss"]))
    return train, val


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, help="PNG to write")
    ap.add_argument("--title", default="loss curves")
    ap.add_argument("--x", choices=("tokens", "step"), default="tokens", help="horizontal axis")
    ap.add_argument("--diff", action="store_true", help="lower panel: first run minus each other run")
    ap.add_argument("--logy", action="store_true", help="logarithmic loss axis")
    ap.add_argument("runs", nargs="+", help="LABEL=PATH/metrics.jsonl")
    args = ap.parse_args()
    if args.diff:
        fig, (ax, axd) = plt.subplots(2, 1, figsize=(9, 8), dpi=120, sharex=True,
                                      gridspec_kw={"height_ratios": [2.2, 1]})
    else:
        fig, ax = plt.subplots(figsize=(9, 5.5), dpi=120)
    plotted, runs = 0, []
    for i, spec in enumerate(args.runs):
        label, sep, path = spec.partition("=")
        if not sep:
            label, path = spec, spec
        try:
            train, val = read_run(path, args.x)
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
        runs.append((label, colour, dict(train), dict(val)))
    if not plotted:
        sys.exit("plot_losses.py: no run had any loss to plot")
    if args.diff and len(runs) >= 2:
        l0, _, t0, v0 = runs[0]
        for label, colour, t, v in runs[1:]:
            ts = sorted(set(t0) & set(t))
            vs = sorted(set(v0) & set(v))
            if ts:
                axd.plot(ts, [t0[k] - t[k] for k in ts], color=colour, linewidth=0.6, alpha=0.6,
                         label=f"train: {l0} - {label}")
            if vs:
                axd.plot(vs, [v0[k] - v[k] for k in vs], color=colour, linewidth=1.6, marker="o", markersize=2.5,
                         label=f"val: {l0} - {label}")
        axd.axhline(0, color="black", linewidth=0.6)
        axd.set_ylabel("loss difference")
        axd.set_xlabel(args.x)
        axd.grid(True, alpha=0.3)
        axd.legend(fontsize=8)
    else:
        ax.set_xlabel(args.x)
    if args.logy:
        ax.set_yscale("log")
    ax.set_ylabel("loss (nats/token)")
    ax.set_title(args.title + "  (thin: train, thick: validation)")
    ax.grid(True, alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(args.out)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
