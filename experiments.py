"""laptop-grpo's experiments: the chapter's lessons and GRPO's variants, one command each, several seeds.

    python experiments.py --list                      # each experiment and its exact train.py flags
    python experiments.py clip                        # one experiment, seed 0 -> runs/exp/clip/seed0
    python experiments.py naive_kl --seeds 0,1,2 --jobs 2   # a lesson: its experiments, 3 seeds, 2 at a time
    python experiments.py all --seeds 0,1,2 --jobs 2  # the whole suite, then figures and table
    python experiments.py table --write EXPERIMENTS.md   # re-make figures/, write the table into the file

Each experiment is a list of train.py flags on top of COMMON (a flag given again in the
experiment replaces COMMON's), run as `python train.py ...` in a subprocess, so what
--list prints is exactly what you would type. `--jobs 2` runs two runs side by side, one
CPU thread each; `--nproc 2` runs each one under torchrun on two processes instead. Each
question gets one figure (COMPARISONS), drawn by plot.py as the mean over seeds with a
min..max band. The table is computed from the run folders, never typed: mean +- std
over seeds, then each lesson (LESSONS) checked seed by seed, each fix by a stated margin
(FIXES), with the step at which each metric first moved (`first_moves`).

The lessons run the book's own algorithm (`--recipe book`, one prompt per step, 500
steps as the chapter's runs); the comparisons of GRPO's variants run our default
(16 prompts per step, 100 steps).
"""
import argparse
import math
import os
import subprocess
import sys
import time

import plot

COMMON = ["--steps", "100", "--eval-every", "10"]
BOOK_LENGTH = ["--steps", "500", "--eval-every", "50"]  # as long as the book's runs
BOOK = ["--recipe", "book", *BOOK_LENGTH]  # the book's regime
# the runaway's task: three searches in four, whose failures run long, from a warm start that keeps a
# base model's tail (sft.py --label-smoothing 0.2); evaluated on the chains of medium, as everything else here
SEARCH = ["--level", "medium_search", "--eval-level", "medium", "--init", "checkpoints/warmstart_search.pt"]
RUNAWAY = [*BOOK, *SEARCH, "--eval-sampled"]  # the book's regime on it, sampled held-out answers scored too
# reasoning that pays but is rare: 0.7% of the warm start's sampled answers open <think> (its reasoned answers are
# 78% right, its direct ones 27%), and 16 updates a rollout, each answer seen in 8 of them (DAPO, MiniMax-M1: 16)
RARE = ["--init", "checkpoints/warmstart_rare.pt", "--mu", "8", "--minibatches", "2", "--steps", "30"]
# stale negatives: an asynchronous trainer's lag, 4 steps, at 3x the default learning rate, so the answers a step
# trains on were sampled by a policy 4 updates of 3e-4 back
LAG = ["--rollout-lag", "4", "--lr", "3e-4", "--steps", "60"]
# diversity: inequalities with 2-6 right digits (tasks.py), from a warm start whose 16 samples of a held-out problem
# give 3.1 different right digits; 16 updates a rollout settle each problem on fewer. pass@8 from 16 answers a problem
# and the different right answers among them (--eval-pass-n) at each evaluation
MANY = ["--level", "medium_many", "--eval-level", "many", "--init", "checkpoints/warmstart_many.pt", "--mu", "4",
        "--minibatches", "4", "--steps", "40", "--eval-every", "20", "--eval-pass-k", "8", "--eval-pass-n", "16"]
KL_REUSE = ["--kl", "0.5", "--mu", "4", "--minibatches", "4", "--exact-kl"]  # a strong KL on pi_old's samples, and
# its exact value beside it
EXPERIMENTS = {  # name -> (train.py flags on top of COMMON, what it is)
    # our default regime: GRPO's variants, each against the baseline
    "baseline": (["--clip", "inf", "--mu", "1", "--kl", "0"], "GRPO without clipping, one update per batch, no KL"),
    "clip": (["--clip", "0.2", "--mu", "2"], "the default: clipped ratio, eps 0.2, two updates per batch"),
    "kl_k3": (["--kl", "1.0", "--kl-estimator", "k3"], "KL to the warm start, k3 per token, beta 1"),
    "kl_naive": (["--kl", "1.0", "--kl-estimator", "k1", "--kl-level", "sequence"],
                 "the book's naive KL (k1 on summed log-probs, beta 1), sampler = learner"),
    "format": (["--format-weight", "0.5"], "reward = correct + 0.5 * format"),
    "format_gated": (["--format-weight", "0.5", "--gated"], "format bonus only for correct answers"),
    "format_gdpo": (["--format-weight", "0.5", "--reward-norm", "norm_then_sum"],
                    "format bonus 0.5, each reward term normalised in its group first (GDPO)"),
    "dapo": (["--recipe", "dapo"], "DAPO: clip-higher, token-mean loss, dynamic sampling, overlong penalty"),
    "drgrpo": (["--recipe", "drgrpo"], "Dr. GRPO: no std normalisation, constant normaliser"),
    "gspo": (["--recipe", "gspo"], "GSPO: length-normalised sequence ratio, eps 3e-4 / 4e-4"),
    "cispo": (["--recipe", "cispo"], "CISPO: clipped importance weights, every token keeps a gradient"),
    "topp": (["--top-p", "0.9"], "nucleus sampling: the sampler drops the tail the learner still has"),
    "topp_tis": (["--top-p", "0.9", "--tis-cap", "2"], "... with truncated importance sampling, C = 2"),
    "topp_keepmask": (["--top-p", "0.9", "--keep-sampling-mask"], "... with the learner on the sampler's support"),
    "entropy_bonus": (["--entropy-coef", "0.02"], "an entropy bonus, alpha 0.02"),
    # a stress regime for what the book regime does not show here: the format bonus farmed
    "format_tight": (["--format-weight", "1.0", "--max-new-tokens", "26", "--steps", "200", "--eval-every", "20"],
                     "a format bonus worth a right answer; 26 tokens do not fit every 3-step reasoning"),
    "format_tight_gated": (["--format-weight", "1.0", "--max-new-tokens", "26", "--steps", "200", "--eval-every", "20",
                            "--gated"], "the same bonus paid only for right answers"),
    # the book's regime (grpo.RECIPES["book"]): the chapter's lessons
    "book_kl": (BOOK, "the book's 7_5_plus_kl.py: sampled at T 0.8 / top-p 0.9, scored at T 1, k1 KL"),
    "book_kl_beta002": ([*BOOK, "--kl", "0.02"], "... at beta 0.02, the chapter's original GRPO's"),
    "book_kl_matched": ([*BOOK, "--learner-temperature", "0.8"], "... the learner at the sampler's temperature"),
    "book_kl_keepmask": ([*BOOK, "--learner-temperature", "0.8", "--keep-sampling-mask"],
                         "... and on the sampler's top-p support: learner = sampler"),
    "book_kl_k3": ([*BOOK, "--kl-estimator", "k3", "--kl-level", "token"], "... with k3 per token instead of k1"),
    "book_kl_onpolicy": ([*BOOK, "--mu", "1"], "the book's original GRPO: one update per step, k1 KL"),
    "book_nokl": ([*BOOK, "--kl", "0"], "the book's 7_4_plus_clip_ratio.py: no KL"),
    "book_onpolicy": ([*BOOK, "--kl", "0", "--mu", "1"], "the book's 7_3_plus_tracking.py: one update, no KL, no clip"),
    "book_noclip": ([*BOOK, "--kl", "0", "--mu", "4", "--clip", "inf"],
                    "4 inner epochs sampled from the frozen copy, no clipping: far off-policy"),
    "book_clip10": ([*BOOK, "--kl", "0", "--mu", "4"], "... with the book's own clip (eps 10, the torch.where form)"),
    "book_ppo_clip": ([*BOOK, "--kl", "0", "--mu", "4", "--objective", "ppo", "--ratio-level", "token", "--clip", "0.2"],
                      "... with PPO's clip at 0.2 per token instead"),
    "book_token_noclip": ([*BOOK, "--kl", "0", "--mu", "4", "--objective", "ppo", "--ratio-level", "token", "--clip", "inf"],
                          "... the ratio per token, but no clip: which of the two changes rescues"),
    # the book's 7_7_improvements/ scripts: its algorithm plus the closing list's items (config.RECIPES)
    "olmo3": (["--recipe", "olmo3", *BOOK_LENGTH], "the book's olmo3_style.py: 7_5 with items 1-7"),
    "deepseek_v32": (["--recipe", "deepseek_v32", *BOOK_LENGTH], "the book's deepseek_v32_style.py: 7_5 with items 8-12"),
    "book_format": ([*BOOK, "--kl", "0", "--mu", "1", "--format-check", "book", "--format-weight", "1"],
                    "the book's 7_6_plus_format_reward.py: <think> before </think> is worth a right answer"),
    "book_format_gated": ([*BOOK, "--kl", "0", "--mu", "1", "--format-check", "book", "--format-weight", "1", "--gated"],
                          "... the bonus paid only for right answers"),
    # the runaway (RUNAWAY): the book's 7_3 blows up; what removes it
    "book_runaway": ([*RUNAWAY, "--kl", "0", "--mu", "1"],
                     "the book's 7_3_plus_tracking.py (one update, no KL, no clip) on the runaway's task"),
    "book_runaway_keepmask": ([*RUNAWAY, "--kl", "0", "--mu", "1", "--learner-temperature", "0.8",
                               "--keep-sampling-mask"], "... the learner on the sampler's T 0.8 and top-p support"),
    "book_runaway_T1": ([*RUNAWAY, "--kl", "0", "--mu", "1", "--temperature", "1", "--top-p", "1"],
                        "... the sampler at the learner's T 1, no top-p"),
    "book_runaway_chains": ([*RUNAWAY, "--kl", "0", "--mu", "1", "--level", "medium"],
                            "... on chains alone: no long failed searches"),
    "book_runaway_token": ([*RUNAWAY, "--kl", "0", "--mu", "1", "--ratio-level", "token", "--objective", "ppo"],
                           "... each answer's log-probs averaged over its tokens, not summed"),
    "book_runaway_k3": ([*RUNAWAY, "--kl", "0.1", "--kl-estimator", "k3", "--kl-level", "token", "--mu", "1"],
                        "... with a KL to the warm start, k3 per token, beta 0.1"),
    "book_runaway_lowlr": ([*RUNAWAY, "--kl", "0", "--mu", "1", "--lr", "3e-5"], "... at lr 3e-5"),
    "book_runaway_noclip": ([*RUNAWAY, "--kl", "0", "--mu", "4", "--clip", "inf"],
                            "4 inner epochs from the frozen copy, no clip, on the runaway's task"),
    "book_runaway_ppo_clip": ([*RUNAWAY, "--kl", "0", "--mu", "4", "--objective", "ppo", "--ratio-level", "token",
                               "--clip", "0.2"], "... with PPO's clip at 0.2 per token"),
    "book_runaway_format": ([*RUNAWAY, "--kl", "0", "--mu", "1", "--format-check", "book", "--format-weight", "1"],
                            "the book's 7_6 format bonus on the runaway's task"),
    "book_runaway_format_gated": ([*RUNAWAY, "--kl", "0", "--mu", "1", "--format-check", "book", "--format-weight",
                                   "1", "--gated"], "... the bonus paid only for right answers"),
    # the closing list's fixes (FIXES): each where its failure happens, beside the same run without it
    "ds4": (["--prompts-per-step", "4"], "the default at 4 prompts a step: whole steps of groups with no signal"),
    "ds4_dynamic": (["--prompts-per-step", "4", "--dynamic-sampling"], "... with dynamic sampling"),
    "search": (SEARCH, "the default on the runaway's task: failed searches run long"),
    "search_token": ([*SEARCH, "--loss-agg", "token_mean"], "... with a token-level loss"),
    "search_drgrpo": ([*SEARCH, "--loss-agg", "constant", "--adv-norm", "none"],
                      "... with Dr. GRPO's constant normaliser and no std"),
    "search_dropout": ([*SEARCH, "--dropout", "0.1", "--steps", "60"], "... with dropout 0.1 in the learner's "
                       "forwards and none in the sampler's (a misconfiguration TRL turns dropout off for): a noisy "
                       "token ratio; 60 steps, by which the sampler's entropy has parted from GSPO's in every seed"),
    "search_dropout_gspo": ([*SEARCH, "--dropout", "0.1", "--steps", "60", "--ratio-level", "gspo", "--clip",
                             "3e-4", "--clip-high", "4e-4"],
                            "... and GSPO's length-normalised sequence ratio, at its clip range"),
    "book_runaway_overlong": ([*RUNAWAY, "--kl", "0", "--mu", "1", "--overlong-cache", "8"],
                              "the runaway with DAPO's overlong penalty over the last 8 tokens"),
    "book_runaway_keepmask_T1": ([*RUNAWAY, "--kl", "0", "--mu", "1", "--keep-sampling-mask"],
                                 "the runaway with the learner on the sampler's support (its T stays 1)"),
    "book_runaway_temperature": ([*RUNAWAY, "--kl", "0", "--mu", "1", "--top-p", "1"],
                                 "the runaway with the sampler at T 0.8 and no top-p: every token stays reachable"),
    "book_runaway_temperature_tis": ([*RUNAWAY, "--kl", "0", "--mu", "1", "--top-p", "1", "--tis-cap", "2"],
                                     "... with truncated importance sampling, C = 2"),
    "kl_reuse": ([*KL_REUSE, "--loss-agg", "token_mean", "--steps", "50"],
                 "a strong k3 KL on 16 updates a rollout, its exact value logged beside (token mean: see "
                 "kl_reuse_seq); 50 steps"),
    "kl_reuse_reweight": ([*KL_REUSE, "--loss-agg", "token_mean", "--steps", "50", "--kl-reweight"],
                          "... with the KL re-weighted by pi / pi_old"),
    "kl_reuse_seq": (KL_REUSE, "the same under the default seq_mean, whose 1 / length weights bias the estimate on "
                               "their own"),
    "kl_reuse_seq_reweight": ([*KL_REUSE, "--kl-reweight"], "... with the KL re-weighted"),
    "rare": (RARE, "a warm start that seldom reasons, 16 updates a rollout: PPO's clip stops the rare <think> early"),
    "rare_clip_higher": ([*RARE, "--clip-high", "0.28"], "... with clip-higher, eps_high 0.28 (DAPO)"),
    "rare_cispo": ([*RARE, "--objective", "cispo", "--clip", "inf", "--clip-high", "0.28"],
                   "... with CISPO's clipped weights, which keep every token's gradient (MiniMax-M1)"),
    "rare_format": ([*RARE, "--format-weight", "0.1"], "... with a format bonus of 0.1 for reasoning, the rarer term"),
    "rare_format_gdpo": ([*RARE, "--format-weight", "0.1", "--reward-norm", "norm_then_sum"],
                         "... each reward term normalised in its group before the sum (GDPO)"),
    "lag": (LAG, "the default trained on rollouts 4 steps old at lr 3e-4: stale wrong answers made likelier"),
    "lag_dual_clip": ([*LAG, "--dual-clip", "3"], "... with the dual clip, c = 3 (verl's clip_ratio_c)"),
    "lag_masked": ([*LAG, "--off-policy-mask", "0.1"], "... with off-policy sequence masking, delta 0.1 (the book's)"),
    "many": (MANY, "inequalities with several right digits, 16 updates a rollout: each problem settles on fewer"),
    "many_entropy": ([*MANY, "--entropy-coef", "0.03"], "... with an entropy bonus, alpha 0.03"),
    "many_klcov": ([*MANY, "--clip", "inf", "--kl-cov", "0.02"], "... with KL-Cov instead of the clip (Cui et al.), "
                   "k 0.02: the tokens that drive the entropy down held back"),
    "default_passk": (["--eval-pass-k", "8"], "the default, with pass@8 at each evaluation"),
    "entropy_bonus_01": (["--eval-pass-k", "8", "--entropy-coef", "0.1"], "... with an entropy bonus, alpha 0.1"),
}
COMPARISONS = {  # figure name -> (experiments, metrics to draw; a+b: both in one subplot, for at most 2 runs)
    # at most 4 experiments a figure, so that each curve can be followed
    "clip": (["baseline", "clip"], "eval_acc,reward,entropy,clip_frac"),
    "kl": (["baseline", "kl_k3", "kl_naive"], "eval_acc,reward,kl,entropy,resp_len"),
    "format": (["baseline", "format", "format_gated", "format_gdpo"], "eval_acc,reward_correct,reward_format,resp_len"),
    "dapo_drgrpo": (["baseline", "dapo", "drgrpo"], "eval_acc,reward,entropy,resp_len,clip_frac,zero_std_frac"),
    "gspo_cispo": (["baseline", "gspo", "cispo"], "eval_acc,reward,entropy,resp_len,clip_frac,ratio_max"),
    "sampler": (["baseline", "topp", "topp_tis", "topp_keepmask"], "eval_acc,sampler_gap,tis_weight_max,entropy"),
    "entropy": (["baseline", "entropy_bonus"], "eval_acc,entropy,resp_len,reward"),
    "recipes": (["book_nokl", "olmo3", "deepseek_v32"], "eval_acc,reward,entropy,resp_len,clip_frac,zero_std_frac"),
    "format_tight": (["format_tight", "format_tight_gated"],
                     "eval_acc,reward_correct,reward_format,resp_len,truncated_frac,entropy"),
    # lesson 1: the book's naive KL against k3 and a smaller beta, then against what removes the mismatch
    "book_kl": (["book_kl", "book_kl_k3", "book_kl_beta002"], "eval_acc,kl,entropy,sampler_entropy,sampler_gap,resp_len"),
    "book_kl_sampler": (["book_kl", "book_kl_matched", "book_kl_keepmask", "book_kl_onpolicy"],
                        "eval_acc,kl,entropy,sampler_entropy,sampler_gap,resp_len"),
    # lesson 2: the book's epochs with and without its clip, then which change rescues 4 epochs
    "book_clip": (["book_onpolicy", "book_nokl", "book_noclip", "book_clip10"],
                  "eval_acc,ratio_max,clip_frac,entropy,ppo_kl,resp_len"),
    "book_clip_ppo": (["book_noclip", "book_token_noclip", "book_ppo_clip"],
                      "eval_acc,ratio_max,clip_frac,entropy,ppo_kl,resp_len"),
    # lesson 3: the format bonus on the runaway's task: the two rewards and the two accuracies; then on chains
    "book_format": (["book_runaway_format", "book_runaway_format_gated"],
                    "reward,eval_sampled_acc,reward_format,eval_acc,entropy,truncated_frac"),
    "book_format_chains": (["book_format", "book_format_gated", "book_onpolicy"],
                           "eval_acc,reward_correct,reward_format,entropy,resp_len,truncated_frac"),
    # lesson 4: the runaway, its fix and its cause (no long failed searches); then what else was tried
    "book_runaway": (["book_runaway", "book_runaway_keepmask", "book_runaway_chains"],
                     "eval_acc,eval_sampled_acc,entropy,sampler_entropy,pg_k1,truncated_frac"),
    "book_runaway_fixes": (["book_runaway", "book_runaway_k3", "book_runaway_lowlr", "book_runaway_token"],
                           "eval_acc,eval_sampled_acc,entropy,sampler_entropy"),
    # the closing list's fixes, each beside the same run without it (FIXES)
    "fixes_runaway": (["book_runaway", "book_runaway_overlong", "book_runaway_keepmask_T1"],
                      "eval_sampled_acc,entropy,truncated_frac,resp_len_wrong,tis_weight_mean"),
    "fixes_length": (["search", "search_token", "search_drgrpo"], "resp_len_wrong,truncated_frac,entropy,eval_acc"),
    "fixes_tis": (["book_runaway_temperature", "book_runaway_temperature_tis"],
                  "eval_acc,eval_sampled_acc,entropy,tis_weight_max,sampler_kl_k3"),
    "fixes_dynamic": (["ds4", "ds4_dynamic"], "signal_groups,zero_std_frac,eval_acc"),
    "fixes_entropy": (["many", "many_entropy", "many_klcov"], "eval_distinct,eval_pass_at_k,entropy,eval_acc"),
    "entropy_passk": (["default_passk", "entropy_bonus_01"], "entropy,eval_pass_at_k,eval_acc"),
    "fixes_kl": (["kl_reuse", "kl_reuse_reweight"], "kl_rel_gap,kl+kl_exact,ppo_kl,eval_acc,entropy"),
    "fixes_lag": (["lag", "lag_dual_clip", "lag_masked"], "grad_norm_max,neg_ratio_above_3,neg_sampler_kl,eval_acc"),
    "fixes_rare": (["rare", "rare_clip_higher", "rare_cispo"], "reward_format,clip_frac_high,clip_high_lowp_frac,eval_acc"),
    "fixes_gdpo": (["rare_format", "rare_format_gdpo"], "reward_format,adv_correct_corr,reward_correct,eval_acc"),
    "fixes_gspo": (["search_dropout", "search_dropout_gspo"],
                   "sampler_entropy,logratio_std_token+logratio_std_seq,reward,eval_acc"),
    "book_runaway_clip_format": (["book_runaway_noclip", "book_runaway_ppo_clip", "book_runaway_format",
                                  "book_runaway_format_gated"], "eval_acc,eval_sampled_acc,entropy,reward_format"),
}


def broken_vs_fixed(broken, fixed, points=0.15):
    """The lessons' one test: the broken run's greedy accuracy falls at least `points` from
    its own peak and ends at least `points` below the fixed run's. (15 points: one prompt a
    step is noisy, and runs that do not collapse still drift; EXPERIMENTS.md says how far.)"""
    return broken["peak"] - broken["final"] >= points and fixed["final"] - broken["final"] >= points


def sampled_falls(run, points=0.15):
    """The held-out accuracy of answers drawn as the rollouts draw them falls `points` from its
    peak: what the book's 7_3 log shows of its runaway (its training reward, sampled at T 0.8 and
    top-p 0.9, 0.6-0.9 -> 0.04-0.25), where greedy decoding falls less (46.2% -> 33.0%)."""
    return run["sampled_peak"] is not None and run["sampled_peak"] - run["sampled_final"] >= points


def runs_away(broken, fixed, points=0.15):
    """The runaway by the signs of the book's 7_3 log: the learner's entropy (a 20-step mean)
    reaches half its maximum, ln V, and the sampled held-out accuracy falls `points` from its
    peak and ends `points` below the fix's. Greedy accuracy and the answers at the cap are
    reported beside it, as signs of their own (lesson_tables)."""
    return (broken["entropy_peak"] >= 0.5 * broken["ln_vocab"] and sampled_falls(broken, points)
            and fixed["sampled_final"] is not None and fixed["sampled_final"] - broken["sampled_final"] >= points)


def reward_hides_the_collapse(ungated, gated, points=0.15):
    """The format lesson as the book's two 7_6 runs show it: both runs collapse (sampled accuracy
    falls `points` from its peak), but ungated the format reward (20-step mean) ends above 0.9 and
    the total reward's lowest 50-step mean after its peak stays at or above half that peak (the
    reward a learner watches hides the collapse), while gated it drops below half (it shows it)."""
    return (sampled_falls(ungated, points) and sampled_falls(gated, points) and ungated["reward_format_end"] > 0.9
            and ungated["reward_low_after_peak"] >= 0.5 * ungated["reward_peak50"]
            and gated["reward_low_after_peak"] < 0.5 * gated["reward_peak50"])


LESSONS = {  # lesson -> (experiments, check(their summaries for one seed) -> bool, the claim checked)
    "naive_kl": (["book_kl", "book_kl_k3"], broken_vs_fixed,
                 "with the book's k1 KL on summed log-probs accuracy falls >= 15 points from its peak and ends "
                 ">= 15 below k3 per token"),
    "naive_kl_reuse": (["kl_naive", "kl_k3"], broken_vs_fixed,
                       "the same in our default regime, where the sampler is the learner but each rollout serves "
                       "two updates"),
    "instability": (["book_noclip", "book_ppo_clip"], broken_vs_fixed,
                    "with 4 inner epochs and no clipping accuracy falls >= 15 points from its peak and ends >= 15 "
                    "below PPO's clip at 0.2"),
    "format_exploit": (["book_runaway_format", "book_runaway_format_gated"], reward_hides_the_collapse,
                       "with the book's 7_6 format bonus both runs run away (sampled accuracy falls >= 15 points from "
                       "its peak); ungated the format reward ends above 0.9 and the total reward's lowest 50-step mean "
                       "after its peak stays >= half of it (it hides the collapse); gated it drops below half"),
    "runaway": (["book_runaway", "book_runaway_keepmask"], runs_away,
                "on-policy without KL (the book's 7_3), the learner's entropy reaches half of ln V, and the sampled "
                "held-out accuracy falls >= 15 points from its peak and ends >= 15 below the learner on the "
                "sampler's support"),
    "instability_runaway": (["book_runaway_noclip", "book_runaway_ppo_clip"], broken_vs_fixed,
                            "the instability lesson on the runaway's task"),
    "format_exploit_chains": (["book_format", "book_format_gated"], reward_hides_the_collapse,
                              "the format lesson on chains alone, which do not run away"),
}


def better(key, higher, margin, relative=False):
    """A fix's check: its own metric moved the way the fix is made to move it, by at least
    `margin`: in the metric's own unit, or, relative, as a share of the run without it. Any
    difference at all is not enough: two seeds of the same run differ too."""
    def check(without, with_):
        gain = with_[key] - without[key] if higher else without[key] - with_[key]
        return gain > 0 and gain >= margin * (abs(without[key]) if relative else 1)  # > 0: 2% of 0 asks nothing
    return check


# the closing list (the book's 7_7_improvements: olmo3_style.py items 1-7, deepseek_v32_style.py 8-12) and
# the other named fixes: item -> (its numbers in the book's list, what it fixes, the regime,
# (without, with), its metric in run_summary, "higher" or "lower", the margin (size, "points", "relative" or
# "nats")). Each margin is at least twice the std over seeds 0-2 of the run without the fix (EXPERIMENTS.md
# gives them): in points for a share (an accuracy, the cut share, the KL's relative bias), relative for a
# count or a length, whose scale the regime sets (the prompts a step, the cap), in nats for an entropy
FIXES = {
    "dynamic_sampling": ("1, 2", "groups with no signal", "the default at 4 prompts a step", ("ds4", "ds4_dynamic"),
                         "mean_signal_groups", "higher", (0.03, "relative")),
    "token_mean": ("3", "long wrong answers weighing less per token", "the runaway's task, default settings",
                   ("search", "search_token"), "late_resp_len_wrong", "lower", (0.30, "relative")),
    "drgrpo": ("7", "the same, and the std's weight on easy groups", "the runaway's task, default settings",
               ("search", "search_drgrpo"), "late_resp_len_wrong", "lower", (0.30, "relative")),
    "overlong": ("DAPO", "answers cut at the cap", "the runaway", ("book_runaway", "book_runaway_overlong"),
                 "mean_truncated_frac", "lower", (0.10, "points")),
    "keep_mask": ("11", "a learner with mass where top-p never samples", "the runaway",
                  ("book_runaway", "book_runaway_keepmask_T1"), "sampled_final", "higher", (0.23, "points")),
    "tis": ("6, as a sampler weight", "a sampler that is not the learner", "the runaway at T 0.8 without top-p",
            ("book_runaway_temperature", "book_runaway_temperature_tis"), "drop", "lower", (0.07, "points")),
    "kl_reweight": ("9", "a KL estimated on pi_old's samples", "KL 0.5, 16 updates a rollout, token mean, 50 steps",
                    ("kl_reuse", "kl_reuse_reweight"), "kl_bias", "lower", (0.13, "points")),
    # judged by what it exists for, answers kept diverse, not by the entropy it raises by construction
    "entropy_bonus": ("-", "lost diversity: one right answer kept of several", "inequalities with 2-6 right digits, "
                      "16 updates a rollout", ("many", "many_entropy"), "distinct_final", "higher", (0.14, "relative")),
    "clip_higher": ("5", "a rare token that pays, clipped", "a warm start that seldom reasons, 16 updates a rollout",
                    ("rare", "rare_clip_higher"), "think_half_step", "lower", (0.35, "relative")),
    "cispo": ("-", "a rare token that pays, its gradient dropped", "a warm start that seldom reasons, 16 updates "
              "a rollout", ("rare", "rare_cispo"), "think_half_step", "lower", (0.35, "relative")),
    "gdpo": ("gdpo.py", "a rare reward term drowned by a common one", "a warm start that seldom reasons, 16 updates a "
             "rollout, a format bonus of 0.1", ("rare_format", "rare_format_gdpo"), "think_half_step", "lower",
             (0.25, "relative")),
    "dual_clip": ("-", "stale wrong answers made likelier: an unbounded loss", "the default, rollouts 4 steps old, "
                  "lr 3e-4", ("lag", "lag_dual_clip"), "clipped_steps", "lower", (0.06, "points")),
    "off_policy_mask": ("10", "stale wrong answers far from the policy", "the default, rollouts 4 steps old, lr 3e-4",
                        ("lag", "lag_masked"), "clipped_steps", "lower", (0.06, "points")),
    "gspo": ("-", "a noisy token ratio", "the runaway's task, dropout 0.1 in the learner only, 60 steps",
             ("search_dropout", "search_dropout_gspo"), "sampler_entropy", "lower", (0.1, "nats")),
}
# each fix's gate: a number of the run *without* it that shows its mechanism at work (its run_summary key, and
# what it is), so that a fix that moves nothing can be told from a fix with nothing to act on
GATES = {
    "dynamic_sampling": ("mean_zero_std_frac", "groups with no signal"),
    "token_mean": ("mean_truncated_frac", "answers cut at the cap"),
    "drgrpo": ("mean_truncated_frac", "answers cut at the cap"),
    "overlong": ("mean_truncated_frac", "answers cut at the cap"),
    "keep_mask": ("mean_tis_weight_mean", "the learner's mass on what the sampler can draw"),
    "tis": ("mean_sampler_kl_k3", "KL(sampler || learner) a token"),
    "kl_reweight": ("mean_ppo_kl", "KL(pi_old || pi) an update"),
    "entropy_bonus": ("distinct_fall", "the different right answers a problem: their fall from step 0"),
    "gspo": ("early_logratio_std_token", "the token log-ratio's spread, first 10 steps"),
    "clip_higher": ("mean_clip_high_lowp_frac", "of the high-clipped tokens, the share below p 0.2"),
    "cispo": ("mean_clip_high_lowp_frac", "of the high-clipped tokens, the share below p 0.2"),
    "gdpo": ("mean_adv_correct_corr", "the correctness reward's correlation with the advantage"),
    "dual_clip": ("mean_neg_ratio_above_3", "of the wrong answers' tokens, the share with ratio > 3"),
    "off_policy_mask": ("mean_neg_sampler_kl", "the wrong answers' mean log-ratio to their sampler"),
}
METRICS = {  # run_summary's keys, as the fixes table names them
    "mean_signal_groups": "groups with signal a step", "late_resp_len_wrong": "wrong answers' length, 2nd half",
    "mean_truncated_frac": "cut share", "sampled_final": "sampled held-out accuracy, end",
    "drop": "greedy accuracy's fall from its peak",
    "kl_bias": "KL estimate's bias, \\|mean (estimate - exact) / exact\\| over the run",
    "distinct_final": "different right answers a held-out problem in 16 samples, end",
    "sampler_entropy": "the sampled policy's entropy, last 10 steps",
    "think_half_step": "steps until half the sampled answers reason",
    "clipped_steps": "steps whose largest gradient norm before clipping passed 1 (--max-grad-norm)",
}
PERCENT_METRICS = {"mean_truncated_frac", "sampled_final", "drop", "kl_bias",
                   "clipped_steps", "mean_zero_std_frac", "mean_tis_weight_mean", "mean_clip_high_lowp_frac"}


def margin_text(size, unit):
    if unit == "nats":
        return f"{size:g} nats"
    return f"{size * 100:g} points" if unit == "points" else f"{size:.0%} of the run without it"


LESSONS.update({"fix_" + item: (list(pair), better(key, side == "higher", size, unit == "relative"),
                                f"{fixes}: {METRICS[key]} {side} with it, by at least {margin_text(size, unit)}")
                for item, (_, fixes, _, pair, key, side, (size, unit)) in FIXES.items()})


def merge_flags(*flag_lists):
    """One list of train.py flags, each flag once: a flag given in a later list replaces its
    value from an earlier one, in the earlier one's place (`--steps 100` + `--steps 80` ->
    `--steps 80`). A flag is a `--name` followed by its values, if any."""
    merged = {}
    for flags in flag_lists:
        for token in flags:
            if token.startswith("--"):
                name = token
                merged[name] = []
            else:
                merged[name].append(token)
    return [x for name, values in merged.items() for x in (name, *values)]


def train_flags(name, seed=None, extra=()):
    """The train.py flags of one experiment: COMMON, the experiment's own, then extra."""
    return merge_flags(COMMON, EXPERIMENTS[name][0], [] if seed is None else ["--seed", str(seed)], extra)


def command(name, seed, runs_dir, extra=(), nproc=1):
    # torchrun as `python -m torch.distributed.run`; --standalone: each run finds its own free port
    launch = ["-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(nproc)] if nproc > 1 else []
    return [sys.executable, *launch, "train.py", *train_flags(name, seed, ["--threads", "1", *extra]),
            "--runs-dir", os.path.join(runs_dir, name), "--run-name", f"seed{seed}"]


def run_all(jobs_list, n_jobs):
    """Run the commands, n_jobs at a time; each one's output goes to its run folder's log."""
    pending, running, failed = list(jobs_list), [], []
    while pending or running:
        while pending and len(running) < n_jobs:
            cmd = pending.pop(0)
            log_dir = os.path.join(cmd[cmd.index("--runs-dir") + 1], cmd[cmd.index("--run-name") + 1])
            os.makedirs(log_dir, exist_ok=True)
            print("$ " + " ".join(cmd[1:]), flush=True)
            log = open(os.path.join(log_dir, "train.log"), "w")
            running.append((subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT), cmd, log))
        time.sleep(0.5)
        for job in [j for j in running if j[0].poll() is not None]:
            running.remove(job)
            job[2].close()
            if job[0].returncode != 0:
                failed.append(" ".join(job[1][1:]))
    if failed:
        raise SystemExit("experiments.py: these runs failed (see train.log in their folders):\n  " + "\n  ".join(failed))


def figures(runs_dir, out_dir):
    os.makedirs(out_dir, exist_ok=True)
    for fig, (names, metrics) in COMPARISONS.items():
        dirs = [os.path.join(runs_dir, n) for n in names if plot.seed_folders(os.path.join(runs_dir, n))]
        if dirs:
            subprocess.run([sys.executable, "plot.py", *dirs, "--metrics", metrics,
                            "--out", os.path.join(out_dir, f"exp_{fig}.png")], check=True)


# ---------------------------------------------------------------- the table

def finite(xs):
    return [x for x in xs if x is not None and math.isfinite(x)]


def mean(xs):
    xs = finite(xs)
    return sum(xs) / len(xs) if xs else float("nan")


def run_summary(rows):
    """Numbers of one run: eval accuracy at start / end / peak (and its step), averages of
    the last 10 steps, and the steps at which its metrics first moved."""
    steps = [r for r in rows if r.get("step", 0) > 0]
    evals = [(r["step"], r["eval_acc"]) for r in rows if "eval_acc" in r]
    head, tail = steps[:10], steps[-10:]
    out = {}
    if evals:
        peak_step, peak = max(evals, key=lambda e: e[1])
        out = {"start": evals[0][1], "final": evals[-1][1], "peak": peak, "peak_step": peak_step}
    for key in ("reward", "entropy", "resp_len", "clip_frac", "kl", "reward_format", "sampler_gap", "sampler_entropy"):
        out[key] = mean(r.get(key) for r in tail)
    out["reward_format_start"] = mean(r.get("reward_format") for r in head)
    sampled = [r["eval_sampled_acc"] for r in rows if "eval_sampled_acc" in r]
    out["sampled_peak"], out["sampled_final"] = (max(sampled), sampled[-1]) if sampled else (None, None)
    out["ln_vocab"] = next((r["ln_vocab"] for r in rows if "ln_vocab" in r), float("nan"))
    out["entropy_peak"] = highest_trailing_mean(rows, "entropy")
    # the answers at the cap: the cut share and the wrong answers' length, first 20 steps -> highest 20-step mean
    for key, name in (("truncated_frac", "truncated"), ("resp_len_wrong", "len_wrong")):
        means = trailing_means(rows, key)[1]
        out[name + "_start"] = means[19] if len(means) >= 20 else float("nan")
        out[name + "_peak"] = highest_trailing_mean(rows, key)
    reward50 = trailing_means(rows, "reward", 50)[1][49:]  # the total reward's whole 50-step means
    peak_at = max(range(len(reward50)), key=reward50.__getitem__, default=None)
    out["reward_peak50"] = reward50[peak_at] if reward50 else float("nan")
    out["reward_low_after_peak"] = min(reward50[peak_at:]) if reward50 else float("nan")
    out["reward_format_end"] = mean(r.get("reward_format") for r in steps[-20:])
    out["bonus"] = mean(r["reward"] - r["reward_correct"] for r in steps if plot.is_number(r.get("reward"))
                        and plot.is_number(r.get("reward_correct")))  # what the reward pays beyond correctness
    # each fix's own metric (FIXES): means over the run, or over its second half where a trend builds up
    for key in ("signal_groups", "adv_correct_corr", "truncated_frac", "pg_k1", "sampler_kl_k3", "grad_norm_max",
                "zero_std_frac", "tis_weight_mean", "ppo_kl", "clip_high_lowp_frac", "neg_ratio_above_3",
                "neg_sampler_kl"):  # the fixes' metrics and gates (FIXES, GATES)
        out["mean_" + key] = mean(r.get(key) for r in steps)
    out["early_logratio_std_token"] = mean(r.get("logratio_std_token") for r in head)
    out["late_resp_len_wrong"] = mean(r.get("resp_len_wrong") for r in steps[len(steps) // 2:])
    errors = [(r["kl"] - r["kl_exact"]) / r["kl_exact"] for r in steps
              if plot.is_number(r.get("kl")) and plot.is_number(r.get("kl_exact")) and r["kl_exact"] > 0]
    # the KL term's estimate against its exact value (--exact-kl): its bias over the run (what
    # re-weighting removes), and its error step by step (the bias and the noise together)
    out["kl_bias"] = abs(mean(errors))
    out["kl_error"] = mean(abs(e) for e in errors)
    # diversity (--eval-pass-n): the different right answers a held-out problem's N samples give, at the first
    # and the last evaluation, and their fall between: a policy settling on one right answer a problem
    distinct = [r["eval_distinct"] for r in rows if plot.is_number(r.get("eval_distinct"))]
    out["distinct_start"], out["distinct_final"] = (distinct[0], distinct[-1]) if distinct else (float("nan"),) * 2
    out["distinct_fall"] = out["distinct_start"] - out["distinct_final"]
    # the aha moment: the first step whose 3-step mean of the reasoned share (format check) reaches one half
    think = trailing_means(rows, "reward_format", 3)
    out["think_half_step"] = next((s for s, m in zip(*think) if m >= 0.5), float("nan"))
    out["drop"] = out["peak"] - out["final"] if evals else float("nan")
    # the steps whose largest gradient norm, before clipping, passed the default --max-grad-norm 1: the spikes
    # the clip hides from the update
    spikes = [r["grad_norm_max"] > 1.0 for r in steps if plot.is_number(r.get("grad_norm_max"))]
    out["clipped_steps"] = sum(spikes) / len(spikes) if spikes else float("nan")
    out["minutes"] = steps[-1]["time"] / 60 if steps else float("nan")
    out["moves"] = first_moves(rows)
    return out


def trailing_means(rows, key, window=20):
    """(steps, means): the trailing `window`-step mean of a metric at each step it was logged
    (over fewer steps before the window-th), by plot.moving_average."""
    steps, values = plot.series([r for r in rows if r.get("step", 0) > 0], key)
    return steps.astype(int).tolist(), plot.moving_average(values, window=window).tolist()


def highest_trailing_mean(rows, key, window=20):
    """The highest trailing `window`-step mean of a metric over whole windows (nan: fewer steps)."""
    return max(trailing_means(rows, key, window)[1][window - 1:], default=float("nan"))


MOVERS = [("kl", 2.0), ("entropy", 2.0), ("sampler_gap", 2.0), ("resp_len", 1.5), ("ratio_max", 2.0)]  # (metric, factor)


def first_moves(rows, window=20):
    """{metric: the first step after the accuracy peak at which it moved, or None}, read
    in order they say what moved first once the run had learned: accuracy when an eval is
    10 points below the peak; each of MOVERS when its trailing `window`-step mean first
    reaches `factor` times its trailing mean at the peak (absolute values: k1 can be
    negative)."""
    evals = [(r["step"], r["eval_acc"]) for r in rows if "eval_acc" in r]
    if not evals:
        return {}
    peak_step, peak = max(evals, key=lambda e: e[1])
    out = {"eval_acc": next((s for s, a in evals if s > peak_step and a <= peak - 0.10), None)}
    for key, factor in MOVERS:
        absolute = [{"step": r["step"], key: abs(r[key])} for r in rows if plot.is_number(r.get(key))]
        trailing = list(zip(*trailing_means(absolute, key, window)))  # [(step, mean)]
        at_peak = [m for s, m in trailing if s <= peak_step]
        ref = at_peak[-1] if at_peak else None
        out[key] = next((s for s, m in trailing if s > peak_step and ref and m >= factor * ref), None)
    return out


def mean_std(xs, fmt):
    xs = finite(xs)
    if not xs:
        return "-"
    m = sum(xs) / len(xs)
    if len(xs) == 1:
        return fmt.format(m)
    sd = math.sqrt(sum((x - m) ** 2 for x in xs) / (len(xs) - 1))
    return f"{fmt.format(m)} ± {fmt.format(sd)}"


COLUMNS = [("start", "eval start", "{:.1%}"), ("final", "final", "{:.1%}"), ("peak", "peak", "{:.1%}"),
           ("reward", "reward (last 10)", "{:.3f}"), ("entropy", "entropy", "{:.3f}"),
           ("resp_len", "resp. length", "{:.1f}"), ("clip_frac", "clip frac", "{:.4f}"),
           ("kl", "KL", "{:.4f}"), ("sampler_gap", "sampler gap", "{:.4f}"), ("minutes", "minutes", "{:.1f}")]


def table(runs_dir):
    """Markdown: one row per experiment, mean ± std over its seeds; then each lesson, seed by seed."""
    lines = ["| experiment | seeds | " + " | ".join(c[1] for c in COLUMNS) + " |",
             "|---|---|" + "---|" * len(COLUMNS)]
    summaries = {}
    for name in EXPERIMENTS:
        dirs = plot.seed_folders(os.path.join(runs_dir, name))
        if not dirs:
            continue
        summaries[name] = {os.path.basename(d): run_summary(plot.read_metrics(os.path.join(d, "metrics.jsonl")))
                           for d in dirs}
        s = list(summaries[name].values())
        lines.append(f"| {name} | {len(s)} | " + " | ".join(mean_std([x.get(k) for x in s], f) for k, _, f in COLUMNS) + " |")
    return "\n".join(lines + fixes_table(summaries) + lesson_tables(summaries))


def fixes_table(summaries):
    """The closing list's fixes, one row each: what it fixes, where, its metric and its margin,
    without -> with in each seed, and in how many seeds it moved the metric the way it is made
    to, by the margin (a seed whose runs lack the metric is named, and not counted)."""
    out = ["", "| item (the book's list) | what it fixes | regime | its gate, without it | its metric | "
               "without -> with, seeds 0, 1, 2 | held |", "|---|---|---|---|---|---|---|"]
    for item, (numbers, fixes, regime, (without, with_), key, side, margin) in FIXES.items():
        if without not in summaries or with_ not in summaries:
            continue
        seeds = sorted(set(summaries[without]) & set(summaries[with_]), key=lambda s: int(s[4:]))
        pairs = [(summaries[without][s].get(key), summaries[with_][s].get(key)) for s in seeds]
        verdicts = [judge(LESSONS["fix_" + item][1], [summaries[without][s], summaries[with_][s]], [without, with_])
                    for s in seeds]
        cells = ", ".join(f"{fmt_metric(key, a)} -> {fmt_metric(key, b)}" for a, b in pairs)
        gate_key, gate = GATES[item]
        gate += ": " + ", ".join(fmt_metric(gate_key, summaries[without][s].get(gate_key)) for s in seeds)
        unjudged = "".join(f"; seed {s[4:]} not judged: {why}" for s, (_, why) in zip(seeds, verdicts) if why)
        out.append(f"| {item} ({numbers}) | {fixes} | {regime} | {gate} | {METRICS[key]} ({side}, by >= "
                   f"{margin_text(*margin)}) | {cells} | {sum(h for h, _ in verdicts)} of {len(seeds)}{unjudged} |")
    return out if len(out) > 3 else []


def judge(check, runs, names):
    """(held, why it could not be judged or None) of one seed. The check sees only the numbers
    each run has: one that a run lacks (an old run, an interrupted one; None or nan in its
    summary) stops the check, which then names it and the run instead of failing quietly on a
    nan, and the seed is not counted as held."""
    known = [{k: v for k, v in run.items() if v is not None and v == v} for run in runs]  # v == v: not nan
    try:
        return bool(check(*known)), None
    except KeyError as e:
        lacking = [name for name, k in zip(names, known) if e.args[0] not in k]
        return False, f"{' and '.join(lacking)} {'has' if len(lacking) == 1 else 'have'} no {e.args[0]}"


def fmt_metric(key, value):
    if value is None or not math.isfinite(value):
        return "-"
    return f"{value:.0%}" if key in PERCENT_METRICS else f"{value:.3g}"


def moved(run):
    """The first movers of a run in the order they moved: 'kl 90, eval_acc 100, ...'."""
    found = sorted((step, key) for key, step in run["moves"].items() if step is not None)
    return ", ".join(f"{key} {step}" for step, key in found) or "nothing moved"


def lesson_tables(summaries):
    """Each lesson whose experiments have runs: the claim, in how many seeds it held, and per
    seed each experiment's greedy peak (step) -> final accuracy, whether it held (or which
    number of which run it lacked: judge), the signs of a runaway where they were logged
    (signs), and what moved first."""
    out = []
    for lesson, (names, check, claim) in LESSONS.items():
        if lesson.startswith("fix_") or not all(n in summaries for n in names):  # fixes_table has those
            continue
        seeds = sorted(set.intersection(*(set(summaries[n]) for n in names)), key=lambda s: int(s[4:]))
        verdicts = {s: judge(check, [summaries[n][s] for n in names], names) for s in seeds}
        held = [s for s in seeds if verdicts[s][0]]
        unjudged = sum(1 for s in seeds if verdicts[s][1])
        out += ["", f"**{lesson}** ({claim}): held in {len(held)} of {len(seeds)} seeds"
                + (f" ({unjudged} not judged: a number missing)" if unjudged else ""), "",
                "| seed | " + " | ".join(f"{n}: greedy peak (step) -> final" for n in names) + " | held | signs: "
                f"{names[0]}'s highest entropy (of ln V), cut share and wrong answers' length (first 20 steps -> "
                "highest 20-step mean); sampled accuracy peak -> final; the reward's 50-step mean peak -> lowest "
                f"after it | what moved first in {names[0]} |", "|---|" + "---|" * (len(names) + 3)]
        for s in seeds:
            runs = [summaries[n][s] for n in names]
            cells = [f"{r['peak']:.1%} ({r['peak_step']}) -> {r['final']:.1%}" if "peak" in r else "-" for r in runs]
            verdict = "yes" if verdicts[s][0] else f"not judged: {verdicts[s][1]}" if verdicts[s][1] else "no"
            out.append(f"| {s[4:]} | " + " | ".join(cells) + f" | {verdict} | {signs(runs)} | {moved(runs[0])} |")
    return out


def signs(runs):
    """A lesson's runs, one seed: what the book's logs show of a runaway and of a reward that hides
    it, where logged ("-" where none)."""
    b, parts = runs[0], []
    if math.isfinite(b["ln_vocab"] + b["entropy_peak"]):
        parts.append(f"entropy {b['entropy_peak']:.2f} ({b['entropy_peak'] / b['ln_vocab']:.0%})")
    if math.isfinite(b["truncated_start"] + b["truncated_peak"]):
        parts.append(f"cut {b['truncated_start']:.0%} -> {b['truncated_peak']:.0%}")
    if math.isfinite(b["len_wrong_start"] + b["len_wrong_peak"]):
        parts.append(f"wrong length {b['len_wrong_start']:.0f} -> {b['len_wrong_peak']:.0f}")
    if all(r.get("sampled_final") is not None for r in runs):  # held-out accuracy as the rollouts sample
        parts.append("sampled " + ", ".join(f"{r['sampled_peak']:.0%} -> {r['sampled_final']:.0%}" for r in runs))
    if all(math.isfinite(r["reward_peak50"]) for r in runs) and any(r["bonus"] > 0.01 for r in runs):
        parts.append("reward " + ", ".join(f"{r['reward_peak50']:.2f} -> {r['reward_low_after_peak']:.2f} "
                                           f"({r['reward_low_after_peak'] / r['reward_peak50']:.0%})" for r in runs))
    return "; ".join(parts) or "-"


def write_between_markers(path, text):
    """Replace what stands between the file's two table markers with text."""
    begin, end = "<!-- experiments table: begin -->", "<!-- experiments table: end -->"
    with open(path) as f:
        doc = f.read()
    if begin not in doc or end not in doc:
        raise SystemExit(f"experiments.py: error: {path} has no '{begin}' ... '{end}' markers")
    head, rest = doc.split(begin, 1)
    with open(path, "w") as f:
        f.write(head + begin + "\n" + text + "\n" + end + rest.split(end, 1)[1])


def parse_seeds(s):
    try:
        seeds = [int(x) for x in s.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"--seeds takes integers separated by commas, got {s!r}") from None
    if not seeds:
        raise argparse.ArgumentTypeError("--seeds needs at least one seed")
    return seeds


def main(args):
    if args.list:
        for name, (_, what) in EXPERIMENTS.items():
            print(f"{name:21s} {what}\n{'':21s} python train.py {' '.join(train_flags(name))}")
        return
    names = []  # experiments to run, in order, each once: 'all', lesson names and experiment names
    for name in args.names:
        if name == "table":
            continue
        found = list(EXPERIMENTS) if name == "all" else LESSONS[name][0] if name in LESSONS else \
            [n for lesson in LESSONS if lesson.startswith("fix_") for n in LESSONS[lesson][0]] if name == "fixes" \
            else [name]
        for n in found:
            if n not in EXPERIMENTS:
                raise ValueError(f"unknown experiment {n!r}; choose from all, table, fixes, {', '.join(LESSONS)}, "
                                 f"{', '.join(EXPERIMENTS)}")
            names += [n] if n not in names else []
    if names:
        t0 = time.time()
        run_all([command(n, s, args.runs_dir, args.extra, args.nproc) for n in names for s in args.seeds], args.jobs)
        print(f"{len(names) * len(args.seeds)} runs in {(time.time() - t0) / 60:.1f} min with --jobs {args.jobs}")
    figures(args.runs_dir, args.figures)
    text = table(args.runs_dir)
    print(text)
    if args.write:
        write_between_markers(args.write, text)


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description="Run the chapter's GRPO experiments and compare them.")
    ap.add_argument("names", nargs="*", default=[],
                    help=f"all, table, fixes (every fix_ lesson), lessons ({', '.join(LESSONS)}) or experiments: "
                         f"{', '.join(EXPERIMENTS)}")
    ap.add_argument("--seeds", type=parse_seeds, default=[0], help="comma-separated seeds, e.g. 0,1,2")
    ap.add_argument("--jobs", type=int, default=1, help="runs side by side (one CPU thread each)")
    ap.add_argument("--nproc", type=int, default=1, help="processes per run (torchrun; see docs/performance.md)")
    ap.add_argument("--runs-dir", default="runs/exp", help="where the run folders go (NAME/seed<k>/)")
    ap.add_argument("--figures", default="figures", help="where the comparison PNGs go")
    ap.add_argument("--write", default=None, metavar="FILE",
                    help="also write the table between FILE's table markers (EXPERIMENTS.md)")
    ap.add_argument("--list", action="store_true", help="list the experiments and their flags")
    ap.add_argument("--extra", nargs=argparse.REMAINDER, default=[], help="more train.py flags for every run")
    args = ap.parse_args()
    if not (args.names or args.list):
        ap.error("name an experiment, a lesson, 'all', 'table' or --list")
    if args.jobs < 1 or args.nproc < 1:
        ap.error("--jobs and --nproc must be >= 1")
    try:
        main(args)
    except ValueError as e:  # a usage error: exit 2, as argparse's own
        ap.exit(2, f"experiments.py: error: {e}\n")
