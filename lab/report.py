"""What the runs say: each run's numbers, each lesson and fix judged seed by seed, and the recorded
results that EXPERIMENTS.md, README.md and docs/metrics.md are written from.

    python experiments.py table             # the runs in runs/exp: mean ± std over seeds, the lessons, the fixes
    python experiments.py table --write     # record those runs in results.jsonl, re-write the pages' tables
    python experiments.py check             # the runs in runs/exp against results.jsonl, number by number

What is judged, and by which check, is lab/lessons.py's: a lesson is a pair of experiments, a broken run
and its fix, and a check of one seed's two summaries (lessons.LESSONS); a fix of the chapter's
closing list is judged by the number it was made to move, by a margin of at least twice that
number's spread over seeds without it (lessons.FIXES); a variant of the field past the chapter,
beside the chapter's own answer, by that answer's check (lessons.FIELD). This file judges them on
the runs: `run_summary` makes every number they read from a run's metrics.jsonl. results.jsonl keeps
one line per recorded run (its experiment, seed, flags, commit, machine and summary), and every
table on the pages is a generated part, written from it (`write_pages`); the suite writes them again
and fails on any difference (tests/test_report.py). This file imports nothing of training.
"""
import json
import math
import os
import re
from typing import NamedTuple

from lab import lessons
from lab import metrics
from lab import permutation
from lab import provenance
from lab import run_folders

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the project's folder
RESULTS = os.path.join(ROOT, "results.jsonl")
PAGES = ["README.md", "EXPERIMENTS.md", "docs/metrics.md"]  # the pages with generated parts


# ---------------------------------------------------------------- 1. a run's numbers

def finite(xs):
    return [x for x in xs if x is not None and math.isfinite(x)]


def mean(xs):
    xs = finite(xs)
    return sum(xs) / len(xs) if xs else float("nan")


def run_summary(rows):
    """Numbers of one run: eval accuracy at start / end / peak (and its step), averages of
    the last 10 steps, and the steps at which its metrics first moved."""
    steps = [r for r in rows if r.get("step", 0) > 0]
    evals = [(r["step"], r["eval_acc"]) for r in rows if "eval_acc" in r]
    head, tail = steps[:10], steps[-10:]
    out = {}
    if evals:
        peak_step, peak = max(evals, key=lambda e: e[1])
        out = {"start": evals[0][1], "final": evals[-1][1], "peak": peak, "peak_step": peak_step}
    out["evals"] = [list(e) for e in evals]
    passes = [r["eval_pass_at_k"] for r in rows if run_folders.is_number(r.get("eval_pass_at_k"))]
    out["pass_at_k"] = passes[-1] if passes else float("nan")  # --eval-pass-k: the last evaluation's pass@k
    # the lowest greedy accuracy once training has begun: a dip a run recovers from still counts
    out["eval_low"] = min((a for s, a in evals if s > 0), default=float("nan"))
    out["low_after_peak"] = low_after_peak(out["evals"])
    for key in ("reward", "entropy", "resp_len", "clip_frac", "kl", "reward_format", "sampler_gap", "sampler_entropy"):
        out[key] = mean(r.get(key) for r in tail)
    out["reward_format_start"] = mean(r.get("reward_format") for r in head)
    sampled = [r["eval_sampled_acc"] for r in rows if "eval_sampled_acc" in r]
    out["sampled_peak"], out["sampled_final"] = (max(sampled), sampled[-1]) if sampled else (None, None)
    out["sampled_drop"] = out["sampled_peak"] - out["sampled_final"] if sampled else float("nan")
    out["ln_vocab"] = next((r["ln_vocab"] for r in rows if "ln_vocab" in r), float("nan"))
    out["entropy_peak"] = highest_trailing_mean(rows, "entropy")
    # the answers at the cap: the cut share and the wrong answers' length, first 20 steps -> highest 20-step mean
    for key, name in (("truncated_frac", "truncated"), ("resp_len_wrong", "len_wrong")):
        means = trailing_means(rows, key)[1]
        out[name + "_start"] = means[19] if len(means) >= 20 else float("nan")
        out[name + "_peak"] = highest_trailing_mean(rows, key)
    reward50 = trailing_means(rows, "reward", 50)[1][49:]  # the total reward's whole 50-step means
    peak_at = max(range(len(reward50)), key=reward50.__getitem__, default=None)
    out["reward_peak50"] = reward50[peak_at] if reward50 else float("nan")
    out["reward_low_after_peak"] = min(reward50[peak_at:]) if reward50 else float("nan")
    # what the reward a learner watches keeps of its peak: its lowest 50-step mean after the peak, over the peak
    out["reward_kept"] = out["reward_low_after_peak"] / out["reward_peak50"] if reward50 and out["reward_peak50"] \
        else float("nan")
    out["reward_format_end"] = mean(r.get("reward_format") for r in steps[-20:])
    out["bonus"] = mean(r["reward"] - r["reward_correct"] for r in steps if run_folders.is_number(r.get("reward"))
                        and run_folders.is_number(r.get("reward_correct")))  # what the reward pays beyond correctness
    # each fix's own metric (lessons.FIXES): means over the run, or over its second half where a trend builds up
    for key in ("signal_groups", "adv_correct_corr", "truncated_frac", "pg_k1", "sampler_kl_k3", "grad_norm_max",
                "zero_std_frac", "tis_weight_mean", "ppo_kl", "clip_high_lowp_frac", "neg_ratio_above_3",
                "neg_sampler_kl", "tis_weight_above_2", "neg_far_frac",  # the fixes' metrics and gates
                # each method's mechanism and cost (lessons.Record): what it weighs, drops, clips or pays
                "sampler_gap", "format_paid_wrong", "token_weight_spread", "reward_overlong", "clip_frac",
                "clip_frac_high", "off_policy_masked_frac", "is_masked_frac", "rejected_frac", "is_weight_mean",
                "low_entropy_frac", "adv_to_centred", "equal_groups_adv", "kl_grad_bias", "kl_exact",
                "reward_collapse_frac", "tied_adv_gap", "adv_mean", "sapo_gate", "clip_high_p_mean", "think_clip_frac"):
        out["mean_" + key] = mean(r.get(key) for r in steps)
    out["grad_norm_peak"] = max(finite(r.get("grad_norm_max") for r in steps), default=float("nan"))
    out["kl_low"] = min(finite(r.get("kl") for r in steps), default=float("nan"))
    out["early_logratio_std_token"] = mean(r.get("logratio_std_token") for r in head)
    out["early_logratio_std_seq"] = mean(r.get("logratio_std_seq") for r in head)
    out["early_resp_len"] = mean(r.get("resp_len") for r in head)
    out["early_entropy"] = mean(r.get("entropy") for r in head)
    out["early_reward_collapse_frac"] = mean(r.get("reward_collapse_frac") for r in head)  # while both terms vary
    out["late_resp_len_correct"] = mean(r.get("resp_len_correct") for r in steps[len(steps) // 2:])
    out["late_resp_len_wrong"] = mean(r.get("resp_len_wrong") for r in steps[len(steps) // 2:])
    out["late_resp_len"] = mean(r.get("resp_len") for r in steps[len(steps) // 2:])
    out["entropy_peak_share"] = out["entropy_peak"] / out["ln_vocab"]
    out["eval_mean"] = mean(a for s, a in evals if s > 0)  # how fast it learns as well as how far: the area under it
    both = [(r["kl"], r["kl_exact"]) for r in steps if run_folders.is_number(r.get("kl"))
            and run_folders.is_number(r.get("kl_exact")) and r["kl_exact"] > 0]
    # the KL term's estimate against its exact value (--exact-kl): its bias over the run, the estimates' sum against
    # the exact values' (what re-weighting removes; a ratio of sums, which the first steps' KL of almost 0 cannot
    # blow up), and its error step by step (the bias and the noise together)
    out["kl_bias"] = abs(sum(k - e for k, e in both)) / sum(e for _, e in both) if both else float("nan")
    out["kl_error"] = mean(abs(k - e) / e for k, e in both)
    # diversity (--eval-pass-n): the different right answers a held-out problem's N samples give, at the first
    # and the last evaluation, and their fall between: a policy settling on one right answer a problem
    distinct = [r["eval_distinct"] for r in rows if run_folders.is_number(r.get("eval_distinct"))]
    out["distinct_start"], out["distinct_final"] = (distinct[0], distinct[-1]) if distinct else (float("nan"),) * 2
    out["distinct_fall"] = out["distinct_start"] - out["distinct_final"]
    # the aha moment: the first step whose 3-step mean of the reasoned share (format check) reaches one half
    think = trailing_means(rows, "reward_format", 3)
    out["think_half_step"] = next((s for s, m in zip(*think) if m >= 0.5), float("nan"))
    out["drop"] = out["peak"] - out["final"] if evals else float("nan")
    # the steps whose largest gradient norm passed the default --max-grad-norm 1: the spikes
    # the clip hides from the update
    spikes = [r["grad_norm_max"] > 1.0 for r in steps if run_folders.is_number(r.get("grad_norm_max"))]
    out["grad_limited_steps"] = sum(spikes) / len(spikes) if spikes else float("nan")
    out["minutes"] = steps[-1]["time"] / 60 if steps else float("nan")
    out["moves"] = first_moves(rows)
    return out


def low_after_peak(evals):
    """The lowest greedy accuracy at or after its peak ([step, accuracy] of each evaluation): where a run that
    learned fell to; its peak if it never fell. nan without evaluations."""
    if not evals:
        return float("nan")
    peak_at = max(range(len(evals)), key=lambda i: evals[i][1])
    return min(a for _, a in evals[peak_at:])


def step_moves(rows):
    """How far each step's update moves the policy (ppo_kl: KL(pi_old || pi) after its inner epochs), its mean once
    the first fast learning is over (the steps from 10% to 30% of the run) and at the end (the last 20%) -> [early,
    late]. Recorded beside the summary, not in it: a record made before it existed stays one `check` agrees with
    (the summary's mean_ppo_kl, over the same steps' values, is checked)."""
    steps = [r for r in rows if r.get("step", 0) > 0]
    n = len(steps)
    early, late = steps[n // 10:3 * n // 10], steps[n - n // 5:]
    return [mean(r.get("ppo_kl") for r in early), mean(r.get("ppo_kl") for r in late)]


def trailing_means(rows, key, window=20):
    """(steps, means): the trailing `window`-step mean of a metric at each step it was logged
    (over fewer steps before the window-th), by run_folders.moving_average."""
    steps, values = run_folders.series([r for r in rows if r.get("step", 0) > 0], key)
    return steps.astype(int).tolist(), run_folders.moving_average(values, window=window).tolist()


def highest_trailing_mean(rows, key, window=20):
    """The highest trailing `window`-step mean of a metric over whole windows (nan: fewer steps)."""
    return max(trailing_means(rows, key, window)[1][window - 1:], default=float("nan"))


MOVERS = [("kl", 2.0), ("entropy", 2.0), ("sampler_gap", 2.0), ("resp_len", 1.5), ("ratio_max", 2.0)]  # (metric, factor)


def first_moves(rows, window=20):
    """{metric: the first step after the accuracy peak at which it moved, or None}, read
    in order they say what moved first once the run had learned: accuracy when an eval is
    10 points below the peak; each of MOVERS when its trailing `window`-step mean first
    reaches `factor` times its trailing mean at the peak (absolute values: k1 can be
    negative)."""
    evals = [(r["step"], r["eval_acc"]) for r in rows if "eval_acc" in r]
    if not evals:
        return {}
    peak_step, peak = max(evals, key=lambda e: e[1])
    out = {"eval_acc": next((s for s, a in evals if s > peak_step and a <= peak - 0.10), None)}
    for key, factor in MOVERS:
        absolute = [{"step": r["step"], key: abs(r[key])} for r in rows if run_folders.is_number(r.get(key))]
        trailing = list(zip(*trailing_means(absolute, key, window)))  # [(step, mean)]
        at_peak = [m for s, m in trailing if s <= peak_step]
        ref = at_peak[-1] if at_peak else None
        out[key] = next((s for s, m in trailing if s > peak_step and ref and m >= factor * ref), None)
    return out


def metric_profile(rows):
    """{metric: [first, last, lowest, highest]} of every number a run logs (docs/metrics.md's healthy values,
    from the default run): for a per-step metric the means of its first and of its last 10 steps, for an
    evaluation (eval_*) its value at the first and at the last evaluation."""
    keys = sorted({k for r in rows for k, v in r.items() if run_folders.is_number(v)} - {"step"})
    out = {}
    for key in keys:
        values = finite(r.get(key) for r in rows if key.startswith("eval_") or r.get("step", 0) > 0 or key == "ln_vocab")
        if values:
            first, last = (values[0], values[-1]) if key.startswith("eval_") else (mean(values[:10]), mean(values[-10:]))
            out[key] = [first, last, min(values), max(values)]
    return out


def summaries_from_runs(runs_dir, names=None):
    """{experiment: {"seed<k>": run_summary}} of the seed folders (run_folders.seed_folders) under runs_dir, for the
    experiments named (default: every folder there, sorted). A cut or corrupt metrics line is skipped, and
    run_folders.read_metrics says so on stderr."""
    if names is None:
        names = sorted(os.listdir(runs_dir)) if os.path.isdir(runs_dir) else []
    out = {}
    for name in names:
        dirs = run_folders.seed_folders(os.path.join(runs_dir, name))
        if dirs:
            out[name] = {os.path.basename(d): run_summary(run_folders.read_metrics(os.path.join(d, "metrics.jsonl")))
                         for d in dirs}
    return out


# ---------------------------------------------------------------- 2. the verdicts and the tables

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
           ("kl", "KL", "{:.4f}"), ("sampler_gap", "sampler gap", "{:.4f}"), ("pass_at_k", "pass@k, end", "{:.1%}"),
           ("minutes", "minutes", "{:.1f}")]


def table(runs_dir, names=None):
    """Markdown of the runs in runs_dir (names: their folders, a learner's labelled or edited ones too): one row
    per folder, mean ± std over its seeds; then the fixes and the field's variants that have runs there, each
    lesson seed by seed, and one line for the fixes and variants not run here."""
    summaries = summaries_from_runs(runs_dir, names)
    parts = [experiments_table(summaries), fixes_table(summaries), field_table(summaries, only_run=True)]
    parts += [lesson_table(lesson, summaries) for lesson in lessons.LESSONS]
    unrun = [n for n, j in [*lessons.FIXES.items(), *lessons.FIELD.items()] if not seeds_of(summaries, j.experiments)]
    if unrun:
        parts.append(f"{len(unrun)} more fixes and variants, not run here: EXPERIMENTS.md has each "
                     "(python experiments.py fixes, field).")
    return "\n\n".join(part for part in parts if part)  # a part without runs leaves no blank lines


def experiments_table(summaries, names=None):
    """One row per experiment (those named, or all), mean ± std over its seeds of COLUMNS."""
    lines = ["| experiment | seeds | " + " | ".join(c[1] for c in COLUMNS) + " |", "|---|---|" + "---|" * len(COLUMNS)]
    for name in names or summaries:
        s = list(summaries.get(name, {}).values())
        if s:
            lines.append(f"| {name} | {len(s)} | " + " | ".join(mean_std([x.get(k) for x in s], f) for k, _, f in COLUMNS)
                         + " |")
    return "\n".join(lines)


def seeds_of(summaries, names):
    """The seed labels every one of the named experiments has, in seed order ('seed0', or 'seed0 avx2' for a
    seed under a rounding other than plain: pairs_from_results)."""
    return sorted(set.intersection(*(set(summaries.get(n, {})) for n in names)),
                  key=lambda s: (int(s[4:].split()[0]), s))


def needed(judged):
    """The experiments one seed's verdict reads: the run without, the method's, and the runs its failure or its check
    is seen against (the 80/20 rule's every-token run)."""
    names = [*judged.experiments, judged.record.failure.against, judged.keeps]
    return [n for n in dict.fromkeys(names) if n is not None]


def judged_runs(judged):
    """The experiments a lesson, fix or variant is judged on: the run without it, its own, a lesson's one-change
    runs, the run its failure or its check is seen against, its rivals' (experiments.py runs them together)."""
    return list(dict.fromkeys([*needed(judged), *judged.parts, *judged.record.rivals]))


class Judgement(NamedTuple):
    """A lesson, fix or variant judged over the seeds of its runs (judgement): the failure in the run without it, its
    mechanism, its verdict (lessons.verdict), the numbers shown beside it, each rival's run against its own, its
    costs, and a lesson's one-change runs."""
    seeds: list      # the seed labels ('seed0'; 'seed0 avx2' for another rounding) either of its two runs has
    pairs: list      # [(seed, the run without's summary or None, the method's or None)] by seed
    failure: dict    # seed -> (present, why it could not be read or None): the run without's seeds
    mechanism: dict  # seed -> (acted, why not or None): the method's seeds
    verdict: object  # lessons.Verdict over all the seeds of both runs
    also: list       # [(lessons.Number, lessons.Verdict)]: more numbers, the same test, deciding nothing
    rivals: dict     # rival experiment -> lessons.Verdict of the method's run against the rival's (the rival as the run
    #                  without; None: the rival not run)
    costs: dict      # run_summary key -> [the method's run's value] by seed
    time: float      # the method's run's minutes over the run without's, the mean over seeds
    parts: dict      # a lesson's one-change run -> its lessons.Verdict, judged as the fix is


class Summary(dict):
    """A run's summary without its missing numbers (absent, None or nan): reading one raises KeyError((run, key)),
    so that a verdict that needs it can say which run lacks which number."""

    def __init__(self, name, run):
        super().__init__({k: v for k, v in run.items() if v is not None and v == v})
        self.name = name

    def __missing__(self, key):
        raise KeyError((self.name, key))


def judged_or_why(test, runs):
    """(test({experiment: Summary}), None), or (None, why it could not be judged): 'book_noclip has no drop' for a
    number a run lacks (an old run, an interrupted one), 'no run of many' for a run the seed lacks."""
    try:
        return test({name: Summary(name, run) for name, run in runs.items()}), None
    except KeyError as e:
        what = e.args[0]
        return None, f"{what[0]} has no {what[1]}" if isinstance(what, tuple) else f"no run of {what}"


def values(summaries, experiment, key):
    """{seed label: the experiment's number in that seed, or None}: every seed it has."""
    return {seed: run.get(key) for seed, run in summaries.get(experiment, {}).items()}


def seed_number(label):
    """'seed3' -> 3, 'seed3 avx2' -> 3; -1 for a folder named by another rule (no seed in its name)."""
    found = re.match(r"seed(\d+)", label)
    return int(found[1]) if found else -1


def by_seed(d):
    """{seed label: x} -> {seed number: x}, for lessons.verdict, which names seeds by number."""
    return {seed_number(label): x for label, x in d.items()}


def compare(number, first, second, summaries, present=None, acted=None):
    """lessons.verdict of `second`'s run against `first`'s on one number, over all the seeds each has."""
    return lessons.verdict(number, by_seed(values(summaries, first, number.key)),
                           by_seed(values(summaries, second, number.key)), by_seed(present or {}),
                           None if acted is None else by_seed(acted), (first, second))


def own_seeds(summaries, n):
    """summaries with each experiment's seeds 0 to n - 1 alone (under every rounding): the seeds a record plans. Runs
    of its experiments made for another record (a rival's 8 seeds, where this record plans 5) are not its. A folder
    named by another rule than seed<k> has no seed to plan, and stays."""
    return {name: {s: run for s, run in runs.items() if seed_number(s) < n} for name, runs in summaries.items()}


def judgement(judged, summaries):
    """Judgement of a lessons.judged() record on the runs of summaries ({experiment: {seed: run_summary}})."""
    names, record = judged.experiments, judged.record
    summaries = own_seeds(summaries, judged.seeds)
    seeds = sorted(set().union(*(summaries.get(n, {}) for n in names)), key=lambda s: (seed_number(s), s))
    runs = {s: {n: summaries[n][s] for n in needed(judged) if s in summaries.get(n, {})} for s in seeds}
    pairs = [(s, runs[s].get(names[0]), runs[s].get(names[1])) for s in seeds]
    failure = {s: judged_or_why(lambda k: record.failure.present(k, names[0]), runs[s]) for s in seeds
               if names[0] in runs[s]}
    mechanism = {s: judged_or_why(lambda k: record.mechanism.acts(k[names[0]], k[names[1]]), runs[s]) for s in seeds
                 if names[1] in runs[s]}
    present = {s: bool(v) for s, (v, why) in failure.items() if why is None}
    acted = {s: bool(v) for s, (v, why) in mechanism.items() if why is None}
    verdict = compare(judged.number, *names, summaries, present, acted)
    if judged.keeps and verdict.decision == lessons.HELD:  # the 80/20 rule: also not worse than every token
        behind = compare(judged.number, names[1], judged.keeps, summaries)
        if behind.decision != lessons.NOT_JUDGED and behind.p < permutation.ALPHA:
            verdict = verdict._replace(decision=lessons.NOT_HELD, why=f"behind {judged.keeps}, {p_is(behind.p)}")
    also = [(n, compare(n, *names, summaries)) for n in judged.also]
    rivals = {rival: compare(judged.number, rival, names[1], summaries) if rival in summaries else None
              for rival in record.rivals}
    costs = {key: [b.get(key) for _, _, b in pairs if b] for key in record.costs}
    time = mean(b.get("minutes", math.nan) / a.get("minutes", math.nan) for _, a, b in pairs if a and b
                and a.get("minutes"))
    parts = {part: compare(judged.number, names[0], part, summaries, present) for part in judged.parts
             if part in summaries}
    return Judgement(seeds, pairs, failure, mechanism, verdict, also, rivals, costs, time, parts)


def seeds_needed(judged, summaries, seeds=(0, 1, 2, 3, 4)):
    """The seeds lessons.seeds_for gives a record from its run without's seeds 0-4 -> (seeds, the seeds it read);
    (None, n) with fewer than 5 of them."""
    runs = summaries.get(judged.experiments[0], {})
    found = finite(runs[f"seed{s}"].get(judged.number.key) for s in seeds if f"seed{s}" in runs)
    return (lessons.seeds_for(judged.number, found) if len(found) == len(seeds) else None), len(found)


def p_text(p):
    """A p-value as a table's column prints it: '0.004', three decimals ('< 0.001' below)."""
    return "< 0.001" if p < 0.001 else f"{p:.3f}"


def p_is(p):
    """A p-value as a sentence prints it: 'p = 0.004', or 'p < 0.001'."""
    return "p < 0.001" if p < 0.001 else f"p = {p:.3f}"


def size_text(key, x, sign=True):
    """An effect on a number in its unit, signed: '+4.1 points' for a share, '+2.9' else ('-' where not finite)."""
    if x is None or not math.isfinite(x):
        return "inf" if x == math.inf else "-"
    if key in metrics.SHARES:
        points = f"{x * 100:{'+' if sign else ''}.2g}"
        return f"{points} point{'s' * (points.lstrip('+-') != '1')}"
    unit = {"entropy": " nats", "think_half_step": " steps", "distinct_final": " answers"}.get(key, "")
    return f"{x:{'+' if sign else ''}.3g}{unit}"


def decision_text(v):
    """'held' / 'not held' / 'no failure here (present in 1 of 5)' / ...; ': the other way' where the number moved
    against the claim by the same test."""
    if v.decision == lessons.NOT_JUDGED:
        return f"not judged: {v.why}"
    text = v.decision
    if v.decision == lessons.NO_FAILURE:
        text += f" (present in {v.present[0]} of {v.present[1]})"
    if v.decision == lessons.DID_NOT_ACT:
        text += f" (acted in {v.acted[0]} of {v.acted[1]})"
    if v.other_way:
        text += f"; the other way, {p_is(v.p_other)}"
    if v.decision == lessons.NOT_HELD and v.why and v.why.startswith("behind"):
        text += f" ({v.why})"
    return text


def effect_text(key, v, planned=None):
    """'+27 points (95% interval +20 to +33), ahead in 100% of seed pairs; detectable: 8.5 points (5 and 5 seeds)';
    where either run has fewer seeds than the record plans (planned), the plan too: '... at 5 and 5 seeds, of 10'."""
    if v.decision == lessons.NOT_JUDGED:
        return "-"
    low, high = (size_text(key, x) for x in v.interval)
    short = f", of {planned}" if planned and min(v.n) < planned else ""
    return (f"{size_text(key, v.effect)} ({low} to {high}), ahead in {v.prob:.0%}; detectable "
            f"{size_text(key, v.detectable, sign=False)} at {v.n[0]} and {v.n[1]} seeds{short}")


def rival_text(number, rival, v):
    """'lag_decoupled_tis (TIS, C = 2): better, p = 0.004' / 'worse, p = ...' / 'no difference seen (p = 0.31)':
    the method's run against the rival's by the same test, either way."""
    named = f"{rival} ({lessons.LABELS[rival]})" if rival in lessons.LABELS else rival
    if v is None:
        return f"{named}: not run yet"
    if v.decision == lessons.NOT_JUDGED:
        return f"{named}: not judged: {v.why}"
    if v.p < permutation.ALPHA:
        side = f"better, {p_is(v.p)}"
    elif v.other_way:
        side = f"worse, {p_is(v.p_other)}"
    else:
        side = f"no difference seen ({p_is(min(v.p, v.p_other))})"
    return f"{named}: {side}, {size_text(number.key, v.effect)}"


def also_text(j):
    """'sampled held-out accuracy, end: -47 points, the other way, p = 0.004' of each number shown beside."""
    out = []
    for n, v in j.also:
        if v.decision == lessons.NOT_JUDGED:
            out.append(f"{named(n.key)}: not judged: {v.why}")
            continue
        way = (f"its way, {p_is(v.p)}" if v.p < permutation.ALPHA else
               f"the other way, {p_is(v.p_other)}" if v.other_way else "no move seen")
        out.append(f"{named(n.key)}, {n.side}: {size_text(n.key, v.effect)}, {way}")
    return "; ".join(out)


def seed_effects(judged, j):
    """Each seed's signed effect, the claim's way, in the number's unit: '+4.1, +2.9, (-0.3)', a seed in brackets
    where the run without shows no failure; '?' where either run lacks the seed's number."""
    n, out = judged.number, []
    for seed, a, b in j.pairs:
        if not (a and b) or not all(run_folders.is_number(r.get(n.key)) for r in (a, b)):
            continue
        x = n.gain(a, b)
        cell = f"{x * 100:+.2g}" if n.key in metrics.SHARES else f"{x:+.3g}"
        out.append(cell if j.failure.get(seed, (True,))[0] else f"({cell})")
    return ", ".join(out) or "-"


def both_ran(j):
    """A Judgement with a seed that both of its runs have."""
    return any(a and b for _, a, b in j.pairs)


def counted(results):
    """'3 of 5' of {seed: (True/False, why not read)} (a failure present, a mechanism acting), with each seed that
    could not be read named."""
    unread = [(s, why) for s, (_, why) in results.items() if why]
    return f"{sum(bool(x) for x, _ in results.values())} of {len(results)}" + "".join(
        f"; seed {s[4:]} not read: {why}" for s, why in unread)


COST_NAMES = {  # a cost's key -> how a table names it
    "mean_clip_frac": "tokens clipped", "mean_is_masked_frac": "tokens masked", "mean_rejected_frac": "tokens rejected",
    "mean_off_policy_masked_frac": "answers masked", "mean_low_entropy_frac": "tokens without a gradient",
    "mean_is_weight_mean": "mean weight", "mean_zero_std_frac": "groups dropped", "mean_reward_overlong": "penalty",
}


DROPS = ["mean_is_masked_frac", "mean_rejected_frac", "mean_off_policy_masked_frac"]  # the stale corrections' costs


def cost_text(j):
    """'tokens clipped 0.4%; time x1.02': each cost's mean over the seeds, and the time against the run without."""
    parts = [f"{COST_NAMES[key]} {fmt_metric(key, mean(values))}" for key, values in j.costs.items()]
    return "; ".join(parts + ([f"time x{j.time:.2f}"] if math.isfinite(j.time) else []))


def mechanism_cell(judged, j):
    """'the run's largest gradient norm: 79-120 -> 3.9-7.8 (at most half the run without's)'."""
    m = judged.record.mechanism
    key = lambda k: (lambda x: fmt_metric(k, x))  # noqa: E731
    before = span([a.get(m.without_key or m.key) for _, a, _ in j.pairs if a], key(m.without_key or m.key))
    after = span([b.get(m.key) for _, _, b in j.pairs if b], key(m.key))
    return f"{named(m.key)}: {before} -> {after} ({m.rule})"


def failure_cell(judged, j):
    """'greedy accuracy's fall from its peak: 21-39%': the failure's number in the run without, over the seeds."""
    f = judged.record.failure
    values = span([a.get(f.key) for _, a, _ in j.pairs if a], lambda x: fmt_metric(f.key, x))
    return f"{named(f.key)}: {values}"


def number_cell(judged, j):
    """'without -> with' over the seeds (each a range)."""
    n = judged.number
    fmt = lambda x: fmt_metric(n.key, x)  # noqa: E731
    return " -> ".join(span([pair[i].get(n.key) for pair in j.pairs if pair[i]], fmt) for i in (1, 2))


TABLE_HEAD = ("| {first} | for | where | its failure, in the run without | present | its mechanism | acted | its number, "
              "its way | without -> with | the effect in each seed | verdict | p | the effect (95% interval), ahead in; "
              "detectable | shown beside | beside its rival | cost |")


def judged_rows(collection, summaries, first, only_run=False):
    """The fixes' or the field's table (collection: lessons.FIXES or FIELD), one row each: what it is for and where
    it runs; its failure in the run without it (its number, and in how many seeds it is present); its mechanism and
    in how many seeds it acted; its number and its way; without -> with over the seeds; the signed effect in each
    seed; the verdict and its p; the effect, its interval, the probability of improvement and the detectable effect;
    the numbers shown beside; against its rivals; its cost. 'not run yet' where its runs are not there (left out
    with only_run)."""
    out = [TABLE_HEAD.format(first=first), "|---" * 16 + "|"]
    for name, judged in collection.items():
        j = judgement(judged, summaries)
        number = f"{named(judged.number.key)}, {judged.number.side}"
        if not both_ran(j):
            if not only_run:
                out.append(f"| {name} | {judged.what} | {judged.regime} | {judged.record.failure.rule} | - | "
                           f"{named(judged.record.mechanism.key)} | - | {number} | not run yet |"
                           + " - |" * 7)
            continue
        v = j.verdict
        out.append(f"| {name} | {judged.what} | {judged.regime} | {failure_cell(judged, j)} ({judged.record.failure.rule}) "
                   f"| {counted(j.failure)} | {mechanism_cell(judged, j)} | {counted(j.mechanism)} | {number} | "
                   f"{number_cell(judged, j)} | {seed_effects(judged, j)} | {decision_text(v)} | "
                   f"{p_text(v.p) if v.decision != lessons.NOT_JUDGED else '-'} | {effect_text(judged.number.key, v, judged.seeds)} | "
                   f"{also_text(j) or '-'} | "
                   f"{'; '.join(rival_text(judged.number, r, rv) for r, rv in j.rivals.items()) or '-'} | "
                   f"{cost_text(j) or '-'} |")
    return "\n".join(out) if len(out) > 2 else ""


def fixes_table(summaries):
    """The closing list's fixes (lessons.FIXES), each in the regime where its failure happens: judged_rows."""
    return judged_rows(lessons.FIXES, summaries, "item", only_run=True)


def field_table(summaries, only_run=False):
    """The field's methods (lessons.FIELD), each in the regime where the failure it answers happens: judged_rows."""
    return judged_rows(lessons.FIELD, summaries, "method", only_run)


def short_table(collection, summaries, first):
    """One row a fix or method: its failure present (N of M), its mechanism acted, its number without -> with over
    the seeds, the verdict and its p, the effect, beside each rival."""
    out = [f"| {first} | its failure present | its mechanism acted | its number | without -> with | verdict | p | "
           "the effect | beside its rival |", "|---|---|---|---|---|---|---|---|---|"]
    for name, judged in collection.items():
        j = judgement(judged, summaries)
        v = j.verdict
        number = named(judged.number.key)
        out.append(f"| {name} | {counted(j.failure) if j.seeds else '-'} | "
                   f"{counted(j.mechanism) if j.seeds else '-'} | {number}, {judged.number.side} | "
                   f"{number_cell(judged, j) if j.seeds else 'not run yet'} | "
                   f"{decision_text(v) if j.seeds else '-'} | "
                   f"{p_text(v.p) if j.seeds and v.decision != lessons.NOT_JUDGED else '-'} | "
                   f"{size_text(judged.number.key, v.effect) if j.seeds else '-'} | "
                   f"{'; '.join(rival_text(judged.number, r, rv) for r, rv in j.rivals.items()) or '-'} |")
    return "\n".join(out)


def claims_table():
    """Every judged method, its source's claim and where it says it (lab/lessons.py; no runs needed)."""
    out = ["| method | its source's claim | source |", "|---|---|---|"]
    for name, judged in lessons.judged():
        out.append(f"| {name} | {judged.record.claim} | {judged.record.source} |")
    return "\n".join(out)


def named(key):
    """A number's words (lab/metrics.py), its pipes escaped for a Markdown table."""
    return metrics.words(key).replace("|", "\\|")


def fmt_metric(key, value):
    """A summary number as the tables print it: a share in percent (two digits under 10%), else 3 digits."""
    if value is None or not math.isfinite(value):
        return "-"
    if key in metrics.SHARES:
        return f"{value * 100:.2g}%" if abs(value) < 0.1 else f"{value:.0%}"
    return f"{value:.3g}"


def moved(run):
    """The first movers of a run in the order they moved: 'kl 90, eval_acc 100, ...'."""
    found = sorted((step, key) for key, step in run["moves"].items() if step is not None)
    return ", ".join(f"{key} {step}" for step, key in found) or "nothing moved"


def lesson_table(name, summaries):
    """A lesson seed by seed: its rule and its verdict over the seeds, then a row a seed with its failure in the broken
    run, its number in each run (the fix's one-change runs too), the fix's signed effect, and what moved first in the
    broken run."""
    lesson = lessons.LESSONS[name]
    j = judgement(lesson, summaries)
    if not j.seeds:
        return ""
    names = [*lesson.experiments, *lesson.parts]
    cell = NUMBER_CELLS.get(lesson.number.key, lambda r: fmt_metric(lesson.number.key, r.get(lesson.number.key)))
    v = j.verdict
    found = f", {p_is(v.p)}; {effect_text(lesson.number.key, v, lesson.seeds)}" if v.decision != lessons.NOT_JUDGED else ""
    out = [f"**{name}** ({rule_text(lesson)}): {decision_text(v)}{found}", "",
           f"| seed | {names[0]}: its failure | " + " | ".join(f"{n}: {NUMBER_TITLES.get(lesson.number.key, '')}"
                                                            for n in names)
           + f" | the effect | moved first in {names[0]} |", "|---|" + "---|" * (len(names) + 3)]
    n = lesson.number
    for s in j.seeds:
        runs = [summaries.get(e, {}).get(s) for e in names]
        failure = FAILURE_CELLS.get(lesson.record.failure.key, lambda r: "-")(runs[0]) if runs[0] else "-"
        effect = "-"
        if runs[0] and runs[1] and all(run_folders.is_number(r.get(n.key)) for r in runs[:2]):
            effect = size_text(n.key, n.gain(runs[0], runs[1]))
        out.append(f"| {s[4:]} | {failure} | " + " | ".join(cell(r) if r else "-" for r in runs) + f" | {effect} | "
                   f"{moved(runs[0]) if runs[0] and 'moves' in runs[0] else '-'} |")
    return "\n".join(out)


def rule_text(judged):
    """'judged where no clip's greedy accuracy falls 15 points or more from its peak; held where the book's clip: ...':
    the failure the run without must show, and the test, as they run."""
    without, with_ = (lessons.LABELS.get(n, n) for n in judged.experiments)
    return f"judged where {without}: {judged.record.failure.rule}; held where {with_}: {judged.rule}"


def pct(x, digits=0):
    return "-" if x is None or not math.isfinite(x) else f"{x:.{digits}%}"


def greedy(r):
    return f"{pct(r['peak'], 1)} ({r['peak_step']}) -> {pct(r['final'], 1)}" if "peak" in r else "-"


def sampled(r):
    return f"{pct(r['sampled_peak'])} -> {pct(r['sampled_final'])}" if r.get("sampled_final") is not None else "-"


def kept(r):
    """The total reward's lowest 50-step mean after its peak, as a share of that peak."""
    return pct(r.get("reward_kept"))


def of_ln_v(r):
    return pct(r["entropy_peak"] / r["ln_vocab"]) if math.isfinite(r["entropy_peak"] + r["ln_vocab"]) else "-"


NUMBER_CELLS = {"final": greedy, "sampled_final": sampled, "reward_kept": kept}  # a lesson's number, as its table shows
NUMBER_TITLES = {"final": "greedy peak (step) -> end", "sampled_final": "sampled peak -> end",
                 "reward_kept": "reward kept, of its peak"}
FAILURE_CELLS = {  # a lesson's failure in its broken run, as its table shows it
    "drop": lambda r: f"greedy falls {pct(r.get('drop'))}",
    "entropy_peak_share": lambda r: f"entropy {of_ln_v(r)} of ln V, sampled falls {pct(r.get('sampled_drop'))}",
    "reward_kept": lambda r: f"sampled falls {pct(r.get('sampled_drop'))}, reward keeps {kept(r)}",
}


# ---------------------------------------------------------------- 3. results.jsonl: the recorded runs

class ResultsError(Exception):
    """results.jsonl missing, cut or not as this code writes it: one line that says where."""


def round_numbers(x, digits=6):
    """x with every float rounded to `digits` significant digits (nan and inf kept), in lists and dicts."""
    if isinstance(x, float):
        return float(f"{x:.{digits}g}") if math.isfinite(x) else x
    if isinstance(x, dict):
        return {k: round_numbers(v, digits) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [round_numbers(v, digits) for v in x]
    return x


def run_record(name, seed, folder, flags, profiled=False):
    """The line results.jsonl keeps of a finished run: which experiment and seed, the train.py flags it
    ran with, the commit and machine its config.json names, and its summary (6 significant digits);
    with profiled, every logged metric's first / last 10 steps, lowest and highest too."""
    with open(os.path.join(folder, "config.json")) as f:
        config = json.load(f)
    rows = run_folders.read_metrics(os.path.join(folder, "metrics.jsonl"))
    record = {"experiment": name, "seed": seed, "rounding": rounding_of(config), "threads": config.get("threads", 1),
              "flags": " ".join(flags), "commit": config.get("commit"), "machine": config.get("machine"),
              "summary": round_numbers(run_summary(rows)), "step_moves": round_numbers(step_moves(rows))}
    if profiled:
        record["profile"] = round_numbers(metric_profile(rows))
    return record


def rounding_of(config):
    """The rounding a run folder's config.json names (runs older than that record: by their threads)."""
    return config.get("rounding") or provenance.rounding_name(config.get("threads", 1), {})


def record_key(r):
    return r["experiment"], r["seed"], r["rounding"]


def load_results(path=RESULTS):
    """The records of results.jsonl, in order; ResultsError, in one line, for a missing file, a line that
    is not whole JSON (cut, or edited by hand) or a record that lacks a field."""
    if not os.path.isfile(path):
        raise ResultsError(f"{path} is missing: `python experiments.py table --write` records the runs of runs/exp "
                           "there (git checkout results.jsonl restores the shipped one)")
    records = []
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, start=1):
            try:
                record = json.loads(line)
                missing = [k for k in ("experiment", "seed", "rounding", "flags", "summary") if k not in record]
            except ValueError as e:
                raise ResultsError(f"{path}:{lineno}: not a whole JSON line (cut, or edited by hand): {e}") from None
            if missing:
                raise ResultsError(f"{path}:{lineno}: a record without {', '.join(missing)}")
            records.append(record)
    return records


def write_results(records, path=RESULTS):
    """Write the records, one JSON line each (atomically: a temp file renamed)."""
    with open(path + ".tmp", "w", encoding="utf-8") as f:
        f.writelines(json.dumps(r, sort_keys=True, separators=(",", ":")) + "\n" for r in records)
    os.replace(path + ".tmp", path)


def merge_results(old, new, order):
    """old's records with new's in place of those of the same (experiment, seed, rounding), sorted by
    rounding (provenance.ROUNDINGS' order), then by `order` (experiment names), then by seed. An old record of an
    experiment that `order` no longer names is dropped: no page can judge it, and no command can run it again."""
    merged = {record_key(r): r for r in old if r["experiment"] in order}
    merged.update({record_key(r): r for r in new})
    rank = {name: i for i, name in enumerate(order)}
    rounding = {name: i for i, name in enumerate(provenance.ROUNDINGS)}
    return sorted(merged.values(), key=lambda r: (rounding.get(r["rounding"], len(rounding)), r["rounding"],
                                                  rank.get(r["experiment"], len(rank)),
                                                  r["experiment"], r["seed"]))


def summaries_from_results(records, rounding="plain"):
    """{experiment: {"seed<k>": summary}} of the records under one rounding, in their order."""
    out = {}
    for r in records:
        if r["rounding"] == rounding:
            out.setdefault(r["experiment"], {})[f"seed{r['seed']}"] = older(r["summary"])
    return out


def older(summary):
    """A summary recorded before some of run_summary's numbers existed, with those it can give from its own numbers
    filled in (a record of an earlier commit: `git show COMMIT:results.jsonl`, judged by today's rules)."""
    s = dict(summary)
    if "sampled_drop" not in s and s.get("sampled_peak") is not None and s.get("sampled_final") is not None:
        s["sampled_drop"] = s["sampled_peak"] - s["sampled_final"]
    if "reward_kept" not in s and s.get("reward_peak50"):
        s["reward_kept"] = s["reward_low_after_peak"] / s["reward_peak50"]
    if "low_after_peak" not in s and s.get("evals"):
        s["low_after_peak"] = low_after_peak(s["evals"])
    if "entropy_peak_share" not in s and s.get("entropy_peak") is not None and s.get("ln_vocab"):
        s["entropy_peak_share"] = s["entropy_peak"] / s["ln_vocab"]
    return s


def differences(recorded, found, path=""):
    """[(key path, recorded value, found value)] where two summaries differ (nan equals nan)."""
    if isinstance(recorded, dict) and isinstance(found, dict):
        return [d for k in sorted(recorded.keys() | found.keys(), key=str)
                for d in differences(recorded.get(k), found.get(k), f"{path}.{k}" if path else str(k))]
    if isinstance(recorded, list) and isinstance(found, list) and len(recorded) == len(found):
        return [d for i, (a, b) in enumerate(zip(recorded, found)) for d in differences(a, b, f"{path}[{i}]")]
    same = recorded == found or (isinstance(recorded, float) and isinstance(found, float)
                                 and math.isnan(recorded) and math.isnan(found))
    return [] if same else [(path, recorded, found)]


def check_runs(records, runs_dir, roundings=None):
    """The run folders in runs_dir (and its roundings' folders, provenance.rounding_dir) that results.jsonl
    records, against the record -> (lines, number of runs checked). A run made on the record's machine, under
    the record's rounding, is compared number by number: 'as recorded', or its first number that differs.
    One made on another machine or under another rounding (compared with the record's plain run where none
    is recorded under its own) differs from the first steps by float rounding alone, so its lessons' and
    fixes' verdicts are compared with the record's instead (verdict_lines). A run of edited code says so."""
    lines, other, checked = [], [], 0
    recorded = {record_key(r): r for r in records}
    for rounding in roundings or provenance.ROUNDINGS:
        for r in records:
            if r["rounding"] not in (rounding, "plain") or (r["rounding"] == "plain" and rounding != "plain"
                                                            and (r["experiment"], r["seed"], rounding) in recorded):
                continue
            folder = os.path.join(provenance.rounding_dir(runs_dir, rounding), r["experiment"], f"seed{r['seed']}")
            if not all(os.path.isfile(os.path.join(folder, name)) for name in ("metrics.jsonl", "config.json")):
                continue  # no run there, or none that table --write could have recorded
            with open(os.path.join(folder, "config.json")) as f:
                config = json.load(f)
            if rounding_of(config) != rounding:
                continue
            checked += 1
            name = f"{r['experiment']} seed {r['seed']}" + (f" ({rounding})" if rounding != "plain" else "")
            edited = (config.get("code") or {}).get("edited")
            if edited:
                lines.append(f"{name}: ran with {', '.join(edited)} edited, not commit {config.get('commit')}'s code")
            found = round_numbers(run_summary(run_folders.read_metrics(os.path.join(folder, "metrics.jsonl"))))
            if config.get("machine") != r.get("machine") or rounding != r["rounding"]:
                other.append((r, found, config, rounding))
                continue
            diff = [d for d in differences(r["summary"], found) if d[0] != "minutes"]  # time is not a result
            lines.append(f"{name}: as recorded ({count_numbers(found)} numbers)" if not diff else
                         f"{name}: {difference_text(*diff[0], folder)}"
                         + (f" (and {len(diff) - 1} more)" if len(diff) > 1 else ""))
    return lines + verdict_lines(other), checked


def verdict_lines(other):
    """For runs made elsewhere than their record [(record, summary found, config, rounding)]: where each side
    ran, and each lesson's, fix's and variant's verdicts here against the record's over the same seeds (its
    mechanism's and its outcome's), 'agrees' or 'DIFFERS' with the seeds that differ."""
    if not other:
        return []
    theirs = sorted({f"{r.get('machine')} ({r['rounding']})" for r, *_ in other})
    ours = sorted({f"{c.get('machine')} ({rounding})" for _, _, c, rounding in other})
    out = []
    for rounding in dict.fromkeys(rd for *_, rd in other):
        here, there = {}, {}
        for r, found, _, rd in other:
            if rd == rounding:
                here.setdefault(r["experiment"], {})[f"seed{r['seed']}"] = found
                there.setdefault(r["experiment"], {})[f"seed{r['seed']}"] = r["summary"]
        for name, judged in lessons.judged():
            ours_j, theirs_j = judgement(judged, here), judgement(judged, there)
            if not both_ran(ours_j):  # no seed of both runs here: no pair to judge
                continue
            parts, differ = [], set()
            for what, a, b in (("failure present", ours_j.failure, theirs_j.failure),
                               ("mechanism acted", ours_j.mechanism, theirs_j.mechanism)):
                parts.append(f"{what} in {sum(bool(h) for h, _ in a.values())} of {len(a)} seeds here, "
                             f"{sum(bool(h) for h, _ in b.values())} in the record")
                differ |= {s[4:] for s in a if s in b and a[s][0] != b[s][0]}
            ours_v, theirs_v = ours_j.verdict, theirs_j.verdict
            parts.append(f"{decision_text(ours_v)} here, {decision_text(theirs_v)} in the record")
            same = ours_v.decision == theirs_v.decision and ours_v.other_way == theirs_v.other_way
            out.append(f"{name}{f' ({rounding})' if rounding != 'plain' else ''}: {'; '.join(parts)}: "
                       + ("agrees" if same and not differ else "DIFFERS" + (
                           f" (seed{'s' * (len(differ) > 1)} {', '.join(sorted(differ))})" if differ else "")))
    head = (f"The record's runs came from {'; '.join(theirs)}; these {len(other)} ran on {'; '.join(ours)}. A float "
            "summed in another order changes every number from the first steps, so they are compared by their "
            "lessons', fixes' and variants' verdicts, not number by number")
    return [head + (":" if out else ". They make up no lesson's, fix's or variant's pair, so there is no verdict to "
                    "compare."), *out]


def difference_text(path, recorded, found, folder):
    """One difference as check says it: a number that vanished, appeared or became nan, in those words; else
    its two values."""
    if found is None:
        return f"{path} vanished from {folder}, {recorded} in results.jsonl"
    if recorded is None:
        return f"{path} appeared in {folder} ({found}), none in results.jsonl"
    if isinstance(found, float) and math.isnan(found):
        return f"{path} became nan in {folder}, {recorded} in results.jsonl"
    return f"{path} is {found} in {folder}, {recorded} in results.jsonl"


def count_numbers(x):
    if isinstance(x, dict):
        return sum(count_numbers(v) for k, v in x.items() if k != "minutes")
    if isinstance(x, list):
        return sum(count_numbers(v) for v in x)
    return 1


# ---------------------------------------------------------------- 4. the pages' generated parts
# A generated part sits between `<!-- generated from results.jsonl: KIND ARGS -->` and
# `<!-- end of generated part -->`; PARTS[KIND](records, ARGS, the part's present text) writes it again.

PART = re.compile(r"(<!-- generated from results\.jsonl: ([^>]*?) -->\n)(.*?)(<!-- end of generated part -->)", re.S)


def span(values, fmt):
    """'a-b' over seeds (min-max as fmt formats them), or 'a' where they agree; '-' without values."""
    values = finite(values)
    if not values:
        return "-"
    lo, hi = fmt(min(values)), fmt(max(values))
    if lo == hi:
        return lo
    if hi.startswith("-"):  # both below 0: a dash between would read as a minus
        return f"{lo} to {hi}"
    return f"{lo.rstrip('%')}-{hi}" if lo.endswith("%") and hi.endswith("%") else f"{lo}-{hi}"


def percent(x):
    return f"{x:.0%}"


def headline(name, summaries):
    """One line of what a lesson's runs did over their seeds, rounded: its failure in the broken run, and its
    number in each run."""
    lesson = lessons.LESSONS[name]
    j = judgement(lesson, summaries)
    key, fkey = lesson.number.key, lesson.record.failure.key
    lb, lf = (lessons.LABELS.get(n, n) for n in lesson.experiments)
    fmt = lambda k: (lambda x: fmt_metric(k, x))  # noqa: E731
    values = [span([pair[i].get(key) for pair in j.pairs if pair[i]], fmt(key)) for i in (1, 2)]
    return (f"{lb}: {named(fkey)} {span([a.get(fkey) for _, a, _ in j.pairs if a], fmt(fkey))}, "
            f"{named(key)} {values[0]}; {lf}: {values[1]}")


def pairs_from_results(records):
    """{experiment: {"seed<k>" or "seed<k> <rounding>": summary}}: every recorded seed under every rounding, each
    (seed, rounding) pair a run of its own (plain's keep their plain seed label)."""
    out = {}
    for r in records:
        label = f"seed{r['seed']}" + (f" {r['rounding']}" if r["rounding"] != "plain" else "")
        out.setdefault(r["experiment"], {})[label] = older(r["summary"])
    return out


def machine_name(machine):
    """'an Intel Xeon (AVX512)' of config.json's 'x86_64, 2 CPUs (Intel(R) Xeon(R) Processor), AVX512'."""
    m = re.fullmatch(r"([^,]*), \d+ CPUs(?: \((.*)\))?(?:, (\w+))?.*", str(machine))
    if not m:
        return str(machine)
    model = re.sub(r"\((R|TM)\)|\bProcessor\b|\bCPU\b|@.*", "", m[2] or m[1]).split()
    name = " ".join(model[:2]) if model else m[1]
    return f"{'an' if name[:1].upper() in 'AEIOU' else 'a'} {name}" + (f" ({m[3]})" if m[3] else "")


def where_recorded(records, names):
    """'an Intel Xeon (AVX512), one thread': the machine the named experiments' records ran on (several: each)."""
    machines = sorted({machine_name(r.get("machine")) for r in records if r["experiment"] in names})
    return "; ".join(machines) or "no machine yet"


def verdict_part(records, args, _):
    """`verdict LESSON`: one line, the lesson's mechanism and its verdict over its seeds, with its p, its effect, its
    interval, the probability of improvement and the detectable effect; its failure's, its one-change runs', the
    numbers shown beside, and the machine its runs ran on; `verdict LESSON table`: beneath it, a row for each run (its
    number and its mechanism over the seeds), the one-change runs' and the rivals' included."""
    lesson = lesson_of(args[0])
    summaries = summaries_from_results(records)
    j = judgement(lesson, summaries)
    v, key = j.verdict, lesson.number.key
    mechanism, finds = lesson.words
    alone = "; ".join(f"{lessons.LABELS.get(p, p)} alone: {decision_text(pv)}, {p_is(pv.p)}, "
                      f"{size_text(key, pv.effect)}" for p, pv in j.parts.items())
    also = also_text(j)
    p = f", {p_is(v.p)}" if v.decision != lessons.NOT_JUDGED else ""
    line = (f"**{mechanism} in {counted(j.mechanism)} seeds; {finds}: {decision_text(v)}{p}**. "
            f"{'Its effect: ' + effect_text(key, v, lesson.seeds) + '. ' if v.decision != lessons.NOT_JUDGED else ''}"
            f"Its failure was there in {counted(j.failure)}{'. One change of the two: ' + alone if alone else ''}"
            f"{'. Beside it, ' + also if also else ''}. On {where_recorded(records, lesson.experiments)}.\n")
    if args[1:] != ["table"]:
        return line
    return line + "\n" + lesson_runs_table(lesson, summaries) + "\n"


def lesson_runs_table(lesson, summaries):
    """A lesson's runs (broken, fixed, the one-change runs, the rivals), one row each over its seeds (min-max): its
    failure's number, the lesson's number, its mechanism's, its minutes."""
    n, m, f = lesson.number, lesson.record.mechanism, lesson.record.failure
    out = [f"| run | seeds | {named(f.key)} | {named(n.key)} | {named(m.key)} | "
           "minutes |", "|---|---|---|---|---|---|"]
    for name in [*lesson.experiments, *lesson.parts, *lesson.record.rivals]:
        runs = list(summaries.get(name, {}).values())
        if runs:
            col = lambda key: span([r.get(key) for r in runs], lambda x: fmt_metric(key, x))  # noqa: E731
            out.append(f"| {lessons.LABELS.get(name, name)} | {len(runs)} | {col(f.key)} | {col(n.key)} | "
                       f"{col(m.key)} | {span([r.get('minutes') for r in runs], lambda x: f'{x:.1f}')} |")
    return "\n".join(out)


def lesson_part(records, args, _):
    """`lesson LESSON [ROUNDING]`: the lesson's table, seed by seed, under one rounding (default: plain)."""
    lesson_of(args[0])
    return lesson_table(args[0], summaries_from_results(records, *args[1:2])) + "\n"


def fixes_part(records, args, _):
    """`fixes`: the closing list's table, seed by seed; `fixes short`: one row an item, for the README: its
    mechanism, its number's range over seeds without -> with, beside its rival, its cost."""
    summaries = summaries_from_results(records)
    return (fixes_table(summaries) if not args else short_table(lessons.FIXES, summaries, "item")) + "\n"


def field_part(records, args, _):
    """`field`: the field's variants, each in the regime of the failure it answers (field_table); `field short`: one
    row each, for the README."""
    summaries = summaries_from_results(records)
    return (field_table(summaries) if not args else short_table(lessons.FIELD, summaries, "method")) + "\n"


def rules_part(records, args, _):
    """`rules`: each lesson's, fix's and method's test as the record runs it: its number and its way, the smallest
    effect worth detecting on it, the seeds its runs need (lessons.seeds_for, from the run without's seeds 0-4) and
    the seeds each has, and the effect the test detects with 80% power at those seeds."""
    summaries = summaries_from_results(records)
    out = ["| item | its number, its way | worth detecting | seeds it needs (from the run without's 0-4) | seeds run "
           "(without, with) | detectable at them, 80% power |", "|---|---|---|---|---|---|"]
    for name, judged in lessons.judged():
        n, j = judged.number, judgement(judged, summaries)
        v = j.verdict
        needs, read = seeds_needed(judged, summaries)
        run = f"{v.n[0]}, {v.n[1]}" if v.decision != lessons.NOT_JUDGED else v.why
        out.append(f"| {name} | {named(n.key)}, {n.side} | "
                   f"{size_text(n.key, n.worth, sign=False)} | {needs if needs else f'- ({read} of 5 read)'} | {run} | "
                   f"{size_text(n.key, v.detectable, sign=False) if v.decision != lessons.NOT_JUDGED else '-'} |")
    return "\n".join(out) + "\n"


def claims_part(records, args, _):
    """`claims`: every judged method's source and its claim, as lab/lessons.py states them (no runs needed)."""
    return claims_table() + "\n"


def experiments_part(records, args, _):
    """`experiments [NAME ...]`: mean ± std over seeds of the experiments named (all without names)."""
    return experiments_table(summaries_from_results(records), args or None) + "\n"


def signs_part(records, args, _):
    """`signs NAME ...`: each experiment's runaway signs over its seeds (min-max): the learner's highest
    20-step entropy as a share of ln V, the sampled and the greedy held-out accuracy, peak -> final."""
    summaries = summaries_from_results(records)
    out = ["| experiment | seeds | entropy, highest, of ln V | sampled accuracy: peak -> final | "
           "greedy accuracy: peak -> final |", "|---|---|---|---|---|"]
    for name in args:
        runs = list(summaries.get(name, {}).values())
        if runs:
            ratio = [r["entropy_peak"] / r["ln_vocab"] for r in runs]
            out.append(f"| {name} | {len(runs)} | {span(ratio, percent)} | "
                       f"{span([r.get('sampled_peak') for r in runs], percent)} -> "
                       f"{span([r.get('sampled_final') for r in runs], percent)} | "
                       f"{span([r.get('peak') for r in runs], percent)} -> {span([r.get('final') for r in runs], percent)} |")
    return "\n".join(out) + "\n"


def by_seed_part(records, args, _):
    """`by_seed NAME ...`: each experiment's seeds, one row each: the learner's highest entropy as a share of
    ln V, greedy accuracy peak (step) -> final, sampled accuracy peak -> final."""
    summaries = summaries_from_results(records)
    out = ["| experiment | seed | entropy, highest, of ln V | greedy: peak (step) -> final | sampled: peak -> final |",
           "|---|---|---|---|---|"]
    for name in args:
        for seed, r in summaries.get(name, {}).items():
            out.append(f"| {name} | {seed[4:]} | {of_ln_v(r)} | {greedy(r)} | {sampled(r)} |")
    return "\n".join(out) + "\n"


def drops_part(records, args, _):
    """`drops NAME ...`: how far each experiment's greedy accuracy falls, over its seeds (min-max): its peak, its
    end, its fall from the peak, and the step of its first evaluation 10 points below the peak (first_moves;
    'never' in a seed that stays within 10 points)."""
    summaries = summaries_from_results(records)
    moves = {(r["experiment"], f"seed{r['seed']}"): r.get("step_moves") or [None, None] for r in records
             if r["rounding"] == "plain"}  # report.step_moves, beside each summary
    out = ["| experiment | seeds | greedy peak | end | fall from the peak | 10 points below the peak at step | "
           "move a step (ppo_kl, 1e-3), 10-30% of the run -> last 20% |", "|---|---|---|---|---|---|---|"]
    for name in args:
        runs = list(summaries.get(name, {}).values())
        if runs:
            kl = [moves[name, seed] for seed in summaries[name]]
            col = lambda key: span([r.get(key) for r in runs], percent)  # noqa: E731
            fell = [(r.get("moves") or {}).get("eval_acc") for r in runs]
            steps = span([s for s in fell if s is not None], lambda x: f"{x:.0f}") if any(fell) else "never"
            never = sum(s is None for s in fell)
            steps += f" (never in {never})" if never and any(fell) else ""
            early, late = (span([1000 * k[i] for k in kl if run_folders.is_number(k[i])],
                                lambda x: f"{x:.1f}".replace("-0.0", "0.0")) for i in (0, 1))
            out.append(f"| {name} | {len(runs)} | {col('peak')} | {col('final')} | {col('drop')} | {steps} | "
                       f"{early} -> {late} |")
    return "\n".join(out) + "\n"


def stale_part(records, args, _):
    """`stale NAME ...`: what a stale sampler does to each experiment over its seeds (min-max): the share of
    steps whose gradient norm passed its limit, the sampler's KL to pi_old a token, and greedy accuracy at its
    lowest after step 0 and at the end."""
    summaries = summaries_from_results(records)
    out = ["| experiment | seeds | steps whose gradient norm passed 1 | KL(sampler \\|\\| pi_old) a token | "
           "greedy: lowest after step 0 | greedy: end | what it drops |", "|---|---|---|---|---|---|---|"]
    for name in args:
        runs = list(summaries.get(name, {}).values())
        if runs:
            col = lambda key, fmt: span([r.get(key) for r in runs], fmt)  # noqa: E731
            dropped = "; ".join(f"{COST_NAMES[key]} {col(key, lambda x: fmt_metric(key, x))}" for key in DROPS
                                if any(run_folders.is_number(r.get(key)) and r[key] > 0 for r in runs)) or "-"
            out.append(f"| {name} | {len(runs)} | {col('grad_limited_steps', percent)} | "
                       f"{col('mean_sampler_kl_k3', lambda x: f'{x:.3f}')} | {col('eval_low', percent)} | "
                       f"{col('final', percent)} | {dropped} |")
    return "\n".join(out) + "\n"


def roundings_part(records, args, _):
    """`roundings`: each numbered lesson's verdict under each rounding recorded, each over that rounding's seeds."""
    names = [n for n in provenance.ROUNDINGS if any(r["rounding"] == n for r in records)]
    out = ["| lesson | " + " | ".join(names) + " |", "|---|" + "---|" * len(names)]
    for lesson, number in sorted(lessons.NUMBERED.items(), key=lambda x: x[1]):
        judged = lessons.LESSONS[lesson]
        each = [judgement(judged, summaries_from_results(records, n)) for n in names]
        cells = [f"{decision_text(j.verdict)}, {p_is(j.verdict.p)}" if j.seeds and j.verdict.decision !=
                 lessons.NOT_JUDGED else decision_text(j.verdict) if j.seeds else "-" for j in each]
        out.append(f"| {number}. {lesson} | " + " | ".join(cells) + " |")
    return "\n".join(out) + "\n"


def default_run_part(records, args, _):
    """`default_run`: python train.py's run (the experiment `default`), its greedy accuracy at the start, at
    step 10, its peak and at the end, each seed a row; then the machine they ran on."""
    out = ["| seed | step 0 | step 10 | peak (step) | step 100 |", "|---|---|---|---|---|"]
    for seed, s in summaries_from_results(records).get("default", {}).items():
        at = dict((step, acc) for step, acc in s["evals"])
        out.append(f"| {seed[4:]} | {pct(at.get(0), 1)} | {pct(at.get(10), 1)} | {pct(s['peak'], 1)} ({s['peak_step']}) "
                   f"| {pct(s['final'], 1)} |")
    return "\n".join(out) + f"\n\nOn {where_recorded(records, ['default'])}, one thread a run.\n"


def lesson_of(name):
    """lessons.LESSONS[name]; a name lab/lessons.py does not have (a page's part written for an older lab/lessons.py) is a
    ResultsError that says so."""
    if name not in lessons.LESSONS:
        raise ResultsError(f"names {name!r}, which lab/lessons.py does not have: remove the part, or name one that it has")
    return lessons.LESSONS[name]


def rule_part(records, args, _):
    """`rule LESSON`: the failure that makes a seed count and the check a lesson holds by in it, as lab/lessons.py runs
    them (no runs needed)."""
    judged = lesson_of(args[0])
    without, with_ = (lessons.LABELS.get(n, n) for n in judged.experiments)
    return (f"*The failure, seed by seed:* {without}: {judged.record.failure.rule}. *The test:* {with_} against "
            f"{without}, {judged.rule}, over {judged.seeds} seeds of each.\n")


def header_part(records, args, _):
    """`header`: which code and machine the recorded runs come from, and how many there are."""
    commits = sorted({str(r.get("commit")) for r in records})
    machines = sorted({str(r.get("machine")) for r in records})
    by_rounding = {n: sum(r["rounding"] == n for r in records) for n in dict.fromkeys(r["rounding"] for r in records)}
    runs = ", ".join(f"{n} {name}" for name, n in by_rounding.items())
    return (f"Recorded runs: {len(records)} ({runs}), at commit{'s' * (len(commits) > 1)} {', '.join(commits)}, "
            f"on {'; '.join(machines)}.\n")


def metrics_column_part(records, args, text):
    """`metrics_column`: a table whose first column names metrics in backticks; its column headed 'in words' is
    written from lab/metrics.py (the words the figures and tables use), its column headed 'default run' from the
    profile of the default run (seed 0): first 10 -> last 10 steps (lowest .. highest). The other columns are the
    page's own prose."""
    default = next((r for r in records if r["experiment"] == "default" and r["seed"] == 0 and r["rounding"] == "plain"
                    and "profile" in r), None)
    if default is None:
        raise ResultsError("results.jsonl has no profile of the default run, seed 0 (python experiments.py default "
                           "--seeds 0, then table --write)")
    rows = [table_cells(line) for line in text.rstrip("\n").split("\n")]
    column = next(i for i, title in enumerate(rows[0]) if title.startswith("default run"))
    words = next(i for i, title in enumerate(rows[0]) if title.startswith("in words"))
    for cells in rows[2:]:
        names = re.findall(r"`(\w+)`", cells[0])
        cells[column] = profile_cell(default["profile"], names)
        cells[words] = "; ".join(metrics.LOGGED[name].replace("|", "\\|") for name in names)
    return "".join("| " + " | ".join(cells) + " |\n" for cells in rows)


def table_cells(line):
    """The cells of a Markdown table row, stripped; an escaped pipe (\\|) stays inside its cell."""
    return [c.strip() for c in re.split(r"(?<!\\)\|", line.strip()[1:-1])]


def profile_cell(profile, names):
    """'a -> b (lo .. hi)' of each named metric the default run logs ('name a -> b ...; ...' for several; one
    number where it never moved)."""
    logged = [n for n in names if n in profile]
    if not logged:
        return "not logged"
    g = lambda x: f"{x:.2g}" if 0 < abs(x) < 1e-3 else f"{x:,.0f}" if abs(x) >= 100 else f"{x:.3g}"  # noqa: E731
    parts = [g(a) if lo == hi else f"{g(a)} -> {g(b)} ({g(lo)} .. {g(hi)})"
             for a, b, lo, hi in (profile[n] for n in logged)]
    return parts[0] if len(logged) == 1 else "; ".join(f"{n} {p}" for n, p in zip(logged, parts))


def suites():
    """The commands that make the record, in the order EXPERIMENTS.md runs them: (command, experiments, seeds). The
    runs each record's seeds are set from (seeds 0-4 of every run without, and the runs a failure is seen against);
    each lesson at its seeds; the fixes and the field at 5; the seeds past 4 of each record that needs 8 or 10 (its
    runs, its one-change runs, its rivals); every experiment at 3."""
    five = list(range(5))
    out = [("withouts", list(dict.fromkeys(n for _, j in lessons.judged() for n in needed(j) if n != j.experiments[1])),
            five)]
    out += [(name, judged_runs(lessons.LESSONS[name]), list(range(lessons.LESSONS[name].seeds)))
            for name in lessons.NUMBERED]
    out.append(("fixes", list(dict.fromkeys(n for fix in lessons.FIXES.values() for n in judged_runs(fix))), five))
    out.append(("field", list(dict.fromkeys(n for v in lessons.FIELD.values() for n in judged_runs(v))), five))
    out += [(name, judged_runs(j), list(range(5, j.seeds))) for name, j in lessons.judged()
            if j.kind != "lesson" and j.seeds > 5]
    out.append(("all", list(lessons.EXPERIMENTS), [0, 1, 2]))
    return out


def times_part(records, args, _):
    """`times`: how long each suite takes, from the record: the minutes of its recorded runs (plain rounding;
    each timed with two runs side by side) added up, and half that, about the wall time at `--jobs 2`."""
    minutes = {(r["experiment"], r["seed"]): r["summary"].get("minutes") for r in records if r["rounding"] == "plain"}
    out = ["| command | runs recorded | minutes, added | at --jobs 2, about |", "|---|---|---|---|"]
    for command, names, seeds in suites():
        found = [minutes[n, s] for n in names for s in seeds if run_folders.is_number(minutes.get((n, s)))]
        seeds_text = ",".join(map(str, seeds))
        out.append(f"| `python experiments.py {command} --seeds {seeds_text} --jobs 2` | {len(found)} of "
                   f"{len(names) * len(seeds)} | {sum(found):.0f} | {sum(found) / 2:.0f} min |")
    return "\n".join(out) + "\n"


PARTS = {"header": header_part, "rules": rules_part, "verdict": verdict_part, "lesson": lesson_part, "fixes": fixes_part,
         "field": field_part, "claims": claims_part, "rule": rule_part, "experiments": experiments_part, "signs": signs_part, "by_seed": by_seed_part,
         "stale": stale_part, "roundings": roundings_part, "drops": drops_part, "times": times_part,
         "default_run": default_run_part, "metrics_column": metrics_column_part}


def generate(text, records, page="page"):
    """The page's text with each generated part written again from the records."""
    def again(m):
        kind, *args = m[2].split()
        if kind not in PARTS:
            raise ResultsError(f"{page}: a generated part of unknown kind {kind!r} (known: {', '.join(PARTS)})")
        try:
            return m[1] + PARTS[kind](records, args, m[3]) + m[4]
        except ResultsError as e:  # a part that cannot be written: it says why, the page and the part say where
            raise ResultsError(f"{page}: the generated part '{m[2]}' {e}") from None
    return PART.sub(again, text)


def stale_parts(records, root=ROOT):
    """[one line per page whose generated parts differ from what the records give: the page, the part, the
    first line that differs]: what the suite asserts is empty."""
    out = []
    for page in PAGES:
        with open(os.path.join(root, page), encoding="utf-8") as f:
            text = f.read()
        for old, new in zip(PART.finditer(text), PART.finditer(generate(text, records, page))):
            if old[3] != new[3]:
                line = next((a for a, b in zip(old[3].split("\n"), new[3].split("\n")) if a != b), old[3][-80:])
                out.append(f"{page}: the part '{old[2]}' differs from results.jsonl at: {line[:120]}")
    return out


def write_pages(records, root=ROOT):
    """Write every page's generated parts again from the records -> the pages that changed. Every page is
    generated before any is written, so that a part that cannot be generated leaves every page as it was."""
    pages = {}
    for page in PAGES:
        with open(os.path.join(root, page), encoding="utf-8") as f:
            text = f.read()
        pages[page] = (text, generate(text, records, page))
    for page, (text, new) in pages.items():
        if new != text:
            with open(os.path.join(root, page), "w", encoding="utf-8") as f:
                f.write(new)
    return [page for page, (text, new) in pages.items() if new != text]
