"""Rule-based rewards for the arithmetic task: correctness, format, overlong penalty.

A prompt looks like `Evaluate left to right: 7+5-3*2\\n` (tasks.py) and the policy's completion (decoded
text, prompt and end-of-text token excluded) should look like

    <think>7+5=12 12-3=9 9*2=18</think>\\boxed{18}

Everything here is a plain function of a string (plus a few numbers), returns a finite
float, and never raises, whatever garbage an untrained model produces. Run the tests with

    OMP_NUM_THREADS=1 python -m pytest tests/test_rewards.py -q

Correctness (1.0 or 0.0)
  Take the content of the LAST `\\boxed{` in the completion, reading to its matching `}`
  (braces inside are balanced, so `\\boxed{a{b}c}` holds `a{b}c`). If that last `\\boxed{`
  is never closed there is no answer, even if an earlier one was closed: the final answer
  is the one that counts. The content must be an integer: surrounding whitespace, a
  leading `+` or `-` and leading zeros are fine (` +007 ` is 7, `-0` is 0); nothing else
  is. In particular:
  - `\\boxed{{12}}` holds `{12}`, which is not an integer: no credit. Our answers are
    plain integers, and rewarding extra braces would only teach the model to emit them.
  - Only ASCII digits count. Python's int() accepts Arabic-Indic `١٢` and fullwidth `１２`,
    but a model that writes them has not produced the answer format we ask for, and a
    string match by a human reader would reject them too: no credit.
  - `1,000`, `1_000` (int() accepts it), `12.0`, `- 3`, `3+4` are not integers here.
  - An integer with more than MAX_DIGITS significant digits parses to None, so a
    megabyte of digits can neither hang int() (quadratic) nor trip Python's 4300-digit
    int-to-str limit. Reference answers of the task are a few digits long.

Format (1.0 or 0.0), exactly these checks, on `s = completion.lstrip()`:
  1. `s` starts with `<think>`;
  2. `<think>` and `</think>` each occur exactly once in `s`;
  3. the thinking (text between them) contains a non-whitespace character;
  4. the thinking contains no `\\boxed` (the answer is not given inside the block);
  5. the text after `</think>` contains a closed `\\boxed{...}` (any content: whether
     the content is right is correctness's job, not format's).
  Text between `</think>` and the box, or after the box, is allowed.

    '<think>7+5=12</think>\\boxed{12}'          format 1   correct (answer 12) 1
    '  <think>x</think> so \\boxed{9} done'     format 1   correct (answer 9)  1
    '\\boxed{12}'                               format 0   (no reasoning)
    '<think>7+5=12\\boxed{12}'                  format 0   (no </think>; correct 1)
    '<think>a</think><think>b</think>\\boxed{1}' format 0  (two blocks)
    '<think>\\boxed{12}</think>'                format 0   (answer inside the block; correct 1)
    '<think> \\n</think>\\boxed{12}'             format 0   (empty thinking)

Combined reward (score):
    total = correct + format_weight * format                  (gated=False)
    total = correct + format_weight * format * correct        (gated=True)
  plus the overlong penalty. The gated form is the chapter's conditional reward: the
  format bonus is paid only for a correct answer, so the policy cannot farm it with
  well-formed wrong answers.

Overlong soft penalty (DAPO, Yu et al. 2025, "soft overlong punishment"), with
L = n_tokens, L_max = max_len, L_cache = cache_len:
    0                                   if L <= L_max - L_cache
    (L_max - L_cache - L) / L_cache     if L_max - L_cache < L <= L_max   (0 down to -1)
    -1                                  if L > L_max
  Switched off (always 0) when cache_len <= 0.

Where this departs from the book: the chapter scores Qwen3's `<think>` output with a
regex format reward. Ours is the same idea written as explicit string checks, so that
each edge case (missing close tag, two blocks, answer inside the block, empty block) is
one visible line and there is no regex backtracking to worry about. The arithmetic task
only has integer answers, so its correctness is the strict integer parse of the last box
above. The book's MATH task (an answer that is a string) is graded by
tasks.math_answer_equal on the same last box, as the book's reward_rlvr does: no box, no
credit.
"""

from tasks import THINK_CLOSE as CLOSE, THINK_OPEN as OPEN  # the one definition of the tags
from tasks import math_answer_equal

MAX_DIGITS = 4000  # significant digits; below CPython's default 4300-digit limit
BOX = "\\boxed{"


def extract_boxed(text: str) -> str | None:
    """Content of the last `\\boxed{...}` (braces balanced), or None if absent/unclosed."""
    start = text.rfind(BOX)
    if start < 0:
        return None
    start += len(BOX)
    depth = 1  # we are just inside the box's own `{`
    for i in range(start, len(text)):
        c = text[i]
        if c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
            if depth == 0:
                return text[start:i]
    return None  # ran off the end: the last box is unclosed


def parse_int(s: str) -> int | None:
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


def correctness_reward(completion: str, answer: int | str) -> float:
    boxed = extract_boxed(completion)
    if isinstance(answer, str):  # MATH: any of its answer forms
        return float(boxed is not None and math_answer_equal(boxed, answer))
    value = None if boxed is None else parse_int(boxed)
    return 1.0 if value is not None and value == answer else 0.0


def format_reward(completion: str) -> float:
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


def overlong_penalty(n_tokens: int, max_len: int, cache_len: int) -> float:
    if cache_len <= 0:
        return 0.0
    # DAPO soft overlong punishment: linear from 0 at L_max - L_cache to -1 at L_max
    penalty = (max_len - cache_len - n_tokens) / cache_len
    return float(min(0.0, max(-1.0, penalty)))


def term_weights(format_weight: float) -> dict:
    """The reward's terms and their weights: total = sum of weight * term. GDPO
    (grpo.py, --reward-norm norm_then_sum) normalises each term on its own first."""
    return {"correct": 1.0, "format_paid": format_weight, "overlong": 1.0}


def score(completion: str, answer: int | str, n_tokens: int, *, format_weight: float = 0.0,
          gated: bool = False, max_len: int = 0, overlong_cache: int = 0) -> dict:
    """Every term (and the raw format check) as floats, and their weighted total."""
    correct = correctness_reward(completion, answer)
    fmt = format_reward(completion)
    terms = {"correct": correct,
             "format_paid": fmt * correct if gated else fmt,  # gated: the chapter's conditional reward
             "overlong": overlong_penalty(n_tokens, max_len, overlong_cache)}
    total = sum(w * terms[k] for k, w in term_weights(format_weight).items())
    return {"total": float(total), "format": fmt, **terms}
