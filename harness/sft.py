"""Warm start: supervised fine-tuning of a fresh GPT on solved problems.

GRPO can only reinforce what the policy already does sometimes (a group whose answers
are all wrong has zero advantage everywhere). So before RL we teach the model the task
by imitation, deliberately leaving room for RL:
- a share of the examples (`--direct-frac`, 60%) answer directly, `\\boxed{18}`, with no
  reasoning; the rest reason inside `<think>...</think>` first. The model learns both
  habits, and its first token favours answering directly (P(<think>) is about 0.4 for
  every prompt): greedy decoding never reasons, sampling reasons 40% of the time. Direct
  answers to long chains are mostly wrong, reasoned ones mostly right, so RL has a clear
  lesson to find ("always think"), and the format-reward experiment has a format to
  reward. (At 50% the first token is a coin flip whose bias, the same for every prompt,
  decides by chance whether greedy decoding always or never reasons.)
- the warm-start chains are mostly short (`--level mixed`: 1-4 operations, 70% of them
  1-2) while RL trains and evaluates on longer ones (`medium`: 2-3 operations).

    python harness/sft.py                      # about 3 minutes on one CPU thread -> runs/warmstart.pt
    python train.py --init runs/warmstart.pt     # GRPO from it
    python harness/sft.py --level mixed_search --label-smoothing 0.2 --out runs/warmstart_search.pt   # 6 min
    python harness/sft.py --steps 50 --out /tmp/tiny.pt

A build writes under runs/ unless --out says otherwise, never over a shipped warm start
(checkpoints/, each with its sha256 and its command in SHIPPED) unless --out names it and
--force is given: the shipped files are what every recorded number ran from, and a build
on another machine rounds to other bytes, which train.py then refuses.
    torchrun --nproc-per-node 2 harness/sft.py           # 2 processes (gloo, CPU), batch split over them

The runaway's warm start (EXPERIMENTS.md, lesson 3) imitates chains and, half the
time, searches (tasks.SearchProblem: try digits until one fits), whose long tries are cut
off at the model's context as a base model's long attempts run into its token cap. It is
trained with label smoothing: each target keeps 1 - eps of the probability and eps is
spread over all the ids, so, like a pretrained model and unlike the default warm start,
it keeps a tail of mass on every id of the vocabulary: teacher-forced on held-out chains,
1.7 nats per token at T = 1 with 18% of the probability on the ids the task never writes,
against 0.07 nats and none for the default warm start (tests/test_warmstart.py). A
sampler at T 0.8 with top-p 0.9 cuts that tail off; the learner at T 1 does not.
Departure from the book's base model: its tail comes from pretraining on text, ours is
put there by eps.

The entropy bonus's warm start (`--level mixed_many`, EXPERIMENTS.md, the closing list)
imitates chains and, half the time, inequalities with several right digits (tasks.py:
`Find ? in: ?*3+2>20`), whose reference boxes the first right digit of a random order of
tries: sampled, it gives different right digits to the same problem, which RL can keep or
settle on one of.

Prints a progress line (step, loss, tokens/s, ETA) and, at the end, greedy accuracy and
pass@8 on the RL eval set. Departure from the book: the chapter starts from a pretrained
Qwen3-0.6B; we build our own starting point in a few minutes.

Under torchrun (harness/distributed.py) each of N ranks draws batch_size / N examples from its
own stream (rank 0's is the one-process stream), the loss is the token mean over the
whole batch, DDP averages the gradients, and rank 0 alone writes the checkpoint.
"""
import argparse
import math
import os
import random
import sys
import time

if __package__ in (None, ""):  # run as a script (python harness/sft.py): the project's folder on the path
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch
import torch.nn.functional as F

import tasks
from harness import distributed
from harness.evaluation import evaluate, pass_at_k
from model import GPT, GPTConfig, count_params, save_checkpoint
from tokenizer import build_tokenizer, encode_completion, encode_text, make_spec

DEFAULT_CKPT = "checkpoints/warmstart.pt"  # train.py's default --init
DEFAULT_OUT = "runs/warmstart.pt"  # where a build goes unless --out says otherwise
SHIPPED = {  # the warm starts that come with the code (each with its sha256 beside it) -> the command that built it
    DEFAULT_CKPT: "python harness/sft.py --out checkpoints/warmstart.pt --force",
    "checkpoints/warmstart_search.pt": "python harness/sft.py --level mixed_search --label-smoothing 0.2 "
                                       "--out checkpoints/warmstart_search.pt --force",
    "checkpoints/warmstart_rare.pt": "python harness/sft.py --think-opening-frac 0.01 --out checkpoints/warmstart_rare.pt "
                                     "--force",
    "checkpoints/warmstart_many.pt": "python harness/sft.py --level mixed_many --eval-level many "
                                     "--out checkpoints/warmstart_many.pt --force",
}


def sft_examples(enc, level, seed, direct_frac, max_len, opening_frac=1.0):
    """Endless (prompt ids, completion ids, opening taught) triples; a share of chains skip the reasoning.

    A search always reasons (its direct answer would be a guess). A completion that does not
    fit in max_len tokens with its prompt is cut, its end-of-text with it: so a long search
    is seen running on, as a base model's long attempts run on into the token cap.
    opening_frac: the share of reasoned chains whose first token, the choice to open <think>, is a
    target; the others teach the reasoning after it but not the choice (make_batch), so the model
    reasons well when it starts to and seldom starts (the rare-reasoning warm start, EXPERIMENTS.md).
    """
    rng, opening_rng = random.Random(seed + 1), random.Random(seed + 2)  # the second: 1.0 draws nothing new
    for p in tasks.problems(level, seed):
        think = rng.random() >= direct_frac or isinstance(p, tasks.SearchProblem)
        prompt = encode_text(enc, p.prompt)
        completion = encode_completion(enc, p.solution(think)) + [enc.eot_token]
        opening = not think or opening_frac >= 1 or opening_rng.random() < opening_frac
        yield prompt, completion[:max_len - len(prompt)], opening


def make_batch(examples, pad_id):
    """Right-padded inputs, targets and a loss mask that covers completion tokens only (from the
    second one where an example's opening is not taught)."""
    seqs = [p + c for p, c, _ in examples]
    T = max(len(s) for s in seqs) - 1
    x = torch.full((len(seqs), T), pad_id)  # (B, T)
    y = torch.full((len(seqs), T), pad_id)
    mask = torch.zeros(len(seqs), T, dtype=torch.bool)  # real input tokens
    loss_mask = torch.zeros(len(seqs), T, dtype=torch.bool)  # targets that are completion tokens
    for i, ((p, c, opening), s) in enumerate(zip(examples, seqs)):
        x[i, :len(s) - 1] = torch.tensor(s[:-1])
        y[i, :len(s) - 1] = torch.tensor(s[1:])
        mask[i, :len(s) - 1] = True
        loss_mask[i, len(p) - (1 if opening else 0):len(s) - 1] = True
    return x, y, mask, loss_mask


def lr_at(step, total, peak, warmup):
    """Linear warmup, then cosine decay to 10% of the peak."""
    if step < warmup:
        return peak * (step + 1) / warmup
    progress = (step - warmup) / max(1, total - warmup)
    return peak * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress)))


def build_tokenizer_spec(seed, n_merges=48):
    corpus = [p.prompt + p.solution() for p, _ in zip(tasks.problems("mixed", seed), range(2000))]
    return make_spec(corpus, n_merges)


def main(args):
    distributed.init("cpu")  # under torchrun: join the other ranks (gloo; this script trains on the CPU)
    rank, n_ranks = distributed.rank(), distributed.world()
    log = print if rank == 0 else (lambda *a, **k: None)
    if args.batch_size % n_ranks:
        raise ValueError(f"--batch-size {args.batch_size} does not split over {n_ranks} processes")
    torch.manual_seed(args.seed)
    torch.set_num_threads(args.threads)
    tasks.check_level(args.level), tasks.check_level(args.eval_level)
    spec = build_tokenizer_spec(args.seed)
    enc = build_tokenizer(spec)
    cfg = GPTConfig(vocab_size=enc.n_vocab, n_layer=args.n_layer, n_head=args.n_head, d_model=args.d_model,
                    max_seq_len=args.max_seq_len)
    if tasks.check_level(args.level)[2]:  # a try budget: every honest answer ends by itself, so it must fit
        longest = max(len(encode_text(enc, p.prompt)) + len(encode_completion(enc, p.solution())) + 1
                      for p, _ in zip(tasks.problems(args.level, tasks.EVAL_SEED), range(2000)))
        if longest > cfg.max_seq_len:
            raise ValueError(f"--max-seq-len {cfg.max_seq_len} is shorter than the {longest} tokens of the longest "
                             f"prompt and honest answer of --level {args.level}: raise it to >= {longest}")
    model = GPT(cfg)
    trained = distributed.wrap(model)  # DDP: the backward averages the gradients over the ranks
    log(f"warm start: {count_params(model) / 1e6:.2f}M params, vocab {enc.n_vocab}, {args.steps} steps "
        f"of {args.batch_size}, level {args.level}, direct answers {args.direct_frac:.0%}")
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, betas=(0.9, 0.95), weight_decay=0.0)
    data = sft_examples(enc, args.level, distributed.rank_seed(args.seed, rank), args.direct_frac,
                        cfg.max_seq_len, args.think_opening_frac)  # rank 0: as ever
    t0, tokens_seen, losses = time.time(), 0, []
    for step in range(args.steps):
        x, y, mask, loss_mask = make_batch([next(data) for _ in range(args.batch_size // n_ranks)], enc.eot_token)
        logits = trained(x, mask)  # (B, T, V)
        loss = F.cross_entropy(logits[loss_mask], y[loss_mask], label_smoothing=args.label_smoothing)
        # Token mean over every rank's batch: this rank's mean * its share of the tokens * N,
        # since DDP divides the summed gradients by N (the factor is exactly 1 in one process).
        n_here = loss_mask.sum()
        loss = loss * (n_here / distributed.all_sum(n_here) * n_ranks)
        for g in opt.param_groups:
            g["lr"] = lr_at(step, args.steps, args.lr, args.warmup)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        tokens_seen += int(distributed.all_sum(mask.sum()))
        loss = distributed.all_sum(loss.detach()) / n_ranks  # the global token mean
        losses.append(loss.item())
        if step % args.log_every == 0 or step == args.steps - 1:
            el = time.time() - t0
            eta = el / (step + 1) * (args.steps - step - 1)
            log(f"sft step {step:4d}/{args.steps} | loss {loss.item():.4f} | {tokens_seen / el:,.0f} tok/s "
                f"| {el:.0f}s elapsed | ETA {eta:.0f}s", flush=True)
    model.eval()
    evalset = tasks.eval_set(args.eval_level, args.eval_size)
    acc = evaluate(model, enc, evalset)
    line = f"warm start done in {time.time() - t0:.0f}s | greedy eval accuracy {acc['accuracy']:.1%} " \
           f"(think format {acc['format']:.1%}) on {len(evalset)} {args.eval_level} problems"
    if args.pass_k and rank == 0:  # one process samples the pass@k problems; the others are done
        pk = pass_at_k(model, enc, evalset[:args.pass_k_problems], k=args.pass_k, seed=args.seed)
        line += (f" | pass@{args.pass_k} (T=1) {pk['pass']:.1%} on {min(len(evalset), args.pass_k_problems)}, "
                 f"{pk['reasoned']:.1%} of the answers reason")
    log(line)
    meta = {"tokenizer": spec, "task": {"sft_level": args.level, "eval_level": args.eval_level,
                                        "template": tasks.PROMPT_TEMPLATE},
            "sft_args": vars(args), "sft_eval": {"accuracy": acc["accuracy"], "format": acc["format"]}}
    if rank == 0:
        save_checkpoint(args.out, model, meta)
    log(f"saved {args.out}")
    distributed.close()
    return model, enc, losses


def shipped_over(path):
    """True where path names a shipped warm start that is there (checkpoints/, SHIPPED)."""
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the project's folder
    return os.path.relpath(os.path.abspath(path), here) in SHIPPED and os.path.exists(path)


def get_parser():
    ap = argparse.ArgumentParser(description="Warm start (SFT) a small GPT on solved problems.",
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    # data
    ap.add_argument("--level", default="mixed", help=f"difficulty of warm-start problems ({', '.join(tasks.LEVELS)})")
    ap.add_argument("--direct-frac", type=float, default=0.6, help="share of examples answered without <think>")
    ap.add_argument("--think-opening-frac", type=float, default=1.0,
                    help="share of reasoned examples whose opening <think> is a target; the rest teach the reasoning "
                         "but not the choice to start it (the rare-reasoning warm start: 0.01)")
    # model
    ap.add_argument("--n-layer", type=int, default=2, help="transformer blocks")
    ap.add_argument("--n-head", type=int, default=4, help="attention heads")
    ap.add_argument("--d-model", type=int, default=128, help="width")
    ap.add_argument("--max-seq-len", type=int, default=GPTConfig.max_seq_len,
                    help="positions the model has (prompt + completion): the longest answer RL may cap at")
    # optimisation
    ap.add_argument("--steps", type=int, default=1400, help="optimizer steps")
    ap.add_argument("--batch-size", type=int, default=64, help="sequences per step")
    ap.add_argument("--lr", type=float, default=3e-3, help="peak learning rate (AdamW)")
    ap.add_argument("--warmup", type=int, default=30, help="linear warmup steps")
    ap.add_argument("--label-smoothing", type=float, default=0.0,
                    help="eps: each target keeps 1 - eps, the rest spread over the whole vocabulary, so the model "
                         "keeps a base model's tail on every id (0: off; the runaway's warm start: 0.1)")
    # evaluation and output
    ap.add_argument("--eval-level", default="medium", help="difficulty of the RL eval set")
    ap.add_argument("--eval-size", type=int, default=500, help="held-out problems for greedy accuracy")
    ap.add_argument("--pass-k", type=int, default=8, help="report pass@k at temperature 1 (0: skip)")
    ap.add_argument("--pass-k-problems", type=int, default=200, help="eval problems used for pass@k")
    ap.add_argument("--out", default=DEFAULT_OUT, help="checkpoint path")
    ap.add_argument("--force", action="store_true", help="write over a shipped warm start that --out names")
    ap.add_argument("--seed", type=int, default=0, help="random seed")
    ap.add_argument("--threads", type=int, default=1, help="torch CPU threads (1: see docs/performance.md, Sampling and training speed)")
    ap.add_argument("--log-every", type=int, default=50, help="print every N steps")
    return ap


if __name__ == "__main__":
    args = get_parser().parse_args()
    try:
        tasks.check_level(args.level), tasks.check_level(args.eval_level)
    except ValueError as e:
        get_parser().error(str(e))
    if not 0 <= args.label_smoothing < 1:
        get_parser().error(f"--label-smoothing must be in [0, 1), got {args.label_smoothing}: it is the share of "
                           "each target's probability spread over the vocabulary")
    if not 0 < args.think_opening_frac <= 1:
        get_parser().error(f"--think-opening-frac must be in (0, 1], got {args.think_opening_frac}: it is the share "
                           "of reasoned examples that teach the choice to open <think> (0 would never teach it)")
    if shipped_over(args.out) and not args.force:
        get_parser().exit(2, f"harness/sft.py: error: --out {args.out} is a shipped warm start (its sha256 beside it): a build "
                             f"writes elsewhere (--out runs/NAME.pt, then train.py --init runs/NAME.pt), or over it "
                             f"with --force\n")
    if not 0 <= args.direct_frac <= 1:
        get_parser().error(f"--direct-frac must be in [0, 1], got {args.direct_frac}: it is the share of chains "
                           "answered without reasoning")

    try:
        main(args)
    except ValueError as e:
        where = f" (rank {distributed.rank()} of {distributed.world()})" if distributed.world() > 1 else ""
        raise SystemExit(f"harness/sft.py{where}: error: {e}")
