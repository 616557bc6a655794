"""A small handwritten GPT: pre-LN blocks, causal attention, learned positions, checkpoints.

- `GPT.forward(idx, mask, cache)` returns logits, or the final hidden states
  (`hidden=True`) for the fused LM-head kernel. `mask` marks real tokens; padding may
  sit on either side. The same path runs with or without a KV cache (`decoding.KVCache`,
  one per layer): with one, idx holds only the positions the cache has not seen.
- `save_checkpoint` / `load_checkpoint`: weights + model config + tokenizer spec + task
  spec in one file, checked on load with one-line errors. Loading never unpickles
  arbitrary objects (`weights_only=True`): a checkpoint from someone else cannot run code.

Positions are learned embeddings indexed by each row's own position (`cumsum(mask) - 1`),
so a left-padded prompt is seen exactly as the same prompt without padding.

Sampling (`decoding.generate`) and the KV cache live in decoding.py, which the book's own
model, Qwen3 (book/qwen3.py, with the same interface: forward, new_cache, lm_head_weight,
cfg.vocab_size, cfg.max_seq_len), shares with this one.

    python bench/bench_sampling.py     # sampling and training speed
"""
import math
import os
import pickle
import re
from dataclasses import asdict, dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

from decoding import KVCache, attention_mask, decode_attention


@dataclass
class GPTConfig:
    vocab_size: int = 287
    max_seq_len: int = 96
    n_layer: int = 2
    n_head: int = 4
    d_model: int = 128
    dropout: float = 0.0  # on each block's two residual branches in training mode (GPT-2's resid_pdrop)


class Attention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.n_head = cfg.n_head
        self.qkv = nn.Linear(cfg.d_model, 3 * cfg.d_model, bias=False)
        self.proj = nn.Linear(cfg.d_model, cfg.d_model, bias=False)

    def forward(self, x, allowed, cache=None, index=None):
        B, T, C = x.shape
        q, k, v = self.qkv(x).view(B, T, 3, self.n_head, C // self.n_head).permute(2, 0, 3, 1, 4)  # 3 x (B, H, T, hd)
        if cache is not None:  # attend to the whole cache, not only these T (the mask hides the rest)
            k, v = cache.update(index, k, v)  # (B, H, L, hd)
        if cache is not None and T == 1:  # a decode step: one query row per sequence
            y = decode_attention(q, k, v, allowed)  # (B, H, 1, hd)
        else:
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed)  # (B, H, T, hd)
        return self.proj(y.transpose(1, 2).reshape(B, T, C))


class Block(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(cfg.d_model), nn.LayerNorm(cfg.d_model)
        self.attn = Attention(cfg)
        self.mlp = nn.Sequential(nn.Linear(cfg.d_model, 4 * cfg.d_model, bias=False), nn.GELU(),
                                 nn.Linear(4 * cfg.d_model, cfg.d_model, bias=False))
        self.drop = dropout_layer(cfg.dropout)

    def forward(self, x, allowed, cache=None, index=None):
        x = x + self.drop(self.attn(self.ln1(x), allowed, cache, index))  # pre-LN: normalise, then add
        return x + self.drop(self.mlp(self.ln2(x)))


def dropout_layer(p):
    # no Dropout module at 0: one at p 0 would still draw its mask in training mode
    return nn.Dropout(p) if p > 0 else nn.Identity()


def set_dropout(model, p):
    """Dropout p in every block of a built GPT (train.py --dropout): active in training mode, so in
    the learner's forwards, and off in eval mode, so in the sampler's (rollouts.py) and in
    evaluation: the mismatch TRL turns dropout off for. Saved with the config."""
    model.cfg.dropout = p
    for block in model.blocks:
        block.drop = dropout_layer(p)
    return model


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

    def forward(self, idx, mask=None, cache=None, hidden=False, index=None, groups=None):
        """idx (B, T) -> logits (B, T, V), or the final hidden states (B, T, d) if hidden.

        mask (B, S) marks the real tokens among all S positions (default: all of idx), and
        index (T,) where among them idx sits (default: the last T). Without a cache S = T;
        with one (a KVCache per layer, from `new_cache`) S is the cache's whole length L,
        idx goes at cache positions index, and the positions after it are not written yet
        (False in mask): decoding.generate's fixed-shape decode step.

        groups (P, G), a shortcut for a GRPO batch, off unless given: G adjacent rows answer
        one prompt, their first P tokens. Without dropout (which would differ row by row)
        each prompt then runs once for its group (hidden_shared_prompts): the same numbers
        up to rounding, with less work.
        """
        if groups is not None and cache is None and mask is not None and shares_prompts(idx, *groups) \
                and not (self.training and self.cfg.dropout):
            h = self.hidden_shared_prompts(idx, mask, *groups)  # (B, T, d)
            return h if hidden else h @ self.lm_head_weight.t()
        B, T = idx.shape
        mask = torch.ones_like(idx, dtype=torch.bool) if mask is None else mask  # (B, S)
        S = mask.shape[1]
        index = torch.arange(S - T, S, device=idx.device) if index is None else index  # (T,)
        positions = (mask.long().cumsum(1) - 1).clamp(min=0).index_select(1, index)  # (B, T) each row's own count
        allowed = attention_mask(mask, index)  # (B, 1, T, S)
        x = self.wte(idx) + self.wpe(positions)  # (B, T, d)
        for i, block in enumerate(self.blocks):
            x = block(x, allowed, None if cache is None else cache[i], index)
        x = self.ln_f(x)
        return x if hidden else x @ self.lm_head_weight.t()  # (B, T, d) or (B, T, V)

    def hidden_shared_prompts(self, idx, mask, P, G):
        """forward(idx, mask, hidden=True), (B, T, d), for groups of G adjacent rows that share their
        first P tokens (a GRPO batch: G answers to each prompt): the prompt positions run once per
        group, and each answer attends to its group's prompt keys and values. Up to float rounding
        the same hidden states, with gradient, for less work: in a default batch the prompts are
        57% of the real positions (docs/performance.md)."""
        caches = [PromptKV(G) for _ in self.blocks]
        prompt = self(idx[::G, :P], mask[::G, :P], cache=caches, hidden=True)  # (B / G, P, d), records k, v
        answers = self(idx[:, P:], mask, cache=caches, hidden=True,
                       index=torch.arange(P, idx.shape[1], device=idx.device))  # (B, T - P, d)
        return torch.cat([prompt.repeat_interleave(G, 0), answers], 1)  # (B, T, d)

    def new_cache(self, B, L):
        """One empty KVCache per layer for B rows of up to L positions."""
        hd = self.cfg.d_model // self.cfg.n_head
        return [KVCache(B, self.cfg.n_head, L, hd, self.wte.weight) for _ in range(self.cfg.n_layer)]


def shares_prompts(idx, P, G):
    """Each group of G > 1 adjacent rows of idx (B, T) has the same first P tokens."""
    return G > 1 and 0 < P < idx.shape[1] and idx.shape[0] % G == 0 and \
        torch.equal(idx[:, :P], idx[::G, :P].repeat_interleave(G, 0))


class PromptKV:
    """One layer's prompt keys and values for hidden_shared_prompts: the prompt pass records them
    (with gradient), the answers' pass attends to them, each group's repeated for its G rows."""

    def __init__(self, G):
        self.G, self.k, self.v = G, None, None

    def update(self, index, k, v):
        """k, v (n, H, T, hd): the prompts' (recorded as they are), then the answers' (B = n G rows),
        returned after their group's prompt keys and values: (B, H, P + T, hd)."""
        if self.k is None:
            self.k, self.v = k, v
            return k, v
        return (torch.cat([self.k.repeat_interleave(self.G, 0), k], 2),
                torch.cat([self.v.repeat_interleave(self.G, 0), v], 2))


def count_params(model):
    """The parameters, as GPT-2 counts them: without the position embeddings (wpe)."""
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
