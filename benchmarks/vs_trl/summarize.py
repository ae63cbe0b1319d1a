#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Reads run.sh's outputs (OUT/ours_<dtype>/metrics.jsonl, OUT/trl_<dtype>.jsonl) and prints, per dtype, the median
over the steps after the first of each phase's seconds, seconds per completion token, peak RSS, and TRL / ours; then
both sides' loss and gradient on TRL's first batch (OUT/same_batch_<dtype>.json, from loss_on_batch)."""
import json
import statistics
import sys
from pathlib import Path


def ours(path):
    steps = [json.loads(line) for line in path.read_text().splitlines()]
    steps = [s for s in steps if "step_time" in s]
    rows = [{"step_s": s["step_time"], "gen_s": s["timing_s/gen"], "score_s": s["timing_s/reward"],
             "logprob_s": s.get("timing_s/old_log_prob", 0) + s.get("timing_s/ref", 0),
             "update_s": s["timing_s/update_actor"], "completion_tokens": s["num_tokens"]} for s in steps]
    return rows, max(s["perf/peak_rss_gb"] for s in steps)


def trl(path):
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    rows = [line for line in lines if "step" in line]
    peak = next(line["peak_rss_gb"] for line in lines if "peak_rss_gb" in line)
    return rows, peak


def median(rows, key):
    return statistics.median(row[key] for row in rows[1:])


def main():
    out = Path(sys.argv[1])
    for dtype in sys.argv[2:]:
        mine, my_peak = ours(out / f"ours_{dtype}" / "metrics.jsonl")
        theirs, their_peak = trl(out / f"trl_{dtype}.jsonl")
        print(f"\n{dtype}: median of steps 2..{len(mine)} (this library) and 2..{len(theirs)} (TRL)")
        print(f"{'':24}{'this library':>14}{'TRL':>12}{'TRL / ours':>12}")
        for key in ("step_s", "gen_s", "score_s", "logprob_s", "update_s", "completion_tokens"):
            a, b = median(mine, key), median(theirs, key)
            print(f"{key:24}{a:14.3f}{b:12.3f}{(b / a if a else float('nan')):12.2f}")
        per_token = [median([{"x": r["step_s"] / max(r["completion_tokens"], 1)} for r in rows], "x")
                     for rows in (mine, theirs)]
        print(f"{'step_s per token (ms)':24}{per_token[0] * 1e3:14.2f}{per_token[1] * 1e3:12.2f}"
              f"{per_token[1] / per_token[0]:12.2f}")
        print(f"{'peak RSS (GB)':24}{my_peak:14.2f}{their_peak:12.2f}{their_peak / my_peak:12.2f}")
        same = out / f"same_batch_{dtype}.json"
        if same.exists() and same.read_text().strip():
            s = json.loads(same.read_text())
            print(f"same batch ({s['rows']} rows, {s['tokens']:.0f} tokens): loss {s['loss']:.6g} vs TRL {s['trl_loss']:.6g}, "
                  f"log-probs max |diff| {s['logp_max_abs_diff']:.3g} (mean {s['logp_mean_abs_diff']:.3g}), "
                  f"grad norm {s['grad_norm']:.5g} vs {s['trl_grad_norm']:.5g}, "
                  + ", ".join(f"{k.split('/', 1)[1]} rel. L2 {v:.3g}" for k, v in s.items()
                              if k.startswith("grad_rel_l2/"))
                  + ("" if s["within_tolerance"] else "  BEYOND TOLERANCE"))
            if "ours_vs_fp32_logp_mean_abs" in s:
                print(f"  distance from this library's fp32 result: log-probs mean |diff| ours "
                      f"{s['ours_vs_fp32_logp_mean_abs']:.3g}, TRL {s['trl_vs_fp32_logp_mean_abs']:.3g}; "
                      + ", ".join(f"{k.split('/', 1)[1]} rel. L2 ours {v:.3g}, TRL "
                                  f"{s['trl_vs_fp32_grad_rel_l2/' + k.split('/', 1)[1]]:.3g}"
                                  for k, v in s.items() if k.startswith("ours_vs_fp32_grad_rel_l2/")))


if __name__ == "__main__":
    main()
