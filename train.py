"""Train a reasoning policy with GRPO: the command line of laptop-grpo.

    python train.py                              # GRPO from the shipped warm start, about a minute on one CPU thread
    python train.py --clip 0.2 --kl 0.0 --run-name mine
    python train.py --recipe book --print-config # the resolved flags of a recipe, without training
    python train.py --resume runs/mine           # continue after an interruption (or for longer: --steps N)
    torchrun --nproc-per-node 2 train.py         # 2 processes (ranks), one CPU core or GPU each
    python train.py --recipe book --kl 0 --mu 1 --steps 500 --level medium_search --eval-level medium \
        --init checkpoints/warmstart_search.pt --eval-sampled       # the book's 7_3 runs away (EXPERIMENTS.md, lesson 4)
    python train.py --recipe book_qwen3 --model qwen3-0.6b-base --task math \
        --data math_full_minus_math500.json --eval-data math500_test.json   # the book's model on a GPU (docs/book_model.md)
    python train.py --model qwen3-0.6b-base --init qwen3-0.6B-rlvr-grpo-step00050.pth --task math \
        --data math_full_minus_math500.json --eval-data math500_test.json --eval-fallback number --steps 0
                                                  # evaluate a book checkpoint

Each step samples G answers for each of --prompts-per-step problems, scores them and
updates the policy (grpo.grpo_step). Every --eval-every steps (and at step 0) the policy
answers the fixed held-out set greedily (and, with --eval-sampled, once more as the
rollouts sample). Everything lands in runs/<name>/:
    config.json      every resolved flag, package versions, device
    metrics.jsonl    one JSON object per step (eval_acc, eval_sampled_acc on eval steps; ln_vocab at step 0)
    samples.jsonl    a few prompts with completions and rewards every --samples-every steps
    answers.jsonl    the answers to --eval-answers fixed held-out problems at each evaluation
    ckpt_latest.pt   model + optimizer, for --resume; ckpt_step<N>.pt at each eval (with --model:
                     model_step<N>/, a Hugging Face folder; --keep-checkpoints N keeps the latest N)
Crash safety: checkpoints are written to a temp file and renamed, one flushed line per
step, and a resume drops metrics lines after the checkpoint's step, so a `kill -9` at any
moment leaves no gap or duplicate. Step s's problems and sampling noise are seeded by
(seed, s) (and the rank), so a resumed run repeats the uninterrupted one exactly. Under
torchrun only rank 0 writes the run folder (distributed.py says how the ranks agree).
"""
import argparse
import contextlib
import copy
import json
import math
import os
import platform
import re
import shutil
import sys
import time
from dataclasses import asdict, fields

import torch

import config
import distributed
import grpo
import rewards
import sft
import tasks
from evaluation import evaluate, pass_at_k
from model import CheckpointError, load_checkpoint, save_checkpoint
from qwen3 import load_pretrained, save_pretrained
from tokenizer import build_tokenizer, encode_completion, load_pretrained_tokenizer


def get_parser():
    ap = argparse.ArgumentParser(description="GRPO on synthetic arithmetic reasoning.",
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    g = ap.add_argument_group("run")
    g.add_argument("--run-name", default=None, help="folder under runs/ (default: a timestamp)")
    g.add_argument("--runs-dir", default="runs", help="where run folders live")
    g.add_argument("--resume", default=None, metavar="RUN_DIR",
                   help="continue runs/<name> from its latest checkpoint, with its saved flags (only --steps, --threads, --device apply)")
    g.add_argument("--init", default=sft.DEFAULT_CKPT,
                   help="warm-start checkpoint (built by sft.py if it is the default and missing); with --model, a "
                        "reasoning_from_scratch Qwen3 state_dict (.pth: the book's GRPO checkpoints) whose weights "
                        "replace the folder's")
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
            g.add_argument(flag, type=meta["type"] or type(f.default), default=f.default, choices=meta["choices"],
                           help=meta["help"])


def parse_args(argv=None):
    """Parse the command line twice: once for --recipe, then with the recipe's values as
    defaults, so a flag given explicitly still wins over the recipe."""
    ap = get_parser()
    recipe = ap.parse_known_args(argv)[0].recipe
    if recipe:
        ap.set_defaults(**config.RECIPES[recipe])
    args = ap.parse_args(argv)
    args.typed_flags = typed_flags(argv)
    return ap, args


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


def check_args(args):
    """One-line errors for flag values argparse cannot check by itself."""
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
    if args.clip < 0 or (args.clip_high is not None and args.clip_high < 0):
        raise ValueError("--clip and --clip-high must be >= 0")
    if args.tis_cap < 0 or args.off_policy_mask < 0:
        raise ValueError("--tis-cap and --off-policy-mask must be >= 0")
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
    check_book_args(args)
    refuse_contradictions(args)
    if distributed.rank() == 0:
        for line in inert_flags(args):
            print(f"train.py: warning: {line}", file=sys.stderr)


def refuse_contradictions(args):
    """A flag that cannot act as asked, with the others given, is refused in one line."""
    per_answer = [f"--ratio-level {args.ratio_level}"] if args.ratio_level != "token" else []
    per_answer += ["--kl-level sequence"] if args.kl_level == "sequence" and args.kl > 0 else []
    if per_answer and args.loss_agg != "seq_mean":
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
    if args.keep_sampling_mask and args.top_p >= 1 and args.top_k <= 0:
        raise ValueError("--keep-sampling-mask keeps the support top-p / top-k sampled from, but neither cuts one "
                         "(--top-p 1, --top-k 0): it would change nothing and cost B x T x V bools")


def inert_flags(args):
    """One line for each flag typed (args.typed_flags) that can do nothing with the others given."""
    no_kl = "without a KL penalty (--kl 0)"
    no_format = "to the reward without a format bonus (--format-weight 0)"
    inert = {"kl_estimator": (args.kl == 0, no_kl), "kl_level": (args.kl == 0, no_kl),
             "kl_reweight": (args.kl == 0, no_kl), "exact_kl": (args.kl == 0, no_kl),
             "resample_epochs": (args.mu == 1, "with one epoch (--mu 1): nothing is sampled again"),
             "max_sampling_rounds": (not args.dynamic_sampling, "without --dynamic-sampling (one round)"),
             "gated": (args.format_weight == 0, no_format), "format_check": (args.format_weight == 0, no_format),
             "level": (args.task == "math", "with --task math (its problems come from --data)"),
             "eval_level": (args.task == "math", "with --task math (its held-out problems come from --data)")}
    return [f"--{name.replace('_', '-')} does nothing {why}" for name, (idle, why) in inert.items()
            if idle and name in args.typed_flags]


def check_task_fit(args, enc, init_ckpt):
    """A search level (tasks.SearchProblem) is refused in one line when the token cap cannot hold
    even a right first try, or with a try budget, its longest honest answer; a warm start that
    never saw a search gets a warning (it cannot search)."""
    count = lambda text: len(encode_completion(enc, text)) + 1  # noqa: E731  tokens, with the end of text
    for level in {args.level, args.eval_level or args.level}:
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
    if tasks.check_level(args.level)[1] and sft_level in tasks.LEVELS and not tasks.check_level(sft_level)[1]:
        print(f"train.py: warning: --level {args.level} has search problems, but the warm start {args.init} "
              f"was trained on --level {sft_level}, which has none (checkpoints/warmstart_search.pt has them)",
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


def autocast(device):
    """bf16 autocast on GPU; plain fp32 on CPU (bf16 matmuls are slow on most CPUs)."""
    return torch.autocast("cuda", dtype=torch.bfloat16) if device == "cuda" else contextlib.nullcontext()


def load_init(args):
    """The warm-start policy; built with sft.py defaults if the default path is missing."""
    if not os.path.exists(args.init) and args.init == sft.DEFAULT_CKPT:
        if distributed.world() > 1:  # N ranks would each build it and write the same file
            raise ValueError(f"no warm start at {args.init}: build it first with python sft.py")
        print(f"no warm start at {args.init}: building it once (python sft.py), then GRPO")
        sft.main(sft.get_parser().parse_args(["--out", args.init, "--threads", str(args.threads)]))
    policy, ckpt = load_checkpoint(args.init)
    for key in ("tokenizer", "task"):
        if key not in ckpt:
            raise CheckpointError(f"{args.init} has no {key} spec: not a warm-start checkpoint of this project")
    enc = build_tokenizer(ckpt["tokenizer"])
    if enc.n_vocab != policy.cfg.vocab_size:
        raise CheckpointError(f"{args.init}: tokenizer has {enc.n_vocab} tokens but the model {policy.cfg.vocab_size}")
    return policy, enc, ckpt


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


def task_sets(args, log=print):
    """(training problems or None for the endless arithmetic stream, held-out problems)."""
    if args.task != "math":
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


def step_seed(seed, step, rank=0):
    """The seed of step `step`'s problems and sampling noise on one rank: a pure function
    of (seed, step, rank), so a resumed run draws exactly what the uninterrupted one would
    have. Rank 0 (the only one in one process) keeps the seed runs have always had."""
    return distributed.rank_seed(seed * 1_000_003 + step, rank)


def problem_source(level, seed, step, rank=0, pool=None):
    """Step `step`'s problems: the arithmetic stream of a level, or draws from a list (MATH)."""
    seed = step_seed(seed, step, rank)
    stream = tasks.problems(level, seed) if pool is None else tasks.draw(pool, seed)
    return lambda: next(stream)


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


RUN_LOGS = ("metrics.jsonl", "samples.jsonl", "answers.jsonl")  # one JSON line per step (or per answer) each
SAVED = re.compile(r"model_step(\d+)|ckpt_step(\d+)\.pt")  # what evaluate_and_save writes


def prune_saves(run_dir, keep):
    """Delete all but the `keep` latest evaluation saves of a run (by step); 0 deletes none."""
    saved = sorted((int(m[1] or m[2]), name) for name in os.listdir(run_dir) if (m := SAVED.fullmatch(name)))
    for _, name in saved[:-keep] if keep > 0 else ():
        path = os.path.join(run_dir, name)
        shutil.rmtree(path) if os.path.isdir(path) else os.remove(path)


def append_jsonl(path, obj):
    with open(path, "a") as f:
        f.write(json.dumps(obj) + "\n")
        f.flush()
        os.fsync(f.fileno())


# ---------------------------------------------------------------- logging

def format_line(step, total, s, elapsed_per_step):
    eta = elapsed_per_step * (total - step)
    kl = f" | kl {s['kl']:.4f}" if "kl" in s else ""
    return (f"step {step:4d}/{total} | loss {s['loss']:+.4f} | reward {s['reward']:.3f} "
            f"(correct {s['reward_correct']:.2f}) | len {s['resp_len']:.1f} | adv {s['adv_mean']:+.2f}"
            f"±{s['adv_std']:.2f} | ent {s['entropy']:.3f} | clip {s['clip_frac']:.3f}{kl} "
            f"| {s['tokens_per_s']:,.0f} tok/s | ETA {eta / 60:.1f}m")


def log_answers(path, step, ev, ev_sampled, n):
    """The answers to the first n held-out problems at this evaluation, one line each: the
    greedy one, and the sampled one with --eval-sampled (`python plot.py RUN --samples`)."""
    for i, (p, text, right) in enumerate(ev["answers"][:n]):
        line = {"step": step, "prompt": p.prompt, "answer": p.answer, "greedy": text, "greedy_correct": right}
        if ev_sampled is not None:
            line.update(sampled=ev_sampled["answers"][i][1], sampled_correct=ev_sampled["answers"][i][2])
        append_jsonl(path, line)


def log_samples(path, step, batch, G, n=4):
    """The first completion of the first n groups, with every reward component."""
    for i in range(0, min(len(batch.texts), n * G), G):
        p = batch.problems[i]
        append_jsonl(path, {"step": step, "prompt": p.prompt, "answer": p.answer, "completion": batch.texts[i],
                            **{("reward" if k == "total" else k): float(v[i]) for k, v in batch.rewards.items()}})


# ---------------------------------------------------------------- main

def main(args):
    t_start = time.time()
    device = distributed.init(resolve_device(args.device))  # under torchrun: join the other ranks
    rank, n_ranks = distributed.rank(), distributed.world()
    log = print if rank == 0 else (lambda *a, **k: None)  # one copy of every line, not N
    if args.resume:  # the run's saved flags, checked as a new run's are
        args, run_dir, start_step, state = resume_state(args)
    else:
        check_args(args)
        args.steps = 100 if args.steps is None else args.steps
        run_dir = os.path.join(args.runs_dir, args.run_name or time.strftime("%Y%m%d-%H%M%S"))
        if os.path.exists(os.path.join(run_dir, "metrics.jsonl")):
            raise ValueError(f"{run_dir} already has a run: pick another --run-name or --resume {run_dir}")
        start_step, state = 0, None
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    if args.model:  # the book's Qwen3, in its dtype
        (policy, enc), init_ckpt = load_book_model(args, device), None
    else:
        policy, enc, init_ckpt = load_init(args)
        check_task_fit(args, enc, init_ckpt)
        policy.to(device)
    pool, evalset = task_sets(args, log)  # before the run folder exists: a bad data file leaves nothing behind
    cfg = grpo_config(args)
    ref_policy = None
    if cfg.kl > 0:  # a frozen copy of the warm start; none at all when beta = 0
        ref_policy = copy.deepcopy(policy).eval().requires_grad_(False)
    opt = torch.optim.Adam(policy.parameters(), lr=cfg.lr)
    if state is not None:
        policy.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
    # DDP for the training forward only (its backward averages the gradients over the ranks);
    # sampling and evaluation use `policy` itself. DDP also copies rank 0's weights to all.
    policy_ddp = distributed.wrap(policy)
    os.makedirs(run_dir, exist_ok=True)
    metrics_path, samples_path, answers_path = (os.path.join(run_dir, name) for name in RUN_LOGS)
    run_config = {**vars(args), "grpo": asdict(cfg), "device": device,
              "dtype": "bfloat16 autocast" if device == "cuda" else "float32", "versions": versions(),
              "weights_dtype": str(next(policy.parameters()).dtype).removeprefix("torch."),
              "run_dir": run_dir, "processes": n_ranks}
    if state is None and rank == 0:
        with open(os.path.join(run_dir, "config.json"), "w") as f:
            json.dump(run_config, f, indent=2)
    log(json.dumps(run_config, indent=2))
    log(f"device {device}, dtype {run_config['dtype']}, run folder {run_dir}, {n_ranks} process(es)")
    if pool is not None:
        log(f"task math: {len(pool)} training problems, {len(evalset)} held out")
    extra = None if init_ckpt is None else {"tokenizer": init_ckpt["tokenizer"], "task": init_ckpt["task"]}

    def evaluate_and_save(step, record):
        with autocast(device):
            ev = evaluate(policy, enc, evalset, args.max_new_tokens, args.eval_batch_size, args.eval_fallback)
        record.update(eval_acc=ev["accuracy"], eval_format=ev["format"])
        sampled, ev_sampled = "", None
        if args.eval_sampled:  # one answer a problem as the rollouts draw them; its own seed, so resumes repeat it
            gen = torch.Generator(device=device).manual_seed(step_seed(args.seed, step, rank) + 7919)
            sampler = dict(temperature=args.temperature, top_k=args.top_k, top_p=args.top_p, generator=gen)
            with autocast(device):
                ev_sampled = evaluate(policy, enc, evalset, args.max_new_tokens, args.eval_batch_size,
                                      args.eval_fallback, sampler)
            record["eval_sampled_acc"] = ev_sampled["accuracy"]
            sampled = f" | sampled {record['eval_sampled_acc']:.1%}"
        if args.eval_pass_k:  # the same seed on every rank: each computes the same number
            with autocast(device):
                record["eval_pass_at_k"] = pass_at_k(policy, enc, evalset[:200], args.eval_pass_k, args.temperature,
                                                     step_seed(args.seed, step) + 104729, args.max_new_tokens)["pass"]
            sampled += f" | pass@{args.eval_pass_k} {record['eval_pass_at_k']:.1%}"
        if rank == 0:
            log_answers(answers_path, step, ev, ev_sampled, args.eval_answers)
        log(f"eval step {step}: accuracy {ev['accuracy']:.1%}{sampled} | think format {ev['format']:.1%} "
            f"| {time.time() - t_start:.0f}s since start", flush=True)
        if rank == 0 and args.model:  # a Hugging Face folder: loads back with --model
            save_pretrained(policy, os.path.join(run_dir, f"model_step{step}"), tokenizer_from=args.model)
        elif rank == 0:
            save_checkpoint(os.path.join(run_dir, f"ckpt_step{step}.pt"), policy, extra)
        if rank == 0:
            prune_saves(run_dir, args.keep_checkpoints)

    if start_step == 0:
        # ln V, the most entropy a token can have: plots and tables say how near the learner gets
        record = {"step": 0, "time": 0.0, "ln_vocab": math.log(policy.lm_head_weight.shape[0])}
        evaluate_and_save(0, record)
        if rank == 0:
            append_jsonl(metrics_path, record)
    gen = torch.Generator(device=device)
    saved_step = start_step if state is not None else None  # the step ckpt_latest.pt holds
    t0, step_times = time.time(), []
    for step in range(start_step + 1, args.steps + 1):
        ts = time.time()
        gen.manual_seed(step_seed(args.seed, step, rank))
        try:
            with autocast(device):
                batch, metrics = grpo.grpo_step(policy_ddp, ref_policy, opt, enc,
                                              problem_source(args.level, args.seed, step, rank, pool),
                                              args.prompts_per_step // n_ranks, cfg, gen)
        except FloatingPointError as e:
            raise SystemExit(f"step {step}: {e}; stopping. {last_good(args, run_dir, step, saved_step)}")
        step_times.append(time.time() - ts)
        metrics.update(step=step, time=time.time() - t0, lr=args.lr,
                       tokens_per_s=metrics["n_tokens"] / step_times[-1])
        log(format_line(step, args.steps, metrics, sum(step_times) / len(step_times)), flush=True)
        if step % args.eval_every == 0 or step == args.steps:
            evaluate_and_save(step, metrics)  # every rank: each answers its share of the eval set
        if rank != 0:  # the statistics are global: rank 0 writes them, with its own samples
            continue
        if step % args.samples_every == 0 or step == 1:
            log_samples(samples_path, step, batch, cfg.group_size)
        append_jsonl(metrics_path, metrics)
        if (step % args.save_every == 0 or step == args.steps) and not args.model:
            save_checkpoint(os.path.join(run_dir, "ckpt_latest.pt"), policy,
                            {**extra, "optimizer": opt.state_dict(), "step": step, "args": vars(args),
                             "processes": n_ranks})
            saved_step = step
    log(f"done: {args.steps} steps, {time.time() - t_start:.0f}s total. Plot: python plot.py {run_dir}")
    distributed.close()
    return run_dir


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


def resume_state(args):
    """(saved args, run dir, step to continue from, checkpoint) for --resume RUN_DIR."""
    run_dir = args.resume.rstrip("/")
    if not os.path.isdir(run_dir):
        raise ValueError(f"--resume: no run folder {run_dir}")
    if os.path.exists(os.path.join(run_dir, "config.json")):
        with open(os.path.join(run_dir, "config.json")) as f:
            if json.load(f).get("model"):
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
    check_args(saved)  # before the run folder is touched: a refused run loses nothing
    if distributed.rank() == 0:  # the one writer of the run folder
        for name in RUN_LOGS:
            truncate_metrics(os.path.join(run_dir, name), state["step"])
        print(f"resuming {run_dir} from step {state['step']}")
        if state.get("processes", 1) != distributed.world():  # allowed (e.g. more GPUs), but say so
            print(f"note: the run had {state.get('processes', 1)} process(es), now {distributed.world()}: the "
                  "steps from here draw other problems and samples than the uninterrupted run would have")
    return saved, run_dir, state["step"], state


if __name__ == "__main__":
    parser, args = parse_args()
    try:
        if args.print_config:  # every resolved flag: the recipe's, the defaults, and what was typed
            check_args(args)
            print(json.dumps({k: v for k, v in vars(args).items() if k not in ("print_config", "typed_flags")}, indent=2))
            raise SystemExit(0)
        main(args)
    except (ValueError, CheckpointError) as e:
        # under torchrun: this rank's message, then a non-zero exit, on which torchrun stops the other ranks
        where = f" (rank {distributed.rank()} of {distributed.world()})" if distributed.world() > 1 else ""
        parser.exit(2, f"train.py{where}: error: {e}\n")
