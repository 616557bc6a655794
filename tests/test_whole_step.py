"""Every GRPOConfig field switched on inside a real grpo_step, checked against numbers the test makes itself.

Each test runs `grpo.grpo_step` on the tiny warm start (conftest.py; a few rows, fixed
seeds) with its flag on and off, and compares what the step did with what the flag must
make it do, computed here from first principles:
- log-probs and entropies from a plain float64 log_softmax of the model's full logits
  (`logprobs`, `entropies`), never through grpo.py or kernels/;
- advantages from the rewards by the paper's formula in plain Python (`advantages`);
- each token's weight in the update read from the gradient that reaches its log-prob
  (`Update.grad`, d loss / d logp_t), against that gradient written out by hand
  (`pg_grad`, `kl_grad`, `token_weights`).
FLAG_TESTS at the end names the tests of every field; a field without one fails
`test_every_grpo_config_field_has_a_whole_step_test`.
"""
import collections
import copy
import dataclasses
import inspect
import math
import re
import statistics

import pytest
import torch

import field_methods
import grpo
import rewards
import rollouts
import tasks
from config import GRPOConfig
from harness.stats import logged_step

BASE = dict(group_size=4, max_new_tokens=12, mu=1, minibatches=1)  # mu explicit: its default may change
TABLE = [1, 0, 0, 1, 0, 0, 0, 1, 1, 1, 0, 1, 0, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0]  # 6 groups of 4, one constant


# ---------------------------------------------------------------- recording a step

@dataclasses.dataclass(repr=False)  # a failing assert prints no tensors
class Update:
    """One optimizer update of a step, as the test saw it."""
    batch: object         # the Rollouts it trained on
    rows: torch.Tensor    # (b,) its rows of that batch
    policy: object        # a copy of pi_theta as the update found it (before its optimizer step)
    logp: torch.Tensor    # (b, T) pi_theta's log-probs, as the loss saw them
    old: torch.Tensor = None   # (b, T) what grpo_loss received as pi_old's log-probs
    adv: torch.Tensor = None   # (b,) and as advantages (before the off-policy mask, which grpo_loss applies)
    grad: torch.Tensor = None  # (b, T) d loss / d logp_t: each token's weight in the update
    entropy_grad: torch.Tensor = None  # (b, T) d loss / d entropy_t (None: no gradient reached it)


@dataclasses.dataclass(repr=False)  # a failing assert prints no tensors
class Step:
    batch: object   # the first epoch's Rollouts, as grpo_step returns them (with --rollout-lag, an older step's)
    stats: dict
    updates: list   # [Update], in order
    passes: list    # [(model, batch, rows, logp)] of the no-gradient passes (pi_old, pi_ref)
    before: object  # a copy of the policy at the start of the step: pi_old, the sampler
    drawn: list     # the problems the step drew


def run(model, enc, cfg, ref=None, n_prompts=6, seed=1, opt=None, lagged=None):
    """One real grpo_step, with the learner's log-probs and their gradients recorded (lagged: its
    queue of batches for --rollout-lag, kept by the caller across steps)."""
    before, updates, passes, drawn = copy.deepcopy(model), [], [], []
    real_logprobs, real_loss = grpo.batch_logprobs, grpo.grpo_loss

    def batch_logprobs(m, batch, rows, loss_mask, c):
        logp, ent = real_logprobs(m, batch, rows, loss_mask, c)
        if not torch.is_grad_enabled():
            passes.append((m, batch, rows, logp))
            return logp, ent
        u = Update(batch, rows, copy.deepcopy(m), logp.detach().clone())
        logp.register_hook(lambda g: setattr(u, "grad", g.clone()))
        ent.register_hook(lambda g: setattr(u, "entropy_grad", g.clone()))
        updates.append(u)
        return logp, ent

    def grpo_loss(logp, old, ref_logp, adv, loss_mask, c, entropy=None, sampler_logp=None):
        updates[-1].old, updates[-1].adv = old.detach().clone(), adv.clone()
        return real_loss(logp, old, ref_logp, adv, loss_mask, c, entropy, sampler_logp)

    stream = tasks.problems("easy", seed)

    def next_problem():
        drawn.append(next(stream))
        return drawn[-1]
    opt = opt or torch.optim.Adam(model.parameters(), lr=1e-2)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(grpo, "batch_logprobs", batch_logprobs)
        mp.setattr(grpo, "grpo_loss", grpo_loss)
        batch, stats = logged_step(model, ref, opt, enc, next_problem, n_prompts, cfg,
                                      torch.Generator().manual_seed(seed), lagged)
    return Step(batch, stats, updates, passes, before, drawn)


def reward_table(monkeypatch, correct, fmt=None):
    """rewards.score returns the next entry of a table (row by row, rollout after rollout),
    so a step sees known rewards; fmt: the format term, paid with rewards.term_weights."""
    calls = []

    def score(text, answer, n_tokens, cfg):
        i = len(calls) % len(correct)
        calls.append(i)
        f = 0.0 if fmt is None else float(fmt[i])
        return {"total": float(correct[i]) + cfg.format_weight * f, "format": f, "correct": float(correct[i]),
                "format_paid": f, "overlong": 0.0}
    monkeypatch.setattr(rewards, "score", score)
    return calls


# ---------------------------------------------------------------- first principles

def completion(batch):
    """(B, T) the targets that are generated tokens (after the left-padded prompt, in the
    row): what the loss mask must be, derived here from the tokens' layout."""
    return batch.mask[:, 1:] & (torch.arange(batch.tokens.shape[1] - 1) >= batch.prompt_len - 1)


def logits_of(model, batch, T):
    """(B, T, V) float64 logits / T at every target position."""
    with torch.no_grad():
        return model(batch.tokens[:, :-1], batch.mask[:, :-1]).double() / T


def logprobs(model, batch, T=1.0, rows=None, support=None):
    """(b, T) log pi(target | prefix) at temperature T by a plain log_softmax of the full
    logits (over `support` only, if given); 0 off the completion."""
    logits = logits_of(model, batch, T)
    if support is not None:
        logits = logits.masked_fill(~support, float("-inf"))
    lp = logits.log_softmax(-1).gather(-1, batch.tokens[:, 1:, None])[..., 0]
    lp = torch.where(completion(batch), lp, 0.0)
    return lp if rows is None else lp[rows]


def entropies(model, batch, T=1.0):
    """(B, T) entropy of pi at each target position; 0 off the completion."""
    logp = logits_of(model, batch, T).log_softmax(-1)
    return torch.where(completion(batch), -(logp.exp() * logp).sum(-1), 0.0)


def advantages(r, G, norm="group"):
    """(B,) DeepSeekMath's (r - mean of the group) / (std + 1e-4), in plain Python; std of
    the whole batch ("batch") or no division at all ("none", Dr. GRPO)."""
    r = [float(x) for x in r]
    out = []
    for g in range(0, len(r), G):
        xs = r[g:g + G]
        div = {"group": statistics.stdev(xs) + 1e-4, "batch": statistics.stdev(r) + 1e-4, "none": 1.0}[norm]
        out += [(x - sum(xs) / G) / div for x in xs]
    return torch.tensor(out, dtype=torch.float64)


def token_weights(mask, agg="seq_mean", max_len=None):
    """(b, T) d loss / d (a token's term): the loss aggregation written out."""
    m = mask.double()
    if agg == "seq_mean":  # each sequence's mean, then the mean over sequences
        return m / m.sum(1, keepdim=True).clamp(min=1) / len(m)
    if agg == "token_mean":
        return m / m.sum()
    return m / (len(m) * max_len)  # constant (Dr. GRPO)


def pg_grad(lp, old, A, W, cfg):
    """(b, T) d(-objective)/d logp_t of the clipped objective, from its derivative:
    d(r A)/d logp_t = A dr/dlogp_t where the objective's branch is the unclipped one, 0
    where it is the clipped constant; CISPO's weight sg(clip(r)) A logp_t gives clip(r) A."""
    eps_low, eps_high = cfg.clip, cfg.clip if cfg.clip_high is None else cfg.clip_high
    A, m = A[:, None].double(), W > 0
    log_r = (lp.double() - old.double()) * m
    if cfg.ratio_level == "token":
        r = log_r.exp()
        dr = r  # d r_t / d logp_t
    else:
        n = m.sum(1, keepdim=True)
        r = (log_r.sum(1, keepdim=True) / (n if cfg.ratio_level == "gspo" else 1)).exp()  # (b, 1)
        dr = r / n if cfg.ratio_level == "gspo" else r  # every token of the row moves the row's ratio
    if cfg.objective == "cispo":
        return -(r.clamp(1 - eps_low, 1 + eps_high) * A * W) * m
    if cfg.objective == "book":  # A >= 0: PPO's; A < 0: A * min(r, clip(r)), flat only once r > 1 + eps_high
        live = r <= 1 + eps_high
    else:
        live = torch.where(A > 0, r <= 1 + eps_high, r >= 1 - eps_low)
        if cfg.dual_clip > 0:
            live = live & ~((A < 0) & (r > cfg.dual_clip))
    if cfg.ratio_level == "token":
        return -A * dr * live * W
    return -A * dr * live * W.sum(1, keepdim=True) * m


def assert_grad(u, want, rtol=1e-4, atol=1e-7):
    torch.testing.assert_close(u.grad.double(), want.double(), rtol=rtol, atol=atol)


def on_policy_grad(step, cfg, r=None, mask=None):
    """The hand gradient of an on-policy first update (ratio 1): -A_i * the token's weight,
    with A from the rewards (the batch's total unless r is given)."""
    u = step.updates[0]
    r = step.batch.rewards["total"] if r is None else r
    mask = completion(step.batch) if mask is None else mask
    W = token_weights(mask[u.rows], cfg.loss_agg, cfg.max_new_tokens)
    return -advantages(r, cfg.group_size, cfg.adv_norm)[u.rows, None] * W


@pytest.fixture
def table(monkeypatch):
    return reward_table(monkeypatch, TABLE)


# ---------------------------------------------------------------- rollouts

@pytest.mark.parametrize("G", [2, 4])
def test_group_size_makes_groups_of_g_adjacent_rows_sharing_one_advantage_baseline(warm_policy, table, G):
    model, enc = warm_policy()
    cfg = GRPOConfig(**{**BASE, "group_size": G})
    step = run(model, enc, cfg)
    b = step.batch
    assert len(b.texts) == 6 * G and len(step.drawn) == 6
    for i in range(len(b.texts)):  # row i answers problem i // G, with its prompt
        assert b.problems[i] is step.drawn[i // G]
        P = b.prompt_len
        assert torch.equal(b.tokens[i, :P][b.mask[i, :P]], b.tokens[i - i % G, :P][b.mask[i - i % G, :P]])
    assert_grad(step.updates[0], on_policy_grad(step, cfg))  # the baseline and std of each group of G
    other = advantages(b.rewards["total"], 6 - G)  # groups of the other size would give other advantages
    assert (other - advantages(b.rewards["total"], G)).abs().max() > 0.1


@pytest.mark.parametrize("L", [6, 14])
def test_max_new_tokens_caps_completions_and_is_dr_grpos_denominator(warm_policy, table, L):
    model, enc = warm_policy()
    cfg = GRPOConfig(**{**BASE, "max_new_tokens": L, "loss_agg": "constant"})
    step = run(model, enc, cfg)
    b, P = step.batch, step.batch.prompt_len
    n = completion(b).sum(1)  # (B,) completion tokens, <|endoftext|> included
    ended = torch.tensor([(b.tokens[i, P:][b.mask[i, P:]] == enc.eot_token).any().item() for i in range(len(n))])
    assert n.max() <= L and torch.equal(b.truncated, ~ended)
    assert (n[b.truncated] == L).all() and b.truncated.any() and ended.any()
    assert_grad(step.updates[0], on_policy_grad(step, cfg))  # each token weighs 1 / (B * L)


@pytest.mark.parametrize("T", [0.6, 1.5])
def test_temperature_is_the_samplers_and_the_learners(warm_policy, table, T):
    model, enc = warm_policy()
    step = run(model, enc, GRPOConfig(**BASE, temperature=T))
    b, m = step.batch, completion(step.batch)
    want = logprobs(step.before, b, T)
    torch.testing.assert_close(b.sampler_logp[m].double(), want[m], rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(step.updates[0].logp[m].double(), want[m], rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(b.sampler_entropy[m].double(), entropies(step.before, b, T)[m], rtol=1e-4, atol=1e-5)
    assert (logprobs(step.before, b, 1.0)[m] - want[m]).abs().max() > 0.05  # T really changes them


@pytest.mark.parametrize("agg", ["seq_mean", "token_mean", "constant"])
def test_loss_agg_weighs_each_token_as_its_formula(warm_policy, table, agg):
    model, enc = warm_policy()
    cfg = GRPOConfig(**BASE, loss_agg=agg)
    step = run(model, enc, cfg)
    assert_grad(step.updates[0], on_policy_grad(step, cfg))
    others = [on_policy_grad(step, dataclasses.replace(cfg, loss_agg=a)) for a in ("seq_mean", "token_mean", "constant")]
    assert sum(bool(torch.allclose(o, others[0])) for o in others) == 1  # the three weigh tokens differently here


@pytest.mark.parametrize("norm", ["group", "batch", "none"])
def test_adv_norm_divides_by_the_group_std_the_batch_std_or_nothing(warm_policy, table, norm):
    model, enc = warm_policy()
    cfg = GRPOConfig(**BASE, adv_norm=norm)
    step = run(model, enc, cfg)
    assert_grad(step.updates[0], on_policy_grad(step, cfg))
    r = step.batch.rewards["total"]
    others = [advantages(r, 4, x) for x in ("group", "batch", "none")]
    assert sum(bool(torch.allclose(o, advantages(r, 4, norm))) for o in others) == 1  # they differ here


def nucleus(model, batch, T=1.0, top_k=0, top_p=1.0):
    """(B, T, V) bool: the tokens top-k then top-p leave to draw from at each position: the
    k likeliest, then the smallest set of the likeliest whose probability reaches top_p."""
    p = logits_of(model, batch, T).softmax(-1)
    keep = torch.ones_like(p, dtype=torch.bool)
    if top_k > 0:
        keep = p >= p.topk(top_k, -1).values[..., -1:]
    q = (p * keep) / (p * keep).sum(-1, keepdim=True)
    sp, order = q.sort(-1, descending=True)
    before = sp.cumsum(-1) - sp  # probability of the likelier tokens
    return keep & torch.zeros_like(keep).scatter(-1, order, before < top_p)


@pytest.mark.parametrize("flag", [dict(top_p=0.6), dict(top_k=3), dict()])
def test_top_p_and_top_k_draw_only_from_what_they_keep(warm_policy, table, flag):
    model, enc = warm_policy()
    step = run(model, enc, GRPOConfig(**BASE, **flag))
    b, m = step.batch, completion(step.batch)
    keep = nucleus(step.before, b, **flag)
    V = keep.shape[-1]
    assert keep.gather(-1, b.tokens[:, 1:, None])[..., 0][m].all()  # every sampled token is in the kept set
    kept_logp = logprobs(step.before, b, support=keep)  # pi renormalised over the kept set
    torch.testing.assert_close(b.sampler_logp[m].double(), kept_logp[m], rtol=1e-4, atol=1e-5)
    full = logprobs(step.before, b)  # the learner scores over the full vocabulary
    torch.testing.assert_close(step.updates[0].logp[m].double(), full[m], rtol=1e-4, atol=1e-5)
    if flag:
        assert keep.sum(-1)[m].float().mean() < V / 4  # the filter cut the tail...
        assert step.stats["sampler_gap"] > 0.05  # ...so sampler and learner differ, and the step logs it
    else:
        assert keep[m].all() and step.stats["sampler_gap"] < 1e-5


def perturbed(model, scale=0.05, seed=7):
    """A reference that differs from the policy: its weights plus seeded noise."""
    ref = copy.deepcopy(model)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in ref.parameters():
            p.add_(scale * torch.randn(p.shape, generator=g))
    return ref.requires_grad_(False)


@pytest.mark.parametrize("learner_T", [None, 1.0])
def test_learner_temperature_scores_pi_theta_pi_old_and_pi_ref_and_nothing_else(warm_policy, table, learner_T):
    """The sampler samples at --temperature; every log-prob the loss sees is at the learner's."""
    model, enc = warm_policy()
    ref = perturbed(model)
    cfg = GRPOConfig(**{**BASE, "minibatches": 2}, temperature=0.7, learner_temperature=learner_T, kl=0.1)
    step = run(model, enc, cfg, ref=ref)
    b, m, T = step.batch, completion(step.batch), 0.7 if learner_T is None else learner_T
    # the samples are the sampler's, at 0.7: the same tokens as without a learner temperature
    baseline = run(*warm_policy(), GRPOConfig(**{**BASE, "minibatches": 2}, temperature=0.7, kl=0.1), ref=ref)
    assert torch.equal(b.tokens, baseline.batch.tokens)
    torch.testing.assert_close(b.sampler_logp[m].double(), logprobs(step.before, b, 0.7)[m], rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(b.sampler_entropy[m].double(), entropies(step.before, b, 0.7)[m], rtol=1e-4, atol=1e-5)
    # the learner's: pi_theta in every update, pi_old and pi_ref from their passes, at T
    for u in step.updates:
        mu = m[u.rows]
        torch.testing.assert_close(u.logp[mu].double(), logprobs(u.policy, b, T, u.rows)[mu], rtol=1e-4, atol=1e-5)
        torch.testing.assert_close(u.old[mu].double(), logprobs(step.before, b, T, u.rows)[mu], rtol=1e-4, atol=1e-5)
    (ref_pass,) = [p for p in step.passes if p[0] is ref]
    torch.testing.assert_close(ref_pass[3][m].double(), logprobs(ref, b, T)[m], rtol=1e-4, atol=1e-5)
    assert (logprobs(step.before, b, 1.0)[m] - logprobs(step.before, b, 0.7)[m]).abs().max() > 0.05


# ---------------------------------------------------------------- rewards (the task's own, on the warm start)

REAL = dict(BASE, max_new_tokens=16)  # 16 tokens: some answers end, some are cut inside or after the think block


def book_format(text):
    """The book's check, by hand: both tags, the first <think> before the first </think>."""
    return float("<think>" in text and "</think>" in text and text.index("<think>") < text.index("</think>"))


@pytest.mark.parametrize("w", [0.0, 0.5])
def test_format_weight_adds_w_times_the_format_term(warm_policy, w):
    model, enc = warm_policy()
    cfg = GRPOConfig(**REAL, format_weight=w)
    step = run(model, enc, cfg)
    b = step.batch
    correct = torch.tensor([rewards.correctness_reward(t, p.answer) for t, p in zip(b.texts, b.problems)])
    fmt = torch.tensor([rewards.format_reward(t) for t in b.texts])
    assert ((fmt == 1) & (correct == 0)).any() and (fmt == 0).any()  # the term can change the ranking
    torch.testing.assert_close(b.rewards["total"].double(), (correct + w * fmt).double())
    assert_grad(step.updates[0], on_policy_grad(step, cfg, r=correct + w * fmt))


def boxed_format(text):
    """gdpo.py's check, by hand: a closed \\boxed{...} somewhere (the last one is complete)."""
    return float(bool(re.search(r"\\boxed\s*\{[^{}]*\}[^\\]*$", text)))


@pytest.mark.parametrize("check", ["strict", "book", "boxed"])
def test_format_check_book_pays_any_think_before_a_close(warm_policy, check):
    model, enc = warm_policy()
    cfg = GRPOConfig(**REAL, format_weight=0.5, format_check=check)
    step = run(model, enc, cfg)
    b = step.batch
    book = torch.tensor([book_format(t) for t in b.texts])
    strict = torch.tensor([rewards.format_reward(t) for t in b.texts])
    boxed = torch.tensor([boxed_format(t) for t in b.texts])
    assert (book != strict).any() and (boxed != strict).any()  # e.g. a think block with no answer after it
    fmt = {"book": book, "strict": strict, "boxed": boxed}[check]
    assert torch.equal(b.rewards["format"], fmt)
    correct = torch.tensor([rewards.correctness_reward(t, p.answer) for t, p in zip(b.texts, b.problems)])
    assert_grad(step.updates[0], on_policy_grad(step, cfg, r=correct + 0.5 * fmt))


@pytest.mark.parametrize("gated", [False, True])
def test_gated_pays_the_format_only_with_a_correct_answer(warm_policy, gated):
    model, enc = warm_policy()
    cfg = GRPOConfig(**REAL, format_weight=0.5, gated=gated)
    step = run(model, enc, cfg)
    b = step.batch
    correct = torch.tensor([rewards.correctness_reward(t, p.answer) for t, p in zip(b.texts, b.problems)])
    fmt = torch.tensor([rewards.format_reward(t) for t in b.texts])
    assert ((fmt == 1) & (correct == 0)).any() and ((fmt == 1) & (correct == 1)).any()
    paid = fmt * correct if gated else fmt
    assert torch.equal(b.rewards["format_paid"], paid)
    assert_grad(step.updates[0], on_policy_grad(step, cfg, r=correct + 0.5 * paid))


@pytest.mark.parametrize("cache", [0, 8])
def test_overlong_cache_penalises_the_last_tokens_linearly(warm_policy, cache):
    model, enc = warm_policy()
    cfg = GRPOConfig(**REAL, overlong_cache=cache)
    step = run(model, enc, cfg)
    b, L = step.batch, cfg.max_new_tokens
    n = completion(b).sum(1).double()  # completion tokens
    penalty = ((L - cache - n) / cache).clamp(-1, 0) if cache else torch.zeros_like(n)  # DAPO: 0 ... -1 at L
    assert not cache or ((penalty < 0) & (penalty > -1)).any() and (penalty == 0).any()
    if cache:
        torch.testing.assert_close(b.rewards["overlong"].double(), penalty)
    else:  # off: a term of 0 for every answer, logged as such (every term is logged at weight 0 too)
        assert (b.rewards["overlong"] == 0).all() and step.stats["reward_overlong"] == 0
    correct = torch.tensor([rewards.correctness_reward(t, p.answer) for t, p in zip(b.texts, b.problems)])
    assert_grad(step.updates[0], on_policy_grad(step, cfg, r=correct + penalty))


def test_reward_norm_gdpo_gives_the_advantages_of_a_known_reward_table(warm_policy, monkeypatch):
    """GDPO: each term normalised in its group, summed with its weight, then the sum normalised over the batch
    (NVlabs' code). In the first group the one correct answer gets what two wrong well-formatted ones get
    from the plain sum; GDPO ranks it above them."""
    correct = [1, 0, 0, 0, 1, 1, 0, 0, 0, 0, 0, 0]
    fmt = [0, 1, 1, 0, 1, 0, 1, 1, 1, 1, 1, 1]

    def z(xs):  # (x - mean) / (std + 1e-4), std with n - 1
        mean, sd = sum(xs) / len(xs), statistics.stdev(xs)
        return [(x - mean) / (sd + 1e-4) for x in xs]
    summed, plain = [], []
    for g in range(0, 12, 4):
        c, f = correct[g:g + 4], fmt[g:g + 4]
        summed += [a + b for a, b in zip(z(c), z(f))]
        plain += z([a + b for a, b in zip(c, f)])
    gdpo = z(summed)  # over the batch's 12 answers, not within each group
    assert plain[0] == plain[1] and gdpo[0] > gdpo[1] + 0.2
    assert summed[8:] == [0.0] * 4  # both terms constant in the last group: its sum 0, then shifted with the batch
    for norm, want in [("norm_then_sum", gdpo), ("sum_then_norm", plain)]:
        reward_table(monkeypatch, correct, fmt)
        model, enc = warm_policy()
        cfg = GRPOConfig(**BASE, format_weight=1.0, reward_norm=norm)
        step = run(model, enc, cfg, n_prompts=3)
        W = token_weights(completion(step.batch), cfg.loss_agg)
        assert_grad(step.updates[0], -torch.tensor(want, dtype=torch.float64)[:, None] * W)


# ---------------------------------------------------------------- advantages and sampling

@pytest.mark.parametrize("dynamic", [False, True])
def test_dynamic_sampling_trains_only_on_groups_whose_rewards_differ(warm_policy, monkeypatch, dynamic):
    # round 1: a group all right, a mixed one; round 2: a mixed one, one all wrong
    reward_table(monkeypatch, [1, 1, 1, 0, 0, 1, 0, 0])
    model, enc = warm_policy()
    cfg = GRPOConfig(**{**BASE, "group_size": 2}, dynamic_sampling=dynamic, max_sampling_rounds=3)
    step = run(model, enc, cfg, n_prompts=2)
    b = step.batch
    if dynamic:  # the mixed groups of both rounds, and nothing else; then it stopped drawing
        assert len(step.drawn) == 4 and b.problems == [step.drawn[1]] * 2 + [step.drawn[2]] * 2
        assert b.rewards["total"].tolist() == [1, 0, 0, 1]
    else:
        assert len(step.drawn) == 2 and b.rewards["total"].tolist() == [1, 1, 1, 0]
    assert step.stats["zero_std_frac"] == 0.5  # of all the groups sampled, kept or not
    assert_grad(step.updates[0], on_policy_grad(step, cfg))


@pytest.mark.parametrize("rounds", [1, 2])
def test_max_sampling_rounds_bounds_the_redraws(warm_policy, monkeypatch, rounds):
    reward_table(monkeypatch, [1, 1, 0, 0, 1, 0, 0, 1])  # round 1: no signal at all; round 2: two mixed groups
    model, enc = warm_policy()
    cfg = GRPOConfig(**{**BASE, "group_size": 2}, dynamic_sampling=True, max_sampling_rounds=rounds)
    step = run(model, enc, cfg, n_prompts=2)
    assert len(step.drawn) == 2 * rounds
    if rounds == 1:  # out of rounds with nothing kept: the round as sampled, whose advantages are all 0
        assert step.batch.rewards["total"].tolist() == [1, 1, 0, 0]
        assert not step.updates[0].grad.any()
    else:
        assert step.batch.problems == [step.drawn[2]] * 2 + [step.drawn[3]] * 2
        assert_grad(step.updates[0], on_policy_grad(step, cfg))
        assert step.updates[0].grad.abs().max() > 0


# ---------------------------------------------------------------- the objective, off-policy

OFF = dict(BASE, mu=2)  # the second epoch's update sees ratios far from 1 (Adam at 3e-3 on this tiny model)


def off_policy(warm_policy, cfg, **kw):
    """A mu = 2 step; its second update, that update's hand inputs (pi_theta and pi_old by
    plain log_softmax, the advantages from the rewards, the token weights), its ratios."""
    model, enc = warm_policy()
    step = run(model, enc, cfg, opt=torch.optim.Adam(model.parameters(), lr=3e-3), **kw)
    u, b = step.updates[1], step.batch
    lp, old = logprobs(u.policy, b, cfg.temperature, u.rows), logprobs(step.before, b, cfg.temperature, u.rows)
    A = advantages(b.rewards["total"], cfg.group_size, cfg.adv_norm)[u.rows]
    W = token_weights(completion(b)[u.rows], cfg.loss_agg, cfg.max_new_tokens)
    return step, u, lp, old, A, W, ((lp - old) * (W > 0)).exp()


def test_mu_runs_epochs_over_one_rollout_with_pi_old_fixed(warm_policy, table):
    cfg = GRPOConfig(**OFF)
    step, u, lp, old, A, W, r = off_policy(warm_policy, cfg)
    assert len(step.updates) == 2 and u.batch is step.batch and torch.equal(u.rows, step.updates[0].rows)
    m = W > 0
    torch.testing.assert_close(u.old[m].double(), old[m], rtol=1e-4, atol=1e-5)  # still the sampler's
    assert (r[m] - 1).abs().max() > 0.5  # the second epoch is off-policy
    assert_grad(u, pg_grad(lp, old, A, W, cfg))
    one = run(*warm_policy(), GRPOConfig(**BASE))
    assert len(one.updates) == 1


@pytest.mark.parametrize("flag", [dict(clip=0.1), dict(clip=float("inf"))])
def test_clip_zeroes_the_gradient_past_one_plus_minus_eps(warm_policy, table, flag):
    cfg = GRPOConfig(**OFF, **flag)
    step, u, lp, old, A, W, r = off_policy(warm_policy, cfg)
    m, A2 = W > 0, A[:, None].expand_as(W)
    outside = m & (((A2 > 0) & (r > 1.1)) | ((A2 < 0) & (r < 0.9)))  # where eps 0.1 stops the gradient
    assert outside.sum() >= 5
    assert_grad(u, pg_grad(lp, old, A, W, cfg))
    assert (u.grad[outside] == 0).all() == (cfg.clip == 0.1)
    assert (u.grad[m & ~outside] != 0).any()


@pytest.mark.parametrize("clip_high", [None, 0.5])
def test_clip_high_raises_only_the_upper_bound(warm_policy, table, clip_high):
    cfg = GRPOConfig(**OFF, clip=0.1, clip_high=clip_high)
    step, u, lp, old, A, W, r = off_policy(warm_policy, cfg)
    m, A2 = W > 0, A[:, None].expand_as(W)
    between = m & (A2 > 0) & (r > 1.1) & (r < 1.5)  # clipped at eps 0.1, not at eps_high 0.5
    low = m & (A2 < 0) & (r < 0.9)  # eps_low's side: clipped either way
    assert between.any() and low.any()
    assert_grad(u, pg_grad(lp, old, A, W, cfg))
    assert (u.grad[between] != 0).all() == (clip_high == 0.5) and (u.grad[low] == 0).all()


@pytest.mark.parametrize("c", [0.0, 1.5])
def test_dual_clip_bounds_negative_advantages_at_c(warm_policy, table, c):
    cfg = GRPOConfig(**OFF, clip=0.1, dual_clip=c)
    step, u, lp, old, A, W, r = off_policy(warm_policy, cfg)
    m, A2 = W > 0, A[:, None].expand_as(W)
    far = m & (A2 < 0) & (r > 1.5)  # PPO keeps these (wrong way); dual clip bounds them at c * A
    assert far.any()
    assert_grad(u, pg_grad(lp, old, A, W, cfg))
    assert (u.grad[far] == 0).all() == (c > 0) and (u.grad[far] != 0).all() == (c == 0)


@pytest.mark.parametrize("k", [0.0, 0.05])
def test_kl_cov_adds_the_sign_of_log_r_on_the_tokens_of_largest_covariance(warm_policy, table, k):
    """KL-Cov in a second update (no clip, so the rest is the plain ratio's gradient): the share k
    of the update's tokens with the largest (log pi - mean)(A - mean), from the log-probs and
    advantages the loss saw, get d |log pi - log pi_old| / d log pi = sign(log r) times their
    weight on top; every other token keeps the policy gradient alone."""
    cfg = GRPOConfig(**OFF, clip=float("inf"), kl_cov=k)
    step, u, lp, old, A, W, r = off_policy(warm_policy, cfg)
    real = W > 0
    a, l = u.adv[:, None].expand_as(u.logp)[real], u.logp[real]
    cov = (a - a.mean()) * (l - l.mean())  # the covariance in the loss's own float32
    top = torch.zeros_like(cov, dtype=torch.bool)
    top[cov.topk(max(1, int(k * cov.numel()))).indices] = k > 0
    picked = torch.zeros_like(real).masked_scatter(real, top)
    assert picked.sum() == (max(1, int(0.05 * real.sum())) if k else 0) and (cov[top] > 0).all()
    assert_grad(u, pg_grad(lp, old, A, W, cfg) + W * picked * torch.sign(lp - old), atol=1e-6)


@pytest.mark.parametrize("objective", ["ppo", "book", "cispo"])
def test_objective_sets_where_the_gradient_stops(warm_policy, table, objective):
    """PPO stops A < 0 tokens whose ratio fell below 1 - eps, the book's form those whose
    ratio grew past 1 + eps (for either sign), CISPO none (a clipped weight, not a zero)."""
    cfg = GRPOConfig(**OFF, clip=0.1, objective=objective)
    step, u, lp, old, A, W, r = off_policy(warm_policy, cfg)
    m, A2 = W > 0, A[:, None].expand_as(W)
    fell, grew = m & (A2 < 0) & (r < 0.9), m & (A2 < 0) & (r > 1.1)
    assert fell.any() and grew.any()
    assert_grad(u, pg_grad(lp, old, A, W, cfg))
    stopped = {"ppo": fell, "book": grew, "cispo": torch.zeros_like(m)}[objective]
    assert (u.grad[stopped] == 0).all() and (u.grad[(fell | grew) & ~stopped] != 0).all()
    if objective == "book":  # its clip fraction counts the tokens whose gradient it stops: r > 1 + eps, any A
        assert step.stats["clip_frac"] == pytest.approx(((r > 1.1) & m).sum().item() / m.sum().item() / 2)


@pytest.mark.parametrize("level", ["token", "gspo", "sequence"])
def test_ratio_level_is_per_token_or_per_sequence(warm_policy, table, level):
    cfg = GRPOConfig(**OFF, clip=0.5, ratio_level=level)
    step, u, lp, old, A, W, r = off_policy(warm_policy, cfg)
    want = pg_grad(lp, old, A, W, cfg)
    assert_grad(u, want, atol=1e-6)
    others = [pg_grad(lp, old, A, W, dataclasses.replace(cfg, ratio_level=x)) for x in ("token", "gspo", "sequence")]
    assert sum(bool(torch.allclose(o, want, atol=1e-6)) for o in others) == 1


@pytest.mark.parametrize("n_prompts,K,mu", [(4, 1, 2), (5, 2, 1), (6, 4, 2), (3, 3, 2)])
def test_minibatches_from_first_principles(warm_policy, table, n_prompts, K, mu):
    """K minibatches an epoch, none empty, sizes within one group of each other, every group
    exactly once an epoch, and pi_old the sampling policy's in every one of them."""
    model, enc = warm_policy()
    cfg = GRPOConfig(**{**BASE, "mu": mu, "minibatches": K})
    step = run(model, enc, cfg, n_prompts=n_prompts)
    G, m = cfg.group_size, completion(step.batch)
    assert len(step.updates) == K * mu
    for e in range(mu):
        epoch = step.updates[e * K:(e + 1) * K]
        groups = [sorted({int(i) // G for i in u.rows}) for u in epoch]
        for u, gs in zip(epoch, groups):
            assert gs and sorted(u.rows.tolist()) == [g * G + j for g in gs for j in range(G)]  # whole groups
        sizes = [len(gs) for gs in groups]
        assert max(sizes) - min(sizes) <= 1
        assert sorted(g for gs in groups for g in gs) == list(range(n_prompts))  # each group once
    old = logprobs(step.before, step.batch)
    for u in step.updates:
        torch.testing.assert_close(u.old[m[u.rows]].double(), old[u.rows][m[u.rows]], rtol=1e-4, atol=1e-5)


def test_resample_epochs_sample_the_same_prompts_again_from_the_frozen_pi_old(warm_policy, table):
    model, enc = warm_policy()
    cfg = GRPOConfig(**OFF, resample_epochs=True)
    step = run(model, enc, cfg, opt=torch.optim.Adam(model.parameters(), lr=3e-3))
    first, second = step.updates[0].batch, step.updates[1].batch
    assert first is step.batch and second is not first
    assert second.problems == first.problems  # the same prompts, in the same groups
    assert [t for t in second.texts] != [t for t in first.texts]  # fresh answers
    m = completion(second)
    frozen, updated = logprobs(step.before, second), logprobs(step.updates[1].policy, second)
    torch.testing.assert_close(second.sampler_logp[m].double(), frozen[m], rtol=1e-4, atol=1e-5)  # drawn by pi_old
    assert (updated[m] - frozen[m]).abs().max() > 0.1  # not by the updated policy
    torch.testing.assert_close(step.updates[1].old[m].double(), frozen[m], rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(step.updates[1].adv.double(), advantages(second.rewards["total"], 4))
    (old_pass,) = [p for p in step.passes if p[1] is second]  # pi_old's pass over the new rollouts:
    assert old_pass[0] is not model  # the frozen copy, not the policy being trained
    reuse = run(*warm_policy(), GRPOConfig(**OFF))
    assert reuse.updates[1].batch is reuse.batch  # without the flag: the one rollout, again


def test_rollout_lag_trains_on_the_batch_sampled_k_steps_ago_with_the_policy_that_sampled_it_as_pi_old(
        warm_policy, table):
    """--rollout-lag 1 over three steps, one queue: each step samples its own problems with the policy of
    the moment (its seed as without the flag) and scores them at once; step 1 trains on its own batch (lag
    0: the on-policy step), steps 2 and 3 on the batch of the step before, pi_old the policy that sampled
    it (not the current one: the first update's ratio is off 1), with the clipped objective's gradient there."""
    model, enc = warm_policy()
    cfg, opt = GRPOConfig(**BASE, rollout_lag=1), torch.optim.Adam(model.parameters(), lr=3e-3)
    lagged, steps, sampled = collections.deque(), [], []
    for seed in (1, 2, 3):
        steps.append(run(model, enc, cfg, seed=seed, opt=opt, lagged=lagged))
        sampled.append(lagged[-1][0])  # the batch this step drew (the newest in the queue)
    for s, b in zip(steps, sampled):
        assert b.problems[::4] == s.drawn and b.rewards["total"].tolist() == TABLE
        m = completion(b)
        torch.testing.assert_close(b.sampler_logp[m].double(), logprobs(s.before, b)[m], rtol=1e-4, atol=1e-5)
        torch.testing.assert_close(b.pi_old_logp[m].double(), logprobs(s.before, b)[m], rtol=1e-4, atol=1e-5)
        assert len(s.passes) == 1 and s.passes[0][1] is b  # one no-grad pass a step: the new batch's, as drawn
    on = run(*warm_policy(), GRPOConfig(**BASE))  # the flag off, from the same start: step 1 as it is on-policy
    assert steps[0].batch is sampled[0] and torch.equal(on.batch.tokens, sampled[0].tokens)
    assert_grad(steps[0].updates[0], on_policy_grad(on, cfg))
    assert [s.stats["rollout_lag"] for s in steps] == [0, 1, 1] and "rollout_lag" not in on.stats
    for before, s, trained in zip(steps, steps[1:], sampled):  # steps 2 and 3: the batch of the step before
        u, m = s.updates[0], completion(trained)
        assert s.batch is trained and u.batch is trained and s.drawn != trained.problems[::4]
        lp, old = logprobs(u.policy, trained), logprobs(before.before, trained)
        torch.testing.assert_close(u.old[m].double(), old[m], rtol=1e-4, atol=1e-5)  # pi_old: the sampler's
        assert ((lp - old)[m].exp() - 1).abs().max() > 0.05  # the learner has moved on since
        A, W = advantages(trained.rewards["total"], 4), token_weights(m, cfg.loss_agg, cfg.max_new_tokens)
        assert_grad(u, pg_grad(lp, old, A, W, cfg))


def test_lag_pi_old_learner_makes_pi_old_the_learner_at_the_step_and_the_tis_weights_the_stale_samplers(
        warm_policy, table):
    """--rollout-lag 1 --lag-pi-old learner (decoupled PPO, AReaL): steps 2 and 3 train on the batch of the step
    before, but pi_old is the learner as the step found it, so the first update's ratio is 1 (its own forward),
    while each token's TIS weight is min(pi_old / pi_sampler, C) against the stale sampler that drew it, and the
    sampler's weights are never scored again (no pi_old_logp)."""
    model, enc = warm_policy()
    cfg, opt = GRPOConfig(**BASE, rollout_lag=1, lag_pi_old="learner", tis_cap=2.0), \
        torch.optim.Adam(model.parameters(), lr=3e-3)
    lagged, steps, sampled = collections.deque(), [], []
    for seed in (1, 2, 3):
        steps.append(run(model, enc, cfg, seed=seed, opt=opt, lagged=lagged))
        sampled.append(lagged[-1][0])
    assert all(b.pi_old_logp is None for b in sampled)
    assert not any(s.passes for s in steps)  # pi_old: the learner's first update on that batch, its own forward
    for before, s, trained in zip(steps, steps[1:], sampled):
        u, m = s.updates[0], completion(trained)
        assert s.batch is trained and u.batch is trained
        lp, stale = logprobs(u.policy, trained), logprobs(before.before, trained)
        torch.testing.assert_close(u.old[m].double(), lp[m], rtol=1e-4, atol=1e-5)  # pi_old: the learner now
        torch.testing.assert_close(trained.sampler_logp[m].double(), stale[m], rtol=1e-4, atol=1e-5)
        w = (lp - stale).exp().clamp(max=cfg.tis_cap)  # (B, T) pi_old / the stale sampler, capped
        assert (w[m] - 1).abs().max() > 0.05 and (w[m] == cfg.tis_cap).any()  # stale enough to weigh and cap
        A, W = advantages(trained.rewards["total"], 4), token_weights(m, cfg.loss_agg, cfg.max_new_tokens)
        assert_grad(u, -A[:, None] * w * W)  # ratio 1: the clip is idle, each token's term weighted by w


@pytest.mark.parametrize("minibatches", [1, 2])
@pytest.mark.parametrize("lag_pi_old", ["sampler", "learner"])
def test_tis_and_the_off_policy_mask_act_by_their_formulas_in_every_update_of_a_lagged_step(
        warm_policy, table, lag_pi_old, minibatches):
    """--rollout-lag 1, mu 2, sampled at T 1.6 and learnt at T 1, two steps on one queue: in every update of both
    steps, each token's TIS weight is min(pi_old / pi_sampler, C) and the off-policy mask drops the negative
    answers whose mean log pi_sampler - log pi_theta passes delta. pi_sampler: the policy that sampled the batch,
    at T 1.6; pi_old as --lag-pi-old defines it (sampler: that policy at T 1, its log-probs taken when it sampled;
    learner: the learner as the step found it); pi_theta: the update's own. From the second update on pi_theta
    has left pi_old, so a weight or a mask taken from the wrong pair of policies gives other numbers there (the
    test asserts that it does before checking)."""
    model, enc = warm_policy()
    cfg = GRPOConfig(**{**BASE, "mu": 2, "minibatches": minibatches}, rollout_lag=1, lag_pi_old=lag_pi_old,
                     tis_cap=2.0, off_policy_mask=1.0, temperature=1.6, learner_temperature=1.0)
    opt, lagged, steps, sampled = torch.optim.Adam(model.parameters(), lr=3e-3), collections.deque(), [], []
    for seed in (1, 2):
        steps.append(run(model, enc, cfg, seed=seed, opt=opt, lagged=lagged))
        sampled.append(lagged[-1][0])
    batch, sampler = sampled[0], steps[0].before  # lags 0, then 1: both steps train on the first step's batch
    m, A = completion(batch), advantages(batch.rewards["total"], 4)
    pi_sampler = logprobs(sampler, batch, 1.6)  # (B, T) what drew each token
    torch.testing.assert_close(batch.sampler_logp[m].double(), pi_sampler[m], rtol=1e-4, atol=1e-5)
    tis_pairs_differ, mask_pairs_differ, seen = False, False, collections.Counter()
    for s in steps:
        assert s.batch is batch and len(s.updates) == 2 * minibatches
        pi_old = logprobs(sampler if lag_pi_old == "sampler" else s.before, batch, 1.0)  # (B, T)
        masked = []
        for u in s.updates:
            mu = m[u.rows]
            lp, old, q = logprobs(u.policy, batch, 1.0, u.rows), pi_old[u.rows], pi_sampler[u.rows]
            torch.testing.assert_close(u.old[mu].double(), old[mu], rtol=1e-4, atol=1e-5)
            w = (old - q).exp().clamp(max=cfg.tis_cap)  # (b, T) min(pi_old / pi_sampler, C)
            far = ((q - lp) * mu).sum(1) / mu.sum(1)  # (b,) each answer's mean log pi_sampler - log pi_theta
            neg = A[u.rows] < 0  # (b,)
            assert (far[neg] - cfg.off_policy_mask).abs().min() > 1e-3  # no negative answer on the edge
            keep = ~(neg & (far > cfg.off_policy_mask))  # (b,)
            # the wrong pairs: pi_theta / pi_sampler for the weight, pi_old against the sampler for the mask
            tis_pairs_differ |= bool(((lp - q).exp().clamp(max=cfg.tis_cap) - w)[mu].abs().max() > 0.05)
            far_old = ((q - old) * mu).sum(1) / mu.sum(1)
            mask_pairs_differ |= not torch.equal(keep, ~(neg & (far_old > cfg.off_policy_mask)))
            W = token_weights(mu, cfg.loss_agg, cfg.max_new_tokens)
            assert_grad(u, pg_grad(lp, old, A[u.rows] * keep, W, cfg) * w, atol=1e-6)
            masked.append((~keep).double().mean().item())
            seen.update(capped=int((w[mu] == cfg.tis_cap).sum()), dropped=int((~keep).sum()),
                        kept_negatives=int((neg & keep).sum()))
        assert s.stats["off_policy_masked_frac"] == pytest.approx(sum(masked) / len(masked), rel=1e-6)
    assert tis_pairs_differ and mask_pairs_differ  # the test reached updates where the wrong pairs give other numbers
    assert min(seen[k] for k in ("capped", "dropped", "kept_negatives")) > 0, seen  # the cap and the mask both acted


@pytest.mark.parametrize("C", [0.0, 1.0])
def test_adv_clip_clamps_each_advantage_to_plus_minus_c(warm_policy, table, C):
    """--adv-clip C: the update's advantages are the group's, clamped to [-C, C] (0: off). TABLE's group
    [0, 0, 0, 1] gives its right answer (1 - 0.25) / 0.5 = 1.5, so a clamp at 1 acts here."""
    model, enc = warm_policy()
    cfg = GRPOConfig(**BASE, adv_clip=C)
    step = run(model, enc, cfg)
    A = advantages(step.batch.rewards["total"], 4)
    want = A.clamp(-C, C) if C > 0 else A
    assert (A.abs() > 1.4).any()  # something for the clamp to act on
    torch.testing.assert_close(step.updates[0].adv.double(), want, rtol=1e-4, atol=1e-6)
    assert_grad(step.updates[0], -want[step.updates[0].rows, None] * token_weights(completion(step.batch)))


@pytest.mark.parametrize("truncated", [False, True])
def test_mask_truncated_gives_cut_off_answers_no_weight(warm_policy, table, truncated):
    model, enc = warm_policy()
    cfg = GRPOConfig(**{**BASE, "max_new_tokens": 8}, mask_truncated=truncated)
    step = run(model, enc, cfg)
    b = step.batch
    A = advantages(b.rewards["total"], 4)
    cut = b.truncated
    assert (cut & (A != 0)).any() and (~cut & (A != 0)).any()
    mask = completion(b) & ~cut[:, None] if truncated else completion(b)
    assert_grad(step.updates[0], on_policy_grad(step, cfg, mask=mask))
    assert (step.updates[0].grad[cut].abs().sum(1) > 0).any() != truncated


# ---------------------------------------------------------------- KL to the reference

def kl_grad(lp, old, ref, W, cfg):
    """(b, T) d(beta * KL term)/d logp_t by hand, with lr = log pi_ref - log pi:
    k1 = -lr, k2 = lr^2 / 2, k3 = e^lr - 1 - lr (k3+: its value, k2's derivative); per token, or of the summed log-probs
    (the book); --kl-reweight multiplies by the ratio r, whose own gradient is r."""
    m = W > 0
    k3 = lambda x: x.exp() - 1 - x  # noqa: E731
    f = {"k1": lambda x: -x, "k2": lambda x: x * x / 2, "k3": k3, "k3+": k3}[cfg.kl_estimator]
    df = {"k1": lambda x: 1 + 0 * x, "k2": lambda x: -x, "k3": lambda x: 1 - x.exp(),  # d/dlogp
          "k3+": lambda x: -x}[cfg.kl_estimator]  # k3+: k3's value, k2's derivative
    if cfg.kl_level == "token":
        x, w = (ref - lp).double(), W
        r = ((lp - old).double() * m).exp()
    else:  # one estimate per sequence, counted once per token by the aggregation
        x, w = ((ref - lp).double() * m).sum(1, keepdim=True), W.sum(1, keepdim=True)
        r = ((lp - old).double() * m).sum(1, keepdim=True).exp()
    g = df(x) * r + f(x) * r if cfg.kl_reweight else df(x)
    value = (f(x) * r if cfg.kl_reweight else f(x)) * w
    return cfg.kl * g * w * m, value.sum()


@pytest.mark.parametrize("flag", [dict(kl=0.0), dict(kl=0.5), dict(kl=0.5, kl_estimator="k1"),
                                  dict(kl=0.5, kl_estimator="k2"), dict(kl=0.5, kl_level="sequence"),
                                  dict(kl=0.5, kl_level="sequence", kl_estimator="k1"),
                                  dict(kl=0.5, kl_reweight=True), dict(kl=0.5, kl_reweight=True, kl_level="sequence"),
                                  dict(kl=0.5, kl_estimator="k3+"), dict(kl=0.5, kl_estimator="k3+", kl_level="sequence")])
def test_kl_estimator_level_and_reweight_through_the_step(warm_policy, table, flag):
    """The first (on-policy) update's gradient is the policy gradient plus beta times the
    estimator's own, against a reference that differs from the policy; the logged kl is
    the estimate."""
    model, enc = warm_policy()
    ref = perturbed(model)
    cfg = GRPOConfig(**BASE, **flag)
    step = run(model, enc, cfg, ref=ref if cfg.kl > 0 else None)
    u, b = step.updates[0], step.batch
    lp, refp = logprobs(step.before, b), logprobs(ref, b)
    W = token_weights(completion(b), cfg.loss_agg)
    g, value = kl_grad(lp, lp, refp, W, cfg)
    assert_grad(u, on_policy_grad(step, cfg) + g, atol=1e-6)
    if cfg.kl > 0:
        assert step.stats["kl"] == pytest.approx(value.item(), rel=1e-4)
        plain, _ = kl_grad(lp, lp, refp, W, GRPOConfig(kl=0.5))  # k3 per token, not reweighted
        assert (g - plain).abs().max() > 1e-3 or flag == dict(kl=0.5)  # each variant changes the gradient here
    else:
        assert "kl" not in step.stats and not step.passes  # beta = 0: no reference; pi_old, the first update's own


@pytest.mark.parametrize("level", ["token", "sequence"])
def test_exact_kl_logs_the_kl_over_the_whole_vocabulary_and_changes_nothing_else(warm_policy, table, level):
    """--exact-kl: the first update logs kl_exact, sum_v pi (log pi - log pi_ref) at every sampled
    position by a plain log_softmax of the full logits (summed over each answer for the sequence
    level), aggregated as the term; the gradient is the one without it."""
    model, enc = warm_policy()
    ref = perturbed(model)
    cfg = GRPOConfig(**{**BASE, "group_size": 4}, kl=0.5, kl_level=level, exact_kl=True)
    step = run(model, enc, cfg, ref=ref)
    b, m = step.batch, completion(step.batch)
    lp_all = logits_of(step.before, b, 1.0).log_softmax(-1)  # (B, T, V) float64
    ref_all = logits_of(ref, b, 1.0).log_softmax(-1)
    per_token = (lp_all.exp() * (lp_all - ref_all)).sum(-1) * m  # (B, T)
    per_answer = per_token.sum(1) if level == "sequence" else per_token.sum(1) / m.sum(1).clamp(min=1)
    assert step.stats["kl_exact"] == pytest.approx(per_answer.mean().item(), rel=1e-4)
    without = run(copy.deepcopy(step.before), enc, dataclasses.replace(cfg, exact_kl=False), ref=ref)
    assert "kl_exact" not in without.stats
    torch.testing.assert_close(step.updates[0].grad, without.updates[0].grad)


# ---------------------------------------------------------------- entropy bonus, fused head

def mean_entropy(model, batch, T=1.0):
    return entropies(model, batch, T)[completion(batch)].mean().item()


@pytest.mark.parametrize("alpha", [0.0, 0.5])
def test_entropy_coef_is_a_bonus_the_step_raises_the_entropy(warm_policy, table, alpha):
    """With plain SGD the bonus adds lr * alpha * grad H to the update, so the policy after
    the step is more entropic, on the very tokens it trained on, than after the same step without."""
    steps = []
    for a in (0.0, alpha):
        model, enc = warm_policy()
        cfg = GRPOConfig(**BASE, entropy_coef=a, max_grad_norm=float("inf"))
        steps.append((run(model, enc, cfg, opt=torch.optim.SGD(model.parameters(), lr=0.5)), model))
    (without, after0), (step, after) = steps
    assert torch.equal(step.batch.tokens, without.batch.tokens)
    u, W = step.updates[0], token_weights(completion(step.batch))
    if alpha:  # d loss / d H_t = -alpha * (the token's weight): a bonus, not a penalty
        torch.testing.assert_close(u.entropy_grad.double(), -alpha * W)
        assert mean_entropy(after, step.batch) > mean_entropy(after0, step.batch) + 1e-3
        assert step.stats["entropy_bonus"] == pytest.approx(
            (entropies(step.before, step.batch) * W).sum().item(), rel=1e-4)
    else:
        assert u.entropy_grad is None and "entropy_bonus" not in step.stats
    assert_grad(u, on_policy_grad(step, cfg))  # the policy gradient itself is unchanged


@pytest.mark.parametrize("path, kernel", [("fused", "linear_logprobs_and_entropy"),
                                          ("logits", "token_logprobs_and_entropy"),
                                          ("textbook", "reference_logprobs_and_entropy"),
                                          ("auto", "reference_logprobs_and_entropy")])  # auto: the textbook on a CPU
def test_logprobs_takes_the_path_it_names(warm_policy, table, monkeypatch, path, kernel):
    """--logprobs fused: every learner pass goes through linear_logprobs_and_entropy (hidden states and head weight
    in, no (n, V) logits out); logits: the kernels on the logits; textbook: log_softmax and gather on them; auto, at
    this vocabulary on a CPU: the textbook. The same numbers each way."""
    calls = []
    for name in ("linear_logprobs_and_entropy", "token_logprobs_and_entropy", "reference_logprobs_and_entropy"):
        real = getattr(grpo, name)
        monkeypatch.setattr(grpo, name, lambda *a, _real=real, _name=name, **k: calls.append(_name) or _real(*a, **k))
    model, enc = warm_policy()
    cfg = GRPOConfig(**{**BASE, "minibatches": 2}, kl=0.1, logprobs=path)
    step = run(model, enc, cfg, ref=perturbed(model))
    assert len(calls) == 4  # pi_ref, pi_old, and pi_theta in two minibatches
    assert set(calls) == {kernel}
    m = completion(step.batch)
    for u in step.updates:
        torch.testing.assert_close(u.logp[m[u.rows]].double(), logprobs(u.policy, step.batch, 1.0, u.rows)[m[u.rows]],
                                   rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("share", [True, False])
def test_share_prompts_runs_each_groups_prompt_once_with_the_same_numbers(warm_policy, table, monkeypatch, share):
    """share_prompts: every learner pass hands the model the batch's groups (one prompt pass a group);
    off, none does. Either way each update's log-probs are the plain forward's, up to rounding."""
    seen = []
    model, enc = warm_policy()
    real = type(model).hidden_shared_prompts
    monkeypatch.setattr(type(model), "hidden_shared_prompts", lambda *a: seen.append(a[3:]) or real(*a))
    cfg = GRPOConfig(**{**BASE, "minibatches": 2}, kl=0.1, share_prompts=share)
    step = run(model, enc, cfg, ref=perturbed(model))
    assert seen == ([(step.batch.prompt_len, cfg.group_size)] * 4 if share else [])  # pi_ref, pi_old, 2 updates
    m = completion(step.batch)
    for u in step.updates:
        torch.testing.assert_close(u.logp[m[u.rows]].double(), logprobs(u.policy, step.batch, 1.0, u.rows)[m[u.rows]],
                                   rtol=1e-4, atol=1e-5)


# ---------------------------------------------------------------- off-policy corrections

@pytest.mark.parametrize("cap", [0.0, 1.2])
def test_tis_cap_weights_each_token_by_the_capped_learner_to_sampler_ratio(warm_policy, table, cap):
    """Sampled at T 1.6, learnt at T 1: each token's weight is min(pi_old / pi_sampler, C)."""
    model, enc = warm_policy()
    cfg = GRPOConfig(**BASE, temperature=1.6, learner_temperature=1.0, tis_cap=cap)
    step = run(model, enc, cfg)
    b, m = step.batch, completion(step.batch)
    ratio = (logprobs(step.before, b, 1.0) - logprobs(step.before, b, 1.6)).exp()  # pi_old / pi_sampler
    assert (ratio[m] > 1.3).sum() >= 5 and (ratio[m] < 1.0).sum() >= 5  # the cap is reached, and not everywhere
    weight = ratio.clamp(max=cap) if cap else torch.ones_like(ratio)
    assert_grad(step.updates[0], on_policy_grad(step, cfg) * weight)
    assert step.stats["tis_weight_max"] == pytest.approx(ratio[m].max().item(), rel=1e-4)  # logged uncapped


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_sampler_dtype_draws_from_bf16_weights_beside_the_fp32_learner(warm_policy, table, dtype):
    """bfloat16: the answers and their sampler log-probs come from the weights rounded to bf16,
    the learner's log-probs and gradient from the fp32 weights: a gap from rounding alone."""
    model, enc = warm_policy()
    cfg = GRPOConfig(**BASE, sampler_dtype=dtype)
    step = run(model, enc, cfg)
    b, m = step.batch, completion(step.batch)
    rounded = copy.deepcopy(step.before).to(torch.bfloat16)
    drew_with = logprobs(rounded if dtype == "bfloat16" else step.before, b, 1.0)  # full forward, float64 softmax
    learner = logprobs(step.before, b, 1.0)
    if dtype == "bfloat16":  # bf16 rounds each op: the cached decode and a full forward round in other orders,
        # so the sampler matches the bf16 forward up to that, and is far nearer to it than to the fp32 weights
        near, far = ((b.sampler_logp[m].double() - x[m]).abs() for x in (drew_with, learner))
        assert near.max() < 0.1 and near.mean() < 0.5 * far.mean()
    else:
        torch.testing.assert_close(b.sampler_logp[m].double(), drew_with[m], rtol=0, atol=1e-5)
    torch.testing.assert_close(step.updates[0].logp[m].double(), learner[m], rtol=1e-4, atol=1e-5)  # fp32 learner
    gap = (learner - b.sampler_logp.double())[m].abs()
    assert (gap.mean() > 1e-3) == (dtype == "bfloat16") and next(model.parameters()).dtype == torch.float32
    assert_grad(step.updates[0], on_policy_grad(step, cfg))


@pytest.mark.parametrize("dtype", ["int8", "fp8"])
def test_sampler_dtype_draws_from_8bit_weights_beside_the_fp32_learner(warm_policy, table, dtype):
    """int8 / fp8: the answers and their sampler log-probs come from every weight matrix
    rounded to 8 bits per output channel (a full forward of that copy gives the same log-probs),
    the learner's from the fp32 weights; the gap is larger than bf16's rounding."""
    model, enc = warm_policy()
    cfg = GRPOConfig(**BASE, sampler_dtype=dtype)
    step = run(model, enc, cfg)
    b, m = step.batch, completion(step.batch)
    quantized = copy.deepcopy(step.before)
    with torch.no_grad():
        for w in quantized.parameters():
            if w.dim() == 2:
                w.copy_(rollouts.fake_quantize(w, dtype))
    torch.testing.assert_close(b.sampler_logp[m].double(), logprobs(quantized, b, 1.0)[m], rtol=0, atol=1e-5)
    learner = logprobs(step.before, b, 1.0)
    torch.testing.assert_close(step.updates[0].logp[m].double(), learner[m], rtol=1e-4, atol=1e-5)  # fp32 learner
    assert (learner - b.sampler_logp.double())[m].abs().mean() > 1e-3
    assert_grad(step.updates[0], on_policy_grad(step, cfg))


def test_dropout_is_off_in_the_sampler_and_on_in_the_learner(warm_policy, table):
    """--dropout: the answers and their sampler log-probs come from the policy in eval mode (no
    dropout), the learner's first update from a training-mode forward that drops."""
    from model import set_dropout
    model, enc = warm_policy()
    set_dropout(model, 0.3)
    step = run(model, enc, GRPOConfig(**BASE))
    b, m = step.batch, completion(step.batch)
    torch.testing.assert_close(b.sampler_logp[m].double(), logprobs(step.before.eval(), b, 1.0)[m], rtol=0, atol=1e-5)
    assert (step.updates[0].logp[m].double() - b.sampler_logp[m].double()).abs().mean() > 1e-2


@pytest.mark.parametrize("dtype, levels", [("int8", 127), ("fp8", None)])
def test_fake_quantize_rounds_each_row_to_its_own_8bit_grid(dtype, levels):
    torch.manual_seed(0)
    w = torch.randn(7, 33) * torch.logspace(-3, 1, 7)[:, None]  # rows of very different scales
    q = rollouts.fake_quantize(w, dtype)
    amax = w.abs().amax(1, keepdim=True)
    torch.testing.assert_close(q.abs().amax(1, keepdim=True), amax)  # each row's largest value is kept exactly
    if levels:  # int8: every value on its row's grid of amax / 127, at most half a step away
        steps = q / (amax / levels)
        torch.testing.assert_close(steps, steps.round(), rtol=0, atol=1e-4)
        assert ((q - w).abs() <= amax / levels / 2 + 1e-7).all()
    else:  # fp8 e4m3: 3 mantissa bits, a relative error of at most 2^-4 away from zero
        scaled = q / (amax / 448)
        torch.testing.assert_close(scaled.to(torch.float8_e4m3fn).float(), scaled, rtol=1e-6, atol=1e-6)
        big = w.abs() > amax * 2 ** -6
        assert ((q - w).abs()[big] <= w.abs()[big] * 2 ** -4 + 1e-7).all()
    assert not torch.equal(q, w)


@pytest.mark.parametrize("keep", [False, True])
def test_keep_sampling_mask_makes_the_learners_logprobs_the_samplers(warm_policy, table, keep):
    model, enc = warm_policy()
    cfg = GRPOConfig(**{**BASE, "minibatches": 2}, top_p=0.6, keep_sampling_mask=keep)
    step = run(model, enc, cfg)
    b, m = step.batch, completion(step.batch)
    support = nucleus(step.before, b, top_p=0.6)
    assert support.sum(-1)[m].float().mean() < support.shape[-1] / 4
    for u in step.updates:  # pi_theta, and pi_old from its pass, both over the sampler's support (or not)
        mu = m[u.rows]
        want_theta = logprobs(u.policy, b, rows=u.rows, support=support if keep else None)
        want_old = logprobs(step.before, b, rows=u.rows, support=support if keep else None)
        torch.testing.assert_close(u.logp[mu].double(), want_theta[mu], rtol=1e-4, atol=1e-5)
        torch.testing.assert_close(u.old[mu].double(), want_old[mu], rtol=1e-4, atol=1e-5)
    first = step.updates[0]
    gap = (first.logp - b.sampler_logp[first.rows])[m[first.rows]].abs().max().item()
    assert (gap < 1e-4) == keep  # learner = sampler exactly when the support is kept
    assert (step.stats["sampler_gap"] < 1e-5) == keep


def test_off_policy_mask_drops_the_negative_sequences_far_from_the_sampler(warm_policy, table):
    """Sampled with top-p 0.6, learnt over the full vocabulary: each sequence's KL from the
    sampler is the mean of log pi_sampler - log pi; the negative ones past delta get no weight."""
    cfg = GRPOConfig(**BASE, top_p=0.6)
    off = run(*warm_policy(), cfg)
    b, m = off.batch, completion(off.batch)
    kl = ((b.sampler_logp.double() - logprobs(off.before, b)) * m).sum(1) / m.sum(1)  # (B,)
    A = advantages(b.rewards["total"], 4)
    neg = sorted(set(kl[A < 0].tolist()))  # (equal answers have equal KLs)
    delta = (neg[len(neg) // 2 - 1] + neg[len(neg) // 2]) / 2  # about half of the negative sequences are past it
    drop = (A < 0) & (kl > delta)
    assert (kl - delta).abs().min() > 1e-4  # no sequence on the edge
    assert drop.sum() >= 2 and ((A < 0) & ~drop).sum() >= 2 and (kl[A > 0] > delta).any()  # positives never drop
    assert_grad(off.updates[0], on_policy_grad(off, cfg))  # off (delta = inf): every sequence has its weight
    on = run(*warm_policy(), dataclasses.replace(cfg, off_policy_mask=delta))
    assert torch.equal(on.batch.tokens, b.tokens)
    assert_grad(on.updates[0], on_policy_grad(on, cfg) * (~drop)[:, None])
    assert on.stats["off_policy_masked_frac"] == pytest.approx(drop.double().mean().item())


# ---------------------------------------------------------------- optimisation

def flat(model):
    return torch.cat([p.detach().flatten() for p in model.parameters()])


@pytest.mark.parametrize("max_norm", [float("inf"), 0.01])
def test_max_grad_norm_caps_the_norm_of_the_update(warm_policy, table, max_norm):
    """With SGD at lr 1 the update is minus the clipped gradient: its norm is the logged
    gradient norm, or max_grad_norm where that is smaller."""
    model, enc = warm_policy()
    start = flat(model)
    step = run(model, enc, GRPOConfig(**BASE, max_grad_norm=max_norm), opt=torch.optim.SGD(model.parameters(), lr=1.0))
    moved = (flat(model) - start).norm().item()
    assert step.stats["grad_norm"] > 0.1
    assert moved == pytest.approx(min(step.stats["grad_norm"], max_norm), rel=1e-3)


def test_lr_is_the_size_of_adams_first_step(tiny_warm, table, tmp_path):
    """cfg.lr reaches the optimizer train.py builds: Adam's first update moves each weight
    by lr * g / (|g| + 1e-8), so the largest move is lr (not Adam's default 1e-3, nor ours)."""
    from harness import cli
    import train
    run_dir = train.main(cli.get_parser().parse_args([
        "--init", tiny_warm[0], "--runs-dir", str(tmp_path), "--run-name", "lr", "--level", "easy", "--steps", "1",
        "--prompts-per-step", "6", "--group-size", "4", "--max-new-tokens", "12", "--eval-size", "4", "--mu", "1",
        "--threads", "1", "--lr", "3e-3"]))
    before = torch.load(tiny_warm[0], weights_only=True)["model"]
    after = torch.load(tmp_path / "lr" / "ckpt_latest.pt", weights_only=True)["model"]
    moves = torch.cat([(after[k] - before[k]).abs().flatten() for k in before])
    assert moves.max().item() == pytest.approx(3e-3, rel=1e-3) and run_dir.endswith("lr")


# ---------------------------------------------------------------- the field past the chapter (field_methods.py)

def field_grad(lp, old, sampler, A, W, cfg):
    """(b, T) d loss / d logp_t of the field's objectives, written out from their papers (tests/test_field.py has
    each on a hand-made case): SAPO's gate derivative 4 r s (1 - s), GMPO's geometric mean of log-clipped ratios,
    DPPO's detached pi / mu on the tokens inside its trust region, VESPO's Gamma weight of the whole answer."""
    eps_low, eps_high = cfg.clip, cfg.clip if cfg.clip_high is None else cfg.clip_high
    A, m = A[:, None].double(), W > 0
    log_r = (lp - old) * m
    if cfg.objective == "sapo":
        tau = torch.where(A > 0, cfg.sapo_tau_pos, cfg.sapo_tau_neg)
        s = torch.sigmoid(tau * (log_r.exp() - 1))
        return -A * 4 * log_r.exp() * s * (1 - s) * W
    if cfg.objective == "gmpo":
        clipped = log_r.clamp(-eps_low, eps_high)
        kept = torch.where(A > 0, torch.minimum(log_r, clipped), torch.maximum(log_r, clipped))
        ratio = ((kept * m).sum(1, keepdim=True) / m.sum(1, keepdim=True)).exp()  # (b, 1) the geometric mean
        flowing = (kept == log_r) & m
        return -A * ratio * flowing * W.sum(1, keepdim=True) / m.sum(1, keepdim=True)
    if cfg.objective.startswith("dppo"):
        pi, mu = lp.exp(), sampler.exp()
        if cfg.objective == "dppo_tv":
            out = torch.where(A > 0, pi - mu > eps_high, pi - mu < -eps_low)
        else:
            D = mu * (sampler - lp) + (1 - mu) * torch.log((1 - mu + 1e-8) / (1 - pi + 1e-8))
            out = torch.where(A > 0, (D > eps_high) & (pi > mu), (D > eps_low) & (pi < mu))
        return -A * (lp - sampler).exp() * (~out & m) * W
    if cfg.objective == "vespo":
        k = torch.where(A >= 0, cfg.vespo_k_pos, cfg.vespo_k_neg)
        lam = torch.where(A >= 0, cfg.vespo_lambda_pos, cfg.vespo_lambda_neg)
        w = log_r.sum(1, keepdim=True).exp()  # (b, 1) the product of the answer's token ratios
        return -torch.exp(lam) * w ** k * torch.exp(-lam * w) * A * W
    raise ValueError(cfg.objective)


@pytest.mark.parametrize("flag", [dict(objective="sapo", sapo_tau_pos=0.5, sapo_tau_neg=4.0),
                                  dict(objective="gmpo", clip=0.1), dict(objective="dppo_tv", clip=0.02),
                                  dict(objective="dppo_kl", clip=0.005),
                                  dict(objective="vespo", loss_agg="token_mean", vespo_k_pos=1.5, vespo_lambda_pos=2.0,
                                       vespo_k_neg=4.0, vespo_lambda_neg=3.0)])
def test_the_fields_objectives_set_each_tokens_gradient_in_the_second_update(warm_policy, table, flag):
    """The second update of a mu = 2 step, whose ratios moved: each token's gradient is the one its objective's
    formula gives from the log-probs of pi_theta, pi_old and the sampler, and the objective's own decision
    acts on some tokens (SAPO's gate far from 1, GMPO's clip, DPPO's region, VESPO's weight far from 1)."""
    cfg = GRPOConfig(**OFF, **flag)
    step, u, lp, old, A, W, r = off_policy(warm_policy, cfg)
    sampler = step.batch.sampler_logp[u.rows].double()
    want = field_grad(lp, old, sampler, A, W, cfg)
    assert_grad(u, want, atol=1e-6)
    m, plain = W > 0, -A[:, None] * r * W  # the ratio's own gradient, as PPO inside its clip
    acted = ((want - plain).abs() > 0.05 * plain.abs()) & m
    assert acted.sum() >= 3 and (want != 0).any()
    if flag["objective"] in ("gmpo", "dppo_tv", "dppo_kl"):  # where the bound stops a token, logged as clipped
        assert ((want == 0) & m & (A[:, None] != 0)).any() and step.stats["clip_frac"] > 0


def lagged_pair(warm_policy, cfg):
    """Two steps of one run with --rollout-lag 1 --lag-pi-old learner: the second trains on the first's batch,
    sampled by a policy one step stale, with pi_old the learner at the step (ratio 1 in its first update) ->
    (that step, its first update, pi_theta's log-probs, the stale sampler's, A, W), the hand ones float64."""
    model, enc = warm_policy()
    opt, lagged = torch.optim.Adam(model.parameters(), lr=3e-3), collections.deque()
    first = run(model, enc, cfg, seed=1, opt=opt, lagged=lagged)
    second = run(model, enc, cfg, seed=2, opt=opt, lagged=lagged)
    u, b = second.updates[0], second.batch
    assert b is first.batch
    lp, stale = logprobs(u.policy, b, rows=u.rows), logprobs(first.before, b, rows=u.rows)
    A = advantages(b.rewards["total"], cfg.group_size, cfg.adv_norm)[u.rows]
    return second, u, lp, stale, A, token_weights(completion(b)[u.rows], cfg.loss_agg, cfg.max_new_tokens)


LAG_PAIR = dict(BASE, rollout_lag=1, lag_pi_old="learner")


@pytest.mark.parametrize("mode, floor, cap", [("token_truncate", 0.9, 1.1), ("token_mask", 0.9, 1.1),
                                              ("sequence_truncate", 0.3, 3.0), ("sequence_mask", 0.3, 3.0)])
def test_tis_floor_and_mode_truncate_or_mask_the_stale_samplers_weight(warm_policy, table, mode, floor, cap):
    """--tis-cap C --tis-floor F --tis-mode: with pi_old the learner and the sampler a step stale, each token's
    policy gradient is weighted by w = pi_old / pi_sampler (per token, or the product over its answer), clipped
    into [F, C] (truncate) or kept there and 0 outside (mask: IcePop, MIS); the band cuts both ways here."""
    cfg = GRPOConfig(**LAG_PAIR, tis_cap=cap, tis_floor=floor, tis_mode=mode)
    step, u, lp, stale, A, W = lagged_pair(warm_policy, cfg)
    m = W > 0
    log_w = (lp - stale) * m
    if mode.startswith("sequence"):
        log_w = log_w.sum(1, keepdim=True).expand_as(lp)
    w = log_w.exp()
    assert ((w < floor) & m).any() and ((w > cap) & m).any() and ((w > floor) & (w < cap) & m).any()
    weight = w.clamp(floor, cap) if mode.endswith("truncate") else torch.where((w >= floor) & (w <= cap), w, 0.0)
    assert_grad(u, -A[:, None] * weight * W, atol=1e-6)  # ratio 1: the clip is idle
    if mode.endswith("mask"):
        assert step.stats["is_masked_frac"] == pytest.approx((((weight == 0) & m).sum() / m.sum()).item(), abs=0.02)
    else:
        assert "is_masked_frac" not in step.stats


@pytest.mark.parametrize("rule, bound", [("token_k1", 1.05), ("token_k3", 0.001), ("seq_mean_k2", 1.0),
                                         ("seq_max_k3", 3.0)])
def test_rejection_takes_the_tokens_or_answers_far_from_the_stale_sampler_out_of_the_mask(warm_policy, table, rule,
                                                                                         bound):
    """--rejection RULE --rejection-bound U (verl's rollout_rs) with the sampler a step stale: the tokens (token_*)
    or whole answers (seq_*) whose k1 / k2 / k3 of log pi_old - log pi_sampler passes U leave the mask, so under
    the token mean the kept ones share the loss: each gets -A / (the number kept)."""
    cfg = GRPOConfig(**LAG_PAIR, loss_agg="token_mean", rejection=rule, rejection_bound=bound)
    step, u, lp, stale, A, W = lagged_pair(warm_policy, cfg)
    m = W > 0
    x = (lp - stale) * m  # log r
    d = {"k1": -x, "k2": x * x / 2, "k3": x.exp() - 1 - x}[rule[-2:]]
    if rule.startswith("seq_mean"):
        d = ((d * m).sum(1, keepdim=True) / m.sum(1, keepdim=True)).expand_as(d)
    elif rule.startswith("seq_max"):
        d = d.masked_fill(~m, -1.0).amax(1, keepdim=True).expand_as(d)
    kept = m & ((d.abs() <= math.log(bound)) if rule.endswith("k1") else (d <= bound))
    assert 0.1 < kept.sum() / m.sum() < 0.9  # the bound acts, and leaves something
    assert_grad(u, -A[:, None] * kept / kept.sum(), atol=1e-6)
    assert step.stats["rejected_frac"] == pytest.approx(1 - (kept.sum() / m.sum()).item(), abs=0.02)


@pytest.mark.parametrize("baseline", ["leave_one_out", "batch", "none"])
def test_baseline_rloo_and_reinforce_pp_give_the_updates_advantages(warm_policy, table, baseline):
    """--baseline: RLOO's r_i minus the mean of the other G - 1 of its group, undivided; REINFORCE++'s r_i
    whitened over the batch's tokens (each answer counted once per completion token); none's r_i itself
    (REINFORCE without a baseline). TABLE's constant group gets 0 from RLOO and an advantage from REINFORCE++."""
    model, enc = warm_policy()
    cfg = GRPOConfig(**BASE, baseline=baseline)
    step = run(model, enc, cfg)
    r, G = [float(x) for x in step.batch.rewards["total"]], cfg.group_size
    n = [int(k) for k in completion(step.batch).sum(1)]
    if baseline == "leave_one_out":
        want = [x - (sum(r[i - i % G:i - i % G + G]) - x) / (G - 1) for i, x in enumerate(r)]
    elif baseline == "none":
        want = r
    else:
        N = sum(n)
        mu = sum(k * x for k, x in zip(n, r)) / N
        sd = math.sqrt(sum(k * (x - mu) ** 2 for k, x in zip(n, r)) / (N - 1) + 1e-8)
        want = [(x - mu) / sd for x in r]
    want = torch.tensor(want, dtype=torch.float64)
    torch.testing.assert_close(step.updates[0].adv.double(), want, rtol=1e-5, atol=1e-6)
    assert_grad(step.updates[0], -want[:, None] * token_weights(completion(step.batch)))
    constant = [g for g in range(0, len(r), G) if len(set(r[g:g + G])) == 1]
    if baseline == "none":  # nothing subtracted: a right answer is pushed up whatever its group did
        assert min(r) == 0 < max(r) and all(a == x for a, x in zip(want.tolist(), r))
    else:
        assert constant and (want[constant[0]:constant[0] + G].abs().max() > 0.1) == (baseline == "batch")


def test_top_entropy_quantile_keeps_the_policy_gradient_on_the_high_entropy_tokens(warm_policy, table):
    """--top-entropy-quantile 0.3 (the 80/20 rule): of the update's completion tokens, only those whose learner
    entropy is at least the 0.7-quantile keep their policy gradient; the others count in the answer's mean."""
    model, enc = warm_policy()
    cfg = GRPOConfig(**BASE, top_entropy_quantile=0.3)
    step = run(model, enc, cfg)
    m = completion(step.batch)
    H = entropies(step.before, step.batch)
    tau = torch.quantile(H[m], 0.7)
    edge = m & ((H - tau).abs() < 1e-4)  # a group's equal answers tie: float32 may put them on either side
    keep = m & (H >= tau)
    assert 0.25 < keep.sum() / m.sum() < 0.45
    u, want = step.updates[0], on_policy_grad(step, cfg)
    torch.testing.assert_close(u.grad.double()[~edge], (want * keep)[~edge], rtol=1e-4, atol=1e-7)
    assert all(g == 0 or abs(g - w) < 1e-6 for g, w in zip(u.grad.double()[edge].tolist(), want[edge].tolist()))


def test_top_entropy_random_keeps_as_many_tokens_drawn_at_random_the_rules_control(warm_policy, table):
    """--top-entropy-random with --top-entropy-quantile 0.3: the same share of the update's completion tokens keeps
    its policy gradient, but drawn by torch's generator (train.py seeds it each step), not by entropy: the tokens
    whose uniform draw is at least the draws' 0.7-quantile, another set than the entropy's."""
    model, enc = warm_policy()
    cfg = GRPOConfig(**BASE, top_entropy_quantile=0.3, top_entropy_random=True)
    torch.manual_seed(5)
    step = run(model, enc, cfg)
    m = completion(step.batch)
    torch.manual_seed(5)  # the step's first draw from torch's generator is the first update's mask
    score = torch.rand(m.shape)
    keep = m & (score >= torch.quantile(score[m], 0.7))
    H = entropies(step.before, step.batch)
    by_entropy = m & (H >= torch.quantile(H[m], 0.7))
    assert 0.25 < keep.sum() / m.sum() < 0.35 and (keep != by_entropy).any()
    assert_grad(step.updates[0], on_policy_grad(step, cfg) * keep)


@pytest.mark.parametrize("agg", ["bnpo", "luspo"])
def test_loss_agg_bnpo_is_the_token_mean_here_and_luspo_weighs_gspos_answers_by_length(warm_policy, table, agg):
    """--loss-agg bnpo, in one process: token_mean's weights exactly (its own normaliser is this process's tokens);
    --loss-agg luspo under GSPO's ratio (1 in the first update): each answer's GSPO term times its length, so each
    token's gradient is -A / B, not -A / (B n_i)."""
    model, enc = warm_policy()
    cfg = GRPOConfig(**BASE, loss_agg=agg, **(dict(ratio_level="gspo") if agg == "luspo" else {}))
    step = run(model, enc, cfg)
    m = completion(step.batch)
    A = advantages(step.batch.rewards["total"], 4)[:, None]
    want = -A * m / m.sum() if agg == "bnpo" else -A * m / len(m)
    assert_grad(step.updates[0], want)


@pytest.mark.parametrize("target, acts", [(10.0, True), (1e-3, False)])
def test_adaptive_entropy_applies_the_coefficient_the_last_steps_entropy_set(warm_policy, table, target, acts):
    """--adaptive-entropy over three steps, the controller between them as train.py runs it: the first step
    applies no bonus (no entropy measured yet); each later step applies c (from --entropy-coef, stepped by
    --entropy-coef-delta, capped at --entropy-coef-max) only if the previous step's entropy was at or below
    --entropy-target, and d loss / d H_t is then -c times the token's weight."""
    import train
    model, enc = warm_policy()
    cfg = GRPOConfig(**BASE, adaptive_entropy=True, entropy_coef=0.02, entropy_coef_delta=0.05,
                     entropy_coef_max=0.06, entropy_target=target)
    opt, control, applied = torch.optim.Adam(model.parameters(), lr=1e-3), field_methods.entropy_control_start(cfg), []
    for seed in (1, 2, 3):
        step_cfg = field_methods.entropy_controlled(cfg, control)
        step = run(model, enc, step_cfg, seed=seed, opt=opt)
        applied.append(step_cfg.entropy_coef)
        u, W = step.updates[0], token_weights(completion(step.batch))
        if applied[-1]:
            torch.testing.assert_close(u.entropy_grad.double(), -applied[-1] * W)
        else:
            assert u.entropy_grad is None
        assert (step.stats["entropy"] <= target) == acts
        control = field_methods.entropy_control_step(control, step.stats["entropy"], cfg)
    assert applied == ([0.0, 0.06, 0.06] if acts else [0.0, 0.0, 0.0])  # 0.02 + 0.05 capped at 0.06; or gated off
    assert control["coef"] == (0.06 if acts else 0.0)


# ---------------------------------------------------------------- one table, checked

FLAG_TESTS = {  # GRPOConfig field -> the tests in this file that run a step with it on and off
    "group_size": ["test_group_size_makes_groups_of_g_adjacent_rows_sharing_one_advantage_baseline"],
    "max_new_tokens": ["test_max_new_tokens_caps_completions_and_is_dr_grpos_denominator"],
    "temperature": ["test_temperature_is_the_samplers_and_the_learners"],
    "top_p": ["test_top_p_and_top_k_draw_only_from_what_they_keep"],
    "top_k": ["test_top_p_and_top_k_draw_only_from_what_they_keep"],
    "learner_temperature": ["test_learner_temperature_scores_pi_theta_pi_old_and_pi_ref_and_nothing_else",
                            "test_tis_cap_weights_each_token_by_the_capped_learner_to_sampler_ratio"],
    "format_weight": ["test_format_weight_adds_w_times_the_format_term"],
    "format_check": ["test_format_check_book_pays_any_think_before_a_close"],
    "gated": ["test_gated_pays_the_format_only_with_a_correct_answer"],
    "overlong_cache": ["test_overlong_cache_penalises_the_last_tokens_linearly"],
    "adv_norm": ["test_adv_norm_divides_by_the_group_std_the_batch_std_or_nothing"],
    "adv_clip": ["test_adv_clip_clamps_each_advantage_to_plus_minus_c"],
    "baseline": ["test_baseline_rloo_and_reinforce_pp_give_the_updates_advantages"],
    "reward_norm": ["test_reward_norm_gdpo_gives_the_advantages_of_a_known_reward_table"],
    "dynamic_sampling": ["test_dynamic_sampling_trains_only_on_groups_whose_rewards_differ"],
    "max_sampling_rounds": ["test_max_sampling_rounds_bounds_the_redraws"],
    "mu": ["test_mu_runs_epochs_over_one_rollout_with_pi_old_fixed", "test_minibatches_from_first_principles"],
    "minibatches": ["test_minibatches_from_first_principles"],
    "resample_epochs": ["test_resample_epochs_sample_the_same_prompts_again_from_the_frozen_pi_old"],
    "clip": ["test_clip_zeroes_the_gradient_past_one_plus_minus_eps"],
    "clip_high": ["test_clip_high_raises_only_the_upper_bound"],
    "dual_clip": ["test_dual_clip_bounds_negative_advantages_at_c"],
    "objective": ["test_objective_sets_where_the_gradient_stops",
                  "test_the_fields_objectives_set_each_tokens_gradient_in_the_second_update"],
    "sapo_tau_pos": ["test_the_fields_objectives_set_each_tokens_gradient_in_the_second_update"],
    "sapo_tau_neg": ["test_the_fields_objectives_set_each_tokens_gradient_in_the_second_update"],
    "vespo_k_pos": ["test_the_fields_objectives_set_each_tokens_gradient_in_the_second_update"],
    "vespo_lambda_pos": ["test_the_fields_objectives_set_each_tokens_gradient_in_the_second_update"],
    "vespo_k_neg": ["test_the_fields_objectives_set_each_tokens_gradient_in_the_second_update"],
    "vespo_lambda_neg": ["test_the_fields_objectives_set_each_tokens_gradient_in_the_second_update"],
    "ratio_level": ["test_ratio_level_is_per_token_or_per_sequence"],
    "kl": ["test_kl_estimator_level_and_reweight_through_the_step"],
    "kl_estimator": ["test_kl_estimator_level_and_reweight_through_the_step"],
    "kl_level": ["test_kl_estimator_level_and_reweight_through_the_step"],
    "loss_agg": ["test_loss_agg_weighs_each_token_as_its_formula",
                 "test_loss_agg_bnpo_is_the_token_mean_here_and_luspo_weighs_gspos_answers_by_length",
                 "test_max_new_tokens_caps_completions_and_is_dr_grpos_denominator"],
    "mask_truncated": ["test_mask_truncated_gives_cut_off_answers_no_weight"],
    "entropy_coef": ["test_entropy_coef_is_a_bonus_the_step_raises_the_entropy",
                     "test_adaptive_entropy_applies_the_coefficient_the_last_steps_entropy_set"],
    "adaptive_entropy": ["test_adaptive_entropy_applies_the_coefficient_the_last_steps_entropy_set"],
    "entropy_target": ["test_adaptive_entropy_applies_the_coefficient_the_last_steps_entropy_set"],
    "entropy_coef_delta": ["test_adaptive_entropy_applies_the_coefficient_the_last_steps_entropy_set"],
    "entropy_coef_max": ["test_adaptive_entropy_applies_the_coefficient_the_last_steps_entropy_set"],
    "top_entropy_quantile": ["test_top_entropy_quantile_keeps_the_policy_gradient_on_the_high_entropy_tokens"],
    "top_entropy_random": ["test_top_entropy_random_keeps_as_many_tokens_drawn_at_random_the_rules_control"],
    "kl_cov": ["test_kl_cov_adds_the_sign_of_log_r_on_the_tokens_of_largest_covariance"],
    "logprobs": ["test_logprobs_takes_the_path_it_names"],
    "share_prompts": ["test_share_prompts_runs_each_groups_prompt_once_with_the_same_numbers"],
    "tis_cap": ["test_tis_cap_weights_each_token_by_the_capped_learner_to_sampler_ratio",
                "test_tis_and_the_off_policy_mask_act_by_their_formulas_in_every_update_of_a_lagged_step",
                "test_tis_floor_and_mode_truncate_or_mask_the_stale_samplers_weight"],
    "tis_floor": ["test_tis_floor_and_mode_truncate_or_mask_the_stale_samplers_weight"],
    "tis_mode": ["test_tis_floor_and_mode_truncate_or_mask_the_stale_samplers_weight"],
    "keep_sampling_mask": ["test_keep_sampling_mask_makes_the_learners_logprobs_the_samplers"],
    "off_policy_mask": ["test_off_policy_mask_drops_the_negative_sequences_far_from_the_sampler",
                        "test_tis_and_the_off_policy_mask_act_by_their_formulas_in_every_update_of_a_lagged_step"],
    "kl_reweight": ["test_kl_estimator_level_and_reweight_through_the_step"],
    "rejection": ["test_rejection_takes_the_tokens_or_answers_far_from_the_stale_sampler_out_of_the_mask"],
    "rejection_bound": ["test_rejection_takes_the_tokens_or_answers_far_from_the_stale_sampler_out_of_the_mask"],
    "rollout_lag": ["test_rollout_lag_trains_on_the_batch_sampled_k_steps_ago_with_the_policy_that_sampled_it_as_pi_old"],
    "lag_pi_old": ["test_lag_pi_old_learner_makes_pi_old_the_learner_at_the_step_and_the_tis_weights_the_stale_samplers",
                   "test_tis_and_the_off_policy_mask_act_by_their_formulas_in_every_update_of_a_lagged_step"],
    "exact_kl": ["test_exact_kl_logs_the_kl_over_the_whole_vocabulary_and_changes_nothing_else"],
    "lr": ["test_lr_is_the_size_of_adams_first_step"],
    "sampler_dtype": ["test_sampler_dtype_draws_from_bf16_weights_beside_the_fp32_learner",
                      "test_sampler_dtype_draws_from_8bit_weights_beside_the_fp32_learner"],
    "max_grad_norm": ["test_max_grad_norm_caps_the_norm_of_the_update"],
}


def test_every_grpo_config_field_has_a_whole_step_test():
    """A new flag cannot land without a test here that switches it on inside a step."""
    names = [f.name for f in dataclasses.fields(GRPOConfig)]
    missing = [n for n in names if n not in FLAG_TESTS]
    assert not missing, f"GRPOConfig fields with no whole-step test in FLAG_TESTS: {missing}"
    assert not set(FLAG_TESTS) - set(names), "FLAG_TESTS names fields GRPOConfig no longer has"
    for field_name, tests in FLAG_TESTS.items():
        for name in tests:
            assert callable(globals().get(name)) and name.startswith("test_"), f"{field_name}: no test {name}"
        assert any(field_name in inspect.getsource(globals()[name]) for name in tests), \
            f"{field_name}: none of its tests names it"
