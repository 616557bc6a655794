"""The verdicts EXPERIMENTS.md prints ("held in 3 of 3"), each held to a hand-made case: every
lesson, fix and variant check of lessons.py, the run_summary numbers they and the tables read,
and a run that lacks one of those numbers.

    python -m pytest -q tests/test_verdicts.py

The checks are tested once, over lessons.judged(): a lesson, fix or variant added later is covered
as it is, and a lesson judged by a new rule fails here until its rule has a hand-made pair in HOLDING.
"""
import json
import math
import statistics

import pytest


import lessons
import report

# A pair of summaries (broken, fixed) that holds, for each rule a lesson is judged by, and pairs
# that each move one number to just the wrong side of the rule's threshold (15 points, half of ln V,
# the format reward above 0.9, half the reward's peak).
RUNAWAY = {"entropy_peak": 3.0, "ln_vocab": 5.0, "sampled_peak": 0.75, "sampled_final": 0.40}
STAYED = {"entropy_peak": 0.5, "ln_vocab": 5.0, "sampled_peak": 0.85, "sampled_final": 0.80}
UNGATED = {"sampled_peak": 0.8, "sampled_final": 0.3, "reward_format_end": 0.97, "reward_peak50": 1.4,
           "reward_low_after_peak": 1.1}
GATED = {"sampled_peak": 0.8, "sampled_final": 0.4, "reward_format_end": 0.5, "reward_peak50": 1.0,
         "reward_low_after_peak": 0.3}
HOLDING = {
    lessons.broken_vs_fixed: ({"peak": 0.70, "final": 0.40}, {"peak": 0.72, "final": 0.65}),
    lessons.falls_and_trails: ({"peak": 0.70, "final": 0.54}, {"peak": 0.72, "final": 0.65}),  # 16 down, 11 behind
    lessons.runs_away: (RUNAWAY, STAYED),
    lessons.reward_hides_the_collapse: (UNGATED, GATED),
}
NEAR = {
    lessons.broken_vs_fixed: [({"peak": 0.70, "final": 0.56}, {"peak": 0.72, "final": 0.72}),  # falls 14 points
                                  ({"peak": 0.70, "final": 0.40}, {"peak": 0.72, "final": 0.54})],  # ends 14 below
    lessons.falls_and_trails: [({"peak": 0.70, "final": 0.56}, {"peak": 0.72, "final": 0.72}),  # falls 14 points
                               ({"peak": 0.70, "final": 0.40}, {"peak": 0.72, "final": 0.49})],  # ends 9 below
    lessons.runs_away: [({**RUNAWAY, "entropy_peak": 2.45}, STAYED),  # entropy just under half of ln V
                            ({**RUNAWAY, "sampled_final": 0.61}, STAYED),  # sampled accuracy falls 14 points
                            (RUNAWAY, {**STAYED, "sampled_final": 0.54})],  # ends 14 below the fix
    lessons.reward_hides_the_collapse: [({**UNGATED, "sampled_final": 0.66}, GATED),  # falls 14 points
                                            (UNGATED, {**GATED, "sampled_final": 0.66}),
                                            ({**UNGATED, "reward_format_end": 0.9}, GATED),  # not above 0.9
                                            ({**UNGATED, "reward_low_after_peak": 0.69}, GATED),  # under half its peak
                                            (UNGATED, {**GATED, "reward_low_after_peak": 0.5})],  # not under half
}
# A without-run's numbers, about as recorded (EXPERIMENTS.md), one for each number a fix or variant is judged by
TYPICAL = {"mean_signal_groups": 2.8, "late_resp_len_wrong": 21.4, "late_resp_len": 18.0, "mean_truncated_frac": 0.22,
           "sampled_final": 0.40, "final": 0.6, "eval_mean": 0.55, "drop": 0.80, "kl_bias": 0.19, "sampler_entropy": 3.5,
           "entropy": 0.3, "entropy_peak_share": 0.7, "think_half_step": 15, "distinct_final": 2.0,
           "grad_limited_steps": 0.2, "reward": 0.6, "mean_kl_exact": 0.05}


JUDGED = dict(lessons.judged())  # every lesson, fix (fix_<item>) and variant (field_<method>), by its name


def number_pair(number, gain):
    """(without, with) for a number: the with-run moves it its way by `gain` times its margin, every other number
    the same."""
    key, (size, unit) = number.key, number.margin
    without = {k: TYPICAL.get(k, 0.5) for k in {key, *TYPICAL}}
    need = size * abs(without[key]) if unit == "relative" else size
    return without, {**without, key: without[key] + gain * need * (1 if number.side == "higher" else -1)}


def holding_pair(lesson):
    judged = JUDGED[lesson]
    check = getattr(judged, "rule", None) if isinstance(judged, lessons.Variant) else judged.check
    if isinstance(judged, (lessons.Fix, lessons.Variant)) and check not in HOLDING:
        return number_pair(judged.number, 1.1)  # moved by its margin, or (the 80/20 rule) not behind by it
    assert check in HOLDING, f"{lesson}: its rule {check.__name__} needs a hand-made pair in HOLDING and NEAR"
    return HOLDING[check]


def near_pairs(lesson):
    judged = JUDGED[lesson]
    check = getattr(judged, "rule", None) if isinstance(judged, lessons.Variant) else judged.check
    if isinstance(judged, (lessons.Fix, lessons.Variant)) and check not in HOLDING:
        return [number_pair(judged.number, -1.1 if keeps(judged) else 0.9)]
    return NEAR[check]


def keeps(judged):
    """A method whose source claims it keeps what it is given (the 80/20 rule: the accuracy with 20% of the tokens):
    its check holds where its number is not behind by the margin, equal runs included."""
    return isinstance(judged, lessons.Variant) and judged.rule is not None and judged.rule not in HOLDING


@pytest.mark.parametrize("lesson", list(JUDGED))
def test_a_lesson_holds_on_its_hand_made_pair_and_not_on_the_pair_reversed(lesson):
    check = JUDGED[lesson].check
    broken, fixed = holding_pair(lesson)
    assert check(broken, fixed)
    if not keeps(JUDGED[lesson]):
        assert not check(fixed, broken)
    else:  # reversed, the method is behind by more than its margin
        assert not check(*number_pair(JUDGED[lesson].number, -1.1))


@pytest.mark.parametrize("lesson", [n for n in JUDGED if not keeps(JUDGED[n])])
def test_a_lesson_does_not_hold_on_identical_runs_nor_with_one_number_1_percent_off(lesson):
    """Two runs that differ by what two seeds of one run differ by prove nothing: not the same
    summary twice, nor the same with any one of its numbers 1% higher or lower, either way round.
    (Not for a method that claims to keep what it is given: equal runs are what it claims.)"""
    check = JUDGED[lesson].check
    for run in holding_pair(lesson):
        assert not check(run, dict(run))
        for key, value in run.items():
            for factor in (0.99, 1.01):
                moved = {**run, key: value * factor}
                assert not check(run, moved) and not check(moved, run), (key, factor)


@pytest.mark.parametrize("lesson", list(JUDGED))
def test_a_lesson_does_not_hold_on_a_pair_inside_its_margin(lesson):
    check = JUDGED[lesson].check
    for broken, fixed in near_pairs(lesson):
        assert not check(broken, fixed), (broken, fixed)


@pytest.mark.parametrize("lesson", list(JUDGED))
def test_a_lesson_whose_run_lacks_a_number_names_it_or_does_not_read_it(lesson):
    """Any one number of a holding pair missing (absent, None or nan: an old or interrupted run):
    the verdict either still holds, the check not reading it, or names that number and that run;
    never a plain "no"."""
    check, names = JUDGED[lesson].check, ["broken", "fixed"]
    pair = holding_pair(lesson)
    for i, run in enumerate(pair):
        for key in run:
            for lacking in ({k: v for k, v in run.items() if k != key}, {**run, key: None}, {**run, key: math.nan}):
                runs = [lacking if j == i else other for j, other in enumerate(pair)]
                held, why = report.judge(check, runs, names)
                assert held or why == f"{names[i]} has no {key}", (key, why)
    assert report.judge(check, [{}, {}], names)[0] is False  # two empty metrics files


# ------------------------------------------------------------------- every record names what it is judged by

@pytest.mark.parametrize("name", list(JUDGED))
def test_every_record_names_its_claim_source_mechanism_rival_and_costs_and_each_is_a_real_number(name):
    """Each lesson, fix and variant states its source's claim (a sentence) and the source, the number its mechanism
    acts on, at least one rival (an experiment of the same regime, judged by the same number), and its costs; every
    key is one run_summary gives (EXPECTED below: by hand) and the pages can name (lessons.METRICS)."""
    judged, summary_keys = JUDGED[name], {e[0] for e in EXPECTED}
    record = judged.record
    assert len(record.claim.split()) >= 8 and record.claim.rstrip()[-1] in ".!?", f"{name}: no claim in a sentence"
    assert record.source and any(c.isdigit() or "." in c for c in record.source.split()), f"{name}: no source named"
    mechanism = record.mechanism
    assert isinstance(mechanism, lessons.Mechanism), f"{name}: no mechanism"
    for key in (mechanism.key, mechanism.without_key or mechanism.key, judged.number.key, *record.costs):
        assert key in summary_keys and key in lessons.METRICS, f"{name}: {key} is not a run_summary number it can name"
    assert record.rivals, f"{name}: no rival"
    for rival in record.rivals:
        assert rival in lessons.EXPERIMENTS and rival not in judged.experiments, (name, rival)
    assert set(record.costs) <= set(report.COST_NAMES), name


@pytest.mark.parametrize("mechanism, quiet, acting", [
    (lessons.above("x", 0), (1.0, 0.0), (1.0, 1e-6)),
    (lessons.at_most("x", 0.01), (1.0, 0.02), (1.0, 0.01)),
    (lessons.within("x", 0.1, 0.4), (1.0, 0.45), (1.0, 0.1)),
    (lessons.below_without("x", 0.5), (10.0, 5.1), (10.0, 5.0)),
    (lessons.above_without("x", 1.1), (2.0, 2.2), (2.0, 2.21))])
def test_a_mechanism_acts_on_its_side_of_its_bound_and_not_a_hair_short_of_it(mechanism, quiet, acting):
    assert not mechanism.test(*quiet) and mechanism.test(*acting)


def test_a_number_sets_a_run_better_same_or_worse_than_a_rival_by_its_margin():
    """Accuracy higher by 10 points: 0.65 against a rival's 0.5 is better, 0.55 the same, 0.35 worse; lengths lower
    by 25% of the other run's: 15 against 20 is better (5 >= 5), 16 the same."""
    acc, length = lessons.Number("final", "higher", (0.10, "points")), lessons.Number("x", "lower", (0.25, "relative"))
    assert [acc.against({"final": 0.5}, {"final": v}) for v in (0.65, 0.55, 0.35)] == ["better", "same", "worse"]
    assert [length.against({"x": 20.0}, {"x": v}) for v in (15.0, 16.0, 26.0)] == ["better", "same", "worse"]


def recorded_without(judged):
    """The number a fix or variant is judged by, in its run without it, seeds 0, 1 and 2, as results.jsonl records
    it (the runs EXPERIMENTS.md's tables are written from)."""
    runs = report.summaries_from_results(report.load_results()).get(judged.experiments[0], {})
    return [runs[f"seed{s}"][judged.number.key] for s in (0, 1, 2) if f"seed{s}" in runs]


def round_up(x, digits=2):
    """x rounded up to `digits` significant digits: 0.1625 -> 0.17, 0.0385 -> 0.039."""
    scale = 10 ** (math.floor(math.log10(x)) - digits + 1)
    return math.ceil(round(x / scale, 9)) * scale


@pytest.mark.parametrize("name", [n for n, j in JUDGED.items() if not isinstance(j, lessons.Lesson)
                                  and getattr(j, "rule", None) not in HOLDING])
def test_each_fix_and_variant_asks_twice_the_spread_of_the_runs_without_it_and_says_so(name):
    """The margin is not tuned until a method passes: it is twice the std over seeds of the run without it (relative
    margins: twice the std over the mean), rounded up to two digits, from the recorded runs alone, and the rule gives
    it. (SAPO and GMPO are judged by lesson 1's rule, the lessons by their own.)"""
    judged = JUDGED[name]
    size, unit = judged.number.margin
    seeds = recorded_without(judged)
    assert len(seeds) == 3, f"{name}: results.jsonl records {len(seeds)} seeds of its run without it"
    spread = statistics.stdev(seeds) / (statistics.mean(seeds) if unit == "relative" else 1)
    assert size == pytest.approx(round_up(2 * spread)), (name, size, 2 * spread)
    assert lessons.margin_text(size, unit) in judged.number.text


def test_the_field_table_says_not_run_yet_and_counts_seeds_where_runs_exist():
    s = lambda v, masked=0.01: {"grad_limited_steps": v, "mean_is_masked_frac": masked, "minutes": 1.0}  # noqa: E731
    summaries = {"lag_decoupled": {"seed0": s(0.4, None), "seed1": s(0.45, None)},
                 "lag_decoupled_icepop": {"seed0": s(0.05), "seed1": s(0.4, 0.0)},
                 "lag_decoupled_tis": {"seed0": s(0.05), "seed1": s(0.1)}}
    rows = {line.split(" | ")[0][2:]: line for line in report.field_table(summaries).splitlines()[2:]}
    assert set(rows) == set(lessons.FIELD)
    cells = rows["icepop"].split(" | ")
    assert cells[4:] == ["1 of 2", "steps whose gradient norm passed its limit (lower, by >= 14 points)", "40-45% -> 5-40%",
                         "1 of 2", "lag_decoupled_tis: 1 same, 1 worse", "tokens masked 0.5%; time x1.00 |"]
    assert "| not run yet |" in rows["sapo"] and rows["sapo"].endswith("| - | - | - |")


def test_round_up_keeps_two_digits_upwards():
    assert [round_up(x) for x in (0.1625, 0.0385, 0.3196, 0.12, 2.0)] == pytest.approx([0.17, 0.039, 0.32, 0.12, 2.0])


# ------------------------------------------------------------------- run_summary on a hand-made run

def hand_made_run():
    """100 steps and an evaluation every 10, each metric shaped so that every number a check or
    a table reads is known by hand (the expected values below say how)."""
    acc = {10: 0.5, 20: 0.8, 30: 0.7, 40: 0.6, 50: 0.65, 60: 0.6, 70: 0.5, 80: 0.55, 90: 0.45, 100: 0.4}
    sampled = {10: 0.6, 20: 0.7, 30: 0.9, 40: 0.8, 50: 0.7, 60: 0.6, 70: 0.5, 80: 0.45, 90: 0.4, 100: 0.35}
    rows = [{"step": 0, "time": 0.0, "eval_acc": 0.3, "eval_sampled_acc": 0.2, "eval_pass_at_k": 0.5, "ln_vocab": 5.66,
             "eval_distinct": 3.0}]
    for s in range(1, 101):
        reward = 0.0 if s <= 30 else 1.0 if s <= 60 else 0.5
        row = {"step": s, "time": 3.0 * s, "reward": reward, "reward_correct": 0.8 * reward,
               "reward_format": 0.4 if s <= 80 else 0.8 if s <= 90 else 1.0,
               "entropy": 8.0 if s <= 2 else 1.0 if s <= 40 else 3.0 if s <= 60 else 10.0 if s == 80 else 0.5,
               "truncated_frac": 0.1 if s <= 20 else 0.6 if s <= 40 else 0.0,
               "resp_len_wrong": 10 if s <= 20 else 30 if s <= 50 else 16 if s <= 75 else None if s == 76 else 24,
               "resp_len": s / 10, "clip_frac": 0.03 if s > 90 else 0.01, "sampler_gap": 0.02,
               "kl_exact": 0.5, "kl": 0.6 if s % 2 else 0.45, "signal_groups": 3 if s <= 50 else 4,
               "sampler_entropy": 0.2 if s > 90 else 1.5, "grad_norm_max": 2.0 if s <= 50 else 1.0,
               # the fixes' gates and the stale negatives (their means over the run; None: a step without any)
               "zero_std_frac": 0.5 if s <= 50 else 0.25, "tis_weight_mean": 1.0 if s <= 50 else 0.9,
               "sampler_kl_k3": 0.02 if s <= 80 else 0.07, "tis_weight_above_2": 0.1 if s <= 10 else 0.0,
               "ppo_kl": 0.001 * (s % 4), "clip_high_lowp_frac": None if s <= 50 else 0.6,
               "adv_correct_corr": None if s <= 20 else 0.5 if s <= 60 else 1.0,
               "neg_ratio_above_3": 0.04 if s % 2 else 0.0, "neg_far_frac": 0.3 if s > 75 else 0.1,
               "neg_sampler_kl": -0.05 if s <= 50 else 0.15, "pg_k1": None if s <= 50 else 2.0,
               "logratio_std_token": 0.4 if s <= 10 else 0.1,
               # the mechanisms and costs (lessons.Record): means of the run, or of the steps that have one
               "logratio_std_seq": 0.2 if s <= 10 else 0.05, "format_paid_wrong": 0.3 if s <= 50 else None,
               "token_weight_spread": 1.0 if s % 2 else 3.0, "reward_overlong": -0.1 if s > 80 else 0.0,
               "clip_frac_high": 0.005, "off_policy_masked_frac": 0.25 if s > 50 else None, "is_masked_frac": 0.04,
               "rejected_frac": 0.1 if s <= 10 else 0.0, "is_weight_mean": 0.8 if s <= 50 else 0.9,
               "low_entropy_frac": 0.8, "adv_to_centred": None if s <= 20 else 4 / 3,
               "equal_groups_adv": 0.5 if s % 4 == 0 else 0.0, "kl_grad_bias": 0.3 if s <= 50 else 0.1}
        if s % 10 == 0:
            row.update(eval_acc=acc[s], eval_sampled_acc=sampled[s], eval_pass_at_k=0.95 if s == 100 else 0.9,
                       eval_distinct=3.0 - s / 80)
        rows.append(row)
    return rows


EXPECTED = [  # (run_summary key, value, how it is known)
    ("start", 0.3, "the first evaluation, step 0"),
    ("final", 0.4, "the last evaluation"),
    ("peak", 0.8, "the highest evaluation"),
    ("peak_step", 20, "where it was"),
    ("drop", 0.4, "peak - final"),
    ("sampled_peak", 0.9, "the highest sampled evaluation, step 30"),
    ("sampled_final", 0.35, "the last sampled evaluation"),
    ("distinct_start", 3.0, "the different right answers a problem at the first evaluation, step 0"),
    ("distinct_final", 1.75, "... at the last: 3 - 100 / 80"),
    ("distinct_fall", 1.25, "start - final"),
    ("minutes", 5.0, "300 s at the last step"),
    ("ln_vocab", 5.66, "logged at step 0"),
    ("reward", 0.5, "last 10 steps"),
    ("entropy", 0.5, "last 10 steps; the spike at step 80 is before them"),
    ("resp_len", 9.55, "last 10 steps: (9.1 + ... + 10.0) / 10"),
    ("clip_frac", 0.03, "last 10 steps"),
    ("kl", 0.525, "last 10 steps: five at 0.6, five at 0.45"),
    ("sampler_gap", 0.02, "last 10 steps"),
    ("sampler_entropy", 0.2, "last 10 steps"),
    ("reward_format", 1.0, "last 10 steps"),
    ("reward_format_end", 0.9, "last 20 steps: ten at 0.8, ten at 1.0"),
    ("entropy_peak", 3.0, "steps 41-60; not the 8.0 of steps 1-2 (fewer than 20 steps) nor the spike at 80"),
    ("reward_peak50", 0.8, "steps 31-80: thirty at 1.0, twenty at 0.5"),
    ("reward_low_after_peak", 0.6, "steps 51-100, after the peak; the 0.4 of steps 1-50 is before it"),
    ("bonus", 0.1, "reward - reward_correct = 0.2 reward, over all steps: 0.2 * 0.5"),
    ("truncated_start", 0.1, "the first 20 steps"),
    ("truncated_peak", 0.6, "steps 21-40"),
    ("mean_truncated_frac", 0.14, "over the run: (20 * 0.1 + 20 * 0.6) / 100"),
    ("len_wrong_start", 10.0, "the first 20 steps"),
    ("len_wrong_peak", 30.0, "within steps 21-50"),
    ("late_resp_len_wrong", (25 * 16 + 24 * 24) / 49, "steps 51-100, step 76 without a wrong answer left out"),
    ("mean_signal_groups", 3.5, "over the run: 50 steps at 3, 50 at 4"),
    ("kl_bias", 0.05, "|mean of the errors (+0.2, -0.1 by turns)|: what re-weighting removes"),
    ("kl_error", 0.15, "mean of |error|: the bias and the noise together"),
    ("mean_grad_norm_max", 1.5, "over the run: 50 steps at 2.0, 50 at 1.0"),
    ("grad_limited_steps", 0.5, "steps above 1: the 50 at 2.0; the 50 at exactly 1.0 are not"),
    ("think_half_step", 81, "the first 3-step mean of reward_format at or above 0.5: (0.4 + 0.4 + 0.8) / 3"),
    ("eval_low", 0.4, "the lowest evaluation after the start, step 100's; not step 0's 0.3"),
    ("mean_zero_std_frac", 0.375, "over the run: 50 steps at 0.5, 50 at 0.25"),
    ("mean_tis_weight_mean", 0.95, "over the run: 50 steps at 1.0, 50 at 0.9"),
    ("mean_sampler_kl_k3", 0.03, "over the run: (80 * 0.02 + 20 * 0.07) / 100"),
    ("mean_tis_weight_above_2", 0.01, "over the run: 10 steps at 0.1"),
    ("mean_ppo_kl", 0.0015, "over the run: 0, 1, 2, 3 thousandths by turns"),
    ("mean_clip_high_lowp_frac", 0.6, "over the steps that clipped high, 51-100; the others have none, not 0"),
    ("mean_adv_correct_corr", 0.75, "over the steps that have one, 21-100: forty at 0.5, forty at 1.0"),
    ("mean_neg_ratio_above_3", 0.02, "over the run: 0.04 and 0 by turns"),
    ("mean_neg_far_frac", 0.15, "over the run: (75 * 0.1 + 25 * 0.3) / 100"),
    ("mean_neg_sampler_kl", 0.05, "over the run: 50 steps at -0.05, 50 at 0.15"),
    ("mean_pg_k1", 2.0, "over the steps that have one, 51-100"),
    ("early_logratio_std_token", 0.4, "the first 10 steps; the run's mean would be 0.13"),
    ("early_logratio_std_seq", 0.2, "the first 10 steps"),
    ("grad_norm_peak", 2.0, "the largest grad_norm_max of the run"),
    ("kl_low", 0.45, "the lowest KL term a step: 0.45 on even steps"),
    ("late_resp_len", 7.55, "steps 51-100: (5.1 + ... + 10.0) / 50"),
    ("eval_mean", 0.575, "the evaluations after step 0: (0.5 + 0.8 + ... + 0.4) / 10"),
    ("entropy_peak_share", 3.0 / 5.66, "entropy_peak over ln V"),
    ("mean_sampler_gap", 0.02, "over the run"),
    ("mean_format_paid_wrong", 0.3, "over the steps that have one, 1-50"),
    ("mean_token_weight_spread", 2.0, "1 and 3 by turns"),
    ("mean_reward_overlong", -0.02, "over the run: 20 steps at -0.1"),
    ("mean_clip_frac", 0.012, "over the run: (90 * 0.01 + 10 * 0.03) / 100"),
    ("mean_clip_frac_high", 0.005, "over the run"),
    ("mean_off_policy_masked_frac", 0.25, "over the steps that have one, 51-100"),
    ("mean_is_masked_frac", 0.04, "over the run"),
    ("mean_rejected_frac", 0.01, "over the run: 10 steps at 0.1"),
    ("mean_is_weight_mean", 0.85, "over the run: 50 steps at 0.8, 50 at 0.9"),
    ("mean_low_entropy_frac", 0.8, "over the run"),
    ("mean_adv_to_centred", 4 / 3, "over the steps that have one, 21-100"),
    ("mean_equal_groups_adv", 0.125, "0.5 every fourth step"),
    ("mean_kl_grad_bias", 0.2, "over the run: 50 steps at 0.3, 50 at 0.1"),
    ("mean_kl_exact", 0.5, "over the run"),
]


def test_the_policys_move_a_step_is_read_after_the_first_learning_and_at_the_end():
    """step_moves: the mean ppo_kl of steps 11-30 of 100 (10% to 30% of the run), and of steps 81-100."""
    rows = [{"step": 0}] + [{"step": s, "ppo_kl": s / 1000, "time": s} for s in range(1, 101)]
    early, late = report.step_moves(rows)
    assert early == pytest.approx(sum(range(11, 31)) / 20 / 1000)  # 0.0205
    assert late == pytest.approx(sum(range(81, 101)) / 20 / 1000)  # 0.0905
    assert "ppo_kl_early" not in report.run_summary(rows)  # beside the summary: older records stay as recorded


@pytest.mark.parametrize("key, value, how", EXPECTED, ids=[e[0] for e in EXPECTED])
def test_run_summary_gives_each_number_a_verdict_reads(key, value, how):
    assert report.run_summary(hand_made_run())[key] == pytest.approx(value), how


def test_every_number_a_fix_is_judged_by_has_a_hand_made_answer():
    keys = {e[0] for e in EXPECTED}
    assert {judged.number.key for _, judged in lessons.judged()} <= keys
    assert {k for k, _, _ in report.COLUMNS} <= keys
    assert {key for fix in lessons.FIXES.values() for key, _ in fix.gates} <= keys  # the fixes table's gates
    assert {"grad_limited_steps", "mean_sampler_kl_k3", "eval_low", "final"} <= keys  # the stale negatives' table


# ------------------------------------------------------------------- a run that lacks a number

def write_metrics(folder, rows):
    folder.mkdir(parents=True)
    (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def without(rows, *keys):
    return [{k: v for k, v in r.items() if k not in keys} for r in rows]


def test_a_run_that_lacks_a_number_is_named_with_it_not_counted_and_the_table_goes_on(tmp_path):
    """An old run that never logged signal_groups, a run interrupted before its sampled evaluation
    and one before any evaluation: each check names the number and the run, counts the seed as not
    held, and every other row and lesson is still written."""
    run = hand_made_run()
    collapsed = [dict(r, entropy=4.0) if r["step"] > 0 else r for r in run]  # the runaway's entropy
    stayed = [dict(r, eval_sampled_acc=0.9) if "eval_sampled_acc" in r else r for r in run]
    write_metrics(tmp_path / "ds4" / "seed0", run)
    write_metrics(tmp_path / "ds4" / "seed1", without(run, "signal_groups"))
    for seed in (0, 1):
        write_metrics(tmp_path / "ds4_dynamic" / f"seed{seed}",
                      [dict(r, signal_groups=4) if r["step"] > 0 else r for r in run])
    write_metrics(tmp_path / "book_runaway" / "seed0", without(collapsed, "eval_sampled_acc"))
    write_metrics(tmp_path / "book_runaway_keepmask" / "seed0", stayed)
    write_metrics(tmp_path / "book_kl" / "seed0", without(run, "eval_acc"))
    write_metrics(tmp_path / "book_kl_k3" / "seed0", run)
    text = report.table(str(tmp_path))
    fix = [line for line in text.splitlines() if line.startswith("| dynamic_sampling")]
    assert len(fix) == 1 and "| 1 of 2; seed 1 not judged: ds4 has no mean_signal_groups |" in fix[0]  # its mechanism
    assert "**runaway** (" in text and "held in 0 of 1 seeds (1 not judged: a number missing)" in text
    assert "| not judged: book_runaway has no sampled_peak |" in text
    assert "| not judged: book_kl has no peak |" in text
    assert "| - | 80.0% (20) -> 40.0% |" in text  # book_kl's cell, then book_kl_k3's
    assert all(f"| {name} |" in text for name in ("ds4", "book_runaway", "book_kl_k3"))  # the mean ± std rows


def test_a_check_on_a_number_that_is_nan_is_not_judged_rather_than_not_held():
    check = lessons.FIXES["kl_reweight"].check
    held, why = report.judge(check, [{"kl_bias": math.nan}, {"kl_bias": 0.01}], ["kl_reuse", "kl_reuse_reweight"])
    assert not held and why == "kl_reuse has no kl_bias"
    assert report.judge(check, [{}, {"kl_bias": None}], ["a", "b"]) == (False, "a and b have no kl_bias")
    assert report.judge(check, [{"kl_bias": 2.45}, {"kl_bias": 0.01}], ["a", "b"]) == (True, None)  # past 1.7
