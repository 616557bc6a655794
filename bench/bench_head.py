"""Where the fused log-prob kernels pay on a CPU: the LM head of a GRPO update, from the completion positions' hidden
states to each target's log-prob and the entropy, forward and backward, two ways, by vocabulary size.

    python bench/bench_head.py                  # one thread, N = 4096 rows, d = 128, V = 287 ... 32,768
    python bench/bench_head.py --threads 2 --rows 1024

  textbook  the (N, V) logits, log_softmax and the target's entry (kernels.reference_logprobs_and_entropy):
            what grpo.token_logprobs runs under --logprobs textbook
  fused     kernels/linear_logprobs.py, straight from the hidden states, never the (N, V) logits: --logprobs fused

The two take turns, --reps times each; the table gives each one's median, and fused over textbook. grpo.FUSED_FROM,
where --logprobs auto turns from the textbook to the fused kernels on a CPU, is read off this table: the smallest
vocabulary at which the fused path is faster by a fifth or more (docs/performance.md has the numbers it was set from).
"""
import argparse
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from kernels import linear_logprobs_and_entropy, reference_logprobs_and_entropy  # noqa: E402


def head(path, hidden, weight, targets):
    """One forward and backward of the head, as an update runs it: the loss sum(logp) + 0.01 sum(entropy)."""
    h, w = hidden.detach().requires_grad_(), weight.detach().requires_grad_()
    if path == "textbook":
        logp, entropy = reference_logprobs_and_entropy(h @ w.t(), targets)
    else:
        logp, entropy = linear_logprobs_and_entropy(h, w, targets)
    (logp.sum() + 0.01 * entropy.sum()).backward()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    ap.add_argument("--rows", type=int, default=4096, help="N: completion positions an update scores")
    ap.add_argument("--d-model", type=int, default=128, help="d: the hidden states' width (the small GPT's 128)")
    ap.add_argument("--vocab", default="287,1024,4096,8192,32768", help="vocabulary sizes, comma-separated")
    ap.add_argument("--reps", type=int, default=21, help="timed calls of each path at each size, taking turns")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    g = torch.Generator().manual_seed(0)
    print(f"CPU, {args.threads} thread(s), N = {args.rows}, d = {args.d_model}, fp32; median of {args.reps} calls")
    print("| V | textbook (ms) | fused (ms) | fused over textbook |")
    print("|---|---|---|---|")
    for V in map(int, args.vocab.split(",")):
        hidden = torch.randn(args.rows, args.d_model, generator=g)
        weight = torch.randn(V, args.d_model, generator=g) / args.d_model ** 0.5
        targets = torch.randint(0, V, (args.rows,), generator=g)
        times = {"textbook": [], "fused": []}
        for path in times:  # one untimed call each: first-call set-up out of the numbers
            head(path, hidden, weight, targets)
        for r in range(args.reps):
            for path in (("textbook", "fused") if r % 2 == 0 else ("fused", "textbook")):
                t = time.perf_counter()
                head(path, hidden, weight, targets)
                times[path].append(1000 * (time.perf_counter() - t))
        a, b = statistics.median(times["textbook"]), statistics.median(times["fused"])
        print(f"| {V:,} | {a:.1f} | {b:.1f} | {b / a:.2f}x |", flush=True)


if __name__ == "__main__":
    main()
