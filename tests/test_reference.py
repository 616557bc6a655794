"""book/reference.py's two steps, as their authors write them, against grpo.grpo_step at their flags: the same weights
and the same loss after one step. Each reference is its own copy of the formulas, so an edit of grpo.py that
changes what the step computes makes one of these fail (docs/adding_a_variant.md says which, and why).

    python -m pytest -q tests/test_reference.py
"""
import json

import pytest
import torch

import grpo
import tasks
import train
from book import reference
from config import GRPOConfig
from harness import cli


def one_step_each(steps, warm_policy, cfg, ref, n_prompts):
    """One step of each function, from the same weights and the same random state, with SGD (so that float rounding
    between the kernels and the textbook log-softmax stays rounding: Adam's first step is lr * sign(grad), which a
    gradient of rounding noise could flip) -> [(the last update's loss, the parameters after)]."""
    results = []
    for step in steps:
        model, enc = warm_policy()
        stream = tasks.problems("easy", 3)
        losses = []
        opt = torch.optim.SGD(model.parameters(), lr=0.5)
        real = grpo.backward

        def record(loss, *a):
            losses.append(loss.item())
            return real(loss, *a)
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(grpo, "backward", record)
            out = step(model, ref, opt, enc, lambda: next(stream), n_prompts, cfg, torch.Generator().manual_seed(7))
        loss = out.item() if torch.is_tensor(out) else losses[-1]
        results.append((loss, [p.detach().clone() for p in model.parameters()]))
    return results


def assert_same_step(results, warm_policy):
    (loss_a, params_a), (loss_b, params_b) = results
    moved = max((a - b).abs().max().item() for a, b in zip(params_a, warm_policy()[0].parameters()))
    assert moved > 1e-3  # the step changed the weights
    assert loss_a == pytest.approx(loss_b, rel=1e-5, abs=1e-7)
    for a, b in zip(params_a, params_b):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


def a_reference(warm_policy):
    """A reference other than the policy, so the KL term acts."""
    ref, _ = warm_policy()
    with torch.no_grad():
        for p in ref.parameters():
            p.add_(0.02 * torch.randn_like(p))
    return ref


@pytest.mark.roundings
@pytest.mark.parametrize("kl", [0.0, 0.1])
def test_the_papers_step_and_grpo_step_leave_the_same_weights_and_loss(warm_policy, kl):
    """At the default flags (two updates on one rollout, PPO's clip, each answer's token mean; with --kl, k3 to a
    reference that differs from the policy) one step of each leaves the same parameters and the same loss:
    grpo_step is the papers' step with its switches off."""
    cfg = GRPOConfig(kl=kl)
    assert (cfg.mu, cfg.minibatches, cfg.loss_agg, cfg.objective) == (2, 1, "seq_mean", "ppo")  # the defaults
    ref = a_reference(warm_policy) if kl else None
    steps = (reference.grpo_step_paper, grpo.grpo_step)
    assert_same_step(one_step_each(steps, warm_policy, cfg, ref, 6), warm_policy)


@pytest.mark.roundings
@pytest.mark.parametrize("kl", [0.0, 0.1])
def test_the_books_step_and_grpo_step_under_recipe_book_leave_the_same_weights_and_loss(warm_policy, kl):
    """--recipe book (one prompt and 8 answers, two inner epochs that sample again from a frozen copy, sampled at T
    0.8 and top-p 0.9, scored at T 1, the sequence ratio in the book's torch.where form at eps 10, k1 on the sums at
    beta 0.1; here also without the KL): grpo_step is the book's step with its switches set so. Two prompts, so the
    step has groups to weigh."""
    cfg = cli.grpo_config(cli.parse_args(["--recipe", "book", "--kl", str(kl)])[1])
    assert (cfg.mu, cfg.resample_epochs, cfg.ratio_level, cfg.objective, cfg.kl_estimator, cfg.kl_level,
            cfg.learner_temperature, cfg.clip) == (2, True, "sequence", "book", "k1", "sequence", 1.0, 10.0)
    ref = a_reference(warm_policy) if kl else None
    steps = (reference.grpo_step_book, grpo.grpo_step)
    assert_same_step(one_step_each(steps, warm_policy, cfg, ref, 2), warm_policy)


def no_std(rewards, G, norm="group", baseline="group", lengths=None, eps=1e-4):
    """The edit docs/adding_a_variant.md makes: the group advantage without its std, r - mean."""
    r = rewards.view(-1, G)
    return (r - r.mean(1, keepdim=True)).view(-1)


def test_an_edit_of_the_advantage_in_grpo_changes_the_step_and_the_reference_test_sees_it(warm_policy, monkeypatch):
    """The advantage is written once on the step's path (grpo.group_advantages): dropping its std changes what one
    step of grpo_step leaves, and the papers' step, its own copy, no longer agrees, so the test above fails, as the
    guide says it will."""
    cfg = GRPOConfig()
    before = one_step_each((grpo.grpo_step,), warm_policy, cfg, None, 6)[0]
    monkeypatch.setattr(grpo, "group_advantages", no_std)
    after, paper = one_step_each((grpo.grpo_step, reference.grpo_step_paper), warm_policy, cfg, None, 6)
    assert any(not torch.allclose(a, b, rtol=1e-5, atol=1e-6) for a, b in zip(before[1], after[1]))
    with pytest.raises(AssertionError):
        assert_same_step([paper, after], warm_policy)


def test_the_advantage_is_written_once_in_grpo():
    """The group advantage's formula, r minus the group's mean, appears in grpo.py once: editing the line a reader
    meets changes the run."""
    source = open(grpo.__file__).read()
    assert source.count("r.mean(1, keepdim=True)") == 1


def test_an_edit_of_the_advantage_changes_the_default_runs_metrics_within_3_steps(tiny_warm, tmp_path, monkeypatch):
    """The same edit, planted, in `python train.py` itself (every GRPO flag at its default; the tiny warm start, a
    short held-out set): the advantages' spread it logs differs in each of the first 3 steps."""
    def run(name):
        args = cli.get_parser().parse_args(["--init", tiny_warm[0], "--steps", "3", "--eval-every", "3", "--threads",
                                            "1", "--eval-size", "8", "--level", "easy", "--runs-dir", str(tmp_path),
                                            "--run-name", name])
        with open(f"{train.main(args)}/metrics.jsonl") as f:
            return [json.loads(line) for line in f][1:]
    plain = run("plain")
    monkeypatch.setattr(grpo, "group_advantages", no_std)
    edited = run("edited")
    assert [r["step"] for r in edited] == [1, 2, 3]
    assert all(a["adv_std"] != b["adv_std"] for a, b in zip(plain, edited)), (plain, edited)
