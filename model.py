"""A small handwritten GPT: pre-LN blocks, causal attention, KV cache, batched sampling.

- `GPT.forward(idx, mask, cache)` returns logits, or the final hidden states
  (`hidden=True`) for the fused LM-head kernel. `mask` marks real tokens; padding may
  sit on either side. The same path runs with or without a KV cache (`KVCache`, one
  per layer): with one, idx holds only the positions the cache has not seen.
- `generate(...)` prefills prompts of different lengths (left-padded, the padding masked
  out of attention and positions), then decodes one token per step from the KV cache,
  sampling with temperature / top-k / top-p from a `torch.Generator` (or greedily),
  stops each row on its own at `<|endoftext|>` (or at any of several stop ids), and
  records the log-prob of each sampled token and the entropy of the distribution it was
  drawn from (`Sampled`): the sampler's side of the sampler-learner gap.
- `save_checkpoint` / `load_checkpoint`: weights + model config + tokenizer spec + task
  spec in one file, checked on load with one-line errors. Loading never unpickles
  arbitrary objects (`weights_only=True`): a checkpoint from someone else cannot run code.

Positions are learned embeddings indexed by each row's own position (`cumsum(mask) - 1`),
so a left-padded prompt is seen exactly as the same prompt without padding.

The book's own model, Qwen3, lives in qwen3.py with the same interface (forward, new_cache,
lm_head_weight, cfg.vocab_size, cfg.max_seq_len), so `generate` samples either;
`qwen3.load_pretrained(path)` builds it from a Hugging Face folder.

    python bench/bench_sampling.py     # sampling and training speed
"""
import math
import os
import pickle
import re
from dataclasses import asdict, dataclass
from typing import NamedTuple

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class GPTConfig:
    vocab_size: int = 287
    max_seq_len: int = 96
    n_layer: int = 2
    n_head: int = 4
    d_model: int = 128


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


class Attention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.n_head = cfg.n_head
        self.qkv = nn.Linear(cfg.d_model, 3 * cfg.d_model, bias=False)
        self.proj = nn.Linear(cfg.d_model, cfg.d_model, bias=False)

    def forward(self, x, allowed, cache=None):
        B, T, C = x.shape
        q, k, v = self.qkv(x).view(B, T, 3, self.n_head, C // self.n_head).permute(2, 0, 3, 1, 4)  # 3 x (B, H, T, hd)
        if cache is not None:  # attend to every position so far, not only these T
            k, v = cache.update(allowed.shape[-1] - T, k, v)  # (B, H, S, hd)
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed)  # (B, H, T, hd)
        return self.proj(y.transpose(1, 2).reshape(B, T, C))


class Block(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(cfg.d_model), nn.LayerNorm(cfg.d_model)
        self.attn = Attention(cfg)
        self.mlp = nn.Sequential(nn.Linear(cfg.d_model, 4 * cfg.d_model, bias=False), nn.GELU(),
                                 nn.Linear(4 * cfg.d_model, cfg.d_model, bias=False))

    def forward(self, x, allowed, cache=None):
        x = x + self.attn(self.ln1(x), allowed, cache)  # pre-LN: normalise, then add
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.wte = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.wpe = nn.Embedding(cfg.max_seq_len, cfg.d_model)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layer))
        self.ln_f = nn.LayerNorm(cfg.d_model)
        self.apply(self._init)
        for name, p in self.named_parameters():  # GPT-2: scale residual projections by depth
            if name.endswith(("proj.weight", "mlp.2.weight")):
                nn.init.normal_(p, std=0.02 / math.sqrt(2 * cfg.n_layer))

    @staticmethod
    def _init(m):
        if isinstance(m, (nn.Linear, nn.Embedding)):
            nn.init.normal_(m.weight, std=0.02)

    @property
    def lm_head_weight(self):
        return self.wte.weight  # tied: the output layer is the input embedding, (V, d)

    def forward(self, idx, mask=None, cache=None, hidden=False):
        """idx (B, T) -> logits (B, T, V), or the final hidden states (B, T, d) if hidden.

        mask (B, S) marks the real tokens among all S positions so far (default: all of
        idx). Without a cache S = T; with one (a KVCache per layer, from `new_cache`)
        the first S - T positions are already cached and idx holds the last T.
        """
        B, T = idx.shape
        mask = torch.ones_like(idx, dtype=torch.bool) if mask is None else mask  # (B, S)
        S = mask.shape[1]
        positions = (mask.long().cumsum(1) - 1).clamp(min=0)[:, S - T:]  # (B, T) each row's own count
        allowed = attention_mask(mask, S - T)  # (B, 1, T, S)
        x = self.wte(idx) + self.wpe(positions)  # (B, T, d)
        for i, block in enumerate(self.blocks):
            x = block(x, allowed, None if cache is None else cache[i])
        x = self.ln_f(x)
        return x if hidden else x @ self.lm_head_weight.t()  # (B, T, d) or (B, T, V)

    def new_cache(self, B, L):
        """One empty KVCache per layer for B rows of up to L positions."""
        hd = self.cfg.d_model // self.cfg.n_head
        return [KVCache(B, self.cfg.n_head, L, hd, self.wte.weight) for _ in range(self.cfg.n_layer)]


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


def count_params(model):
    return sum(p.numel() for p in model.parameters()) - model.wpe.weight.numel()


# ---------------------------------------------------------------- checkpoints

def save_checkpoint(path, model, extra):
    """Write atomically (temp file + rename): a kill at any moment leaves the old file."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    tmp = path + ".tmp"
    torch.save({"model": model.state_dict(), "model_config": asdict(model.cfg), **extra}, tmp)
    os.replace(tmp, path)


def load_checkpoint(path, map_location="cpu"):
    """-> (model, checkpoint dict). Raises CheckpointError with a one-line message."""
    if not os.path.exists(path):
        raise CheckpointError(f"checkpoint not found: {path}")
    try:
        # weights_only: a checkpoint is tensors and plain values; unpickling anything else could run code
        ckpt = torch.load(path, map_location=map_location, weights_only=True)
    except pickle.UnpicklingError as e:
        if "Unsupported global" in str(e):  # an object other than tensors and plain values
            name = re.search(r"GLOBAL (\S+)", str(e))  # e.g. argparse.Namespace
            raise CheckpointError(f"refusing {path}: it holds a pickled object ({name and name[1]}), not only tensors "
                                  "and plain values; loading it could run code") from None
        raise CheckpointError(f"cannot read checkpoint {path}: not a valid checkpoint file") from None
    except Exception as e:  # truncated or not a torch file
        raise CheckpointError(f"cannot read checkpoint {path}: {type(e).__name__}: {str(e)[:200]}") from None
    if not isinstance(ckpt, dict) or "model" not in ckpt or "model_config" not in ckpt:
        raise CheckpointError(f"{path} is not a checkpoint of this project (no model/model_config)")
    try:
        cfg = GPTConfig(**ckpt["model_config"])
        model = GPT(cfg)
        model.load_state_dict(ckpt["model"])
    except (TypeError, RuntimeError) as e:
        first = str(e).strip().splitlines()[0][:200]
        raise CheckpointError(f"{path} does not match this model code/config: {first}") from None
    return model, ckpt


class CheckpointError(Exception):
    pass
