"""Many processes: the few lines of torch.distributed that grpo.py, train.py and harness/sft.py use.

    python train.py ...                              # one process: no process group, every helper is identity
    torchrun --nproc-per-node 2 train.py ...         # 2 ranks: gloo on CPU, NCCL on CUDA (one GPU per rank)

torchrun starts N copies of the script and tells each its RANK and WORLD_SIZE in the
environment; `init` joins them into a process group. Each rank samples its own share of
the groups (a group never spans ranks, so group advantages stay local), and the
objective is the one-process objective on the union of the ranks' batches:
- the model is wrapped in PyTorch's DistributedDataParallel (`wrap`) for the training
  forward only: its backward all-reduces (averages) the gradients, so every rank takes
  the same optimizer step;
- every normaliser that spans the batch is one helper named for what it computes:
  `global_mean` (the loss's denominators), `global_std` (the batch std of the rewards);
- every rank runs the same number of updates (`same_count`) and takes the same decision
  on a non-finite loss (`everywhere_finite`), so that all join every collective;
- `all_sum` / `all_max` reduce plain numbers, as harness/stats.py does for a step's statistics.
Without a process group every helper is the one-process formula (a sum over one rank
is that rank's sum), so one process computes exactly what it would without this file.
"""
import datetime
import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

# How a CPU (gloo) rank waits for a collective: "poll" (see _reduce) or "sleep", gloo's
# and DDP's own wait. Only bench/bench_ddp.py sets it, to measure the difference.
GLOO_WAIT = os.environ.get("GLOO_WAIT", "poll")

# A rank that waits longer than this in a collective raises instead of hanging forever
# (e.g. when another rank died outside torchrun's watch). Generous: a rollout round or an
# evaluation on a busy 2-core machine can take a minute.
TIMEOUT = datetime.timedelta(minutes=10)


def rank_seed(seed, rank):
    """A seed of its own for each rank; rank 0 (the only one in one process) keeps `seed`."""
    return seed + rank * 1_000_000_007


def init(device):
    """Join torchrun's process group if launched by it. Returns the device of this rank:
    on CUDA each rank owns the GPU of its LOCAL_RANK."""
    if "RANK" not in os.environ or active():
        return device
    if device == "cuda":
        local = int(os.environ["LOCAL_RANK"])
        torch.cuda.set_device(local)
        device = f"cuda:{local}"
    dist.init_process_group("nccl" if device.startswith("cuda") else "gloo", timeout=TIMEOUT)
    return device


def close():
    """Leave the process group at the end of a successful run. The barrier first: a rank
    that tears down gloo while another still works (rank 0 writing a checkpoint) can abort
    the whole run at its very end. Not on errors: there the others may never arrive."""
    if active():
        dist.barrier()
        dist.destroy_process_group()


def active():
    return dist.is_available() and dist.is_initialized()


def rank():
    return dist.get_rank() if active() else 0


def world():
    return dist.get_world_size() if active() else 1


def wrap(model):
    """The module to run the training forward through: DDP under torchrun, else the model.
    DDP copies rank 0's weights to every rank here, and from then on its backward
    all-reduces (averages) the gradients bucket by bucket as soon as a bucket is ready,
    overlapping with the rest of the backward; our 1.8 MB of gradients make two buckets
    (DDP caps the first at 1 MB). On gloo a comm hook does that averaging while polling
    (see _reduce). The tied embedding / head weight is one parameter: its
    gradient from both uses is summed by autograd first, then reduced once."""
    if not active():
        return model
    device = next(model.parameters()).device
    device_ids = [device.index] if device.type == "cuda" else None
    ddp = _DDP(model, device_ids=device_ids)
    if dist.get_backend() != "nccl" and GLOO_WAIT == "poll":
        ddp.register_comm_hook(None, _average_polling)
    return ddp


class _DDP(DistributedDataParallel):
    """DDP that reads the attributes it does not have (cfg, lm_head_weight) from the module
    inside, so logprobs.token_logprobs reads the head weight the same way with or without it."""

    def __getattr__(self, name):
        try:
            return super().__getattr__(name)
        except AttributeError:
            return getattr(self.module, name)


def _average_polling(state, bucket):
    """DDP's default gradient hook (the bucket's mean over the ranks), but waiting by polling
    (see _reduce): DDP's own wait would sleep at the end of every backward."""
    future = torch.futures.Future()
    future.set_result(_reduce(bucket.buffer(), dist.ReduceOp.SUM) / world())
    return future


def _reduce(x, op):
    """All-reduce a copy of x (so the caller's tensor and its graph stay untouched). NCCL
    reduces only GPU tensors, so a CPU count travels through this rank's GPU and back.

    On CPU (gloo) the rank polls for the result instead of sleeping in `wait`: a rank that
    arrives first would otherwise leave its core idle, and on a virtual machine (a cloud
    VM, this project's 2-core CI machine) the host may then give that core to another
    guest, so waking up costs up to milliseconds at every collective. sched_yield lets
    any other thread of this core (gloo's own) run meanwhile. docs/performance.md ("Many
    processes (torchrun + DDP)") has the speed with and without it.
    """
    if not active():
        return x
    y = x.detach().to("cuda" if dist.get_backend() == "nccl" else "cpu", copy=True)
    if dist.get_backend() == "nccl" or GLOO_WAIT == "sleep":
        dist.all_reduce(y, op)
    else:
        work = dist.all_reduce(y, op, async_op=True)
        while not work.is_completed():
            os.sched_yield()
        work.wait()  # raises if the collective failed (a rank died, the timeout)
    return y.to(x.device)


def all_sum(x):
    """Sum over ranks of a tensor (elementwise); no gradient flows through it."""
    return _reduce(torch.as_tensor(x), dist.ReduceOp.SUM)


def all_max(x):
    return _reduce(torch.as_tensor(x), dist.ReduceOp.MAX)


def global_mean(local_sum, local_count):
    """The mean over every rank's items, from this rank's sum and count: in one process
    local_sum / local_count (a count of 0 counts as 1, so an empty batch gives 0).

    Under N ranks the count is all-reduced and the rank returns N * local_sum / global
    count. DDP averages the ranks' gradients (their sum / N), so the update follows
    mean_r grad(N * sum_r / count) = grad(sum over all ranks / count): the gradient of the
    global mean, with a gradient through local_sum only. The value the ranks return
    averages (over ranks) to the global mean."""
    return local_sum / all_sum(local_count).clamp(min=1) * world()


def global_std(x):
    """Sample std of the union of every rank's x (1-d): x.std() in one process. Two
    passes, as x.std() does internally: the global mean first, then squared deviations."""
    if not active():
        return x.std()
    n_total = all_sum(torch.stack([x.sum(), x.new_tensor(x.numel())]))  # (2,): global sum, global count
    mean = n_total[0] / n_total[1]
    return (all_sum(((x - mean) ** 2).sum()) / (n_total[1] - 1)).sqrt()


def same_count(parts):
    """parts (a list of index tensors, e.g. minibatches), extended with empty ones to as
    many as the rank that has the most. Every rank must join every update's all-reduces;
    a rank left with fewer groups than minibatches (dynamic sampling out of rounds) runs
    the missing updates on zero rows, which add nothing to the loss or its normalisers
    and a zero gradient, while DDP still hands it the other ranks' average."""
    return parts + [parts[0][:0]] * (int(all_max(len(parts))) - len(parts))


def everywhere_finite(loss, grad_norm):
    """True on every rank if the loss is finite on every rank and the gradient norm is
    (it is the same on every rank: DDP averaged the gradients). Every rank takes the same
    decision, so none waits in a collective for a rank that has stopped."""
    return bool(torch.isfinite(all_sum(loss.detach())) and torch.isfinite(grad_norm))


def unwrap(model):
    """The module itself, from a DDP wrapper or the module: for sampling, evaluation and the
    no-grad passes, which need no gradient all-reduce."""
    return model.module if isinstance(model, DistributedDataParallel) else model
