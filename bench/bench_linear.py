"""Peak memory and time of log-prob + entropy from (hidden, LM-head weight): both
chunkings of kernels/linear_logprobs.py ("vocab" column chunks, "rows" row chunks)
against materialised logits (hidden @ W.T, log_softmax, gather, entropy).

Run:  nice -n 19 python bench/bench_linear.py --threads 2
      (on CPU: N=4096, d=256, V=32768, fp32; with CUDA: N=16384, d=1024, V=151936, bf16)

Where the defaults came from. VOCAB_CHUNK_ELEMENTS = 2**24 (C = 4096 columns at N = 4096)
was measured with this script at N=4096, d=256, V=32768 on a shared 2-core machine:
with 1 thread C=512 was fastest (fwd+bwd 0.52x the materialised time, C=4096 0.74x),
its 8 MiB buffers staying in cache; with 2 threads on the busy machine C=512's forward
alone was 1.9x slower than materialised (each of its ~450 small parallel ops waits for a
descheduled thread) while C=4096 stayed at 0.78x. So the robust C=4096 is the default.
The rows path came later; one round with 1 thread on a busy machine (--rounds 1
--chunks 4096 --row-chunks 1024) had it ahead: fwd+bwd 0.37x the materialised time and
137 MiB, against 0.49x and 239 MiB for C=4096. Worth re-measuring before changing the
CPU default (which would also need a CPU row budget: ROW_CHUNK_ELEMENTS is 16384 rows
at V=32768).
The GPU defaults (the rows path, ROW_CHUNK_ELEMENTS) are not measured yet: run this
script, or bench/gpu_check.sh, on a GPU.

How memory is measured. Each (path, mode, chunk) case runs in a fresh subprocess, so no
allocator state leaks between cases. The worker allocates the inputs, records its
resident set size (RSS, /proc/self/statm), runs the case once, and reports
    peak extra = ru_maxrss after the call - RSS before it
i.e. the largest amount of memory the process held on top of its inputs: logits,
temporaries, the autograd graph's saved tensors and the new .grad tensors (those are
the same size in both paths). torch's CPU allocations are invisible to tracemalloc,
which is why RSS is used. The worker checks that the high-water mark before the call
(importing torch, allocating the inputs) was exceeded by the call, else the number would
be too low and the table flags it. A tiny warm-up call first takes one-off library set-up
out of the measurement. On CUDA the same quantity is torch.cuda.max_memory_allocated() - memory_allocated().

How time is measured. Cases are interleaved over --rounds rounds (the machine is shared),
each worker times --repeats calls after the one that measured memory; the table shows
the median over all of a case's calls. "fwd" is the forward with autograd on (what a
training step holds until backward); "fwd+bwd" adds backward of sum(logp) + sum(entropy).
"""
import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from kernels.linear_logprobs import (  # noqa: E402
    linear_logprobs_and_entropy, linear_logprobs_and_entropy_reference)

MiB = 2**20


def rss_bytes():
    return int(open("/proc/self/statm").read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def maxrss_bytes():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux reports KiB


def path_fn(path, chunk):
    if path == "materialised":
        return linear_logprobs_and_entropy_reference
    if path == "logits+kernel":  # materialised logits through the project's logits kernel
        from kernels import token_logprobs_and_entropy
        return lambda h, w, t: token_logprobs_and_entropy(h @ w.t(), t)
    return lambda h, w, t: linear_logprobs_and_entropy(h, w, t, chunk_size=chunk)


def worker(a):
    """One case in this process; prints one JSON line."""
    torch.set_num_threads(a.threads)
    dev, dtype = ("cuda", torch.bfloat16) if torch.cuda.is_available() else ("cpu", torch.float32)
    g = torch.Generator(device=dev).manual_seed(0)
    hidden = torch.randn(a.N, a.d, device=dev, generator=g).to(dtype).requires_grad_()  # (N, d)
    weight = (torch.randn(a.V, a.d, device=dev, generator=g) * a.d**-0.5).to(dtype).requires_grad_()  # (V, d)
    targets = torch.randint(0, a.V, (a.N,), device=dev, generator=g)  # (N,)
    fn = path_fn(a.path, a.chunk)

    def call():
        hidden.grad = weight.grad = None
        logp, ent = fn(hidden, weight, targets)
        if a.mode == "fwd+bwd":
            (logp.sum() + ent.sum()).backward()
        if dev == "cuda":
            torch.cuda.synchronize()
        return logp, ent  # outputs (and, for "fwd", the graph) stay alive until here

    with torch.no_grad():  # one-off library set-up (matmul workspaces) out of the measurement
        fn(hidden[:8], weight[:300], targets[:8] % 300)
    hidden.grad = weight.grad = None
    if dev == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        call()
        peak, clean = torch.cuda.max_memory_allocated() - base, True
    else:
        base, before = rss_bytes(), maxrss_bytes()
        call()
        after = maxrss_bytes()
        peak, clean = after - base, after > before  # else an earlier high-water mark hid the call's
    times = []
    for _ in range(a.repeats):
        t0 = time.perf_counter()
        call()
        times.append(time.perf_counter() - t0)
    print(json.dumps({"peak": peak, "clean": clean, "times": times}))


def run_case(a, path, mode, chunk):
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", "--path", path, "--mode", mode,
           "--chunk", str(chunk), "--N", str(a.N), "--d", str(a.d), "--V", str(a.V),
           "--threads", str(a.threads), "--repeats", str(a.repeats)]
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        print(f"  {path} {mode} chunk={chunk} failed:\n{out.stderr[-2000:]}", file=sys.stderr)
        return None
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(a):
    gpu = torch.cuda.is_available()
    sizes = (16384, 1024, 151936) if gpu else (4096, 256, 32768)  # the (N, d, V)
    a.N, a.d, a.V = (x if x is not None else y for x, y in zip((a.N, a.d, a.V), sizes))
    cases = [("materialised", 0)]
    if a.logits_kernel:
        cases.append(("logits+kernel", 0))
    cases += [("vocab", c) for c in a.chunks] + [("rows", r) for r in a.row_chunks]
    modes = ["fwd", "fwd+bwd"]
    print(f"N={a.N} d={a.d} V={a.V} {'cuda bf16' if gpu else 'cpu fp32'} threads={a.threads} "
          f"rounds={a.rounds} repeats={a.repeats}  (N*V fp32 logits = {a.N * a.V * 4 / MiB:.0f} MiB)")
    res = {}
    for r in range(a.rounds):
        for mode in modes:
            for path, chunk in cases:
                got = run_case(a, path, mode, chunk)
                if got is None:
                    continue
                entry = res.setdefault((path, chunk, mode), {"peak": [], "times": [], "clean": True})
                entry["peak"].append(got["peak"])
                entry["times"] += got["times"]
                entry["clean"] &= got["clean"]
        print(f"  round {r + 1}/{a.rounds} done", flush=True)
    print(f"\n{'path':<14}{'chunk':>7}{'mode':>9}{'peak extra MiB':>16}{'x mat.':>8}"
          f"{'median s':>10}{'x mat.':>8}")
    for mode in modes:
        ref = res.get(("materialised", 0, mode))
        for path, chunk in cases:
            e = res.get((path, chunk, mode))
            if e is None:
                continue
            peak, med = max(e["peak"]), statistics.median(e["times"])
            rp = f"{peak / max(max(ref['peak']), 1):.3f}" if ref else "-"
            rt = f"{med / statistics.median(ref['times']):.2f}" if ref else "-"
            flag = "" if e["clean"] else "  (hidden by an earlier RSS peak: too low)"
            print(f"{path:<14}{chunk or '-':>7}{mode:>9}{peak / MiB:>16.1f}{rp:>8}{med:>10.3f}{rt:>8}{flag}")


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    # sizes (default: the CPU or GPU sizes)
    p.add_argument("--N", type=int, default=None, help="rows (tokens)")
    p.add_argument("--d", type=int, default=None, help="hidden size")
    p.add_argument("--V", type=int, default=None, help="vocabulary size")
    # what to run
    p.add_argument("--chunks", type=int, nargs="+", default=[512, 1024, 2048, 4096],
                   help="vocabulary chunk widths to try for the vocab path")
    p.add_argument("--row-chunks", type=int, nargs="*", default=[1024, 4096],
                   help="rows per chunk to try for the rows path")
    p.add_argument("--logits-kernel", action="store_true",
                   help="also time materialised logits through kernels.token_logprobs_and_entropy")
    p.add_argument("--threads", type=int, default=torch.get_num_threads(), help="torch CPU threads")
    p.add_argument("--rounds", type=int, default=3, help="interleaved rounds over all cases")
    p.add_argument("--repeats", type=int, default=2, help="timed calls per case per round")
    # internal: one case in a subprocess
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--path", default="vocab", help=argparse.SUPPRESS)
    p.add_argument("--mode", default="fwd+bwd", help=argparse.SUPPRESS)
    p.add_argument("--chunk", type=int, default=2048, help=argparse.SUPPRESS)
    args = p.parse_args()
    worker(args) if args.worker else main(args)
