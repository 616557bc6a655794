"""GRPO's variants with a function of their own, each a flag that is off by default: the chapter's closing list's
and the field's past the chapter, the ones TRL and verl ship.

    python train.py --objective sapo                       # SAPO's gate in place of PPO's clip
    python train.py --recipe gmpo                          # GMPO, at verl's GMPO clip range
    python train.py --tis-cap 2 --tis-floor 0.5 --tis-mode token_mask   # IcePop's masked importance sampling
    python train.py --baseline leave_one_out               # RLOO's advantage

grpo.py keeps GRPO; each function here is called by the function of grpo.py that holds its idea
(`advantages`, `objective`, `grpo_loss`, `aggregate`, `kl_penalty`), and only when its flag is on, so a run
without them computes exactly what plain GRPO does. The adaptive entropy coefficient, the one variant that carries
a number from step to step, is kept by train.py (`entropy_control_*`, saved in each checkpoint). In the order a
step meets them:

    1. the batch      the book's frozen copy (inner epochs); GDPO's advantages; the baselines: RLOO, REINFORCE++,
                      none (REINFORCE)
    2. objectives     the book's torch.where clip, CISPO, SAPO, GMPO, DPPO-TV / -KL, VESPO
    3. corrections    what is dropped before the objective: off-policy masking, divergence rejection; truncated,
                      masked and sequence-level importance sampling (TIS, IcePop, MIS)
    4. masks, sums    what changes after it: KL-Cov, the high-entropy tokens (the 80/20 rule); BNPO's and LUSPO's
                      normalisers
    5. the KL         k3+, and the gradient bias of each estimator (--exact-kl)
    6. between steps  the adaptive entropy coefficient (Skywork-OR1)

Each function names the source its formula was checked against: the paper, and TRL's
trl/trainer/grpo_trainer.py or verl's verl/trainer/ppo/core_algos.py and rollout_corr_helper.py,
or the authors' own code. Where this file departs from a source, the function says so.
This file imports nothing of grpo.py (grpo.py imports it): where it needs grpo's per-answer
mean it writes the line out again.
"""
import copy
import dataclasses
import math

import torch

from harness.distributed import all_sum, global_mean, global_std


# ---------------------------------------------------------------- 1. the batch: its sampler, its advantages

def frozen_copy(policy):
    """--resample-epochs (the book's inner epochs): a copy of the policy frozen at the step's first weights, pi_old,
    from which every epoch samples new answers."""
    return copy.deepcopy(policy).requires_grad_(False)


def gdpo_advantages(term_advantages, weights, eps=1e-4):
    """GDPO (Liu et al. 2026, arXiv 2601.05242; NVlabs/GDPO, its TRL and verl versions), `--reward-norm
    norm_then_sum`: each reward term's group advantage first (term_advantages: name -> (B,), grpo.group_advantages
    of that term alone), summed with its weight, and the sum normalised over the whole batch,
        s = sum_k w_k * (r_k - mean_group(r_k)) / (std_group(r_k) + eps),     A = (s - mean_batch(s)) / (std_batch(s) + eps)
    so a dense term (format) cannot set the group's std and drown a sparse one (correctness), and two answers whose
    terms differ get different advantages where their weighted sums tie. The book's gdpo.py trains one prompt a step,
    where the group is the batch. Under torchrun the batch is every rank's. -> (B,)"""
    s = sum(w * term_advantages[k] for k, w in weights.items() if w != 0)  # (B,)
    return (s - global_mean(s.sum(), s.numel())) / (global_std(s) + eps)



def baseline_advantages(rewards, G, baseline, lengths):
    """(B,) advantages by a baseline other than the group's mean (--baseline; grpo.group_advantages calls this
    for leave_one_out and batch, verl's adv_estimator rloo and reinforce_plus_plus, and for none, REINFORCE
    without a baseline: A_i = r_i). rewards, lengths (B,)."""
    if baseline == "leave_one_out":
        return leave_one_out_advantages(rewards, G)
    if baseline == "batch":
        return reinforce_pp_advantages(rewards, lengths)
    if baseline == "none":  # REINFORCE (Williams 1992): the reward itself, the run RLOO's source compares with
        return rewards.clone()
    raise ValueError(f"unknown baseline {baseline!r}")


def leave_one_out_advantages(rewards, G):
    """RLOO (Ahmadian et al. 2024, arXiv 2402.14740; verl core_algos.compute_rloo_outcome_advantage):
    each answer is compared with the mean of the G - 1 other answers to its prompt, and divided by nothing,

        A_i = r_i - 1/(G-1) sum_{j != i} r_j          (= G/(G-1) (r_i - mean of the group))

    so the baseline never contains the answer it judges. rewards (B,), B = n_groups * G -> (B,)"""
    r = rewards.view(-1, G)  # (n_groups, G)
    others = (r.sum(1, keepdim=True) - r) / (G - 1)  # (n_groups, G): each answer's leave-one-out mean
    return (r - others).view(-1)


def reinforce_pp_advantages(rewards, lengths, eps=1e-8):
    """REINFORCE++ (Hu 2025, arXiv 2501.03262; verl core_algos.compute_reinforce_plus_plus_outcome_advantage
    with its one outcome reward and gamma 1): every token of answer i carries the return r_i, and the batch's
    tokens are whitened together (verl_F.masked_whiten), a global baseline instead of a group's:

        A_i = (r_i - mu) / sqrt(sigma^2 + 1e-8),   mu = sum_i n_i r_i / N,
        sigma^2 = sum_i n_i (r_i - mu)^2 / (N - 1),  N = sum_i n_i (the batch's completion tokens)

    so a long answer counts once per token in mu and sigma, and an answer of a group whose rewards are equal
    still gets an advantage. Under torchrun the sums are over every rank's rows. rewards, lengths (B,) -> (B,)"""
    n = lengths.to(rewards.dtype)  # (B,)
    N, total = all_sum(torch.stack([n.sum(), (n * rewards).sum()])).tolist()
    mu = total / N
    var = all_sum((n * (rewards - mu) ** 2).sum()) / (N - 1)
    return (rewards - mu) * torch.rsqrt(var + eps)


# ---------------------------------------------------------------- 2. objectives

def field_objective(ratio, A, logp, old_logp, sampler_logp, mask, cfg, is_weights=None):
    """The field's objectives, to be maximised, as grpo_loss calls them -> (surrogate, low, high, weights):
    surrogate, low and high as grpo.clipped_objective returns them ((B, T) or (B, 1), and where each side's bound
    stops a gradient), and the importance weights grpo_loss multiplies the surrogate by, or None.
    ratio (B, T) pi / pi_old per token; A (B, 1); logp, old_logp, sampler_logp, mask (B, T); is_weights:
    the importance weights of --tis-cap, or None. Each objective takes them as its source does: SAPO as a
    token's weight; GMPO as their geometric mean over the answer (verl); DPPO not at all, its own weight
    pi / pi_sampler corrects for the sampler already (its authors ignore them; harness/cli.py refuses the pair); VESPO
    inside its own weight of the answer, which it returns in their place."""
    eps_low, eps_high = cfg.clip_range
    if cfg.objective == "book":
        return (*book_objective(ratio, A, eps_low, eps_high), is_weights)
    if cfg.objective == "cispo":
        return (*cispo_objective(ratio, A, logp, eps_low, eps_high), is_weights)
    if cfg.objective == "sapo":
        return (*sapo_objective(ratio, A, cfg.sapo_tau_pos, cfg.sapo_tau_neg), is_weights)
    if cfg.objective == "gmpo":
        return (*gmpo_objective(logp, old_logp, A, mask, eps_low, eps_high), geometric_mean(is_weights, mask))
    if cfg.objective in ("dppo_tv", "dppo_kl"):
        return (*dppo_objective(logp, sampler_logp, A, eps_low, eps_high, cfg.objective[len("dppo_"):]), None)
    if cfg.objective == "vespo":
        kernel = (cfg.vespo_k_pos, cfg.vespo_lambda_pos, cfg.vespo_k_neg, cfg.vespo_lambda_neg)
        phi = vespo_weights(logp, old_logp, A, mask, is_weights, *kernel)  # (B, 1)
        return (*policy_gradient(A, logp), phi)
    raise ValueError(f"unknown objective {cfg.objective!r}")


def book_objective(ratio, adv, eps_low, eps_high):
    """The book's clipped objective (7_4_plus_clip_ratio.py on), `--objective book`, maximised:
        torch.where(A >= 0, min(r A, clip(r) A), max(r A, clip(r) A))
    For A < 0 the max is A * min(r, clip(r)): it clips where r has grown (a bad answer made likelier, where PPO
    keeps the gradient), never where it shrank. So for either sign the gradient stops only once r > 1+eps_high
    (the book's eps 10: r > 11). -> (surrogate, low, high) as grpo.clipped_objective; low never binds."""
    unclipped = ratio * adv
    clipped = ratio.clamp(1 - eps_low, 1 + eps_high) * adv
    surr = torch.where(adv >= 0, torch.minimum(unclipped, clipped), torch.maximum(unclipped, clipped))
    high = (ratio > 1 + eps_high).expand_as(surr)
    return surr, torch.zeros_like(high), high


def cispo_objective(ratio, adv, logp, eps_low, eps_high):
    """CISPO (MiniMax-M1, arXiv 2506.13585, sec. 3.1), `--objective cispo`: sg(clip(r)) * A * logp. The clipped ratio
    only weights the gradient, so every token keeps one (PPO drops clipped tokens). -> (surr, low, high): where it is
    clipped."""
    surr = ratio.clamp(1 - eps_low, 1 + eps_high).detach() * adv * logp
    low = (ratio < 1 - eps_low).expand_as(surr)
    high = (ratio > 1 + eps_high).expand_as(surr)
    return surr, low, high


def sapo_gate(ratio, A, tau_pos, tau_neg):
    """SAPO's gate on each token's policy gradient, against the plain one's: 4 sigmoid (1 - sigmoid) of tau (r - 1),
    1 at r = 1 and smaller away from it (harness/stats.py logs its mean: what SAPO does). ratio (B, T), A (B, 1)."""
    tau = torch.where(A > 0, tau_pos, tau_neg)  # (B, 1)
    s = torch.sigmoid(tau * (ratio - 1))
    return 4 * s * (1 - s)


def geometric_mean(weights, mask):
    """(B, 1): each answer's token weights (B, T) as one, their geometric mean exp(mean_t log w_t) (verl's GMPO: a
    weight of 0, masked, counts as 1e-10, so the answer's weight nears 0); (B, 1) weights, or None, as they are."""
    if weights is None or weights.shape[1] == 1:
        return weights
    m = mask.to(weights.dtype)
    return torch.exp((torch.log(weights + 1e-10) * m).sum(1, keepdim=True) / m.sum(1, keepdim=True).clamp(min=1))


def nowhere(surrogate):
    """(low, high) of an objective that has no bound: False everywhere."""
    none = torch.zeros_like(surrogate, dtype=torch.bool)
    return none, none


def sapo_objective(ratio, A, tau_pos, tau_neg):
    """SAPO (arXiv 2511.20347; TRL grpo_trainer loss_type "sapo", verl
    compute_policy_loss_sapo), --objective sapo: a sigmoid gate in place of the hard clip,

        f(r) = sigmoid(tau (r - 1)) * 4 / tau,   tau = tau_pos where A > 0, tau_neg where A <= 0
        surrogate = f(r) * A

    Its derivative in log r is 4 r sigmoid (1 - sigmoid): exactly 1 at r = 1, the policy gradient,
    and it fades smoothly as r leaves 1, faster for a larger tau (tau_neg > tau_pos, SAPO's asymmetry,
    damps the negative tokens sooner). No token's gradient is cut to zero, so nothing counts as
    clipped. ratio (B, T), A (B, 1) -> (surrogate (B, T), low, high)"""
    tau = torch.where(A > 0, tau_pos, tau_neg)  # (B, 1)
    surr = torch.sigmoid(tau * (ratio - 1)) * 4 / tau * A
    return (surr, *nowhere(surr))


def gmpo_objective(logp, old_logp, A, mask, eps_low, eps_high):
    """GMPO (arXiv 2507.20673; verl compute_policy_loss_geo_mean), --objective gmpo:
    the geometric mean of an answer's token ratios instead of their arithmetic mean, each token's log-ratio
    clipped in log space, on the pessimistic side of the answer's advantage:

        l_t = sgn(A) * min(sgn(A) log r_t, sgn(A) clip(log r_t, -eps_low, eps_high))
        surrogate_i = A_i * exp( (1/|o_i|) sum_t l_t )          (one per answer)

    A token past its bound in the direction A pushes (log r_t > eps_high with A > 0, < -eps_low with
    A < 0) adds a constant and so no gradient; the bounds are on log r, --clip and --clip-high (verl's GMPO
    examples, examples/gmpo_trainer: clip_ratio 0.4, the range (e^-0.4, e^0.4)).
    The geometric mean moves less than the arithmetic one when a single token's ratio is extreme.
    logp, old_logp, mask (B, T), A (B, 1) -> (surrogate (B, 1), low, high (B, T))"""
    log_r = logp - old_logp  # (B, T)
    sgn = torch.sign(A)  # (B, 1)
    clipped = sgn * torch.minimum(sgn * log_r, sgn * log_r.clamp(-eps_low, eps_high))  # (B, T)
    m = mask.to(log_r.dtype)
    mean_log_r = (clipped * m).sum(1, keepdim=True) / m.sum(1, keepdim=True).clamp(min=1)  # (B, 1)
    surr = A * torch.exp(mean_log_r.clamp(max=20.0))
    return surr, (log_r < -eps_low) & (A < 0), (log_r > eps_high) & (A > 0)


def dppo_objective(logp, sampler_logp, A, eps_low, eps_high, divergence="tv"):
    """DPPO (Qi et al. 2026, arXiv 2602.04879, the Binary variants; its authors' code, sail-sg/Stable-RL
    verl/trainer/ppo/core_algos.py _compute_token_mask_for_policy_loss, in verl as dppo_tv / dppo_kl),
    --objective dppo_tv | dppo_kl: a trust region on how far each token's probability has moved from mu,
    the policy that sampled it, in place of PPO's clip on the ratio. The ratio r = pi / mu, detached,
    weights the policy gradient; a token leaves the region only in the direction its advantage pushes:

        TV:  pi - mu > eps_high (A > 0),  pi - mu < -eps_low (A <= 0)
        KL:  D > eps_high and pi > mu (A > 0),  D > eps_low and pi < mu (A <= 0), with the KL between the
             two-outcome distributions {the token, the rest}:  D = mu log(mu/pi) + (1-mu) log((1-mu)/(1-pi))
        surrogate = sg(r) * M * A * log pi       (gradient: r M A grad log pi; M = 0 outside the region)

    A rare token may grow by a large ratio (0.001 -> 0.01 moves 0.009 of mass), a likely one can
    collapse at a ratio PPO allows (0.99 -> 0.8). The authors measure from the sampler ("bypass mode"),
    so mu is the sampler's log-probs here (the ratio is not truncated, as in their script: clip_ratio_c
    1e4); verl's dppo_* measure from old_log_prob, which their script sets to the sampler's. Bounds: TV
    0.15, KL 0.05 (verl examples/dppo_trainer/run_qwen30b_dppo.sh), as --clip.
    logp, sampler_logp (B, T), A (B, 1) -> (surrogate (B, T), low, high (B, T))"""
    pi, mu = logp.detach().exp(), sampler_logp.exp()  # (B, T) each
    if divergence == "tv":
        out_high, out_low = pi - mu > eps_high, pi - mu < -eps_low
    elif divergence == "kl":  # the authors' 1e-8 keeps log(1 - p) finite at p = 1
        D = mu * (sampler_logp - logp.detach()) + (1 - mu) * torch.log((1 - mu + 1e-8) / (1 - pi + 1e-8))
        out_high, out_low = (D > eps_high) & (pi > mu), (D > eps_low) & (pi < mu)
    else:
        raise ValueError(f"unknown DPPO divergence {divergence!r}")
    high, low = out_high & (A > 0), out_low & (A <= 0)  # (B, T) where the trust region stops the token
    r = torch.exp((logp.detach() - sampler_logp).clamp(max=20.0))  # (B, T) pi / mu, a weight
    surr = r * (~(high | low)).to(logp.dtype) * A * logp
    return surr, low, high


def vespo_weights(logp, old_logp, A, mask, is_weights, k_pos, lambda_pos, k_neg, lambda_neg):
    """VESPO (Shen et al. 2026, arXiv 2602.10693; its authors' code, FloyedShen/VESPO
    recipe/vespo/code/core_algos.py compute_policy_loss_vespo; TRL grpo_trainer get_gamma_weights),
    --objective vespo: a smooth Gamma-shaped weight of each answer's whole importance ratio, in place
    of a clip, for rollouts many updates stale:

        log w = sum_t log(pi / pi_old)_t  [+ sum_t log w_t, the --tis-cap weights pi_old / pi_sampler]
        phi(w) = e^lambda * w^k * e^(-lambda w)          (phi(1) = 1; k, lambda of A >= 0 or of A < 0)
        surrogate = sg(phi(w)) * A * log pi              (gradient: phi(w) A grad log pi)

    The sum, not the mean: the weight of the whole answer, with no length normalisation. phi rises as
    w^k from 0 and decays as e^(-lambda w) past its peak at k / lambda, so an answer far from the
    policy either way weighs little, smoothly. log w is clamped to [log 1e-8, 20] as TRL does; with
    --tis-cap the sampler's ratio joins w (the authors' rollout_is_weights), so w = pi / pi_sampler.
    Its sources average over tokens (--loss-agg token_mean; harness/cli.py asks for the value). This returns
    sg(phi(w)); field_objective() sets it on the policy gradient A log pi (policy_gradient).
    logp, old_logp, mask (B, T), A (B, 1) -> (B, 1)"""
    log_r = (logp.detach() - old_logp).clamp(-20.0, 20.0)  # (B, T)
    if is_weights is not None:
        log_r = log_r + torch.log(is_weights.clamp(min=1e-8)).clamp(-20.0, 20.0)
    log_w = (log_r * mask).sum(1, keepdim=True).clamp(math.log(1e-8), 20.0)  # (B, 1) the answer's log ratio
    k = torch.where(A >= 0, k_pos, k_neg)  # (B, 1)
    lam = torch.where(A >= 0, lambda_pos, lambda_neg)
    return torch.exp(lam + k * log_w - lam * log_w.exp())  # (B, 1)


def policy_gradient(A, logp):
    """The plain policy gradient's surrogate A * log pi (REINFORCE), for a method whose weight (VESPO's) does the
    work a clip does -> (surrogate (B, T), low, high: none)."""
    surr = A * logp
    return (surr, *nowhere(surr))


# ---------------------------------------------------------------- 3. corrections towards the learner

def drop_before_the_objective(logp, old_logp, sampler_logp, adv, loss_mask, cfg):
    """The corrections that take tokens or answers out before the objective sees them -> (loss_mask, adv, kept,
    dropped): --rejection (verl's rollout_rs: tokens, or whole answers, too far from their sampler leave the mask)
    and --off-policy-mask (DeepSeek-V3.2: negative answers far off the sampler get A = 0; kept (B,), else None).
    dropped: name -> (B, T) bool, what a mask took out, for the log. Both off: the inputs as they are."""
    kept = None
    dropped = {}
    if cfg.rejection:
        keep = rejection_keep(old_logp, sampler_logp, loss_mask, cfg.rejection, cfg.rejection_bound)
        dropped["rejected_frac"] = loss_mask & ~keep
        loss_mask = loss_mask & keep
    if math.isfinite(cfg.off_policy_mask):
        kept = off_policy_keep(logp, sampler_logp, adv, loss_mask, cfg.off_policy_mask)  # (B,)
        adv = adv * kept
    return loss_mask, adv, kept, dropped


def tis_weights(old_logp, sampler_logp, cap, mask=None, cfg=None):
    """Truncated importance sampling (Yao et al. 2025; TRL vllm_importance_sampling_correction, verl rollout_is token),
    `--tis-cap C`: the tokens were drawn by the sampler
    (temperature, top-k, top-p, --sampler-dtype), not by pi_old, so each token's term is re-weighted towards
    the learner, capped so a rare token cannot blow up the update: w_t = min(pi_old / pi_sampler, C). (B, T)
    --tis-floor, --tis-mode (IcePop's mask, one weight an answer): importance_weights."""
    if cap <= 0:
        return torch.ones_like(old_logp)
    if cfg is not None and (cfg.tis_mode != "token_truncate" or cfg.tis_floor > 0):
        return importance_weights(old_logp, sampler_logp, mask, cap, cfg.tis_floor, cfg.tis_mode)
    return torch.exp((old_logp - sampler_logp).clamp(max=20.0)).clamp(max=cap)  # the log clamped as grpo.safe_exp


@torch.no_grad()
def off_policy_keep(logp, sampler_logp, adv, loss_mask, delta):
    """DeepSeek-V3.2's off-policy sequence masking (arXiv 2512.02556, sec. 3.1), `--off-policy-mask DELTA`: drop a
    sequence (weight 0) with a negative advantage whose length-normalised KL from the sampler exceeds delta,

        keep_i = 0  if  A_i < 0  and  (1/|o_i|) sum_t (log pi_sampler - log pi)(o_t) > delta

    (the sampler-side estimate, as the book's deepseek_v32_style.py): negatives the policy has left. (B,)"""
    m = loss_mask.to(logp.dtype)
    kl = ((sampler_logp - logp) * m).sum(1) / m.sum(1).clamp(min=1)  # (B,) each answer's mean, as grpo.sequence_mean
    return (~((adv < 0) & (kl > delta))).to(logp.dtype)



@torch.no_grad()
def importance_weights(old_logp, sampler_logp, mask, cap, floor, mode):
    """Importance weights w = pi_old / pi_sampler, bounded to [floor, cap] (--tis-cap, --tis-floor) as --tis-mode
    says (TRL grpo_trainer vllm_importance_sampling_mode with _clip_min / _clip_max; verl rollout_corr_helper
    compute_rollout_correction_weights for the sequence level):

        token_truncate     w_t = clip(pi_old / pi_sampler, floor, cap)                 (TIS; field_methods.tis_weights)
        token_mask         w_t = pi_old / pi_sampler if floor <= it <= cap, else 0      (IcePop, MIS)
        sequence_truncate  w = clip(prod_t pi_old / pi_sampler, floor, cap)            one weight an answer
        sequence_mask      w = prod_t pi_old / pi_sampler if within [floor, cap], else 0

    Masking drops the tokens (or answers) the two engines disagree on instead of keeping them at the cap.
    The sequence weight is the product of the answer's token weights (sum of log-ratios, clamped to
    [-20, 20] as verl's), the answer's true likelihood ratio: unbiased, and its spread grows with length.
    old_logp, sampler_logp, mask (B, T) -> (B, T) for token modes, (B, 1) for sequence modes"""
    log_w = (old_logp - sampler_logp) * mask  # (B, T)
    if mode.startswith("sequence"):
        log_w = log_w.sum(1, keepdim=True)  # (B, 1): the product of the answer's token weights
    elif not mode.startswith("token"):
        raise ValueError(f"unknown importance sampling mode {mode!r}")
    w = torch.exp(log_w.clamp(-20.0, 20.0))
    if mode.endswith("truncate"):
        return w.clamp(floor, cap)
    if mode.endswith("mask"):
        return torch.where((w >= floor) & (w <= cap), w, 0.0)
    raise ValueError(f"unknown importance sampling mode {mode!r}")


@torch.no_grad()
def rejection_keep(old_logp, sampler_logp, mask, rule, bound):
    """Divergence rejection (verl rollout_corr_helper compute_rollout_rejection_mask, rollout_rs), --rejection
    RULE --rejection-bound U: a hard trust region around the sampler. With log r = log pi_old - log pi_sampler
    of each token and Schulman's estimators of the KL from the sampler,

        k1 = -log r,   k2 = (log r)^2 / 2,   k3 = r - 1 - log r

    token_k*: a token whose own divergence passes U leaves the mask; seq_mean_k* (seq_max_k*): a whole
    answer leaves it when the mean (the largest) of its tokens' does. k1 has a sign, so its bound is a ratio
    band: kept within [1/U, U], |k1| <= log U (verl's default lower bound 1/U); k2, k3 are kept <= U.
    Leaving the mask (not zeroing an advantage) also takes the tokens out of the aggregation's denominators,
    as verl's modified response_mask does. old_logp, sampler_logp, mask (B, T) -> (B, T) bool, True: kept"""
    log_r = (old_logp - sampler_logp).clamp(-20.0, 20.0)  # (B, T)
    estimator, level = rule[-2:], rule[:-3]
    d = {"k1": -log_r, "k2": 0.5 * log_r ** 2, "k3": torch.exp(log_r) - 1 - log_r}[estimator]  # (B, T)
    m = mask.to(d.dtype)
    if level == "seq_mean":
        d = ((d * m).sum(1, keepdim=True) / m.sum(1, keepdim=True).clamp(min=1)).expand_as(d)
    elif level == "seq_max":
        d = d.masked_fill(~mask.bool(), float("-inf")).amax(1, keepdim=True).expand_as(d)
    elif level != "token":
        raise ValueError(f"unknown rejection rule {rule!r}")
    if estimator == "k1":
        return mask.bool() & (d.abs() <= math.log(bound))
    return mask.bool() & (d <= bound)


# ---------------------------------------------------------------- 4. masks and normalisers

def change_after_the_objective(surrogate, logp, old_logp, A, entropy, loss_mask, cfg, dropped):
    """The variants that change the objective's terms token by token -> (surrogate, the tokens the entropy bonus
    reads): KL-Cov (Cui et al.: the few tokens that drive the entropy down held back) and the 80/20 rule (the
    policy gradient on the high-entropy tokens alone, and, as TRL's, the entropy bonus too). Both off: as they are."""
    bonus_mask = loss_mask
    if cfg.kl_cov > 0:
        surrogate = surrogate - kl_cov_penalty(logp, old_logp, A, loss_mask, cfg.kl_cov)  # (B, T)
    if cfg.top_entropy_quantile < 1:
        bonus_mask = high_entropy_mask(entropy.detach(), loss_mask, cfg.top_entropy_quantile, cfg.top_entropy_random)
        dropped["low_entropy_frac"] = loss_mask & ~bonus_mask
        surrogate = surrogate * bonus_mask
    return surrogate, bonus_mask



@torch.no_grad()
def high_entropy_mask(entropy, mask, rho, random=False):
    """Beyond the 80/20 rule (arXiv 2506.01939; TRL grpo_trainer get_high_entropy_mask, top_entropy_quantile),
    --top-entropy-quantile rho: the policy gradient only on the update's "forking" tokens, the top rho of its
    completion tokens by the learner's entropy,

        keep_t = 1[H_t >= tau_rho],   tau_rho the (1 - rho)-quantile of H over the update's tokens

    The dropped tokens stay in the aggregation's denominators: TRL multiplies each token's loss by this mask and
    divides by the completion mask, so their terms are 0, not absent. The KL keeps every token; the entropy bonus
    reads the kept ones alone, as TRL's (grpo_loss). Two departures from TRL: --adaptive-entropy's controller
    measures the entropy over every token (TRL: over the kept ones), and the quantile is over this rank's tokens
    (TRL gathers every process's). random (--top-entropy-random): the control the rule's claim is judged against,
    the same share of tokens kept, drawn at random (the step's draws: train.py seeds them by the step).
    entropy, mask (B, T) -> (B, T) bool"""
    real = mask.bool()
    score = torch.rand(entropy.shape, device=entropy.device) if random else entropy  # (B, T)
    tau = torch.quantile(score[real].float(), 1 - rho)
    return real & (score >= tau)


def kl_cov_penalty(logp, old_logp, A, mask, k):
    """KL-Cov (Cui et al., arXiv 2505.22617; verl's kl_cov, coefficient 1): the entropy falls where (log pi -
    mean)(A - mean) is large; the share k of the tokens with the largest pay |log pi - log pi_old|. (B, T)"""
    real = mask.bool()  # (B, T)
    a, lp = A.expand_as(logp)[real], logp.detach()[real]  # (N,) each real token's advantage, log-prob
    cov = (a - a.mean()) * (lp - lp.mean())  # (N,)
    picked = torch.zeros_like(cov)
    picked[cov.topk(min(cov.numel(), max(1, int(k * cov.numel())))).indices] = 1.0
    return torch.zeros_like(logp).masked_scatter(real, picked) * (logp - old_logp).abs()  # (B, T)


def field_aggregate(token_loss, mask, mode):
    """The field's loss normalisers (--loss-agg; grpo.aggregate holds the chapter's). token_loss, mask (B, T).

    bnpo:  sum over this process's tokens / their number (TRL loss_type "bnpo": "the number of active tokens in
           the local batch"); DDP then averages the ranks. In one process it is token_mean, number for number;
           under torchrun each rank weighs its own tokens (token_mean: every rank's together).
    luspo: LUSPO (Liu et al. 2026, arXiv 2602.05261; TRL loss_type "luspo"): GSPO's loss with each
           answer's term scaled by its length, averaged over answers,  (1/B) sum_i |o_i| l_i,  l_i the answer's
           term (GSPO's one per answer). GSPO's seq_mean weighs each answer once whatever its length, so a
           long answer's tokens each weigh less: LUSPO gives every token its weight back."""
    m = mask.to(token_loss.dtype)
    if mode == "bnpo":
        return (token_loss * m).sum() / m.sum().clamp(min=1)
    if mode == "luspo":
        lengths = m.sum(1, keepdim=True)  # (B, 1) |o_i|
        per_answer = (token_loss * m).sum(1, keepdim=True) / lengths.clamp(min=1)  # (B, 1) l_i
        return global_mean((lengths * per_answer).sum(), mask.shape[0])
    raise ValueError(f"unknown loss aggregation {mode!r}")


# ---------------------------------------------------------------- 5. the KL

def k3_plus(log_r):
    """k3+ (verl core_algos.kl_penalty: a kl_loss_type ending in "+", "straight through"), --kl-estimator k3+:
    k3's value with k2's gradient,

        k3+ = k2 - sg(k2) + sg(k3),   k2 = (log r)^2 / 2,   k3 = r - 1 - log r,   log r = log pi_ref - log pi

    On samples of pi, k2's gradient, (log pi - log pi_ref) grad log pi, averages to the gradient of
    KL(pi || pi_ref), the KL the value estimates; k3's, (1 - pi_ref / pi) grad log pi, averages to
    sum_y (pi - pi_ref) grad log pi = the gradient of KL(pi_ref || pi), the other direction (Schulman,
    "Approximating KL"). The value logged stays k3's. verl clamps that value to [-10, 10] (and log r to
    [-20, 20]); here log r is clamped above at 20 only, and the value not at all: the gradient, k2's, is the
    same. log_r (B, T) or (B, 1) -> the same shape"""
    k2 = 0.5 * log_r ** 2
    k3 = torch.exp(log_r.clamp(max=20.0)) - 1 - log_r
    return k2 - k2.detach() + k3.detach()


def kl_grad_bias(lp, ref, estimator, reweighted=False):
    """--exact-kl's kl_grad_bias, what k3+ and the re-weighted KL exist to remove: how far the KL estimator's
    gradient, in expectation over the tokens it is computed on, is from the exact KL's gradient (Schulman,
    "Approximating KL"; verl's kl_penalty), summed over the n positions: sum_t |E_y[g_t] - g*_t| / sum_t |g*_t|.
    At a position with log-probs lp, ref (V,) over the vocabulary, an estimator k of log r = ref - lp at the sampled
    y has the gradient f(y) (e_y - pi) in the logits, f = dk / d log pi(y); over y ~ pi,
        E_y~pi [ f(y) (e_y - pi) ] = pi f - pi sum_y pi(y) f(y),     g* = grad KL(pi || pi_ref) = pi (lp - ref - KL)
    k1: f = 1, E = 0 (no pull at all); k2 and k3+: f = lp - ref, E = g* (unbiased); k3: f = 1 - pi_ref / pi,
    E = pi - pi_ref, the gradient of the other direction, KL(pi_ref || pi).
    reweighted (--kl-reweight, DeepSeek-V3.2): the term is w k, w = pi / pi_old carrying its gradient, on pi_old's
    samples; its gradient w (k + f) (e_y - pi), over y ~ pi_old, is E_y~pi [ (k + f) (e_y - pi) ]: the formula
    above with f replaced by k + f, whatever pi_old is. k3: k + f = lp - ref, unbiased (k2's); k1 too; k2 and k3+
    not. Without reweighting, the expectation is over pi's own samples: the bias on-policy, the least it can be.
    lp, ref (n, V) -> a 0-d tensor"""
    p, d = lp.exp(), (lp - ref).nan_to_num(0.0)  # (n, V)
    r = (ref - lp).exp().nan_to_num(0.0)  # (n, V) pi_ref / pi
    f = {"k1": torch.ones_like(d), "k2": d, "k3+": d, "k3": 1 - r}[estimator]  # d k / d log pi
    if reweighted:
        k = {"k1": d, "k2": 0.5 * d ** 2, "k3+": r - 1 + d, "k3": r - 1 + d}[estimator]  # the estimate's value
        f = k + f
    expected = p * f - p * (p * f).sum(-1, keepdim=True)  # (n, V)
    exact = p * (d - (p * d).sum(-1, keepdim=True))  # (n, V)
    return (expected - exact).abs().sum() / exact.abs().sum().clamp(min=1e-30)


# ---------------------------------------------------------------- 6. between steps: the adaptive entropy coefficient

def entropy_control(state, cfg):
    """--adaptive-entropy's state (entropy_control_*): the checkpoint's, when a run resumes, else the
    first; None without the flag, so that nothing of it runs."""
    if not cfg.adaptive_entropy:
        return None
    return (state or {}).get("entropy_control") or entropy_control_start(cfg)


def entropy_controlled(cfg, control):
    """The GRPOConfig of one step: cfg itself, or with --adaptive-entropy the entropy coefficient the controller
    (entropy_control_*) gives this step."""
    if control is None:
        return cfg
    return dataclasses.replace(cfg, entropy_coef=entropy_control_coef(control, cfg))


def entropy_control_start(cfg):
    """The controller's state before the first step (--adaptive-entropy): the coefficient c starts at
    --entropy-coef, and no entropy has been measured yet (inf: the first step applies no bonus, as TRL's)."""
    return {"coef": cfg.entropy_coef, "last_entropy": math.inf}


def entropy_control_coef(state, cfg):
    """The entropy bonus's coefficient for the next step: c while the entropy last measured is at or below the
    target, 0 above it: alpha_k = c_k * 1[e_k <= tgt-ent] (TRL's gate; the Skywork-OR1 code compares with <
    and applies c at the first step too)."""
    return state["coef"] if state["last_entropy"] <= cfg.entropy_target else 0.0


def entropy_control_step(state, entropy, cfg):
    """Adaptive entropy control (Skywork-OR1, He et al. 2025, arXiv 2505.22312; its authors' code,
    SkyworkAI/Skywork-OR1 verl/trainer/ppo/core_algos.py EntController, updated once a step from the step's
    entropy; TRL use_adaptive_entropy, once an optimizer step): after a step whose learner entropy was H,

        c <- clip(c + delta, 0, c_max)  if H <= target,   clip(c - delta, 0, c_max)  otherwise

    -> the next state: a plain dict, so train.py saves it with each checkpoint and --resume continues it.
    Defaults are TRL's (target 0.2, delta 0.005, c_max 1; the authors' scripts: delta 1e-4, c_max 0.005)."""
    delta = cfg.entropy_coef_delta if entropy <= cfg.entropy_target else -cfg.entropy_coef_delta
    return {"coef": min(max(state["coef"] + delta, 0.0), cfg.entropy_coef_max), "last_entropy": float(entropy)}
