#!/usr/bin/python3
"""Tables and plots of a ratio ablation written by scripts/ablate_ratio.sh (docs/ablation.md).

usage: scripts/ablate_summary.py table OUT [--no-plot]
       scripts/ablate_summary.py best OUT TASK MODEL
       scripts/ablate_summary.py lr-state OUT TASK MODEL LR
       scripts/ablate_summary.py lr-states OUT
       scripts/ablate_summary.py runs OUT TITLE
       scripts/ablate_summary.py probes PNG TITLE OUT... [--no-plot]

`table` reads OUT/models.tsv, OUT/sweep.tsv, OUT/match.txt and every run folder
OUT/<model>/<task>/lr<LR>_s<SEED>/ (metrics.jsonl, mqar_eval.jsonl, the done/failed marker) and
writes OUT/results.md, OUT/results.tsv (one row per model), OUT/runs.tsv (one row per run) and,
unless --no-plot, the PNGs loss_curves.png (through scripts/plot_losses.py), val_vs_ratio.png
and mqar_vs_ratio.png (matplotlib; a variant of a ratio, the 0:1 + RoPE arm, is a row of its
own and its own marker there, not a point of the family's line). `best` prints the best lr of
one model and task (nothing while a run of its sweep is still to do), the runner's rule for its
second phase; `lr-state` what its first phase does with one lr (done, needed, skip, maybe: see
Sweep.lr_state; the runner's LR_SWEEP=grow), `lr-states` the same for every task, model and lr
of the sweep, a line "TASK MODEL LR STATE" each (one reading of the folder for all). `runs`
(scripts/real_run_hybrid.sh) writes OUT/summary.md: one row per model of OUT/models.tsv for
its single run in OUT/run/<model>/, titled TITLE. `probes` gathers the finished MQAR runs of
several runner folders that hold the same MQAR task (mqar-task.conf byte for byte; each folder
a device call's probe, e.g. results/ablation/mqar-p16*): a row per run on stdout (model, lr,
seed, final validation accuracy, `eval-mqar` accuracy at each pair count) and, unless
--no-plot, PNG: the validation accuracy of every run against the step, and its `eval-mqar`
accuracy at the trained pair count against the ratio, a point per run.

Definitions (also in the Markdown it writes):
- final train loss: the mean training loss of the last 10 steps; final val loss: the last
  validation pass; tok/s: the median over a run's steps, over every finished run of the model.
- best lr: the lr of the sweep with the lowest final val loss (text) or the highest final
  validation MQAR accuracy (MQAR; ties: the lower val loss), averaged over the sweep's seeds
  (the first seed with SEED_SWEEP=best, every seed with all); failed (diverged) runs lose.
  A sweep is finished when every lr is run (sweep.tsv's lr_sweep all), or (grow) when its best
  lr has a finished run on each side, or sits at an end of the lrs with one inside. Until then
  the tables take the best of the lrs run, noted "so far: n of m lrs run", and `best` (phase 2)
  prints nothing.
- spread over seeds: mean +- half the range of the seeds' values at the best lr.
"""
import json
import os
import statistics
import subprocess
import sys

from metrics_io import records

HERE = os.path.dirname(os.path.abspath(__file__))


def read_tsv(path):
    with open(path) as f:
        rows = [line.rstrip("\n").split("\t") for line in f if line.strip()]
    return [dict(zip(rows[0], r)) for r in rows[1:]]


def read_settings(out):
    with open(os.path.join(out, "sweep.tsv")) as f:
        return dict(line.rstrip("\n").split("\t", 1) for line in f if "\t" in line)


class Run:
    """One run folder: status and final numbers."""

    def __init__(self, path):
        self.path = path
        self.status = "todo"
        self.final_train = self.final_val = self.mqar_val_acc = self.tok_s = None
        self.steps = 0
        self.evals = {}
        self.mqar_curve = []  # (step, validation MQAR accuracy) of each validation pass
        if os.path.exists(os.path.join(path, "done")):
            self.status = "done"
        elif os.path.exists(os.path.join(path, "failed")):
            self.status = "failed"
        metrics = os.path.join(path, "metrics.jsonl")
        if os.path.exists(metrics):
            train, val, toks = [], [], []
            for rec in records(metrics):
                if "loss" in rec:
                    train.append(rec["loss"])
                    self.steps = rec["step"]
                    if "tok_per_s" in rec:
                        toks.append(rec["tok_per_s"])
                if "val_loss" in rec:
                    val.append(rec)
                    if "mqar_accuracy" in rec:
                        self.mqar_curve.append((rec["step"], rec["mqar_accuracy"]))
            if self.status == "todo" and train:
                self.status = "partial"
            if train:
                self.final_train = statistics.fmean(train[-10:])
            if val:
                self.final_val = val[-1]["val_loss"]
                self.mqar_val_acc = val[-1].get("mqar_accuracy")
            if toks:
                self.tok_s = statistics.median(toks[len(toks) // 10:])
        ev = os.path.join(path, "mqar_eval.jsonl")
        if os.path.exists(ev):
            for rec in records(ev):
                self.evals[rec["pairs"]] = rec["accuracy"]


def fnum(x, digits=4):
    return "-" if x is None else f"{x:.{digits}f}"


def spread(values, digits=4):
    """(text, mean, min, max, n) of a list of numbers; the text is mean +- half range."""
    values = [v for v in values if v is not None]
    if not values:
        return "-", None, None, None, 0
    m, lo, hi = statistics.fmean(values), min(values), max(values)
    text = f"{m:.{digits}f}" if len(values) == 1 else f"{m:.{digits}f} ± {(hi - lo) / 2:.{digits}f}"
    return text, m, lo, hi, len(values)


class Sweep:
    def __init__(self, out):
        self.out = out
        self.settings = read_settings(out)
        self.models = read_tsv(os.path.join(out, "models.tsv"))
        self.tasks = self.settings["tasks"].split()
        self.seeds = self.settings["seeds"].split()
        self.seed_sweep = self.settings.get("seed_sweep", "best")
        self.lr_sweep = self.settings.get("lr_sweep", "all")
        self.eval_pairs = [int(p) for p in self.settings.get("mqar_eval_pairs", "").split() if int(p) > 0]
        self.runs = {}
        for m in self.models:
            for task in self.tasks:
                for lr in self.lrs(task):
                    for s in self.seeds:
                        self.runs[task, m["model"], lr, s] = Run(os.path.join(out, m["model"], task, f"lr{lr}_s{s}"))

    def lrs(self, task):
        return self.settings["mqar_lrs" if task == "mqar" else "lrs"].split()

    def sweep_seeds(self):
        return self.seeds if self.seed_sweep == "all" else self.seeds[:1]

    def states(self, task, model):
        """{lr: state} over the task's sweep lrs at the sweep's seeds: None while a run is still to
        do (todo or partial), "failed" when every run failed (diverged), else the score (a tuple,
        lower is better: final val loss; MQAR: minus the accuracy, then the val loss)."""
        out = {}
        for lr in self.lrs(task):
            runs = [self.runs[task, model, lr, s] for s in self.sweep_seeds()]
            if any(r.status in ("todo", "partial") for r in runs):
                out[lr] = None
                continue
            ok = [r for r in runs if r.status == "done" and r.final_val is not None]
            if not ok:
                out[lr] = "failed"
                continue
            val = statistics.fmean(r.final_val for r in ok)
            if task == "mqar":
                out[lr] = (-statistics.fmean(r.mqar_val_acc or 0.0 for r in ok), val)
            else:
                out[lr] = (val,)
        return out

    def neighbours(self, task, lr):
        lrs = self.lrs(task)
        i = lrs.index(lr)
        return [lrs[j] for j in (i - 1, i + 1) if 0 <= j < len(lrs)]

    def complete(self, task, model, states=None, lr=None):
        """Whether the model's sweep is finished: every lr run (lr_sweep all), or (grow) the best lr
        has a finished run on each side, or is at an end of the sweep with a finished run inside."""
        states = states if states is not None else self.states(task, model)
        if self.lr_sweep == "grow" and lr is not None:
            return all(states[n] is not None for n in self.neighbours(task, lr))
        return all(v is not None for v in states.values())

    def best(self, task, model, provisional=False):
        """(best lr, edge note) or (None, why). The best lr of a finished sweep only (phase 2 runs
        the other seeds at it); with provisional, of the lrs whose runs are done so far, noted as
        such (the tables of a sweep that gained an lr keep their rows until its runs are in)."""
        states = self.states(task, model)
        scored = [(v, lr) for lr, v in states.items() if isinstance(v, tuple)]
        lr = min(scored)[1] if scored else None
        done = self.complete(task, model, states, lr)
        if not done and not provisional:
            return None, "sweep not finished"
        if lr is None:
            return None, "every run failed" if done else "sweep not finished"
        lrs = self.lrs(task)
        notes = []
        if len(lrs) > 1 and lr == lrs[0]:
            notes.append("low edge")
        elif len(lrs) > 1 and lr == lrs[-1]:
            notes.append("high edge")
        if not done:
            ran = sum(v is not None for v in states.values())
            notes.append(f"so far: {ran} of {len(lrs)} lrs run")
        return lr, ", ".join(notes)

    def lr_state(self, task, model, lr):
        """What phase 1 does with one lr of a model: "done" (its runs finished), "needed" (to be
        run), and with lr_sweep grow "skip" (the sweep is finished without it) or "maybe" (not
        needed yet; it may be once the runs in flight are done). Grow runs the sweep's centre
        first, then the lrs beside the best so far, until the best has a finished run on each side
        (or sits at an end of the sweep); every run failed so far: the lrs beside them."""
        states = self.states(task, model)
        if states[lr] is not None:
            return "done"
        if self.lr_sweep != "grow":
            return "needed"
        finished = [l for l, v in states.items() if v is not None]
        lrs = self.lrs(task)
        if not finished:  # the middle lr: the first of the runner's centre_out order
            return "needed" if lr == lrs[(len(lrs) + 1) // 2 - 1] else "maybe"
        scored = [(v, l) for l, v in states.items() if isinstance(v, tuple)]
        if scored:
            b = min(scored)[1]
            if lr in self.neighbours(task, b):
                return "needed"
            return "skip" if self.complete(task, model, states, b) else "maybe"
        # every finished run failed (states[lr] is unfinished here, so never "skip")
        return "needed" if any(lr in self.neighbours(task, f) for f in finished) else "maybe"


def ratio_x(ratio):
    a, b = (int(v) for v in ratio.split(":"))
    return a / (a + b)


def label(m):
    if m["ratio"] == "-":
        return "GPT-2"
    # a variant of a ratio's model (models.tsv's `variant`; older folders have no such column):
    # "rope", the 0:1 arm with RoPE on its MLA (scripts/ablate_ratio.sh, ROPE_ARM)
    return f"KDA:MLA {m['ratio']}" + {"-": "", "rope": " + RoPE"}.get(m.get("variant", "-"), f" ({m['variant']})")


def table(out, plot):
    sw = Sweep(out)
    match = open(os.path.join(out, "match.txt")).read().strip() if os.path.exists(os.path.join(out, "match.txt")) else ""
    rows, curves = [], []
    for m in sw.models:
        tag = m["model"]
        row = {"model": label(m), "layers": m["layers"], "params": m["params"], "active": m["active"],
               "active_nonemb": m["active_nonemb"], "mflop_per_token": m["mflop_lm"], "ratio": m["ratio"],
               "variant": m.get("variant", "-")}
        runs = [r for k, r in sw.runs.items() if k[1] == tag]
        row["runs_done"] = sum(r.status == "done" for r in runs)
        row["runs_failed"] = sum(r.status == "failed" for r in runs)
        # the sweep's runs (with lr_sweep grow, those not skipped: an upper bound while it grows),
        # then the other seeds at the best lr
        row["runs_total"] = sum(len(sw.sweep_seeds()) for task in sw.tasks for lr in sw.lrs(task)
                                if sw.lr_state(task, tag, lr) != "skip") \
            + (len(sw.seeds) - 1) * len(sw.tasks) * (sw.seed_sweep == "best")
        toks = [r.tok_s for k, r in sw.runs.items() if k[0] == "lm" and k[1] == tag and r.status == "done" and r.tok_s]
        row["tok_per_s"] = f"{statistics.median(toks):.0f}" if toks else "-"
        for task in sw.tasks:
            lr, edge = sw.best(task, tag, provisional=True)
            row[f"{task}_best_lr"] = lr or "-"
            row[f"{task}_lr_note"] = edge
            done = [sw.runs[task, tag, lr, s] for s in sw.seeds] if lr else []
            done = [r for r in done if r.status == "done"]
            if task == "lm":
                for key, attr in (("train", "final_train"), ("val", "final_val")):
                    text, mean, lo, hi, n = spread([getattr(r, attr) for r in done])
                    row[f"lm_{key}"] = text
                    row[f"lm_{key}_mean"], row[f"lm_{key}_min"], row[f"lm_{key}_max"] = fnum(mean), fnum(lo), fnum(hi)
                    row["lm_seeds"] = n
                if done:
                    curves.append(f"{label(m)} (lr {lr})={done[0].path}/metrics.jsonl")
            else:
                row["mqar_seeds"] = len(done)
                for p in sw.eval_pairs:
                    text, mean, lo, hi, n = spread([r.evals.get(p) for r in done], 3)
                    row[f"mqar_acc_{p}"] = text
                    row[f"mqar_acc_{p}_mean"], row[f"mqar_acc_{p}_min"], row[f"mqar_acc_{p}_max"] = \
                        fnum(mean, 3), fnum(lo, 3), fnum(hi, 3)
        rows.append(row)

    # results.tsv: one row per model, numbers only
    cols = ["model", "ratio", "layers", "params", "active", "active_nonemb", "mflop_per_token", "tok_per_s"]
    cols += ["lm_best_lr", "lm_lr_note", "lm_seeds", "lm_train_mean", "lm_train_min", "lm_train_max",
             "lm_val_mean", "lm_val_min", "lm_val_max"]
    if "mqar" in sw.tasks:
        cols += ["mqar_best_lr", "mqar_lr_note", "mqar_seeds"]
        for p in sw.eval_pairs:
            cols += [f"mqar_acc_{p}_mean", f"mqar_acc_{p}_min", f"mqar_acc_{p}_max"]
    cols += ["runs_done", "runs_failed", "runs_total"]
    with open(os.path.join(out, "results.tsv"), "w") as f:
        f.write("\t".join(cols) + "\n")
        for r in rows:
            f.write("\t".join(str(r.get(c, "")) for c in cols) + "\n")

    # runs.tsv: every run of the sweep
    with open(os.path.join(out, "runs.tsv"), "w") as f:
        f.write("task\tmodel\tlr\tseed\tstatus\tsteps\tfinal_train\tfinal_val\tmqar_val_acc\ttok_per_s"
                + "".join(f"\tmqar_acc_{p}" for p in sw.eval_pairs) + "\n")
        for (task, tag, lr, s), r in sw.runs.items():
            f.write("\t".join([task, tag, lr, s, r.status, str(r.steps), fnum(r.final_train), fnum(r.final_val),
                               fnum(r.mqar_val_acc, 3), fnum(r.tok_s, 0)]
                              + [fnum(r.evals.get(p), 3) if task == "mqar" else "-" for p in sw.eval_pairs]) + "\n")

    # results.md
    s = sw.settings
    md = [f"# KDA:MLA ablation of `{s['base']}` ({ {'0': 'dense', '1': 'MoE'}.get(s.get('moe'), 'MoE as the config sets it') })",
          "",
          f"Every model: the same config and tokens; only `layers` changes between ratios"
          + (" (and the GPT-2 baseline's model keys)" if any(m["ratio"] == "-" for m in sw.models) else "")
          + ("; the 0:1 + RoPE arm is the 0:1 model with `mla_rope = true` (RoPE on its MLA's decoupled slice)"
             if any(m.get("variant") == "rope" for m in sw.models) else "") + ".",
          f"Learning rates {s['lrs']}" + (f" (MQAR: {s['mqar_lrs']})" if "mqar" in sw.tasks else "")
          + (" (each model's sweep grown from the middle lr outwards until its best lr has a run on each side)"
             if sw.lr_sweep == "grow" else "")
          + f", seeds {s['seeds']} ({'lr sweep at the first seed, the others at the best lr' if sw.seed_sweep == 'best' else 'every lr at every seed'})."
          + (f" Extra options: `{s['options']}`." if s.get("options") else "")]
    if match:
        md += ["", match + "."]
    md += ["",
           "Final train loss: mean of the last 10 steps; final val loss: the last validation pass; "
           "± is half the range over the seeds at the best lr (n seeds in the column `seeds`); "
           "tok/s: median over the steps of the finished text runs. A best lr at the sweep's edge is "
           "flagged: the optimum may lie outside it; one marked `so far` is the best of the lrs run yet (the "
           "other seeds are trained at a model's best lr only once its whole sweep is done). Lower loss and "
           "higher accuracy are better.", ""]
    head = ["model", "layers", "params", "active", "active non-emb", "MFLOP/token", "tok/s", "best lr", "seeds",
            "final train loss", "final val loss"]
    if "mqar" in sw.tasks:
        head += ["MQAR lr"] + [f"MQAR acc @{p}" for p in sw.eval_pairs]
    head += ["runs"]
    md += ["| " + " | ".join(head) + " |", "| " + " | ".join(["---"] * 2 + ["---:"] * (len(head) - 2)) + " |"]

    def lr_text(r, task):
        note = r.get(f"{task}_lr_note", "")
        return r[f"{task}_best_lr"] + (f" ({note})" if note and r[f"{task}_best_lr"] != "-" else "")

    for r in rows:
        cells = [r["model"], f"`{r['layers']}`", f"{int(r['params']):,}", f"{int(r['active']):,}",
                 f"{int(r['active_nonemb']):,}", r["mflop_per_token"], r["tok_per_s"], lr_text(r, "lm"),
                 str(r.get("lm_seeds", 0)), r.get("lm_train", "-"), r.get("lm_val", "-")]
        if "mqar" in sw.tasks:
            cells += [lr_text(r, "mqar")] + [r.get(f"mqar_acc_{p}", "-") for p in sw.eval_pairs]
        cells += [f"{r['runs_done']}/{r['runs_total']}" + (f", {r['runs_failed']} failed" if r["runs_failed"] else "")]
        md.append("| " + " | ".join(cells) + " |")
    for task in sw.tasks:
        lrs = sw.lrs(task)
        what = "final val loss" if task == "lm" else "final validation MQAR accuracy"
        md += ["", f"The {'text' if task == 'lm' else 'MQAR'} sweep ({what}, seed {sw.seeds[0]}; "
                   "`failed`: the run stopped, e.g. diverged; `-`: not run"
                   + (", yet or not needed: the sweep grows from its centre until the best lr has a "
                      "finished run on each side" if sw.lr_sweep == "grow" else " yet") + "):", "",
               "| model | " + " | ".join(f"lr {lr}" for lr in lrs) + " |",
               "| --- | " + " | ".join(["---:"] * len(lrs)) + " |"]
        for m in sw.models:
            cells = []
            for lr in lrs:
                run = sw.runs[task, m["model"], lr, sw.seeds[0]]
                v = run.final_val if task == "lm" else run.mqar_val_acc
                cells.append("failed" if run.status == "failed" else
                             (fnum(v, 4 if task == "lm" else 3) if run.status == "done" else "-"))
            md.append(f"| {label(m)} | " + " | ".join(cells) + " |")
    pngs = []
    if plot:
        pngs = plots(out, sw, rows, curves)
    md += [""] + [f"![{p}]({p})" for p in pngs]
    with open(os.path.join(out, "results.md"), "w") as f:
        f.write("\n".join(md) + "\n")
    with open(os.path.join(out, "curves.args"), "w") as f:
        f.write("\n".join(curves) + "\n")


def plots(out, sw, rows, curves):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    written = []
    if curves:
        subprocess.run([sys.executable, os.path.join(HERE, "plot_losses.py"), "--out",
                        os.path.join(out, "loss_curves.png"), "--title",
                        f"KDA:MLA ablation, best lr, seed {sw.seeds[0]}"] + curves, check=True)
        written.append("loss_curves.png")
    # the family's line: one model per ratio as configured; a variant of a ratio (the 0:1 RoPE
    # arm) is its own series, markers without a line, so that it is not a second point of the line
    fam = [r for r in rows if r["ratio"] != "-" and r["variant"] == "-"]
    arms = [r for r in rows if r["ratio"] != "-" and r["variant"] != "-"]
    base = [r for r in rows if r["ratio"] == "-"]
    ticks = sorted({ratio_x(r["ratio"]) for r in fam + arms})
    names = {ratio_x(r["ratio"]): r["ratio"] for r in fam + arms}

    def errbar(ax, rs, key, colour, lab, arm=False):
        # an arm's marker sits a little left of its ratio so that its range does not hide the
        # family's point there
        dx = -0.025 if arm else 0.0
        pts = [(ratio_x(r["ratio"]) + dx, float(r[f"{key}_mean"]), float(r[f"{key}_min"]), float(r[f"{key}_max"]))
               for r in rs if r.get(f"{key}_mean", "-") != "-"]
        if not pts:
            return False
        x, y, lo, hi = zip(*pts)
        style = dict(marker="D", linestyle="none", markerfacecolor="white") if arm else dict(marker="o")
        ax.errorbar(x, y, yerr=[[a - b for a, b in zip(y, lo)], [b - a for a, b in zip(y, hi)]], color=colour,
                    capsize=4, label=lab, **style)
        return True

    def arm_errbars(ax, key, colour, suffix=""):
        drawn = False
        for r in arms:
            drawn |= errbar(ax, [r], key, colour, r["model"] + suffix, arm=True)
        return drawn

    def baseline(ax, key, colour, lab):
        for r in base:
            if r.get(f"{key}_mean", "-") != "-":
                ax.axhline(float(r[f"{key}_mean"]), color=colour, linestyle="--", linewidth=1.2, label=lab)
                ax.axhspan(float(r[f"{key}_min"]), float(r[f"{key}_max"]), color=colour, alpha=0.12)

    fig, ax = plt.subplots(figsize=(7, 4.5), dpi=120)
    drawn = errbar(ax, fam, "lm_val", "C0", "KDA:MLA family (mean, range over seeds)")
    drawn |= arm_errbars(ax, "lm_val", "C2")
    if drawn:
        baseline(ax, "lm_val", "C3", "GPT-2, matched active params")
        ax.set_xticks(ticks, [names[t] for t in ticks])
        ax.set_xlabel("KDA:MLA ratio")
        ax.set_ylabel("final validation loss (nats/token)")
        ax.set_title("Validation loss against the ratio (best lr per model)")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(os.path.join(out, "val_vs_ratio.png"))
        written.append("val_vs_ratio.png")
    plt.close(fig)
    if "mqar" in sw.tasks:
        fig, ax = plt.subplots(figsize=(9, 4.5), dpi=120)
        any_pts = False
        for i, p in enumerate(sw.eval_pairs):
            drawn = errbar(ax, fam, f"mqar_acc_{p}", f"C{i}", f"{p} pairs")
            drawn |= arm_errbars(ax, f"mqar_acc_{p}", f"C{i}", f", {p} pairs")
            if drawn:
                any_pts = True
                baseline(ax, f"mqar_acc_{p}", f"C{i}", f"GPT-2, {p} pairs")
        if any_pts:
            ax.set_xticks(ticks, [names[t] for t in ticks])
            ax.set_xlabel("KDA:MLA ratio")
            ax.set_ylabel("MQAR accuracy")
            ax.set_ylim(-0.02, 1.02)
            ax.set_title(f"MQAR accuracy against the ratio (trained at {sw.settings['mqar_pairs']} pairs)")
            ax.grid(True, alpha=0.3)
            # outside the axes: the curves cross the whole plot (low at 0:1, near 1 elsewhere)
            ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
            fig.tight_layout()
            fig.savefig(os.path.join(out, "mqar_vs_ratio.png"), bbox_inches="tight")
            written.append("mqar_vs_ratio.png")
        plt.close(fig)
    return written


def probe_runs(folders):
    """The finished MQAR runs of the runner folders: (folder, model row, lr, seed, Run) in folder
    order, then each Sweep's; exits naming the folders when their MQAR tasks differ. Returns them
    and the trained pair count (sweep.tsv's mqar_pairs)."""
    ref = None
    out = []
    for folder in folders:
        for f in ("mqar-task.conf", "sweep.tsv", "models.tsv"):
            if not os.path.isfile(os.path.join(folder, f)):
                sys.exit(f"ablate_summary probes: {os.path.join(folder, f)}: no such file "
                         "(not a runner folder with an MQAR task)")
        task = os.path.join(folder, "mqar-task.conf")
        body = open(task).read()
        if ref is None:
            ref = (folder, body)
        elif body != ref[1]:
            sys.exit(f"ablate_summary probes: {task} differs from {os.path.join(ref[0], 'mqar-task.conf')}: "
                     "not the same MQAR setting, so not one plot")
        sw = Sweep(folder)
        rows = {m["model"]: m for m in sw.models}
        out += [(folder, rows[model], lr, seed, r) for (t, model, lr, seed), r in sw.runs.items()
                if t == "mqar" and r.status == "done"]
    return out, int(read_settings(ref[0])["mqar_pairs"])


def probes(png, title, folders, plot):
    runs, pairs = probe_runs(folders)
    evals = sorted({p for *_, r in runs for p in r.evals})
    print("\t".join(["folder", "model", "lr", "seed", "steps", "val_acc"] + [f"acc_{p}" for p in evals]))
    for folder, m, lr, seed, r in runs:
        print("\t".join([folder, label(m), lr, seed, str(r.steps), fnum(r.mqar_val_acc, 3)] +
                        [fnum(r.evals.get(p), 3) for p in evals]))
    if not plot or not runs:
        return
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = []
    for _, m, *_ in runs:
        if label(m) not in labels:
            labels.append(label(m))
    colour = {lab: f"C{i}" for i, lab in enumerate(labels)}
    lrs = sorted({lr for _, _, lr, *_ in runs}, key=float)
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(12, 4.5), dpi=120)
    seen = set()
    for _, m, lr, seed, r in runs:
        lab = label(m)
        x, y = zip(*r.mqar_curve) if r.mqar_curve else ((), ())
        extra = f", lr {lr}" if len(lrs) > 1 else ""
        ax.plot(x, y, color=colour[lab], alpha=0.8, linestyle="-" if lr == lrs[len(lrs) // 2] else ":",
                label=None if (lab, lr) in seen else lab + extra)
        seen.add((lab, lr))
    ax.axhline(1 / pairs, color="grey", linestyle="--", linewidth=1, label=f"1/{pairs}: knows the list")
    ax.set_xlabel("step")
    ax.set_ylabel("validation MQAR accuracy")
    ax.set_ylim(-0.02, 1.02)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7)
    ax.set_title("every run, validation accuracy")
    ticks = {}
    for _, m, lr, seed, r in runs:
        if m["ratio"] == "-" or pairs not in r.evals:
            continue
        xr = ratio_x(m["ratio"]) - (0.025 if m.get("variant", "-") != "-" else 0.0)
        ticks[ratio_x(m["ratio"])] = m["ratio"]
        bx.plot(xr + 0.008 * (int(seed) % 4 - 1.5), r.evals[pairs], marker="o", linestyle="none",
                color=colour[label(m)], alpha=0.85)
    bx.axhline(1 / pairs, color="grey", linestyle="--", linewidth=1)
    bx.set_xticks(sorted(ticks), [ticks[t] for t in sorted(ticks)])
    bx.set_xlabel("KDA:MLA ratio")
    bx.set_ylabel(f"eval-mqar accuracy at {pairs} pairs")
    bx.set_ylim(-0.02, 1.02)
    bx.grid(True, alpha=0.3)
    bx.set_title("each run's final accuracy (a point a seed)")
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(png)
    plt.close(fig)
    print(f"wrote {png}")


def runs_table(out, title):
    """summary.md of single runs: OUT/models.tsv and OUT/run/<model>/metrics.jsonl."""
    head = ["model", "layers", "params", "active non-emb", "MFLOP/token", "steps", "tokens", "train s",
            "tok/s", "final train loss", "final val loss", "best val loss (step)"]
    md = [f"# {title}", "", "| " + " | ".join(head) + " |",
          "| " + " | ".join(["---"] * 2 + ["---:"] * (len(head) - 2)) + " |"]
    for m in read_tsv(os.path.join(out, "models.tsv")):
        path = os.path.join(out, "run", m["model"], "metrics.jsonl")
        run = Run(os.path.dirname(path))
        tokens = secs = None
        best = (None, None)
        if os.path.exists(path):
            for rec in records(path):
                if "loss" in rec:
                    tokens, secs = rec.get("tokens"), rec.get("elapsed_s")
                if "val_loss" in rec and (best[0] is None or rec["val_loss"] < best[0]):
                    best = (rec["val_loss"], rec["step"])
        md.append("| " + " | ".join([label(m), f"`{m['layers']}`", f"{int(m['params']):,}",
                                     f"{int(m['active_nonemb']):,}", m["mflop_lm"], str(run.steps),
                                     f"{tokens:,}" if tokens else "-", f"{secs:.0f}" if secs else "-",
                                     fnum(run.tok_s, 0), fnum(run.final_train), fnum(run.final_val),
                                     f"{best[0]:.4f} ({best[1]})" if best[0] is not None else "-"]) + " |")
    md += ["", "Final train loss: mean of the last 10 steps; final val loss: the last validation pass; "
               "tok/s: median over the steps after the first tenth; train s: the trainer's elapsed time "
               "at its last step."]
    with open(os.path.join(out, "summary.md"), "w") as f:
        f.write("\n".join(md) + "\n")


def main():
    args = sys.argv[1:]
    if len(args) >= 2 and args[0] == "table":
        table(args[1], "--no-plot" not in args[2:])
    elif len(args) >= 4 and args[0] == "probes":
        rest = [a for a in args[3:] if a != "--no-plot"]
        if not rest:
            sys.exit(__doc__)
        probes(args[1], args[2], rest, "--no-plot" not in args[3:])
    elif len(args) == 3 and args[0] == "runs":
        runs_table(args[1], args[2])
    elif len(args) == 4 and args[0] == "best":
        lr, _ = Sweep(args[1]).best(args[2], args[3])
        if lr:
            print(lr)
    elif len(args) == 5 and args[0] == "lr-state":
        sw = Sweep(args[1])
        if args[4] not in sw.lrs(args[2]):
            sys.exit(f"ablate_summary: lr {args[4]} is not in the {args[2]} sweep ({' '.join(sw.lrs(args[2]))})")
        print(sw.lr_state(args[2], args[3], args[4]))
    elif len(args) == 2 and args[0] == "lr-states":
        sw = Sweep(args[1])
        for task in sw.tasks:
            for m in sw.models:
                for lr in sw.lrs(task):
                    print(task, m["model"], lr, sw.lr_state(task, m["model"], lr))
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
