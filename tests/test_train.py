"""train.py end to end on a tiny warm start: files, resume, NaN guard, clear errors."""
import dataclasses
import json
import os
import re
import signal
import subprocess
import sys
import time

import pytest
import torch

import config
import grpo
import rewards
import tasks
import train
from harness import evaluation
from harness import cli
from model import CheckpointError, load_checkpoint

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="module")
def warm(tiny_warm):
    return tiny_warm[0]


def test_tiny_warm_start_lowers_the_loss(tiny_warm):
    _, losses = tiny_warm
    first, last = sum(losses[:5]) / 5, sum(losses[-5:]) / 5
    assert last < 0.6 * first, (first, last)


def test_checkpoint_for_another_tokenizer_is_refused(warm, tmp_path):
    ckpt = torch.load(warm, weights_only=True)
    ckpt["tokenizer"] = {"merges": []}  # bytes only: 259 tokens, the model has more
    torch.save(ckpt, tmp_path / "other_tok.pt")
    with pytest.raises(CheckpointError, match="tokenizer has 259 tokens"):
        train.main(args_for(str(tmp_path / "other_tok.pt"), tmp_path))


def args_for(warm, tmp_path, *extra):
    return cli.get_parser().parse_args(["--init", warm, "--runs-dir", str(tmp_path), "--run-name", "r", "--level", "easy",
                                          "--prompts-per-step", "4", "--group-size", "4", "--max-new-tokens", "16",
                                          "--eval-size", "8", "--eval-every", "2", "--threads", "1", *extra])


def read_metrics(run_dir):
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        return [json.loads(line) for line in f]


def test_smoke_run_writes_every_file_with_finite_metrics(warm, tmp_path):
    run_dir = train.main(args_for(warm, tmp_path, "--steps", "3", "--kl", "0.05", "--mu", "2"))
    for name in ("config.json", "metrics.jsonl", "samples.jsonl", "ckpt_latest.pt", "ckpt_step0.pt", "ckpt_step2.pt"):
        assert os.path.getsize(os.path.join(run_dir, name)) > 0, name
    rows = read_metrics(run_dir)
    assert [r["step"] for r in rows] == [0, 1, 2, 3]
    assert "eval_acc" in rows[0] and "eval_acc" in rows[2] and "eval_acc" not in rows[1]
    for r in rows[1:]:
        for key in ("loss", "reward", "entropy", "kl", "clip_frac", "adv_std", "resp_len", "tokens_per_s"):
            assert key in r and torch.isfinite(torch.tensor(float(r[key]))), key
    config = json.load(open(os.path.join(run_dir, "config.json")))
    assert config["kl"] == 0.05 and config["grpo"]["mu"] == 2 and config["versions"]["torch"]


def test_keep_checkpoints_keeps_only_the_latest_saves(warm, tmp_path):
    run_dir = train.main(args_for(warm, tmp_path, "--steps", "3", "--eval-every", "1", "--keep-checkpoints", "2"))
    assert sorted(n for n in os.listdir(run_dir) if n.startswith("ckpt_")) == \
        ["ckpt_latest.pt", "ckpt_step2.pt", "ckpt_step3.pt"]  # steps 0 and 1 deleted, the last kept
    last, latest = (torch.load(os.path.join(run_dir, n), weights_only=True)["model"] for n in ("ckpt_step3.pt",
                                                                                               "ckpt_latest.pt"))
    assert all(torch.equal(last[k], latest[k]) for k in last)
    with pytest.raises(ValueError, match="--keep-checkpoints must be >= 0"):
        train.main(args_for(warm, tmp_path, "--run-name", "bad", "--keep-checkpoints", "-1"))


def test_training_steps_see_mixed_rewards_and_gradients(warm, tmp_path):
    run_dir = train.main(args_for(warm, tmp_path, "--steps", "4", "--lr", "3e-3"))
    rows = read_metrics(run_dir)[1:]
    assert any(r["reward_std"] > 0 for r in rows) and any(r["zero_std_frac"] < 1 for r in rows)
    assert all(r["grad_norm"] > 0 for r in rows if r["zero_std_frac"] < 1)
    before = torch.load(warm, weights_only=True)["model"]
    after = torch.load(os.path.join(run_dir, "ckpt_latest.pt"), weights_only=True)["model"]
    assert any(not torch.equal(before[k], after[k]) for k in before)  # the policy was updated


@pytest.mark.parametrize("dropout", [0.0, 0.3])
def test_dropout_makes_the_learners_forwards_differ_from_pi_olds(warm, tmp_path, dropout):
    """--dropout reaches the learner: with two minibatches pi_old has a no-grad pass of its own,
    so at a learning rate too small to move the weights its log-probs differ from the first
    update's only by dropout; the saved config and checkpoint keep p."""
    run_dir = train.main(args_for(warm, tmp_path, "--steps", "1", "--mu", "1", "--minibatches", "2", "--lr", "1e-12",
                                  "--dropout", str(dropout)))
    spread = read_metrics(run_dir)[1]["logratio_std_token"]
    assert spread > 0.01 if dropout else spread < 1e-5
    assert json.load(open(os.path.join(run_dir, "config.json")))["dropout"] == dropout
    assert torch.load(os.path.join(run_dir, "ckpt_latest.pt"), weights_only=True)["model_config"]["dropout"] == dropout


def read_samples(run_dir):
    with open(os.path.join(run_dir, "samples.jsonl")) as f:
        return [json.loads(line) for line in f]


@pytest.mark.parametrize("more", [[], ["--adaptive-entropy", "--entropy-target", "5", "--entropy-coef-delta", "0.02"]])
def test_resume_continues_exactly(warm, tmp_path, more):
    """A run stopped after step 4 and resumed gives the uninterrupted run's steps 5 and 6, number for number; with
    --adaptive-entropy, the coefficient each step applies too (it travels in the checkpoint)."""
    flags = ["--save-every", "2", "--samples-every", "1", "--lr", "3e-3", "--mu", "2", "--minibatches", "2",
             "--kl", "0.5", *more]
    full = train.main(args_for(warm, tmp_path / "a", "--steps", "6", *flags))
    part = train.main(args_for(warm, tmp_path / "b", "--steps", "4", *flags))
    with open(os.path.join(part, "metrics.jsonl"), "a") as f:  # a step logged after the last checkpoint...
        f.write(json.dumps({"step": 5, "loss": 123.0}) + "\n")
        f.write('{"step": 6, "lo')  # ...and a line cut short by a kill
    train.main(cli.get_parser().parse_args(["--resume", part, "--steps", "6", "--threads", "1"]))
    rows, ref = read_metrics(part), read_metrics(full)
    assert [r["step"] for r in rows] == [0, 1, 2, 3, 4, 5, 6]
    assert any(r["reward_std"] > 0 for r in ref[1:])  # the comparison below is of things that can differ
    for r, q in zip(rows[1:], ref[1:]):  # same problems, samples and updates as without the interruption
        for key in ("reward", "n_tokens", "resp_len", "reward_std"):
            assert r[key] == q[key], (r["step"], key)
        for key in ("loss", "kl", "grad_norm"):  # kl: the reference is still the warm start after resuming
            assert r[key] == pytest.approx(q[key], rel=1e-5, abs=1e-7), (r["step"], key)
    assert all(r["kl"] > 0 for r in rows[5:])
    if more:  # none before a first entropy, then 0.02 more a step (it stays under 5): step 5 applies 0.08
        assert [r["entropy_coef"] for r in rows[1:]] == [q["entropy_coef"] for q in ref[1:]]
        assert [r["entropy_coef"] for r in rows[1:]] == pytest.approx([0.0, 0.02, 0.04, 0.06, 0.08, 0.1])
        assert all(r["entropy_bonus"] > 0 for r in rows[2:])
    else:
        assert all("entropy_coef" not in r for r in rows)
    assert read_samples(part) == read_samples(full)  # the very completions sampled, step by step
    a = torch.load(os.path.join(full, "ckpt_latest.pt"), weights_only=True)["model"]
    b = torch.load(os.path.join(part, "ckpt_latest.pt"), weights_only=True)["model"]
    for k in a:
        torch.testing.assert_close(a[k], b[k], rtol=1e-5, atol=1e-6)


def test_each_step_draws_its_own_problems():
    def draw(seed, step, n=16):
        source = train.problem_source("medium", seed, step)
        return [source().expr for _ in range(n)]
    assert draw(0, 3) == draw(0, 3)  # the same (seed, step): the same problems, so resume repeats a step
    assert draw(0, 3) != draw(0, 4) and draw(0, 3) != draw(1, 3)
    assert train.step_seed(0, 3) != train.step_seed(0, 4)  # and the same for the sampling noise


def test_kill_9_then_resume_has_no_gap_or_duplicate(warm, tmp_path):
    cmd = [sys.executable, "train.py", "--init", warm, "--runs-dir", str(tmp_path), "--run-name", "k", "--steps", "12",
           "--level", "easy",
           "--prompts-per-step", "4", "--group-size", "4", "--max-new-tokens", "16", "--eval-size", "8",
           "--eval-every", "3", "--save-every", "2", "--threads", "1"]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    metrics = tmp_path / "k" / "metrics.jsonl"
    deadline = time.time() + 120
    while time.time() < deadline and (not metrics.exists() or metrics.read_text().count("\n") < 6):
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    out = subprocess.run([sys.executable, "train.py", "--resume", str(tmp_path / "k"), "--threads", "1"], cwd=ROOT,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert [r["step"] for r in read_metrics(str(tmp_path / "k"))] == list(range(13))


def test_nan_guard_stops_with_the_step_and_keeps_the_checkpoint(warm, tmp_path, monkeypatch):
    real, calls = grpo.token_logprobs, []

    def poisoned(*a, **k):
        calls.append(torch.is_grad_enabled())  # the learner's forward, with gradient: one a step at --mu 1
        logp, ent = real(*a, **k)
        return (logp * float("nan"), ent) if sum(calls) == 3 and calls[-1] else (logp, ent)
    monkeypatch.setattr(grpo, "token_logprobs", poisoned)
    with pytest.raises(SystemExit, match="step 3: FloatingPointError: non-finite loss"):
        train.main(args_for(warm, tmp_path, "--steps", "5", "--save-every", "2", "--mu", "1"))
    state = torch.load(tmp_path / "r" / "ckpt_latest.pt", weights_only=True)
    assert state["step"] == 2
    assert [r["step"] for r in read_metrics(str(tmp_path / "r"))] == [0, 1, 2]


def nan_gradient_in_pass(monkeypatch, n):
    """The n-th pass of pi_theta with gradient (one per update) gets a NaN gradient, its loss stays finite."""
    real, calls = grpo.batch_logprobs, []

    def poisoned(*a, **k):
        logp, ent = real(*a, **k)
        if torch.is_grad_enabled():
            calls.append(1)
            if len(calls) == n:
                logp.register_hook(lambda g: g * float("nan"))
        return logp, ent
    monkeypatch.setattr(grpo, "batch_logprobs", poisoned)
    return calls


def test_nan_guard_stops_a_finite_loss_with_a_non_finite_gradient(warm, tmp_path, monkeypatch):
    """At step 3 the loss is finite but its gradient NaN: the step stops before the
    optimizer, naming the step, and the run's checkpoint and metrics stop at step 2."""
    nan_gradient_in_pass(monkeypatch, 3)  # one update a step at mu 1, K 1
    with pytest.raises(SystemExit, match=r"step 3: FloatingPointError: non-finite loss \(-?\d.*\) or gradient norm \(nan\)"):
        train.main(args_for(warm, tmp_path, "--steps", "5", "--save-every", "2", "--mu", "1", "--minibatches", "1"))
    assert torch.load(tmp_path / "r" / "ckpt_latest.pt", weights_only=True)["step"] == 2
    assert [r["step"] for r in read_metrics(str(tmp_path / "r"))] == [0, 1, 2]


def test_nan_guard_says_how_far_the_step_got_and_which_step_the_checkpoint_holds(warm, tmp_path, monkeypatch):
    """At the second of step 4's two updates the gradient turns NaN: the run stops in one line that names the step,
    the flags a learner set (a value that makes the loss non-finite is among them), and that ckpt_latest.pt (every
    2 steps) holds step 2, not step 3."""
    calls = nan_gradient_in_pass(monkeypatch, 8)  # two updates a step at mu 2, K 1
    with pytest.raises(SystemExit) as e:
        train.main(args_for(warm, tmp_path, "--steps", "5", "--save-every", "2", "--mu", "2", "--minibatches", "1"))
    latest = os.path.join(str(tmp_path / "r"), "ckpt_latest.pt")
    assert str(e.value).startswith("step 4: FloatingPointError: non-finite loss")
    assert "; the flags set away from their defaults: --level easy, --prompts-per-step 4" in str(e.value)
    assert f"{latest} holds step 2 (written every --save-every 2 steps)" in str(e.value)
    assert torch.load(latest, weights_only=True)["step"] == 2
    assert [r["step"] for r in read_metrics(str(tmp_path / "r"))] == [0, 1, 2, 3]
    calls.clear()  # and before the first save: no checkpoint to name
    with pytest.raises(SystemExit, match=r"step 4: .*No .*ckpt_latest.pt yet: the first is written at step 5"):
        train.main(args_for(warm, tmp_path / "b", "--steps", "5", "--save-every", "5", "--mu", "2"))


def test_an_edit_that_breaks_the_step_stops_at_that_step_in_one_line_naming_the_function(warm, tmp_path, monkeypatch):
    """A learner's edit of grpo.py that breaks the step at step 3 (here the advantages come back one short: a shape
    error): the run stops at that step in one line that names the error, the function and the file it failed in, and
    where the whole traceback went; what was saved stays, and --resume continues once the edit is undone."""
    real, calls = grpo.advantages, []

    def broken(batch, cfg):
        calls.append(1)
        adv = real(batch, cfg)
        return adv[:-1] if len(calls) == 3 else adv
    monkeypatch.setattr(grpo, "advantages", broken)
    with pytest.raises(SystemExit) as e:
        train.main(args_for(warm, tmp_path, "--steps", "4", "--save-every", "2", "--mu", "1"))
    line = str(e.value)
    assert line.startswith("step 3: ") and "\n" not in line and "(in grpo_step, grpo.py:" in line
    assert f"(the traceback: {tmp_path / 'r' / 'traceback.txt'})" in line and "holds step 2" in line
    assert "Traceback" in (tmp_path / "r" / "traceback.txt").read_text()
    monkeypatch.setattr(grpo, "advantages", real)
    train.main(cli.get_parser().parse_args(["--resume", str(tmp_path / "r"), "--threads", "1"]))
    assert [r["step"] for r in read_metrics(str(tmp_path / "r"))] == [0, 1, 2, 3, 4]


def test_the_reference_stays_the_warm_start_across_a_run_and_its_resume(warm, tmp_path, monkeypatch):
    """Every step's reference model holds the warm start's weights exactly, the policy
    does not, and the logged KL is > 0 once the policy has moved; the same after --resume."""
    seen = []  # (step's reference weights, the policy's after the step)
    real = grpo.grpo_step

    def spy(model, ref_model, *a):
        out = real(model, ref_model, *a)
        seen.append(({k: v.clone() for k, v in ref_model.state_dict().items()},
                     {k: v.clone() for k, v in model.state_dict().items()}))
        return out
    monkeypatch.setattr(grpo, "grpo_step", spy)
    flags = ["--kl", "0.1", "--lr", "3e-3", "--save-every", "1", "--eval-every", "10", "--mu", "1"]
    run_dir = train.main(args_for(warm, tmp_path, "--steps", "2", *flags))
    train.main(cli.get_parser().parse_args(["--resume", run_dir, "--steps", "4", "--threads", "1"]))
    start = torch.load(warm, weights_only=True)["model"]
    assert len(seen) == 4  # two steps, then two more after resuming
    for ref, policy in seen:
        assert all(torch.equal(ref[k], start[k]) for k in start)
        assert any(not torch.equal(policy[k], start[k]) for k in start)
    rows = read_metrics(run_dir)[1:]
    assert [r["step"] for r in rows] == [1, 2, 3, 4] and rows[0]["kl"] == 0.0  # step 1: the policy is its reference
    assert all(r["kl"] > 0 for r in rows[1:])


def test_a_run_saved_before_a_flag_existed_resumes_with_its_default(warm, tmp_path, monkeypatch):
    run_dir = train.main(args_for(warm, tmp_path, "--steps", "1", "--kl", "0.05", "--mu", "1"))
    path = os.path.join(run_dir, "ckpt_latest.pt")
    ckpt = torch.load(path, weights_only=True)
    newer = ["learner_temperature", "resample_epochs", "format_check", "objective"]
    for name in newer:  # as a checkpoint written before these flags existed
        del ckpt["args"][name]
    torch.save(ckpt, path)
    configs, real = [], grpo.grpo_step
    monkeypatch.setattr(grpo, "grpo_step", lambda *a: configs.append(a[6]) or real(*a))
    train.main(cli.get_parser().parse_args(["--resume", run_dir, "--steps", "2", "--threads", "1"]))
    (cfg,) = configs
    defaults = {f.name: f.default for f in dataclasses.fields(config.GRPOConfig)}
    assert {name: getattr(cfg, name) for name in newer} == {name: defaults[name] for name in newer}
    assert cfg.kl == 0.05  # the flags it did save still apply
    assert [r["step"] for r in read_metrics(run_dir)] == [0, 1, 2]


def test_eval_pass_n_logs_pass_at_k_from_n_answers_and_the_different_right_ones(warm, tmp_path):
    """--eval-pass-n 4 with --eval-pass-k 2 on the inequalities: each evaluation logs evaluation.pass_at_k's
    numbers for its weights (pass@2 from 4 answers, pass@1, the different right answers); without the flag
    none of the three is logged and pass@K is what it was."""
    run_dir = train.main(args_for(warm, tmp_path, "--steps", "2", "--eval-level", "many", "--max-new-tokens", "40",
                                  "--eval-pass-k", "2", "--eval-pass-n", "4"))
    policy, ckpt = load_checkpoint(os.path.join(run_dir, "ckpt_step2.pt"))
    from tokenizer import build_tokenizer
    want = evaluation.pass_at_k(policy, build_tokenizer(ckpt["tokenizer"]), tasks.eval_set("many", 8), 2, 1.0,
                                train.step_seed(0, 2) + train.PASS_AT_K_SEED, 40, n=4)
    last = read_metrics(run_dir)[-1]
    assert last["step"] == 2 and last["eval_pass_at_k"] == pytest.approx(want["pass"])
    assert (last["eval_pass_at_1"], last["eval_distinct"], last["eval_distinct_share"]) == pytest.approx(
        (want["pass_1"], want["distinct"], want["distinct_share"]))
    plain = train.main(args_for(warm, tmp_path / "plain", "--steps", "2", "--eval-pass-k", "2"))
    assert all("eval_distinct" not in r and "eval_pass_at_1" not in r for r in read_metrics(plain))


def read_answers(run_dir):
    with open(os.path.join(run_dir, "answers.jsonl")) as f:
        return [json.loads(line) for line in f]


def test_each_evaluation_writes_the_answers_to_the_first_held_out_problems(warm, tmp_path):
    """answers.jsonl: the greedy answer to each of the first --eval-answers held-out problems at
    each evaluation, step 0 included (and the sampled one with --eval-sampled), as evaluate()
    graded it; a resume keeps exactly one line per problem and evaluation."""
    run_dir = train.main(args_for(warm, tmp_path, "--steps", "4", "--save-every", "2", "--eval-answers", "3",
                                  "--eval-sampled", "--eval-pass-k", "2"))
    rows, held_out = read_answers(run_dir), tasks.eval_set("easy", 8)
    policy, ckpt = load_checkpoint(os.path.join(run_dir, "ckpt_step0.pt"))  # --eval-pass-k: pass@2 at each eval
    from tokenizer import build_tokenizer
    want = evaluation.pass_at_k(policy, build_tokenizer(ckpt["tokenizer"]), held_out, 2, 1.0,
                                train.step_seed(0, 0) + train.PASS_AT_K_SEED, 16)["pass"]
    assert read_metrics(run_dir)[0]["eval_pass_at_k"] == pytest.approx(want)
    assert [(r["step"], r["prompt"]) for r in rows] == [(s, p.prompt) for s in (0, 2, 4) for p in held_out[:3]]
    for r in rows:
        assert r["answer"] == held_out[[p.prompt for p in held_out].index(r["prompt"])].answer
        for kind in ("greedy", "sampled"):
            assert isinstance(r[kind], str) and r[kind + "_correct"] == rewards.correctness_reward(r[kind], r["answer"])
    # step 0's answers are evaluate()'s for the warm start: greedy, and sampled with the run's own generator
    enc = build_tokenizer(ckpt["tokenizer"])
    greedy = evaluation.evaluate(policy, enc, held_out, 16)["answers"]
    sampler = dict(temperature=1.0, top_k=0, top_p=1.0,
                   generator=torch.Generator().manual_seed(train.step_seed(0, 0) + train.EVAL_SAMPLED_SEED))
    sampled = evaluation.evaluate(policy, enc, held_out, 16, sampler=sampler)["answers"]
    assert [(r["greedy"], r["sampled"]) for r in rows[:3]] == [(g[1], s[1]) for g, s in zip(greedy[:3], sampled[:3])]
    metrics = {r["step"]: r for r in read_metrics(run_dir) if "eval_acc" in r}
    assert set(metrics) == {r["step"] for r in rows}
    with open(os.path.join(run_dir, "answers.jsonl"), "a") as f:  # an evaluation logged after the last checkpoint
        f.write(json.dumps({**rows[-1], "step": 5}) + "\n")
    train.main(cli.get_parser().parse_args(["--resume", run_dir, "--steps", "4", "--threads", "1"]))
    assert read_answers(run_dir) == rows  # the step-5 line dropped, step 4 written once


def test_existing_run_folder_is_refused(warm, tmp_path):
    train.main(args_for(warm, tmp_path, "--steps", "1"))
    with pytest.raises(ValueError, match="already has a run"):
        train.main(args_for(warm, tmp_path, "--steps", "1"))


def test_bad_input_gives_clear_errors(warm, tmp_path):
    with pytest.raises(CheckpointError, match="checkpoint not found"):
        train.main(args_for(str(tmp_path / "nope.pt"), tmp_path))
    (tmp_path / "corrupt.pt").write_bytes(b"not a checkpoint")
    with pytest.raises(CheckpointError, match="cannot read checkpoint"):
        train.main(args_for(str(tmp_path / "corrupt.pt"), tmp_path))
    with pytest.raises(ValueError, match="no run folder"):
        train.main(cli.get_parser().parse_args(["--resume", str(tmp_path / "missing")]))
    with pytest.raises(ValueError, match="unknown difficulty"):
        train.main(args_for(warm, tmp_path, "--level", "impossible"))
    with pytest.raises(ValueError, match="group-size must be >= 2"):
        train.main(args_for(warm, tmp_path, "--group-size", "1"))
    for t in ("0", "-1"):  # 0 divides by zero; -1 would train on a flipped distribution
        with pytest.raises(ValueError, match=f"--learner-temperature must be > 0.*got {float(t)}"):
            train.main(args_for(warm, tmp_path, "--run-name", "t" + t, "--learner-temperature", t))
        assert not os.path.exists(tmp_path / ("t" + t))  # refused before the run folder is made


def test_the_held_out_set_has_its_own_level(warm, tmp_path):
    """--eval-level: train on one level, evaluate on another (the runaway trains on searches and
    chains and is evaluated on medium's chains); by default the training level."""
    _, held_out = cli.task_sets(args_for(warm, tmp_path, "--level", "medium_search", "--eval-level", "medium",
                                         "--eval-size", "50"), None, None)
    assert held_out == tasks.eval_set("medium", 50)
    _, held_out = cli.task_sets(args_for(warm, tmp_path, "--level", "medium_search", "--eval-size", "50"), None, None)
    assert held_out == tasks.eval_set("medium_search", 50) != tasks.eval_set("medium", 50)
    with pytest.raises(ValueError, match="unknown difficulty 'impossible'"):
        cli.check_args(args_for(warm, tmp_path, "--eval-level", "impossible"))


def test_a_cap_that_cannot_hold_a_right_first_try_is_refused_naming_the_numbers(warm, tmp_path):
    with pytest.raises(ValueError, match=r"--max-new-tokens 12 is shorter than the (\d+) tokens that a right first "
                                         r"try of --level medium_search can take") as e:
        train.main(args_for(warm, tmp_path, "--level", "medium_search", "--max-new-tokens", "12"))
    need = int(re.search(r"the (\d+) tokens", str(e.value)).group(1))
    assert 15 <= need <= 30 and "\n" not in str(e.value) and not os.path.exists(tmp_path / "r")
    cli.check_task_fit(args_for(warm, tmp_path, "--level", "medium_search", "--max-new-tokens", str(need)),
                         *cli.load_init(warm)[1:])  # exactly enough passes
    with pytest.raises(ValueError, match="--level medium_search can take"):  # the held-out level is checked too
        train.main(args_for(warm, tmp_path, "--eval-level", "medium_search", "--max-new-tokens", "12"))


def test_a_cap_shorter_than_the_longest_honest_answer_of_a_budget_is_refused(warm, tmp_path):
    """With a try budget every honest answer ends by itself; a cap that would cut one is refused,
    naming the numbers, before the run folder exists; exactly enough passes."""
    with pytest.raises(ValueError, match=r"--max-new-tokens 40 is shorter than the (\d+) tokens of the longest "
                                         r"honest answer of --level medium_budget") as e:
        train.main(args_for(warm, tmp_path, "--level", "medium_budget", "--max-new-tokens", "40"))
    need = int(re.search(r"the (\d+) tokens", str(e.value)).group(1))
    assert 40 < need <= 80 and "\n" not in str(e.value) and not os.path.exists(tmp_path / "r")
    cli.check_task_fit(args_for(warm, tmp_path, "--level", "medium_budget", "--max-new-tokens", str(need)),
                         *cli.load_init(warm)[1:])


def test_a_warm_start_that_never_searched_is_warned_about_once(warm, tmp_path, capsys):
    _, enc, ckpt = cli.load_init(warm)
    assert ckpt["task"]["sft_level"] == "easy"  # the tiny warm start: chains only
    cli.check_task_fit(args_for(warm, tmp_path, "--level", "medium_search", "--max-new-tokens", "40"), enc, ckpt)
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "has search problems, but the warm start" in err and "warmstart_search.pt" in err
    cli.check_task_fit(args_for(warm, tmp_path, "--level", "medium", "--max-new-tokens", "40"), enc, ckpt)
    assert capsys.readouterr().err == ""


def test_a_warm_start_that_never_saw_an_inequality_is_warned_about_once(warm, tmp_path, capsys):
    """medium_many from a warm start of equalities only (the runaway's) or of chains only: one line each."""
    _, enc, ckpt = cli.load_init(warm)
    for sft_level, says in (("mixed_search", "has inequalities (several right digits)"), ("easy", "has search problems")):
        ckpt = {**ckpt, "task": {**ckpt["task"], "sft_level": sft_level}}
        cli.check_task_fit(args_for(warm, tmp_path, "--level", "medium_many", "--max-new-tokens", "40"), enc, ckpt)
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and says in err, err
    ckpt["task"]["sft_level"] = "mixed_many"
    cli.check_task_fit(args_for(warm, tmp_path, "--level", "medium_many", "--max-new-tokens", "40"), enc, ckpt)
    assert capsys.readouterr().err == ""


def test_a_resumed_run_checks_its_saved_flags_before_touching_the_folder(warm, tmp_path):
    run_dir = train.main(args_for(warm, tmp_path, "--steps", "1", "--mu", "1"))
    path = os.path.join(run_dir, "ckpt_latest.pt")
    ckpt = torch.load(path, weights_only=True)
    ckpt["args"].update(dual_clip=3.0, objective="cispo")  # a contradiction saved by code that did not refuse it
    torch.save(ckpt, path)
    with open(os.path.join(run_dir, "metrics.jsonl"), "a") as f:
        f.write(json.dumps({"step": 2, "loss": 1.0}) + "\n")  # a resume would drop it
    before = open(os.path.join(run_dir, "metrics.jsonl")).read()
    with pytest.raises(ValueError, match="has no such bound"):
        train.main(cli.get_parser().parse_args(["--resume", run_dir, "--steps", "2", "--threads", "1"]))
    assert open(os.path.join(run_dir, "metrics.jsonl")).read() == before


def test_a_resumed_run_warns_about_its_own_typed_flags_and_ignored_ones(warm, tmp_path, capsys):
    _, args = cli.parse_args(["--init", warm, "--runs-dir", str(tmp_path), "--run-name", "r", "--level", "easy",
                                "--prompts-per-step", "4", "--group-size", "4", "--max-new-tokens", "8",
                                "--eval-size", "4", "--threads", "1", "--steps", "1", "--mu", "1", "--kl-reweight"])
    run_dir = train.main(args)
    assert capsys.readouterr().err.count("--kl-reweight does nothing") == 1
    train.main(cli.parse_args(["--resume", run_dir, "--steps", "2", "--threads", "1", "--kl", "0.5"])[1])
    err = capsys.readouterr().err
    assert err.count("--kl-reweight does nothing") == 1  # the run's own typed flag, from its saved flags
    assert "--kl ignored: a resumed run keeps its saved flags" in err


def test_without_triton_everything_imports_and_a_step_runs():
    """macOS / Windows have no Triton wheel: the chunked PyTorch path must carry the run."""
    code = """
import sys
sys.modules["triton"] = None  # import triton now raises ImportError
import config, grpo, train, tasks, torch
from model import GPT, GPTConfig
from tokenizer import build_tokenizer
enc = build_tokenizer({"merges": []})
model = GPT(GPTConfig(vocab_size=enc.n_vocab, max_seq_len=48, n_layer=1, n_head=2, d_model=32))
stream = tasks.problems("easy", 0)
cfg = config.GRPOConfig(group_size=2, max_new_tokens=3)
from harness.stats import logged_step
_, stats = logged_step(model, None, torch.optim.Adam(model.parameters()), enc, lambda: next(stream), 2, cfg,
                          torch.Generator().manual_seed(0))
print("ok", stats["loss"])
"""
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.startswith("ok"), out.stderr[-2000:]


def test_the_readme_quick_start_plots_the_folder_its_run_writes():
    """The README's first commands, literally: the run they name is the folder they plot, and
    each train.py command parses (a newcomer who follows them in order gets no error)."""
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        readme = f.read()
    block = re.search(r"```bash\n(.*?)```", readme, re.S).group(1)
    commands = [line.split("#")[0].strip() for line in block.splitlines() if line.strip()]
    trains = [c.split("python train.py", 1)[1].split("&&")[0].split() for c in commands if "python train.py" in c]
    plots = [m.split() for m in re.findall(r"`python plot\.py ([^`]+)`", readme)]  # the quick start's next step
    assert trains and plots
    args = cli.get_parser().parse_args(trains[0])
    assert plots[0][0] == os.path.join(args.runs_dir, args.run_name)
