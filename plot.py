"""
Plot GRPO training curves from run folders.

Reads only `runs/<name>/metrics.jsonl` (one JSON object per step, as written by
train.py) and imports nothing from the training code, so it works on a run that is
still being written, or on runs copied from another machine.

    python plot.py runs/A                   # plot_basic.png, plot_advanced.png, plot_clip.png, and
                                            # plot_kl.png, plot_sampler.png, plot_runaway.png where their
                                            # data is, in runs/A/
    python plot.py runs/A runs/B            # overlay runs, legend = folder name
    python plot.py runs/A --panels basic --out figs/basic.png
    python plot.py runs/A runs/B --metrics reward,entropy,eval_acc --out cmp.png
    python plot.py runs/A --smooth 0.1      # lighter smoothing
    python plot.py runs/exp/default runs/exp/onpolicy   # experiments with seed0/, seed1/, ...:
                                            # mean over seeds with a min..max band each
    python plot.py runs/x runs/y --band     # any runs as seeds of one experiment
    python plot.py runs/A --samples         # print the answers to a few held-out problems at
                                            # each evaluation: the policy's writing, changing

Seeds. A folder without metrics.jsonl whose seed<k>/ subfolders have one is an
experiment run over several seeds (experiments.py writes them so); so are seed<k>
folders of one parent given side by side, and any runs given with --band. Such a group
is drawn as one line, the mean over its seeds at the steps every seed logged, inside a
band from the smoothed minimum to the smoothed maximum over seeds (eval metrics: the
mean with markers in the unsmoothed min..max band, instead of bars).

Panel groups (`--panels`, default all; `kl`, `sampler` and `runaway` are skipped without their data):
    basic     loss, reward, response length, eval accuracy (the chapter's 2x2 figure)
    advanced  reward, advantage mean, advantage std, entropy
    clip      clip fraction (low/high side, or the total) and the ratio mean with its
              min..max band
    kl        KL to the reference policy
    sampler   the learner's entropy beside the sampler's, and the sampler-learner gap: its mean
              and largest, KL(sampler || learner) by k1 and k3, the chi^2 and the effective
              sample size of the importance weights, the two log-probs' correlation
    runaway   pg_k1 (stats.pg_as_k1), which turns positive before the learner's entropy rises
              (EXPERIMENTS.md, lesson 3), the two entropies, the lengths of the right
              and the wrong answers, and the share of answers cut at the token cap
`--metrics a,b+c` instead draws one figure with one subplot per name (`b+c`: both keys in one).
A figure has one legend, below its panels, so that it covers no curve; its title wraps
to the figure's width. The clip panel splits the low and high sides for at most two runs
(four lines); with more, each run's total.

Every line series is drawn twice: the raw values faint, and a trailing moving average
on top. The window at the i-th point (0-based) is the last w_i = max(1, floor(s*(i+1)))
points, s = --smooth (default 0.25): the mean of the trailing 25% of the points so far
(run_folders.moving_average). Trailing, not centred, and growing with the run, so the
smoothed value at a step never changes when later steps arrive: re-plotting a live run
does not rewrite its past.
Keys starting with `eval_` (eval_acc, eval_format; fractions in [0, 1]) are logged
only on evaluation steps and are drawn as bars, side by side when several runs share
a step.

Missing keys and null values are skipped (a subplot with nothing to show says
"no data"); a corrupt or half-written line in metrics.jsonl is skipped with a warning
that names the file and line. A missing run folder or metrics file is an error
(one line on stderr, exit code 2).
"""

import argparse
import math
import os
import re
import sys
import textwrap

import numpy as np
import matplotlib

matplotlib.use("Agg")  # files only, no display needed
import matplotlib.pyplot as plt  # noqa: E402

from lab import metrics  # noqa: E402
from lab.run_folders import is_number, moving_average, read_metrics, seed_folders, series  # noqa: E402

DPI = 100

# ----------------------------------------------------------------------------------
# panel groups: name -> list of subplots; a subplot is a (title, kind, keys) tuple.
# kind "line": each key is a series; "bars": eval-style bars; "clip": low/high split
# or total; "ratio": mean with a min..max band.

PANELS = {
    "basic": [
        ("loss", "line", ["loss"]),
        ("reward", "line", ["reward"]),
        ("response length (tokens)", "line", ["resp_len"]),
        ("eval accuracy", "bars", ["eval_acc"]),
    ],
    "advanced": [
        ("reward", "line", ["reward"]),
        ("advantage mean", "line", ["adv_mean"]),
        ("advantage std", "line", ["adv_std"]),
        ("entropy (per token)", "line", ["entropy"]),
    ],
    "clip": [
        ("clip fraction", "clip", ["clip_frac_low", "clip_frac_high", "clip_frac"]),
        ("ratio pi/pi_old: mean, min..max", "ratio", ["ratio_mean", "ratio_min", "ratio_max"]),
    ],
    "kl": [
        ("KL to reference", "line", ["kl"]),
    ],
    "sampler": [  # the sampler-learner gap: a learner that flattens while the sampler hides it
        ("entropy: learner (solid), sampler (dashed)", "line", ["entropy", "sampler_entropy"]),
        ("|log pi_old - log pi_sampler|: mean, largest (dashed)", "line", ["sampler_gap", "sampler_gap_max"]),
        ("KL(sampler || learner): k1, k3 (dashed)", "line", ["sampler_kl_k1", "sampler_kl_k3"]),
        ("chi^2 of the weights pi_old / pi_sampler", "line", ["tis_chi2"]),
        ("answers' weights: effective sample size / B", "line", ["tis_ess"]),
        ("corr(log pi_old, log pi_sampler)", "line", ["sampler_logp_corr"]),
    ],
    "runaway": [  # the chapter's 7_3 runaway: what moves before the learner's entropy does
        ("pg_k1: the policy gradient as a naive KL's beta", "line", ["pg_k1"]),
        ("entropy: learner (solid), sampler (dashed)", "line", ["entropy", "sampler_entropy"]),
        ("answer length: right (solid), wrong (dashed)", "line", ["resp_len_correct", "resp_len_wrong"]),
        ("answers cut at the token cap (fraction)", "line", ["truncated_frac"]),
        ("held-out accuracy, greedy", "bars", ["eval_acc"]),
        ("held-out accuracy, sampled as the rollouts are", "bars", ["eval_sampled_acc"]),
    ],
}
# --metrics: each panel titled in words (a key without a title here keeps its own name)
TITLES = metrics.LOGGED  # each metric's words, as a panel's title: lab/metrics.py holds them, for every page
# A metric whose every value lies within a float rounding of where it sits when the sampler is the learner shows no
# signal: its panel says so in words instead of drawing the rounding on a 1e-12 axis (sampler_gap: the KV-cache
# sampler and the learner's forward are the same policy computed twice, ~1e-7 nats apart, when nothing else
# separates them). key -> (its value then, the rounding allowed, what the panel says)
NO_GAP = (0.0, 1e-5, "all within 1e-5 of 0: float rounding,\nthe sampler is the learner (no gap)")
ALL_ONE = (1.0, 1e-5, "all within 1e-5 of 1: float rounding,\nthe sampler is the learner (no gap)")
NOISE_FLOOR = {"sampler_gap": NO_GAP, "sampler_gap_max": NO_GAP, "sampler_kl_k1": NO_GAP, "sampler_kl_k3": NO_GAP,
               "tis_chi2": NO_GAP, "tis_ess": ALL_ONE, "sampler_logp_corr": ALL_ONE}
FIGSIZE = {1: (6, 3.6), 2: (10, 3.6), 4: (9, 6.5)}  # inches, by number of subplots
# characters per inch of figure width, with a margin: the 12-point title wraps at it, and the
# 9-point legend takes as many columns as its longest label (plus its line) leaves room for
TITLE_CHARS_PER_INCH, LEGEND_CHARS_PER_INCH = 9, 13

# ----------------------------------------------------------------------------------
# reading run folders (a run's metrics.jsonl and an experiment's seed folders: lab/run_folders.py)


class RunError(Exception):
    pass


def load_run(folder):
    """(name, records) for one run folder; RunError with a one-line message if absent."""
    folder = os.path.normpath(folder)
    if not os.path.isdir(folder):
        raise RunError(f"run folder not found: {folder}")
    path = os.path.join(folder, "metrics.jsonl")
    if not os.path.isfile(path):
        raise RunError(f"no metrics.jsonl in run folder {folder}")
    records = read_metrics(path)
    if not records:
        print(f"warning: {path}: no valid records", file=sys.stderr)
    return os.path.basename(os.path.abspath(folder)), records


def load_runs(folders, band=False):
    """(name, records) per line to draw. Seeds of one experiment become one merged run."""
    groups = []  # (name, [folders])
    for f in folders:
        f = os.path.normpath(f)
        if os.path.isdir(f) and not os.path.isfile(os.path.join(f, "metrics.jsonl")) and seed_folders(f):
            groups.append((os.path.basename(os.path.abspath(f)), seed_folders(f)))
            continue
        parent, base = os.path.split(os.path.abspath(f))
        if re.fullmatch(r"seed\d+", base) and groups and groups[-1][0] == os.path.basename(parent) \
                and os.path.dirname(os.path.abspath(groups[-1][1][-1])) == parent:
            groups[-1][1].append(f)  # another seed of the experiment just before
        elif re.fullmatch(r"seed\d+", base):
            groups.append((os.path.basename(parent), [f]))
        else:
            groups.append((base, [f]))
    if band:
        groups = [(" + ".join(n for n, _ in groups) if len(groups) < 4 else f"{len(folders)} runs",
                   [f for _, fs in groups for f in fs])]
    runs = []
    for name, fs in groups:
        members = [load_run(f)[1] for f in fs]
        runs.append((name if len(fs) == 1 else f"{name} ({len(fs)} seeds)",
                     members[0] if len(members) == 1 else merge_seeds(members)))
    return runs


def merge_seeds(members):
    """One record per step that every seed logged: the mean of each numeric key that
    every seed has there, and its min and max over seeds as key:min and key:max."""
    by_step = [{r["step"]: r for r in recs} for recs in members]
    merged = []
    for step in sorted(set.intersection(*(set(b) for b in by_step))):
        rows = [b[step] for b in by_step]
        rec = {"step": step}
        for key in rows[0]:
            vals = [r.get(key) for r in rows]
            if key != "step" and all(is_number(v) for v in vals):
                rec[key], rec[key + ":min"], rec[key + ":max"] = sum(vals) / len(vals), min(vals), max(vals)
        merged.append(rec)
    return merged


def has_data(runs, key):
    return any(len(series(recs, key)[0]) > 0 for _, recs in runs)


# ----------------------------------------------------------------------------------
# drawing one subplot


def color(i):
    cycle = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    return cycle[i % len(cycle)]


def draw_line(ax, steps, values, c, label, frac, ls="-", band=None):
    """Raw values faint, smoothed on top; band = (min, max) over seeds, smoothed, shaded."""
    if band is not None:
        ax.fill_between(steps, moving_average(band[0], frac), moving_average(band[1], frac), color=c, alpha=0.18, lw=0)
    else:
        ax.plot(steps, values, color=c, alpha=0.25, lw=0.8, ls=ls)  # raw, no legend entry
    ax.plot(steps, moving_average(values, frac), color=c, lw=1.6, ls=ls, label=label)


def seed_band(recs, key):
    """(min, max) over seeds at each step of series(recs, key), or None for a single run."""
    lo, hi = series(recs, key + ":min")[1], series(recs, key + ":max")[1]
    return (lo, hi) if len(lo) and len(lo) == len(series(recs, key)[1]) else None


def draw_run(ax, i, name, recs, keys, frac):
    """Each key of run i as raw + smoothed; colour = run, line style = key."""
    drawn, logged = False, [k for k in keys if len(series(recs, k)[0])]
    for key, ls in zip(keys, ["-", "--", ":"]):
        steps, values = series(recs, key)
        if len(steps):
            label = name if len(logged) == 1 else f"{name} {key}"  # the key, where the run drew two in a panel
            draw_line(ax, steps, values, color(i), label, frac, ls, seed_band(recs, key))
            drawn = True
    return drawn


def draw_lines(ax, runs, keys, frac):
    drawn = [draw_run(ax, i, name, recs, keys, frac) for i, (name, recs) in enumerate(runs)]
    return any(drawn)


def draw_clip(ax, runs, keys, frac):
    """Low/high clip fractions where a run logged them (two lines a run, so for at most two
    runs: four lines a panel), else the total clip_frac."""
    low, high, total = keys
    drawn = []
    for i, (name, recs) in enumerate(runs):
        split = [k for k in (low, high) if len(series(recs, k)[0])] if len(runs) <= 2 else []
        drawn.append(draw_run(ax, i, name, recs, split or [total], frac))
    return any(drawn)


def draw_ratio(ax, runs, keys, frac):
    """Smoothed ratio mean on top of its raw values, and a faint smoothed min..max band."""
    mean, lo, hi = keys
    drawn = False
    for i, (name, recs) in enumerate(runs):
        c = color(i)
        both = [r for r in recs if is_number(r.get(lo)) and is_number(r.get(hi))]
        if both:
            steps = np.array([r["step"] for r in both], dtype=float)  # (N,)
            lo_s = moving_average([r[lo] for r in both], frac)  # (N,)
            hi_s = moving_average([r[hi] for r in both], frac)  # (N,)
            ax.fill_between(steps, lo_s, hi_s, color=c, alpha=0.15, lw=0)
            drawn = True
        steps, values = series(recs, mean)
        if len(steps):
            draw_line(ax, steps, values, c, name, frac)
            drawn = True
    if drawn:
        ax.axhline(1.0, color="grey", lw=0.6, ls=":")
    return drawn


def bar_width(all_steps, n_runs):
    """Bars of all runs at one step share 80% of the smallest gap between a run's evals, and at most 4% of
    the steps drawn, so that on a short run the bars stay within its steps as the curves do."""
    gaps = [np.diff(np.unique(s)).min() for s in all_steps if len(np.unique(s)) > 1]
    gap = min(gaps) if gaps else 1.0
    span = max((np.max(s) - np.min(s) for s in all_steps if len(s)), default=0)
    return min(0.8 * gap, 0.04 * span if span else 0.8 * gap) / n_runs


def draw_bars(ax, runs, key):
    """Eval metrics as bars at their steps; several runs side by side, centred on the step."""
    found = [(i, name, *series(recs, key)) for i, (name, recs) in enumerate(runs)]
    found = [f for f in found if len(f[2])]
    if not found:
        return False
    if any(seed_band(runs[i][1], key) is not None for i, *_ in found):
        for i, name, steps, values in found:  # seeds: mean with markers in its min..max band, unsmoothed
            band = seed_band(runs[i][1], key)
            if band is not None:
                ax.fill_between(steps, band[0], band[1], color=color(i), alpha=0.18, lw=0)
            ax.plot(steps, values, color=color(i), lw=1.6, marker="o", ms=3, label=name)
    else:
        width = bar_width([f[2] for f in found], len(found))
        for j, (i, name, steps, values) in enumerate(found):
            offset = (j - (len(found) - 1) / 2) * width
            ax.bar(steps + offset, values, width=width, color=color(i), alpha=0.85, label=name)
    values = [v for f in found for v in f[3]]
    if key.startswith("eval_") and all(0 <= v <= 1 for v in values):
        ax.set_ylim(share_floor(values), 1.05)  # fractions: a fixed top, so runs compare by eye
    return True


def share_floor(values):
    """Where a panel of shares starts: at 0, unless every value is past one half (pass@8 at 92-97%), then at the
    last tenth below the lowest (0.9 for 0.92, 0.8 for 0.9), so that their differences are not flattened into one
    line at the top."""
    low = min(values, default=0.0)
    return 0.0 if low < 0.5 else math.floor(10 * low - 1e-9) / 10


def draw_subplot(ax, runs, title, kind, keys, frac):
    """One panel, without a legend of its own (the figure has one for all its panels)."""
    if kind == "bars":
        drawn = draw_bars(ax, runs, keys[0])
    elif kind == "clip":
        drawn = draw_clip(ax, runs, keys, frac)
    elif kind == "ratio":
        drawn = draw_ratio(ax, runs, keys, frac)
    else:
        drawn = draw_lines(ax, runs, keys, frac)
    ax.set_title(title, fontsize=11)
    ax.set_xlabel("step")
    ax.grid(alpha=0.3)
    if drawn and keys and all(k in NOISE_FLOOR for k in keys):
        value, rounding, words = NOISE_FLOOR[keys[0]]
        if all(abs(v - NOISE_FLOOR[k][0]) < NOISE_FLOOR[k][1] for _, recs in runs for k in keys
               for v in series(recs, k)[1]):
            ax.cla()  # the rounding is not drawn: the panel says what it is
            ax.set_title(title, fontsize=11)
            ax.set_xlabel("step")
            ax.set_ylim(value - rounding, value + rounding)
            ax.text(0.5, 0.5, words, transform=ax.transAxes, ha="center", va="center", color="grey", fontsize=10)
    if not drawn:
        ax.text(0.5, 0.5, "no data", transform=ax.transAxes, ha="center", va="center",
                color="grey", fontsize=12)


# ----------------------------------------------------------------------------------
# figures


def make_figure(runs, subplots, frac, suptitle, path):
    """Draw the (title, kind, keys) subplots on a grid and save a PNG at `path`."""
    fig = build_figure(runs, subplots, frac, suptitle)
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    fig.savefig(path, dpi=DPI)
    plt.close(fig)
    return path


def build_figure(runs, subplots, frac, suptitle):
    """The figure: the panels on a grid, one legend for all of them below the grid (so it
    covers no curve), and the title wrapped to the figure's width."""
    n = len(subplots)
    ncols = 1 if n == 1 else 2 if n <= 4 else 3
    nrows = math.ceil(n / ncols)
    figsize = FIGSIZE.get(n, (4.5 * ncols, 3.2 * nrows))
    fig, axes = plt.subplots(nrows, ncols, figsize=figsize, squeeze=False, layout="constrained")
    for ax, (title, kind, keys) in zip(axes.flat, subplots):
        draw_subplot(ax, runs, title, kind, keys, frac)
    for ax in axes.flat[n:]:
        ax.set_visible(False)
    width = int(figsize[0] * TITLE_CHARS_PER_INCH)
    fig.suptitle("\n".join(textwrap.fill(line, width) for line in suptitle.split("\n")), fontsize=12)
    figure_legend(fig, axes.flat[:n], [name for name, _ in runs], figsize[0])
    # the constrained layout settles in two passes: the tick labels it made room for in the first
    # can change once the panels shrink (0.20 -> 0.200), and would be cut at the edge
    fig.canvas.draw()
    return fig


def figure_legend(fig, axes, names, width):
    """One legend below the panels: every label drawn in any panel, once, in the order
    drawn. A figure of one run (named in its title) lists only the keys it shares a panel with."""
    entries = {}
    for ax in axes:
        for handle, label in zip(*ax.get_legend_handles_labels()):
            entries.setdefault(label, handle)
    if len(names) == 1:
        entries.pop(names[0], None)
    if not entries:
        return
    ncol = max(1, min(len(entries), int(width * LEGEND_CHARS_PER_INCH / (max(map(len, entries)) + 6))))
    fig.legend(list(entries.values()), list(entries), loc="outside lower center", ncol=ncol, fontsize=9, frameon=False)


def metric_subplots(names):
    """--metrics: one subplot per name, titled in words (TITLES); `a+b` draws keys a and b in one subplot
    (solid, dashed); eval_* keys are per-eval-step fractions, as bars."""
    return [(panel_title(k.split("+")), "bars" if k.startswith("eval_") else "line", k.split("+")) for k in names]


def panel_title(keys):
    """'learner's entropy a token (nats)'; for two keys in one panel, 'a (solid), b (dashed)'."""
    words = [TITLES.get(k, k) for k in keys]
    return words[0] if len(words) == 1 else ", ".join(f"{w} ({ls})" for w, ls in zip(words, ["solid", "dashed", "dotted"]))


def output_paths(groups, out, runs):
    """Group name -> PNG path: X.png / X_<g>.png for --out X; one run's figures in its folder, <run>/plot_<g>.png;
    several runs' in runs/compare/A_vs_B_<g>.png, named after them, never in a run's folder."""
    if out is None and len(runs) == 1:
        return {g: os.path.join(runs[0], f"plot_{g}.png") for g in groups}
    if out is None:
        names = [run_name(r) for r in runs]
        names = names if len(names) <= 4 else names[:3] + [f"{len(names) - 3}_more"]
        out = os.path.join("runs", "compare", "_vs_".join(names) + ".png")
        os.makedirs(os.path.dirname(out), exist_ok=True)
    stem, ext = os.path.splitext(out)
    ext = ext or ".png"
    if len(groups) == 1:
        return {groups[0]: stem + ext}
    return {g: f"{stem}_{g}{ext}" for g in groups}


def run_name(folder):
    """A run folder's name in a file name: its own (default), or its experiment's and its seed (default-seed0)."""
    parent, base = os.path.split(os.path.normpath(os.path.abspath(folder)))
    return f"{os.path.basename(parent)}-{base}" if re.fullmatch(r"seed\d+", base) else base


def split_list(s):
    return [x.strip() for x in s.split(",") if x.strip()]


# ----------------------------------------------------------------------------------
# --samples: the answers changing over training


def answer_lines(folder):
    """The lines of `--samples` for one run folder: each held-out problem of its
    answers.jsonl, then its answer at each evaluated step (and the sampled one, where the
    run logged it). RunError with the command that makes them when there are none."""
    path = os.path.join(folder, "answers.jsonl")
    records = [r for r in read_metrics(path) if isinstance(r.get("prompt"), str)] if os.path.isfile(path) else []
    if not records:
        raise RunError(f"{folder} has no answers.jsonl: train.py writes it at each evaluation (--eval-answers N, "
                       f"default 3), e.g. python train.py --run-name NAME")
    problems = {}  # prompt -> its records, in the order logged
    for r in records:
        problems.setdefault(r["prompt"], []).append(r)
    lines = [f"{folder}: answers to {len(problems)} held-out problems at each evaluation (right / wrong)"]
    for prompt, recs in problems.items():
        lines += ["", f"{prompt.strip()}   (answer {recs[0].get('answer')})"]
        for r in recs:
            for kind in ("greedy", "sampled"):
                if isinstance(r.get(kind), str):
                    mark = "right" if r.get(kind + "_correct") else "wrong"
                    lines.append(f"  step {int(r['step']):4d} {kind:7s} {mark}  {one_line(r[kind])}")
    return lines


def one_line(text, width=160):
    """A completion on one line: newlines shown as \\n, a long one cut in its middle."""
    text = text.replace("\n", "\\n")
    if len(text) <= width:
        return text
    return f"{text[:width // 2]} ... ({len(text) - width:,} characters) ... {text[-width // 2:]}"


def print_answers(folders):
    """--samples: every run folder's answer_lines (an experiment folder: each of its seeds)."""
    for folder in folders:
        for run in seed_folders(folder) or [os.path.normpath(folder)]:
            if not os.path.isdir(run):
                raise RunError(f"run folder not found: {run}")
            print("\n".join(answer_lines(run)) + "\n")


def main(args):
    """Write the PNGs; returns their paths. Exits with code 2 on a missing run or metrics file."""
    if args.samples:
        try:
            print_answers(args.runs)
        except RunError as e:
            print(f"plot.py: error: {e}", file=sys.stderr)
            sys.exit(2)
        return []
    try:
        runs = load_runs(args.runs, args.band)
    except (RunError, OSError) as e:
        print(f"plot.py: error: {e}", file=sys.stderr)
        sys.exit(2)
    if args.label:  # the runs' names as the caller gives them, in the order of RUN
        if len(args.label) != len(runs):
            print(f"plot.py: error: {len(args.label)} --label for {len(runs)} runs", file=sys.stderr)
            sys.exit(2)
        runs = [(label, recs) for label, (_, recs) in zip(args.label, runs)]
    title = args.title or "; ".join(name for name, _ in runs)  # the legend names the runs: --title need not
    title += f"\n{args.note}" if args.note else ""
    if args.metrics:
        names = split_list(args.metrics)
        groups = {"metrics": metric_subplots(names)}
    else:
        chosen = split_list(args.panels)
        # kl only exists when a KL penalty was used, pg_k1 when the sampler is not the learner
        # (sampler_entropy in runs of older code):
        # skip them unless asked for by name
        if args.panels == "all" or not chosen:
            chosen = [g for g in PANELS if (g != "kl" or has_data(runs, "kl"))
                      and (g != "sampler" or has_data(runs, "sampler_entropy"))
                      and (g != "runaway" or has_data(runs, "pg_k1"))]
        groups = {g: PANELS[g] for g in chosen}
    paths = output_paths(list(groups), args.out, args.runs)
    written = []
    for g, subplots in groups.items():
        written.append(make_figure(runs, subplots, args.smooth, title if args.metrics else f"{g}: {title}", paths[g]))
        print(paths[g])
    return written


def parse_panels(s):
    if s == "all":
        return s
    bad = [g for g in split_list(s) if g not in PANELS]
    if bad:
        choices = ", ".join(PANELS)
        raise argparse.ArgumentTypeError(f"unknown panel {bad[0]!r}; choose from {choices}")
    return s


def parse_smooth(s):
    v = float(s)
    if not 0 <= v <= 1:
        raise argparse.ArgumentTypeError("must be in [0, 1] (fraction of points so far)")
    return v


def build_parser():
    p = argparse.ArgumentParser(
        description="Plot GRPO training curves from run folders (runs/<name>/metrics.jsonl).",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("runs", nargs="+", metavar="RUN",
                   help="run folder(s) holding metrics.jsonl; several are overlaid")
    p.add_argument("--panels", type=parse_panels, default="all",
                   help=f"comma-separated panel groups from {','.join(PANELS)}, or 'all' "
                        "(kl is skipped when no run logged kl)")
    p.add_argument("--metrics", default=None,
                   help="comma-separated metric keys, one subplot each, in one figure "
                        "(e.g. reward,entropy,eval_acc); overrides --panels")
    p.add_argument("--out", default=None,
                   help="output PNG; with several panel groups X.png becomes X_<group>.png; "
                        "None writes one RUN's into RUN/plot_<group>.png, several RUNs' into "
                        "runs/compare/A_vs_B_<group>.png")
    p.add_argument("--band", action="store_true",
                   help="draw all RUNs as seeds of one experiment: their mean, in a min..max band")
    p.add_argument("--samples", action="store_true",
                   help="print each run's answers to its fixed held-out problems at every evaluation "
                        "(answers.jsonl), instead of drawing")
    p.add_argument("--label", action="append", default=None, metavar="NAME",
                   help="the name of a run in the legend, once per RUN in their order (default: each folder's name)")
    p.add_argument("--title", default=None, help="the figure's title (default: the runs' names; with --label the "
                                                 "legend names them already)")
    p.add_argument("--note", default=None, help="a line under the figure's title: where its runs came from")
    p.add_argument("--smooth", type=parse_smooth, default=0.25,
                   help="moving-average window as a fraction of the points so far "
                        "(trailing; 0 = raw values only)")
    return p


if __name__ == "__main__":
    main(build_parser().parse_args())
