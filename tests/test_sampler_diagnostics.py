"""The sampler-learner diagnostics a step logs (stats.batch_stats), each against its formula on a
hand-built batch: the value, not only that it is a number.

    python -m pytest -q tests/test_sampler_diagnostics.py

With w = pi_old / pi_sampler of each sampled token (q the sampler, p the learner):
    sampler_kl_k1      mean of log q - log p = mean of -log w   KL(q || p) by k1, signed: its terms can cancel
    sampler_kl_k3      mean of w - 1 - log w                    k3 (Schulman), each term >= 0, 0 where w = 1
    tis_chi2           mean of w^2 - 1                          chi^2(p || q), as E_q[w^2] - 1
    tis_ess            (sum W)^2 / (n sum W^2)                  W: each answer's weight, the product of its tokens' w
    sampler_gap_max    mean over answers of max |log w|
    sampler_logp_corr  Pearson's correlation of log p and log q over the answers' tokens
Every mean is over the answers' tokens only: the prompt column and the padding below carry gaps
that would change each number if they were counted.
"""
import math
import statistics
from types import SimpleNamespace

import pytest
import torch

from harness import stats

MASK = torch.tensor([[0, 1, 1, 0], [0, 1, 1, 1]], dtype=torch.bool)  # (2, 4): a prompt column; row 0 padded
W = [[2.0, 0.5], [4.0, 1.0, 1.0]]  # w of each answer's tokens: log w sums to 2 ln 2, so k1 does not cancel
# float64: k3 near w = 1 is a difference of near-equal numbers
Q = torch.tensor([[0.9, 0.25, 0.8, 0.01], [0.9, 0.2, 0.5, 0.3]], dtype=torch.float64)  # (2, 4) the sampler's
P = torch.tensor([[0.1, 0.5, 0.4, 0.9], [0.2, 0.8, 0.5, 0.3]], dtype=torch.float64)  # (2, 4) the learner's: P / Q = W


def diagnostics(sampler_logp, learner_logp, mask):
    """What batch_stats logs of a batch of one group whose answers have these log-probs (B, T)."""
    B = len(mask)
    batch = SimpleNamespace(rewards={"total": torch.arange(B, dtype=torch.float), "correct": torch.zeros(B)},
                            loss_mask=mask, mask=mask, truncated=torch.zeros(B, dtype=torch.bool),
                            sampler_logp=sampler_logp, sampler_entropy=torch.zeros(mask.shape))
    step = stats.StepStats()
    stats.batch_stats(step, batch, torch.zeros(B), torch.tensor([False]), learner_logp, mask, G=B)
    return step.result()


@pytest.fixture
def logged():
    return diagnostics(Q.log(), P.log(), MASK)


def tokens():
    return [w for answer in W for w in answer]


def test_the_hand_built_batch_has_the_weights_it_says():
    w = (P / Q)[MASK].tolist()
    assert w == pytest.approx(tokens())


def test_k1_is_the_signed_mean_of_log_q_over_p(logged):
    assert logged["sampler_kl_k1"] == pytest.approx(-2 * math.log(2) / 5)  # -(ln 2 - ln 2 + 2 ln 2 + 0 + 0) / 5


def test_k3_is_the_mean_of_w_minus_1_minus_log_w(logged):
    expected = sum(w - 1 - math.log(w) for w in tokens()) / 5  # (3.5 - 2 ln 2) / 5
    assert logged["sampler_kl_k3"] == pytest.approx(expected)
    assert logged["sampler_kl_k3"] == pytest.approx((3.5 - 2 * math.log(2)) / 5)


@pytest.mark.parametrize("w", [0.05, 0.5, 0.9, 1.1, 2.0, 30.0])
def test_k3_of_one_token_is_never_negative(w):
    """One answer of one token, whatever side of the sampler the learner is on."""
    mask = torch.tensor([[False, True]])
    q = torch.tensor([[0.5, 0.02]], dtype=torch.float64).log()
    got = diagnostics(q, q + math.log(w), mask)["sampler_kl_k3"]
    assert got >= 0 and got == pytest.approx(w - 1 - math.log(w))


def test_every_diagnostic_is_exactly_that_of_no_gap_when_the_two_agree():
    got = diagnostics(Q.log(), Q.log(), MASK)
    assert got["sampler_kl_k3"] == 0.0 and got["sampler_kl_k1"] == 0.0 and got["tis_chi2"] == 0.0
    assert got["sampler_gap_max"] == 0.0 and got["tis_ess"] == pytest.approx(1.0)
    assert got["sampler_logp_corr"] == pytest.approx(1.0)


def test_chi2_is_the_mean_of_w_squared_minus_1(logged):
    assert logged["tis_chi2"] == pytest.approx(((4 - 1) + (0.25 - 1) + (16 - 1) + 0 + 0) / 5)  # 3.45


def test_the_ess_is_that_of_the_answers_weights(logged):
    answer_w = [2.0 * 0.5, 4.0 * 1.0 * 1.0]  # each answer's weight: the product of its tokens'
    assert logged["tis_ess"] == pytest.approx(sum(answer_w) ** 2 / (2 * sum(x * x for x in answer_w)))  # 25 / 34


def test_the_ess_is_1_for_equal_weights_and_1_over_n_when_one_dominates():
    mask = torch.ones(4, 1, dtype=torch.bool)  # four answers of one token
    q = torch.full((4, 1), 0.1).log()
    assert diagnostics(q, q + math.log(3.0), mask)["tis_ess"] == pytest.approx(1.0)  # all 3: as good as equal
    dominated = q + torch.tensor([[12.0], [0.0], [0.0], [0.0]])  # one weight e^12, the others 1
    assert diagnostics(q, dominated, mask)["tis_ess"] == pytest.approx(0.25, rel=1e-4)


def test_the_largest_gap_is_each_answers_largest_token_gap_averaged(logged):
    assert logged["sampler_gap_max"] == pytest.approx((math.log(2) + math.log(4)) / 2)  # the padding's ln 90 not


def test_the_correlation_is_pearsons_over_the_answers_tokens(logged):
    p, q = P.log()[MASK].tolist(), Q.log()[MASK].tolist()
    assert logged["sampler_logp_corr"] == pytest.approx(statistics.correlation(p, q))
    assert abs(logged["sampler_logp_corr"] - statistics.correlation(P.log().flatten().tolist(),
                                                                    Q.log().flatten().tolist())) > 0.1  # not all tokens


def test_the_correlation_is_minus_1_when_the_learner_reverses_the_sampler_and_none_when_one_is_constant():
    mask = torch.tensor([[True, True, True]])
    q = torch.tensor([[0.2, 0.5, 0.8]]).log()
    assert diagnostics(q, -q, mask)["sampler_logp_corr"] == pytest.approx(-1.0)
    assert diagnostics(q, torch.full_like(q, -1.0), mask)["sampler_logp_corr"] is None
