"""The chapter's experiments: one command each, several seeds, figures with bands, one table.

    python experiments.py --list                      # each experiment and its exact train.py flags
    python experiments.py clip                        # one experiment, seed 0 -> runs/exp/clip/seed0
    python experiments.py unstable unstable_clip --seeds 0,1,2 --jobs 2
    python experiments.py all --seeds 0,1,2 --jobs 2  # the whole suite, then figures and table
    python experiments.py table                       # only re-make figures/ and print the table
    python experiments.py table --readme README.md    # ... and write the table into the README
    python experiments.py clip --nproc 2              # each run under torchrun, 2 processes (train.py's ranks)

Each experiment is a list of train.py flags on top of COMMON (a flag given again in the
experiment wins), run as `python train.py ...` in a subprocess, so what you see here is
exactly what you would type. `--jobs 2` runs two independent runs side by side, one CPU
thread each, which is how a 2-core machine is used fully; `--nproc 2` instead runs each
run as `torchrun --standalone --nproc-per-node 2 train.py ...` (one run, two cores). Each question of the chapter
gets one figure (COMPARISONS), drawn by plot.py as the mean over seeds with a min..max
band. The table is computed from the run folders, never typed: mean +- std over seeds.
LESSONS states each of the chapter's claims as a check on the runs, and the table
says in how many seeds it held.
"""
import argparse
import math
import os
import subprocess
import sys
import time

import plot

COMMON = ["--steps", "100", "--eval-every", "10"]
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
    # the chapter's list of improvements (grpo.py, off-policy corrections; README, "Recipes")
    "topp": (["--top-p", "0.9"], "nucleus sampling: the sampler drops the tail the learner still has"),
    "topp_tis": (["--top-p", "0.9", "--tis-cap", "2"], "... with truncated importance sampling, C = 2"),
    "topp_keepmask": (["--top-p", "0.9", "--keep-sampling-mask"], "... with the learner on the sampler's support"),
    "format_gdpo": (["--format-weight", "0.5", "--reward-norm", "norm_then_sum"],
                    "format bonus 0.5, each reward term normalised in its group first (GDPO)"),
    "entropy_bonus": (["--entropy-coef", "0.02"], "an entropy bonus, alpha 0.02"),
    "olmo3": (["--recipe", "olmo3"], "the book's OLMo 3 style recipe (items 1-7)"),
    "deepseek_v32": (["--recipe", "deepseek_v32"], "the book's DeepSeek-V3.2 style recipe (items 8-12)"),
    # the chapter's lessons, in a stress regime found by a sweep (README, "The chapter's lessons")
    "unstable": (["--lr", "3e-4", "--mu", "4", "--clip", "inf", "--kl", "0", "--steps", "80"],
                 "no clipping, no KL, 4 updates per rollout at lr 3e-4: far off-policy"),
    "unstable_clip": (["--lr", "3e-4", "--mu", "4", "--clip", "0.2", "--kl", "0", "--steps", "80"],
                      "the same with the ratio clipped at eps 0.2"),
    "format_exploit": (["--format-weight", "1.0", "--max-new-tokens", "26", "--steps", "200", "--eval-every", "20"],
                       "a format bonus worth a right answer; 26 tokens do not fit every 3-step reasoning"),
    "format_exploit_gated": (["--format-weight", "1.0", "--max-new-tokens", "26", "--steps", "200", "--eval-every", "20",
                              "--gated"], "the same bonus paid only for right answers"),
}
COMPARISONS = {  # figure name -> (experiments, metrics to draw)
    "clip": (["baseline", "clip"], "eval_acc,reward,entropy,clip_frac"),
    "kl": (["baseline", "kl_k3", "kl_naive"], "eval_acc,reward,kl,entropy,resp_len"),
    "format": (["baseline", "format", "format_gated"], "eval_acc,reward_correct,reward_format,resp_len"),
    "modern": (["baseline", "dapo", "drgrpo", "gspo"], "eval_acc,reward,entropy,resp_len,clip_frac,zero_std_frac"),
    "sampler": (["baseline", "topp", "topp_tis", "topp_keepmask"], "eval_acc,sampler_gap,tis_weight_max,entropy"),
    "gdpo": (["format", "format_gdpo"], "eval_acc,reward_correct,reward_format,resp_len"),
    "entropy": (["baseline", "entropy_bonus"], "eval_acc,entropy,resp_len,reward"),
    "recipes": (["baseline", "olmo3", "deepseek_v32"], "eval_acc,reward,entropy,resp_len,clip_frac,kl"),
    "instability": (["unstable", "unstable_clip"], "eval_acc,entropy,resp_len,ratio_max,clip_frac,ppo_kl"),
    "format_exploit": (["format_exploit", "format_exploit_gated"],
                       "eval_acc,reward_correct,reward_format,resp_len,truncated_frac,entropy"),
}

def falls(run, points=0.10):
    """Greedy accuracy ended at least `points` below its own peak."""
    return run["peak"] - run["final"] >= points


LESSONS = {  # lesson -> (experiments, check(their summaries for one seed) -> bool, the claim checked)
    "instability": (["unstable", "unstable_clip"],
                    lambda b, c: falls(b) and not falls(c, 0.05) and c["final"] - b["final"] >= 0.10,
                    "without clipping accuracy falls >= 10 points from its peak; clipped ends within 5 of "
                    "its peak and >= 10 above"),
    "format exploit": (["format_exploit", "format_exploit_gated"],
                       lambda u, g: u["reward_format"] > u["reward_format_start"] and falls(u) and not falls(g, 0.05),
                       "ungated: format reward rises while accuracy falls >= 10 points from its peak; gated "
                       "stays within 5 of its peak"),
    "naive KL": (["kl_naive", "kl_k3"], lambda n, k: falls(n) and not falls(k, 0.05),
                 "the book's k1 on summed log-probs falls >= 10 points from its peak; k3 per token stays within 5"),
}


def merge_flags(*flag_lists):
    """One list of train.py flags, each flag once: a flag given in a later list replaces its
    value from an earlier one, in the earlier one's place (`--steps 100` + `--steps 80` ->
    `--steps 80`). A flag is a `--name` followed by its values, if any."""
    merged = {}
    for flags in flag_lists:
        for token in flags:
            if token.startswith("--"):
                name = token
                merged[name] = []
            else:
                merged[name].append(token)
    return [x for name, values in merged.items() for x in (name, *values)]


def train_flags(name, seed=None, extra=()):
    """The train.py flags of one experiment: COMMON, the experiment's own, then extra."""
    return merge_flags(COMMON, EXPERIMENTS[name][0], [] if seed is None else ["--seed", str(seed)], extra)


def command(name, seed, runs_dir, extra=(), nproc=1):
    # torchrun as `python -m torch.distributed.run`; --standalone: each run finds its own free port
    launch = ["-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(nproc)] if nproc > 1 else []
    return [sys.executable, *launch, "train.py", *train_flags(name, seed, ["--threads", "1", *extra]),
            "--runs-dir", os.path.join(runs_dir, name), "--run-name", f"seed{seed}"]


def run_all(jobs_list, n_jobs):
    """Run the commands, n_jobs at a time; each one's output goes to its run folder's log."""
    pending, running, failed = list(jobs_list), [], []
    while pending or running:
        while pending and len(running) < n_jobs:
            cmd = pending.pop(0)
            log_dir = os.path.join(cmd[cmd.index("--runs-dir") + 1], cmd[cmd.index("--run-name") + 1])
            os.makedirs(log_dir, exist_ok=True)
            print("$ " + " ".join(cmd[1:]), flush=True)
            log = open(os.path.join(log_dir, "train.log"), "w")
            running.append((subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT), cmd, log))
        time.sleep(0.5)
        for job in [j for j in running if j[0].poll() is not None]:
            running.remove(job)
            job[2].close()
            if job[0].returncode != 0:
                failed.append(" ".join(job[1][1:]))
    if failed:
        raise SystemExit("experiments.py: these runs failed (see train.log in their folders):\n  " + "\n  ".join(failed))


def seed_dirs(runs_dir, name):
    """The seed<k> run folders of one experiment that have metrics, in seed order."""
    root = os.path.join(runs_dir, name)
    if not os.path.isdir(root):
        return []
    found = [d for d in os.listdir(root) if d.startswith("seed") and d[4:].isdigit()
             and os.path.exists(os.path.join(root, d, "metrics.jsonl"))]
    return [os.path.join(root, d) for d in sorted(found, key=lambda d: int(d[4:]))]


def figures(runs_dir, out_dir):
    os.makedirs(out_dir, exist_ok=True)
    for fig, (names, metrics) in COMPARISONS.items():
        dirs = [os.path.join(runs_dir, n) for n in names if seed_dirs(runs_dir, n)]
        if dirs:
            subprocess.run([sys.executable, "plot.py", *dirs, "--metrics", metrics,
                            "--out", os.path.join(out_dir, f"exp_{fig}.png")], check=True)


# ---------------------------------------------------------------- the table

def finite(xs):
    return [x for x in xs if x is not None and math.isfinite(x)]


def mean(xs):
    xs = finite(xs)
    return sum(xs) / len(xs) if xs else float("nan")


def run_summary(rows):
    """Numbers of one run: eval accuracy at start / end / peak, and averages of the last 10 steps."""
    steps = [r for r in rows if r.get("step", 0) > 0]
    evals = [r["eval_acc"] for r in rows if "eval_acc" in r]
    head, tail = steps[:10], steps[-10:]
    out = {"start": evals[0], "final": evals[-1], "peak": max(evals)} if evals else {}
    for key in ("reward", "entropy", "resp_len", "clip_frac", "kl", "reward_format", "sampler_gap"):
        out[key] = mean(r.get(key) for r in tail)
    out["reward_format_start"] = mean(r.get("reward_format") for r in head)
    out["minutes"] = steps[-1]["time"] / 60 if steps else float("nan")
    return out


def mean_std(xs, fmt):
    xs = finite(xs)
    if not xs:
        return "-"
    m = sum(xs) / len(xs)
    if len(xs) == 1:
        return fmt.format(m)
    sd = math.sqrt(sum((x - m) ** 2 for x in xs) / (len(xs) - 1))
    return f"{fmt.format(m)} ± {fmt.format(sd)}"


COLUMNS = [("start", "eval start", "{:.1%}"), ("final", "final", "{:.1%}"), ("peak", "peak", "{:.1%}"),
           ("reward", "reward (last 10)", "{:.3f}"), ("entropy", "entropy", "{:.3f}"),
           ("resp_len", "resp. length", "{:.1f}"), ("clip_frac", "clip frac", "{:.4f}"),
           ("kl", "KL", "{:.4f}"), ("sampler_gap", "sampler gap", "{:.4f}"), ("minutes", "minutes", "{:.1f}")]


def table(runs_dir):
    """Markdown: one row per experiment, mean ± std over its seeds; then the lessons, seed by seed."""
    lines = ["| experiment | seeds | " + " | ".join(c[1] for c in COLUMNS) + " |",
             "|---|---|" + "---|" * len(COLUMNS)]
    summaries = {}
    for name in EXPERIMENTS:
        dirs = seed_dirs(runs_dir, name)
        if not dirs:
            continue
        summaries[name] = {os.path.basename(d): run_summary(plot.read_metrics(os.path.join(d, "metrics.jsonl")))
                           for d in dirs}
        s = list(summaries[name].values())
        lines.append(f"| {name} | {len(s)} | " + " | ".join(mean_std([x.get(k) for x in s], f) for k, _, f in COLUMNS) + " |")
    lessons = lesson_lines(summaries)
    return "\n".join(lines + ([""] + lessons if lessons else []))


def lesson_lines(summaries):
    out = []
    for lesson, (names, check, claim) in LESSONS.items():
        if not all(n in summaries for n in names):
            continue
        seeds = sorted(set.intersection(*(set(summaries[n]) for n in names)), key=lambda s: int(s[4:]))
        held = [s for s in seeds if check(*(summaries[n][s] for n in names))]
        out.append(f"- **{lesson}** ({claim}): held in {len(held)} of {len(seeds)} seeds"
                   + (f" (not in {', '.join(s for s in seeds if s not in held)})" if len(held) < len(seeds) else ""))
    return out


def write_into_readme(path, text):
    """Replace what stands between the two table markers of the README with text."""
    begin, end = "<!-- experiments table: begin -->", "<!-- experiments table: end -->"
    with open(path) as f:
        readme = f.read()
    if begin not in readme or end not in readme:
        raise SystemExit(f"experiments.py: error: {path} has no '{begin}' ... '{end}' markers")
    head, rest = readme.split(begin, 1)
    with open(path, "w") as f:
        f.write(head + begin + "\n" + text + "\n" + end + rest.split(end, 1)[1])


def parse_seeds(s):
    try:
        seeds = [int(x) for x in s.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"--seeds takes integers separated by commas, got {s!r}") from None
    if not seeds:
        raise argparse.ArgumentTypeError("--seeds needs at least one seed")
    return seeds


def main(args):
    if args.list:
        for name, (_, what) in EXPERIMENTS.items():
            print(f"{name:21s} {what}\n{'':21s} python train.py {' '.join(train_flags(name))}")
        return
    names = list(EXPERIMENTS) if "all" in args.names else [n for n in args.names if n != "table"]
    for name in names:
        if name not in EXPERIMENTS:
            raise SystemExit(f"experiments.py: error: unknown experiment {name!r}; choose from all, table, "
                             f"{', '.join(EXPERIMENTS)}")
    if names:
        t0 = time.time()
        run_all([command(n, s, args.runs_dir, args.extra, args.nproc) for n in names for s in args.seeds], args.jobs)
        print(f"{len(names) * len(args.seeds)} runs in {(time.time() - t0) / 60:.1f} min with --jobs {args.jobs}")
    figures(args.runs_dir, args.figures)
    text = table(args.runs_dir)
    print(text)
    if args.readme:
        write_into_readme(args.readme, text)


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description="Run the chapter's GRPO experiments and compare them.")
    ap.add_argument("names", nargs="*", default=[], help=f"all, table, or experiments: {', '.join(EXPERIMENTS)}")
    ap.add_argument("--seeds", type=parse_seeds, default=[0], help="comma-separated seeds, e.g. 0,1,2")
    ap.add_argument("--jobs", type=int, default=1, help="runs side by side (one CPU thread each)")
    ap.add_argument("--nproc", type=int, default=1, help="processes per run (torchrun; see README, Many processes)")
    ap.add_argument("--runs-dir", default="runs/exp", help="where the run folders go (NAME/seed<k>/)")
    ap.add_argument("--figures", default="figures", help="where the comparison PNGs go")
    ap.add_argument("--readme", default=None, help="also write the table between the README's table markers")
    ap.add_argument("--list", action="store_true", help="list the experiments and their flags")
    ap.add_argument("--extra", nargs=argparse.REMAINDER, default=[], help="more train.py flags for every run")
    args = ap.parse_args()
    if not (args.names or args.list):
        ap.error("name an experiment, 'all', 'table' or --list")
    if args.jobs < 1 or args.nproc < 1:
        ap.error("--jobs and --nproc must be >= 1")
    main(args)
