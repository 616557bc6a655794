"""Decoding, shared by both models: the KV cache, the attention mask, and batched sampling.

    from decoding import generate
    out = generate(model, prompts, max_new_tokens=40, eos_id=enc.eot_token, temperature=1.0)
    python bench/bench_sampling.py     # sampling speed, with the cache and without

The small GPT (model.py) and the book's Qwen3 (qwen3.py) both import this file, and
`generate` runs either: it needs only their common interface, `forward(idx, mask, cache,
hidden)`, `new_cache(B, L)` (one `KVCache` per layer), `lm_head_weight`, `cfg.vocab_size`
and `cfg.max_seq_len`.
- `KVCache`: one layer's keys and values (gpt-fast's), so attention over a cache reads
  exactly like attention without one.
- `attention_mask`: causal, and blind to padding on either side of a row.
- `generate` prefills prompts of different lengths (left-padded, the padding masked out
  of attention and positions), then decodes one token per step from the KV cache,
  sampling with temperature / top-k / top-p (`filter_logits`, `sample`) from a
  `torch.Generator` (or greedily), stops each row on its own at `<|endoftext|>` (or at any
  of several stop ids), and
  records the log-prob of each sampled token and the entropy of the distribution it was
  drawn from (`Sampled`): the sampler's side of the sampler-learner gap.

Where this departs from the book (reasoning_from_scratch's generation loop): the book
samples one prompt at a time with one position counter; here the G answers of many
prompts are one ragged, left-padded batch, each row with its own positions and its own stop.
"""
from typing import NamedTuple

import torch


class KVCache:
    """One layer's keys and values for B rows of up to L positions (gpt-fast's KVCache).

    `update` writes the keys/values of T new positions and returns everything cached so
    far, so attention over a cache reads exactly like attention without one.
    """

    def __init__(self, B, n_head, L, head_dim, like):
        self.k = like.new_zeros(B, n_head, L, head_dim)  # (B, H, L, hd)
        self.v = like.new_zeros(B, n_head, L, head_dim)

    def update(self, start, k, v):
        """k, v (B, H, T, hd) at positions start..start+T-1 -> all keys, values (B, H, start+T, hd)."""
        end = start + k.shape[2]
        self.k[:, :, start:end], self.v[:, :, start:end] = k, v
        # the cache is fp32; under bf16 autocast k and v are not
        return self.k[:, :, :end].to(k.dtype), self.v[:, :, :end].to(v.dtype)


def attention_mask(key_mask, start):
    """(B, 1, T, S) bool: query start+i may see key j <= start+i that is a real token.

    key_mask (B, S) covers every position so far; the queries are the last T = S - start.
    A query always sees itself, so a padding position has one key and no NaN rows.
    """
    S = key_mask.shape[1]
    q = torch.arange(start, S, device=key_mask.device)[:, None]  # (T, 1)
    k = torch.arange(S, device=key_mask.device)[None, :]  # (1, S)
    allowed = (k <= q) & key_mask[:, None, :] | (k == q)  # (B, T, S)
    return allowed[:, None]


def filter_logits(logits, top_k=0, top_p=1.0):
    """Top-k then nucleus (top-p) filtering: removed entries become -inf. logits (B, V)."""
    if top_k > 0:
        kth = torch.topk(logits, min(top_k, logits.shape[-1])).values[:, -1:]  # (B, 1)
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p < 1.0:
        sorted_logits, order = torch.sort(logits, descending=True)
        cum = sorted_logits.softmax(-1).cumsum(-1)
        drop = cum - sorted_logits.softmax(-1) >= top_p  # keep the smallest set reaching top_p
        logits = logits.masked_fill(drop.scatter(1, order, drop), float("-inf"))
    return logits


class Sampled(NamedTuple):
    """What `generate` returns: B rows of P + n positions, n <= max_new_tokens."""
    tokens: torch.Tensor   # (B, P + n) prompts left-padded to P = the longest, completions right-padded
    mask: torch.Tensor     # (B, P + n) real tokens (a completion's <|endoftext|> included)
    logp: torch.Tensor     # (B, P + n) log-prob of each generated token under the distribution it was drawn
    #                        from (after temperature, top-k, top-p); 0 for greedy and outside completions
    entropy: torch.Tensor  # (B, P + n) entropy of that distribution at each generated position (the sampler's)
    support: torch.Tensor  # (B, P + n, V) bool, the tokens top-k / top-p left to draw from; None unless kept


@torch.no_grad()
def generate(model, prompts, max_new_tokens, eos_id, temperature=1.0, top_k=0, top_p=1.0,
             generator=None, greedy=False, use_cache=True, keep_support=False):
    """Sample completions for a batch of prompts (lists of token ids) of any lengths -> Sampled.

    eos_id: the id that ends a row, or a collection of them (the reasoning Qwen3 ends a
    turn with <|im_end|> or <|endoftext|>); the first one pads finished rows.
    use_cache=False recomputes the whole sequence each step (the reference path).
    keep_support=True also keeps the support (DeepSeek-V3.2's kept sampling mask).
    """
    device = next(model.parameters()).device
    B, P = len(prompts), max(len(p) for p in prompts)
    L = P + max_new_tokens
    stop_ids = torch.tensor([eos_id] if isinstance(eos_id, int) else list(eos_id), device=device)  # (S,)
    eos_id = int(stop_ids[0])
    if L > model.cfg.max_seq_len:
        raise ValueError(f"prompt ({P}) + max_new_tokens ({max_new_tokens}) exceeds max_seq_len {model.cfg.max_seq_len}")
    tokens = torch.full((B, L), eos_id, dtype=torch.long, device=device)  # (B, L)
    mask = torch.zeros(B, L, dtype=torch.bool, device=device)
    sampler_logp, sampler_entropy = torch.zeros(B, L, device=device), torch.zeros(B, L, device=device)
    support = torch.zeros(B, L, model.cfg.vocab_size, dtype=torch.bool, device=device) if keep_support else None
    for i, p in enumerate(prompts):  # left padding
        tokens[i, P - len(p):P] = torch.tensor(p, device=device)
        mask[i, P - len(p):P] = True
    done = torch.zeros(B, dtype=torch.bool, device=device)
    t, start = P, 0  # t: index of the next token to write; start: first position not in cache
    # inference_mode: no_grad that also skips autograd's version counters and view tracking,
    # the same numbers ~13% faster at 64 rows (a decode step is many tiny ops). The tensors it
    # creates can never enter autograd, so the outputs are written into the buffers above,
    # made before it: training later saves `tokens` for its backward.
    with torch.inference_mode():
        cache = model.new_cache(B, L) if use_cache else None
        while t < L and not done.all():
            if use_cache:  # feed only what the cache has not seen: the prompts, then one token
                h = model(tokens[:, start:t], mask[:, :t], cache, hidden=True)
            else:
                h = model(tokens[:, :t], mask[:, :t], hidden=True)
            # only the last position needs the LM head: at Qwen's 151,936 tokens the logits of
            # a whole prefill would be B * P * V numbers (GBs), of which we use B * V
            logits = h[:, -1] @ model.lm_head_weight.t()  # (B, V)
            nxt, logp, ent = sample(logits.float(), temperature, top_k, top_p, generator, greedy, support, t)  # (B,)
            tokens[:, t] = torch.where(done, eos_id, nxt)
            sampler_logp[:, t] = torch.where(done, 0.0, logp)
            sampler_entropy[:, t] = torch.where(done, 0.0, ent)
            mask[:, t] = ~done
            done |= torch.isin(nxt, stop_ids)
            start, t = t, t + 1
    return Sampled(tokens[:, :t], mask[:, :t], sampler_logp[:, :t], sampler_entropy[:, :t],
                   support[:, :t] if keep_support else None)


def sample(logits, temperature, top_k, top_p, generator, greedy, support=None, t=0):
    """logits (B, V) -> next token ids (B,), their log-probs and the entropy of the
    distribution they were drawn from (B,); the kept support goes to support[:, t] if given."""
    if greedy:
        zeros = logits.new_zeros(logits.shape[0])
        return logits.argmax(-1), zeros, zeros
    logp = filter_logits(logits / temperature, top_k, top_p).log_softmax(-1)  # (B, V)
    if support is not None:
        support[:, t] = logp > float("-inf")
    p = logp.exp()
    entropy = -(p * logp.clamp(min=torch.finfo(logp.dtype).min)).sum(-1)  # filtered-out tokens: p = 0, no NaN
    nxt = torch.multinomial(p, 1, generator=generator)  # (B, 1)
    return nxt.squeeze(1), logp.gather(1, nxt).squeeze(1), entropy
