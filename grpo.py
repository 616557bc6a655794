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

Departures from the book, and why:
- The book samples new completions for every inner epoch, so its ratio is always 1 and
  clipping never acts. We sample once per step and take mu optimizer steps on the same
  rollouts; the old log-probs are those of the policy that sampled them.
- The book keeps a reference model even when beta = 0; we only build one when beta > 0.
- Log-probs and entropy come from fused kernels (kernels/) that never materialise a
  (N, V) log-softmax, and, by default, never the (N, V) logits either.
"""
from dataclasses import dataclass

import torch

import rewards
from kernels import linear_logprobs_and_entropy, token_logprobs_and_entropy
from model import generate
from tokenizer import encode_text


@dataclass
class GRPOConfig:
    # rollouts
    group_size: int = 8  # G completions per prompt
    max_new_tokens: int = 40
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    # rewards
    format_weight: float = 0.0  # total = correct + w * format
    gated: bool = False  # format counts only when the answer is correct
    overlong_cache: int = 0  # DAPO soft overlong penalty over the last L_cache tokens (0: off)
    # advantages and sampling
    adv_norm: str = "group"  # group | batch | none
    dynamic_sampling: bool = False
    max_sampling_rounds: int = 3
    # objective
    mu: int = 1  # optimizer steps per batch of rollouts
    clip: float = 0.2  # eps_low (inf: no clipping)
    clip_high: float = None  # eps_high; None: same as clip
    dual_clip: float = 0.0  # c > 1 bounds the loss of negative advantages (0: off)
    objective: str = "ppo"  # ppo | cispo
    ratio_level: str = "token"  # token | gspo | sequence
    kl: float = 0.0  # beta
    kl_estimator: str = "k3"  # k1 | k2 | k3
    kl_level: str = "token"  # token | sequence (the book's, on summed log-probs)
    loss_agg: str = "seq_mean"  # seq_mean | token_mean | constant
    mask_truncated: bool = False
    fused_head: bool = True  # log-probs straight from hidden states (never the logits)
    max_grad_norm: float = 1.0


# ---------------------------------------------------------------- 1. rollouts

def rollout(model, enc, problems, cfg, generator):
    """Sample G completions for each problem and score them.

    Returns a dict: tokens / mask / completion_mask (B, L) with B = len(problems) * G
    (the G samples of a prompt are adjacent rows), truncated (B,), rewards (B,) and
    each reward component (B,), and the decoded texts.
    """
    repeated = [p for p in problems for _ in range(cfg.group_size)]  # each prompt G times, adjacent
    model.eval()
    out = generate(model, [encode_text(enc, p.prompt) for p in repeated], cfg.max_new_tokens, enc.eot_token,
                   cfg.temperature, cfg.top_k, cfg.top_p, generator)
    model.train()
    texts = decode_completions(enc, out)
    n_tokens = out["completion_mask"].sum(1).tolist()
    scores = [rewards.score(t, p.answer, n, format_weight=cfg.format_weight, gated=cfg.gated,
                            max_len=cfg.max_new_tokens, overlong_cache=cfg.overlong_cache)
              for t, p, n in zip(texts, repeated, n_tokens)]
    out["rewards"] = torch.tensor([s["total"] for s in scores])  # (B,)
    for key in ("correct", "format", "overlong"):
        out["reward_" + key] = torch.tensor([s[key] for s in scores])  # (B,)
    out["texts"], out["problems"] = texts, repeated
    return out


def decode_completions(enc, out):
    """Completion text of each row, without padding and without <|endoftext|>."""
    rows = []
    for toks, m in zip(out["tokens"].tolist(), out["completion_mask"].tolist()):
        ids = [t for t, keep in zip(toks, m) if keep and t != enc.eot_token]
        rows.append(enc.decode(ids))
    return rows


def concat_rollouts(parts):
    """Stack rollouts of different shapes: re-pad prompts on the left, completions on the right."""
    if len(parts) == 1:
        return parts[0]
    P = max(p["prompt_len"] for p in parts)
    N = max(p["tokens"].shape[1] - p["prompt_len"] for p in parts)
    out = {"prompt_len": P}
    for key in ("tokens", "mask", "completion_mask"):  # zero padding: masked out everywhere
        out[key] = torch.cat([_pad(p[key], P - p["prompt_len"], N + p["prompt_len"] - p[key].shape[1])
                              for p in parts])
    for key in parts[0]:
        if key not in out:
            v = [p[key] for p in parts]
            out[key] = torch.cat(v) if torch.is_tensor(v[0]) else sum(v, [])
    return out


def _pad(x, left, right):
    """(B, L) -> (B, left + L + right) with zeros (False) on both sides."""
    return torch.cat([x.new_zeros(x.shape[0], left), x, x.new_zeros(x.shape[0], right)], 1)


def select_groups(batch, keep, G):
    """Keep whole groups (keep: (n_groups,) bool) of a rollout batch."""
    rows = keep.repeat_interleave(G)  # (B,)
    idx = rows.nonzero().squeeze(1).tolist()
    return {k: (v[rows] if torch.is_tensor(v) and v.dim() > 0 else
                [v[i] for i in idx] if isinstance(v, list) else v) for k, v in batch.items()}


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

def token_logprobs(model, tokens, mask, temperature=1.0, fused=True):
    """log pi(token_t | tokens_<t) and the entropy at t, for t = 1..L-1: (B, L-1) each.

    Temperature divides the logits, so the log-probs describe the distribution that was
    sampled. fused=True goes from hidden states straight to log-probs (kernels/
    linear_logprobs.py): the (B, L, V) logits never exist.
    """
    x, targets = tokens[:, :-1], tokens[:, 1:]  # (B, T), T = L - 1
    B, T = x.shape
    if fused:
        h = model(x, mask[:, :-1], hidden=True)  # (B, T, d)
        logp, ent = linear_logprobs_and_entropy(h.reshape(B * T, -1), model.lm_head_weight,
                                                targets.reshape(-1), temperature)
        return logp.view(B, T), ent.view(B, T)
    logits = model(x, mask[:, :-1])  # (B, T, V)
    return token_logprobs_and_entropy(logits, targets, temperature)


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
    """The GRPO objective on (B, T) token log-probs. Returns (loss, stats of tensors).

    mask (B, T) marks completion tokens (prompt and padding never count).
    """
    eps_low = cfg.clip
    eps_high = cfg.clip if cfg.clip_high is None else cfg.clip_high
    A = adv[:, None]  # (B, 1): every token of a completion shares its advantage
    ratio = policy_ratio(logp, old_logp, mask, cfg.ratio_level)  # (B, T) or (B, 1)
    if cfg.objective == "cispo":
        obj = cispo_objective(ratio, A, logp, eps_low, eps_high)
    elif cfg.objective == "ppo":
        obj = clipped_objective(ratio, A, eps_low, eps_high, cfg.dual_clip)
    else:
        raise ValueError(f"unknown objective {cfg.objective!r}")
    token_loss = -obj.expand_as(logp)  # (B, T)
    pg_loss = aggregate(token_loss, mask, cfg.loss_agg, cfg.max_new_tokens)
    loss, stats = pg_loss, {"pg_loss": pg_loss}
    if cfg.kl > 0:
        if cfg.kl_level == "sequence":  # the book: estimator on summed log-probs, per sequence
            kl = kl_penalty((logp * mask).sum(1, keepdim=True), (ref_logp * mask).sum(1, keepdim=True),
                            cfg.kl_estimator).expand_as(logp)  # (B, T)
        else:
            kl = kl_penalty(logp, ref_logp, cfg.kl_estimator)  # (B, T)
        kl_loss = aggregate(kl, mask, cfg.loss_agg, cfg.max_new_tokens)
        loss = loss + cfg.kl * kl_loss
        stats["kl"] = kl_loss
    r = ratio.expand_as(logp)
    low = (r < 1 - eps_low) & (A < 0)  # where the clip is active (zero gradient)
    high = (r > 1 + eps_high) & (A > 0)
    m = mask.bool()
    stats.update(loss=loss, ratio_mean=masked_mean(r, m), ratio_min=r[m].min() if m.any() else r.new_ones(()),
                 ratio_max=r[m].max() if m.any() else r.new_ones(()),
                 clip_frac_low=masked_mean(low, m), clip_frac_high=masked_mean(high, m))
    stats["clip_frac"] = stats["clip_frac_low"] + stats["clip_frac_high"]
    return loss, stats


# ---------------------------------------------------------------- 5. one GRPO step

def sample_batch(model, enc, next_problems, n_prompts, cfg, generator):
    """Rollouts for n_prompts prompts. With dynamic sampling, groups without reward
    variance are dropped and more prompts drawn, up to max_sampling_rounds rounds.

    Returns (batch, fraction of zero-variance groups among all groups sampled).
    """
    G, parts, kept, n_zero, n_seen = cfg.group_size, [], 0, 0, 0
    for _ in range(cfg.max_sampling_rounds if cfg.dynamic_sampling else 1):
        part = rollout(model, enc, [next_problems() for _ in range(n_prompts)], cfg, generator)
        zero = zero_variance_groups(part["rewards"], G)
        n_zero, n_seen = n_zero + int(zero.sum()), n_seen + len(zero)
        if not cfg.dynamic_sampling:
            return part, n_zero / n_seen
        keep = ~zero & (torch.cumsum((~zero).long(), 0) <= n_prompts - kept)  # fill, no more
        if keep.any():
            parts.append(select_groups(part, keep, G))
            kept += int(keep.sum())
        if kept == n_prompts:
            break
    # Out of rounds: train on what was kept (a smaller batch); if nothing, on the last
    # round as sampled (all advantages are zero then, only the KL term acts).
    return concat_rollouts(parts or [part]), n_zero / n_seen


def grpo_step(model, ref_model, opt, enc, next_problems, n_prompts, cfg, generator):
    """Sample, score, compute advantages, then mu optimizer steps on those rollouts.

    Returns a dict of float statistics for logging. Raises FloatingPointError (before
    the optimizer step, so the weights stay good) if the loss or gradients are not finite.
    """
    batch, zero_frac = sample_batch(model, enc, next_problems, n_prompts, cfg, generator)
    tokens, mask = batch["tokens"], batch["mask"]
    loss_mask = batch["completion_mask"][:, 1:].clone()  # (B, T): targets that are completion tokens
    if cfg.mask_truncated:
        loss_mask &= ~batch["truncated"][:, None]
    adv = group_advantages(batch["rewards"], cfg.group_size, cfg.adv_norm)  # (B,)
    ref_logp = None
    if cfg.kl > 0:
        with torch.no_grad():
            ref_logp, _ = token_logprobs(ref_model, tokens, mask, cfg.temperature, cfg.fused_head)
    per_inner = []
    old_logp = None
    for inner in range(cfg.mu):
        logp, entropy = token_logprobs(model, tokens, mask, cfg.temperature, cfg.fused_head)
        if old_logp is None:
            # The old log-probs, computed once: this first forward runs on the weights that
            # sampled the rollouts, so pi_old = pi here exactly (ratio 1) and we reuse it for
            # all mu updates instead of paying for a separate no-grad pass.
            old_logp = logp.detach()
        loss, stats = grpo_loss(logp, old_logp, ref_logp, adv, loss_mask, cfg)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.max_grad_norm)
        if not (torch.isfinite(loss) and torch.isfinite(grad_norm)):
            raise FloatingPointError(f"non-finite loss ({loss.item()}) or gradient norm ({grad_norm.item()})")
        opt.step()
        stats["grad_norm"], stats["entropy"] = grad_norm, masked_mean(entropy.detach(), loss_mask)
        per_inner.append({k: float(v.detach()) for k, v in stats.items()})
    return batch, step_stats(batch, adv, per_inner, zero_frac)


def step_stats(batch, adv, per_inner, zero_frac):
    """Average the inner steps' statistics (ratio min/max over all) and add batch statistics."""
    out = {k: sum(s[k] for s in per_inner) / len(per_inner) for k in per_inner[0]}
    out["ratio_min"] = min(s["ratio_min"] for s in per_inner)
    out["ratio_max"] = max(s["ratio_max"] for s in per_inner)
    lengths = batch["completion_mask"].sum(1).float()  # (B,)
    out.update(reward=batch["rewards"].mean().item(), reward_std=batch["rewards"].std().item(),
               reward_correct=batch["reward_correct"].mean().item(),
               reward_format=batch["reward_format"].mean().item(),
               reward_overlong=batch["reward_overlong"].mean().item(),
               adv_mean=adv.mean().item(), adv_std=adv.std().item(), zero_std_frac=zero_frac,
               resp_len=lengths.mean().item(), resp_len_max=lengths.max().item(),
               truncated_frac=batch["truncated"].float().mean().item(),
               n_tokens=int(batch["mask"].sum()))
    return out


# ---------------------------------------------------------------- evaluation

@torch.no_grad()
def evaluate(model, enc, problems, max_new_tokens=40, batch_size=256):
    """Greedy accuracy (and share of completions in think format) on a list of problems."""
    was_training = model.training
    model.eval()
    correct = fmt = 0
    for i in range(0, len(problems), batch_size):
        chunk = problems[i:i + batch_size]
        out = generate(model, [encode_text(enc, p.prompt) for p in chunk], max_new_tokens, enc.eot_token,
                       greedy=True)
        for text, p in zip(decode_completions(enc, out), chunk):
            correct += rewards.correctness_reward(text, p.answer)
            fmt += rewards.format_reward(text)
    model.train(was_training)
    return {"accuracy": correct / len(problems), "format": fmt / len(problems)}


@torch.no_grad()
def pass_at_k(model, enc, problems, k=8, temperature=1.0, seed=0, max_new_tokens=40):
    """Share of problems with at least one correct answer among k samples."""
    gen = torch.Generator(device=model.wte.weight.device).manual_seed(seed)
    was_training = model.training
    model.eval()
    prompts = [encode_text(enc, p.prompt) for p in problems for _ in range(k)]
    out = generate(model, prompts, max_new_tokens, enc.eot_token, temperature, generator=gen)
    model.train(was_training)
    hits = [rewards.correctness_reward(t, p.answer)
            for t, p in zip(decode_completions(enc, out), (p for p in problems for _ in range(k)))]
    return sum(max(hits[i * k:(i + 1) * k]) for i in range(len(problems))) / len(problems)
