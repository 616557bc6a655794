"""Log-prob of the chosen token and entropy, straight from the logits, in one pass.

GRPO needs two numbers per generated token: log pi(y_t | y_<t) of the token that was
sampled (for the ratio and the KL) and the entropy of the whole next-token distribution
(to log it, or to add an entropy bonus). The textbook way

    logp_all = log_softmax(logits / T)                  # (N, V) fp32
    logp     = logp_all.gather(-1, targets)             # (N,)
    entropy  = -(logp_all.exp() * logp_all).sum(-1)     # (N,)

materialises several fp32 (N, V) tensors and reads the logits many times; at Qwen3's
vocabulary (V = 151,936) that is the memory and time hog of a GRPO step. This file
teaches the fix, the same trick as flash-attention and Liger-Kernel: an *online softmax*.

Forward. Stream each row in blocks of the vocabulary, keeping three running numbers
(Milakov & Gimelshein, "Online normalizer calculation for softmax"):
    m = max_j x_j,   d = sum_j 2^(x_j - m),   s = sum_j 2^(x_j - m) (x_j - m)
with x = log2(e) logits / T: working in base 2 lets the hardware's exp2 do the
exponentials, and the log2(e) is folded into the 1/T scale, so it costs nothing.
When a block raises the max from m to m', both sums are rescaled by 2^(m - m'), and s
also shifts by d (m - m'). At the end, converting back to natural logs,
    log p_target = ln2 (x_target - m - log2 d),   entropy = ln2 (log2 d - s / d).
Keeping s relative to m (not sum 2^x x) keeps the entropy exact even at logits of 1e4,
where lse - E[x] would cancel catastrophically in fp32. The per-row (m, log2 d), called
`stats` below, is all the backward needs.

Backward. With p = softmax(logits / T), H the entropy and upstream gradients g_logp, g_H,
    d logp / d z_j = (onehot_j - p_j) / T,      d H / d z_j = -p_j (log p_j + H) / T
so, with log p_j = ln2 u_j and u_j = x_j - m - log2 d,
    d z_j = (g_logp onehot_j - p_j (g_logp + g_H H + g_H ln2 u_j)) / T.
The kernel re-reads the row once, recomputes p_j = 2^u_j and writes d z; nothing else of
size (N, V) exists. inplace_backward=True writes d z over the logits themselves.

-inf logits (banned tokens) are replaced by a finite -1e30 (in x, base-2 units), so
every difference stays finite without `where` guards around each exp: a banned token
gets p = 0, and a banned target gets logp = ln2 (-1e30 - m - log2 d), about -7e29
rather than -inf. A row whose logits are ALL -inf has no distribution; here it is a row
of equal logits: logp = -log V, entropy = log V, and the gradient of a uniform row.
That keeps one masked-out row from turning a whole batch's loss into NaN (the
reference gives NaN).

Bytes it must move (b = bytes per logit): forward reads N V b and writes 16 N (logp,
entropy, stats); backward reads N V b and writes N V b. bench/bench_logprobs.py measures
against that bar.

Paths, chosen per call by `_pick_backend`:
  * "triton"    - the kernels below; the default for CUDA tensors. Also runs on CPU
                  tensors when TRITON_INTERPRET=1 was set before triton was imported
                  (Triton decides at @triton.jit time), which is how tests check them here.
                  Triton is optional: without it (macOS, Windows) this path does not exist.
  * "torch"     - chunked PyTorch, the same math a few rows at a time, recomputing in
                  backward; never holds a full fp32 (N, V) tensor. Default on CPU.
  * "reference" - the plain textbook code above (materialises everything).
Force one with the environment variable KERNELS_BACKEND=triton|torch|reference (read
at each call; unset or "auto" picks as above).

Layout. Logits may be any (B, T, V) view whose vocabulary stride is 1, such as
logits[:, :-1] of the model's (B, L, V) output: the kernels take the batch and row
strides, so no (N, V) copy is made. Other layouts are copied once.

Extra public helpers (no autograd; kernels/linear_logprobs.py uses them):
  logprobs_entropy_forward(logits, targets, T)  -> logp, entropy, stats
  logprobs_entropy_backward(logits, targets, stats, entropy, g_logp, g_H, T) -> dlogits
  online_stats / merge_stats / finish_stats / softmax_grad_: the chunked path's steps.
Targets must lie in [0, V) (no ignore_index; mask the loss instead): checked on the host,
because an out-of-range target would silently read a neighbouring row's memory.
"""
import contextlib
import math
import os

import torch
import torch.nn.functional as F

try:
    import triton
    import triton.language as tl
except ImportError:  # no Triton wheel (macOS, Windows): the chunked PyTorch path remains
    triton = None

LOG2E, LN2 = math.log2(math.e), math.log(2.0)
NEG = -1e30  # stands in for -inf, in base-2 units of x = log2(e) logits / T


# ----------------------------------------------------------------------------- reference
def reference_logprobs_and_entropy(logits, targets, temperature=1.0):
    """Plain PyTorch. logits (..., V), targets (...) -> logp (...), entropy (...).

    Computes in fp32 (float64 stays float64, for tests). -inf logits have p = 0 and
    contribute 0 to the entropy (lim p log p = 0), hence the `where`.
    """
    x = logits.to(torch.promote_types(logits.dtype, torch.float32)) / temperature  # (..., V)
    logp_all = F.log_softmax(x, dim=-1)                                            # (..., V)
    logp = logp_all.gather(-1, targets.unsqueeze(-1)).squeeze(-1)                  # (...)
    p = logp_all.exp()                                                             # (..., V)
    # where before the product, so the gradient of the masked 0 * -inf is 0, not NaN
    entropy = -(p * torch.where(p > 0, logp_all, 0.0)).sum(-1)                     # (...)
    return logp, entropy


# ----------------------------------------------------------------------------- triton kernels
# Each program handles ROWS rows of one batch entry b (grid: row tiles x B) and streams
# their vocabulary in BLOCK_V-wide blocks. Output index of row r of batch b: b * T + r.
if triton is not None:
    _NEG = tl.constexpr(NEG)
    _LN2 = tl.constexpr(LN2)

    @triton.jit
    def _fwd_kernel(
        logits_ptr, targets_ptr, logp_ptr, entropy_ptr, m_ptr, log2d_ptr,  # pointers
        T, V, scale,                                    # sizes; scale = log2(e) / temperature
        stride_b, stride_t,                             # logits strides (vocabulary stride 1)
        ROWS: tl.constexpr, BLOCK_V: tl.constexpr,      # tile: ROWS rows x BLOCK_V vocab
    ):
        b = tl.program_id(1).to(tl.int64)
        rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)               # (ROWS,) in batch b
        row_ok = rows < T
        out = b * T + rows                                                # (ROWS,) int64
        row_ptr = logits_ptr + b * stride_b + rows.to(tl.int64) * stride_t  # int64: B T V > 2^31
        scale = tl.cast(scale, tl.float32)  # fp32 even if a caller's float arrives as fp64
        cols = tl.arange(0, BLOCK_V)

        m = tl.full((ROWS,), _NEG, tl.float32)   # running max
        d = tl.zeros((ROWS,), tl.float32)        # running sum 2^(x - m)
        s = tl.zeros((ROWS,), tl.float32)        # running sum 2^(x - m) (x - m)
        for start in range(0, V, BLOCK_V):
            c = start + cols                                              # (BLOCK_V,) int32
            x = tl.load(row_ptr[:, None] + c[None, :], mask=row_ok[:, None] & (c[None, :] < V),
                        other=float("-inf")).to(tl.float32) * scale       # (ROWS, BLOCK_V)
            # -inf -> NEG; columns past V go lower still (2 NEG), so they add exactly 0
            # even to an all -inf row, whose max is NEG
            x = tl.maximum(x, tl.where(c < V, _NEG, 2 * _NEG)[None, :])
            m_new = tl.maximum(m, tl.max(x, axis=1))
            alpha = tl.exp2(m - m_new)                                    # rescales old sums
            u = x - m_new[:, None]                                        # (ROWS, BLOCK_V) <= 0
            e = tl.exp2(u)
            s = alpha * (s + d * (m - m_new)) + tl.sum(e * u, axis=1)
            d = alpha * d + tl.sum(e, axis=1)
            m = m_new

        log2_d = tl.log2(d)
        t = tl.load(targets_ptr + out, mask=row_ok, other=0).to(tl.int32)
        x_t = tl.load(row_ptr + t, mask=row_ok, other=0.0).to(tl.float32) * scale
        x_t = tl.maximum(x_t, _NEG)
        tl.store(logp_ptr + out, ((x_t - m) - log2_d) * _LN2, mask=row_ok)
        tl.store(entropy_ptr + out, (log2_d - s / d) * _LN2, mask=row_ok)
        tl.store(m_ptr + out, m, mask=row_ok)
        tl.store(log2d_ptr + out, log2_d, mask=row_ok)

    @triton.jit
    def _bwd_kernel(
        logits_ptr, targets_ptr, m_ptr, log2d_ptr, entropy_ptr, glogp_ptr, gent_ptr,  # pointers
        dlogits_ptr,
        T, V, scale,                                    # sizes; scale = log2(e) / temperature
        stride_b, stride_t, dstride_b, dstride_t,       # strides of logits and of dlogits
        ROWS: tl.constexpr, BLOCK_V: tl.constexpr,
    ):
        b = tl.program_id(1).to(tl.int64)
        rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
        row_ok = rows < T
        out = b * T + rows
        row_ptr = logits_ptr + b * stride_b + rows.to(tl.int64) * stride_t
        drow_ptr = dlogits_ptr + b * dstride_b + rows.to(tl.int64) * dstride_t
        scale = tl.cast(scale, tl.float32)
        inv_t = scale * _LN2                                              # 1 / temperature

        m = tl.load(m_ptr + out, mask=row_ok, other=0.0)[:, None]         # (ROWS, 1)
        log2_d = tl.load(log2d_ptr + out, mask=row_ok, other=0.0)[:, None]
        H = tl.load(entropy_ptr + out, mask=row_ok, other=0.0)[:, None]
        g_logp = tl.load(glogp_ptr + out, mask=row_ok, other=0.0)[:, None] * inv_t
        g_H = tl.load(gent_ptr + out, mask=row_ok, other=0.0)[:, None] * inv_t
        c0, c1 = g_logp + g_H * H, g_H * _LN2     # d z = g_logp onehot - p (c0 + c1 u)
        t = tl.load(targets_ptr + out, mask=row_ok, other=0).to(tl.int32)[:, None]
        cols = tl.arange(0, BLOCK_V)
        for start in range(0, V, BLOCK_V):
            c = start + cols
            mask = row_ok[:, None] & (c[None, :] < V)
            x = tl.load(row_ptr[:, None] + c[None, :], mask=mask, other=float("-inf")).to(tl.float32)
            u = tl.maximum(x * scale, _NEG) - m - log2_d                  # log2 p, (ROWS, BLOCK_V)
            p = tl.exp2(u)
            g = tl.where(c[None, :] == t, g_logp, 0.0) - p * (c0 + c1 * u)
            tl.store(drow_ptr[:, None] + c[None, :], g.to(dlogits_ptr.dtype.element_ty), mask=mask)

    # The decorators above read TRITON_INTERPRET: if it was set, they built interpreter
    # functions that run on CPU tensors.
    _INTERPRETED = not isinstance(_fwd_kernel, triton.runtime.JITFunction)
else:
    _INTERPRETED = False


# ----------------------------------------------------------------------------- launchers
def _tile(T, V, block_v=None, num_warps=None):
    """(ROWS, BLOCK_V, num_warps). Large V: one row per program, streamed in 4096-wide
    blocks. Small V: several rows per program so each program still has work.
    The interpreter pays per operation, not per element, so it gets big tiles."""
    block_v = block_v or min(triton.next_power_of_2(V), 8192 if _INTERPRETED else 4096)
    tile_elems = 2**15 if _INTERPRETED else 4096
    rows = max(1, min(tile_elems // block_v, triton.next_power_of_2(T)))
    return rows, block_v, num_warps or (8 if block_v >= 2048 else 4)


def _on_device(tensor):
    """Triton launches on the *current* CUDA device: make it the tensor's."""
    return torch.cuda.device(tensor.device) if tensor.is_cuda else contextlib.nullcontext()


def _triton_forward(logits, targets, temperature, logp, entropy, stats, block_v=None, num_warps=None):
    """logits (B, T, V) with vocab stride 1, targets (B, T) contiguous
    -> writes logp, entropy (B, T) and stats (2, B, T)."""
    B, T, V = logits.shape
    rows, block_v, num_warps = _tile(T, V, block_v, num_warps)
    with _on_device(logits):
        _fwd_kernel[(triton.cdiv(T, rows), B)](
            logits, targets, logp, entropy, stats[0], stats[1],
            T, V, LOG2E / temperature,
            logits.stride(0), logits.stride(1),
            ROWS=rows, BLOCK_V=block_v, num_warps=num_warps,
        )


def _triton_backward(logits, targets, stats, entropy, g_logp, g_H, temperature, dlogits,
                     block_v=None, num_warps=None):
    B, T, V = logits.shape
    rows, block_v, num_warps = _tile(T, V, block_v, num_warps)
    with _on_device(logits):
        _bwd_kernel[(triton.cdiv(T, rows), B)](
            logits, targets, stats[0], stats[1], entropy, g_logp, g_H, dlogits,
            T, V, LOG2E / temperature,
            logits.stride(0), logits.stride(1), dlogits.stride(0), dlogits.stride(1),
            ROWS=rows, BLOCK_V=block_v, num_warps=num_warps,
        )


# ----------------------------------------------------------------------------- chunked torch path
# The same math as the kernels, in whole-row or vocabulary chunks (linear_logprobs.py
# merges vocabulary chunks with merge_stats). x is always log2(e) logits / T, fp32 or fp64.
CHUNK_ELEMENTS = 2**18  # fp32 elements per chunk temporary: 1 MiB, stays in L2 cache
# Each chunk runs ~10 short ops, each an OpenMP parallel region: keep OMP_NUM_THREADS at
# or below the free cores, or every region waits for a descheduled worker.


def online_stats(x):
    """x (R, C) base-2 scaled logits, finite, overwritten -> m, d, s, each (R,)."""
    m = x.amax(1)
    u = x.sub_(m[:, None])                                          # (R, C) x - m, in place
    e = u.exp2()                                                    # (R, C)
    return m, e.sum(1), torch.linalg.vecdot(e, u)


def merge_stats(a, b):
    """(m, d, s) of two disjoint sets of columns -> (m, d, s) of their union."""
    (m1, d1, s1), (m2, d2, s2) = a, b
    m = torch.maximum(m1, m2)
    a1, a2 = (m1 - m).exp2(), (m2 - m).exp2()                       # (R,) rescale factors
    # every term's (x - m_old) becomes (x - m_old) + (m_old - m): s grows by d (m_old - m)
    return m, a1 * d1 + a2 * d2, a1 * (s1 + d1 * (m1 - m)) + a2 * (s2 + d2 * (m2 - m))


def finish_stats(m, d, s, x_t):
    """Row statistics and the target's x -> logp, entropy, log2 d (natural-log outputs)."""
    log2_d = d.log2()
    return LN2 * ((x_t - m) - log2_d), LN2 * (log2_d - s / d), log2_d


def softmax_grad_(x, m, log2_d, entropy, g_logp, g_H):
    """In place: x (R, C) base-2 scaled logits -> -p (g_logp + g_H (log p + H)), the
    gradient w.r.t. the logits without its g_logp onehot term (the caller adds that where
    the target lies). Pass g_logp / T and g_H / T: the 1 / T of x = z / T then costs
    nothing per element, as in the kernel."""
    u = x.sub_(m[:, None]).sub_(log2_d[:, None])                    # (R, C) log2 p
    p = u.exp2()                                                    # (R, C)
    # the minus sign rides on the per-row factors too
    return u.mul_(-LN2 * g_H[:, None]).sub_((g_logp + g_H * entropy)[:, None]).mul_(p)


def _scaled(logits, temperature):
    """A fresh fp32 log2(e) logits / T with -inf -> NEG, (R, V): safe to overwrite."""
    return (logits.float() * (LOG2E / temperature)).clamp_(min=NEG)  # one pass less for fp32


def _row_chunks(B, T, V):
    rows = max(1, CHUNK_ELEMENTS // V)
    return [(b, slice(i, min(i + rows, T))) for b in range(B) for i in range(0, T, rows)]


def _torch_forward(logits, targets, temperature, logp, entropy, stats):
    """Same contract as _triton_forward, a few rows at a time."""
    for b, sl in _row_chunks(*logits.shape):
        rows, t = logits[b, sl], targets[b, sl, None]               # (C, V), (C, 1)
        x_t = _scaled(rows.gather(1, t), temperature).squeeze(1)    # (C,)
        m, d, s = online_stats(_scaled(rows, temperature))
        logp[b, sl], entropy[b, sl], stats[1, b, sl] = finish_stats(m, d, s, x_t)
        stats[0, b, sl] = m


def _torch_backward(logits, targets, stats, entropy, g_logp, g_H, temperature, dlogits):
    """Same contract as _triton_backward. dlogits may be logits itself (in place)."""
    for b, sl in _row_chunks(*logits.shape):
        g_lp, g_h = g_logp[b, sl] / temperature, g_H[b, sl] / temperature  # (C,) chain rule: x = z / T
        g = softmax_grad_(_scaled(logits[b, sl], temperature), stats[0, b, sl], stats[1, b, sl],
                          entropy[b, sl], g_lp, g_h)                   # (C, V)
        dlogits[b, sl] = g.scatter_add_(1, targets[b, sl, None], g_lp[:, None])  # + onehot; cast


# ----------------------------------------------------------------------------- public helpers
BACKENDS = ("triton", "torch", "reference")


def _pick_backend(logits):
    choice = os.environ.get("KERNELS_BACKEND", "auto")
    if choice == "auto":
        return "triton" if triton is not None and (logits.is_cuda or _INTERPRETED) else "torch"
    if choice not in BACKENDS:
        raise ValueError(f"KERNELS_BACKEND={choice!r}; expected auto or one of {BACKENDS}")
    if choice == "triton" and triton is None:
        raise RuntimeError("KERNELS_BACKEND=triton, but triton is not installed; "
                           "unset it to use the PyTorch path")
    if choice == "triton" and not (logits.is_cuda or _INTERPRETED):
        raise RuntimeError("the Triton path needs CUDA tensors, or TRITON_INTERPRET=1 set "
                           "before triton is imported to run the kernels on the CPU")
    return choice


def check_targets(targets, V):
    """A target outside [0, V) (say -100, an ignore_index) would read another row's memory."""
    if targets.numel() == 0:
        return
    lo, hi = (int(v) for v in torch.aminmax(targets))  # one reduction, one host sync
    if lo < 0 or hi >= V:
        raise ValueError(f"targets must lie in [0, {V}); got min {lo}, max {hi} "
                         "(no ignore_index: mask the loss instead)")


def _as_3d(logits):
    """(..., V) -> a (B, T, V) view with vocabulary stride 1; copies only when it must."""
    try:
        x = logits.view(1, -1, logits.shape[-1])   # rows one stride apart: a single launch row
    except RuntimeError:                            # e.g. logits[:, :-1]: keep (B, T) apart
        x = logits.reshape(-1, *logits.shape[-2:])  # copies only if the leading dims cannot merge
    return x if x.stride(-1) == 1 else x.contiguous()


def logprobs_entropy_forward(logits, targets, temperature=1.0, *, backend=None, out=None,
                             block_v=None, num_warps=None):
    """logits (B, T, V) or (N, V), any float dtype; targets of the leading shape
    -> logp, entropy (leading shape) and stats (2, leading shape): the base-2 row max m
    and log2 d, all fp32. No autograd. `out`: the three tensors to write into.
    block_v, num_warps: the Triton tile (default: _tile's choice)."""
    backend = backend or _pick_backend(logits)
    lead = logits.shape[:-1]
    check_targets(targets, logits.shape[-1])
    if out is None:
        out = (*(torch.empty(lead, device=logits.device) for _ in range(2)),
               torch.empty((2, *lead), device=logits.device))
    x = _as_3d(logits)
    t = targets.reshape(-1).contiguous().view(x.shape[:2])
    logp, entropy, stats = out[0].view(t.shape), out[1].view(t.shape), out[2].view(2, *t.shape)
    with torch.no_grad():
        if backend == "triton":
            _triton_forward(x, t, float(temperature), logp, entropy, stats, block_v, num_warps)
        else:
            _torch_forward(x, t, float(temperature), logp, entropy, stats)
    return out


def logprobs_entropy_backward(logits, targets, stats, entropy, g_logp, g_H, temperature=1.0, *,
                              backend=None, out=None, block_v=None, num_warps=None):
    """Gradient of sum(g_logp * logp + g_H * entropy) w.r.t. logits, in logits.dtype and
    layout. stats and entropy come from logprobs_entropy_forward. No autograd.
    out=logits writes the gradient over the logits (they are not needed afterwards)."""
    backend = backend or _pick_backend(logits)
    if out is None:
        out = torch.empty(logits.shape, device=logits.device, dtype=logits.dtype)
    x = _as_3d(logits)
    dx = out.view(x.shape)                        # the same (B, T) split as the logits
    shape = x.shape[:2]
    t = targets.reshape(-1).contiguous().view(shape)
    # the upstream grad of a .sum() is an expanded (stride 0) tensor; kernels index by row
    g_logp, g_H = (g.float().reshape(-1).contiguous().view(shape) for g in (g_logp, g_H))
    stats, entropy = stats.reshape(2, *shape), entropy.reshape(shape)
    with torch.no_grad():
        if backend == "triton":
            _triton_backward(x, t, stats, entropy, g_logp, g_H, float(temperature), dx,
                             block_v, num_warps)
        else:
            _torch_backward(x, t, stats, entropy, g_logp, g_H, float(temperature), dx)
    return out


# ----------------------------------------------------------------------------- autograd
class TokenLogprobsEntropy(torch.autograd.Function):
    """(B, T, V) logits -> logp, entropy (B, T); saves only stats and entropy, recomputes p."""

    @staticmethod
    def forward(ctx, logits, targets, temperature, backend, inplace_backward):
        logp, entropy, stats = logprobs_entropy_forward(logits, targets, temperature, backend=backend)
        ctx.save_for_backward(logits, targets, stats, entropy)
        ctx.temperature, ctx.backend, ctx.inplace = temperature, backend, inplace_backward
        return logp, entropy

    @staticmethod
    def backward(ctx, g_logp, g_H):
        logits, targets, stats, entropy = ctx.saved_tensors
        dlogits = logprobs_entropy_backward(logits, targets, stats, entropy, g_logp, g_H,
                                            ctx.temperature, backend=ctx.backend,
                                            out=logits if ctx.inplace else None)
        return dlogits, None, None, None, None


# ----------------------------------------------------------------------------- dispatch
def token_logprobs_and_entropy(logits, targets, temperature=1.0, *, inplace_backward=False):
    """logits (..., V) any float dtype, targets (...) int64 in [0, V)
    -> logp (...), entropy (...), both float32, differentiable w.r.t. logits.

    Triton on CUDA (and under TRITON_INTERPRET=1), chunked PyTorch elsewhere;
    KERNELS_BACKEND=triton|torch|reference forces one (see the module docstring).
    inplace_backward=True writes the gradient into the logits' memory instead of a new
    (N, V) buffer, as Liger-Kernel does: it saves N V bytes at the peak, but the logits
    are garbage after backward, so use it only if nothing else reads them (unsafe if the
    caller, or another op's saved tensors, reuse the logits). The reference backend ignores it.
    """
    lead, V = logits.shape[:-1], logits.shape[-1]
    x = _as_3d(logits)                           # (B, T, V), a view when possible
    t = targets.reshape(x.shape[:2])             # (B, T)
    backend = _pick_backend(x)
    if backend == "reference":
        check_targets(t, V)
        logp, entropy = (y.float() for y in reference_logprobs_and_entropy(x, t, temperature))
    else:
        logp, entropy = TokenLogprobsEntropy.apply(x, t, float(temperature), backend, inplace_backward)
    return logp.view(lead), entropy.view(lead)
