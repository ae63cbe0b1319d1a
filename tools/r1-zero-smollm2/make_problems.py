#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Short arithmetic word problems for R1-Zero on a small pretrained model, in GSM8K's JSONL form
({"question", "answer": "<worked line>\n#### N"}), deterministic for a seed.

One operation per problem (+, -, x, / with exact quotients) on numbers up to 20 (products up to 12 x 12): the
arithmetic is within reach of a 135M-parameter model, so its starting accuracy is neither 0 (GSM8K's test set: 0 of 64
at temperature 1) nor saturated, and what GRPO can teach it is to read the question, do the step and put the number
where the grader looks (the last <answer> span, else the last line).

    make_problems.py OUT.jsonl [--count N] [--seed S]
"""
import argparse
import json
import random

NAMES = ["Tom", "Mia", "Ali", "Sara", "Ben", "Lena", "Omar", "Ivy", "Raj", "Zoe", "Max", "Nora", "Leo", "Ana",
         "Sam", "Eva", "Kai", "Lucy", "Yuki", "Hugo"]
THINGS = ["apples", "pencils", "marbles", "stickers", "cookies", "books", "cards", "shells", "coins", "balloons",
          "stamps", "eggs", "toy cars", "flowers", "candies", "beads"]
BOXES = ["boxes", "bags", "jars", "baskets", "packs", "rows", "shelves", "plates"]


def add(r, who, other, thing):
    a, b = r.randint(2, 20), r.randint(2, 20)
    q = r.choice([
        f"{who} has {a} {thing}. {other} gives {who} {b} more {thing}. How many {thing} does {who} have now?",
        f"{who} picked {a} {thing} in the morning and {b} {thing} in the afternoon. How many {thing} did {who} "
        f"pick in all?",
        f"There are {a} {thing} on a table and {b} {thing} in a drawer. How many {thing} are there altogether?",
    ])
    return q, f"{a} + {b} = {a + b}", a + b


def sub(r, who, other, thing):
    a = r.randint(5, 20)
    b = r.randint(1, a - 1)
    q = r.choice([
        f"{who} has {a} {thing}. {who} gives {b} of them to {other}. How many {thing} does {who} have left?",
        f"A bag holds {a} {thing}. {who} takes out {b} {thing}. How many {thing} are still in the bag?",
        f"{who} had {a} {thing} and lost {b} of them. How many {thing} does {who} have now?",
    ])
    return q, f"{a} - {b} = {a - b}", a - b


def mul(r, who, other, thing):
    a, b = r.randint(2, 12), r.randint(2, 12)
    box = r.choice(BOXES)
    q = r.choice([
        f"{who} has {a} {box} with {b} {thing} in each. How many {thing} does {who} have?",
        f"Each of {a} children brings {b} {thing}. How many {thing} do they bring in total?",
        f"{who} buys {a} {box} of {thing}. Each one holds {b} {thing}. How many {thing} did {who} buy?",
    ])
    return q, f"{a} * {b} = {a * b}", a * b


def div(r, who, other, thing):
    b, n = r.randint(2, 10), r.randint(2, 10)
    a = b * n
    box = r.choice(BOXES)
    q = r.choice([
        f"{who} shares {a} {thing} equally among {b} friends. How many {thing} does each friend get?",
        f"{who} puts {a} {thing} into {b} {box}, the same number in each. How many {thing} are in each one?",
        f"{a} {thing} are packed {n} to a pack. How many packs are there?",
    ])
    if q.endswith("How many packs are there?"):
        return q, f"{a} / {n} = {b}", b
    return q, f"{a} / {b} = {n}", n


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("out")
    p.add_argument("--count", type=int, default=4096)
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args()
    r = random.Random(a.seed)
    seen = set()
    with open(a.out, "w", encoding="utf-8") as f:
        while len(seen) < a.count:
            who, other = r.sample(NAMES, 2)
            question, work, answer = r.choice([add, sub, mul, div])(r, who, other, r.choice(THINGS))
            if question in seen:
                continue
            seen.add(question)
            f.write(json.dumps({"question": question, "answer": f"{work}\n#### {answer}"}) + "\n")


if __name__ == "__main__":
    main()
