"""Log-prob of the chosen token and entropy straight from hidden states and the LM-head
weight, without ever holding all (N, V) logits at once.

    from kernels import linear_logprobs_and_entropy
    logp, entropy = linear_logprobs_and_entropy(hidden, lm_head.weight, targets, temperature)

What it teaches. The policy-gradient loss only needs log p(target) and the entropy H per
token, and both come from the online-softmax statistics (m, d, s) of the logits row
z = h W^T / T (kernels/logprobs.py derives them). So the logits can be produced a chunk
at a time and thrown away, as in Cut Cross-Entropy and Liger's fused linear
cross-entropy. Backward recomputes each chunk's logits (one extra matmul instead of
storing N V numbers) and turns the chunk's d z into
    grad_hidden = d z @ W        (N, d)
    grad_weight = d z^T @ hidden (V, d)

Two ways to chunk, picked per device (override with chunk_over="rows" | "vocab"):
  * "rows" (default on CUDA): R rows at a time (R = ROW_CHUNK_ELEMENTS / V, ~3.5k rows
    at V = 151,936), h_chunk @ W^T -> an (R, V) logits chunk -> the logprobs kernels,
    backward in place in that chunk, grad_weight accumulated in fp32. Each logits chunk is
    written once and read twice by kernels that stream it at memory bandwidth, and the
    matmuls stay large.
  * "vocab" (default elsewhere): all rows, C vocabulary columns at a time, merging the
    chunks' (m, d, s) with kernels.logprobs.merge_stats: plain torch ops, C sized from a memory
    budget and measured on CPU (bench/bench_linear.py). On a GPU (N = 16384: C = 1024)
    it would make ~150 passes of small elementwise ops over (N, C) buffers larger than
    L2, each a trip to memory: that is why CUDA chunks over rows.

Under autocast the logits are computed in autocast's dtype in forward and, explicitly,
in that same dtype in backward (which autocast does not cover), so that backward's
recomputed p matches the statistics forward saved.

Neither path fuses the matmul with the softmax (a single Triton kernel could keep each
tile on chip); that is the next step, not taken here.

Memory. The materialised path holds the (N, V) logits, their fp32 copy, log-softmax and
their gradients: several N V buffers (4096 x 32768 fp32 is 512 MiB each). Here the extra
memory is one chunk (R V or N C elements) plus grad_hidden (N, d); grad_weight (V, d) is
the size of the weight, which any path must produce (fp32 on the rows path, for the sum
over row chunks). Cost: 3 matmuls of 2 N d V flops, plus the recomputed one.
"""
import torch

from .logprobs import (LOG2E, check_targets, finish_stats, logprobs_entropy_backward,
                       logprobs_entropy_forward, merge_stats, online_stats,
                       reference_logprobs_and_entropy, softmax_grad_)

# Elements of one (N, C) chunk on the vocab path: C = VOCAB_CHUNK_ELEMENTS / N (at least
# 256). 2**24 is C = 4096 at N = 4096; bench/bench_linear.py explains the choice.
VOCAB_CHUNK_ELEMENTS = 2**24
# Elements of one (R, V) logits chunk on the rows path: 1 GiB in bf16. Unmeasured guess.
ROW_CHUNK_ELEMENTS = 2**29


def _upcast(x):
    """fp32 at least (fp64 inputs stay fp64, so the tests can use gradcheck)."""
    return x.to(torch.promote_types(x.dtype, torch.float32))


# ------------------------------------------------------------------ reference
def linear_logprobs_and_entropy_reference(hidden, weight, targets, temperature=1.0):
    """Materialises the logits. hidden (N, d), weight (V, d), targets (N,) -> (N,), (N,)."""
    return reference_logprobs_and_entropy(_upcast(hidden @ weight.t()), targets, temperature)


# ------------------------------------------------------------------ vocab chunks
def _chunk_x(hidden, w_chunk, temperature):
    """hidden (N, d), w_chunk (C, d) -> x = log2(e) z / T, (N, C), fp32 (fp64 for fp64)."""
    z = hidden @ w_chunk.t()                        # (N, C), in the input dtype like the reference
    return _upcast(z).mul_(LOG2E / temperature)     # a fresh buffer: finite, safe to overwrite


def _target_in_chunk(targets, v0, width):
    """Column of each row's target inside chunk [v0, v0 + width), clamped, and whether it is there."""
    local = targets - v0                            # (N,)
    inside = (local >= 0) & (local < width)         # (N,)
    return local.clamp(0, width - 1).unsqueeze(1), inside  # (N, 1), (N,)


def _vocab_forward(hidden, weight, targets, temperature, chunk):
    """One pass over vocabulary chunks -> logp, entropy, stats ((2, N): m, log2 d)."""
    stats, x_t = None, None
    for v0 in range(0, weight.shape[0], chunk):
        x = _chunk_x(hidden, weight[v0:v0 + chunk], temperature)        # (N, C)
        col, inside = _target_in_chunk(targets, v0, x.shape[1])
        xt_c = x.gather(1, col).squeeze(1)                              # (N,)
        x_t = xt_c if x_t is None else torch.where(inside, xt_c, x_t)
        chunk_stats = online_stats(x)                                   # x is overwritten here
        stats = chunk_stats if stats is None else merge_stats(stats, chunk_stats)
    m, d, s = stats
    logp, entropy, log2_d = finish_stats(m, d, s, x_t)
    return logp, entropy, torch.stack([m, log2_d])


def _vocab_backward(hidden, weight, targets, temperature, chunk, stats, entropy, g_logp, g_H,
                    want_hidden, want_weight):
    """Recompute each chunk's logits -> grad_hidden (N, d), grad_weight (V, d) (or None)."""
    acc = dict(dtype=stats.dtype, device=hidden.device)
    grad_hidden = torch.zeros(hidden.shape, **acc) if want_hidden else None  # (N, d) fp32 sum over chunks
    grad_weight = torch.empty_like(weight) if want_weight else None          # (V, d)
    g_logp, g_H = g_logp / temperature, g_H / temperature              # chain rule: x = z / T
    for v0 in range(0, weight.shape[0], chunk):
        w_chunk = weight[v0:v0 + chunk]                                 # (C, d)
        dz = softmax_grad_(_chunk_x(hidden, w_chunk, temperature), *stats, entropy, g_logp, g_H)
        col, inside = _target_in_chunk(targets, v0, dz.shape[1])
        dz.scatter_add_(1, col, torch.where(inside, g_logp, 0.0).unsqueeze(1))  # + g_logp onehot
        dz = dz.to(hidden.dtype)                                        # (N, C) d loss / d z
        if want_hidden:
            grad_hidden += dz @ w_chunk                                 # (N, d)
        if want_weight:
            torch.mm(dz.t(), hidden, out=grad_weight[v0:v0 + chunk])    # (C, d)
    return grad_hidden, grad_weight


# ------------------------------------------------------------------ row chunks
def _rows_forward(hidden, weight, targets, temperature, rows):
    """Row chunks through the logprobs kernels -> logp, entropy (N,), stats (2, N), fp32."""
    N = hidden.shape[0]
    logp, entropy = torch.empty(N, device=hidden.device), torch.empty(N, device=hidden.device)
    stats = torch.empty(2, N, device=hidden.device)
    for r in range(0, N, rows):
        sl = slice(r, r + rows)
        logits = hidden[sl] @ weight.t()                                # (R, V)
        logprobs_entropy_forward(logits, targets[sl], temperature,
                                 out=(logp[sl], entropy[sl], stats[:, sl]))
    return logp, entropy, stats


def _rows_backward(hidden, weight, targets, temperature, rows, stats, entropy, g_logp, g_H,
                   want_hidden, want_weight):
    grad_hidden = torch.empty_like(hidden) if want_hidden else None                      # (N, d)
    grad_weight = torch.zeros(weight.shape, device=weight.device, dtype=torch.float32) \
        if want_weight else None                                        # (V, d) fp32 sum over chunks
    for r in range(0, hidden.shape[0], rows):
        sl = slice(r, r + rows)
        logits = hidden[sl] @ weight.t()                                # (R, V) recomputed
        dz = logprobs_entropy_backward(logits, targets[sl], stats[:, sl], entropy[sl],
                                       g_logp[sl], g_H[sl], temperature, out=logits)  # in place
        if want_hidden:
            torch.mm(dz, weight, out=grad_hidden[sl])                   # (R, d)
        if want_weight:
            grad_weight += dz.t() @ hidden[sl]                          # (V, d)
    return grad_hidden, grad_weight


# ------------------------------------------------------------------ autograd
class _LinearLogprobsEntropy(torch.autograd.Function):
    @staticmethod
    def forward(ctx, hidden, weight, targets, temperature, chunk_over, chunk):
        # Under autocast (train.py on CUDA) the logits come out in autocast's dtype, but
        # backward runs without autocast: fix the matmul dtype here and use it in both, so
        # that backward recomputes the very logits whose statistics forward saved.
        dev = hidden.device.type
        ctx.mm_dtype = torch.get_autocast_dtype(dev) if torch.is_autocast_enabled(dev) else hidden.dtype
        fwd = _rows_forward if chunk_over == "rows" else _vocab_forward
        with torch.autocast(dev, enabled=False):
            logp, entropy, stats = fwd(hidden.to(ctx.mm_dtype), weight.to(ctx.mm_dtype), targets,
                                       temperature, chunk)
        ctx.save_for_backward(hidden, weight, targets, stats, entropy)
        ctx.args = temperature, chunk_over, chunk
        return logp, entropy

    @staticmethod
    def backward(ctx, g_logp, g_H):
        hidden, weight, targets, stats, entropy = ctx.saved_tensors
        temperature, chunk_over, chunk = ctx.args
        bwd = _rows_backward if chunk_over == "rows" else _vocab_backward
        g_logp, g_H = g_logp.to(stats.dtype).contiguous(), g_H.to(stats.dtype).contiguous()
        grad_hidden, grad_weight = bwd(hidden.to(ctx.mm_dtype), weight.to(ctx.mm_dtype), targets,
                                       temperature, chunk, stats, entropy, g_logp, g_H,
                                       *ctx.needs_input_grad[:2])
        return (None if grad_hidden is None else grad_hidden.to(hidden.dtype),
                None if grad_weight is None else grad_weight.to(weight.dtype), None, None, None, None)


# ------------------------------------------------------------------ dispatch
def linear_logprobs_and_entropy(hidden, weight, targets, temperature=1.0, *, chunk_over=None,
                                chunk_size=None):
    """hidden (..., d), weight (V, d), targets (...) -> logp (...), entropy (...), fp32
    (fp64 for fp64 inputs on the vocab path).

    Same values as `token_logprobs_and_entropy(hidden @ weight.T, targets, temperature)`,
    differentiable w.r.t. hidden and weight, but the (N, V) logits never exist at once.
    chunk_over: "rows" (default on CUDA) or "vocab" (default elsewhere), see the top.
    chunk_size: rows (or vocabulary columns) per chunk; default from the budgets above.
    """
    assert hidden.dtype == weight.dtype, "hidden and weight must share a dtype"
    assert hidden.shape[-1] == weight.shape[1]
    lead, (V, d) = targets.shape, weight.shape
    hidden2, targets2 = hidden.reshape(-1, d), targets.reshape(-1)      # (N, d), (N,)
    N = hidden2.shape[0]
    check_targets(targets2, V)
    chunk_over = chunk_over or ("rows" if hidden.is_cuda else "vocab")
    if chunk_over == "rows":
        chunk = chunk_size or max(1, ROW_CHUNK_ELEMENTS // V)
    elif chunk_over == "vocab":
        chunk = min(chunk_size or max(256, VOCAB_CHUNK_ELEMENTS // max(N, 1)), V)
    else:
        raise ValueError(f"chunk_over={chunk_over!r}; expected 'rows' or 'vocab'")
    logp, entropy = _LinearLogprobsEntropy.apply(hidden2, weight, targets2, float(temperature),
                                                 chunk_over, chunk)
    return logp.view(lead), entropy.view(lead)
