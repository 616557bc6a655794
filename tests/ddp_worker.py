"""Run by tests/test_distributed.py under torchrun with 2 ranks (not a test file itself).

    python -m torch.distributed.run --standalone --nproc-per-node 2 tests/ddp_worker.py step OUT.json
    python -m torch.distributed.run --standalone --nproc-per-node 2 tests/ddp_worker.py fail OUT.json

step: for each case, one grpo_step in one process on a whole batch of 4 groups (before
the process group exists, so it is the plain single-process code), then the same step
under DDP with each rank holding 2 of the groups. Rank 0 writes both steps' statistics
and the largest difference between the two updated models. SGD with lr 1 and no
clipping, so a weight's change is its gradient: equal weights mean equal gradients.
--loss-agg bnpo is the exception by design: its DDP step is compared with the mean of the
steps each rank's half takes alone.
fail: rank 1 raises while rank 0 waits in an all-reduce; the run must end, not hang.
"""
import copy
import dataclasses
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import torch  # noqa: E402

import config  # noqa: E402
import grpo  # noqa: E402
import rollouts  # noqa: E402
import tasks  # noqa: E402
from harness import distributed  # noqa: E402
from harness.stats import logged_step  # noqa: E402
from model import GPT, GPTConfig  # noqa: E402
from tokenizer import build_tokenizer  # noqa: E402

CASES = {
    "seq_mean": dict(loss_agg="seq_mean"),
    "token_mean": dict(loss_agg="token_mean"),
    "constant": dict(loss_agg="constant"),
    "adv_norm_batch": dict(adv_norm="batch"),
    "kl_entropy_minibatches": dict(loss_agg="token_mean", kl=0.5, entropy_coef=0.1, minibatches=2, mu=2),
    # dynamic sampling out of rounds can leave ranks with different numbers of groups
    "uneven_seq_mean": dict(loss_agg="seq_mean", adv_norm="batch"),
    "uneven_minibatches": dict(minibatches=2),  # rank 1 has one minibatch, runs an empty second one
    # the field's baselines (field_methods.py): RLOO's stays in each group, REINFORCE++'s sums go over every rank
    "rloo": dict(baseline="leave_one_out"),
    "reinforce_pp": dict(baseline="batch", loss_agg="token_mean"),
}
UNEVEN = {0: [0, 1, 2], 1: [3]}  # groups of each rank in the uneven cases
G, N_GROUPS = 4, 4
# Rewards chosen so each group has its own std (group and batch normalisation differ).
REWARDS = torch.tensor([1., 0, 0, 1, 1, 1, 0, 0, 0, 1, 1, 1, 0, 0, 0, 1])
LENGTHS = torch.tensor([1, 6, 3, 6, 2, 5, 6, 4, 6, 1, 2, 3, 6, 6, 5, 2])  # completion tokens that count


def whole_batch(enc, model, cfg):
    """4 groups sampled from a random model, with fixed rewards and varied lengths."""
    stream = tasks.problems("easy", 0)
    batch = rollouts.rollout(model, enc, [next(stream) for _ in range(N_GROUPS)], cfg,
                             torch.Generator().manual_seed(0))
    keep = torch.cumsum(batch.loss_mask.long(), 1) <= LENGTHS[:, None]  # (B, T): the first LENGTHS tokens
    batch.loss_mask = batch.loss_mask & keep
    batch.rewards = {"total": REWARDS.clone(), "correct": REWARDS.clone()}
    return batch


def one_step(model, batch, cfg):
    """grpo_step on a given batch (its sampling replaced): (stats, updated weights)."""
    grpo.sample_batch = lambda *a, **k: (batch, torch.zeros(N_GROUPS // distributed.world(), dtype=torch.bool))
    ref = copy.deepcopy(distributed.unwrap(model)) if cfg.kl > 0 else None
    opt = torch.optim.SGD(model.parameters(), lr=1.0)
    _, stats = logged_step(distributed.unwrap(model), ref, opt, None, None, None, cfg, None, learner=model)
    return stats, {k: v.detach().clone() for k, v in distributed.unwrap(model).state_dict().items()}


def step_cases(out_path):
    torch.set_num_threads(1)
    enc = build_tokenizer({"merges": []})
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=enc.n_vocab, max_seq_len=48, n_layer=1, n_head=2, d_model=32))
    base = config.GRPOConfig(group_size=G, max_new_tokens=6, temperature=2.0, max_grad_norm=1e9)
    batch = whole_batch(enc, model, base)
    # Under DDP minibatch k is the union of the ranks' k-th minibatches: with K = 2, rank 0's
    # group 0 and rank 1's group 2, then groups 1 and 3. One process on groups in the order
    # 0, 2, 1, 3 takes the same minibatches (and with K = 1 the order changes nothing).
    interleaved = rollouts.take_rows(batch, rollouts.group_rows(torch.ones(4, dtype=torch.bool), G)
                                     .view(N_GROUPS, G)[[0, 2, 1, 3]].reshape(-1))
    singles = {name: one_step(copy.deepcopy(model), interleaved, config.GRPOConfig(**{**vars(base), **kw}))
               for name, kw in CASES.items()}  # no process group yet: the one-process code path
    # --loss-agg bnpo divides by each process's own tokens: under DDP, one update is the mean of the updates each
    # rank's half would make alone (their token counts differ: 33 and 31), not token_mean's on both
    bnpo = config.GRPOConfig(**{**vars(base), "loss_agg": "bnpo", "mu": 1})
    halves = [rollouts.take_rows(batch, torch.arange(h * 8, (h + 1) * 8)) for h in (0, 1)]
    token_mean = dataclasses.replace(bnpo, loss_agg="token_mean")
    alone = [one_step(copy.deepcopy(model), b, c)[1]
             for b, c in ((halves[0], bnpo), (halves[1], bnpo), (batch, token_mean))]
    distributed.init("cpu")
    r = distributed.rank()
    half = rollouts.take_rows(batch, torch.arange(r * 8, (r + 1) * 8))  # this rank's 2 groups
    uneven = rollouts.take_rows(batch, torch.cat([torch.arange(g * G, (g + 1) * G) for g in UNEVEN[r]]))
    out = {}
    for name, kw in CASES.items():
        mine = uneven if name.startswith("uneven") else half
        stats, weights = one_step(distributed.wrap(copy.deepcopy(model)), mine, config.GRPOConfig(**{**vars(base), **kw}))
        ref_stats, ref_weights = singles[name]
        out[name] = {"single": ref_stats, "ddp": stats,
                     "max_weight_diff": max((weights[k] - ref_weights[k]).abs().max().item() for k in weights),
                     "max_weight_change": max((ref_weights[k] - model.state_dict()[k]).abs().max().item()
                                              for k in weights),
                     "total_weight_change": sum((ref_weights[k] - model.state_dict()[k]).abs().sum().item()
                                                for k in weights)}
    _, weights = one_step(distributed.wrap(copy.deepcopy(model)), half, bnpo)
    mean_of_halves = {k: (alone[0][k] + alone[1][k]) / 2 for k in weights}
    out["bnpo"] = {name: max((weights[k] - ref[k]).abs().max().item() for k in weights)
                   for name, ref in (("vs_mean_of_halves", mean_of_halves), ("vs_token_mean", alone[2]))}
    if r == 0:
        with open(out_path, "w") as f:
            json.dump(out, f)
    distributed.close()


def fail():
    distributed.init("cpu")
    if distributed.rank() == 1:
        raise RuntimeError("rank 1 fails on purpose")
    distributed.all_sum(torch.ones(1))  # rank 0 waits here for a rank that is gone


if __name__ == "__main__":
    step_cases(sys.argv[2]) if sys.argv[1] == "step" else fail()
