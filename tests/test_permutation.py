"""The test a verdict runs over seeds (lab/permutation.py): its p-value by hand and against a plain enumeration in exact
fractions, its size under no effect, the effect, its interval, the probability of improvement, and the smallest
effect it detects.

    python -m pytest -q tests/test_permutation.py
"""
import itertools
import math
import random
from fractions import Fraction

import pytest

from lab import permutation as P


def p_by_enumeration(without, with_, side):
    """The exact one-sided p of the difference in means, written the long way: every choice of the method's seeds
    among the pooled ones, each mean difference in exact fractions (the values as the decimals they print as)."""
    sign = 1 if side == "higher" else -1
    pooled = [Fraction(repr(x)) * sign for x in [*without, *with_]]
    n0, n1 = len(without), len(with_)
    total = sum(pooled)

    def difference(chosen):
        s = sum(pooled[i] for i in chosen)
        return s / n1 - (total - s) / n0

    observed = difference(range(n0, n0 + n1))
    splits = list(itertools.combinations(range(n0 + n1), n1))
    return Fraction(sum(difference(c) >= observed for c in splits), len(splits))


@pytest.mark.parametrize("without, with_, side, p", [
    ([29.1, 30.2, 31.0, 29.5, 30.6], [24.8, 28.0, 26.1], "lower", Fraction(1, 56)),  # 3 all below 5: 1 of C(8, 3)
    ([0.58, 0.6, 0.62, 0.64, 0.66], [0.68, 0.69, 0.7, 0.71, 0.72], "higher", Fraction(1, 252)),  # 5 above 5
    ([0.68, 0.69, 0.7, 0.71, 0.72], [0.58, 0.6, 0.62, 0.64, 0.66], "higher", Fraction(1, 1)),  # below: every split
    ([0.5] * 5, [0.5] * 5, "higher", Fraction(1, 1)),  # all tied: every split ties, and ties count
    # the method's own seeds wider than the run without's: with 0.2 lowest, 6 splits reach its sum of 3.2 (the four
    # top seeds and any fifth): held; with 0.0 instead, 16 reach 3.0 (six of those, and the three top seeds with two
    # of the run without's: 1 + 6 + 3): not held
    ([0.30, 0.31, 0.30, 0.31, 0.30], [0.2, 0.6, 0.7, 0.8, 0.9], "higher", Fraction(6, 252)),
    ([0.30, 0.31, 0.30, 0.31, 0.30], [0.0, 0.6, 0.7, 0.8, 0.9], "higher", Fraction(16, 252)),
])
def test_the_exact_p_by_hand(without, with_, side, p):
    assert P.exact_p(without, with_, side) == pytest.approx(float(p), abs=1e-15)
    assert p_by_enumeration(without, with_, side) == p


def test_the_exact_p_equals_the_long_enumeration_on_random_samples_with_ties():
    """40 random pairs of samples of 5 to 7 seeds, values on a coarse grid so that ties are common, either way."""
    rng = random.Random(1)
    for _ in range(40):
        n0, n1 = rng.randint(5, 7), rng.randint(5, 7)
        a = [rng.randint(0, 6) / 8 for _ in range(n0)]
        b = [rng.randint(1, 7) / 8 for _ in range(n1)]
        for side in ("higher", "lower"):
            assert P.exact_p(a, b, side) == pytest.approx(float(p_by_enumeration(a, b, side)), abs=1e-15)


def test_values_a_rounding_apart_tie_and_a_difference_in_the_sixth_digit_does_not():
    """Two runs whose numbers differ by float rounding alone (the 17th digit) are tied on the grid: no effect. A
    difference in the largest value's sixth significant digit, the last the record keeps, is kept."""
    a = [0.1 + 0.2, 0.3, 0.3, 0.3, 0.3]  # 0.30000000000000004 and 0.3
    assert P.on_grid(a)[0][0] == [300000] * 5
    assert P.exact_p([0.3] * 5, [0.1 + 0.2] * 5, "higher") == 1.0
    assert P.exact_p([0.3] * 5, [0.300001] * 5, "higher") == pytest.approx(1 / 252)
    with pytest.raises(ValueError, match="'higher' or 'lower'"):
        P.exact_p(a, a, "up")


def test_under_no_effect_the_test_holds_at_most_as_often_as_alpha():
    """Its size: 3000 pairs of 5 and 5 seeds from one distribution (normal, skewed, and one with many ties): each
    is held (p < 0.05) in at most 5% of them, up to the Monte Carlo error (3 standard errors: 1.2 points). The
    exact test's size is at most alpha by construction; this catches a test that counts the splits wrong."""
    rng = random.Random(0)
    draws = {"normal": lambda: rng.gauss(0, 1), "skewed": lambda: rng.expovariate(1.0),
             "ties": lambda: float(rng.randint(0, 3))}
    for name, draw in draws.items():
        held = sum(P.exact_p([draw() for _ in range(5)], [draw() for _ in range(5)], "higher") < P.ALPHA
                   for _ in range(3000))
        assert held / 3000 <= 0.05 + 3 * math.sqrt(0.05 * 0.95 / 3000), (name, held)


def test_the_effect_and_the_probability_of_improvement_by_hand():
    """Means 0.3 and 0.5: +0.2 the claim's way (higher), -0.2 the other; of the 4 seed pairs the method leads in 3
    and ties in 1 (0.4 against 0.4): (3 + 0.5) / 4."""
    without, with_ = [0.2, 0.4], [0.4, 0.6]
    assert P.effect(without, with_, "higher") == pytest.approx(0.2)
    assert P.effect(without, with_, "lower") == pytest.approx(-0.2)
    assert P.prob_improvement(without, with_, "higher") == pytest.approx(3.5 / 4)
    assert P.prob_improvement(without, with_, "lower") == pytest.approx(0.5 / 4)


def test_the_bootstrap_interval_holds_the_effect_is_the_same_each_time_and_is_a_point_without_spread():
    a, b = [0.58, 0.6, 0.62, 0.64, 0.66], [0.68, 0.69, 0.7, 0.71, 0.72]
    low, high = P.interval(a, b, "higher")
    assert low < P.effect(a, b, "higher") < high and (low, high) == P.interval(a, b, "higher")
    assert 0 < low and high < 0.14 + 1e-12  # the farthest two resamples can be apart: 0.72 - 0.58
    assert P.interval([0.5] * 5, [0.7] * 5, "higher") == pytest.approx((0.2, 0.2))


def test_the_smallest_shift_is_where_the_test_turns_held():
    """Just above the returned shift the test holds, just below it does not, on samples with and without ties (whole
    numbers: two shifts where the count changes lie at least 1/30 apart, far more than the 1e-3 either side)."""
    rng = random.Random(3)
    for _ in range(10):
        a = [rng.randint(0, 40) for _ in range(5)]
        b = [rng.randint(0, 40) for _ in range(rng.choice((5, 6)))]
        s = P.smallest_shift(a, b)
        assert P.exact_p(a, [x + s + 1e-3 for x in b], "higher") < P.ALPHA
        assert P.exact_p(a, [x + s - 1e-3 for x in b], "higher") >= P.ALPHA
    assert P.smallest_shift([1, 2, 3], [1, 2, 3]) == math.inf  # 3 and 3: the smallest p is 1 / 20, never below 0.05


def test_the_detectable_effect_grows_with_the_spread_falls_with_seeds_and_needs_five():
    """Ten times the spread: ten times the effect; more seeds: a smaller one; seeds that never differ: any effect
    (0); fewer than 5 and 5: none can be detected. Five values of sample std 1 need about 1.3 to 2.2 std (a t-test's
    normal approximation: (1.645 + 0.84) sqrt(2 / 5) = 1.57)."""
    a = [-1.26, -0.64, 0.0, 0.64, 1.26]  # sample std 1.0
    d5 = P.detectable(a, 5, 5, "higher")
    assert 1.3 < d5 < 2.2
    assert P.detectable([10 * x for x in a], 5, 5, "higher") == pytest.approx(10 * d5, rel=1e-6)
    assert P.detectable(a, 10, 10, "higher") < P.detectable(a, 8, 8, "higher") < d5
    assert P.detectable(a, 5, 5, "lower") == pytest.approx(d5, rel=0.15)  # symmetric values, other draws
    assert P.detectable([0.4] * 5, 5, 5, "higher") == 0.0
    assert P.detectable(a, 3, 3, "higher") == math.inf
