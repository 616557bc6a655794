"""train.py end to end on a tiny warm start: files, resume, NaN guard, clear errors."""
import json
import os
import signal
import subprocess
import sys
import time

import pytest
import torch

import grpo
import sft
import train
from model import CheckpointError

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="module")
def warm_and_losses(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("warm") / "tiny.pt")
    _, _, losses = sft.main(sft.get_parser().parse_args(
        ["--steps", "40", "--n-layer", "1", "--d-model", "32", "--n-head", "2", "--warmup", "5",
         "--eval-size", "8", "--pass-k", "0", "--out", path, "--threads", "1"]))
    return path, losses


@pytest.fixture(scope="module")
def warm(warm_and_losses):
    return warm_and_losses[0]


def test_tiny_warm_start_lowers_the_loss(warm_and_losses):
    _, losses = warm_and_losses
    first, last = sum(losses[:5]) / 5, sum(losses[-5:]) / 5
    assert last < 0.6 * first, (first, last)


def test_checkpoint_for_another_tokenizer_is_refused(warm, tmp_path):
    ckpt = torch.load(warm, weights_only=True)
    ckpt["tokenizer"] = {"merges": []}  # bytes only: 259 tokens, the model has more
    torch.save(ckpt, tmp_path / "other_tok.pt")
    with pytest.raises(CheckpointError, match="tokenizer has 259 tokens"):
        train.main(args_for(str(tmp_path / "other_tok.pt"), tmp_path))


def args_for(warm, tmp_path, *extra):
    return train.get_parser().parse_args(["--init", warm, "--runs-dir", str(tmp_path), "--run-name", "r",
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


def test_resume_continues_exactly(warm, tmp_path):
    full = train.main(args_for(warm, tmp_path / "a", "--steps", "6", "--save-every", "2"))
    part = train.main(args_for(warm, tmp_path / "b", "--steps", "4", "--save-every", "2"))
    with open(os.path.join(part, "metrics.jsonl"), "a") as f:  # a step logged after the last checkpoint...
        f.write(json.dumps({"step": 5, "loss": 123.0}) + "\n")
        f.write('{"step": 6, "lo')  # ...and a line cut short by a kill
    train.main(train.get_parser().parse_args(["--resume", part, "--steps", "6", "--threads", "1"]))
    rows, ref = read_metrics(part), read_metrics(full)
    assert [r["step"] for r in rows] == [0, 1, 2, 3, 4, 5, 6]
    for r, q in zip(rows[1:], ref[1:]):  # same problems, samples and updates as without the interruption
        assert r["reward"] == q["reward"] and r["loss"] == pytest.approx(q["loss"], rel=1e-5, abs=1e-7)


def test_kill_9_then_resume_has_no_gap_or_duplicate(warm, tmp_path):
    cmd = [sys.executable, "train.py", "--init", warm, "--runs-dir", str(tmp_path), "--run-name", "k", "--steps", "12",
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
        calls.append(1)
        logp, ent = real(*a, **k)
        return (logp * float("nan"), ent) if len(calls) == 3 else (logp, ent)
    monkeypatch.setattr(grpo, "token_logprobs", poisoned)
    with pytest.raises(SystemExit, match="step 3: non-finite loss"):
        train.main(args_for(warm, tmp_path, "--steps", "5", "--save-every", "2"))
    state = torch.load(tmp_path / "r" / "ckpt_latest.pt", weights_only=True)
    assert state["step"] == 2
    assert [r["step"] for r in read_metrics(str(tmp_path / "r"))] == [0, 1, 2]


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
        train.main(train.get_parser().parse_args(["--resume", str(tmp_path / "missing")]))
    with pytest.raises(ValueError, match="unknown difficulty"):
        train.main(args_for(warm, tmp_path, "--level", "impossible"))
    with pytest.raises(ValueError, match="group-size must be >= 2"):
        train.main(args_for(warm, tmp_path, "--group-size", "1"))


@pytest.mark.parametrize("argv,message", [(["--clip-hgh", "0.3"], "unrecognized arguments"),
                                          (["--loss-agg", "mean"], "invalid choice"),
                                          (["--init", "missing.pt"], "checkpoint not found: missing.pt")])
def test_cli_errors_are_one_line_without_traceback(argv, message):
    out = subprocess.run([sys.executable, "train.py", *argv], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and message in out.stderr and "Traceback" not in out.stderr


@pytest.mark.parametrize("script", ["train.py", "sft.py", "plot.py"])
def test_help_works(script):
    out = subprocess.run([sys.executable, script, "--help"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and "usage" in out.stdout
