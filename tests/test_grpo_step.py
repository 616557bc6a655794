"""grpo_step, knob by knob: each test fails if the knob silently stops acting.

pi_old is fixed across updates, minibatches split whole groups, the loss mask is the
completion only, the KL uses the reference, the sampler and the learner describe the
same distribution, CISPO's weight carries no gradient, statistics ignore padding.
"""
import collections
import copy
import dataclasses
import math

import pytest
import torch

import field_methods
import grpo
import rollouts
import tasks
from config import GRPOConfig
from decoding import generate
from harness import cli
from harness import stats
from harness.stats import logged_step
from harness.stats import StepStats
from model import GPT, GPTConfig, load_checkpoint
from tokenizer import build_tokenizer


def run_step(enc, model, cfg, ref=None, lr=1e-3, n_prompts=4, seed=0):
    stream = tasks.problems("easy", seed)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    return logged_step(model, ref, opt, enc, lambda: next(stream), n_prompts, cfg, torch.Generator().manual_seed(seed))


def spy(monkeypatch, name, module=grpo):
    """Record the arguments of every call of module.<name> (grpo's, or field_methods'), still calling it."""
    calls, real = [], getattr(module, name)

    def wrapper(*args, **kw):
        calls.append(args)
        return real(*args, **kw)
    monkeypatch.setattr(module, name, wrapper)
    return calls


CFG = dict(group_size=4, max_new_tokens=4, temperature=2.0)  # hot: varied samples from a random model


def test_minibatches_split_whole_groups_covering_the_batch():
    """K non-empty minibatches of whole groups whose sizes differ by at most one group
    (fewer, one group each, when there are fewer groups than K), counted by hand."""
    for B, G, K, sizes in [(32, 4, 2, [4, 4]), (32, 4, 3, [3, 3, 2]), (24, 8, 3, [1, 1, 1]), (16, 4, 1, [4]),
                           (24, 4, 4, [2, 2, 1, 1]), (40, 4, 4, [3, 3, 2, 2]), (8, 4, 3, [1, 1])]:
        parts = rollouts.minibatch_rows(B, G, K)
        assert [len(p) // G for p in parts] == sizes, (B, G, K)
        rows = torch.cat(parts)
        assert sorted(rows.tolist()) == list(range(B))  # disjoint and covering
        for p in parts:
            assert len(p) % G == 0 and all(p.view(-1, G)[:, 0] % G == 0)  # whole groups


@pytest.mark.parametrize("mu,K", [(1, 1), (2, 1), (1, 2), (3, 2)])
def test_k_minibatches_take_k_times_mu_optimizer_steps(enc, tiny_model, digit_reward, monkeypatch, mu, K):
    steps = []
    monkeypatch.setattr(torch.optim.Adam, "step", lambda self, *a, **k: steps.append(1))
    losses = spy(monkeypatch, "grpo_loss")
    run_step(enc, tiny_model(), GRPOConfig(**CFG, mu=mu, minibatches=K), n_prompts=4)
    assert len(steps) == mu * K
    assert [len(c[3]) for c in losses[:K]] == {1: [16], 2: [8, 8]}[K]  # 4 groups of 4 rows, in K minibatches


@pytest.mark.parametrize("mu,K", [(1, 1), (2, 1), (1, 2), (2, 2)])
def test_old_logprobs_are_the_sampling_policys(enc, tiny_model, digit_reward, monkeypatch, mu, K):
    model = tiny_model()
    before = copy.deepcopy(model)
    losses = spy(monkeypatch, "grpo_loss")
    batch, stats = run_step(enc, model, GRPOConfig(**CFG, mu=mu, minibatches=K), lr=1e-2)
    want, _ = grpo.token_logprobs(before, batch.tokens, batch.mask, batch.loss_mask, CFG["temperature"])
    old = torch.cat([c[1] for c in losses[:K]])  # the minibatches of the first epoch cover the batch in order
    torch.testing.assert_close(old, want, rtol=1e-5, atol=1e-6)
    for c in losses[K:]:  # later epochs see the same pi_old
        assert any(torch.equal(c[1], o[1]) for o in losses[:K])


def test_ppo_kl_is_zero_before_any_update(enc, tiny_model, digit_reward):
    _, stats = run_step(enc, tiny_model(), GRPOConfig(**CFG, mu=1), lr=1e-2)
    assert stats["ppo_kl"] == 0.0 and stats["ratio_min"] == stats["ratio_max"] == 1.0
    assert stats["logratio_std_token"] == stats["logratio_std_seq"] == 0.0


def test_logratio_spread_per_token_and_per_answer(enc, tiny_model, digit_reward, monkeypatch):
    """logratio_std_token: the std of log pi - log pi_old over the update's answer tokens;
    _seq: over the answers' mean log-ratios (GSPO's); each the mean over the step's updates.
    Dropout in the learner makes pi_old's and pi's forwards differ even with no update (lr 0)."""
    from model import set_dropout
    losses = spy(monkeypatch, "grpo_loss")
    torch.manual_seed(0)
    _, stats = run_step(enc, set_dropout(tiny_model(), 0.3), GRPOConfig(**CFG, mu=2, minibatches=2), lr=0.0)
    token, seq = [], []
    for logp, old, _, _, mask, *_ in losses:
        d, m = (logp - old).detach().double(), mask.bool()
        token.append(d[m].std().item())
        seq.append(((d * m).sum(1) / m.sum(1))[m.any(1)].std().item())
    assert stats["logratio_std_token"] == pytest.approx(sum(token) / len(token), rel=1e-6)
    assert stats["logratio_std_seq"] == pytest.approx(sum(seq) / len(seq), rel=1e-6)
    assert stats["logratio_std_token"] > stats["logratio_std_seq"] > 0  # an answer's mean averages its noise


@pytest.mark.parametrize("mu,K", [(2, 1), (2, 2)])
def test_later_updates_see_the_policy_move_away_from_pi_old(enc, tiny_model, digit_reward, mu, K):
    """Inside grpo_step: after the first update at a large lr, ratios leave 1 and the clip acts."""
    _, stats = run_step(enc, tiny_model(), GRPOConfig(**CFG, mu=mu, minibatches=K, clip=0.05), lr=5e-2)
    assert stats["ratio_max"] > 1.05 or stats["ratio_min"] < 0.95
    assert stats["clip_frac"] > 0 and stats["ppo_kl"] != 0


def test_grad_norm_is_the_updates_mean_and_grad_norm_max_their_largest_before_clipping(enc, tiny_model, digit_reward,
                                                                                      monkeypatch):
    """Four updates under a clip at 0.01: the logged norms are those grpo.backward returns
    (clip_grad_norm_'s, before clipping), their mean and their max (0 in a minibatch of equal rewards)."""
    norms, real = [], grpo.backward
    monkeypatch.setattr(grpo, "backward", lambda *a: norms.append(real(*a).item()) or torch.tensor(norms[-1]))
    _, stats = run_step(enc, tiny_model(), GRPOConfig(**CFG, mu=2, minibatches=2, max_grad_norm=0.01), lr=5e-2)
    assert len(norms) == 4 and max(norms) > 0.01 and len(set(norms)) > 2  # norms the clip cut, and they differ
    assert stats["grad_norm"] == pytest.approx(sum(norms) / 4, rel=1e-6)
    assert stats["grad_norm_max"] == pytest.approx(max(norms), rel=1e-6)


@pytest.mark.parametrize("mask_truncated", [False, True])
def test_loss_mask_is_the_completion_only(tiny_warm, monkeypatch, mask_truncated):
    """With the trained tiny warm start, 8 tokens end direct answers but truncate reasoned ones."""
    model, ckpt = load_checkpoint(tiny_warm[0])
    losses = spy(monkeypatch, "grpo_loss")
    cfg = GRPOConfig(group_size=4, max_new_tokens=8, mask_truncated=mask_truncated)
    batch, _ = run_step(build_tokenizer(ckpt["tokenizer"]), model, cfg, n_prompts=8)
    used = losses[0][4]  # (B, T)
    P = batch.prompt_len
    completion = batch.mask.clone()
    completion[:, :P] = False  # (B, L): generated tokens, end-of-text included
    expected = completion[:, 1:]
    if mask_truncated:
        expected = expected & ~batch.truncated[:, None]
    assert torch.equal(used, expected)
    assert batch.truncated.any() and (~batch.truncated).any()  # both kinds of rows were there to mask
    assert not used[:, :P - 1].any()  # never a prompt token


def test_the_kl_uses_the_reference_model(enc, tiny_model, digit_reward):
    model = tiny_model()
    _, same = run_step(enc, model, GRPOConfig(**CFG, kl=0.1, mu=1), ref=copy.deepcopy(model))
    assert same["kl"] == pytest.approx(0.0, abs=1e-7)  # first update: the policy is its reference
    ref = tiny_model(seed=1)  # a reference that differs from the policy
    _, other = run_step(enc, model, GRPOConfig(**CFG, kl=0.1), ref=ref)
    assert other["kl"] > 1e-3


def test_sampler_and_learner_describe_the_same_distribution(enc):
    """At T = 0.7 the empirical frequencies of sampled first tokens match exp(logp)."""
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=enc.n_vocab, max_seq_len=16, n_layer=1, n_head=2, d_model=32))
    with torch.no_grad():
        model.wte.weight.mul_(5)  # ~200 tokens with >= 5 expected draws, the top one at p ~ 0.13
    prompt, n, T = [5, 6, 7], 4000, 0.7
    tokens, mask, sampler_logp, *_ = generate(model, [prompt] * n, 1, enc.eot_token, temperature=T,
                                          generator=torch.Generator().manual_seed(1))
    counts = torch.bincount(tokens[:, 3], minlength=enc.n_vocab).double()  # (V,)
    # the learner's log-prob of every possible first token, through grpo.token_logprobs
    every = torch.tensor([prompt + [v] for v in range(enc.n_vocab)])
    logp, _ = grpo.token_logprobs(model, every, torch.ones_like(every, dtype=torch.bool),
                                  torch.tensor([[False, False, True]]).expand(enc.n_vocab, 3), T)
    p = logp[:, 2].double().exp()  # (V,)
    assert p.sum().item() == pytest.approx(1.0, abs=1e-4)
    seen = p * n >= 5  # Pearson's chi-square over tokens with enough expected counts, the rest pooled
    observed = torch.cat([counts[seen], counts[~seen].sum()[None]])
    expected = torch.cat([p[seen] * n, p[~seen].sum()[None] * n])
    chi2 = ((observed - expected) ** 2 / expected.clamp(min=1e-9)).sum().item()
    dof = int(seen.sum())  # (cells - 1)
    assert dof >= 5 and chi2 < dof + 4 * (2 * dof) ** 0.5, (chi2, dof)  # ~ the 99.99% quantile
    # and the sampler's own record of each draw equals the learner's log-prob of it
    torch.testing.assert_close(sampler_logp[:, 3], logp[tokens[:, 3], 2], rtol=1e-4, atol=1e-5)


@pytest.mark.roundings
@pytest.mark.parametrize("T", [0.7, 1.3])
def test_the_fast_logprobs_equal_the_textbook_reference(enc, tiny_model, T):
    """token_logprobs by the kernels (fused from the hidden states, from the logits, over a kept support) gives the
    textbook path's log-probs and entropies (log_softmax and gather: --logprobs textbook, a CPU's default at this
    vocabulary), and the same gradients; zero off loss_mask; auto is the textbook here, to the bit."""
    model = tiny_model()
    g = torch.Generator().manual_seed(3)
    tokens = torch.randint(0, enc.n_vocab, (5, 12), generator=g)
    mask = torch.rand(5, 12, generator=g) > 0.2
    loss_mask = mask[:, 1:] & (torch.arange(11) >= 4)
    support = torch.rand(5, 11, enc.n_vocab, generator=g) > 0.5  # what top-k / top-p would have kept ...
    support |= torch.nn.functional.one_hot(tokens[:, 1:], enc.n_vocab).bool()  # ... always with the drawn token
    w = torch.rand(5, 11, generator=g)  # a loss of both outputs, for the gradients

    def run(fn, **kw):
        model.zero_grad()
        logp, entropy = fn(model, tokens, mask, loss_mask, T, **kw)
        ((logp + entropy) * w).sum().backward()
        return logp.detach(), entropy.detach(), torch.cat([p.grad.flatten() for p in model.parameters()])
    for fast, reference in [(dict(path="fused"), dict(path="textbook")), (dict(path="logits"), dict(path="textbook")),
                            (dict(path="fused", support=support), dict(path="textbook", support=support))]:
        got, want = run(grpo.token_logprobs, **fast), run(grpo.token_logprobs, **reference)
        for x, y in zip(got, want):
            torch.testing.assert_close(x, y, rtol=1e-4, atol=1e-5)
        assert (got[0][~loss_mask] == 0).all() and (got[1][~loss_mask] == 0).all()
        assert (got[0][loss_mask] != 0).all()
    assert all(torch.equal(x, y) for x, y in zip(run(grpo.token_logprobs), run(grpo.token_logprobs, path="textbook")))


@pytest.mark.roundings
def test_rollout_sampler_logp_equals_learner_logp_without_truncation(enc, tiny_model):
    model = tiny_model()
    stream = tasks.problems("easy", 0)
    batch = rollouts.rollout(model, enc, [next(stream) for _ in range(3)], GRPOConfig(**CFG), torch.Generator().manual_seed(0))
    logp, _ = grpo.token_logprobs(model, batch.tokens, batch.mask, batch.loss_mask, CFG["temperature"])
    torch.testing.assert_close(batch.sampler_logp * batch.loss_mask, logp, rtol=1e-4, atol=1e-5)


def test_cispo_weight_carries_no_gradient():
    """On-policy, d(objective)/d(logp) is exactly the advantage: the clipped ratio is a constant weight."""
    logp = torch.randn(3, 4, dtype=torch.float64, requires_grad=True)
    mask = torch.ones(3, 4, dtype=torch.bool)
    A = torch.tensor([[1.5], [-0.5], [2.0]], dtype=torch.float64)
    ratio = grpo.policy_ratio(logp, logp.detach(), mask, "token")
    field_methods.cispo_objective(ratio, A, logp, 0.2, 0.28)[0].sum().backward()
    assert torch.equal(logp.grad, A.expand(3, 4))


def test_logged_statistics_ignore_padding_columns():
    g = torch.Generator().manual_seed(0)
    logp, old = torch.randn(4, 6, generator=g), torch.randn(4, 6, generator=g)
    adv, mask = torch.randn(4, generator=g), torch.rand(4, 6, generator=g) > 0.3
    cfg = GRPOConfig(clip=0.1, off_policy_mask=100.0)  # a mask that keeps every answer, logging that it did
    a = StepStats()
    stats.update_stats(a, grpo.grpo_loss(logp, old, None, adv, mask, cfg, sampler_logp=old), logp, old,
                       torch.zeros_like(logp), mask, torch.tensor(1.0), None, adv, old - 0.5)
    a = a.result()
    pad = lambda x, v: torch.cat([x, torch.full((4, 3), v, dtype=x.dtype)], 1)  # noqa: E731  3 padding columns
    logp2, old2, mask2 = pad(logp, 5.0), pad(old, -5.0), pad(mask, False)
    b = StepStats()
    stats.update_stats(b, grpo.grpo_loss(logp2, old2, None, adv, mask2, cfg, sampler_logp=old2), logp2, old2,
                       torch.zeros_like(logp2), mask2, torch.tensor(1.0), None, adv, old2 - 0.5)
    b = b.result()
    assert a["clip_frac"] > 0 and a["neg_ratio_above_3"] > 0 and "clip_high_lowp_frac" in a
    for k in a:
        assert b[k] == pytest.approx(a[k], rel=1e-6), k


def test_the_gates_of_the_rare_token_and_the_stale_negatives_match_their_formulas():
    """clip_high_lowp_frac: of the tokens the high clip stops, the share with pi_old < 0.2;
    neg_ratio_above_3: of the wrong answers' tokens, the share with ratio > 3; neg_sampler_kl: the
    wrong answers' mean of (1/|o|) sum_t log pi_sampler - log pi."""
    import math
    old = torch.log(torch.tensor([[0.1, 0.5, 0.05, 0.3], [0.1, 0.6, 0.1, 0.2]]))  # (2, 4)
    logp = old + torch.tensor([[0.5, 0.5, 0.0, 1.5], [1.2, 0.0, 0.1, 2.0]])  # ratios e^0.5 .. e^2
    mask = torch.tensor([[True, True, True, True], [True, True, True, False]])
    adv, sampler = torch.tensor([1.0, -1.0]), old - 0.25
    s = StepStats()
    loss = grpo.grpo_loss(logp, old, None, adv, mask, GRPOConfig(clip=0.2))
    stats.update_stats(s, loss, logp, old, torch.zeros_like(logp), mask, torch.tensor(1.0), None, adv, sampler)
    s = s.result()
    # high clip (A > 0, ratio > 1.2): row 0's tokens 0, 1, 3; of those, pi_old < 0.2 only token 0
    assert s["clip_high_lowp_frac"] == pytest.approx(1 / 3)
    assert s["clip_high_p_mean"] == pytest.approx((0.1 + 0.5 + 0.3) / 3, rel=1e-6)  # their mean pi_old (DAPO Fig. 3a)
    assert s["neg_ratio_above_3"] == pytest.approx(1 / 3)  # row 1's 3 tokens: ratios e^1.2 > 3, 1, e^0.1
    assert s["neg_sampler_kl"] == pytest.approx(-0.25 - (1.2 + 0.0 + 0.1) / 3)
    assert math.exp(1.2) > 3


def test_the_clip_on_the_think_token_counts_the_think_tokens_of_answers_with_a_positive_advantage():
    """think_clip_frac: of the <think> tokens (targets) in answers with A > 0, the share PPO's high clip stops. By
    hand: rows 0 and 2 have A > 0; their <think> tokens are row 0's column 0 (ratio e^0.5 > 1.2: clipped) and row 2's
    columns 0 and 2 (e^0.1: not; e^0.3: clipped; column 2 is padding in row 2, so not counted): 1 of 2. Row 1's
    <think> (A < 0) and the other tokens do not count."""
    think = 9  # <think>'s id here
    targets = torch.tensor([[9, 4, 4, 5], [9, 4, 4, 4], [9, 4, 9, 4]])  # (3, 4)
    old = torch.log(torch.full((3, 4), 0.3))
    logp = old + torch.tensor([[0.5, 0.5, 0.0, 0.0], [0.5, 0.0, 0.0, 0.0], [0.1, 0.0, 0.3, 0.0]])
    mask = torch.tensor([[True] * 4, [True] * 4, [True, True, False, False]])
    adv = torch.tensor([1.0, -1.0, 0.5])
    loss = grpo.grpo_loss(logp, old, None, adv, mask, GRPOConfig(clip=0.2))
    s = StepStats()
    stats.think_stats(s, loss, targets == think, mask, adv)
    assert s.result()["think_clip_frac"] == pytest.approx(1 / 2)
    mask[2, 0] = False  # row 2's unclipped <think> out of the loss: 1 of 1
    s = StepStats()
    stats.think_stats(s, loss, targets == think, mask, adv)
    assert s.result()["think_clip_frac"] == pytest.approx(1.0)
    s = StepStats()
    stats.think_stats(s, loss, targets == 7, mask, adv)  # no <think> at all: none, not 0
    assert s.result()["think_clip_frac"] is None


def test_a_step_logs_the_clip_on_its_think_tokens(enc, tiny_model, digit_reward):
    """The whole step, as train.py runs it, logs think_clip_frac with ours tokenizer's <think> (a single id)."""
    assert stats.think_token(enc) == enc.encode_single_token("<think>")
    policy = tiny_model()
    opt = torch.optim.Adam(policy.parameters(), lr=1e-2)
    stream = tasks.problems("easy", 0)
    cfg = GRPOConfig(group_size=4, max_new_tokens=6, mu=2)
    _, logged = logged_step(policy, None, opt, enc, lambda: next(stream), 4, cfg, torch.Generator().manual_seed(0))
    assert "think_clip_frac" in logged


def test_a_whole_step_logs_the_kl_gradients_bias_of_the_term_kl_reweight_makes(enc, tiny_model, digit_reward):
    """kl_grad_bias as a step logs it, not as its function returns it: k3 re-weighted by pi / pi_old has the gradient
    of k2 in expectation over pi_old's samples, the exact KL's (field_methods.kl_grad_bias: k + f = log pi - log
    pi_ref), so a step under --kl-reweight logs 0; without the flag, k3's own bias, that of KL(pi_ref || pi), which a
    reference 0.3 nats a token away makes far from 0. A step that dropped the flag on its way to the log would log
    the second number under the first's flags."""
    policy, ref = tiny_model(0), tiny_model(1).requires_grad_(False)
    logged = {}
    for reweight in (True, False):
        cfg = GRPOConfig(group_size=4, max_new_tokens=6, mu=1, kl=0.5, exact_kl=True, kl_estimator="k3",
                         kl_reweight=reweight)
        opt = torch.optim.Adam(policy.parameters(), lr=0.0)  # no move: both steps read the same policy
        stream = tasks.problems("easy", 0)
        logged[reweight] = logged_step(policy, ref, opt, enc, lambda: next(stream), 4, cfg,
                                       torch.Generator().manual_seed(0))[1]["kl_grad_bias"]
    assert logged[True] == pytest.approx(0.0, abs=1e-5)
    assert logged[False] > 0.05


def test_step_stats_match_the_direct_formulas():
    """StepStats defers every reduction to one call; in one process its numbers are the
    plain torch ones: masked mean, x.std(), masked min / max with their defaults, counts,
    and with several updates the mean of the updates' means."""
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(5, 7, generator=g), torch.randn(5, 7, generator=g)
    m, n = torch.rand(5, 7, generator=g) > 0.5, torch.rand(5, 7, generator=g) > 0.2
    s = StepStats()
    s.next_update()
    s.mean("a", x, m)
    s.max("top", x, m)
    s.min("low", x, m, default=1.0)
    s.next_update()
    s.mean("a", y, n)
    s.max("top", y, n)
    s.min("low", y, torch.zeros_like(n), default=1.0)  # nothing to take the min of in this update
    s.std("sd", x[0])
    s.count("n", m)
    s.mean("empty", x, torch.zeros_like(m), default=7.0)
    s.max("none", x, torch.zeros_like(m), default=1.0)
    out = s.result()
    assert out["a"] == pytest.approx((x[m].mean().item() + y[n].mean().item()) / 2, rel=1e-6)
    assert out["top"] == pytest.approx(max(x[m].max().item(), y[n].max().item()))
    assert out["low"] == pytest.approx(x[m].min().item())
    assert out["sd"] == pytest.approx(x[0].std().item(), rel=1e-6)
    assert out["n"] == int(m.sum()) and isinstance(out["n"], int)
    assert out["empty"] == 7.0 and out["none"] == 1.0


def test_step_stats_ratio_of_sums_and_its_threshold():
    s = StepStats()
    s.ratio("r", torch.tensor([1.0, -3.0, 2.0]), torch.tensor([0.5, 0.25, 0.25]))
    s.ratio("noise", torch.tensor([1.0, 2.0]), torch.tensor([1e-4, 3e-4]), min_mean_den=1e-3)  # mean den 2e-4
    s.ratio("zero", torch.tensor([1.0]), torch.tensor([0.0]), default=-1.0)
    out = s.result()
    assert out["r"] == pytest.approx(0.0 / 1.0) and out["noise"] is None and out["zero"] == -1.0
    s = StepStats()
    s.ratio("r", torch.tensor([3.0, 1.0]), torch.tensor([1.0, 1.0]), min_mean_den=0.9)
    assert s.result()["r"] == pytest.approx(2.0)


def test_pg_k1_on_a_hand_built_group():
    """pg_k1 = -sum A_i M_i / sum M_i, M_i the answer's summed log q - log pi over its tokens."""
    mask = torch.tensor([[0, 1, 1, 0], [0, 1, 1, 1], [0, 1, 0, 0]], dtype=torch.bool)  # (3, 4): padding, prompt
    old = torch.log(torch.tensor([[0.5, 0.9, 0.8, 0.1], [0.5, 0.5, 0.5, 0.5], [0.1, 0.7, 0.2, 0.3]]))
    q = torch.log(torch.tensor([[0.9, 1.0, 0.9, 0.9], [0.2, 0.6, 0.6, 0.6], [0.9, 0.7, 0.9, 0.9]]))
    adv = torch.tensor([1.0, -1.5, 0.5])
    push, mismatch = stats.pg_as_k1(adv, q, old, mask)
    M = [math.log(1 / 0.9) + math.log(0.9 / 0.8), 3 * math.log(0.6 / 0.5), 0.0]
    assert mismatch.tolist() == pytest.approx(M)
    assert push.tolist() == pytest.approx([-1.0 * M[0], 1.5 * M[1], -0.0])
    step_stats = StepStats()
    step_stats.ratio("pg_k1", push, mismatch, stats.MIN_MISMATCH)
    # the long wrong answer carries most of the mismatch: > 0, the policy gradient flattens as a k1 does
    assert step_stats.result()["pg_k1"] == pytest.approx((-1.0 * M[0] + 1.5 * M[1]) / (M[0] + M[1])) and M[1] > M[0]


def test_a_step_logs_the_lengths_of_its_right_and_wrong_answers_and_pg_k1(enc, tiny_model, digit_reward):
    """resp_len_correct / resp_len_wrong are the mean lengths of the answers the reward
    called right / wrong; pg_k1 is None when the sampler is the learner and a number when
    top-p cuts what the learner keeps."""
    model = tiny_model()
    with torch.no_grad():  # the end of text likely at every position (about 1 in 6 at T 2): lengths vary
        model.ln_f.bias.zero_()
        model.ln_f.bias[0] = 1.0
        model.lm_head_weight[enc.eot_token, 0] = 8.0
    batch, logged = run_step(enc, model, GRPOConfig(**{**CFG, "max_new_tokens": 12}))
    lengths, right = batch.loss_mask.sum(1).double(), batch.rewards["correct"] > 0
    assert 0 < right.sum() < len(right)  # the digit reward mixes right and wrong at this temperature
    assert lengths[right].mean() != lengths[~right].mean()  # so a swapped mask would show
    assert logged["resp_len_correct"] == pytest.approx(lengths[right].mean().item())
    assert logged["resp_len_wrong"] == pytest.approx(lengths[~right].mean().item())
    assert logged["pg_k1"] is None and abs(logged["mismatch"]) < stats.MIN_MISMATCH
    _, logged = run_step(enc, tiny_model(), GRPOConfig(**CFG, top_p=0.5))  # log q - log pi = -log(kept mass) >= 0
    assert logged["mismatch"] > stats.MIN_MISMATCH and isinstance(logged["pg_k1"], float)


@pytest.mark.parametrize("on", [False, True])
def test_an_off_correction_costs_nothing_and_logs_nothing(enc, tiny_model, digit_reward, monkeypatch, on):
    """--tis-cap and --off-policy-mask run (and off_policy_masked_frac is logged) only when set:
    off, neither function is called; on, each is called once per update."""
    tis = spy(monkeypatch, "tis_weights", field_methods)
    keep = spy(monkeypatch, "off_policy_keep", field_methods)
    extra = dict(tis_cap=2.0, off_policy_mask=0.1) if on else {}
    _, logged = run_step(enc, tiny_model(), GRPOConfig(**CFG, mu=2, minibatches=2, top_p=0.8, **extra))
    assert len(tis) == len(keep) == (4 if on else 0)
    assert ("off_policy_masked_frac" in logged) == on


def lagged_steps(enc, model, cfg, seeds, lr=5e-2):
    """Steps of one run (with --rollout-lag, one queue) -> [(batch sampled, batch trained on, stats)]."""
    opt, lagged, out = torch.optim.Adam(model.parameters(), lr=lr), collections.deque(), []
    for seed in seeds:
        stream = tasks.problems("easy", seed)
        trained, logged = logged_step(model, None, opt, enc, lambda: next(stream), 4, cfg,
                                         torch.Generator().manual_seed(seed), lagged)
        out.append((lagged[-1][0] if cfg.rollout_lag else trained, trained, logged))
    return out


def test_rollout_lag_fills_its_queue_then_trains_k_steps_behind(enc, tiny_model, digit_reward):
    """K = 2: steps 1-3 train on step 1's batch (lags 0, 1, 2 while the queue fills), step 4 on step 2's;
    from step 2 the learner has moved since the batch was drawn, so the first update's ratio leaves 1."""
    steps = lagged_steps(enc, tiny_model(), GRPOConfig(**CFG, mu=1, rollout_lag=2), seeds=[0, 1, 2, 3])
    sampled = [b for b, _, _ in steps]
    assert [s["rollout_lag"] for _, _, s in steps] == [0, 1, 2, 2]
    assert [t for _, t, _ in steps] == [sampled[0]] * 3 + [sampled[1]]  # (the same objects)
    assert torch.equal(steps[3][1].tokens, sampled[1].tokens) and not torch.equal(sampled[1].tokens, sampled[3].tokens)
    assert steps[0][2]["ratio_min"] == steps[0][2]["ratio_max"] == 1.0  # lag 0: pi_old is the policy itself
    for _, _, logged in steps[1:]:
        assert logged["ratio_max"] > 1.01 or logged["ratio_min"] < 0.99
        assert logged["ppo_kl"] != 0 and logged["sampler_gap"] < 1e-5  # off pi_old, not off the sampler


def test_the_off_policy_mask_fires_on_a_lagged_batch(enc, tiny_model, digit_reward):
    """DeepSeek-V3.2's case: the learner's log-probs against the sampler's. On-policy at one update a step
    they are equal and no answer is dropped; one step behind, the policy has moved and negative answers go."""
    cfg = GRPOConfig(**CFG, mu=1, off_policy_mask=1e-3)
    on = lagged_steps(enc, tiny_model(), cfg, seeds=[0, 1, 2])
    off = lagged_steps(enc, tiny_model(), dataclasses.replace(cfg, rollout_lag=1), seeds=[0, 1, 2])
    assert [s["off_policy_masked_frac"] for _, _, s in on] == [0.0, 0.0, 0.0]
    assert off[0][2]["off_policy_masked_frac"] == 0.0  # lag 0
    assert all(s["off_policy_masked_frac"] > 0 for _, _, s in off[1:])


def test_the_mismatch_diagnostics_on_a_hand_built_batch():
    """The sampler-vs-learner numbers batch_stats logs, each against its formula by hand, on two
    answers: one where the learner gives its tokens more than the sampler did and one less, so
    that a signed mean cancels where k3 and chi^2 cannot."""
    from types import SimpleNamespace
    mask = torch.tensor([[0, 1, 1, 0], [0, 1, 1, 1]], dtype=torch.bool)  # (2, 4): a prompt column, padding
    q = torch.log(torch.tensor([[0.5, 0.5, 0.2, 0.3], [0.5, 0.8, 0.4, 0.5]]))  # the sampler's log-probs
    old = torch.log(torch.tensor([[0.5, 1.0, 0.4, 0.9], [0.5, 0.4, 0.2, 0.5]]))  # the learner's (pi_old)
    w = [[2.0, 2.0], [0.5, 0.5, 1.0]]  # pi_old / q of each answer's tokens
    batch = SimpleNamespace(rewards={"total": torch.tensor([1.0, 0.0]), "correct": torch.tensor([1.0, 0.0])},
                            loss_mask=mask, truncated=torch.tensor([False, False]), mask=mask, sampler_logp=q,
                            sampler_entropy=torch.zeros(2, 4))
    step = StepStats()
    stats.batch_stats(step, batch, torch.tensor([1.0, -1.0]), torch.tensor([False]), old, mask, G=2)
    got = step.result()
    tokens = [x for row in w for x in row]
    log = [math.log(x) for x in tokens]
    assert got["sampler_kl_k1"] == pytest.approx(-sum(log) / 5)  # 2 ln 2 - 2 ln 2 + 0: cancels to 0
    assert got["sampler_kl_k1"] == pytest.approx(0.0, abs=1e-6)
    assert got["sampler_kl_k3"] == pytest.approx(sum(x - 1 - math.log(x) for x in tokens) / 5) and got["sampler_kl_k3"] > 0.1
    assert got["tis_chi2"] == pytest.approx(sum(x * x - 1 for x in tokens) / 5)
    W = [4.0, 0.25]  # each answer's weight: the product of its tokens'
    assert got["tis_ess"] == pytest.approx(sum(W) ** 2 / (2 * sum(x * x for x in W)))
    assert got["sampler_gap_max"] == pytest.approx((math.log(2) + math.log(2)) / 2)  # each answer's largest |log w|
    x, y = old[mask].double(), q[mask].double()
    assert got["sampler_logp_corr"] == pytest.approx(torch.corrcoef(torch.stack([x, y]))[0, 1].item())
    assert got["signal_groups"] == 1 and got["adv_correct_corr"] == pytest.approx(1.0)  # one group of 2, rewards differ


def test_the_mismatch_diagnostics_when_the_sampler_is_the_learner():
    """No gap: both KL estimates 0, chi^2 0, every weight 1 (ESS 1), log-probs correlated 1."""
    from types import SimpleNamespace
    mask = torch.tensor([[0, 1, 1], [0, 1, 0]], dtype=torch.bool)
    q = torch.log(torch.tensor([[0.5, 0.3, 0.9], [0.5, 0.6, 0.5]]))
    batch = SimpleNamespace(rewards={"total": torch.zeros(2), "correct": torch.zeros(2)}, loss_mask=mask,
                            truncated=torch.tensor([False, False]), mask=mask, sampler_logp=q,
                            sampler_entropy=torch.zeros(2, 3))
    step = StepStats()
    stats.batch_stats(step, batch, torch.zeros(2), torch.tensor([True]), q.clone(), mask, G=2)
    got = step.result()
    for key in ("sampler_kl_k1", "sampler_kl_k3", "tis_chi2", "sampler_gap_max"):
        assert got[key] == pytest.approx(0.0, abs=1e-7), key
    assert got["tis_ess"] == pytest.approx(1.0) and got["sampler_logp_corr"] == pytest.approx(1.0)
    assert got["signal_groups"] == 0 and got["adv_correct_corr"] is None  # equal rewards: no signal, no correlation


@pytest.mark.parametrize("level", ["token", "sequence"])
def test_exact_kl_sums_the_kl_over_the_whole_vocabulary(enc, tiny_model, digit_reward, level):
    """exact_kl: at each sampled position sum_v pi(v) (log pi(v) - log pi_ref(v)) at the learner's
    temperature, per answer for the sequence level, aggregated as the KL term; 0 against itself.
    A step with a KL term logs it beside the estimate, kl_exact."""
    policy, ref = tiny_model(0), tiny_model(1)
    cfg = GRPOConfig(**CFG, kl=0.1, kl_level=level, kl_estimator="k3" if level == "token" else "k1",
                     learner_temperature=1.5, exact_kl=True)
    stream = tasks.problems("easy", 0)
    batch = rollouts.rollout(policy, enc, [next(stream) for _ in range(3)], cfg, torch.Generator().manual_seed(0))
    rows, m = torch.arange(len(batch.texts)), batch.loss_mask
    per_answer = []
    for i in rows.tolist():
        total = 0.0
        for t in m[i].nonzero()[:, 0].tolist():
            prefix, pmask = batch.tokens[i:i + 1, :t + 1], batch.mask[i:i + 1, :t + 1]
            lp = (policy(prefix, pmask)[0, -1].double() / 1.5).log_softmax(-1)
            lq = (ref(prefix, pmask)[0, -1].double() / 1.5).log_softmax(-1)
            kl_t = (lp.exp() * (lp - lq)).sum().item()
            total += kl_t if level == "sequence" else kl_t / m[i].sum().item()  # seq_mean of each token's KL
        per_answer.append(total)
    with torch.no_grad():
        got = stats.exact_kl(policy, ref, batch, rows, m, cfg)[0].item()
        assert got == pytest.approx(sum(per_answer) / len(per_answer), rel=1e-4)
        assert stats.exact_kl(policy, policy, batch, rows, m, cfg)[0].item() == pytest.approx(0.0, abs=1e-6)
    logged = run_step(enc, tiny_model(0), cfg, ref=tiny_model(1))[1]
    assert logged["kl_exact"] > 0 and "kl" in logged
    off = run_step(enc, tiny_model(0), dataclasses.replace(cfg, exact_kl=False), ref=tiny_model(1))[1]
    assert "kl_exact" not in off and off["kl"] == pytest.approx(logged["kl"])  # a diagnostic: the step is the same
    one = run_step(enc, tiny_model(0), dataclasses.replace(cfg, mu=1), ref=tiny_model(1))[1]  # one update
    assert one["kl_rel_gap"] == pytest.approx((one["kl"] - one["kl_exact"]) / one["kl_exact"], rel=1e-6)
    assert "kl_rel_gap" not in off


@pytest.mark.roundings
def test_share_prompts_reaches_the_learner_and_changes_its_log_probs_by_rounding_only(enc):
    """--share-prompts hands the batch's groups to the model (one prompt pass a group); off, the model
    gets none, so a run is the code's without the flag number for number."""
    from harness import cli
    policy, enc_, _ = cli.load_init("checkpoints/warmstart.pt")
    cfg = GRPOConfig()
    batch, _ = rollouts.sample_batch(policy, enc_, lambda: next(iter(tasks.problems("medium", 0))), 4, cfg,
                                     torch.Generator().manual_seed(0))
    seen = []
    forward = policy.forward
    policy.forward = lambda *a, **k: seen.append(k.get("groups")) or forward(*a, **k)
    rows = torch.arange(len(batch.texts))
    plain = grpo.batch_logprobs(policy, batch, rows, batch.loss_mask, cfg)[0]
    shared = grpo.batch_logprobs(policy, batch, rows, batch.loss_mask, GRPOConfig(share_prompts=True))[0]
    assert seen[:2] == [None, (batch.prompt_len, cfg.group_size)]  # then its prompt pass and its answers pass
    assert torch.allclose(plain, shared, atol=1e-4) and not torch.equal(plain, shared)
