"""The gates and the fixes' numbers a step logs (harness/stats.py), each against its formula on a hand-built batch
or update whose expected value is worked out by hand below.

    python -m pytest -q tests/test_gates.py

A fix's verdict reads a number of the run without it and with it, and its gates say whether the run without
it had anything for the fix to act on (each record's failure, lab/lessons.py); run_summary averages what a step logs.
A gate on the wrong scale or over the wrong denominator still gives a plausible number, so each is checked
at the value its formula gives, on cases chosen to tell the right scale and denominator from the wrong ones:

    tis_weight_above_2   share of the answers' tokens with w = pi_old / pi_sampler > 2 (a weight of 2 exactly
                         is not capped by --tis-cap 2, so not counted; log w > 2 would be another gate)
    tis_weight_mean      mean of w over the answers' tokens (min and max beside it)
    neg_far_frac         of ALL the update's answers, the share with A < 0 and a mean log pi_sampler - log pi
                         above 0.1 (what --off-policy-mask 0.1 would drop), not a share of the negatives
    ppo_kl               mean over the answers' tokens of log pi_old - log pi (verl's)
    signal_groups        the groups whose rewards are not all equal: a count of groups, not of answers
    adv_correct_corr     Pearson's correlation of the advantage with the correctness reward, not the total
    truncated_frac       share of the answers cut at the cap
    reward_<term>        each reward term's mean over the answers (reward_format: the reasoned share)
    sampler_entropy      mean of the sampler's entropy over the answers' tokens

The gates tested elsewhere, each against a value worked out by hand or computed independently there, are
listed in tests/README.md ("Which test guards each gate"); test_every_gate_has_a_guard keeps that table whole.
"""
import math
import os
import re
import statistics
from types import SimpleNamespace

import pytest
import torch

import grpo
from config import GRPOConfig
from harness import stats
from lab import lessons

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# ------------------------------------------------------------------- a sampled batch (stats.batch_stats)

# 6 answers in 2 groups of 3, (6, 4): column 0 is the prompt's last token, columns after an answer padding. Off the
# answers the sampler gave 0.01 and the learner 0.9 (w = 90), so a number that counted them would be far off.
MASK = torch.tensor([[0, 1, 1, 0], [0, 1, 1, 0], [0, 1, 0, 0], [0, 1, 1, 1], [0, 1, 0, 0], [0, 1, 0, 0]], dtype=torch.bool)
Q = torch.tensor([[0.01, 0.2, 0.4, 0.01], [0.01, 0.25, 0.8, 0.01], [0.01, 0.5, 0.01, 0.01],  # pi_sampler
                  [0.01, 0.8, 0.2, 0.3], [0.01, 0.9, 0.01, 0.01], [0.01, 0.2, 0.01, 0.01]], dtype=torch.float64)
P = torch.tensor([[0.9, 0.6, 0.6, 0.9], [0.9, 0.5, 0.4, 0.9], [0.9, 0.5, 0.9, 0.9],  # pi_old
                  [0.9, 0.2, 0.8, 0.3], [0.9, 0.9, 0.9, 0.9], [0.9, 0.5, 0.9, 0.9]], dtype=torch.float64)
WEIGHTS = [[3.0, 1.5], [2.0, 0.5], [1.0], [0.25, 4.0, 1.0], [1.0], [2.5]]  # w = P / Q of each answer's tokens
ENTROPY = torch.tensor([[9.0, 1.0, 2.0, 9.0], [9.0, 0.5, 0.5, 9.0], [9.0, 3.0, 9.0, 9.0],  # the sampler's, nats
                        [9.0, 1.0, 1.0, 1.0], [9.0, 0.0, 9.0, 9.0], [9.0, 2.0, 9.0, 9.0]], dtype=torch.float64)
CORRECT = torch.tensor([1.0, 0.0, 0.0, 0.0, 0.0, 0.0])
FORMAT = torch.tensor([0.0, 1.0, 0.0, 1.0, 1.0, 1.0])
TOTAL = CORRECT + 0.5 * FORMAT  # [1, 0.5, 0 | 0.5, 0.5, 0.5]: group 0 has a signal, group 1 none
ADV = torch.tensor([1.0, 0.0, -1.0, 0.0, 0.0, 0.0], dtype=torch.float64)  # group 0: (r - 0.5) / 0.5; group 1: 0
TRUNCATED = torch.tensor([False, True, False, False, False, True])


def log_batch(rewards, adv, G=3):
    """stats.batch_stats of the hand-built batch with these rewards and advantages -> what the step logs."""
    batch = SimpleNamespace(rewards=rewards, loss_mask=MASK, mask=MASK, truncated=TRUNCATED, sampler_logp=Q.log(),
                            sampler_entropy=ENTROPY)
    step = stats.StepStats()
    stats.batch_stats(step, batch, adv, torch.tensor([False, True]), P.log(), MASK, G=G)
    return step.result()


@pytest.fixture(scope="module")
def batch_logged():
    return log_batch({"total": TOTAL, "correct": CORRECT, "format": FORMAT, "format_paid": FORMAT}, ADV)


def test_the_hand_built_batch_has_the_weights_it_says():
    w = (P.log() - Q.log()).exp()
    assert w[MASK].tolist() == pytest.approx([x for answer in WEIGHTS for x in answer])
    assert w[1, 1].item() == 2.0  # exactly: the edge of --tis-cap 2


def test_tis_weight_above_2_is_the_share_of_tokens_whose_weight_passes_2(batch_logged):
    """3, 4 and 2.5 of the 10 tokens; not 2 itself (the cap leaves it as it is), nor a weight whose log passes 2."""
    assert batch_logged["tis_weight_above_2"] == pytest.approx(3 / 10)


def test_tis_weight_mean_min_and_max_are_over_the_answers_tokens(batch_logged):
    assert batch_logged["tis_weight_mean"] == pytest.approx(16.75 / 10)  # 3 + 1.5 + 2 + 0.5 + 1 + 0.25 + 4 + 1 + 1 + 2.5
    assert batch_logged["tis_weight_min"] == pytest.approx(0.25) and batch_logged["tis_weight_max"] == pytest.approx(4.0)


def test_signal_groups_counts_groups_not_answers(batch_logged):
    """Group 0's rewards 1, 0.5, 0 differ (two answers differ from its first), group 1's are all 0.5."""
    assert batch_logged["signal_groups"] == 1


def test_adv_correct_corr_is_pearsons_with_the_correctness_reward_not_the_total(batch_logged):
    """A = [1, 0, -1, 0, 0, 0], correct = [1, 0, 0, 0, 0, 0]: cov 1 (sums), var 2 and 5/6, so the correlation is
    1 / sqrt(2 * 5/6) = sqrt(3/5). The total reward is 0.5 + 0.5 A, whose correlation would be 1."""
    assert batch_logged["adv_correct_corr"] == pytest.approx(math.sqrt(3 / 5))
    assert batch_logged["adv_correct_corr"] == pytest.approx(statistics.correlation(ADV.tolist(), CORRECT.tolist()))
    assert statistics.correlation(ADV.tolist(), TOTAL.tolist()) == pytest.approx(1.0)


def test_adv_to_centred_is_the_advantages_size_over_the_rewards_distance_from_their_groups_mean(batch_logged):
    """Over the groups with a signal (group 0): sum |A| = 2 over sum |r - mean| = 0.5 + 0 + 0.5 = 1; group 1's
    answers are left out of both sums. And no advantage in an all-equal group: equal_groups_adv 0."""
    assert batch_logged["adv_to_centred"] == pytest.approx(2.0)
    assert batch_logged["equal_groups_adv"] == 0.0


def test_the_baselines_scale_a_lone_right_answer_as_their_formulas_say():
    """Rewards [1, 0, 0, 0 | 1, 1, 1, 1] in groups of 4 (the step's own advantages, grpo.group_advantages):
    - RLOO: A = [1, -1/3, -1/3, -1/3 | 0 ...]: sum |A| = 2 over sum |r - mean| = 0.75 + 3 * 0.25 = 1.5, so 4/3 = G / (G - 1);
    - Dr. GRPO (no std): the centred rewards themselves, 1;
    - GRPO: over the group's std, sqrt(1/4): 1 / 0.5 = 2 (with eps 1e-4 in the std's place);
    - REINFORCE++ (the batch's tokens, one an answer here): mu = 5/8, sigma^2 = (5 (3/8)^2 + 3 (5/8)^2) / 7 = 15/56,
      so each answer of the all-right group gets (3/8) / sqrt(15/56) = 0.7246, where the others give 0, and the group
      with a signal (3/8 + 3 * 5/8) / sqrt(15/56) over its 1.5."""
    r = torch.tensor([1.0, 0, 0, 0, 1, 1, 1, 1])
    rewards = {"total": r, "correct": r, "format": torch.zeros(8)}
    cases = {"leave_one_out": (4 / 3, 0.0), "none": (1.0, 0.0), "group": (1 / (0.5 + 1e-4), 0.0),
             "batch": ((3 / 8 + 3 * 5 / 8) / math.sqrt(15 / 56) / 1.5, (3 / 8) / math.sqrt(15 / 56))}
    for baseline, (to_centred, equal) in cases.items():
        adv = grpo.group_advantages(r, 4, "none" if baseline == "none" else "group",
                                    "group" if baseline in ("none", "group") else baseline, torch.ones(8))
        batch = SimpleNamespace(rewards=rewards, loss_mask=torch.ones(8, 1, dtype=torch.bool),
                                mask=torch.ones(8, 1, dtype=torch.bool), truncated=torch.zeros(8, dtype=torch.bool),
                                sampler_logp=torch.zeros(8, 1), sampler_entropy=torch.zeros(8, 1))
        step = stats.StepStats()
        stats.batch_stats(step, batch, adv, torch.tensor([False, True]), torch.zeros(8, 1), batch.loss_mask, G=4)
        logged = step.result()
        assert logged["adv_to_centred"] == pytest.approx(to_centred, rel=1e-6), baseline
        assert logged["equal_groups_adv"] == pytest.approx(equal, rel=1e-6), baseline


def test_format_paid_wrong_is_the_format_bonus_paid_to_wrong_answers(batch_logged):
    """Ungated, the bonus goes to every answer that reasons: 4 of the 5 wrong ones (answers 1, 3, 4, 5); gated
    (format_paid = format * correct), to none of them."""
    assert batch_logged["format_paid_wrong"] == pytest.approx(4 / 5)
    gated = log_batch({"total": TOTAL, "correct": CORRECT, "format": FORMAT, "format_paid": FORMAT * CORRECT}, ADV)
    assert gated["format_paid_wrong"] == 0.0


def test_truncated_frac_is_the_share_of_answers_cut_at_the_cap(batch_logged):
    assert batch_logged["truncated_frac"] == pytest.approx(2 / 6)


def test_each_reward_term_is_its_mean_over_the_answers(batch_logged):
    """reward (the total), reward_correct and reward_format (what think_half_step reads) over the 6 answers."""
    assert batch_logged["reward"] == pytest.approx(3 / 6)  # 1 + 0.5 + 0 + 3 * 0.5
    assert batch_logged["reward_correct"] == pytest.approx(1 / 6)
    assert batch_logged["reward_format"] == pytest.approx(4 / 6)


def test_sampler_entropy_is_the_mean_over_the_answers_tokens(batch_logged):
    assert batch_logged["sampler_entropy"] == pytest.approx(12.0 / 10)  # (1 + 2) + (0.5 + 0.5) + 3 + 3 + 0 + 2


# ------------------------------------------------------------------- an update (stats.update_stats)

# 4 answers, (4, 4), column 0 the prompt's: A = 1, -1, -1, 0.5. Each answer's tokens: pi_theta's log-probs, the
# sampler's above them by FAR (a mean of 0.5, 0.3, 0.05, 0 an answer), pi_old's above them by DRIFT.
UMASK = torch.tensor([[0, 1, 0, 0], [0, 1, 1, 0], [0, 1, 1, 0], [0, 1, 1, 1]], dtype=torch.bool)
UADV = torch.tensor([1.0, -1.0, -1.0, 0.5], dtype=torch.float64)
LOGP = torch.tensor([[-0.7, -1.0, -2.0, -0.3], [-0.7, -0.5, -1.5, -0.3], [-0.7, -2.0, -0.2, -0.3],
                     [-0.7, -0.9, -1.1, -0.4]], dtype=torch.float64)
FAR = torch.tensor([[5.0, 0.5, 5.0, 5.0], [5.0, 0.2, 0.4, 5.0], [5.0, 0.1, 0.0, 5.0], [5.0, 0.0, 0.0, 0.0]],
                   dtype=torch.float64)  # 5 off the answers: counted, every answer would be far
DRIFT = torch.tensor([[3.0, 0.2, 3.0, 3.0], [3.0, -0.1, 0.3, 3.0], [3.0, 0.0, 0.4, 3.0], [3.0, 0.1, 0.1, -0.2]],
                     dtype=torch.float64)  # log pi_old - log pi_theta; 3 off the answers


@pytest.fixture(scope="module")
def update_logged():
    old, sampler = LOGP + DRIFT, LOGP + FAR
    loss = grpo.grpo_loss(LOGP, old, None, UADV, UMASK, GRPOConfig(clip=0.2))
    step = stats.StepStats()
    stats.update_stats(step, loss, LOGP, old, torch.zeros_like(LOGP), UMASK, torch.tensor(1.0), None, UADV, sampler)
    return step.result()


def test_neg_far_frac_is_a_share_of_all_the_updates_answers(update_logged):
    """Far (mean log pi_sampler - log pi above 0.1): answer 0 (0.5, but A > 0) and answer 1 (0.3, A < 0); answer
    2 is negative but near (0.05). One answer the mask would drop, over the update's 4 answers: 1/4 (of the two
    negatives it would be 1/2; far answers of either sign, 2/4)."""
    answers = len(UADV)  # the denominator: every answer of the update, whatever its sign
    far = ((FAR * UMASK).sum(1) / UMASK.sum(1)).tolist()
    assert far == pytest.approx([0.5, 0.3, 0.05, 0.0])
    assert update_logged["neg_far_frac"] == pytest.approx(1 / answers) and answers == 4


def test_ppo_kl_is_the_mean_of_log_pi_old_minus_log_pi_over_the_answers_tokens(update_logged):
    # (0.2) + (-0.1 + 0.3) + (0 + 0.4) + (0.1 + 0.1 - 0.2) = 0.8 over 8 tokens
    assert update_logged["ppo_kl"] == pytest.approx(0.8 / 8)


def log_update(cfg):
    old, sampler = LOGP + DRIFT, LOGP + FAR
    loss = grpo.grpo_loss(LOGP, old, None, UADV, UMASK, cfg, torch.zeros_like(LOGP), sampler)
    step = stats.StepStats()
    stats.update_stats(step, loss, LOGP, old, torch.zeros_like(LOGP), UMASK, torch.tensor(1.0), None, UADV, sampler)
    return step.result()


def test_token_weight_spread_is_the_longest_answers_length_over_the_shortests_under_seq_mean():
    """Answers of 1, 2, 2 and 3 tokens: seq_mean weighs a token 1/|o_i|, so 1 against 1/3, a spread of 3;
    token_mean, Dr. GRPO's constant and LUSPO weigh every token alike, 1."""
    assert log_update(GRPOConfig())["token_weight_spread"] == pytest.approx(3.0)
    for agg in ("token_mean", "constant"):
        assert log_update(GRPOConfig(loss_agg=agg))["token_weight_spread"] == 1.0


def test_is_weight_mean_is_the_mean_capped_weight_over_the_answers_tokens():
    """--tis-cap 1.2: w = min(pi_old / pi_sampler, 1.2) = exp(DRIFT - FAR) capped, over the 8 tokens:
    e^-0.3, e^-0.3, e^-0.1 | e^-0.1, e^0.4 -> 1.2 | e^0.1, e^0.1, e^-0.2; without a cap, nothing is logged."""
    want = (2 * math.exp(-0.3) + 2 * math.exp(-0.1) + 1.2 + 2 * math.exp(0.1) + math.exp(-0.2)) / 8
    assert log_update(GRPOConfig(tis_cap=1.2))["is_weight_mean"] == pytest.approx(want)
    assert "is_weight_mean" not in log_update(GRPOConfig())


# ------------------------------------------------------------------- every gate has a guard

def guard_table():
    """{run_summary key: ([logged numbers], [tests])} from tests/README.md's table "Which test guards each gate"."""
    with open(os.path.join(ROOT, "tests", "README.md"), encoding="utf-8") as f:
        text = f.read()
    part = text[text.index("## Which test guards each gate"):]
    rows = {}
    for line in part.splitlines()[1:]:
        if line.startswith("## "):
            break
        cells = [c.strip() for c in line.strip().strip("|").split("|")] if line.startswith("| `") else None
        if cells and len(cells) == 4:
            rows[cells[0].strip("`")] = (re.findall(r"`(\w+)`", cells[1]), re.findall(r"`([\w/.]+::\w+)`", cells[3]))
    return rows


def test_every_gate_and_fix_metric_has_a_guard_that_exists():
    """Each number a lesson, fix or variant is judged by (its number, its mechanism's, its costs) and each gate of a
    fix has a row in tests/README.md's table, which names the test of its logged number and of run_summary's value
    of it; each test named exists."""
    rows = guard_table()
    keys = set()
    for _, judged in lessons.judged():  # its failure's, its number, its mechanism's (from either run) and its costs
        mechanism = judged.record.mechanism
        keys |= {judged.record.failure.key, judged.number.key, mechanism.key, mechanism.without_key or mechanism.key,
                 *judged.record.costs}
    assert not keys - set(rows), f"numbers a verdict reads without a row in tests/README.md: {sorted(keys - set(rows))}"
    for key, (_, tests) in rows.items():
        assert tests, key
        for test in tests:
            path, name = test.split("::")
            with open(os.path.join(ROOT, path), encoding="utf-8") as f:
                assert re.search(rf"^def {name}\(", f.read(), re.M), f"{key}: {test} does not exist"


def test_reward_collapse_frac_and_tied_adv_gap_by_hand():
    """GDPO's advantage collapse at equal weights, correctness and the format term both paid: group 0's first two
    answers score (1, 0) and (0, 1), terms that differ and a total that ties (1 = 1); group 1 has no such pair (its
    answers that differ in terms, (0, 1) and (0, 0), differ in total too). One group of two: reward_collapse_frac 0.5.
    tied_adv_gap: |A_0 - A_1| over that pair, both ways, 0.4 for these advantages; GRPO's would be 0 there."""
    correct = torch.tensor([1.0, 0.0, 0.0, 0.0, 0.0, 0.0])
    fmt = torch.tensor([0.0, 1.0, 0.0, 1.0, 1.0, 0.0])
    rewards = {"total": correct + fmt, "correct": correct, "format": fmt, "format_paid": fmt,
               "overlong": torch.zeros(6)}
    adv = torch.tensor([0.7, 0.3, -1.0, 0.5, 0.5, -1.0], dtype=torch.float64)
    batch = SimpleNamespace(rewards=rewards, loss_mask=MASK, mask=MASK, truncated=TRUNCATED, sampler_logp=Q.log(),
                            sampler_entropy=ENTROPY)
    step = stats.StepStats()
    weights = {"correct": 1.0, "format_paid": 1.0, "overlong": 0.0}
    stats.batch_stats(step, batch, adv, torch.tensor([False, False]), P.log(), MASK, 3, weights)
    logged = step.result()
    assert logged["reward_collapse_frac"] == pytest.approx(0.5)
    assert logged["tied_adv_gap"] == pytest.approx(0.4)
    step = stats.StepStats()  # at weight 0.5 the pair's totals differ (1 and 0.5): no collapse, no tied pair
    batch.rewards = {**rewards, "total": correct + 0.5 * fmt}
    stats.batch_stats(step, batch, adv, torch.tensor([False, False]), P.log(), MASK, 3, {**weights, "format_paid": 0.5})
    assert step.result()["reward_collapse_frac"] == 0 and step.result()["tied_adv_gap"] is None


def test_sapo_gate_is_4_s_1_minus_s_of_tau_r_minus_1():
    """SAPO's gate on a token's gradient: 1 at ratio 1; at ratio 2 with tau 1, s = sigmoid(1) = 0.731 and
    4 s (1 - s) = 0.7864; at ratio 0.5 with a negative advantage (tau 1.05), s = sigmoid(-0.525) = 0.3717 and
    4 s (1 - s) = 0.9342."""
    import field_methods
    ratio = torch.tensor([[1.0, 2.0], [0.5, 1.0]])
    A = torch.tensor([[1.0], [-1.0]])
    gate = field_methods.sapo_gate(ratio, A, 1.0, 1.05)
    torch.testing.assert_close(gate, torch.tensor([[1.0, 0.7864], [0.9342, 1.0]]), atol=1e-4, rtol=0)


def test_adv_mean_is_the_advantages_mean_over_the_answers():
    """adv_mean: 0 for GRPO's advantages by construction (ADV: 1, 0, -1 | 0, 0, 0), and, without a baseline
    (--baseline none: A = r, here the correctness of 2 answers in 6), the rewards' mean, 1/3: RLOO's failure."""
    rewards = {"total": TOTAL, "correct": CORRECT, "format": FORMAT, "format_paid": FORMAT}
    assert log_batch(rewards, ADV)["adv_mean"] == pytest.approx(0.0)
    raw = torch.tensor([1.0, 1.0, 0.0, 0.0, 0.0, 0.0], dtype=torch.float64)
    assert log_batch(rewards, raw)["adv_mean"] == pytest.approx(1 / 3)
