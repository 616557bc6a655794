"""A verdict over seeds: an exact one-sided permutation test of two runs' means, with the effect, its 95% bootstrap
interval, the probability of improvement and the smallest effect the test detects (rliable, Agarwal et al. 2021,
arXiv 2108.13264; on how many seeds, Colas et al. 2018, arXiv 1806.08295).

    p = exact_p(without, with_, "higher")     # [the run without's number by seed], [the method's], the claim's way
    low, high = interval(without, with_, "higher")
    detectable(without, 5, 5, "higher")       # the effect found with 80% power at 5 and 5 seeds

The test. Under "the method changes nothing", the n0 + n1 seeds' numbers are exchangeable: any n1 of them could have
been the method's. The p-value is the share of the C(n0 + n1, n1) ways to choose them whose mean difference is at
least the one observed (252 ways at 5 and 5; 3 seeds all below 5 others give p = 1 / 56). Its size is at most alpha
by construction, whatever the numbers' distribution. With mean(chosen) - mean(rest) increasing in sum(chosen), the
test counts the sums of the chosen seeds.

The numbers are first put on one integer grid: each rounded at the sixth significant digit of the largest magnitude
among them, the digits results.jsonl keeps (`on_grid`). Every sum is then an exact integer, so a tie is a tie on any
CPU and the pages' numbers are the same wherever they are written; the grid moves no verdict, since a millionth of a
number is far below any effect the runs show.
This file is plain Python and NumPy on integers; it imports nothing of the project.
"""
import functools
import itertools
import math
import random
from decimal import ROUND_HALF_EVEN, Decimal

import numpy as np

ALPHA = 0.05  # held: p < ALPHA
POWER = 0.8  # the detectable effect: the smallest found with this probability
MIN_SEEDS = 5  # a run with fewer is not judged: 3 against 3 cannot reach p < 0.05 (its smallest p is 1 / 20)


def on_grid(*samples):
    """The samples as integers on one grid -> (lists of ints, the grid's step as a float): each value rounded at the
    sixth significant digit of the largest |value| of all of them (an exact decimal rounding, the same on every
    machine)."""
    largest = max((abs(x) for s in samples for x in s), default=0.0)
    exponent = math.floor(math.log10(largest)) - 5 if largest > 0 else 0
    step = Decimal(10) ** exponent
    grid = [[int((Decimal(repr(float(x))) / step).to_integral_value(ROUND_HALF_EVEN)) for x in s] for s in samples]
    return grid, float(step)


def oriented(values, side):
    """The values turned so that the claim's way is up: as they are for "higher", negated for "lower"."""
    if side not in ("higher", "lower"):
        raise ValueError(f"a side is 'higher' or 'lower', not {side!r}")
    return [x if side == "higher" else -x for x in values]


@functools.lru_cache(maxsize=None)
def splits(n0, n1):
    """(C(n0 + n1, n1), n1) int array: every choice of n1 of n0 + n1 pooled seeds, the method's last in the pool."""
    return np.array(list(itertools.combinations(range(n0 + n1), n1)), dtype=np.int64).reshape(-1, n1)


SAMPLED = 20000  # past this many choices, `detectable` reads this many of them, drawn once (10 and 10: 184,756)


@functools.lru_cache(maxsize=None)
def some_splits(n0, n1):
    """(at most SAMPLED, n1) int array: every choice of n1 of n0 + n1 seeds but the method's own, or SAMPLED of them
    drawn at random without it (a fixed seed), where there are more."""
    if math.comb(n0 + n1, n1) <= SAMPLED:
        choices = splits(n0, n1)
        return choices[(choices < n0).any(1)]
    rng, drawn = random.Random(0), set()
    while len(drawn) < SAMPLED:
        choice = tuple(sorted(rng.sample(range(n0 + n1), n1)))
        if choice[0] < n0:  # not the method's own seeds
            drawn.add(choice)
    return np.array(sorted(drawn), dtype=np.int64)


def exact_p(without, with_, side):
    """The exact one-sided p-value that the method's mean is ahead of the run without's, its claim's way: the share
    of the ways to choose len(with_) of the pooled seeds whose sum is at least the method's own (ties count)."""
    (a, b), _ = on_grid(oriented(without, side), oriented(with_, side))
    pooled = np.array(a + b, dtype=np.int64)
    sums = pooled[splits(len(a), len(b))].sum(1)
    return int((sums >= sum(b)).sum()) / len(sums)


def effect(without, with_, side):
    """The difference in means, signed so that + is the claim's way."""
    return math.fsum(oriented(with_, side)) / len(with_) - math.fsum(oriented(without, side)) / len(without)


def prob_improvement(without, with_, side):
    """The probability of improvement: the share of (seed of the run without, seed of the method) pairs in which the
    method is ahead its claim's way, a tie counting one half (the Mann-Whitney U over n0 n1)."""
    a, b = oriented(without, side), oriented(with_, side)
    wins = sum((y > x) + 0.5 * (y == x) for x in a for y in b)
    return wins / (len(a) * len(b))


def interval(without, with_, side, level=0.95, draws=10000, seed=0):
    """The effect's percentile bootstrap interval: each run's seeds resampled with replacement, on their own, `draws`
    times (a fixed seed: the same interval every time)."""
    (a, b), step = on_grid(oriented(without, side), oriented(with_, side))
    rng = random.Random(seed)
    effects = sorted(sum(rng.choices(b, k=len(b))) * len(a) - sum(rng.choices(a, k=len(a))) * len(b)
                     for _ in range(draws))  # the effect times n0 n1, an exact integer
    tail = (1 - level) / 2
    low, high = effects[math.floor(tail * draws)], effects[math.ceil((1 - tail) * draws) - 1]
    return low * step / (len(a) * len(b)), high * step / (len(a) * len(b))


def smallest_shift(a, b, alpha=ALPHA):
    """The smallest shift d of b's values (ints, the claim's way up) at which the exact test of b + d against a gives
    p < alpha (just above the value returned); inf where no shift can (too few seeds).

    A choice S of the pooled seeds holding m of b's counts against b + d where sum_S + m d >= sum_b + n1 d, that is
    while d <= c_S = (sum_S - sum_b) / (n1 - m) (S = b itself always counts). p(d) = (1 + #{c_S >= d}) / N falls
    as d grows; it is below alpha once at most k of the c_S reach d, k the largest count with (1 + k) / N < alpha."""
    n0, n1 = len(a), len(b)
    N = math.comb(n0 + n1, n1)
    choices = some_splits(n0, n1)  # (M, n1): all N - 1 choices but b's own, or a sample of them
    M = len(choices)
    k = math.ceil((alpha * N - 1) * M / (N - 1)) - 1  # at most k of the M may count (all N - 1: scaled by M / (N - 1))
    if k < 0:
        return math.inf
    pooled = np.array(a + b, dtype=np.int64)
    m = (choices >= n0).sum(1)  # (M,) how many of b's seeds each choice holds, fewer than n1
    c = (pooled[choices].sum(1) - sum(b)) / (n1 - m)  # (M,)
    if k >= M:
        return -math.inf
    return float(np.partition(c, M - 1 - k)[M - 1 - k])


def detectable(without, n0, n1, side, power=POWER, draws=400, seed=0):
    """The smallest effect the test detects with probability `power` at n0 seeds without and n1 with, found by
    shifting the run without's own seeds: draw n0 and n1 of them with replacement, find the smallest shift of the
    second draw that the test calls held, `draws` times; the effect is the `power` quantile of those shifts. The
    seeds' own spread is the noise, so a run that varies more needs a larger effect; they are first spread by
    sqrt(n / (n - 1)) about their mean, so that a draw has their sample variance. Past SAMPLED choices the test in
    each draw counts a fixed sample of them. inf where no effect can be detected (fewer seeds than the test needs)."""
    values = oriented(without, side)
    centre = math.fsum(values) / len(values)
    widen = math.sqrt(len(values) / (len(values) - 1))  # a draw from n values has (n - 1) / n of their variance
    (a,), step = on_grid([centre + (x - centre) * widen for x in values])
    rng = random.Random(seed)
    shifts = sorted(smallest_shift(rng.choices(a, k=n0), rng.choices(a, k=n1)) for _ in range(draws))
    shift = shifts[math.ceil(power * draws) - 1]
    return shift * step if math.isfinite(shift) else math.inf
