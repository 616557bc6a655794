"""experiments.py: every experiment's flags are valid train.py flags; seeds, table and lessons read runs."""
import argparse
import json
import math
import os
import re
import subprocess
import sys

import pytest

import cli
import experiments
import plot

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

@pytest.mark.parametrize("name", list(experiments.EXPERIMENTS))
def test_every_experiment_parses_as_train_flags(name, capsys):
    cmd = experiments.command(name, 3, "runs/exp")
    _, args = cli.parse_args(cmd[2:])
    cli.check_args(args)  # neither refused nor warned: every flag it types acts
    cli.warn_inert_flags(args)
    assert capsys.readouterr().err == ""
    cli.grpo_config(args)
    assert args.seed == 3 and args.runs_dir == "runs/exp/" + name and args.run_name == "seed3"


def test_nproc_runs_train_under_torchrun():
    cmd = experiments.command("clip", 0, "runs/exp", nproc=2)
    assert cmd[1:7] == ["-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", "train.py"]
    assert cmd[7:] == experiments.command("clip", 0, "runs/exp")[2:]  # the same train.py flags


def test_comparisons_and_lessons_name_existing_experiments():
    assert not set(experiments.LESSONS) & set(experiments.EXPERIMENTS)  # a name on the command line means one thing
    for names, _ in experiments.COMPARISONS.values():
        assert set(names) <= set(experiments.EXPERIMENTS)
    for names, _, _ in experiments.LESSONS.values():
        assert set(names) <= set(experiments.EXPERIMENTS)


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
    line = [l for l in experiments.table(str(tmp_path)).splitlines() if l.startswith("| clip")][0]
    cells = [c.strip() for c in line.strip("|").split("|")]
    assert cells[:5] == ["clip", "2", "25.0% ± 0.0%", "75.0% ± 7.1%", "80.0% ± 7.1%"]  # start, final, peak
    assert cells[5] == "0.775 ± 0.000" and cells[7] == "25.5 ± 0.0" and cells[-1] == "2.0 ± 0.0"  # reward and length of the last 10 steps


def test_the_table_and_the_figures_find_seeds_by_plots_one_rule(tmp_path, monkeypatch):
    """experiments.py has no rule of its own for seed folders: what plot.seed_folders names is what it reads."""
    for name in ("clip/seed0", "clip/seed1", "clip/run_a", "baseline/run_a"):
        write_run(tmp_path / name, [0.25, 0.75, 0.7])
    monkeypatch.setattr(plot, "seed_folders", lambda folder: [os.path.join(folder, "run_a")]
                        if os.path.isdir(os.path.join(folder, "run_a")) else [])  # a rule other than seed<k>
    table = experiments.table(str(tmp_path)).splitlines()
    assert [l.split("|")[1:3] for l in table if l.startswith(("| clip", "| baseline"))] == \
        [[" baseline ", " 1 "], [" clip ", " 1 "]]  # run_a alone, not seed0 and seed1
    drawn = []
    monkeypatch.setattr(experiments.subprocess, "run", lambda cmd, check: drawn.append(cmd[2:cmd.index("--metrics")]))
    experiments.figures(str(tmp_path), str(tmp_path / "fig"))
    assert drawn[0] == [str(tmp_path / "baseline"), str(tmp_path / "clip")]


def test_lessons_count_the_seeds_where_they_hold(tmp_path, monkeypatch):
    for seed, end in [(0, 0.3), (1, 0.5)]:
        write_run(tmp_path / "baseline" / f"seed{seed}", [0.2, 0.8, end])
        write_run(tmp_path / "clip" / f"seed{seed}", [0.2, 0.8, 0.8])
    monkeypatch.setattr(experiments, "LESSONS", {"falls": (["baseline", "clip"],
                                                           lambda b, c: b["peak"] - b["final"] >= 0.4, "a claim")})
    text = experiments.table(str(tmp_path))
    assert "**falls** (a claim): held in 1 of 2 seeds" in text
    assert "| 0 | 80.0% (10) -> 30.0% | 80.0% (10) -> 80.0% | yes |" in text  # seed, peak (step) -> final, held
    assert "| 1 | 80.0% (10) -> 50.0% | 80.0% (10) -> 80.0% | no |" in text


def test_the_runaway_lesson_asks_for_the_signs_of_the_books_7_3_log():
    """runs_away: the learner's entropy at half of ln V, and the sampled held-out accuracy 15
    points below its peak and 15 below the fix's; remove any one and it does not hold. Greedy
    accuracy and the cap are not asked (the book's own greedy fell 13.2 points)."""
    broken = {"peak": 0.9, "final": 0.85, "entropy_peak": 3.0, "ln_vocab": math.log(287), "truncated_peak": 0.2,
              "sampled_peak": 0.75, "sampled_final": 0.4}
    fixed = {"peak": 0.9, "final": 0.85, "sampled_peak": 0.85, "sampled_final": 0.8}
    assert experiments.runs_away(broken, fixed)
    for change in ({"entropy_peak": 2.8}, {"sampled_final": 0.61}, {"sampled_peak": 0.54}, {"sampled_peak": None}):
        assert not experiments.runs_away({**broken, **change}, fixed), change
    assert not experiments.runs_away(broken, {**fixed, "sampled_final": 0.54})  # ends < 15 below the fix


def test_the_format_lesson_asks_that_the_ungated_reward_hides_what_the_gated_one_shows():
    """Both runs' sampled accuracy falls 15 points; ungated, the format reward ends above 0.9 and the
    reward's lowest 50-step mean after its peak keeps half of it; gated, it loses more than half."""
    ungated = {"sampled_peak": 0.8, "sampled_final": 0.3, "reward_format_end": 0.97, "reward_peak50": 1.4,
               "reward_low_after_peak": 1.1}
    gated = {"sampled_peak": 0.8, "sampled_final": 0.4, "reward_format_end": 0.5, "reward_peak50": 1.0,
             "reward_low_after_peak": 0.3}
    assert experiments.reward_hides_the_collapse(ungated, gated)
    for run, change in ((ungated, {"sampled_final": 0.7}), (gated, {"sampled_final": 0.7}),
                        (ungated, {"reward_format_end": 0.9}), (ungated, {"reward_low_after_peak": 0.69}),
                        (gated, {"reward_low_after_peak": 0.5})):
        u, g = ({**ungated, **change}, gated) if run is ungated else (ungated, {**gated, **change})
        assert not experiments.reward_hides_the_collapse(u, g), change


def test_run_summary_reads_the_runaway_numbers(tmp_path):
    rows = [{"step": 0, "time": 0, "eval_acc": 0.2, "ln_vocab": 5.0}]
    rows += [{"step": s, "time": s, "entropy": s / 10, "truncated_frac": 0.5 if 30 <= s < 50 else 0.0}
             for s in range(1, 61)]
    s = experiments.run_summary(rows)
    # the highest 20-step mean: entropy over steps 41..60 (5.05); the cut share over 30..49 (0.5), 0 over 1..20
    assert s["ln_vocab"] == 5.0 and s["entropy_peak"] == pytest.approx(5.05) and s["truncated_peak"] == 0.5
    assert s["truncated_start"] == 0.0
    steps, means = experiments.trailing_means(rows, "entropy", window=3)
    assert steps[:4] == [1, 2, 3, 4] and means[:4] == pytest.approx([0.1, 0.15, 0.2, 0.3])  # fewer steps first
    assert math.isnan(experiments.highest_trailing_mean(rows[:3], "entropy"))  # fewer steps than the window


def test_first_moves_says_which_metric_moved_when():
    rows = [{"step": 0, "eval_acc": 0.3}]
    for s in range(1, 61):
        rows.append({"step": s, "entropy": 0.1 if s <= 30 else 0.55, "kl": -0.2 if s <= 20 else -0.9,
                     "resp_len": 20.0, "sampler_gap": 0.01})
        if s % 10 == 0:
            rows[-1]["eval_acc"] = {10: 0.6, 20: 0.7, 30: 0.65, 40: 0.55}.get(s, 0.5)
    moves = experiments.first_moves(rows)
    # the peak is at step 20, where each metric's 20-step mean is its reference. |kl|'s mean reaches
    # twice its 0.2 at step 26: (14 x 0.2 + 6 x 0.9) / 20 = 0.41 (step 25: 0.375); entropy at 35:
    # (15 x 0.1 + 5 x 0.55) / 20 = 0.2125 (step 34: 0.19); accuracy at 40: 0.55 <= 0.7 - 0.1; length
    # and gap never move, ratio_max was never logged
    assert moves == {"eval_acc": 40, "kl": 26, "entropy": 35, "sampler_gap": None, "resp_len": None, "ratio_max": None}
    assert experiments.moved({"moves": moves}) == "kl 26, entropy 35, eval_acc 40"


def test_every_listed_command_gives_each_flag_once():
    for name in experiments.EXPERIMENTS:
        flags = [t for t in experiments.train_flags(name) if t.startswith("--")]
        assert len(flags) == len(set(flags)), (name, flags)
    # a later list replaces an earlier value, in the earlier place
    assert experiments.merge_flags(["--steps", "100", "--gated"], ["--steps", "80"]) == ["--steps", "80", "--gated"]


def test_an_experiment_named_after_a_recipe_runs_that_recipe():
    import grpo
    for name, (flags, _) in experiments.EXPERIMENTS.items():
        recipe = name if name in grpo.RECIPES else name.split("_")[0] if name.startswith("book") else None
        if recipe:
            assert flags[flags.index("--recipe") + 1] == recipe, name


def test_a_lesson_name_runs_its_experiments(monkeypatch, tmp_path):
    ran = []
    monkeypatch.setattr(experiments, "run_all", lambda jobs, n: ran.extend(jobs))
    args = argparse.Namespace(list=False, names=["naive_kl", "book_kl"], seeds=[0, 1], runs_dir=str(tmp_path), extra=[],
                              nproc=1, jobs=2, figures=str(tmp_path / "fig"), write=None)
    experiments.main(args)
    runs = [(c[c.index("--runs-dir") + 1].rsplit("/", 1)[1], c[c.index("--run-name") + 1]) for c in ran]
    assert runs == [(n, f"seed{s}") for n in experiments.LESSONS["naive_kl"][0] for s in (0, 1)]  # book_kl once


def test_an_unknown_name_is_a_usage_error_in_one_line():
    """exit 2, as argparse's own usage errors and train.py's, naming the lessons and experiments."""
    out = subprocess.run([sys.executable, "experiments.py", "nosuch"], cwd=ROOT, capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 2 and out.stdout == "" and "Traceback" not in out.stderr
    assert out.stderr.startswith("experiments.py: error: unknown experiment 'nosuch'; choose from all, table, fixes, naive_kl")
    assert len(out.stderr.splitlines()) == 1


def test_run_summary_reads_the_rewards_50_step_peak_and_its_lowest_mean_after(tmp_path):
    """The total reward starts at 0.2 (steps 1..50), rises to 1.5 (51..100) and falls to 0.5
    (101..200): its highest whole 50-step mean is 1.5 (steps 51..100), the lowest after it 0.5
    (151..200); the lower mean before the peak is not the one after it."""
    rows = [{"step": 0, "eval_acc": 0.1}]
    rows += [{"step": t, "time": t, "reward": 0.2 if t <= 50 else 1.5 if t <= 100 else 0.5, "reward_correct": 0.2,
              "reward_format": 0.95} for t in range(1, 201)]
    s = experiments.run_summary(rows)
    assert s["reward_peak50"] == pytest.approx(1.5) and s["reward_low_after_peak"] == pytest.approx(0.5)
    assert s["reward_format_end"] == pytest.approx(0.95) and s["bonus"] > 0


@pytest.mark.parametrize("item", list(experiments.FIXES))
def test_each_fix_pair_differs_in_its_own_flags_and_nothing_else(item):
    """fix_<item>: its two runs resolve to the same train.py flags (recipe and defaults filled in)
    but for the item's own, so that what moves between them is the item's doing."""
    without, with_ = experiments.LESSONS["fix_" + item][0]
    assert (without, with_) == experiments.FIXES[item][3]
    a, b = (vars(cli.parse_args(experiments.command(n, 0, "runs/exp")[2:])[1]) for n in (without, with_))
    differ = {k for k in a.keys() | b.keys() if a.get(k) != b.get(k)} - {"runs_dir", "typed_flags"}  # where it ran, what was typed
    own = {"dynamic_sampling": {"dynamic_sampling"}, "token_mean": {"loss_agg"}, "drgrpo": {"loss_agg", "adv_norm"},
           "overlong": {"overlong_cache"}, "keep_mask": {"keep_sampling_mask"}, "tis": {"tis_cap"},
           "kl_reweight": {"kl_reweight"}, "entropy_bonus": {"entropy_coef"},
           "gspo": {"ratio_level", "clip", "clip_high"}, "clip_higher": {"clip_high"},
           "cispo": {"objective", "clip", "clip_high"}, "dual_clip": {"dual_clip"},
           "off_policy_mask": {"off_policy_mask"}, "gdpo": {"reward_norm"}}[item]
    assert differ == own, (item, differ)


def test_every_fix_has_a_gate_that_run_summary_computes():
    """Each fix's gate (GATES) is a number of run_summary's, so the table's gate column can be filled."""
    assert set(experiments.GATES) == set(experiments.FIXES)
    rows = [{"step": 0, "eval_acc": 0.1}] + [{"step": t, "time": t, "zero_std_frac": 0.25, "logratio_std_token": 0.3}
                                             for t in range(1, 21)]
    summary = experiments.run_summary(rows)
    assert all(key in summary for key, _ in experiments.GATES.values())
    assert summary["mean_zero_std_frac"] == pytest.approx(0.25) and summary["early_logratio_std_token"] == pytest.approx(0.3)


def test_the_fixes_table_gives_each_seed_and_counts_the_metric_moving_its_way():
    s = lambda v: {"mean_signal_groups": v}  # noqa: E731 (a summary holding one metric)
    summaries = {"ds4": {"seed0": s(2.0), "seed1": s(3.0)}, "ds4_dynamic": {"seed0": s(3.5), "seed1": s(2.5)}}
    row = [line for line in experiments.fixes_table(summaries) if line.startswith("| dynamic_sampling")]
    assert len(row) == 1 and "2 -> 3.5, 3 -> 2.5" in row[0] and "| 1 of 2 |" in row[0]
    assert "| groups with no signal: -, - |" in row[0]  # the gate's column: these summaries lack its number
    assert experiments.fixes_table({"ds4": summaries["ds4"]}) == []  # no row without both runs
