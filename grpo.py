"""laptop-grpo's GRPO: the chapter's step as its scripts write it (`grpo_step_book`), GRPO's step as the papers
write it (`grpo_step_paper`), the one step with every variant's switch that runs both (`grpo_step`), then each of its
pieces in the order the step runs them.

    sample G answers per prompt (rollouts.py) -> rewards (rewards.py) -> group advantages
    -> log-probs of pi_theta, pi_old, pi_ref (logprobs.py) -> clipped ratio (+ KL) -> mean -> update

    python train.py --recipe book   # grpo_step at the chapter's flags: what grpo_step_book does (a test holds it)
    python train.py                 # grpo_step at the defaults: what grpo_step_paper does (config.GRPOConfig: flags)

Sections 1-4 are GRPO; each variant is a flag on the one function that holds its idea (`--ratio-level` on
`policy_ratio`, ...); those with a function of their own follow in section 5, and the field's later ones (SAPO,
GMPO, IcePop, RLOO, ...) are field_methods.py's. One that is off costs nothing and logs nothing. What a step logs
is stats.py's. The default flags run the papers' form of the step (DeepSeekMath's GRPO, as TRL and verl run it,
at two updates a rollout and no KL; `--recipe grpo` sets DeepSeekMath's own values). It departs from the book's
scripts (rasbt/reasoning-from-scratch, ch07/03_rlvr_grpo_scripts_advanced/) five ways, each a flag that `--recipe book`
sets:
1. The learner scores at the sampler's temperature; the book samples at T 0.8 with top-p 0.9 and scores at
   T 1 over the whole vocabulary: `--learner-temperature 1`.
2. Epochs reuse one rollout (`--mu`, `--minibatches`, as TRL and verl do); the book's inner epochs sample
   again from a frozen copy: `--resample-epochs`.
3. The ratio is per token; the book's ratio of summed log-probs is `--ratio-level sequence`.
4. The ratio is clipped by PPO's `min` at eps 0.2; the book's `torch.where` form at 10 is `--objective book --clip 10`.
5. The KL is k3 per token; the book's k1 on summed log-probs is `--kl-estimator k1 --kl-level sequence`.
   A reference model exists only when beta > 0, as in `7_5_plus_kl.py`.
Log-probs come from kernels that never materialise an (N, V) log-softmax (logprobs.py); the two textbook steps use
its `token_logprobs_reference`, which gives the same numbers.
"""
import copy
import math
from typing import NamedTuple

import torch

import field_methods
import rewards
from config import RECIPES, GRPOConfig  # noqa: F401 (grpo.GRPOConfig and grpo.RECIPES: the settings a step reads)
# torchrun's part in a step: five helpers, each one named call below. In one process each is the plain formula
# (unwrap: the policy; same_count: the minibatches; global_mean: sum / count; global_std: .std(); everywhere_finite:
# the loss and the gradient norm are finite); under N ranks each makes its number the whole batch's (distributed.py).
from distributed import everywhere_finite, global_mean, global_std, same_count, unwrap
from logprobs import token_logprobs, token_logprobs_reference, vocab_logprobs
from rollouts import lagged_batch, minibatch_rows, rollout, sample_batch
from stats import StepStats, batch_stats, update_stats


def grpo_step_book(policy, ref_policy, opt, enc, next_problems, n_prompts, cfg, generator):
    """One step of the chapter's own GRPO, as its scripts write it (ch07/03_rlvr_grpo_scripts_advanced/
    7_5_plus_kl.py: train_rlvr_grpo, compute_grpo_loss_plus_kl) -> the last update's loss. Each inner epoch samples
    new answers from a copy of the policy frozen for the step; an answer's log-prob is summed over its tokens and
    scored at temperature 1; the ratio of those sums is clipped in the book's torch.where form; the KL is k1 on
    them. `grpo_step` under --recipe book leaves the same weights and loss
    (tests/test_grpo_step.py::test_the_books_step_and_grpo_step_under_recipe_book_leave_the_same_weights_and_loss)."""
    problems = [next_problems() for _ in range(n_prompts)]
    pi_old = copy.deepcopy(policy).requires_grad_(False)  # frozen for the step: every inner epoch samples from it
    for _ in range(cfg.mu):  # the book's inner epochs, each on answers of its own
        batch = rollout(pi_old, enc, problems, cfg, generator)  # G answers a prompt, at T 0.8 and top-p 0.9
        r = batch.rewards["total"].view(-1, cfg.group_size)  # (n_prompts, G)
        A = ((r - r.mean(1, keepdim=True)) / (r.std(1, keepdim=True) + 1e-4)).view(-1)  # (B,) group-relative

        def logp(model):  # (B,) each answer's log-prob, its tokens' summed, at temperature 1
            return token_logprobs_reference(model, batch.tokens, batch.mask, batch.loss_mask, 1.0)[0].sum(1)
        with torch.no_grad():  # pi_old and pi_ref (the warm start), fixed for the update
            old_logp = logp(pi_old)
            ref_logp = logp(ref_policy) if cfg.kl > 0 else None
        new_logp = logp(policy)  # pi_theta's sums, with gradient
        ratio = torch.exp(new_logp - old_logp)  # (B,) a whole answer's ratio
        unclipped, clipped = ratio * A, ratio.clamp(1 - cfg.clip, 1 + cfg.clip) * A  # the book's eps: 10
        loss = -torch.where(A >= 0, torch.minimum(unclipped, clipped), torch.maximum(unclipped, clipped)).mean()
        if cfg.kl > 0:  # k1 on the sums: beta * mean(log pi - log pi_ref)
            loss = loss + cfg.kl * (new_logp - ref_logp).mean()
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(policy.parameters(), cfg.max_grad_norm)  # the gradient-norm limit
        opt.step()
    return loss


def grpo_step_paper(policy, ref_policy, opt, enc, next_problems, n_prompts, cfg, generator):
    """One step of GRPO as the papers write it (DeepSeekMath, arXiv 2402.03300, as TRL and verl run it) -> the
    last update's loss: mu updates on one batch, each token's ratio to the policy that sampled it clipped, k3 per
    token. At the default flags, and with --kl > 0, `grpo_step` leaves the same weights and loss
    (tests/test_grpo_step.py::test_the_papers_step_*)."""
    batch = rollout(policy, enc, [next_problems() for _ in range(n_prompts)], cfg, generator)  # G answers a prompt
    r = batch.rewards["total"].view(-1, cfg.group_size)  # (n_prompts, G)
    A = ((r - r.mean(1, keepdim=True)) / (r.std(1, keepdim=True) + 1e-4)).view(-1, 1)  # (B, 1) group-relative
    m = batch.loss_mask.float()  # (B, T): the answers' tokens

    def logp(model):  # (B, T) log pi of each answer token, by the full log-softmax (logprobs.py)
        return token_logprobs_reference(model, batch.tokens, batch.mask, batch.loss_mask, cfg.temperature)[0]
    with torch.no_grad():  # pi_old (the policy that sampled) and pi_ref (the warm start), fixed for all updates
        old_logp = logp(policy)
        ref_logp = logp(ref_policy) if cfg.kl > 0 else None
    for _ in range(cfg.mu):  # mu updates on one batch: the first at ratio 1, the later ones off-policy
        new_logp = logp(policy)  # pi_theta, with gradient
        ratio = torch.exp(new_logp - old_logp)  # (B, T) pi_theta / pi_old
        loss = -torch.minimum(ratio * A, ratio.clamp(1 - cfg.clip, 1 + cfg.clip) * A)  # PPO's clipped surrogate
        if cfg.kl > 0:  # k3 (Schulman): r - 1 - log r, r = pi_ref / pi_theta
            loss = loss + cfg.kl * (torch.exp(ref_logp - new_logp) - 1 - (ref_logp - new_logp))
        loss = ((loss * m).sum(1) / m.sum(1)).mean()  # each answer's mean over its tokens, then the batch's
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(policy.parameters(), cfg.max_grad_norm)  # the gradient-norm limit
        opt.step()
    return loss


def grpo_step(policy_ddp, ref_policy, opt, enc, next_problems, n_prompts, cfg, generator, lagged=None):
    """The same step, with each variant's switch -> (the Rollouts it trained on, {statistic: float}):

        sample G answers to each of n_prompts problems, score them        (rollouts.py)
        A = their group-relative advantages                                 1.
        log pi_old and log pi_ref of every answer token, fixed              2.
        mu epochs of K minibatch updates: pi_theta's log-probs (2.), the clipped
        ratio pi_theta / pi_old times A (+ beta KL to pi_ref), a mean (3.), a step (4.)

    The switches: --resample-epochs samples afresh from a frozen pi_old each epoch (the book's inner epochs);
    --rollout-lag trains on a batch sampled steps ago (`stale_batch`, its queue `lagged` kept by the caller);
    --minibatches splits each epoch; the statistics are stats.py's. policy_ddp: under torchrun the policy
    wrapped in DDP (distributed.wrap), whose backward averages the gradients over the ranks; else itself.
    """
    policy = unwrap(policy_ddp)  # sampling and the no-grad passes need no gradient all-reduce (distributed.py)
    frozen = copy.deepcopy(policy).requires_grad_(False) if cfg.resample_epochs and cfg.mu > 1 else None  # the book's
    stats = StepStats(policy.lm_head_weight.device)
    first_batch, zero_std = sample_batch(policy, enc, next_problems, n_prompts, cfg, generator)
    first_batch, zero_std = stale_batch(policy, first_batch, zero_std, lagged, cfg, stats)  # --rollout-lag K
    for epoch in range(cfg.mu):
        if epoch == 0 or cfg.resample_epochs:  # a new batch (the book's inner epochs: new answers from the frozen copy)
            batch = first_batch if epoch == 0 else rollout(frozen, enc, first_batch.problems[::cfg.group_size],
                                                           cfg, generator)
            adv = advantages(batch, cfg)  # (B,)
            loss_mask = batch.loss_mask & ~batch.truncated[:, None] if cfg.mask_truncated else batch.loss_mask
            minibatches = same_count(minibatch_rows(len(adv), cfg.group_size, cfg.minibatches))  # K tensors of rows
            ref_logp = logprobs_no_grad(ref_policy, batch, loss_mask, cfg) if cfg.kl > 0 else None  # (B, T)
            old_logp = old_logprobs(policy, frozen, batch, loss_mask, cfg, epoch == 0 and len(minibatches) == 1)
        for rows in minibatches:
            stats.next_update()
            logp, entropy = batch_logprobs(policy_ddp, batch, rows, loss_mask, cfg)  # pi_theta (b, T), with gradient
            old_logp = logp.detach() if old_logp is None else old_logp  # (B, T): None, the first update's own (ratio 1)
            old, ref = old_logp[rows], None if ref_logp is None else ref_logp[rows]  # (b, T) pi_old, pi_ref
            loss = grpo_loss(logp, old, ref, adv[rows], loss_mask[rows], cfg, entropy, batch.sampler_logp[rows])
            kl_exact = exact_kl(policy, ref_policy, batch, rows, loss_mask, cfg)  # --exact-kl: what the KL estimates
            grad_norm = optimizer_step(policy_ddp, opt, loss.value, cfg.max_grad_norm, stats.n_updates,
                                       cfg.mu * len(minibatches))
            update_stats(stats, loss, logp, old, entropy, loss_mask[rows], grad_norm, kl_exact, adv[rows],
                         batch.sampler_logp[rows])
        if epoch == 0:
            batch_stats(stats, batch, adv, zero_std, old_logp, loss_mask, cfg.group_size)
    return first_batch, stats.result()


# ---------------------------------------------------------------- 1. advantages

def advantages(batch, cfg):
    """(B,) advantages of a batch: of the summed reward, or GDPO's of each term first; --adv-clip C clamps
    each to [-C, C] (a lone right answer among 8 gets 2.47 under the group's std)."""
    if cfg.reward_norm == "norm_then_sum":
        adv = gdpo_advantages(batch.rewards, rewards.term_weights(cfg), cfg.group_size, cfg.adv_norm)
    elif cfg.reward_norm == "sum_then_norm":
        adv = group_advantages(batch.rewards["total"], cfg.group_size, cfg.adv_norm, cfg.baseline,
                               batch.loss_mask.sum(1))
    else:
        raise ValueError(f"unknown reward normalisation {cfg.reward_norm!r}")
    return adv.clamp(-cfg.adv_clip, cfg.adv_clip) if cfg.adv_clip > 0 else adv


def group_advantages(rewards, G, norm="group", baseline="group", lengths=None, eps=1e-4):
    """GRPO's group-relative advantage, one per completion. rewards (B,), B = n_groups * G.

    A_i = (r_i - mean(r of its group)) / (std + eps), with std over the group ("group", DeepSeekMath), over the
    batch ("batch"), or no division at all ("none", Dr. GRPO: a small std makes near-unanimous groups dominate).
    --baseline leave_one_out (RLOO), batch (REINFORCE++, lengths (B,)): field_methods.baseline_advantages."""
    if baseline != "group":
        return field_methods.baseline_advantages(rewards, G, baseline, lengths)
    r = rewards.view(-1, G)  # (n_groups, G)
    centred = r - r.mean(1, keepdim=True)
    if norm == "group":
        centred = centred / (r.std(1, keepdim=True) + eps)
    elif norm == "batch":
        centred = centred / (global_std(rewards) + eps)
    elif norm != "none":
        raise ValueError(f"unknown advantage normalisation {norm!r}")
    return centred.view(-1)  # (B,)


# ---------------------------------------------------------------- 2. log-probs

def batch_logprobs(model, batch, rows, loss_mask, cfg):
    """(b, T) log-probs and entropies of some rows of a batch under model (pi_theta, pi_old or pi_ref), as
    the learner sees them: at learner_temperature(cfg), over the sampler's support with --keep-sampling-mask.
    logprobs.py computes them (the kernels' path, and the textbook one it equals)."""
    support, groups = None if batch.support is None else batch.support[rows], (batch.prompt_len, cfg.group_size)
    return token_logprobs(model, batch.tokens[rows], batch.mask[rows], loss_mask[rows], learner_temperature(cfg),
                          cfg.fused_head, support, groups if cfg.share_prompts else None)


@torch.no_grad()
def logprobs_no_grad(model, batch, loss_mask, cfg):
    """(B, T) log-probs of every row of a batch under model, without gradient (pi_old, pi_ref)."""
    return batch_logprobs(model, batch, torch.arange(batch.tokens.shape[0]), loss_mask, cfg)[0]


def old_logprobs(policy, frozen, batch, loss_mask, cfg, first_update_sees_every_row):
    """(B, T) pi_old's log-probs of a batch, fixed for its updates: the policy's before the batch's first update (or
    the book's frozen copy's, when there is one: the step's first weights). None where that first update sees every
    row: until it steps, the policy *is* pi_old, so grpo_step takes them off that update's own forward, detached,
    at ratio exactly 1, and saves this pass (grpo_step_paper makes it: 10-16% of a default step). --rollout-lag:
    the policy that sampled (--lag-pi-old sampler, scored then: `stale_batch`), or the learner as the step finds it
    (decoupled PPO)."""
    if cfg.rollout_lag and cfg.lag_pi_old == "sampler":
        return batch.pi_old_logp
    if first_update_sees_every_row:
        return None
    return logprobs_no_grad(policy if frozen is None else frozen, batch, loss_mask, cfg)


def learner_temperature(cfg):
    """The learner's temperature: the sampler's, unless --learner-temperature sets one (the book scores at 1)."""
    return cfg.temperature if cfg.learner_temperature is None else cfg.learner_temperature


# ---------------------------------------------------------------- 3. the loss

class Loss(NamedTuple):
    """What grpo_loss returns: the loss and what the step logs of it (stats.update_stats)."""
    value: torch.Tensor         # scalar, to be minimised
    terms: dict                 # name -> scalar: pg_loss, kl (beta > 0), entropy_bonus (alpha != 0), loss
    ratio: torch.Tensor         # (B, T) per token, (B, 1) per answer: pi_theta / pi_old
    clipped_low: torch.Tensor   # (B, T) or (B, 1) bool: where the objective's clip binds below 1
    clipped_high: torch.Tensor  # ... and above 1
    kept: torch.Tensor          # (B,) 1 for the answers --off-policy-mask keeps, 0 for those it drops; None when off
    dropped: dict               # name -> (B, T) bool: the completion tokens a field mask took out (--rejection, ...)
    weight: torch.Tensor        # (B, T) or (B, 1): the importance weight on each term (--tis-cap's, VESPO's); or None
    token_weights: torch.Tensor  # (B, T): what each token's loss weighs in the mean (token_weights)


def grpo_loss(logp, old_logp, ref_logp, adv, loss_mask, cfg, entropy=None, sampler_logp=None):
    """The GRPO loss, to be minimised, on (B, T) token log-probs -> Loss:
        loss = -mean( clipped(pi / pi_old) * A )  +  beta * mean( KL(pi || pi_ref) )  [- alpha * mean(entropy)]
    loss_mask (B, T) marks the completion tokens; adv (B,); entropy (B, T) is for the entropy bonus; sampler_logp
    (B, T), what the sampler drew each token with, for the off-policy corrections. The variants that drop tokens
    or answers before the objective, and those that change its terms after, are section 5's, off by default."""
    loss_mask, adv, kept, dropped = drop_before_the_objective(logp, old_logp, sampler_logp, adv, loss_mask, cfg)
    A = adv[:, None]  # (B, 1): every token of a completion shares its advantage
    ratio = policy_ratio(logp, old_logp, loss_mask, cfg.ratio_level)  # (B, T) or (B, 1)
    surrogate, low, high, weights = objective(ratio, A, logp, old_logp, sampler_logp, loss_mask, cfg, dropped)
    surrogate, bonus_mask = change_after_the_objective(surrogate, logp, old_logp, A, entropy, loss_mask, cfg, dropped)
    loss = aggregate(-surrogate.expand_as(logp), loss_mask, cfg.loss_agg, cfg.max_new_tokens)
    terms = {"pg_loss": loss}
    if cfg.kl > 0:  # beta, --kl
        kl = kl_penalty(logp, ref_logp, loss_mask, cfg.kl_estimator, cfg.kl_level,
                        old_logp if cfg.kl_reweight else None)  # (B, T) or (B, 1)
        terms["kl"] = aggregate(kl, loss_mask, cfg.loss_agg, cfg.max_new_tokens)
        loss = loss + cfg.kl * terms["kl"]
    if cfg.entropy_coef != 0:  # alpha, --entropy-coef: an entropy bonus (TRL's entropy_coef, verl's entropy_coeff)
        terms["entropy_bonus"] = aggregate(entropy, bonus_mask, cfg.loss_agg, cfg.max_new_tokens)
        loss = loss - cfg.entropy_coef * terms["entropy_bonus"]
    terms["loss"] = loss
    return Loss(loss, terms, ratio, low, high, kept, dropped, weights, token_weights(loss_mask, cfg.loss_agg))


def objective(ratio, A, logp, old_logp, sampler_logp, loss_mask, cfg, dropped):
    """The clipped objective, to be maximised -> (surrogate, low, high, weights): PPO's clip (--objective ppo, the
    default), the book's, CISPO's or a field method's, times --tis-cap's importance weights where they are on
    (weights; IcePop's masked tokens go into dropped). low / high: where the clip binds, below 1 and above."""
    eps_low, eps_high = cfg.clip_range  # the ratio is clipped to [1 - eps_low, 1 + eps_high]
    weights = tis_weights(old_logp, sampler_logp, cfg.tis_cap, loss_mask, cfg) if cfg.tis_cap > 0 else None
    if cfg.tis_cap > 0 and cfg.tis_mode.endswith("mask"):  # IcePop, MIS: the tokens whose weight was set to 0
        dropped["is_masked_frac"] = loss_mask & (weights == 0)
    if cfg.objective == "ppo":
        surrogate, low, high = clipped_objective(ratio, A, eps_low, eps_high, cfg.dual_clip)
    elif cfg.objective == "book":
        surrogate, low, high = book_objective(ratio, A, eps_low, eps_high)
    elif cfg.objective == "cispo":
        surrogate, low, high = cispo_objective(ratio, A, logp, eps_low, eps_high)
    else:  # the field's: SAPO, GMPO, DPPO-TV / -KL, VESPO (an unknown name is a ValueError there)
        surrogate, low, high, weights = field_methods.objective(ratio, A, logp, old_logp, sampler_logp, loss_mask, cfg,
                                                                weights)
    if weights is not None:  # importance sampling towards the learner (VESPO's: its Gamma weight of each answer)
        surrogate = surrogate * weights  # (B, T), or (B, 1) with --tis-mode sequence_*, GMPO and VESPO
    return surrogate, low, high, weights


def policy_ratio(logp, old_logp, mask, level="token"):
    """Importance ratio pi / pi_old, (B, T) for token level or (B, 1) for sequence levels.

    token:    r_t = exp(logp_t - old_logp_t)                         (PPO / GRPO)
    gspo:     s = exp(mean_t (logp_t - old_logp_t)), length-normalised (GSPO)
    sequence: s = exp(sum_t (logp_t - old_logp_t)), the book's whole-sequence ratio, whose log-ratio
              grows with length, so long answers are clipped far more often."""
    log_r = (logp - old_logp) * mask  # (B, T)
    if level == "gspo":
        log_r = sequence_mean(log_r, mask)  # (B, 1)
    elif level == "sequence":
        log_r = log_r.sum(1, keepdim=True)  # (B, 1)
    elif level != "token":
        raise ValueError(f"unknown ratio level {level!r}")
    return safe_exp(log_r)


def safe_exp(log_x, max_log=20.0):
    """exp(log_x), log_x clamped at 20 (e^20 ~ 5e8): a ratio of probabilities that cannot overflow."""
    return torch.exp(log_x.clamp(max=max_log))


def clipped_objective(ratio, adv, eps_low, eps_high, dual_clip=0.0):
    """PPO's clipped surrogate, to be maximised: min(r * A, clip(r, 1-eps_low, 1+eps_high) * A) -> (surrogate,
    low, high), of the broadcast shape of ratio (B, T) or (B, 1) and adv (B, 1); low / high: where a bound binds.

    The min is the pessimistic bound for both signs of A: for A > 0 the ratio stops earning once
    r > 1+eps_high, for A < 0 once r < 1-eps_low; there the gradient is zero, and a ratio that moved
    the *wrong* way is never clipped. Dual clip (c > 1): for A < 0 the objective is also bounded
    below by c * A, which binds (on the high side) once r > c."""
    surr = torch.minimum(ratio * adv, ratio.clamp(1 - eps_low, 1 + eps_high) * adv)
    low, high = (ratio < 1 - eps_low) & (adv < 0), (ratio > 1 + eps_high) & (adv > 0)
    if dual_clip > 0:
        surr = torch.where(adv < 0, torch.maximum(surr, dual_clip * adv), surr)
        high = high | ((adv < 0) & (ratio > dual_clip))
    return surr, low, high


def kl_penalty(logp, ref_logp, mask, estimator="k3", level="token", old_logp=None):
    """Estimators of KL(pi || pi_ref) from samples of pi (Schulman, "Approximating KL"), (B, T) per token or
    (B, 1) per sequence; with log r = log pi_ref - log pi:
      k1 = -log r                 unbiased, can be negative, high variance
      k2 = (log r)^2 / 2          biased, always >= 0
      k3 = r - 1 - log r          unbiased, >= 0, low variance (GRPO's; r = safe_exp(log r); verl clamps it at 10)
    "From samples of pi": k1's gradient, grad log pi, averages to zero only there; over samples of another q
    (a sharper sampler, top-p) minimising it lowers log pi where q draws, flattening pi. level "sequence" (the
    book's 7_5_plus_kl.py): log pi and log pi_ref summed over each answer first, one log r an answer.
    old_logp given (--kl-reweight, DeepSeek-V3.2): on pi_old's samples, weight by the ratio (with its gradient),
        E_{y ~ pi_old}[ (pi(y) / pi_old(y)) * k3(y) ] = E_{y ~ pi}[ k3(y) ] = KL(pi || pi_ref)"""
    lp, ref = logp, ref_logp  # (B, T)
    if level == "sequence":
        lp, ref = (logp * mask).sum(1, keepdim=True), (ref_logp * mask).sum(1, keepdim=True)  # (B, 1) each
    elif level != "token":
        raise ValueError(f"unknown KL level {level!r}")
    log_r = ref - lp
    if estimator == "k1":
        kl = -log_r
    elif estimator == "k2":
        kl = 0.5 * log_r ** 2
    elif estimator == "k3":
        kl = safe_exp(log_r) - 1 - log_r
    elif estimator == "k3+":  # verl's: k3's value with k2's gradient, unbiased on samples of pi
        kl = field_methods.k3_plus(log_r)
    else:
        raise ValueError(f"unknown KL estimator {estimator!r}")
    if old_logp is not None:
        kl = kl * policy_ratio(logp, old_logp, mask, level)
    return kl


def aggregate(token_loss, mask, mode="seq_mean", max_len=None):
    """Reduce a (B, T) per-token loss over the completion tokens (mask) to a scalar:
    seq_mean:   each answer's mean over its tokens, then their mean (GRPO): a short answer's token weighs more;
    token_mean: sum over all tokens / their number (DAPO): every token weighs the same;
    constant:   sum over all tokens / (B * max_len) (Dr. GRPO): length carries no bias into the gradient;
    bnpo, luspo: the field's (field_methods.aggregate).
    A per-answer term (a sequence ratio's objective, the sequence-level KL) is weighed once an answer only by
    seq_mean; the others would count it once a token, and cli.py refuses them."""
    mask = mask.to(token_loss.dtype)
    if mode == "seq_mean":
        total, count = sequence_mean(token_loss, mask).sum(), mask.shape[0]
    elif mode == "token_mean":
        total, count = (token_loss * mask).sum(), mask.sum()
    elif mode == "constant":
        total, count = (token_loss * mask).sum(), mask.shape[0] * max_len
    else:
        return field_methods.aggregate(token_loss, mask, mode)  # bnpo, luspo (an unknown name is a ValueError there)
    return global_mean(total, count)  # total / count; under torchrun over every rank's rows (distributed.py)


def token_weights(mask, mode="seq_mean"):
    """(B, T): each completion token's weight in aggregate(mode), up to a factor common to the batch: 1 / |o_i| under
    seq_mean (a short answer's token weighs more: Dr. GRPO's length bias), 1 under the others (luspo: |o_i| / |o_i|)."""
    mask = mask.float()
    return mask / mask.sum(1, keepdim=True).clamp(min=1) if mode == "seq_mean" else mask


def sequence_mean(x, mask):
    """(B, T) -> (B, 1): each row's mean over its tokens in mask (0 for a row without any)."""
    mask = mask.to(x.dtype)
    return (x * mask).sum(1, keepdim=True) / mask.sum(1, keepdim=True).clamp(min=1)


# ---------------------------------------------------------------- 4. the update

def optimizer_step(model, opt, loss, max_grad_norm, update=1, updates=1):
    """Backward, hold the gradient's norm to max_grad_norm, step -> the norm before. A loss or gradient that is
    not finite raises FloatingPointError before the step, naming the update (those before it did step)."""
    opt.zero_grad(set_to_none=True)
    loss.backward()  # under DDP: the gradients arrive averaged over the ranks
    grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_grad_norm)
    if not everywhere_finite(loss, grad_norm):
        done = update - 1
        raise FloatingPointError(f"non-finite loss ({loss.item()}) or gradient norm ({grad_norm.item()}) in update "
                                 f"{update} of {updates} of this step, after {done} applied update{'s' * (done != 1)}")
    opt.step()
    return grad_norm


# ---------------------------------------------------------------- 5. the variants with a function of their own

def gdpo_advantages(terms, weights, G, norm="group"):
    """GDPO (Liu et al. 2026), `--reward-norm norm_then_sum` (the book's gdpo.py): each reward term normalised
    in its group first, then summed with its weight and normalised again,
        A = norm( sum_k w_k * (r_k - mean_group(r_k)) / (std_group(r_k) + eps) )
    so a dense term (format) cannot set the group's std and drown a sparse one (correctness). terms: name ->
    (B,); weights: name -> float; a term constant within a group gives 0 there."""
    total = sum(w * group_advantages(terms[k], G, "group") for k, w in weights.items() if w != 0)  # (B,)
    return group_advantages(total, G, norm)


def book_objective(ratio, adv, eps_low, eps_high):
    """The book's clipped objective (7_4_plus_clip_ratio.py on), `--objective book`, maximised:
        torch.where(A >= 0, min(r A, clip(r) A), max(r A, clip(r) A))
    For A < 0 the max is A * min(r, clip(r)): it clips where r has grown (a bad answer made likelier, where PPO
    keeps the gradient), never where it shrank. So for either sign the gradient stops only once r > 1+eps_high
    (the book's eps 10: r > 11). -> (surrogate, low, high) as clipped_objective; low never binds."""
    unclipped, clipped = ratio * adv, ratio.clamp(1 - eps_low, 1 + eps_high) * adv
    surr = torch.where(adv >= 0, torch.minimum(unclipped, clipped), torch.maximum(unclipped, clipped))
    high = (ratio > 1 + eps_high).expand_as(surr)
    return surr, torch.zeros_like(high), high


def cispo_objective(ratio, adv, logp, eps_low, eps_high):
    """CISPO (MiniMax-M1), `--objective cispo`: sg(clip(r)) * A * logp. The clipped ratio only weights the
    gradient, so every token keeps one (PPO drops clipped tokens). -> (surr, low, high): where it is clipped."""
    surr = ratio.clamp(1 - eps_low, 1 + eps_high).detach() * adv * logp
    low, high = (ratio < 1 - eps_low).expand_as(surr), (ratio > 1 + eps_high).expand_as(surr)
    return surr, low, high


def drop_before_the_objective(logp, old_logp, sampler_logp, adv, loss_mask, cfg):
    """The corrections that take tokens or answers out before the objective sees them -> (loss_mask, adv, kept,
    dropped): --rejection (verl's rollout_rs: tokens, or whole answers, too far from their sampler leave the mask)
    and --off-policy-mask (DeepSeek-V3.2: negative answers far off the sampler get A = 0; kept (B,), else None).
    dropped: name -> (B, T) bool, what a mask took out, for the log. Both off: the inputs as they are."""
    kept, dropped = None, {}
    if cfg.rejection:
        keep = field_methods.rejection_keep(old_logp, sampler_logp, loss_mask, cfg.rejection, cfg.rejection_bound)
        loss_mask, dropped["rejected_frac"] = loss_mask & keep, loss_mask & ~keep
    if math.isfinite(cfg.off_policy_mask):
        kept = off_policy_keep(logp, sampler_logp, adv, loss_mask, cfg.off_policy_mask)  # (B,)
        adv = adv * kept
    return loss_mask, adv, kept, dropped


def change_after_the_objective(surrogate, logp, old_logp, A, entropy, loss_mask, cfg, dropped):
    """The variants that change the objective's terms token by token -> (surrogate, the tokens the entropy bonus
    reads): KL-Cov (Cui et al.: the few tokens that drive the entropy down held back) and the 80/20 rule (the
    policy gradient on the high-entropy tokens alone, and, as TRL's, the entropy bonus too). Both off: as they are."""
    bonus_mask = loss_mask
    if cfg.kl_cov > 0:
        surrogate = surrogate - field_methods.kl_cov_penalty(logp, old_logp, A, loss_mask, cfg.kl_cov)  # (B, T)
    if cfg.top_entropy_quantile < 1:
        bonus_mask = field_methods.high_entropy_mask(entropy.detach(), loss_mask, cfg.top_entropy_quantile)  # (B, T)
        surrogate, dropped["low_entropy_frac"] = surrogate * bonus_mask, loss_mask & ~bonus_mask
    return surrogate, bonus_mask


def stale_batch(policy, batch, zero_std, lagged, cfg, stats):
    """--rollout-lag K, an asynchronous trainer: the step's new batch joins the queue `lagged`
    (rollouts.lagged_batch) and the step trains on the one sampled K steps ago -> (that batch, its zero_std);
    without a lag, the step's own. Which policy is then pi_old (--lag-pi-old; docs/design.md names the trainers
    that do each):
      sampler  the one that sampled the batch, scored now, on the weights that sample: the PPO ratio absorbs
               the staleness, and the sampler corrections see no gap;
      learner  the learner as the step finds it (old_logprobs), the proximal policy of decoupled PPO, while
               the stale sampler's log-probs reach only --tis-cap and --off-policy-mask."""
    if not cfg.rollout_lag:
        return batch, zero_std
    if cfg.lag_pi_old == "sampler":
        batch.pi_old_logp = logprobs_no_grad(policy, batch, batch.loss_mask, cfg)  # (B, T)
    return lagged_batch(batch, zero_std, lagged, cfg.rollout_lag, stats)


def tis_weights(old_logp, sampler_logp, cap, mask=None, cfg=None):
    """Truncated importance sampling (Yao et al. 2025), `--tis-cap C`: the tokens were drawn by the sampler
    (temperature, top-k, top-p, --sampler-dtype), not by pi_old, so each token's term is re-weighted towards
    the learner, capped so a rare token cannot blow up the update: w_t = min(pi_old / pi_sampler, C). (B, T)
    --tis-floor, --tis-mode (IcePop's mask, one weight an answer): field_methods.importance_weights."""
    if cap <= 0:
        return torch.ones_like(old_logp)
    if cfg is not None and (cfg.tis_mode != "token_truncate" or cfg.tis_floor > 0):
        return field_methods.importance_weights(old_logp, sampler_logp, mask, cap, cfg.tis_floor, cfg.tis_mode)
    return safe_exp(old_logp - sampler_logp).clamp(max=cap)


@torch.no_grad()
def off_policy_keep(logp, sampler_logp, adv, loss_mask, delta):
    """DeepSeek-V3.2's off-policy sequence masking, `--off-policy-mask DELTA`: drop (weight 0) a
    sequence with a negative advantage whose length-normalised KL from the sampler exceeds delta,

        keep_i = 0  if  A_i < 0  and  (1/|o_i|) sum_t (log pi_sampler - log pi)(o_t) > delta

    (the sampler-side estimate, as the book's deepseek_v32_style.py): negatives the policy has left. (B,)"""
    kl = sequence_mean(sampler_logp - logp, loss_mask)[:, 0]  # (B,)
    return (~((adv < 0) & (kl > delta))).to(logp.dtype)


@torch.no_grad()
def exact_kl(policy, ref_policy, batch, rows, loss_mask, cfg):
    """--exact-kl: (kl_exact, kl_grad_bias), or None without it. kl_exact is the KL term's target,
    sum_v pi(v) (log pi(v) - log pi_ref(v)) at each sampled position (summed over an answer for --kl-level
    sequence), aggregated as the term is; kl_grad_bias the bias of the estimator's gradient
    (field_methods.kl_grad_bias; None for --kl-level sequence)."""
    if not (cfg.exact_kl and cfg.kl > 0):
        return None
    m, support = loss_mask[rows], None if batch.support is None else batch.support[rows]  # (b, T), (b, T, V)
    lp, ref = (vocab_logprobs(model, batch.tokens[rows], batch.mask[rows], m, learner_temperature(cfg), support)
               for model in (policy, ref_policy))  # (n, V) each
    per_token = (lp.exp() * (lp - ref).nan_to_num(0.0)).sum(-1)  # (n,): -inf - -inf outside a kept support
    kl = lp.new_zeros(m.shape).masked_scatter(m, per_token)  # (b, T)
    if cfg.kl_level == "sequence":
        return aggregate(kl.sum(1, keepdim=True), m, cfg.loss_agg, cfg.max_new_tokens), None
    return aggregate(kl, m, cfg.loss_agg, cfg.max_new_tokens), field_methods.kl_grad_bias(lp, ref, cfg.kl_estimator)

