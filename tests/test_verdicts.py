"""The verdicts EXPERIMENTS.md prints: what the test over seeds decides (held, not held, no failure here, did not act,
cannot detect, not judged), every lesson, fix and method of lab/lessons.py on runs made by hand, the run_summary numbers
they read, and each record against results.jsonl: its seeds, its p-value by a plain enumeration, its number.

    python -m pytest -q tests/test_verdicts.py

The records are tested once, over lessons.judged(): a lesson, fix or variant added later is covered as it is, and one
whose failure reads a number FAILING has no value for fails here until it has one.
"""
import itertools
import json
import math
from fractions import Fraction

import pytest

from lab import lessons
from lab import metrics
from lab import permutation
from lab import report

JUDGED = dict(lessons.judged())  # every lesson, fix (fix_<item>) and variant (field_<method>), by its name
H, N = lessons.HELD, lessons.NOT_HELD

# A run without a method that shows every failure a record names (each number past its threshold), and one that
# shows none; the number each method moves sits where it has room to move either way.
FAILING = {"drop": 0.3, "entropy_peak_share": 0.7, "sampled_drop": 0.3, "reward_kept": 0.8, "mean_zero_std_frac": 0.3,
           "late_resp_len_wrong": 30.0, "late_resp_len_correct": 20.0, "mean_truncated_frac": 0.3,
           "grad_limited_steps": 0.4, "kl_bias": 0.5, "distinct_fall": 1.0, "mean_clip_high_lowp_frac": 0.7,
           "early_reward_collapse_frac": 0.3, "early_logratio_std_token": 0.2, "entropy": 0.1, "mean_adv_mean": 0.4,
           "late_resp_len": 30.0, "early_resp_len": 20.0, "mean_kl_grad_bias": 0.3, "final": 0.3, "sampled_final": 0.3,
           "eval_mean": 0.5, "distinct_final": 2.0, "think_half_step": 15.0, "mean_kl_exact": 0.04,
           "low_after_peak": 0.3, "early_entropy": 0.4, "mean_clip_high_p_mean": 0.1, "mean_think_clip_frac": 0.5,
           "mean_signal_groups": 2.0, "mean_sampler_gap": 0.5, "mean_clip_frac_high": 0.1}
HEALTHY = {**FAILING, "drop": 0.05, "entropy_peak_share": 0.1, "sampled_drop": 0.05, "reward_kept": 0.3,
           "mean_zero_std_frac": 0.02, "late_resp_len_wrong": 21.0, "mean_truncated_frac": 0.02,
           "grad_limited_steps": 0.05, "kl_bias": 0.01, "distinct_fall": 0.1, "mean_clip_high_lowp_frac": 0.2,
           "early_reward_collapse_frac": 0.02, "early_logratio_std_token": 0.02, "entropy": 0.5, "mean_adv_mean": 0.0,
           "late_resp_len": 21.0, "mean_kl_grad_bias": 0.0, "low_after_peak": 0.7, "mean_clip_high_p_mean": 0.5,
           "mean_think_clip_frac": 0.0, "early_entropy": 0.5}
FAILING_FOR = {"field_luspo": {"late_resp_len": 10.0}}  # GSPO's length collapses; elsewhere answers grow (DAPO's)
FRESH = {**FAILING, "low_after_peak": 0.7}  # a stale sampler's failure is seen against its run on fresh answers
SPREAD = [0.0, 0.01, -0.01, 0.02, -0.02]  # five seeds of one run: its seed noise, in the number's unit times worth
CANDIDATES = [1.0, 0.0, 0.5, 1e-3, -1.0, 2.0, 10.0, 0.25, 0.8, 4 / 3]  # values a mechanism's number may take


def acting(mechanism, without):
    """A value of the mechanism's number at which it acts against the run without's, from CANDIDATES."""
    base = without.get(mechanism.without_key or mechanism.key, 1.0)
    found = [v for v in CANDIDATES if mechanism.test(base, v)]
    assert found, mechanism.rule
    return found[0]


def made_runs(judged, without, shift, acts=True, seeds=5):
    """{experiment: {seed label: summary}} for one record: its run without at `without` with SPREAD's seed noise,
    its method's run moved `shift` times the number's worth its way, its mechanism acting (or not), and the runs its
    failure and its check are seen against."""
    n = judged.number
    way = 1 if n.side == "higher" else -1
    runs = {}
    for name, move in ((judged.experiments[0], 0.0), (judged.experiments[1], shift)):
        runs[name] = {}
        for s in range(seeds):
            run = {**without, n.key: without[n.key] + way * n.worth * (move + SPREAD[s % 5] * (1 + s // 5))}
            m = judged.record.mechanism
            if name == judged.experiments[1]:
                run[m.key] = acting(m, without) if acts else next(v for v in CANDIDATES if not m.test(
                    without.get(m.without_key or m.key, 1.0), v))
            runs[name][f"seed{s}"] = run
    against = judged.record.failure.against
    if against:  # the run the failure is seen against: fresh answers ahead, or every token ahead of the control
        base = FRESH if against == "lag_fresh" else {**without, n.key: without[n.key] + way * 0.2}
        runs[against] = {f"seed{s}": base for s in range(seeds)}
    if judged.keeps and judged.keeps != against:  # level with the method: not worse than it
        runs[judged.keeps] = runs[judged.experiments[1]]
    return runs


@pytest.mark.parametrize("name", list(JUDGED))
def test_every_record_on_runs_made_by_hand(name):
    """Five seeds each: the method ahead by three times the number's worth in every seed: held; level: not held;
    behind by as much: not held, the other way; its mechanism idle: did not act; the run without healthy: no failure
    here (whatever the method's run did); four seeds: not judged; seeds past the record's own (made for another
    record): not read."""
    judged = JUDGED[name]
    failing = {**FAILING, **FAILING_FOR.get(name, {})}
    verdict = lambda runs: report.judgement(judged, runs).verdict  # noqa: E731
    held = verdict(made_runs(judged, failing, 3.0))
    assert held.decision == H and held.present == (5, 5) and held.acted == (5, 5), name
    level = verdict(made_runs(judged, failing, 0.0))
    assert level.decision == N and not level.other_way, name
    behind = verdict(made_runs(judged, failing, -3.0))
    assert behind.decision == N and behind.other_way, name
    assert verdict(made_runs(judged, failing, 3.0, acts=False)).decision == lessons.DID_NOT_ACT, name
    if not judged.record.failure.against:
        healthy = verdict(made_runs(judged, HEALTHY, 3.0))
        assert healthy.decision == lessons.NO_FAILURE and healthy.present == (0, 5), name
    short = verdict(made_runs(judged, failing, 3.0, seeds=4))
    assert short.decision == lessons.NOT_JUDGED and short.why.startswith("4 seeds of "), (name, short.why)
    more = verdict(made_runs(judged, failing, 3.0, seeds=judged.seeds + 2))  # two seeds past its plan, another's
    assert more.n == (judged.seeds, judged.seeds) and more.present == (judged.seeds, judged.seeds), name


def number(side="higher", worth=0.1, best=1.0):
    return lessons.Number("final", side, worth, best)


ALL = {s: True for s in range(5)}  # the failure present in every seed of five; the mechanism acting in each
UP = [0.58, 0.6, 0.62, 0.64, 0.66]  # five seeds of a run without
ABOVE = [0.68, 0.69, 0.7, 0.71, 0.72]  # five seeds all above them: p = 1 / 252


def seeds(values):
    return dict(enumerate(values))


@pytest.mark.parametrize("case, decision, p", [
    # every seed of the method above every seed without: the smallest p, 1 / C(10, 5)
    (dict(), H, 1 / 252),
    # the two runs level: half the splits or more reach their sum (a plain enumeration: 148 of 252)
    (dict(with_=UP), N, Fraction(148, 252)),
    # the failure in 3 of 5 seeds: judged; in 2 of 5: no failure here, the same p printed
    (dict(present={**ALL, 0: False, 1: False}), H, 1 / 252),
    (dict(present={**ALL, 0: False, 1: False, 2: False}), lessons.NO_FAILURE, 1 / 252),
    # 4 of 8 seeds is half: judged
    (dict(without=UP + [0.6, 0.62, 0.64], with_=ABOVE + [0.7, 0.69, 0.71],
          present={s: s < 4 for s in range(8)}), H, Fraction(1, math.comb(16, 8))),
    # the mechanism acted in no seed: did not act, whatever the effect; in one of five: judged
    (dict(acted={s: False for s in range(5)}), lessons.DID_NOT_ACT, 1 / 252),
    (dict(acted={**ALL, 1: False, 2: False, 3: False, 4: False}), H, 1 / 252),
    # no room: the best the number can reach is closer to the run without's mean (0.62) than the detectable effect
    (dict(best=0.62 + 0.01), lessons.CANNOT_DETECT, 1 / 252),
    # the method's own seeds wider than the run without's (tests/test_permutation.py: 6 and 16 of 252)
    (dict(without=[0.30, 0.31, 0.30, 0.31, 0.30], with_=[0.2, 0.6, 0.7, 0.8, 0.9]), H, 6 / 252),
    (dict(without=[0.30, 0.31, 0.30, 0.31, 0.30], with_=[0.0, 0.6, 0.7, 0.8, 0.9]), N, 16 / 252),
    # a seed whose number is missing is left out: 5 of 6 remain, judged; 4 of 5 remain: not judged
    (dict(with_=ABOVE + [None]), H, Fraction(1, 252)),
    (dict(with_=ABOVE[:4] + [math.nan]), lessons.NOT_JUDGED, None),
])
def test_what_a_verdict_decides_by_hand(case, decision, p):
    without, with_ = case.get("without", UP), case.get("with_", ABOVE)
    v = lessons.verdict(number(best=case.get("best", 1.0)), seeds(without), seeds(with_),
                        case.get("present", {s: True for s in range(len(without))}),
                        case.get("acted", {s: True for s in range(len(with_))}), ("a", "b"))
    assert v.decision == decision
    if p is None:
        assert math.isnan(v.p)
    else:
        assert v.p == pytest.approx(float(p), abs=1e-15)


def test_the_other_way_is_printed_and_a_seed_left_out_is_named():
    """The method below every seed of the run without: not held, and the test the other way gives 1 / 252; a nan
    seed is named with its run and its number; four seeds name the run that lacks them, and how many it needs."""
    v = lessons.verdict(number(), seeds(ABOVE), seeds(UP + [math.nan]), ALL, None, ("a", "b"))
    assert v.decision == N and v.other_way and v.p_other == pytest.approx(1 / 252)
    assert v.why == "seed 5 of b left out: its final is nan"
    assert report.decision_text(v) == "not held; the other way, p = 0.004"
    v = lessons.verdict(number(), seeds(UP[:4]), seeds(ABOVE), ALL, None, ("rare", "rare_cispo"))
    assert (v.decision, v.why) == (lessons.NOT_JUDGED, "4 seeds of rare (5 needed)")
    assert report.decision_text(v) == "not judged: 4 seeds of rare (5 needed)"


def test_a_verdict_carries_the_effect_its_interval_the_probability_of_improvement_and_the_detectable_effect():
    """Means 0.62 and 0.70: +8 points; every pair of seeds has the method ahead; the interval holds the effect; the
    detectable effect is the run without's (permutation.detectable at 5 and 5)."""
    v = lessons.verdict(number(), seeds(UP), seeds(ABOVE), ALL, ALL, ("a", "b"))
    assert v.effect == pytest.approx(0.08) and v.prob == 1.0 and v.interval[0] < 0.08 < v.interval[1]
    assert v.detectable == permutation.detectable(UP, 5, 5, "higher") and v.n == (5, 5)
    assert report.effect_text("final", v).startswith("+8 points (+")
    assert report.effect_text("final", v).endswith(" at 5 and 5 seeds")  # as many as planned: no plan named
    assert report.effect_text("final", v, 10).endswith(" at 5 and 5 seeds, of 10")  # fewer than the record plans


def test_the_80_20_rule_holds_only_where_it_is_not_worse_than_every_token_either():
    """top_entropy: ahead of its random control in every seed, held; the same with every token ahead of the rule in
    every seed: not held, behind many."""
    judged = JUDGED["field_top_entropy"]
    runs = made_runs(judged, FAILING, 3.0)
    assert report.judgement(judged, runs).verdict.decision == H
    many = {seed: {**run, "final": run["final"] + 0.3} for seed, run in runs["many_top_entropy"].items()}
    v = report.judgement(judged, {**runs, "many": many}).verdict
    assert v.decision == N and v.why.startswith("behind many")


@pytest.mark.parametrize("mechanism, quiet, acting_", [
    (lessons.above("x", 0), (1.0, 0.0), (1.0, 1e-6)),
    (lessons.at_most("x", 0.01), (1.0, 0.02), (1.0, 0.01)),
    (lessons.within("x", 0.1, 0.4), (1.0, 0.45), (1.0, 0.1)),
    (lessons.below_without("x", 0.5), (10.0, 5.1), (10.0, 5.0)),
    (lessons.above_without("x", 1.1), (2.0, 2.2), (2.0, 2.21))])
def test_a_mechanism_acts_on_its_side_of_its_bound_and_not_a_hair_short_of_it(mechanism, quiet, acting_):
    assert not mechanism.test(*quiet) and mechanism.test(*acting_)


@pytest.mark.parametrize("name", list(JUDGED))
def test_every_record_names_its_claim_source_failure_mechanism_switches_rival_and_costs(name):
    """Each lesson, fix and variant states its source's claim (a sentence) and the source, the failure it is for (a
    number of the run without it, with its rule), the number its mechanism acts on, the settings it changes, its
    rivals (experiments of the same regime, judged by the same test), and its costs; every key is one run_summary
    gives (EXPECTED below: by hand) and the pages can name (lab/metrics.py). No record is judged by a number its
    method moves by construction: the share of steps past the gradient-norm limit falls under any down-weighting."""
    judged, summary_keys = JUDGED[name], {e[0] for e in EXPECTED}
    record = judged.record
    assert len(record.claim.split()) >= 8 and record.claim.rstrip()[-1] in ".!?", f"{name}: no claim in a sentence"
    assert record.source and any(c.isdigit() or "." in c for c in record.source.split()), f"{name}: no source named"
    assert isinstance(record.failure, lessons.Failure) and len(record.failure.rule.split()) >= 5, name
    mechanism = record.mechanism
    assert isinstance(mechanism, lessons.Mechanism), f"{name}: no mechanism"
    for key in (record.failure.key, mechanism.key, mechanism.without_key or mechanism.key, judged.number.key,
                *record.costs, *(n.key for n in judged.also)):
        assert key in summary_keys and metrics.words(key), f"{name}: {key} is not a run_summary number it can name"
    assert record.switches and judged.number.key != "grad_limited_steps", name
    for rival in record.rivals:  # an experiment of its own, named in words beside its name in the tables
        assert rival in lessons.EXPERIMENTS and rival not in judged.experiments and rival in lessons.LABELS, \
            (name, rival)
    assert set(record.costs) <= set(report.COST_NAMES), name
    assert judged.seeds in (5, 8, 10) and judged.number.worth > 0, name


OUTCOMES = {  # record -> the number it is judged by: the outcome its source claims (lab/lessons.py names each source)
    "instability": "final", "instability_search": "final", "instability_ppo": "final", "naive_kl": "final",
    "runaway": "sampled_final",  # greedy decoding hides the runaway: the sampled answers show it
    "format_exploit": "reward_kept",  # the book's claim: a reward that no longer pays wrong answers
    "fix_dynamic_sampling": "eval_mean",  # "the same performance faster": accuracy over the whole run
    "fix_token_mean": "late_resp_len", "fix_drgrpo": "late_resp_len_wrong", "fix_overlong": "mean_truncated_frac",
    "fix_keep_mask": "entropy_peak_share", "fix_kl_reweight": "kl_bias", "fix_entropy_bonus": "distinct_final",
    "fix_clip_higher": "entropy",  # DAPO: "effectively enhances the policy's entropy"
    "fix_cispo": "think_half_step", "fix_gdpo": "eval_mean", "fix_gspo": "eval_mean",
    # a stale or mismatched sampler: a run that keeps what it learned, not the gradient's spikes (a proxy any
    # down-weighting lowers by construction)
    "fix_tis": "low_after_peak", "fix_tis_engine": "low_after_peak", "fix_dual_clip": "low_after_peak",
    "fix_off_policy_mask": "low_after_peak", "field_icepop": "low_after_peak", "field_sequence_is": "low_after_peak",
    "field_rejection": "low_after_peak", "field_dppo_tv": "low_after_peak", "field_dppo_kl": "low_after_peak",
    "field_vespo": "low_after_peak",
    "field_sapo": "final", "field_gmpo": "final", "field_top_entropy": "final", "field_adaptive_entropy": "final",
    "field_rloo": "eval_mean", "field_reinforce_pp": "eval_mean", "field_luspo": "late_resp_len",
    "field_k3_plus": "mean_kl_exact",
}


def test_each_record_reads_the_outcome_its_source_claims():
    assert {name: judged.number.key for name, judged in JUDGED.items()} == OUTCOMES


def test_vespo_is_one_change_from_tis_and_the_stale_runs_show_their_spikes_beside():
    """VESPO's run without is TIS's run, so that its gain is its own and not TIS's (its weight keeps TIS's cap);
    each stale sampler's record shows the share of steps past the gradient-norm limit beside its verdict."""
    assert JUDGED["field_vespo"].experiments == ["lag_decoupled_tis", "lag_decoupled_vespo"]
    assert set(JUDGED["field_vespo"].record.switches) == {"objective", "loss_agg"}
    stale = [n for n, key in OUTCOMES.items() if key == "low_after_peak"]
    assert all([a.key for a in JUDGED[n].also] == ["grad_limited_steps"] for n in stale)


# ------------------------------------------------------------------- each record against the record

def recorded():
    return report.summaries_from_results(report.load_results())


def p_by_enumeration(without, with_, side):
    """The exact one-sided p, the long way, on the values as recorded: each an exact decimal, all scaled by one
    power of ten to whole numbers (so that 184,756 sums at 10 and 10 take a second), every choice of the method's
    seeds counted whose sum reaches the method's own."""
    sign = 1 if side == "higher" else -1
    exact = [Fraction(repr(x)) * sign for x in [*without, *with_]]
    scale = math.lcm(*(f.denominator for f in exact))
    pooled = [int(f * scale) for f in exact]
    n1, observed = len(with_), sum(pooled[len(without):])
    splits = math.comb(len(pooled), n1)
    return Fraction(sum(sum(c) >= observed for c in itertools.combinations(pooled, n1)), splits)


def missing_seeds(name, summaries):
    """The runs a record still lacks in results.jsonl: its two runs and the run its failure is seen against at its
    seeds, its one-change runs and rivals at 5 -> ['rare_cispo seeds 5-9', ...] (empty: the record is whole)."""
    judged = JUDGED[name]
    out = []
    for experiment in report.judged_runs(judged):
        seeds = judged.seeds if experiment in report.needed(judged) else permutation.MIN_SEEDS
        lacks = [s for s in range(seeds) if f"seed{s}" not in summaries.get(experiment, {})]
        out += [f"{experiment} seeds {','.join(map(str, lacks))}"] if lacks else []
    return out


def skip_where_not_made(name, summaries):
    """A record whose runs are not all made yet: its test is skipped, naming the runs it waits for and the command
    that makes them (the pages print its verdict 'not judged' where its two runs lack seeds); one made whole is
    tested."""
    lacks = missing_seeds(name, summaries)
    if lacks:
        pytest.skip(f"{name}: results.jsonl lacks {'; '.join(lacks)} (python experiments.py {name} --seeds "
                    f"{','.join(map(str, range(JUDGED[name].seeds)))} --jobs 2, then table --write)")


@pytest.mark.parametrize("name", list(JUDGED))
def test_each_record_runs_the_seeds_its_rule_asks_and_at_least_five(name):
    """A record's seeds are not tuned until a method passes: lessons.seeds_for gives them from the run without's seeds
    0-4 alone (5, or 8 or 10 where fewer cannot detect the number's worth); results.jsonl holds that many of each of
    its two runs, its one-change runs and its rivals at least 5."""
    judged, summaries = JUDGED[name], recorded()
    needs, read = report.seeds_needed(judged, summaries)
    assert read == 5 and judged.seeds == needs, (name, judged.seeds, needs)
    skip_where_not_made(name, summaries)
    for experiment in judged.experiments:
        assert len(summaries.get(experiment, {})) >= judged.seeds, (name, experiment)
    for experiment in [*judged.parts, *judged.record.rivals]:
        assert len(summaries.get(experiment, {})) >= permutation.MIN_SEEDS, (name, experiment)


@pytest.mark.parametrize("name", list(JUDGED))
def test_each_records_p_is_the_exact_test_on_all_its_seeds_recorded(name):
    """The p the pages print is the share of the splits of the record's seeds (0 to its seeds - 1) of both runs whose
    mean difference reaches the observed one, the claim's way: a plain enumeration in exact fractions agrees. (Enumerations over more
    than 20 seeds would take too long here: at most 10 and 10 are recorded.)"""
    judged, summaries = JUDGED[name], recorded()
    v = report.judgement(judged, summaries).verdict
    if v.decision == lessons.NOT_JUDGED:
        assert missing_seeds(name, summaries) and " needed)" in v.why, (name, v.why)  # seeds not made, nothing else
        skip_where_not_made(name, summaries)
    without, with_ = ([x for s, x in report.values(summaries, e, judged.number.key).items()
                       if report.run_folders.is_number(x) and report.seed_number(s) < judged.seeds]
                      for e in judged.experiments)
    assert v.n == (len(without), len(with_))
    assert v.p == pytest.approx(float(p_by_enumeration(without, with_, judged.number.side)), abs=1e-12), name


def test_lesson_1s_first_step_in_the_books_regime_did_not_act():
    """The book's clip binds on no token there (eps 10 on the summed ratio: no answer's ratio reaches 11): its claim
    was not tested, and it is not printed as a verdict that failed."""
    v = report.judgement(JUDGED["instability"], recorded()).verdict
    assert v.decision == lessons.DID_NOT_ACT and v.acted[0] == 0


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
               "adv_mean": 0.1, "sapo_gate": 0.9, "resp_len_correct": 5.0 if s <= 50 else 8.0,
               "clip_high_p_mean": None if s <= 50 else 0.3, "think_clip_frac": 1.0 if s <= 10 else 0.5 if s <= 20
               else None}
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
    ("pass_at_k", 0.95, "the last evaluation's pass@k (--eval-pass-k), step 100's"),
    ("low_after_peak", 0.4, "the lowest evaluation from the peak on (step 20's 0.8): step 100's"),
    ("early_entropy", 2.4, "the first 10 steps: two at 8.0, eight at 1.0"),
    ("mean_clip_high_p_mean", 0.3, "over the steps that clipped high, 51-100"),
    ("mean_think_clip_frac", 0.75, "over the steps that have a <think> token to clip, 1-20: ten at 1, ten at 0.5"),
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
    evaluation: each names the number and the run where a failure or a mechanism cannot be read, a verdict on too
    few seeds says how many it needs, and every other row and lesson is still written."""
    run = hand_made_run()
    collapsed = [dict(r, entropy=4.0) if r["step"] > 0 else r for r in run]  # the runaway's entropy
    stayed = [dict(r, eval_sampled_acc=0.9) if "eval_sampled_acc" in r else r for r in run]
    write_metrics(tmp_path / "g4" / "seed0", run)
    write_metrics(tmp_path / "g4" / "seed1", without(run, "signal_groups"))
    for seed in (0, 1):
        write_metrics(tmp_path / "g4_dynamic" / f"seed{seed}",
                      [dict(r, signal_groups=4) if r["step"] > 0 else r for r in run])
    write_metrics(tmp_path / "book_runaway" / "seed0", without(collapsed, "eval_sampled_acc"))
    write_metrics(tmp_path / "book_runaway_keepmask" / "seed0", stayed)
    write_metrics(tmp_path / "book_kl" / "seed0", without(run, "eval_acc"))
    write_metrics(tmp_path / "book_kl_k3" / "seed0", run)
    text = report.table(str(tmp_path))
    fix = [line for line in text.splitlines() if line.startswith("| dynamic_sampling")]
    assert len(fix) == 1 and "| 1 of 2; seed 1 not read: g4 has no mean_signal_groups |" in fix[0]  # its mechanism
    assert "| not judged: 2 seeds of g4 (5 needed); 2 seeds of g4_dynamic (5 needed) |" in fix[0]
    assert "**runaway** (" in text and ("not judged: 0 seeds of book_runaway (5 needed); 1 seed of book_runaway_keepmask "
                                        "(5 needed); seed 0 of book_runaway left out: its sampled_final is None") in text
    assert ("not judged: 0 seeds of book_kl (5 needed); 1 seed of book_kl_k3 (5 needed); seed 0 of book_kl left out: "
            "its final is None" in text)
    assert all(f"| {name} |" in text for name in ("g4", "book_runaway", "book_kl_k3"))  # the mean ± std rows
