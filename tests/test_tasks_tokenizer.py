"""Problems are deterministic, verifiable and split cleanly; the tokenizer round-trips."""
import random
import re

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
    weights, search_share, _, _ = tasks.LEVELS[level]
    drawn = take(tasks.problems(level, 3), 300)
    searches = [p for p in drawn if isinstance(p, tasks.SearchProblem)]
    assert (len(searches) > 0) == (search_share > 0)
    if search_share:  # the drawn share, near the level's: 300 draws
        assert abs(len(searches) / len(drawn) - search_share) < 0.1
    for p in (p for p in drawn if not isinstance(p, tasks.SearchProblem)):
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


def test_levels_without_searches_draw_the_problems_they_always_drew():
    """The shipped warm start and every number of the chain levels come from these streams."""
    assert [p.expr for p in take(tasks.problems("mixed", 5), 5)] == ["3+6-4", "2*4", "4-3", "7+2", "8+3"]
    assert [p.expr for p in tasks.eval_set("medium", 2)] == ["6+1+1", "2*8+2"]


@pytest.mark.parametrize("level", [name for name, (_, share, _, rel) in tasks.LEVELS.items() if share and rel == "="])
def test_a_search_tries_digits_until_the_one_answer(level):
    """Each try evaluates its digit's chain correctly, no digit twice, the last try is the
    answer, and no other digit 1..9 reaches the target (the answer is unique); with a budget
    of tries, a search that used it up without the answer boxes an untried digit instead."""
    budget = tasks.LEVELS[level][2]
    gave_up = 0
    for p in (p for p in take(tasks.problems(level, 4), 400) if isinstance(p, tasks.SearchProblem)):
        chain, target = p.expr.split("=")
        assert chain.startswith("?") and 1 <= len(re.findall(r"[-+*]", chain)) <= 2
        hits = [x for x in range(1, 10) if _within_range(chain.replace("?", str(x)))
                and tasks.evaluate_chain(chain.replace("?", str(x))) == int(target)]
        assert hits == [p.answer]
        tried = []
        for attempt in p.tries:
            steps = attempt.split(" ")
            tried.append(int(re.match(r"\d+", steps[0]).group()))
            value = tried[-1]
            for step in steps:
                lhs, rhs = step.split("=")
                assert lhs.startswith(str(value)) and tasks.evaluate_chain(lhs) == int(rhs)
                value = int(rhs)
            assert (value == int(target)) == (attempt == p.tries[-1] and p.guess is None)
        assert len(set(tried)) == len(tried) and (budget is None or len(tried) <= budget)
        if p.guess is None:  # found: the last try is the answer
            assert tried[-1] == p.answer
        else:  # gave up after the whole budget, without the answer, and guessed a digit not tried
            gave_up += 1
            assert len(tried) == budget and p.answer not in tried and p.guess not in tried and 1 <= p.guess <= 9
        boxed = p.answer if p.guess is None else p.guess
        assert p.solution() == "<think>" + " ".join(p.tries) + "</think>\\boxed{%d}" % boxed
        assert p.solution(tries=1) == "<think>" + p.tries[-1] + "</think>\\boxed{%d}" % boxed
        assert p.prompt == "Find ? in: %s\n" % p.expr
    assert (gave_up > 0) == (budget is not None)


def _within_range(expr):
    """Every running value of a chain stays in 0..MAX_VALUE, as the searches' chains must."""
    parts = re.findall(r"\d+|[-+*]", expr)
    value = int(parts[0])
    for op, b in zip(parts[1::2], map(int, parts[2::2])):
        value = value + b if op == "+" else value - b if op == "-" else value * b
        if not 0 <= value <= tasks.MAX_VALUE:
            return False
    return True


@pytest.mark.parametrize("level", [name for name, (_, share, _, rel) in tasks.LEVELS.items() if share and rel == "<>"])
def test_an_inequality_has_several_right_digits_and_its_reference_finds_one(level):
    """Its right digits are exactly those whose chain (in 0..MAX_VALUE) ends on the right side of
    the target, 2-6 of them and never every digit whose chain stays in range; the reference tries
    digits in turn, each try evaluated right, and boxes the first right one it reaches."""
    found = set()
    for p in (p for p in take(tasks.problems(level, 4), 600) if isinstance(p, tasks.SearchProblem)):
        chain, relation, target = re.fullmatch(r"(\?[-+*\d]+)([<>])(\d+)", p.expr).groups()
        valid = [x for x in range(1, 10) if _within_range(chain.replace("?", str(x)))]
        value = {x: tasks.evaluate_chain(chain.replace("?", str(x))) for x in valid}
        right = {x for x in valid if (value[x] > int(target) if relation == ">" else value[x] < int(target))}
        assert p.answers == frozenset(right) and 2 <= len(right) <= 6 and right != set(valid)
        tried = [int(re.match(r"\d+", attempt).group()) for attempt in p.tries]
        assert len(set(tried)) == len(tried) and set(tried) <= set(valid)
        assert [x in right for x in tried] == [False] * (len(tried) - 1) + [True]
        for attempt, x in zip(p.tries, tried):  # each try's steps evaluate its digit's chain
            assert attempt.split(" ")[-1].endswith("=%d" % value[x])
        assert p.answer == tried[-1] and p.guess is None
        assert p.solution() == "<think>" + " ".join(p.tries) + "</think>\\boxed{%d}" % p.answer
        assert tasks.graded_answer(p) == p.answers
        found.add((p.expr, p.answer))
    exprs = {e for e, _ in found}
    assert len(exprs) > 100 and len({a for e, a in found}) == 9  # every digit is boxed by some reference


def test_the_many_held_out_set_is_inequalities_alone_and_a_chain_is_graded_on_its_answer():
    ev = tasks.eval_set("many", 500)
    assert len(ev) == 500 and all(isinstance(p, tasks.SearchProblem) and p.answers for p in ev)
    assert {len(p.answers) for p in ev} == {2, 3, 4, 5, 6}
    assert all(tasks.is_eval(p.expr) for p in ev)
    chain = tasks.make_problem(random.Random(0), 2)
    assert tasks.graded_answer(chain) == chain.answer
    search = tasks.make_search_problem(random.Random(0), 2)
    assert tasks.graded_answer(search) == search.answer and search.answers is None


def test_longest_first_try_counts_the_shortest_right_search():
    assert tasks.longest_first_try("medium", len) == 0  # no searches: no need
    n = tasks.longest_first_try("medium_search", len)  # in characters here
    longest = max(len(p.solution(tries=1)) for p in take(tasks.problems("medium_search", tasks.EVAL_SEED), 3000)
                  if isinstance(p, tasks.SearchProblem))
    assert 0 < n <= longest and n >= len("<think>9*3=27 27+2=29</think>\\boxed{9}") - 2


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


@pytest.mark.parametrize("bad", [((1, 1, 0, 0), 0.5, 0, "="), ((1, 1, 0, 0), 1.5, None, "="),
                                 ((0, 0, 0, 0), 0.0, None, "="), ((1, -1, 0, 0), 0.0, None, "="),
                                 ((1, 1, 0, 0), 0.5, None, ">"), ((1, 1, 0, 0), 0.5, 3, "<>")])
def test_a_level_that_cannot_work_is_refused_naming_its_numbers(monkeypatch, bad):
    """A try budget of 0, a search share outside [0, 1], chain weights that draw nothing, an unknown
    relation, a budget on inequalities (whose give-up guess is not written): one line."""
    monkeypatch.setitem(tasks.LEVELS, "bad", bad)
    with pytest.raises(ValueError, match=r"level 'bad' cannot work: chain weights .* try budget") as e:
        next(tasks.problems("bad", 0))
    assert "\n" not in str(e.value) and str(bad[2]) in str(e.value) and repr(bad[3]) in str(e.value)
