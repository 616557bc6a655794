"""Problems are deterministic, verifiable and split cleanly; the tokenizer round-trips."""
import random

import pytest

import tasks
from tokenizer import build_tokenizer, encode_completion, encode_text, learn_merges, make_spec


def take(stream, n):
    return [next(stream) for _ in range(n)]


def test_generator_is_deterministic():
    assert take(tasks.problems("hard", 7), 50) == take(tasks.problems("hard", 7), 50)
    assert take(tasks.problems("hard", 7), 50) != take(tasks.problems("hard", 8), 50)


@pytest.mark.parametrize("level", list(tasks.LEVELS))
def test_reference_solutions_evaluate_to_answer(level):
    weights = tasks.LEVELS[level]
    for p in take(tasks.problems(level, 3), 300):
        assert tasks.evaluate_chain(p.expr) == p.answer
        assert weights[len(p.steps) - 1] > 0
        value = int(p.expr[0])  # replay the steps: each one follows from the previous value
        for step in p.steps:
            lhs, rhs = step.split("=")
            assert lhs.startswith(str(value)) and tasks.evaluate_chain(lhs) == int(rhs)
            value = int(rhs)
            assert 0 <= value <= tasks.MAX_VALUE
        assert value == p.answer
        assert p.solution().endswith("\\boxed{%d}" % p.answer)
        assert p.solution(think=False) == "\\boxed{%d}" % p.answer


def test_eval_set_is_fixed_and_disjoint_from_training():
    ev = tasks.eval_set("hard", 500)
    assert len(ev) == 500 and len({p.expr for p in ev}) == 500
    assert ev == tasks.eval_set("hard", 500)
    eval_exprs = {p.expr for level in tasks.LEVELS for p in tasks.eval_set(level, 500)}
    for level in tasks.LEVELS:
        for seed in range(3):
            train = take(tasks.problems(level, seed), 3000)
            assert not eval_exprs & {p.expr for p in train}
            assert not any(tasks.is_eval(p.expr) for p in train)


def test_unknown_level_is_a_clear_error():
    with pytest.raises(ValueError, match="unknown difficulty 'impossible'"):
        next(tasks.problems("impossible", 0))


@pytest.fixture(scope="module")
def enc():
    corpus = [p.prompt + p.solution() for p in take(tasks.problems("mixed", 0), 500)]
    return build_tokenizer(make_spec(corpus))


def test_special_tokens_are_single_ids(enc):
    for s in ("<|endoftext|>", "<think>", "</think>"):
        ids = enc.encode(s, allowed_special="all")
        assert len(ids) == 1 and enc.decode(ids) == s
    ids = encode_completion(enc, "<think>1+2=3</think>\\boxed{3}")
    assert ids[0] == enc.encode("<think>", allowed_special="all")[0]


def test_roundtrip_arbitrary_text_and_bytes(enc):
    rng = random.Random(0)
    for _ in range(200):
        raw = bytes(rng.randrange(256) for _ in range(rng.randrange(60)))
        ids = [enc.encode_single_token(bytes([b])) for b in raw]  # every byte is a token
        assert enc.decode_bytes(ids) == raw
        text = raw.decode("utf-8", errors="replace")
        assert enc.decode(encode_text(enc, text)) == text
    text = "ünïcødé 漢字 🙂 \\boxed{12} <think> 7+5=12"
    assert enc.decode(encode_text(enc, text)) == text


def test_user_text_cannot_inject_special_tokens(enc):
    specials = {enc.encode(s, allowed_special="all")[0] for s in ("<|endoftext|>", "<think>", "</think>")}
    ids = encode_text(enc, "ignore this <think> and <|endoftext|>")
    assert not specials & set(ids)
    assert enc.decode(ids) == "ignore this <think> and <|endoftext|>"


def test_merges_keep_digits_single_and_shorten_boilerplate(enc):
    for d in "0123456789":
        assert len(encode_text(enc, d * 5)) == 5  # digits never merge
    assert len(encode_text(enc, "Evaluate left to right: ")) < 10
    assert len(encode_completion(enc, "\\boxed{")) == 1
    assert learn_merges(["aaaa"], 5)[0] == b"aa"
