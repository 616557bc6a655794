"""Benchmark: one process or two (torchrun), and how close a GRPO step comes to the CPU's limit.

    python bench/bench_ddp.py                    # both tables: 3 default runs (~3-5 min on 2 cores), then FLOPs
    python bench/bench_ddp.py --steps 30         # shorter runs (no plateau then)
    python bench/bench_ddp.py --skip-runs        # only the FLOP table
    python bench/bench_ddp.py --repeats 5 --configs 1x1,2x1,2x1sleep,1x2   # docs/performance.md's table (~25 min)

Table 1 runs the default recipe (`python train.py`, 16 prompts x 8 samples per step, the
same global batch in every row) several ways, back to back: 1 process x 1 thread, 1 process
x 2 threads (`--threads 2`), 2 processes x 1 thread (`torchrun --nproc-per-node 2`), and
the same with GLOO_WAIT=sleep (ranks sleep in collectives instead of polling, as gloo and
DDP do by default; see distributed._reduce), and `half`: one process on half the batch
(8 prompts), each rank's share with nobody to wait for, the ceiling of 2 ranks. From
each run's metrics.jsonl: training steps per second (evaluations excluded: a step's time
is its n_tokens / tokens_per_s), the wall time of the run, and the time to the plateau:
the first evaluation within 2 points of the best accuracy the 1 x 1 run reached
(evaluations included, as a user waits for them). The 2-process run samples other
problems and noise on rank 1 than the 1-process runs, so its accuracy curve differs
by chance, not by design.

Table 2 (one process, one thread): the achieved FLOP rate of a GRPO step against a
measured peak, a large fp32 a @ b on one thread. FLOPs are counted analytically from the
model config and each step's token counts, matmuls only (2 FLOPs per multiply-add):
per token and layer 24 d^2 for the linear layers (qkv 3d^2, proj d^2, MLP 8d^2) plus
4 S d for attention over S keys (QK^T and AV; a masked key is still computed), and 2 d V
for each position whose logits are computed.
- sampling: a prefill of B x P prompt positions (logits for all P), then one forward of B
  rows per further generated token, attending to every position so far;
- training: forward + backward (backward = 2x forward, the usual 6N rule) over the
  (B, T) rollout tensor for each of the --mu epochs (and the no-grad passes for pi_old
  and pi_ref where the config has them), padding included since it is computed, and the
  LM head on the n completion rows only (the fused kernel never touches the others).
Layer norms, softmax, GELU, sampling and the rewards (Python string parsing) count no
FLOPs; their time is the gap between the achieved rate and the peak.
Run it on an idle machine: another busy process on a 2-core machine halves everything.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
import grpo  # noqa: E402
import tasks  # noqa: E402
import train  # noqa: E402
from harness import cli  # noqa: E402
from harness.stats import logged_step  # noqa: E402

# name -> (row label, processes, threads per process, environment, extra train.py flags)
CONFIGS = {"1x1": ("1 x 1 thread", 1, 1, {}, []),
           "1x2": ("1 x 2 threads", 1, 2, {}, []),
           "2x1": ("2 x 1 thread", 2, 1, {}, []),
           "2x1sleep": ("2 x 1 thread, ranks sleep in collectives", 2, 1, {"GLOO_WAIT": "sleep"}, []),
           # not the same global batch: each rank's share, in one process with no other rank to
           # wait for; 2 ranks can at best match its steps/s
           "half": ("1 x 1 thread, half the batch (8 prompts)", 1, 1, {}, ["--prompts-per-step", "8"])}


def run_train(runs_dir, name, nproc, threads, steps, env, extra):
    """One default run; returns its metrics rows and the load average before it started."""
    load = os.getloadavg()[0]
    launch = ["-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(nproc)] if nproc > 1 else []
    cmd = [sys.executable, *launch, "train.py", "--steps", str(steps), "--threads", str(threads),
           "--runs-dir", runs_dir, "--run-name", name, *extra]
    print("$ " + " ".join(cmd[1:]), flush=True)
    subprocess.run(cmd, cwd=ROOT, check=True, stdout=subprocess.DEVNULL,
                   env={**os.environ, "OMP_NUM_THREADS": str(threads), **env})
    with open(os.path.join(runs_dir, name, "metrics.jsonl")) as f:
        return [json.loads(line) for line in f], load


def run_summary(rows):
    steps = [r for r in rows[1:]]
    train_s = sum(r["n_tokens"] / r["tokens_per_s"] for r in steps)
    evals = [(r["time"], r["eval_acc"]) for r in rows if "eval_acc" in r]
    return {"steps_per_s": len(steps) / train_s, "wall_s": rows[-1]["time"], "evals": evals,
            "best": max(a for _, a in evals), "final": evals[-1][1]}


def plateau_time(evals, target):
    return next((t for t, a in evals if a >= target), None)


def table_runs(steps, configs, repeats):
    """Each config once per round, rounds back to back (interleaved, so a burst of load from
    elsewhere hits every config alike). Per config, the row of the run with the median
    steps/s; the speed-up is the median over rounds of each round's own ratio to the first
    config (a slow minute then slows both sides of a ratio), with its min..max over rounds."""
    runs = {c: [] for c in configs}
    with tempfile.TemporaryDirectory() as runs_dir:
        for i in range(repeats):
            for c in configs:
                name, nproc, threads, env, extra = CONFIGS[c]
                rows, load = run_train(runs_dir, f"{c}_{i}", nproc, threads, steps, env, extra)
                runs[c].append((name, load, run_summary(rows)))
    out = [sorted(runs[c], key=lambda r: r[2]["steps_per_s"])[(repeats - 1) // 2] for c in configs]
    target = out[0][2]["best"] - 0.02
    print(f"\ndefault recipe, {steps} steps of 16 prompts x 8 samples, {repeats} interleaved round(s); steps/s: median "
          f"(min..max) over rounds; speed-up: median (min..max) of each round's ratio to {out[0][0]}; the other columns "
          f"from the median run; plateau: first eval >= {target:.1%} (best of the first row minus 2 points); load "
          "average (1 min) before the run")
    print(f"| processes x threads | steps/s | speed-up | run wall time (s) | time to plateau (s) | best / final eval acc "
          "| load avg |")
    print("|---|---|---|---|---|---|---|")
    for c, (name, load, s) in zip(configs, out):
        rates = [r[2]["steps_per_s"] for r in runs[c]]
        ratios = sorted(a[2]["steps_per_s"] / b[2]["steps_per_s"] for a, b in zip(runs[c], runs[configs[0]]))
        t = plateau_time(s["evals"], target)
        print(f"| {name} | {s['steps_per_s']:.2f} ({min(rates):.2f}..{max(rates):.2f}) | "
              f"{statistics.median(ratios):.2f}x ({ratios[0]:.2f}..{ratios[-1]:.2f}) | {s['wall_s']:.0f} | "
              f"{'not reached' if t is None else f'{t:.0f}'} | {s['best']:.1%} / {s['final']:.1%} | {load:.2f} |")


# ---------------------------------------------------------------- table 2: FLOPs

def matmul_peak(n=2048, repeats=5):
    """FLOP/s of a large fp32 a @ b on one thread: the best this core does on the best case."""
    a, b = torch.randn(n, n), torch.randn(n, n)
    a @ b  # warm-up
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        a @ b
        times.append(time.perf_counter() - t0)
    return 2 * n ** 3 / min(times)


def forward_flops(cfg, tokens, keys, head_rows):
    """Matmul FLOPs of a forward over `tokens` positions that each attend to `keys` keys,
    with logits for `head_rows` positions."""
    d = cfg.d_model
    return tokens * cfg.n_layer * (24 * d * d + 4 * keys * d) + head_rows * 2 * d * cfg.vocab_size


def sampling_flops(cfg, B, P, L):
    """Prefill of B x P (each position attends to P keys, logits everywhere), then one forward
    of B rows for each of the L - P - 1 further tokens, attending to all positions so far."""
    total = forward_flops(cfg, B * P, P, B * P)
    for t in range(P + 1, L):
        total += forward_flops(cfg, B, t, B)
    return total


def training_flops(cfg, B, L, n_completion, grpo_cfg):
    """mu epochs of forward + backward (3x forward) over the (B, T = L - 1) batch, the head on
    completion rows; plus a no-grad forward for pi_old when K > 1 and one for pi_ref with a KL."""
    T = L - 1
    passes = 3 * grpo_cfg.mu + (grpo_cfg.minibatches > 1) + (grpo_cfg.kl > 0)
    return passes * forward_flops(cfg, B * T, T, n_completion)


def table_flops(n_steps):
    torch.set_num_threads(1)
    args = cli.get_parser().parse_args([])
    model, enc, _ = cli.load_init(args.init)
    cfg = cli.grpo_config(args)
    opt = torch.optim.Adam(model.parameters(), lr=cfg.lr)
    real_sample, timings = grpo.sample_batch, []

    def timed_sample(*a, **k):  # time the rollouts apart from the rest of the step
        t0 = time.perf_counter()
        out = real_sample(*a, **k)
        timings.append(time.perf_counter() - t0)
        return out
    grpo.sample_batch = timed_sample
    rows = []
    for step in range(n_steps + 1):  # step 0: warm-up, not counted
        gen = torch.Generator().manual_seed(train.step_seed(0, step))
        t0 = time.perf_counter()
        batch, _ = logged_step(model, None, opt, enc, train.problem_source(args.level, 0, step),
                                  args.prompts_per_step, cfg, gen)
        total = time.perf_counter() - t0
        B, L = batch.tokens.shape
        if step > 0:
            rows.append({"sample_s": timings[-1], "train_s": total - timings[-1],
                         "sample_flops": sampling_flops(model.cfg, B, batch.prompt_len, L),
                         "train_flops": training_flops(model.cfg, B, L, int(batch.loss_mask.sum()), cfg), "B": B, "L": L})
    grpo.sample_batch = real_sample
    peak = matmul_peak()
    c = model.cfg
    print(f"\none process, one thread; model: {c.n_layer} layers, d={c.d_model}, vocab {c.vocab_size}; "
          f"batch {rows[0]['B']} rows, median of {n_steps} steps; peak: fp32 2048^2 a @ b = {peak / 1e9:.1f} GFLOP/s")
    print("| part | time per step (s) | share of step | GFLOP per step | GFLOP/s | share of peak |")
    print("|---|---|---|---|---|---|")
    med = {k: statistics.median(r[k] for r in rows) for k in ("sample_s", "train_s", "sample_flops", "train_flops")}
    step_s = med["sample_s"] + med["train_s"]
    for part, s, f in [("sampling + rewards", med["sample_s"], med["sample_flops"]),
                       ("training (fwd + bwd + Adam + stats)", med["train_s"], med["train_flops"]),
                       ("whole step", step_s, med["sample_flops"] + med["train_flops"])]:
        print(f"| {part} | {s:.3f} | {s / step_s:.0%} | {f / 1e9:.3f} | {f / s / 1e9:.2f} | {f / s / peak:.1%} |")


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description="DDP / threads benchmark and FLOP rate of a GRPO step.")
    ap.add_argument("--steps", type=int, default=100, help="steps of each default run (100: the default run)")
    ap.add_argument("--flop-steps", type=int, default=5, help="GRPO steps measured for the FLOP table")
    ap.add_argument("--skip-runs", action="store_true", help="only the FLOP table")
    ap.add_argument("--configs", default="1x1,1x2,2x1", help="processes x threads to run, comma-separated")
    ap.add_argument("--repeats", type=int, default=1, help="rounds of runs (median reported)")
    args = ap.parse_args()
    print(f"torch {torch.__version__}, {os.cpu_count()} CPUs, load average {os.getloadavg()}")
    configs = args.configs.split(",")
    if not set(configs) <= set(CONFIGS):
        ap.error(f"unknown config(s) {sorted(set(configs) - set(CONFIGS))}; choose from {', '.join(CONFIGS)}")
    if not args.skip_runs:
        table_runs(args.steps, configs, args.repeats)
    table_flops(args.flop_steps)
    print(f"load average at the end {os.getloadavg()}")
