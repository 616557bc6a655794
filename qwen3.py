"""Qwen3, handwritten: the book's model (Qwen3-0.6B) beside the small GPT of model.py.

    from qwen3 import load_pretrained
    model = load_pretrained("qwen3-0.6b-base")    # a Hugging Face folder (docs/book_model.md)
    logits = model(idx)                            # (B, T, 151936)

`Qwen3` has the GPT's interface, so `decoding.generate` and `grpo.token_logprobs` run it
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
tensor, a shape that does not match the config). `read_safetensors` reads the format
itself (an 8-byte header length, a JSON header, raw little-endian bytes): no pickle, so
a downloaded file can hold tensors, never code. `save_pretrained` writes the same layout,
so a trained policy loads back here and in Hugging Face's tools.

Where this departs from the book (reasoning_from_scratch/qwen3.py):
- The book's model keeps one position counter for the whole batch and samples one
  prompt at a time. Here positions are per row, so the G rollouts of many prompts are
  sampled as one ragged, left-padded batch.
- Parameter names are Hugging Face's (under `model.` there), so a checkpoint loads by
  name; the book renames them (W_query, fc1, ...).
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
import shutil
from dataclasses import asdict, dataclass, fields

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

from decoding import KVCache, attention_mask
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

    @property
    def max_seq_len(self):  # the name decoding.generate reads
        return self.max_position_embeddings


# config.json entries that describe variants this code does not implement: each must be
# absent or hold the value here (the one Qwen3's dense models use)
PLAIN = {"hidden_act": "silu", "attention_bias": False, "rope_scaling": None, "use_sliding_window": False}


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

    def forward(self, x, allowed, cos, sin, cache=None):
        B, T, _ = x.shape
        q = self.q_norm(self.q_proj(x).view(B, T, self.n_head, self.head_dim)).transpose(1, 2)  # (B, H, T, hd)
        k = self.k_norm(self.k_proj(x).view(B, T, self.n_kv_head, self.head_dim)).transpose(1, 2)  # (B, KV, T, hd)
        v = self.v_proj(x).view(B, T, self.n_kv_head, self.head_dim).transpose(1, 2)  # (B, KV, T, hd)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        if cache is not None:  # attend to every position so far, not only these T
            k, v = cache.update(allowed.shape[-1] - T, k, v)  # (B, KV, S, hd)
        # GQA without copying K and V: the G = H / KV query heads that share a key/value
        # head attend as G * T query rows of that one head (rows of attention are
        # independent), under the mask repeated once per head of the group (`grouped`).
        # PyTorch's enable_gqa=True instead runs only in flash attention (which takes no
        # mask) or in the math kernel, which copies K and V for each head.
        q = q.reshape(B, self.n_kv_head, -1, self.head_dim)  # (B, KV, G*T, hd), rows in (g, t) order
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

    def forward(self, x, allowed, cos, sin, cache=None):
        x = x + self.self_attn(self.input_layernorm(x), allowed, cos, sin, cache)
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

    def forward(self, idx, mask=None, cache=None, hidden=False):
        """idx (B, T) -> logits (B, T, V), or the final hidden states (B, T, d) if hidden.

        mask (B, S) marks the real tokens among all S positions so far (default: all of
        idx); with a cache (one KVCache per layer, from `new_cache`) the first S - T
        positions are already cached and idx holds the last T (as model.GPT.forward).
        """
        B, T = idx.shape
        mask = torch.ones_like(idx, dtype=torch.bool) if mask is None else mask  # (B, S)
        S = mask.shape[1]
        positions = (mask.long().cumsum(1) - 1).clamp(min=0)[:, S - T:]  # (B, T) each row's own count
        allowed = grouped(attention_mask(mask, S - T), self.cfg)  # (B, 1, G*T, S)
        cos, sin = rope_cos_sin(positions, self.cfg.head_dim, self.cfg.rope_theta)  # (B, 1, T, hd)
        x = self.embed_tokens(idx)  # (B, T, d)
        for i, layer in enumerate(self.layers):
            layer_cache = None if cache is None else cache[i]
            if self.grad_checkpoint and self.training and torch.is_grad_enabled():
                x = checkpoint(layer, x, allowed, cos, sin, layer_cache, use_reentrant=False)
            else:
                x = layer(x, allowed, cos, sin, layer_cache)
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


def read_safetensors(path):
    """name -> tensor for one .safetensors file; CheckpointError (one line) if malformed.

    Layout: n (8 bytes, little-endian unsigned) | n bytes of JSON, {name: {"dtype",
    "shape", "data_offsets": [begin, end]}, optional "__metadata__"} | the raw bytes of
    every tensor, row-major, little-endian, at [begin, end) counted from the header's end.
    The tensors returned share one buffer read from the file.
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
        data = bytearray(size - 8 - n)  # writable, so torch.frombuffer can share it
        f.readinto(data)
    if not isinstance(header, dict):
        raise CheckpointError(f"{path}: not a safetensors file (its header is not a JSON object)")
    header.pop("__metadata__", None)
    tensors = {}
    for name, info in header.items():
        try:
            dtype, shape, (begin, end) = DTYPES[info["dtype"]], [int(s) for s in info["shape"]], info["data_offsets"]
        except (KeyError, TypeError, ValueError):
            raise CheckpointError(f"{path}: tensor {name}: malformed header entry {str(info)[:100]}") from None
        count = math.prod(shape)
        if not (0 <= begin <= end <= len(data)) or end - begin != count * dtype.itemsize:
            raise CheckpointError(f"{path}: tensor {name} ({info['dtype']} {shape}) does not fit bytes "
                                  f"[{begin}, {end}) of {len(data)}: a truncated or corrupt file")
        flat = torch.frombuffer(data, dtype=dtype, count=count, offset=begin) if count else torch.empty(0, dtype=dtype)
        tensors[name] = flat.view(shape)
    return tensors


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
    missing = [f.name for f in fields(Qwen3Config) if hf.get(f.name) is None]
    if missing:
        raise CheckpointError(f"{where} lacks {', '.join(missing)}")
    return Qwen3Config(**{f.name: type(f.default)(hf[f.name]) for f in fields(Qwen3Config)})


def read_weights(path):
    """Hugging Face name -> tensor from model.safetensors, or from the shards of its index."""
    single, index = os.path.join(path, "model.safetensors"), os.path.join(path, "model.safetensors.index.json")
    if os.path.exists(single):
        return read_safetensors(single)
    if not os.path.exists(index):
        pickled = [n for n in sorted(os.listdir(path)) if n.endswith((".bin", ".pt", ".pth"))]
        if pickled:
            raise CheckpointError(f"{path} has only pickle weights ({pickled[0]}); this loader reads safetensors only, "
                                  "never pickle (it can run code)")
        raise CheckpointError(f"{path} has neither model.safetensors nor model.safetensors.index.json")
    try:
        with open(index) as f:
            weight_map = json.load(f)["weight_map"]  # tensor name -> shard file
    except (UnicodeDecodeError, ValueError, KeyError, TypeError):
        raise CheckpointError(f"{index}: not a safetensors index (no weight_map)") from None
    tensors = {}
    for shard in sorted(set(weight_map.values())):
        if os.path.basename(shard) != shard:
            raise CheckpointError(f"{index}: shard {shard!r} lies outside the folder")
        for name, t in read_safetensors(os.path.join(path, shard)).items():
            if weight_map.get(name) != shard:
                raise CheckpointError(f"{path}/{shard} holds {name}, which the index places in {weight_map.get(name)}")
            tensors[name] = t
    missing = sorted(set(weight_map) - set(tensors))
    if missing:
        raise CheckpointError(f"{index} lists {missing[0]} (and {len(missing) - 1} more) that no shard holds")
    return tensors


def check_tensors(path, expected, found):
    """One line for the first way the file's tensors differ from what the config implies."""
    missing, extra = sorted(set(expected) - set(found)), sorted(set(found) - set(expected))
    if missing:
        raise CheckpointError(f"{path}: missing tensor {missing[0]} (and {len(missing) - 1} more); "
                              "not the weights of the config's Qwen3")
    if extra:
        raise CheckpointError(f"{path}: unexpected tensor {extra[0]} (and {len(extra) - 1} more); "
                              f"not a {ARCHITECTURE} this code implements")
    for name, shape in expected.items():
        if tuple(found[name].shape) != tuple(shape):
            raise CheckpointError(f"{path}: tensor {name} has shape {tuple(found[name].shape)}, "
                                  f"config.json implies {tuple(shape)}")


def load_pretrained(path, dtype=None, device="cpu"):
    """A Hugging Face Qwen3 folder -> Qwen3 in eval mode, its weights in `dtype` (default:
    the file's, bf16 for Qwen3-0.6B) on `device`. One-line CheckpointError for anything
    this code does not implement."""
    cfg = read_config(path)
    tensors = read_weights(path)
    head = tensors.get("lm_head.weight")
    if cfg.tie_word_embeddings and head is not None:  # some exports store the tied head too
        if not torch.equal(head, tensors.get("model.embed_tokens.weight", head[:0])):
            raise CheckpointError(f"{path}: lm_head.weight differs from the embedding, but config.json ties them")
        del tensors["lm_head.weight"]
    with torch.device("meta"):  # shapes only: no memory, no random init for 0.6B weights we overwrite
        model = Qwen3(cfg)
    params = dict(model.named_parameters())
    check_tensors(path, {hf_name(n): p.shape for n, p in params.items()}, tensors)
    dtype = dtype or tensors["model.embed_tokens.weight"].dtype
    model = model.to(dtype).to_empty(device=device)
    with torch.no_grad():
        for n, p in model.named_parameters():
            p.copy_(tensors[hf_name(n)])
    return model.eval()


TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "generation_config.json", "vocab.json", "merges.txt")


def save_pretrained(model, path, tokenizer_from=None):
    """Write config.json + model.safetensors (Hugging Face's names) into the folder `path`,
    and copy the tokenizer files of the folder tokenizer_from, so that load_pretrained
    (and Hugging Face's from_pretrained) read it back. Written next to it, then renamed."""
    tmp = path.rstrip("/") + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    dtype = model.lm_head_weight.dtype
    config = {"architectures": [ARCHITECTURE], "model_type": "qwen3", **PLAIN, **asdict(model.cfg),
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
