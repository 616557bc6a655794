"""The record of the runs: what `experiments.py table --write` puts in results.jsonl, and what `check` says of
a run whose numbers have moved since.

    python -m pytest -q tests/test_record.py

table --write records each finished run that ran its experiment's flags, and says why for every other one (not
finished, other flags, no config.json); check names the first number that differs, and says so in words where a
number became nan, appeared (an older record lacks it) or vanished (the code no longer makes it). The numbers a
summary holds are test_verdicts.py's (each against its value by hand on a hand-made run).
"""
import json
import math
import os

import pytest

import experiments
from lab import provenance
from lab import report


def write_run(folder, steps, last, flags=(), config=True, rounding="plain", code=None, **logged):
    """A run folder of `experiment` as experiments.py runs it (its config.json holds the resolved flags of the
    experiment with `flags` after --, at --steps `steps`), metrics.jsonl holding steps 0..last, an evaluation
    every 10 steps, and each of `logged` (name -> value or a function of the step) at every step."""
    name, seed = os.path.basename(os.path.dirname(folder)), int(os.path.basename(folder)[4:])
    os.makedirs(folder)
    if config:
        args = experiments.plan([name], [seed], "runs", steps, list(flags), roundings=[rounding])[0].args
        with open(os.path.join(folder, "config.json"), "w") as f:
            json.dump({**vars(args), "commit": "0123456789ab", "machine": "x86_64", "rounding": rounding,
                       "code": code or {"files": provenance.code_record()["files"], "edited": []}}, f)  # unedited
    rows = [{"step": 0, "time": 0.0, "eval_acc": 0.3}]
    for s in range(1, last + 1):
        rows.append({"step": s, "time": 2.0 * s, "reward": s / last,
                     **{k: v(s) if callable(v) else v for k, v in logged.items()}})
        if s % 10 == 0:
            rows[-1]["eval_acc"] = 0.3 + s / 200
    with open(os.path.join(folder, "metrics.jsonl"), "w") as f:
        f.write("".join(json.dumps(r) + "\n" for r in rows))
    return folder


def table_write(runs_dir, results):
    """python experiments.py table --write --runs-dir RUNS_DIR --results RESULTS, in this process."""
    args = experiments.get_parser().parse_args(["table", "--write", "--runs-dir", str(runs_dir), "--results",
                                                str(results), "--rounding", "plain,threads2"])
    args.extra = []
    experiments.main(args)


def test_table_write_records_only_the_finished_runs_of_their_experiments_flags_and_says_why_of_the_others(
        tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(report, "write_pages", lambda records: [])  # the shipped pages stay as they are
    runs = tmp_path / "exp"
    write_run(str(runs / "default" / "seed0"), None, 100)  # finished: 100 steps, the experiment's
    write_run(str(runs / "default" / "seed1"), None, 99)  # one step short
    write_run(str(runs / "default" / "seed2"), 30, 30)  # finished, but cut to 30 steps by --steps
    write_run(str(runs / "onpolicy" / "seed0"), None, 100, ["--lr", "3e-4"])  # finished, with another lr
    write_run(str(tmp_path / "exp-threads2" / "onpolicy" / "seed1"), None, 100, rounding="threads2")  # recorded
    write_run(str(runs / "onpolicy" / "seed1"), None, 100, rounding="threads2")  # a threads2 run in plain's folder
    write_run(str(runs / "onpolicy" / "seed2"), None, 100, config=False)
    write_run(str(runs / "kl_k3" / "seed1"), None, 100, code={"files": {"grpo.py": "0" * 16}, "edited": []})  # an
    # earlier commit's code, unedited: recorded, as that commit's
    write_run(str(runs / "kl_k3" / "seed2"), None, 100, code={"files": {}, "edited": ["grpo.py"]})  # edited code
    results = tmp_path / "results.jsonl"
    old = {"experiment": "kl_k3", "seed": 0, "rounding": "plain", "threads": 1, "flags": "", "summary": {"final": 0.5}}
    report.write_results([old, {**old, "experiment": "default", "summary": {"final": 0.1}}], str(results))
    table_write(runs, results)
    out, err = capsys.readouterr()
    assert f"{results}: 3 runs recorded from {runs}" in out
    assert sorted(err.splitlines()) == [
        f"not recorded: {runs / 'default' / 'seed1'} (not finished)",
        f"not recorded: {runs / 'default' / 'seed2'} (--steps: 30 there, 100 asked)",
        f"not recorded: {runs / 'kl_k3' / 'seed2'} (grpo.py edited)",
        f"not recorded: {runs / 'onpolicy' / 'seed0'} (--lr: 0.0003 there, 0.0001 asked)",
        f"not recorded: {runs / 'onpolicy' / 'seed1'} (--threads: 2 there, 1 asked; rounding: threads2 there, plain "
        "asked)",
        f"not recorded: {runs / 'onpolicy' / 'seed2'} (no config.json beside its metrics.jsonl)"]
    records = report.load_results(str(results))
    assert [(r["experiment"], r["seed"], r["rounding"]) for r in records] == [
        ("default", 0, "plain"), ("kl_k3", 0, "plain"), ("kl_k3", 1, "plain"), ("onpolicy", 1, "threads2")]
    default = records[0]
    assert default["summary"]["final"] == pytest.approx(0.8) and default["commit"] == "0123456789ab"  # the new one
    assert default["flags"] == " ".join(experiments.train_flags("default", 0, ["--threads", "1"]))
    assert "profile" in default and "profile" not in records[3]  # the default run's profile, for docs/metrics.md


# ------------------------------------------------------------------- check

@pytest.fixture
def recorded(tmp_path):
    """A finished run of the default experiment, recorded in results.jsonl -> (runs dir, its folder, results)."""
    folder = write_run(str(tmp_path / "exp" / "default" / "seed0"), None, 100, sampler_kl_k3=0.02,
                       tis_weight_mean=lambda s: 0.9 + s / 1000)
    results = str(tmp_path / "results.jsonl")
    report.write_results([report.run_record("default", 0, folder, [])], results)
    return str(tmp_path / "exp"), folder, results


def rewrite_metrics(folder, change):
    path = os.path.join(folder, "metrics.jsonl")
    with open(path) as f:
        rows = [change(json.loads(line)) for line in f]
    with open(path, "w") as f:
        f.write("".join(json.dumps(r) + "\n" for r in rows))


def check(results, runs_dir):
    return report.check_runs(report.load_results(results), runs_dir)[0]


def test_a_run_checked_against_its_own_record_is_as_recorded(recorded):
    runs_dir, _, results = recorded
    (line,) = check(results, runs_dir)
    assert line.startswith("default seed 0: as recorded (")


def test_check_says_a_number_became_nan(recorded):
    """The re-run no longer logs sampler_kl_k3 (renamed, say): the run's mean of it is nan, where the record
    holds 0.02. Nan is not a number that equals any other."""
    runs_dir, folder, results = recorded
    rewrite_metrics(folder, lambda r: {k: v for k, v in r.items() if k != "sampler_kl_k3"})
    assert check(results, runs_dir) == [f"default seed 0: mean_sampler_kl_k3 became nan in {folder}, 0.02 in "
                                        "results.jsonl"]


def test_check_says_a_number_appeared(recorded):
    """A record written before a number existed lacks it; the run now has it."""
    runs_dir, folder, results = recorded
    record = report.load_results(results)[0]
    del record["summary"]["eval_low"]
    report.write_results([record], results)
    assert check(results, runs_dir) == [f"default seed 0: eval_low appeared in {folder} (0.35), none in results.jsonl"]


def test_check_says_a_number_vanished(recorded):
    """The record holds a number the code no longer makes."""
    runs_dir, folder, results = recorded
    record = report.load_results(results)[0]
    record["summary"]["a_retired_number"] = 0.25
    report.write_results([record], results)
    assert check(results, runs_dir) == [f"default seed 0: a_retired_number vanished from {folder}, 0.25 in "
                                        "results.jsonl"]


def test_check_names_the_first_difference_and_counts_the_rest(recorded):
    runs_dir, folder, results = recorded
    rewrite_metrics(folder, lambda r: {**r, "tis_weight_mean": 1.5} if r["step"] > 0 else r)
    (line,) = check(results, runs_dir)
    assert line == f"default seed 0: mean_tis_weight_mean is 1.5 in {folder}, 0.9505 in results.jsonl"


def test_experiments_py_check_exits_1_on_each_kind_of_difference(recorded, capsys):
    """A number that became nan, appeared or vanished fails `python experiments.py check` as any other does."""
    runs_dir, folder, results = recorded
    rewrite_metrics(folder, lambda r: {**r, "eval_acc": math.nan} if r["step"] == 100 else r)
    args = experiments.get_parser().parse_args(["check", "--runs-dir", runs_dir, "--results", results])
    args.extra = []
    with pytest.raises(SystemExit) as e:
        experiments.main(args)
    assert e.value.code == 1 and "default seed 0: drop became nan in" in capsys.readouterr().out


def test_check_passes_over_a_folder_without_config_json(recorded):
    runs_dir, folder, results = recorded
    os.remove(os.path.join(folder, "config.json"))
    assert report.check_runs(report.load_results(results), runs_dir) == ([], 0)
