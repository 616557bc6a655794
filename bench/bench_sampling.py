"""Benchmark: batched sampling with the KV cache vs full recompute, and warm-start training.

    python bench/bench_sampling.py                 # default model, 1 and 2 threads
    python bench/bench_sampling.py --threads 2 --repeats 5

Sampling: 64 prompts of the task's template, 48 new tokens each, temperature 1, from
a freshly initialised model of the default size (speed does not depend on the weights).
Tokens/s counts only generated tokens (rows that emit <|endoftext|> early stop counting).
Training: warm-start (SFT) steps at the default batch size, tokens/s over real tokens.
Reports the median of --repeats runs after one warm-up run. Run it on an idle machine:
on 2 cores a second busy process can slow torch's threads 10x.
"""
import argparse
import os
import statistics
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import tasks  # noqa: E402
from decoding import generate  # noqa: E402
from harness import sft  # noqa: E402
from model import GPT, GPTConfig  # noqa: E402
from tokenizer import build_tokenizer, encode_text  # noqa: E402


def median_time(fn, repeats):
    fn()  # warm-up
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        n = fn()
        times.append((time.perf_counter() - t0, n))
    return statistics.median(n / t for t, n in times)


def sampling_rate(model, prompts, new_tokens, eos, use_cache):
    def run():
        _, mask, *_ = generate(model, prompts, new_tokens, eos, generator=torch.Generator().manual_seed(0),
                              use_cache=use_cache)
        return int(mask[:, max(map(len, prompts)):].sum())  # generated tokens only
    return run


def training_rate(model, enc, batch_size, steps=5):
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    data = sft.sft_examples(enc, "mixed", 0, 0.6, model.cfg.max_seq_len)

    def run():
        n = 0
        for _ in range(steps):
            x, y, mask, loss_mask = sft.make_batch([next(data) for _ in range(batch_size)], enc.eot_token)
            loss = F.cross_entropy(model(x, mask)[loss_mask], y[loss_mask])
            opt.zero_grad()
            loss.backward()
            opt.step()
            n += int(mask.sum())
        return n
    return run


def main(args):
    enc = build_tokenizer(sft.build_tokenizer_spec(0))
    cfg = GPTConfig(vocab_size=enc.n_vocab, n_layer=args.n_layer, d_model=args.d_model)
    torch.manual_seed(0)
    model = GPT(cfg)
    stream = tasks.problems("hard", 0)
    prompts = [encode_text(enc, next(stream).prompt) for _ in range(args.batch)]
    print(f"model: {cfg.n_layer} layers, d={cfg.d_model}, vocab {cfg.vocab_size}; "
          f"sampling {args.batch} x {args.new_tokens} new tokens; SFT batch {args.sft_batch}")
    print("| threads | sampling, KV cache (tok/s) | sampling, full recompute (tok/s) | speed-up | SFT training (tok/s) |")
    print("|---|---|---|---|---|")
    for threads in args.threads:
        torch.set_num_threads(threads)
        model.eval()
        cached = median_time(sampling_rate(model, prompts, args.new_tokens, enc.eot_token, True), args.repeats)
        full = median_time(sampling_rate(model, prompts, args.new_tokens, enc.eot_token, False), args.repeats)
        model.train()
        train = median_time(training_rate(model, enc, args.sft_batch), args.repeats)
        print(f"| {threads} | {cached:,.0f} | {full:,.0f} | {cached / full:.1f}x | {train:,.0f} |", flush=True)


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2], help="torch thread counts to try")
    ap.add_argument("--repeats", type=int, default=5, help="timed runs per case (median reported)")
    ap.add_argument("--batch", type=int, default=64, help="sequences sampled at once")
    ap.add_argument("--new-tokens", type=int, default=48, help="tokens generated per sequence")
    ap.add_argument("--sft-batch", type=int, default=64, help="warm-start batch size")
    ap.add_argument("--n-layer", type=int, default=GPTConfig.n_layer, help="model depth")
    ap.add_argument("--d-model", type=int, default=GPTConfig.d_model, help="model width")
    main(ap.parse_args())
