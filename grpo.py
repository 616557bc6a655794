"""GRPO, one step at a time: rollouts, group advantages, clipped ratios, KL, aggregation.

Read top to bottom; `grpo_step` at the end strings the pieces together:

    problems -> rollout (G samples each, scored by rewards.py) -> group_advantages
             -> token_logprobs (kernels/) -> policy_ratio -> clipped_objective
             (+ kl_penalty to the reference) -> aggregate -> backward -> update

Every idea of the chapter lives in one function here and every variant is a flag on it:
- advantages: (r - group mean) / (group std + eps); std over the group, the batch, or
  not at all (Dr. GRPO, Liu et al. 2025);
- dynamic sampling (DAPO, Yu et al. 2025): keep only groups whose rewards differ;
- ratio at token level (GRPO), sequence level with a length-normalised log-ratio (GSPO,
  Zheng et al. 2025), or the book's sequence level (summed log-probs);
- clipping with eps_low / eps_high (DAPO's clip-higher), optional dual clip (Ye et al.
  2020), or CISPO (MiniMax 2025: clip the weight, not the update);
- KL to a frozen reference with Schulman's k1 / k2 / k3 estimators, per token or, as the
  book does it, on summed sequence log-probs;
- loss aggregation: per-sequence mean then batch mean (GRPO), token mean (DAPO), token sum
  over a constant (Dr. GRPO); optional masking of truncated completions.

Where this departs from the book's scripts, and why (files in rasbt/reasoning-from-scratch,
ch07/03_rlvr_grpo_scripts_advanced/):
- Rollouts and pi_old. `7_4_plus_clip_ratio.py` deep-copies the policy into a frozen
  `old_model` at each step, and each of its `--inner_epochs` (2 by default) samples
  fresh rollouts from that frozen copy and scores their old log-probs with it; the
  policy, updated after the first epoch, then differs from it, so the ratio is not 1
  on the second epoch. Clipping still rarely acts there: `clip_eps` defaults to 10.0
  (clamp to [-9, 11]: a positive ratio is only ever clipped above 11), and its sequence-level ratio uses
  `torch.where(adv >= 0, min, max)`, which clips the wrong side for negative
  advantages (see `clipped_objective`). We sample once per step and reuse those
  rollouts for mu epochs of K minibatch updates (`--mu`, `--minibatches`, as TRL's
  steps_per_generation and verl's ppo_mini_batch_size do), so the later updates are
  off-policy by construction; pi_old is the policy that sampled them.
- Ratio: token level by default (GRPO, DeepSeekMath); the book's summed sequence ratio
  is `--ratio-level sequence`.
- The reference model: like `7_5_plus_kl.py`, which builds it only `if args.kl_coeff`,
  we build one only when beta > 0. The book's KL term, `kl_coeff * mean(new_logps -
  ref_logps)` on summed sequence log-probs, is `--kl-estimator k1 --kl-level sequence`.
- Log-probs and entropy come from fused kernels (kernels/) that never materialise a
  (N, V) log-softmax, by default not even the logits, and only for completion rows.
"""
from dataclasses import dataclass, field

import torch

import rewards
from kernels import linear_logprobs_and_entropy, token_logprobs_and_entropy
from model import generate
from tokenizer import decode_completions, encode_text


def knob(group, default, help, choices=None, type=None):
    """A GRPOConfig field and its command-line flag: train.py makes `--field-name` from
    it, so the default here is the only one (edit it and `python train.py` follows)."""
    return field(default=default, metadata={"group": group, "help": help, "choices": choices, "type": type})


@dataclass
class GRPOConfig:
    # rollouts
    group_size: int = knob("rollouts", 8, "G: completions per prompt")
    max_new_tokens: int = knob("rollouts", 40, "completion length cap (L_max)")
    temperature: float = knob("rollouts", 1.0, "sampling temperature (also used in log-probs)")
    top_p: float = knob("rollouts", 1.0, "nucleus sampling")
    top_k: int = knob("rollouts", 0, "top-k sampling (0: off)")
    # rewards
    format_weight: float = knob("rewards", 0.0, "w in reward = correct + w * format")
    gated: bool = knob("rewards", False, "format reward only for correct answers")
    overlong_cache: int = knob("rewards", 0, "DAPO soft overlong penalty over the last N tokens (0: off)")
    # advantages and sampling
    adv_norm: str = knob("advantages and sampling", "group", "divide by the std of the group, the batch, or not (Dr. GRPO)",
                         ["group", "batch", "none"])
    dynamic_sampling: bool = knob("advantages and sampling", False, "DAPO: drop groups with equal rewards, draw more")
    max_sampling_rounds: int = knob("advantages and sampling", 3, "rollout rounds per step with dynamic sampling")
    # objective
    mu: int = knob("objective", 1, "epochs: passes over each batch of rollouts")
    minibatches: int = knob("objective", 1, "K: optimizer steps per epoch, each on 1/K of the groups (K * mu per rollout)")
    clip: float = knob("objective", 0.2, "eps_low of the clipped ratio ('inf': no clipping)")
    clip_high: float = knob("objective", None, "eps_high (DAPO clip-higher); default: --clip", type=float)
    dual_clip: float = knob("objective", 0.0, "dual-clip constant c > 1 for negative advantages (0: off)")
    objective: str = knob("objective", "ppo", "clipped surrogate, or CISPO's clipped weights", ["ppo", "cispo"])
    ratio_level: str = knob("objective", "token", "token (GRPO), gspo, or the book's summed sequence ratio",
                            ["token", "gspo", "sequence"])
    kl: float = knob("objective", 0.0, "beta: KL penalty to the warm-start policy")
    kl_estimator: str = knob("objective", "k3", "Schulman's KL estimator", ["k1", "k2", "k3"])
    kl_level: str = knob("objective", "token", "per token, or the book's on summed log-probs", ["token", "sequence"])
    loss_agg: str = knob("objective", "seq_mean", "GRPO, DAPO, or Dr. GRPO aggregation", ["seq_mean", "token_mean", "constant"])
    mask_truncated: bool = knob("objective", False, "truncated completions contribute no loss")
    fused_head: bool = knob("objective", True, "log-probs straight from hidden states (never the logits)")
    # optimisation
    lr: float = knob("optimisation", 1e-4, "Adam learning rate")
    max_grad_norm: float = knob("optimisation", 1.0, "gradient clipping")


# ---------------------------------------------------------------- 1. rollouts

@dataclass
class Rollouts:
    """One step's data. B = n_prompts * G rows; the G samples of a prompt are adjacent."""
    tokens: torch.Tensor        # (B, L) prompt (left-padded to prompt_len), completion (right-padded)
    mask: torch.Tensor          # (B, L) real tokens
    loss_mask: torch.Tensor     # (B, T = L - 1) target tokens[:, 1:] is a completion token: the shift, done once
    sampler_logp: torch.Tensor  # (B, T) log-prob of each target under the distribution that drew it
    truncated: torch.Tensor     # (B,) the completion never emitted <|endoftext|>
    rewards: dict               # name -> (B,): what rewards.score returns; "total" drives the advantages
    texts: list                 # (B,) completion strings
    problems: list              # (B,) tasks.Problem of each row
    prompt_len: int             # P


def rollout(model, enc, problems, cfg, generator):
    """Sample G completions for each problem and score them -> Rollouts."""
    repeated = [p for p in problems for _ in range(cfg.group_size)]  # each prompt G times, adjacent
    prompts = [encode_text(enc, p.prompt) for p in repeated]
    model.eval()
    tokens, mask, sampler_logp = generate(model, prompts, cfg.max_new_tokens, enc.eot_token, cfg.temperature,
                                          cfg.top_k, cfg.top_p, generator)
    model.train()
    P = max(map(len, prompts))
    loss_mask = mask[:, 1:].clone()  # (B, T)
    loss_mask[:, :P - 1] = False  # targets before position P are prompt (or padding)
    completion = tokens[:, P:].masked_fill(~mask[:, P:], -1)  # (B, n) padding can never equal eot
    texts = decode_completions(enc, tokens, mask, P)
    scores = [rewards.score(t, p.answer, n, format_weight=cfg.format_weight, gated=cfg.gated,
                            max_len=cfg.max_new_tokens, overlong_cache=cfg.overlong_cache)
              for t, p, n in zip(texts, repeated, loss_mask.sum(1).tolist())]
    return Rollouts(tokens, mask, loss_mask, sampler_logp[:, 1:], truncated=~(completion == enc.eot_token).any(1),
                    rewards={k: torch.tensor([s[k] for s in scores]) for k in scores[0]},  # each (B,)
                    texts=texts, problems=repeated, prompt_len=P)


def take_rows(batch, rows):
    """The Rollouts of some rows (rows: (b,) indices), e.g. whole groups or a minibatch."""
    pick = rows.tolist()
    return Rollouts(batch.tokens[rows], batch.mask[rows], batch.loss_mask[rows], batch.sampler_logp[rows],
                    batch.truncated[rows], {k: v[rows] for k, v in batch.rewards.items()},
                    [batch.texts[i] for i in pick], [batch.problems[i] for i in pick], batch.prompt_len)


def concat_rollouts(parts):
    """Stack Rollouts of different shapes: re-pad prompts on the left, completions on the right."""
    if len(parts) == 1:
        return parts[0]
    P = max(p.prompt_len for p in parts)
    N = max(p.tokens.shape[1] - p.prompt_len for p in parts)

    def cat(name):  # zero (False) padding: masked out everywhere
        return torch.cat([_pad(getattr(p, name), P - p.prompt_len, N + p.prompt_len - p.tokens.shape[1])
                          for p in parts])
    return Rollouts(cat("tokens"), cat("mask"), cat("loss_mask"), cat("sampler_logp"),
                    torch.cat([p.truncated for p in parts]),
                    {k: torch.cat([p.rewards[k] for p in parts]) for k in parts[0].rewards},
                    sum((p.texts for p in parts), []), sum((p.problems for p in parts), []), P)


def _pad(x, left, right):
    """(B, L) -> (B, left + L + right) with zeros (False) on both sides."""
    return torch.cat([x.new_zeros(x.shape[0], left), x, x.new_zeros(x.shape[0], right)], 1)


def group_rows(keep, G):
    """Row indices (b,) of the groups marked in keep (n_groups,) bool."""
    return keep.repeat_interleave(G).nonzero().squeeze(1)


# ---------------------------------------------------------------- 2. advantages

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
        centred = centred / (rewards.std() + eps)
    elif norm != "none":
        raise ValueError(f"unknown advantage normalisation {norm!r}")
    return centred.view(-1)  # (B,)


def zero_variance_groups(rewards, G):
    """(n_groups,) bool: every completion of the group got the same reward (no signal)."""
    r = rewards.view(-1, G)
    return (r == r[:, :1]).all(1)


# ---------------------------------------------------------------- 3. log-probs

def token_logprobs(model, tokens, mask, loss_mask, temperature=1.0, fused=True):
    """log pi(target | prefix) and the entropy there, for the targets in loss_mask.

    tokens, mask (B, L); loss_mask (B, T = L - 1) marks targets tokens[:, 1:] that are
    completion tokens. Returns logp, entropy (B, T), zero outside loss_mask. Only those
    rows reach the LM head: prompt and padding positions cost no (V)-sized work at all.
    Temperature divides the logits, so the log-probs describe the distribution that was
    sampled. fused=True goes from hidden states straight to log-probs (kernels/
    linear_logprobs.py), so not even the (n, V) logits exist.
    """
    h = model(tokens[:, :-1], mask[:, :-1], hidden=True)  # (B, T, d)
    rows, targets = h[loss_mask], tokens[:, 1:][loss_mask]  # (n, d), (n,): completion positions only
    if fused:
        logp, ent = linear_logprobs_and_entropy(rows, model.lm_head_weight, targets, temperature)
    else:
        logp, ent = token_logprobs_and_entropy(rows @ model.lm_head_weight.t(), targets, temperature)  # (n, V) logits
    zeros = logp.new_zeros(loss_mask.shape)  # (B, T)
    return zeros.masked_scatter(loss_mask, logp), zeros.masked_scatter(loss_mask, ent)


# ---------------------------------------------------------------- 4. the objective

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
        log_r = log_r.sum(1, keepdim=True) / mask.sum(1, keepdim=True).clamp(min=1)  # (B, 1)
    elif level == "sequence":
        log_r = log_r.sum(1, keepdim=True)
    else:
        raise ValueError(f"unknown ratio level {level!r}")
    return torch.exp(log_r.clamp(max=20.0))  # clamp: exp cannot overflow


def clipped_objective(ratio, adv, eps_low, eps_high, dual_clip=0.0):
    """PPO's clipped surrogate, to be maximised: min(r * A, clip(r, 1-eps_low, 1+eps_high) * A).

    The min is the pessimistic bound for both signs of A: for A > 0 the ratio stops
    earning once r > 1+eps_high, for A < 0 once r < 1-eps_low; outside the clip range
    the gradient is zero, and a ratio that moved the *wrong* way is never clipped.
    (The same thing can be written one-sidedly, A * min(r, 1+eps) for A >= 0 and
    A * max(r, 1-eps) for A < 0. The book's torch.where(adv >= 0, min(...), max(...))
    takes the max of the two *surrogates* for A < 0, which is A * min(r, clip(r)): it
    clips where r has grown (r > 1+eps, a bad token made likelier, exactly where PPO
    keeps the gradient) and never clips where r has shrunk, the inverse of PPO.)
    Dual clip (c > 1): for A < 0 the objective is also bounded below by c * A, so one
    very large ratio cannot produce an unbounded loss.
    """
    surr = torch.minimum(ratio * adv, ratio.clamp(1 - eps_low, 1 + eps_high) * adv)
    if dual_clip > 0:
        surr = torch.where(adv < 0, torch.maximum(surr, dual_clip * adv), surr)
    return surr


def cispo_objective(ratio, adv, logp, eps_low, eps_high):
    """CISPO: sg(clip(r)) * A * logp. The clipped ratio only weights the policy gradient,
    so every token keeps a gradient (PPO drops clipped tokens entirely)."""
    return ratio.clamp(1 - eps_low, 1 + eps_high).detach() * adv * logp


def kl_penalty(logp, ref_logp, estimator="k3"):
    """Estimators of KL(pi || pi_ref) from samples of pi (Schulman, "Approximating KL").

    With log r = log pi_ref - log pi (clamped so exp cannot overflow):
      k1 = -log r                 unbiased, can be negative, high variance
      k2 = (log r)^2 / 2          biased, always >= 0
      k3 = r - 1 - log r          unbiased, always >= 0, low variance (GRPO's choice)
    """
    log_r = (ref_logp - logp).clamp(-20.0, 20.0)
    if estimator == "k1":
        return -log_r
    if estimator == "k2":
        return 0.5 * log_r ** 2
    if estimator == "k3":
        return torch.exp(log_r) - 1 - log_r
    raise ValueError(f"unknown KL estimator {estimator!r}")


def aggregate(token_loss, mask, mode="seq_mean", max_len=None):
    """Reduce a (B, T) per-token loss over the completion tokens (mask) to a scalar.

    seq_mean:   mean over each sequence's tokens, then over sequences (GRPO); a token of
                a short answer weighs more than one of a long answer.
    token_mean: sum over all tokens / number of tokens (DAPO); every token weighs the same.
    constant:   sum over all tokens / (B * max_len) (Dr. GRPO); no length normalisation
                at all, so length carries no bias into the gradient.
    """
    mask = mask.to(token_loss.dtype)
    if mode == "seq_mean":
        return ((token_loss * mask).sum(1) / mask.sum(1).clamp(min=1)).mean()
    if mode == "token_mean":
        return (token_loss * mask).sum() / mask.sum().clamp(min=1)
    if mode == "constant":
        return (token_loss * mask).sum() / (mask.shape[0] * max_len)
    raise ValueError(f"unknown loss aggregation {mode!r}")


def masked_mean(x, mask):
    mask = mask.to(x.dtype)
    return (x * mask).sum() / mask.sum().clamp(min=1)


def grpo_loss(logp, old_logp, ref_logp, adv, mask, cfg):
    """The GRPO objective, to be minimised, on (B, T) token log-probs; mask (B, T) marks
    the completion tokens (prompt and padding never count).

    Returns (loss, its terms as tensors, ratio (B, T) or (B, 1)).
    """
    eps_low, eps_high = clip_range(cfg)
    A = adv[:, None]  # (B, 1): every token of a completion shares its advantage
    ratio = policy_ratio(logp, old_logp, mask, cfg.ratio_level)  # (B, T) or (B, 1)
    if cfg.objective == "cispo":
        obj = cispo_objective(ratio, A, logp, eps_low, eps_high)
    elif cfg.objective == "ppo":
        obj = clipped_objective(ratio, A, eps_low, eps_high, cfg.dual_clip)
    else:
        raise ValueError(f"unknown objective {cfg.objective!r}")
    loss = aggregate(-obj.expand_as(logp), mask, cfg.loss_agg, cfg.max_new_tokens)
    terms = {"pg_loss": loss}
    if cfg.kl > 0:
        if cfg.kl_level == "sequence":  # the book: estimator on summed log-probs, per sequence
            kl = kl_penalty((logp * mask).sum(1, keepdim=True), (ref_logp * mask).sum(1, keepdim=True),
                            cfg.kl_estimator).expand_as(logp)  # (B, T)
        else:
            kl = kl_penalty(logp, ref_logp, cfg.kl_estimator)  # (B, T)
        terms["kl"] = aggregate(kl, mask, cfg.loss_agg, cfg.max_new_tokens)
        loss = loss + cfg.kl * terms["kl"]
    terms["loss"] = loss
    return loss, terms, ratio


def clip_range(cfg):
    return cfg.clip, cfg.clip if cfg.clip_high is None else cfg.clip_high


@torch.no_grad()
def ratio_stats(ratio, adv, logp, old_logp, mask, eps_low, eps_high):
    """How far the policy has drifted from the one that sampled: the ratio's mean / min /
    max, the share of tokens where each side of the clip is active (zero gradient), and
    the approximate KL to the old policy (verl's ppo_kl: mean of old_logp - logp)."""
    m = mask.bool()
    r = ratio.expand_as(logp)  # (B, T)
    A = adv[:, None]
    out = {"ratio_mean": masked_mean(r, m),
           "ratio_min": r[m].min() if m.any() else r.new_ones(()),
           "ratio_max": r[m].max() if m.any() else r.new_ones(()),
           "clip_frac_low": masked_mean((r < 1 - eps_low) & (A < 0), m),
           "clip_frac_high": masked_mean((r > 1 + eps_high) & (A > 0), m),
           "ppo_kl": masked_mean(old_logp - logp, m)}
    out["clip_frac"] = out["clip_frac_low"] + out["clip_frac_high"]
    return out


# ---------------------------------------------------------------- 5. one GRPO step

def sample_batch(model, enc, next_problems, n_prompts, cfg, generator):
    """Rollouts for n_prompts prompts. With dynamic sampling, groups without reward
    variance are dropped and more prompts drawn, up to max_sampling_rounds rounds.

    Returns (Rollouts, fraction of zero-variance groups among all groups sampled).
    """
    G, parts, kept, n_zero, n_seen = cfg.group_size, [], 0, 0, 0
    for _ in range(cfg.max_sampling_rounds if cfg.dynamic_sampling else 1):
        part = rollout(model, enc, [next_problems() for _ in range(n_prompts)], cfg, generator)
        zero = zero_variance_groups(part.rewards["total"], G)
        n_zero, n_seen = n_zero + int(zero.sum()), n_seen + len(zero)
        if not cfg.dynamic_sampling:
            return part, n_zero / n_seen
        keep = ~zero & (torch.cumsum((~zero).long(), 0) <= n_prompts - kept)  # fill, no more
        if keep.any():
            parts.append(take_rows(part, group_rows(keep, G)))
            kept += int(keep.sum())
        if kept == n_prompts:
            break
    # Out of rounds: train on what was kept (a smaller batch); if nothing, on the last
    # round as sampled (all advantages are zero then, only the KL term acts).
    return concat_rollouts(parts or [part]), n_zero / n_seen


def minibatch_rows(B, G, K):
    """K lists of row indices, each of whole groups, in order, together covering the batch."""
    return [group_rows(torch.isin(torch.arange(B // G), chunk), G) for chunk in torch.arange(B // G).chunk(K)]


def grpo_step(model, ref_model, opt, enc, next_problems, n_prompts, cfg, generator):
    """Sample, score, compute advantages, then mu epochs of K minibatch updates.

    Returns (Rollouts, dict of float statistics). Raises FloatingPointError (before the
    optimizer step, so the weights stay good) if the loss or gradients are not finite.
    """
    batch, zero_frac = sample_batch(model, enc, next_problems, n_prompts, cfg, generator)
    tokens, mask, loss_mask = batch.tokens, batch.mask, batch.loss_mask  # (B, L), (B, L), (B, T)
    if cfg.mask_truncated:
        loss_mask = loss_mask & ~batch.truncated[:, None]
    adv = group_advantages(batch.rewards["total"], cfg.group_size, cfg.adv_norm)  # (B,)

    def logprobs(m, rows):  # (b, T) log-probs and entropies of some rows, under model m
        return token_logprobs(m, tokens[rows], mask[rows], loss_mask[rows], cfg.temperature, cfg.fused_head)

    everything = torch.arange(len(adv))
    ref_logp = None
    if cfg.kl > 0:
        with torch.no_grad():
            ref_logp, _ = logprobs(ref_model, everything)  # (B, T)
    old_logp = None
    if cfg.minibatches > 1:  # the second minibatch is seen after an update: pi_old needs its own pass
        with torch.no_grad():
            old_logp, _ = logprobs(model, everything)  # (B, T)
    per_update = []
    for epoch in range(cfg.mu):
        for rows in minibatch_rows(len(adv), cfg.group_size, cfg.minibatches):
            logp, entropy = logprobs(model, rows)  # (b, T)
            if old_logp is None:
                # K = 1: this first forward runs on the weights that sampled the rollouts, so
                # pi_old = pi here exactly (ratio 1); keep it for every later epoch instead
                # of paying for a separate no-grad pass.
                old_logp = logp.detach()
            loss, terms, ratio = grpo_loss(logp, old_logp[rows], None if ref_logp is None else ref_logp[rows],
                                           adv[rows], loss_mask[rows], cfg)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.max_grad_norm)
            if not (torch.isfinite(loss) and torch.isfinite(grad_norm)):
                raise FloatingPointError(f"non-finite loss ({loss.item()}) or gradient norm ({grad_norm.item()})")
            opt.step()
            stats = {**terms, **ratio_stats(ratio, adv[rows], logp, old_logp[rows], loss_mask[rows], *clip_range(cfg)),
                     "grad_norm": grad_norm, "entropy": masked_mean(entropy.detach(), loss_mask[rows])}
            per_update.append({k: float(v.detach()) for k, v in stats.items()})
    return batch, step_stats(batch, adv, per_update, zero_frac, old_logp, loss_mask)


def step_stats(batch, adv, per_update, zero_frac, old_logp, loss_mask):
    """Average the updates' statistics (ratio min / max over all) and add batch statistics."""
    out = {k: sum(s[k] for s in per_update) / len(per_update) for k in per_update[0]}
    out["ratio_min"] = min(s["ratio_min"] for s in per_update)
    out["ratio_max"] = max(s["ratio_max"] for s in per_update)
    for name, r in batch.rewards.items():  # every component rewards.score returns
        out["reward" if name == "total" else "reward_" + name] = r.mean().item()
    lengths = batch.loss_mask.sum(1).float()  # (B,)
    out.update(reward_std=batch.rewards["total"].std().item(), adv_mean=adv.mean().item(), adv_std=adv.std().item(),
               zero_std_frac=zero_frac, resp_len=lengths.mean().item(), resp_len_max=lengths.max().item(),
               truncated_frac=batch.truncated.float().mean().item(), n_tokens=int(batch.mask.sum()),
               # the sampler and the learner should agree; they do not under top-p / top-k
               sampler_gap=masked_mean((old_logp - batch.sampler_logp).abs(), loss_mask).item())
    return out
