#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The reference side of tests/tools/real_train_rm_check.sh (`grpo train-rm` on SmolLM2-135M-Instruct):

    real_reward_model.py pairs WORK
        WORK/train.jsonl, WORK/held_out.jsonl: preference pairs in TRL's explicit-prompt text format, a sum right
        (chosen) against the same sum off by 1 to 9 (rejected); WORK/completions.jsonl: {"prompt", "completion"} lines
        of both sides of the held-out pairs, for `grpo score`.
    real_reward_model.py check WORK
        reads WORK/rm/train_rm_results.json (the held-out loss must have fallen), loads WORK/rm with transformers'
        AutoModelForSequenceClassification and AutoTokenizer in float32, scores each line of WORK/completions.jsonl as
        the reward_model reward reads it (prompt + completion, special tokens recognised and none added, the head at the
        last token) and compares with `grpo score`'s values in WORK/scored.jsonl (1e-3 of the scores' spread); exit
        status 1 if either check fails.
Deterministic (a fixed seed)."""
import json
import random
import sys
from pathlib import Path


def write_pairs(work: Path):
    rng = random.Random(7)
    def pairs(count):
        out = []
        for _ in range(count):
            a, b = rng.randint(10, 99), rng.randint(10, 99)
            wrong = a + b + rng.choice([-1, 1]) * rng.randint(1, 9)
            out.append({"prompt": f"Question: what is {a} + {b}?\nAnswer:", "chosen": f" {a + b}", "rejected": f" {wrong}"})
        return out
    train, held_out = pairs(64), pairs(16)
    for name, rows in (("train", train), ("held_out", held_out)):
        (work / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    lines = [{"prompt": r["prompt"], "completion": r[side]} for r in held_out for side in ("chosen", "rejected")]
    (work / "completions.jsonl").write_text("".join(json.dumps(l) + "\n" for l in lines), encoding="utf-8")


def check(work: Path) -> int:
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    results = json.loads((work / "rm" / "train_rm_results.json").read_text())
    before, after = results["before"]["loss"], results["after"]["loss"]
    print(f"held-out loss {before:.4f} -> {after:.4f}, accuracy {results['before']['accuracy']:.3f} -> "
          f"{results['after']['accuracy']:.3f}")
    ok = after < before
    model = AutoModelForSequenceClassification.from_pretrained(work / "rm", dtype=torch.float32).eval()
    tokenizer = AutoTokenizer.from_pretrained(work / "rm")
    ours = [json.loads(line)["rewards"]["reward_model"] for line in (work / "scored.jsonl").read_text().splitlines()]
    lines = [json.loads(line) for line in (work / "completions.jsonl").read_text().splitlines()]
    theirs = []
    with torch.no_grad():
        for line in lines:
            ids = tokenizer(line["prompt"] + line["completion"], add_special_tokens=False, return_tensors="pt").input_ids
            theirs.append(float(model(input_ids=ids).logits[0, 0]))
    spread = max(theirs) - min(theirs)
    worst = max(abs(a - b) for a, b in zip(ours, theirs))
    print(f"{len(theirs)} scores: transformers against grpo, largest difference {worst:.2e} (spread {spread:.3f})")
    ok = ok and len(ours) == len(theirs) and worst <= 1e-3 * max(spread, 1.0)
    return 0 if ok else 1


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] not in ("pairs", "check"):
        sys.exit(__doc__)
    work = Path(sys.argv[2])
    if sys.argv[1] == "pairs":
        write_pairs(work)
    else:
        sys.exit(check(work))
