"""Benchmark: log-probs of completion rows only, against every (B x T) row then masking.

    python bench/bench_completion_rows.py            # default size and a long-prompt setting

logprobs.token_logprobs gathers the completion positions (the loss mask) before the LM head
and the log-prob kernel, and scatters the results back. The other way, timed beside it, sends every position of the
(B, T) batch, prompt and padding included, through the head and masks after.
The transformer body runs on every position either way (attention needs the prompt);
what the gather saves is the head + log-softmax work on prompt and padding rows, which
grows with the vocabulary and the prompt length.

Both paths are timed forward + backward, the median of --repeats after a warm-up, the
two taking turns so that a busy second core slows both alike. Settings:
  default      B = 128 (16 prompts x 8), prompt ~30 tokens, 20 completion tokens, V = 287
  long prompt  B = 128, prompt 400 tokens, 40 completion tokens, V = 287
  long, big V  the same at V = 32768 (a real tokenizer's size)
"""
import argparse
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from logprobs import token_logprobs  # noqa: E402
from model import GPT, GPTConfig  # noqa: E402

SETTINGS = {"default": (128, 30, 20, 287), "long prompt": (128, 400, 40, 287), "long, big V": (128, 400, 40, 32768)}


def batch(B, P, N, V, seed=0):
    """Left-padded prompts of P - 0..4 tokens, completions of N/2..N tokens, right-padded."""
    g = torch.Generator().manual_seed(seed)
    L = P + N
    tokens = torch.randint(0, V, (B, L), generator=g)
    mask = torch.zeros(B, L, dtype=torch.bool)
    for i in range(B):
        p, n = P - int(torch.randint(0, 5, (1,), generator=g)), int(torch.randint(N // 2, N + 1, (1,), generator=g))
        mask[i, P - p:P + n] = True
    loss_mask = mask[:, 1:].clone()
    loss_mask[:, :P - 1] = False  # (B, T) completion targets only
    return tokens, mask, loss_mask


def step(model, tokens, mask, loss_mask, rows_only):
    """One forward + backward of the log-prob and entropy sums over the completion."""
    model.zero_grad(set_to_none=True)
    if rows_only:
        logp, ent = token_logprobs(model, tokens, mask, loss_mask)
    else:  # the previous way: every position through the head, masked afterwards
        every = torch.ones_like(loss_mask)
        logp, ent = token_logprobs(model, tokens, mask, every)
        logp, ent = logp * loss_mask, ent * loss_mask
    (logp.sum() + ent.sum()).backward()


def main(args):
    torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, threads {args.threads}, repeats {args.repeats}, "
          f"load average {os.getloadavg()[0]:.1f} (others' jobs inflate the wall time)")
    print(f"{'setting':12s} {'B':>4s} {'P':>4s} {'N':>3s} {'V':>6s} {'completion rows':>15s} "
          f"{'all rows ms':>11s} {'completion ms':>13s} {'speed-up':>8s}")
    for name, (B, P, N, V) in SETTINGS.items():
        torch.manual_seed(0)
        model = GPT(GPTConfig(vocab_size=V, max_seq_len=P + N, n_layer=2, n_head=4, d_model=128))
        tokens, mask, loss_mask = batch(B, P, N, V)
        times = {True: [], False: []}
        for rows_only in (True, False):
            step(model, tokens, mask, loss_mask, rows_only)  # warm-up
        for _ in range(args.repeats):
            for rows_only in (True, False):
                t0 = time.perf_counter()
                step(model, tokens, mask, loss_mask, rows_only)
                times[rows_only].append(time.perf_counter() - t0)
        a, c = statistics.median(times[False]) * 1e3, statistics.median(times[True]) * 1e3
        share = loss_mask.sum().item() / loss_mask.numel()
        print(f"{name:12s} {B:4d} {P:4d} {N:3d} {V:6d} {share:14.0%}  {a:11.1f} {c:13.1f} {a / c:7.2f}x")


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description="Completion rows only vs every row, log-probs forward + backward.")
    ap.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    ap.add_argument("--repeats", type=int, default=5, help="timed repeats per path (median)")
    main(ap.parse_args())
