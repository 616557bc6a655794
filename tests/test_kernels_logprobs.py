"""Tests for kernels/logprobs.py: each path against a float64 reference, and the hazards
of launching the kernels (devices, target range, layouts, memory, missing Triton).

    OMP_NUM_THREADS=1 python -m pytest tests/test_kernels_logprobs.py -q

Both paths run: "torch" (the chunked CPU path) and "triton". Triton decides at
@triton.jit time whether to build interpreter functions, so TRITON_INTERPRET=1 must be
set before the kernels are imported. Hence: on a CUDA machine the triton tests run the
real kernels in this process; elsewhere they are skipped here and
test_triton_kernels_under_interpreter re-runs them in a fresh process with
TRITON_INTERPRET=1 (and fails unless they all ran and passed). Without Triton installed
the triton tests are skipped and test_imports_and_runs_without_triton checks the rest.
Inputs are random from a fixed seed (SEED, printed in every failure message); outputs are
NaN-poisoned before each call so an element the kernel forgot to write fails.
"""
import math
import os
import re
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
sys.path.insert(0, ROOT)
from kernels import logprobs as lp  # noqa: E402
from kernels import linear_logprobs_and_entropy, token_logprobs_and_entropy  # noqa: E402

SEED = 1234
CUDA = torch.cuda.is_available()
TRITON_HERE = lp.triton is not None and (CUDA or lp._INTERPRETED)
TRITON_SKIP = ("triton is not installed" if lp.triton is None else
               "no CUDA; run under TRITON_INTERPRET=1 (see module docstring)")
BACKENDS = ["torch", pytest.param("triton", marks=pytest.mark.skipif(not TRITON_HERE, reason=TRITON_SKIP))]
# fp32 outputs are computed in fp32 whatever the input; grads come back in the input dtype
GRAD_RTOL = {torch.float32: 1e-4, torch.bfloat16: 2e-2, torch.float16: 2e-3}


def device(backend):
    return "cuda" if backend == "triton" and CUDA else "cpu"


@pytest.fixture
def seed():
    torch.manual_seed(SEED)
    return SEED


def reference(logits, targets, temperature, g_logp, g_H):
    """float64 logp, entropy and d(sum g_logp logp + g_H entropy)/d logits."""
    x = logits.detach().double().requires_grad_()
    logp, entropy = lp.reference_logprobs_and_entropy(x, targets, temperature)
    (g_logp.double() * logp + g_H.double() * entropy).sum().backward()
    return logp, entropy, x.grad


def poisoned_forward(logits, targets, temperature, backend, **kw):
    lead = logits.shape[:-1]
    out = (torch.full(lead, float("nan"), device=logits.device),
           torch.full(lead, float("nan"), device=logits.device),
           torch.full((2, *lead), float("nan"), device=logits.device))
    return lp.logprobs_entropy_forward(logits, targets, temperature, backend=backend, out=out, **kw)


def poisoned_backward(logits, targets, stats, entropy, g_logp, g_H, temperature, backend, **kw):
    out = torch.full_like(logits, float("nan"))
    return lp.logprobs_entropy_backward(logits, targets, stats, entropy, g_logp, g_H,
                                        temperature, backend=backend, out=out, **kw)


def check_against_reference(logits, targets, temperature, backend, seed, atol=1e-4, **kw):
    N = logits.shape[0]
    g_logp, g_H = torch.randn(N, device=logits.device), torch.randn(N, device=logits.device)
    ref_logp, ref_H, ref_grad = reference(logits, targets, temperature, g_logp, g_H)
    logp, H, stats = poisoned_forward(logits, targets, temperature, backend, **kw)
    msg = lambda m: f"{m}\nseed={seed} backend={backend}"  # noqa: E731
    torch.testing.assert_close(logp.double(), ref_logp.detach(), rtol=1e-5, atol=atol, msg=msg)
    torch.testing.assert_close(H.double(), ref_H.detach(), rtol=1e-5, atol=atol, msg=msg)
    lse = math.log(2) * (stats[0].double() + stats[1].double())  # back from base 2
    ref_lse = torch.logsumexp(logits.double() / temperature, -1)
    torch.testing.assert_close(lse, ref_lse, rtol=1e-5, atol=atol, msg=msg)
    grad = poisoned_backward(logits, targets, stats, H, g_logp, g_H, temperature, backend, **kw)
    assert grad.dtype == logits.dtype
    torch.testing.assert_close(grad.double(), ref_grad, rtol=GRAD_RTOL[logits.dtype],
                               atol=1e-5, msg=msg)


# --------------------------------------------------------------------------- values and grads
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("N,V", [(1823, 781), (19, 20000)])  # 20000: several vocab blocks
@pytest.mark.parametrize("dtype,temperature", [(torch.float32, 1.0), (torch.bfloat16, 0.7),
                                               (torch.float16, 1.3)])
@pytest.mark.roundings
def test_matches_float64_reference(backend, N, V, dtype, temperature, seed):
    logits = (4 * torch.randn(N, V, device=device(backend))).to(dtype)
    targets = torch.randint(0, V, (N,), device=logits.device)
    check_against_reference(logits, targets, temperature, backend, seed)


@pytest.mark.parametrize("backend", BACKENDS)
def test_max_in_a_late_block_rescales_running_sums(backend, seed):
    # increasing logits put each row's max in its last vocab block: every block rescales
    N, V = 5, 20000
    logits = torch.linspace(-20, 20, V).repeat(N, 1) + torch.randn(N, V)
    targets = torch.randint(0, V, (N,))
    targets[0] = V - 1  # the target in the last, partial block
    check_against_reference(logits.to(device(backend)), targets.to(device(backend)), 1.0,
                            backend, seed)


@pytest.mark.parametrize("backend", BACKENDS)
def test_extreme_logits_and_minus_inf(backend, seed):
    N, V = 6, 9000
    logits = 1e4 * torch.randn(N, V).sign()               # row 0: +-1e4 at random
    logits[1] = -1e4
    logits[1, 4321] = 1e4                                 # one token takes all mass
    logits[2, : V // 2] = float("-inf")                   # half the vocabulary banned
    logits[3] = float("-inf")
    logits[3, [7, 8800]] = torch.tensor([0.5, -0.5])      # only two tokens allowed
    logits[4, 1::2] = float("-inf")                       # -inf in every block
    logits[5] = torch.randn(V)                            # an ordinary row next to them
    targets = torch.tensor([11, 4321, 6000, 8800, 2, 123])
    dev = device(backend)
    # atol: fp32 spacing at 1e4 is ~1e-3, the reference is float64
    check_against_reference(logits.to(dev), targets.to(dev), 1.0, backend, seed, atol=2e-3)
    check_against_reference(logits.to(dev), targets.to(dev), 0.7, backend, seed, atol=2e-3)
    logp, H, _ = poisoned_forward(logits.to(dev), targets.to(dev), 1.0, backend)
    assert torch.isfinite(logp).all() and torch.isfinite(H).all()
    assert abs(H[1]) < 1e-6 and abs(logp[1]) < 1e-6                   # a point mass
    assert abs(H[3] - 0.5822) < 1e-4                                  # two tokens, logits 0.5, -0.5


@pytest.mark.parametrize("backend", BACKENDS)
def test_all_minus_inf_row_is_uniform_and_finite(backend, seed):
    # documented behaviour: an all -inf row counts as a row of equal logits (not NaN)
    V, T = 5000, 0.7
    logits = torch.randn(3, V, device=device(backend))
    logits[1] = float("-inf")
    targets = torch.tensor([0, 17, V - 1], device=logits.device)
    logp, H, stats = poisoned_forward(logits, targets, T, backend)
    msg = f"seed={seed} backend={backend}"
    assert abs(logp[1] + math.log(V)) < 1e-4 and abs(H[1] - math.log(V)) < 1e-4, msg
    ones = torch.ones(3, device=logits.device)
    g = poisoned_backward(logits, targets, stats, H, ones, ones, T, backend)
    expected = torch.full((V,), -1 / V / T)
    expected[17] += 1 / T                          # d logp = (onehot - 1/V) / T, d H = 0
    torch.testing.assert_close(g[1].cpu(), expected, rtol=1e-4, atol=1e-6, msg=msg)
    # the other rows are unaffected by their neighbour
    check_against_reference(logits[[0, 2]], targets[[0, 2]], T, backend, seed)


@pytest.mark.parametrize("backend", BACKENDS)
def test_single_token_vocabulary(backend, seed):
    logits = torch.randn(7, 1, device=device(backend))
    targets = torch.zeros(7, dtype=torch.long, device=logits.device)
    logp, H, _ = poisoned_forward(logits, targets, 0.9, backend)
    assert (logp == 0).all() and (H == 0).all()
    check_against_reference(logits, targets, 0.9, backend, seed)


@pytest.mark.skipif(not TRITON_HERE, reason=TRITON_SKIP)
@pytest.mark.parametrize("block_v,num_warps", [(64, 1), (512, 2)])
def test_triton_tile_parameters(block_v, num_warps, seed):
    # any tile gives the same numbers; 1000 is not a multiple of either width
    logits = 3 * torch.randn(33, 1000, device=device("triton"))
    targets = torch.randint(0, 1000, (33,), device=logits.device)
    check_against_reference(logits, targets, 0.8, "triton", seed, block_v=block_v,
                            num_warps=num_warps)


@pytest.mark.skipif(not TRITON_HERE, reason=TRITON_SKIP)
def test_linear_rows_path_through_triton(seed, monkeypatch):
    # kernels/linear_logprobs.py's CUDA path: row chunks of h @ W^T through these kernels
    monkeypatch.setenv("KERNELS_BACKEND", "triton")
    N, d, V = 45, 16, 900
    hidden = torch.randn(N, d, device=device("triton"), requires_grad=True)
    weight = (torch.randn(V, d, device=hidden.device) / 2).requires_grad_()
    targets = torch.randint(0, V, (N,), device=hidden.device)
    g = torch.randn(2, N, device=hidden.device)
    logp, H = linear_logprobs_and_entropy(hidden, weight, targets, 0.7, chunk_over="rows", chunk_size=16)
    (g[0] * logp + g[1] * H).sum().backward()
    h64, w64 = (t.detach().double().requires_grad_() for t in (hidden, weight))
    ref_logp, ref_H = lp.reference_logprobs_and_entropy(h64 @ w64.t(), targets, 0.7)
    (g[0].double() * ref_logp + g[1].double() * ref_H).sum().backward()
    for got, ref in [(logp, ref_logp), (H, ref_H), (hidden.grad, h64.grad), (weight.grad, w64.grad)]:
        torch.testing.assert_close(got.double(), ref.detach(), rtol=1e-4, atol=1e-5, msg=f"seed={seed}")


# --------------------------------------------------------------------------- public function
@pytest.mark.roundings
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("which", ["logp", "entropy", "both"])
def test_autograd_through_each_output(backend, which, seed, monkeypatch):
    monkeypatch.setenv("KERNELS_BACKEND", backend)
    B, T, V = 3, 41, 1000
    # non-contiguous (B, T, V): a transposed view with a padded vocabulary
    base = 3 * torch.randn(T, B, V + 24, device=device(backend))
    logits = base.transpose(0, 1)[..., :V].detach().requires_grad_()  # (B, T, V)
    targets = torch.randint(0, V, (B, T), device=logits.device)
    w = torch.randn(B, T, device=logits.device)

    def loss(logp, entropy):
        return {"logp": (w * logp).sum(), "entropy": (w * entropy).sum(),
                "both": (w * logp).sum() - 0.1 * entropy.sum()}[which]

    logp, entropy = token_logprobs_and_entropy(logits, targets, temperature=0.8)
    assert logp.shape == entropy.shape == (B, T) and logp.dtype == torch.float32
    loss(logp, entropy).backward()
    x = logits.detach().double().requires_grad_()
    ref_logp, ref_H = lp.reference_logprobs_and_entropy(x, targets, 0.8)
    loss(ref_logp, ref_H).backward()
    msg = lambda m: f"{m}\nseed={seed}"  # noqa: E731
    torch.testing.assert_close(logp.double(), ref_logp.detach(), rtol=1e-5, atol=1e-5, msg=msg)
    torch.testing.assert_close(entropy.double(), ref_H.detach(), rtol=1e-5, atol=1e-5, msg=msg)
    torch.testing.assert_close(logits.grad.double(), x.grad, rtol=1e-4, atol=1e-6, msg=msg)


def test_backend_choice_errors_are_clear(monkeypatch):
    logits = torch.randn(4, 10, requires_grad=True)
    targets = torch.randint(0, 10, (4,))
    monkeypatch.setenv("KERNELS_BACKEND", "reference")
    logp, H = token_logprobs_and_entropy(logits, targets)
    assert logp.dtype == H.dtype == torch.float32
    monkeypatch.setenv("KERNELS_BACKEND", "tirton")
    with pytest.raises(ValueError):
        token_logprobs_and_entropy(logits, targets)
    if lp.triton is not None and not lp._INTERPRETED:
        monkeypatch.setenv("KERNELS_BACKEND", "triton")
        with pytest.raises(RuntimeError, match="TRITON_INTERPRET"):
            token_logprobs_and_entropy(logits, targets)


NO_TRITON_SCRIPT = textwrap.dedent("""
    import os, sys, torch
    sys.modules["triton"] = None  # any `import triton` now raises ImportError
    sys.path.insert(0, {root!r})
    import kernels
    logits = torch.randn(2, 5, 50, requires_grad=True)
    targets = torch.randint(0, 50, (2, 5))
    logp, H = kernels.token_logprobs_and_entropy(logits, targets, 0.7)
    (logp.sum() + H.sum()).backward()
    hidden, weight = torch.randn(10, 8, requires_grad=True), torch.randn(50, 8, requires_grad=True)
    for over in ("vocab", "rows"):
        logp, H = kernels.linear_logprobs_and_entropy(hidden, weight, targets.view(-1), chunk_over=over)
        (logp.sum() + H.sum()).backward()
    assert logits.grad.isfinite().all() and weight.grad.isfinite().all()
    os.environ["KERNELS_BACKEND"] = "triton"
    try:
        kernels.token_logprobs_and_entropy(logits, targets)
    except RuntimeError as e:
        print(e)
""")


def test_imports_and_runs_without_triton():
    env = dict(os.environ, OMP_NUM_THREADS="1")
    env.pop("KERNELS_BACKEND", None)
    res = subprocess.run([sys.executable, "-c", NO_TRITON_SCRIPT.format(root=ROOT)], env=env,
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr[-3000:]
    assert "triton is not installed" in res.stdout, res.stdout


# --------------------------------------------------------------------------- GPU hazards
@pytest.mark.parametrize("backend", ["torch", "reference"] + BACKENDS[1:])
@pytest.mark.parametrize("bad", [-100, 50])
def test_out_of_range_target_raises(backend, bad, monkeypatch):
    # -100 is the usual ignore_index; 50 == V. Either would read another row's memory.
    monkeypatch.setenv("KERNELS_BACKEND", backend)
    logits = torch.randn(4, 50, device=device(backend))
    targets = torch.tensor([0, 1, bad, 3], device=logits.device)
    with pytest.raises(ValueError, match=r"\[0, 50\)"):
        token_logprobs_and_entropy(logits, targets)
    hidden, weight = torch.randn(4, 8, device=logits.device), torch.randn(50, 8, device=logits.device)
    for over in ("vocab", "rows"):
        with pytest.raises(ValueError, match=r"\[0, 50\)"):
            linear_logprobs_and_entropy(hidden, weight, targets, chunk_over=over)


@pytest.mark.parametrize("backend", BACKENDS)
def test_shifted_logits_are_not_copied(backend, seed, monkeypatch):
    # logits[:, :-1] of a (B, L, V) output cannot be viewed as (N, V): reshape would copy
    # it; the kernels take its strides instead and must see the caller's memory
    monkeypatch.setenv("KERNELS_BACKEND", backend)
    full = torch.randn(3, 9, 300, device=device(backend), requires_grad=True)  # (B, L, V)
    logits = full[:, :-1]                                                          # (B, T, V)
    targets = torch.randint(0, 300, (3, 8), device=full.device)
    seen = []  # the memory each launcher was handed

    def recording(launcher):
        def wrapper(x, *args, **kwargs):
            seen.append(x.data_ptr())
            return launcher(x, *args, **kwargs)
        return wrapper

    for name in ("_triton_forward", "_torch_forward", "_triton_backward", "_torch_backward"):
        monkeypatch.setattr(lp, name, recording(getattr(lp, name)))
    logp, H = token_logprobs_and_entropy(logits, targets, 0.9)
    (logp.sum() + H.sum()).backward()
    assert seen == [full.data_ptr()] * 2, f"the kernels got copies: {seen} vs {full.data_ptr()}"
    x = full.detach().double().requires_grad_()
    ref_logp, ref_H = lp.reference_logprobs_and_entropy(x[:, :-1], targets, 0.9)
    (ref_logp.sum() + ref_H.sum()).backward()
    torch.testing.assert_close(logp.double(), ref_logp.detach(), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(full.grad.double(), x.grad, rtol=1e-4, atol=1e-6, msg=f"seed={seed}")


@pytest.mark.parametrize("backend", BACKENDS)
def test_inplace_backward_gives_the_same_gradient(backend, seed, monkeypatch):
    monkeypatch.setenv("KERNELS_BACKEND", backend)
    weight = torch.randn(2, 700, device=device(backend), requires_grad=True)
    x = torch.randn(64, 2, device=weight.device)
    targets = torch.randint(0, 700, (64,), device=weight.device)
    grads = []
    for inplace in (False, True):
        logits = x @ weight                                          # (64, 700), not a leaf
        logp, H = token_logprobs_and_entropy(logits, targets, 0.8, inplace_backward=inplace)
        (logp.sum() - 0.3 * H.sum()).backward()
        grads.append(weight.grad)
        weight.grad = None
    torch.testing.assert_close(grads[1], grads[0], rtol=1e-5, atol=1e-6, msg=f"seed={seed}")
    # the logits' memory now holds their gradient: it really was written in place
    assert not torch.equal(logits.detach(), x @ weight.detach())


@pytest.mark.skipif(not TRITON_HERE, reason=TRITON_SKIP)
def test_triton_launches_on_the_tensors_device(seed, monkeypatch):
    # Triton launches on the current device: a tensor on cuda:1 needs cuda:1 made current (a fake tensor there
    # without a GPU; with one GPU, whose cuda:1 cannot exist even as a fake, cuda:0)
    from torch._subclasses.fake_tensor import FakeTensorMode
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    index = 0 if gpus == 1 else 1
    if gpus:
        on_gpu = torch.empty(2, device=f"cuda:{index}")
    else:
        with FakeTensorMode():
            on_gpu = torch.empty(2, device=f"cuda:{index}")
    guard = lp._on_device(on_gpu)
    assert isinstance(guard, torch.cuda.device) and guard.idx == index
    guarded = []
    real = lp._on_device
    monkeypatch.setattr(lp, "_on_device", lambda t: guarded.append(t.data_ptr()) or real(t))
    logits = torch.randn(5, 100, device=device("triton"))
    targets = torch.randint(0, 100, (5,), device=logits.device)
    check_against_reference(logits, targets, 1.0, "triton", seed)
    assert guarded == [logits.data_ptr()] * 2  # forward and backward


COMPILABLE = lp.triton is not None and not lp._INTERPRETED


@pytest.mark.skipif(not COMPILABLE, reason="needs triton, not under TRITON_INTERPRET")
@pytest.mark.parametrize("scale_type", ["fp32", "fp64"])
def test_kernels_compile_for_a_gpu_even_with_a_fp64_temperature(scale_type):
    """Compiles both kernels for an sm_90 GPU ahead of time (no GPU needed), which the
    interpreter never does. torch.compile may hand the temperature scale over as fp64:
    without the kernels' cast to fp32 the running max would turn fp64 inside the loop and
    Triton refuses the loop-carried type change."""
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
    rows = {"T": "i32", "V": "i32", "scale": scale_type, "stride_b": "i64", "stride_t": "i32",
            "ROWS": "constexpr", "BLOCK_V": "constexpr"}
    fwd = {"logits_ptr": "*bf16", "targets_ptr": "*i64", **{k: "*fp32" for k in
           ("logp_ptr", "entropy_ptr", "m_ptr", "log2d_ptr")}, **rows}
    bwd = {"logits_ptr": "*bf16", "targets_ptr": "*i64", **{k: "*fp32" for k in
           ("m_ptr", "log2d_ptr", "entropy_ptr", "glogp_ptr", "gent_ptr")}, "dlogits_ptr": "*bf16",
           **rows, "dstride_b": "i64", "dstride_t": "i32"}
    for kernel, signature in ((lp._fwd_kernel, fwd), (lp._bwd_kernel, bwd)):
        src = ASTSource(fn=kernel, signature=signature, constexprs={"ROWS": 1, "BLOCK_V": 4096})
        compiled = lp.triton.compile(src, target=GPUTarget("cuda", 90, 32), options={"num_warps": 8})
        assert "cubin" in compiled.asm


@pytest.mark.skipif(not TRITON_HERE, reason=TRITON_SKIP)
def test_triton_temperature_of_any_float_type(seed):
    # numpy and 0-d tensor temperatures (float64) give exactly the Python float's answer
    logits = 3 * torch.randn(9, 400, device=device("triton"))
    targets = torch.randint(0, 400, (9,), device=logits.device)
    expected = token_logprobs_and_entropy(logits, targets, 0.7)
    for temperature in (np.float64(0.7), torch.tensor(0.7, dtype=torch.float64)):
        got = token_logprobs_and_entropy(logits, targets, temperature)
        torch.testing.assert_close(got, expected, rtol=0, atol=0, msg=f"seed={seed}")


def test_torch_path_under_torch_compile(seed, monkeypatch):
    monkeypatch.setenv("KERNELS_BACKEND", "torch")
    logits = 3 * torch.randn(6, 50)
    targets = torch.randint(0, 50, (6,))
    compiled = torch.compile(token_logprobs_and_entropy, backend="aot_eager")
    x = logits.clone().requires_grad_()
    logp, H = compiled(x, targets, torch.tensor(0.7, dtype=torch.float64))
    (logp.sum() + H.sum()).backward()
    ref = logits.clone().requires_grad_()
    ref_logp, ref_H = token_logprobs_and_entropy(ref, targets, 0.7)
    (ref_logp.sum() + ref_H.sum()).backward()
    torch.testing.assert_close((logp, H, x.grad), (ref_logp, ref_H, ref.grad), msg=f"seed={seed}")


# --------------------------------------------------------------------------- memory
PEAK_SCRIPT = textwrap.dedent("""
    import os, sys, torch
    sys.path.insert(0, {root!r})
    from kernels import token_logprobs_and_entropy
    def status(key):  # bytes, from the kernel's own accounting of resident memory
        return next(int(l.split()[1]) * 1024 for l in open("/proc/self/status") if l.startswith(key))
    N, V = 2048, 8192
    token_logprobs_and_entropy(torch.randn(8, V, requires_grad=True), torch.zeros(8, dtype=torch.long))[0].sum().backward()
    targets = torch.randint(0, V, (N,))
    open("/proc/self/clear_refs", "w").write("5")  # reset the peak (VmHWM) to now
    before = status("VmRSS")
    logits = torch.randn(N, V).requires_grad_()
    logp, H = token_logprobs_and_entropy(logits, targets)
    (logp.sum() + H.sum()).backward()
    print((status("VmHWM") - before) / (2 * logits.numel() * 4))
""")


@pytest.mark.skipif(not os.path.exists("/proc/self/clear_refs"), reason="needs Linux /proc")
def test_cpu_path_peak_memory_close_to_logits_plus_grad():
    # a fresh process so memory freed by other tests cannot hide allocations
    env = dict(os.environ, KERNELS_BACKEND="torch", OMP_NUM_THREADS="1")
    res = subprocess.run([sys.executable, "-c", PEAK_SCRIPT.format(root=ROOT)], env=env,
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    ratio = float(res.stdout.strip().splitlines()[-1])
    # eager log_softmax + entropy holds ~4 extra fp32 (N, V) tensors: a ratio near 3
    assert ratio <= 1.5, f"peak / (logits + grad) = {ratio:.2f}"


# --------------------------------------------------------------------------- scripts
@pytest.mark.skipif(CUDA, reason="checks the no-CUDA exit")
def test_gpu_check_script_says_no_cuda_and_exits_0(tmp_path):
    res = subprocess.run(["bash", os.path.join(ROOT, "bench", "gpu_check.sh"), str(tmp_path / "r.txt")],
                         cwd=ROOT, capture_output=True, text=True, timeout=60,
                         env={**os.environ, "PYTHON": sys.executable})  # the interpreter running the tests
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip().splitlines() == ["gpu_check: no CUDA device visible; nothing to check"]


def test_gpu_kernel_check_logic_on_a_tiny_cpu_case():
    env = dict(os.environ, OMP_NUM_THREADS="1", KERNELS_BACKEND="torch")
    res = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "gpu_kernel_check.py"), "--cpu-smoke"],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    assert "FAIL" not in res.stdout and res.stdout.count("PASS") >= 3, res.stdout


# --------------------------------------------------------------------------- interpreter run
@pytest.mark.skipif(lp.triton is None, reason="triton is not installed")
@pytest.mark.skipif(TRITON_HERE, reason="triton tests already run in this process")
def test_triton_kernels_under_interpreter():
    env = dict(os.environ, TRITON_INTERPRET="1", OMP_NUM_THREADS="1")
    env.pop("KERNELS_BACKEND", None)
    res = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                          "-k", "triton and not interpreter and not without_triton", __file__],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    summary = res.stdout.strip().splitlines()[-1] if res.stdout.strip() else res.stderr
    assert res.returncode == 0, res.stdout[-4000:] + res.stderr[-2000:]
    # every triton test must have run: none skipped, a sensible number passed
    passed = int(re.search(r"(\d+) passed", summary).group(1))
    assert "skipped" not in summary and passed >= 20, summary
