"""Greedy accuracy and pass@k of a policy on a list of problems.

Used by the warm start (sft.py) and by GRPO training (train.py) alike, so it sits beside
the task and depends only on the model, the tokenizer and the rewards:

    tasks / tokenizer / model / rewards  <-  evaluation  <-  sft, train

`evaluate` decodes greedily with the same completion budget as training: the number a
run reports is what the policy answers when it is not exploring. Under torchrun each
rank answers every N-th problem and the counts are summed over the ranks.
"""
import torch

import distributed
import rewards
from model import generate
from tokenizer import decode_completions, encode_prompt, stop_tokens


@torch.no_grad()
def evaluate(model, enc, problems, max_new_tokens=40, batch_size=256, fallback="none"):
    """Greedy accuracy and share of completions in think format on a list of problems
    (the whole list on every rank: each answers its share, the counts are summed).
    fallback: what an answer without a box counts as (rewards.final_answer; "number" is
    the book's MATH-500 evaluation)."""
    was_training = model.training
    model.eval()
    correct = fmt = 0
    mine = problems[distributed.rank()::distributed.world()]  # all of them in one process
    for i in range(0, len(mine), batch_size):
        chunk = mine[i:i + batch_size]
        prompts = [encode_prompt(enc, p.prompt) for p in chunk]
        out = generate(model, prompts, max_new_tokens, stop_tokens(enc), greedy=True)
        for text, p in zip(decode_completions(enc, out.tokens, out.mask, max(map(len, prompts))), chunk):
            correct += rewards.correctness_reward(text, p.answer, fallback)
            fmt += rewards.format_reward(text)
    model.train(was_training)
    correct, fmt = distributed.all_sum(torch.tensor([correct, fmt], dtype=torch.float64)).tolist()
    return {"accuracy": correct / len(problems), "format": fmt / len(problems)}


@torch.no_grad()
def pass_at_k(model, enc, problems, k=8, temperature=1.0, seed=0, max_new_tokens=40):
    """Share of problems with at least one correct answer among k samples."""
    gen = torch.Generator(device=next(model.parameters()).device).manual_seed(seed)
    was_training = model.training
    model.eval()
    prompts = [encode_prompt(enc, p.prompt) for p in problems for _ in range(k)]
    out = generate(model, prompts, max_new_tokens, stop_tokens(enc), temperature, generator=gen)
    model.train(was_training)
    texts = decode_completions(enc, out.tokens, out.mask, max(map(len, prompts)))
    hits = [rewards.correctness_reward(t, p.answer) for t, p in zip(texts, (p for p in problems for _ in range(k)))]
    return sum(max(hits[i * k:(i + 1) * k]) for i in range(len(problems))) / len(problems)
