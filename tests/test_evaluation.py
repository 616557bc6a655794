"""evaluation.evaluate: greedy and deterministic, counting right, on a held-out set training never sees; pass@k."""
import itertools
import json
import os
import subprocess
import sys

import pytest
import torch

import tasks
import train
from decoding import Sampled
from harness import evaluation
from harness import cli
from model import load_checkpoint
from tokenizer import build_tokenizer, encode_completion, encode_text

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def greedy_by_hand(model, enc, prompt, max_new_tokens):
    """The argmax continuation of one prompt: a full forward per token, no cache, no batch."""
    ids = encode_text(enc, prompt)
    out = []
    with torch.no_grad():
        for _ in range(max_new_tokens):
            nxt = int(model(torch.tensor([ids + out]))[0, -1].argmax())
            out.append(nxt)
            if nxt == enc.eot_token:
                break
    return out


@pytest.mark.roundings
def test_evaluate_is_greedy_whatever_the_generator_state(warm_policy, monkeypatch):
    model, enc = warm_policy()
    problems = tasks.eval_set("easy", 6)
    seen, real = [], evaluation.generate
    monkeypatch.setattr(evaluation, "generate", lambda *a, **k: seen.append(real(*a, **k)) or seen[-1])
    torch.manual_seed(0)
    first = evaluation.evaluate(model, enc, problems, max_new_tokens=12, batch_size=4)
    torch.manual_seed(123)
    torch.rand(1000)  # another global generator state
    second = evaluation.evaluate(model, enc, problems, max_new_tokens=12, batch_size=4)
    assert first == second and len(seen) == 4  # two chunks (4 + 2 problems) per call
    for a, b in zip(seen[:2], seen[2:]):
        assert torch.equal(a.tokens, b.tokens) and torch.equal(a.mask, b.mask)
    P = [max(len(encode_text(enc, p.prompt)) for p in problems[:4]), len(encode_text(enc, problems[4].prompt))]
    for chunk, out, prompt_len in zip([problems[:4], problems[4:]], seen[:2], P):  # the argmax tokens, row by row
        for i, p in enumerate(chunk):
            got = out.tokens[i, prompt_len:][out.mask[i, prompt_len:]].tolist()
            assert got == greedy_by_hand(model, enc, p.prompt, 12), p.expr
    assert model.training  # left as it was found


@pytest.mark.roundings
def test_evaluate_with_a_sampler_draws_as_the_rollouts_do(warm_policy):
    """sampler=: one answer per problem at the given temperature / top-p, from its own
    generator (the same seed, the same answers); a near-zero temperature is greedy again."""
    model, enc = warm_policy()
    problems = tasks.eval_set("easy", 64)
    greedy = evaluation.evaluate(model, enc, problems, max_new_tokens=12)

    def sampled(temperature, seed, top_p=1.0):
        sampler = dict(temperature=temperature, top_p=top_p, generator=torch.Generator().manual_seed(seed))
        return evaluation.evaluate(model, enc, problems, max_new_tokens=12, sampler=sampler)

    assert sampled(1e-4, 0) == greedy
    assert sampled(1.5, 0) == sampled(1.5, 0) and sampled(1.5, 0)["accuracy"] < greedy["accuracy"]
    assert len({sampled(1.5, s)["accuracy"] for s in range(4)}) > 1  # the draws depend on the seed


def test_a_run_logs_the_sampled_accuracy_at_each_evaluation_and_repeats_it_on_resume(tiny_warm, tmp_path):
    argv = ["--init", tiny_warm[0], "--runs-dir", str(tmp_path), "--level", "easy", "--prompts-per-step", "4",
            "--group-size", "4", "--max-new-tokens", "16", "--eval-size", "32", "--eval-every", "2",
            "--threads", "1", "--eval-sampled", "--top-p", "0.9"]
    whole = train.main(cli.get_parser().parse_args([*argv, "--run-name", "a", "--steps", "4"]))
    train.main(cli.get_parser().parse_args([*argv, "--run-name", "b", "--steps", "2"]))
    resumed = train.main(cli.get_parser().parse_args(["--resume", str(tmp_path / "b"), "--steps", "4"]))
    rows = [[json.loads(l) for l in open(os.path.join(d, "metrics.jsonl"))] for d in (whole, resumed)]
    got = [[(r["step"], r["eval_acc"], r["eval_sampled_acc"]) for r in rs if "eval_acc" in r] for rs in rows]
    assert [s for s, _, _ in got[0]] == [0, 2, 4] and got[0] == got[1]
    assert all(0 <= a <= 1 for _, _, a in got[0])


@pytest.mark.parametrize("fallback,accuracy", [("none", 2 / 5), ("number", 3 / 5)])
def test_evaluate_counts_the_correct_answers_on_a_hand_built_case(warm_policy, monkeypatch, fallback, accuracy):
    model, enc = warm_policy()
    cases = [  # (problem, the completion the model "writes"); in chunks of 2, the right answers in the second
        (tasks.Problem("2+2", 4, ("2+2=4",)), "<think>2+2=4</think>\\boxed{5}"),  # well-formed, wrong
        (tasks.Problem("3*3", 9, ("3*3=9",)), "<think>3*3=9</think>"),  # no answer
        (tasks.Problem("1+1", 2, ("1+1=2",)), "<think>1+1=2</think>\\boxed{2}"),  # right and well-formed
        (tasks.Problem("2+3", 5, ("2+3=5",)), "\\boxed{5}"),  # right, without reasoning
        (tasks.Problem("7-0", 7, ("7-0=7",)), "\\boxed{7} so \\boxed{8}"),  # wrong: the last box counts
    ]
    answers = {tuple(encode_text(enc, p.prompt)): text for p, text in cases}

    def generate(model, prompts, max_new_tokens, stop, greedy=False, **kw):
        assert greedy and stop == (enc.eot_token,)  # evaluation decodes greedily, to <|endoftext|>
        eos_id = stop[0]
        P = max(map(len, prompts))
        rows = [[eos_id] * (P - len(p)) + p + encode_completion(enc, answers[tuple(p)]) + [eos_id] for p in prompts]
        L = max(map(len, rows))
        tokens = torch.tensor([r + [eos_id] * (L - len(r)) for r in rows])
        mask = torch.tensor([[P - len(p) <= j < len(r) for j in range(L)] for p, r in zip(prompts, rows)])
        return Sampled(tokens, mask, None, None, None)
    monkeypatch.setattr(evaluation, "generate", generate)
    # the book's fallback reads the unboxed "<think>3*3=9</think>" as 9: right
    out = evaluation.evaluate(model, enc, [c[0] for c in cases], batch_size=2, fallback=fallback)  # three chunks
    assert {k: out[k] for k in ("accuracy", "format")} == {"accuracy": pytest.approx(accuracy), "format": pytest.approx(2 / 5)}
    # each answer, in the problems' order, with what it earned (what train.py writes to answers.jsonl)
    assert [(p, text) for p, text, _ in out["answers"]] == cases
    assert sum(right for _, _, right in out["answers"]) == pytest.approx(accuracy * 5)


def sampler_writing(enc, by_prompt):
    """A stand-in for decoding.generate whose i-th copy of a prompt writes by_prompt[prompt ids][i]."""
    def generate(model, prompts, max_new_tokens, stop, temperature=1.0, generator=None, **kw):
        assert temperature == 1.0 and generator is not None and not kw.get("greedy")  # sampled, seeded
        assert stop == (enc.eot_token,)  # to <|endoftext|>
        eos_id = stop[0]
        P, seen = max(map(len, prompts)), {}
        rows = []
        for p in prompts:  # the n copies of a prompt are adjacent: each gets the next sample
            i = seen[tuple(p)] = seen.get(tuple(p), -1) + 1
            rows.append([eos_id] * (P - len(p)) + p + encode_completion(enc, by_prompt[tuple(p)][i]) + [eos_id])
        L = max(map(len, rows))
        tokens = torch.tensor([r + [eos_id] * (L - len(r)) for r in rows])
        mask = torch.tensor([[P - len(p) <= j < len(r) for j in range(L)] for p, r in zip(prompts, rows)])
        return Sampled(tokens, mask, None, None, None)
    return generate


def test_pass_at_k_and_the_reasoned_share_on_a_hand_built_case(warm_policy, monkeypatch):
    model, enc = warm_policy()
    problems = [tasks.Problem("2+2", 4, ("2+2=4",)), tasks.Problem("3*3", 9, ("3*3=9",))]
    samples = {"2+2": ["<think>2+2=4</think>\\boxed{4}", "\\boxed{5}"],  # one right (reasoned) of two
               "3*3": ["<think>3*3=6</think>\\boxed{6}", "\\boxed{8}"]}  # none right, one reasoned
    by_prompt = {tuple(encode_text(enc, p.prompt)): samples[p.expr] for p in problems}
    monkeypatch.setattr(evaluation, "generate", sampler_writing(enc, by_prompt))
    out = evaluation.pass_at_k(model, enc, problems, k=2)
    assert {k: out[k] for k in ("pass", "reasoned")} == {"pass": 0.5, "reasoned": 0.5}


def test_pass_at_k_from_more_samples_and_the_different_right_answers_on_a_hand_built_case(warm_policy, monkeypatch):
    """4 samples of an inequality with right digits {2, 3, 5} (02 is 2 again) and of a chain:
    pass@2 by Chen et al.'s estimate, and the different right answers, as counts and as shares."""
    model, enc = warm_policy()
    inequality = tasks.SearchProblem("?+1<7", 2, ("2+1=3",), answers=frozenset({2, 3, 5}))
    chain = tasks.Problem("3*3", 9, ("3*3=9",))
    samples = {inequality.expr: ["\\boxed{2}", "<think>2+1=3</think>\\boxed{02}", "\\boxed{3}", "\\boxed{6}"],
               chain.expr: ["\\boxed{9}", "\\boxed{8}", "\\boxed{8}", "\\boxed{6}"]}
    problems = [inequality, chain]
    by_prompt = {tuple(encode_text(enc, p.prompt)): samples[p.expr] for p in problems}
    monkeypatch.setattr(evaluation, "generate", sampler_writing(enc, by_prompt))
    out = evaluation.pass_at_k(model, enc, problems, k=2, n=4)
    # 3 right of 4: every pair holds one (1); 1 right of 4: 3 of the 6 pairs do (1/2)
    assert out["pass"] == pytest.approx((1 + 0.5) / 2) and out["pass_1"] == pytest.approx(4 / 8)
    assert out["distinct"] == pytest.approx((2 + 1) / 2)  # {2, 3} and {9}
    assert out["distinct_share"] == pytest.approx((2 / 3 + 1 / 1) / 2) and out["reasoned"] == pytest.approx(1 / 8)


@pytest.mark.parametrize("n, c, k", [(4, 1, 2), (5, 2, 3), (6, 0, 2), (6, 6, 3), (8, 3, 8), (16, 5, 4), (7, 1, 1)])
def test_the_unbiased_pass_at_k_is_the_share_of_k_subsets_holding_a_right_sample(n, c, k):
    """Chen et al.'s 1 - C(n-c, k) / C(n, k) against a count of every k of the n samples."""
    right = [True] * c + [False] * (n - c)
    subsets = list(itertools.combinations(range(n), k))
    by_hand = sum(any(right[i] for i in s) for s in subsets) / len(subsets)
    assert evaluation.unbiased_pass_at_k(n, c, k) == pytest.approx(by_hand)


def test_the_command_prints_greedy_accuracy_pass_at_k_and_the_reasoned_share(tiny_warm):
    args = ["--level", "easy", "--eval-size", "12", "--pass-k", "3", "--pass-k-problems", "5"]
    out = subprocess.run([sys.executable, "harness/evaluation.py", tiny_warm[0], *args], cwd=ROOT, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    model, ckpt = load_checkpoint(tiny_warm[0])
    enc = build_tokenizer(ckpt["tokenizer"])
    problems = tasks.eval_set("easy", 12)
    ev, pk = evaluation.evaluate(model, enc, problems), evaluation.pass_at_k(model, enc, problems[:5], 3)
    assert out.stdout == (f"greedy accuracy {ev['accuracy']:.1%} (think format {ev['format']:.1%}) on 12 easy problems | "
                          f"at T 1 on the first 5: pass@3 {pk['pass']:.1%}, {pk['reasoned']:.1%} of the 15 answers reason\n")
    bad = subprocess.run([sys.executable, "harness/evaluation.py", "missing.pt"], cwd=ROOT, capture_output=True, text=True,
                         timeout=120)
    assert bad.returncode == 2 and bad.stderr == "harness/evaluation.py: error: checkpoint not found: missing.pt\n"


@pytest.mark.parametrize("level", list(tasks.LEVELS))
def test_the_held_out_set_is_disjoint_from_training(level):
    held_out = {p.expr for p in tasks.eval_set(level, 200)}
    assert len(held_out) == 200 and held_out == {p.expr for p in tasks.eval_set(level, 200)}  # fixed
    trained = set()
    for seed in range(3):
        for step in range(1, 11):  # the problems train.py draws for each (seed, step)
            source = train.problem_source(level, seed, step)
            trained |= {source().expr for _ in range(50)}
    assert len(trained) > 100 and not held_out & trained
