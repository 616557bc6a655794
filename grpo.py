"""GRPO's step, as train.py runs it every step, then its pieces in the order the step runs them:

    sample G answers to each prompt, score them (rollouts.py, rewards.py) -> group-relative advantages
    -> log-probs of pi_old and pi_ref, fixed -> for each update: pi_theta's log-probs (log_softmax and gather,
    `token_logprobs`), the clipped ratio pi_theta / pi_old times A (+ beta KL to pi_ref), a mean over the tokens, a step

    python train.py                  # this step at its defaults (config.GRPOConfig: the flags)
    python train.py --recipe book    # the same step at the chapter's flags

The defaults are DeepSeekMath's GRPO (arXiv 2402.03300) as TRL and verl run it, with two changes: two updates on
each batch of answers, where the paper takes one, so that the ratio moves away from 1 after the first optimizer step
and the clip has work to do; and no KL penalty, as DAPO, Dr. GRPO and the book's 7_4 have none (`--recipe grpo` sets
the paper's one update and beta 0.04). Each variant is a flag on the one function that holds its idea (--ratio-level
on `policy_ratio`, --kl-estimator on `kl_penalty`, ...); a variant with a function of its own (field_methods.py)
enters where its flag is on, in a line that names the flag (`if cfg.rollout_lag:`), so that at the defaults the step
calls nothing that does nothing. What a step logs is harness/stats.py's: `grpo_step` hands each update to `watch`.
book/reference.py writes the chapter's step and the papers' as their authors do; tests hold this step equal to each
at its flags.

Where this step departs from the book's scripts (rasbt/reasoning-from-scratch, ch07/03_rlvr_grpo_scripts_advanced/),
each a flag that `--recipe book` sets back:
1. The learner scores at the sampler's temperature; the book samples at T 0.8 with top-p 0.9 and scores at T 1 over
   the whole vocabulary: `--learner-temperature 1`.
2. Epochs reuse one batch of answers (`--mu`, `--minibatches`, as TRL and verl do); the book's inner epochs sample
   again from a frozen copy: `--resample-epochs`.
3. The ratio is per token; the book's ratio of summed log-probs is `--ratio-level sequence`.
4. The ratio is clipped by PPO's `min` at eps 0.2; the book's `torch.where` form at 10 is `--objective book --clip 10`.
5. The KL is k3 per token; the book's k1 on summed log-probs is `--kl-estimator k1 --kl-level sequence`. A reference
   model exists only when beta > 0, as in `7_5_plus_kl.py`.
"""
import math
from typing import NamedTuple

import torch

import field_methods
import rewards
# torchrun's part, each one call: global_mean (sum / count), global_std (.std()), same_count (the minibatches),
# everywhere_finite (the loss and the gradient norm): in one process the plain formula (harness/distributed.py)
from harness.distributed import everywhere_finite, global_mean, global_std, same_count
from kernels import linear_logprobs_and_entropy, reference_logprobs_and_entropy, token_logprobs_and_entropy
from rollouts import lagged_batch, minibatch_rows, rollout, sample_batch


def grpo_step(policy, ref_policy, opt, enc, next_problems, n_prompts, cfg, generator, lagged=None, watch=None,
              learner=None):
    """One GRPO step on n_prompts problems (next_problems() gives each) -> the batch its first epoch trained on.

    ref_policy: the frozen warm start, pi_ref (None when beta = 0); generator: the step's sampling noise;
    lagged: --rollout-lag's queue of batches, kept by the caller; watch(Update): called with each update before its
    optimizer step (train.py passes stats.StepLog's, which logs it); learner: the policy as the update's forward runs
    it (under torchrun wrapped in DDP, whose backward averages the gradients over the ranks), by default the policy."""
    learner = learner or policy
    batch, zero_std = sample_batch(policy, enc, next_problems, n_prompts, cfg, generator)  # G answers a prompt, scored
    if cfg.rollout_lag:  # an asynchronous trainer: the step trains on the batch sampled K steps ago
        batch, zero_std = stale_batch(policy, batch, zero_std, lagged, cfg)
    old_policy = policy  # pi_old: the policy that sampled the batch, before any update on it
    if cfg.resample_epochs:  # the book's inner epochs sample again, from a copy frozen at the step's first weights
        old_policy = field_methods.frozen_copy(policy)
    first = batch
    for epoch in range(cfg.mu):  # mu epochs on the batch: the ratio is 1 until the first optimizer step
        if epoch > 0 and cfg.resample_epochs:  # the book's inner epochs: new answers, from the frozen copy
            batch = rollout(old_policy, enc, batch.problems[::cfg.group_size], cfg, generator)
        if epoch == 0 or cfg.resample_epochs:  # once a batch: what its updates hold fixed
            loss_mask, adv, old_logp, ref_logp = fixed_for_batch(old_policy, ref_policy, batch, cfg, epoch == 0)
        for rows in minibatches(batch, cfg):  # K minibatches of whole groups (one by default)
            logp, entropy = batch_logprobs(learner, batch, rows, loss_mask, cfg)  # (b, T) pi_theta, with gradient
            if old_logp is None:  # the first update sees every row before any step: its policy is pi_old
                old_logp = logp.detach()  # (B, T)
            ref = None if ref_logp is None else ref_logp[rows]  # (b, T)
            loss = grpo_loss(logp, old_logp[rows], ref, adv[rows], loss_mask[rows], cfg, entropy,
                             batch.sampler_logp[rows])
            grad_norm = backward(loss.value, learner, cfg.max_grad_norm)  # the gradient, its norm held to the limit
            if watch is not None:  # what the step logs: harness/stats.py
                watch(Update(epoch, batch, rows, adv, old_logp, loss_mask, logp, entropy, loss, grad_norm, zero_std))
            opt.step()
    return first


class Update(NamedTuple):
    """One update, as grpo_step hands it to `watch` before its optimizer step: the policy is still the one whose
    log-probs it holds (harness/stats.py reads the exact KL off it)."""
    epoch: int                # 0, ..., mu - 1
    batch: object             # the epoch's rollouts.Rollouts: B rows
    rows: torch.Tensor        # (b,) the update's rows of it
    adv: torch.Tensor         # (B,)
    old_logp: torch.Tensor    # (B, T) pi_old
    loss_mask: torch.Tensor   # (B, T)
    logp: torch.Tensor        # (b, T) pi_theta
    entropy: torch.Tensor     # (b, T)
    loss: object              # Loss
    grad_norm: torch.Tensor   # 0-d, before the limit
    zero_std: torch.Tensor    # (groups sampled,) bool: all rewards equal, dynamic sampling's dropped groups too


# ---------------------------------------------------------------- 1. the batch and its advantages

def fixed_for_batch(old_policy, ref_policy, batch, cfg, first=True):
    """What every update on one batch holds fixed -> loss_mask (B, T), the answers' tokens the loss reads; adv (B,),
    their group-relative advantages; old_logp (B, T), pi_old's log-probs, or None where the batch's first update
    takes them off its own forward (old_logprobs); ref_logp (B, T), pi_ref's, or None without a KL term (the warm
    start is loaded only when beta > 0). first: the step's first batch (the book's later epochs sample others)."""
    loss_mask = trained_tokens(batch, cfg)
    adv = advantages(batch, cfg)
    old_logp = old_logprobs(old_policy, batch, loss_mask, cfg, first)
    ref_logp = None
    if cfg.kl > 0:
        ref_logp = logprobs_no_grad(ref_policy, batch, loss_mask, cfg)
    return loss_mask, adv, old_logp, ref_logp


def stale_batch(policy, batch, zero_std, lagged, cfg):
    """--rollout-lag K, an asynchronous trainer: the step's new batch joins the queue `lagged` and the step trains on
    the one sampled K steps ago (rollouts.lagged_batch) -> (that batch, its zero_std); without a lag, the step's own.
    With --lag-pi-old sampler, pi_old is the policy that sampled it, scored now on the weights that sample
    (batch.pi_old_logp); with learner, the learner as the step finds it (decoupled PPO; docs/design.md)."""
    if not cfg.rollout_lag:
        return batch, zero_std
    if cfg.lag_pi_old == "sampler":
        batch.pi_old_logp = logprobs_no_grad(policy, batch, batch.loss_mask, cfg)  # (B, T)
    return lagged_batch(batch, zero_std, lagged, cfg.rollout_lag)


def trained_tokens(batch, cfg):
    """(B, T) the completion tokens the loss reads: every answer's, or with --mask-truncated (DAPO's overlong
    filtering) none of an answer cut at the cap."""
    if cfg.mask_truncated:
        return batch.loss_mask & ~batch.truncated[:, None]
    return batch.loss_mask


def advantages(batch, cfg):
    """(B,) advantages of a batch: the group's of the summed reward, or GDPO's, of each term first
    (field_methods.gdpo_advantages); --adv-clip C clamps each to [-C, C] (a lone right answer among 8 gets 2.47)."""
    if cfg.reward_norm == "norm_then_sum":  # GDPO: each paid term's group advantage, their weighted sum normalised
        weights = rewards.term_weights(cfg)
        per_term = {k: group_advantages(batch.rewards[k], cfg.group_size) for k, w in weights.items() if w != 0}
        adv = field_methods.gdpo_advantages(per_term, weights)
    elif cfg.reward_norm == "sum_then_norm":
        adv = group_advantages(batch.rewards["total"], cfg.group_size, cfg.adv_norm, cfg.baseline,
                               batch.loss_mask.sum(1))
    else:
        raise ValueError(f"unknown reward normalisation {cfg.reward_norm!r}")
    if cfg.adv_clip > 0:
        adv = adv.clamp(-cfg.adv_clip, cfg.adv_clip)
    return adv


def group_advantages(scores, G, norm="group", baseline="group", lengths=None, eps=1e-4):
    """GRPO's group-relative advantage, one per answer. scores (B,): each answer's reward, B = n_groups * G.

    A_i = (r_i - mean(r of its group)) / (std + eps), with std over the group ("group", DeepSeekMath), over the
    batch ("batch"), or no division at all ("none", Dr. GRPO: a small std makes near-unanimous groups dominate).
    --baseline leave_one_out (RLOO), batch (REINFORCE++, lengths (B,)), none: field_methods.baseline_advantages."""
    if baseline != "group":
        return field_methods.baseline_advantages(scores, G, baseline, lengths)
    r = scores.view(-1, G)  # (n_groups, G)
    centred = r - r.mean(1, keepdim=True)
    if norm == "group":
        centred = centred / (r.std(1, keepdim=True) + eps)
    elif norm == "batch":
        centred = centred / (global_std(scores) + eps)
    elif norm != "none":
        raise ValueError(f"unknown advantage normalisation {norm!r}")
    return centred.view(-1)  # (B,)


def minibatches(batch, cfg):
    """K tensors of row indices, each of whole groups (--minibatches K; one by default); under torchrun, as many on
    every rank (same_count), so that every rank joins every gradient all-reduce."""
    return same_count(minibatch_rows(batch.tokens.shape[0], cfg.group_size, cfg.minibatches))


# ---------------------------------------------------------------- 2. log-probs

def batch_logprobs(model, batch, rows, loss_mask, cfg):
    """(b, T) log-probs and entropies of some rows of a batch under model (pi_theta, pi_old or pi_ref), as the learner
    sees them: at learner_temperature(cfg), over the sampler's support with --keep-sampling-mask."""
    support = None if batch.support is None else batch.support[rows]  # (b, T, V) bool
    groups = (batch.prompt_len, cfg.group_size) if cfg.share_prompts else None
    return token_logprobs(model, batch.tokens[rows], batch.mask[rows], loss_mask[rows], learner_temperature(cfg),
                          cfg.logprobs, support, groups)


def token_logprobs(model, tokens, mask, loss_mask, temperature=1.0, path="auto", support=None, groups=None):
    """(B, T) log pi(target | prefix) and the entropy there, for the targets in loss_mask (0 elsewhere). tokens, mask
    (B, L): the model reads tokens[:, :-1] and predicts tokens[:, 1:]; only the n completion positions reach the LM
    head. path (--logprobs): textbook, the (n, V) logits, their log_softmax and the target's entry
    (kernels.reference_logprobs_and_entropy); fused, straight from the hidden states, never the logits
    (kernels/linear_logprobs.py); logits, the kernels on the logits without their log-softmax (kernels/logprobs.py).
    auto: textbook on a CPU below FUSED_FROM tokens of vocabulary (this project's 287), fused from it and on a GPU.
    support (B, T, V) bool, --keep-sampling-mask: only what top-k / top-p left the sampler. groups (P, G),
    --share-prompts: G rows share their first P tokens, which the small GPT runs once a group."""
    h = model(tokens[:, :-1], mask[:, :-1], hidden=True, groups=groups)[loss_mask]  # (n, d)
    targets = tokens[:, 1:][loss_mask]  # (n,)
    if path == "auto":
        path = "fused" if h.is_cuda or model.lm_head_weight.shape[0] >= FUSED_FROM else "textbook"
    if path == "fused" and support is None:
        logp, entropy = linear_logprobs_and_entropy(h, model.lm_head_weight, targets, temperature)  # (n,) each
    else:
        logits = completion_logits(h, model.lm_head_weight, loss_mask, support)  # (n, V)
        from_logits = reference_logprobs_and_entropy if path == "textbook" else token_logprobs_and_entropy
        logp, entropy = from_logits(logits, targets, temperature)  # (n,) each
    zeros = logp.new_zeros(loss_mask.shape)  # (B, T)
    return zeros.masked_scatter(loss_mask, logp), zeros.masked_scatter(loss_mask, entropy)


# the vocabulary from which --logprobs auto takes the fused kernels on a CPU. bench/bench_head.py, one thread, 4,096
# rows: at 287 tokens the fused head takes 0.79x the textbook's time, about 1% of a default step, which runs as fast
# either way; at 4,096 it takes 0.61x, and the head is most of a step; at Qwen3's 151,936 the logits alone are 2 GB
FUSED_FROM = 4096


def completion_logits(hidden, weight, loss_mask, support=None):
    """(n, V) logits of the n completion positions' hidden states (n, d). support (B, T, V) bool, DeepSeek-V3.2's
    "keep sampling mask": only the tokens top-k / top-p left at sampling time (the rest -inf)."""
    logits = hidden @ weight.t()  # (n, V)
    return logits if support is None else logits.masked_fill(~support[loss_mask], float("-inf"))


def vocab_logprobs(model, tokens, mask, loss_mask, temperature=1.0, support=None):
    """(n, V) log pi(v | prefix) of every token v of the vocabulary at the n completion positions of loss_mask:
    log_softmax(logits / temperature), for the exact KL (stats.exact_kl)."""
    h = model(tokens[:, :-1], mask[:, :-1], hidden=True)[loss_mask]  # (n, d)
    return (completion_logits(h, model.lm_head_weight, loss_mask, support) / temperature).log_softmax(-1)


@torch.no_grad()
def logprobs_no_grad(model, batch, loss_mask, cfg):
    """(B, T) log-probs of every row of a batch under model, without gradient (pi_old, pi_ref)."""
    return batch_logprobs(model, batch, torch.arange(batch.tokens.shape[0]), loss_mask, cfg)[0]


def old_logprobs(old_policy, batch, loss_mask, cfg, first=True):
    """(B, T) pi_old's log-probs of a batch, fixed for its updates: the policy that sampled it, before any update on
    it (the book's frozen copy: the step's first weights). None where the batch's first update sees every row (one
    minibatch) and runs pi_old itself: grpo_step takes them off that update's own forward, detached, and saves this
    pass (TRL does the same; the pass's numbers are the forward's, bit for bit). A learner with dropout draws other
    noise than any pass, so there the pass stays. --rollout-lag --lag-pi-old sampler: the stale sampler, scored when
    it sampled (stale_batch)."""
    if cfg.rollout_lag and cfg.lag_pi_old == "sampler":
        return batch.pi_old_logp
    if first and cfg.minibatches == 1 and not getattr(old_policy.cfg, "dropout", 0.0):
        return None
    return logprobs_no_grad(old_policy, batch, loss_mask, cfg)


def learner_temperature(cfg):
    """The learner's temperature: the sampler's, unless --learner-temperature sets one (the book scores at 1)."""
    if cfg.learner_temperature is None:
        return cfg.temperature
    return cfg.learner_temperature


# ---------------------------------------------------------------- 3. the loss

class Loss(NamedTuple):
    """What grpo_loss returns: the loss and what the step logs of it (harness/stats.py)."""
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
    """The GRPO loss, to be minimised, on (B, T) token log-probs (B: the rows it is given, one minibatch's) -> Loss:
        loss = -mean( clipped(pi / pi_old) * A )  +  beta * mean( KL(pi || pi_ref) )  [- alpha * mean(entropy)]
    loss_mask (B, T) marks the completion tokens; adv (B,); entropy (B, T) is for the entropy bonus; sampler_logp
    (B, T), what the sampler drew each token with, for the off-policy corrections. The corrections that drop tokens
    or answers before the objective, and those that change its terms after, are field_methods.py's (off: nothing)."""
    kept, dropped = None, {}  # --off-policy-mask's kept answers; name -> the tokens a field mask took out, for the log
    if cfg.rejection or math.isfinite(cfg.off_policy_mask):  # tokens or answers out before the objective sees them
        loss_mask, adv, kept, dropped = field_methods.drop_before_the_objective(logp, old_logp, sampler_logp, adv,
                                                                                 loss_mask, cfg)
    A = adv[:, None]  # (B, 1): every token of an answer shares its advantage
    ratio = policy_ratio(logp, old_logp, loss_mask, cfg.ratio_level)  # (B, T) or (B, 1)
    surrogate, low, high, weights = surrogate_objective(ratio, A, logp, old_logp, sampler_logp, loss_mask, cfg,
                                                        dropped)
    bonus_mask = loss_mask  # the tokens the entropy bonus reads
    if cfg.kl_cov > 0 or cfg.top_entropy_quantile < 1:  # KL-Cov, the 80/20 rule: terms changed token by token
        surrogate, bonus_mask = field_methods.change_after_the_objective(surrogate, logp, old_logp, A, entropy,
                                                                         loss_mask, cfg, dropped)
    loss = aggregate(-surrogate.expand_as(logp), loss_mask, cfg.loss_agg, cfg.max_new_tokens)
    terms = {"pg_loss": loss}
    if cfg.kl > 0:  # beta, --kl
        reweight_by = old_logp if cfg.kl_reweight else None  # pi_old's log-probs: --kl-reweight's ratio
        kl = kl_penalty(logp, ref_logp, loss_mask, cfg.kl_estimator, cfg.kl_level, reweight_by)  # (B, T) or (B, 1)
        terms["kl"] = aggregate(kl, loss_mask, cfg.loss_agg, cfg.max_new_tokens)
        loss = loss + cfg.kl * terms["kl"]
    if cfg.entropy_coef != 0:  # alpha, --entropy-coef: an entropy bonus (TRL's entropy_coef, verl's entropy_coeff)
        terms["entropy_bonus"] = aggregate(entropy, bonus_mask, cfg.loss_agg, cfg.max_new_tokens)
        loss = loss - cfg.entropy_coef * terms["entropy_bonus"]
    terms["loss"] = loss
    return Loss(loss, terms, ratio, low, high, kept, dropped, weights, token_weights(loss_mask, cfg.loss_agg))


def surrogate_objective(ratio, A, logp, old_logp, sampler_logp, loss_mask, cfg, dropped):
    """The clipped objective, to be maximised -> (surrogate, low, high, weights): PPO's clip (--objective ppo, the
    default), or the book's, CISPO's or a field method's (field_methods.field_objective), times --tis-cap's importance
    weights where they are on (weights; IcePop's masked tokens go into dropped). low / high: where the clip binds."""
    eps_low, eps_high = cfg.clip_range  # the ratio is clipped to [1 - eps_low, 1 + eps_high]
    weights = None  # (B, T) or (B, 1): importance weights towards the learner, --tis-cap's
    if cfg.tis_cap > 0:
        weights = field_methods.tis_weights(old_logp, sampler_logp, cfg.tis_cap, loss_mask, cfg)
        if cfg.tis_mode.endswith("mask"):  # IcePop, MIS: the tokens whose weight was set to 0
            dropped["is_masked_frac"] = loss_mask & (weights == 0)
    if cfg.objective == "ppo":
        surrogate, low, high = clipped_objective(ratio, A, eps_low, eps_high, cfg.dual_clip)
    else:  # the book's, CISPO's, and the field's: SAPO, GMPO, DPPO-TV / -KL, VESPO
        surrogate, low, high, weights = field_methods.field_objective(ratio, A, logp, old_logp, sampler_logp,
                                                                      loss_mask, cfg, weights)
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
    low = (ratio < 1 - eps_low) & (adv < 0)
    high = (ratio > 1 + eps_high) & (adv > 0)
    if dual_clip > 0:
        surr = torch.where(adv < 0, torch.maximum(surr, dual_clip * adv), surr)
        high = high | ((adv < 0) & (ratio > dual_clip))
    return surr, low, high


def kl_penalty(logp, ref_logp, mask, estimator="k3", level="token", reweight_by=None):
    """Estimators of KL(pi || pi_ref) from samples of pi (Schulman, "Approximating KL"), (B, T) per token or
    (B, 1) per sequence; with log r = log pi_ref - log pi:
      k1 = -log r                 unbiased, can be negative, high variance
      k2 = (log r)^2 / 2          biased, always >= 0
      k3 = r - 1 - log r          unbiased, >= 0, low variance (GRPO's; r = safe_exp(log r); verl clamps it at 10)
    "From samples of pi": k1's gradient, grad log pi, averages to zero only there; over samples of another q
    (a sharper sampler, top-p) minimising it lowers log pi where q draws, flattening pi. level "sequence" (the
    book's 7_5_plus_kl.py): log pi and log pi_ref summed over each answer first, one log r an answer.
    reweight_by, pi_old's log-probs (--kl-reweight, DeepSeek-V3.2): on pi_old's samples, weight by the ratio (with
    its gradient),
        E_{y ~ pi_old}[ (pi(y) / pi_old(y)) * k3(y) ] = E_{y ~ pi}[ k3(y) ] = KL(pi || pi_ref)"""
    lp = logp  # (B, T)
    ref = ref_logp
    if level == "sequence":
        lp = (logp * mask).sum(1, keepdim=True)  # (B, 1)
        ref = (ref_logp * mask).sum(1, keepdim=True)  # (B, 1)
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
    if reweight_by is not None:
        kl = kl * policy_ratio(logp, reweight_by, mask, level)
    return kl


def aggregate(token_loss, mask, mode="seq_mean", max_len=None):
    """Reduce a (B, T) per-token loss over the completion tokens (mask) to a scalar:
    seq_mean:   each answer's mean over its tokens, then their mean (GRPO): a short answer's token weighs more;
    token_mean: sum over all tokens / their number (DAPO): every token weighs the same;
    constant:   sum over all tokens / (B * max_len) (Dr. GRPO): length carries no bias into the gradient;
    bnpo, luspo: the field's (field_methods.field_aggregate).
    A per-answer term (a sequence ratio's objective, the sequence-level KL) is weighed once an answer only by
    seq_mean; the others would count it once a token, and harness/cli.py refuses them."""
    mask = mask.to(token_loss.dtype)
    if mode == "seq_mean":
        total = sequence_mean(token_loss, mask).sum()
        count = mask.shape[0]
    elif mode == "token_mean":
        total = (token_loss * mask).sum()
        count = mask.sum()
    elif mode == "constant":
        total = (token_loss * mask).sum()
        count = mask.shape[0] * max_len
    else:
        return field_methods.field_aggregate(token_loss, mask, mode)  # bnpo, luspo (else a ValueError there)
    return global_mean(total, count)  # total / count; under torchrun over every rank's rows (harness/distributed.py)


def token_weights(mask, mode="seq_mean"):
    """(B, T): each completion token's weight in aggregate(mode), up to a factor common to the batch: 1 / |o_i| under
    seq_mean (a short answer's token weighs more: Dr. GRPO's length bias), 1 under the others (luspo: |o_i| / |o_i|)."""
    mask = mask.float()
    if mode == "seq_mean":
        return mask / mask.sum(1, keepdim=True).clamp(min=1)
    return mask


def sequence_mean(x, mask):
    """(B, T) -> (B, 1): each row's mean over its tokens in mask (0 for a row without any)."""
    mask = mask.to(x.dtype)
    return (x * mask).sum(1, keepdim=True) / mask.sum(1, keepdim=True).clamp(min=1)


# ---------------------------------------------------------------- 4. the update

def backward(loss, model, max_grad_norm):
    """The loss's gradient, its norm held to max_grad_norm -> the norm before. A loss or gradient that is not finite
    raises FloatingPointError before any weight moves in this update."""
    model.zero_grad(set_to_none=True)
    loss.backward()  # under DDP: the gradients arrive averaged over the ranks
    grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_grad_norm)
    if not everywhere_finite(loss, grad_norm):
        raise FloatingPointError(f"non-finite loss ({loss.item()}) or gradient norm ({grad_norm.item()})")
    return grad_norm
