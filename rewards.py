"""Rule-based rewards for the arithmetic task: correctness, format, overlong penalty.

A completion (decoded text, prompt and end-of-text excluded) should look like
`<think>7+5=12 12-3=9 9*2=18</think>\\boxed{18}`. Every function here is a plain function of
a string (plus a few numbers), returns a finite float and never raises, whatever garbage
an untrained model writes. `score` combines the terms:

    total = correct + format_weight * format      (* correct as well if gated)  + overlong

    OMP_NUM_THREADS=1 python -m pytest tests/test_rewards.py -q

Where this departs from the book (rasbt/reasoning-from-scratch):
1. Correctness is a strict integer parse of the last `\\boxed{}` (`correctness_reward`):
   the arithmetic task's answers are integers. The book's MATH task (an answer that is a
   string) is graded on the same last box by tasks.math_answer_equal, as the book's
   `reward_rlvr` does: no box, no credit. The box is found as the book's ch03
   `get_last_boxed` finds it (`extract_boxed`). The book's MATH-500 evaluation instead
   falls back to the last number when there is no box (`final_answer`, used by
   harness/evaluation.py under `train.py --eval-fallback number`); training never does.
2. Our format check (`format_reward`) is explicit string checks, one visible line per
   edge case. The book's `ch07/03_rlvr_grpo_scripts_advanced/7_6_plus_format_reward.py`
   pays the bonus whenever `<think>` comes before `</think>`, with nothing in between or
   after required: `book_format_reward`, `--format-check book`.
3. The gated form (`--gated`, the chapter's conditional reward) pays the format bonus
   only for a correct answer, so wrong but well-formed answers earn nothing.
"""
import re

from config import GRPOConfig  # the run's settings: which terms are paid, and how much
from tasks import THINK_CLOSE as CLOSE, THINK_OPEN as OPEN  # the one definition of the tags
from tasks import math_answer_equal

MAX_DIGITS = 4000  # significant digits; below CPython's default 4300-digit limit
BOX = "\\boxed"
# a number as the book's ch03 RE_NUMBER reads one: -3, 2.5, 1e-3, 3/4
NUMBER = re.compile(r"-?\d+(?:/\d+|(?:\.\d+)?(?:[eE][+-]?\d+)?)")
FALLBACKS = ("none", "number")  # train.py --eval-fallback


def extract_boxed(text: str) -> str | None:
    """Content of the LAST `\\boxed` in text, read from its `{` (whitespace before it is
    fine: `\\boxed {5}`) to the matching `}` (braces inside are balanced: `\\boxed{a{b}c}`
    holds `a{b}c`), or None. What the book's ch03 `get_last_boxed` accepts: if that last
    `\\boxed` has no `{` or is never closed there is no answer, even if an earlier box was
    complete: the final answer is the one that counts."""
    i = text.rfind(BOX)
    if i < 0:
        return None
    i += len(BOX)
    while i < len(text) and text[i].isspace():
        i += 1
    if i == len(text) or text[i] != "{":
        return None
    start, depth = i + 1, 1  # we are just inside the box's own `{`
    for i in range(start, len(text)):
        c = text[i]
        if c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
            if depth == 0:
                return text[start:i]
    return None  # ran off the end: the last box is unclosed


def final_answer(text: str, fallback: str = "none") -> str | None:
    """The answer a completion states: its last box. Without one (or with an empty one),
    fallback "number" is the book's MATH-500 evaluation (ch03 `extract_final_candidate`,
    its default `number_then_full`): the last number in the text, else the whole text;
    "none" is the book's training reward (`fallback=None`): no box, no answer."""
    boxed = extract_boxed(text)
    if boxed or fallback == "none":
        return boxed
    numbers = NUMBER.findall(text)
    return numbers[-1] if numbers else text


def parse_int(s: str) -> int | None:
    """The integer a box holds, or None. Surrounding whitespace, a leading `+` or `-` and
    leading zeros are fine (` +007 ` is 7, `-0` is 0); nothing else is:
    - `{12}` (from `\\boxed{{12}}`) is not an integer: rewarding extra braces would only
      teach the model to emit them;
    - only ASCII digits count: int() accepts `١٢` and `１２`, but a model that writes them
      has not produced the format we ask for;
    - `1,000`, `1_000` (int() accepts it), `12.0`, `- 3`, `3+4` are not integers here;
    - more than MAX_DIGITS significant digits is None, so a megabyte of digits can neither
      hang int() (quadratic) nor trip Python's 4300-digit int-to-str limit.
    """
    s = s.strip()
    sign = -1 if s.startswith("-") else 1
    digits = s[1:] if s.startswith(("+", "-")) else s
    # isascii() first: str.isdigit() alone accepts '١٢', '１２' and even '²'
    if not (digits.isascii() and digits.isdigit()):
        return None
    digits = digits.lstrip("0") or "0"  # int()'s digit limit counts leading zeros too
    if len(digits) > MAX_DIGITS:
        return None
    try:
        return sign * int(digits)
    except ValueError:  # a user lowered sys.set_int_max_str_digits below MAX_DIGITS
        return None


def correctness_reward(completion: str, answer: int | str | frozenset, fallback: str = "none") -> float:
    """1.0 if the last box holds the answer: an integer, any of a frozenset of integers (an
    inequality's right digits, tasks.graded_answer), or a MATH answer in any of its forms."""
    given = final_answer(completion, fallback)
    if isinstance(answer, str):  # MATH: any of its answer forms
        return float(given is not None and math_answer_equal(given, answer))
    value = None if given is None else parse_int(given)
    if isinstance(answer, frozenset):  # several right answers: any one of them
        return 1.0 if value in answer else 0.0
    return 1.0 if value is not None and value == answer else 0.0


def format_reward(completion: str) -> float:
    """1.0 for one non-empty think block, then a boxed answer; exactly these checks:

        '<think>7+5=12</think>\\boxed{12}'           1
        '  <think>x</think> so \\boxed{9} done'      1   (text around the box is fine)
        '\\boxed{12}'                                0   1. no reasoning
        '<think>a</think><think>b</think>\\boxed{1}'  0   2. two blocks
        '<think> \\n</think>\\boxed{12}'              0   3. empty thinking
        '<think>\\boxed{12}</think>'                 0   4. answer inside the block
        '<think>7+5=12\\boxed{12}'                   0   5. no </think>, so no answer after it
    """
    s = completion.lstrip()
    if not s.startswith(OPEN):  # 1. starts with <think>
        return 0.0
    if s.count(OPEN) != 1 or s.count(CLOSE) != 1:  # 2. exactly one of each tag
        return 0.0
    close = s.find(CLOSE)
    thinking, after = s[len(OPEN):close], s[close + len(CLOSE):]
    if not thinking.strip():  # 3. non-empty thinking
        return 0.0
    if "\\boxed" in thinking:  # 4. no answer inside the block
        return 0.0
    return 1.0 if extract_boxed(after) is not None else 0.0  # 5. answer after it


def book_format_reward(completion: str) -> float:
    """The book's format reward (7_6_plus_format_reward.py, `reward_format`): 1.0 if the
    completion holds both tags and the first `<think>` comes before the first `</think>`
    (`gen.index(THINK) < gen.index(END_THINK)`, so a stray `</think>` first means 0).
    Nothing else is checked: no reasoning inside, no answer after. (The book compares token
    ids; our model writes the tags as their single ids, which decode to these strings.)"""
    start, close = completion.find(OPEN), completion.find(CLOSE)
    return 1.0 if 0 <= start < close else 0.0


def boxed_format_reward(completion: str) -> float:
    """The format term of the book's gdpo.py (`reward_with_format_bonus`): 1.0 if the
    completion holds a complete `\\boxed{...}` (as extract_boxed reads the last one)."""
    return 1.0 if extract_boxed(completion) is not None else 0.0


FORMAT_CHECKS = {"strict": format_reward, "book": book_format_reward, "boxed": boxed_format_reward}  # --format-check


def overlong_penalty(n_tokens: int, max_len: int, cache_len: int) -> float:
    """DAPO's soft overlong punishment (Yu et al. 2025), L = n_tokens, L_max = max_len,
    L_cache = cache_len: 0 up to L_max - L_cache, then linear down to -1 at L_max, -1
    beyond; always 0 when cache_len <= 0."""
    if cache_len <= 0:
        return 0.0
    # DAPO soft overlong punishment: linear from 0 at L_max - L_cache to -1 at L_max
    penalty = (max_len - cache_len - n_tokens) / cache_len
    return float(min(0.0, max(-1.0, penalty)))


def term_weights(cfg=None) -> dict:
    """The reward's terms and their weights, from the run's settings (a GRPOConfig): total = sum of weight *
    term. A term of weight 0 adds nothing to the total, but `score` still returns its raw value, so every run
    logs how often each term would pay (docs/metrics.md), the run without a term included. GDPO (grpo.py,
    --reward-norm norm_then_sum) normalises each term of weight > 0 on its own first. A new term is a line here
    and one in `score`: its flag reaches both through cfg."""
    cfg = cfg or GRPOConfig()
    return {"correct": 1.0, "format_paid": cfg.format_weight, "overlong": 1.0 if cfg.overlong_cache > 0 else 0.0}


def score(completion: str, answer: int | str | frozenset, n_tokens: int, cfg=None) -> dict:
    """One answer's rewards, as floats: the weighted total; `format`, the raw format check (1 where the answer
    reasons; its batch mean is the share that do); and each term's value before its weight, weight 0 or not
    (`format_paid` is the format check, times correctness when --gated). cfg: the run's settings (a GRPOConfig;
    its defaults without one)."""
    cfg = cfg or GRPOConfig()
    correct = correctness_reward(completion, answer)
    fmt = FORMAT_CHECKS[cfg.format_check](completion)
    weights = term_weights(cfg)
    terms = {"correct": correct,
             "format_paid": fmt * correct if cfg.gated else fmt,  # gated: the chapter's conditional reward
             "overlong": overlong_penalty(n_tokens, cfg.max_new_tokens, cfg.overlong_cache)}
    total = sum(w * terms[k] for k, w in weights.items())
    return {"total": float(total), "format": fmt, **terms}
