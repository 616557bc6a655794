"""Every number a run logs, and every number the verdicts read off a run's summary, in words: the one place that
plot.py titles its panels from, lab/lessons.py and lab/report.py name the verdicts' numbers from, and docs/metrics.md
names each logged number from (its column 'in words', written from here). Also which of them are shares, which the
pages print in percent and whose effects they give in points.

    words("clip_frac")        # a logged number: "tokens where PPO's clip binds"
    words("mean_clip_frac")   # its mean over a run, as run_summary keeps it: "tokens where PPO's clip binds, mean..."

docs/metrics.md says at length what each logged number means and where it goes wrong. This file imports nothing.
"""

LOGGED = {  # metrics.jsonl's names -> their words
    # the held-out evaluations
    "eval_acc": "held-out accuracy, greedy", "eval_sampled_acc": "held-out accuracy, sampled as the rollouts are",
    "eval_pass_at_k": "held-out pass@k", "eval_distinct": "different right answers a problem",
    "eval_format": "held-out answers in think format", "eval_pass_at_1": "held-out pass@1, sampled",
    "eval_distinct_share": "different right answers, of the answers sampled", "ln_vocab": "ln V, the most entropy can be",
    # the rewards and the answers
    "reward": "reward", "reward_correct": "right answers' share", "reward_format": "answers in think format",
    "resp_len": "answer length (tokens)", "resp_len_wrong": "wrong answers' length (tokens)",
    "resp_len_correct": "right answers' length (tokens)", "truncated_frac": "answers cut at the token cap",
    "resp_len_max": "the longest answer (tokens)", "reward_std": "the rewards' std", "n_tokens": "tokens in the batch",
    "reward_format_paid": "the format bonus's term", "rollout_lag": "steps since the batch was sampled",
    "reward_collapse_frac": "groups where answers whose terms differ tie", "tied_adv_gap": "|A_i - A_j| of tied answers",
    "format_paid_wrong": "format bonus paid to a wrong answer", "reward_overlong": "overlong penalty an answer",
    # the advantages
    "zero_std_frac": "groups with no reward variance", "signal_groups": "groups with signal a step",
    "adv_mean": "the advantages' mean", "adv_std": "the advantages' std",
    "adv_correct_corr": "the advantage's correlation with correctness",
    "adv_to_centred": "|A| over |r - its group's mean|", "equal_groups_adv": "|A| in groups of equal rewards",
    # the update
    "loss": "loss", "pg_loss": "the loss's policy-gradient part", "entropy_bonus": "the entropy bonus's term",
    "time": "seconds a step", "lr": "learning rate", "tokens_per_s": "tokens a second", "grad_norm": "gradient norm, before its limit", "entropy": "learner's entropy a token (nats)", "sampler_entropy": "sampler's entropy a token (nats)",
    "clip_frac": "tokens where the clip or the region binds", "clip_frac_high": "tokens where the high clip binds",
    "clip_frac_low": "tokens where the low clip binds", "ratio_mean": "mean ratio pi / pi_old",
    "ratio_min": "smallest ratio pi / pi_old",
    "clip_high_lowp_frac": "of the high-clipped tokens, those below p 0.2",
    "clip_high_p_mean": "the high-clipped tokens' mean probability",
    "think_clip_frac": "<think> tokens the clip stops above", "ratio_max": "largest ratio pi / pi_old",
    "ppo_kl": "KL(pi_old || pi), approx.", "grad_norm_max": "largest gradient norm, before its limit",
    "logratio_std_token": "spread of log pi / pi_old, tokens", "logratio_std_seq": "spread of log pi / pi_old, answers",
    "token_weight_spread": "a token's largest weight in the mean over its smallest",
    "entropy_coef": "the entropy bonus's coefficient", "sapo_gate": "SAPO's gate on the gradient",
    # the KL to the reference
    "kl": "KL to the reference, as estimated", "kl_exact": "KL to the reference, exact",
    "kl_rel_gap": "the KL estimate's relative error", "kl_grad_bias": "the KL gradient's bias (--exact-kl)",
    # the sampler and the learner
    "sampler_gap": "|log pi_old - log pi_sampler|", "sampler_gap_max": "an answer's largest |log pi_old - log "
    "pi_sampler|", "sampler_kl_k1": "KL(sampler || pi_old) a token, k1", "sampler_kl_k3": "KL(sampler || pi_old) a "
    "token, k3", "sampler_logp_corr": "log pi_old's correlation with log pi_sampler",
    "tis_weight_min": "smallest weight pi_old / pi_sampler", "tis_chi2": "chi^2 of the weights pi_old / pi_sampler",
    "tis_ess": "the answers' weights' effective sample size, of B", "mismatch": "an answer's log pi_sampler - log "
    "pi_old, summed",
    "tis_weight_max": "largest weight pi_old / pi_sampler", "tis_weight_mean": "mean weight pi_old / pi_sampler",
    "tis_weight_above_2": "tokens whose weight pi_old / pi_sampler passes 2",
    "neg_ratio_above_3": "wrong answers' tokens at ratio > 3", "neg_sampler_kl": "wrong answers' distance from the sampler",
    "neg_far_frac": "answers a mask at 0.1 would drop", "pg_k1": "the policy gradient as a naive KL's beta",
    # what the field's corrections drop or weigh
    "is_masked_frac": "tokens whose importance weight was set to 0", "rejected_frac": "tokens rejected as too far "
    "from the sampler", "off_policy_masked_frac": "answers the off-policy mask drops",
    "is_weight_mean": "the importance weight applied, mean", "low_entropy_frac": "tokens the 80/20 rule leaves "
    "without a gradient",
}

SUMMARY = {  # run_summary's numbers other than a logged number's mean over the run (mean_<name>: `words`)
    "final": "greedy held-out accuracy, end", "sampled_final": "sampled held-out accuracy, end",
    "eval_mean": "greedy held-out accuracy, mean of the evaluations",
    "low_after_peak": "greedy held-out accuracy, lowest at or after its peak",
    "drop": "greedy accuracy's fall from its peak", "sampled_drop": "sampled accuracy's fall from its peak",
    "reward": "training reward, last 10 steps", "reward_kept": "the reward's lowest after its peak, of it",
    "entropy": "the learner's entropy, last 10 steps", "sampler_entropy": "the sampled policy's entropy, last 10 steps",
    "early_entropy": "the learner's entropy, first 10 steps",
    "entropy_peak_share": "the learner's highest 20-step entropy, of ln V",
    "late_resp_len": "answers' length, 2nd half", "late_resp_len_wrong": "wrong answers' length, 2nd half",
    "late_resp_len_correct": "right answers' length, 2nd half", "early_resp_len": "answers' length, first 10 steps",
    "kl_bias": "the KL estimate's bias over the run",
    "kl_low": "the KL term's lowest step", "distinct_final": "different right answers a problem, end", "distinct_fall": "different right answers a problem: their fall from step 0",
    "think_half_step": "steps until half the sampled answers reason", "pass_at_k": "held-out pass@k, end",
    "grad_limited_steps": "steps whose gradient norm passed its limit",
    "grad_norm_peak": "the run's largest gradient norm",
    "early_logratio_std_token": "the token ratio's spread, first 10 steps",
    "early_logratio_std_seq": "the ratio's spread an answer, first 10 steps",
    "early_reward_collapse_frac": "groups where answers whose terms differ tie, first 10 steps",
}

# the numbers that are shares (of answers, tokens, groups, steps, a peak): printed in percent, their effects in points
SHARES = {"final", "sampled_final", "eval_mean", "pass_at_k", "low_after_peak", "drop", "sampled_drop", "eval_low", "reward_kept",
          "kl_bias", "grad_limited_steps", "entropy_peak_share", "early_reward_collapse_frac",
          *(f"mean_{name}" for name in ("truncated_frac", "zero_std_frac", "tis_weight_mean", "clip_high_lowp_frac",
                                        "tis_weight_above_2", "neg_far_frac", "clip_frac", "clip_frac_high",
                                        "is_masked_frac", "rejected_frac", "off_policy_masked_frac", "low_entropy_frac",
                                        "reward_collapse_frac", "think_clip_frac"))}


def words(key):
    """A number's words: a logged one's (LOGGED), a summary's own (SUMMARY), or for mean_<name>, the mean over the
    run of a logged number (its words, 'mean of the run'). KeyError for a number no one has named."""
    if key in SUMMARY:
        return SUMMARY[key]
    if key in LOGGED:
        return LOGGED[key]
    if key.startswith("mean_") and key[5:] in LOGGED:
        return f"{LOGGED[key[5:]]}, mean of the run"
    raise KeyError(key)
