"""Many processes: the few lines of torch.distributed that grpo.py, train.py and sft.py use.

    python train.py ...                              # one process: no process group, every helper is identity
    torchrun --nproc-per-node 2 train.py ...         # 2 ranks: gloo on CPU, NCCL on CUDA (one GPU per rank)

torchrun starts N copies of the script and tells each its RANK and WORLD_SIZE in the
environment; `init` joins them into a process group. The model is wrapped in PyTorch's
DistributedDataParallel (`wrap`) for the training forward only: its backward all-reduces
(averages) the gradients, so every rank takes the same optimizer step. Everything else a
rank must agree on goes through the helpers below: sums, counts, min / max of tensors
(the normalisers of the loss and the logged statistics). Without a process group they return their input, so one process computes
exactly what it did before this file existed.
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
    all-reduces (averages) the gradients bucket by bucket (25 MB each) as soon as a
    bucket is ready, overlapping with the rest of the backward; our ~0.5M parameters
    fill one bucket, reduced at the end. On gloo a comm hook does that averaging while
    polling (see _reduce). The tied embedding / head weight is one parameter: its
    gradient from both uses is summed by autograd first, then reduced once."""
    if not active():
        return model
    device_ids = [model.wte.weight.device.index] if model.wte.weight.is_cuda else None
    ddp = DistributedDataParallel(model, device_ids=device_ids)
    if dist.get_backend() != "nccl" and GLOO_WAIT == "poll":
        ddp.register_comm_hook(None, _average_polling)
    return ddp


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
    any other thread of this core (gloo's own) run meanwhile. The README ("Many
    processes") has the speed with and without it.
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


def all_min(x):
    return _reduce(torch.as_tensor(x), dist.ReduceOp.MIN)


def all_std(x):
    """Sample std of the union of every rank's x (1-d): x.std() in one process. Two
    passes, as x.std() does internally: the global mean first, then squared deviations."""
    if not active():
        return x.std()
    n_total = all_sum(torch.stack([x.sum(), x.new_tensor(x.numel())]))  # (2,): global sum, global count
    mean = n_total[0] / n_total[1]
    return (all_sum(((x - mean) ** 2).sum()) / (n_total[1] - 1)).sqrt()


def all_mean(x):
    """Mean of the elements of every rank's x: x.mean() in one process."""
    if not active():
        return x.mean()
    total = all_sum(torch.stack([x.sum().double(), x.new_tensor(x.numel(), dtype=torch.float64)]))  # (2,): sum, count
    return (total[0] / total[1].clamp(min=1)).to(x.dtype)


def unwrap(model):
    """The module itself, from a DDP wrapper or the module: for sampling, evaluation and the
    attributes DDP does not forward (model.cfg, model.wte, model.lm_head_weight)."""
    return model.module if isinstance(model, DistributedDataParallel) else model
