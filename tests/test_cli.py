"""harness/cli.py: train.py's flags and their checks, as a user meets them: one-line errors with exit 2
before anything is written, warnings for flags that can do nothing, defaults from GRPOConfig."""
import dataclasses
import json
import os
import re
import subprocess
import sys

import pytest

import config
import field_methods
import grpo
from harness import cli

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.mark.parametrize("argv,message", [(["--clip-hgh", "0.3"], "unrecognized arguments"),
                                          (["--loss-agg", "mean"], "invalid choice"),
                                          (["--init", "missing.pt"], "checkpoint not found: missing.pt"),
                                          (["--dual-clip", "3", "--objective", "cispo"], "has no such bound"),
                                          (["--learner-temperature", "0"], "--learner-temperature must be > 0"),
                                          (["--tis-cap", "2", "--tis-floor", "3"], "must be >= 0 and below --tis-cap")])
def test_cli_errors_are_one_line_without_traceback(argv, message):
    out = subprocess.run([sys.executable, "train.py", *argv], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and message in out.stderr and "Traceback" not in out.stderr


def checked(argv, capsys):
    """check_args and warn_inert_flags on the flags argv resolves to -> what they wrote to stderr
    (the warnings: check_args only refuses)."""
    _, args = cli.parse_args(argv)
    capsys.readouterr()
    cli.check_args(args)
    assert capsys.readouterr().err == ""
    cli.warn_inert_flags(args)
    return capsys.readouterr().err


@pytest.mark.parametrize("argv,message", [
    (["--ratio-level", "sequence", "--loss-agg", "token_mean"], "--ratio-level sequence gives one term per answer"),
    (["--ratio-level", "gspo", "--loss-agg", "constant"], "--ratio-level gspo gives one term per answer"),
    (["--recipe", "dapo", "--ratio-level", "gspo"], "--loss-agg token_mean would weigh by the answer's length"),
    (["--kl", "0.1", "--kl-level", "sequence", "--loss-agg", "constant"], "--kl-level sequence gives one term"),
    (["--dual-clip", "3", "--objective", "book"], "--objective book has no such bound"),
    (["--dual-clip", "3", "--objective", "cispo"], "--objective cispo has no such bound"),
    (["--dual-clip", "1"], "needs c > 1"), (["--dual-clip", "0.5"], "needs c > 1"), (["--dual-clip", "-2"], "needs c > 1"),
    (["--keep-sampling-mask"], "neither cuts one"),
    (["--recipe", "deepseek_v32", "--top-p", "1"], "neither cuts one"),
    (["--sampler-dtype", "fp8", "--dtype", "bfloat16"], "--dtype bfloat16 makes the learner bf16"),
    (["--sampler-dtype", "int8", "--dtype", "bfloat16"], "--dtype bfloat16 makes the learner bf16"),
    (["--dropout", "0.1", "--model", "qwen"], "the book's Qwen3 (--model) has no dropout"),
    (["--dropout", "1"], "--dropout must be in [0, 1), got 1.0"), (["--dropout", "-0.1"], "must be in [0, 1)"),
    (["--dropout", "nan"], "--dropout must be in [0, 1), got nan"),
    (["--kl-cov", "1"], "--kl-cov is a share of the update's tokens, in [0, 1), got 1.0"),
    (["--kl-cov", "-0.01"], "--kl-cov is a share of the update's tokens, in [0, 1)"),
    (["--rollout-lag", "0"], "--rollout-lag must be >= 1, got 0: a lag of 0 is the on-policy default"),
    (["--rollout-lag", "-2"], "--rollout-lag must be >= 1, got -2"),
    (["--rollout-lag", "1", "--resample-epochs"], "--resample-epochs samples each epoch afresh"),
    (["--recipe", "book", "--rollout-lag", "2"], "use one or the other (--no-resample-epochs)"),
    (["--lag-pi-old", "learner"], "without --rollout-lag K the learner is the sampler"),
    (["--lag-pi-old", "learner", "--recipe", "book"], "without --rollout-lag K the learner is the sampler"),
    (["--tis-cap", "0.5"], "a cap below 1 scales every token's weight down"),
    (["--top-k", "-1"], "--top-k must be >= 0 (0: off), got -1"),
    (["--adv-clip", "-1"], "--adv-clip must be >= 0 (0: off), got -1.0"),
    (["--run-name", "../escape"], "is a folder name, without / or ..: --runs-dir says where run folders go"),
    (["--run-name", "/an/absolute/path"], "is a folder name, without / or .."),
    (["--run-name", "a/b"], "is a folder name, without / or .."),
    (["--run-name", ".."], "is a folder name, without / or .."),  # runs/.. is the folder above runs/
    # the field's flags (field_methods.py): out of range, or with a flag they cannot act with
    (["--objective", "sapo", "--sapo-tau-pos", "0"], "temperatures, > 0 (they divide the gate), got 0.0, 1.05"),
    (["--sapo-tau-neg", "-1"], "--sapo-tau-pos and --sapo-tau-neg are temperatures, > 0"),
    (["--objective", "vespo", "--vespo-lambda-neg", "0"], "needs k >= 0 and lambda > 0"),
    (["--vespo-k-pos", "-1"], "needs k >= 0 and lambda > 0"),
    (["--top-entropy-quantile", "0"], "in (0, 1] (1: every token), got 0.0"),
    (["--top-entropy-quantile", "1.5"], "in (0, 1] (1: every token), got 1.5"),
    (["--tis-cap", "2", "--tis-floor", "2"], "--tis-floor 2.0 must be >= 0 and below --tis-cap 2.0"),
    (["--tis-cap", "2", "--tis-floor", "-0.5"], "must be >= 0 and below --tis-cap"),
    (["--rejection", "seq_mean_k3"], "needs --rejection-bound U > 0 (k2, k3 <= U), got None"),
    (["--rejection", "token_k1", "--rejection-bound", "1"], "needs --rejection-bound U > 1 (k1 keeps the ratio band"),
    (["--rejection", "seq_max_k2", "--rejection-bound", "0"], "needs --rejection-bound U > 0"),
    (["--rejection-bound", "inf", "--rejection", "token_k3"], "--rejection-bound must be a finite number"),
    (["--adaptive-entropy", "--entropy-coef-delta", "0"], "--adaptive-entropy needs --entropy-target >= 0"),
    (["--adaptive-entropy", "--entropy-coef", "2"], "a starting --entropy-coef in [0, --entropy-coef-max]"),
    (["--adaptive-entropy", "--entropy-target", "-1"], "--adaptive-entropy needs --entropy-target >= 0"),
    (["--objective", "gmpo", "--loss-agg", "token_mean"], "--objective gmpo gives one term per answer"),
    (["--objective", "gmpo", "--ratio-level", "gspo"], "--objective gmpo builds its own weight"),
    (["--objective", "dppo_tv", "--ratio-level", "sequence"], "--objective dppo_tv builds its own weight"),
    (["--objective", "vespo", "--ratio-level", "gspo"], "--objective vespo builds its own weight"),
    (["--loss-agg", "luspo"], "--loss-agg luspo scales GSPO's per-answer loss"),
    (["--recipe", "vespo", "--tis-cap", "2", "--tis-mode", "sequence_mask"], "is one weight an answer already"),
    (["--baseline", "leave_one_out", "--reward-norm", "norm_then_sum"], "--baseline leave_one_out has no group"),
    (["--loss-agg", "bnpo", "--ratio-level", "gspo"], "which --loss-agg bnpo would weigh by the answer's length"),
    # a method with a flag it holds already, and the field's bare flags, whose sources give other values than ours
    (["--objective", "dppo_tv", "--clip", "0.15", "--tis-cap", "2"], "weighs each token by pi / pi_sampler already"),
    (["--recipe", "dppo_kl", "--tis-cap", "2"], "--tis-cap would weigh it by pi_old / pi_sampler a second time"),
    (["--objective", "gmpo"], "--objective gmpo bounds each token's log-ratio, 0.4 in its sources"),
    (["--objective", "dppo_tv"], "TV 0.15 in its sources, and --clip's default 0.2 is PPO's: give --clip (or --recipe "
                                 "dppo_tv)"),
    (["--objective", "dppo_kl", "--clip-high", "0.05"], "give --clip (or --recipe dppo_kl)"),
    (["--objective", "vespo"], "--objective vespo: its sources average over tokens")])
def test_contradicting_flags_are_refused_in_one_line(argv, message, capsys):
    with pytest.raises(ValueError, match=re.escape(message)) as e:
        checked(argv, capsys)
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("argv", [["--ratio-level", "sequence"], ["--ratio-level", "gspo", "--loss-agg", "seq_mean"],
                                  ["--kl", "0.1", "--kl-level", "sequence"], ["--dual-clip", "3"],
                                  ["--keep-sampling-mask", "--top-k", "20"], ["--keep-sampling-mask", "--top-p", "0.9"],
                                  ["--sampler-dtype", "fp8"], ["--sampler-dtype", "int8", "--dtype", "float32"],
                                  ["--dropout", "0.1"], ["--rollout-lag", "2", "--dynamic-sampling"],
                                  ["--kl-cov", "0.01"], ["--kl-cov", "0.01", "--mu", "1", "--minibatches", "2"],
                                  ["--rollout-lag", "1", "--off-policy-mask", "0.1"],
                                  ["--recipe", "book", "--rollout-lag", "1", "--no-resample-epochs"],
                                  ["--rollout-lag", "4", "--lag-pi-old", "learner", "--tis-cap", "2"],
                                  ["--tis-cap", "1"], ["--tis-cap", "inf"], ["--top-k", "0"], ["--adv-clip", "1"],
                                  ["--run-name", "my-run.2"],
                                  # the field's, where they act
                                  ["--objective", "sapo", "--sapo-tau-neg", "2"], ["--recipe", "gmpo"],
                                  ["--recipe", "dppo_tv"], ["--recipe", "dppo_kl"], ["--recipe", "luspo"],
                                  ["--recipe", "vespo", "--vespo-k-neg", "4", "--tis-cap", "2"],
                                  ["--tis-cap", "2", "--tis-floor", "0.5", "--tis-mode", "token_mask"],
                                  ["--tis-cap", "inf", "--tis-floor", "0.5", "--tis-mode", "sequence_mask"],
                                  ["--rejection", "token_k1", "--rejection-bound", "2"],
                                  ["--rejection", "seq_mean_k3", "--rejection-bound", "0.01"],
                                  ["--baseline", "batch"], ["--baseline", "leave_one_out", "--adv-clip", "1"],
                                  ["--top-entropy-quantile", "0.2"], ["--kl", "0.1", "--kl-estimator", "k3+"],
                                  ["--adaptive-entropy", "--entropy-target", "0.3", "--entropy-coef-max", "0.1"],
                                  ["--objective", "gmpo", "--clip", "0.2"], ["--objective", "dppo_kl", "--clip", "0.05"],
                                  ["--objective", "vespo", "--loss-agg", "seq_mean"]])
def test_the_same_flags_where_they_act_pass_silently(argv, capsys):
    assert checked(argv, capsys) == ""


@pytest.mark.parametrize("argv,flag,why", [
    (["--kl-estimator", "k1"], "--kl-estimator", "without a KL penalty (--kl 0)"),
    (["--kl-level", "sequence", "--loss-agg", "token_mean"], "--kl-level", "without a KL penalty"),
    (["--kl-reweight", "--kl", "0"], "--kl-reweight", "without a KL penalty"),
    (["--resample-epochs", "--mu", "1"], "--resample-epochs", "with one epoch (--mu 1)"),
    (["--kl-cov", "0.01", "--mu", "1"], "--kl-cov", "with one update a rollout"),
    (["--max-sampling-rounds", "5"], "--max-sampling-rounds", "without --dynamic-sampling"),
    (["--lag-pi-old", "sampler"], "--lag-pi-old", "without --rollout-lag"),
    (["--gated"], "--gated", "without a format bonus (--format-weight 0)"),
    (["--format-check", "book"], "--format-check", "without a format bonus"),
    (["--task", "math", "--data", "x.json", "--model", "m", "--level", "easy"], "--level", "with --task math"),
    (["--task", "math", "--data", "x.json", "--model", "m", "--eval-level", "easy"], "--eval-level",
     "with --task math"),
    (["--sapo-tau-neg", "2"], "--sapo-tau-neg", "without --objective sapo"),
    (["--vespo-lambda-pos", "2"], "--vespo-lambda-pos", "without --objective vespo"),
    (["--entropy-target", "0.5"], "--entropy-target", "without --adaptive-entropy"),
    (["--entropy-coef-delta", "0.01"], "--entropy-coef-delta", "without --adaptive-entropy"),
    (["--tis-floor", "0.5"], "--tis-floor", "without --tis-cap (no importance weight to bound)"),
    (["--tis-mode", "token_mask"], "--tis-mode", "without --tis-cap"),
    (["--rejection-bound", "0.1"], "--rejection-bound", "without --rejection"),
    (["--baseline", "leave_one_out", "--adv-norm", "group"], "--adv-norm", "with --baseline leave_one_out, which"),
    (["--loss-agg", "bnpo"], "--loss-agg", "beyond token_mean in one process"),
    (["--objective", "sapo", "--clip", "0.1"], "--clip", "with --objective sapo, which has no clip"),
    (["--recipe", "vespo", "--clip-high", "0.3"], "--clip-high", "with --objective vespo, which has no clip")])
def test_a_typed_flag_that_does_nothing_gets_one_warning_line(argv, flag, why, capsys):
    err = checked(argv, capsys)
    assert err.startswith(f"train.py: warning: {flag} does nothing") and why in err and err.count("\n") == 1


def test_flags_a_recipe_or_a_default_set_never_warn(capsys):
    """Only typed flags are warned about: the book's recipe sets its KL estimator, then --kl 0 turns the KL off."""
    for argv in ([], ["--kl", "0"], ["--recipe", "book", "--kl", "0"], ["--recipe", "book", "--kl", "0", "--mu", "1"],
                 ["--recipe", "olmo3", "--no-dynamic-sampling"], ["--recipe", "gdpo", "--format-weight", "0"]):
        assert checked(argv, capsys) == "", argv
    assert "--kl-estimator does nothing" in checked(["--recipe", "book", "--kl", "0", "--kl-estimator", "k3"], capsys)


def test_typed_flags_are_the_ones_on_the_command_line():
    assert cli.typed_flags(["--recipe", "book", "--kl", "0", "--no-gated"]) == ["gated", "kl", "recipe"]
    assert cli.typed_flags([]) == [] and cli.parse_args(["--mu", "1"])[1].typed_flags == ["mu"]


def test_print_config_warns_in_one_line_and_refuses_with_exit_2():
    run = lambda *argv: subprocess.run([sys.executable, "train.py", *argv, "--print-config"], cwd=ROOT,  # noqa: E731
                                       capture_output=True, text=True, timeout=120)
    out = run("--kl-estimator", "k1")
    assert out.returncode == 0 and out.stderr == "train.py: warning: --kl-estimator does nothing without a KL penalty (--kl 0)\n"
    assert json.loads(out.stdout)["kl_estimator"] == "k1"  # the run goes on
    out = run("--keep-sampling-mask")
    assert out.returncode == 2 and out.stderr.count("\n") == 1 and "error: --keep-sampling-mask" in out.stderr


@pytest.mark.parametrize("script", ["train.py", "harness/sft.py", "plot.py"])
def test_help_works(script):
    out = subprocess.run([sys.executable, script, "--help"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and "usage" in out.stdout


def test_every_grpo_config_field_is_a_flag_with_its_default():
    args = cli.get_parser().parse_args([])
    for f in dataclasses.fields(config.GRPOConfig):
        assert getattr(args, f.name) == f.default, f.name
    assert cli.grpo_config(args) == config.GRPOConfig()


def test_editing_a_grpo_config_default_changes_the_flag(monkeypatch):
    """The dataclass is the one source: argparse reads defaults and choices from it."""
    monkeypatch.setattr(config.GRPOConfig.__dataclass_fields__["group_size"], "default", 5)
    monkeypatch.setattr(config.GRPOConfig.__dataclass_fields__["logprobs"], "default", "fused")
    args = cli.get_parser().parse_args([])
    assert args.group_size == 5 and args.logprobs == "fused"
    assert cli.get_parser().parse_args(["--logprobs", "textbook"]).logprobs == "textbook"
    with pytest.raises(SystemExit):  # choices come from the field too
        cli.get_parser().parse_args(["--adv-norm", "median"])


@pytest.mark.parametrize("argv,message", [
    (["--format-weight", "nan"], "--format-weight must be a finite number, got nan"),
    (["--kl", "inf"], "--kl must be a finite number, got inf"),
    (["--lr", "nan"], "--lr must be a finite number, got nan"),
    (["--dual-clip", "inf"], "--dual-clip must be a finite number, got inf"),
    (["--clip", "nan"], "--clip must be a finite number or inf (no clipping), got nan"),
    (["--off-policy-mask=-inf"], "--off-policy-mask must be a finite number or inf (off), got -inf")])
def test_a_float_flag_given_nan_or_a_meaningless_inf_is_refused_before_anything_is_written(argv, message, tmp_path):
    """argparse's float() takes nan and inf; each would reach the loss as a NaN at step 1."""
    out = subprocess.run([sys.executable, "train.py", *argv, "--runs-dir", str(tmp_path), "--run-name", "r"],
                         cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and out.stderr == f"train.py: error: {message}\n"
    assert not os.listdir(tmp_path)  # no run folder


@pytest.mark.parametrize("argv,message", [
    (["--rollout-lag", "0"], "--rollout-lag must be >= 1, got 0: a lag of 0 is the on-policy default, so leave the "
                             "flag off"),
    (["--recipe", "book", "--rollout-lag", "1"], "--rollout-lag trains on a batch sampled steps ago, but "
                                                 "--resample-epochs")])
def test_a_refused_rollout_lag_exits_2_in_one_line_before_anything_is_written(argv, message, tmp_path):
    out = subprocess.run([sys.executable, "train.py", *argv, "--runs-dir", str(tmp_path), "--run-name", "r"],
                         cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and out.stderr.count("\n") == 1 and f"train.py: error: {message}" in out.stderr
    assert not os.listdir(tmp_path)  # no run folder


def test_a_cap_the_models_context_cannot_hold_is_refused_before_anything_is_written(tmp_path):
    """The small GPT holds 96 positions: a prompt of --level medium takes up to 14 tokens, so a cap of 1000 is
    refused in one line naming the most it can be; at that most the run starts."""
    out = subprocess.run([sys.executable, "train.py", "--max-new-tokens", "1000", "--runs-dir", str(tmp_path),
                          "--run-name", "r"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and out.stderr.count("\n") == 1 and "Traceback" not in out.stderr
    assert "train.py: error: --max-new-tokens 1000 does not fit the model: its context holds 96 tokens" in out.stderr
    most = int(re.search(r"--max-new-tokens <= (\d+)", out.stderr)[1])
    assert not os.listdir(tmp_path)  # no run folder
    ok = subprocess.run([sys.executable, "train.py", "--max-new-tokens", str(most), "--steps", "0", "--eval-size", "4",
                         "--runs-dir", str(tmp_path), "--run-name", "r"], cwd=ROOT, capture_output=True, text=True,
                        timeout=120)
    assert ok.returncode == 0, ok.stderr


def test_help_gives_each_default_once():
    """Each flag's help, as --help prints it, names its default at most once, and never as 'None'."""
    ap = cli.get_parser()
    formatter = ap.formatter_class(prog="train.py")
    for action in ap._actions:
        text = (formatter._get_help_string(action) or "") % {"default": action.default, "prog": "train.py"}
        assert len(re.findall(r"\(default|default:|default \d", text)) <= 1, text
        assert "(default: None)" not in text and "(default: False)" not in text, text
    out = subprocess.run([sys.executable, "train.py", "--help"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    text = " ".join(out.stdout.split())  # argparse wraps lines
    assert out.returncode == 0 and "--runs-dir RUNS_DIR where run folders live (default: runs)" in text
    assert "(default: a timestamp)" in text and "(default: a timestamp) (default" not in text


def test_the_start_of_a_run_fits_on_a_screen(tmp_path):
    """The resolved config goes to config.json, named in one line: the first step prints within a screen."""
    out = subprocess.run([sys.executable, "train.py", "--steps", "1", "--eval-size", "4", "--runs-dir", str(tmp_path),
                          "--run-name", "r"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    lines = out.stdout.splitlines()
    first_step = next(i for i, line in enumerate(lines) if line.startswith("step    1/1"))
    assert out.returncode == 0 and first_step < 10, lines[:first_step]
    assert any(f"config: {tmp_path / 'r' / 'config.json'}" in line for line in lines)
    assert json.loads((tmp_path / "r" / "config.json").read_text())["steps"] == 1


@pytest.mark.parametrize("argv", [["--eval-pass-n", "16"], ["--eval-pass-k", "8", "--eval-pass-n", "4"],
                                  ["--eval-pass-k", "8", "--eval-pass-n", "-1"]])
def test_eval_pass_n_without_a_k_it_can_estimate_is_refused_in_one_line(argv, tmp_path):
    """--eval-pass-n N estimates pass@K from N answers: without --eval-pass-k, or with N < K, it cannot."""
    out = subprocess.run([sys.executable, "train.py", *argv, "--runs-dir", str(tmp_path), "--run-name", "r"],
                         cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and out.stderr.count("\n") == 1
    assert "train.py: error: --eval-pass-n" in out.stderr and "needs --eval-pass-k K with 0 < K <= N" in out.stderr
    assert not os.listdir(tmp_path)  # no run folder
    ok = subprocess.run([sys.executable, "train.py", "--eval-pass-k", "8", "--eval-pass-n", "16", "--print-config"],
                        cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert ok.returncode == 0 and '"eval_pass_n": 16' in ok.stdout


def test_evaluation_refuses_pass_n_below_pass_k_in_one_line():
    out = subprocess.run([sys.executable, "harness/evaluation.py", "--pass-k", "8", "--pass-n", "4"], cwd=ROOT,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and out.stderr == "harness/evaluation.py: error: --pass-n 4 needs --pass-k K with 0 < K <= N, got 8\n"


def test_a_run_with_a_rollout_lag_refuses_to_resume_and_leaves_its_folder_as_it_was(tmp_path):
    """The queue of batches a lagged run trains on is not in its checkpoint: --resume is refused in one
    line (exit 2), naming the weights a new run can start from, and the run's logs are not truncated."""
    from model import GPT, GPTConfig, save_checkpoint
    run_dir = tmp_path / "lagged"
    saved = vars(cli.get_parser().parse_args(["--rollout-lag", "2"]))
    model = GPT(GPTConfig(vocab_size=259, max_seq_len=16, n_layer=1, n_head=2, d_model=16))
    save_checkpoint(str(run_dir / "ckpt_latest.pt"), model, {"optimizer": {}, "step": 1, "args": saved})
    (run_dir / "metrics.jsonl").write_text('{"step": 1}\n{"step": 2}\n')  # a resume would drop step 2
    out = subprocess.run([sys.executable, "train.py", "--resume", str(run_dir)], cwd=ROOT, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 2 and out.stderr.count("\n") == 1 and "Traceback" not in out.stderr
    assert "queue of sampled batches is not in its checkpoint" in out.stderr
    assert f"--init {run_dir / 'ckpt_latest.pt'}" in out.stderr
    assert (run_dir / "metrics.jsonl").read_text() == '{"step": 1}\n{"step": 2}\n'
    assert sorted(os.listdir(run_dir)) == ["ckpt_latest.pt", "metrics.jsonl"]


def test_inf_passes_where_a_flags_help_says_what_it_means_and_the_error_says_the_same():
    """--clip inf (no clipping), --off-policy-mask inf (off), ...: each field whose knob gives inf a
    meaning, and only those, shows it in its --help, in the words its error for nan uses."""
    helps = {a.dest: a.help for a in cli.get_parser()._actions}
    for f in dataclasses.fields(config.GRPOConfig):
        inf = f.metadata["inf"]
        if inf is None:
            continue
        assert helps[f.name].endswith(f"(inf: {inf})"), f.name
        _, args = cli.parse_args([f"--{f.name.replace('_', '-')}", "inf"])
        cli.check_args(args)
        _, args = cli.parse_args([f"--{f.name.replace('_', '-')}", "nan"])
        with pytest.raises(ValueError, match=re.escape(f"or inf ({inf}), got nan")):
            cli.check_args(args)


def test_a_warm_start_that_does_not_match_its_checksum_is_refused_naming_its_build_command(tmp_path, monkeypatch):
    """A shipped warm start whose bytes changed (a damaged copy, or one rebuilt elsewhere) is refused in
    one line (train.py: exit 2, before anything is written), naming the command that rebuilds it; an
    intact copy loads; a file with no .sha256 beside it is not checked."""
    import shutil
    from harness import sft
    shipped = "checkpoints/warmstart_rare.pt"
    assert shipped in sft.SHIPPED and os.path.exists(os.path.join(ROOT, shipped + ".sha256"))
    copy = tmp_path / "warmstart_rare.pt"
    shutil.copy(os.path.join(ROOT, shipped), copy)
    shutil.copy(os.path.join(ROOT, shipped + ".sha256"), str(copy) + ".sha256")
    cli.check_sha256(str(copy))  # intact: passes
    data = bytearray(copy.read_bytes())
    data[-100] ^= 1  # one bit of the weights
    copy.write_bytes(bytes(data))
    monkeypatch.setitem(sft.SHIPPED, os.path.relpath(copy), sft.SHIPPED[shipped])
    with pytest.raises(cli.CheckpointError, match="does not match its checksum") as e:
        cli.check_sha256(str(copy))
    assert sft.SHIPPED[shipped] in str(e.value) and "\n" not in str(e.value)
    out = subprocess.run([sys.executable, "train.py", "--init", str(copy), "--runs-dir", str(tmp_path / "runs"),
                          "--run-name", "r"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and len(out.stderr.strip().splitlines()) == 1, out.stderr
    assert "does not match its checksum" in out.stderr and not (tmp_path / "runs").exists()
    os.remove(str(copy) + ".sha256")
    cli.check_sha256(str(copy))  # no checksum beside it: a file of the user's own


@pytest.mark.parametrize("script", ["train.py", "experiments.py"])
def test_a_command_typed_outside_the_project_folder_says_where_to_run_it(script, tmp_path):
    """From another folder, train.py would look for checkpoints/ there (and build a warm start of its own), and
    experiments.py would start a train.py that is not there: each says in one line where to run it, and exit 2."""
    out = subprocess.run([sys.executable, os.path.join(ROOT, script), "default" if script == "experiments.py" else
                          "--steps", *([] if script == "experiments.py" else ["1"])], cwd=tmp_path,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr == f"{script}: error: run it from the project's folder: cd {ROOT}\n"
    assert os.listdir(tmp_path) == []  # nothing written there
