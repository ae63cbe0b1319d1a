#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The learning result of R1-Zero runs (r1_zero's metrics.jsonl, one run directory per seed): a Markdown table of
held-out accuracy before and after (greedy, and pass@1 at the evaluation temperature) with standard errors, and a PNG
of the training curves (accuracy reward, format rate, response length, held-out accuracy) against wall-clock minutes.

    report.py RUN_DIR [RUN_DIR ...] --png OUT.png

Standard errors: a proportion p over N held-out problems has SE sqrt(p(1-p)/N) (pass@1 from several samples per
problem averages them first, which can only shrink the variance, so this is an upper bound); the gain's SE adds the
two variances, as for independent samples (before and after are on the same problems, which makes the true SE of the
difference smaller still). "SEs" is the gain over its SE.
"""
import argparse
import json
import math
import os


def read_metrics(run_dir):
    steps, evals = {}, {}
    with open(os.path.join(run_dir, "metrics.jsonl"), encoding="utf-8") as f:
        for line in f:
            row = json.loads(line)
            target = evals if any(k.startswith("eval/") for k in row) else steps
            target.setdefault(row["step"], {}).update(row)
    return steps, evals


def problems_of(run_dir):
    with open(os.path.join(run_dir, "config.yaml"), encoding="utf-8") as f:
        config = dict(line.split(": ", 1) for line in f.read().splitlines() if ": " in line)
    value = int(config.get("eval_problems", "0").strip('"'))
    return value if value > 0 else int(config["held_out"].strip('"'))


def smooth(values, window):
    out = []
    for i in range(len(values)):
        part = values[max(0, i - window + 1):i + 1]
        out.append(sum(part) / len(part))
    return out


def gain(before, after, n):
    se = math.sqrt(before * (1 - before) / n + after * (1 - after) / n)
    return after - before, se


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("runs", nargs="+")
    p.add_argument("--png", required=True)
    p.add_argument("--smooth", type=int, default=10, help="moving-average window of the training curves (steps)")
    a = p.parse_args()

    print("| run | steps | minutes | greedy before → after | gain (SEs) | pass@1 before → after | gain (SEs) |")
    print("|---|---|---|---|---|---|---|")
    runs = []
    for run in a.runs:
        steps, evals = read_metrics(run)
        n = problems_of(run)
        first, last = evals[min(evals)], evals[max(evals)]
        t0 = first["wall_time"]
        minutes = (last["wall_time"] - t0) / 60
        cells = []
        for key in ("eval/greedy_accuracy", "eval/mean_accuracy"):
            if key not in first:
                cells += ["–", "–"]
                continue
            d, se = gain(first[key], last[key], n)
            cells += [f"{first[key]:.3f} → {last[key]:.3f}", f"{100 * d:+.1f} pts ({d / se if se else 0:.1f})"]
        print(f"| {os.path.basename(os.path.normpath(run))} | {max(steps)} | {minutes:.0f} | " + " | ".join(cells) + " |")
        runs.append((run, steps, evals, t0))

    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [("rewards/accuracy/mean", "accuracy reward (training)"), ("rewards/format/mean", "format rate (training)"),
              ("completions/mean_length", "response length (tokens)"), (None, "held-out accuracy")]
    fig, axes = plt.subplots(2, 2, figsize=(11, 7.5))
    for ax, (key, title) in zip(axes.flat, panels):
        for index, (run, steps, evals, t0) in enumerate(runs):
            color = f"C{index}"
            label = os.path.basename(os.path.normpath(run))
            if key is not None:
                order = sorted(s for s in steps if key in steps[s])
                x = [(steps[s]["wall_time"] - t0) / 60 for s in order]
                ax.plot(x, smooth([steps[s][key] for s in order], a.smooth), color=color, label=label)
            else:
                order = sorted(evals)
                x = [(evals[s]["wall_time"] - t0) / 60 for s in order]
                if "eval/greedy_accuracy" in evals[order[0]]:
                    ax.plot(x, [evals[s]["eval/greedy_accuracy"] for s in order], "o-", color=color,
                            label=f"{label} greedy")
                ax.plot(x, [evals[s]["eval/mean_accuracy"] for s in order], "s--", color=color,
                        label=f"{label} pass@1")
        ax.set_title(title + ("" if key is None else f", {a.smooth}-step mean"))
        ax.set_xlabel("wall-clock minutes")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(a.png, dpi=90)


if __name__ == "__main__":
    main()
