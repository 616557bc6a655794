"""Decoding, shared by both models: the KV cache, the attention mask, and batched sampling.

    from decoding import generate
    out = generate(model, prompts, max_new_tokens=40, eos_id=enc.eot_token, temperature=1.0)
    python bench/bench_sampling.py     # sampling speed, with the cache and without

The small GPT (model.py) and the book's Qwen3 (book/qwen3.py) both import this file, and
`generate` runs either: it needs only their common interface, `forward(idx, mask, cache,
hidden, index)`, `new_cache(B, L)` (one `KVCache` per layer), `lm_head_weight`,
`cfg.vocab_size` and `cfg.max_seq_len`.
- `KVCache`: one layer's keys and values over the whole budget (gpt-fast's), so attention
  over a cache reads exactly like attention without one, in shapes that never change.
- `attention_mask`: causal, and blind to padding on either side of a row.
- `generate` prefills prompts of different lengths (left-padded, the padding masked out
  of attention and positions; the G answers of a prompt share one prefill), then decodes
  one token per step from the KV cache, sampling with temperature / top-k / top-p
  (`filter_logits`, `sample`) from a `torch.Generator` (or greedily), stops each row on
  its own at `<|endoftext|>` (or at any of several stop ids), and records the log-prob of
  each sampled token and the entropy of the distribution it was drawn from (`Sampled`):
  the sampler's side of the sampler-learner gap. `use_cache=False` is the reference: the
  whole sequence again at every token.
- `decode_step`: one token per row in fixed shapes (gpt-fast's design): the cache and the
  mask cover the whole budget, the cache position is a tensor, and nothing in it reads a
  value on the host, so torch.compile compiles it once (`compile=True`) and a CUDA graph
  can record it once and replay it for every token (`cuda_graph=True`). Finished rows are
  looked for every `check_every` tokens, and the sampler draws without a host sync.
- `decode_attention`: a decode step's attention in plain matmuls, which on the CPU cost
  about half of PyTorch's fused kernel for so few query rows.

Where this departs from the book (reasoning_from_scratch's generation loop): the book
samples one prompt at a time with one position counter; here the G answers of many
prompts are one ragged, left-padded batch, each row with its own positions and its own stop.
"""
import warnings
from typing import NamedTuple

import torch


class KVCache:
    """One layer's keys and values for B rows of the whole budget of L positions (gpt-fast's KVCache).

    `update` writes the keys/values of T new positions and returns the whole cache: its
    shape never changes, and the positions not written yet are masked out of attention
    (they are not real tokens in the key mask), so attention over a cache reads exactly
    like attention without one, and a decode step has the same shapes at every token.
    """

    def __init__(self, B, n_head, L, head_dim, like):
        self.k = like.new_zeros(B, n_head, L, head_dim)  # (B, H, L, hd)
        self.v = like.new_zeros(B, n_head, L, head_dim)

    def update(self, index, k, v):
        """k, v (B, H, T, hd) at cache positions index (T,) -> all keys, values (B, H, L, hd)."""
        # index is a tensor, not a Python int: a compiled step reads it as data, so one
        # compiled step (one CUDA graph) serves every position
        self.k.index_copy_(2, index, k.to(self.k.dtype))
        self.v.index_copy_(2, index, v.to(self.v.dtype))
        # the cache is fp32; under bf16 autocast k and v are not
        return self.k.to(k.dtype), self.v.to(v.dtype)

    def select_rows(self, rows):
        """Keep the rows (B',) of the cache, in that order; a row may repeat."""
        self.k, self.v = self.k.index_select(0, rows), self.v.index_select(0, rows)  # 10x x[rows] on the CPU


def attention_mask(key_mask, index):
    """(B, 1, T, S) bool: the query at position index[i] may see key j <= index[i] that is a real token.

    key_mask (B, S) covers every position (with a cache, the whole budget: False where
    nothing is written yet); index (T,) says where among the S the T queries sit.
    A query always sees itself, so a padding position has one key and no NaN rows.
    """
    k = torch.arange(key_mask.shape[1], device=key_mask.device)[None, :]  # (1, S)
    q = index[:, None]  # (T, 1)
    allowed = (k <= q) & key_mask[:, None, :] | (k == q)  # (B, T, S)
    return allowed[:, None]


def decode_attention(q, k, v, allowed):
    """Attention of a decode step's few query rows q (B, H, Tq, hd) over the whole cache
    k, v (B, H, L, hd) under allowed (B, 1, Tq, L) -> (B, H, Tq, hd).

    F.scaled_dot_product_attention's result (up to float rounding) in plain matmuls: for a
    handful of query rows PyTorch's fused CPU kernel costs about twice as much (it runs
    one small matrix product per row and head; docs/performance.md).
    """
    scores = (q @ k.transpose(-1, -2)) * q.shape[-1] ** -0.5  # (B, H, Tq, L)
    scores = torch.where(allowed, scores, float("-inf"))  # keys not written yet, padding, the future
    return scores.float().softmax(-1).to(v.dtype) @ v  # softmax in fp32, as the fused kernels do


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
             generator=None, greedy=False, use_cache=True, keep_support=False, compile=False, cuda_graph=False,
             check_every=None):
    """Sample completions for a batch of prompts (lists of token ids) of any lengths -> Sampled.

    eos_id: the id that ends a row, or a collection of them (the reasoning Qwen3 ends a
    turn with <|im_end|> or <|endoftext|>); the first one pads finished rows. A stop id
    inside a prompt ends nothing: only sampled tokens do.
    use_cache=False recomputes the whole sequence each step (the reference path).
    keep_support=True also keeps the support (DeepSeek-V3.2's kept sampling mask).
    compile=True: torch.compile the decode step (on the CPU its warm-up of ~10 s pays only
    over thousands of steps; docs/performance.md). cuda_graph=True (CUDA only): record the
    decode step once as a CUDA graph and replay it for every token. Both are off by default:
    on a GPU neither has been measured yet (bench/gpu_check.sh measures them).
    check_every: look for the end of every row every this many tokens (default: every
    token on the CPU, where the look is free; every 8 on a GPU, where it waits for the GPU).
    """
    device = next(model.parameters()).device
    B, P = len(prompts), max(len(p) for p in prompts)
    L = P + max_new_tokens
    stop_ids = torch.tensor([eos_id] if isinstance(eos_id, int) else list(eos_id), device=device)  # (S,)
    eos_id = int(stop_ids[0])
    if L > model.cfg.max_seq_len:
        raise ValueError(f"prompt ({P}) + max_new_tokens ({max_new_tokens}) exceeds max_seq_len {model.cfg.max_seq_len}")
    if cuda_graph and device.type != "cuda":
        raise ValueError(f"cuda_graph=True needs a CUDA device; the model is on {device.type}")
    check_every = check_every or (1 if device.type == "cpu" else 8)
    tokens = torch.full((B, L), eos_id, dtype=torch.long, device=device)  # (B, L)
    mask = torch.zeros(B, L, dtype=torch.bool, device=device)
    sampler_logp, sampler_entropy = torch.zeros(B, L, device=device), torch.zeros(B, L, device=device)
    support = torch.zeros(B, L, model.cfg.vocab_size, dtype=torch.bool, device=device) if keep_support else None
    for i, p in enumerate(prompts):  # left padding
        tokens[i, P - len(p):P] = torch.tensor(p, device=device)
        mask[i, P - len(p):P] = True
    done = torch.zeros(B, dtype=torch.bool, device=device)
    positions = torch.arange(L, device=device)  # (L,) cache positions; positions[t - 1:t] is a (1,) view, no new tensor
    # inference_mode: no_grad that also skips autograd's version counters and view tracking,
    # the same numbers ~13% faster at 64 rows (a decode step is many tiny ops). The tensors it
    # creates can never enter autograd, so the outputs are written into the buffers above,
    # made before it: training later saves `tokens` for its backward.
    with torch.inference_mode():
        if use_cache:
            cache, first_logits = prefill(model, tokens, mask, P, positions)
        step = decode_step
        if use_cache and (compile or cuda_graph) and L > P + 1:
            step = faster_decode_step(model, tokens[:, P:P + 1], mask, cache, positions[P:P + 1], compile, cuda_graph)
        for t in range(P, L):  # t: the position of the token sampled now
            if not use_cache:  # the reference: the whole sequence again
                logits = next_logits(model, model(tokens[:, :t], mask[:, :t], hidden=True))
            elif t == P:
                logits = first_logits
            else:  # the last token, at cache position t - 1, in shapes that never change
                logits = step(model, tokens[:, t - 1:t], mask, cache, positions[t - 1:t])
            nxt, logp, ent = sample(logits.float(), temperature, top_k, top_p, generator, greedy, support, t)  # (B,)
            tokens[:, t] = torch.where(done, eos_id, nxt)
            sampler_logp[:, t] = torch.where(done, 0.0, logp)
            sampler_entropy[:, t] = torch.where(done, 0.0, ent)
            mask[:, t] = ~done
            done |= torch.isin(nxt, stop_ids)
            if (t - P + 1) % check_every == 0 and done.all():
                break
        # every column up to the last one with a live row (later ones, run between two
        # looks, hold padding only): the same length as looking after every token
        end = P + int(mask[:, P:].any(0).sum())
    return Sampled(tokens[:, :end], mask[:, :end], sampler_logp[:, :end], sampler_entropy[:, :end],
                   support[:, :end] if keep_support else None)


def prefill(model, tokens, mask, P, positions):
    """The prompts tokens[:, :P] (left-padded, mask (B, L)) into a new cache of L positions
    -> (the cache, the first new token's logits (B, V)).

    The G answers of a prompt share one prefill: each distinct prompt runs once, and its
    keys and values are then copied to every row that holds it (a GRPO batch has G copies
    of each prompt: G times less prefill work).
    """
    ids = {}  # a distinct (padded) prompt -> its number
    which = [ids.setdefault(tuple(row), len(ids)) for row in tokens[:, :P].tolist()]  # (B,) each row's prompt
    firsts = [which.index(u) for u in range(len(ids))]  # (U,) the first row holding each
    cache = model.new_cache(len(firsts), mask.shape[1])
    h = model(tokens[firsts, :P], mask[firsts], cache, hidden=True, index=positions[:P])  # (U, P, d)
    logits = next_logits(model, h)  # (U, V)
    if len(firsts) < len(which):
        which = torch.tensor(which, device=tokens.device)  # (B,)
        for layer in cache:
            layer.select_rows(which)
        logits = logits.index_select(0, which)  # (B, V)
    return cache, logits


def next_logits(model, h):
    """Final hidden states (B, T, d) -> the next token's logits (B, V), from the last position only:
    at Qwen's 151,936 tokens the logits of a whole prefill would be B * P * V numbers (GBs)."""
    return h[:, -1] @ model.lm_head_weight.t()


def decode_step(model, token, mask, cache, index):
    """One decode step: token (B, 1) at cache position index (1,) -> next-token logits (B, V).

    gpt-fast's fixed-shape step: mask (B, L) and the cache cover the whole budget, so every
    shape is the same at every token, and nothing in it reads a value on the host (no
    .item(), no shape that depends on data). torch.compile compiles it once (fullgraph),
    and on a GPU CUDA graphs replay it: one launch per token instead of one per op.
    """
    return next_logits(model, model(token, mask, cache, hidden=True, index=index))


FAILED = []  # "compile" / "CUDA graph" once it failed in this process: warned once, then eager


def faster_decode_step(model, token, mask, cache, index, compile, cuda_graph):
    """decode_step compiled by torch.compile (fullgraph: one graph, no break) and / or
    captured as a CUDA graph, as asked; or decode_step itself, with one warning line, where
    that fails on this platform (no C++ compiler, no Triton): the run goes on either way.

    Each is tried here, in a warm-up step with the first decode step's inputs, token (B, 1)
    and index (1,), before that step has its token: what the warm-up writes at that cache
    position, the first real step overwrites.
    """
    step = decode_step
    if cuda_graph:  # the graph's own inputs, into which each replay copies the step's
        token, index = token.clone(), index.clone()
    if compile and "compile" not in FAILED:
        try:
            compiled = torch.compile(decode_step, fullgraph=True)
            compiled(model, token, mask, cache, index)  # compiles now
            step = compiled
        except Exception as e:  # noqa: BLE001 - whatever the compiler raises, eager still runs
            give_up("compile", e)
    if cuda_graph and "CUDA graph" not in FAILED:
        try:
            step = captured(step, model, token, mask, cache, index)
        except Exception as e:  # noqa: BLE001
            give_up("CUDA graph", e)
    return step


def captured(step, model, token, mask, cache, index):
    """step recorded once as a CUDA graph (torch.cuda.graphs) -> a function with decode_step's
    arguments that copies the token and the position into the recorded inputs and replays
    it: one launch per token instead of one per op (hundreds for Qwen3's 28 layers). The
    mask and the cache are fixed buffers of the call already, updated in place."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side), autocast_without_cache():
        step(model, token, mask, cache, index)  # a warm-up off the capture stream, as capture asks
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph), autocast_without_cache():
        logits = step(model, token, mask, cache, index)  # (B, V): recorded, not run

    def replay(model_, new_token, mask_, cache_, new_index):
        token.copy_(new_token)
        index.copy_(new_index)
        graph.replay()
        return logits  # the same buffer at every replay: read it before the next
    return replay


def autocast_without_cache():
    """The caller's CUDA autocast (train.py's bf16), without its cache of cast weights,
    which a CUDA graph must not capture."""
    return torch.autocast("cuda", dtype=torch.get_autocast_dtype("cuda"), enabled=torch.is_autocast_enabled("cuda"),
                          cache_enabled=False)


def give_up(kind, error):
    FAILED.append(kind)
    while error.__cause__ is not None:  # the compiler's own error, not the wrapper's "backend raised"
        error = error.__cause__
    first = (str(error).strip().splitlines() or [""])[0][:200]
    warnings.warn(f"decoding: {kind} of the decode step failed here, decoding eagerly ({type(error).__name__}: {first})",
                  stacklevel=3)


def sample(logits, temperature, top_k, top_p, generator, greedy, support=None, t=0):
    """logits (B, V) -> next token ids (B,), their log-probs and the entropy of the
    distribution they were drawn from (B,); the kept support goes to support[:, t] if given."""
    if greedy:
        zeros = logits.new_zeros(logits.shape[0])
        return logits.argmax(-1), zeros, zeros
    logits = logits if temperature == 1 else logits / temperature  # (at T 1 the same numbers, one op less)
    logp = filter_logits(logits, top_k, top_p).log_softmax(-1)  # (B, V)
    if support is not None:
        support[:, t] = logp > float("-inf")
    p = logp.exp()
    entropy = -(p * logp.clamp(min=torch.finfo(logp.dtype).min)).sum(-1)  # filtered-out tokens: p = 0, no NaN
    # torch.multinomial's own draw for one sample (the Gumbel-max trick with exp taken:
    # argmax p / q, q ~ Exp(1)), written out: the same tokens for the same generator, but
    # without the check of p that multinomial reads on the host (a GPU sync per token)
    nxt = (p / exponential_noise(p, generator)).argmax(-1, keepdim=True)  # (B, 1)
    return nxt.squeeze(1), logp.gather(1, nxt).squeeze(1), entropy


def exponential_noise(p, generator):
    """Exp(1) noise of p's shape: q = -log(1 - u), u uniform. On the CPU u is drawn in
    float64, which gives exactly the numbers of exponential_ (multinomial's noise) in less
    than half its time (exponential_ transforms one element at a time); elsewhere
    exponential_ itself."""
    if p.device.type == "cpu":
        return torch.rand(p.shape, generator=generator, dtype=torch.float64).neg_().log1p_().neg_().to(p.dtype)
    return torch.empty_like(p).exponential_(1, generator=generator)
