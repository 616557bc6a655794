"""A step's statistics over every rank's rows: what grpo_step logs, reduced once at the end.

    stats = StepStats()
    stats.next_update()
    stats.mean("entropy", entropy, mask)     # recorded as this rank's parts: a sum and a count
    stats.result()                           # {name: float}, the same on every rank

How each statistic is kept and merged over updates is decided here; the all-reduces are
distributed.py's `all_sum` and `all_max`. In one process every number is the plain torch
formula (tests/test_grpo_step.py::test_step_stats_match_the_direct_formulas).
"""
import math

import torch

from distributed import all_max, all_sum


class StepStats:
    """The statistics of one step, each over every rank's rows (in one process, over its own).

    Each is recorded as local parts: a mean as a sum and a count, a std as a sum, a sum of
    squares and a count, a max as this rank's max (a min as the max of -x). `result`
    reduces all the parts together, in one all-reduce of the sums and one of the maxima:
    the numbers are those of one all-reduce per statistic, but a step logs about 40, and
    on gloo each all-reduce costs ~0.2 ms plus a hand-shake with the other ranks.
    A step with several updates calls `next_update` before each: a mean is then the mean
    of the updates' means, a max the max over all of them.
    """

    def __init__(self):
        self.update = 0
        self.sums = {}  # (name, update) -> (kind, float64 tensor of parts, default if no rank has any)
        #              kind: "mean", "std", "count", or ("ratio", min_mean_den)
        self.maxima = {}  # name -> (sign, this rank's max so far as a 0-d float64 tensor, default)

    def next_update(self):
        self.update += 1

    def _add(self, name, kind, parts, default=0.0):
        self.sums[name, self.update] = (kind, torch.stack([torch.as_tensor(p).detach().double() for p in parts]),
                                        default)

    def mean(self, name, x, mask=None, default=0.0):
        """Mean of x where mask (all of x without one); `default` where no rank has any."""
        x = torch.as_tensor(x).detach().double()
        m = torch.ones_like(x) if mask is None else mask.double()
        self._add(name, "mean", [(x * m).sum(), m.sum()], default)

    def std(self, name, x):
        """Sample std of x (1-d), as x.std() on the union of the ranks' x."""
        x = x.detach().double()
        self._add(name, "std", [x.sum(), (x * x).sum(), x.numel()], float("nan"))

    def ratio(self, name, num, den, min_mean_den=0.0, default=None):
        """sum(num) / sum(den), each summed over every rank's rows (1-d), once den's mean
        exceeds min_mean_den; `default` before (where den is noise, so is the ratio)."""
        num, den = torch.as_tensor(num).detach().double(), torch.as_tensor(den).detach().double()
        self._add(name, ("ratio", min_mean_den), [num.sum(), den.sum(), den.numel()], default)

    def count(self, name, x):
        """Sum of x, an integer count (e.g. tokens)."""
        self._add(name, "count", [torch.as_tensor(x).sum()])

    def max(self, name, x, mask=None, default=0.0, sign=1.0):
        x = torch.as_tensor(x).detach().double() * sign
        x = x[mask] if mask is not None else x.flatten()
        local = x.max() if x.numel() else x.new_tensor(float("-inf"))
        if name in self.maxima:
            local = torch.maximum(local, self.maxima[name][1])
        self.maxima[name] = (sign, local, default)

    def min(self, name, x, mask=None, default=0.0):
        self.max(name, x, mask, default, sign=-1.0)

    def result(self):
        """{name: float}, the same on every rank."""
        sums = all_sum(torch.cat([p for _, p, _ in self.sums.values()])).tolist() if self.sums else []
        maxima = all_max(torch.stack([v for _, v, _ in self.maxima.values()])).tolist() if self.maxima else []
        per_update, at = {}, 0  # name -> its value in each update
        for (name, _), (kind, parts, default) in self.sums.items():
            p, at = sums[at:at + len(parts)], at + len(parts)
            if kind == "count":
                value = int(p[0])
            elif isinstance(kind, tuple):  # ("ratio", min_mean_den)
                value = p[0] / p[1] if p[2] > 0 and p[1] > kind[1] * p[2] else default
            elif kind == "mean":
                value = p[0] / p[1] if p[1] > 0 else default
            else:  # std from the sum, the sum of squares and the count
                value = math.sqrt(max(p[1] - p[0] ** 2 / p[2], 0.0) / (p[2] - 1)) if p[2] > 1 else default
            per_update.setdefault(name, []).append(value)
        # one update: its value as it is (a count stays an int); several: their mean
        out = {name: v[0] if len(v) == 1 else sum(v) / len(v) for name, v in per_update.items()}
        for (name, (sign, _, default)), v in zip(self.maxima.items(), maxima):
            out[name] = sign * v if math.isfinite(v) else default
        return out
