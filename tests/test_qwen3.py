"""Qwen3 (book/qwen3.py) on tiny random configs: the shared sampling and log-prob paths, and
load_pretrained on folders written here against a forward written from the formulas, and
on the book's own state_dicts against the same weights under Hugging Face's names.

Nothing is downloaded: the folders hold random weights under Hugging Face's names, the
safetensors files are written byte by byte from the format's description, and the book's
state_dicts carry its Qwen3Model's names, typed here (BOOK_NAMES).
"""
import argparse
import json
import math
import os
import re
import struct
import tracemalloc

import pytest
import torch
import torch.nn.functional as F

import grpo
import grpo
import tasks
from book import qwen3
from book.qwen3 import Qwen3, Qwen3Config, load_pretrained, read_safetensors, save_pretrained
from config import GRPOConfig
from decoding import generate
from harness.stats import logged_step
from model import CheckpointError

# head_dim 24 is not hidden_size / heads (16), as in Qwen3-0.6B (128, not 1024 / 16)
TINY = dict(vocab_size=300, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, head_dim=24, rope_theta=10_000.0, rms_norm_eps=1e-6, max_position_embeddings=64)
EOS = 290


def tiny(seed=0, scale=4.0, **kw):
    """A tiny Qwen3 with larger weights than init: sharper, more varied distributions."""
    torch.manual_seed(seed)
    m = Qwen3(Qwen3Config(**{**TINY, **kw})).eval()
    with torch.no_grad():
        for p in m.parameters():
            p.mul_(scale) if p.dim() > 1 else p.add_(0.3 * torch.randn_like(p))
    return m


def prompts(seed=0, n=6):
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(0, 280, (int(torch.randint(1, 10, (1,), generator=g)),), generator=g).tolist()
            for _ in range(n)]


@pytest.mark.roundings
@pytest.mark.parametrize("kw", [dict(greedy=True), dict(temperature=0.8, top_p=0.9), dict(temperature=1.0, top_k=20)])
def test_kv_cache_generation_equals_full_forwards(kw):
    m, ps = tiny(), prompts(1)
    (a, ma, la, *_), (b, mb, lb, *_) = [generate(m, ps, 16, EOS, generator=torch.Generator().manual_seed(3), use_cache=c, **kw)
                                for c in (True, False)]
    assert torch.equal(a, b) and torch.equal(ma, mb)
    torch.testing.assert_close(la, lb, rtol=1e-4, atol=1e-5)
    assert len({tuple(r) for r in a[:, -16:].tolist()}) > 1  # rows differ: the check compares something


def test_generation_stops_each_row_at_the_first_of_several_stop_ids():
    """The reasoning Qwen3 ends a turn with <|im_end|> or <|endoftext|>: eos_id may list several."""
    m, ps = tiny(), prompts(1)
    P = max(map(len, ps))
    free = generate(m, ps, 16, EOS, greedy=True)
    assert free.mask[:, P:].all()  # no row met EOS: each runs to the cap
    a, b = free.tokens[0, P + 2].item(), free.tokens[1, P + 5].item()  # two ids the rows do emit
    out = generate(m, ps, 16, (a, b), greedy=True)
    ended = 0
    for i in range(len(ps)):
        row = free.tokens[i, P:].tolist()
        n = next((j + 1 for j, t in enumerate(row) if t in (a, b)), len(row))  # up to and with the first stop
        ended += n < len(row)
        assert out.tokens[i, P:P + n].tolist() == row[:n] and out.mask[i, P:P + n].all()
        assert not out.mask[i, P + n:].any() and (out.tokens[i, P + n:] == a).all()  # then padding (the first id)
    assert ended >= 2


@pytest.mark.roundings
def test_left_padded_rows_equal_unpadded(monkeypatch):
    m = tiny(1, tie_word_embeddings=False)  # an untied head: the other LM-head path
    p = prompts(2, 1)[0]
    padded, mask = torch.tensor([[7] * 5 + p]), torch.tensor([[False] * 5 + [True] * len(p)])
    seen, real = [], qwen3.rope_cos_sin
    monkeypatch.setattr(qwen3, "rope_cos_sin", lambda pos, *a: seen.append(pos) or real(pos, *a))
    torch.testing.assert_close(m(padded, mask)[0, 5:], m(torch.tensor([p]))[0], rtol=1e-4, atol=1e-4)
    # RoPE sees only position differences, so the logits alone cannot tell a shifted row;
    # the row's own positions keep its angles those of the unpadded prompt exactly
    assert seen[0][0, 5:].tolist() == seen[1][0].tolist() == list(range(len(p)))
    ps = prompts(3)
    tokens, *_ = generate(m, ps, 12, EOS, greedy=True)  # a ragged batch, each row left-padded
    P = max(map(len, ps))
    for i, q in enumerate(ps):
        one, *_ = generate(m, [q], 12, EOS, greedy=True)
        assert tokens[i, P:P + one.shape[1] - len(q)].tolist() == one[0, len(q):].tolist()


@pytest.mark.roundings
@pytest.mark.parametrize("fused", [True, False])
def test_token_logprobs_equal_log_softmax_of_the_logits(fused):
    m = tiny()
    tokens, mask, *_ = generate(m, prompts(4), 10, EOS, generator=torch.Generator().manual_seed(0))
    loss_mask = mask[:, 1:].clone()
    loss_mask[:, :8] = False  # targets before the completions: not scored
    logp, _ = grpo.token_logprobs(m, tokens, mask, loss_mask, 0.7, "fused" if fused else "logits")  # (B, T)
    ref = (m(tokens[:, :-1], mask[:, :-1]) / 0.7).log_softmax(-1).gather(-1, tokens[:, 1:, None])[..., 0]
    torch.testing.assert_close(logp[loss_mask], ref[loss_mask], rtol=1e-4, atol=1e-5)
    assert (logp[~loss_mask] == 0).all()


def test_a_grpo_step_runs_and_changes_the_weights(enc, digit_reward):
    m = tiny(scale=1.0, vocab_size=enc.n_vocab).train()
    before = {n: p.detach().clone() for n, p in m.named_parameters()}
    stream = tasks.problems("easy", 0)
    cfg = GRPOConfig(group_size=4, max_new_tokens=6, temperature=2.0)
    opt = torch.optim.Adam(m.parameters(), lr=1e-3)
    _, stats = logged_step(m, None, opt, enc, lambda: next(stream), 4, cfg, torch.Generator().manual_seed(0))
    assert stats["adv_std"] > 0 and math.isfinite(stats["loss"])  # mixed rewards: a real gradient
    changed = [n for n, p in m.named_parameters() if not torch.equal(p, before[n])]
    assert len(changed) == len(before), set(before) - set(changed)


@pytest.mark.roundings
def test_gradient_checkpointing_gives_the_same_gradients():
    grads = []
    for ckpt in (False, True):
        m = tiny().train()
        m.grad_checkpoint = ckpt
        idx = torch.randint(0, 300, (2, 9), generator=torch.Generator().manual_seed(0))
        m(idx).logsumexp(-1).sum().backward()
        grads.append(torch.cat([p.grad.flatten() for p in m.parameters()]))
    torch.testing.assert_close(grads[0], grads[1], rtol=1e-5, atol=1e-6)


# ---------------------------------------------------------------- a Hugging Face folder

def hf_tensors(cfg, seed, dtype):
    """Random weights under Hugging Face's names for a Qwen3 config dict."""
    g = torch.Generator().manual_seed(seed)
    d, hd, H, KV, I = cfg["hidden_size"], cfg["head_dim"], cfg["num_attention_heads"], cfg["num_key_value_heads"], \
        cfg["intermediate_size"]
    shapes = {"model.embed_tokens.weight": (cfg["vocab_size"], d), "model.norm.weight": (d,)}
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        shapes.update({p + "self_attn.q_proj.weight": (H * hd, d), p + "self_attn.k_proj.weight": (KV * hd, d),
                       p + "self_attn.v_proj.weight": (KV * hd, d), p + "self_attn.o_proj.weight": (d, H * hd),
                       p + "self_attn.q_norm.weight": (hd,), p + "self_attn.k_norm.weight": (hd,),
                       p + "input_layernorm.weight": (d,), p + "post_attention_layernorm.weight": (d,),
                       p + "mlp.gate_proj.weight": (I, d), p + "mlp.up_proj.weight": (I, d),
                       p + "mlp.down_proj.weight": (d, I)})
    if not cfg["tie_word_embeddings"]:
        shapes["lm_head.weight"] = (cfg["vocab_size"], d)
    return {n: (1.0 + 0.3 * torch.randn(s, generator=g) if len(s) == 1 else 0.3 * torch.randn(s, generator=g)).to(dtype)
            for n, s in shapes.items()}


def write_safetensors_by_hand(path, tensors, dtype_names=None):
    """The format, as its description says: u64 little-endian header size, JSON header, bytes.
    dtype_names: a dtype to write for some tensors in place of their own (FP8's F8_E4M3)."""
    header, blobs, offset = {"__metadata__": {"format": "pt"}}, [], 0
    for name, t in tensors.items():
        raw = t.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()
        kind = (dtype_names or {}).get(name) or {torch.float32: "F32", torch.bfloat16: "BF16", torch.uint8: "U8"}[t.dtype]
        header[name] = {"dtype": kind, "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    head = json.dumps(header).encode()
    head += b" " * (-len(head) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(head)) + head + b"".join(blobs))


def write_folder(path, tie=True, shards=1, dtype=torch.float32, seed=0, **changes):
    cfg = {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "hidden_act": "silu", "attention_bias": False,
           "rope_scaling": None, "torch_dtype": "bfloat16", **TINY, "tie_word_embeddings": tie, **changes}
    os.makedirs(path, exist_ok=True)
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump(cfg, f)
    tensors = hf_tensors(cfg, seed, dtype)
    names = list(tensors)
    if shards == 1:
        write_safetensors_by_hand(os.path.join(path, "model.safetensors"), tensors)
    else:
        weight_map = {}
        for k in range(shards):
            shard = f"model-{k + 1:05d}-of-{shards:05d}.safetensors"
            part = {n: tensors[n] for n in names[k::shards]}
            write_safetensors_by_hand(os.path.join(path, shard), part)
            weight_map.update(dict.fromkeys(part, shard))
        with open(os.path.join(path, "model.safetensors.index.json"), "w") as f:
            json.dump({"metadata": {}, "weight_map": weight_map}, f)
    return cfg, tensors


def reference_logits(W, cfg, idx):
    """Qwen3's forward written out from the formulas, one sequence idx (T,), no padding."""
    W = {k: v.double() for k, v in W.items()}
    T, hd, H, KV, eps = len(idx), cfg["head_dim"], cfg["num_attention_heads"], cfg["num_key_value_heads"], \
        cfg["rms_norm_eps"]

    def rms(x, w):  # RMSNorm
        return x / torch.sqrt((x * x).mean(-1, keepdim=True) + eps) * w

    half = hd // 2
    angle = torch.arange(T, dtype=torch.float64)[:, None] * cfg["rope_theta"] ** (-2 * torch.arange(half) / hd)

    def rope(v):  # (T, hd): dimension pair (j, j + hd/2) turned by angle[t, j]
        a, b = v[:, :half], v[:, half:]
        return torch.cat([a * angle.cos() - b * angle.sin(), a * angle.sin() + b * angle.cos()], -1)

    causal = torch.full((T, T), float("-inf"), dtype=torch.float64).triu(1)
    x = W["model.embed_tokens.weight"][idx]  # (T, d)
    for layer in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{layer}."
        h = rms(x, W[p + "input_layernorm.weight"])
        q, k, v = (h @ W[p + f"self_attn.{n}_proj.weight"].T for n in "qkv")
        heads = []
        for i in range(H):
            j = i // (H // KV)  # the key/value head that query head i shares
            qi = rope(rms(q[:, i * hd:(i + 1) * hd], W[p + "self_attn.q_norm.weight"]))
            kj = rope(rms(k[:, j * hd:(j + 1) * hd], W[p + "self_attn.k_norm.weight"]))
            scores = qi @ kj.T / math.sqrt(hd) + causal
            heads.append(scores.softmax(-1) @ v[:, j * hd:(j + 1) * hd])
        x = x + torch.cat(heads, -1) @ W[p + "self_attn.o_proj.weight"].T
        h = rms(x, W[p + "post_attention_layernorm.weight"])
        x = x + (F.silu(h @ W[p + "mlp.gate_proj.weight"].T) * (h @ W[p + "mlp.up_proj.weight"].T)) @ \
            W[p + "mlp.down_proj.weight"].T
    x = rms(x, W["model.norm.weight"])
    return x @ W.get("lm_head.weight", W["model.embed_tokens.weight"]).T  # (T, V)


@pytest.mark.parametrize("tie,shards,dtype", [(True, 1, torch.bfloat16), (False, 3, torch.float32)])
def test_load_pretrained_gives_the_reference_logits(tmp_path, tie, shards, dtype):
    cfg, W = write_folder(str(tmp_path), tie, shards, dtype)
    m = load_pretrained(str(tmp_path), dtype=torch.float32)
    idx = torch.randint(0, 300, (11,), generator=torch.Generator().manual_seed(1))
    torch.testing.assert_close(m(idx[None])[0].double(), reference_logits(W, cfg, idx), rtol=1e-4, atol=1e-4)
    assert load_pretrained(str(tmp_path)).lm_head_weight.dtype == dtype  # default: the file's dtype


def test_bf16_model_samples_and_saves_back(tmp_path):
    write_folder(str(tmp_path / "in"))
    m = load_pretrained(str(tmp_path / "in"), dtype=torch.bfloat16)
    tokens, mask, logp, *_ = generate(m, prompts(5), 8, EOS, temperature=0.8, top_p=0.9,
                                  generator=torch.Generator().manual_seed(0))
    assert logp.dtype == torch.float32 and torch.isfinite(logp).all()  # the sampler's log-probs in fp32
    save_pretrained(m, str(tmp_path / "out"))
    back = load_pretrained(str(tmp_path / "out"))
    assert back.lm_head_weight.dtype == torch.bfloat16
    assert all(torch.equal(a, b) for a, b in zip(m.state_dict().values(), back.state_dict().values()))


def corrupt(path, what):
    """Damage a written folder in one way."""
    conf, st = os.path.join(path, "config.json"), os.path.join(path, "model.safetensors")
    cfg = json.load(open(conf))
    tensors = read_safetensors(st)
    if what == "architecture":
        cfg["architectures"], cfg["model_type"] = ["LlamaForCausalLM"], "llama"
    elif what == "rope":
        cfg["rope_scaling"] = {"rope_type": "yarn", "factor": 4.0}
    elif what == "missing":
        del tensors["model.layers.1.mlp.up_proj.weight"]
    elif what == "extra":
        tensors["model.layers.0.self_attn.q_proj.bias"] = torch.zeros(64)
    elif what == "shape":
        tensors["model.layers.0.self_attn.k_proj.weight"] = torch.zeros(64, 64)
    elif what == "pickle":
        os.remove(st)
        torch.save({}, os.path.join(path, "pytorch_model.bin"))
    elif what == "fp8":  # one byte per weight, as Qwen3-0.6B-FP8 stores its projections
        tensors["model.layers.0.mlp.up_proj.weight"] = torch.zeros(96, 64, dtype=torch.uint8)
    if what in ("missing", "extra", "shape", "fp8"):
        write_safetensors_by_hand(st, {k: v.clone() for k, v in tensors.items()},
                                  {"model.layers.0.mlp.up_proj.weight": "F8_E4M3"} if what == "fp8" else None)
    if what == "truncated":
        data = open(st, "rb").read()
        open(st, "wb").write(data[:len(data) - 100])
    json.dump(cfg, open(conf, "w"))


@pytest.mark.parametrize("what,message", [
    ("architecture", "architecture \\['LlamaForCausalLM'\\].*implements Qwen3ForCausalLM only"),
    ("rope", "rope_scaling .* is not implemented"),
    ("missing", "missing tensor model.layers.1.mlp.up_proj.weight"),
    ("extra", "unexpected tensor model.layers.0.self_attn.q_proj.bias"),
    ("shape", "model.layers.0.self_attn.k_proj.weight has shape \\(64, 64\\), config.json implies \\(48, 64\\)"),
    ("pickle", "only pickle weights \\(pytorch_model.bin\\)"),
    ("truncated", "truncated or corrupt"),
    ("fp8", "model.layers.0.mlp.up_proj.weight has dtype F8_E4M3, which this code does not read"),
])
def test_load_pretrained_refuses_in_one_line(tmp_path, what, message):
    write_folder(str(tmp_path))
    corrupt(str(tmp_path), what)
    with pytest.raises(CheckpointError, match=message) as e:
        load_pretrained(str(tmp_path))
    assert "\n" not in str(e.value)


def test_shards_are_read_tensor_by_tensor_never_all_at_once(tmp_path):
    """Memory bound: loading three shards allocates (beside the model, whose storage torch
    allocates) at most two tensors' buffers at a time (the one being copied, the next one
    being read), far less than one shard."""
    write_folder(str(tmp_path), shards=3, vocab_size=300, hidden_size=128, intermediate_size=512,
                 num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2, head_dim=32)
    shards = [os.path.getsize(tmp_path / n) for n in os.listdir(tmp_path) if n.endswith(".safetensors")]
    largest = 512 * 128 * 4  # bytes of an MLP matrix in fp32
    assert len(shards) == 3 and min(shards) > 4 * largest  # reading a whole shard breaks the bound
    load_pretrained(str(tmp_path))  # once untraced: the modules it imports on first use are not its buffers
    tracemalloc.start()
    try:
        load_pretrained(str(tmp_path))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 2.5 * largest, (peak, largest, shards)  # measured: 2.08 x


def test_a_tied_head_stored_in_another_shard_must_equal_the_embedding(tmp_path):
    cfg, W = write_folder(str(tmp_path), tie=False, shards=3)
    config = dict(cfg, tie_word_embeddings=True)
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(CheckpointError, match="lm_head.weight differs from the embedding, but config.json ties them"):
        load_pretrained(str(tmp_path))
    shard = json.load(open(tmp_path / "model.safetensors.index.json"))["weight_map"]["lm_head.weight"]
    part = read_safetensors(str(tmp_path / shard))
    part["lm_head.weight"] = W["model.embed_tokens.weight"]  # an export that stores the tied head as well
    write_safetensors_by_hand(str(tmp_path / shard), {k: v.clone() for k, v in part.items()})
    m = load_pretrained(str(tmp_path))
    assert m.cfg.tie_word_embeddings and torch.equal(m.lm_head_weight, W["model.embed_tokens.weight"])


def test_save_pretrained_keeps_the_token_ids_so_the_stop_tokens_load_back(tmp_path):
    write_folder(str(tmp_path / "in"), bos_token_id=3, eos_token_id=[7, 3])
    save_pretrained(load_pretrained(str(tmp_path / "in")), str(tmp_path / "out"))
    config = json.load(open(tmp_path / "out" / "config.json"))
    assert config["eos_token_id"] == [7, 3] and config["bos_token_id"] == 3
    assert load_pretrained(str(tmp_path / "out")).cfg.eos_token_id == [7, 3]
    write_folder(str(tmp_path / "bare"))  # a config.json without them: none invented
    save_pretrained(load_pretrained(str(tmp_path / "bare")), str(tmp_path / "bare_out"))
    assert "eos_token_id" not in json.load(open(tmp_path / "bare_out" / "config.json"))


# ---------------------------------------------------------------- the book's own checkpoints

# Hugging Face's names -> the book's (reasoning_from_scratch/qwen3.py: Qwen3Model's tok_emb,
# trf_blocks[i].att.W_query, .norm1, .ff.fc1, final_norm, out_head; RMSNorm's weight is `scale`)
BOOK_NAMES = [(r"^model\.embed_tokens\.weight$", "tok_emb.weight"), (r"^model\.norm\.weight$", "final_norm.scale"),
              (r"^lm_head\.weight$", "out_head.weight"), (r"^model\.layers\.(\d+)\.", r"trf_blocks.\1."),
              (r"self_attn\.q_proj\.", "att.W_query."), (r"self_attn\.k_proj\.", "att.W_key."),
              (r"self_attn\.v_proj\.", "att.W_value."), (r"self_attn\.o_proj\.", "att.out_proj."),
              (r"self_attn\.(q|k)_norm\.weight$", r"att.\1_norm.scale"), (r"input_layernorm\.weight$", "norm1.scale"),
              (r"post_attention_layernorm\.weight$", "norm2.scale"), (r"mlp\.gate_proj\.", "ff.fc1."),
              (r"mlp\.up_proj\.", "ff.fc2."), (r"mlp\.down_proj\.", "ff.fc3.")]


def book_state_dict(W):
    """The weights W (Hugging Face's names) as the book's Qwen3Model.state_dict() holds them:
    its names, an out_head of its own (the embedding's copy when W is tied), bf16 matrices
    and fp32 RMSNorm scales (its RMSNorm parameters keep the default dtype)."""
    W = dict(W)
    W.setdefault("lm_head.weight", W["model.embed_tokens.weight"].clone())
    out = {}
    for name, t in W.items():
        for pattern, book in BOOK_NAMES:
            name = re.sub(pattern, book, name)
        out[name] = t.clone()
    return out


@pytest.mark.parametrize("tie", [False, True])
def test_a_book_state_dict_gives_the_logits_of_the_same_weights_from_hugging_face_names(tmp_path, tie):
    cfg, W = write_folder(str(tmp_path / "hf"), tie=tie, shards=3)
    torch.save(book_state_dict(W), tmp_path / "book.pth")
    hf, book = load_pretrained(str(tmp_path / "hf")), load_pretrained(str(tmp_path / "hf"), weights=str(tmp_path / "book.pth"))
    idx = torch.randint(0, 300, (2, 11), generator=torch.Generator().manual_seed(1))
    assert torch.equal(book(idx), hf(idx)) and not book.training
    assert not book.cfg.tie_word_embeddings  # the book's out_head is a parameter of its own
    assert book.lm_head.weight.data_ptr() != book.embed_tokens.weight.data_ptr()


def test_an_untied_book_head_stays_untied(tmp_path):
    """A trained book checkpoint's out_head has left the embedding: its own weights give the
    logits, even for a folder whose config.json ties them (Qwen3-0.6B-Base's)."""
    cfg, W = write_folder(str(tmp_path / "hf"), tie=True)
    head = 0.3 * torch.randn(300, 64, generator=torch.Generator().manual_seed(5))
    torch.save(book_state_dict({**W, "lm_head.weight": head}), tmp_path / "book.pth")
    m = load_pretrained(str(tmp_path / "hf"), weights=str(tmp_path / "book.pth"))
    idx = torch.randint(0, 300, (11,), generator=torch.Generator().manual_seed(1))
    expected = reference_logits({**W, "lm_head.weight": head}, cfg, idx)
    torch.testing.assert_close(m(idx[None])[0].double(), expected, rtol=1e-4, atol=1e-4)
    save_pretrained(m, str(tmp_path / "saved"))  # and saves as an untied Hugging Face folder
    back = load_pretrained(str(tmp_path / "saved"))
    assert not back.cfg.tie_word_embeddings and torch.equal(back.lm_head.weight, head)


def book_file(tmp_path, what):
    """A book state_dict damaged in one way -> its path."""
    _, W = write_folder(str(tmp_path / "hf"))
    state = book_state_dict(W)
    if what == "unknown":
        state["trf_blocks.0.att.W_query.bias"] = torch.zeros(96)
    elif what == "missing":
        del state["trf_blocks.1.ff.fc2.weight"]
    elif what == "shape":
        state["trf_blocks.0.att.W_key.weight"] = torch.zeros(64, 64)
    elif what == "compiled":  # saved from torch.compile(model): every name under _orig_mod.
        state = {"_orig_mod." + k: v for k, v in state.items()}
    elif what == "not a tensor":
        state["step"] = 50
    elif what == "wrapped":
        state = [state]
    elif what == "object":
        state["args"] = argparse.Namespace(lr=1e-5)
    torch.save(state, tmp_path / "book.pth")
    if what == "truncated":
        data = (tmp_path / "book.pth").read_bytes()
        (tmp_path / "book.pth").write_bytes(data[:len(data) // 2])
    return str(tmp_path / "book.pth")


@pytest.mark.parametrize("what,message", [
    ("unknown", "unexpected tensor trf_blocks.0.att.W_query.bias"),
    ("missing", "missing tensor trf_blocks.1.ff.fc2.weight"),
    ("shape", "tensor trf_blocks.0.att.W_key.weight has shape \\(64, 64\\), config.json implies \\(48, 64\\)"),
    ("compiled", "missing tensor att|missing tensor final_norm.scale"),
    ("not a tensor", "step is a int, not a tensor"),
    ("wrapped", "holds a list, not a state_dict"),
    ("object", "refusing .*book.pth: it holds pickled objects"),
    ("truncated", "cannot read .*book.pth"),
])
def test_a_book_state_dict_is_refused_in_one_line(tmp_path, what, message):
    path = book_file(tmp_path, what)
    with pytest.raises(CheckpointError, match=message) as e:
        load_pretrained(str(tmp_path / "hf"), weights=path)
    assert "\n" not in str(e.value)


def test_a_path_that_is_not_a_model_folder_is_refused(tmp_path):
    with pytest.raises(CheckpointError, match="not a folder"):
        load_pretrained(str(tmp_path / "nowhere"))
    with pytest.raises(CheckpointError, match="no config.json"):
        load_pretrained(str(tmp_path))


def test_the_gpu_benchmark_runs_its_code_paths_on_cpu(tmp_path, monkeypatch):
    """bench/bench_qwen3.py cannot run here at its size (no GPU); its tiny smoke run must."""
    monkeypatch.syspath_prepend(os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "bench"))
    import bench_qwen3
    bench_qwen3.main(argparse.Namespace(cpu_smoke=True, new_tokens=8, report=str(tmp_path / "report.txt")))
    table = (tmp_path / "report.txt").read_text()
    assert table.count("| sample |") == 2 and table.count("| grpo step") == 3 and "OOM" not in table, table
