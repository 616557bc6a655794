"""Benchmark: what each rounding of this machine changes in the default run, and what it costs.

    python bench/bench_roundings.py                 # the default run's first 10 steps under each setting
    python bench/bench_roundings.py --steps 20

A learner's CPU sums floats in another order than ours. These settings give one machine other
orders (provenance.ROUNDINGS; experiments.py --rounding runs a lesson under them), and one more
that we measured and do not use: MKL held to AVX2. Each runs train.py's default for --steps
steps in a process of its own, then prints:
  first step   the first step whose loss differs from the plain run's (none: every step equal)
  |loss diff|  the largest difference from the plain run's loss over those steps
  same as      the settings whose losses equal this one's at every step
  s            the run's wall time, its evaluations left out (--eval-every past the last step)
A setting that equals plain at every step is no other rounding: it runs nothing new.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
from lab import provenance  # noqa: E402

# name -> (threads, environment): the roundings experiments.py offers, then one that changes nothing here
SETTINGS = {**{name: (threads, env) for name, (threads, env, _) in provenance.ROUNDINGS.items()},
            "mkl_avx2": (1, {"MKL_ENABLE_INSTRUCTIONS": "AVX2"})}


def losses(name, steps, folder):
    """The run's loss at each step and its wall time, under one setting."""
    threads, env = SETTINGS[name]
    start = time.perf_counter()
    subprocess.run([sys.executable, "train.py", "--steps", str(steps), "--eval-every", str(steps + 1),
                    "--seed", "0", "--threads", str(threads), "--runs-dir", folder, "--run-name", name],
                   cwd=ROOT, env={**os.environ, **env}, check=True, stdout=subprocess.DEVNULL)
    seconds = time.perf_counter() - start
    with open(os.path.join(folder, name, "metrics.jsonl")) as f:
        rows = [json.loads(line) for line in f]
    return [r["loss"] for r in rows if r.get("step", 0) > 0 and "loss" in r], seconds


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=10)
    args = ap.parse_args()
    print(f"machine: {provenance.machine()}; {args.steps} steps of the default run, seed 0")
    with tempfile.TemporaryDirectory() as folder:
        runs = {}
        for name in SETTINGS:
            try:
                provenance.check_roundings([name] if name in provenance.ROUNDINGS else [])
            except ValueError as e:
                print(f"{name}: not run ({e})")
                continue
            runs[name] = losses(name, args.steps, folder)
    print("| setting | first step | \\|loss diff\\| | same as | s |")
    print("|---|---|---|---|---|")
    for row in compare(runs):
        print("| " + " | ".join(row) + " |")


def compare(runs):
    """{setting: (losses, seconds)} -> a row a setting against the plain run: its name, the first step whose
    loss differs ('none'), the largest difference, the settings whose losses equal its own ('-'), seconds."""
    plain = runs["plain"][0]
    rows = []
    for name, (loss, seconds) in runs.items():
        differ = [step for step, (a, b) in enumerate(zip(loss, plain), start=1) if a != b]
        largest = max((abs(a - b) for a, b in zip(loss, plain)), default=0.0)
        same = [other for other, (theirs, _) in runs.items() if other != name and theirs == loss]
        rows.append([name, str(differ[0]) if differ else "none", f"{largest:.1e}", ", ".join(same) or "-",
                     f"{seconds:.1f}"])
    return rows


if __name__ == "__main__":
    main()
