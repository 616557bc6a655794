"""The chapter's experiments: one command each, all from the same warm start and seed.

    python experiments.py clip              # one experiment -> runs/exp/clip
    python experiments.py all               # the whole suite, then the figures and the table
    python experiments.py --report          # only re-make figures/ and the results table
    python experiments.py --list            # what each experiment changes

Each experiment is a list of train.py flags on top of the common ones (COMMON), run as
`python train.py ...` in a subprocess, so what you see here is exactly what you would
type. Each question of the chapter gets one figure made by plot.py (COMPARISONS), and
`--report` prints a markdown table (final / peak eval accuracy, reward, entropy and
response-length trends, clip fraction, KL) that the README copies.
"""
import argparse
import math
import os
import subprocess
import sys

import plot

COMMON = ["--steps", "200", "--eval-every", "20", "--seed", "0"]
EXPERIMENTS = {
    "baseline": (["--clip", "inf", "--mu", "1", "--kl", "0"], "GRPO without clipping, one update per batch, no KL"),
    "clip": (["--clip", "0.2", "--mu", "2"], "clipped ratio, eps 0.2, two updates per batch (ratio != 1)"),
    "kl_k3": (["--kl", "1.0", "--kl-estimator", "k3"], "KL to the warm start, k3 per token, beta 1"),
    "kl_naive": (["--kl", "1.0", "--kl-estimator", "k1", "--kl-level", "sequence"],
                 "the book's naive KL: k1 on summed sequence log-probs, beta 1"),
    "format": (["--format-weight", "0.5"], "reward = correct + 0.5 * format"),
    "format_gated": (["--format-weight", "0.5", "--gated"], "format bonus only for correct answers"),
    "dapo": (["--mu", "2", "--clip", "0.2", "--clip-high", "0.28", "--loss-agg", "token_mean", "--dynamic-sampling",
              "--kl", "0"], "DAPO: clip-higher 0.28, token-mean loss, dynamic sampling, no KL"),
    "drgrpo": (["--adv-norm", "none", "--loss-agg", "constant"], "Dr. GRPO: no std normalisation, constant normaliser"),
    "gspo": (["--mu", "2", "--ratio-level", "gspo", "--clip", "3e-4", "--clip-high", "4e-4"],
             "GSPO: sequence-level ratio (length-normalised), eps 3e-4 / 4e-4 as in the paper"),
}
COMPARISONS = {  # figure name -> (runs, metrics to draw)
    "clip": (["baseline", "clip"], "eval_acc,reward,entropy,clip_frac"),
    "kl": (["baseline", "kl_k3", "kl_naive"], "eval_acc,reward,kl,entropy,resp_len"),
    "format": (["baseline", "format", "format_gated"], "eval_acc,reward_correct,reward_format,resp_len"),
    "modern": (["baseline", "dapo", "drgrpo", "gspo"], "eval_acc,reward,entropy,resp_len,clip_frac,zero_std_frac"),
}


def run(name, runs_dir, extra):
    flags, _ = EXPERIMENTS[name]
    cmd = [sys.executable, "train.py", *COMMON, *flags, *extra, "--runs-dir", runs_dir, "--run-name", name]
    print("$ " + " ".join(cmd[1:]), flush=True)
    subprocess.run(cmd, check=True)


def figures(runs_dir, out_dir):
    os.makedirs(out_dir, exist_ok=True)
    for fig, (names, metrics) in COMPARISONS.items():
        dirs = [os.path.join(runs_dir, n) for n in names if os.path.exists(os.path.join(runs_dir, n, "metrics.jsonl"))]
        if dirs:
            subprocess.run([sys.executable, "plot.py", *dirs, "--metrics", metrics,
                            "--out", os.path.join(out_dir, f"exp_{fig}.png")], check=True)


def mean(xs):
    xs = [x for x in xs if x is not None and math.isfinite(x)]
    return sum(xs) / len(xs) if xs else float("nan")


def summary(rows):
    """Final / peak eval accuracy, and first-vs-last-10-step averages of the trends."""
    steps = [r for r in rows if r.get("step", 0) > 0]
    evals = [r["eval_acc"] for r in rows if "eval_acc" in r]
    head, tail = steps[:10], steps[-10:]

    def trend(key):
        return f"{mean(r.get(key) for r in head):.3g} -> {mean(r.get(key) for r in tail):.3g}"
    return {"eval_acc start": f"{evals[0]:.1%}", "final": f"{evals[-1]:.1%}", "peak": f"{max(evals):.1%}",
            "reward": trend("reward"), "entropy": trend("entropy"), "resp. length": trend("resp_len"),
            "clip frac": f"{mean(r.get('clip_frac') for r in steps):.4f}",
            "KL (last 10)": f"{mean(r.get('kl') for r in tail):.4f}" if any("kl" in r for r in steps) else "-",
            "minutes": f"{steps[-1]['time'] / 60:.1f}" if steps else "-"}


def table(runs_dir):
    lines = []
    for name in EXPERIMENTS:
        path = os.path.join(runs_dir, name, "metrics.jsonl")
        if not os.path.exists(path):
            continue
        s = summary(plot.read_metrics(path))  # skips (and warns about) a cut last line
        if not lines:
            lines += ["| experiment | " + " | ".join(s) + " |", "|---" * (len(s) + 1) + "|"]
        lines.append(f"| {name} | " + " | ".join(s.values()) + " |")
    return "\n".join(lines)


def main(args):
    if args.list:
        for name, (flags, what) in EXPERIMENTS.items():
            print(f"{name:13s} {what}\n{'':13s} python train.py {' '.join(COMMON + flags)}")
        return
    names = list(EXPERIMENTS) if "all" in args.names else args.names
    for name in names:
        if name not in EXPERIMENTS:
            raise SystemExit(f"experiments.py: error: unknown experiment {name!r}; choose from all, {', '.join(EXPERIMENTS)}")
    for name in names:
        run(name, args.runs_dir, args.extra)
    figures(args.runs_dir, args.figures)
    print(table(args.runs_dir))


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description="Run the chapter's GRPO experiments and compare them.")
    ap.add_argument("names", nargs="*", default=[], help=f"experiments to run: all, or some of {', '.join(EXPERIMENTS)}")
    ap.add_argument("--runs-dir", default="runs/exp", help="where the run folders go")
    ap.add_argument("--figures", default="figures", help="where the comparison PNGs go")
    ap.add_argument("--report", action="store_true", help="only make the figures and print the table")
    ap.add_argument("--list", action="store_true", help="list the experiments and their flags")
    ap.add_argument("--extra", nargs=argparse.REMAINDER, default=[], help="more train.py flags for every run")
    args = ap.parse_args()
    if not (args.names or args.report or args.list):
        ap.error("name an experiment, 'all', --report or --list")
    main(args)
