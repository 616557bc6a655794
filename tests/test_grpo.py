"""The GRPO objective on hand-computed cases, and a real (tiny) learning run."""
import math

import pytest
import torch

import field_methods
import grpo
import rollouts
import tasks
from config import GRPOConfig
from field_methods import kl_cov_penalty
from grpo import aggregate, clipped_objective, group_advantages, grpo_loss, kl_penalty, policy_ratio
from harness.stats import logged_step
from harness.stats import StepStats, update_stats


def surrogate_and_grad(r, A, eps_low=0.2, eps_high=0.2, dual=0.0):
    ratio = torch.tensor([r], dtype=torch.float64, requires_grad=True)
    obj, _, _ = clipped_objective(ratio, torch.tensor([A], dtype=torch.float64), eps_low, eps_high, dual)
    obj.sum().backward()
    return obj.item(), ratio.grad.item()


@pytest.mark.parametrize("r,A,obj,grad", [
    (1.1, 1.0, 1.1, 1.0),     # A > 0, inside the range: plain r * A
    (1.5, 1.0, 1.2, 0.0),     # A > 0, r above 1+eps: clipped, no gradient
    (0.5, 1.0, 0.5, 1.0),     # A > 0, r below 1-eps: moved the wrong way, never clipped
    (1.1, -1.0, -1.1, -1.0),  # A < 0, inside
    (1.5, -1.0, -1.5, -1.0),  # A < 0, r above 1+eps: wrong way, never clipped
    (0.5, -1.0, -0.8, 0.0),   # A < 0, r below 1-eps: clipped, no gradient
    (1.0, 0.0, 0.0, 0.0),     # A = 0: nothing to learn
    (2.0, 0.5, 0.6, 0.0),     # |A| != 1: clipped value is (1+eps) * A
])
def test_clipped_objective_every_case(r, A, obj, grad):
    o, g = surrogate_and_grad(r, A)
    assert o == pytest.approx(obj) and g == pytest.approx(grad)


@pytest.mark.parametrize("r,A,obj,grad", [
    (0.5, 1.0, 0.5, 1.0),     # A > 0: PPO's. Below 1-eps: never clipped
    (1.1, 1.0, 1.1, 1.0),     # inside
    (1.5, 1.0, 1.2, 0.0),     # above 1+eps: clipped, no gradient
    (0.5, -1.0, -0.5, -1.0),  # A < 0, below 1-eps: max(-0.5, -0.8) keeps the gradient (PPO: clipped)
    (1.1, -1.0, -1.1, -1.0),  # inside
    (1.5, -1.0, -1.2, 0.0),   # above 1+eps: max(-1.5, -1.2) is the clipped constant (PPO: -1.5, gradient -1)
    (0.5, 0.0, 0.0, 0.0),     # A = 0: nothing, on any side
    (1.0, 0.0, 0.0, 0.0),
    (1.5, 0.0, 0.0, 0.0),
])
def test_book_objective_every_case(r, A, obj, grad):
    """torch.where(A >= 0, min(r A, clip(r) A), max(r A, clip(r) A)), eps 0.2, by hand."""
    ratio = torch.tensor([r], dtype=torch.float64, requires_grad=True)
    out, _, _ = field_methods.book_objective(ratio, torch.tensor([A], dtype=torch.float64), 0.2, 0.2)
    out.sum().backward()
    assert out.item() == pytest.approx(obj) and ratio.grad.item() == pytest.approx(grad)


def test_book_clip_fraction_counts_where_its_gradient_stops():
    """r > 1 + eps_high for either sign of A (where book_objective's gradient is zero); never r < 1 - eps."""
    logp = torch.zeros(2, 3)
    old = -torch.log(torch.tensor([[1.5, 0.5, 1.0], [1.5, 0.5, 1.0]]))  # ratios 1.5, 0.5, 1 in each row
    adv, mask = torch.tensor([1.0, -1.0]), torch.ones(2, 3, dtype=torch.bool)
    cfg = GRPOConfig(objective="book", clip=0.2)
    _, s = loss_and_stats(logp, old, None, adv, mask, cfg)
    assert s["clip_frac"].item() == pytest.approx(2 / 6) and s["clip_frac_low"].item() == 0.0
    _, s = loss_and_stats(logp, old, None, adv, mask, GRPOConfig(clip=0.2))  # PPO: 1.5 at A > 0, 0.5 at A < 0
    assert s["clip_frac_high"].item() == pytest.approx(1 / 6) and s["clip_frac_low"].item() == pytest.approx(1 / 6)


R = [0.5, 0.9, 1.1, 1.5, 5.0]  # ratios below, inside and above the clip range [0.8, 1.2], and above c = 3
F, T = False, True


def objective_and_grads(name, A, **kw):
    """One objective on the ratios R with advantage A (eps 0.2): (low, high, d surrogate / d ratio
    (PPO, book) or d surrogate / d logp (CISPO)), each a list over R."""
    ratio = torch.tensor([R], dtype=torch.float64, requires_grad=True)  # (1, 5)
    adv = torch.tensor([[A]], dtype=torch.float64)  # (1, 1)
    logp = torch.zeros(1, 5, dtype=torch.float64, requires_grad=True)
    if name == "ppo":
        surr, low, high = clipped_objective(ratio, adv, 0.2, 0.2, **kw)
    elif name == "book":
        surr, low, high = field_methods.book_objective(ratio, adv, 0.2, 0.2)
    else:
        surr, low, high = field_methods.cispo_objective(ratio, adv, logp, 0.2, 0.2)
    surr.sum().backward()
    grad = logp.grad if name == "cispo" else ratio.grad
    assert low.shape == high.shape == surr.shape == (1, 5)
    return low[0].tolist(), high[0].tolist(), grad[0].tolist()


@pytest.mark.parametrize("A,low,high", [(1.0, [F, F, F, F, F], [F, F, F, T, T]),    # A > 0: only above 1 + eps
                                        (-1.0, [T, F, F, F, F], [F, F, F, F, F])])  # A < 0: only below 1 - eps
def test_ppo_clip_binds_exactly_where_its_gradient_is_zero(A, low, high):
    lo, hi, grad = objective_and_grads("ppo", A)
    assert (lo, hi) == (low, high)
    assert [g == 0 for g in grad] == [a or b for a, b in zip(low, high)]


def test_dual_clip_binds_for_negative_advantages_above_c():
    lo, hi, grad = objective_and_grads("ppo", -1.0, dual_clip=3.0)
    assert (lo, hi) == ([T, F, F, F, F], [F, F, F, F, T])  # r = 5 > c: bounded by c * A, no gradient
    assert [g == 0 for g in grad] == [T, F, F, F, T]
    assert objective_and_grads("ppo", 1.0, dual_clip=3.0)[:2] == ([F] * 5, [F, F, F, T, T])  # A > 0: PPO's


@pytest.mark.parametrize("A", [1.0, -1.0])
def test_book_clip_binds_above_one_plus_eps_for_either_sign(A):
    lo, hi, grad = objective_and_grads("book", A)
    assert (lo, hi) == ([F] * 5, [F, F, F, T, T])
    assert [g == 0 for g in grad] == hi


@pytest.mark.parametrize("A", [1.0, -1.0])
def test_cispo_clips_its_weight_on_both_sides_for_either_sign_and_keeps_every_gradient(A):
    lo, hi, grad = objective_and_grads("cispo", A)
    assert (lo, hi) == ([T, F, F, F, F], [F, F, F, T, T])
    assert grad == pytest.approx([A * w for w in (0.8, 0.9, 1.1, 1.2, 1.2)])  # the clipped weight times A, never 0


@pytest.mark.parametrize("kw,low,high", [(dict(), 1, 1),                          # PPO: 0.5 at A < 0, 1.5 at A > 0
                                         (dict(dual_clip=1.4), 1, 2),            # ... and 1.5 > c at A < 0
                                         (dict(objective="book"), 0, 2),         # 1.5 for either sign
                                         (dict(objective="cispo"), 2, 2)])       # 0.5 and 1.5 for either sign
def test_logged_clip_fractions_are_the_objectives_own(kw, low, high):
    """Through grpo_loss and update_stats: ratios 1.5, 0.5, 1 in a row of A = 1 and one of A = -1."""
    logp = torch.zeros(2, 3)
    old = -torch.log(torch.tensor([[1.5, 0.5, 1.0], [1.5, 0.5, 1.0]]))
    adv, mask = torch.tensor([1.0, -1.0]), torch.ones(2, 3, dtype=torch.bool)
    _, s = loss_and_stats(logp, old, None, adv, mask, GRPOConfig(clip=0.2, **kw))
    assert s["clip_frac_low"].item() == pytest.approx(low / 6) and s["clip_frac_high"].item() == pytest.approx(high / 6)
    assert s["clip_frac"].item() == pytest.approx((low + high) / 6)


def test_clip_higher_and_dual_clip():
    assert surrogate_and_grad(1.25, 1.0, 0.2, 0.28) == pytest.approx((1.25, 1.0))  # inside the raised bound
    assert surrogate_and_grad(1.3, 1.0, 0.2, 0.28) == pytest.approx((1.28, 0.0))
    assert surrogate_and_grad(0.7, -1.0, 0.2, 0.28) == pytest.approx((-0.8, 0.0))  # eps_low unchanged
    assert surrogate_and_grad(5.0, -1.0, dual=3.0) == pytest.approx((-3.0, 0.0))  # bounded by c * A
    assert surrogate_and_grad(2.0, -1.0, dual=3.0) == pytest.approx((-2.0, -1.0))  # below the bound: as PPO
    assert surrogate_and_grad(5.0, 1.0, dual=3.0) == pytest.approx((1.2, 0.0))  # A > 0 unaffected


def test_no_clipping_with_infinite_eps():
    assert surrogate_and_grad(3.0, 1.0, math.inf, math.inf) == pytest.approx((3.0, 1.0))


def test_kl_of_policy_to_itself_is_zero_and_k3_nonnegative():
    logp = torch.randn(4, 7) - 2
    every = torch.ones(4, 7, dtype=torch.bool)
    for est in ("k1", "k2", "k3"):
        for level, shape in (("token", (4, 7)), ("sequence", (4, 1))):
            assert torch.equal(kl_penalty(logp, logp.clone(), every, est, level), torch.zeros(shape))
    other = torch.randn(4, 7) * 5
    assert (kl_penalty(logp, other, every, "k3") >= 0).all()
    assert (kl_penalty(logp, other, every, "k2") >= 0).all()
    one = torch.ones(1, dtype=torch.bool)
    assert torch.isfinite(kl_penalty(torch.zeros(1), torch.tensor([1e4]), one, "k3")).all()  # clamped, no overflow
    far = torch.tensor([-60.0], requires_grad=True)  # a summed sequence log-prob 60 nats below the reference's
    kl_penalty(far, torch.zeros(1), one, "k1").backward()
    assert far.grad.item() == 1.0  # k1 = log pi - log pi_ref is never clamped: its gradient never vanishes
    lr = torch.tensor([0.3])  # hand values for log(pi_ref/pi) = 0.3
    assert kl_penalty(torch.zeros(1), lr, one, "k1").item() == pytest.approx(-0.3)
    assert kl_penalty(torch.zeros(1), lr, one, "k2").item() == pytest.approx(0.045)
    assert kl_penalty(torch.zeros(1), lr, one, "k3").item() == pytest.approx(math.exp(0.3) - 1.3, rel=1e-5)


def test_sequence_kl_is_the_estimator_on_summed_logprobs():
    """The book's k1 on summed log-probs, and k3 of the summed log-ratio, by hand; padding never counts."""
    logp = torch.tensor([[-1.0, -2.0, 9.0], [-0.5, 7.0, 7.0]])
    ref = torch.tensor([[-1.5, -1.0, -9.0], [-0.25, -7.0, 7.0]])
    mask = torch.tensor([[True, True, False], [True, False, False]])
    # log r summed per answer: (-1.5 + 1) + (-1 + 2) = 0.5, and -0.25 + 0.5 = 0.25
    k1 = kl_penalty(logp, ref, mask, "k1", "sequence")
    torch.testing.assert_close(k1, torch.tensor([[-0.5], [-0.25]]))
    k3 = kl_penalty(logp, ref, mask, "k3", "sequence")
    torch.testing.assert_close(k3, torch.tensor([[math.exp(0.5) - 1.5], [math.exp(0.25) - 1.25]]))


@pytest.mark.parametrize("norm", ["group", "batch", "none"])
def test_equal_rewards_give_zero_advantage(norm):
    r = torch.tensor([1.0, 1, 1, 1, 0, 1, 0, 0])
    adv = group_advantages(r, 4, norm)
    assert torch.equal(adv[:4], torch.zeros(4))
    assert adv[4:].sum().abs() < 1e-6 and (adv[4:][r[4:] == 1] > 0).all()


def test_advantage_normalisations_by_hand():
    r = torch.tensor([1.0, 0, 0, 0, 2, 0, 0, 0])
    g1 = torch.tensor([0.75, -0.25, -0.25, -0.25])
    torch.testing.assert_close(group_advantages(r, 4, "none")[:4], g1)
    torch.testing.assert_close(group_advantages(r, 4, "group")[:4], g1 / (0.5 + 1e-4))  # unbiased std of 1,0,0,0
    torch.testing.assert_close(group_advantages(r, 4, "batch")[4:], 2 * g1 / (r.std() + 1e-4))


def test_gspo_and_sequence_ratios():
    logp, old = torch.randn(3, 5), torch.randn(3, 5)
    mask = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1], [0, 1, 0, 0, 0]], dtype=torch.bool)
    d = (logp - old) * mask
    torch.testing.assert_close(policy_ratio(logp, old, mask, "gspo")[:, 0], torch.exp(d.sum(1) / mask.sum(1)))
    torch.testing.assert_close(policy_ratio(logp, old, mask, "sequence")[:, 0], torch.exp(d.sum(1)))
    torch.testing.assert_close(policy_ratio(logp, old, mask, "token"), torch.exp(d))


def test_sequence_mean_by_hand():
    x = torch.tensor([[1.0, 2.0, 6.0], [4.0, 8.0, 8.0], [5.0, 5.0, 5.0]])
    mask = torch.tensor([[True, False, True], [False, True, False], [False, False, False]])
    torch.testing.assert_close(grpo.sequence_mean(x, mask), torch.tensor([[3.5], [8.0], [0.0]]))  # empty row: 0


def test_aggregation_modes_match_hand_formulas():
    g = torch.Generator().manual_seed(0)
    loss = torch.randn(5, 9, generator=g)
    mask = torch.rand(5, 9, generator=g) > 0.4
    mask[0] = False  # an empty row must not divide by zero
    seq = [sum(loss[i, t].item() for t in range(9) if mask[i, t]) / max(1, int(mask[i].sum())) for i in range(5)]
    assert aggregate(loss, mask, "seq_mean").item() == pytest.approx(sum(seq) / 5, rel=1e-5)
    tok = [loss[i, t].item() for i in range(5) for t in range(9) if mask[i, t]]
    assert aggregate(loss, mask, "token_mean").item() == pytest.approx(sum(tok) / len(tok), rel=1e-5)
    assert aggregate(loss, mask, "constant", max_len=40).item() == pytest.approx(sum(tok) / (5 * 40), rel=1e-5)


def loss_and_stats(logp, old, ref, adv, mask, cfg, entropy=None, sampler_logp=None):
    """grpo_loss and the ratio statistics that grpo_step logs with it."""
    loss = grpo_loss(logp, old, ref, adv, mask, cfg, entropy, sampler_logp)
    stats = StepStats()
    no_entropy = torch.zeros_like(logp) if entropy is None else entropy
    update_stats(stats, loss, logp, old, no_entropy, mask, torch.tensor(1.0))
    return loss.value, {**loss.terms, **{k: torch.tensor(v) for k, v in stats.result().items() if v is not None}}


def loss_inputs(seed=0, B=6, T=10):
    g = torch.Generator().manual_seed(seed)
    logp = (torch.randn(B, T, generator=g) - 1).requires_grad_()
    old = logp.detach() + 0.3 * torch.randn(B, T, generator=g)
    ref = logp.detach() + 0.3 * torch.randn(B, T, generator=g)
    mask = torch.zeros(B, T, dtype=torch.bool)
    mask[:, 4:8] = True  # positions 0-3: prompt, 8-9: padding
    adv = torch.randn(B, generator=g)
    return logp, old, ref, adv, mask


@pytest.mark.parametrize("kw", [dict(), dict(ratio_level="gspo"), dict(ratio_level="sequence"),
                                dict(kl=0.1, kl_estimator="k1", kl_level="sequence"), dict(kl=0.1),
                                dict(objective="cispo", clip_high=0.28), dict(loss_agg="token_mean"),
                                dict(loss_agg="constant", dual_clip=3.0), dict(entropy_coef=0.1),
                                dict(kl=0.1, kl_reweight=True), dict(kl=0.1, kl_reweight=True, kl_level="sequence"),
                                dict(tis_cap=2.0), dict(off_policy_mask=0.05), dict(kl_cov=0.2)])
def test_prompt_and_padding_never_contribute(kw):
    cfg = GRPOConfig(**kw)
    logp, old, ref, adv, mask = loss_inputs()
    entropy = torch.rand(logp.shape, generator=torch.Generator().manual_seed(5))
    sampler = old - 0.5 * torch.rand(logp.shape)  # sampler != learner: TIS weights other than 1
    loss, stats = loss_and_stats(logp, old, ref, adv, mask, cfg, entropy, sampler)
    loss.backward()
    assert (logp.grad[~mask] == 0).all() and (logp.grad[mask] != 0).any()
    logp2 = logp.detach().clone()
    logp2[~mask] = torch.randn(int((~mask).sum())) * 10  # change only prompt / padding positions
    old2, ref2, entropy2, sampler2 = old.clone(), ref.clone(), entropy.clone(), sampler.clone()
    old2[~mask], ref2[~mask], entropy2[~mask], sampler2[~mask] = 5.0, -7.0, 9.0, 3.0
    loss2, stats2 = loss_and_stats(logp2, old2, ref2, adv, mask, cfg, entropy2, sampler2)
    assert loss2.item() == pytest.approx(loss.item(), rel=1e-6)
    for k in stats:
        assert stats2[k].item() == pytest.approx(stats[k].item(), rel=1e-6), k


@pytest.mark.parametrize("adv,k,picked", [((1.0, -1.0), 0.25, [(0, 0)]), ((1.0, -1.0), 0.5, [(0, 0), (1, 1)]),
                                            ((1.0, -1.0), 0.01, [(0, 0)]), ((1.0, 3.0), 0.5, [(0, 1), (1, 0)])])
def test_kl_cov_penalises_the_tokens_whose_logprob_most_covaries_with_the_advantage(adv, k, picked):
    """By hand: log pi = [-0.1, -3.0], [-0.2, -1.0], mean -1.075. With A = +1, -1 (mean 0) the
    covariances (A - 0)(log pi + 1.075) are 0.975, -1.925, -0.875, -0.075: the likely token of the
    right answer first, then the likelier of the wrong answer's. With A = 1, 3 (mean 2) they are
    -0.975, 1.925, 0.875, 0.075: the unlikely token of the worse answer first (A without its mean
    would pick the better answer's tokens). k of the 4 tokens, at least one, pay |log r| = 0.3; the
    prompt position (masked) is never one."""
    logp = torch.tensor([[5.0, -0.1, -3.0], [5.0, -0.2, -1.0]], requires_grad=True)
    mask = torch.tensor([[False, True, True], [False, True, True]])
    A = torch.tensor(adv)[:, None]
    penalty = kl_cov_penalty(logp, logp.detach() - 0.3, A, mask, k)
    want = torch.zeros(2, 3)
    for b, t in picked:
        want[b, t + 1] = 0.3
    torch.testing.assert_close(penalty.detach(), want)
    penalty.sum().backward()  # d |log pi - log pi_old| / d log pi = sign(log r) = 1, on the picked tokens alone
    torch.testing.assert_close(logp.grad, (want > 0).float())


def test_kl_cov_moves_nothing_on_policy():
    logp, old, ref, adv, mask = loss_inputs()
    on = grpo_loss(logp, logp.detach(), ref, adv, mask, GRPOConfig(kl_cov=0.5)).value
    off = grpo_loss(logp, logp.detach(), ref, adv, mask, GRPOConfig()).value
    assert on.item() == off.item()


def test_first_on_policy_update_has_ratio_one_and_no_clipping():
    logp, _, ref, adv, mask = loss_inputs(1)
    for level in ("token", "gspo", "sequence"):
        _, stats = loss_and_stats(logp, logp.detach(), ref, adv, mask, GRPOConfig(ratio_level=level, clip=0.0))
        assert stats["ratio_min"].item() == stats["ratio_max"].item() == 1.0
        assert stats["clip_frac"].item() == 0.0


def test_clip_fraction_counts_the_clipped_side():
    logp = torch.zeros(2, 2)
    old = torch.log(torch.tensor([[1 / 1.5, 1.0], [1 / 0.5, 1.0]]))  # ratios 1.5 and 0.5
    adv, mask = torch.tensor([1.0, -1.0]), torch.ones(2, 2, dtype=torch.bool)
    _, s = loss_and_stats(logp, old, None, adv, mask, GRPOConfig())
    assert s["clip_frac_high"].item() == pytest.approx(0.25) and s["clip_frac_low"].item() == pytest.approx(0.25)
    _, s = loss_and_stats(logp, old, None, -adv, mask, GRPOConfig())  # wrong-way ratios are not clipped
    assert s["clip_frac"].item() == 0.0


def test_zero_std_groups():
    r = torch.tensor([1.0, 1, 0, 1, 0, 0, 0, 0, 2, 2, 2, 2])
    assert rollouts.zero_std_groups(r, 4).tolist() == [False, True, True]


# ---------------------------------------------------------------- with a model


def test_dynamic_sampling_keeps_only_groups_with_variance(enc, tiny_model, digit_reward):
    model = tiny_model()
    stream = tasks.problems("easy", 0)
    cfg = GRPOConfig(group_size=4, max_new_tokens=3, dynamic_sampling=True, max_sampling_rounds=4, temperature=3.0)
    batch, zero = rollouts.sample_batch(model, enc, lambda: next(stream), 8, cfg, torch.Generator().manual_seed(0))
    B = len(batch.rewards["total"])
    assert B % 4 == 0 and B <= 32
    assert not rollouts.zero_std_groups(batch.rewards["total"], 4).any()
    assert zero.any() and len(zero) > 8 and len(zero) % 8 == 0  # another round was sampled for the dropped groups
    assert batch.tokens.shape[0] == batch.loss_mask.shape[0] == len(batch.texts) == len(batch.problems) == B


def test_grpo_learns_a_trivial_reward(enc, tiny_model, digit_reward):
    model = tiny_model()
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    stream = tasks.problems("easy", 0)
    cfg = GRPOConfig(group_size=8, max_new_tokens=3, temperature=1.0, mu=2)
    gen = torch.Generator().manual_seed(0)
    rewards_seen = []
    for _ in range(40):
        _, stats = logged_step(model, None, opt, enc, lambda: next(stream), 16, cfg, gen)
        rewards_seen.append(stats["reward"])
        assert all(math.isfinite(v) for v in stats.values() if v is not None)
        assert {k for k, v in stats.items() if v is None} <= {"pg_k1", "tied_adv_gap", "resp_len_correct", "resp_len_wrong", "adv_correct_corr",
                                                                "clip_high_lowp_frac", "clip_high_p_mean",  # none where the
                                                                # high clip never binds, or no answer opens <think>
                                                                "think_clip_frac",
                                                                "adv_to_centred", "equal_groups_adv",  # ... no such group
                                                                "format_paid_wrong"}  # ... no wrong answer
    first, last = sum(rewards_seen[:5]) / 5, sum(rewards_seen[-5:]) / 5
    assert first < 0.2 and last > 0.6, (first, last)


def test_nan_guard_fires_before_the_update(enc, tiny_model, digit_reward, monkeypatch):
    real = grpo.token_logprobs
    monkeypatch.setattr(grpo, "token_logprobs", lambda *a, **k: tuple(x * float("nan") for x in real(*a, **k)))
    model = tiny_model()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    stream = tasks.problems("easy", 0)
    with pytest.raises(FloatingPointError, match="non-finite"):
        logged_step(model, None, opt, enc, lambda: next(stream), 2, GRPOConfig(group_size=2, max_new_tokens=2),
                       torch.Generator().manual_seed(0))
    for k, v in model.state_dict().items():
        assert torch.equal(v, before[k]), k  # the weights were not touched


def test_nan_guard_fires_for_a_finite_loss_with_a_non_finite_gradient(enc, tiny_model, digit_reward, monkeypatch):
    real = grpo.batch_logprobs

    def poisoned(*a, **k):  # the loss stays finite; its gradient does not
        logp, ent = real(*a, **k)
        if torch.is_grad_enabled():
            logp.register_hook(lambda g: g * float("nan"))
        return logp, ent
    monkeypatch.setattr(grpo, "batch_logprobs", poisoned)
    model = tiny_model()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    stream = tasks.problems("easy", 0)
    with pytest.raises(FloatingPointError, match=r"non-finite loss \(-?\d.*\) or gradient norm \(nan\)"):
        logged_step(model, None, opt, enc, lambda: next(stream), 2,
                       GRPOConfig(group_size=2, max_new_tokens=2, mu=1), torch.Generator().manual_seed(0))
    assert not opt.state  # Adam never stepped
    for k, v in model.state_dict().items():
        assert torch.equal(v, before[k]), k
