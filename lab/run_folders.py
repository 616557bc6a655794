"""Run folders, written and read: the lines train.py appends to a run's files (one flushed JSON line each), and a
run's metrics.jsonl, an experiment's seed folders, one metric's series and its trailing means. plot.py draws runs
through these, lab/report.py summarises them through these, so both read a run by the same rules; this file imports
neither matplotlib nor anything of training.

    python -c "import run_folders; print(run_folders.seed_folders('runs/exp/default'))"   # an experiment's seeds
"""
import json
import math
import os
import re
import sys

import numpy as np


# ---------------------------------------------------------------- written: train.py's lines

def append_jsonl(path, obj):
    with open(path, "a") as f:
        f.write(json.dumps(obj) + "\n")
        f.flush()
        os.fsync(f.fileno())


def format_line(step, total, s, elapsed_per_step):
    eta = elapsed_per_step * (total - step)
    kl = f" | kl {s['kl']:.4f}" if "kl" in s else ""
    return (f"step {step:4d}/{total} | loss {s['loss']:+.4f} | reward {s['reward']:.3f} "
            f"(correct {s['reward_correct']:.2f}) | len {s['resp_len']:.1f} | adv {s['adv_mean']:+.2f}"
            f"±{s['adv_std']:.2f} | ent {s['entropy']:.3f} | clip {s['clip_frac']:.3f}{kl} "
            f"| {s['tokens_per_s']:,.0f} tok/s | ETA {eta / 60:.1f}m")


def log_answers(path, step, ev, ev_sampled, n):
    """The answers to the first n held-out problems at this evaluation, one line each: the
    greedy one, and the sampled one with --eval-sampled (`python plot.py RUN --samples`)."""
    for i, (p, text, right) in enumerate(ev["answers"][:n]):
        line = {"step": step, "prompt": p.prompt, "answer": p.answer, "greedy": text, "greedy_correct": right}
        if ev_sampled is not None:
            line.update(sampled=ev_sampled["answers"][i][1], sampled_correct=ev_sampled["answers"][i][2])
        append_jsonl(path, line)


def log_samples(path, step, batch, G, n=4):
    """The first completion of the first n groups, with every reward component."""
    for i in range(0, min(len(batch.texts), n * G), G):
        p = batch.problems[i]
        append_jsonl(path, {"step": step, "prompt": p.prompt, "answer": p.answer, "completion": batch.texts[i],
                            **{("reward" if k == "total" else k): float(v[i]) for k, v in batch.rewards.items()}})


# ---------------------------------------------------------------- read

def is_number(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def read_metrics(path):
    """List of dicts, one per valid line; bad lines are skipped with a warning."""
    with open(path, encoding="utf-8", errors="replace") as f:
        lines = f.read().split("\n")
    # a file that ends in "\n" leaves one empty string after the last line
    complete = lines[-1] == ""
    records = []
    for lineno, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
            if not isinstance(rec, dict) or not is_number(rec.get("step")):
                raise ValueError("not a JSON object with a numeric 'step'")
        except ValueError as e:  # json.JSONDecodeError is a ValueError
            half_written = lineno == len(lines) and not complete
            what = "incomplete last line (run still writing?)" if half_written else "corrupt line"
            print(f"warning: {path}:{lineno}: skipped {what}: {e}", file=sys.stderr)
            continue
        records.append(rec)
    return records


def seed_folders(folder):
    """The seed<k>/ subfolders of an experiment folder that hold metrics, in seed order
    (none if there is no such folder): the one rule, which plot.py, lab/report.py and experiments.py use."""
    if not os.path.isdir(folder):
        return []
    subs = [d for d in os.listdir(folder) if re.fullmatch(r"seed\d+", d)
            and os.path.isfile(os.path.join(folder, d, "metrics.jsonl"))]
    return [os.path.join(folder, d) for d in sorted(subs, key=lambda d: int(d[4:]))]


def series(records, key):
    """(steps, values) as float arrays, over the records where `key` is a finite number."""
    pts = [(r["step"], r[key]) for r in records if is_number(r.get(key))]
    steps = np.array([p[0] for p in pts], dtype=float)  # (N,)
    values = np.array([p[1] for p in pts], dtype=float)  # (N,)
    return steps, values


# ----------------------------------------------------------------------------------
# trailing means: plot.py's smoothing (--smooth), lab/report.py's 20- and 50-step means


def trailing_window(n, frac):
    """Window length at each of n points: w_i = max(1, floor(frac * (i + 1)))."""
    i = np.arange(n)  # (n,)
    # + 1e-9: in floats 0.29 * 100 = 28.999999999999996, which must still floor to 29
    return np.maximum(1, np.floor(frac * (i + 1) + 1e-9).astype(int))  # (n,)


def moving_average(values, frac=0.25, window=None):
    """Trailing mean of the last w_i values at each point i: w_i from trailing_window, or
    with a fixed window, min(window, i + 1) (lab/report.py's 20-step means)."""
    x = np.asarray(values, dtype=float)  # (n,)
    w = trailing_window(len(x), frac) if window is None else np.minimum(window, np.arange(1, len(x) + 1))  # (n,)
    c = np.concatenate([[0.0], np.cumsum(x)])  # (n+1,) c[k] = sum of x[:k]
    end = np.arange(1, len(x) + 1)  # (n,) one past the last value in each window
    return (c[end] - c[end - w]) / w  # (n,)
