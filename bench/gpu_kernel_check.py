"""Checks of kernels/ at the sizes that matter, on a CUDA GPU; bench/gpu_check.sh runs it.

    python bench/gpu_kernel_check.py --report gpu_check_report.txt   # CUDA, a few minutes
    python bench/gpu_kernel_check.py --cpu-smoke                     # tiny sizes on CPU: the logic only

Parts, each a table in the report and a PASS/FAIL line:
  correctness  N=32768, V=151936, bf16, T=1 and 0.7: the Triton kernels against fp32
               PyTorch on all rows and against float64 on ~512 rows: the first and last
               rows, rows whose element offsets cross 2^31 and 2^32 (int32 overflow), rows
               with -inf bands, a row whose max and target sit in the last, partial
               vocabulary block. Outputs are NaN-filled before each call, so an element
               a kernel forgets to write fails.
  bandwidth    forward alone and backward alone against a device copy (GB/s, % of copy;
               triton.testing.do_bench), and a small sweep of BLOCK_V x num_warps.
  compile      eager, torch.compile(eager), ours and torch.compile(ours) at N=16384:
               fwd+bwd time and peak memory; ours compiled must match ours eager.
  hidden       kernels/linear_logprobs.py from hidden states at d=1024 and 4096 (both
               chunkings) against materialised logits: values, gradients, time, memory.
Exit status 1 if any part fails. --cpu-smoke runs correctness and hidden on tiny sizes
(with 2^15 and 2^16 standing in for 2^31 and 2^32), for the tests on a machine without GPU.
"""
import argparse
import math
import os
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from bench_logprobs import eager  # noqa: E402  (this script's own folder)
from kernels import linear_logprobs_and_entropy, token_logprobs_and_entropy  # noqa: E402
from kernels import logprobs as lp  # noqa: E402
from kernels.linear_logprobs import linear_logprobs_and_entropy_reference  # noqa: E402


class Report:
    """Prints each line and appends it to the report file; remembers failed parts."""

    def __init__(self, path):
        self.path, self.failed = path, []

    def line(self, text=""):
        print(text, flush=True)
        if self.path:
            with open(self.path, "a") as f:
                f.write(text + "\n")

    def verdict(self, part, ok, detail):
        self.line(f"{'PASS' if ok else 'FAIL'} {part}: {detail}")
        if not ok:
            self.failed.append(part)


def close(x, ref, rtol, atol):
    """(all within atol + rtol |ref|, max abs error), a row chunk at a time: a float64
    copy of 32768 x 151936 elements would not fit. NaN anywhere counts as not close."""
    ok, worst = True, 0.0
    for sl in row_chunks(len(x)):
        err = (x[sl].double() - ref[sl].double()).abs()
        ok &= bool((err <= atol + rtol * ref[sl].double().abs()).all())  # False at NaN
        worst = max(worst, err.nan_to_num(float("inf")).max().item())
    return ok, worst


def peak_mib(fn):
    """GPU memory a call holds at its peak beyond what was allocated before it."""
    fn()  # warm-up (compilation, autotuning)
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    fn()
    torch.cuda.synchronize()
    return (torch.cuda.max_memory_allocated() - base) / 2**20


def row_chunks(N, rows=2048):
    return [slice(i, min(i + rows, N)) for i in range(0, N, rows)]


# ----------------------------------------------------------------------------- correctness
def special_rows(N, V, offsets):
    """First, last, and the rows whose element offsets r V .. (r + 1) V cross each offset."""
    rows = {0, 1, N - 2, N - 1}
    for o in offsets:
        rows |= {r for r in (o // V - 1, o // V, o // V + 1) if 0 <= r < N}
    return sorted(rows)


def make_logits(N, V, dtype, device, offsets, gen):
    """(N, V) logits of std 3 with traps, targets (N,), and the rows to check in float64."""
    logits = torch.empty(N, V, dtype=dtype, device=device)
    for sl in row_chunks(N):  # no fp32 (N, V) temporary
        logits[sl] = (3 * torch.randn(sl.stop - sl.start, V, device=device, generator=gen)).to(dtype)
    targets = torch.randint(0, V, (N,), device=device, generator=gen)
    edges = special_rows(N, V, offsets)
    ban_a, ban_b, last_max = edges[1], edges[len(edges) // 2], edges[-2]
    logits[ban_a, V // 10: V // 2] = float("-inf")       # a band of banned tokens
    logits[ban_b, : V - 7] = float("-inf")               # all but the last 7 tokens banned
    targets[ban_a], targets[ban_b] = V - 1, V - 3        # targets stay allowed
    logits[last_max, V - 1] = 30.0                       # max and target in the last block
    targets[last_max] = V - 1
    randoms = torch.randperm(N, generator=torch.Generator().manual_seed(1))[: max(0, 512 - len(edges))]
    check = sorted(set(edges) | set(randoms.tolist()))
    return logits, targets, torch.tensor(check, device=device)


def fp32_reference(logits, targets, temperature, g_logp, g_H):
    """Eager fp32 PyTorch, a row chunk at a time -> logp, entropy (N,) and the gradient
    (N, V), rounded to the logits' dtype as the kernels' is."""
    logp, H = torch.empty(len(logits), device=logits.device), torch.empty(len(logits), device=logits.device)
    grad = torch.empty(logits.shape, dtype=logits.dtype, device=logits.device)
    for sl in row_chunks(len(logits)):
        x = logits[sl].float().requires_grad_()
        a, b = lp.reference_logprobs_and_entropy(x, targets[sl], temperature)
        (g_logp[sl] * a + g_H[sl] * b).sum().backward()
        logp[sl], H[sl], grad[sl] = a.detach(), b.detach(), x.grad  # grad rounded like ours
    return logp, H, grad


def check_correctness(report, N, V, device, offsets):
    gen = torch.Generator(device=device).manual_seed(0)
    logits, targets, rows = make_logits(N, V, torch.bfloat16, device, offsets, gen)
    g_logp = torch.randn(N, device=device, generator=gen)
    g_H = torch.randn(N, device=device, generator=gen)
    report.line(f"N={N} V={V} bf16, float64 rows: {len(rows)} (edges {special_rows(N, V, offsets)})")
    report.line(f"{'T':>4} {'vs':>8} {'logp err':>10} {'entropy err':>12} {'grad err':>10}")
    for T in (1.0, 0.7):
        nan = lambda *shape: torch.full(shape, float("nan"), device=device)  # noqa: E731
        logp, H, stats = lp.logprobs_entropy_forward(logits, targets, T, out=(nan(N), nan(N), nan(2, N)))
        dlogits = torch.full_like(logits, float("nan"))
        lp.logprobs_entropy_backward(logits, targets, stats, H, g_logp, g_H, T, out=dlogits)
        written = bool(logp.isfinite().all() and H.isfinite().all() and stats.isfinite().all()
                       and not dlogits.isnan().any())
        # all rows against fp32 PyTorch
        r_logp, r_H, r_grad = fp32_reference(logits, targets, T, g_logp, g_H)
        ok32 = [close(logp, r_logp, 1e-4, 2e-3), close(H, r_H, 1e-4, 2e-3),
                close(dlogits, r_grad, 2e-2, 1e-6)]
        # the chosen rows against float64
        x = logits[rows].double().requires_grad_()
        a, b = lp.reference_logprobs_and_entropy(x, targets[rows], T)
        (g_logp[rows].double() * a + g_H[rows].double() * b).sum().backward()
        ok64 = [close(logp[rows], a.detach(), 1e-5, 1e-3), close(H[rows], b.detach(), 1e-5, 1e-3),
                close(dlogits[rows], x.grad, 2e-2, 1e-6)]
        for name, res in (("fp32", ok32), ("float64", ok64)):
            report.line(f"{T:>4} {name:>8} " + " ".join(f"{e:>10.2e}" for _, e in res))
        ok = written and all(o for o, _ in ok32 + ok64)
        report.verdict(f"correctness T={T}", ok, "every output written" if written else "NaN left in an output")
    del logits, dlogits


# ----------------------------------------------------------------------------- bandwidth
def check_bandwidth(report, N, V):
    from triton.testing import do_bench
    gen = torch.Generator(device="cuda").manual_seed(0)
    logits = (3 * torch.randn(N, V, device="cuda", generator=gen)).to(torch.bfloat16)  # (N, V)
    targets = torch.randint(0, V, (N,), device="cuda", generator=gen)
    g = torch.randn(2, N, device="cuda", generator=gen)
    out = (torch.empty(N, device="cuda"), torch.empty(N, device="cuda"), torch.empty(2, N, device="cuda"))
    dst = torch.empty_like(logits)
    nbytes = logits.numel() * logits.element_size()

    def fwd(**tile):
        return lambda: lp.logprobs_entropy_forward(logits, targets, 0.7, out=out, **tile)

    def bwd(**tile):
        return lambda: lp.logprobs_entropy_backward(logits, targets, out[2], out[1], g[0], g[1], 0.7,
                                                    out=dst, **tile)

    fwd()()
    copy_gbs = 2 * nbytes / do_bench(lambda: dst.copy_(logits)) / 1e6
    report.line(f"N={N} V={V} bf16 (each call includes the host-side target range check)")
    report.line(f"{'op':>10} {'BLOCK_V':>8} {'warps':>6} {'ms':>8} {'GB/s':>8} {'%copy':>6}")
    report.line(f"{'copy':>10} {'':>8} {'':>6} {2 * nbytes / copy_gbs / 1e6:8.3f} {copy_gbs:8.0f} {100:6.0f}")
    pct = {}
    # a small sweep (each tile is one more compile); bench/bench_logprobs.py sweeps wider
    tiles = [{}] + [dict(block_v=b, num_warps=w) for b in (2048, 4096, 8192) for w in (4, 8, 16)]
    for tile in tiles:
        for op, fn, moved in (("fwd", fwd, nbytes), ("bwd", bwd, 2 * nbytes)):
            ms = do_bench(fn(**tile))
            gbs = moved / ms / 1e6
            if not tile:
                pct[op] = 100 * gbs / copy_gbs
            report.line(f"{op:>10} {tile.get('block_v', 'default'):>8} {tile.get('num_warps', ''):>6} "
                        f"{ms:8.3f} {gbs:8.0f} {100 * gbs / copy_gbs:6.1f}")
    report.verdict("bandwidth", pct["fwd"] >= 90 and pct["bwd"] >= 85,
                   f"default tile: fwd {pct['fwd']:.0f}% and bwd {pct['bwd']:.0f}% of copy "
                   "(targets 90% and 85%, bench/bench_logprobs.py)")


# ----------------------------------------------------------------------------- compile
def check_compile(report, N, V):
    from triton.testing import do_bench
    gen = torch.Generator(device="cuda").manual_seed(0)
    logits = (3 * torch.randn(N, V, device="cuda", generator=gen)).to(torch.bfloat16).requires_grad_()
    targets = torch.randint(0, V, (N,), device="cuda", generator=gen)
    g = torch.randn(2, N, device="cuda", generator=gen)
    impls = {"eager": eager, "compile": torch.compile(eager), "ours": token_logprobs_and_entropy,
             "ours+compile": torch.compile(token_logprobs_and_entropy)}
    report.line(f"N={N} V={V} bf16, fwd+bwd, T=0.7 (peak: memory beyond the inputs)")
    report.line(f"{'impl':>13} {'ms':>8} {'peak MiB':>9}")
    results = {}
    for name, fn in impls.items():
        def run(fn=fn):
            logp, H = fn(logits, targets, 0.7)
            return (logp, H, *torch.autograd.grad((logp, H), logits, (g[0], g[1])))
        try:
            results[name] = run()
            ms, peak = do_bench(run), peak_mib(run)
            report.line(f"{name:>13} {ms:8.2f} {peak:9.0f}")
        except Exception as e:  # say which one failed, go on
            report.line(f"{name:>13} failed: {type(e).__name__}: {str(e)[:300]}")
    ok = "ours+compile" in results and all(
        close(a, b, 1e-5, 1e-5)[0] for a, b in zip(results["ours+compile"], results["ours"]))
    report.verdict("compile", ok, "torch.compile(ours) matches ours in eager mode" if ok else
                   "torch.compile(ours) failed or differs from eager")


# ----------------------------------------------------------------------------- hidden states
def check_hidden(report, N, V, ds, device, dtype):
    report.line(f"N={N} V={V} {dtype}, fwd+bwd against materialised logits (fp32 log_softmax)")
    report.line(f"{'d':>5} {'path':>13} {'ms':>8} {'peak MiB':>9} {'logp err':>9} {'H err':>9} "
                f"{'dh rel':>8} {'dW rel':>8}")
    for d in ds:
        gen = torch.Generator(device=device).manual_seed(d)
        hidden = torch.randn(N, d, device=device, generator=gen).to(dtype)                 # (N, d)
        weight = (2 * d**-0.5 * torch.randn(V, d, device=device, generator=gen)).to(dtype)  # (V, d)
        targets = torch.randint(0, V, (N,), device=device, generator=gen)
        g = torch.randn(2, N, device=device, generator=gen)
        paths = {"materialised": linear_logprobs_and_entropy_reference,
                 "rows": lambda h, w, t: linear_logprobs_and_entropy(h, w, t, chunk_over="rows"),
                 "vocab": lambda h, w, t: linear_logprobs_and_entropy(h, w, t, chunk_over="vocab")}
        results, ok = {}, True
        for name, fn in paths.items():
            h, w = hidden.clone().requires_grad_(), weight.clone().requires_grad_()

            def run(fn=fn, h=h, w=w):
                logp, H = fn(h, w, targets)
                return (logp, H, *torch.autograd.grad((logp, H), (h, w), (g[0], g[1])))

            t0 = time.perf_counter()
            results[name] = run()
            if device == "cuda":
                from triton.testing import do_bench
                ms, peak = do_bench(run, rep=200), peak_mib(run)
            else:
                ms, peak = 1e3 * (time.perf_counter() - t0), float("nan")
            ref = results["materialised"]
            errs = [close(results[name][i], ref[i], 0, 5e-2) for i in (0, 1)]
            rel = [((results[name][i].float() - ref[i].float()).abs().max()
                    / ref[i].float().abs().max()).item() for i in (2, 3)]
            ok &= all(o for o, _ in errs) and all(r < 3e-2 for r in rel)
            report.line(f"{d:>5} {name:>13} {ms:8.1f} {peak:9.0f} {errs[0][1]:9.2e} {errs[1][1]:9.2e} "
                        f"{rel[0]:8.1e} {rel[1]:8.1e}")
        report.verdict(f"hidden d={d}", ok, "both chunkings match the materialised logits "
                       "(bf16 tolerances of tests/test_kernels_linear.py)")


def main(args):
    report = Report(args.report)
    if args.cpu_smoke:
        report.line(f"== correctness (CPU smoke, backend {lp._pick_backend(torch.empty(0))})")
        check_correctness(report, 80, 1000, "cpu", offsets=(2**15, 2**16))
        report.line("== bandwidth, compile: CUDA only, skipped")
        report.line("== hidden (CPU smoke)")
        check_hidden(report, 40, 500, (16, 32), "cpu", torch.bfloat16)
    else:
        assert torch.cuda.is_available(), "needs CUDA (or --cpu-smoke)"
        report.line(f"== device: {torch.cuda.get_device_name()}, torch {torch.__version__}")
        report.line("== correctness")
        check_correctness(report, 32768, 151936, "cuda", offsets=(2**31, 2**32))
        torch.cuda.empty_cache()
        report.line("== bandwidth")
        check_bandwidth(report, 16384, 151936)
        torch.cuda.empty_cache()
        report.line("== compile")
        check_compile(report, 16384, 151936)
        torch.cuda.empty_cache()
        report.line("== hidden")
        check_hidden(report, 8192, 151936, (1024, 4096), "cuda", torch.bfloat16)
    report.line(f"gpu_kernel_check: {'FAIL ' + ', '.join(report.failed) if report.failed else 'all PASS'}")
    return 1 if report.failed else 0


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--report", default=None, help="append every table and verdict to this file")
    p.add_argument("--cpu-smoke", action="store_true", help="tiny sizes on CPU (checks the logic only)")
    sys.exit(main(p.parse_args()))
