"""Train a reasoning policy with GRPO: the run, from its config to its last save.

    python train.py                              # GRPO from the shipped warm start, about a minute on one CPU thread
    python train.py --clip 0.2 --kl 0.0 --run-name mine
    python train.py --recipe book --print-config # the resolved flags of a recipe, without training
    python train.py --resume runs/mine           # continue after an interruption (or for longer: --steps N)
    torchrun --nproc-per-node 2 train.py         # 2 processes (ranks), one CPU core or GPU each
    python train.py --recipe book --kl 0 --mu 1 --steps 500 --level medium_search --eval-level medium \
        --init checkpoints/warmstart_search.pt --eval-sampled       # the book's 7_3 runs away (EXPERIMENTS.md, lesson 3)
    python train.py --recipe book_qwen3 --model qwen3-0.6b-base --task math ...   # the book's model (docs/book_model.md)

`main` reads in the order a run goes: its config (the flags, checked by harness/cli.py before
anything is written), the model, the loop, the evaluations and the saves. Each step samples
G answers for each of --prompts-per-step problems, scores them and updates the policy:
train_step -> grpo.grpo_step, watched by stats.StepLog, which records what each update did. Every --eval-every steps (and at step 0) the policy answers the fixed
held-out set greedily (and, with --eval-sampled, once more as the rollouts sample).
Everything lands in runs/<name>/:
    config.json      every resolved flag, package versions, device
    metrics.jsonl    one JSON object per step (eval_acc, eval_sampled_acc on eval steps; ln_vocab at step 0)
    samples.jsonl    a few prompts with completions and rewards every --samples-every steps
    answers.jsonl    the answers to --eval-answers fixed held-out problems at each evaluation
    ckpt_latest.pt   model + optimizer (and --adaptive-entropy's coefficient), for --resume;
                     ckpt_step<N>.pt at each eval (with --model: model_step<N>/, a Hugging Face
                     folder; --keep-checkpoints N keeps the latest N)
Crash safety: checkpoints are written to a temp file and renamed, one flushed line per
step, and a resume drops metrics lines after the checkpoint's step, so a `kill -9` at any
moment leaves no gap or duplicate. Step s's problems and sampling noise are seeded by
(seed, s) (and the rank), so a resumed run repeats the uninterrupted one exactly. Under
torchrun only rank 0 writes the run folder (harness/distributed.py says how the ranks agree).
"""
import collections
import contextlib
import copy
import math
import os
import time

import torch

import field_methods
import grpo
import tasks
from book.qwen3 import save_pretrained
from harness import cli
from harness import distributed
from harness import stats
from harness.evaluation import evaluate, pass_at_k, pass_metrics
from lab import run_folders
from model import CheckpointError, save_checkpoint

# an evaluation samples with a seed of its own, step_seed plus one of these primes, so that a
# resumed run repeats it and it never draws the noise of a training step
EVAL_SAMPLED_SEED = 7919  # --eval-sampled: one answer a problem, as the rollouts draw them
PASS_AT_K_SEED = 104729  # --eval-pass-k: K answers a problem, the same on every rank


def main(args):
    t_start = time.time()
    device = distributed.init(cli.resolve_device(args.device))  # torchrun: join the other ranks (harness/distributed.py)
    rank = distributed.rank()  # this process's rank: 0 in one process
    n_ranks = distributed.world()  # of how many: 1 in one process
    log = print if rank == 0 else (lambda *a, **k: None)  # one copy of every line, not N
    args, run_dir, start_step, state = cli.start_run(args)  # checked; with --resume, the run's saved flags
    cfg = cli.grpo_config(args)
    policy, ref_policy, opt, enc, init_ckpt, pool, evalset = build(args, cfg, device, state, log)
    metrics_path, samples_path = cli.open_run_folder(args, cfg, device, policy, run_dir, state, pool, evalset, log)
    learner = distributed.wrap(policy)  # under torchrun, DDP for the training forward: its backward averages
    if start_step == 0:  # the warm start's held-out accuracy; ln V, the most entropy a token can have
        record = {"step": 0, "time": 0.0, "ln_vocab": math.log(policy.lm_head_weight.shape[0])}
        evaluate_and_save(policy, enc, evalset, args, device, run_dir, init_ckpt, 0, record, t_start, rank)
        if rank == 0:  # rank 0 alone writes the run folder
            run_folders.append_jsonl(metrics_path, record)
    gen = torch.Generator(device=device)
    lagged = collections.deque()  # --rollout-lag: batches sampled and not yet trained on (no checkpoint keeps them)
    control = field_methods.entropy_control(state, cfg)  # --adaptive-entropy's coefficient, carried from step to step; else None
    saved_step = start_step if state is not None else None  # the step ckpt_latest.pt holds
    before = state.get("time", 0.0) if state is not None else 0.0  # a resumed run's seconds before its checkpoint
    t0 = time.time() - before  # metrics' time: the whole run's, across resumes
    step_times = []
    for step in range(start_step + 1, args.steps + 1):
        ts = time.time()
        batch, metrics, control = train_step(policy, learner, ref_policy, opt, enc, args, cfg, step, (rank, n_ranks),
                                             pool, gen, lagged, control, device, run_dir, saved_step)
        step_times.append(time.time() - ts)
        metrics.update(step=step, time=time.time() - t0, lr=args.lr, tokens_per_s=metrics["n_tokens"] / step_times[-1])
        log(run_folders.format_line(step, args.steps, metrics, sum(step_times) / len(step_times)), flush=True)
        if step % args.eval_every == 0 or step == args.steps:  # every rank: each answers its share of the eval set
            evaluate_and_save(policy, enc, evalset, args, device, run_dir, init_ckpt, step, metrics, t_start, rank)
        if rank == 0:  # the statistics are global: rank 0 writes them, with its own samples
            saved_step = write_step(args, cfg, policy, opt, init_ckpt, run_dir, metrics_path, samples_path, step,
                                    batch, metrics, control, saved_step, n_ranks)
    log(f"done: {args.steps} steps, {before + time.time() - t_start:.0f}s total. Plot: python plot.py {run_dir}")
    distributed.close()
    return run_dir


def build(args, cfg, device, state, log):
    """The run's pieces -> (policy, ref_policy, opt, enc, init_ckpt, pool, evalset): the policy and its tokenizer
    from --init (or --model), the problems, a frozen copy of the warm start as pi_ref (none at all when beta = 0),
    Adam; with --resume, the policy's and Adam's saved state. A bad data file, or a cap the model cannot hold, stops
    it before the run folder exists."""
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    policy, enc, init_ckpt = cli.load_policy(args, device)
    pool, evalset = cli.task_sets(args, enc, init_ckpt, log, getattr(policy.cfg, "max_seq_len", None))
    ref_policy = None  # pi_ref, a frozen copy of the warm start: only with a KL term
    if cfg.kl > 0:
        ref_policy = copy.deepcopy(policy).eval().requires_grad_(False)
    opt = torch.optim.Adam(policy.parameters(), lr=cfg.lr)
    if state is not None:
        policy.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
    return policy, ref_policy, opt, enc, init_ckpt, pool, evalset


def train_step(policy, learner, ref_policy, opt, enc, args, cfg, step, ranks, pool, gen, lagged, control, device,
               run_dir, saved_step):
    """Step `step`: its problems and sampling noise seeded by (seed, step, rank), grpo.grpo_step on this rank's share
    of the prompts, each update watched by stats.StepLog (ranks: (rank, n_ranks); learner: the policy, under
    torchrun in DDP) -> (the batch it trained on, its metrics, the entropy controller's next state). A step that
    fails stops the run in one line (cli.step_failed)."""
    rank, n_ranks = ranks
    gen.manual_seed(step_seed(args.seed, step, rank))
    torch.manual_seed(step_seed(args.seed, step, rank))  # the step's other draws (dropout, --top-entropy-random)
    step_cfg = field_methods.entropy_controlled(cfg, control)
    problems = problem_source(args.level, args.seed, step, rank, pool)
    log = stats.StepLog(policy, ref_policy, step_cfg, stats.think_token(enc))  # what each update did
    try:
        with autocast(device):
            batch = grpo.grpo_step(policy, ref_policy, opt, enc, problems, args.prompts_per_step // n_ranks, step_cfg,
                                   gen, lagged, log.update, learner)
        metrics = log.stats.result()  # {statistic: float}, the same on every rank
    except (FloatingPointError, RuntimeError, ValueError, TypeError, IndexError, KeyError) as e:
        raise SystemExit(cli.step_failed(e, args, run_dir, step, saved_step)) from None
    if control is not None:  # the coefficient this step applied, then the next one from its entropy
        metrics["entropy_coef"] = step_cfg.entropy_coef
        control = field_methods.entropy_control_step(control, metrics["entropy"], cfg)
    return batch, metrics, control


def write_step(args, cfg, policy, opt, init_ckpt, run_dir, metrics_path, samples_path, step, batch, metrics, control,
               saved_step, n_ranks=1):
    """Rank 0's part of a step: its samples now and then, its metrics line, and every --save-every steps (and at the
    last) ckpt_latest.pt, for --resume -> the step ckpt_latest.pt now holds."""
    if step % args.samples_every == 0 or step == 1:
        run_folders.log_samples(samples_path, step, batch, cfg.group_size)
    run_folders.append_jsonl(metrics_path, metrics)
    if (step % args.save_every == 0 or step == args.steps) and not args.model:
        save_checkpoint(os.path.join(run_dir, "ckpt_latest.pt"), policy,
                        {**init_ckpt, "optimizer": opt.state_dict(), "step": step, "args": vars(args),
                         "processes": n_ranks, "time": metrics["time"],
                         **({"entropy_control": control} if control is not None else {})})
        return step
    return saved_step


# ---------------------------------------------------------------- evaluation and saving

def evaluate_and_save(policy, enc, evalset, args, device, run_dir, init_ckpt, step, record, t_start, rank=0):
    """Answer the held-out set greedily (and as --eval-sampled, --eval-pass-k ask), add the
    accuracies to record, write the answers and the weights (ckpt_step<N>.pt, or with --model
    a Hugging Face folder model_step<N>/), keep the --keep-checkpoints latest."""
    sampled_seed = step_seed(args.seed, step, rank) + EVAL_SAMPLED_SEED  # its own seed: a resume repeats it
    pass_seed = step_seed(args.seed, step) + PASS_AT_K_SEED  # the same on every rank: each computes the same number
    ev_sampled = None
    with autocast(device):
        ev = evaluate(policy, enc, evalset, args.max_new_tokens, args.eval_batch_size, args.eval_fallback)
        record.update(eval_acc=ev["accuracy"], eval_format=ev["format"])
        if args.eval_sampled:  # one answer a problem, as the rollouts draw them
            sampler = dict(temperature=args.temperature, top_k=args.top_k, top_p=args.top_p,
                           generator=torch.Generator(device=device).manual_seed(sampled_seed))
            ev_sampled = evaluate(policy, enc, evalset, args.max_new_tokens, args.eval_batch_size,
                                  args.eval_fallback, sampler)
            record["eval_sampled_acc"] = ev_sampled["accuracy"]
        if args.eval_pass_k:  # with --eval-pass-n also how many different right answers a problem's N give
            pk = pass_at_k(policy, enc, evalset[:200], args.eval_pass_k, args.temperature, pass_seed,
                           args.max_new_tokens, args.eval_pass_n or None)
            record.update(pass_metrics(pk, args.eval_pass_n))
    sampled = f" | sampled {record['eval_sampled_acc']:.1%}" if args.eval_sampled else ""
    sampled += f" | pass@{args.eval_pass_k} {record['eval_pass_at_k']:.1%}" if args.eval_pass_k else ""
    sampled += f" | {record['eval_distinct']:.2f} right answers a problem" if args.eval_pass_n else ""
    if rank != 0:  # rank 0 alone prints and writes the run folder
        return
    print(f"eval step {step}: accuracy {ev['accuracy']:.1%}{sampled} | think format {ev['format']:.1%} "
          f"| {time.time() - t_start:.0f}s since start", flush=True)
    run_folders.log_answers(os.path.join(run_dir, "answers.jsonl"), step, ev, ev_sampled, args.eval_answers)
    if args.model:  # a Hugging Face folder: loads back with --model
        save_pretrained(policy, os.path.join(run_dir, f"model_step{step}"), tokenizer_from=args.model)
    else:
        save_checkpoint(os.path.join(run_dir, f"ckpt_step{step}.pt"), policy, init_ckpt)
    cli.prune_saves(run_dir, args.keep_checkpoints)


def autocast(device):
    """bf16 autocast on GPU; plain fp32 on CPU (bf16 matmuls are slow on most CPUs)."""
    return torch.autocast("cuda", dtype=torch.bfloat16) if device == "cuda" else contextlib.nullcontext()


# ---------------------------------------------------------------- seeds and logs

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


if __name__ == "__main__":
    cli.in_project_folder("train.py")
    parser, args = cli.parse_args()
    try:
        if args.print_config:  # every resolved flag, checked, without training
            cli.print_config(args)
            raise SystemExit(0)
        main(args)
    except KeyboardInterrupt:  # one line in the run's log, not a traceback
        run = args.resume or os.path.join(args.runs_dir, args.run_name or "RUN_NAME")
        parser.exit(130, f"train.py: interrupted (Ctrl-C); python train.py --resume {run} continues from its "
                         "last checkpoint\n")
    except (ValueError, CheckpointError) as e:
        # under torchrun: this rank's message, then a non-zero exit, on which torchrun stops the other ranks
        rank = f" (rank {distributed.rank()} of {distributed.world()})" if distributed.world() > 1 else ""
        parser.exit(2, f"train.py{rank}: error: {e}\n")
