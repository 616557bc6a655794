"""Log-prob of the chosen token and entropy straight from hidden states and the LM-head
weight, without ever holding the (N, V) logits.

What it teaches. The policy-gradient loss only needs two numbers per token: log p(target)
and the entropy H of the next-token distribution. Both are functions of three running
statistics of the logits row z = h W^T / T, which can be gathered one vocabulary chunk
at a time (the "online softmax" of FlashAttention / Cut Cross-Entropy / Liger's fused
linear cross-entropy):

    m = max_j z_j                   running max, keeps exp() from overflowing
    s = sum_j exp(z_j - m)          running sum of exponentials
    a = sum_j exp(z_j - m)(z_j - m) running "sum of p*z", for the entropy

    log-sum-exp = m + log s,  log p(t) = z_t - lse,  H = -sum p log p = log s - a / s

When a new chunk raises the max from m to m', the old sums are rescaled by exp(m - m'):
    s <- exp(m - m') s
    a <- exp(m - m') (a + (m - m') s)          (each old term's (z - m) grows by m - m')

Backward recomputes each chunk's logits (one extra matmul instead of storing N*V numbers)
and uses the saved lse and H. With p = softmax(z), the gradients of the two outputs are

    d logp / d z_j = onehot_j - p_j
    d H    / d z_j = -p_j (log p_j + H)

so dz = dlogp (onehot - p) - dH p (log p + H), times 1/T for the temperature, and then
    grad_hidden += dz @ W_chunk     (N, d)
    grad_weight[chunk] = dz^T @ hidden   (C, d)

Memory. The materialised path holds the (N, V) logits, their fp32 copy, log-softmax and
their gradients: several N*V buffers (4096 x 32768 fp32 is 512 MiB each). Here the extra
memory is O(N*d) for grad_hidden plus O(N*C) for two or three chunk buffers; grad_weight
(V, d) is the same size as the weight and any path must produce it. Cost: forward is one
matmul (2NdV flops), backward two plus the recomputed one, so 4 matmuls instead of 3.
The materialised path pays instead for ~10 passes over N*V bytes in main memory.

Where this departs from the fused GPU kernels. Those fuse the matmul and the online
softmax in one Triton kernel so a chunk of logits never leaves on-chip memory. Here each
chunk is a plain torch matmul followed by elementwise ops, which runs on CPU and CUDA
alike; on CUDA this has NOT been measured against a fused Triton kernel (no GPU was
available when it was written), so the GPU choice is open. Chunking is over the
vocabulary only: rows are kept whole so each matmul stays large, and the chunk width
C adapts to N (`_chunk_width`) so N*C stays near CHUNK_ELEMENTS whatever N is. Chunking
the rows as well would keep tiles cache-sized once C hits its floor of 256 columns
(N > 65536 on CPU); a CPU probe suggests 1024 x 1024 tiles would also be ~20% faster
than whole-row chunks, not done here.
"""
import torch
import torch.nn.functional as F

# Elements per (N, C) chunk buffer, i.e. C = CHUNK_ELEMENTS / N columns per chunk.
# CPU: measured with bench/bench_linear.py at N=4096, d=256, V=32768 on a shared 2-core
# machine. With 1 thread C=512 was fastest (forward+backward 0.52x the materialised time,
# C=4096 0.74x): its 8 MiB buffers stay in cache. With 2 threads on the busy machine,
# C=512's forward alone was 1.9x slower than materialised (each of its ~450 small
# parallel ops waits for a descheduled thread) while C=4096 stayed at 0.78x. So the
# default is the robust C=4096 there (64 MiB buffers, 7% of the materialised peak).
# CUDA: a guess, NOT measured (no GPU was lent): wider chunks keep the matmuls efficient.
CHUNK_ELEMENTS = {"cpu": 2**24, "cuda": 2**25}


def _upcast(x):
    """Statistics in fp32 at least (fp64 inputs stay fp64, so the tests can use gradcheck)."""
    return x.to(torch.promote_types(x.dtype, torch.float32))


# ------------------------------------------------------------------ reference
def linear_logprobs_and_entropy_reference(hidden, weight, targets, temperature=1.0):
    """Materialises the logits. hidden (N, d), weight (V, d), targets (N,) -> (N,), (N,)."""
    logits = _upcast(hidden @ weight.t()) / temperature  # (N, V)
    logp_all = F.log_softmax(logits, dim=-1)  # (N, V)
    logp = logp_all.gather(-1, targets.unsqueeze(-1)).squeeze(-1)  # (N,)
    entropy = -(logp_all.exp() * logp_all).sum(-1)  # (N,)
    return logp, entropy


# ------------------------------------------------------------------ chunked path
def _chunk_width(n_rows, vocab, chunk_size, device):
    if chunk_size is None:
        budget = CHUNK_ELEMENTS.get(device.type, CHUNK_ELEMENTS["cpu"])
        chunk_size = max(256, budget // max(n_rows, 1))
    return min(chunk_size, vocab)


def _chunk_logits(hidden, w_chunk, temperature):
    """hidden (N, d), w_chunk (C, d) -> fp32 logits (N, C), already divided by T."""
    z = _upcast(hidden @ w_chunk.t())  # (N, C); matmul in the input dtype, like the reference
    if temperature != 1.0:
        z.mul_(1.0 / temperature)
    return z


def _target_in_chunk(targets, v0, width):
    """Column of each row's target inside chunk [v0, v0 + width), clamped, and whether it is there."""
    local = targets - v0  # (N,)
    inside = (local >= 0) & (local < width)  # (N,)
    return local.clamp(0, width - 1).unsqueeze(1), inside  # (N, 1), (N,)


def _chunk_stats(hidden, w_chunk, targets, v0, temperature):
    """Statistics of one chunk of logits: max, sum exp(z - max), sum exp(z - max)(z - max),
    each (N,), and the target logit (0 where the target is elsewhere) with a mask (N,)."""
    z = _chunk_logits(hidden, w_chunk, temperature)  # (N, C)
    col, inside = _target_in_chunk(targets, v0, z.shape[1])
    z_t = z.gather(1, col).squeeze(1)  # (N,)
    m = z.amax(1)  # (N,)
    u = z.sub_(m.unsqueeze(1))  # (N, C) z - m, in place
    e = u.exp()  # (N, C)
    s = e.sum(1)
    a = e.mul_(u).sum(1)
    return (m, s, a), (z_t, inside)  # the (N, C) buffers die here, before the next chunk


def _merge(x, y):
    """Online log-sum-exp: combine the (max, sum, sum*shifted-z) of two disjoint vocab sets."""
    (m1, s1, a1), (m2, s2, a2) = x, y
    m = torch.maximum(m1, m2)
    d1, d2 = m1 - m, m2 - m  # (N,) <= 0: how far each old max lies below the new one
    e1, e2 = d1.exp(), d2.exp()
    # every term's (z - m_old) becomes (z - m_old) + (m_old - m): a grows by d * s
    return m, e1 * s1 + e2 * s2, e1 * (a1 + d1 * s1) + e2 * (a2 + d2 * s2)


def _forward_stats(hidden, weight, targets, temperature, chunk):
    """One pass over vocabulary chunks -> lse (N,), entropy (N,), target logit (N,), all fp32."""
    stats, z_t = None, None
    for v0 in range(0, weight.shape[0], chunk):
        chunk_stats, (zt_c, inside) = _chunk_stats(hidden, weight[v0:v0 + chunk], targets, v0, temperature)
        stats = chunk_stats if stats is None else _merge(stats, chunk_stats)
        z_t = zt_c if z_t is None else torch.where(inside, zt_c, z_t)
    m, s, a = stats
    lse = m + s.log()  # log-sum-exp
    entropy = s.log() - a / s  # H = lse - E_p[z] = log s - E_p[z - m]
    return lse, entropy, z_t


def _backward_chunk(hidden, w_chunk, targets, v0, temperature, lse, entropy, dlogp, dent,
                    grad_hidden, grad_w_chunk):
    """Recompute one chunk's logits; add its part of grad_hidden (N, d), fill grad_w_chunk (C, d)."""
    logp = _chunk_logits(hidden, w_chunk, temperature).sub_(lse.unsqueeze(1))  # (N, C) log p
    p = logp.exp()  # (N, C)
    # dz = -p * (dlogp + dH (log p + H)), built in the logp buffer
    if dent is not None:
        dz = logp.add_(entropy.unsqueeze(1)).mul_(dent.unsqueeze(1))
        if dlogp is not None:
            dz.add_(dlogp.unsqueeze(1))
        dz.mul_(p).neg_()
    else:
        dz = p.mul_(dlogp.unsqueeze(1)).neg_()
    if dlogp is not None:  # + dlogp * onehot(target)
        col, inside = _target_in_chunk(targets, v0, dz.shape[1])
        dz.scatter_add_(1, col, torch.where(inside, dlogp, 0.0).unsqueeze(1))
    if temperature != 1.0:
        dz.mul_(1.0 / temperature)  # z = hW^T / T
    dz = dz.to(hidden.dtype)
    if grad_hidden is not None:
        grad_hidden += dz @ w_chunk  # (N, d)
    if grad_w_chunk is not None:
        torch.mm(dz.t(), hidden, out=grad_w_chunk)  # (C, d)


def _backward_chunks(hidden, weight, targets, temperature, chunk, lse, entropy, dlogp, dent,
                     want_hidden=True, want_weight=True):
    """Loop of _backward_chunk over the vocabulary -> grad_hidden (N, d), grad_weight (V, d)."""
    acc = dict(dtype=lse.dtype, device=hidden.device)
    grad_hidden = torch.zeros(hidden.shape, **acc) if want_hidden else None  # (N, d) fp32 accumulator
    grad_weight = torch.empty_like(weight) if want_weight else None  # (V, d)
    for v0 in range(0, weight.shape[0], chunk):
        _backward_chunk(hidden, weight[v0:v0 + chunk], targets, v0, temperature, lse, entropy,
                        dlogp, dent, grad_hidden, None if grad_weight is None else grad_weight[v0:v0 + chunk])
    return None if grad_hidden is None else grad_hidden.to(hidden.dtype), grad_weight


class _LinearLogprobsEntropy(torch.autograd.Function):
    @staticmethod
    def forward(ctx, hidden, weight, targets, temperature, chunk):
        lse, entropy, z_t = _forward_stats(hidden, weight, targets, temperature, chunk)
        ctx.save_for_backward(hidden, weight, targets, lse, entropy)
        ctx.temperature, ctx.chunk = temperature, chunk
        ctx.set_materialize_grads(False)  # a None grad means "that output was not used"
        return z_t - lse, entropy

    @staticmethod
    def backward(ctx, dlogp, dent):
        hidden, weight, targets, lse, entropy = ctx.saved_tensors
        if dlogp is None and dent is None:
            return None, None, None, None, None
        dlogp = None if dlogp is None else dlogp.to(lse.dtype)
        dent = None if dent is None else dent.to(lse.dtype)
        grad_hidden, grad_weight = _backward_chunks(
            hidden, weight, targets, ctx.temperature, ctx.chunk, lse, entropy, dlogp, dent,
            want_hidden=ctx.needs_input_grad[0], want_weight=ctx.needs_input_grad[1])
        return grad_hidden, grad_weight, None, None, None


# ------------------------------------------------------------------ dispatch
def linear_logprobs_and_entropy(hidden, weight, targets, temperature=1.0, *, chunk_size=None):
    """hidden (..., d), weight (V, d), targets (...) -> logp (...), entropy (...), fp32 (fp64 for fp64).

    Same values as `token_logprobs_and_entropy(hidden @ weight.T, targets, temperature)`,
    differentiable w.r.t. hidden and weight, but the (N, V) logits never exist at once.
    chunk_size: vocabulary columns per chunk (default: CHUNK_ELEMENTS[device] / N, at least 256).
    On CPU and CUDA alike this is the chunked-matmul path (GPU speed unmeasured, see top).
    """
    assert hidden.dtype == weight.dtype, "hidden and weight must share a dtype"
    assert hidden.shape[-1] == weight.shape[1]
    lead = targets.shape
    hidden2 = hidden.reshape(-1, hidden.shape[-1])  # (N, d)
    targets2 = targets.reshape(-1)  # (N,)
    chunk = _chunk_width(hidden2.shape[0], weight.shape[0], chunk_size, hidden.device)
    logp, entropy = _LinearLogprobsEntropy.apply(hidden2, weight, targets2, float(temperature), chunk)
    return logp.view(lead), entropy.view(lead)
