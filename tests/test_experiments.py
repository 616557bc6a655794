"""experiments.py: every experiment's flags are valid train.py flags; seeds, table and lessons read runs."""
import argparse
import json
import math
import os
import re
import subprocess
import shutil
import signal
import sys
import time

import pytest

import config
import experiments
import plot
from harness import cli
from lab import lessons
from lab import provenance
from lab import report
from lab import run_folders

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

@pytest.mark.parametrize("name", list(lessons.EXPERIMENTS))
def test_every_experiment_parses_as_train_flags(name, capsys):
    cmd = experiments.command(name, 3, "runs/exp")
    _, args = cli.parse_args(cmd[2:])
    cli.check_args(args)  # neither refused nor warned: every flag it types acts
    cli.warn_inert_flags(args)
    assert capsys.readouterr().err == ""
    cli.grpo_config(args)
    assert args.seed == 3 and args.runs_dir == "runs/exp/" + name and args.run_name == "seed3"


def test_nproc_runs_train_under_torchrun():
    cmd = experiments.command("default", 0, "runs/exp", nproc=2)
    assert cmd[1:7] == ["-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", "train.py"]
    assert cmd[7:] == experiments.command("default", 0, "runs/exp")[2:]  # the same train.py flags


def test_the_default_experiment_is_python_train_py_itself():
    """`default` adds nothing to train.py's own settings: its resolved flags are train.py's defaults."""
    assert lessons.EXPERIMENTS["default"][0] == []
    args = cli.parse_args(experiments.command("default", 0, "runs/exp")[2:])[1]
    plain = cli.parse_args([])[1]
    differ = {k for k in vars(args) if getattr(args, k) != getattr(plain, k)}
    assert differ <= {"runs_dir", "run_name", "typed_flags", "steps"} and args.steps == 100, differ


def test_comparisons_and_lessons_name_existing_experiments():
    judged = dict(lessons.judged())  # every lesson, fix and variant, by its name on the command line
    assert len(judged) == len(lessons.judged()) and not set(judged) & set(lessons.EXPERIMENTS)  # a name means one thing
    for names, _ in experiments.COMPARISONS.values():
        assert set(names) <= set(lessons.EXPERIMENTS)
    for lesson in judged.values():
        assert set(lesson.experiments) <= set(lessons.EXPERIMENTS)


def test_each_comparison_figure_has_few_enough_curves_to_follow():
    for fig, (names, metrics) in experiments.COMPARISONS.items():
        assert len(names) <= 4, fig  # at most four curves a panel
        assert len(names) <= 2 or "+" not in metrics, fig  # a+b draws two curves a run


def test_the_figures_the_pages_show_are_in_figures_and_none_there_is_stale():
    """Each figures/NAME.png that README.md, EXPERIMENTS.md or docs/ show is there, and each
    exp_*.png there is one that experiments.py's COMPARISONS still makes (python
    experiments.py table re-makes them all from runs/exp; a renamed figure leaves a stale one)."""
    shown = set()
    for page in ("README.md", "EXPERIMENTS.md", "docs/book_model.md", "docs/performance.md"):
        with open(os.path.join(ROOT, page), encoding="utf-8") as f:
            shown |= set(re.findall(r"figures/([\w.-]+\.png)", f.read()))
    there = set(os.listdir(os.path.join(ROOT, "figures")))
    made = {f"exp_{name}.png" for name in experiments.COMPARISONS}
    assert not shown - there, f"shown but not in figures/: {sorted(shown - there)}"
    stale = {name for name in there if name.startswith("exp_")} - made
    assert not stale, f"figures/ holds figures experiments.py no longer makes: {sorted(stale)}"


def write_run(folder, evals, reward=lambda s: s / 20, tail=""):
    folder.mkdir(parents=True)
    rows = [{"step": 0, "time": 0, "eval_acc": evals[0]}]
    rows += [{"step": s, "time": 6.0 * s, "reward": reward(s), "entropy": 0.2, "resp_len": 10 + s, "clip_frac": 0.01}
             for s in range(1, 21)]
    rows[10]["eval_acc"], rows[20]["eval_acc"] = evals[1], evals[2]
    (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows) + tail)


def test_table_is_mean_and_std_over_seeds(tmp_path):
    write_run(tmp_path / "clip" / "seed0", [0.25, 0.75, 0.7], tail='{"step": 21, "rew')  # a cut last line
    write_run(tmp_path / "clip" / "seed1", [0.25, 0.85, 0.8])
    line = [l for l in report.table(str(tmp_path)).splitlines() if l.startswith("| clip")][0]
    cells = [c.strip() for c in line.strip("|").split("|")]
    assert cells[:5] == ["clip", "2", "25.0% ± 0.0%", "75.0% ± 7.1%", "80.0% ± 7.1%"]  # start, final, peak
    assert cells[5] == "0.775 ± 0.000" and cells[7] == "25.5 ± 0.0" and cells[-1] == "2.0 ± 0.0"  # reward and length of the last 10 steps


def test_the_table_and_the_figures_find_seeds_by_one_rule(tmp_path, monkeypatch):
    """experiments.py has no rule of its own for seed folders: what run_folders.seed_folders names is what it reads."""
    for name in ("default/seed0", "default/seed1", "default/run_a", "onpolicy/run_a"):
        write_run(tmp_path / name, [0.25, 0.75, 0.7])
    monkeypatch.setattr(run_folders, "seed_folders", lambda folder: [os.path.join(folder, "run_a")]
                        if os.path.isdir(os.path.join(folder, "run_a")) else [])  # a rule other than seed<k>
    table = report.table(str(tmp_path)).splitlines()
    assert [l.split("|")[1:3] for l in table if l.startswith(("| default", "| onpolicy"))] == \
        [[" default ", " 1 "], [" onpolicy ", " 1 "]]  # run_a alone, not seed0 and seed1
    drawn = []
    monkeypatch.setattr(experiments.subprocess, "run",
                        lambda cmd, check, stdout: drawn.append(cmd[2:cmd.index("--metrics")]))
    experiments.figures(str(tmp_path), str(tmp_path / "fig"), ["onpolicy"])
    assert drawn == [[str(tmp_path / "onpolicy"), str(tmp_path / "default")]]  # the clip comparison alone


def test_lessons_judge_all_their_seeds_and_show_each_seeds_effect(tmp_path, monkeypatch):
    """A made-up lesson on five seeds: its failure, the broken run falling 40 points, in seeds 0-2 (it falls 50) and
    not 3-4 (30): present in 3 of 5, so judged. The fix ends at 80% in every seed, above every broken run: held, p =
    1 / 252; each seed's row shows its signed effect, +50 points where the run fell most, +30 where it fell least."""
    for seed, end in [(0, 0.3), (1, 0.3), (2, 0.3), (3, 0.5), (4, 0.5)]:
        write_run(tmp_path / "onpolicy" / f"seed{seed}", [0.2, 0.8, end])
        write_run(tmp_path / "default" / f"seed{seed}", [0.2, 0.8, 0.8])
    lesson = lessons.LESSONS["instability"]
    falls = lesson._replace(experiments=["onpolicy", "default"], number=lessons.Number("final", "higher", 0.1, 1.0),
                            record=lesson.record._replace(failure=lessons.at_least("drop", 0.4, "it falls 40 points")))
    monkeypatch.setattr(lessons, "LESSONS", {"falls": falls})
    monkeypatch.setattr(lessons, "FIXES", {})
    monkeypatch.setattr(lessons, "FIELD", {})
    text = report.table(str(tmp_path))
    assert "**falls** (judged where onpolicy: it falls 40 points; held where default: " in text
    assert "): held, p = 0.004; +42 points (" in text
    assert "| 0 | greedy falls 50% | 80.0% (10) -> 30.0% | 80.0% (10) -> 80.0% | +50 points |" in text
    assert "| 3 | greedy falls 30% | 80.0% (10) -> 50.0% | 80.0% (10) -> 80.0% | +30 points |" in text


def test_the_runaway_lessons_failure_asks_for_the_signs_of_the_books_7_3_log():
    """The runaway is there where the learner's entropy reaches half of ln V and the sampled held-out accuracy falls
    15 points from its peak (the book's own greedy fell 13.2 points: greedy is not asked); remove either sign and
    there is no failure to fix."""
    failure = lessons.LESSONS["runaway"].record.failure
    broken = {"entropy_peak_share": 0.6, "sampled_drop": 0.3}
    assert failure.test(broken)
    for change in ({"entropy_peak_share": 0.49}, {"sampled_drop": 0.14}):
        assert not failure.test({**broken, **change}), change


def test_the_format_lessons_failure_is_a_reward_that_hides_the_fall():
    """Ungated, the sampled accuracy falls 15 points while the reward's lowest 50-step mean after its peak keeps half
    of it: the reward hides the fall. The gated run is then held where its reward keeps less than the ungated's in
    every seed (p = 1 / 252); a gated reward that keeps as much is not held."""
    lesson = lessons.LESSONS["format_exploit"]
    ungated = {"sampled_drop": 0.3, "reward_kept": 0.8}
    assert lesson.record.failure.test(ungated)
    for change in ({"sampled_drop": 0.14}, {"reward_kept": 0.49}):
        assert not lesson.record.failure.test({**ungated, **change}), change
    kept = lambda base: {s: base + s / 100 for s in range(5)}  # noqa: E731  five seeds a point apart
    present = {s: True for s in range(5)}
    v = lessons.verdict(lesson.number, kept(0.8), kept(0.3), present, None)
    assert (v.decision, v.p) == (lessons.HELD, pytest.approx(1 / 252))
    assert lessons.verdict(lesson.number, kept(0.8), kept(0.8), present, None).decision == lessons.NOT_HELD


def test_run_summary_reads_the_runaway_numbers(tmp_path):
    rows = [{"step": 0, "time": 0, "eval_acc": 0.2, "ln_vocab": 5.0}]
    rows += [{"step": s, "time": s, "entropy": s / 10, "truncated_frac": 0.5 if 30 <= s < 50 else 0.0}
             for s in range(1, 61)]
    s = report.run_summary(rows)
    # the highest 20-step mean: entropy over steps 41..60 (5.05); the cut share over 30..49 (0.5), 0 over 1..20
    assert s["ln_vocab"] == 5.0 and s["entropy_peak"] == pytest.approx(5.05) and s["truncated_peak"] == 0.5
    assert s["truncated_start"] == 0.0
    steps, means = report.trailing_means(rows, "entropy", window=3)
    assert steps[:4] == [1, 2, 3, 4] and means[:4] == pytest.approx([0.1, 0.15, 0.2, 0.3])  # fewer steps first
    assert math.isnan(report.highest_trailing_mean(rows[:3], "entropy"))  # fewer steps than the window


def test_first_moves_says_which_metric_moved_when():
    rows = [{"step": 0, "eval_acc": 0.3}]
    for s in range(1, 61):
        rows.append({"step": s, "entropy": 0.1 if s <= 30 else 0.55, "kl": -0.2 if s <= 20 else -0.9,
                     "resp_len": 20.0, "sampler_gap": 0.01})
        if s % 10 == 0:
            rows[-1]["eval_acc"] = {10: 0.6, 20: 0.7, 30: 0.65, 40: 0.55}.get(s, 0.5)
    moves = report.first_moves(rows)
    # the peak is at step 20, where each metric's 20-step mean is its reference. |kl|'s mean reaches
    # twice its 0.2 at step 26: (14 x 0.2 + 6 x 0.9) / 20 = 0.41 (step 25: 0.375); entropy at 35:
    # (15 x 0.1 + 5 x 0.55) / 20 = 0.2125 (step 34: 0.19); accuracy at 40: 0.55 <= 0.7 - 0.1; length
    # and gap never move, ratio_max was never logged
    assert moves == {"eval_acc": 40, "kl": 26, "entropy": 35, "sampler_gap": None, "resp_len": None, "ratio_max": None}
    assert report.moved({"moves": moves}) == "kl 26, entropy 35, eval_acc 40"


def test_every_listed_command_gives_each_flag_once():
    for name in lessons.EXPERIMENTS:
        flags = [t for t in experiments.train_flags(name) if t.startswith("--")]
        assert len(flags) == len(set(flags)), (name, flags)
    # a later list replaces an earlier value, in the earlier place
    assert experiments.merge_flags(["--steps", "100", "--gated"], ["--steps", "80"]) == ["--steps", "80", "--gated"]


def test_an_experiment_named_after_a_recipe_runs_that_recipe():
    import grpo
    for name, (flags, _) in lessons.EXPERIMENTS.items():
        recipe = name if name in config.RECIPES else name.split("_")[0] if name.startswith("book") else None
        if recipe:
            assert flags[flags.index("--recipe") + 1] == recipe, name


def test_a_lesson_name_runs_its_experiments(monkeypatch, tmp_path):
    ran = []
    monkeypatch.setattr(experiments, "run_suite", lambda runs, jobs, rerun, nproc: ran.extend(runs))
    args = experiments.get_parser().parse_args(["naive_kl", "book_kl", "--seeds", "0,1", "--runs-dir", str(tmp_path),
                                                "--jobs", "2", "--figures", str(tmp_path / "fig")])
    args.extra = []
    experiments.main(args)
    lesson = lessons.LESSONS["naive_kl"]  # its broken run and its fix, its one-change runs, its rivals, each once
    want = [*lesson.experiments, *lesson.parts, *lesson.record.rivals]
    assert "book_nokl" in want and [(r.name, r.seed) for r in ran] == [(n, s) for n in want for s in (0, 1)]
    assert experiments.experiment_names(["fixes"]) == list(dict.fromkeys(  # and the runs their failure is against
        n for fix in lessons.FIXES.values() for n in (*fix.experiments, *filter(None, [fix.record.failure.against]),
                                                      *fix.record.rivals)))


def test_an_unknown_name_is_a_usage_error_in_one_line():
    """exit 2, as argparse's own usage errors and train.py's, naming the lessons and experiments."""
    out = subprocess.run([sys.executable, "experiments.py", "nosuch"], cwd=ROOT, capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 2 and out.stdout == "" and "Traceback" not in out.stderr
    assert out.stderr.startswith("experiments.py: error: unknown experiment 'nosuch'; choose from all, lessons, fixes, "
                                 "field, withouts, table, check, instability, instability_search, instability_ppo, naive_kl")
    assert len(out.stderr.splitlines()) == 1


def test_run_summary_reads_the_rewards_50_step_peak_and_its_lowest_mean_after(tmp_path):
    """The total reward starts at 0.2 (steps 1..50), rises to 1.5 (51..100) and falls to 0.5
    (101..200): its highest whole 50-step mean is 1.5 (steps 51..100), the lowest after it 0.5
    (151..200); the lower mean before the peak is not the one after it."""
    rows = [{"step": 0, "eval_acc": 0.1}]
    rows += [{"step": t, "time": t, "reward": 0.2 if t <= 50 else 1.5 if t <= 100 else 0.5, "reward_correct": 0.2,
              "reward_format": 0.95} for t in range(1, 201)]
    s = report.run_summary(rows)
    assert s["reward_peak50"] == pytest.approx(1.5) and s["reward_low_after_peak"] == pytest.approx(0.5)
    assert s["reward_format_end"] == pytest.approx(0.95) and s["bonus"] > 0


def resolved_difference(a, b):
    """The train.py settings (recipe and defaults filled in) in which two experiments differ, but where they ran."""
    a, b = (vars(cli.parse_args(experiments.command(n, 0, "runs/exp")[2:])[1]) for n in (a, b))
    return {k for k in a.keys() | b.keys() if a.get(k) != b.get(k)} - {"runs_dir", "typed_flags"}


SWITCHES = {  # each judged method -> the settings its run changes, by hand: its own, its source's values among them
    "instability": {"clip"}, "instability_search": {"clip"}, "instability_ppo": {"objective", "clip"}, "naive_kl": {"kl_estimator", "kl_level"},
    "runaway": {"learner_temperature", "keep_sampling_mask"}, "format_exploit": {"gated"},
    "fix_dynamic_sampling": {"dynamic_sampling"}, "fix_token_mean": {"loss_agg"}, "fix_drgrpo": {"loss_agg", "adv_norm"},
    "fix_overlong": {"overlong_cache"}, "fix_keep_mask": {"keep_sampling_mask"}, "fix_tis": {"tis_cap"},
    "fix_tis_engine": {"tis_cap"},
    "fix_kl_reweight": {"kl_reweight"}, "fix_entropy_bonus": {"entropy_coef"}, "fix_clip_higher": {"clip_high"},
    "fix_cispo": {"objective", "clip", "clip_high"}, "fix_gdpo": {"reward_norm"}, "fix_dual_clip": {"dual_clip"},
    "fix_off_policy_mask": {"off_policy_mask"}, "fix_gspo": {"ratio_level", "clip", "clip_high"},
    "field_sapo": {"objective", "clip"},  # clip: inf without, the book's 10 with, which SAPO never reads
    "field_gmpo": {"objective", "clip"}, "field_icepop": {"tis_cap", "tis_floor", "tis_mode"},
    "field_sequence_is": {"tis_cap", "tis_mode"}, "field_rejection": {"rejection", "rejection_bound"},
    "field_dppo_tv": {"objective", "clip"}, "field_dppo_kl": {"objective", "clip"},
    "field_vespo": {"objective", "loss_agg"}, "field_top_entropy": {"top_entropy_random"},
    "field_adaptive_entropy": {"adaptive_entropy"}, "field_rloo": {"baseline"}, "field_reinforce_pp": {"baseline"},
    "field_luspo": {"loss_agg"}, "field_k3_plus": {"kl_estimator"}}


@pytest.mark.parametrize("name", [n for n, _ in lessons.judged()])
def test_each_judged_pair_differs_in_its_own_switches_and_nothing_else(name):
    """A method's run and the run without it resolve to the same train.py flags (recipe and defaults filled in) but
    for the method's own switches, listed here by hand and in its record, so that what moves between them is the
    method's doing; a lesson's one-change runs each change one of its two."""
    judged = dict(lessons.judged())[name]
    assert set(judged.record.switches) == SWITCHES[name]
    assert resolved_difference(*judged.experiments) == SWITCHES[name], name
    changed = [resolved_difference(judged.experiments[0], part) for part in judged.parts]
    assert all(len(c) == 1 and c < SWITCHES[name] for c in changed) and len(set(map(frozenset, changed))) == len(changed)


def test_the_field_group_runs_each_variant_the_runs_it_is_judged_against_and_its_rivals():
    names = experiments.experiment_names(["field"])
    assert set(names) == {n for v in lessons.FIELD.values() for n in (*v.experiments, *v.record.rivals)} | {
        "many", "lag_fresh"}  # the runs the 80/20 rule's and a stale sampler's failures are seen against
    judged = dict(lessons.judged())
    assert judged["field_sapo"].experiments == ["book_token_noclip", "book_sapo"]  # the token's ratio, no clip
    assert judged["field_luspo"].experiments == ["dropout_gspo", "dropout_luspo"]  # LUSPO against GSPO
    assert judged["field_rloo"].experiments == ["g4_nobaseline", "g4_rloo"]  # RLOO against no baseline


def test_the_withouts_group_runs_every_run_a_records_seeds_are_set_from_and_its_failure_is_seen_against():
    names = experiments.experiment_names(["withouts"])
    want = {j.experiments[0] for _, j in lessons.judged()} | {"many", "lag_fresh"}  # the failures' against runs
    assert set(names) == want and not {j.experiments[1] for _, j in lessons.judged()} - want & set(names)


def test_every_failure_reads_numbers_run_summary_computes():
    """Each record's failure is a number of run_summary's, so the tables' failure column can be filled."""
    rows = [{"step": 0, "eval_acc": 0.1}] + [{"step": t, "time": t, "zero_std_frac": 0.25, "logratio_std_token": 0.3}
                                             for t in range(1, 21)]
    summary = report.run_summary(rows)
    assert all(judged.record.failure.key in summary for _, judged in lessons.judged())
    assert summary["mean_zero_std_frac"] == pytest.approx(0.25) and summary["early_logratio_std_token"] == pytest.approx(0.3)


def test_the_fixes_table_gives_each_seed_its_failure_mechanism_effect_and_the_verdict_with_its_p():
    """dynamic_sampling by hand over five seeds: its failure, groups with no signal, in seeds 0-3 (30%) and not seed 4
    (5%); its mechanism, groups with signal above 1.1 times the run without's, in seeds 0-3 (2 -> 3.5) and not seed 4
    (3 -> 2.5); its number 50-54% -> 60-64%, every seed 10 points ahead but seed 4 (the failure absent, in brackets,
    2 points behind): held, p = 3 / 252. Of the 252 choices of five pooled seeds, three reach the method's sum (3.04):
    the five highest (3.06), and the two that swap either 60% for its 58% (3.04); a 53% in place of it falls short."""
    s = lambda zero, groups, acc: {"mean_zero_std_frac": zero, "mean_signal_groups": groups, "eval_mean": acc}  # noqa
    summaries = {"g4": {f"seed{i}": s(0.3, 2.0, 0.5 + i / 100) for i in range(4)},
                 "g4_dynamic": {f"seed{i}": s(0.3, 3.5, 0.6 + i / 100) for i in range(4)}}
    summaries["g4"]["seed4"], summaries["g4_dynamic"]["seed4"] = s(0.05, 3.0, 0.6), s(0.05, 2.5, 0.58)
    row = [line for line in report.fixes_table(summaries).splitlines() if line.startswith("| dynamic_sampling")]
    cells = row[0].split(" | ")
    assert len(row) == 1 and cells[3].startswith("groups with no reward variance, mean of the run: 5-30% (")
    assert cells[4] == "4 of 5" and cells[5] == ("groups with signal a step, mean of the run: 2-3 -> 2.5-3.5 (above 1.1 "
                                                 "times the run without's)")
    assert cells[6] == "4 of 5" and cells[8] == "50-60% -> 58-63%"
    assert cells[9] == "+10, +10, +10, +10, (-2)" and cells[10] == "held" and cells[11] == "0.012"
    assert report.fixes_table({"g4": summaries["g4"]}) == ""  # no row without both runs


# ------------------------------------------------------------------- a suite continues as make does

SMALL = ["--", "--prompts-per-step", "2", "--eval-size", "8", "--eval-every", "4"]  # fast runs of the real warm start


def suite(project, tmp_path, *argv, timeout=300):
    """python experiments.py ARGV --runs-dir tmp_path/exp, run in a copy of the project (conftest.project) ->
    the finished process."""
    own, extra = argv[:argv.index("--")] if "--" in argv else argv, argv[argv.index("--"):] if "--" in argv else ()
    return subprocess.run([sys.executable, "experiments.py", *own, "--runs-dir", str(tmp_path / "exp"), *extra],
                          cwd=project, capture_output=True, text=True, timeout=timeout)


def metrics_rows(path):
    return [json.loads(line) for line in open(path)]


def metrics_without_time(path):
    return [{k: v for k, v in r.items() if k not in ("time", "tokens_per_s")} for r in metrics_rows(path)]


def git_status(project):
    return subprocess.run(["git", "status", "--porcelain"], cwd=project, capture_output=True, text=True).stdout


def test_a_finished_run_is_skipped_in_one_line_and_no_tracked_file_changes(project, tmp_path):
    """Run once: the run, and its figure beside the runs (runs_dir/figures), not in figures/. Again: one
    line says it is skipped, its metrics.jsonl is the same bytes, its train.log was appended to."""
    before = git_status(project)
    out = suite(project, tmp_path, "default", "--seeds", "0", "--steps", "3", *SMALL)
    assert out.returncode == 0, out.stderr
    run = tmp_path / "exp" / "default+steps3" / "seed0"  # cut to 3 steps: a folder of its own
    metrics, log = (run / "metrics.jsonl").read_bytes(), (run / "train.log").read_text()
    assert [r["step"] for r in metrics_without_time(run / "metrics.jsonl")] == [0, 1, 2, 3]
    assert os.listdir(tmp_path / "exp" / "figures") == ["exp_default+steps3.png"]
    assert "[1/1] default+steps3 seed 0: started" in out.stdout and "1 started, 0 resumed, 0 skipped" in out.stdout
    again = suite(project, tmp_path, "default", "--seeds", "0", "--steps", "3", *SMALL)
    assert again.returncode == 0 and "[1/1] default+steps3 seed 0: finished already at step 3: skipped" in again.stdout
    assert (run / "metrics.jsonl").read_bytes() == metrics and (run / "train.log").read_text() == log
    assert git_status(project) == before  # neither figures/ nor any page nor results.jsonl was touched


# A pause at a step the test chooses, committed in the project's copy (so the code is a commit's, unedited): after
# step PAUSE_AT_STEP's metrics line (and its checkpoint, if that step saves one) the run touches `paused` and
# waits, and the test sends its signal then, whatever the machine's load. Only the first command sets the variable.
PAUSE = """    run_folders.append_jsonl(metrics_path, metrics)
"""
PAUSE_HOOK = """    if os.environ.get("PAUSE_AT_STEP") == str(step):  # tests/test_experiments.py: wait here for a signal
        open(os.path.join(run_dir, "paused"), "w").close()
        time.sleep(600)
"""


def pausing(project):
    """The project's copy with train.py's pause hook, committed there."""
    train = project / "train.py"
    text = train.read_text()
    assert text.count(PAUSE) == 1, "train.py's metrics line moved: update PAUSE"
    train.write_text(text.replace(PAUSE, PAUSE + PAUSE_HOOK))
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qam", "pause"], cwd=project, check=True)
    return project


def signal_when_paused(proc, folder, sig, timeout=240):
    """Send sig to the suite and its runs, as kill -9 or a terminal's Ctrl-C does, once the run waits at its step."""
    deadline = time.time() + timeout
    while proc.poll() is None and not (folder / "paused").exists() and time.time() < deadline:
        time.sleep(0.05)
    assert (folder / "paused").exists(), "the run never reached its step"
    os.killpg(proc.pid, sig)
    proc.wait()


# killed at step 1, the first checkpoint 20 steps away, or at step 6, after the checkpoint of step 5
@pytest.mark.parametrize("paused_at, sig, save_every", [(1, signal.SIGKILL, 20), (6, signal.SIGKILL, 5),
                                                        (6, signal.SIGINT, 5)],
                         ids=["kill-9-before-a-checkpoint", "kill-9-after-one", "ctrl-c-after-one"])
def test_a_suite_killed_mid_run_completes_with_each_step_once(project, tmp_path, paused_at, sig, save_every):
    """kill -9 (or Ctrl-C) of the suite and its runs, then the same command: the run restarts (no checkpoint
    yet) or resumes from the checkpoint it has, and its metrics.jsonl holds each step once, the numbers of an
    uninterrupted run: bitwise, as a resumed run does the very float operations of the uninterrupted one (the same
    weights and Adam state from the checkpoint, the same step seeds, shapes, thread count and machine)."""
    pausing(project)
    argv = ["default", "--seeds", "0", "--steps", "10", *SMALL, "--save-every", str(save_every)]
    own, extra = argv[:argv.index("--")], argv[argv.index("--"):]
    # a terminal's Ctrl-C reaches the suite and its runs as one process group (start_new_session), each process with
    # SIGINT's default action, even where this test's own process ignores it (started in the background, nohup)
    proc = subprocess.Popen([sys.executable, "experiments.py", *own, "--runs-dir", str(tmp_path / "exp"), *extra],
                            cwd=project, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
                            env={**os.environ, "PAUSE_AT_STEP": str(paused_at)},
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    folder = tmp_path / "exp" / "default+steps10" / "seed0"
    signal_when_paused(proc, folder, sig)
    done, saved = len(open(folder / "metrics.jsonl").readlines()), experiments.saved_step(str(folder))
    assert done == paused_at + 1  # steps 0..paused_at
    assert saved == (None if save_every == 20 else 5)
    if sig == signal.SIGINT:  # Ctrl-C: the run's log says so in one line, not a traceback
        log = open(folder / "train.log").read()
        assert "train.py: interrupted (Ctrl-C); python train.py --resume" in log and "Traceback" not in log
    (folder / "paused").unlink()
    out = suite(project, tmp_path, *argv)
    assert out.returncode == 0, out.stderr
    assert (f"resumed at step {saved}" if saved else "restarted from step 0") in out.stdout, (done, out.stdout)
    whole = suite(project, tmp_path / "whole", *argv)
    assert whole.returncode == 0
    path = folder / "metrics.jsonl"
    assert [r["step"] for r in metrics_rows(path)] == list(range(11))
    assert metrics_without_time(path) == metrics_without_time(tmp_path / "whole" / "exp" / "default+steps10" / "seed0" /
                                                              "metrics.jsonl")
    assert open(folder / "train.log").read().count("=== experiments.py") == 2  # appended, never truncated


def test_a_folder_with_other_flags_is_refused_naming_them_and_rerun_moves_it_aside(project, tmp_path):
    assert suite(project, tmp_path, "default", "--seeds", "0", "--steps", "2", *SMALL).returncode == 0
    run = tmp_path / "exp" / "default+steps2" / "seed0"
    metrics = (run / "metrics.jsonl").read_bytes()
    out = suite(project, tmp_path, "default", "--seeds", "0", "--steps", "2", *SMALL, "--lr", "3e-4")
    assert out.returncode == 2 and out.stderr.count("\n") == 1 and "Traceback" not in out.stderr
    assert f"{run} holds a run with other flags (--lr: 0.0001 there, 0.0003 asked): --rerun moves it aside" in out.stderr
    assert (run / "metrics.jsonl").read_bytes() == metrics  # nothing touched
    out = suite(project, tmp_path, "default", "--seeds", "0", "--steps", "2", "--rerun", *SMALL, "--lr", "3e-4")
    assert out.returncode == 0 and "moved aside to" in out.stdout
    (aside,) = [d for d in os.listdir(run.parent) if d.startswith("seed0.replaced-")]
    assert (run.parent / aside / "metrics.jsonl").read_bytes() == metrics  # the old run, kept
    assert [r["step"] for r in metrics_without_time(run / "metrics.jsonl")] == [0, 1, 2]
    assert [os.path.basename(d) for d in run_folders.seed_folders(str(run.parent))] == ["seed0"]  # the aside is not a seed


def test_runs_cut_to_other_steps_go_beside_the_whole_ones_and_several_refused_seeds_are_one_line(project, tmp_path):
    """--steps 2, then 3: two folders, neither refused (the guide's two parts run in either order); a second edit
    finds both seeds of default+steps2+grpo.py of other code and is refused in one line that names them."""
    for steps in ("2", "3"):
        assert suite(project, tmp_path, "default", "--seeds", "0,1", "--steps", steps, *SMALL).returncode == 0
    assert sorted(d for d in os.listdir(tmp_path / "exp") if d != "figures") == ["default+steps2", "default+steps3"]
    edit_advantages(project, 2)
    assert suite(project, tmp_path, "default", "--seeds", "0,1", "--steps", "2", *SMALL).returncode == 0
    edit_advantages(project, 3)
    out = suite(project, tmp_path, "default", "--seeds", "0,1", "--steps", "2", *SMALL)
    assert out.returncode == 2 and out.stderr.count("\n") == 1, out.stderr
    assert (f"{tmp_path / 'exp' / 'default+steps2+grpo.py'} holds runs of other code in seeds 0, 1 (code: grpo.py "
            "changed since it ran): --rerun moves them aside and runs them again, --label NAME runs this code beside "
            "them") in out.stderr


@pytest.mark.parametrize("argv,message", [
    (["default", "--", "--no-such-flag"], "default seed 0: train.py refuses a flag after --: unrecognized arguments: "
                                          "--no-such-flag"),
    (["default", "--", "--seed", "3"], "--seed after -- is experiments.py's to set for each run: use --seeds"),
    (["default", "--", "--steps", "3"], "--steps after -- is experiments.py's to set for each run: use experiments.py's "
                                        "own --steps"),
    (["default", "--", "--top-k", "-1"], "default seed 0: train.py refuses a flag after --: --top-k must be >= 0"),
    (["default", "--steps", "0"], "--steps must be >= 1, got 0"),
    (["default", "--lr", "3e-4"], "--lr is a train.py flag: put it after --, as in `python experiments.py default "
                                  "-- --lr 3e-4`"),
    (["nosuch"], "unknown experiment 'nosuch'")])
def test_a_bad_suite_is_refused_in_one_line_before_anything_runs(project, tmp_path, argv, message):
    out = suite(project, tmp_path, *argv)
    assert out.returncode == 2 and out.stderr.count("\n") == 1 and "Traceback" not in out.stderr, out.stderr
    assert out.stderr.startswith("experiments.py: error: ") and message in out.stderr, out.stderr
    assert not (tmp_path / "exp").exists()


def test_the_table_skips_a_cut_metrics_line_and_says_so(tmp_path, capsys):
    write_run(tmp_path / "default" / "seed0", [0.25, 0.75, 0.7], tail='{"step": 21, "rew')
    text = report.table(str(tmp_path))
    assert "| default | 1 | 25.0% | 70.0% | 75.0% |" in text
    assert "metrics.jsonl:22: skipped incomplete last line" in capsys.readouterr().err


# ------------------------------------------------------------------- a learner's own edit, never a stale run

def edit_advantages(project, factor):
    """One line of grpo.py, as a learner edits it: group_advantages returns factor times its advantages."""
    text = (project / "grpo.py").read_text()
    old = next(line for line in text.splitlines() if line.startswith("    return") and "view(-1)  # (B,)" in line)
    (project / "grpo.py").write_text(text.replace(old, f"    return ({factor} * centred).view(-1)  # (B,)", 1))


@pytest.mark.parametrize("path", ["harness/stats.py", "kernels/logprobs.py", "book/qwen3.py"])
def test_an_appended_comment_in_a_folders_file_is_recorded_as_an_edit(project, tmp_path, path):
    """The code a run records is every file train.py imports, in the folders too: a comment appended to one of them
    shows in the run's config.json as that file edited, and the run goes into a folder of its own, named for the
    file with its folder (default+steps1+harness-stats.py)."""
    with open(project / path, "a") as f:
        f.write("# a learner's note\n")
    out = suite(project, tmp_path, "default", "--seeds", "0", "--steps", "1", *SMALL)
    assert out.returncode == 0, out.stderr
    edited = tmp_path / "exp" / f"default+steps1+{path.replace('/', '-')}" / "seed0"
    config = json.loads((edited / "config.json").read_text())
    assert config["code"]["edited"] == [path] and path in config["code"]["files"]


def test_an_edited_line_runs_beside_the_old_runs_and_a_second_edit_is_refused_not_skipped(project, tmp_path):
    """The same command after an edit of grpo.py runs the edited code into default+steps2+grpo.py (never the old
    run's 'finished already') and draws it beside the unmodified run, the figure named after the edit's
    fingerprint; another edit finds that run of other code and is refused in one line naming grpo.py, nothing
    moved; --rerun moves it aside, and its figure takes another name."""
    argv = ["default", "--seeds", "0", "--steps", "2", *SMALL]
    assert suite(project, tmp_path, *argv).returncode == 0
    old = metrics_without_time(tmp_path / "exp" / "default+steps2" / "seed0" / "metrics.jsonl")
    edit_advantages(project, 2)
    out = suite(project, tmp_path, *argv)
    assert out.returncode == 0, out.stderr
    assert "[1/1] default+steps2+grpo.py seed 0: started" in out.stdout and "skipped" not in out.stdout.split("\n")[0]
    edited = tmp_path / "exp" / "default+steps2+grpo.py" / "seed0"
    config = json.loads((edited / "config.json").read_text())
    assert config["code"]["edited"] == ["grpo.py"]
    assert metrics_without_time(edited / "metrics.jsonl")[1]["loss"] != old[1]["loss"]  # the edit ran
    first = f"exp_default+steps2+grpo.py@{provenance.edit_fingerprint(config['code'])}.png"
    assert (tmp_path / "exp" / "figures" / first).exists() and first in out.stdout
    edit_advantages(project, 3)  # another edit of the same line
    metrics = (edited / "metrics.jsonl").read_bytes()
    out = suite(project, tmp_path, *argv)
    assert out.returncode == 2 and out.stderr.count("\n") == 1 and "Traceback" not in out.stderr
    assert (f"{edited} holds a run of other code (code: grpo.py changed since it ran): --rerun moves it aside and "
            "runs it again, --label NAME runs this code beside it") in out.stderr
    assert (edited / "metrics.jsonl").read_bytes() == metrics
    out = suite(project, tmp_path, "--rerun", *argv)
    assert out.returncode == 0 and "moved aside to" in out.stdout
    second = f"exp_default+steps2+grpo.py@{provenance.edit_fingerprint(json.loads((edited / 'config.json').read_text())['code'])}.png"
    assert second != first and {first, second} <= set(os.listdir(tmp_path / "exp" / "figures"))  # neither overwritten


def test_a_run_in_the_experiments_own_folder_from_other_code_is_refused_after_a_commit(project, tmp_path):
    """A learner who commits an edit: the experiment's own runs ran the code before it, and are refused."""
    argv = ["default", "--seeds", "0", "--steps", "2", *SMALL]
    assert suite(project, tmp_path, *argv).returncode == 0
    edit_advantages(project, 2)
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qam", "mine"], cwd=project, check=True)
    out = suite(project, tmp_path, *argv)
    run = tmp_path / "exp" / "default+steps2" / "seed0"
    assert out.returncode == 2 and f"{run} holds a run of other code (code: grpo.py changed since it ran)" in out.stderr


def test_resuming_a_run_under_other_code_is_refused_in_one_line(project, tmp_path):
    cmd = ["train.py", "--steps", "3", "--save-every", "1", "--eval-every", "3", "--eval-size", "8",
           "--prompts-per-step", "2", "--runs-dir", str(tmp_path), "--run-name", "r"]
    assert subprocess.run([sys.executable, *cmd], cwd=project, capture_output=True).returncode == 0
    metrics = (tmp_path / "r" / "metrics.jsonl").read_bytes()
    edit_advantages(project, 2)
    out = subprocess.run([sys.executable, "train.py", "--resume", str(tmp_path / "r"), "--steps", "5"], cwd=project,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and out.stderr.count("\n") == 1, out.stderr
    assert f"--resume: {tmp_path / 'r'} ran other code (grpo.py changed since it ran)" in out.stderr
    assert (tmp_path / "r" / "metrics.jsonl").read_bytes() == metrics


def test_a_resumed_runs_time_is_the_whole_runs(tmp_path):
    """metrics.jsonl's time and the last line's total go on from the checkpoint's time, not from 0."""
    cmd = ["train.py", "--steps", "3", "--save-every", "3", "--eval-every", "3", "--eval-size", "8",
           "--prompts-per-step", "2", "--runs-dir", str(tmp_path), "--run-name", "r"]
    assert subprocess.run([sys.executable, *cmd], cwd=ROOT, capture_output=True).returncode == 0
    out = subprocess.run([sys.executable, "train.py", "--resume", str(tmp_path / "r"), "--steps", "5"], cwd=ROOT,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    times = [r["time"] for r in metrics_rows(tmp_path / "r" / "metrics.jsonl")]
    assert times == sorted(times) and times[4] > times[3] > 0  # step 4 after step 3, whose time the checkpoint kept
    total = float(re.search(r"done: 5 steps, (\d+)s total", out.stdout)[1])
    assert total >= round(times[3])


def with_config(folder, edited, commit="abc123", machine="x86_64, 2 CPUs (AMD EPYC), AVX512"):
    (folder / "config.json").write_text(json.dumps({"code": {"files": {"grpo.py": "1" * 16}, "edited": edited},
                                                    "commit": commit, "machine": machine}))


def add_a_flag(project):
    """A learner's tiny flag, uncommitted, as docs/adding_a_variant.md adds one: --adv-scale, a GRPOConfig field
    (config.py) that grpo.advantages applies, and an experiment that sets it (lab/lessons.py)."""
    config = (project / "config.py").read_text()
    anchor = '    reward_norm: str = flag('
    assert config.count(anchor) == 1
    config = config.replace(anchor, '    adv_scale: float = flag("advantages and sampling", 1.0, "times each advantage")\n'
                                    + anchor, 1)
    (project / "config.py").write_text(config)
    grpo = (project / "grpo.py").read_text()
    old = "    if cfg.adv_clip > 0:\n        adv = adv.clamp(-cfg.adv_clip, cfg.adv_clip)\n"
    assert grpo.count(old) == 1
    (project / "grpo.py").write_text(grpo.replace(old, "    adv = adv * cfg.adv_scale\n" + old))
    text = (project / "lab/lessons.py").read_text()
    anchor = '    "onpolicy": (["--mu", "1"],'
    (project / "lab/lessons.py").write_text(text.replace(anchor, '    "adv_scale": (["--adv-scale", "2"], "twice the '
                                                              'advantages"),\n' + anchor, 1))


def test_a_new_flag_uncommitted_is_drawn_beside_the_unmodified_code_made_from_a_clean_copy(project, tmp_path):
    """docs/adding_a_variant.md's second part, before any commit, in one command: the new experiment's runs (the
    edited files in their folder's name), its base experiment (default: its flags all among adv_scale's) run from
    a clean copy of the commit at the same steps and seeds into default+steps2 (the commit's code, unedited), the
    figure of the two; the learner's working tree is what the learner left, and no worktree is left behind."""
    add_a_flag(project)
    before = git_status(project)
    out = suite(project, tmp_path, "adv_scale", "--seeds", "0", "--steps", "2", *SMALL)
    assert out.returncode == 0, out.stderr + out.stdout
    mine = tmp_path / "exp" / "adv_scale+steps2+config.py+grpo.py" / "seed0"
    base = tmp_path / "exp" / "default+steps2" / "seed0"
    config, base_config = (json.loads((f / "config.json").read_text()) for f in (mine, base))
    assert config["code"]["edited"] == ["config.py", "grpo.py"] and config["adv_scale"] == 2.0
    head = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], cwd=project, capture_output=True,
                          text=True).stdout.strip()
    assert base_config["code"]["edited"] == [] and base_config["commit"] == head and "adv_scale" not in base_config
    assert experiments.last_step(str(base)) == 2
    assert "default: seed 0 of the unmodified code, from a clean copy of commit" in out.stdout
    png = f"exp_adv_scale+steps2+config.py+grpo.py@{provenance.edit_fingerprint(config['code'])}.png"
    assert (tmp_path / "exp" / "figures" / png).exists() and png in out.stdout
    assert git_status(project) == before  # config.py, grpo.py, lab/lessons.py: the learner's own, and nothing else
    worktrees = subprocess.run(["git", "worktree", "list"], cwd=project, capture_output=True, text=True).stdout
    assert len(worktrees.strip().splitlines()) == 1
    again = suite(project, tmp_path, "adv_scale", "--seeds", "0", "--steps", "2", *SMALL)  # now both are there
    assert again.returncode == 0 and "clean copy" not in again.stdout and "skipped" in again.stdout


def test_a_new_experiment_without_a_base_is_refused_in_one_line_naming_base(project, tmp_path):
    """An experiment whose flags contain no committed experiment's (it changes COMMON's eval-every) is refused
    before anything runs, saying how to name its base; with --base it runs beside that one."""
    text = (project / "lab/lessons.py").read_text()
    anchor = '    "onpolicy": (["--mu", "1"],'
    (project / "lab/lessons.py").write_text(text.replace(anchor, '    "sparse_eval": (["--eval-every", "50"], "fewer '
                                                              'evaluations"),\n' + anchor, 1))
    out = suite(project, tmp_path, "sparse_eval", "--seeds", "0", "--steps", "2", *SMALL)
    assert out.returncode == 2 and out.stderr.count("\n") == 1, out.stderr
    assert "sparse_eval: no experiment of the commit has flags that sparse_eval's all contain; name the one it is " \
           "built on: --base NAME" in out.stderr
    assert not (tmp_path / "exp").exists()
    out = suite(project, tmp_path, "sparse_eval", "--base", "default", "--seeds", "0", "--steps", "2", *SMALL)
    assert out.returncode == 0, out.stderr


@pytest.mark.parametrize("name, flags, base", [
    ("default", None, "default"),  # the commit holds it as it is
    ("min_p", ["--min-p", "0.05"], "default"),  # COMMON's flags and one more
    ("lag_minp", ["--rollout-lag", "4", "--lr", "3e-4", "--steps", "60", "--lag-pi-old", "learner", "--min-p", "0.1"],
     "lag_decoupled"),  # the committed experiment with the most flags among its own
    ("many_rho", [*lessons.MANY, "--top-entropy-quantile", "0.5"], "many")])
def test_a_new_experiments_base_is_the_commits_experiment_with_the_most_of_its_flags(monkeypatch, name, flags, base):
    committed = dict(lessons.EXPERIMENTS)
    monkeypatch.setattr(experiments, "committed_experiments", lambda root=None: (committed, lessons.COMMON))
    if flags is not None:
        monkeypatch.setitem(lessons.EXPERIMENTS, name, (flags, "a learner's"))
    assert experiments.base_of(name) == base


def test_edited_runs_are_drawn_beside_the_unmodified_code_and_the_figure_says_whose(tmp_path, monkeypatch):
    """The unmodified runs of this commit's code at the same steps and seeds first; the legend names the edit and
    its fingerprint, the note where each curve came from, the figure's name the fingerprint."""
    exp = tmp_path / "exp"
    write_run(exp / "default+grpo.py" / "seed0", [0.3, 0.6, 0.5])
    with_config(exp / "default+grpo.py" / "seed0", ["grpo.py"])
    for seed in (0, 1):  # seed 1 ran edited code: not the unmodified code's, so made again
        write_run(exp / "default" / f"seed{seed}", [0.3, 0.7, 0.7])
        with_config(exp / "default" / f"seed{seed}", [] if seed == 0 else ["rewards.py"], commit="abc123")
    monkeypatch.setattr(experiments.provenance, "code_commit", lambda root=None: "abc123")
    monkeypatch.setattr(experiments, "last_step", lambda folder: 100)
    made, drawn = [], []
    monkeypatch.setattr(experiments, "make_unmodified", lambda *a: made.append(a))
    monkeypatch.setattr(experiments.subprocess, "run", lambda cmd, check, stdout: drawn.append(cmd))
    fingerprint = provenance.edit_fingerprint({"files": {"grpo.py": "1" * 16}, "edited": ["grpo.py"]})
    paths = experiments.beside_figures(str(exp), str(tmp_path / "fig"), ["default"], "grpo.py", [0, 1],
                                       bases={"default": "default"})
    assert paths == [str(tmp_path / "fig" / f"exp_default+grpo.py@{fingerprint}.png")]
    assert [a[1:3] for a in made] == [("default", [1])]  # the seed missing, made from a clean copy
    (cmd,) = drawn
    labels = [cmd[i + 1] for i, a in enumerate(cmd) if a == "--label"]
    runs, note = cmd[2:cmd.index("--metrics")], cmd[cmd.index("--note") + 1]
    assert runs == [str(exp / "default" / "seed0"), str(exp / "default+grpo.py" / "seed0")]
    assert labels == ["default (commit abc123, unmodified)", "default (your code)"]
    assert note == (f"default (commit abc123, unmodified): seed 0; default (your code): seed 0. Your code: grpo.py edited "
                    f"(edit {fingerprint})")
    assert cmd[cmd.index("--metrics") + 1] == experiments.COMPARISONS["clip"][1]  # the base's own comparison's panels


def test_a_new_reward_terms_runs_are_drawn_with_its_panel_beside_the_base_on_the_learners_code(tmp_path, monkeypatch):
    """A learner's new experiment logs a number the commit's runs never log (its reward term's, reward_repeat): its
    figure draws accuracy, reward and that number, and beside the commit's base the base again on the learner's code,
    the new flag off, which logs the number at weight 0: the rate the new term would act on."""
    exp = tmp_path / "exp"
    write_run(exp / "repeat_penalty+rewards.py" / "seed0", [0.3, 0.6, 0.5])
    with_config(exp / "repeat_penalty+rewards.py" / "seed0", ["rewards.py"])
    rows = [json.loads(line) for line in open(exp / "repeat_penalty+rewards.py" / "seed0" / "metrics.jsonl")]
    (exp / "repeat_penalty+rewards.py" / "seed0" / "metrics.jsonl").write_text(
        "".join(json.dumps({**r, "reward_repeat": 0.1}) + "\n" for r in rows))
    write_run(exp / "default" / "seed0", [0.3, 0.7, 0.7])
    with_config(exp / "default" / "seed0", [], commit="abc123")
    monkeypatch.setattr(experiments.provenance, "code_commit", lambda root=None: "abc123")
    monkeypatch.setattr(experiments, "last_step", lambda folder: 100)
    monkeypatch.setitem(lessons.EXPERIMENTS, "repeat_penalty", (["--format-weight", "0.5"], "a learner's"))
    suites, drawn = [], []
    monkeypatch.setattr(experiments, "run_suite", lambda runs, jobs: suites.append(runs))
    monkeypatch.setattr(experiments.subprocess, "run", lambda cmd, check, stdout: drawn.append(cmd))
    experiments.beside_figures(str(exp), str(tmp_path / "fig"), ["repeat_penalty"], "rewards.py", [0],
                               bases={"repeat_penalty": "default"})
    ((own,),) = suites  # the base, seed 0, on the learner's code
    assert (own.name, own.seed, own.folder) == ("default", 0, str(exp / "default+rewards.py" / "seed0"))
    (cmd,) = drawn
    assert cmd[cmd.index("--metrics") + 1] == "eval_acc,reward,reward_repeat"
    labels = [cmd[i + 1] for i, a in enumerate(cmd) if a == "--label"]
    assert labels == ["default (commit abc123, unmodified)", "default (your code, the new flag off)",
                      "repeat_penalty (your code)"]


def test_check_and_table_name_a_learners_own_runs_and_what_they_are(tmp_path):
    """Beside the experiments' own runs: an edit's runs (its files and fingerprint) and a --label's; check says
    what each is and that nothing records them, each sentence ended; the table has a row for each, and one line
    for the fixes and variants not run, not a row each."""
    for folder, edited in (("default", []), ("default+grpo.py", ["grpo.py"]), ("default+mine", [])):
        write_run(tmp_path / folder / "seed0", [0.25, 0.75, 0.7])
        with_config(tmp_path / folder / "seed0", edited)
    assert experiments.folders(str(tmp_path)) == ["default", "default+grpo.py", "default+mine"]
    fingerprint = provenance.edit_fingerprint({"files": {"grpo.py": "1" * 16}, "edited": ["grpo.py"]})
    assert experiments.learner_runs(str(tmp_path)) == [
        f"{tmp_path / 'default+grpo.py'}: seed 0, grpo.py edited (edit {fingerprint}). results.jsonl records a "
        "commit's experiments, unedited and whole, so nothing checks these.",
        f"{tmp_path / 'default+mine'}: seed 0, cut or labelled runs. results.jsonl records a commit's experiments, "
        "unedited and whole, so nothing checks these."]
    text = report.table(str(tmp_path), experiments.folders(str(tmp_path)))
    assert all(f"| {name} | 1 |" in text for name in ("default", "default+grpo.py", "default+mine"))
    n = len(lessons.FIXES) + len(lessons.FIELD)
    assert text.endswith(f"{n} more fixes and variants, not run here: EXPERIMENTS.md has each (python experiments.py "
                         "fixes, field).") and "not run yet" not in text


def test_pages_writes_the_pages_tables_again_from_the_record_and_records_nothing(project, tmp_path):
    """A learner who adds an experiment changes what the pages say of the suites (the times part counts it): the
    test that fails says to run `python experiments.py pages`, which writes the pages again and records nothing."""
    text = (project / "lab/lessons.py").read_text()
    anchor = '    "onpolicy": (["--mu", "1"],'
    (project / "lab/lessons.py").write_text(text.replace(anchor, '    "lr_half": (["--lr", "5e-5"], "half the lr"),\n'
                                                              + anchor, 1))
    for page in report.PAGES:  # the project's copy holds no pages (conftest.project): the real ones
        os.makedirs(project / os.path.dirname(page), exist_ok=True)
        shutil.copy(os.path.join(ROOT, page), project / page)
    results = (project / "results.jsonl").read_bytes()
    out = subprocess.run([sys.executable, "-c", "from lab import report; print(report.stale_parts(report.load_results()))"],
                         cwd=project, capture_output=True, text=True)
    assert "the part 'times' differs" in out.stdout
    out = subprocess.run([sys.executable, "experiments.py", "pages"], cwd=project, capture_output=True, text=True)
    assert out.returncode == 0 and "nothing recorded: EXPERIMENTS.md" in out.stdout, out.stderr
    assert (project / "results.jsonl").read_bytes() == results
    out = subprocess.run([sys.executable, "-c", "from lab import report; print(report.stale_parts(report.load_results()))"],
                         cwd=project, capture_output=True, text=True)
    assert out.stdout.strip() == "[]"


def test_the_table_ends_without_blank_lines_where_a_part_has_no_runs(tmp_path):
    write_run(tmp_path / "default" / "seed0", [0.25, 0.75, 0.7])
    text = report.table(str(tmp_path))
    assert "| default | 1 |" in text and not text.endswith("\n") and "\n\n\n" not in text


def test_every_panel_the_comparisons_draw_is_titled_in_words():
    keys = {k for _, metrics in experiments.COMPARISONS.values() for panel in metrics.split(",") for k in panel.split("+")}
    untitled = sorted(k for k in keys if k not in plot.TITLES)
    assert not untitled, f"panels titled by their raw key: {untitled}"
    assert plot.metric_subplots(["eval_acc", "kl+kl_exact"]) == [
        ("held-out accuracy, greedy", "bars", ["eval_acc"]),
        ("KL to the reference, as estimated (solid), KL to the reference, exact (dashed)", "line", ["kl", "kl_exact"])]


def test_a_rounding_runs_into_its_own_folder_with_its_threads_and_environment(tmp_path, monkeypatch):
    runs = experiments.plan(["default"], [0], str(tmp_path / "exp"), roundings=["plain", "threads2", "avx2"])
    assert [(r.rounding, r.folder, r.args.threads) for r in runs] == [
        ("plain", str(tmp_path / "exp" / "default" / "seed0"), 1),
        ("threads2", str(tmp_path / "exp-threads2" / "default" / "seed0"), 2),
        ("avx2", str(tmp_path / "exp-avx2" / "default" / "seed0"), 1)]
    started = []
    monkeypatch.setattr(experiments, "start", lambda cmd, log, env: started.append(env))
    monkeypatch.setenv("ATEN_CPU_CAPABILITY", "default")  # a shell's width: no run's but scalar's
    progress = experiments.Progress(runs, [("new", "")] * 3, 1)
    for run in runs:
        experiments.launch(run, "new", "", 1, progress)
    assert [env.get("ATEN_CPU_CAPABILITY") for env in started] == [None, None, "avx2"]


@pytest.mark.parametrize("argv, message", [
    (["default", "--rounding", "avx3"], "unknown rounding 'avx3'; choose from plain, threads2, "
                                        "avx2, scalar"),
    (["default", "--", "--threads", "2"], "--threads after -- is experiments.py's to set for each run: use --rounding "
                                          "threads2"),
    (["default", "--label", "a/b"], "--label 'a/b': letters, digits and . , = - _ only (it names a folder)")])
def test_a_rounding_or_label_that_cannot_be_is_refused_in_one_line(project, tmp_path, argv, message):
    out = suite(project, tmp_path, *argv)
    assert out.returncode == 2 and out.stderr.count("\n") == 1 and message in out.stderr, out.stderr
    assert not (tmp_path / "exp").exists()
