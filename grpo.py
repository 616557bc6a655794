"""laptop-grpo's GRPO, one idea per function, read top to bottom; `grpo_step` at the end is the algorithm:

    sample G answers per prompt (rollouts.py) -> rewards (rewards.py) -> group advantages
    -> log-probs of pi_theta, pi_old, pi_ref (kernels/) -> clipped ratio (+ KL) -> update

    python train.py --clip 0.2 --kl 0.0      # GRPOConfig's fields are the flags; --help lists them

Every variant of the chapter is a flag on the one function that holds its idea, and a
recipe (RECIPES, `--recipe NAME`) is a named set of flags. Where this departs from the
book's scripts (rasbt/reasoning-from-scratch, ch07/03_rlvr_grpo_scripts_advanced/):
1. The learner scores log-probs at the sampler's temperature, so the sampler and the
   learner describe one distribution. The book samples at T 0.8 with top-p 0.9 and
   scores at T 1 over the full vocabulary: `--learner-temperature 1` (`token_logprobs`).
2. Epochs reuse one rollout (`--mu`, `--minibatches`, as TRL and verl do); the book's
   `--inner_epochs` sample again from a frozen copy: `--resample-epochs` (`grpo_step`).
3. The ratio is per token (GRPO); the book's summed sequence ratio is `--ratio-level
   sequence`, its `torch.where` objective `--objective book` (`book_objective`).
4. The KL is Schulman's k3 per token; the book's k1 on summed log-probs is
   `--kl-estimator k1 --kl-level sequence` (`kl_penalty`). A reference model exists only
   when beta > 0, as in `7_5_plus_kl.py`.
5. Log-probs come from kernels that never materialise an (N, V) log-softmax, only for
   completion rows (`token_logprobs`).
Many processes (torchrun): distributed.py says how each normaliser is made global.
"""
import copy
from dataclasses import dataclass, field

import torch

import rewards
from distributed import everywhere_finite, global_mean, global_std, same_count, unwrap
from kernels import linear_logprobs_and_entropy, token_logprobs_and_entropy
from rollouts import minibatch_rows, rollout, sample_batch
from stats import StepStats


def knob(group, default, help, choices=None, type=None):
    """A GRPOConfig field and its command-line flag: train.py makes `--field-name` from
    it, so the default here is the only one (edit it and `python train.py` follows)."""
    return field(default=default, metadata={"group": group, "help": help, "choices": choices, "type": type})


@dataclass
class GRPOConfig:
    # rollouts
    group_size: int = knob("rollouts", 8, "G: completions per prompt")
    max_new_tokens: int = knob("rollouts", 40, "completion length cap (L_max)")
    temperature: float = knob("rollouts", 1.0, "sampling temperature")
    top_p: float = knob("rollouts", 1.0, "nucleus sampling")
    top_k: int = knob("rollouts", 0, "top-k sampling (0: off)")
    learner_temperature: float = knob("rollouts", None, "temperature of the learner's log-probs (pi_theta, pi_old, "
                                      "pi_ref); default: --temperature (the book: 1)", type=float)
    # rewards
    format_weight: float = knob("rewards", 0.0, "w in reward = correct + w * format")
    format_check: str = knob("rewards", "strict", "ours (one non-empty think block, then the answer), or the "
                             "book's (<think> before </think>)", ["strict", "book"])
    gated: bool = knob("rewards", False, "format reward only for correct answers")
    overlong_cache: int = knob("rewards", 0, "DAPO soft overlong penalty over the last N tokens (0: off)")
    # advantages and sampling
    adv_norm: str = knob("advantages and sampling", "group", "divide by the std of the group, the batch, or not (Dr. GRPO)",
                         ["group", "batch", "none"])
    reward_norm: str = knob("advantages and sampling", "sum_then_norm", "normalise the summed reward, or each term "
                            "first (GDPO)", ["sum_then_norm", "norm_then_sum"])
    dynamic_sampling: bool = knob("advantages and sampling", False, "DAPO: drop groups with equal rewards, draw more")
    max_sampling_rounds: int = knob("advantages and sampling", 3, "rollout rounds per step with dynamic sampling")
    # objective
    mu: int = knob("objective", 2, "epochs: updates over each step's rollouts (the ratio leaves 1 from the second)")
    minibatches: int = knob("objective", 1, "K: optimizer steps per epoch, each on 1/K of the groups (K * mu per step)")
    resample_epochs: bool = knob("objective", False, "each epoch after the first samples fresh answers to the same "
                                 "prompts from a frozen copy of pi_old (the book's --inner_epochs)")
    clip: float = knob("objective", 0.2, "eps_low of the clipped ratio ('inf': no clipping)")
    clip_high: float = knob("objective", None, "eps_high (DAPO clip-higher); default: --clip", type=float)
    dual_clip: float = knob("objective", 0.0, "dual-clip constant c > 1 for negative advantages (0: off)")
    objective: str = knob("objective", "ppo", "PPO's clipped surrogate, CISPO's clipped weights, or the book's "
                          "torch.where form", ["ppo", "cispo", "book"])
    ratio_level: str = knob("objective", "token", "token (GRPO), gspo, or the book's summed sequence ratio",
                            ["token", "gspo", "sequence"])
    kl: float = knob("objective", 0.0, "beta: KL penalty to the warm-start policy")
    kl_estimator: str = knob("objective", "k3", "Schulman's KL estimator", ["k1", "k2", "k3"])
    kl_level: str = knob("objective", "token", "per token, or the book's on summed log-probs", ["token", "sequence"])
    loss_agg: str = knob("objective", "seq_mean", "GRPO, DAPO, or Dr. GRPO aggregation", ["seq_mean", "token_mean", "constant"])
    mask_truncated: bool = knob("objective", False, "truncated completions contribute no loss")
    entropy_coef: float = knob("objective", 0.0, "alpha: subtract alpha * entropy from the loss (an entropy bonus)")
    fused_head: bool = knob("objective", True, "log-probs straight from hidden states (never the logits)")
    # off-policy corrections
    tis_cap: float = knob("off-policy corrections", 0.0, "C: truncated importance sampling, weight each token by "
                          "min(pi_old / pi_sampler, C) (0: off)")
    keep_sampling_mask: bool = knob("off-policy corrections", False, "log-probs over the support top-k / top-p "
                                    "sampled from (DeepSeek-V3.2)")
    off_policy_mask: float = knob("off-policy corrections", float("inf"), "delta: drop negative-advantage sequences "
                                  "whose KL to the sampler exceeds it (DeepSeek-V3.2; inf: off)")
    kl_reweight: bool = knob("off-policy corrections", False, "weight the KL estimate by pi / pi_old (DeepSeek-V3.2)")
    # optimisation
    lr: float = knob("optimisation", 1e-4, "Adam learning rate")
    max_grad_norm: float = knob("optimisation", 1.0, "gradient clipping")


# Each recipe is a set of flags (`python train.py --recipe NAME`; flags given explicitly still
# win): GRPOConfig fields, and train.py's own where a recipe needs them (prompts_per_step).
# The README's recipe table says which paper or book script each value follows.
RECIPES = {
    "grpo": {},  # DeepSeekMath's GRPO as this file's defaults: group std, per-sequence mean, eps 0.2
    "dapo": dict(clip_high=0.28, loss_agg="token_mean", dynamic_sampling=True, overlong_cache=8, kl=0.0,
                 mu=1, minibatches=2),
    "drgrpo": dict(adv_norm="none", loss_agg="constant"),
    "gspo": dict(ratio_level="gspo", clip=3e-4, clip_high=4e-4, mu=1, minibatches=2),
    "cispo": dict(objective="cispo", clip=float("inf"), clip_high=0.28, loss_agg="token_mean", mu=1, minibatches=2),
    # the book's 7_7_improvements/olmo3_style.py, items 1-7
    "olmo3": dict(dynamic_sampling=True, loss_agg="token_mean", kl=0.0, clip_high=0.28, adv_norm="none",
                  tis_cap=2.0, mu=1, minibatches=2),
    # the book's 7_7_improvements/deepseek_v32_style.py, items 8-12 (top-p 0.9 as there: the kept mask needs it)
    "deepseek_v32": dict(kl=0.02, kl_reweight=True, off_policy_mask=0.1, keep_sampling_mask=True, top_p=0.9,
                         mu=1, minibatches=2),
    # the book's 7_7_improvements/gdpo.py: a 0.1 format bonus, each term normalised in its group first
    "gdpo": dict(reward_norm="norm_then_sum", format_weight=0.1, kl=0.02),
    # the book's own algorithm, 7_5_plus_kl.py: one prompt and 8 answers per step, sampled at T 0.8 / top-p
    # 0.9 and scored at T 1; two inner epochs that sample again from the frozen copy; the summed
    # sequence ratio in the torch.where form at eps 10; k1 on summed log-probs. lr and beta: see README.
    "book": dict(prompts_per_step=1, group_size=8, temperature=0.8, top_p=0.9, learner_temperature=1.0,
                 mu=2, minibatches=1, resample_epochs=True, ratio_level="sequence", objective="book",
                 clip=10.0, kl=0.1, kl_estimator="k1", kl_level="sequence", loss_agg="seq_mean", lr=1e-4),
}
# ... and at the book's own scale, for its Qwen3-0.6B on MATH (docs/book_model.md): 7_5's lr, KL and budget,
# graded on MATH-500 as the book grades it (the last number when there is no box)
RECIPES["book_qwen3"] = dict(RECIPES["book"], max_new_tokens=512, lr=1e-5, kl=0.001, eval_every=50, eval_size=500,
                             eval_fallback="number")
# the book's 7_6_plus_format_reward.py as the chapter runs it (--steps 500 --max_new_tokens 1024, the rest its
# defaults): from the reasoning Qwen3-0.6B in its chat template, one inner epoch, no KL, and a format bonus of
# weight 1 for <think> before </think>, ungated. Departures: README, "Recipes".
RECIPES["book_qwen3_format"] = dict(
    prompts_per_step=1, group_size=8, max_new_tokens=1024, temperature=0.8, top_p=0.9, learner_temperature=1.0,
    mu=1, minibatches=1, resample_epochs=False, ratio_level="sequence", objective="book", clip=10.0, kl=0.0,
    loss_agg="seq_mean", format_weight=1.0, format_check="book", gated=False, lr=1e-5,
    chat_template=True, eval_every=50, eval_size=500, eval_fallback="number")


# ---------------------------------------------------------------- 1. advantages

def group_advantages(rewards, G, norm="group", eps=1e-4):
    """GRPO's group-relative advantage, one per completion. rewards (B,), B = n_groups * G.

    A_i = (r_i - mean(r of its group)) / (std + eps), with std over the group ("group",
    DeepSeekMath), over the whole batch ("batch"), or no division at all ("none",
    Dr. GRPO: dividing by a small std makes near-unanimous groups dominate).
    """
    r = rewards.view(-1, G)  # (n_groups, G)
    centred = r - r.mean(1, keepdim=True)
    if norm == "group":
        centred = centred / (r.std(1, keepdim=True) + eps)
    elif norm == "batch":
        centred = centred / (global_std(rewards) + eps)
    elif norm != "none":
        raise ValueError(f"unknown advantage normalisation {norm!r}")
    return centred.view(-1)  # (B,)


def gdpo_advantages(terms, weights, G, norm="group"):
    """GDPO (Liu et al. 2026): normalise each reward term within its group first, then
    sum with the terms' weights and normalise the sum (as the book's gdpo.py does):

        A = norm( sum_k w_k * (r_k - mean_group(r_k)) / (std_group(r_k) + eps) )

    With one sum-then-normalise, a dense term (format, paid on most samples) sets the
    group's std and drowns the sparse one (correctness); here each term gets its own
    scale first. A term that is constant within a group contributes 0 there.
    terms: name -> (B,); weights: name -> float.
    """
    total = sum(w * group_advantages(terms[k], G, "group") for k, w in weights.items() if w != 0)  # (B,)
    return group_advantages(total, G, norm)


def advantages(batch, cfg):
    """(B,) advantages of a batch: of the summed reward, or GDPO's of each term first."""
    if cfg.reward_norm == "norm_then_sum":
        return gdpo_advantages(batch.rewards, rewards.term_weights(cfg.format_weight), cfg.group_size, cfg.adv_norm)
    if cfg.reward_norm != "sum_then_norm":
        raise ValueError(f"unknown reward normalisation {cfg.reward_norm!r}")
    return group_advantages(batch.rewards["total"], cfg.group_size, cfg.adv_norm)


# ---------------------------------------------------------------- 2. log-probs

def token_logprobs(model, tokens, mask, loss_mask, temperature=1.0, fused=True, support=None):
    """log pi(target | prefix) and the entropy there, for the targets in loss_mask.

    tokens, mask (B, L); loss_mask (B, T = L - 1) marks targets tokens[:, 1:] that are
    completion tokens. Returns logp, entropy (B, T), zero outside loss_mask. Only those
    rows reach the LM head: prompt and padding positions cost no (V)-sized work at all.
    Temperature divides the logits. fused=True goes from hidden states straight to
    log-probs (kernels/linear_logprobs.py), so not even the (n, V) logits exist.

    support (B, T, V) bool, DeepSeek-V3.2's "keep sampling mask": the log-probs are over
    the tokens top-k / top-p left at sampling time (the rest -inf), the distribution the
    sampler really drew from. It needs the (n, V) logits, and one byte per logit kept.
    """
    h = model(tokens[:, :-1], mask[:, :-1], hidden=True)  # (B, T, d)
    rows, targets = h[loss_mask], tokens[:, 1:][loss_mask]  # (n, d), (n,): completion positions only
    if support is not None:
        logits = (rows @ model.lm_head_weight.t()).masked_fill(~support[loss_mask], float("-inf"))  # (n, V)
        logp, ent = token_logprobs_and_entropy(logits, targets, temperature)
    elif fused:
        logp, ent = linear_logprobs_and_entropy(rows, model.lm_head_weight, targets, temperature)
    else:
        logp, ent = token_logprobs_and_entropy(rows @ model.lm_head_weight.t(), targets, temperature)  # (n, V) logits
    zeros = logp.new_zeros(loss_mask.shape)  # (B, T)
    return zeros.masked_scatter(loss_mask, logp), zeros.masked_scatter(loss_mask, ent)


def batch_logprobs(model, batch, rows, loss_mask, cfg):
    """(b, T) log-probs and entropies of some rows of a batch under model, as the learner
    sees them: at the sampler's temperature unless --learner-temperature sets its own."""
    T = cfg.temperature if cfg.learner_temperature is None else cfg.learner_temperature
    support = None if batch.support is None else batch.support[rows]
    return token_logprobs(model, batch.tokens[rows], batch.mask[rows], loss_mask[rows], T, cfg.fused_head, support)


# ---------------------------------------------------------------- 3. the objective

def sequence_mean(x, mask):
    """(B, T) -> (B, 1): each row's mean over its tokens in mask (0 for a row without any)."""
    mask = mask.to(x.dtype)
    return (x * mask).sum(1, keepdim=True) / mask.sum(1, keepdim=True).clamp(min=1)


def policy_ratio(logp, old_logp, mask, level="token"):
    """Importance ratio pi / pi_old, (B, T) for token level or (B, 1) for sequence levels.

    token:    r_t = exp(logp_t - old_logp_t)                         (PPO / GRPO)
    gspo:     s = exp(mean_t (logp_t - old_logp_t)), length-normalised (GSPO)
    sequence: s = exp(sum_t (logp_t - old_logp_t)), the book's whole-sequence ratio, whose
              log-ratio grows with length, so long answers are clipped far more often.
    """
    log_r = (logp - old_logp) * mask  # (B, T)
    if level == "token":
        return torch.exp(log_r.clamp(max=20.0))
    if level == "gspo":
        log_r = sequence_mean(log_r, mask)  # (B, 1)
    elif level == "sequence":
        log_r = log_r.sum(1, keepdim=True)
    else:
        raise ValueError(f"unknown ratio level {level!r}")
    return torch.exp(log_r.clamp(max=20.0))  # clamp: exp cannot overflow


def clip_range(cfg):
    """(eps_low, eps_high): clip the ratio to [1 - eps_low, 1 + eps_high]."""
    return cfg.clip, cfg.clip if cfg.clip_high is None else cfg.clip_high


def clipped_objective(ratio, adv, eps_low, eps_high, dual_clip=0.0):
    """PPO's clipped surrogate, to be maximised: min(r * A, clip(r, 1-eps_low, 1+eps_high) * A).
    -> (surrogate, low, high): low / high mark where a bound binds, which is where the
    gradient is zero. ratio (B, T) or (B, 1), adv (B, 1); each output their broadcast shape.

    The min is the pessimistic bound for both signs of A: for A > 0 the ratio stops
    earning once r > 1+eps_high, for A < 0 once r < 1-eps_low; outside the clip range
    the gradient is zero, and a ratio that moved the *wrong* way is never clipped.
    Dual clip (c > 1): for A < 0 the objective is also bounded below by c * A, which binds
    (on the high side) once r > c.
    """
    surr = torch.minimum(ratio * adv, ratio.clamp(1 - eps_low, 1 + eps_high) * adv)
    low, high = (ratio < 1 - eps_low) & (adv < 0), (ratio > 1 + eps_high) & (adv > 0)
    if dual_clip > 0:
        surr = torch.where(adv < 0, torch.maximum(surr, dual_clip * adv), surr)
        high = high | ((adv < 0) & (ratio > dual_clip))
    return surr, low, high


def book_objective(ratio, adv, eps_low, eps_high):
    """The book's clipped objective (7_4_plus_clip_ratio.py onwards), to be maximised:

        torch.where(A >= 0, min(r A, clip(r) A), max(r A, clip(r) A))

    For A >= 0 it is PPO's. For A < 0 the max of the two surrogates is A * min(r, clip(r)):
    it clips where r has grown (r > 1+eps, a bad answer made likelier, exactly where PPO
    keeps the gradient) and never where r has shrunk, the inverse of PPO. So for either
    sign the gradient stops only once r > 1+eps_high (with the book's eps 10: r > 11).
    -> (surrogate, low, high) as clipped_objective; low never binds.
    """
    unclipped, clipped = ratio * adv, ratio.clamp(1 - eps_low, 1 + eps_high) * adv
    surr = torch.where(adv >= 0, torch.minimum(unclipped, clipped), torch.maximum(unclipped, clipped))
    high = (ratio > 1 + eps_high).expand_as(surr)
    return surr, torch.zeros_like(high), high


def cispo_objective(ratio, adv, logp, eps_low, eps_high):
    """CISPO: sg(clip(r)) * A * logp. The clipped ratio only weights the policy gradient,
    so every token keeps a gradient (PPO drops clipped tokens entirely).
    -> (surrogate, low, high): where the weight is clipped, for either sign of A."""
    surr = ratio.clamp(1 - eps_low, 1 + eps_high).detach() * adv * logp
    low, high = (ratio < 1 - eps_low).expand_as(surr), (ratio > 1 + eps_high).expand_as(surr)
    return surr, low, high


def kl_penalty(logp, ref_logp, mask, estimator="k3", level="token", old_logp=None):
    """Estimators of KL(pi || pi_ref) from samples of pi (Schulman, "Approximating KL"):
    (B, T) per token, or (B, 1) per sequence. logp, ref_logp (B, T), mask (B, T).

    With log r = log pi_ref - log pi:
      k1 = -log r                 unbiased, can be negative, high variance
      k2 = (log r)^2 / 2          biased, always >= 0
      k3 = r - 1 - log r          unbiased, always >= 0, low variance (GRPO's choice; r from
                                  a clamped log r, so exp cannot overflow)
    "From samples of pi": the gradient of k1 is grad log pi, whose mean over samples of pi
    is zero. Over samples of another distribution q (a sampler at a lower temperature,
    or top-p) it is not: minimising k1 then lowers log pi where q draws, flattening pi.

    level "sequence" (the book's 7_5_plus_kl.py): log pi and log pi_ref are summed over
    each answer's tokens first, and the estimator sees one log r per answer.
    old_logp given (--kl-reweight, DeepSeek-V3.2): the tokens were sampled from pi_old,
    not pi, so once updates go off-policy E_{pi_old}[k3] is the KL of the wrong policy, and
    its gradient is biased. Weighting by the importance ratio at the same level fixes both:
        E_{y ~ pi_old}[ (pi(y) / pi_old(y)) * k3(y) ] = E_{y ~ pi}[ k3(y) ] = KL(pi || pi_ref)
    The ratio keeps its gradient (the estimate is a function of pi through both factors).
    """
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
        kl = torch.exp(log_r.clamp(max=20.0)) - 1 - log_r
    else:
        raise ValueError(f"unknown KL estimator {estimator!r}")
    if old_logp is not None:
        kl = kl * policy_ratio(logp, old_logp, mask, level)
    return kl


def aggregate(token_loss, mask, mode="seq_mean", max_len=None):
    """Reduce a (B, T) per-token loss over the completion tokens (mask) to a scalar.

    seq_mean:   mean over each sequence's tokens, then over sequences (GRPO); a token of
                a short answer weighs more than one of a long answer.
    token_mean: sum over all tokens / number of tokens (DAPO); every token weighs the same.
    constant:   sum over all tokens / (B * max_len) (Dr. GRPO); no length normalisation
                at all, so length carries no bias into the gradient.
    Each is a mean of a sum over this batch's rows, and under torchrun over every rank's
    rows (global_mean).

    A per-sequence term (the gspo or sequence ratio's objective, the sequence-level KL:
    one value per answer, broadcast over its tokens) is weighed once per answer only by
    seq_mean. token_mean and constant sum it once per token, so each answer's single term
    would count as many times as the answer is long: train.py refuses those combinations.
    """
    mask = mask.to(token_loss.dtype)
    if mode == "seq_mean":
        return global_mean(sequence_mean(token_loss, mask).sum(), mask.shape[0])
    if mode == "token_mean":
        return global_mean((token_loss * mask).sum(), mask.sum())
    if mode == "constant":
        return global_mean((token_loss * mask).sum(), mask.shape[0] * max_len)
    raise ValueError(f"unknown loss aggregation {mode!r}")


def tis_weights(old_logp, sampler_logp, cap):
    """Truncated importance sampling (Yao et al. 2025): the tokens were drawn from the
    sampler's distribution (after temperature, top-k, top-p; on GPU often in another
    precision), not from the learner's pi_old. Each token's policy-gradient term is
    re-weighted towards the learner, capped so that a rare token cannot blow up the
    update: w_t = min(pi_old(y_t) / pi_sampler(y_t), C), (B, T), no gradient; cap <= 0: ones.
    """
    if cap <= 0:
        return torch.ones_like(old_logp)
    return torch.exp((old_logp - sampler_logp).clamp(max=20.0)).clamp(max=cap)


@torch.no_grad()
def off_policy_keep(logp, sampler_logp, adv, mask, delta):
    """DeepSeek-V3.2's off-policy sequence masking: drop (weight 0) a sequence with a
    negative advantage whose length-normalised KL from the sampling policy exceeds delta,

        keep_i = 0  if  A_i < 0  and  (1/|o_i|) sum_t (log pi_sampler - log pi)(o_t) > delta

    (the sampler-side estimate, as in the book's deepseek_v32_style.py). Negative samples
    the policy has already moved far away from teach it mostly noise. (B,) float.
    """
    kl = sequence_mean(sampler_logp - logp, mask)[:, 0]  # (B,)
    return (~((adv < 0) & (kl > delta))).to(logp.dtype)


def grpo_loss(logp, old_logp, ref_logp, adv, mask, cfg, entropy=None, token_weight=None):
    """The GRPO objective, to be minimised, on (B, T) token log-probs; mask (B, T) marks
    the completion tokens. token_weight (B, T) scales each token's policy-gradient term
    (TIS); entropy (B, T) is for the entropy bonus. -> (loss, {term: tensor}, ratio, low,
    high): the ratio (B, T) or (B, 1), and where the objective's clip binds on each side.
    """
    eps_low, eps_high = clip_range(cfg)
    A = adv[:, None]  # (B, 1): every token of a completion shares its advantage
    ratio = policy_ratio(logp, old_logp, mask, cfg.ratio_level)  # (B, T) or (B, 1)
    if cfg.objective == "ppo":
        obj, low, high = clipped_objective(ratio, A, eps_low, eps_high, cfg.dual_clip)
    elif cfg.objective == "book":
        obj, low, high = book_objective(ratio, A, eps_low, eps_high)
    elif cfg.objective == "cispo":
        obj, low, high = cispo_objective(ratio, A, logp, eps_low, eps_high)
    else:
        raise ValueError(f"unknown objective {cfg.objective!r}")
    obj = obj.expand_as(logp) if token_weight is None else obj * token_weight  # (B, T)
    loss = aggregate(-obj, mask, cfg.loss_agg, cfg.max_new_tokens)
    terms = {"pg_loss": loss}
    if cfg.kl > 0:
        kl = kl_penalty(logp, ref_logp, mask, cfg.kl_estimator, cfg.kl_level, old_logp if cfg.kl_reweight else None)
        terms["kl"] = aggregate(kl, mask, cfg.loss_agg, cfg.max_new_tokens)  # kl: (B, T) or (B, 1)
        loss = loss + cfg.kl * terms["kl"]
    if cfg.entropy_coef != 0:  # entropy bonus (TRL's entropy_coef, verl's entropy_coeff): keep exploring
        terms["entropy_bonus"] = aggregate(entropy, mask, cfg.loss_agg, cfg.max_new_tokens)
        loss = loss - cfg.entropy_coef * terms["entropy_bonus"]
    terms["loss"] = loss
    return loss, terms, ratio, low, high


# ---------------------------------------------------------------- 4. what a step logs

@torch.no_grad()
def update_stats(stats, terms, ratio, low, high, logp, old_logp, entropy, mask, keep, grad_norm):
    """Record one update into `stats` (a stats.StepStats): the loss terms, the gradient
    norm, the learner's entropy, and how far the policy has drifted from the one that
    sampled: the ratio's mean / min / max, the share of tokens where each side of the
    objective's clip binds (low, high, as the objective returned them; clip_frac: either),
    and the approximate KL to pi_old (verl's ppo_kl: mean of old_logp - logp)."""
    for name, value in terms.items():
        stats.mean(name, value)
    stats.mean("grad_norm", grad_norm)
    m, r = mask.bool(), ratio.expand_as(logp)  # (B, T) each
    low, high = low.expand_as(m), high.expand_as(m)  # (B, T) each
    stats.mean("ratio_mean", r, m)
    stats.min("ratio_min", r, m, default=1.0)
    stats.max("ratio_max", r, m, default=1.0)
    stats.mean("clip_frac_low", low, m)
    stats.mean("clip_frac_high", high, m)
    stats.mean("clip_frac", low | high, m)
    stats.mean("ppo_kl", old_logp - logp, m)
    stats.mean("entropy", entropy, m)
    stats.mean("off_policy_masked_frac", 1 - keep)


MIN_MISMATCH = 1e-3  # nats per answer: below it the sampler is the learner, and pg_k1 is a ratio of noises


def pg_as_k1(adv, sampler_logp, old_logp, mask):
    """The policy gradient's own naive KL: (push, mismatch), each (B,), summed as pg_k1.

    Answers drawn from a sampler q that is not the learner pi (the book samples at T 0.8 with
    top-p 0.9 and scores at T 1): descending on -A_i log pi(y_i) then does, besides
    reinforcing, what the book's k1 term beta * log pi(y_i) does. At each token the score
    log pi(y) averages, over y ~ q, to a push of pi towards q, whose size grows with how
    far q is from pi there; a negative advantage reverses it, flattening pi away from the
    sharper q. With M_i = sum_t (log q - log pi)(y_t), answer i's sampled mismatch, the
    policy gradient acts as a k1 with
        pg_k1 = -sum_i A_i M_i / sum_i M_i
    > 0 when the wrong answers carry more of the mismatch than the right ones (long wrong
    answers, as in the book's 7_3 log: it flattens, as the book's KL does), < 0 when the
    right ones do (it sharpens). EXPERIMENTS.md (lesson 4) sets it beside the book's k1.
    """
    mismatch = ((sampler_logp - old_logp) * mask).sum(1)  # (B,)
    return -adv * mismatch, mismatch


@torch.no_grad()
def batch_stats(stats, batch, adv, zero_std_groups, old_logp, loss_mask):
    """Record the sampled batch: rewards (every term rewards.score returns), advantages,
    lengths (of the right and the wrong answers too), zero-variance groups, and the
    sampler-learner gap with what the policy gradient makes of it (pg_k1)."""
    for name, r in batch.rewards.items():
        stats.mean("reward" if name == "total" else "reward_" + name, r)
    stats.std("reward_std", batch.rewards["total"])
    stats.mean("adv_mean", adv)
    stats.std("adv_std", adv)
    stats.mean("zero_std_frac", zero_std_groups)
    lengths = batch.loss_mask.sum(1)  # (B,)
    stats.mean("resp_len", lengths)
    stats.max("resp_len_max", lengths)
    stats.mean("truncated_frac", batch.truncated)
    correct = batch.rewards["correct"] > 0  # (B,)
    stats.mean("resp_len_correct", lengths, correct, default=None)  # long wrong answers feed pg_k1
    stats.mean("resp_len_wrong", lengths, ~correct, default=None)
    stats.count("n_tokens", batch.mask)
    # The sampler and the learner should describe one distribution; with top-p / top-k or a
    # learner temperature of its own they do not. Logged whether or not --tis-cap corrects for
    # it: the gap, the uncapped weight pi_old / pi_sampler, and the sampler's own entropy (the
    # learner's is "entropy"): a learner that flattens while the sampler hides it.
    m = loss_mask.bool()
    gap = old_logp - batch.sampler_logp  # (B, T)
    w = gap.clamp(max=20.0).exp()  # (B, T) the TIS weight before its cap
    stats.mean("sampler_gap", gap.abs(), m)
    stats.min("tis_weight_min", w, m, default=1.0)
    stats.mean("tis_weight_mean", w, m, default=1.0)
    stats.max("tis_weight_max", w, m, default=1.0)
    stats.mean("sampler_entropy", batch.sampler_entropy, m)
    push, mismatch = pg_as_k1(adv, batch.sampler_logp, old_logp, m)  # (B,) each
    stats.mean("mismatch", mismatch)
    stats.ratio("pg_k1", push, mismatch, MIN_MISMATCH)


# ---------------------------------------------------------------- 5. one GRPO step

def optimizer_step(model, opt, loss, max_grad_norm, update=1, updates=1):
    """Backward, clip the gradient norm, step. Raises FloatingPointError before the step if
    the loss or the gradient is not finite, saying which of the step's updates it was: the
    ones before it did change the weights."""
    opt.zero_grad(set_to_none=True)
    loss.backward()  # under DDP: the gradients arrive averaged over the ranks
    grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_grad_norm)
    if not everywhere_finite(loss, grad_norm):
        done = update - 1
        raise FloatingPointError(f"non-finite loss ({loss.item()}) or gradient norm ({grad_norm.item()}) in update "
                                 f"{update} of {updates} of this step, after {done} applied update{'s' * (done != 1)}")
    opt.step()
    return grad_norm


@torch.no_grad()
def all_rows_logprobs(model, batch, loss_mask, cfg):
    """(B, T) log-probs of every row of a batch under model, without gradient (pi_old, pi_ref)."""
    return batch_logprobs(model, batch, torch.arange(batch.tokens.shape[0]), loss_mask, cfg)[0]


def grpo_step(model, ref_model, opt, enc, next_problems, n_prompts, cfg, generator):
    """One GRPO step: sample G answers for each of n_prompts problems, score them, then mu
    epochs of K minibatch updates. Returns (the first epoch's Rollouts, {statistic: float}).

    pi_old, the policy that samples, is the weights at the start of the step, fixed for all
    of its updates, while the updates change `policy` in place. So pi_old's log-probs of a
    batch of rollouts are fixed once, before its first update: from `policy` itself in the
    first epoch (no update has run yet) and, where later epochs sample afresh (the book's
    inner epochs), from a frozen copy of the step's starting weights.

    Under torchrun, model is the DDP wrapper (distributed.wrap) and n_prompts this rank's
    share; the statistics are the global ones, the same on every rank.
    """
    policy = unwrap(model)  # the module itself: sampling and no-grad passes need no gradient all-reduce
    frozen_pi_old = copy.deepcopy(policy).requires_grad_(False) if cfg.resample_epochs and cfg.mu > 1 else None
    first, zero_std_groups = sample_batch(policy, enc, next_problems, n_prompts, cfg, generator)
    stats = StepStats()
    for epoch in range(cfg.mu):
        if epoch == 0 or cfg.resample_epochs:  # a new batch of rollouts: its advantages, pi_ref's and pi_old's log-probs
            sampler = policy if epoch == 0 else frozen_pi_old  # the weights that draw this batch: pi_old
            batch = first if epoch == 0 else rollout(sampler, enc, first.problems[::cfg.group_size], cfg, generator)
            adv = advantages(batch, cfg)  # (B,)
            loss_mask = batch.loss_mask & ~batch.truncated[:, None] if cfg.mask_truncated else batch.loss_mask
            parts = same_count(minibatch_rows(len(adv), cfg.group_size, cfg.minibatches))  # K lists of rows
            ref_logp = all_rows_logprobs(ref_model, batch, loss_mask, cfg) if cfg.kl > 0 else None  # pi_ref (B, T)
            # pi_old's log-probs, fixed here for every update of this batch. When the first update
            # sees every row (first epoch, one minibatch) it runs on pi_old's very weights, so its own
            # forward gives them (a no-grad pass of its own would add ~11% to a default step)
            free = batch_logprobs(model, batch, parts[0], loss_mask, cfg) if epoch == 0 and len(parts) == 1 else None
            old_logp = free[0].detach() if free is not None else all_rows_logprobs(sampler, batch, loss_mask, cfg)
        for rows in parts:
            stats.next_update()
            # pi_theta's (b, T) each, with gradient; the free forward serves the first update only
            logp, entropy = free if free is not None else batch_logprobs(model, batch, rows, loss_mask, cfg)
            free = None
            old = old_logp[rows]  # pi_old (b, T)
            ref = None if ref_logp is None else ref_logp[rows]  # pi_ref (b, T)
            m, sampler_logp = loss_mask[rows], batch.sampler_logp[rows]  # (b, T) each
            weight = tis_weights(old, sampler_logp, cfg.tis_cap)  # (b, T) each token's weight (TIS)
            keep = off_policy_keep(logp, sampler_logp, adv[rows], m, cfg.off_policy_mask)  # (b,)
            A = adv[rows] * keep  # (b,) the advantages the update follows
            loss, terms, ratio, low, high = grpo_loss(logp, old, ref, A, m, cfg, entropy, weight)
            grad_norm = optimizer_step(model, opt, loss, cfg.max_grad_norm, stats.update, cfg.mu * len(parts))
            update_stats(stats, terms, ratio, low, high, logp, old, entropy, m, keep, grad_norm)
        if epoch == 0:
            batch_stats(stats, batch, adv, zero_std_groups, old_logp, loss_mask)
    return first, stats.result()
