"""The verdicts EXPERIMENTS.md prints ("held in 3 of 5"), each held to hand-made cases and to the record: what a
seed's verdict is (held, not held, no failure here, cannot detect, not judged), every lesson, fix and method of
lessons.py on a pair made by hand, the run_summary numbers they read, each margin by its rule, and how often each rule
passes on two seeds of one configuration (results.jsonl).

    python -m pytest -q tests/test_verdicts.py

The checks are tested once, over lessons.judged(): a lesson, fix or variant added later is covered as it is, and one
whose failure reads a number FAILING has no value for fails here until it has one.
"""
import json
import math

import pytest


import lessons
import report

JUDGED = dict(lessons.judged())  # every lesson, fix (fix_<item>) and variant (field_<method>), by its name

# A run without a method that shows every failure a record names (each number past its threshold), and one that
# shows none; the number each method moves sits where it has room to move either way by its margin.
FAILING = {"drop": 0.3, "entropy_peak_share": 0.7, "sampled_drop": 0.3, "reward_kept": 0.8, "mean_zero_std_frac": 0.3,
           "late_resp_len_wrong": 30.0, "late_resp_len_correct": 20.0, "mean_truncated_frac": 0.3,
           "grad_limited_steps": 0.4, "kl_bias": 0.5, "distinct_fall": 1.0, "mean_clip_high_lowp_frac": 0.7,
           "early_reward_collapse_frac": 0.3, "early_logratio_std_token": 0.2, "entropy": 0.1, "mean_adv_mean": 0.4,
           "late_resp_len": 10.0, "early_resp_len": 20.0, "mean_kl_grad_bias": 0.3, "final": 0.3, "sampled_final": 0.3,
           "eval_mean": 0.5, "distinct_final": 2.0, "think_half_step": 15.0, "mean_kl_exact": 0.04}
HEALTHY = {**FAILING, "drop": 0.05, "entropy_peak_share": 0.1, "sampled_drop": 0.05, "reward_kept": 0.3,
           "mean_zero_std_frac": 0.02, "late_resp_len_wrong": 21.0, "mean_truncated_frac": 0.02,
           "grad_limited_steps": 0.05, "kl_bias": 0.01, "distinct_fall": 0.1, "mean_clip_high_lowp_frac": 0.2,
           "early_reward_collapse_frac": 0.02, "early_logratio_std_token": 0.02, "entropy": 0.5, "mean_adv_mean": 0.0,
           "late_resp_len": 19.0, "mean_kl_grad_bias": 0.0}


def moved_by(judged, run, factor):
    """run with the method's number moved its way by factor times its margin."""
    n = judged.number
    step = factor * (n.margin or 0.01) * (1 if n.side == "higher" else -1)  # a margin of 0: any gain passes it
    return {**run, n.key: run[n.key] + step}


def shifted(judged, run, amount):
    """run with the method's number moved its way by amount."""
    n = judged.number
    return {**run, n.key: run[n.key] + amount * (1 if n.side == "higher" else -1)}


def seed_runs(judged, without, with_):
    """One seed's runs: the method's two, and the run its failure or its check is seen against (the 80/20 rule's:
    every token, ahead of the control by twice the margin, so the failure is there, and level with the method)."""
    runs = {judged.experiments[0]: without, judged.experiments[1]: with_}
    for other in {judged.record.failure.against, judged.keeps} - {None}:
        runs[other] = moved_by(judged, with_, 0)
    if judged.record.failure.against:
        runs[judged.record.failure.against] = moved_by(judged, without, 2)
    return runs


@pytest.mark.parametrize("name", list(JUDGED))
def test_a_method_holds_by_its_margin_and_not_short_of_it_nor_where_the_failure_is_absent(name):
    """Past the margin: held; at 0.9 of it, or identical runs: not held; the same runs without the failure: 'no
    failure here', whatever the method's run did."""
    judged = JUDGED[name]
    assert judged.record.failure.present(seed_runs(judged, FAILING, FAILING), judged.experiments[0]), name
    for factor, want in [(1.1, lessons.HELD), (0.9, lessons.NOT_HELD), (0.0, lessons.NOT_HELD),
                         (-1.1, lessons.NOT_HELD)]:
        if factor == 0.9 and not judged.number.margin:  # a margin of 0 (lesson 2's): nothing lies short of it
            continue
        runs = seed_runs(judged, FAILING, moved_by(judged, FAILING, factor))
        assert lessons.verdict(judged, runs) == want, (name, factor)
    healthy = HEALTHY
    if judged.record.failure.against:  # the control level with every token: nothing lost to fix
        runs = {**seed_runs(judged, healthy, moved_by(judged, healthy, 1.1)),
                judged.record.failure.against: healthy}
    else:
        runs = seed_runs(judged, healthy, moved_by(judged, healthy, 1.1))
    assert lessons.verdict(judged, runs) == lessons.NO_FAILURE, name


def test_the_80_20_rule_holds_only_where_it_is_not_behind_every_token_either():
    """top_entropy: ahead of its random control by the margin, and not behind every token (many) by it."""
    judged = JUDGED["field_top_entropy"]
    runs = seed_runs(judged, FAILING, moved_by(judged, FAILING, 1.1))
    assert lessons.verdict(judged, runs) == lessons.HELD
    runs["many"] = moved_by(judged, runs["many_top_entropy"], 1.1)  # every token ahead of the rule by the margin
    runs["many_top_entropy_random"] = moved_by(judged, FAILING, -2.2)  # the failure still there
    assert lessons.verdict(judged, runs) == lessons.NOT_HELD


@pytest.mark.parametrize("case, want", [
    (dict(without=0.30), lessons.HELD),            # 0.30 -> 0.40: ahead by 10 points, the margin 5
    (dict(without=0.30, with_=0.35), lessons.NOT_HELD),  # ahead by exactly the margin: not past it
    (dict(without=0.97), lessons.CANNOT_DETECT),   # 3 points from 100%: no run could be 5 ahead
    (dict(without=0.96), lessons.CANNOT_DETECT),   # 4 points of room: none could be 5 ahead either
    (dict(without=0.30, drop=0.10), lessons.NO_FAILURE),  # its run without did not fall: nothing to fix
])
def test_one_seeds_verdict_by_hand(case, want):
    """A made-up method: the run without must fall 15 points from its peak; held where the method's run ends more than
    5 points above it; an accuracy cannot pass 100%."""
    judged = lessons.Judged("fix", ["a", "b"], lessons.Number("final", "higher", 0.05, 1.0),
                            JUDGED["instability"].record, "", "")
    without = {"final": case["without"], "drop": case.get("drop", 0.2)}
    with_ = {"final": case.get("with_", case["without"] + 0.10)}
    assert lessons.verdict(judged, {"a": without, "b": with_}) == want


def test_a_method_whose_own_seeds_spread_wider_than_the_margin_must_pass_their_spread():
    """The run without's seeds differ by at most 5 points (the margin); the method's own seeds by 20. A gain of 10
    points is past the first, not the second: two of the method's seeds alone could differ that much. 25 is past
    both."""
    judged = lessons.Judged("fix", ["a", "b"], lessons.Number("final", "higher", 0.05, 1.0),
                            JUDGED["instability"].record, "", "")
    runs = {"a": {"final": 0.25, "drop": 0.2}, "b": {"final": 0.35}}
    assert lessons.verdict(judged, runs) == lessons.HELD
    assert lessons.verdict(judged, runs, own_spread=0.2) == lessons.NOT_HELD
    assert lessons.verdict(judged, {**runs, "b": {"final": 0.5}}, own_spread=0.2) == lessons.HELD


def test_a_gain_of_exactly_the_margin_is_not_held():
    """Numbers exact in binary: a margin of 0.25, a gain of 0.25 is not past it, 0.375 is."""
    n = lessons.Number("final", "higher", 0.25, 1.0)
    assert not n.moved({"final": 0.25}, {"final": 0.5}) and n.moved({"final": 0.25}, {"final": 0.625})
    assert n.against({"final": 0.25}, {"final": 0.5}) == "same" and n.against({"final": 0.5}, {"final": 0.25}) == "same"


@pytest.mark.parametrize("runs, why", [
    ({"book_noclip": {"final": 0.3}, "book_clip10": {"final": 0.5}}, "book_noclip has no drop"),
    ({"book_noclip": {"drop": 0.2, "final": None}, "book_clip10": {"final": 0.5}}, "book_noclip has no final"),
    ({"book_noclip": {"drop": 0.2, "final": 0.3}, "book_clip10": {"final": math.nan}}, "book_clip10 has no final"),
    ({"book_noclip": {"drop": math.nan}, "book_clip10": {}}, "book_noclip has no drop"),
])
def test_a_seed_that_lacks_a_number_is_not_judged_and_says_which(runs, why):
    """A number missing (absent, None or nan: an old run, an interrupted one) gives no verdict: it names the run
    and the number instead."""
    assert report.judge(JUDGED["instability"], runs) == (None, why)


def test_a_seed_without_the_run_its_failure_is_seen_against_is_not_judged():
    judged = JUDGED["field_top_entropy"]
    runs = {"many_top_entropy_random": FAILING, "many_top_entropy": FAILING}
    assert report.judge(judged, runs) == (None, "no run of many")


@pytest.mark.parametrize("name", list(JUDGED))
def test_every_record_names_its_claim_source_failure_mechanism_switches_rival_and_costs(name):
    """Each lesson, fix and variant states its source's claim (a sentence) and the source, the failure it is for (a
    number of the run without it, with its rule), the number its mechanism acts on, the settings it changes, at least
    one rival (an experiment of the same regime, judged by the same number), and its costs; every key is one
    run_summary gives (EXPECTED below: by hand) and the pages can name (lessons.METRICS)."""
    judged, summary_keys = JUDGED[name], {e[0] for e in EXPECTED}
    record = judged.record
    assert len(record.claim.split()) >= 8 and record.claim.rstrip()[-1] in ".!?", f"{name}: no claim in a sentence"
    assert record.source and any(c.isdigit() or "." in c for c in record.source.split()), f"{name}: no source named"
    assert isinstance(record.failure, lessons.Failure) and len(record.failure.rule.split()) >= 5, name
    mechanism = record.mechanism
    assert isinstance(mechanism, lessons.Mechanism), f"{name}: no mechanism"
    for key in (record.failure.key, mechanism.key, mechanism.without_key or mechanism.key, judged.number.key,
                *record.costs):
        assert key in summary_keys and key in lessons.METRICS, f"{name}: {key} is not a run_summary number it can name"
    assert record.switches and record.rivals, name
    for rival in record.rivals:  # an experiment of its own, named in words beside its name in the tables
        assert rival in lessons.EXPERIMENTS and rival not in judged.experiments and rival in lessons.LABELS, \
            (name, rival)
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
    """Accuracy higher by more than 10 points: 0.65 against a rival's 0.5 is better, 0.6 the same (not past it), 0.35
    worse; a length lower by more than 5: 14 against 20 is better, 15 the same."""
    acc, length = lessons.Number("final", "higher", 0.10), lessons.Number("x", "lower", 5.0)
    assert [acc.against({"final": 0.5}, {"final": v}) for v in (0.65, 0.6, 0.35)] == ["better", "same", "worse"]
    assert [length.against({"x": 20.0}, {"x": v}) for v in (14.0, 15.0, 26.0)] == ["better", "same", "worse"]


def test_round_up_keeps_two_digits_upwards():
    assert [report.round_up(x) for x in (0.1625, 0.0385, 0.3196, 0.12, 2.0, 0.0)] == \
        pytest.approx([0.17, 0.039, 0.32, 0.12, 2.0, 0.0])


# ------------------------------------------------------------------- each rule against the record

def recorded():
    return report.summaries_from_results(report.load_results())


@pytest.mark.parametrize("name", list(JUDGED))
def test_each_margin_is_the_most_two_seeds_of_the_run_without_differ(name):
    """The margin is not tuned until a method passes: it is the largest difference between two of the run without's
    seeds 0-4 on the method's number, rounded up to two digits, from the recorded runs alone, set before the
    method's own runs were made."""
    judged = JUDGED[name]
    margin, seeds = report.margin_needed(judged, recorded())
    assert seeds == 5, f"{name}: results.jsonl records {seeds} of the run without's seeds 0-4"
    assert judged.number.margin == pytest.approx(margin), (name, judged.number.margin, margin)


@pytest.mark.parametrize("name", list(JUDGED))
def test_two_seeds_of_one_run_pass_a_rule_at_most_once_in_12(name):
    """Seed i of an experiment as the run without, seed j of the same as the run with, every ordered pair of seeds 0-2
    for both of the method's experiments: 12 pairs, each showing nothing but seed noise. A rule that holds on more
    than one of them says little where it holds. (The margin a verdict asks is at least the spread of either run's
    seeds, so none should; before the method's own spread joined it, lesson 2's rule, whose run without ends at 0% in
    every seed, passed 2 of them, and GMPO's 3.)"""
    verdicts = report.same_run_verdicts(JUDGED[name], recorded())
    held = [(e, i, j) for e, i, j, v in verdicts if v == lessons.HELD]
    assert len(verdicts) == 12 and len(held) <= 1, (name, held)


@pytest.mark.parametrize("name", list(JUDGED))
def test_an_effect_of_the_margin_plus_the_seeds_spread_is_seen_in_every_seed(name):
    """The rule's power, on the record: the run without's seeds, each paired with another seed of the same run moved
    the method's way by report.detectable (the margin plus the seeds' own spread), hold in every pair where the failure
    is there and the number has the room; the pages print that effect beside each rule."""
    judged, summaries = JUDGED[name], recorded()
    effect = report.detectable(judged, summaries)
    without = summaries[judged.experiments[0]]
    for i in report.PAIR_SEEDS:
        for j in report.PAIR_SEEDS:
            if i != j:
                planted = shifted(judged, without[f"seed{j}"], effect + 1e-9)
                runs = seed_runs(judged, without[f"seed{i}"], planted)
                own = report.spread(summaries, judged.experiments[1], judged.number.key, report.PAIR_SEEDS)
                if judged.record.failure.against:
                    runs[judged.record.failure.against] = summaries[judged.record.failure.against][f"seed{i}"]
                if judged.keeps:
                    runs[judged.keeps] = runs[judged.experiments[1]]
                assert lessons.verdict(judged, runs, own) in (lessons.HELD, lessons.NO_FAILURE,
                                                              lessons.CANNOT_DETECT), (name, i, j)


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
               "equal_groups_adv": 0.5 if s % 4 == 0 else 0.0, "kl_grad_bias": 0.3 if s <= 50 else 0.1,
               "reward_collapse_frac": 0.4 if s <= 10 else 0.0, "tied_adv_gap": 0.5 if s <= 10 else None,
               "adv_mean": 0.1, "sapo_gate": 0.9, "resp_len_correct": 5.0 if s <= 50 else 8.0}
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
    ("kl_bias", 0.05, "|sum of (estimate - exact)| / sum of exact: (50 * 0.1 - 50 * 0.05) / (100 * 0.5)"),
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
    ("sampled_drop", 0.55, "sampled peak - sampled final: 0.9 - 0.35"),
    ("reward_kept", 0.75, "reward_low_after_peak / reward_peak50: 0.6 / 0.8"),
    ("early_resp_len", 0.55, "the first 10 steps: (0.1 + ... + 1.0) / 10"),
    ("early_reward_collapse_frac", 0.4, "the first 10 steps; the run's mean would be 0.04"),
    ("mean_reward_collapse_frac", 0.04, "over the run: 10 steps at 0.4"),
    ("mean_tied_adv_gap", 0.5, "over the steps that have a tie, 1-10"),
    ("mean_adv_mean", 0.1, "over the run"),
    ("mean_sapo_gate", 0.9, "over the run"),
    ("late_resp_len_correct", 8.0, "steps 51-100"),
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


def test_every_number_a_verdict_reads_has_a_hand_made_answer():
    keys = {e[0] for e in EXPECTED}
    assert {judged.number.key for _, judged in lessons.judged()} <= keys
    assert {k for k, _, _ in report.COLUMNS} <= keys
    assert {judged.record.failure.key for _, judged in lessons.judged()} <= keys  # each failure's number
    assert set(FAILING) <= keys  # and every number a failure's rule reads
    assert {"grad_limited_steps", "mean_sampler_kl_k3", "eval_low", "final"} <= keys  # the stale negatives' table


# ------------------------------------------------------------------- a run that lacks a number

def write_metrics(folder, rows):
    folder.mkdir(parents=True)
    (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def without(rows, *keys):
    return [{k: v for k, v in r.items() if k not in keys} for r in rows]


def test_a_run_that_lacks_a_number_is_named_with_it_not_counted_and_the_table_goes_on(tmp_path):
    """An old run that never logged signal_groups, a run interrupted before its sampled evaluation and one before any
    evaluation: each verdict names the number and the run, counts the seed as not judged, and every other row and
    lesson is still written."""
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
    assert "**runaway** (" in text and "seed 0 not judged: book_runaway has no sampled_drop" in text
    assert "| not judged: book_runaway has no sampled_drop |" in text
    assert "| not judged: book_kl has no drop |" in text
    assert all(f"| {name} |" in text for name in ("ds4", "book_runaway", "book_kl_k3"))  # the mean ± std rows
