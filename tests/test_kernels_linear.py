"""Chunked log-prob + entropy from (hidden, LM-head weight) against a float64 reference,
on both ways of chunking (vocabulary columns, the CPU default; rows through the logprobs
kernels, the CUDA default, here on the chunked PyTorch backend; tests/test_kernels_logprobs.py
runs it through the Triton kernels on the interpreter).

Run: OMP_NUM_THREADS=1 python -m pytest tests/test_kernels_linear.py -q
Seeds are fixed and appear in the test ids and failure messages.
"""
import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from kernels import linear_logprobs_and_entropy
from kernels.linear_logprobs import linear_logprobs_and_entropy_reference as reference


def make_inputs(N, d, V, dtype, seed):
    g = torch.Generator().manual_seed(seed)
    hidden = torch.randn(N, d, generator=g)  # (N, d)
    weight = torch.randn(V, d, generator=g) * (3.0 / d**0.5)  # (V, d): logits of std ~3
    targets = torch.randint(0, V, (N,), generator=g)  # (N,)
    return hidden.to(dtype), weight.to(dtype), targets


def values_and_grads(fn, hidden, weight, targets, temperature, use, seed, **kw):
    """Outputs and grads of sum(g1 * logp + g2 * entropy) over the outputs named in `use`."""
    h = hidden.detach().clone().requires_grad_()
    w = weight.detach().clone().requires_grad_()
    logp, ent = fn(h, w, targets, temperature, **kw)
    g = torch.Generator().manual_seed(seed + 1)
    g1, g2 = torch.randn(logp.shape, generator=g), torch.randn(ent.shape, generator=g)
    loss = 0.0
    if "logp" in use:
        loss = loss + (g1.to(logp.dtype) * logp).sum()
    if "entropy" in use:
        loss = loss + (g2.to(ent.dtype) * ent).sum()
    loss.backward()
    return logp.detach(), ent.detach(), h.grad, w.grad


def max_rel_err(x, ref):
    return ((x.double() - ref).abs().max() / ref.abs().max().clamp_min(1e-12)).item()


@pytest.fixture
def poisoned_empty_like(monkeypatch):
    """Fresh buffers start as NaN, so any grad_weight row the kernel forgets to write shows up."""
    real = torch.empty_like
    monkeypatch.setattr(torch, "empty_like", lambda x, **kw: real(x, **kw).fill_(float("nan")))


CHUNKINGS = [("vocab", 100), ("rows", 10)]  # 1031 = 10 * 100 + 31 columns, 37 = 3 * 10 + 7 rows: ragged


@pytest.mark.roundings
@pytest.mark.parametrize("chunk_over,chunk_size", CHUNKINGS)
@pytest.mark.parametrize("use", [("logp",), ("entropy",), ("logp", "entropy")])
@pytest.mark.parametrize("temperature", [1.0, 0.7])
@pytest.mark.parametrize("seed", [3])
def test_fp32_matches_float64_reference(chunk_over, chunk_size, use, temperature, seed,
                                        poisoned_empty_like):
    hidden, weight, targets = make_inputs(37, 24, 1031, torch.float32, seed)
    targets[0], targets[1] = 0, 1030  # first and last vocabulary entries
    ref = values_and_grads(reference, hidden.double(), weight.double(), targets, temperature, use, seed)
    out = values_and_grads(linear_logprobs_and_entropy, hidden, weight, targets, temperature, use,
                           seed, chunk_over=chunk_over, chunk_size=chunk_size)
    assert out[0].dtype == torch.float32 and out[1].dtype == torch.float32
    for name, x, r in zip(["logp", "entropy", "grad_hidden", "grad_weight"], out, ref):
        assert x.shape == r.shape
        assert torch.isfinite(x).all(), f"{name} seed={seed}"
        torch.testing.assert_close(x.double(), r, rtol=1e-4, atol=1e-4, msg=f"{name} seed={seed}")


@pytest.mark.roundings
@pytest.mark.parametrize("chunk_over,chunk_size", [("vocab", 128), ("rows", 16)])
def test_bf16_close_to_float64_reference_and_grads_in_input_dtype(chunk_over, chunk_size):
    hidden, weight, targets = make_inputs(53, 64, 777, torch.bfloat16, seed=11)
    use = ("logp", "entropy")
    ref = values_and_grads(reference, hidden.double(), weight.double(), targets, 1.3, use, 5)
    out = values_and_grads(linear_logprobs_and_entropy, hidden, weight, targets, 1.3, use, 5,
                           chunk_over=chunk_over, chunk_size=chunk_size)
    assert out[2].dtype == torch.bfloat16 and out[3].dtype == torch.bfloat16
    # logits are rounded to bf16 (as in the materialised bf16 path): ~|z| * 2**-9 each
    torch.testing.assert_close(out[0].double(), ref[0], rtol=0, atol=5e-2)
    torch.testing.assert_close(out[1].double(), ref[1], rtol=0, atol=5e-2)
    assert max_rel_err(out[2], ref[2]) < 3e-2
    assert max_rel_err(out[3], ref[3]) < 3e-2


def test_default_chunk_leading_dims_and_weight_only_grad():
    # (B, T, d) hidden as a model returns it; the weight alone needs grad (a frozen trunk)
    hidden, weight, targets = make_inputs(2 * 19, 16, 300, torch.float64, seed=21)
    h3, t2 = hidden.view(2, 19, 16), targets.view(2, 19)
    w = weight.clone().requires_grad_()
    logp, ent = linear_logprobs_and_entropy(h3, w, t2)
    assert logp.shape == ent.shape == (2, 19)
    logp.sum().backward()
    wr = weight.clone().requires_grad_()
    rlogp, rent = reference(hidden, wr, targets)
    rlogp.sum().backward()
    torch.testing.assert_close(logp.double().view(-1), rlogp.double(), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(ent.double().view(-1), rent.double(), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(w.grad, wr.grad, rtol=1e-5, atol=1e-5)


def test_extreme_logits_stay_finite():
    # a huge logit in a late chunk forces a big rescale of the running sums
    hidden, weight, targets = make_inputs(8, 4, 50, torch.float32, seed=31)
    weight[45] = hidden[0] * 40.0
    ref = reference(hidden.double(), weight.double(), targets)
    for chunk_over, chunk_size in [("vocab", 7), ("rows", 3)]:
        out = linear_logprobs_and_entropy(hidden, weight, targets, chunk_over=chunk_over,
                                          chunk_size=chunk_size)
        for x, r in zip(out, ref):
            assert torch.isfinite(x).all(), chunk_over
            torch.testing.assert_close(x.double(), r, rtol=1e-4, atol=1e-4, msg=chunk_over)


class LargestTensor(TorchDispatchMode):
    """Records the largest number of elements any op produces."""

    def __init__(self):
        super().__init__()
        self.largest = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in out if isinstance(out, (tuple, list)) else [out]:
            if isinstance(t, torch.Tensor):
                self.largest = max(self.largest, t.numel())
        return out


@pytest.mark.parametrize("fn, kw", [(reference, None),  # the probe sees materialised logits
                                     (linear_logprobs_and_entropy, {"chunk_over": "vocab", "chunk_size": 256}),
                                     (linear_logprobs_and_entropy, {"chunk_over": "rows", "chunk_size": 16})])
def test_never_materialises_the_logits(fn, kw):
    N, d, V = 64, 8, 4096  # N*V = 262144; grad_weight V*d = 32768; one chunk N*256 = 16*V = 65536
    hidden, weight, targets = make_inputs(N, d, V, torch.float32, seed=41)
    h, w = hidden.requires_grad_(), weight.requires_grad_()
    materialises, kw = kw is None, kw or {}
    with LargestTensor() as probe:
        logp, ent = fn(h, w, targets, **kw)
        (logp.sum() + ent.sum()).backward()
    assert (probe.largest >= N * V) == materialises, probe.largest


def test_gradcheck_float64():
    hidden, weight, targets = make_inputs(5, 3, 23, torch.float64, seed=51)
    h, w = hidden.requires_grad_(), weight.requires_grad_()
    fn = lambda h, w: linear_logprobs_and_entropy(h, w, targets, 0.8, chunk_size=6)  # noqa: E731
    assert torch.autograd.gradcheck(fn, (h, w))


@pytest.mark.parametrize("chunk_over,chunk_size", [("vocab", 128), ("rows", 16)])
def test_autocast_backward_recomputes_the_forward_logits(chunk_over, chunk_size):
    # train.py runs the forward under bf16 autocast and the backward outside it: the
    # backward must recompute the bf16 logits, not fp32 ones (p would then be off by
    # exp(z32 - z16), a few % at logits of std 10), to match the materialised path
    hidden, weight, targets = make_inputs(48, 64, 500, torch.float32, seed=61)
    weight = weight * 3  # logits of std ~10
    use = ("logp", "entropy")
    with torch.autocast("cpu", dtype=torch.bfloat16):
        ref = values_and_grads(reference, hidden, weight, targets, 1.0, use, 61)
        out = values_and_grads(linear_logprobs_and_entropy, hidden, weight, targets, 1.0, use, 61,
                               chunk_over=chunk_over, chunk_size=chunk_size)
    assert out[2].dtype == out[3].dtype == torch.float32  # grads in the parameters' dtype
    for name, x, r in zip(["logp", "entropy"], out, ref):
        torch.testing.assert_close(x, r.float(), rtol=1e-5, atol=1e-5, msg=f"{name} seed=61")
    # chunks sum bf16 products in fp32 where autocast rounds one product: ~5e-3 apart
    for name, x, r in zip(["grad_hidden", "grad_weight"], out[2:], ref[2:]):
        assert max_rel_err(x, r.double()) < 1e-2, f"{name} seed=61"
