"""What a GRPO step logs: grpo_step hands each update to a watcher (`StepLog`), which records what it does
(`update_stats`), the batch it samples (`batch_stats`), and what the KL term estimates (`exact_kl`), and
`StepStats` keeps them over every rank's rows and reduces them once at the end.

    log = StepLog(policy, ref_policy, cfg, think_token(enc))  # train.py's, a step's watcher
    batch = grpo.grpo_step(policy, ref_policy, opt, enc, next_problems, n_prompts, cfg, gen, watch=log.update)
    metrics = log.stats.result()             # {statistic: float}
    stats = StepStats()
    stats.next_update()
    stats.mean("entropy", entropy, mask)     # recorded as this rank's parts: a sum and a count
    stats.result()                           # {name: float}, the same on every rank

docs/metrics.md says what each logged number means, what it looks like in the default run,
and which lesson shows it going wrong. How each statistic is kept and merged over updates
is decided here; the all-reduces are harness/distributed.py's `all_sum` and `all_max`. In one
process every number is the plain torch formula
(tests/test_grpo_step.py::test_step_stats_match_the_direct_formulas).
"""
import math

import torch

import field_methods
import grpo
import rewards
from harness.distributed import all_max, all_sum
from tasks import THINK_OPEN
from tokenizer import encode_completion


def logged_step(policy, ref_policy, opt, enc, next_problems, n_prompts, cfg, generator, lagged=None, learner=None):
    """grpo.grpo_step watched by a StepLog, as train.py's train_step runs it, in one call -> (the batch it trained on,
    {statistic: float}, the same on every rank): for the tests and the benches. learner: the policy as the update's
    forward runs it (under torchrun, in DDP)."""
    log = StepLog(policy, ref_policy, cfg, think_token(enc))
    batch = grpo.grpo_step(policy, ref_policy, opt, enc, next_problems, n_prompts, cfg, generator, lagged, log.update,
                           learner)
    return batch, log.stats.result()


def think_token(enc):
    """The id of <think>, the token that opens a reasoned answer, or None where the tokenizer spells it in pieces
    (or there is none: a step handed its batches ready-made)."""
    if enc is None:
        return None
    ids = encode_completion(enc, THINK_OPEN)
    return ids[0] if len(ids) == 1 else None


class StepLog:
    """The watcher of one step: grpo_step calls `update` with each grpo.Update before its optimizer step.
    think_id: <think>'s id (think_token), for the share of them the clip stops; None: not logged."""

    def __init__(self, policy, ref_policy, cfg, think_id=None):
        self.policy = policy
        self.ref_policy = ref_policy  # None when beta = 0
        self.cfg = cfg
        self.think_id = think_id
        self.stats = StepStats(policy.lm_head_weight.device)

    def update(self, u):
        """Record one update; with the first, the batch it samples (once a step: the first epoch's)."""
        cfg, stats = self.cfg, self.stats
        stats.next_update()
        rows = u.rows
        if stats.n_updates == 1:
            if cfg.rollout_lag:
                stats.max("rollout_lag", u.batch.lag)
            batch_stats(stats, u.batch, u.adv, u.zero_std, u.old_logp, u.loss_mask, cfg.group_size,
                        rewards.term_weights(cfg))
        kl_exact = exact_kl(self.policy, self.ref_policy, u.batch, rows, u.loss_mask, cfg)  # --exact-kl
        update_stats(stats, u.loss, u.logp, u.old_logp[rows], u.entropy, u.loss_mask[rows], u.grad_norm, kl_exact,
                     u.adv[rows], u.batch.sampler_logp[rows])
        if self.think_id is not None:
            think_stats(stats, u.loss, u.batch.tokens[rows, 1:] == self.think_id, u.loss_mask[rows], u.adv[rows])
        if cfg.objective == "sapo":  # what SAPO's gate leaves of each token's policy gradient
            gate = field_methods.sapo_gate(u.loss.ratio, u.adv[rows, None], cfg.sapo_tau_pos, cfg.sapo_tau_neg)
            stats.mean("sapo_gate", gate, u.loss_mask[rows].bool())


@torch.no_grad()
def exact_kl(policy, ref_policy, batch, rows, loss_mask, cfg):
    """--exact-kl: (kl_exact, kl_grad_bias), or None without it. kl_exact is the KL term's target,
    sum_v pi(v) (log pi(v) - log pi_ref(v)) at each sampled position (summed over an answer for --kl-level
    sequence), aggregated as the term is; kl_grad_bias the bias of the gradient of the estimator the term runs
    (field_methods.kl_grad_bias, --kl-reweight's included; None for --kl-level sequence)."""
    if not (cfg.exact_kl and cfg.kl > 0):
        return None
    m = loss_mask[rows]  # (b, T)
    support = None if batch.support is None else batch.support[rows]  # (b, T, V)
    T = grpo.learner_temperature(cfg)
    lp, ref = (grpo.vocab_logprobs(model, batch.tokens[rows], batch.mask[rows], m, T, support)
               for model in (policy, ref_policy))  # (n, V) each
    per_token = (lp.exp() * (lp - ref).nan_to_num(0.0)).sum(-1)  # (n,): -inf - -inf outside a kept support
    kl = lp.new_zeros(m.shape).masked_scatter(m, per_token)  # (b, T)
    if cfg.kl_level == "sequence":
        return grpo.aggregate(kl.sum(1, keepdim=True), m, cfg.loss_agg, cfg.max_new_tokens), None
    bias = field_methods.kl_grad_bias(lp, ref, cfg.kl_estimator, cfg.kl_reweight)
    return grpo.aggregate(kl, m, cfg.loss_agg, cfg.max_new_tokens), bias


@torch.no_grad()
def update_stats(stats, loss, logp, old_logp, entropy, loss_mask, grad_norm, kl_exact=None, adv=None,
                 sampler_logp=None):
    """Record one update: the loss terms, the gradient norm before its limit (grad_norm, the updates'
    mean, and grad_norm_max: --max-grad-norm keeps a spike out of the update, not out of the log),
    the learner's entropy, and how far the policy has drifted from the one that sampled: the ratio's
    mean / min / max, the share of tokens where each side of the objective's clip binds (clip_frac:
    either; of the high side's, the share below p 0.2: clip_high_lowp_frac), the approximate KL to
    pi_old (verl's ppo_kl: mean of old_logp - logp), the spread of log pi / pi_old over the tokens
    and over the answers' means (logratio_std_token, _seq), with off-policy masking the share of
    answers it dropped (the field's masks: the share of tokens each dropped, loss.dropped), the mean importance
    weight the policy gradient was multiplied by (is_weight_mean: --tis-cap's, VESPO's), the largest over the
    smallest weight a token's loss has in the mean (token_weight_spread: the longest answer over the shortest
    under seq_mean, 1 under token_mean), and with --exact-kl (kl_exact, a pair: stats.exact_kl) the KL term's exact
    value and its estimator's gradient bias. Given adv (b,) and sampler_logp (b, T): the stale negatives, what the
    dual clip and off-policy masking act on. loss: grpo.Loss; the rest (b, T), as grpo_step holds them."""
    for name, value in loss.terms.items():
        stats.mean(name, value)
    stats.mean("grad_norm", grad_norm)
    stats.max("grad_norm_max", grad_norm)
    m, r = loss_mask.bool(), loss.ratio.expand_as(logp)  # (B, T) each
    low, high = loss.clipped_low.expand_as(m), loss.clipped_high.expand_as(m)  # (B, T) each
    stats.mean("ratio_mean", r, m)
    stats.min("ratio_min", r, m, default=1.0)
    stats.max("ratio_max", r, m, default=1.0)
    stats.mean("clip_frac_low", low, m)
    stats.mean("clip_frac_high", high, m)
    stats.mean("clip_frac", low | high, m)
    # of the tokens the high clip stops, the share pi_old gave less than 0.2: DAPO's Fig. 3a finds
    # them all there, the rare tokens clip-higher exists for
    stats.mean("clip_high_lowp_frac", old_logp < math.log(0.2), high & m, default=None)
    stats.mean("clip_high_p_mean", old_logp.exp(), high & m, default=None)  # their mean probability (DAPO's Fig. 3a)
    stats.mean("ppo_kl", old_logp - logp, m)
    # the ratio's noise, per token and per answer (GSPO's length-normalised log-ratio): what a
    # token-level clip sees against what a sequence-level one sees (0 where pi_old is pi itself)
    log_ratio = logp - old_logp  # (b, T)
    has_tokens = m.any(1)  # (b,) answers with a completion token
    stats.std("logratio_std_token", log_ratio[m])
    stats.std("logratio_std_seq", grpo.sequence_mean(log_ratio, m)[has_tokens, 0])
    stats.mean("entropy", entropy, m)
    if adv is not None:
        # stale negatives: the share of the wrong answers' tokens whose ratio passed 3 (where a dual clip
        # c = 3 binds), and each wrong answer's mean log pi_sampler - log pi, the distance from its sampler
        # that --off-policy-mask compares with its delta (field_methods.off_policy_keep)
        neg = (adv < 0)[:, None] & m  # (b, T)
        stats.mean("neg_ratio_above_3", r > 3, neg)
        far = grpo.sequence_mean(sampler_logp - logp, m)[:, 0]  # (b,)
        stats.mean("neg_sampler_kl", far, (adv < 0) & has_tokens)
        # the answers --off-policy-mask would drop at the book's delta 0.1, whether or not it is on
        stats.mean("neg_far_frac", (adv < 0) & (far > 0.1))
    if loss.kept is not None:
        stats.mean("off_policy_masked_frac", 1 - loss.kept)
    for name, dropped in loss.dropped.items():  # the field's masks (--rejection, IcePop's): the share they took out
        stats.mean(name, dropped.expand_as(m), m)
    if loss.weight is not None:
        stats.mean("is_weight_mean", loss.weight.expand_as(m), m)
    weights = loss.token_weights[m]  # (n,)
    stats.mean("token_weight_spread", weights.max() / weights.min() if weights.numel() else 1.0)
    if kl_exact is not None:  # what the KL term estimates, the estimate's relative gap to it, its gradient's bias
        exact, grad_bias = kl_exact
        stats.mean("kl_exact", exact)
        stats.mean("kl_rel_gap", (loss.terms["kl"] - exact) / exact.clamp(min=1e-12))
        if grad_bias is not None:
            stats.mean("kl_grad_bias", grad_bias)


@torch.no_grad()
def think_stats(stats, loss, is_think, loss_mask, adv):
    """The rare token that opens a reasoned answer: of the <think> tokens (is_think, (b, T)) of answers with A > 0,
    the share whose ratio the objective's clip stops above (think_clip_frac): the tokens whose gradient CISPO's
    authors found clipped away after the first update. loss: grpo.Loss; adv (b,)."""
    think = is_think & loss_mask.bool() & (adv > 0)[:, None]  # (b, T)
    stats.mean("think_clip_frac", loss.clipped_high.expand_as(think), think, default=None)


@torch.no_grad()
def batch_stats(stats, batch, adv, zero_std, old_logp, loss_mask, G, weights=None):
    """Record a sampled batch (rollouts.Rollouts) of groups of G: rewards (every term
    rewards.score returns), advantages, lengths (of the right and the wrong answers too),
    the groups whose rewards are all equal (zero std: no signal), and the sampler-learner gap
    with what the policy gradient makes of it (pg_k1). adv (B,), zero_std (n_groups sampled,
    dynamic sampling's dropped ones too), old_logp and loss_mask (B, T)."""
    for name, r in batch.rewards.items():
        stats.mean("reward" if name == "total" else "reward_" + name, r)
    stats.std("reward_std", batch.rewards["total"])
    stats.mean("adv_mean", adv)
    stats.std("adv_std", adv)
    stats.mean("zero_std_frac", zero_std)
    r = batch.rewards["total"].view(-1, G)  # (n_groups, G)
    signal = (r != r[:, :1]).any(1)  # (n_groups,) the groups whose rewards are not all equal
    stats.count("signal_groups", signal)  # the trained groups whose advantages are not all 0 (GRPO's)
    # what a baseline makes of the rewards (--baseline): over the groups with a signal, the advantages' size against
    # the rewards' own distance from their group's mean (GRPO: 1 / the group's std; Dr. GRPO 1; RLOO G / (G - 1));
    # and the size of the advantages all-equal groups get (GRPO's 0; REINFORCE++'s batch baseline gives them one)
    in_signal = signal.repeat_interleave(G)  # (B,)
    centred = (r - r.mean(1, keepdim=True)).view(-1)  # (B,)
    stats.ratio("adv_to_centred", adv.abs() * in_signal, centred.abs())
    stats.mean("equal_groups_adv", adv.abs(), ~in_signal, default=None)
    # how much of the advantage the correctness reward still sets, beside a dense term (GDPO); and GDPO's "advantage
    # collapse": the groups in which two answers whose paid terms differ (weights: rewards.term_weights) sum to
    # one total, so that GRPO gives them one advantage
    stats.corr("adv_correct_corr", adv, batch.rewards["correct"], torch.ones_like(adv, dtype=torch.bool))
    if weights is not None:
        differ_tie = tied_pairs(batch.rewards, weights, G)  # (n_groups, G, G)
        stats.mean("reward_collapse_frac", differ_tie.flatten(1).any(1))
        # what the advantages make of such a pair: GRPO gives both one advantage (0 apart), GDPO tells them apart
        A = adv.view(-1, G)  # (n_groups, G)
        stats.mean("tied_adv_gap", (A[:, :, None] - A[:, None, :]).abs(), differ_tie, default=None)
    lengths = batch.loss_mask.sum(1)  # (B,)
    stats.mean("resp_len", lengths)
    stats.max("resp_len_max", lengths)
    stats.mean("truncated_frac", batch.truncated)
    correct = batch.rewards["correct"] > 0  # (B,)
    stats.mean("resp_len_correct", lengths, correct, default=None)  # long wrong answers feed pg_k1
    stats.mean("resp_len_wrong", lengths, ~correct, default=None)
    if "format_paid" in batch.rewards:  # the format bonus paid to wrong answers (--gated pays it to right ones only)
        stats.mean("format_paid_wrong", batch.rewards["format_paid"], ~correct, default=None)
    stats.count("n_tokens", batch.mask)
    # The sampler and the learner should describe one distribution; with top-p / top-k or a
    # learner temperature of its own they do not. Logged whether or not --tis-cap corrects for
    # it: the gap, the uncapped weight pi_old / pi_sampler, and the sampler's own entropy (the
    # learner's is "entropy"): a learner that flattens while the sampler hides it.
    m = loss_mask.bool()
    gap = old_logp - batch.sampler_logp  # (B, T) log w, w = pi_old / pi_sampler of each sampled token
    w = gap.exp()  # (B, T) the TIS weight before its cap (the sampler drew the token: w < 1 / pi_sampler)
    stats.mean("sampler_gap", gap.abs(), m)
    stats.min("tis_weight_min", w, m, default=1.0)
    stats.mean("tis_weight_mean", w, m, default=1.0)
    stats.max("tis_weight_max", w, m, default=1.0)
    stats.mean("tis_weight_above_2", w > 2, m)  # the tokens --tis-cap 2 would cap, whether or not it is on
    stats.mean("sampler_entropy", batch.sampler_entropy, m)
    # ... and as verl and TRL log it: KL(sampler || learner) per token by k1 (a signed mean, whose
    # terms can cancel) and by k3 (each term >= 0); the chi^2 of the token weights, E[w^2] - 1; the
    # effective sample size of the answers' weights (the product of their tokens'), a fraction of
    # B; each answer's largest token gap; and how the two log-probs correlate over the tokens
    stats.mean("sampler_kl_k1", -gap, m)
    stats.mean("sampler_kl_k3", w - 1 - gap, m)
    stats.mean("tis_chi2", w * w - 1, m)
    stats.ess("tis_ess", (gap * m).sum(1))
    has_tokens = m.any(1)  # (B,)
    stats.mean("sampler_gap_max", gap.abs().masked_fill(~m, 0).amax(1), has_tokens)
    stats.corr("sampler_logp_corr", old_logp, batch.sampler_logp, m)
    push, mismatch = pg_as_k1(adv, batch.sampler_logp, old_logp, m)  # (B,) each
    stats.mean("mismatch", mismatch)
    stats.ratio("pg_k1", push, mismatch, MIN_MISMATCH)


def tied_pairs(terms, weights, G):
    """(n_groups, G, G) bool: the pairs of answers of a group whose paid terms differ (a term of weight > 0) while
    their totals are equal: GDPO's advantage collapse, (1, 0) and (0, 1) at equal weights. terms: name -> (B,)."""
    paid = torch.stack([terms[k] for k, w in weights.items() if w != 0], 1)  # (B, terms paid)
    paid = paid.view(-1, G, paid.shape[1])  # (n_groups, G, terms paid)
    differ = (paid[:, :, None] != paid[:, None, :]).any(-1)  # (n_groups, G, G): the two answers' paid terms differ
    total = terms["total"].view(-1, G)  # (n_groups, G)
    return differ & (total[:, :, None] == total[:, None, :])


MIN_MISMATCH = 1e-3  # nats per answer: below it the sampler is the learner, and pg_k1 is a ratio of noises


def pg_as_k1(adv, sampler_logp, old_logp, mask):
    """The policy gradient's own naive KL: (push, mismatch), each (B,), summed as pg_k1.

    Answers drawn from a sampler q that is not the learner pi (the book samples at T 0.8 with
    top-p 0.9 and scores at T 1): descending on -A_i log pi(y_i) then does, besides
    reinforcing, what the book's k1 term beta * log pi(y_i) does. At each token the score
    log pi(y) averages, over y ~ q, to a push of pi towards q, whose size grows with how
    far q is from pi there; a negative advantage reverses it, flattening pi away from the
    sharper q. With M_i = sum_t (log q - log pi)(y_t), answer i's sampled mismatch, the
    policy gradient acts as a k1 with
        pg_k1 = -sum_i A_i M_i / sum_i M_i
    > 0 when the wrong answers carry more of the mismatch than the right ones (long wrong
    answers, as in the book's 7_3 log: it flattens, as the book's KL does), < 0 when the
    right ones do (it sharpens). EXPERIMENTS.md (lesson 3) sets it beside the book's k1.
    """
    mismatch = ((sampler_logp - old_logp) * mask).sum(1)  # (B,)
    return -adv * mismatch, mismatch


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

    def __init__(self, device="cpu"):
        self.device = torch.device(device)  # where the parts are kept: the policy's (one all-reduce, no copies)
        self.n_updates = 0  # updates recorded so far; a statistic is kept per update
        self.sums = {}  # (name, update) -> (kind, float64 tensor of parts, default if no rank has any)
        #              kind: "mean", "std", "count", "ess", "corr", or ("ratio", min_mean_den)
        self.maxima = {}  # name -> (sign, this rank's max so far as a 0-d float64 tensor, default)

    def next_update(self):
        self.n_updates += 1

    def _add(self, name, kind, parts, default=0.0):
        parts = torch.stack([torch.as_tensor(p, device=self.device).detach().double() for p in parts])
        self.sums[name, self.n_updates] = (kind, parts, default)

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

    def ess(self, name, log_w):
        """The effective sample size of weights w = exp(log_w) (1-d), as a fraction of their
        number: (sum w)^2 / (n sum w^2), 1 when all are equal, 1/n when one dominates."""
        w = torch.as_tensor(log_w).detach().double().exp()  # in float64, exp overflows only past 709 nats
        self._add(name, "ess", [w.sum(), (w * w).sum(), w.numel()], None)

    def corr(self, name, x, y, mask):
        """Pearson's correlation of x and y over mask (None when either is constant there)."""
        m = mask.bool()
        x, y = torch.as_tensor(x).detach().double()[m], torch.as_tensor(y).detach().double()[m]
        self._add(name, "corr", [x.sum(), y.sum(), (x * x).sum(), (y * y).sum(), (x * y).sum(), x.numel()], None)

    def count(self, name, x):
        """Sum of x, an integer count (e.g. tokens)."""
        self._add(name, "count", [torch.as_tensor(x).sum()])

    def max(self, name, x, mask=None, default=0.0, sign=1.0):
        x = torch.as_tensor(x, device=self.device).detach().double() * sign
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
            per_update.setdefault(name, []).append(_value(kind, p, default))
        # one update: its value as it is (a count stays an int); several: the mean of those that have one
        out = {name: v[0] if len(v) == 1 else mean_of_defined(v) for name, v in per_update.items()}
        for (name, (sign, _, default)), v in zip(self.maxima.items(), maxima):
            out[name] = sign * v if math.isfinite(v) else default
        return out


def mean_of_defined(values):
    """The mean of the values that are not None (a statistic some updates have none of); None if none are."""
    defined = [v for v in values if v is not None]
    return sum(defined) / len(defined) if defined else None


def _value(kind, p, default):
    """A statistic from its parts, summed over the ranks (StepStats.result)."""
    if kind == "count":
        return int(p[0])
    if isinstance(kind, tuple):  # ("ratio", min_mean_den)
        return p[0] / p[1] if p[2] > 0 and p[1] > kind[1] * p[2] else default
    if kind == "mean":
        return p[0] / p[1] if p[1] > 0 else default
    if kind == "std":  # from the sum, the sum of squares and the count
        return math.sqrt(max(p[1] - p[0] ** 2 / p[2], 0.0) / (p[2] - 1)) if p[2] > 1 else default
    if kind == "ess":  # (sum w)^2 / (n sum w^2)
        return p[0] ** 2 / (p[2] * p[1]) if p[1] > 0 else default
    n = p[5]  # corr: from the sums of x, y, x^2, y^2, x y
    cov, var_x, var_y = p[4] - p[0] * p[1] / max(n, 1), p[2] - p[0] ** 2 / max(n, 1), p[3] - p[1] ** 2 / max(n, 1)
    return cov / math.sqrt(var_x * var_y) if n > 1 and var_x > 1e-12 * n and var_y > 1e-12 * n else default
