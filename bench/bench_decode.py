"""Benchmark: the decode step, eager, compiled (torch.compile) or replayed as a CUDA graph.

    python bench/bench_decode.py                      # CPU: the small GPT on a GRPO batch, 1 and 2 threads
    python bench/bench_decode.py --qwen3              # CUDA: Qwen3-0.6B's shape, random bf16 weights (gpu_check.sh)
    python bench/bench_decode.py --qwen3 --tiny       # a tiny Qwen3 on the CPU: every code path in seconds
    python bench/bench_decode.py --threads 1 --profile --skip-reference   # and where one eager call's time goes

The work is a GRPO batch: --prompts prompts of the task (14-16 tokens; for Qwen3, MATH-
shaped ones of 200-1200 characters) x --group answers, --new-tokens each, at T 1. The
stop id can never be drawn (the LM head leaves its row out), so every row runs the
whole budget and each mode does the same work. For each mode:
  warm-up s   the first call's time less a later call's: compiling, capturing the graph
  s / call    the median of --repeats later calls (prefill, decode, sampling)
  prefill + 1st token   the median call with one new token
  tokens/s    new tokens per second
  ms / step   (s / call - one call with a single new token) / (new tokens - 1): one decode step
  GFLOP/s     the matmul FLOPs that sampling needs (per new token one position's linear
              layers and LM head, 2 per multiply-add; the prompts' other positions and
              attention not counted) over the call's time, and its share of the peak: an
              fp32 (bf16 on CUDA) 2048^3 a @ b at the same thread count
  same        rows whose tokens equal the eager mode's, for the same generator
The reference (use_cache=False, the whole sequence again at each token) follows; for the
GPT a last row times only the matmuls of the decode steps on their own shapes: the floor
that the step's arithmetic sets at this machine's speed for such small products.
"""
import argparse
import os
import statistics
import sys
import time

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
import tasks  # noqa: E402
from book.qwen3 import Qwen3, Qwen3Config  # noqa: E402
from decoding import generate  # noqa: E402
from model import GPT, GPTConfig  # noqa: E402

TINY_QWEN3 = Qwen3Config(vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=1024)


class NoStopGPT(GPT):
    """The GPT with one id more than its tokenizer, the stop id, whose row the LM head leaves
    out: it pads finished rows and can never be sampled (a GRPO batch of fixed work)."""
    @property
    def lm_head_weight(self):
        return self.wte.weight[:-1]  # (V - 1, d)


class NoStopQwen3(Qwen3):
    @property
    def lm_head_weight(self):
        return (self.embed_tokens.weight if self.cfg.tie_word_embeddings else self.lm_head.weight)[:-1]


def gpt_case(args):
    from harness import sft
    from tokenizer import build_tokenizer, encode_prompt
    enc = build_tokenizer(sft.build_tokenizer_spec(0))
    torch.manual_seed(0)
    cfg = GPTConfig(vocab_size=enc.n_vocab + 1, max_seq_len=96, n_layer=args.n_layer, d_model=args.d_model)
    model = NoStopGPT(cfg).eval()
    stream = tasks.problems("hard", 0)
    prompts = [encode_prompt(enc, next(stream).prompt) for _ in range(args.prompts)]
    flop_per_token = 24 * cfg.d_model ** 2 * cfg.n_layer
    desc = f"GPT, {cfg.n_layer} layers, d {cfg.d_model}, vocab {enc.n_vocab} (+1 stop id), fp32"
    return model, prompts, enc.n_vocab, flop_per_token, cfg.d_model * enc.n_vocab * 2, desc, torch.float32


def qwen3_case(args):
    cfg = TINY_QWEN3 if args.tiny else Qwen3Config()
    dtype = torch.float32 if args.tiny else torch.bfloat16
    torch.manual_seed(0)
    with torch.device(args.device):
        model = NoStopQwen3(cfg).to(dtype).eval()
    g = torch.Generator().manual_seed(0)
    lengths = torch.randint(50, 300, (args.prompts,), generator=g).tolist()  # ~4 characters a token: MATH-shaped
    prompts = [torch.randint(0, cfg.vocab_size - 1, (n,), generator=g).tolist() for n in lengths]
    d, kv = cfg.hidden_size, cfg.num_key_value_heads * cfg.head_dim
    q = cfg.num_attention_heads * cfg.head_dim
    per_layer = 2 * (d * q + 2 * d * kv + q * d + 3 * d * cfg.intermediate_size)  # q, k, v, o, gate, up, down
    desc = (f"Qwen3, {cfg.num_hidden_layers} layers, d {d}, vocab {cfg.vocab_size}, random weights, "
            f"{str(dtype).removeprefix('torch.')}")
    return model, prompts, cfg.vocab_size - 1, per_layer * cfg.num_hidden_layers, 2 * d * (cfg.vocab_size - 1), desc, dtype


def sync(device):
    if device == "cuda":
        torch.cuda.synchronize()


def timed(device, fn):
    sync(device)
    t0 = time.perf_counter()
    out = fn()
    sync(device)
    return time.perf_counter() - t0, out


def matmul_peak(device, dtype, n=2048, repeats=5):
    a, b = torch.randn(n, n, device=device, dtype=dtype), torch.randn(n, n, device=device, dtype=dtype)
    a @ b
    return 2 * n ** 3 / min(timed(device, lambda: a @ b)[0] for _ in range(repeats)) / 1e9


def measure(args, model, prompts, stop, mode):
    """-> (warm-up s, median s per call, s of a call with one new token (prefill and the
    first token), ms per decode step, the tokens of one call)."""
    kw = {"use_cache": False} if mode == "reference" else {}  # only what a mode changes: older code runs too
    kw.update({"compile": True} if "compile" in mode else {}, **({"cuda_graph": True} if "graph" in mode else {}))

    def call(n):
        return generate(model, prompts, n, stop, generator=torch.Generator(args.device).manual_seed(0), **kw)
    first, out = timed(args.device, lambda: call(args.new_tokens))
    calls = [timed(args.device, lambda: call(args.new_tokens))[0] for _ in range(args.repeats)]
    one = statistics.median(timed(args.device, lambda: call(1))[0] for _ in range(args.repeats))
    per_call = statistics.median(calls)
    return first - per_call, per_call, one, (per_call - one) / (args.new_tokens - 1) * 1e3, out.tokens


def profile(args, model, prompts, stop, threads):
    """torch.profiler over one eager call: where a decode step's time goes, op by op."""
    from torch.profiler import profile as torch_profile
    call = lambda: generate(model, prompts, args.new_tokens, stop, generator=torch.Generator().manual_seed(0))  # noqa: E731
    call()
    with torch_profile() as prof:
        call()
    events = [e for e in prof.key_averages() if e.key.startswith("aten::")]
    total = sum(e.self_cpu_time_total for e in events)
    steps = args.new_tokens - 1
    print(f"\none eager call at {threads} thread(s), by torch.profiler: {sum(e.count for e in events)} aten ops "
          f"({sum(e.count for e in events) / steps:.0f} a decode step, prefill included), {total / 1e3:.1f} ms of self CPU time")
    print("| op | calls | ms | share |")
    print("|---|---|---|---|")
    for e in sorted(events, key=lambda e: -e.self_cpu_time_total)[:12]:
        print(f"| {e.key.removeprefix('aten::')} | {e.count} | {e.self_cpu_time_total / 1e3:.1f} "
              f"| {e.self_cpu_time_total / total:.0%} |")


def matmuls_alone(model, B, n_new, repeats):
    """s per call of only the matmuls of the GPT's decode steps (B rows: qkv, proj, two MLP
    layers per block, the LM head), on their own shapes with random inputs: the floor that
    the step's arithmetic sets at this speed of small matrix products."""
    weights = [w for block in model.blocks for w in (block.attn.qkv.weight, block.attn.proj.weight,
                                                     block.mlp[0].weight, block.mlp[2].weight)]
    weights.append(model.lm_head_weight)
    inputs = [torch.randn(B, w.shape[1]) for w in weights]

    def call():
        with torch.inference_mode():
            for _ in range(n_new):
                for x, w in zip(inputs, weights):
                    x @ w.t()
    call()
    return statistics.median(timed("cpu", call)[0] for _ in range(repeats))


def main(args):
    if args.qwen3 and not args.tiny and not torch.cuda.is_available():
        raise SystemExit("bench_decode: Qwen3-0.6B's shape needs a CUDA device (--tiny runs a tiny one on the CPU)")
    args.device = "cuda" if args.qwen3 and not args.tiny else "cpu"
    model, base, stop, flop_per_token, head_flop, desc, dtype = (qwen3_case if args.qwen3 else gpt_case)(args)
    prompts = [p for p in base for _ in range(args.group)]  # each prompt G times, adjacent
    B, P = len(prompts), max(map(len, prompts))
    gflop = B * args.new_tokens * (flop_per_token + head_flop) / 1e9  # one position's forward per new token
    modes = ["eager", "compile"] + (["CUDA graph", "compile + CUDA graph"] if args.device == "cuda" else [])
    modes += ["reference"] if not args.skip_reference else []
    modes = [m for m in modes if args.modes is None or m in args.modes.split(",")]
    print(f"{desc}; {len(base)} prompts x {args.group} answers = {B} rows, longest prompt {P}, "
          f"{args.new_tokens} new tokens, {gflop:.2f} GFLOP a call; median of {args.repeats} calls", flush=True)
    for threads in args.threads if args.device == "cpu" else [None]:
        if threads:
            torch.set_num_threads(threads)
        peak = matmul_peak(args.device, dtype)
        print(f"\n{'threads: %d, ' % threads if threads else ''}matmul peak {peak:.0f} GFLOP/s")
        print("| mode | warm-up s | s / call | prefill + 1st token, ms | tokens/s | ms / step | GFLOP/s (% of peak) "
              "| same tokens as eager |")
        print("|---|---|---|---|---|---|---|---|")
        eager = None
        for mode in modes:
            with torch.autocast("cuda", dtype=torch.bfloat16, enabled=args.device == "cuda"):
                warm, per_call, one, step_ms, tokens = measure(args, model, prompts, stop, mode)
            eager = tokens if eager is None else eager
            same = int((tokens == eager).all(1).sum())
            rate = gflop / per_call
            print(f"| {mode} | {warm:.1f} | {per_call:.3f} | {one * 1e3:.1f} | {B * args.new_tokens / per_call:,.0f} "
                  f"| {step_ms:.2f} | {rate:.1f} ({rate / peak:.0%}) | {same} of {B} |", flush=True)
        if not args.qwen3:
            alone = matmuls_alone(model, B, args.new_tokens, args.repeats)
            print(f"| (the matmuls alone) | - | {alone:.3f} | - | {B * args.new_tokens / alone:,.0f} | "
                  f"{alone / args.new_tokens * 1e3:.2f} | {gflop / alone:.1f} ({gflop / alone / peak:.0%}) | - |")
        if args.profile and args.device == "cpu":
            profile(args, model, prompts, stop, threads)


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--qwen3", action="store_true", help="Qwen3-0.6B's shape on CUDA instead of the small GPT")
    ap.add_argument("--tiny", action="store_true", help="with --qwen3: a tiny Qwen3 on the CPU (the code paths)")
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2], help="CPU thread counts")
    ap.add_argument("--prompts", type=int, default=8, help="distinct prompts")
    ap.add_argument("--group", type=int, default=8, help="answers per prompt (G)")
    ap.add_argument("--new-tokens", type=int, default=None, help="new tokens per row (default: 48; 512 for --qwen3)")
    ap.add_argument("--repeats", type=int, default=5, help="timed calls per mode (median)")
    ap.add_argument("--n-layer", type=int, default=4, help="GPT depth (the issue's work: 4)")
    ap.add_argument("--d-model", type=int, default=GPTConfig.d_model, help="GPT width")
    ap.add_argument("--skip-reference", action="store_true", help="leave out the full-recompute reference row")
    ap.add_argument("--profile", action="store_true", help="CPU: also the top ops of one eager call (torch.profiler)")
    ap.add_argument("--modes", default=None, help="only these modes, comma-separated (e.g. eager,reference)")
    args = ap.parse_args()
    args.new_tokens = args.new_tokens or (512 if args.qwen3 and not args.tiny else 48)
    main(args)
