"""Benchmark kernels/logprobs.py: log-prob of the chosen token + entropy from logits.

    nice python bench/bench_logprobs.py                # CPU sizes, and GPU sizes if CUDA is present
    nice python bench/bench_logprobs.py --quick        # one small CPU case, a smoke test
    nice python bench/bench_logprobs.py --no-compile   # skip torch.compile (slow to build on CPU)
    python bench/bench_logprobs.py --gpu-only          # GPU sizes and the tile sweep only

Compares, forward ("fwd") and forward + backward ("fwd+bwd"):
  eager    the chapter's code: log_softmax(logits.float() / T), gather, -(p * log p).sum
  compile  torch.compile of that same function
  ours     kernels.token_logprobs_and_entropy (Triton on CUDA, chunked PyTorch on CPU)
Columns:
  ms       median wall time (CPU: perf_counter over --reps runs, the implementations
           taking turns; GPU: triton do_bench)
  cpu ms   (CPU) median process CPU time, summed over threads: the work done, which
           other jobs on a shared machine disturb much less than the wall time
  GB/s     minimum traffic / time. Minimum traffic: fwd reads the logits once (N V b bytes);
           fwd+bwd also reads them again and writes their gradient (3 N V b in all).
  %copy    (GPU) GB/s as a share of a device-to-device copy of the logits, measured here
  peak MiB memory held during one call, counting the logits (and the gradient for fwd+bwd)
  x min    peak / (logits) for fwd, peak / (logits + gradient) for fwd+bwd
Peak memory. GPU: torch.cuda.max_memory_allocated. CPU: torch's CPU allocator has no
peak counter and tracemalloc does not see it, so each CPU case runs once more in a fresh
process that reads the kernel's resident-set high-water mark (VmHWM in /proc/self/status,
reset through /proc/self/clear_refs after warm-up), with MALLOC_MMAP_THRESHOLD_=65536 so
that every tensor above 64 KiB is its own mapping, returned to the OS when freed (else
glibc could reuse already-resident memory and hide an allocation). Linux only.
Forward runs with logits.requires_grad=True, as in training (autograd saves what it needs).
Targets: CPU fwd+bwd x min <= 1.5 and ours no slower than eager; GPU (N=16384, V=151936,
bf16) fwd >= 90% and fwd+bwd >= 85% of copy bandwidth, >= 3x eager, >= 1.3x compile.
Tile sweep (GPU): the Triton forward and backward alone at N=16384, V=151936, bf16 for
each BLOCK_V x num_warps, as GB/s and % of copy; the kernels' default is _tile's choice.

Threads on a shared CPU. Each chunk of the CPU path runs ~10 short ops, each an OpenMP
parallel region, so it suffers when OMP_NUM_THREADS exceeds the free cores: on a loaded
2-core machine at N=4096, V=32768, fwd+bwd took 0.74 s with 1 thread and 25 s with 2.
"""
import argparse
import os
import statistics
import subprocess
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from kernels import logprobs as lp  # noqa: E402
from kernels import token_logprobs_and_entropy  # noqa: E402

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
CPU_CASES = [(1024, 8192, "fp32"), (4096, 32768, "fp32"), (4096, 32768, "bf16")]
GPU_CASES = [(n, v, d) for n in (4096, 16384) for v in (32768, 151936) for d in ("bf16", "fp32")]
MODES = ("fwd", "fwd+bwd")


def eager(logits, targets, temperature=1.0):
    logp_all = F.log_softmax(logits.float() / temperature, dim=-1)  # (N, V) fp32
    logp = logp_all.gather(-1, targets[:, None]).squeeze(-1)       # (N,)
    entropy = -(logp_all.exp() * logp_all).sum(-1)                 # (N,)
    return logp, entropy


def implementations(use_compile):
    impls = {"eager": eager, "ours": token_logprobs_and_entropy}
    if use_compile:
        impls["compile"] = torch.compile(eager)
    return impls


def inputs(N, V, dtype, device):
    logits = (3 * torch.randn(N, V, device=device)).to(DTYPES[dtype]).requires_grad_()  # (N, V)
    targets = torch.randint(0, V, (N,), device=device)                                 # (N,)
    grads = (torch.randn(N, device=device), torch.randn(N, device=device))             # d logp, d H
    return logits, targets, grads


def step(fn, logits, targets, grads, mode):
    out = fn(logits, targets)
    if mode == "fwd+bwd":
        torch.autograd.grad(out, logits, grads)


def min_bytes(N, V, dtype, mode):
    b = DTYPES[dtype].itemsize
    rows = N * (8 + 12)  # targets in, logp + entropy + lse out
    return (N * V * b if mode == "fwd" else 3 * N * V * b) + rows


def time_ms(fns, device, reps):
    """{name: fn} -> {name: (median wall ms, median CPU ms or None on GPU)}.

    On CPU the functions take turns, rep by rep, so that other jobs on a shared machine
    slow them alike instead of spoiling whichever happened to run at the wrong moment."""
    if device == "cuda":
        import triton.testing
        return {k: (triton.testing.do_bench(fn, return_mode="median"), None) for k, fn in fns.items()}
    for fn in fns.values():
        fn()  # warm-up (and compilation)
    wall, cpu = ({k: [] for k in fns} for _ in range(2))
    for _ in range(reps):
        for k, fn in fns.items():
            t0, c0 = time.perf_counter(), time.process_time()
            fn()
            wall[k].append(time.perf_counter() - t0)
            cpu[k].append(time.process_time() - c0)
    return {k: (1e3 * statistics.median(wall[k]), 1e3 * statistics.median(cpu[k])) for k in fns}


# ----------------------------------------------------------------------------- peak memory
def gpu_peak_bytes(fn, logits):
    fn()  # warm-up (compilation, autotuning)
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated() - logits.numel() * logits.element_size()
    fn()
    torch.cuda.synchronize()
    return torch.cuda.max_memory_allocated() - before


def _proc_status(key):
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith(key))


def cpu_peak_child(impl, N, V, dtype, mode, use_compile):
    """Runs in a fresh process (see the module docstring); prints the peak in bytes."""
    fn = implementations(use_compile)[impl]
    logits, targets, grads = inputs(N, V, dtype, "cpu")
    step(fn, logits, targets, grads, mode)  # warm-up
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # reset VmHWM to the current resident set
    before = _proc_status("VmRSS") - logits.numel() * logits.element_size()
    step(fn, logits, targets, grads, mode)
    print(_proc_status("VmHWM") - before)


def cpu_peak_bytes(impl, N, V, dtype, mode, use_compile):
    env = dict(os.environ, MALLOC_MMAP_THRESHOLD_="65536")
    cmd = [sys.executable, os.path.abspath(__file__), "--peak-child", impl, str(N), str(V), dtype, mode]
    res = subprocess.run(cmd + ([] if use_compile else ["--no-compile"]), env=env,
                         capture_output=True, text=True)
    if res.returncode != 0:
        print(f"  peak-memory child failed for {impl} {mode}: {res.stderr.strip()[-300:]}")
        return float("nan")
    return int(res.stdout.strip().splitlines()[-1])


# ----------------------------------------------------------------------------- table
HEADER = (f"{'device':>6} {'N':>6} {'V':>7} {'dtype':>5} {'impl':>8} {'mode':>8} {'ms':>9} {'cpu ms':>9} "
          f"{'GB/s':>7} {'%copy':>6} {'peak MiB':>9} {'x min':>6}")


def row(device, N, V, dtype, impl, mode, ms, cpu_ms, peak, copy_gbs):
    gbs = min_bytes(N, V, dtype, mode) / (ms * 1e-3) / 1e9
    floor = N * V * DTYPES[dtype].itemsize * (1 if mode == "fwd" else 2)
    pct = f"{100 * gbs / copy_gbs:6.1f}" if copy_gbs else f"{'-':>6}"
    cpu = f"{cpu_ms:9.2f}" if cpu_ms is not None else f"{'-':>9}"
    return (f"{device:>6} {N:>6} {V:>7} {dtype:>5} {impl:>8} {mode:>8} {ms:9.2f} {cpu} {gbs:7.1f} "
            f"{pct} {peak / 2**20:9.1f} {peak / floor:6.2f}")


def copy_gbs(logits):
    """Device-to-device copy bandwidth: reads and writes the logits once."""
    dst = torch.empty_like(logits)
    with torch.no_grad():
        ms, _ = time_ms({"copy": lambda: dst.copy_(logits)}, "cuda", reps=0)["copy"]
    return 2 * logits.numel() * logits.element_size() / (ms * 1e-3) / 1e9


def bench_case(device, N, V, dtype, impls, args):
    logits, targets, grads = inputs(N, V, dtype, device)
    cgbs = copy_gbs(logits) if device == "cuda" else None
    if cgbs:
        print(f"{device:>6} {N:>6} {V:>7} {dtype:>5} {'copy':>8} {'':>8} {'':>9} {'':>9} {cgbs:7.1f}")
    for mode in MODES:
        runs, times = {}, {}
        for impl, fn in impls.items():
            runs[impl] = lambda fn=fn: step(fn, logits, targets, grads, mode)
            try:
                runs[impl]()  # torch.compile can fail on some machines: say so, go on
            except Exception as e:
                print(f"  {impl} {mode} failed: {type(e).__name__}: {str(e)[:200]}")
                del runs[impl]
        times = time_ms(runs, device, args.reps)
        for impl, run in runs.items():
            peak = (gpu_peak_bytes(run, logits) if device == "cuda"
                    else cpu_peak_bytes(impl, N, V, dtype, mode, impl == "compile"))
            print(row(device, N, V, dtype, impl, mode, *times[impl], peak, cgbs), flush=True)
    del logits, grads


def tile_sweep(N, V, dtype):
    """Forward alone and backward alone (the no-autograd helpers) for each Triton tile."""
    import triton.testing
    logits, targets, (g_logp, g_H) = inputs(N, V, dtype, "cuda")
    logits = logits.detach()
    logp, entropy, stats = lp.logprobs_entropy_forward(logits, targets)
    dlogits = torch.empty_like(logits)
    cgbs, nbytes = copy_gbs(logits), logits.numel() * logits.element_size()
    print(f"\ntile sweep, N={N} V={V} {dtype}: copy {cgbs:.0f} GB/s")
    print(f"{'BLOCK_V':>8} {'warps':>6} {'fwd ms':>8} {'fwd %copy':>10} {'bwd ms':>8} {'bwd %copy':>10}")
    for block_v in (1024, 2048, 4096, 8192):
        for num_warps in (4, 8, 16):
            tile = dict(block_v=block_v, num_warps=num_warps)
            fwd = triton.testing.do_bench(lambda: lp.logprobs_entropy_forward(
                logits, targets, out=(logp, entropy, stats), **tile))
            bwd = triton.testing.do_bench(lambda: lp.logprobs_entropy_backward(
                logits, targets, stats, entropy, g_logp, g_H, out=dlogits, **tile))
            pct = [100 * moved / (ms * 1e-3) / 1e9 / cgbs for moved, ms in ((nbytes, fwd), (2 * nbytes, bwd))]
            print(f"{block_v:>8} {num_warps:>6} {fwd:8.3f} {pct[0]:10.1f} {bwd:8.3f} {pct[1]:10.1f}", flush=True)


def main(args):
    print(f"torch {torch.__version__}, threads {torch.get_num_threads()}, reps {args.reps}, "
          f"KERNELS_BACKEND={os.environ.get('KERNELS_BACKEND', 'auto')}, "
          f"load average {os.getloadavg()[0]:.1f} (others' jobs inflate the wall time)")
    impls = implementations(not args.no_compile)
    print(HEADER)
    if not args.gpu_only:
        for N, V, dtype in ([(256, 4096, "fp32")] if args.quick else CPU_CASES):
            bench_case("cpu", N, V, dtype, impls, args)
    if torch.cuda.is_available() and not args.quick:
        for N, V, dtype in GPU_CASES:
            bench_case("cuda", N, V, dtype, impls, args)
            torch.cuda.empty_cache()
        tile_sweep(16384, 151936, "bf16")
    else:
        print("(no CUDA device: GPU cases not run)")


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    # --- what to run
    p.add_argument("--quick", action="store_true", help="one small CPU case only")
    p.add_argument("--gpu-only", action="store_true", help="skip the CPU cases")
    p.add_argument("--no-compile", action="store_true", help="skip the torch.compile column")
    p.add_argument("--reps", type=int, default=5, help="timed CPU runs per cell (median)")
    # --- internal: the fresh process that measures one CPU peak
    p.add_argument("--peak-child", nargs=5, metavar=("IMPL", "N", "V", "DTYPE", "MODE"),
                   help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.peak_child:
        impl, N, V, dtype, mode = args.peak_child
        cpu_peak_child(impl, int(N), int(V), dtype, mode, not args.no_compile)
    else:
        main(args)
