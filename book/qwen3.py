"""Qwen3, handwritten: the book's model (Qwen3-0.6B) beside the small GPT of model.py.

    from book.qwen3 import load_pretrained
    model = load_pretrained("qwen3-0.6b-base")    # a Hugging Face folder (docs/book_model.md)
    model = load_pretrained("qwen3-0.6b-base", weights="qwen3-0.6B-rlvr-grpo-step00050.pth")  # a book checkpoint
    logits = model(idx)                            # (B, T, 151936)

`Qwen3` has the GPT's interface, so `decoding.generate` and `logprobs.token_logprobs` run it
unchanged: `forward(idx, mask, cache, hidden)`, `new_cache(B, L)` (one decoding.KVCache per
layer, holding only the key/value heads), `lm_head_weight`, `cfg.vocab_size`,
`cfg.max_seq_len`. Padding on either side is masked out of attention, and each row's
positions are its own count of real tokens (cumsum(mask) - 1), so a left-padded prompt is
rotated exactly as the same prompt without padding.

One block (pre-norm):   x = x + Attention(RMSNorm(x));   x = x + MLP(RMSNorm(x))
- RMSNorm (Zhang & Sennrich 2019): x / sqrt(mean(x^2) + eps) * weight, computed in fp32.
- Attention: grouped-query (GQA, Ainslie et al. 2023): 16 query heads share 8 key/value
  heads; queries and keys get an RMSNorm of their own over head_dim (Qwen3's QK-norm),
  then rotary position embeddings (RoPE, Su et al. 2021) with theta from config.json.
- MLP: SwiGLU (Shazeer 2020): down(silu(gate(x)) * up(x)).
- LM head: the embedding matrix itself (tie_word_embeddings, as in the 0.6B model) or a
  matrix of its own, as config.json says.

Loading (`load_pretrained`): config.json plus model.safetensors, or shards listed in
model.safetensors.index.json, with Hugging Face's parameter names. Anything this code
does not implement is refused in one line (another architecture, a missing or extra
tensor, a shape that does not match the config, a dtype such as FP8's F8_E4M3). The
safetensors format is read here (`read_header`, `iter_safetensors`: an 8-byte header
length, a JSON header, raw little-endian bytes): no pickle, so a downloaded file can hold
tensors, never code; every header is checked before any weight is read, then the weights
are read tensor by tensor into the allocated model, so a load needs about two tensors of
memory beside the model, never a whole file. `save_pretrained` writes the same layout
(with config.json's eos / bos_token_id), so a trained policy loads back here and in
Hugging Face's tools.

The book's own checkpoints (ch07/04_download_trainining_checkpoints: its GRPO runs saved
at step 50, 100, ...) are state_dicts of its Qwen3Model: `load_pretrained(folder,
weights=PATH.pth)` takes the config from the Hugging Face folder of the same model and
maps the book's names onto ours one by one (`book_name`), keeping its LM head untied.

Where this departs from the book (reasoning_from_scratch/qwen3.py):
- The book's model keeps one position counter for the whole batch and samples one
  prompt at a time. Here positions are per row, so the G rollouts of many prompts are
  sampled as one ragged, left-padded batch.
- Parameter names are Hugging Face's (under `model.` there), so a checkpoint loads by
  name; the book renames them (W_query, fc1, ...): `book_name` maps them.
- RMSNorm casts back to the input dtype before multiplying by its weight, in the order of
  Hugging Face's reference code (the book multiplies first, in fp32). The two differ
  only in bf16 rounding.
- RoPE rotates in fp32 and casts the result back, as the book does (Hugging Face rotates
  in the model's dtype).

    python bench/bench_qwen3.py --tiny       # the Qwen3-0.6B-shaped benchmark, a CPU smoke run
"""
import json
import math
import os
import pickle
import shutil
from dataclasses import asdict, dataclass, fields
from typing import NamedTuple

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

from decoding import KVCache, attention_mask, decode_attention
from model import CheckpointError

ARCHITECTURE = "Qwen3ForCausalLM"


@dataclass
class Qwen3Config:
    """Field names are config.json's; the defaults are Qwen3-0.6B-Base's."""
    vocab_size: int = 151_936
    hidden_size: int = 1024
    intermediate_size: int = 3072
    num_hidden_layers: int = 28
    num_attention_heads: int = 16
    num_key_value_heads: int = 8
    head_dim: int = 128
    rope_theta: float = 1_000_000.0
    rms_norm_eps: float = 1e-6
    tie_word_embeddings: bool = True
    max_position_embeddings: int = 32_768
    # not part of the architecture: read from config.json when there, and written back by
    # save_pretrained (hf_tokenizer.read_stop_tokens reads eos_token_id; None: not given)
    bos_token_id: int = None
    eos_token_id: int | list = None

    @property
    def max_seq_len(self):  # the name decoding.generate reads
        return self.max_position_embeddings


# config.json entries that describe variants this code does not implement: each must be
# absent or hold the value here (the one Qwen3's dense models use)
PLAIN = {"hidden_act": "silu", "attention_bias": False, "rope_scaling": None, "use_sliding_window": False}
TOKEN_IDS = ("bos_token_id", "eos_token_id")  # Qwen3Config's fields that config.json may lack


class RMSNorm(nn.Module):
    def __init__(self, dim, eps):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        x32 = x.float()
        x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)  # unit root-mean-square
        return self.weight * x32.to(x.dtype)


def rope_cos_sin(positions, head_dim, theta):
    """positions (B, T) -> cos, sin (B, 1, T, head_dim) in fp32.

    Pair i of a head (dimensions i and i + head_dim/2) turns by the angle
    p * theta^(-2i / head_dim) at position p: low pairs spin fast, high pairs slowly.
    """
    inv_freq = 1.0 / theta ** (torch.arange(0, head_dim, 2, device=positions.device).float() / head_dim)  # (hd/2,)
    angles = positions[:, None, :, None].float() * inv_freq  # (B, 1, T, hd/2)
    angles = torch.cat([angles, angles], dim=-1)  # (B, 1, T, hd): both halves of a pair share an angle
    return angles.cos(), angles.sin()


def apply_rope(x, cos, sin):
    """Rotate each pair (x_i, x_{i + hd/2}) of x (B, h, T, hd) by its angle (split-halves layout)."""
    x32 = x.float()
    x1, x2 = x32.chunk(2, dim=-1)
    return (x32 * cos + torch.cat([-x2, x1], dim=-1) * sin).to(x.dtype)


class Attention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.n_head, self.n_kv_head, self.head_dim = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
        d = cfg.hidden_size
        self.q_proj = nn.Linear(d, self.n_head * self.head_dim, bias=False)
        self.k_proj = nn.Linear(d, self.n_kv_head * self.head_dim, bias=False)
        self.v_proj = nn.Linear(d, self.n_kv_head * self.head_dim, bias=False)
        self.o_proj = nn.Linear(self.n_head * self.head_dim, d, bias=False)
        self.q_norm = RMSNorm(self.head_dim, cfg.rms_norm_eps)  # QK-norm: per head, over head_dim
        self.k_norm = RMSNorm(self.head_dim, cfg.rms_norm_eps)

    def forward(self, x, allowed, cos, sin, cache=None, index=None):
        B, T, _ = x.shape
        q = self.q_norm(self.q_proj(x).view(B, T, self.n_head, self.head_dim)).transpose(1, 2)  # (B, H, T, hd)
        k = self.k_norm(self.k_proj(x).view(B, T, self.n_kv_head, self.head_dim)).transpose(1, 2)  # (B, KV, T, hd)
        v = self.v_proj(x).view(B, T, self.n_kv_head, self.head_dim).transpose(1, 2)  # (B, KV, T, hd)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        if cache is not None:  # attend to the whole cache, not only these T (the mask hides the rest)
            k, v = cache.update(index, k, v)  # (B, KV, L, hd)
        # GQA without copying K and V: the G = H / KV query heads that share a key/value
        # head attend as G * T query rows of that one head (rows of attention are
        # independent), under the mask repeated once per head of the group (`grouped`).
        # PyTorch's enable_gqa=True instead runs only in flash attention (which takes no
        # mask) or in the math kernel, which copies K and V for each head.
        q = q.reshape(B, self.n_kv_head, -1, self.head_dim)  # (B, KV, G*T, hd), rows in (g, t) order
        if cache is not None and T == 1:  # a decode step: G query rows per key/value head
            y = decode_attention(q, k, v, allowed)  # (B, KV, G, hd)
        else:
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed)  # (B, KV, G*T, hd)
        y = y.reshape(B, self.n_head, T, self.head_dim).transpose(1, 2)  # (B, T, H, hd)
        return self.o_proj(y.reshape(B, T, self.n_head * self.head_dim))


class MLP(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.gate_proj = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.up_proj = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.down_proj = nn.Linear(cfg.intermediate_size, cfg.hidden_size, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))  # SwiGLU


class Block(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.self_attn = Attention(cfg)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.mlp = MLP(cfg)

    def forward(self, x, allowed, cos, sin, cache=None, index=None):
        x = x + self.self_attn(self.input_layernorm(x), allowed, cos, sin, cache, index)
        return x + self.mlp(self.post_attention_layernorm(x))


class Qwen3(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.layers = nn.ModuleList(Block(cfg) for _ in range(cfg.num_hidden_layers))
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        if not cfg.tie_word_embeddings:
            self.lm_head = nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False)
        # recompute each block in backward instead of keeping its activations (train.py --grad-checkpoint)
        self.grad_checkpoint = False
        self.apply(self._init)

    @staticmethod
    def _init(m):  # random weights (tests, benchmarks); load_pretrained overwrites every one
        if isinstance(m, (nn.Linear, nn.Embedding)):
            nn.init.normal_(m.weight, std=0.02)

    @property
    def lm_head_weight(self):  # (V, d)
        return self.embed_tokens.weight if self.cfg.tie_word_embeddings else self.lm_head.weight

    def forward(self, idx, mask=None, cache=None, hidden=False, index=None, groups=None):
        """idx (B, T) -> logits (B, T, V), or the final hidden states (B, T, d) if hidden.

        mask (B, S) marks the real tokens among all S positions (default: all of idx), and
        index (T,) where among them idx sits (default: the last T); with a cache (one
        KVCache per layer, from `new_cache`) S is the cache's whole length and idx goes at
        cache positions index (as model.GPT.forward). groups: not used here, every row runs its own
        prompt (the small GPT shares a group's, model.GPT.hidden_shared_prompts).
        """
        B, T = idx.shape
        mask = torch.ones_like(idx, dtype=torch.bool) if mask is None else mask  # (B, S)
        S = mask.shape[1]
        index = torch.arange(S - T, S, device=idx.device) if index is None else index  # (T,)
        positions = (mask.long().cumsum(1) - 1).clamp(min=0).index_select(1, index)  # (B, T) each row's own count
        allowed = grouped(attention_mask(mask, index), self.cfg)  # (B, 1, G*T, S)
        cos, sin = rope_cos_sin(positions, self.cfg.head_dim, self.cfg.rope_theta)  # (B, 1, T, hd)
        x = self.embed_tokens(idx)  # (B, T, d)
        for i, layer in enumerate(self.layers):
            layer_cache = None if cache is None else cache[i]
            if self.grad_checkpoint and self.training and torch.is_grad_enabled():
                x = checkpoint(layer, x, allowed, cos, sin, layer_cache, index, use_reentrant=False)
            else:
                x = layer(x, allowed, cos, sin, layer_cache, index)
        x = self.norm(x)
        return x if hidden else x @ self.lm_head_weight.t()  # (B, T, d) or (B, T, V)

    def new_cache(self, B, L):
        """One empty KVCache per layer for B rows of up to L positions (KV heads only)."""
        c = self.cfg
        return [KVCache(B, c.num_key_value_heads, L, c.head_dim, self.embed_tokens.weight)
                for _ in range(c.num_hidden_layers)]


def grouped(allowed, cfg):
    """The attention mask (B, 1, T, S) for the G * T query rows of a key/value head's group."""
    return allowed.repeat(1, 1, cfg.num_attention_heads // cfg.num_key_value_heads, 1)  # (B, 1, G*T, S)


def hf_name(name):
    """Our parameter name -> Hugging Face's: the same, under `model.` (the LM head sits outside)."""
    return name if name.startswith("lm_head.") else "model." + name


# ---------------------------------------------------------------- safetensors

DTYPES = {"F64": torch.float64, "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16,
          "I64": torch.int64, "I32": torch.int32, "I16": torch.int16, "I8": torch.int8, "U8": torch.uint8,
          "BOOL": torch.bool}
DTYPE_NAMES = {v: k for k, v in DTYPES.items()}


class Entry(NamedTuple):
    """Where one tensor of a .safetensors file lies."""
    dtype: torch.dtype
    shape: tuple
    offset: int  # from the start of the file
    nbytes: int


def read_header(path):
    """The tensors a .safetensors file holds, without reading them: name -> Entry. One-line
    CheckpointError if the file is malformed or holds a dtype this code does not read.

    Layout: n (8 bytes, little-endian unsigned) | n bytes of JSON, {name: {"dtype",
    "shape", "data_offsets": [begin, end]}, optional "__metadata__"} | the raw bytes of
    every tensor, row-major, little-endian, at [begin, end) counted from the header's end.
    """
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        if size < 8 or n > size - 8:
            raise CheckpointError(f"{path}: not a safetensors file (header length {n}, file {size} bytes)")
        try:
            header = json.loads(f.read(n))
        except (UnicodeDecodeError, ValueError):
            raise CheckpointError(f"{path}: not a safetensors file (its header is not JSON)") from None
    if not isinstance(header, dict):
        raise CheckpointError(f"{path}: not a safetensors file (its header is not a JSON object)")
    header.pop("__metadata__", None)
    entries, data_len = {}, size - 8 - n
    for name, info in header.items():
        try:
            kind, shape, (begin, end) = info["dtype"], [int(s) for s in info["shape"]], info["data_offsets"]
        except (KeyError, TypeError, ValueError):
            raise CheckpointError(f"{path}: tensor {name}: malformed header entry {str(info)[:100]}") from None
        if kind not in DTYPES:  # FP8 (F8_E4M3, F8_E5M2) comes with scales this code does not apply
            raise CheckpointError(f"{path}: tensor {name} has dtype {kind}, which this code does not read "
                                  f"(it reads {', '.join(DTYPES)})")
        if not (0 <= begin <= end <= data_len) or end - begin != math.prod(shape) * DTYPES[kind].itemsize:
            raise CheckpointError(f"{path}: tensor {name} ({kind} {shape}) does not fit bytes "
                                  f"[{begin}, {end}) of {data_len}: a truncated or corrupt file")
        entries[name] = Entry(DTYPES[kind], tuple(shape), 8 + n + begin, end - begin)
    return entries


def iter_safetensors(path, entries):
    """(name, tensor) for each of entries (from read_header), each read from the file into a
    buffer of its own when its turn comes: a model loads tensor by tensor, so the largest
    tensor bounds the memory a load needs on top of the model, not the file."""
    with open(path, "rb") as f:
        for name, e in entries.items():
            data = bytearray(e.nbytes)  # writable, so torch.frombuffer can share it
            f.seek(e.offset)
            if f.readinto(data) != e.nbytes:
                raise CheckpointError(f"{path}: tensor {name} ends past the end of the file")
            flat = torch.frombuffer(data, dtype=e.dtype) if e.nbytes else torch.empty(0, dtype=e.dtype)
            yield name, flat.view(e.shape)


def read_safetensors(path):
    """name -> tensor for one .safetensors file (no pickle: a file holds tensors, never code)."""
    return dict(iter_safetensors(path, read_header(path)))


def write_safetensors(path, tensors, metadata=None):
    """Write name -> tensor in the layout read_safetensors reads, atomically (temp + rename)."""
    tensors = {k: v.detach().contiguous().cpu() for k, v in tensors.items()}
    header, offset = {}, 0
    for name, t in tensors.items():
        nbytes = t.numel() * t.element_size()
        header[name] = {"dtype": DTYPE_NAMES[t.dtype], "shape": list(t.shape),
                        "data_offsets": [offset, offset + nbytes]}
        offset += nbytes
    if metadata:
        header["__metadata__"] = metadata
    blob = json.dumps(header).encode()
    blob += b" " * (-len(blob) % 8)  # the format pads the header with spaces to a multiple of 8 bytes
    with open(path + ".tmp", "wb") as f:
        f.write(len(blob).to_bytes(8, "little") + blob)
        for t in tensors.values():
            f.write(t.reshape(-1).view(torch.uint8).numpy())  # the tensor's bytes, no copy
    os.replace(path + ".tmp", path)


# ---------------------------------------------------------------- a Hugging Face folder

def read_config(path):
    """config.json of a model folder -> Qwen3Config; one-line CheckpointError otherwise."""
    if not os.path.isdir(path):
        raise CheckpointError(f"--model {path}: not a folder (want a Hugging Face model folder with config.json)")
    where = os.path.join(path, "config.json")
    try:
        with open(where) as f:
            hf = json.load(f)
    except FileNotFoundError:
        raise CheckpointError(f"{path} has no config.json: not a Hugging Face model folder") from None
    except (UnicodeDecodeError, ValueError) as e:
        raise CheckpointError(f"{where} is not valid JSON: {e}") from None
    arch = hf.get("architectures")
    if arch != [ARCHITECTURE]:
        raise CheckpointError(f"{where}: architecture {arch} (model_type {hf.get('model_type')!r}); "
                              f"this code implements {ARCHITECTURE} only")
    rope = hf.get("rope_parameters")  # newer config.json files keep rope_theta in here
    if isinstance(rope, dict):
        hf.setdefault("rope_theta", rope.get("rope_theta"))
        if rope.get("rope_type", "default") != "default":
            raise CheckpointError(f"{where}: rope_type {rope['rope_type']!r} is not implemented (only plain RoPE)")
    for key, value in PLAIN.items():
        if hf.get(key, value) != value:
            raise CheckpointError(f"{where}: {key} = {hf[key]!r} is not implemented here (only {value!r})")
    shape = [f for f in fields(Qwen3Config) if f.name not in TOKEN_IDS]
    missing = [f.name for f in shape if hf.get(f.name) is None]
    if missing:
        raise CheckpointError(f"{where} lacks {', '.join(missing)}")
    return Qwen3Config(**{f.name: type(f.default)(hf[f.name]) for f in shape}, **{k: hf.get(k) for k in TOKEN_IDS})


def weight_files(path):
    """-> {file: its read_header entries}: model.safetensors, or the shards its index lists,
    each holding exactly the tensors the index places in it. Nothing but headers is read."""
    single, index = os.path.join(path, "model.safetensors"), os.path.join(path, "model.safetensors.index.json")
    if os.path.exists(single):
        return {single: read_header(single)}
    if not os.path.exists(index):
        pickled = [n for n in sorted(os.listdir(path)) if n.endswith((".bin", ".pt", ".pth"))]
        if pickled:
            raise CheckpointError(f"{path} has only pickle weights ({pickled[0]}); this loader reads safetensors only, "
                                  "never pickle (it can run code); a reasoning_from_scratch state_dict loads with "
                                  "weights=PATH.pth (train.py --init)")
        raise CheckpointError(f"{path} has neither model.safetensors nor model.safetensors.index.json")
    try:
        with open(index) as f:
            weight_map = json.load(f)["weight_map"]  # tensor name -> shard file
    except (UnicodeDecodeError, ValueError, KeyError, TypeError):
        raise CheckpointError(f"{index}: not a safetensors index (no weight_map)") from None
    files, held = {}, set()
    for shard in sorted(set(weight_map.values())):
        if os.path.basename(shard) != shard:
            raise CheckpointError(f"{index}: shard {shard!r} lies outside the folder")
        files[os.path.join(path, shard)] = entries = read_header(os.path.join(path, shard))
        for name in entries:
            if weight_map.get(name) != shard:
                raise CheckpointError(f"{path}/{shard} holds {name}, which the index places in {weight_map.get(name)}")
        held |= set(entries)
    missing = sorted(set(weight_map) - held)
    if missing:
        raise CheckpointError(f"{index} lists {missing[0]} (and {len(missing) - 1} more) that no shard holds")
    return files


def check_tensors(path, expected, found):
    """One line for the first way the file's tensors (name -> shape) differ from what the
    config implies (expected: name -> shape)."""
    missing, extra = sorted(set(expected) - set(found)), sorted(set(found) - set(expected))
    if missing:
        raise CheckpointError(f"{path}: missing tensor {missing[0]} (and {len(missing) - 1} more); "
                              "not the weights of the config's Qwen3")
    if extra:
        raise CheckpointError(f"{path}: unexpected tensor {extra[0]} (and {len(extra) - 1} more); "
                              f"not a {ARCHITECTURE} this code implements")
    for name, shape in expected.items():
        if tuple(found[name]) != tuple(shape):
            raise CheckpointError(f"{path}: tensor {name} has shape {tuple(found[name])}, "
                                  f"config.json implies {tuple(shape)}")


def checked_model(cfg, name_of, found, where):
    """Qwen3(cfg) on the meta device (shapes only: no memory, no random init for 0.6B
    weights we overwrite), once the tensors found (name -> shape) are exactly its
    parameters, each named name_of(our name)."""
    with torch.device("meta"):
        model = Qwen3(cfg)
    check_tensors(where, {name_of(n): p.shape for n, p in model.named_parameters()}, found)
    return model


@torch.no_grad()
def fill(model, name_of, tensors):
    """Copy each (name, tensor) into the parameter named name_of(our name) -> the model, in eval mode."""
    params = {name_of(n): p for n, p in model.named_parameters()}
    for name, t in tensors:
        params[name].copy_(t)
    return model.eval()


def load_pretrained(path, dtype=None, device="cpu", weights=None):
    """A Hugging Face Qwen3 folder -> Qwen3 in eval mode, its weights in `dtype` (default:
    the file's, bf16 for Qwen3-0.6B) on `device`; with weights=PATH.pth, the config from the
    folder and the weights from a reasoning_from_scratch state_dict (`load_book_weights`).
    One-line CheckpointError for anything this code does not implement.

    The safetensors are read tensor by tensor, shard after shard, into the allocated model:
    never the whole file (or all shards) in memory beside it."""
    cfg = read_config(path)
    if weights is not None:
        return load_book_weights(weights, cfg, dtype, device)
    files = weight_files(path)
    found = {name: e for entries in files.values() for name, e in entries.items()}
    head = found.pop("lm_head.weight", None) if cfg.tie_word_embeddings else None  # some exports store the tied head
    model = checked_model(cfg, hf_name, {n: e.shape for n, e in found.items()}, path)
    embedding = found["model.embed_tokens.weight"]
    model = model.to(dtype or embedding.dtype).to_empty(device=device)
    for file, entries in files.items():
        fill(model, hf_name, iter_safetensors(file, {n: e for n, e in entries.items() if n in found}))
    if head is not None:
        [(_, w)] = iter_safetensors(next(f for f, es in files.items() if "lm_head.weight" in es), {"lm_head.weight": head})
        if head.shape != embedding.shape or not torch.equal(w.to(model.embed_tokens.weight), model.embed_tokens.weight):
            raise CheckpointError(f"{path}: lm_head.weight differs from the embedding, but config.json ties them")
    return model


# ---------------------------------------------------------------- the book's own checkpoints
#
# The book saves its GRPO runs (ch07/04_download_trainining_checkpoints: 7_3_plus_tracking,
# 7_6_plus_format_reward, ... at step 00050 and later) as torch.save(model.state_dict()) of
# reasoning_from_scratch.qwen3.Qwen3Model, whose parameters have names of its own.

BOOK_TOP = {"embed_tokens.weight": "tok_emb.weight", "norm.weight": "final_norm.scale",
            "lm_head.weight": "out_head.weight"}
BOOK_LAYER = {"self_attn.q_proj.weight": "att.W_query.weight", "self_attn.k_proj.weight": "att.W_key.weight",
              "self_attn.v_proj.weight": "att.W_value.weight", "self_attn.o_proj.weight": "att.out_proj.weight",
              "self_attn.q_norm.weight": "att.q_norm.scale", "self_attn.k_norm.weight": "att.k_norm.scale",
              "input_layernorm.weight": "norm1.scale", "post_attention_layernorm.weight": "norm2.scale",
              "mlp.gate_proj.weight": "ff.fc1.weight", "mlp.up_proj.weight": "ff.fc2.weight",
              "mlp.down_proj.weight": "ff.fc3.weight"}


def book_name(name):
    """Our parameter name -> the book's Qwen3Model's: layers.3.mlp.gate_proj.weight -> trf_blocks.3.ff.fc1.weight."""
    if name.startswith("layers."):
        _, i, rest = name.split(".", 2)
        return f"trf_blocks.{i}.{BOOK_LAYER[rest]}"
    return BOOK_TOP[name]


def load_book_weights(path, cfg, dtype=None, device="cpu"):
    """A reasoning_from_scratch Qwen3 state_dict (.pth) -> Qwen3 for cfg (the config.json of
    the Hugging Face folder of the same model), mapped name by name (`book_name`). Read with
    torch.load(weights_only=True), memory-mapped: tensors and plain values only, never code.
    The book's model has an LM head of its own (`out_head`), trained apart from the
    embedding, so the head stays untied here whatever config.json says. One-line
    CheckpointError naming the tensor that is unknown, missing or misshapen."""
    state = read_state_dict(path)
    bad = next((k for k, v in state.items() if not torch.is_tensor(v)), None)
    if bad is not None:
        raise CheckpointError(f"{path}: {bad} is a {type(state[bad]).__name__}, not a tensor: not a model state_dict")
    untied = Qwen3Config(**{**asdict(cfg), "tie_word_embeddings": False})
    model = checked_model(untied, book_name, {k: v.shape for k, v in state.items()}, path)
    model = model.to(dtype or state["tok_emb.weight"].dtype).to_empty(device=device)
    return fill(model, book_name, state.items())


def read_state_dict(path):
    """torch.load(path, weights_only=True) of a name -> tensor dict, or a one-line CheckpointError."""
    if not os.path.isfile(path):
        raise CheckpointError(f"{path}: no such file (want a reasoning_from_scratch Qwen3 state_dict, .pth)")
    try:
        state = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    except pickle.UnpicklingError as e:  # weights_only refused an object: loading it could run code
        raise CheckpointError(f"refusing {path}: it holds pickled objects, not only tensors "
                              f"({str(e).splitlines()[0][:120]})") from None
    except Exception as e:  # truncated, or not a torch file
        raise CheckpointError(f"cannot read {path}: {type(e).__name__}: {str(e).splitlines()[0][:160]}") from None
    if not isinstance(state, dict):
        raise CheckpointError(f"{path} holds a {type(state).__name__}, not a state_dict (name -> tensor)")
    return state


TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "generation_config.json", "vocab.json", "merges.txt")


def save_pretrained(model, path, tokenizer_from=None):
    """Write config.json (with the eos_token_id and bos_token_id the model was loaded with)
    + model.safetensors (Hugging Face's names) into the folder `path`, and copy the
    tokenizer files of the folder tokenizer_from (generation_config.json among them), so
    that load_pretrained (and Hugging Face's from_pretrained) read it back, stop tokens
    included. Written next to it, then renamed."""
    tmp = path.rstrip("/") + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    dtype = model.lm_head_weight.dtype
    config = {"architectures": [ARCHITECTURE], "model_type": "qwen3", **PLAIN,
              **{k: v for k, v in asdict(model.cfg).items() if v is not None},  # with eos / bos_token_id if known
              "torch_dtype": str(dtype).removeprefix("torch.")}
    with open(os.path.join(tmp, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
    write_safetensors(os.path.join(tmp, "model.safetensors"),
                      {hf_name(n): p for n, p in model.named_parameters()}, {"format": "pt"})
    for name in TOKENIZER_FILES if tokenizer_from else ():
        if os.path.exists(os.path.join(tokenizer_from, name)):
            shutil.copy(os.path.join(tokenizer_from, name), tmp)
    shutil.rmtree(path, ignore_errors=True)
    os.replace(tmp, path)
