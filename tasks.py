"""Synthetic arithmetic reasoning problems with verifiable integer answers.

Our stand-in for MATH-500: chains of one-digit operations that are evaluated strictly
left to right (the prompt says so, so `2+3*4` is 20, not 14). Every problem comes with a
reference step-by-step solution, and its answer can be checked exactly, which is all
GRPO's verifiable reward needs.

    prompt      Evaluate left to right: 7+5-3*2
    reasoning   <think>7+5=12 12-3=9 9*2=18</think>\\boxed{18}
    direct      \\boxed{18}

    prompt      Evaluate left to right: 4*6-9+2
    reasoning   <think>4*6=24 24-9=15 15+2=17</think>\\boxed{17}

Intermediate values stay in 0..30 (an operand is only drawn where the running value
allows it), so every step is one of ~500 small facts that a 2-layer model learns in a
few CPU minutes. (With 0..99 there are ~2,000 facts and the warm start needs
several times longer: the step-by-step reasoning came out right but the sums wrong.)

The runaway (EXPERIMENTS.md, lesson 3) adds search problems (`SearchProblem`): find the
digit ? that makes a chain come out at a value, by trying digits in turn. Its reference
tries them in a random order, so it is as long as the search took, and a search that has
not found the digit by the token cap is cut off: long and wrong, as the book's failed
attempts are. `medium_search` mixes them into medium's chains, three in four; chains keep
the streams they always had.

    prompt      Find ? in: ?*3+2=20
    reasoning   <think>4*3=12 12+2=14 9*3=27 27+2=29 6*3=18 18+2=20</think>\\boxed{6}

The entropy bonus's regime (EXPERIMENTS.md, the closing list) asks for an inequality
instead, with 2-6 right digits (`answers`), so that a policy can keep several of them or
settle on one: `mixed_many` is its warm start, `medium_many` its RL problems and `many`,
its searches alone, its held-out set.

    prompt      Find ? in: ?*3+2>20
    reasoning   <think>4*3=12 12+2=14 9*3=27 27+2=29</think>\\boxed{9}      (7, 8 and 9 are right)

Difficulty = number of operations and share of searches, selected by name (`LEVELS`). The held-out split is
decided by a hash of the expression (`is_eval`), not by a seed, so an eval problem can
never be drawn for training at any level, and the eval set is the same for every run.

    python tasks.py --level hard --n 5     # print a few problems

Departure from the book: the chapter trains Qwen3-0.6B on MATH; we need a task that a
0.4M-parameter model (431k by model.count_params) learns in a minute on a laptop CPU,
with the same answer format (`\\boxed{...}`) and the same `<think>` convention.

The book's own task, MATH, is here too (`--task math --data FILE` in train.py, with the
book's model): `load_math` reads problems and answers from a local JSON list or JSONL
file, `MathProblem.prompt` is the book's prompt (ch03's render_prompt), `math_split`
holds out a fixed share of a file, and `math_answer_equal` (book/math_grader.py) grades the
answer forms of MATH.
"""
import argparse
import json
import random
import re
import zlib
from dataclasses import dataclass

from book.math_grader import math_answer_equal  # noqa: F401 (the MATH grader, importable from here)

PROMPT_TEMPLATE = "Evaluate left to right: {expr}\n"  # the one prompt template
THINK_OPEN, THINK_CLOSE = "<think>", "</think>"
SEARCH_TEMPLATE = "Find ? in: {expr}\n"  # the search problems' prompt
LEVELS = {  # name -> (relative frequency of chains of 1, 2, 3, 4 operations, share of search problems,
    #           a search's budget of tries: None searches until it finds the digit,
    #           the searches' relations: "=" one right digit, "<>" an inequality with several)
    "easy": ((1, 1, 0, 0), 0.0, None, "="),
    "medium": ((0, 1, 1, 0), 0.0, None, "="),
    "hard": ((0, 0, 1, 1), 0.0, None, "="),
    "mixed": ((4, 3, 2, 1), 0.0, None, "="),  # the warm start: mostly short chains, a few long ones
    # the runaway's regime (EXPERIMENTS.md, lesson 3): chains and searches, whose failures are long
    "mixed_search": ((4, 3, 2, 1), 0.5, None, "="),  # its warm start
    "medium_search": ((0, 1, 1, 0), 0.75, None, "="),  # its RL problems; it is evaluated on medium's chains
    # ... with a budget: a search gives up after 3 tries with a guess, so every honest answer, right or
    # wrong, ends by itself, and a cap 2-3 times the longest leaves a flattening learner room to ramble
    "mixed_budget": ((4, 3, 2, 1), 0.5, 3, "="),  # its warm start
    "medium_budget": ((0, 1, 1, 0), 0.75, 3, "="),
    # diversity (the entropy bonus, EXPERIMENTS.md): inequality searches, 2-6 right digits each
    "mixed_many": ((4, 3, 2, 1), 0.5, None, "<>"),  # its warm start
    "medium_many": ((0, 1, 1, 0), 0.75, None, "<>"),  # its RL problems
    "many": ((0, 1, 1, 0), 1.0, None, "<>"),  # its held-out set: searches alone, where diversity can be seen
}
MAX_VALUE = 30  # every intermediate result stays in 0..MAX_VALUE
EVAL_SEED = 1234
EVAL_MOD = 8  # one in EVAL_MOD expressions belongs to the held-out split


@dataclass(frozen=True)
class Problem:
    expr: str  # "7+5-3*2"
    answer: int  # 18
    steps: tuple  # ("7+5=12", "12-3=9", "9*2=18")

    @property
    def prompt(self):
        return PROMPT_TEMPLATE.format(expr=self.expr)

    def solution(self, think=True):
        """The reference completion: reasoning inside <think> (or none), then the boxed answer."""
        answer = "\\boxed{%d}" % self.answer
        if not think:
            return answer
        return THINK_OPEN + " ".join(self.steps) + THINK_CLOSE + answer


def check_level(level):
    """(chain-length weights, share of searches, try budget, relations) of a level, or one line
    naming the levels, or the numbers of a level that cannot work."""
    if level not in LEVELS:
        raise ValueError(f"unknown difficulty {level!r}; choose one of {', '.join(LEVELS)}")
    weights, share, budget, relations = LEVELS[level]
    if (min(weights) < 0 or sum(weights) <= 0 or not 0 <= share <= 1 or (budget is not None and budget < 1)
            or relations not in ("=", "<>") or (relations == "<>" and budget is not None)):
        raise ValueError(f"level {level!r} cannot work: chain weights {weights} (>= 0, some > 0), search share "
                         f"{share} (in [0, 1]), try budget {budget} (>= 1, or None; None for inequalities), "
                         f"relations {relations!r} ('=' or '<>')")
    return LEVELS[level]


def _operand(rng, op, value):
    """A one-digit operand that keeps `value op operand` inside 0..MAX_VALUE, or None."""
    if op == "+":
        hi = min(9, MAX_VALUE - value)
    elif op == "-":
        hi = min(9, value)
    else:  # "*"
        hi = 9 if value == 0 else min(9, MAX_VALUE // value)
    return rng.randint(1, hi) if hi >= 1 else None


def make_problem(rng, n_ops):
    """One random chain of n_ops operations, evaluated left to right."""
    value = rng.randint(1, 9)
    expr, steps = str(value), []
    while len(steps) < n_ops:
        op = rng.choice("+-*")
        b = _operand(rng, op, value)
        if b is None:
            continue
        new = value + b if op == "+" else value - b if op == "-" else value * b
        steps.append(f"{value}{op}{b}={new}")
        expr += f"{op}{b}"
        value = new
    return Problem(expr, value, tuple(steps))


def is_eval(expr):
    """The held-out split, decided by a stable hash of the expression alone."""
    return zlib.crc32(expr.encode()) % EVAL_MOD == 0


@dataclass(frozen=True)
class SearchProblem:
    """Find the digit ? that makes a chain come out at a value, by trying digits in turn:

        prompt      Find ? in: ?*3+2=20
        reasoning   <think>4*3=12 12+2=14 9*3=27 27+2=29 6*3=18 18+2=20</think>\\boxed{6}

    The reference tries the digits in a random order until the right one, so it is as
    long as the search took, and a search that has not found it by the token cap is cut
    off, long and wrong: the book's wrong answers are its long ones too.

    An inequality has several right digits (`answers`), and its reference boxes the first
    one its random order reached, so answers sampled from a model that imitates it differ:

        prompt      Find ? in: ?*3+2>20
        reasoning   <think>4*3=12 12+2=14 9*3=27 27+2=29</think>\\boxed{9}
    """
    expr: str  # "?*3+2=20"
    answer: int  # 6
    tries: tuple  # ("4*3=12 12+2=14", "9*3=27 27+2=29", "6*3=18 18+2=20"): the last one is right
    guess: int = None  # with a budget of tries that ran out first: the untried digit it boxes instead
    answers: frozenset = None  # an inequality (?*3+2>20): every right digit, `answer` the one its reference found

    @property
    def prompt(self):
        return SEARCH_TEMPLATE.format(expr=self.expr)

    def solution(self, think=True, tries=None):
        """The reference completion (or one with only its last `tries` tries: 1 is the
        shortest right search). Without reasoning it is a guess, so the warm start never uses it."""
        answer = "\\boxed{%d}" % (self.answer if self.guess is None else self.guess)
        shown = self.tries if tries is None else self.tries[-tries:]
        return THINK_OPEN + " ".join(shown) + THINK_CLOSE + answer if think else answer


def _chain_from(x, ops):
    """(value, steps) of the chain `x op b op b ...`, or (None, None) if it leaves 0..MAX_VALUE."""
    value, steps = x, []
    for op, b in ops:
        new = value + b if op == "+" else value - b if op == "-" else value * b
        if not 0 <= new <= MAX_VALUE:
            return None, None
        steps.append(f"{value}{op}{b}={new}")
        value = new
    return value, steps


def _search(rng, results, right):
    """(the order the digits are tried in, the tries up to the first right digit, as text): a
    random order of the digits whose chain stays in 0..MAX_VALUE (results: x -> (value, steps))."""
    order = [g for g in rng.sample(range(1, 10), 9) if results[g][0] is not None]
    found = next(i for i, g in enumerate(order) if g in right)
    return order, tuple(" ".join(results[g][1]) for g in order[:found + 1])


def make_search_problem(rng, n_ops, budget=None):
    """One random search over the digits 1..9 whose chain of n_ops operations has one answer;
    with a budget, a search that has not found it after `budget` tries boxes an untried
    digit instead (right by luck only)."""
    while True:
        ops = [(rng.choice("+-*"), rng.randint(1, 9)) for _ in range(n_ops)]
        results = {x: _chain_from(x, ops) for x in range(1, 10)}  # x -> (value, steps)
        x = rng.randint(1, 9)
        target = results[x][0]
        if target is None or sum(value == target for value, _ in results.values()) != 1:
            continue
        order, tries = _search(rng, results, {x})
        expr = "?" + "".join(f"{op}{b}" for op, b in ops) + f"={target}"
        if budget is None or len(tries) <= budget:
            return SearchProblem(expr, x, tries)
        return SearchProblem(expr, x, tries[:budget], guess=rng.choice(order[budget:]))


MANY_RIGHT = (2, 6)  # an inequality's right digits: at least 2, at most 6 of the 9, never every valid one


def make_inequality_problem(rng, n_ops):
    """One random search over the digits 1..9 for those whose chain of n_ops operations ends
    above (>) or below (<) a target: 2-6 right digits, and at least one digit whose chain stays
    in 0..MAX_VALUE is wrong. The reference boxes the first right digit its random order tries."""
    lo, hi = MANY_RIGHT
    while True:
        ops = [(rng.choice("+-*"), rng.randint(1, 9)) for _ in range(n_ops)]
        results = {x: _chain_from(x, ops) for x in range(1, 10)}  # x -> (value, steps)
        relation, target = rng.choice("<>"), rng.randint(0, MAX_VALUE)
        valid = {x for x, (value, _) in results.items() if value is not None}
        right = {x for x in valid if (results[x][0] > target if relation == ">" else results[x][0] < target)}
        if not lo <= len(right) <= hi or right == valid:
            continue
        order, tries = _search(rng, results, right)
        expr = "?" + "".join(f"{op}{b}" for op, b in ops) + f"{relation}{target}"
        return SearchProblem(expr, order[len(tries) - 1], tries, answers=frozenset(right))


def graded_answer(p):
    """What a completion's boxed answer is checked against (rewards.correctness_reward): the
    set of right digits of an inequality, else the problem's one answer."""
    return p.answers if isinstance(p, SearchProblem) and p.answers else p.answer


def longest_answer(level, count, n=2000):
    """The most tokens (count(text) -> int) that an honest answer to a level with a try budget
    takes among n of its searches (0 without a budget: a search then runs until it finds)."""
    stream = (p for p in problems(level, EVAL_SEED) if isinstance(p, SearchProblem))
    return max((count(p.solution()) for p, _ in zip(stream, range(n))), default=0) if check_level(level)[2] else 0


def longest_first_try(level, count, n=2000):
    """The most tokens (count(text) -> int) that a right first try takes among n searches of a
    level (0 without searches): a token cap below it leaves some searches no way to finish."""
    stream = (p for p in problems(level, EVAL_SEED) if isinstance(p, SearchProblem))
    return max((count(p.solution(tries=1)) for p, _ in zip(stream, range(n))), default=0) if check_level(level)[1] else 0


def longest_prompt(level, count, n=500):
    """The most tokens (count(text) -> int) a prompt takes among n problems of a level and its held-out
    set: with the answer's cap, what the model's context has to hold."""
    drawn = [p for p, _ in zip(problems(level, EVAL_SEED), range(n))] + eval_set(level)
    return max(count(p.prompt) for p in drawn)


def problems(level, seed, split="train"):
    """Endless deterministic stream of problems of one split (train or eval)."""
    weights, search_share, budget, relations = check_level(level)
    rng = random.Random(seed)
    while True:
        n_ops = rng.choices(range(1, len(weights) + 1), weights)[0]
        if search_share and rng.random() < search_share:  # (levels without searches draw as they always did)
            n_search = rng.choice((1, 2))
            if relations == "=":
                p = make_search_problem(rng, n_search, budget)
            else:
                p = make_inequality_problem(rng, n_search)
        else:
            p = make_problem(rng, n_ops)
        if is_eval(p.expr) == (split == "eval"):
            yield p


def eval_set(level, n=500):
    """The fixed held-out set: the first n distinct eval-split problems of a level.

    A level with fewer than n distinct eval problems (easy has ~470) gives all it has:
    we stop once 20,000 draws in a row brought nothing new.
    """
    out, seen, stale = [], set(), 0
    for p in problems(level, EVAL_SEED, split="eval"):
        stale = 0 if p.expr not in seen else stale + 1
        if p.expr not in seen:
            seen.add(p.expr)
            out.append(p)
        if len(out) == n or stale == 20_000:
            return out


def evaluate_chain(expr):
    """Left-to-right value of an expression string (independent check of the generator)."""
    parts = re.findall(r"\d+|[-+*]", expr)  # "12-3*2" -> ["12", "-", "3", "*", "2"]
    value = int(parts[0])
    for op, b in zip(parts[1::2], map(int, parts[2::2])):
        value = value + b if op == "+" else value - b if op == "-" else value * b
    return value


# ---------------------------------------------------------------- MATH (the book's task)

# the book's prompt (reasoning_from_scratch/ch03.py, render_prompt), character for character
MATH_PROMPT = ("You are a helpful math assistant.\n"
               "Answer the question and write the final result on a new line as:\n"
               "\\boxed{{ANSWER}}\n\n"
               "Question:\n{problem}\n\nAnswer:")


@dataclass(frozen=True)
class MathProblem:
    problem: str  # the question, LaTeX inside
    answer: str  # the reference answer, e.g. "\\frac{14}{3}"; graded by math_answer_equal

    @property
    def prompt(self):
        return MATH_PROMPT.format(problem=self.problem)


def load_math(path, log=print):
    """MathProblems from a JSON list or a JSONL file of records with "problem" and
    "answer" (MATH-500's test.jsonl, the book's math500_test.json and its training file
    math_full_minus_math500.json). A record whose answer is empty or missing is skipped,
    with one line (via log) counting them: the book builds its training file with
    ch03's extract_final_candidate(solution, fallback=None), which gives "" for a
    solution without \\boxed{}, and its scripts load such a problem, which can only earn 0.
    ValueError with one line for a file it cannot use (no problem has an answer, a record
    without a problem, not JSON)."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except (FileNotFoundError, IsADirectoryError):
        raise ValueError(f"--data {path}: no such file") from None
    except UnicodeDecodeError:
        raise ValueError(f"{path}: not UTF-8 text, not a JSON / JSONL file of problems") from None
    records = []
    try:
        if text.lstrip().startswith("["):
            records = json.loads(text)
        else:  # JSONL: one record per line
            for n, line in enumerate(text.splitlines(), 1):
                if line.strip():
                    records.append(json.loads(line))
    except json.JSONDecodeError as e:
        where = f" line {n}" if not text.lstrip().startswith("[") else ""
        raise ValueError(f"{path}{where}: not valid JSON ({e.msg}); want a JSON list or JSONL of problems") from None
    if not records:
        raise ValueError(f"{path}: no problems in it")
    problems = []
    for i, r in enumerate(records, 1):
        if not isinstance(r, dict) or not isinstance(r.get("problem"), str):
            raise ValueError(f"{path}: record {i} has no problem: {str(r)[:80]}")
        answer = "" if r.get("answer") is None else str(r["answer"])  # an answer of 0 is an answer
        if answer.strip():  # the book's files hold "" where a solution had no \boxed{}
            problems.append(MathProblem(r["problem"], answer))
    if not problems:
        raise ValueError(f"{path}: none of its {len(records):,} problems has an answer")
    if len(problems) < len(records):
        log(f"{path}: skipped {len(records) - len(problems):,} of {len(records):,} problems without an answer")
    return problems


def math_split(problems, split="train"):
    """One file's train or eval split, decided by a stable hash of the problem text (one in
    EVAL_MOD held out), for when no separate test file is given."""
    return [p for p in problems if is_eval(p.problem) == (split == "eval")]


def draw(problems, seed):
    """Endless deterministic stream of problems drawn at random from a list."""
    rng = random.Random(seed)
    while True:
        yield rng.choice(problems)


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description="Print a few problems.")
    ap.add_argument("--level", default="hard", help=f"one of {', '.join(LEVELS)}")
    ap.add_argument("--n", type=int, default=5, help="how many problems")
    ap.add_argument("--seed", type=int, default=0, help="random seed")
    args = ap.parse_args()
    try:
        check_level(args.level)
    except ValueError as e:
        ap.error(str(e))
    stream = problems(args.level, args.seed)
    for _ in range(args.n):
        p = next(stream)
        print(p.prompt + p.solution())
