"""train.py's command line: its flags, their checks, and what a run needs before its first step.

    python train.py --help                       # every flag, grouped, with its default
    python train.py --recipe dapo --print-config # a recipe's resolved flags, checked, without training

The GRPO flags are made from config.GRPOConfig's fields (`add_config_flags`), so a default
lives only there. Every value argparse cannot check itself is checked here (`check_args`),
before anything is written: a refused run leaves no folder behind. Then what a run opens
with: the policy and its tokenizer (the small GPT's warm start, or the book's Qwen3 with
--model), the problems, and the run folder, new or resumed (`start_run`), with the bookkeeping
of its saves: which evaluation saves to keep, where a stopped run's last good weights are.
"""
import argparse
import hashlib
import json
import math
import os
import platform
import re
import shutil
import sys
import time
import traceback
from dataclasses import asdict, fields

import torch

import config
import rewards
import tasks
from book.hf_tokenizer import load_pretrained_tokenizer
from book.qwen3 import load_pretrained
from harness import distributed
from harness import sft
from lab import provenance
from model import CheckpointError, load_checkpoint, set_dropout
from tokenizer import build_tokenizer, encode_completion, encode_prompt


ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the project: where a failed step's code is


# ---------------------------------------------------------------- flags

class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """--help gives each default once: argparse's "(default: X)", unless the flag's own help already says
    what its default is, or there is none to give (None, or an off switch)."""

    def _get_help_string(self, action):
        if re.search(r"\(default|default:|default \d", action.help or "") or action.default in (None, False):
            return action.help
        return super()._get_help_string(action)


def in_project_folder(prog):
    """Refuse, in one line (exit 2), a command typed outside the project's folder: its paths (checkpoints/, the
    scripts experiments.py starts) are the folder's, and a run from elsewhere would build a warm start of its own."""
    if os.path.realpath(os.getcwd()) != os.path.realpath(ROOT):
        print(f"{prog}: error: run it from the project's folder: cd {ROOT}", file=sys.stderr)
        raise SystemExit(2)


class ArgumentParser(argparse.ArgumentParser):
    """argparse's, whose usage error is one line: the error and where the flags are listed, not the 60 lines of the
    usage first."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message} (python {self.prog} --help lists every flag)\n")


def get_parser():
    ap = ArgumentParser(description="GRPO on synthetic arithmetic reasoning.", formatter_class=HelpFormatter)
    g = ap.add_argument_group("run")
    g.add_argument("--run-name", default=None, help="the run's folder, under --runs-dir (default: a timestamp)")
    g.add_argument("--runs-dir", default="runs", help="where run folders live")
    g.add_argument("--resume", default=None, metavar="RUN_DIR",
                   help="continue runs/<name> from its latest checkpoint, with its saved flags (only --steps, --threads, --device apply)")
    g.add_argument("--init", default=sft.DEFAULT_CKPT,
                   help="warm-start checkpoint (built by harness/sft.py if it is the default and missing); with --model, a "
                        "reasoning_from_scratch Qwen3 state_dict (.pth: the book's GRPO checkpoints) whose weights "
                        "replace the folder's")
    g.add_argument("--dropout", type=float, default=0.0, metavar="P",
                   help="residual dropout in the small GPT's training-mode forwards (the learner's log-probs), "
                        "none in the sampler's or the evaluation's: the mismatch TRL turns dropout off for, a noisy "
                        "ratio pi / pi_old (EXPERIMENTS.md, the closing list)")
    g.add_argument("--seed", type=int, default=0, help="seeds problems, sampling and init")
    g.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"], help="where to train")
    g.add_argument("--threads", type=int, default=1, help="torch CPU threads (1: see docs/performance.md, Sampling and training speed)")
    g.add_argument("--recipe", default=None, choices=list(config.RECIPES),
                   help="a named set of GRPO flags (config.RECIPES); flags given explicitly still win")
    g.add_argument("--print-config", action="store_true", help="print the resolved GRPO flags and exit")
    g = ap.add_argument_group("task and evaluation")
    g.add_argument("--level", default="medium", help=f"difficulty of RL problems ({', '.join(tasks.LEVELS)})")
    g.add_argument("--steps", type=int, default=None, help="GRPO steps (default 100; with --resume: the saved value)")
    g.add_argument("--prompts-per-step", type=int, default=16, help="problems per step")
    g.add_argument("--eval-level", default=None, help="difficulty of the held-out problems (default: --level)")
    g.add_argument("--eval-size", type=int, default=500, help="held-out problems per evaluation")
    g.add_argument("--eval-sampled", action="store_true",
                   help="also log eval_sampled_acc: one answer per held-out problem drawn as the rollouts are "
                        "(--temperature, --top-p, --top-k), where greedy decoding hides a flattened learner")
    g.add_argument("--eval-pass-k", type=int, default=0, metavar="K",
                   help="also log eval_pass_at_k: the share of the first 200 held-out problems that K answers "
                        "sampled at --temperature get right at least once (0: off)")
    g.add_argument("--eval-pass-n", type=int, default=0, metavar="N",
                   help="with --eval-pass-k K: N >= K answers a problem instead, pass@K estimated from them without "
                        "bias (Chen et al. 2021), and eval_pass_at_1 and the different right answers a problem "
                        "gets logged too (eval_distinct, eval_distinct_share: diversity where a problem has several, "
                        "--eval-level many) (0: N = K, none of them)")
    g.add_argument("--eval-every", type=int, default=10, help="evaluate (greedy) every N steps")
    g.add_argument("--samples-every", type=int, default=10, help="log a few completions every N steps")
    g.add_argument("--eval-answers", type=int, default=3, metavar="N",
                   help="at each evaluation, write the answers to the first N held-out problems to answers.jsonl "
                        "(python plot.py RUN --samples shows them changing)")
    g.add_argument("--save-every", type=int, default=5, help="write ckpt_latest.pt every N steps")
    g.add_argument("--keep-checkpoints", type=int, default=0, metavar="N",
                   help="keep only the N latest saves made at evaluations (model_step<N>/ folders of --model, about "
                        "1.2 GB each, or ckpt_step<N>.pt), the last always; 0 keeps all")
    g = ap.add_argument_group("the book's model and task (docs/book_model.md)")
    g.add_argument("--model", default=None, metavar="FOLDER",
                   help="a Hugging Face Qwen3 folder (config.json, model.safetensors, tokenizer.json) to train "
                        "instead of the small GPT of --init; at each eval its weights are saved in that layout as "
                        "runs/<name>/model_step<N> (no ckpt_latest.pt, so no --resume)")
    g.add_argument("--dtype", default="auto", choices=["auto", "float32", "bfloat16"],
                   help="weights of --model: auto is bfloat16 on CUDA (as the book) and float32 on CPU")
    g.add_argument("--grad-checkpoint", action="store_true",
                   help="recompute each block of --model in backward instead of keeping its activations")
    g.add_argument("--task", default="arith", choices=["arith", "math"],
                   help="arith: the synthetic task (--level); math: problems and answers from --data")
    g.add_argument("--data", default=None, metavar="FILE",
                   help="--task math: a JSON list or JSONL file with problem and answer fields")
    g.add_argument("--eval-data", default=None, metavar="FILE",
                   help="--task math: the held-out file (e.g. MATH-500); without it, 1 in 8 problems of --data "
                        "are held out")
    g.add_argument("--eval-batch-size", type=int, default=256, help="rows per batch of the greedy evaluation")
    g.add_argument("--chat-template", action="store_true",
                   help="wrap each prompt of --model in Qwen3's chat template with thinking on, as the book does for "
                        "the reasoning Qwen3-0.6B (Qwen3Tokenizer(apply_chat_template=True, add_generation_prompt=True, "
                        "add_thinking=True)); the stop tokens are the folder's eos_token_id either way")
    g.add_argument("--eval-fallback", default="none", choices=rewards.FALLBACKS,
                   help="an evaluated answer without \\boxed{}: none counts it wrong (the training reward's rule); "
                        "number takes its last number, else the whole text (the book's MATH-500 evaluation, ch03 "
                        "extract_final_candidate's number_then_full)")
    add_config_flags(ap, config.GRPOConfig)
    # the flags typed on the command line (parse_args fills it in): only those get a warning
    # when they can do nothing, never a value a recipe or a default set
    ap.set_defaults(typed_flags=[])
    return ap


def add_config_flags(ap, config_class):
    """One flag per field of the dataclass, with its default, help and choices from there."""
    groups = {}
    for f in fields(config_class):
        meta = f.metadata
        g = groups.get(meta["group"]) or groups.setdefault(meta["group"], ap.add_argument_group(meta["group"]))
        flag = "--" + f.name.replace("_", "-")
        if isinstance(f.default, bool):  # --flag / --no-flag
            g.add_argument(flag, action=argparse.BooleanOptionalAction, default=f.default, help=meta["help"])
        else:
            inf = f" (inf: {meta['inf']})" if meta["inf"] else ""  # the words check_finite's error uses
            g.add_argument(flag, type=meta["type"] or type(f.default), default=f.default, choices=meta["choices"],
                           help=meta["help"] + inf)


def parse_args(argv=None, ap=None):
    """Parse the command line twice: once for --recipe, then with the recipe's values as
    defaults, so a flag given explicitly still wins over the recipe."""
    ap = ap or get_parser()
    recipe = ap.parse_known_args(argv)[0].recipe
    if recipe:
        ap.set_defaults(**config.RECIPES[recipe])
    args = ap.parse_args(argv)
    args.typed_flags = typed_flags(argv)
    return ap, args


def checked_flags(argv):
    """train.py's flags in argv, parsed and checked as train.py checks them before writing anything, without
    exiting -> the resolved args; a flag it does not know or a value it refuses is a one-line ValueError
    (experiments.py checks every run of a suite so before it starts any)."""
    def error(message):
        raise ValueError(message)
    ap = get_parser()
    ap.error = error  # argparse's usage errors, as a ValueError instead of an exit
    args = parse_args(argv, ap)[1]
    check_args(args)
    return args


def print_config(args):
    """--print-config: every resolved flag (the recipe's, the defaults, and what was typed) as JSON, after the
    checks train.py makes and a warning for each typed flag that can do nothing with the others."""
    check_args(args)
    warn_inert_flags(args)
    print(json.dumps({k: v for k, v in vars(args).items() if k not in ("print_config", "typed_flags")}, indent=2))


def typed_flags(argv=None):
    """The names of the flags typed in argv: argparse gives a name its default only if the
    namespace lacks it, so a namespace that holds a marker under every name keeps the
    marker exactly where nothing was typed."""
    ap = get_parser()
    untyped = object()
    marked = argparse.Namespace(**dict.fromkeys(vars(ap.parse_args([])), untyped))
    return sorted(name for name, value in vars(ap.parse_args(argv, marked)).items() if value is not untyped)


def grpo_config(args):
    """The GRPOConfig fields, taken from the flags of the same names."""
    return config.GRPOConfig(**{f.name: getattr(args, f.name) for f in fields(config.GRPOConfig)})


# ---------------------------------------------------------------- checks

def check_args(args):
    """One-line errors (ValueError) for flag values argparse cannot check by itself; it prints
    nothing (warn_inert_flags warns)."""
    check_finite(args)
    tasks.check_level(args.level)
    if args.eval_level is not None:
        tasks.check_level(args.eval_level)
    positive = ["eval_size", "eval_every", "samples_every", "save_every", "prompts_per_step", "group_size",
                "max_new_tokens", "mu", "minibatches", "max_sampling_rounds", "threads"]
    for name in positive:
        if getattr(args, name) < 1:
            raise ValueError(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    if args.steps is not None and args.steps < 0:
        raise ValueError("--steps must be >= 0")
    n = distributed.world()
    if args.prompts_per_step % n:
        raise ValueError(f"--prompts-per-step {args.prompts_per_step} does not split over {n} processes: "
                         "each rank samples whole groups")
    if args.minibatches > args.prompts_per_step // n:
        raise ValueError(f"--minibatches {args.minibatches} > --prompts-per-step {args.prompts_per_step} / "
                         f"{n} processes: a minibatch holds whole groups")
    if args.group_size < 2:
        raise ValueError("--group-size must be >= 2: a group of one has no relative advantage")
    if not (args.temperature > 0 and 0 < args.top_p <= 1 and args.lr > 0):
        raise ValueError("need --temperature > 0, 0 < --top-p <= 1 and --lr > 0")
    if args.learner_temperature is not None and not args.learner_temperature > 0:
        raise ValueError(f"--learner-temperature must be > 0 (it divides the learner's logits), "
                         f"got {args.learner_temperature}")
    if args.eval_answers < 0 or args.eval_pass_k < 0:
        raise ValueError(f"--eval-answers and --eval-pass-k must be >= 0, got {args.eval_answers}, {args.eval_pass_k}")
    if args.eval_pass_n and not args.eval_pass_n >= args.eval_pass_k > 0:
        raise ValueError(f"--eval-pass-n {args.eval_pass_n} needs --eval-pass-k K with 0 < K <= N (its pass@K is "
                         f"estimated from N answers a problem), got --eval-pass-k {args.eval_pass_k}")
    if args.clip < 0 or (args.clip_high is not None and args.clip_high < 0):
        raise ValueError("--clip and --clip-high must be >= 0")
    if not 0 <= args.kl_cov < 1:
        raise ValueError(f"--kl-cov is a share of the update's tokens, in [0, 1), got {args.kl_cov}")
    if args.tis_cap < 0 or args.off_policy_mask < 0:
        raise ValueError("--tis-cap and --off-policy-mask must be >= 0")
    if args.adv_clip < 0:
        raise ValueError(f"--adv-clip must be >= 0 (0: off), got {args.adv_clip}")
    if 0 < args.tis_cap < 1:
        raise ValueError(f"--tis-cap {args.tis_cap}: a cap below 1 scales every token's weight down, the sampler's "
                         "own tokens too: use a cap >= 1 (0: off)")
    if args.top_k < 0:
        raise ValueError(f"--top-k must be >= 0 (0: off), got {args.top_k}")
    if args.run_name is not None and (os.sep in args.run_name or "/" in args.run_name or ".." in args.run_name):
        raise ValueError(f"--run-name {args.run_name!r} is a folder name, without / or ..: --runs-dir says where "
                         "run folders go")
    if args.rollout_lag is not None and args.rollout_lag < 1:
        raise ValueError(f"--rollout-lag must be >= 1, got {args.rollout_lag}: a lag of 0 is the on-policy default, "
                         "so leave the flag off")
    if args.task == "math" and not (args.data and args.model):
        raise ValueError("--task math needs --data FILE (problems and answers) and --model FOLDER (the book's model)")
    if args.task != "math" and (args.data or args.eval_data):
        raise ValueError("--data and --eval-data are for --task math")
    if args.exact_kl and args.model:
        raise ValueError("--exact-kl sums the KL over the whole vocabulary at every position: for the small GPT's "
                         "vocabulary, not --model's")
    if args.grad_checkpoint and not args.model:
        raise ValueError("--grad-checkpoint is for --model")
    if args.eval_batch_size < 1:
        raise ValueError(f"--eval-batch-size must be >= 1, got {args.eval_batch_size}")
    if not 0 <= args.dropout < 1:
        raise ValueError(f"--dropout must be in [0, 1), got {args.dropout}")
    if args.dropout and args.model:
        raise ValueError("--dropout is for the small GPT of --init: the book's Qwen3 (--model) has no dropout")
    check_book_args(args)
    check_field_args(args)
    refuse_contradictions(args)


def check_field_args(args):
    """One-line errors for the values of the field's flags (field_methods.py) that no run can use."""
    if not (args.sapo_tau_pos > 0 and args.sapo_tau_neg > 0):
        raise ValueError(f"--sapo-tau-pos and --sapo-tau-neg are temperatures, > 0 (they divide the gate), got "
                         f"{args.sapo_tau_pos}, {args.sapo_tau_neg}")
    if min(args.vespo_k_pos, args.vespo_k_neg) < 0 or not min(args.vespo_lambda_pos, args.vespo_lambda_neg) > 0:
        raise ValueError("VESPO's phi(w) = e^lambda w^k e^(-lambda w) needs k >= 0 and lambda > 0 (--vespo-k-pos, "
                         "--vespo-k-neg, --vespo-lambda-pos, --vespo-lambda-neg)")
    if not 0 < args.top_entropy_quantile <= 1:
        raise ValueError(f"--top-entropy-quantile is a share of the tokens, in (0, 1] (1: every token), got "
                         f"{args.top_entropy_quantile}")
    if args.tis_floor < 0 or (args.tis_cap > 0 and args.tis_floor >= args.tis_cap):
        raise ValueError(f"--tis-floor {args.tis_floor} must be >= 0 and below --tis-cap {args.tis_cap}: the band "
                         "[floor, cap] would keep no weight")
    if args.rejection and not (args.rejection_bound or 0) > (1 if args.rejection.endswith("k1") else 0):
        raise ValueError(f"--rejection {args.rejection} needs --rejection-bound U > "
                         + ("1 (k1 keeps the ratio band [1/U, U])" if args.rejection.endswith("k1") else "0 (k2, k3 <= U)")
                         + f", got {args.rejection_bound} (verl's rollout_rs_threshold has no default)")
    if args.adaptive_entropy and (args.entropy_target < 0 or not args.entropy_coef_delta > 0
                                  or not 0 <= args.entropy_coef <= args.entropy_coef_max):
        raise ValueError(f"--adaptive-entropy needs --entropy-target >= 0, --entropy-coef-delta > 0 and a starting "
                         f"--entropy-coef in [0, --entropy-coef-max], got {args.entropy_target}, "
                         f"{args.entropy_coef_delta}, {args.entropy_coef} and {args.entropy_coef_max}")


def check_finite(args):
    """A float flag given nan, or inf where inf means nothing, is refused: argparse's float()
    takes both, and either would reach the loss as a NaN at step 1."""
    for f in fields(config.GRPOConfig):
        value, inf = getattr(args, f.name), f.metadata["inf"]
        if isinstance(value, float) and not math.isfinite(value) and not (value == math.inf and inf):
            can_be = f" or inf ({inf})" if inf else ""
            raise ValueError(f"--{f.name.replace('_', '-')} must be a finite number{can_be}, got {value}")


def warn_inert_flags(args):
    """One warning line on stderr for each typed flag that can do nothing (inert_flags)."""
    if distributed.rank() == 0:
        for line in inert_flags(args):
            print(f"train.py: warning: {line}", file=sys.stderr)


def refuse_contradictions(args):
    """A flag that cannot act as asked, with the others given, is refused in one line."""
    per_answer = [f"--ratio-level {args.ratio_level}"] if args.ratio_level != "token" else []
    per_answer += ["--kl-level sequence"] if args.kl_level == "sequence" and args.kl > 0 else []
    per_answer += ["--objective gmpo"] if args.objective == "gmpo" else []
    if per_answer and args.loss_agg not in ("seq_mean", "luspo"):
        raise ValueError(f"{per_answer[0]} gives one term per answer, which --loss-agg {args.loss_agg} would weigh "
                         "by the answer's length (grpo.aggregate): use --loss-agg seq_mean")
    if args.dual_clip != 0 and not args.dual_clip > 1:
        raise ValueError(f"--dual-clip {args.dual_clip}: the dual clip c bounds c * A from below and needs c > 1 "
                         "(0: off)")
    if args.dual_clip and args.objective != "ppo":
        raise ValueError(f"--dual-clip bounds PPO's clipped objective; --objective {args.objective} has no such bound")
    if args.sampler_dtype == "bfloat16" and (args.dtype == "bfloat16" or resolve_device(args.device) == "cuda"):
        raise ValueError("--sampler-dtype bfloat16 samples beside an fp32 learner, but the learner runs in bf16 "
                         "already (--dtype bfloat16, or bf16 autocast on CUDA): there is no mismatch to add")
    if args.sampler_dtype in ("int8", "fp8") and args.dtype == "bfloat16":
        raise ValueError(f"--sampler-dtype {args.sampler_dtype} rounds an fp32 policy's weights to 8 bits beside the "
                         "fp32 learner, but --dtype bfloat16 makes the learner bf16: use --dtype float32")
    if args.rollout_lag and args.resample_epochs and args.mu > 1:
        raise ValueError("--rollout-lag trains on a batch sampled steps ago, but --resample-epochs samples each epoch "
                         "afresh from the current policy: use one or the other (--no-resample-epochs)")
    if args.lag_pi_old == "learner" and not args.rollout_lag:
        raise ValueError("--lag-pi-old learner makes pi_old the learner at the step instead of a stale sampler, but "
                         "without --rollout-lag K the learner is the sampler: give a lag")
    refuse_field_contradictions(args)
    if args.keep_sampling_mask and args.top_p >= 1 and args.top_k <= 0:
        raise ValueError("--keep-sampling-mask keeps the support top-p / top-k sampled from, but neither cuts one "
                         "(--top-p 1, --top-k 0): it would change nothing and cost B x T x V bools")


def refuse_field_contradictions(args):
    """The field's flags (field_methods.py) with others they cannot act with, each refused in one line."""
    if args.objective in ("gmpo", "dppo_tv", "dppo_kl", "vespo") and args.ratio_level != "token":
        raise ValueError(f"--objective {args.objective} builds its own weight from the token log-ratios; --ratio-level "
                         f"{args.ratio_level} would be ignored: use --ratio-level token")
    if args.loss_agg == "luspo" and args.ratio_level != "gspo":
        raise ValueError("--loss-agg luspo scales GSPO's per-answer loss by the answer's length (TRL requires the "
                         "sequence level): use --ratio-level gspo")
    if args.objective == "vespo" and args.tis_cap > 0 and args.tis_mode.startswith("sequence"):
        raise ValueError(f"--objective vespo folds each token's --tis-cap weight into its own answer weight; --tis-mode "
                         f"{args.tis_mode} is one weight an answer already (TRL refuses it too): use token_truncate "
                         "or token_mask")
    if args.objective in ("dppo_tv", "dppo_kl") and args.tis_cap > 0:
        raise ValueError(f"--objective {args.objective} weighs each token by pi / pi_sampler already; --tis-cap would "
                         "weigh it by pi_old / pi_sampler a second time (DPPO's authors take no such weight): drop "
                         "--tis-cap")
    given = set(args.typed_flags) | set(config.RECIPES.get(args.recipe) or {})  # typed, or set by the recipe
    bound = {"gmpo": "each token's log-ratio, 0.4 in its sources", "dppo_tv": "the probability's move, TV 0.15 in "
             "its sources", "dppo_kl": "the binary KL of the probability's move, 0.05 in its sources"}
    if args.objective in bound and "clip" not in given:
        raise ValueError(f"--objective {args.objective} bounds {bound[args.objective]}, and --clip's default 0.2 is "
                         f"PPO's: give --clip (or --recipe {args.objective})")
    if args.objective == "vespo" and "loss_agg" not in given:
        raise ValueError("--objective vespo: its sources average over tokens, and --loss-agg's default is GRPO's "
                         "seq_mean: give --loss-agg (token_mean, or --recipe vespo)")
    if args.baseline != "group" and args.reward_norm == "norm_then_sum":
        raise ValueError(f"--reward-norm norm_then_sum normalises each reward term in its group (GDPO); --baseline "
                         f"{args.baseline} has no group of its own to do that in: use one or the other")


def inert_flags(args):
    """One line for each flag typed (args.typed_flags) that can do nothing with the others given."""
    no_kl = "without a KL penalty (--kl 0)"
    no_format = "to the reward without a format bonus (--format-weight 0)"
    inert = {"kl_estimator": (args.kl == 0, no_kl), "kl_level": (args.kl == 0, no_kl),
             "kl_reweight": (args.kl == 0, no_kl), "exact_kl": (args.kl == 0, no_kl),
             "resample_epochs": (args.mu == 1, "with one epoch (--mu 1): nothing is sampled again"),
             "kl_cov": (args.mu * args.minibatches == 1 and not args.rollout_lag,
                        "with one update a rollout (--mu 1 --minibatches 1): log pi - log pi_old is 0"),
             "lag_pi_old": (not args.rollout_lag, "without --rollout-lag (the learner is the sampler)"),
             "adv_norm": (args.baseline != "group" or args.reward_norm == "norm_then_sum",
                          f"with --baseline {args.baseline}, which brings its own scale" if args.baseline != "group"
                          else "with --reward-norm norm_then_sum (GDPO normalises over the batch, as its code does)"),
             "top_entropy_random": (args.top_entropy_quantile >= 1,
                                    "without --top-entropy-quantile below 1 (every token is kept)"),
             "tis_floor": (not args.tis_cap, "without --tis-cap (no importance weight to bound)"),
             "tis_mode": (not args.tis_cap, "without --tis-cap (no importance weight to bound)"),
             "rejection_bound": (not args.rejection, "without --rejection"),
             "loss_agg": (args.loss_agg == "bnpo" and distributed.world() == 1,
                          "beyond token_mean in one process (bnpo divides by this process's tokens, token_mean "
                          "by every process's)"),
             **{name: (args.objective != "sapo", "without --objective sapo")
                for name in ("sapo_tau_pos", "sapo_tau_neg")},
             **{name: (args.objective in ("sapo", "vespo"), f"with --objective {args.objective}, which has no clip")
                for name in ("clip", "clip_high")},
             **{name: (args.objective != "vespo", "without --objective vespo")
                for name in ("vespo_k_pos", "vespo_lambda_pos", "vespo_k_neg", "vespo_lambda_neg")},
             **{name: (not args.adaptive_entropy, "without --adaptive-entropy")
                for name in ("entropy_target", "entropy_coef_delta", "entropy_coef_max")},
             "max_sampling_rounds": (not args.dynamic_sampling, "without --dynamic-sampling (one round)"),
             "gated": (args.format_weight == 0, no_format), "format_check": (args.format_weight == 0, no_format),
             "level": (args.task == "math", "with --task math (its problems come from --data)"),
             "eval_level": (args.task == "math", "with --task math (its held-out problems come from --data)")}
    return [f"--{name.replace('_', '-')} does nothing {why}" for name, (idle, why) in inert.items()
            if idle and name in args.typed_flags]


def check_task_fit(args, enc, init_ckpt, max_len=None):
    """A cap the model's context (max_len positions) cannot hold after the level's longest prompt is
    refused in one line; so is a search level (tasks.SearchProblem) when the token cap cannot hold
    even a right first try, or with a try budget, its longest honest answer; a warm start that
    never saw a search, or an inequality, gets a warning (it cannot search, or give several answers)."""
    count = lambda text: len(encode_completion(enc, text)) + 1  # noqa: E731  tokens, with the end of text
    for level in {args.level, args.eval_level or args.level}:
        prompt = tasks.longest_prompt(level, lambda text: len(encode_prompt(enc, text)))
        if max_len is not None and prompt + args.max_new_tokens > max_len:
            raise ValueError(f"--max-new-tokens {args.max_new_tokens} does not fit the model: its context holds "
                             f"{max_len} tokens, and a prompt of --level {level} takes up to {prompt}: use "
                             f"--max-new-tokens <= {max_len - prompt}")
        need = tasks.longest_first_try(level, count)
        if need > args.max_new_tokens:
            raise ValueError(f"--max-new-tokens {args.max_new_tokens} is shorter than the {need} tokens that a right "
                             f"first try of --level {level} can take (with its end of text): raise it to >= {need}")
        honest = tasks.longest_answer(level, count)  # with a try budget, every honest answer ends by itself
        if honest > args.max_new_tokens:
            raise ValueError(f"--max-new-tokens {args.max_new_tokens} is shorter than the {honest} tokens of the "
                             f"longest honest answer of --level {level} (a search's whole budget of tries): raise it "
                             f"to >= {honest}")
    sft_level = (init_ckpt or {}).get("task", {}).get("sft_level")
    if sft_level not in tasks.LEVELS:  # a warm start of another task, or of none: nothing to compare
        return
    _, searches, _, relations = tasks.check_level(args.level)
    _, warm_searches, _, warm_relations = tasks.check_level(sft_level)
    if searches and not warm_searches:
        print(f"train.py: warning: --level {args.level} has search problems, but the warm start {args.init} "
              f"was trained on --level {sft_level}, which has none (checkpoints/warmstart_search.pt has them)",
              file=sys.stderr)
    elif searches and relations == "<>" and warm_relations != "<>":
        print(f"train.py: warning: --level {args.level} has inequalities (several right digits), but the warm start "
              f"{args.init} was trained on --level {sft_level}, which has none (checkpoints/warmstart_many.pt has them)",
              file=sys.stderr)


def check_book_args(args):
    """One-line errors for the flags of the book's model and its checkpoints."""
    if args.chat_template and not args.model:
        raise ValueError("--chat-template is for --model (the small GPT has no chat template)")
    if args.keep_checkpoints < 0:
        raise ValueError(f"--keep-checkpoints must be >= 0 (0 keeps all), got {args.keep_checkpoints}")


# ---------------------------------------------------------------- set-up

def resolve_device(name):
    if name == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if name == "cuda" and not torch.cuda.is_available():
        raise ValueError("--device cuda, but torch sees no CUDA device")
    return name


def load_policy(args, device):
    """(policy on device, tokenizer, the warm start's tokenizer and task specs to save with each
    checkpoint, or None for --model): the small GPT of --init, or the book's Qwen3 in its dtype."""
    if args.model:
        return *load_book_model(args, device), None
    policy, enc, ckpt = load_init(args.init, args.threads)
    set_dropout(policy, args.dropout)
    return policy.to(device), enc, {"tokenizer": ckpt["tokenizer"], "task": ckpt["task"]}


def load_init(path, threads=1):
    """(policy, tokenizer, checkpoint) of a warm start; built with harness/sft.py defaults (on `threads`
    threads) if the default path is missing."""
    if not os.path.exists(path) and path == sft.DEFAULT_CKPT:
        if distributed.world() > 1:  # N ranks would each build it and write the same file
            raise ValueError(f"no warm start at {path}: build it first with python harness/sft.py")
        print(f"no warm start at {path}: building it once (python harness/sft.py), then GRPO")
        sft.main(sft.get_parser().parse_args(["--out", path, "--threads", str(threads)]))
    else:
        check_sha256(path)
    policy, ckpt = load_checkpoint(path)
    for key in ("tokenizer", "task"):
        if key not in ckpt:
            raise CheckpointError(f"{path} has no {key} spec: not a warm-start checkpoint of this project")
    enc = build_tokenizer(ckpt["tokenizer"])
    if enc.n_vocab != policy.cfg.vocab_size:
        raise CheckpointError(f"{path}: tokenizer has {enc.n_vocab} tokens but the model {policy.cfg.vocab_size}")
    return policy, enc, ckpt


def check_sha256(path):
    """Refuse a warm start whose bytes differ from the sha256 beside it (PATH.sha256, as shipped): a
    damaged copy, or one rebuilt on another machine, would give other numbers than those written down."""
    if not os.path.exists(path + ".sha256"):
        return
    with open(path + ".sha256") as f:
        expected = f.read().split()[0]
    with open(path, "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()
    if digest != expected:
        build = sft.SHIPPED.get(os.path.relpath(path), f"python harness/sft.py ... --out {path}")
        raise CheckpointError(f"{path} does not match its checksum {path}.sha256: restore it (git checkout {path}), "
                              f"or rebuild it with `{build}` and write its new sha256 beside it")


def load_book_model(args, device):
    """The book's Qwen3 and its tokenizer from a Hugging Face folder (--model), in --dtype."""
    dtype = {"auto": torch.bfloat16 if device.startswith("cuda") else torch.float32,
             "float32": torch.float32, "bfloat16": torch.bfloat16}[args.dtype]
    weights = None if args.init == sft.DEFAULT_CKPT else args.init  # the book's state_dict, or the folder's own
    model = load_pretrained(args.model, dtype, device, weights)
    model.grad_checkpoint = args.grad_checkpoint
    enc = load_pretrained_tokenizer(args.model, chat=args.chat_template)
    if enc.n_vocab > model.cfg.vocab_size:
        raise CheckpointError(f"{args.model}: tokenizer has {enc.n_vocab} tokens but the model {model.cfg.vocab_size}")
    return model.train(), enc


def task_sets(args, enc, init_ckpt, log=print, max_len=None):
    """(training problems or None for the endless arithmetic stream, held-out problems); the
    arithmetic levels checked against the token cap and the model's context (max_len) in the tokens
    of the small GPT's warm start (init_ckpt, None with --model)."""
    if args.task != "math":
        if init_ckpt is not None:
            check_task_fit(args, enc, init_ckpt, max_len)
        return None, tasks.eval_set(args.eval_level or args.level, args.eval_size)
    problems = tasks.load_math(args.data, log)
    if args.eval_data is None:
        return tasks.math_split(problems, "train"), tasks.math_split(problems, "eval")[:args.eval_size]
    test = tasks.load_math(args.eval_data, log)[:args.eval_size]
    held_out = {p.problem for p in test}
    train = [p for p in problems if p.problem not in held_out]  # never train on a test problem
    if not train:
        raise ValueError(f"--data {args.data}: every problem is also in --eval-data {args.eval_data}")
    return train, test


def versions():
    import numpy
    import tiktoken
    out = {"python": platform.python_version(), "torch": torch.__version__, "numpy": numpy.__version__,
           "tiktoken": tiktoken.__version__}
    try:
        import triton
        out["triton"] = triton.__version__
    except ImportError:
        out["triton"] = None
    return out


# ---------------------------------------------------------------- the run folder

RUN_LOGS = ("metrics.jsonl", "samples.jsonl", "answers.jsonl")  # one JSON line per step (or per answer) each


def start_run(args):
    """(args, run dir, step to continue from, checkpoint or None), the flags checked before
    anything is written: a new run's, or with --resume RUN_DIR the run's saved ones."""
    if args.resume:
        return resume_state(args)
    check_args(args)
    warn_inert_flags(args)
    args.steps = 100 if args.steps is None else args.steps
    run_dir = os.path.join(args.runs_dir, args.run_name or time.strftime("%Y%m%d-%H%M%S"))
    if os.path.exists(os.path.join(run_dir, "metrics.jsonl")):
        raise ValueError(f"{run_dir} already has a run: pick another --run-name or --resume {run_dir}")
    return args, run_dir, 0, None


def run_config(args, cfg, device, policy, run_dir):
    """What config.json holds: every resolved flag, the GRPOConfig, versions, device, the code's commit, each
    source file's hash and which differ from the commit, the machine and its rounding (lab/provenance.py)."""
    return {**vars(args), "grpo": asdict(cfg), "device": device,
            "dtype": "bfloat16 autocast" if device == "cuda" else "float32", "versions": versions(),
            "weights_dtype": str(next(policy.parameters()).dtype).removeprefix("torch."),
            "run_dir": run_dir, "processes": distributed.world(), "commit": provenance.code_commit(),
            "machine": provenance.machine(), "rounding": provenance.rounding_name(args.threads),
            "cpu_capability": torch.backends.cpu.get_cpu_capability(),  # the vector width PyTorch's kernels used
            "code": provenance.code_record()}


def open_run_folder(args, cfg, device, policy, run_dir, state, pool, evalset, log):
    """Make the run folder, write its config.json (a new run's; a resume keeps the first) and
    print the config -> the paths of metrics.jsonl and samples.jsonl."""
    os.makedirs(run_dir, exist_ok=True)
    resolved = run_config(args, cfg, device, policy, run_dir)
    if state is None and distributed.rank() == 0:
        with open(os.path.join(run_dir, "config.json"), "w") as f:
            json.dump(resolved, f, indent=2)
    log(f"config: {os.path.join(run_dir, 'config.json')} (every resolved flag; --print-config prints them) | "
        f"device {device}, dtype {resolved['dtype']}, {resolved['processes']} process(es)")
    if pool is not None:
        log(f"task math: {len(pool)} training problems, {len(evalset)} held out")
    return os.path.join(run_dir, "metrics.jsonl"), os.path.join(run_dir, "samples.jsonl")


def resume_state(args):
    """(saved args, run dir, step to continue from, checkpoint) for --resume RUN_DIR."""
    run_dir = args.resume.rstrip("/")
    if not os.path.isdir(run_dir):
        raise ValueError(f"--resume: no run folder {run_dir}")
    config = {}
    if os.path.exists(os.path.join(run_dir, "config.json")):
        with open(os.path.join(run_dir, "config.json")) as f:
            config = json.load(f)
        if config.get("model"):
            raise ValueError(f"--resume: {run_dir} trained --model, which keeps no optimizer state; start a new "
                             f"run from its weights with --model {run_dir}/model_step<N>")
    path = os.path.join(run_dir, "ckpt_latest.pt")
    if not os.path.exists(path):
        raise CheckpointError(f"--resume: {run_dir} has no ckpt_latest.pt (the run stopped before its first save)")
    _, state = load_checkpoint(path)
    if "optimizer" not in state or "step" not in state:
        raise CheckpointError(f"{path} has no optimizer state or step: not a resumable checkpoint")
    saved = get_parser().parse_args([])  # every flag's default: for flags newer than the run
    vars(saved).update(state["args"])
    saved.resume, saved.threads, saved.device = args.resume, args.threads, args.device
    if args.steps is not None:  # allow extending a finished run
        saved.steps = args.steps
    ignored = [f"--{n.replace('_', '-')}" for n in args.typed_flags if n not in ("resume", "steps", "threads", "device")]
    if ignored and distributed.rank() == 0:
        print(f"train.py: warning: {', '.join(ignored)} ignored: a resumed run keeps its saved flags (only --steps, "
              "--threads and --device apply)", file=sys.stderr)
    changed = provenance.code_changes(config) if config else []
    if changed:  # one curve comes from one version of the code
        raise ValueError(f"--resume: {run_dir} ran other code ({provenance.changes_text(changed)}): one curve comes "
                         "from one version of the code; restore the code it ran, or start a new run")
    if saved.rollout_lag:
        raise ValueError(f"--resume: {run_dir} trains with --rollout-lag, whose queue of sampled batches is not in "
                         f"its checkpoint; start a new run from its weights with --init {path}")
    check_args(saved)  # before the run folder is touched: a refused run loses nothing
    warn_inert_flags(saved)
    if distributed.rank() == 0:  # the one writer of the run folder
        for name in RUN_LOGS:
            truncate_metrics(os.path.join(run_dir, name), state["step"])
        print(f"resuming {run_dir} from step {state['step']}")
        if state.get("processes", 1) != distributed.world():  # allowed (e.g. more GPUs), but say so
            print(f"note: the run had {state.get('processes', 1)} process(es), now {distributed.world()}: the "
                  "steps from here draw other problems and samples than the uninterrupted run would have")
    return saved, run_dir, state["step"], state


def truncate_metrics(path, last_step):
    """Keep only whole lines with step <= last_step (rewritten atomically)."""
    if not os.path.exists(path):
        return
    keep = []
    with open(path) as f:
        for line in f:
            try:
                if line.endswith("\n") and json.loads(line)["step"] <= last_step:
                    keep.append(line)
            except (ValueError, KeyError, TypeError):
                pass
    with open(path + ".tmp", "w") as f:
        f.writelines(keep)
    os.replace(path + ".tmp", path)


SAVED = re.compile(r"model_step(\d+)|ckpt_step(\d+)\.pt")  # what train.evaluate_and_save writes


def prune_saves(run_dir, keep):
    """Delete all but the `keep` latest evaluation saves of a run (by step); 0 deletes none."""
    saved = sorted((int(m[1] or m[2]), name) for name in os.listdir(run_dir) if (m := SAVED.fullmatch(name)))
    for _, name in saved[:-keep] if keep > 0 else ():
        path = os.path.join(run_dir, name)
        shutil.rmtree(path) if os.path.isdir(path) else os.remove(path)


RUN_ONLY = {"run_name", "runs_dir", "resume", "seed", "threads", "device", "steps", "typed_flags", "print_config",
            "recipe", "init"}  # where and how long a run goes, not what it computes


def flags_off_default(args):
    """'--format-weight 1e+300, --lr 0.0003': the flags whose resolved value is not train.py's default (a recipe's
    included), what a learner changed: for the line a non-finite loss stops a run with."""
    defaults = vars(get_parser().parse_args([]))
    return ", ".join(f"--{k.replace('_', '-')} {v}" for k, v in vars(args).items()
                     if k not in RUN_ONLY and k in defaults and v != defaults[k])


def step_failed(error, args, run_dir, step, saved_step):
    """The one line a failed step stops the run with: the step, the project's function it failed in (an edit of
    grpo.py breaks there), the error, and for a non-finite loss the flags set away from their defaults, then what
    the last checkpoint holds. The whole traceback goes to RUN_DIR/traceback.txt."""
    frames = [f for f in traceback.extract_tb(error.__traceback__) if f.filename.startswith(ROOT)
              and "site-packages" not in f.filename]
    line = f"step {step}: {type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"
    if frames:
        line += f" (in {frames[-1].name}, {os.path.relpath(frames[-1].filename, ROOT)}:{frames[-1].lineno})"
    if isinstance(error, FloatingPointError):
        line += f"; the flags set away from their defaults: {flags_off_default(args) or 'none'}"
    if os.path.isdir(run_dir):
        with open(os.path.join(run_dir, "traceback.txt"), "w") as f:
            f.write("".join(traceback.format_exception(error)))
        line += f" (the traceback: {os.path.join(run_dir, 'traceback.txt')})"
    return f"{line}; stopping. {last_good(args, run_dir, step, saved_step)}"


def last_good(args, run_dir, step, saved_step):
    """Where the last good weights of a run stopped at `step` are, in one sentence."""
    if args.model:  # saved at each evaluation, in the Hugging Face layout
        last_eval = (step - 1) // args.eval_every * args.eval_every
        return f"The last weights saved are {os.path.join(run_dir, f'model_step{last_eval}')}."
    latest = os.path.join(run_dir, "ckpt_latest.pt")
    if saved_step is None:
        return f"No {latest} yet: the first is written at step {args.save_every} (--save-every)."
    return (f"{latest} holds step {saved_step} (written every --save-every {args.save_every} steps); "
            f"--resume {run_dir} continues from there.")
