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
    m = max_j x_j,   d = sum_j exp(x_j - m),   s = sum_j exp(x_j - m) (x_j - m)
When a block raises the max from m to m', both sums are rescaled by exp(m - m')
(and s also shifts by d (m - m')). At the end, with x = logits / T,
    lse = m + log d,   logp = x_target - lse,   entropy = log d - s / d.
Keeping s relative to m (not sum e^x x) keeps the entropy exact even at logits of 1e4,
where lse - E[x] would cancel catastrophically in fp32.

Backward. With p = softmax(x) and H the entropy,
    d logp / d x_j = onehot_j - p_j,      d H / d x_j = -p_j (log p_j + H)
so, with upstream gradients g_logp and g_H per row and the chain rule through x = z / T,
    d z_j = (g_logp (onehot_j - p_j) - g_H p_j (log p_j + H)) / T
The kernel re-reads the row once (p_j = exp(x_j - lse) from the saved lse) and writes
d z; nothing else of size (N, V) exists.

Bytes it must move (b = bytes per logit): forward reads N V b and writes 12 N (logp,
entropy, lse); backward reads N V b and writes N V b. That is the bar the benchmark
(bench/bench_logprobs.py) measures against.

Paths, chosen per call by `_pick_backend`:
  * "triton"    - the kernels below; the default for CUDA tensors. Also runs on CPU
                  tensors when TRITON_INTERPRET=1 was set before triton was imported
                  (Triton decides at @triton.jit time), which is how tests check them here.
  * "torch"     - chunked PyTorch: a few rows at a time, recompute in backward, custom
                  autograd; never holds a full fp32 (N, V) tensor. Default on CPU.
  * "reference" - the plain textbook code above (materialises everything).
Force one with the environment variable KERNELS_BACKEND=triton|torch|reference (read
at each call; unset or "auto" picks as above).

Extra public helpers (used by kernels/linear_logprobs.py for its chunks, no autograd):
  logprobs_entropy_forward(logits2d, targets, T)  -> logp, entropy, lse   (each (N,))
  logprobs_entropy_backward(logits2d, targets, lse, entropy, g_logp, g_H, T) -> dlogits
Departures from the chapter: targets must lie in [0, V) (no ignore_index; mask the loss
instead); a row whose logits are all -inf has no distribution and gives NaN.
"""
import os

import torch
import torch.nn.functional as F
import triton
import triton.language as tl


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
@triton.jit
def _fwd_kernel(
    logits_ptr, targets_ptr, logp_ptr, entropy_ptr, lse_ptr,  # pointers
    N, V, temperature,                                        # sizes, scalar
    stride_row,                                               # strides (column stride is 1)
    ROWS: tl.constexpr, BLOCK_V: tl.constexpr,                # tile: ROWS rows x BLOCK_V vocab
):
    rows = tl.program_id(0).to(tl.int64) * ROWS + tl.arange(0, ROWS)  # (ROWS,) int64: N*V > 2^31
    row_ok = rows < N
    cols = tl.arange(0, BLOCK_V)                                       # (BLOCK_V,)
    row_ptr = logits_ptr + rows[:, None] * stride_row                  # (ROWS, 1)

    m = tl.full((ROWS,), float("-inf"), tl.float32)  # running max
    d = tl.zeros((ROWS,), tl.float32)                # running sum exp(x - m)
    s = tl.zeros((ROWS,), tl.float32)                # running sum exp(x - m) (x - m)
    for start in range(0, V, BLOCK_V):
        c = start + cols
        mask = row_ok[:, None] & (c[None, :] < V)
        x = tl.load(row_ptr + c[None, :], mask=mask, other=float("-inf")).to(tl.float32)
        x = x / temperature                                               # (ROWS, BLOCK_V)
        m_new = tl.maximum(m, tl.max(x, axis=1))
        # while a row has seen only -inf, shift by 0 so exp gives 0 instead of NaN
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
        scale = tl.exp(m - m_safe)                                        # rescale old sums
        e = tl.exp(x - m_safe[:, None])                                   # (ROWS, BLOCK_V)
        xm = tl.where(e > 0, x - m_safe[:, None], 0.0)                    # -inf logits: 0, not 0 * -inf
        s = scale * (s + d * tl.where(d > 0, m - m_safe, 0.0)) + tl.sum(e * xm, axis=1)
        d = scale * d + tl.sum(e, axis=1)
        m = m_new

    d = tl.where(row_ok, d, 1.0)  # padding rows past N: no log(0) (the interpreter would warn)
    log_d = tl.log(d)
    t = tl.load(targets_ptr + rows, mask=row_ok, other=0)                 # (ROWS,) int64
    x_t = tl.load(logits_ptr + rows * stride_row + t, mask=row_ok, other=0.0).to(tl.float32)
    lse = m + log_d
    tl.store(lse_ptr + rows, lse, mask=row_ok)
    tl.store(logp_ptr + rows, x_t / temperature - lse, mask=row_ok)
    tl.store(entropy_ptr + rows, log_d - s / d, mask=row_ok)


@triton.jit
def _bwd_kernel(
    logits_ptr, targets_ptr, lse_ptr, entropy_ptr, glogp_ptr, gent_ptr, dlogits_ptr,  # pointers
    N, V, temperature,                                                               # sizes, scalar
    stride_row, stride_drow,                                                         # strides
    ROWS: tl.constexpr, BLOCK_V: tl.constexpr,
):
    rows = tl.program_id(0).to(tl.int64) * ROWS + tl.arange(0, ROWS)  # (ROWS,)
    row_ok = rows < N
    cols = tl.arange(0, BLOCK_V)
    lse = tl.load(lse_ptr + rows, mask=row_ok, other=0.0)[:, None]       # (ROWS, 1)
    H = tl.load(entropy_ptr + rows, mask=row_ok, other=0.0)[:, None]
    g_logp = tl.load(glogp_ptr + rows, mask=row_ok, other=0.0)[:, None]
    g_H = tl.load(gent_ptr + rows, mask=row_ok, other=0.0)[:, None]
    t = tl.load(targets_ptr + rows, mask=row_ok, other=0)[:, None]
    for start in range(0, V, BLOCK_V):
        c = start + cols
        mask = row_ok[:, None] & (c[None, :] < V)
        x = tl.load(logits_ptr + rows[:, None] * stride_row + c[None, :], mask=mask,
                    other=float("-inf")).to(tl.float32) / temperature  # (ROWS, BLOCK_V)
        logp_all = x - lse
        p = tl.exp(logp_all)
        logp_safe = tl.where(p > 0, logp_all, 0.0)                     # p log p -> 0 at p = 0
        onehot = tl.where(c[None, :] == t, 1.0, 0.0)
        g = g_logp * (onehot - p) - g_H * p * (logp_safe + H)          # d / d x
        g = g / temperature                                            # chain rule: x = z / T
        tl.store(dlogits_ptr + rows[:, None] * stride_drow + c[None, :],
                 g.to(dlogits_ptr.dtype.element_ty), mask=mask)


# The decorators above read TRITON_INTERPRET: if it was set, they built interpreter
# functions that run on CPU tensors.
_INTERPRETED = not isinstance(_fwd_kernel, triton.runtime.JITFunction)


# ----------------------------------------------------------------------------- launchers
def _tile(N, V, interpreted):
    """(ROWS, BLOCK_V, num_warps). Large V: one row per program, streamed in 4096-wide
    blocks. Small V: several rows per program so each program still has work.
    The interpreter pays per operation, not per element, so it gets big tiles."""
    block_v = min(triton.next_power_of_2(V), 8192 if interpreted else 4096)
    tile_elems = 2**15 if interpreted else 4096
    rows = max(1, min(tile_elems // block_v, triton.next_power_of_2(N)))
    return rows, block_v, 8 if block_v >= 2048 else 4


def _triton_forward(logits, targets, temperature, logp, entropy, lse):
    """logits (N, V) with unit column stride, targets (N,) int64 -> writes logp, entropy, lse (N,)."""
    N, V = logits.shape
    rows, block_v, warps = _tile(N, V, _INTERPRETED)
    _fwd_kernel[(triton.cdiv(N, rows),)](
        logits, targets, logp, entropy, lse,
        N, V, temperature,
        logits.stride(0),
        ROWS=rows, BLOCK_V=block_v, num_warps=warps,
    )


def _triton_backward(logits, targets, lse, entropy, g_logp, g_H, temperature, dlogits):
    N, V = logits.shape
    rows, block_v, warps = _tile(N, V, _INTERPRETED)
    _bwd_kernel[(triton.cdiv(N, rows),)](
        logits, targets, lse, entropy, g_logp, g_H, dlogits,
        N, V, temperature,
        logits.stride(0), dlogits.stride(0),
        ROWS=rows, BLOCK_V=block_v, num_warps=warps,
    )


# ----------------------------------------------------------------------------- chunked torch path
CHUNK_ELEMENTS = 2**18  # fp32 elements per chunk temporary: 1 MiB, stays in L2 cache
# Each chunk runs ~10 short ops, each one an OpenMP parallel region when threads > 1. On a
# machine where other jobs leave fewer free cores than OMP_NUM_THREADS, every region waits
# for a descheduled worker: measured on a loaded 2-core box at N=4096, V=32768, fwd+bwd
# took 0.74 s with 1 thread and 25 s with 2. Keep OMP_NUM_THREADS <= free cores.
_FMIN = torch.finfo(torch.float32).min


def _chunks(N, V):
    rows = max(1, CHUNK_ELEMENTS // V)
    return [slice(i, min(i + rows, N)) for i in range(0, N, rows)]


def _scaled_rows(logits, sl, temperature):
    """A fresh fp32 copy of logits[sl] / T, (C, V): safe to modify in place."""
    x = logits[sl].to(torch.float32, copy=True)
    return x.div_(temperature) if temperature != 1.0 else x


def _torch_forward(logits, targets, temperature, logp, entropy, lse):
    """Same contract and same math as _fwd_kernel, a few rows at a time."""
    for sl in _chunks(*logits.shape):
        x = _scaled_rows(logits, sl, temperature)                       # (C, V)
        m = x.amax(dim=-1)                                              # (C,)
        xm = x.sub_(m[:, None])                                         # (C, V) x - m, in place
        e = xm.exp()                                                    # (C, V)
        d = e.sum(dim=-1)                                               # (C,)
        log_d = d.log()
        logp[sl] = xm.gather(1, targets[sl, None]).squeeze(1) - log_d
        # clamp turns -inf into a finite number so that e * it = 0 * it = 0, not NaN
        s = torch.linalg.vecdot(e, xm.clamp_(min=_FMIN))                # sum e (x - m)
        entropy[sl] = log_d - s / d   # not x - lse: at logits ~1e4 that cancels in fp32
        lse[sl] = m + log_d


def _torch_backward(logits, targets, lse, entropy, g_logp, g_H, temperature, dlogits):
    """Same contract as _triton_backward: recompute p from the saved lse, chunk by chunk."""
    for sl in _chunks(*logits.shape):
        g = _scaled_rows(logits, sl, temperature).sub_(lse[sl, None])  # (C, V) log p
        p = g.exp()                                                     # (C, V)
        g.clamp_(min=_FMIN).add_(entropy[sl, None]).mul_(p).mul_(-g_H[sl, None])  # -g_H p (log p + H)
        g.sub_(p.mul_(g_logp[sl, None]))                                # - g_logp p
        g.scatter_add_(1, targets[sl, None], g_logp[sl, None])          # + g_logp onehot
        dlogits[sl] = g.div_(temperature) if temperature != 1.0 else g  # cast to dlogits.dtype


# ----------------------------------------------------------------------------- public helpers
BACKENDS = ("triton", "torch", "reference")


def _pick_backend(logits):
    choice = os.environ.get("KERNELS_BACKEND", "auto")
    if choice == "auto":
        return "triton" if logits.is_cuda or _INTERPRETED else "torch"
    if choice not in BACKENDS:
        raise ValueError(f"KERNELS_BACKEND={choice!r}; expected auto or one of {BACKENDS}")
    if choice == "triton" and not (logits.is_cuda or _INTERPRETED):
        raise RuntimeError("the Triton path needs CUDA tensors, or TRITON_INTERPRET=1 set "
                           "before triton is imported to run the kernels on the CPU")
    return choice


def logprobs_entropy_forward(logits, targets, temperature=1.0, backend=None, out=None):
    """logits (N, V) any float dtype, targets (N,) -> logp, entropy, lse, each (N,) fp32.

    No autograd. `out`, if given, is the (logp, entropy, lse) tensors to write into.
    lse is the log-sum-exp of logits / T per row: log p_j = logits_j / T - lse.
    """
    backend = backend or _pick_backend(logits)
    N, V = logits.shape
    if out is None:
        out = tuple(torch.empty(N, device=logits.device, dtype=torch.float32) for _ in range(3))
    targets = targets.long().contiguous()
    with torch.no_grad():
        if backend == "triton":
            _triton_forward(_unit_col_stride(logits), targets, float(temperature), *out)
        else:
            _torch_forward(logits, targets, float(temperature), *out)
    return out


def logprobs_entropy_backward(logits, targets, lse, entropy, g_logp, g_H, temperature=1.0,
                              backend=None, out=None):
    """Gradient of sum(g_logp * logp + g_H * entropy) w.r.t. logits (N, V), in logits.dtype.

    lse and entropy come from logprobs_entropy_forward; g_logp, g_H are (N,). No autograd.
    """
    backend = backend or _pick_backend(logits)
    if out is None:
        out = torch.empty(logits.shape, device=logits.device, dtype=logits.dtype)  # (N, V)
    targets = targets.long().contiguous()
    # the upstream grad of a .sum() is an expanded (stride 0) tensor; kernels index by row
    g_logp, g_H = (g.float().contiguous() for g in (g_logp, g_H))
    with torch.no_grad():
        if backend == "triton":
            _triton_backward(_unit_col_stride(logits), targets, lse, entropy, g_logp, g_H,
                             float(temperature), out)
        else:
            _torch_backward(logits, targets, lse, entropy, g_logp, g_H, float(temperature), out)
    return out


def _unit_col_stride(x):
    return x if x.stride(-1) == 1 else x.contiguous()


# ----------------------------------------------------------------------------- autograd
class TokenLogprobsEntropy(torch.autograd.Function):
    """(N, V) logits -> logp (N,), entropy (N,); saves only lse and entropy, recomputes p."""

    @staticmethod
    def forward(ctx, logits, targets, temperature, backend):
        logp, entropy, lse = logprobs_entropy_forward(logits, targets, temperature, backend)
        ctx.save_for_backward(logits, targets, lse, entropy)
        ctx.temperature, ctx.backend = temperature, backend
        return logp, entropy

    @staticmethod
    def backward(ctx, g_logp, g_H):
        logits, targets, lse, entropy = ctx.saved_tensors
        dlogits = logprobs_entropy_backward(logits, targets, lse, entropy, g_logp, g_H,
                                            ctx.temperature, ctx.backend)
        return dlogits, None, None, None


# ----------------------------------------------------------------------------- dispatch
def token_logprobs_and_entropy(logits, targets, temperature=1.0):
    """logits (..., V) any float dtype, targets (...) int64 in [0, V)
    -> logp (...), entropy (...), both float32, differentiable w.r.t. logits.

    Triton on CUDA (and under TRITON_INTERPRET=1), chunked PyTorch on CPU;
    KERNELS_BACKEND=triton|torch|reference forces one (see the module docstring).
    """
    lead, V = logits.shape[:-1], logits.shape[-1]
    x = logits.reshape(-1, V)     # (N, V)
    t = targets.reshape(-1)       # (N,)
    backend = _pick_backend(x)
    if backend == "reference":
        logp, entropy = reference_logprobs_and_entropy(x, t, temperature)
        logp, entropy = logp.float(), entropy.float()
    else:
        logp, entropy = TokenLogprobsEntropy.apply(x, t, float(temperature), backend)
    return logp.view(lead), entropy.view(lead)
