"""Two processes (torchrun, gloo, localhost) give the one-process results.

A 2-rank GRPO step equals one process on the union of the two half-batches, for each loss
aggregation and for --adv-norm batch (loss, statistics and the gradients, seen through an
SGD update); a 2-rank training run writes one metrics line per step and resumes exactly;
a rank that fails ends the run with its message instead of a hang.
"""
import json
import os
import subprocess
import sys
import time

import pytest
import torch

import train
from harness import distributed
from harness import cli

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# --standalone: torchrun picks a free localhost port itself
TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2"]


def torchrun(*argv, timeout=240):
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.run([*TORCHRUN, *argv], cwd=ROOT, capture_output=True, text=True, timeout=timeout, env=env)


def test_helpers_are_identity_without_a_process_group():
    x = torch.tensor([3.0, 1.0, 2.0, 7.0])
    assert not distributed.active() and distributed.rank() == 0 and distributed.world() == 1
    assert distributed.all_sum(x) is x and distributed.global_std(x) == x.std()
    assert distributed.global_mean(x.sum(), 4) == x.mean() and distributed.global_mean(x.sum() * 0, 0) == 0
    parts = [x[:2], x[2:]]
    assert all(a is b for a, b in zip(distributed.same_count(parts), parts)) and len(distributed.same_count(parts)) == 2
    assert train.step_seed(0, 7, rank=0) == train.step_seed(0, 7) == 7  # one process: the seeds runs always had
    assert len({train.step_seed(0, s, r) for s in range(50) for r in range(8)}) == 400


@pytest.fixture(scope="module")
def step_results(tmp_path_factory):
    out = tmp_path_factory.mktemp("ddp") / "step.json"
    run = torchrun("tests/ddp_worker.py", "step", str(out))
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads(out.read_text())


@pytest.mark.parametrize("case", ["seq_mean", "token_mean", "constant", "adv_norm_batch", "kl_entropy_minibatches",
                                  "uneven_seq_mean", "rloo", "reinforce_pp"])
@pytest.mark.roundings
def test_two_rank_step_equals_one_process_on_both_halves(step_results, case):
    res = step_results[case]
    single, ddp = res["single"], res["ddp"]
    assert res["max_weight_change"] > 1e-3  # the step moved the weights: the comparison can fail
    assert res["max_weight_diff"] < 1e-5 * max(1.0, res["max_weight_change"])  # same gradients
    for key in ("loss", "pg_loss", "grad_norm", "entropy", "ratio_mean", "ratio_min", "ratio_max", "clip_frac",
                "reward", "reward_std", "adv_mean", "adv_std", "resp_len", "resp_len_max", "n_tokens", "sampler_gap",
                "tis_weight_mean", "tis_weight_max", "ppo_kl", "mismatch", "sampler_kl_k3", "tis_chi2", "tis_ess",
                "sampler_gap_max", "sampler_logp_corr", *(["kl", "entropy_bonus"] if "kl" in case else [])):
        assert ddp[key] == pytest.approx(single[key], rel=1e-5, abs=1e-6), key


def test_bnpo_weighs_each_ranks_own_tokens(step_results):
    """--loss-agg bnpo under two ranks whose halves hold 33 and 31 tokens: the update is the mean of the two updates
    each half would make alone (each normalised by its own tokens), which is not token_mean's (one normaliser)."""
    res = step_results["bnpo"]
    assert res["vs_mean_of_halves"] < 1e-6 and res["vs_token_mean"] > 1e-4, res


def test_ranks_with_different_minibatch_counts_do_not_hang(step_results):
    """Rank 0 holds 3 groups (minibatches of 2 and 1), rank 1 one group (one minibatch): it
    runs an empty second one, so both join the same all-reduces and the step completes.
    (The groups are then split differently from one process, so only sanity is checked.)"""
    ddp = step_results["uneven_minibatches"]["ddp"]
    assert ddp["n_tokens"] == step_results["seq_mean"]["single"]["n_tokens"]
    nulls = {k for k, v in ddp.items() if v is None}  # pg_k1: the sampler is the learner here
    assert "pg_k1" in nulls and nulls <= {"pg_k1", "resp_len_correct", "resp_len_wrong", "adv_correct_corr",
                                         "adv_to_centred", "equal_groups_adv", "format_paid_wrong", "tied_adv_gap"}, nulls
    assert all(v == v and abs(v) != float("inf") for v in ddp.values() if v is not None)  # finite
    assert step_results["uneven_minibatches"]["max_weight_change"] > 1e-3


def test_the_cases_differ_from_each_other(step_results):
    """Otherwise a mode that ignored its flag would pass the test above. (Their losses can
    be equal: at ratio 1 the seq_mean loss is minus the mean advantage, 0 for both group
    and batch normalisation; their gradients are not.)"""
    changes = [step_results[c]["total_weight_change"] for c in ("seq_mean", "token_mean", "constant", "adv_norm_batch")]
    assert len({round(x, 4) for x in changes}) == 4, changes


def test_a_failing_rank_stops_the_run_with_its_message(tmp_path):
    t0 = time.time()
    run = torchrun("tests/ddp_worker.py", "fail", str(tmp_path / "x.json"), timeout=120)
    assert run.returncode != 0 and "rank 1 fails on purpose" in run.stderr
    assert time.time() - t0 < 60  # torchrun stopped the waiting rank 0


def train_flags(warm, runs_dir, *extra):
    return ["train.py", "--init", warm, "--runs-dir", str(runs_dir), "--run-name", "r", "--level", "easy",
            "--prompts-per-step", "4", "--group-size", "4", "--max-new-tokens", "16", "--eval-size", "8",
            "--eval-every", "2", "--save-every", "2", "--samples-every", "1", "--lr", "3e-3", "--mu", "2",
            "--minibatches", "2", "--kl", "0.5", *extra]


def read_jsonl(path):
    with open(path) as f:
        return [json.loads(line) for line in f]


def test_two_rank_run_logs_once_per_step_and_resumes_exactly(tiny_warm, tmp_path):
    warm = tiny_warm[0]
    full = torchrun(*train_flags(warm, tmp_path / "full", "--steps", "4"))
    assert full.returncode == 0, full.stderr[-3000:]
    rows = read_jsonl(tmp_path / "full" / "r" / "metrics.jsonl")
    assert [r["step"] for r in rows] == [0, 1, 2, 3, 4]  # one line per step, not one per rank
    assert json.loads((tmp_path / "full" / "r" / "config.json").read_text())["processes"] == 2
    assert all(r["n_tokens"] > 0 and r["reward_std"] >= 0 for r in rows[1:])
    assert any(r["reward_std"] > 0 for r in rows[1:])  # mixed rewards: the steps below can differ
    part = torchrun(*train_flags(warm, tmp_path / "part", "--steps", "2"))
    assert part.returncode == 0, part.stderr[-3000:]
    resumed = torchrun("train.py", "--resume", str(tmp_path / "part" / "r"), "--steps", "4")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    again = read_jsonl(tmp_path / "part" / "r" / "metrics.jsonl")
    assert [r["step"] for r in again] == [0, 1, 2, 3, 4]
    for r, q in zip(again[1:], rows[1:]):
        for key in ("reward", "n_tokens", "resp_len", "reward_std"):
            assert r[key] == q[key], (r["step"], key)
        for key in ("loss", "kl", "grad_norm"):
            assert r[key] == pytest.approx(q[key], rel=1e-5, abs=1e-7), (r["step"], key)
    samples = [read_jsonl(tmp_path / d / "r" / "samples.jsonl") for d in ("full", "part")]
    assert samples[0] == samples[1]
    a = torch.load(tmp_path / "full" / "r" / "ckpt_latest.pt", weights_only=True)["model"]
    b = torch.load(tmp_path / "part" / "r" / "ckpt_latest.pt", weights_only=True)["model"]
    for k in a:
        torch.testing.assert_close(a[k], b[k], rtol=1e-5, atol=1e-6)


def test_a_batch_that_does_not_split_over_the_ranks_is_refused(monkeypatch):
    monkeypatch.setattr(distributed, "world", lambda: 2)
    with pytest.raises(ValueError, match="does not split over 2 processes"):
        cli.check_args(cli.get_parser().parse_args(["--prompts-per-step", "3"]))
    with pytest.raises(ValueError, match="minibatch holds whole groups"):
        cli.check_args(cli.get_parser().parse_args(["--prompts-per-step", "4", "--minibatches", "3"]))


def test_sft_runs_under_two_ranks(tmp_path):
    run = torchrun("harness/sft.py", "--steps", "3", "--n-layer", "1", "--d-model", "32", "--n-head", "2", "--batch-size", "8",
                   "--eval-size", "4", "--pass-k", "0", "--level", "easy", "--eval-level", "easy",
                   "--out", str(tmp_path / "w.pt"))
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stdout.count("saved") == 1 and (tmp_path / "w.pt").exists()  # rank 0 alone logs and writes
