"""Greedy accuracy and pass@k of a policy on a list of problems.

    python harness/evaluation.py      # the shipped warm start: greedy accuracy on the 500 held-out problems,
                              # and at T 1 on the first 200 of them pass@8 and the share of answers that reason
    python harness/evaluation.py runs/mine/ckpt_step100.pt --level medium
    python harness/evaluation.py checkpoints/warmstart_many.pt --level many --pass-n 16   # several right answers: how
                              # many different ones 16 samples give

Used by the warm start (harness/sft.py) and by GRPO training (train.py) alike, so it sits beside
the task and depends only on the model, the tokenizer and the rewards:

    tasks / tokenizer / model / rewards  <-  evaluation  <-  sft, train

`evaluate` decodes greedily with the same completion budget as training: the number a
run reports is what the policy answers when it is not exploring. Under torchrun each
rank answers every N-th problem and the counts are summed over the ranks.
"""
import argparse
import math
import os
import sys

if __package__ in (None, ""):  # run as a script (python harness/evaluation.py): the project's folder on the path
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch

import rewards
import tasks
from decoding import generate
from harness import distributed
from model import CheckpointError, load_checkpoint
from tokenizer import build_tokenizer, decode_completions, encode_prompt, stop_tokens


@torch.no_grad()
def evaluate(model, enc, problems, max_new_tokens=40, batch_size=256, fallback="none", sampler=None):
    """Greedy accuracy and share of completions in think format on a list of problems
    (the whole list on every rank: each answers its share, the counts are summed), and
    this rank's answers: [(problem, completion, 1.0 if right else 0.0)], in order.
    fallback: what an answer without a box counts as (rewards.final_answer; "number" is
    the book's MATH-500 evaluation). sampler: dict(temperature, top_k, top_p, generator)
    draws one answer per problem as training samples them, instead of greedily: greedy
    decoding keeps each position's argmax and so hides a learner that has flattened
    everywhere else (EXPERIMENTS.md, lesson 3)."""
    was_training = model.training
    model.eval()
    answers = []  # (problem, completion, 1.0 if right else 0.0) for this rank's problems, in order
    mine = problems[distributed.rank()::distributed.world()]  # all of them in one process
    for i in range(0, len(mine), batch_size):
        chunk = mine[i:i + batch_size]
        prompts = [encode_prompt(enc, p.prompt) for p in chunk]
        out = generate(model, prompts, max_new_tokens, stop_tokens(enc), greedy=sampler is None, **(sampler or {}))
        for text, p in zip(decode_completions(enc, out.tokens, out.mask, max(map(len, prompts))), chunk):
            answers.append((p, text, rewards.correctness_reward(text, tasks.graded_answer(p), fallback)))
    model.train(was_training)
    correct = sum(right for _, _, right in answers)
    fmt = sum(rewards.format_reward(text) for _, text, _ in answers)
    correct, fmt = distributed.all_sum(torch.tensor([correct, fmt], dtype=torch.float64)).tolist()
    return {"accuracy": correct / len(problems), "format": fmt / len(problems), "answers": answers}


@torch.no_grad()
def pass_at_k(model, enc, problems, k=8, temperature=1.0, seed=0, max_new_tokens=40, n=None):
    """n samples of each problem (n >= k, default k) -> {"pass": pass@k, the unbiased estimate
    from n samples (unbiased_pass_at_k; with n = k, the share of problems that k answers get
    right at least once), "pass_1": the share of the samples that are right, "distinct": the
    number of different right answers a problem's n samples give, "distinct_share": the same as
    a share of the problem's right answers (tasks.graded_answer; one for a chain), both
    averaged over the problems, "reasoned": the share of the samples that open with <think>}."""
    n = k if n is None else n
    gen = torch.Generator(device=next(model.parameters()).device).manual_seed(seed)
    was_training = model.training
    model.eval()
    prompts = [encode_prompt(enc, p.prompt) for p in problems for _ in range(n)]
    out = generate(model, prompts, max_new_tokens, stop_tokens(enc), temperature, generator=gen)
    model.train(was_training)
    texts = decode_completions(enc, out.tokens, out.mask, max(map(len, prompts)))
    groups = [(p, texts[i * n:(i + 1) * n]) for i, p in enumerate(problems)]  # each problem's n answers
    hits = [[rewards.correctness_reward(t, tasks.graded_answer(p)) for t in answers] for p, answers in groups]
    distinct = [len(right_answers(answers, h)) for (_, answers), h in zip(groups, hits)]
    n_right = [len(a) if isinstance(a := tasks.graded_answer(p), frozenset) else 1 for p in problems]
    return {"pass": sum(unbiased_pass_at_k(n, int(sum(h)), k) for h in hits) / len(problems),
            "pass_1": sum(map(sum, hits)) / len(texts),
            "distinct": sum(distinct) / len(problems),
            "distinct_share": sum(d / r for d, r in zip(distinct, n_right)) / len(problems),
            "reasoned": sum(t.startswith(tasks.THINK_OPEN) for t in texts) / len(texts)}


def pass_metrics(pk, n):
    """pass_at_k's numbers as the metrics file names them: pass@K, and with N answers a problem
    (--eval-pass-n) also pass@1 and the different right answers among them."""
    out = {"eval_pass_at_k": pk["pass"]}
    if n:
        out.update(eval_pass_at_1=pk["pass_1"], eval_distinct=pk["distinct"],
                   eval_distinct_share=pk["distinct_share"])
    return out


def unbiased_pass_at_k(n, c, k):
    """pass@k from n samples of which c are right (Chen et al. 2021, the Codex paper):
    1 - C(n - c, k) / C(n, k), the chance that k of the n drawn without replacement hold a
    right one; with n = k it is 1 if c > 0, else 0."""
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def right_answers(texts, hits):
    """The different answers among the right completions (hits: 1.0 right, 0.0 wrong): boxed
    integers compared as integers (`07` is 7), any other answer as its stripped text."""
    boxed = [rewards.final_answer(t) for t, h in zip(texts, hits) if h]
    return {v if (v := rewards.parse_int(b)) is not None else b.strip() for b in boxed}


def main(args):
    """Print one line: greedy accuracy on the held-out set, then pass@k and the reasoned share at T 1."""
    torch.set_num_threads(args.threads)
    model, ckpt = load_checkpoint(args.checkpoint)
    if "tokenizer" not in ckpt:
        raise CheckpointError(f"{args.checkpoint} has no tokenizer spec: not a checkpoint of this project's GPT")
    enc = build_tokenizer(ckpt["tokenizer"])
    problems = tasks.eval_set(args.level, args.eval_size)
    ev = evaluate(model, enc, problems)
    line = f"greedy accuracy {ev['accuracy']:.1%} (think format {ev['format']:.1%}) on {len(problems)} {args.level} problems"
    if args.pass_k:
        sampled, n = problems[:args.pass_k_problems], args.pass_n or args.pass_k
        pk = pass_at_k(model, enc, sampled, args.pass_k, seed=args.seed, n=n)
        line += (f" | at T 1 on the first {len(sampled)}: pass@{args.pass_k} {pk['pass']:.1%}, "
                 f"{pk['reasoned']:.1%} of the {n * len(sampled)} answers reason")
        if args.pass_n:
            line += (f", pass@1 {pk['pass_1']:.1%}, {pk['distinct']:.2f} different right answers a problem in {n} "
                     f"({pk['distinct_share']:.1%} of its right answers)")
    print(line)


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description="Greedy accuracy and pass@k of a checkpoint on the held-out problems.",
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("checkpoint", nargs="?", default="checkpoints/warmstart.pt", help="a checkpoint of the small GPT")
    ap.add_argument("--level", default="medium", help=f"difficulty of the held-out set ({', '.join(tasks.LEVELS)})")
    ap.add_argument("--eval-size", type=int, default=500, help="held-out problems, answered greedily")
    ap.add_argument("--pass-k", type=int, default=8, help="samples per problem at T 1 (0: skip)")
    ap.add_argument("--pass-n", type=int, default=0, metavar="N",
                    help="samples per problem, N >= --pass-k: pass@k estimated from N (unbiased), and the different "
                         "right answers a problem's N samples give (0: N = --pass-k, without them)")
    ap.add_argument("--pass-k-problems", type=int, default=200, help="the first N held-out problems are sampled")
    ap.add_argument("--seed", type=int, default=0, help="seeds the samples")
    ap.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    cli = ap.parse_args()
    try:
        tasks.check_level(cli.level)
        if cli.pass_n and not cli.pass_n >= cli.pass_k > 0:
            raise ValueError(f"--pass-n {cli.pass_n} needs --pass-k K with 0 < K <= N, got {cli.pass_k}")
        main(cli)
    except (ValueError, CheckpointError) as e:
        ap.exit(2, f"harness/evaluation.py: error: {e}\n")
