"""Benchmark: our GRPO step against TRL's GRPOTrainer on the same work, in alternating rounds.

    python bench/bench_vs_trl.py --trl-python VENV/bin/python      # the table: 3 rounds at 1 and 2 threads
    python bench/bench_vs_trl.py --side ours --threads 1            # one side once, in this process
    python bench/bench_vs_trl.py --side trl --threads 1             # needs trl (below)

TRL lives outside requirements.txt; give it a virtual environment that sees this torch:

    python -m venv --system-site-packages VENV && VENV/bin/pip install "trl==1.16.*" torch==<this torch's version>

The work, the same on both sides: a GPT of d 128, 4 layers, 4 heads and learned positions
(ours: model.GPT; TRL's: a GPT-2 of that shape without dropout, randomly initialised), over our
vocabulary plus one stop id; 8 of the task's prompts (level "hard", 14-16 tokens) x 8
answers x exactly 48 new tokens at T 1; the rewards of rewards.score; one update per
rollout (our --mu 1; TRL's num_iterations 1), no KL, fp32 on the CPU. TRL 1.16's GRPOConfig
defaults do other work than ours, so the harness sets each to ours: bf16 autocast
(bf16=None becomes True) and gradient checkpointing (True) off, the loss "grpo" (each
answer's token mean, then the mean over answers: our seq_mean; its default "dapo" is our
token_mean), a constant learning rate (its default decays linearly to 0 over max_steps), and
the same Adam implementation (its default is the fused AdamW; at weight decay 0 AdamW is
Adam). Both sides then print what their running trainer uses, read from the objects that
run (TRL's trainer, model and optimizer; ours), on one line each; where TRL's differs from
ours in any of them (a TRL whose defaults move), the script stops and names the setting
instead of timing other work.
"Exactly 48": the stop id can never be drawn (ours: the LM head leaves its row out;
TRL's: generate's suppress_tokens), so no row ends early on either side. TRL sees our
prompts token for token (its tokenizer maps one character to each of our ids), in our
order: step k samples the task's prompts 8k..8k+7 on both sides.

Each side runs in a process of its own (OMP_NUM_THREADS and torch threads set), does
--warmup steps, then times --steps steps; its line is the median step and the median of
the sampling inside it (ours: decoding.generate; TRL's: the model's generate). The
rounds alternate the two sides, thread count by thread count, so a machine whose speed
drifts slows both alike; the table gives every round and the median ratio. A step's
sampling is also put against the matmul FLOPs it needs (one position's linear layers and
LM head per new token, 2 per multiply-add: 5.06 GFLOP) and the machine's matmul peak at
that thread count (a 2048^3 fp32 a @ b). Our side also times its step's matrix products alone,
each on its own shapes (matmul_floor): what arithmetic costs at this machine's speed for such
products, so TRL's step over it bounds the ratio that any step doing these same products could reach
here, were everything else in it free.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
import tasks  # noqa: E402
from config import GRPOConfig  # noqa: E402
from harness.stats import logged_step  # noqa: E402
from tokenizer import build_tokenizer, encode_prompt  # noqa: E402

D_MODEL, N_LAYER, N_HEAD = 128, 4, 4
NO_TRL = ("bench_vs_trl: trl is not importable by {python}; install it in a virtual environment "
          "(python -m venv --system-site-packages VENV && VENV/bin/pip install \"trl==1.16.*\" "
          f"torch=={torch.__version__.split('+')[0]}) and pass --trl-python VENV/bin/python")
N_PROMPTS, GROUP, NEW_TOKENS, LR, MAX_SEQ_LEN = 8, 8, 48, 1e-4, 96
ADAM = dict(fused=False, foreach=False)  # one Adam implementation on both sides: torch's single-tensor loop
# what both trainers must run with, as settings() reads it off the running objects
SAME_WORK = {"bf16": False, "gradient_checkpointing": False, "param_dtype": "float32", "dropout": 0.0,
             "optimizer": "Adam(W) fused=False foreach=False", "weight_decay": 0.0, "lr": LR, "lr_schedule": "constant",
             "warmup_steps": 0, "max_grad_norm": 1.0, "loss": "seq_mean", "clip": 0.2, "adv_norm": "group", "beta": 0.0}


def our_tokenizer():
    from harness import sft
    return build_tokenizer(sft.build_tokenizer_spec(0))


def problems(seed=0):
    return tasks.problems("hard", seed)


# ---------------------------------------------------------------- ours

def run_ours(threads, warmup, steps):
    import grpo
    import rollouts
    from bench_decode import NoStopGPT  # the LM head leaves the stop id's row out: it is never drawn
    from model import GPTConfig

    enc = our_tokenizer()
    stop = enc.n_vocab  # the extra id
    rollouts.stop_tokens = lambda enc: (stop,)  # rollouts ends rows on this id only
    timer = Timer(rollouts, "generate")  # the sampling inside each step
    torch.manual_seed(0)
    policy = NoStopGPT(GPTConfig(vocab_size=enc.n_vocab + 1, max_seq_len=MAX_SEQ_LEN, n_layer=N_LAYER,
                                 n_head=N_HEAD, d_model=D_MODEL))
    cfg = GRPOConfig(group_size=GROUP, max_new_tokens=NEW_TOKENS, mu=1, kl=0.0, lr=LR)
    opt = torch.optim.Adam(policy.parameters(), lr=cfg.lr, **ADAM)  # as train.py's (ADAM names torch's default on the CPU)
    facts = settings_of_ours(policy, opt, cfg)
    stream = problems()
    times = []
    for step in range(warmup + steps):
        t0 = time.perf_counter()
        batch, _ = logged_step(policy, None, opt, enc, lambda: next(stream), N_PROMPTS, cfg,
                                  torch.Generator().manual_seed(step))
        times.append(time.perf_counter() - t0)
    n_new = int(batch.loss_mask.sum())
    assert n_new == N_PROMPTS * GROUP * NEW_TOKENS, f"{n_new} new tokens: a row ended early"  # the same work
    out = summary("ours", threads, times[warmup:], timer.times[warmup:], policy, enc.n_vocab, facts)
    return {**out, "matmul_floor_s": matmul_floor(N_PROMPTS * GROUP, batch.tokens.shape[1], enc.n_vocab + 1)}


def settings_of_ours(policy, opt, cfg):
    """The facts SAME_WORK names, read off our running objects."""
    group = opt.param_groups[0]
    return {"bf16": torch.is_autocast_enabled("cpu"),  # grpo_step runs no autocast on the CPU
            "gradient_checkpointing": False,  # model.GPT has none
            "param_dtype": str(next(policy.parameters()).dtype).replace("torch.", ""),
            "dropout": 0.0,  # model.GPT has no dropout module
            "optimizer": f"Adam(W) fused={bool(group['fused'])} foreach={bool(group['foreach'])}",
            "weight_decay": group["weight_decay"], "lr": group["lr"], "lr_schedule": "constant", "warmup_steps": 0,
            "max_grad_norm": cfg.max_grad_norm, "loss": cfg.loss_agg, "clip": cfg.clip, "adv_norm": cfg.adv_norm,
            "beta": cfg.kl, "attention": "sdpa (learner), matmuls (decode)"}


# ---------------------------------------------------------------- TRL

def run_trl(threads, warmup, steps):
    try:
        import datasets
        import transformers
        import trl
        from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    except ImportError:
        raise SystemExit(NO_TRL.format(python=sys.executable)) from None
    import rewards

    enc = our_tokenizer()
    stop = enc.n_vocab  # the extra id: TRL's eos and pad, suppressed in generate
    char = [chr(0x100 + i) for i in range(enc.n_vocab + 1)]  # our id i <-> one character
    text_of = {c: i for i, c in enumerate(char)}
    fast = Tokenizer(models.WordLevel({c: i for i, c in enumerate(char)}, unk_token=char[stop]))
    fast.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    fast.decoder = decoders.Fuse()
    tok = transformers.PreTrainedTokenizerFast(tokenizer_object=fast, eos_token=char[stop], pad_token=char[stop],
                                               padding_side="left")
    stream = problems()
    rows = []
    for _ in range(N_PROMPTS * (warmup + steps) * 4):  # more than TRL's sampler will draw
        p = next(stream)
        rows.append({"prompt": "".join(char[i] for i in encode_prompt(enc, p.prompt)), "answer": p.answer})

    def reward(completions, answer, **_):  # rewards.score on our own decoding of each completion
        ids = [[text_of[c] for c in text if c in text_of and text_of[c] != stop] for text in completions]
        return [rewards.score(enc.decode(i), a, len(i), GRPOConfig(max_new_tokens=NEW_TOKENS))["total"] for i, a in zip(ids, answer)]

    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(transformers.GPT2Config(
        vocab_size=enc.n_vocab + 1, n_positions=MAX_SEQ_LEN, n_embd=D_MODEL, n_layer=N_LAYER, n_head=N_HEAD,
        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,  # no dropout, as ours
        bos_token_id=stop, eos_token_id=stop, pad_token_id=stop))
    timer = Timer(model, "generate")
    step_times, facts = [], {}

    class StepTimer(transformers.TrainerCallback):
        def on_train_begin(self, args, state, control, model=None, optimizer=None, lr_scheduler=None, **kw):
            facts.update(settings_of_trl(trainer, model, optimizer, lr_scheduler))
            refuse_other_work(facts, f"trl {trl.__version__}")

        def on_step_begin(self, args, state, control, **kw):
            self.t0 = time.perf_counter()

        def on_step_end(self, args, state, control, **kw):
            step_times.append(time.perf_counter() - self.t0)

    with tempfile.TemporaryDirectory() as out:
        args = trl.GRPOConfig(
            output_dir=out, use_cpu=True, seed=0, max_steps=warmup + steps, learning_rate=LR,
            per_device_train_batch_size=N_PROMPTS * GROUP, num_generations=GROUP, steps_per_generation=1,
            gradient_accumulation_steps=1, num_iterations=1, beta=0.0, temperature=1.0, top_p=1.0,
            max_completion_length=NEW_TOKENS, generation_kwargs={"suppress_tokens": [stop]}, shuffle_dataset=False,
            logging_steps=10_000, save_strategy="no", report_to="none", disable_tqdm=True, dataloader_num_workers=0,
            # the work ours does (TRL 1.16's defaults in the comments)
            bf16=False, fp16=False,  # bf16=None: bf16 autocast
            gradient_checkpointing=False,  # True: the forward again inside the backward
            loss_type="grpo",  # "dapo": our token_mean
            lr_scheduler_type="constant", warmup_steps=0,  # "linear": lr decays to 0 over max_steps
            optim="adamw_torch", optim_args=None, weight_decay=0.0,  # "adamw_torch_fused"
            epsilon=0.2, scale_rewards="group", max_grad_norm=1.0, disable_dropout=True)
        trainer = trl.GRPOTrainer(model=model, reward_funcs=reward, args=args, processing_class=tok,
                                  train_dataset=datasets.Dataset.from_list(rows), callbacks=[StepTimer()])
        trainer.train()
    return summary(f"trl {trl.__version__}", threads, step_times[warmup:], timer.times[warmup:], model,
                   enc.n_vocab + 1, facts)


def settings_of_trl(trainer, model, optimizer, lr_scheduler):
    """The facts SAME_WORK names, read off TRL's running trainer, model and optimizer (not
    off the config we passed): autocast from accelerate's mixed precision, checkpointing
    from the model, the optimizer and schedule from the objects the trainer built."""
    inner = getattr(optimizer, "optimizer", optimizer)  # accelerate wraps it
    group = inner.param_groups[0]
    dropouts = {m.p for m in model.modules() if isinstance(m, torch.nn.Dropout)}
    factors = {f(step) for f in lr_scheduler.lr_lambdas for step in (0, 1, 10 ** 6)}  # the LR's factor over time
    schedule = "constant" if factors == {1.0} else type(lr_scheduler).__name__
    return {"bf16": trainer.accelerator.mixed_precision == "bf16" or trainer.args.bf16,
            "gradient_checkpointing": bool(model.is_activation_checkpointing if hasattr(model, "is_activation_checkpointing")
                                           else model.is_gradient_checkpointing),
            "param_dtype": str(next(model.parameters()).dtype).replace("torch.", ""),
            "dropout": max(dropouts, default=0.0),
            "optimizer": f"Adam(W) fused={bool(group.get('fused'))} foreach={bool(group.get('foreach'))}",
            "weight_decay": group["weight_decay"], "lr": group["lr"], "lr_schedule": schedule,
            "warmup_steps": trainer.args.warmup_steps, "max_grad_norm": trainer.args.max_grad_norm,
            "loss": {"grpo": "seq_mean", "dapo": "token_mean", "dr_grpo": "constant"}.get(trainer.loss_type,
                                                                                          trainer.loss_type),
            "clip": trainer.epsilon_low, "adv_norm": str(trainer.scale_rewards),
            "beta": trainer.beta, "attention": model.config._attn_implementation}


def refuse_other_work(facts, side):
    """Stop, naming the setting, where a side runs other work than SAME_WORK."""
    for key, want in SAME_WORK.items():
        if facts[key] != want:
            raise SystemExit(f"bench_vs_trl: {side} runs with {key}={facts[key]!r}, not {want!r} as the other side; "
                             f"the timing would compare other work (set it in run_trl's GRPOConfig)")


# ---------------------------------------------------------------- both

class Timer:
    """Wraps obj.name so each call's wall time is kept in .times."""

    def __init__(self, obj, name):
        self.times, real = [], getattr(obj, name)

        def timed(*a, **k):
            t0 = time.perf_counter()
            out = real(*a, **k)
            self.times.append(time.perf_counter() - t0)
            return out
        setattr(obj, name, timed)


def sampling_gflop(n_rows, n_new, vocab):
    """Matmul GFLOP that sampling needs: one forward of one position per new token, its
    linear layers (24 d^2 per layer) and its LM head (2 d V); the prompts' other positions
    (shared by a prompt's G answers) and attention are not counted."""
    return n_rows * n_new * (24 * D_MODEL ** 2 * N_LAYER + 2 * D_MODEL * vocab) / 1e9


def matmul_floor(n_rows, length, vocab, repeats=5):
    """Seconds that the matrix products of one of our steps take alone, each on its own shapes with
    nothing between them (the median of repeats): the floor that arithmetic sets for the step.
    The learner: each linear layer's forward, input gradient and weight gradient over the n_rows x
    (length - 1) positions, attention's two products forward and four backward per layer, the LM
    head's three at the new tokens; the sampling: each new token's linear layers and LM head at
    n_rows (decode attention, prefill and everything that is not a product are left out)."""
    d, N, n, BH = D_MODEL, n_rows * (length - 1), n_rows * NEW_TOKENS, n_rows * N_HEAD
    linears = [(3 * d, d), (d, d), (4 * d, d), (d, 4 * d)] * N_LAYER  # (out, in): qkv, proj, fc1, fc2
    shapes = [s for o, i in linears for s in ((N, i, o), (N, o, i), (o, N, i))]  # y = x W^T, dx, dW
    shapes += [(n, d, vocab), (n, vocab, d), (vocab, n, d)] + [(n_rows, i, o) for o, i in linears] * NEW_TOKENS
    shapes += [(n_rows, d, vocab)] * NEW_TOKENS
    pairs = [(torch.randn(m, k), torch.randn(k, c)) for m, k, c in shapes]
    q, k = torch.randn(BH, length - 1, d // N_HEAD), torch.randn(BH, d // N_HEAD, length - 1)
    p = torch.randn(BH, length - 1, length - 1)

    def products():
        for a, b in pairs:
            a @ b
        for i in range(N_LAYER * 6):  # attention: q k^T, p v forward; dp (as q k^T), dv, dq, dk (as p v) backward
            q @ k if i % 3 == 0 else p @ q
    products()
    return statistics.median(timed_once(products) for _ in range(repeats))


def matmul_peak(n=2048, repeats=5):
    """GFLOP/s of an fp32 n^3 a @ b at the current thread count (best of repeats)."""
    a, b = torch.randn(n, n), torch.randn(n, n)
    a @ b
    best = min(timed_once(lambda: a @ b) for _ in range(repeats))
    return 2 * n ** 3 / best / 1e9


def timed_once(fn):
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def summary(side, threads, times, sampling, model, vocab, facts):
    """One side's line: median step and sampling seconds, the sampling's matmul GFLOP, and
    the settings it ran with."""
    refuse_other_work(facts, side)
    return {"side": side, "threads": threads, "settings": facts, "step_s": statistics.median(times),
            "sampling_s": statistics.median(sampling), "steps": len(times),
            "sampling_gflop": sampling_gflop(N_PROMPTS * GROUP, NEW_TOKENS, vocab),
            "params": sum(p.numel() for p in model.parameters())}


def one_side(args):
    os.environ["OMP_NUM_THREADS"] = str(args.threads[0])
    torch.set_num_threads(args.threads[0])
    run = run_ours if args.side == "ours" else run_trl
    out = run(args.threads[0], args.warmup, args.steps)
    out["peak_gflops"] = matmul_peak()
    print(f"{out['side']} runs with: {settings_line(out['settings'])}", flush=True)
    print(json.dumps(out), flush=True)


def settings_line(facts):
    return " ".join(f"{k}={v}" for k, v in facts.items())


def spawn(python, side, threads, args):
    cmd = [python, os.path.abspath(__file__), "--side", side, "--threads", str(threads),
           "--warmup", str(args.warmup), "--steps", str(args.steps)]
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "TOKENIZERS_PARALLELISM": "false"}
    run = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
    if run.returncode != 0:
        raise SystemExit(f"{side} at {threads} thread(s) failed:\n{(run.stdout + run.stderr)[-3000:]}")
    return json.loads(run.stdout.strip().splitlines()[-1])


def main(args):
    if args.side:
        return one_side(args)
    if subprocess.run([args.trl_python, "-c", "import trl"], capture_output=True).returncode != 0:
        raise SystemExit(NO_TRL.format(python=args.trl_python))
    results = {(s, t): [] for s in ("ours", "trl") for t in args.threads}
    for r in range(args.rounds):
        for threads in args.threads:
            for side, python in (("ours", sys.executable), ("trl", args.trl_python)):
                out = spawn(python, side, threads, args)
                if r == 0 and threads == args.threads[0]:
                    print(f"{out['side']} runs with: {settings_line(out['settings'])}", flush=True)
                results[side, threads].append(out)
                print(f"round {r + 1}, {threads} thread(s), {out['side']}: {out['step_s']:.3f} s/step, "
                      f"sampling {out['sampling_s']:.3f} s (load {os.getloadavg()[0]:.1f})", flush=True)
    first = results["ours", args.threads[0]][0]
    print(f"\nwork: {N_PROMPTS} prompts x {GROUP} answers x {NEW_TOKENS} new tokens, d {D_MODEL}, {N_LAYER} layers "
          f"({first['params'] / 1e6:.2f}M parameters ours), one update per rollout; {args.rounds} alternating rounds, "
          f"each the median of {args.steps} steps after {args.warmup} warm-up")
    print("| threads | ours, s/step | TRL, s/step | TRL / ours, median | ours sampling, s (GFLOP/s, % of peak) "
          "| TRL sampling, s | ours, its products alone, s (TRL / that) |")
    print("|---|---|---|---|---|---|---|")
    for threads in args.threads:
        ours, theirs = results["ours", threads], results["trl", threads]
        ratio = statistics.median(t["step_s"] / o["step_s"] for o, t in zip(ours, theirs))
        samp = statistics.median(o["sampling_s"] for o in ours)
        rate = first["sampling_gflop"] / samp
        peak = statistics.median(o["peak_gflops"] for o in ours)
        floor = statistics.median(o["matmul_floor_s"] for o in ours)
        print(f"| {threads} | {listed(ours)} | {listed(theirs)} | {ratio:.2f}x "
              f"| {samp:.3f} ({rate:.0f} GFLOP/s, {rate / peak:.0%} of {peak:.0f}) "
              f"| {statistics.median(t['sampling_s'] for t in theirs):.3f} "
              f"| {floor:.3f} ({statistics.median(t['step_s'] for t in theirs) / floor:.2f}x) |")


def listed(runs):
    return ", ".join(f"{r['step_s']:.2f}" for r in runs)


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--side", choices=["ours", "trl"], default=None, help="run one side once, in this process")
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2], help="torch thread counts")
    ap.add_argument("--rounds", type=int, default=3, help="alternating rounds (both sides, every thread count)")
    ap.add_argument("--warmup", type=int, default=2, help="untimed steps first")
    ap.add_argument("--steps", type=int, default=5, help="timed steps (median reported)")
    ap.add_argument("--trl-python", default=sys.executable, help="a python that imports trl, for TRL's side")
    main(ap.parse_args())
