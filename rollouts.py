"""Rollouts: sample G completions per prompt, score them, and carry them through a step.

    problems -> generate (decoding.py) -> decode -> rewards.score -> Rollouts

`Rollouts` declares, once and with shapes, everything a GRPO step reads about its
samples. Its masks over the targets `tokens[:, 1:]` (which target is a completion token,
`loss_mask`; the sampler's log-probs of each) are made here, once; logprobs.token_logprobs
feeds `tokens[:, :-1]` to the model and scores those same targets.
In the order grpo_step calls them: `sample_batch`, one step's rollouts with DAPO's dynamic
sampling (keep only groups whose rewards differ); `rollout`, one round of them; the row
plumbing (keeping whole groups, stacking rounds of different lengths, splitting a batch
into minibatches of groups); `lagged_batch`, the queue of an asynchronous trainer's batches
(--rollout-lag); and last the sampler's own weights (--sampler-dtype: bf16, 8-bit).
"""
import copy
from dataclasses import dataclass, fields

import torch

import rewards
import tasks
from decoding import generate
from tokenizer import decode_completions, encode_prompt, stop_tokens


@dataclass
class Rollouts:
    """One step's data: B = n_groups * G rows, the G samples of a prompt adjacent. n_groups is
    the step's n_prompts, or fewer when dynamic sampling ran out of rounds (sample_batch)."""
    tokens: torch.Tensor        # (B, L) prompt (left-padded to prompt_len), completion (right-padded)
    mask: torch.Tensor          # (B, L) real tokens
    loss_mask: torch.Tensor     # (B, T = L - 1) target tokens[:, 1:] is a completion token: the shift, done once
    sampler_logp: torch.Tensor  # (B, T) log-prob of each target under the distribution that drew it
    sampler_entropy: torch.Tensor  # (B, T) entropy of that distribution (after temperature, top-k, top-p)
    support: torch.Tensor       # (B, T, V) bool, what top-k / top-p left to draw from; None unless kept
    truncated: torch.Tensor     # (B,) the completion never emitted a stop token (<|endoftext|>)
    rewards: dict               # name -> (B,): what rewards.score returns; "total" drives the advantages
    texts: list                 # (B,) completion strings
    problems: list              # (B,) tasks.Problem of each row
    prompt_len: int             # P
    pi_old_logp: torch.Tensor = None  # (B, T) the sampling policy scored as the learner scores, when it sampled:
    #                                   pi_old under --rollout-lag --lag-pi-old sampler; else None
    lag: int = 0                # the steps since it was sampled (--rollout-lag)


def sample_batch(policy, enc, next_problems, n_prompts, cfg, generator):
    """Rollouts for n_prompts prompts (under torchrun, this rank's share). With dynamic
    sampling (DAPO), groups without reward variance are dropped and more prompts drawn,
    up to max_sampling_rounds rounds. Returns (Rollouts, (n_groups_sampled,) bool: which
    of all the groups sampled had zero reward std, kept or not).
    """
    G = cfg.group_size
    if not cfg.dynamic_sampling:  # the default: one group a prompt, as sampled
        batch = rollout(policy, enc, [next_problems() for _ in range(n_prompts)], cfg, generator)
        return batch, zero_std_groups(batch.rewards["total"], G)  # (n_prompts,)
    parts, kept, zero_std_rounds = [], 0, []
    for _ in range(cfg.max_sampling_rounds):  # DAPO: sample again until n_prompts groups have a signal
        part = rollout(policy, enc, [next_problems() for _ in range(n_prompts)], cfg, generator)
        zero_std = zero_std_groups(part.rewards["total"], G)  # (n_prompts,)
        zero_std_rounds.append(zero_std)
        keep = ~zero_std & (torch.cumsum((~zero_std).long(), 0) <= n_prompts - kept)  # fill, no more
        if keep.any():
            parts.append(take_rows(part, group_rows(keep, G)))
            kept += int(keep.sum())
        if kept == n_prompts:
            break
    # Out of rounds: train on what was kept (a smaller batch); if nothing, on the last
    # round as sampled (all advantages are zero then, only the KL term acts).
    return concat_rollouts(parts or [part]), torch.cat(zero_std_rounds)


def rollout(policy, enc, problems, cfg, generator):
    """Sample G completions for each problem from policy and score them -> Rollouts."""
    repeated = [p for p in problems for _ in range(cfg.group_size)]  # each prompt G times, adjacent
    prompts = [encode_prompt(enc, p.prompt) for p in repeated]
    stop = stop_tokens(enc)  # <|endoftext|>; for the reasoning Qwen3 <|im_end|> too
    sampler = sampler_model(policy, cfg.sampler_dtype)  # the policy itself, unless --sampler-dtype
    sampler.eval()  # sampling runs without dropout; the learner's forward, after, trains with it (train mode)
    tokens, mask, sampler_logp, sampler_entropy, support = generate(
        sampler, prompts, cfg.max_new_tokens, stop, cfg.temperature, cfg.top_k, cfg.top_p, generator,
        keep_support=cfg.keep_sampling_mask)
    policy.train()
    P = max(map(len, prompts))
    loss_mask = mask[:, 1:].clone()  # (B, T)
    loss_mask[:, :P - 1] = False  # targets before position P are prompt (or padding)
    completion = tokens[:, P:].masked_fill(~mask[:, P:], -1)  # (B, n) padding can never equal eot
    truncated = ~torch.isin(completion, torch.tensor(stop, device=completion.device)).any(1)  # (B,) no stop token
    texts = decode_completions(enc, tokens, mask, P)
    n_tokens = loss_mask.sum(1).tolist()  # (B,) each answer's length
    scores = [rewards.score(t, tasks.graded_answer(p), n, cfg) for t, p, n in zip(texts, repeated, n_tokens)]
    scored = {k: torch.tensor([s[k] for s in scores], device=tokens.device) for k in scores[0]}  # name -> (B,)
    return Rollouts(tokens, mask, loss_mask, sampler_logp[:, 1:], sampler_entropy[:, 1:],
                    None if support is None else support[:, 1:], truncated=truncated, rewards=scored,
                    texts=texts, problems=repeated, prompt_len=P)


def take_rows(batch, rows):
    """The Rollouts of some rows (rows: (b,) indices), e.g. whole groups or a minibatch.
    Goes over every field of Rollouts, so a new field needs no change here."""
    pick = rows.tolist()

    def take(v):
        if torch.is_tensor(v):
            return v[rows]
        if isinstance(v, dict):
            return {k: take(x) for k, x in v.items()}
        if isinstance(v, list):
            return [v[i] for i in pick]
        return v  # prompt_len, or a field that was not kept (None)
    return Rollouts(**{f.name: take(getattr(batch, f.name)) for f in fields(Rollouts)})


def concat_rollouts(parts):
    """Stack Rollouts of different shapes: re-pad prompts on the left, completions on the
    right (every (B, L...) tensor field); (B,) tensors, reward dicts and lists just join."""
    if len(parts) == 1:
        return parts[0]
    P = max(p.prompt_len for p in parts)
    N = max(p.tokens.shape[1] - p.prompt_len for p in parts)

    def cat(values):
        first = values[0]
        if torch.is_tensor(first) and first.dim() >= 2:  # zero (False) padding: masked out everywhere
            return torch.cat([_pad(v, P - p.prompt_len, N + p.prompt_len - p.tokens.shape[1])
                              for v, p in zip(values, parts)])
        if torch.is_tensor(first):
            return torch.cat(values)
        if isinstance(first, dict):
            return {k: cat([v[k] for v in values]) for k in first}
        if isinstance(first, list):
            return sum(values, [])
        return first  # a field that was not kept (None); prompt_len is set below
    out = Rollouts(**{f.name: cat([getattr(p, f.name) for p in parts]) for f in fields(Rollouts)})
    out.prompt_len = P
    return out


def _pad(x, left, right):
    """(B, L, ...) -> (B, left + L + right, ...) with zeros (False) on both sides."""
    return torch.cat([x.new_zeros(x.shape[0], left, *x.shape[2:]), x, x.new_zeros(x.shape[0], right, *x.shape[2:])], 1)


def group_rows(keep, G):
    """Row indices (b,) of the groups marked in keep (n_groups,) bool."""
    return keep.repeat_interleave(G).nonzero().squeeze(1)


def minibatch_rows(B, G, K):
    """K lists of row indices (one per group if there are fewer groups), each of whole
    groups, in order, their sizes within one group of each other, covering the batch.
    (tensor_split, not chunk: chunk gives 6 groups in 3 parts for K = 4, 10 as 3+3+3+1.)"""
    return [group_rows(torch.isin(torch.arange(B // G), part), G)
            for part in torch.arange(B // G).tensor_split(min(K, B // G))]


def zero_std_groups(rewards, G):
    """(n_groups,) bool: every completion of the group got the same reward (zero std: no signal)."""
    r = rewards.view(-1, G)
    return (r == r[:, :1]).all(1)


def lagged_batch(batch, zero_std, lagged, K):
    """--rollout-lag K, an asynchronous trainer's rollouts: the step's new batch (with pi_old's log-probs,
    pi_old_logp, taken on the weights that sampled it) joins the queue `lagged`, and the step trains on
    the batch sampled K steps ago (while the queue fills, the oldest it holds: lags 0, 1, .., K) -> (that
    batch, its zero_std), its lag set. Each rank keeps its own queue."""
    lagged.append((batch, zero_std))
    lag = len(lagged) - 1  # steps since the oldest batch held was sampled
    lagged[0][0].lag = lag
    if lag == K:
        return lagged.popleft()
    return lagged[0]


# ---------------------------------------------------------------- the sampler's weights (--sampler-dtype)

def sampler_model(policy, dtype):
    """The weights that draw the answers (--sampler-dtype), beside the fp32 learner: the policy
    itself (float32); a copy rounded to bf16 (bfloat16: the sampler's log-probs differ from the
    learner's by rounding alone, a KL of about 1e-5 here); or a copy whose every weight matrix is
    fake-quantized to 8 bits per output channel and dequantized for the matmul (int8, fp8), as a
    rollout engine with 8-bit weights beside a full-precision trainer (fp8 rollouts, FlashRL)."""
    if dtype == "float32":
        return policy
    if dtype == "bfloat16":
        return copy.deepcopy(policy).to(torch.bfloat16)
    sampler = copy.deepcopy(policy)
    with torch.no_grad():
        for w in sampler.parameters():
            if w.dim() == 2:  # embeddings, attention, MLP, LM head; not the norms' vectors
                w.copy_(fake_quantize(w, dtype))
    return sampler


def fake_quantize(w, dtype):
    """w (out, in) rounded as an 8-bit engine stores it: one absmax scale per output channel (row),
    each value to int8 (-127..127) or fp8 e4m3 (|x| <= 448), then back to w's dtype."""
    amax = w.abs().amax(dim=1, keepdim=True).clamp(min=1e-12)  # (out, 1)
    if dtype == "int8":
        scale = amax / 127
        return (w / scale).round().clamp(-127, 127) * scale
    if dtype == "fp8":
        scale = amax / 448
        return (w / scale).to(torch.float8_e4m3fn).to(w.dtype) * scale
    raise ValueError(f"unknown sampler dtype {dtype!r}")
