"""The field's variants (field_methods.py), each against its paper's formula written out here by hand.

    python -m pytest -q tests/test_field.py

Each test builds a small case (three answers of 3, 2 and 4 tokens, padding after), computes the
method's loss and each token's gradient with plain Python (math, loops), never through
field_methods.py or grpo.py, and compares them with what grpo_loss (or group_advantages,
kl_penalty, the entropy controller) gives for the flag. The cases are chosen so each method's
own decision is exercised both ways (a token inside and outside a band, a positive and a
negative advantage), so a formula that is subtly wrong moves a number here. Then: what the field
costs when it is off (nothing), and the file's place in the project.
"""
import ast
import dataclasses
import inspect
import math
import os

import pytest
import torch

import field_methods
import grpo
from config import GRPOConfig
from grpo import grpo_loss
from harness.stats import logged_step

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LENGTHS = [3, 2, 4]  # three answers' completion tokens; T = 4, padding after
MASK = torch.tensor([[i < n for i in range(4)] for n in LENGTHS])  # (3, 4)


def tensor(rows):
    """(3, 4) float64 from three rows given as their real tokens (padding filled with 0)."""
    return torch.tensor([row + [0.0] * (4 - len(row)) for row in rows], dtype=torch.float64)


def leaf(rows):
    return tensor(rows).requires_grad_()


def loss_and_grad(logp, old, adv, cfg, sampler=None, entropy=None, ref=None, mask=MASK):
    """grpo_loss's value and d loss / d logp (3, 4), as the step sees them."""
    logp.grad = None
    out = grpo_loss(logp, old, ref, torch.tensor(adv, dtype=torch.float64), mask, cfg, entropy,
                    old if sampler is None else sampler)
    out.value.backward()
    return out, out.value.item(), logp.grad


def tokens(mask=MASK):
    """(i, t) of every completion token."""
    return [(i, t) for i in range(mask.shape[0]) for t in range(mask.shape[1]) if mask[i, t]]


def assert_grad(grad, want):
    """want: {(i, t): value} for every completion token; padding must get exactly 0."""
    full = torch.zeros_like(grad)
    for (i, t), v in want.items():
        full[i, t] = v
    torch.testing.assert_close(grad, full, rtol=1e-9, atol=1e-12)


def sigmoid(x):
    return 1 / (1 + math.exp(-x))


# ---------------------------------------------------------------- objectives

def test_sapo_gates_each_token_with_the_temperature_of_its_advantages_sign():
    """SAPO: f(r) = sigmoid(tau (r - 1)) 4 / tau, tau_pos where A > 0 and tau_neg where A <= 0 (here 1 and 3,
    so swapping them moves every number); d f / d log r = 4 r s (1 - s), exactly 1 at r = 1 (token (2, 0))."""
    logp = leaf([[-1.0, -0.5, -2.0], [-0.2, -1.5], [-0.7, -0.3, -1.1, -0.9]])
    log_r = tensor([[0.3, -0.4, 0.9], [0.0, 1.2], [0.0, 0.2, 0.5, -1.0]])
    adv = [1.5, -0.5, -1.0]
    cfg = GRPOConfig(objective="sapo", sapo_tau_pos=1.0, sapo_tau_neg=3.0)
    out, loss, grad = loss_and_grad(logp, logp.detach() - log_r, adv, cfg)
    want_loss, want_grad = 0.0, {}
    for i, t in tokens():
        A, r = adv[i], math.exp(log_r[i, t])
        tau = 1.0 if A > 0 else 3.0
        s = sigmoid(tau * (r - 1))
        w = 1 / (3 * LENGTHS[i])  # seq_mean: each answer's mean, then the mean over answers
        want_loss -= w * s * 4 / tau * A
        want_grad[i, t] = -w * A * 4 * r * s * (1 - s)
    assert loss == pytest.approx(want_loss, rel=1e-12)
    assert_grad(grad, want_grad)
    assert grad[2, 0].item() == pytest.approx(-(-1.0) / 12)  # r = 1: the plain policy gradient
    assert not out.clipped_low.any() and not out.clipped_high.any()  # a gate, not a clip


def test_gmpo_takes_the_geometric_mean_of_ratios_clipped_in_log_space():
    """GMPO: l_t = sgn(A) min(sgn(A) log r_t, sgn(A) clip(log r_t, -0.4, 0.4)); surrogate_i = A_i exp(mean_t l_t).
    Row 0 (A > 0): 0.6 is clipped to 0.4 (no gradient), -0.1 and 0.2 pass; row 1 (A < 0): -0.7 is clipped to
    -0.4, 0.1 passes; row 2 (A > 0): -0.5 moved the wrong way and keeps its gradient, 0.9 is clipped."""
    logp = leaf([[-1.0, -0.5, -2.0], [-0.2, -1.5], [-0.7, -0.3, -1.1, -0.9]])
    log_r = tensor([[0.6, -0.1, 0.2], [0.1, -0.7], [0.3, -0.5, 0.05, 0.9]])
    adv = [1.0, -2.0, 0.5]
    out, loss, grad = loss_and_grad(logp, logp.detach() - log_r, adv, GRPOConfig(objective="gmpo", clip=0.4))
    want_loss, want_grad = 0.0, {}
    for i, n in enumerate(LENGTHS):
        A, ls = adv[i], [log_r[i, t].item() for t in range(n)]
        clipped = [max(-0.4, min(0.4, x)) for x in ls]
        kept = [min(x, c) if A > 0 else max(x, c) for x, c in zip(ls, clipped)]  # the pessimistic side of A
        ratio = math.exp(sum(kept) / n)  # the geometric mean of the answer's (clipped) token ratios
        want_loss -= A * ratio / 3
        for t, (x, k) in enumerate(zip(ls, kept)):
            want_grad[i, t] = -A * ratio / (3 * n) if k == x else 0.0
    assert loss == pytest.approx(want_loss, rel=1e-12)
    assert_grad(grad, want_grad)
    assert grad[0, 0] == 0 and grad[1, 1] == 0 and grad[2, 3] == 0 and grad[2, 1] != 0
    assert out.clipped_high[0, 0] and out.clipped_low[1, 1] and not out.clipped_low[2, 1]


def test_gmpo_takes_the_samplers_weights_as_their_geometric_mean_over_the_answer():
    """GMPO with --tis-cap C (verl's compute_policy_loss_geo_mean): each answer's token weights w_t = min(pi_old /
    pi_sampler, C) enter as one, exp(mean_t log w_t), times its surrogate A g (all log-ratios inside the band here,
    so each token's gradient is -A g W / (3 n)); an arithmetic mean of w_t would give another W in every row."""
    logp = leaf([[-1.0, -0.5, -2.0], [-0.2, -1.5], [-0.7, -0.3, -1.1, -0.9]])
    log_r = tensor([[0.1, -0.2, 0.05], [0.2, 0.1], [-0.1, 0.0, 0.1, -0.05]])
    old = logp.detach() - log_r
    adv = [1.0, -0.5, 0.5]
    cfg = GRPOConfig(objective="gmpo", clip=0.4, tis_cap=2.0)
    out, _, grad = loss_and_grad(logp, old, adv, cfg, sampler=old - tensor(IS_LOG_W))
    want, weights = {}, []
    for i, n in enumerate(LENGTHS):
        g = math.exp(sum(log_r[i, t].item() for t in range(n)) / n)
        W = math.exp(sum(math.log(min(math.exp(IS_LOG_W[i][t]), 2.0)) for t in range(n)) / n)  # 0.3, 1.5, 2 -> 0.97
        weights.append(W)
        for t in range(n):
            want[i, t] = -adv[i] * g * W / (3 * n)
    assert_grad(grad, want)
    torch.testing.assert_close(out.weight[:, 0], torch.tensor(weights, dtype=torch.float64))
    assert abs(weights[0] - (0.3 + 1.5 + 2.0) / 3) > 0.2  # the arithmetic mean would be 1.27


def test_dppo_takes_no_second_sampler_weight():
    """DPPO weighs each token by pi / pi_sampler already (its authors take no rollout weight): with --tis-cap the
    loss and its gradient are DPPO's own, not times min(pi_old / pi_sampler, C) again (harness/cli.py refuses the pair)."""
    mu, pi = probability_case()
    sampler = tensor([[math.log(p) for p in row] for row in mu])
    old = sampler + tensor(IS_LOG_W)  # pi_old / pi_sampler of 0.3 to 4: a second weight would move every term
    results = []
    for tis_cap in (0.0, 2.0):
        logp = leaf([[math.log(p) for p in row] for row in pi])
        cfg = GRPOConfig(objective="dppo_tv", clip=0.15, tis_cap=tis_cap)
        out, loss, grad = loss_and_grad(logp, old, [1.0, -1.0, 2.0], cfg, sampler=sampler)
        results.append((loss, grad.clone(), out.weight))
    assert results[1][0] == results[0][0] and torch.equal(results[1][1], results[0][1])
    assert results[0][2] is None and results[1][2] is None

def probability_case():
    """Probabilities of the sampler (mu) and the learner (pi) at each token, chosen around DPPO's bounds."""
    mu = [[0.5, 0.01, 0.9], [0.9, 0.2], [0.6, 0.06, 0.3, 0.97]]
    pi = [[0.7, 0.1, 0.6], [0.7, 0.3], [0.62, 0.2, 0.1, 0.9]]  # (2, 1): 0.06 -> 0.2, inside TV's 0.15
    return mu, pi


@pytest.mark.parametrize("divergence, bound", [("tv", 0.15), ("kl", 0.05)])
def test_dppo_drops_the_tokens_whose_probability_left_the_trust_region(divergence, bound):
    """DPPO: surrogate = sg(pi / mu) M A log pi. TV: M = 0 where pi - mu > 0.15 (A > 0) or < -0.15 (A <= 0);
    binary KL: D = mu log(mu/pi) + (1-mu) log((1-mu)/(1-pi)) > 0.05 in the direction A pushes. Token (0, 1)
    grows tenfold (0.01 -> 0.1) and stays inside for TV (a ratio clip at 0.2 would stop it)."""
    mu, pi = probability_case()
    logp = leaf([[math.log(p) for p in row] for row in pi])
    sampler = tensor([[math.log(p) for p in row] for row in mu])
    adv = [1.0, -1.0, 2.0]
    cfg = GRPOConfig(objective=f"dppo_{divergence}", clip=bound)
    out, loss, grad = loss_and_grad(logp, sampler, adv, cfg, sampler=sampler)
    want_loss, want_grad, dropped = 0.0, {}, set()
    for i, t in tokens():
        A, p, m = adv[i], pi[i][t], mu[i][t]
        if divergence == "tv":
            out_of_region = p - m > bound if A > 0 else p - m < -bound
        else:
            D = m * math.log(m / p) + (1 - m) * math.log((1 - m + 1e-8) / (1 - p + 1e-8))
            out_of_region = D > bound and (p > m if A > 0 else p < m)
        keep = 0.0 if out_of_region else 1.0
        dropped |= {(i, t)} if out_of_region else set()
        w = 1 / (3 * LENGTHS[i])
        want_loss -= w * (p / m) * keep * A * math.log(p)
        want_grad[i, t] = -w * (p / m) * keep * A
    assert loss == pytest.approx(want_loss, rel=1e-9)
    assert_grad(grad, want_grad)
    assert {(0, 0), (1, 0)} <= dropped and (0, 2) not in dropped  # both signs; a fall where A > 0 is never stopped
    assert ((0, 1) in dropped) == (divergence == "kl")  # 0.01 -> 0.1: TV 0.09 is inside, the binary KL 0.071 is not
    got = {(i, t) for i, t in tokens() if (out.clipped_low | out.clipped_high)[i, t]}
    assert got == dropped


def test_vespo_weighs_each_answer_by_the_gamma_kernel_of_its_whole_ratio():
    """VESPO: log w = sum_t log r_t (no length normalisation), phi(w) = e^lambda w^k e^(-lambda w) with (k, lambda)
    = (2, 3) where A >= 0 and (3, 2) where A < 0; surrogate = sg(phi) A log pi, aggregated per token (DAPO's)."""
    logp = leaf([[-1.0, -0.5, -2.0], [-0.2, -1.5], [-0.7, -0.3, -1.1, -0.9]])
    log_r = tensor([[0.3, -0.4, 0.2], [0.9, 0.8], [-0.2, 0.1, -0.3, -0.1]])
    adv = [1.0, -0.5, 0.0]  # A = 0 takes the positive kernel (and contributes nothing)
    cfg = GRPOConfig(objective="vespo", loss_agg="token_mean")
    out, loss, grad = loss_and_grad(logp, logp.detach() - log_r, adv, cfg)  # out.weight: phi, the answers' weight
    N, want_loss, want_grad, phis = sum(LENGTHS), 0.0, {}, []
    for i, n in enumerate(LENGTHS):
        A = adv[i]
        k, lam = (2.0, 3.0) if A >= 0 else (3.0, 2.0)
        w = math.exp(sum(log_r[i, t].item() for t in range(n)))  # the product of the token ratios
        phi = math.exp(lam) * w ** k * math.exp(-lam * w)
        phis.append(phi)
        for t in range(n):
            want_loss -= phi * A * logp[i, t].item() / N
            want_grad[i, t] = -phi * A / N
    assert loss == pytest.approx(want_loss, rel=1e-12)
    assert_grad(grad, want_grad)
    assert 0 < want_grad[1, 0] * N / 0.5 < 0.05  # a stale answer (w = e^1.7) weighs little: phi = 0.022
    torch.testing.assert_close(out.weight[:, 0], torch.tensor(phis, dtype=torch.float64))  # what the step logs


IS_LOG_W = [[math.log(0.3), math.log(1.5), math.log(4.0)], [math.log(0.8), math.log(2.0)],
            [math.log(0.5), math.log(1.1), math.log(0.9), math.log(1.0)]]  # log pi_old / pi_sampler


def test_vespo_folds_the_samplers_truncated_weights_into_its_answer_weight():
    """With --tis-cap C, VESPO's w is pi / pi_old times the product of the answer's token weights min(pi_old /
    pi_sampler, C) (the authors' rollout_is_weights): the sampler's ratio enters the Gamma kernel once, and the
    policy gradient is not multiplied by the weights again."""
    logp = leaf([[-1.0, -0.5, -2.0], [-0.2, -1.5], [-0.7, -0.3, -1.1, -0.9]])
    log_r = tensor([[0.1, -0.2, 0.05], [0.2, 0.1], [-0.1, 0.0, 0.1, -0.05]])
    old = logp.detach() - log_r
    sampler = old - tensor(IS_LOG_W)  # pi_old / pi_sampler: 0.3, 1.5, 4 | 0.8, 2 | 0.5, 1.1, 0.9, 1
    adv = [1.0, -0.5, 0.5]
    cfg = GRPOConfig(objective="vespo", loss_agg="token_mean", tis_cap=2.0)
    _, _, grad = loss_and_grad(logp, old, adv, cfg, sampler=sampler)
    want = {}
    for i, n in enumerate(LENGTHS):
        k, lam = (2.0, 3.0) if adv[i] >= 0 else (3.0, 2.0)
        w = math.exp(sum(log_r[i, t].item() for t in range(n))) * math.prod(
            min(math.exp(IS_LOG_W[i][t]), 2.0) for t in range(n))
        for t in range(n):
            want[i, t] = -math.exp(lam) * w ** k * math.exp(-lam * w) * adv[i] / 9
    assert_grad(grad, want)


# ---------------------------------------------------------------- corrections towards the learner

@pytest.mark.parametrize("mode", ["token_truncate", "token_mask"])
def test_icepop_zeroes_the_weights_outside_the_band_where_tis_truncates_them(mode):
    """--tis-cap 2 --tis-floor 0.5: token_truncate (TIS) clips w = pi_old / pi_sampler into [0.5, 2]; token_mask
    (IcePop, MIS) keeps w inside [0.5, 2] (edges included) and sets it to 0 outside. On-policy (ratio 1) each
    token's gradient is -A w / (B n)."""
    logp = leaf([[-1.0, -0.5, -2.0], [-0.2, -1.5], [-0.7, -0.3, -1.1, -0.9]])
    old = logp.detach()
    sampler = old - tensor(IS_LOG_W)
    adv = [1.0, -1.0, 0.5]
    cfg = GRPOConfig(tis_cap=2.0, tis_floor=0.5, tis_mode=mode)
    out, loss, grad = loss_and_grad(logp, old, adv, cfg, sampler=sampler)
    want_loss, want_grad = 0.0, {}
    for i, t in tokens():
        w = math.exp(IS_LOG_W[i][t])
        weight = min(max(w, 0.5), 2.0) if mode == "token_truncate" else (w if 0.5 - 1e-12 <= w <= 2.0 + 1e-12 else 0.0)
        want_loss -= weight * adv[i] / (3 * LENGTHS[i])
        want_grad[i, t] = -weight * adv[i] / (3 * LENGTHS[i])
    assert loss == pytest.approx(want_loss, rel=1e-9)
    assert_grad(grad, want_grad)
    masked = {(i, t) for i, t in tokens() if want_grad[i, t] == 0}
    assert masked == ({(0, 0), (0, 2)} if mode == "token_mask" else set())
    if mode == "token_mask":  # logged: the share of the update's tokens the mask zeroed
        assert set(out.dropped) == {"is_masked_frac"} and out.dropped["is_masked_frac"].sum() == 2


@pytest.mark.parametrize("mode", ["sequence_truncate", "sequence_mask"])
def test_sequence_level_is_gives_each_answer_the_product_of_its_token_weights(mode):
    """One weight an answer, W_i = prod_t pi_old / pi_sampler (0.3 * 1.5 * 4 = 1.8, 0.8 * 2 = 1.6, 0.5 * 1.1 * 0.9
    = 0.495), truncated to [0.5, 1.7] or masked outside it: every token of the answer shares it."""
    logp = leaf([[-1.0, -0.5, -2.0], [-0.2, -1.5], [-0.7, -0.3, -1.1, -0.9]])
    old = logp.detach()
    sampler = old - tensor(IS_LOG_W)
    adv = [1.0, -1.0, 0.5]
    cfg = GRPOConfig(tis_cap=1.7, tis_floor=0.5, tis_mode=mode)
    _, loss, grad = loss_and_grad(logp, old, adv, cfg, sampler=sampler)
    want_loss, want_grad = 0.0, {}
    for i, n in enumerate(LENGTHS):
        W = math.prod(math.exp(IS_LOG_W[i][t]) for t in range(n))
        weight = min(max(W, 0.5), 1.7) if mode == "sequence_truncate" else (W if 0.5 <= W <= 1.7 else 0.0)
        want_loss -= weight * adv[i] / 3
        for t in range(n):
            want_grad[i, t] = -weight * adv[i] / (3 * n)
    assert loss == pytest.approx(want_loss, rel=1e-9)
    assert_grad(grad, want_grad)


REJECTION_LOG_R = [[0.05, -0.9, 0.1], [0.3, 0.2], [-0.05, 0.02, 0.6, -0.01]]  # log pi_old - log pi_sampler


@pytest.mark.parametrize("rule, bound", [("token_k1", 2.0), ("token_k2", 0.1), ("token_k3", 0.05),
                                         ("seq_mean_k1", 1.2), ("seq_mean_k3", 0.05), ("seq_max_k2", 0.1),
                                         ("seq_max_k3", 0.1)])
def test_divergence_rejection_drops_tokens_or_answers_past_the_bound(rule, bound):
    """verl's rollout_rs, on-policy (ratio 1) with the token-level mean, so a rejected token also leaves the
    denominator: with log r = log pi_old - log pi_sampler, k1 = -log r kept within [log 1/U, log U], k2 = (log r)^2
    / 2 and k3 = r - 1 - log r kept <= U, per token, as each answer's mean, or as its largest."""
    logp = leaf([[-1.0, -0.5, -2.0], [-0.2, -1.5], [-0.7, -0.3, -1.1, -0.9]])
    old = logp.detach()
    sampler = old - tensor(REJECTION_LOG_R)
    adv = [1.0, -1.0, 0.5]
    cfg = GRPOConfig(loss_agg="token_mean", rejection=rule, rejection_bound=bound)
    out, loss, grad = loss_and_grad(logp, old, adv, cfg, sampler=sampler)
    estimator, level = rule[-2:], rule[:-3]
    div = {"k1": lambda x: -x, "k2": lambda x: x * x / 2, "k3": lambda x: math.exp(x) - 1 - x}[estimator]
    kept = {}
    for i, n in enumerate(LENGTHS):
        ds = [div(x) for x in REJECTION_LOG_R[i]]
        per_token = {"token": ds, "seq_mean": [sum(ds) / n] * n, "seq_max": [max(ds)] * n}[level]
        for t, d in enumerate(per_token):
            kept[i, t] = abs(d) <= math.log(bound) if estimator == "k1" else d <= bound
    N = sum(kept.values())
    assert 0 < N < len(kept)  # something is rejected, something kept
    want_grad = {(i, t): -adv[i] / N if k else 0.0 for (i, t), k in kept.items()}
    assert loss == pytest.approx(-sum(adv[i] for (i, _), k in kept.items() if k) / N, rel=1e-12)
    assert_grad(grad, want_grad)
    if level != "token":  # a whole answer or none of it
        assert all(len({kept[i, t] for t in range(n)}) == 1 for i, n in enumerate(LENGTHS))
    assert out.dropped["rejected_frac"].sum() == len(kept) - N


# ---------------------------------------------------------------- masks and normalisers

def quantile(values, q):
    """The q-quantile with linear interpolation between the two order statistics around it (torch's default)."""
    v = sorted(values)
    pos = q * (len(v) - 1)
    lo = math.floor(pos)
    return v[lo] + (pos - lo) * (v[min(lo + 1, len(v) - 1)] - v[lo])


def test_the_80_20_rule_keeps_the_policy_gradient_on_the_top_rho_of_tokens_by_entropy():
    """--top-entropy-quantile 0.4: of the 9 completion tokens, those whose entropy is at least the 0.6-quantile
    of the nine keep their gradient; the others get 0 but still count in each answer's mean (seq_mean's 1/n)."""
    H = [[0.1, 2.0, 0.5], [1.2, 0.05], [0.9, 3.0, 0.3, 0.7]]
    logp = leaf([[-1.0, -0.5, -2.0], [-0.2, -1.5], [-0.7, -0.3, -1.1, -0.9]])
    adv = [1.0, -1.0, 0.5]
    cfg = GRPOConfig(top_entropy_quantile=0.4)
    _, loss, grad = loss_and_grad(logp, logp.detach(), adv, cfg, entropy=tensor(H))
    tau = quantile([h for row in H for h in row], 0.6)
    want_grad = {(i, t): -adv[i] / (3 * LENGTHS[i]) if H[i][t] >= tau else 0.0 for i, t in tokens()}
    assert_grad(grad, want_grad)
    assert loss == pytest.approx(sum(want_grad.values()), rel=1e-12)  # ratio 1: the loss is minus A times weights
    assert sum(v != 0 for v in want_grad.values()) == 4  # 2.0, 1.2, 3.0, 0.9 of the nine


def test_the_80_20_rules_entropy_bonus_reads_the_kept_tokens_alone_as_trls():
    """--top-entropy-quantile 0.4 with an entropy bonus: TRL's bonus averages the entropy over the tokens the rule
    keeps (its effective mask), each answer's mean of them under seq_mean, an answer with none counting 0; the
    step logs the share of tokens the rule took out, 5 of 9."""
    H = [[0.1, 2.0, 0.5], [1.2, 0.05], [0.9, 3.0, 0.3, 0.7]]  # kept: 2.0 | 1.2 | 0.9, 3.0 (the 0.6-quantile is 0.9)
    logp = leaf([[-1.0, -0.5, -2.0], [-0.2, -1.5], [-0.7, -0.3, -1.1, -0.9]])
    cfg = GRPOConfig(top_entropy_quantile=0.4, entropy_coef=0.1)
    out, _, _ = loss_and_grad(logp, logp.detach(), [1.0, -1.0, 0.5], cfg, entropy=tensor(H))
    assert out.terms["entropy_bonus"].item() == pytest.approx((2.0 + 1.2 + (0.9 + 3.0) / 2) / 3)
    assert out.dropped["low_entropy_frac"].sum().item() == 5 and out.dropped["low_entropy_frac"][MASK].float().mean() \
        == pytest.approx(5 / 9)


def test_bnpo_is_the_token_mean_over_this_process_and_luspo_scales_gspo_by_length():
    """BNPO: sum of the token terms / their number here (in one process, token_mean number for number). LUSPO
    under GSPO's ratio s_i = exp(mean_t log r_t): loss = -(1/B) sum_i |o_i| s_i A_i, each token's gradient
    -(1/B) s_i A_i (|o_i| times GSPO's own)."""
    token_loss = tensor([[0.5, -1.0, 2.0], [0.25, 0.75], [1.0, -0.5, 0.0, 3.0]])
    m = MASK.double()
    assert grpo.aggregate(token_loss, MASK, "bnpo").item() == pytest.approx(token_loss.sum().item() / 9)
    assert grpo.aggregate(token_loss, MASK, "bnpo").item() == grpo.aggregate(token_loss, MASK, "token_mean").item()
    per_answer = (token_loss * m).sum(1) / m.sum(1)
    assert grpo.aggregate(token_loss, MASK, "luspo").item() == pytest.approx(
        sum(LENGTHS[i] * per_answer[i].item() for i in range(3)) / 3)
    logp = leaf([[-1.0, -0.5, -2.0], [-0.2, -1.5], [-0.7, -0.3, -1.1, -0.9]])
    log_r = tensor([[0.01, -0.02, 0.005], [0.0, 0.01], [-0.01, 0.0, 0.02, 0.01]])
    adv = [1.0, -1.0, 0.5]
    cfg = GRPOConfig(ratio_level="gspo", clip=1.0, loss_agg="luspo")
    _, loss, grad = loss_and_grad(logp, logp.detach() - log_r, adv, cfg)
    s = [math.exp(sum(log_r[i, t].item() for t in range(n)) / n) for i, n in enumerate(LENGTHS)]
    assert loss == pytest.approx(-sum(n * s[i] * adv[i] for i, n in enumerate(LENGTHS)) / 3, rel=1e-12)
    assert_grad(grad, {(i, t): -s[i] * adv[i] / 3 for i, t in tokens()})


# ---------------------------------------------------------------- baselines

REWARDS = [1.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0, 1.0]  # three groups of 4, the last all right


def test_rloo_compares_each_answer_with_the_mean_of_the_others():
    """RLOO: A_i = r_i - (sum of the other G - 1 rewards) / (G - 1), undivided; the group of equal rewards gets 0."""
    want = []
    for g in range(0, 12, 4):
        group = REWARDS[g:g + 4]
        want += [r - (sum(group) - r) / 3 for r in group]
    got = grpo.group_advantages(torch.tensor(REWARDS, dtype=torch.float64), 4, "group", "leave_one_out")
    torch.testing.assert_close(got, torch.tensor(want, dtype=torch.float64))
    assert want[:4] == pytest.approx([2 / 3, -2 / 3, -2 / 3, 2 / 3]) and want[8:] == [0.0] * 4
    logp = leaf([[-1.0, -0.5, -2.0], [-0.2, -1.5], [-0.7, -0.3, -1.1, -0.9]])  # and the update follows them
    _, _, grad = loss_and_grad(logp, logp.detach(), want[:3], GRPOConfig(baseline="leave_one_out"))
    assert_grad(grad, {(i, t): -want[i] / (3 * LENGTHS[i]) for i, t in tokens()})


def test_reinforce_pp_whitens_the_rewards_over_the_batchs_tokens():
    """REINFORCE++: mu = sum_i n_i r_i / N, sigma^2 = sum_i n_i (r_i - mu)^2 / (N - 1), A_i = (r_i - mu) /
    sqrt(sigma^2 + 1e-8): a global baseline, so the group whose answers are all right still gets A > 0."""
    n = [3, 5, 2, 4, 6, 1, 2, 3, 4, 4, 2, 1]
    N = sum(n)
    mu = sum(k * r for k, r in zip(n, REWARDS)) / N
    var = sum(k * (r - mu) ** 2 for k, r in zip(n, REWARDS)) / (N - 1)
    want = [(r - mu) / math.sqrt(var + 1e-8) for r in REWARDS]
    got = grpo.group_advantages(torch.tensor(REWARDS, dtype=torch.float64), 4, "group", "batch",
                                torch.tensor(n))
    torch.testing.assert_close(got, torch.tensor(want, dtype=torch.float64))
    assert all(a > 0 for a in want[8:])


# ---------------------------------------------------------------- the KL

@pytest.mark.parametrize("level", ["token", "sequence"])
def test_k3_plus_has_k3s_value_and_k2s_gradient(level):
    """k3+ = k2 - sg(k2) + sg(k3): with log r = log pi_ref - log pi, its value is k3 = e^(log r) - 1 - log r and its
    gradient in log pi is k2's, -log r = log pi - log pi_ref (k3's own would be 1 - e^(log r))."""
    logp = leaf([[-1.0, -0.5, -2.0], [-0.2, -1.5], [-0.7, -0.3, -1.1, -0.9]])
    ref = logp.detach() + tensor([[0.3, -0.6, 1.0], [-0.2, 0.5], [0.0, 0.1, -1.2, 0.4]])
    kl = grpo.kl_penalty(logp, ref, MASK, "k3+", level)
    m = MASK.double()
    if level == "token":
        x = (ref - logp.detach()) * m  # (3, 4) log r
    else:
        x = ((ref - logp.detach()) * m).sum(1, keepdim=True)  # (3, 1) on summed log-probs
    k3 = [[math.exp(v) - 1 - v for v in row] for row in x.tolist()]
    torch.testing.assert_close(kl.detach(), torch.tensor(k3, dtype=torch.float64))
    (kl * (m if level == "token" else 1)).sum().backward()
    want = -x * m if level == "token" else (-x).expand_as(m) * m  # d k2 / d log pi = log pi - log pi_ref
    torch.testing.assert_close(logp.grad, want)
    k3_grad = (1 - x.exp()) * m if level == "token" else (1 - x.exp()).expand_as(m) * m
    assert (logp.grad - k3_grad).abs().max() > 0.1  # not k3's gradient


def test_kl_grad_bias_by_hand_on_two_tokens():
    """One position, pi = (0.5, 0.5), pi_ref = (0.8, 0.2). The exact KL's gradient in the logits is
    g* = pi (log pi - log pi_ref - KL) = (-0.3466, 0.3466); k3's expected gradient is pi - pi_ref = (-0.3, 0.3), so
    its bias is 0.0466 / 0.3466 = 0.134; k1's is 0 in expectation (bias 1); k2's and k3+'s are g* (bias 0)."""
    lp, ref = torch.tensor([[0.5, 0.5]]).log().double(), torch.tensor([[0.8, 0.2]]).log().double()
    kl = 0.5 * math.log(0.5 / 0.8) + 0.5 * math.log(0.5 / 0.2)
    g = [0.5 * (math.log(0.5 / 0.8) - kl), 0.5 * (math.log(0.5 / 0.2) - kl)]
    assert g == pytest.approx([-0.34657, 0.34657], abs=1e-5)
    bias = {est: field_methods.kl_grad_bias(lp, ref, est).item() for est in ("k1", "k2", "k3", "k3+")}
    assert bias["k3"] == pytest.approx((0.34657 - 0.3) / 0.34657, abs=1e-4)
    assert bias["k1"] == pytest.approx(1.0) and bias["k2"] == pytest.approx(0.0, abs=1e-12) and bias["k3+"] == bias["k2"]


@pytest.mark.parametrize("estimator", ["k1", "k2", "k3", "k3+"])
def test_kl_grad_bias_is_the_estimators_gradient_averaged_over_every_token_against_the_exact_kls(estimator):
    """On 5 positions of a 7-token vocabulary, the expectation over y ~ pi of each estimator's gradient in the
    logits, by autograd at every y (grpo.kl_penalty at the token y), weighted by pi(y), against autograd of the
    exact KL(pi || pi_ref): sum |E - g*| / sum |g*| is kl_grad_bias."""
    torch.manual_seed(0)
    z, zr = torch.randn(5, 7, dtype=torch.float64), torch.randn(5, 7, dtype=torch.float64)
    ref = zr.log_softmax(-1)
    expected = torch.zeros(5, 7, dtype=torch.float64)
    for y in range(7):
        logits = z.clone().requires_grad_()
        lp = logits.log_softmax(-1)
        est = grpo.kl_penalty(lp[:, y:y + 1], ref[:, y:y + 1], torch.ones(5, 1, dtype=torch.bool), estimator)
        est.sum().backward()
        expected += lp.detach()[:, y:y + 1].exp() * logits.grad
    logits = z.clone().requires_grad_()
    lp = logits.log_softmax(-1)
    (lp.exp() * (lp - ref)).sum().backward()
    want = (expected - logits.grad).abs().sum() / logits.grad.abs().sum()
    got = field_methods.kl_grad_bias(lp.detach(), ref, estimator)
    assert got.item() == pytest.approx(want.item(), rel=1e-9, abs=1e-12)
    assert (want > 0.05) == (estimator in ("k1", "k3"))  # k2 and k3+ have the exact gradient, on average


@pytest.mark.parametrize("estimator", ["k1", "k2", "k3", "k3+"])
def test_kl_grad_bias_under_kl_reweight_is_the_reweighted_terms_gradient_over_pi_olds_samples(estimator):
    """--kl-reweight: the term is (pi / pi_old) * k, the ratio carrying its gradient, on tokens pi_old samples. Its
    expected gradient in the logits, by autograd at every y (grpo.kl_penalty with reweight_by), weighted by pi_old(y),
    for a pi_old other than pi, against the exact KL's: kl_grad_bias(..., reweighted=True). Re-weighted, k3 and k1
    have the exact gradient (DeepSeek-V3.2's claim for k3); k2 and k3+ do not."""
    torch.manual_seed(1)
    z, zr, zo = (torch.randn(5, 7, dtype=torch.float64) for _ in range(3))
    ref, old = zr.log_softmax(-1), zo.log_softmax(-1)  # pi_ref; pi_old, the sampler of the tokens
    expected = torch.zeros(5, 7, dtype=torch.float64)
    for y in range(7):
        logits = z.clone().requires_grad_()
        lp = logits.log_softmax(-1)
        est = grpo.kl_penalty(lp[:, y:y + 1], ref[:, y:y + 1], torch.ones(5, 1, dtype=torch.bool), estimator,
                              reweight_by=old[:, y:y + 1])
        est.sum().backward()
        expected += old[:, y:y + 1].exp() * logits.grad
    logits = z.clone().requires_grad_()
    lp = logits.log_softmax(-1)
    (lp.exp() * (lp - ref)).sum().backward()
    want = (expected - logits.grad).abs().sum() / logits.grad.abs().sum()
    got = field_methods.kl_grad_bias(lp.detach(), ref, estimator, reweighted=True)
    assert got.item() == pytest.approx(want.item(), rel=1e-9, abs=1e-12)
    assert (want > 0.05) == (estimator in ("k2", "k3+"))
    plain = field_methods.kl_grad_bias(lp.detach(), ref, estimator)  # what was logged before under --kl-reweight
    assert (plain - got).abs() > 0.05


# ---------------------------------------------------------------- between steps

def test_adaptive_entropy_steps_the_coefficient_towards_the_target_and_applies_it_only_below():
    """c <- clip(c + delta, 0, c_max) after a step whose entropy is <= target, clip(c - delta, 0, c_max) above;
    the next step applies c only if that entropy was <= target (nothing before the first measurement)."""
    cfg = GRPOConfig(adaptive_entropy=True, entropy_coef=0.004, entropy_target=0.2, entropy_coef_delta=0.003,
                     entropy_coef_max=0.009)
    state = field_methods.entropy_control_start(cfg)
    c, last, applied = 0.004, math.inf, []
    for H in [0.3, 0.1, 0.15, 0.05, 0.2, 0.5, 0.6, 0.7]:
        applied.append(field_methods.entropy_control_coef(state, cfg))
        assert applied[-1] == pytest.approx(c if last <= 0.2 else 0.0)
        state = field_methods.entropy_control_step(state, H, cfg)
        c, last = min(max(c + (0.003 if H <= 0.2 else -0.003), 0.0), 0.009), H
        assert state["coef"] == pytest.approx(c)
    assert applied == pytest.approx([0.0, 0.0, 0.004, 0.007, 0.009, 0.009, 0.0, 0.0])  # capped, then gated off
    assert state["coef"] == 0.0  # three steps above the target walk it down to its floor


# ---------------------------------------------------------------- off: nothing runs, nothing is logged

def test_with_every_field_flag_off_no_field_method_runs_and_nothing_new_is_logged(monkeypatch):
    """The defaults compute exactly the chapter's step: every function of field_methods.py replaced by one that
    raises, a default loss (with KL, entropy bonus and TIS on) still runs and logs no field statistic. The step calls
    none of them at the defaults (test_whole_step.py traces a default step); train.py's controller entries answer
    None and cfg while --adaptive-entropy is off."""
    entries = {"tis_weights", "entropy_control", "entropy_controlled"}  # TIS's weight (on here); train.py's controller
    for name, fn in inspect.getmembers(field_methods, inspect.isfunction):
        if name not in entries:
            monkeypatch.setattr(field_methods, name, lambda *a, _n=name, **k: pytest.fail(f"{_n} ran with its flag off"))
    logp = leaf([[-1.0, -0.5, -2.0], [-0.2, -1.5], [-0.7, -0.3, -1.1, -0.9]])
    cfg = GRPOConfig(kl=0.1, entropy_coef=0.01, tis_cap=2.0)
    out, _, _ = loss_and_grad(logp, logp.detach() - 0.1, [1.0, -1.0, 0.5], cfg, sampler=logp.detach() - 0.2,
                              entropy=tensor([[0.1, 0.2, 0.3], [0.4, 0.5], [0.6, 0.7, 0.8, 0.9]]),
                              ref=logp.detach() + 0.1)
    assert out.dropped == {}
    grpo.group_advantages(torch.tensor(REWARDS), 4)
    assert field_methods.entropy_control(None, cfg) is None  # train.py's controller, off
    assert field_methods.entropy_controlled(cfg, None) is cfg


@pytest.mark.parametrize("kw", [dict(objective="sapo"), dict(objective="gmpo"), dict(objective="dppo_tv"),
                                dict(objective="dppo_kl", clip=0.05), dict(objective="vespo"),
                                dict(tis_cap=2.0, tis_floor=0.5, tis_mode="token_mask"),
                                dict(tis_cap=3.0, tis_mode="sequence_mask"),
                                dict(rejection="seq_max_k3", rejection_bound=0.05),
                                dict(rejection="token_k1", rejection_bound=1.5), dict(top_entropy_quantile=0.3),
                                dict(loss_agg="luspo", ratio_level="gspo"), dict(loss_agg="bnpo"),
                                dict(kl=0.1, kl_estimator="k3+"),
                                dict(objective="vespo", tis_cap=2.0, tis_mode="token_mask", tis_floor=0.5)])
def test_prompt_and_padding_never_reach_a_field_method(kw):
    """Changing only the prompt and padding positions of every input changes neither the loss nor its
    gradient, for each field flag (test_grpo.py holds the chapter's own to the same)."""
    g = torch.Generator().manual_seed(3)
    B, T = 6, 10
    mask = torch.zeros(B, T, dtype=torch.bool)
    mask[:, 4:8] = True
    mask[1, 7] = False
    inputs = [-torch.rand(B, T, generator=g, dtype=torch.float64) * 2 for _ in range(4)]  # logp, old, ref, sampler
    entropy = torch.rand(B, T, generator=g, dtype=torch.float64)
    adv = torch.randn(B, generator=g, dtype=torch.float64)
    results = []
    for poison in (False, True):
        xs = [x.clone() for x in (*inputs, entropy)]
        if poison:
            for x in xs:
                x[~mask] = 7.0
        logp = xs[0].requires_grad_()
        out = grpo_loss(logp, xs[1], xs[2], adv, mask, GRPOConfig(**kw), xs[4], xs[3])
        out.value.backward()
        results.append((out.value.item(), logp.grad[mask]))
    assert results[0][0] == pytest.approx(results[1][0], rel=1e-9)
    torch.testing.assert_close(results[0][1], results[1][1])


# ---------------------------------------------------------------- the file's place

def test_the_field_imports_grpo_never():
    """field_methods.py imports neither grpo nor anything after it in the pipeline (grpo imports it: the arrow
    points one way)."""
    src = open(os.path.join(ROOT, "grpo.py")).read()
    tree = ast.parse(inspect.getsource(field_methods))
    imported = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    imported |= {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert not imported & {"grpo", "train", "cli", "stats", "rollouts", "experiments", "report"}
    assert "field_methods" in {a.name for n in ast.walk(ast.parse(src)) if isinstance(n, ast.Import) for a in n.names}


def test_every_field_function_names_the_source_it_was_checked_against():
    """Each formula's docstring cites its paper (arXiv), the book's script, or the file of TRL, verl or the authors
    it follows."""
    for name, fn in inspect.getmembers(field_methods, inspect.isfunction):
        if fn.__module__ == "field_methods" and name.endswith(("_advantages", "_objective", "_weights", "_keep",
                                                                "_mask", "k3_plus", "aggregate", "control_step")):
            doc = fn.__doc__ or ""
            assert "arXiv" in doc or "verl" in doc or "TRL" in doc or ".py" in doc and "book" in doc, name
    assert dataclasses.is_dataclass(GRPOConfig)


# ---------------------------------------------------------------- the field's own bugs, on the shipped warm starts

def sampled(path, level, n_prompts=16, **flags):
    """A batch sampled by a shipped warm start (8 answers to each of n_prompts problems of a level, seed 0), and the
    learner's own log-probs of it over the full vocabulary (pi_old, float32 as a step takes them)."""
    from harness import cli
    import rollouts
    import tasks
    policy, enc, _ = cli.load_init(os.path.join(ROOT, "checkpoints", path))
    cfg = GRPOConfig(group_size=8, max_new_tokens=40, **flags)
    stream = tasks.problems(level, 0)
    problems = [next(stream) for _ in range(n_prompts)]
    batch = rollouts.rollout(policy, enc, problems, cfg, torch.Generator().manual_seed(0))
    with torch.no_grad():
        old = grpo.logprobs_no_grad(policy, batch, batch.loss_mask, cfg)
    return policy, enc, cfg, batch, old


def test_trl_6789_a_truncated_sampler_weighs_each_token_by_its_kept_mass():
    """TRL #6789: with top-k or top-p, the sampler's log-probs are renormalised over the tokens it kept, the learner's
    are over the whole vocabulary, so pi_old / pi_sampler = p / (p / S) = S, the mass the cut kept, at every token,
    whichever token was drawn. On the search warm start (a base model's tail) at top-k 5 every token's weight is
    but a few below 0.9 (mean 0.77) and 5% fall below 0.5, where IcePop's band zeroes them: not a policy change, a bias.
    --keep-sampling-mask scores the learner over the same support: every weight is 1."""
    policy, _, cfg, batch, old = sampled("warmstart_search.pt", "medium_search", top_k=5, keep_sampling_mask=True)
    m = batch.loss_mask
    with torch.no_grad():
        p = (policy(batch.tokens[:, :-1], batch.mask[:, :-1]).double() / cfg.temperature).softmax(-1)
        full = p.log().gather(-1, batch.tokens[:, 1:, None])[..., 0]  # log pi over the whole vocabulary
    kept_mass = (p * batch.support).sum(-1)  # (B, T) S at each position
    w = (full - batch.sampler_logp.double()).exp()  # the weight a learner over the full vocabulary gives
    torch.testing.assert_close(w[m], kept_mass[m], rtol=1e-4, atol=1e-5)  # exactly the kept mass
    assert (w[m] < 0.9).double().mean() > 0.99 and 0.7 < w[m].mean() < 0.85
    assert 0.02 < (w[m] < 0.5).double().mean() < 0.1
    torch.testing.assert_close(old[m].double().exp() / batch.sampler_logp[m].double().exp(),
                               torch.ones_like(w[m]), rtol=1e-4, atol=1e-4)  # the kept mask: weight 1


def test_trl_5814_a_sequence_weight_is_the_product_and_its_spread_grows_with_length():
    """TRL #5814 / #5815: sequence-level IS summed the token log-ratios, so its weight is the product of the tokens'
    (TRL's maintainers: that is the answer's likelihood ratio, unbiased; the proposed mean is GSPO's length-
    normalised ratio). On the search warm start (answers of about 28 tokens) sampled by fp8 weights: the product's
    mean stays near 1 (1.03: unbiased) but its median is 0.92 and 1.6% of answers pass TRL's cap 3, while the
    geometric mean sits at 1.00. Where the token gap is a bias, not noise (top-p 0.9 without the kept mask, #6789),
    the product compounds it over the answer: mean 0.15, where the geometric mean reads 0.90."""
    for flags, product_mean, geo_mean in ((dict(sampler_dtype="fp8"), (0.95, 1.1), (0.99, 1.01)),
                                          (dict(top_p=0.9), (0.05, 0.3), (0.85, 0.95))):
        _, _, _, batch, old = sampled("warmstart_search.pt", "medium_search", n_prompts=32, **flags)
        m = batch.loss_mask
        log_w = ((old - batch.sampler_logp).double() * m).sum(1)  # (B,) the sum of the token log-ratios
        product, geometric = log_w.exp(), (log_w / m.sum(1)).exp()
        weights = field_methods.importance_weights(old, batch.sampler_logp, m, float("inf"), 0.0, "sequence_truncate")
        torch.testing.assert_close(weights[:, 0].double(), product, rtol=1e-4, atol=1e-6)  # ours: the product
        assert product_mean[0] < product.mean() < product_mean[1] and geo_mean[0] < geometric.mean() < geo_mean[1]
        if "sampler_dtype" in flags:
            assert product.median() < 0.97 and (product > 3).any()


@pytest.mark.roundings
def test_verl_6280_a_minibatchs_log_probs_are_the_batchs_within_rounding_so_the_first_ratio_is_1():
    """verl #6280: on a GPU, pi_old's log-probs taken over the whole batch and pi_theta's over a minibatch differ
    (kernels pick their tiling by the batch's size, and so their order of summation), so the first update's ratio is
    not 1 and the clip fraction not 0 where nothing has changed. On a CPU the same happens, far smaller: a matrix
    product's kernel can depend on its number of rows (on an Intel Xeon a one-row split goes another way and moves
    0.1-0.2% of the log-probs by up to 1.5e-6; on an AMD EPYC every split was bitwise equal). Not bitwise, then, but
    within 1e-5: a bug in which rows or which policy a minibatch reads (a shifted row, another temperature) moves
    log-probs by 1e-2 and more (tests/plant_bugs.py: "verl 6280"). So a step of two minibatches, whose pi_old comes
    from a pass over every row, finds its first update's ratio within 1e-5 of 1, where a clip at 0.2 cannot bind."""
    policy, enc, cfg, batch, old = sampled("warmstart.pt", "medium")
    B, m = batch.tokens.shape[0], batch.loss_mask
    for fused in (True, False):
        c = dataclasses.replace(cfg, logprobs="fused" if fused else "logits")
        with torch.no_grad():
            whole = grpo.batch_logprobs(policy, batch, torch.arange(B), m, c)[0]
            for cut in (B // 2, 1, 37):
                parts = [grpo.batch_logprobs(policy, batch, rows, m, c)[0]
                         for rows in (torch.arange(cut), torch.arange(cut, B))]
                assert (torch.cat(parts)[m] - whole[m]).abs().max() < 1e-5, (fused, cut)
    import tasks
    stream = tasks.problems("medium", 0)
    _, logged = logged_step(policy, None, torch.optim.SGD(policy.parameters(), lr=0.0), enc, lambda: next(stream),
                               16, dataclasses.replace(cfg, mu=1, minibatches=2), torch.Generator().manual_seed(0))
    assert 1 - 1e-5 < logged["ratio_min"] <= logged["ratio_max"] < 1 + 1e-5 and logged["clip_frac"] == 0.0
