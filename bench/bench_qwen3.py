"""The book's model at its real size on a GPU: Qwen3-0.6B-shaped, random weights, bf16.

    python bench/bench_qwen3.py                      # CUDA: ~2 minutes; bench/gpu_check.sh runs it
    python bench/bench_qwen3.py --report FILE        # also append the table to FILE
    python bench/bench_qwen3.py --cpu-smoke          # a tiny config on CPU: every code path, seconds

Nothing is downloaded: the weights are random (speed and memory do not depend on their
values; random weights never emit <|endoftext|>, so every row runs to the full length)
and a synthetic tokenizer stands in for Qwen's (~4 characters a token, ids spread over
the vocabulary). The prompts are MATH-shaped: the book's template around problems of
200 to 1200 characters, so a batch is ragged and left-padded as in training.

Rows of the table (one per case; peak memory is torch.cuda.max_memory_allocated):
  sample     decoding.generate at 64 and 128 rows, T 0.8, top-p 0.9, 512 new tokens: new tokens/s
  grpo step  grpo.grpo_step, 8 prompts x 8 rollouts = 64 rows, 512 new tokens, bf16, the
             fused LM head (hidden states -> log-probs, kernels/linear_logprobs.py), then
             the same with materialised (N, 151936) logits, then fused with gradient
             checkpointing: seconds per step (sampling included) and peak GB
A case that runs out of memory prints OOM and the others still run.
"""
import argparse
import os
import sys
import time
import zlib

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import config  # noqa: E402
import grpo  # noqa: E402
import tasks  # noqa: E402
from book.qwen3 import Qwen3, Qwen3Config  # noqa: E402
from decoding import generate  # noqa: E402
from harness.stats import logged_step  # noqa: E402
from tokenizer import encode_text  # noqa: E402

TINY = Qwen3Config(vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                   num_key_value_heads=2, head_dim=16, max_position_embeddings=1024)


class SyntheticTokenizer:
    """Qwen's tokenizer's shape without its file: n_vocab ids, <|endoftext|> among them."""

    def __init__(self, n_vocab):
        self.n_vocab, self.eot_token = n_vocab, n_vocab - 1

    def encode(self, text, allowed_special=(), disallowed_special=()):
        return [zlib.crc32(text[i:i + 4].encode()) % (self.n_vocab - 1) for i in range(0, len(text), 4)]

    def decode(self, ids):
        return " ".join(map(str, ids))


def math_shaped_problems(n, seed=0):
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(200, 1200, (n,), generator=g).tolist()
    return [tasks.MathProblem(("Let $x$ be a real number such that x^2 + 3x = 10. " * 30)[:k], "5") for k in lengths]


class Report:
    def __init__(self, path):
        self.path = path

    def line(self, text=""):
        print(text, flush=True)
        if self.path:
            with open(self.path, "a") as f:
                f.write(text + "\n")


def timed(device, fn):
    """(seconds, peak GB, fn's result) for one call of fn; OOM -> (None, None, None)."""
    if device == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    try:
        out = fn()
    except torch.cuda.OutOfMemoryError:
        return None, None, None
    if device == "cuda":
        torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated() / 2**30 if device == "cuda" else float("nan")
    return time.perf_counter() - t0, peak, out


def sampling_case(model, enc, rows, new_tokens, device):
    prompts = [encode_text(enc, p.prompt) for p in math_shaped_problems(rows)]

    def run():
        with autocast(device):
            _, mask, *_ = generate(model, prompts, new_tokens, enc.eot_token, temperature=0.8, top_p=0.9,
                                  generator=torch.Generator(device=device).manual_seed(0))
        return int(mask[:, max(map(len, prompts)):].sum())  # generated tokens only
    seconds, peak, n = timed(device, run)
    return seconds, peak, None if n is None else n / seconds


def grpo_case(model, enc, n_prompts, group, new_tokens, device, fused, checkpointing):
    cfg = config.GRPOConfig(group_size=group, max_new_tokens=new_tokens, temperature=0.8, top_p=0.9,
                          logprobs="fused" if fused else "logits", lr=1e-6)
    opt = torch.optim.Adam(model.parameters(), lr=cfg.lr)
    stream = iter(math_shaped_problems(10_000, seed=1))
    model.grad_checkpoint = checkpointing

    def run():
        with autocast(device):
            return logged_step(model, None, opt, enc, lambda: next(stream), n_prompts, cfg,
                                  torch.Generator(device=device).manual_seed(0))
    seconds, peak, out = timed(device, run)
    model.grad_checkpoint = False
    del opt
    return seconds, peak, None if out is None else out[1]["n_tokens"] / seconds


def autocast(device):
    return torch.autocast("cuda", dtype=torch.bfloat16) if device == "cuda" else torch.autocast("cpu", enabled=False)


def fmt(x, spec):
    return "OOM" if x is None else "-" if x != x else format(x, spec)  # x != x: NaN, no CUDA memory counter


def main(args):
    smoke = args.cpu_smoke
    if not smoke and not torch.cuda.is_available():
        raise SystemExit("bench_qwen3: no CUDA device (use --cpu-smoke to run the code paths on CPU)")
    device, dtype = ("cpu", torch.float32) if smoke else ("cuda", torch.bfloat16)
    cfg = TINY if smoke else Qwen3Config()
    rows, new_tokens, n_prompts, group = ((4, 8), 8, 2, 4) if smoke else ((64, 128), args.new_tokens, 8, 8)
    torch.manual_seed(0)
    with torch.device(device):
        model = Qwen3(cfg).to(dtype)
    enc = SyntheticTokenizer(min(151_669, cfg.vocab_size))  # Qwen3: 151,669 tokens, 151,936 embedding rows
    report = Report(args.report)
    name = "tiny Qwen3 (CPU smoke run)" if smoke else torch.cuda.get_device_name()
    n_params = sum(p.numel() for p in model.parameters())
    report.line(f"Qwen3-shaped model, random weights: {cfg.num_hidden_layers} layers, d {cfg.hidden_size}, "
                f"{cfg.num_attention_heads}/{cfg.num_key_value_heads} heads, vocab {cfg.vocab_size}, "
                f"{n_params / 1e6:.1f}M params, {str(dtype).removeprefix('torch.')}, on {name}")
    report.line("| case | rows | new tokens | seconds | tokens/s | peak GB |")
    report.line("|---|---|---|---|---|---|")
    sampling_case(model, enc, 2, 4, device)  # warm-up: CUDA context, cuBLAS, kernels
    for n in rows:
        seconds, peak, rate = sampling_case(model, enc, n, new_tokens, device)
        report.line(f"| sample | {n} | {new_tokens} | {fmt(seconds, '.1f')} | {fmt(rate, ',.0f')} | {fmt(peak, '.1f')} |")
    for label, fused, ckpt in [("grpo step, fused head", True, False), ("grpo step, materialised logits", False, False),
                               ("grpo step, fused head + grad checkpointing", True, True)]:
        seconds, peak, rate = grpo_case(model, enc, n_prompts, group, new_tokens, device, fused, ckpt)
        report.line(f"| {label} | {n_prompts * group} | {new_tokens} | {fmt(seconds, '.1f')} | {fmt(rate, ',.0f')} "
                    f"| {fmt(peak, '.1f')} |")
    report.line("(tokens/s: generated tokens for sample; all real tokens of the batch per step for grpo step)")


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cpu-smoke", action="store_true", help="a tiny config on CPU: checks the code paths, no timing")
    ap.add_argument("--new-tokens", type=int, default=512, help="completion length (the chapter's 512)")
    ap.add_argument("--report", default=None, help="also append the table to this file")
    main(ap.parse_args())
