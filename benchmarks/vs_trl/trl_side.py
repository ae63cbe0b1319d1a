#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""TRL's GRPOTrainer (no vLLM, CPU) on the settings run.sh gives both sides; prints one JSON line per optimizer step:
{"step", "step_s", "gen_s", "score_s", "logprob_s", "update_s", "completion_tokens", "loss"} and at the end
{"peak_rss_gb"}. With --dump-batch FILE, the first batch with a nonzero advantage (prompt and completion ids and masks,
advantages), TRL's loss, per-token log-probs and gradients (before clipping) on it go to FILE (safetensors):
loss_on_batch recomputes them with this library on the same weights. No file when every step's advantages are 0. Phases: gen = GRPOTrainer._generate, score = _calculate_rewards, logprob = the rest of
_generate_and_score_completions (tokenising, old/ref log-probs when needed, advantages), update = training_step minus
_prepare_inputs (forward, backward, optimizer).
usage: trl_side.py MODEL_DIR PROMPTS.jsonl OUT_DIR --steps N --prompts P --group-size G --max-new-tokens T --lr LR
                   --dtype fp32|bf16 --seed S --threads K [--dump-batch FILE]"""
import argparse
import json
import re
import resource
import sys
import time

import torch


# The R1-Zero system prompt of the DeepSeek-R1 paper (arXiv:2501.12948, table 1), which r1_zero puts before every
# data prompt: both sides render the same conversation.
SYSTEM_PROMPT = (
    "A conversation between User and Assistant. The user asks a question, and the Assistant solves it. The "
    "assistant first thinks about the reasoning process in the mind and then provides the user with the answer. "
    "The reasoning process and answer are enclosed within <think> </think> and <answer> </answer> tags, "
    "respectively, i.e., <think> reasoning process here </think> <answer> answer here </answer>.")


def last_number(text):
    numbers = re.findall(r"-?\d[\d,]*\.?\d*", text)
    return numbers[-1].replace(",", "").rstrip(".") if numbers else None


def save_first_batch(path, dump, model, step):
    """A step's batch and what TRL computed on it; the gradients are read before the optimizer step (and before
    clipping, which the Trainer applies after training_step): their global norm and two whole tensors."""
    from safetensors.torch import save_file
    grads = {name: p.grad for name, p in model.named_parameters() if p.grad is not None}
    dump["grad_norm"] = torch.sqrt(sum(g.float().square().sum() for g in grads.values())).reshape(1)
    for name in ("model.layers.0.self_attn.q_proj.weight", "model.layers.29.mlp.down_proj.weight"):
        if name in grads:
            dump["grad." + name] = grads[name].float()
    save_file({k: v.contiguous() for k, v in dump.items()}, path, metadata={"step": str(step)})


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("model")
    parser.add_argument("prompts")
    parser.add_argument("out")
    for name, kind in (("steps", int), ("prompts-per-step", int), ("group-size", int), ("max-new-tokens", int),
                       ("lr", float), ("seed", int), ("threads", int)):
        parser.add_argument(f"--{name}", type=kind, required=True)
    parser.add_argument("--dtype", choices=("fp32", "bf16"), required=True)
    parser.add_argument("--dump-batch")
    a = parser.parse_args()
    torch.set_num_threads(a.threads)

    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    rows = [json.loads(line) for line in open(a.prompts, encoding="utf-8")]
    dataset = Dataset.from_list([{"prompt": [{"role": "system", "content": SYSTEM_PROMPT},
                                             {"role": "user", "content": r["question"]}],
                                  "gold": r["answer"].split("####")[-1].strip().replace(",", "")} for r in rows])

    def accuracy(completions, gold, **_):
        return [1.0 if last_number(c[0]["content"]) == g else 0.0 for c, g in zip(completions, gold)]

    dtype = torch.bfloat16 if a.dtype == "bf16" else torch.float32
    model = AutoModelForCausalLM.from_pretrained(a.model, dtype=dtype)
    tokenizer = AutoTokenizer.from_pretrained(a.model)
    batch = a.prompts_per_step * a.group_size
    config = GRPOConfig(
        output_dir=a.out, use_cpu=True, bf16=a.dtype == "bf16", report_to="none", seed=a.seed, max_steps=a.steps,
        learning_rate=a.lr, lr_scheduler_type="constant", warmup_steps=0, weight_decay=0.0, max_grad_norm=1.0,
        per_device_train_batch_size=batch, gradient_accumulation_steps=1, steps_per_generation=1,
        num_generations=a.group_size, max_completion_length=a.max_new_tokens, temperature=1.0, top_p=1.0,
        loss_type="dapo", beta=0.0, epsilon=0.2, epsilon_high=0.2, num_iterations=1, scale_rewards="group",
        gradient_checkpointing=True, logging_steps=1, save_strategy="no", dataloader_num_workers=0,
        log_completions=False, disable_tqdm=True)
    trainer = GRPOTrainer(model=model, reward_funcs=[accuracy], args=config, train_dataset=dataset,
                          processing_class=tokenizer)

    timings = {"gen": 0.0, "score": 0.0, "prepare": 0.0, "gen_and_score": 0.0, "tokens": 0}

    def timed(name, method):
        def wrapper(*args, **kwargs):
            start = time.perf_counter()
            out = method(*args, **kwargs)
            timings[name] += time.perf_counter() - start
            return out
        return wrapper

    trainer._generate = timed("gen", trainer._generate)
    trainer._calculate_rewards = timed("score", trainer._calculate_rewards)
    trainer._prepare_inputs = timed("prepare", trainer._prepare_inputs)
    generate_and_score = trainer._generate_and_score_completions

    def counted(*args, **kwargs):
        start = time.perf_counter()
        out = generate_and_score(*args, **kwargs)
        timings["gen_and_score"] += time.perf_counter() - start
        timings["tokens"] += int(out["completion_mask"].sum())
        return out
    trainer._generate_and_score_completions = counted
    step_method = trainer.training_step
    losses = []
    dump, dumped = {}, []
    if a.dump_batch:
        compute_loss = trainer._compute_loss
        token_logps = trainer._get_per_token_logps_and_entropies

        def recorded_logps(*args, **kwargs):
            out = token_logps(*args, **kwargs)
            if not dumped and torch.is_grad_enabled():
                dump["per_token_logps"] = out[0].detach().float().clone()
            return out

        def recorded_loss(model_, inputs):
            loss = compute_loss(model_, inputs)
            if not dumped:
                for key in ("prompt_ids", "prompt_mask", "completion_ids", "completion_mask", "advantages"):
                    dump[key] = inputs[key].detach().clone()
                dump["num_items_in_batch"] = inputs["num_items_in_batch"].detach().float().reshape(1)
                dump["loss"] = loss.detach().float().reshape(1)
            return loss
        trainer._get_per_token_logps_and_entropies = recorded_logps
        trainer._compute_loss = recorded_loss

    def step(*args, **kwargs):
        for key in timings:
            timings[key] = 0
        start = time.perf_counter()
        loss = step_method(*args, **kwargs)
        total = time.perf_counter() - start
        print(json.dumps({"step": len(losses) + 1, "step_s": total, "gen_s": timings["gen"],
                          "score_s": timings["score"],
                          "logprob_s": timings["gen_and_score"] - timings["gen"] - timings["score"],
                          "update_s": total - timings["prepare"], "completion_tokens": timings["tokens"],
                          "loss": float(loss)}), flush=True)
        # The first batch with a nonzero advantage is the one saved. The steps before it had all-zero advantages,
        # hence zero gradients, which move AdamW by exactly 0 (weight decay 0): the weights are still the loaded ones.
        if a.dump_batch and not dumped:
            if bool(dump["advantages"].ne(0).any()):
                save_first_batch(a.dump_batch, dump, trainer.model, len(losses) + 1)
                dumped.append(True)
            dump.clear()
        losses.append(float(loss))
        return loss
    trainer.training_step = step
    trainer.train()
    print(json.dumps({"peak_rss_gb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20}), flush=True)


if __name__ == "__main__":
    sys.exit(main())
