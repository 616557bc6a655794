"""Tests for rewards.py: hand-written edge cases, then a seeded fuzz test and timing checks.

    OMP_NUM_THREADS=1 python -m pytest tests/test_rewards.py -q
"""

import math
import os
import random
import re
import sys
import time

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from config import GRPOConfig  # noqa: E402
from rewards import (MAX_DIGITS, book_format_reward, boxed_format_reward, correctness_reward, extract_boxed,  # noqa: E402
                     final_answer, format_reward, overlong_penalty, parse_int, score)

GOOD = "<think>7+5=12 12-3=9 9*2=18</think>\\boxed{18}"


# ---- extract_boxed ---------------------------------------------------------------

@pytest.mark.parametrize("text, expected", [
    ("\\boxed{18}", "18"),
    ("\\boxed{1} then \\boxed{2}", "2"),             # last box wins
    ("\\boxed{a{b}c}", "a{b}c"),                     # nested braces balanced
    ("\\boxed{{12}}", "{12}"),
    ("x \\boxed{ -3 } y", " -3 "),
    ("\\boxed{}", ""),
    ("no box here {18}", None),
    ("\\boxed{18", None),                            # unclosed
    ("\\boxed{1} \\boxed{2", None),                  # last box unclosed: no answer
    ("\\boxed{{12}", None),                          # inner brace closes, outer does not
    ("\\boxed 18", None),
    ("", None),
    # as the book's ch03 get_last_boxed: whitespace may stand before the brace ...
    ("\\boxed {5}", "5"),
    ("so \\boxed\n\t{\\frac{1}{2}} done", "\\frac{1}{2}"),
    # ... and the last \\boxed decides, even when it has no brace
    ("\\boxed{5} or \\boxed 6", None),
    ("\\boxed{5} then \\boxedness", None),
    ("\\boxed{5} \\boxed", None),
])
def test_extract_boxed(text, expected):
    assert extract_boxed(text) == expected


@pytest.mark.parametrize("text, none, number", [
    ("so \\boxed{7}, not 8", "7", "7"),                       # a box: the fallback never looks
    ("x = 3, then y = -2.5", None, "-2.5"),                    # the last number, sign and decimals
    ("it is 3/4 of 1e-3", None, "1e-3"),
    ("first 3/4", None, "3/4"),
    ("an empty \\boxed{} after 12", "", "12"),                 # the book: an empty box falls back too
    ("\\boxed{5} and \\boxed 6", None, "6"),                   # the last \\boxed has no brace
    ("no digits at all", None, "no digits at all"),            # number_then_full: the whole text
    ("", None, ""),
])
def test_final_answer_falls_back_as_the_books_evaluation(text, none, number):
    assert final_answer(text) == none and final_answer(text, "none") == none
    assert final_answer(text, "number") == number


def test_the_fallback_is_for_evaluation_only():
    assert correctness_reward("so it is 18", 18) == 0.0 == score("so it is 18", 18, 4)["correct"]
    assert correctness_reward("so it is 18", 18, "number") == 1.0
    assert correctness_reward("the answer: \\frac{1}{2} = 0.5", "\\frac{1}{2}", "number") == 1.0
    assert correctness_reward("Evelyn", "Evelyn", "number") == 1.0  # no number: the whole text is graded


# ---- parse_int -------------------------------------------------------------------

@pytest.mark.parametrize("s, expected", [
    ("12", 12), (" 12\n", 12), ("+12", 12), ("007", 7), ("-007", -7), ("-0", 0),
    ("0", 0), ("000", 0), ("-45", -45), ("\t+3 ", 3),
    ("", None), ("+", None), ("-", None), ("+-3", None), ("--3", None), ("- 3", None),
    ("12.0", None), ("1,000", None), ("1_000", None), ("3+4", None), ("{12}", None),
    ("1e3", None), ("0x1f", None), ("twelve", None),
    ("١٢", None), ("１２", None), ("²", None), ("-١٢", None),  # non-ASCII digits: no credit
])
def test_parse_int(s, expected):
    assert parse_int(s) == expected


def test_parse_int_huge():
    assert parse_int("9" * MAX_DIGITS) == 10**MAX_DIGITS - 1
    assert parse_int("0" * 10_000 + "42") == 42         # leading zeros are not significant
    assert parse_int("1" + "0" * 5000) is None           # 10**5000: over MAX_DIGITS
    assert parse_int("-" + "7" * 1_000_000) is None


def test_parse_int_lowered_int_limit():
    # int() raises ValueError past sys.get_int_max_str_digits(); we must not
    old = sys.get_int_max_str_digits()
    sys.set_int_max_str_digits(640)
    try:
        assert parse_int("1" * 1000) is None
        assert parse_int("1" * 600) == int("1" * 600)
    finally:
        sys.set_int_max_str_digits(old)


# ---- correctness_reward ----------------------------------------------------------

@pytest.mark.parametrize("completion, answer, expected", [
    (GOOD, 18, 1.0),
    (GOOD, 17, 0.0),
    ("\\boxed{18}", 18, 1.0),                          # direct answer still correct
    ("\\boxed{ 18 }", 18, 1.0),
    ("\\boxed{+18}", 18, 1.0),
    ("\\boxed{018}", 18, 1.0),
    ("\\boxed{-0}", 0, 1.0),
    ("\\boxed{-6}", -6, 1.0),
    ("\\boxed{6}", -6, 0.0),
    ("\\boxed{-6}", 6, 0.0),
    ("\\boxed{17} no wait \\boxed{18}", 18, 1.0),     # last box wins
    ("\\boxed{18} no wait \\boxed{17}", 18, 0.0),
    ("\\boxed{18} \\boxed{17", 18, 0.0),              # last box unclosed
    ("\\boxed{{18}}", 18, 0.0),                       # extra braces: no credit
    ("\\boxed{18", 18, 0.0),
    ("the answer is 18", 18, 0.0),
    ("<think>\\boxed{18}</think>", 18, 1.0),          # bad format, but correct
    ("\\boxed{１８}", 18, 0.0),                        # fullwidth digits: no credit
])
def test_correctness_reward(completion, answer, expected):
    assert correctness_reward(completion, answer) == expected


@pytest.mark.parametrize("completion, expected", [
    ("\\boxed{7}", 1.0), ("<think>8*3=24</think>\\boxed{8}", 1.0), ("\\boxed{09}", 1.0),  # any right digit
    ("\\boxed{6}", 0.0), ("\\boxed{78}", 0.0), ("\\boxed{7,8}", 0.0),  # nothing else: not two of them at once
    ("\\boxed{-7}", 0.0), ("the answer is 7", 0.0), ("\\boxed{7} \\boxed{5}", 0.0),  # the last box counts
])
def test_correctness_accepts_any_of_several_right_answers_and_nothing_else(completion, expected):
    """An inequality (tasks.graded_answer): ?*3+2>20 holds for 7, 8 and 9."""
    assert correctness_reward(completion, frozenset({7, 8, 9})) == expected
    assert score(completion, frozenset({7, 8, 9}), 5)["correct"] == expected


# ---- format_reward ---------------------------------------------------------------

@pytest.mark.parametrize("completion, expected", [
    (GOOD, 1.0),
    ("  \n<think>x</think> so \\boxed{9} done", 1.0),  # leading space, text around box
    ("<think>x</think>\\boxed{not a number}", 1.0),     # content is correctness's job
    ("\\boxed{18}", 0.0),                               # no reasoning
    ("", 0.0),
    ("<think>7+5=12\\boxed{12}", 0.0),                  # missing close tag
    ("<think>7+5=12 \\boxed{12}</think>", 0.0),         # answer inside the block only
    ("<think>\\boxed{1}</think>\\boxed{12}", 0.0),      # a box inside the block
    ("<think>a</think><think>b</think>\\boxed{1}", 0.0),  # two blocks
    ("<think>a</think>\\boxed{1}</think>", 0.0),         # stray close tag
    ("<think>a<think>b</think>\\boxed{1}", 0.0),         # stray open tag
    ("<think></think>\\boxed{12}", 0.0),                # empty block
    ("<think> \n\t</think>\\boxed{12}", 0.0),           # whitespace-only block
    ("<think>x</think>", 0.0),                          # no answer
    ("<think>x</think>\\boxed{12", 0.0),                # unclosed answer
    ("so <think>x</think>\\boxed{12}", 0.0),            # text before the block
    ("</think><think>x\\boxed{12}", 0.0),               # tags in the wrong order
])
def test_format_reward(completion, expected):
    assert format_reward(completion) == expected


# ---- book_format_reward (--format-check book) ------------------------------------

@pytest.mark.parametrize("completion, expected", [
    (GOOD, 1.0),
    ("<think></think>", 1.0),                     # nothing inside is required...
    ("<think>x</think>", 1.0),                    # ...nor an answer after
    ("so <think>x</think> \\boxed{1} done", 1.0),  # nor anything of the text around
    ("<think>a</think><think>b</think>", 1.0),    # two blocks: still a close after the first open
    ("</think> <think>x</think>", 0.0),           # the book's first close comes before its first open
    ("\\boxed{18}", 0.0),                         # no tags
    ("", 0.0),
    ("<think>7+5=12 \\boxed{12}", 0.0),           # never closed
    ("</think>", 0.0),
    ("</think><think>x", 0.0),                    # the close before the open, none after
    ("<think", 0.0),
])
def test_book_format_reward(completion, expected):
    assert book_format_reward(completion) == expected
    assert score(completion, 18, 10, GRPOConfig(format_weight=0.5, format_check="book"))["format"] == expected


# ---- overlong_penalty ------------------------------------------------------------

@pytest.mark.parametrize("n, expected", [
    (0, 0.0), (80, 0.0),        # up to L_max - L_cache = 100 - 20 = 80: no penalty
    (81, -0.05),                # (80 - 81) / 20
    (90, -0.5),                 # (80 - 90) / 20
    (99, -0.95),
    (100, -1.0),                # at L_max
    (101, -1.0), (10**9, -1.0),  # past L_max (truncated): capped at -1
])
def test_overlong_penalty(n, expected):
    assert overlong_penalty(n, max_len=100, cache_len=20) == pytest.approx(expected, abs=1e-12)


def test_overlong_penalty_off():
    assert overlong_penalty(10**6, max_len=100, cache_len=0) == 0.0
    assert overlong_penalty(10**6, max_len=100, cache_len=-5) == 0.0
    assert overlong_penalty(10**6, max_len=0, cache_len=0) == 0.0


# ---- score -----------------------------------------------------------------------

@pytest.mark.parametrize("completion, answer, gated, total", [
    (GOOD, 18, False, 1.5),                     # correct + 0.5 * format
    (GOOD, 18, True, 1.5),
    (GOOD, 17, False, 0.5),                     # wrong but well-formed: bonus paid
    (GOOD, 17, True, 0.0),                      # gated: no bonus for a wrong answer
    ("\\boxed{18}", 18, False, 1.0),            # correct, no reasoning
    ("\\boxed{18}", 18, True, 1.0),
    ("garbage", 18, False, 0.0),
])
def test_score_gated_vs_ungated(completion, answer, gated, total):
    out = score(completion, answer, 10, GRPOConfig(format_weight=0.5, gated=gated))
    assert set(out) == {"total", "correct", "format", "format_paid", "overlong"}  # every term, paid or not
    assert out["overlong"] == 0.0  # no cache: nothing to penalise
    assert out["total"] == pytest.approx(total)


def test_score_with_overlong():
    out = score(GOOD, 18, 90, GRPOConfig(format_weight=0.5, max_new_tokens=100, overlong_cache=20))
    assert out == pytest.approx({"total": 1.0, "correct": 1.0, "format": 1.0, "format_paid": 1.0, "overlong": -0.5})
    out = score(GOOD, 18, 90)  # defaults: no format bonus, no penalty: both terms there, neither paid
    assert out == {"total": 1.0, "correct": 1.0, "format": 1.0, "format_paid": 1.0, "overlong": 0.0}


@pytest.mark.parametrize("format_weight, overlong_cache, gated, completion, answer, format_paid, overlong", [
    (0.0, 0, False, GOOD, 18, 1.0, 0.0), (0.5, 0, False, GOOD, 18, 1.0, 0.0), (0.0, 8, False, GOOD, 18, 1.0, -0.5),
    (-0.1, 8, False, GOOD, 18, 1.0, -0.5), (0.0, 0, True, GOOD, 17, 0.0, 0.0), (0.0, 0, False, GOOD, 17, 1.0, 0.0),
    (0.0, 0, False, "\\boxed{18}", 18, 0.0, 0.0)])
def test_score_gives_every_terms_raw_value_whatever_its_weight(format_weight, overlong_cache, gated, completion,
                                                                answer, format_paid, overlong):
    """What a run logs as reward_<term>: each term's raw value, weight 0 or not (the run without a term shows how
    often it would pay), and the raw format check; the total counts a term only by its weight."""
    out = score(completion, answer, 36, GRPOConfig(format_weight=format_weight, max_new_tokens=40,
                                                   overlong_cache=overlong_cache, gated=gated))
    assert set(out) == {"total", "correct", "format", "format_paid", "overlong"}
    assert (out["format_paid"], out["overlong"]) == (format_paid, overlong)
    paid_overlong = overlong if overlong_cache else 0.0
    assert out["total"] == pytest.approx(out["correct"] + format_weight * format_paid + paid_overlong)


# ---- fuzz: any string gives finite floats, no exceptions -------------------------

PIECES = ["<think>", "</think>", "<think", "think>", "\\boxed{", "\\boxed", "{", "}", "{{",
          "}}", "+", "-", " ", "\n", "\t", "0", "7", "12", "007", "-0", "x", "=", "*",
          "١٢", "１２", "²", "\\", "\u00a0", "\U0001f600", "\x00", "1_000", "\ud800"]


def random_completion(rng):
    kind = rng.randrange(4)
    if kind == 0:  # random bytes, as a tokenizer's decode(errors='replace') would give
        raw = bytes(rng.getrandbits(8) for _ in range(rng.randrange(200)))
        return raw.decode("utf-8", errors="replace")
    if kind == 1:  # mixes of tags, braces, digits
        return "".join(rng.choice(PIECES) for _ in range(rng.randrange(40)))
    if kind == 2:  # near-valid completions with one mutation
        s = GOOD.replace("18", rng.choice(["18", "-18", "１８", "1" + "0" * 5000, "{18}", ""]))
        i = rng.randrange(len(s) + 1)
        return s[:i] + rng.choice(PIECES) + s[i + rng.randrange(3):]
    return "\\boxed{" + rng.choice("+- ") + str(rng.randrange(10**rng.randrange(1, 60))) + "}"


def test_fuzz_finite_and_never_raises():
    rng = random.Random(0)
    answers = [0, 18, -7, 10**30, -(10**5000)]
    seen = {"correct": 0.0, "format": 0.0}
    for _ in range(3000):
        text = random_completion(rng)
        answer = rng.choice(answers)
        boxed = extract_boxed(text)
        assert boxed is None or (box_of(boxed).search(text) and balanced(boxed))
        value = None if boxed is None else parse_int(boxed)
        assert value is None or isinstance(value, int)
        kw = dict(format_weight=rng.choice([0.0, 0.5, 1.0]), gated=rng.random() < 0.5,
                  max_new_tokens=rng.choice([0, 64, 256]), overlong_cache=rng.choice([0, 16, 64]))
        out = score(text, answer, rng.randrange(400), GRPOConfig(**kw))
        for key, v in out.items():
            assert isinstance(v, float) and math.isfinite(v), (key, v, text)
        assert out["correct"] in (0.0, 1.0) and out["format"] in (0.0, 1.0)
        assert out["correct"] == (1.0 if value == answer else 0.0)
        assert -1.0 <= out.get("overlong", 0.0) <= 0.0
        bonus = out["format"] * (out["correct"] if kw["gated"] else 1.0)
        assert out["total"] == out["correct"] + kw["format_weight"] * bonus + out.get("overlong", 0.0)
        seen["correct"] += out["correct"]
        seen["format"] += out["format"]
    assert seen["correct"] > 10 and seen["format"] > 10  # the fuzz reaches the 1.0 branches


def box_of(content):
    """The written box around a content: `\\boxed`, any whitespace, then the braces."""
    return re.compile(r"\\boxed\s*\{" + re.escape(content) + r"\}")


def balanced(s):
    depth = 0
    for c in s:
        depth += (c == "{") - (c == "}")
        if depth < 0:
            return False
    return depth == 0


def test_fuzz_finds_correct_answers():
    # guard against a fuzz test that passes because everything scores 0
    rng = random.Random(1)
    numbers = [rng.randrange(-10**9, 10**9) for _ in range(500)]
    hits = sum(correctness_reward(f"\\boxed{{{n}}}", n) for n in numbers)
    assert hits == 500


# ---- no pathological slowness ----------------------------------------------------

MB = 1_000_000


LARGE = {
    "open_braces": "{" * MB,
    "unclosed_deep_box": "\\boxed{" + "{" * MB,
    "many_boxes": "\\boxed{" * (MB // 7),
    "megabyte_of_digits": "\\boxed{" + "7" * MB + "}",
    "long_think_many_closes": "<think>" + "x" * MB + "</think>\\boxed{" + "}" * MB,
    "many_think_tags": "<think>" * (MB // 7),
    "spaces_then_boxes": " " * MB + "<think>" + "\\boxed{1}" * (MB // 9),
}


@pytest.mark.parametrize("name", LARGE)
def test_large_inputs_are_fast(name):
    text = LARGE[name]
    t0 = time.perf_counter()
    out = score(text, 7, MB, GRPOConfig(format_weight=1.0, max_new_tokens=100, overlong_cache=10))
    elapsed = time.perf_counter() - t0
    assert all(math.isfinite(v) for v in out.values())
    assert elapsed < 1.0, f"{elapsed:.3f} s for a {len(text)}-char string"


# ---- boxed_format_reward (--format-check boxed, the book's gdpo.py) ----------------

@pytest.mark.parametrize("completion, expected", [
    ("\\boxed{7}", 1.0),                             # an answer, no reasoning needed
    ("<think>3+4=7</think>\\boxed{7}", 1.0),
    ("<think>3+4=7</think>\\boxed{8}", 1.0),          # a wrong answer is still boxed
    ("<think>3+4=7</think>7", 0.0),                  # no box
    ("\\boxed{7} then \\boxed{", 0.0),               # the last box is never closed
    ("", 0.0),
])
def test_boxed_format_reward(completion, expected):
    assert boxed_format_reward(completion) == expected
