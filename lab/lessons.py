"""The chapter's lessons, the closing list's fixes and the field's variants: for each, the experiments it runs
and the check that judges them, in one place.

    python experiments.py --list               # each experiment and its exact train.py flags
    python experiments.py instability          # a lesson's experiments (fix_tis: a fix's, field_sapo: a variant's)
    python experiments.py table                # each judged, seed by seed, on the runs in runs/exp (lab/report.py)

In reading order: the experiments (EXPERIMENTS, each a list of train.py flags on top of COMMON); the checks a
lesson uses; then the three collections that read them, each a dict of named records. LESSONS: a broken run
beside its fix and a check of their two summaries for one seed (Lesson). FIXES: an item of the chapter's closing
list, judged by the number it was made to move, by a margin of twice that number's spread over seeds without it,
and the gates that show its mechanism at work in the run without it (Fix). FIELD: a variant of the field past
the chapter, judged as the lesson or fix it stands beside is (Variant). A lesson, a fix and a variant answer the
same three questions (its experiments, its check, its claim); `judged()` lists them all under the names the
command line gives them. The checks read run_summary's numbers (lab/report.py); this file imports nothing of the
project.
"""
import math
from typing import Callable, NamedTuple

from lab import metrics, permutation

# ---------------------------------------------------------------- 1. the experiments: train.py flags

COMMON = ["--steps", "100", "--eval-every", "10"]
BOOK_LENGTH = ["--steps", "500", "--eval-every", "50"]  # as long as the book's runs
BOOK = ["--recipe", "book", *BOOK_LENGTH]  # the book's regime
# the runaway's task: three searches in four, whose failures run long, from a warm start that keeps a
# base model's tail (harness/sft.py --label-smoothing 0.2); evaluated on the chains of medium, as everything else here
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
DS4 = ["--prompts-per-step", "4", "--steps", "30", "--eval-every", "2"]  # how fast: an evaluation every 2 steps
DROPOUT = ["--dropout", "0.1", "--steps", "60"]  # a noisy token ratio: dropout in the learner, not in the sampler
KL_REUSE = ["--kl", "0.5", "--mu", "4", "--minibatches", "4", "--exact-kl"]  # a strong KL on pi_old's samples, and
# its exact value beside it
G4 = ["--group-size", "4", "--prompts-per-step", "32"]  # groups of 4, the default's 128 answers a step
KL_ONPOLICY = ["--kl", "0.1", "--mu", "1", "--exact-kl"]  # a KL on the samples of the policy itself
EXPERIMENTS = {  # name -> (train.py flags on top of COMMON, what it is)
    # our default regime: GRPO's variants, each against the default
    "default": ([], "python train.py's own settings, nothing added: the clipped ratio at eps 0.2, two updates a "
                    "rollout, no KL"),
    "onpolicy": (["--mu", "1"], "one update a rollout: the ratio is 1, the clip has nothing to do"),
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
    "adv_clip": (["--adv-clip", "1"], "each advantage clamped to [-1, 1]: a lone right answer weighs 1, not 2.47 "
                                       "(docs/adding_a_variant.md's example to copy)"),
    # a stress regime for what the book regime does not show here: the format bonus farmed
    "format_tight": (["--format-weight", "1.0", "--max-new-tokens", "26", "--steps", "200", "--eval-every", "20"],
                     "a format bonus worth a right answer; 26 tokens do not fit every 3-step reasoning"),
    "format_tight_gated": (["--format-weight", "1.0", "--max-new-tokens", "26", "--steps", "200", "--eval-every", "20",
                            "--gated"], "the same bonus paid only for right answers"),
    # the book's regime (config.RECIPES["book"]): the chapter's lessons
    "book_kl": (BOOK, "the book's 7_5_plus_kl.py: sampled at T 0.8 / top-p 0.9, scored at T 1, k1 KL"),
    "book_kl_beta002": ([*BOOK, "--kl", "0.02"], "... at beta 0.02, the chapter's original GRPO's"),
    "book_kl_matched": ([*BOOK, "--learner-temperature", "0.8"], "... the learner at the sampler's temperature"),
    "book_kl_keepmask": ([*BOOK, "--learner-temperature", "0.8", "--keep-sampling-mask"],
                         "... and on the sampler's top-p support: learner = sampler"),
    "book_kl_k3": ([*BOOK, "--kl-estimator", "k3", "--kl-level", "token"], "... with k3 per token instead of k1"),
    "book_kl_k1_token": ([*BOOK, "--kl-level", "token"], "... k1 per token: the sum gone, the estimator kept"),
    "book_kl_k3_sum": ([*BOOK, "--kl-estimator", "k3"], "... k3 on the summed log-probs: the estimator changed, the "
                                                           "sum kept"),
    "book_kl_onpolicy": ([*BOOK, "--mu", "1"], "the book's original GRPO: one update per step, k1 KL"),
    "book_nokl": ([*BOOK, "--kl", "0"], "the book's 7_4_plus_clip_ratio.py: no KL"),
    "book_onpolicy": ([*BOOK, "--kl", "0", "--mu", "1"], "the book's 7_3_plus_tracking.py: one update, no KL, no clip"),
    "book_noclip": ([*BOOK, "--kl", "0", "--mu", "4", "--clip", "inf"],
                    "4 inner epochs sampled from the frozen copy, no clipping: far off-policy"),
    "book_clip10": ([*BOOK, "--kl", "0", "--mu", "4"], "... with the book's own clip (eps 10, the torch.where form)"),
    "book_ppo_clip": ([*BOOK, "--kl", "0", "--mu", "4", "--objective", "ppo", "--ratio-level", "token", "--clip", "0.2"],
                      "... with PPO's clip at 0.2 per token instead"),
    "book_token_noclip": ([*BOOK, "--kl", "0", "--mu", "4", "--ratio-level", "token", "--clip", "inf"],
                          "... the ratio per token, still no clip: one change from no clip, and one (PPO's clip) from "
                          "PPO's clip run"),
    # why PPO's clip run decays too (EXPERIMENTS.md, lesson 1): one knob of the pair changed at a time
    "book_ppo_clip_lr3e5": ([*BOOK, "--kl", "0", "--mu", "4", "--objective", "ppo", "--ratio-level", "token", "--clip",
                             "0.2", "--lr", "3e-5"], "PPO's clip at lr 3e-5 (the book's 1e-5, ours 1e-4)"),
    "book_noclip_lr3e5": ([*BOOK, "--kl", "0", "--mu", "4", "--clip", "inf", "--lr", "3e-5"], "... no clip, lr 3e-5"),
    "book_noclip_lr5e5": ([*BOOK, "--kl", "0", "--mu", "4", "--clip", "inf", "--lr", "5e-5"], "... no clip, lr 5e-5"),
    "book_ppo_clip_mu1": ([*BOOK, "--kl", "0", "--mu", "1", "--objective", "ppo", "--ratio-level", "token", "--clip",
                           "0.2"], "PPO's objective with one update a step: nothing off-policy, the clip idle"),
    "book_ppo_clip_mu2": ([*BOOK, "--kl", "0", "--mu", "2", "--objective", "ppo", "--ratio-level", "token", "--clip",
                           "0.2"], "PPO's clip with two inner epochs, not four"),
    "book_ppo_clip_advnone": ([*BOOK, "--kl", "0", "--mu", "4", "--objective", "ppo", "--ratio-level", "token",
                               "--clip", "0.2", "--adv-norm", "none"], "PPO's clip without the std normalisation"),
    "book_ppo_clip_prompts4": ([*BOOK, "--kl", "0", "--mu", "4", "--objective", "ppo", "--ratio-level", "token",
                                "--clip", "0.2", "--prompts-per-step", "4"], "PPO's clip, 4 prompts a step, not 1"),
    "book_noclip_prompts4": ([*BOOK, "--kl", "0", "--mu", "4", "--clip", "inf", "--prompts-per-step", "4"],
                             "... no clip, 4 prompts a step"),
    "book_ppo_clip_nogradlimit": ([*BOOK, "--kl", "0", "--mu", "4", "--objective", "ppo", "--ratio-level", "token",
                                   "--clip", "0.2", "--max-grad-norm", "inf"], "PPO's clip without the gradient-norm limit"),
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
    "book_runaway_matched": ([*RUNAWAY, "--kl", "0", "--mu", "1", "--learner-temperature", "0.8"],
                             "... the learner at the sampler's T 0.8, over the whole vocabulary (the fix's half)"),
    "book_runaway_T1": ([*RUNAWAY, "--kl", "0", "--mu", "1", "--temperature", "1", "--top-p", "1"],
                        "... the sampler at the learner's T 1, no top-p"),
    "book_runaway_chains": ([*RUNAWAY, "--kl", "0", "--mu", "1", "--level", "medium"],
                            "... on chains alone: no long failed searches"),
    "book_runaway_token": ([*RUNAWAY, "--kl", "0", "--mu", "1", "--ratio-level", "token", "--objective", "ppo"],
                           "... each answer's log-probs averaged over its tokens, not summed"),
    "book_runaway_token_mean": ([*RUNAWAY, "--kl", "0", "--mu", "1", "--ratio-level", "token", "--objective", "ppo",
                                 "--loss-agg", "token_mean"], "... with the token-level loss (DAPO)"),
    "book_runaway_token_drgrpo": ([*RUNAWAY, "--kl", "0", "--mu", "1", "--ratio-level", "token", "--objective", "ppo",
                                   "--loss-agg", "constant", "--adv-norm", "none"],
                                  "... with Dr. GRPO's constant normaliser and no std"),
    "book_runaway_k3": ([*RUNAWAY, "--kl", "0.1", "--kl-estimator", "k3", "--kl-level", "token", "--mu", "1"],
                        "... with a KL to the warm start, k3 per token, beta 0.1"),
    "book_runaway_lowlr": ([*RUNAWAY, "--kl", "0", "--mu", "1", "--lr", "3e-5"], "... at lr 3e-5"),
    "book_runaway_noclip": ([*RUNAWAY, "--kl", "0", "--mu", "4", "--clip", "inf"],
                            "4 inner epochs from the frozen copy, no clip, on the runaway's task"),
    "book_runaway_ppo_clip": ([*RUNAWAY, "--kl", "0", "--mu", "4", "--objective", "ppo", "--ratio-level", "token",
                               "--clip", "0.2"], "... with PPO's clip at 0.2 per token"),
    "book_runaway_clip10": ([*RUNAWAY, "--kl", "0", "--mu", "4"], "... with the book's own clip, eps 10 on the summed "
                            "ratio, which long answers let pass 11 (lesson 1 where the book's clip binds)"),
    "book_runaway_format": ([*RUNAWAY, "--kl", "0", "--mu", "1", "--format-check", "book", "--format-weight", "1"],
                            "the book's 7_6 format bonus on the runaway's task"),
    "book_runaway_format_gated": ([*RUNAWAY, "--kl", "0", "--mu", "1", "--format-check", "book", "--format-weight",
                                   "1", "--gated"], "... the bonus paid only for right answers"),
    # the closing list's fixes (FIXES): each where its failure happens, beside the same run without it
    # the token-level loss where the sampler is not to blame: the learner at the sampler's T 0.8 on its top-p support
    "search_token": ([*RUNAWAY, "--kl", "0", "--mu", "1", "--ratio-level", "token", "--objective", "ppo",
                      "--learner-temperature", "0.8", "--keep-sampling-mask"], "the runaway's task, the learner equal to "
                     "the sampler, each token's ratio, PPO's objective: each answer's tokens averaged, then the answers"),
    "search_token_mean": ([*RUNAWAY, "--kl", "0", "--mu", "1", "--ratio-level", "token", "--objective", "ppo",
                           "--learner-temperature", "0.8", "--keep-sampling-mask", "--loss-agg", "token_mean"],
                          "... with the token-level loss (DAPO)"),
    "search_token_drgrpo": ([*RUNAWAY, "--kl", "0", "--mu", "1", "--ratio-level", "token", "--objective", "ppo",
                             "--learner-temperature", "0.8", "--keep-sampling-mask", "--loss-agg", "constant",
                             "--adv-norm", "none"], "... with Dr. GRPO's constant normaliser and no std"),
    "ds4": (DS4, "the default at 4 prompts a step, evaluated every 2 steps of 30: how fast it learns; a seventh of "
                 "its groups have rewards all equal"),
    "ds4_dynamic": ([*DS4, "--dynamic-sampling"], "... with dynamic sampling"),
    "dropout": (DROPOUT, "the default with dropout 0.1 in the learner's forwards and none in the sampler's (a "
                         "misconfiguration TRL turns dropout off for): a noisy token ratio; 60 steps"),
    "dropout_gspo": ([*DROPOUT, "--ratio-level", "gspo", "--clip", "3e-4", "--clip-high", "4e-4"],
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
    "format1": (["--format-weight", "1"], "a format bonus worth a right answer: a right direct answer and a wrong "
                                          "reasoned one tie"),
    "format1_gdpo": (["--format-weight", "1", "--reward-norm", "norm_then_sum"],
                     "... each reward term normalised in its group before the sum, the sum over the batch (GDPO)"),
    "lag": (LAG, "the default trained on rollouts 4 steps old at lr 3e-4: stale wrong answers made likelier"),
    "lag_dual_clip": ([*LAG, "--dual-clip", "3"], "... with the dual clip, c = 3 (verl's clip_ratio_c)"),
    "lag_masked": ([*LAG, "--off-policy-mask", "0.1"], "... with off-policy sequence masking, delta 0.1 (the book's)"),
    "lag_decoupled": ([*LAG, "--lag-pi-old", "learner"], "rollouts 4 steps old, pi_old the learner at the step "
                      "(decoupled PPO): the stale sampler is not the policy the ratio starts from"),
    "lag_decoupled_tis": ([*LAG, "--lag-pi-old", "learner", "--tis-cap", "2"],
                          "... with truncated importance sampling, C = 2"),
    "lag_decoupled_masked": ([*LAG, "--lag-pi-old", "learner", "--off-policy-mask", "0.1"],
                             "... with off-policy sequence masking, delta 0.1"),
    "lag_decoupled_dual_clip": ([*LAG, "--lag-pi-old", "learner", "--dual-clip", "3"], "... with the dual clip, c = 3"),
    "lag_fresh": (["--lr", "3e-4", "--steps", "60"], "the lag's regime without the lag: lr 3e-4, 60 steps, each step "
                  "on its own fresh answers (what a stale sampler's failure is seen against)"),
    "engine_fp8": (["--sampler-dtype", "fp8", "--lr", "3e-4", "--steps", "60"], "the same on fresh answers, drawn by "
                   "a sampler whose weights are rounded to 8 bits (fp8, per output channel) beside the fp32 learner: "
                   "an inference engine that is not the trainer (TIS's source)"),
    "engine_fp8_tis": (["--sampler-dtype", "fp8", "--lr", "3e-4", "--steps", "60", "--tis-cap", "2"],
                       "... with truncated importance sampling, C = 2"),
    "lag_decoupled_topp": ([*LAG, "--lag-pi-old", "learner", "--top-p", "0.9"], "... sampled with top-p 0.9"),
    "lag_decoupled_topp_keepmask": ([*LAG, "--lag-pi-old", "learner", "--top-p", "0.9", "--keep-sampling-mask"],
                                    "... and the learner on the sampler's support"),
    "many": (MANY, "inequalities with several right digits, 16 updates a rollout: each problem settles on fewer"),
    "many_entropy": ([*MANY, "--entropy-coef", "0.03"], "... with an entropy bonus, alpha 0.03"),
    "many_klcov": ([*MANY, "--clip", "inf", "--kl-cov", "0.02"], "... with KL-Cov instead of the clip (Cui et al.), "
                   "k 0.02: the tokens that drive the entropy down held back"),
    "default_passk": (["--eval-pass-k", "8"], "the default, with pass@8 at each evaluation"),
    "entropy_bonus_01": (["--eval-pass-k", "8", "--entropy-coef", "0.1"], "... with an entropy bonus, alpha 0.1"),
    # the field past the chapter (field_methods.py, FIELD): each method on top of the regime where the failure
    # it answers lives, beside the chapter's own fix there, at its source's values
    "book_sapo": ([*BOOK, "--kl", "0", "--mu", "4", "--objective", "sapo", "--ratio-level", "token"],
                  "lesson 1's far off-policy epochs with SAPO's sigmoid gate (tau 1 / 1.05) instead of a clip"),
    "book_gmpo": ([*BOOK, "--kl", "0", "--mu", "4", "--objective", "gmpo", "--ratio-level", "token", "--clip", "0.4"],
                  "... with GMPO's geometric mean of the token ratios, clipped to (e^-0.4, e^0.4)"),
    "lag_decoupled_icepop": ([*LAG, "--lag-pi-old", "learner", "--tis-cap", "5", "--tis-floor", "0.5", "--tis-mode",
                              "token_mask"], "the stale sampler with IcePop's weights: kept in [0.5, 5], else 0 (Ring-1T's "
                                             "alpha 0.5, beta 5)"),
    "lag_decoupled_seq_is": ([*LAG, "--lag-pi-old", "learner", "--tis-cap", "3", "--tis-mode", "sequence_mask"],
                             "... with one weight an answer, masked above 3 (TRL's default mode and cap)"),
    "lag_decoupled_reject": ([*LAG, "--lag-pi-old", "learner", "--rejection", "seq_mean_k3", "--rejection-bound",
                              "0.01"], "... with the answers whose mean k3 from the sampler passes 0.01 rejected "
                                       "(verl's k3 preset)"),
    "lag_decoupled_dppo_tv": ([*LAG, "--lag-pi-old", "learner", "--objective", "dppo_tv", "--clip", "0.15"],
                              "... with DPPO's trust region on the probability's move from the sampler, TV 0.15"),
    "lag_decoupled_dppo_kl": ([*LAG, "--lag-pi-old", "learner", "--objective", "dppo_kl", "--clip", "0.05"],
                              "... the same with the binary KL, 0.05"),
    "lag_decoupled_vespo": ([*LAG, "--lag-pi-old", "learner", "--objective", "vespo", "--tis-cap", "2", "--loss-agg",
                             "token_mean"], "... with VESPO's Gamma weight of each answer's ratio to the sampler (TIS's "
                                            "C = 2 inside), over tokens as its sources average"),
    "many_top_entropy_random": ([*MANY, "--top-entropy-quantile", "0.2", "--top-entropy-random"],
                                "inequalities, the policy gradient on a random 20% of tokens: the 80/20 rule's control"),
    "many_top_entropy": ([*MANY, "--top-entropy-quantile", "0.2"],
                         "inequalities, the policy gradient on the top 20% of tokens by entropy (the 80/20 rule)"),
    "many_adaptive_entropy": ([*MANY, "--adaptive-entropy"],
                              "... with the entropy bonus steered from 0 towards 0.2 nats (TRL's defaults)"),
    # the baselines where theirs differs most from a group's: 4 answers a problem (32 problems a step, the same 128
    # answers), where the group's mean holds a quarter of the answer it judges and a third of the groups are all right
    # or all wrong, so GRPO gives them nothing
    "g4": (G4, "4 answers to each of 32 problems a step: GRPO's group mean and std"),
    "g4_drgrpo": ([*G4, "--adv-norm", "none", "--loss-agg", "constant"], "... Dr. GRPO's: the group's mean, no std, "
                                                                          "the constant normaliser"),
    "g4_nobaseline": ([*G4, "--baseline", "none"], "... REINFORCE's: the reward itself, no baseline"),
    "g4_rloo": ([*G4, "--baseline", "leave_one_out"], "... RLOO's: the mean of the other 3 answers, undivided"),
    "g4_reinforce_pp": ([*G4, "--baseline", "batch"], "... REINFORCE++'s: the batch's mean and std over its tokens"),
    "g4_dynamic": ([*G4, "--dynamic-sampling"], "... GRPO's, with dynamic sampling: groups all right or all wrong "
                                                "dropped and more drawn, up to 3 rounds (DAPO)"),
    "g4_prompts64": ([*G4, "--prompts-per-step", "64"], "... GRPO's, 64 problems a step: more groups, not redrawn ones"),
    "dropout_luspo": ([*DROPOUT, "--ratio-level", "gspo", "--clip", "3e-4", "--clip-high", "4e-4", "--loss-agg",
                       "luspo"], "... GSPO with each answer's loss scaled by its length (LUSPO)"),
    # the KL's gradient where pi samples its own tokens (one update a rollout, at the sampler's temperature), its
    # exact value and its estimator's gradient bias logged beside (--exact-kl)
    "kl_onpolicy": (KL_ONPOLICY, "k3 per token, beta 0.1, one update a rollout, the exact KL and k3's gradient bias "
                                 "logged"),
    "kl_onpolicy_k3plus": ([*KL_ONPOLICY, "--kl-estimator", "k3+"], "... with k3+: k3's value, k2's gradient (verl)"),
    "kl_onpolicy_k2": ([*KL_ONPOLICY, "--kl-estimator", "k2"], "... with k2, whose gradient is k3+'s and whose value "
                                                               "is biased"),
    # rivals: the method a learner would pick instead of a fix or a variant, in its regime (each Record's rivals)
    "book_runaway_format_w01": ([*RUNAWAY, "--kl", "0", "--mu", "1", "--format-check", "book", "--format-weight",
                                 "0.1"], "the book's 7_6 format bonus at 0.1, the book's other remedy (7.6)"),
    "book_runaway_tis": ([*RUNAWAY, "--kl", "0", "--mu", "1", "--tis-cap", "2"],
                         "the runaway with truncated importance sampling towards the learner, C = 2"),
    "book_runaway_mask_truncated": ([*RUNAWAY, "--kl", "0", "--mu", "1", "--mask-truncated"],
                                    "the runaway with the answers cut at the cap out of the loss (DAPO's overlong "
                                    "filtering)"),
    "ds8": ([*DS4, "--prompts-per-step", "8"], "the default at 8 prompts a step, evaluated every 2: more groups, not "
                                                  "redrawn ones"),
    "kl_reuse_k3plus": ([*KL_REUSE, "--loss-agg", "token_mean", "--steps", "50", "--kl-estimator", "k3+"],
                        "the strong KL on 16 updates a rollout by k3+ (k2's gradient) instead of re-weighting"),
    "dropout_gmpo": ([*DROPOUT, "--objective", "gmpo", "--clip", "0.4"],
                     "the noisy token ratio with GMPO's geometric mean, clipped in log space at 0.4"),
}


# ---------------------------------------------------------------- 2. how a method is judged

class Failure(NamedTuple):
    """What a method is for, as it shows in the run without it: present in a seed where `test` holds on that run's
    summary. A seed whose run without shows no failure has nothing for the method to fix: its verdict there is
    'no failure here', neither held nor not held."""
    key: str              # the run_summary number the tables print for it
    rule: str             # in words, of the run without it
    test: Callable        # test(the run without's summary[, `against`'s]) -> bool; a KeyError names a number missing
    against: str = None   # an experiment the failure is seen against, if any (the 80/20 rule's: all tokens)

    def present(self, runs, without):
        """runs: {experiment: its summary} of one seed; without: the run without the method."""
        return self.test(runs[without], runs[self.against]) if self.against else self.test(runs[without])


def at_least(key, bound, rule):
    return Failure(key, rule, lambda run: run[key] >= bound)


def at_most_failure(key, bound, rule):
    return Failure(key, rule, lambda run: run[key] <= bound)


class Number(NamedTuple):
    """The number a method claims to move, its way, and the smallest move of it worth detecting. A verdict is the exact
    one-sided permutation test of the two runs' means on it over all their seeds (`verdict`)."""
    key: str       # a run_summary key, named in lab/metrics.py
    side: str      # "higher" or "lower": the way the method claims to move it
    worth: float   # the smallest effect worth detecting, in the number's own unit (a share as a fraction: 0.1 is 10
    #                points): a tenth of the range the number can take (`RANGES`), where its source reports none at
    #                our scale. Where 5 seeds cannot detect it with 80% power, the record runs 8 or 10 (seeds_for)
    best: float = None  # the furthest the number can go its way (1 for an accuracy, 0 for a share or a bias), if any

    def gain(self, other, own):
        """How far one run's summary (own) is ahead of another's on this number: + ahead, - behind (the other way)."""
        return own[self.key] - other[self.key] if self.side == "higher" else other[self.key] - own[self.key]

    def room(self, without):
        """How far a run at `without` (a value of the number) could still move its way (inf where nothing bounds
        it)."""
        if self.best is None:
            return float("inf")
        return self.best - without if self.side == "higher" else without - self.best

    @property
    def text(self):
        return f"{metrics.words(self.key)}, {self.side}"


class Mechanism(NamedTuple):
    """What a method does by construction, as a number of its own run: it acts in every seed, or the wiring is
    wrong, or the regime gives the method nothing to act on (the run without it shows which: lab/report.py prints both)."""
    key: str        # a run_summary key, named in lab/metrics.py
    rule: str       # the rule in words
    test: Callable  # test(the run without's value or None, the method's run's value) -> bool
    without_key: str = None  # the key the rule reads from the run without, if it reads one (GSPO's: the token ratio's)

    def acts(self, without, with_):
        """One seed's two summaries: the method acted (a KeyError names a number a run lacks)."""
        return self.test(without[self.without_key] if self.without_key else None, with_[self.key])


def above(key, bound):
    return Mechanism(key, f"above {bound:g}", lambda without, with_: with_ > bound)


def at_most(key, bound):
    return Mechanism(key, f"at most {bound:g}", lambda without, with_: with_ <= bound)


def within(key, low, high):
    return Mechanism(key, f"within [{low:g}, {high:g}]", lambda without, with_: low <= with_ <= high)


def below_without(key, factor):
    return Mechanism(key, f"at most {'half' if factor == 0.5 else f'{factor:g} times'} the run without's",
                     lambda without, with_: with_ <= factor * without, key)


def above_without(key, factor):
    return Mechanism(key, f"above {factor:g} times the run without's", lambda without, with_: with_ > factor * without,
                     key)


class Record(NamedTuple):
    """What every judged method names, whatever it is (a lesson's fix, an item of the closing list, a method of the
    field): its source's claim, the failure it is for, what it does by construction, the settings it changes, what a
    learner would pick instead, what it costs."""
    claim: str            # one sentence, as its source states it
    source: str           # where: the paper (arXiv id, section) or the code (repository, file)
    failure: Failure      # what it is for, as the run without it shows it
    mechanism: Mechanism  # what it does by construction: it must act in every seed
    switches: tuple       # the settings (train.py flags, as their dest names) its run changes, its source's own values
    #                       among them: its run and the run without it differ in these alone (tests/test_experiments.py)
    rivals: list          # [experiment]: what a learner would pick instead, in the same regime, judged by the same number
    costs: list           # [run_summary key]: the share of tokens or answers it drops or zeroes, or what it pays


# A verdict over all the seeds of the method's two runs, decided in this order:
#   not judged     a run has fewer than 5 seeds with the number (a seed whose number is missing or not finite is left
#                  out and named): the test cannot reach p < 0.05 on fewer
#   did not act    its mechanism acted in none of the method's seeds: the claim was not tested (lesson 1's book clip)
#   no failure here  the run without shows the failure in fewer than half its seeds: nothing for the method to fix
#   cannot detect  the number has less room to move its way than the smallest effect the test detects
#   held           the exact one-sided permutation test of the means, the claim's way, gives p < 0.05
#   not held       it does not
# Every verdict but the first carries the effect, its interval, the probability of improvement, the detectable effect,
# and the test the other way: a move against the claim with p < 0.05 there is printed "the other way".
HELD, NOT_HELD, NO_FAILURE, DID_NOT_ACT, CANNOT_DETECT, NOT_JUDGED = (
    "held", "not held", "no failure here", "did not act", "cannot detect", "not judged")


class Verdict(NamedTuple):
    """What the test over seeds found (`verdict`)."""
    decision: str      # HELD, NOT_HELD, NO_FAILURE, DID_NOT_ACT, CANNOT_DETECT or NOT_JUDGED
    why: str           # the seeds left out, and for NOT_JUDGED why ('3 seeds of rare_cispo (5 needed)'); or ""
    n: tuple = (0, 0)  # the seeds tested: the run without's, the method's
    p: float = float("nan")        # the exact one-sided permutation test, the claim's way
    p_other: float = float("nan")  # ... and the other way
    effect: float = float("nan")   # the difference in means, + the claim's way
    interval: tuple = (float("nan"), float("nan"))  # its 95% bootstrap interval
    prob: float = float("nan")     # the probability of improvement: the share of seed pairs the method is ahead in
    detectable: float = float("nan")  # the smallest effect the test detects with 80% power at these seeds
    present: tuple = (0, 0)        # the seeds whose run without shows the failure, of those read
    acted: tuple = (0, 0)          # the seeds whose mechanism acted, of those read

    @property
    def other_way(self):
        """The number moved against the claim, by the same test."""
        return self.p_other < permutation.ALPHA


def tested(values, name, key):
    """{seed: value} -> (the finite values in seed order, the line naming each seed left out, or '')."""
    kept = [v for _, v in sorted(values.items()) if v is not None and math.isfinite(v)]
    out = [f"seed {s} of {name} left out: its {key} is {v}" for s, v in sorted(values.items())
           if v is None or not math.isfinite(v)]
    return kept, "; ".join(out)


def verdict(number, without, with_, present, acted, names=("the run without", "the method's run")):
    """The verdict over seeds of a method on its two runs. without, with_: {seed: the number, or None}; present:
    {seed: the run without shows the failure}; acted: {seed: the mechanism acted in the method's run} (None: no
    mechanism to read); names: the two runs' names for the lines that name a seed."""
    (a, out_a), (b, out_b) = tested(without, names[0], number.key), tested(with_, names[1], number.key)
    why = "; ".join(w for w in (out_a, out_b) if w)
    short = [f"{len(v)} seed{'s' * (len(v) != 1)} of {name} ({permutation.MIN_SEEDS} needed)"
             for v, name in ((a, names[0]), (b, names[1])) if len(v) < permutation.MIN_SEEDS]
    if short:
        return Verdict(NOT_JUDGED, "; ".join(short + ([why] if why else [])))
    side = number.side
    stats = dict(n=(len(a), len(b)), p=permutation.exact_p(a, b, side),
                 p_other=permutation.exact_p(a, b, "lower" if side == "higher" else "higher"),
                 effect=permutation.effect(a, b, side), interval=permutation.interval(a, b, side),
                 prob=permutation.prob_improvement(a, b, side),
                 detectable=permutation.detectable(a, len(a), len(b), side),
                 present=(sum(present.values()), len(present)),
                 acted=(sum(acted.values()), len(acted)) if acted is not None else (0, 0))
    if acted and not any(acted.values()):  # read in some seed, acting in none
        decision = DID_NOT_ACT
    elif 2 * sum(present.values()) < len(present):
        decision = NO_FAILURE
    elif number.room(sum(a) / len(a)) < stats["detectable"]:
        decision = CANNOT_DETECT
    else:
        decision = HELD if stats["p"] < permutation.ALPHA else NOT_HELD
    return Verdict(decision, why, **stats)


def seeds_for(number, without):
    """The seeds each run of a record needs, from the run without's seeds 0-4 (its number's values): 5, or 8, or 10
    where fewer cannot detect the number's worth with 80% power (permutation.detectable; Colas et al. 2018: add seeds
    where the test cannot see what matters). 10 is the most a record gets; past it, its detectable effect says how
    little it can see."""
    for n in (5, 8):
        if permutation.detectable(without, n, n, number.side) <= number.worth:
            return n
    return 10


class Judged(NamedTuple):
    """A lesson, a fix or a field method: its two runs, its number and its record, and what the pages say of it."""
    kind: str          # "lesson", "fix" or "field"
    experiments: list  # [the run without it, the run with it]: names of EXPERIMENTS
    number: Number     # what it is judged by
    record: Record     # its claim, failure, mechanism, switches, rivals and costs
    what: str          # what it changes, or fixes, in a few words
    regime: str        # where it runs, in words
    words: tuple = ()  # a lesson's (what its mechanism does, what its number shows): how the verdict lines say them
    parts: list = []   # a lesson whose fix changes two settings: the runs that change one each (which does the work)
    keeps: str = None  # an experiment it must not be worse than by the same test (the 80/20 rule's: every token)
    numbers: str = ""  # a fix's numbers in the book's closing list ("1, 2"), or where else it comes from
    seeds: int = 5     # the seeds each of its runs has: 5, or 8 or 10 where 5 cannot detect its number's worth
    #                    (seeds_for, from the run without's seeds 0-4, set before the method's runs past seed 2)
    also: tuple = ()   # (Number,) more numbers the pages show with the same test, deciding nothing: what else the
    #                    source promises or a learner watches (lesson 4's accuracy; the stale runs' gradient spikes)

    @property
    def rule(self):
        """What the verdict asks, in words."""
        keeps = f", and not worse than {self.keeps} by the same test" if self.keeps else ""
        return f"{self.number.text} by an exact one-sided permutation test of the means over all seeds, p < 0.05{keeps}"


# ---------------------------------------------------------------- 3. the lessons
# The smallest effect worth detecting on each number (Number.worth): no source reports an effect at our scale, so a
# tenth of the range the number can take here. Each record's seeds (Judged.seeds) follow from it (seeds_for).
ACCURACY = 0.1  # an accuracy, a share of answers or tokens, a share of a peak: a tenth of 0-100%
LENGTH = 4.0    # an answer's length: a tenth of its 40-token cap
DISTINCT = 0.3  # the different right answers a problem's 16 samples give: a tenth of the warm start's 3.1
# (think_half_step's: 3 steps, a tenth of the rare regime's 30)
RARE_ENTROPY = 0.028  # the learner's entropy in the rare regime, nats: a tenth of its first 10 steps' 0.28
KL_EXACT = 0.0036  # the exact KL on-policy: a tenth of the 0.036 its run without averages (it can fall to 0)

DECAY = at_least("drop", 0.15, "its greedy accuracy falls 15 points or more from its peak")
BOOK_CLIP = Record(
    claim="The clipped_ratio enforces a maximum deviation from the old policy to ensure that updates remain relatively "
          "conservative and improve training stability.",
    source="the book, ch07_main.ipynb, 7.4 (7_4_plus_clip_ratio.py: eps 10 on the summed ratio)", failure=DECAY,
    mechanism=above("mean_clip_frac", 0), switches=("clip",), rivals=["book_ppo_clip"], costs=["mean_clip_frac"])
PPO_CLIP = Record(
    claim="The clipped objective removes the incentive for moving the ratio outside the interval [1 - eps, 1 + eps].",
    source="PPO, arXiv 1707.06347, sec. 3 (eps 0.2, per token as GRPO's, DeepSeekMath arXiv 2402.03300 eq. 3)",
    failure=DECAY, mechanism=above("mean_clip_frac", 0), switches=("objective", "clip"), rivals=["book_gmpo"],
    costs=["mean_clip_frac"])
K3 = Record(
    claim="We estimate the KL divergence with the following unbiased estimator (Schulman, 2020), which is guaranteed "
          "to be positive.",
    source="DeepSeekMath, arXiv 2402.03300, sec. 4.1.1 (k3 per token); the book blames the sum over tokens (7.5)",
    failure=DECAY, mechanism=Mechanism("kl_low", "at least 0", lambda without, with_: with_ >= 0),
    switches=("kl_estimator", "kl_level"), rivals=["book_nokl", "book_kl_beta002"], costs=[])
RUNS_AWAY = Failure("entropy_peak_share", "its entropy reaches half of ln V and its sampled accuracy falls 15 points or "
                    "more from its peak", lambda run: run["entropy_peak_share"] >= 0.5 and run["sampled_drop"] >= 0.15)
HIDES = Failure("reward_kept", "its sampled accuracy falls 15 points or more from its peak while its reward keeps half "
                "its peak or more: the reward a learner watches hides the fall",
                lambda run: run["sampled_drop"] >= 0.15 and run["reward_kept"] >= 0.5)
BOOK_REGIME = "the book's regime: one prompt and 8 answers a step, 500 steps"
LESSONS = {
    "instability": Judged(
        "lesson", ["book_noclip", "book_clip10"], Number("final", "higher", ACCURACY, 1.0), BOOK_CLIP,
        "the book's clip, eps 10 on the summed ratio", BOOK_REGIME + ", 4 inner epochs from a frozen copy, no KL",
        words=("The book's clip binds", "accuracy is rescued"), seeds=8),
    "instability_search": Judged(
        "lesson", ["book_runaway_noclip", "book_runaway_clip10"], Number("final", "higher", ACCURACY, 1.0),
        BOOK_CLIP._replace(rivals=["book_runaway_ppo_clip"], source=BOOK_CLIP.source + "; where the summed ratio passes "
                           "11: the runaway's task, whose wrong answers run long"),
        "the book's clip, eps 10 on the summed ratio, where longer answers let the summed ratio pass 11",
        BOOK_REGIME + ", the runaway's task, 4 inner epochs from a frozen copy, no KL",
        words=("The book's clip binds", "accuracy is rescued"), seeds=10),
    "instability_ppo": Judged(
        "lesson", ["book_token_noclip", "book_ppo_clip"], Number("final", "higher", ACCURACY, 1.0), PPO_CLIP,
        "PPO's clip, eps 0.2 on each token's ratio", BOOK_REGIME + ", 4 inner epochs, no KL, the ratio per token",
        words=("PPO's clip binds", "accuracy is rescued")),
    "naive_kl": Judged(
        "lesson", ["book_kl", "book_kl_k3"], Number("final", "higher", ACCURACY, 1.0), K3,
        "k3 per token in place of k1 on summed log-probs", BOOK_REGIME + ", the book's 7_5 (k1 on sums, beta 0.1)",
        words=("k3 stays non-negative", "accuracy is rescued"), parts=["book_kl_k1_token", "book_kl_k3_sum"]),
    "runaway": Judged(
        "lesson", ["book_runaway", "book_runaway_keepmask"], Number("sampled_final", "higher", ACCURACY, 1.0),
        Record(claim="We preserve the truncation masks during sampling from pi_old and apply them to pi_theta during "
                     "training, ensuring both policies share identical action subspaces.",
               source="DeepSeek-V3.2, arXiv 2512.02556, sec. 3.1, Keep Sampling Mask (the book's item 11)",
               failure=RUNS_AWAY, mechanism=at_most("mean_sampler_gap", 0.01),
               switches=("learner_temperature", "keep_sampling_mask"), rivals=["book_runaway_k3", "book_runaway_T1"],
               costs=[]),
        "the learner at the sampler's T 0.8 and on its top-p support", BOOK_REGIME + ", the runaway's task, the "
        "book's 7_3 (one update a step, no KL)", words=("The learner keeps to the sampler's support",
                                                        "the runaway is stopped"),
        parts=["book_runaway_matched", "book_runaway_keepmask_T1"], seeds=10),
    "format_exploit": Judged(
        "lesson", ["book_runaway_format", "book_runaway_format_gated"], Number("reward_kept", "lower", ACCURACY, 0.0),
        Record(claim="The model already gets too many rewards from following the <think> tag format; another "
                     "improvement could be to make the format reward conditional, only awarded if the answer is also "
                     "correct.", source="the book, ch07_main.ipynb, 7.6 (7_6_plus_format_reward.py)", failure=HIDES,
               mechanism=at_most("mean_format_paid_wrong", 0), switches=("gated",),
               rivals=["book_runaway_format_w01"], costs=[]),
        "the format bonus paid only with a right answer", BOOK_REGIME + ", the runaway's task, the book's 7_6 bonus",
        words=("The gate pays no wrong answer", "the reward shows the fall"),
        also=(Number("sampled_final", "higher", ACCURACY, 1.0),)),
}
# the four lessons the pages number, in the chapter's order of their failures (lesson 1 in its two steps)
NUMBERED = {"instability": 1, "instability_search": 1, "instability_ppo": 1, "naive_kl": 2, "runaway": 3,
            "format_exploit": 4}
LABELS = {  # experiment -> how the pages' verdict lines name it
    "book_noclip": "no clip", "book_clip10": "the book's clip, eps 10", "book_runaway_noclip": "no clip",
    "book_runaway_clip10": "the book's clip, eps 10", "book_runaway_ppo_clip": "PPO's clip", "book_token_noclip": "the token's ratio, no clip",
    "book_ppo_clip": "PPO's clip", "book_kl": "k1 on summed log-probs", "book_kl_k3": "k3 per token",
    "book_kl_k1_token": "k1 per token", "book_kl_k3_sum": "k3 on the sums",
    "book_runaway": "the book's 7_3", "book_runaway_keepmask": "the learner on the sampler's support at its T",
    "book_runaway_matched": "the learner at the sampler's T", "book_runaway_keepmask_T1": "the learner on the sampler's support",
    "book_runaway_format": "ungated", "book_runaway_format_gated": "gated", "book_nokl": "no KL",
    "book_kl_beta002": "k1 at beta 0.02", "book_runaway_k3": "a k3 KL, beta 0.1", "book_runaway_T1": "the sampler at T 1",
    "book_runaway_format_w01": "the bonus at 0.1", "book_gmpo": "GMPO",
    # the rivals, as the tables name them beside their experiment
    "book_runaway_mask_truncated": "cut answers out of the loss", "book_runaway_tis": "TIS, C = 2",
    "book_runaway_token_drgrpo": "Dr. GRPO", "book_runaway_token_mean": "the token-level loss", "dropout": "GRPO",
    "dropout_gmpo": "GMPO", "ds8": "8 prompts a step", "format": "the bonus at 0.5", "g4": "GRPO",
    "g4_drgrpo": "Dr. GRPO", "kl_onpolicy_k2": "k2", "kl_reuse_k3plus": "k3+", "lag_decoupled_masked":
    "off-policy masking", "lag_decoupled_tis": "TIS, C = 2", "lag_masked": "off-policy masking",
    "many_entropy": "an entropy bonus, 0.03", "many_klcov": "KL-Cov", "rare_cispo": "CISPO",
    "rare_clip_higher": "clip-higher", "g4_prompts64": "64 problems a step", "search_token_drgrpo": "Dr. GRPO",
    "search_token_mean": "the token-level loss", "lag_fresh": "a sampler at the learner's precision",
    "lag_decoupled_icepop": "IcePop",
}


# ---------------------------------------------------------------- 4. the fixes

LAG_DECOUPLED = "rollouts 4 steps old, pi_old the learner (decoupled), lr 3e-4"
RARE_REGIME = "a warm start that seldom reasons, 16 updates a rollout"
RUNAWAY_TOKEN = "the runaway (the book's 7_3), each answer's log-probs averaged over its tokens"
SEARCH_TOKEN = ("the runaway's task, the learner equal to the sampler (its T 0.8 and top-p support), each token's "
                "ratio: the loss's sum over tokens alone differs")
WRONG_RUN_LONG = Failure("late_resp_len_wrong", "its wrong answers, 2nd half, are 1.25 times as long as its right ones "
                         "or more", lambda run: run["late_resp_len_wrong"] >= 1.25 * run["late_resp_len_correct"])
# a stale sampler's failure: the run that learns on stale answers falls, after its peak, 10 points or more below where
# the same run on fresh answers falls to (lag_fresh: the same lr and steps, no lag)
STALE = Failure("low_after_peak", "its lowest greedy accuracy at or after its peak is 10 points or more below the same "
                "run's on fresh answers (lag_fresh)", lambda stale, fresh: stale["low_after_peak"] <= fresh[
                    "low_after_peak"] - 0.1, against="lag_fresh")
STABLE = Number("low_after_peak", "higher", ACCURACY, 1.0)  # what a stale sampler's fixes claim: a run that holds
SPIKES = Number("grad_limited_steps", "lower", ACCURACY, 0.0)  # ... and what a learner sees: the gradient's spikes
COLLAPSES = Failure("entropy", "its entropy, last 10 steps, is half its first 10 steps' or less: the entropy collapse "
                    "clip-higher is for", lambda run: run["entropy"] <= 0.5 * run["early_entropy"])
THINK_CLIPPED = at_least("mean_think_clip_frac", 0.1, "its clip stops a tenth or more of the <think> tokens of the "
                         "answers with A > 0: the rare token that opens a reasoned answer, clipped out")
ENTROPY_CLIMBS = at_least("entropy_peak_share", 0.5, "its entropy climbs to half of ln V")
TIS = Record(  # TIS's, judged twice: behind a stale sampler, and behind a sampler of other weights (an engine's)
    claim="The implementation gap implicitly turns the on-policy RL to be off-policy; a simple yet effective importance "
          "sampling technique handles such discrepancy.",
    source="Yao et al. 2025, 'Your Efficient RL Framework Secretly Brings You Off-Policy RL Training'", failure=STALE,
    mechanism=above("mean_tis_weight_above_2", 0), switches=("tis_cap",), rivals=["lag_decoupled_masked"],
    costs=["mean_is_weight_mean"])
# the closing list (the book's 7_7_improvements: olmo3_style.py items 1-7, deepseek_v32_style.py 8-12) and the other
# named fixes, each where its failure happens, beside the same run without it
FIXES = {
    "dynamic_sampling": Judged(
        "fix", ["g4", "g4_dynamic"], Number("eval_mean", "higher", ACCURACY, 1.0),
        Record(claim="Over-sample and filter out prompts with the accuracy equal to 1 and 0 ... the experiment achieves "
                     "the same performance faster.", source="DAPO, arXiv 2503.14476, sec. 3.2 and Fig. 6",
               failure=at_least("mean_zero_std_frac", 0.1, "a tenth or more of its groups have rewards all equal"),
               mechanism=above_without("mean_signal_groups", 1.1), switches=("dynamic_sampling",),
               rivals=["g4_prompts64"], costs=["mean_zero_std_frac"]),
        "groups with no signal", "4 answers to each of 32 problems a step: half the groups all right or all wrong",
        numbers="1, 2"),
    "token_mean": Judged(
        "fix", ["search_token", "search_token_mean"], Number("late_resp_len", "lower", LENGTH),
        Record(claim="Sample-level loss calculation ... leads to an unhealthy increase in entropy and response length.",
               source="DAPO, arXiv 2503.14476, sec. 3.3", failure=WRONG_RUN_LONG,
               mechanism=at_most("mean_token_weight_spread", 1.001), switches=("loss_agg",),
               rivals=["search_token_drgrpo"], costs=[]),
        "long answers weighing less per token", SEARCH_TOKEN, numbers="3",
        also=(Number("entropy_peak_share", "lower", ACCURACY, 0.0),)),
    "drgrpo": Judged(
        "fix", ["book_runaway_token", "book_runaway_token_drgrpo"], Number("late_resp_len_wrong", "lower", LENGTH),
        Record(claim="An optimization bias in GRPO ... artificially increases response length (especially for incorrect "
                     "outputs) during training.", source="Dr. GRPO, arXiv 2503.20783, abstract",
               failure=WRONG_RUN_LONG,
               mechanism=at_most("mean_token_weight_spread", 1.001), switches=("loss_agg", "adv_norm"),
               rivals=["book_runaway_token_mean"], costs=[]),
        "the same, and the std's weight on easy groups", RUNAWAY_TOKEN, numbers="7"),
    "overlong": Judged(
        "fix", ["book_runaway", "book_runaway_overlong"], Number("mean_truncated_frac", "lower", ACCURACY, 0.0),
        Record(claim="The longer the response, the greater the punishment it receives ... signaling to the model to "
                     "avoid excessively long responses.", source="DAPO, arXiv 2503.14476, sec. 3.4",
               failure=at_least("mean_truncated_frac", 0.1, "a tenth or more of its answers are cut at the cap"),
               mechanism=Mechanism("mean_reward_overlong", "below 0", lambda without, with_: with_ < 0),
               switches=("overlong_cache",), rivals=["book_runaway_mask_truncated"], costs=["mean_reward_overlong"]),
        "answers cut at the cap", "the runaway (the book's 7_3)", numbers="DAPO"),
    "keep_mask": Judged(
        "fix", ["book_runaway", "book_runaway_keepmask_T1"], Number("entropy_peak_share", "lower", ACCURACY, 0.0),
        Record(claim="Combining top-p sampling with the Keep Sampling Mask strategy effectively preserves language "
                     "consistency during RL training.", source="DeepSeek-V3.2, arXiv 2512.02556, sec. 3.1",
               failure=ENTROPY_CLIMBS, mechanism=below_without("mean_sampler_gap", 0.5),
               switches=("keep_sampling_mask",), rivals=["book_runaway_tis"], costs=[]),
        "a learner with mass where top-p never samples", "the runaway (the book's 7_3)", numbers="11", seeds=8),
    "tis": Judged(
        "fix", ["lag_decoupled", "lag_decoupled_tis"], STABLE,
        TIS,
        "a sampler that is not the policy the ratio starts from", LAG_DECOUPLED + " (the run without: decoupled PPO "
        "with its behaviour weight removed)", numbers="6, as a sampler weight", also=(SPIKES,), seeds=10),
    "tis_engine": Judged(
        "fix", ["engine_fp8", "engine_fp8_tis"], STABLE,
        TIS._replace(rivals=["lag_fresh"]),  # what a learner would pick instead: a sampler at the learner's precision
        "a sampler whose weights are rounded to 8 bits (an fp8 engine) beside the fp32 learner",
        "lr 3e-4, 60 steps, the sampler's weights in fp8", numbers="6, as a sampler weight", also=(SPIKES,)),
    "kl_reweight": Judged(
        "fix", ["kl_reuse", "kl_reuse_reweight"], Number("kl_bias", "lower", ACCURACY, 0.0),
        Record(claim="We correct the K3 estimator to obtain an unbiased KL estimate using the importance-sampling ratio "
                     "between the current policy and the old policy.", source="DeepSeek-V3.2, arXiv 2512.02556, sec. 3.1",
               failure=at_least("kl_bias", 0.05, "its KL estimate is off the exact KL by 5% or more over the run"),
               mechanism=above("mean_ppo_kl", 1e-4), switches=("kl_reweight",), rivals=["kl_reuse_k3plus"], costs=[]),
        "a KL estimated on pi_old's samples", "KL 0.5, 16 updates a rollout, token mean, 50 steps", numbers="9"),
    "entropy_bonus": Judged(
        "fix", ["many", "many_entropy"], Number("distinct_final", "higher", DISTINCT),
        Record(claim="A positive value adds an entropy bonus that encourages exploration by keeping the policy from "
                     "collapsing to near-deterministic outputs.",
               source="TRL, grpo_config.py, entropy_coef (PPO, arXiv 1707.06347, sec. 5)",
               failure=at_least("distinct_fall", 0.5, "the different right answers a problem's 16 samples give fall by "
                                "half an answer or more"),
               mechanism=above_without("entropy", 1.1), switches=("entropy_coef",), rivals=["many_klcov"], costs=[]),
        "lost diversity: one right answer kept of several", "inequalities with 2-6 right digits, 16 updates a rollout",
        numbers="-"),
    "clip_higher": Judged(
        "fix", ["rare", "rare_clip_higher"], Number("entropy", "higher", RARE_ENTROPY),
        Record(claim="We increase the value of eps_high to leave more room for the increase of low-probability tokens; "
                     "this effectively enhances the policy's entropy.", source="DAPO, arXiv 2503.14476, sec. 3.1",
               failure=COLLAPSES, mechanism=below_without("mean_clip_frac_high", 0.9), switches=("clip_high",),
               rivals=["rare_cispo"], costs=["mean_clip_frac"]),
        "an entropy that collapses, its rare tokens clipped", RARE_REGIME, numbers="5",
        also=(Number("mean_clip_high_p_mean", "lower", ACCURACY, 0.0),)),
    "cispo": Judged(
        "fix", ["rare", "rare_cispo"], Number("think_half_step", "lower", 3.0, 1.0),
        Record(claim="These tokens were clipped out after the first on-policy update, preventing them from "
                     "contributing to subsequent off-policy gradient updates.",
               source="MiniMax-M1 (CISPO), arXiv 2506.13585, sec. 3.1", failure=THINK_CLIPPED,
               mechanism=above("mean_clip_frac", 0), switches=("objective", "clip", "clip_high"),
               rivals=["rare_clip_higher"], costs=[]),
        "a rare token that pays, its gradient dropped", RARE_REGIME, numbers="-", seeds=10),
    "gdpo": Judged(
        "fix", ["format1", "format1_gdpo"], Number("eval_mean", "higher", ACCURACY, 1.0),
        Record(claim="GRPO in multi-reward settings leads to reward advantages collapse; GDPO resolves this by "
                     "decoupling reward normalization across individual rewards.",
               source="GDPO, arXiv 2601.05242, abstract (NVlabs/GDPO)",
               failure=at_least("early_reward_collapse_frac", 0.1, "in a tenth or more of its groups, first 10 steps "
                                "(while some answers reason and some do not), two answers whose terms differ tie on "
                                "the reward"),
               mechanism=above("mean_tied_adv_gap", 0),
               switches=("reward_norm",), rivals=["format"], costs=[]),
        "a right direct answer and a wrong reasoned one, one advantage", "the default, a format bonus of 1",
        numbers="gdpo.py"),
    "dual_clip": Judged(
        "fix", ["lag", "lag_dual_clip"], STABLE,
        Record(claim="Where A < 0, r A is unbounded below as the ratio grows; the dual clip bounds it by c A, c > 1 "
                     "(paraphrase).", source="Ye et al. 2020, arXiv 1912.09729; verl compute_policy_loss_vanilla, "
                                             "clip_ratio_c",
               failure=STALE, mechanism=above("mean_neg_ratio_above_3", 0), switches=("dual_clip",),
               rivals=["lag_masked"], costs=[]),
        "stale wrong answers made likelier: an unbounded loss", "rollouts 4 steps old, pi_old their sampler, lr 3e-4",
        numbers="-", also=(SPIKES,)),
    "off_policy_mask": Judged(
        "fix", ["lag_decoupled", "lag_decoupled_masked"], STABLE,
        Record(claim="We mask negative sequences that introduce significant policy divergence; this improves stability "
                     "in certain training scenarios that would otherwise exhibit instability.",
               source="DeepSeek-V3.2, arXiv 2512.02556, sec. 3.1", failure=STALE,
               mechanism=above("mean_off_policy_masked_frac", 0), switches=("off_policy_mask",),
               rivals=["lag_decoupled_tis"], costs=["mean_off_policy_masked_frac"]),
        "stale wrong answers far from the policy", LAG_DECOUPLED, numbers="10", also=(SPIKES,), seeds=10),
    "gspo": Judged(
        "fix", ["dropout", "dropout_gspo"], Number("eval_mean", "higher", ACCURACY, 1.0),
        Record(claim="GSPO defines the importance ratio based on sequence likelihood ... and achieves superior training "
                     "efficiency and performance compared to GRPO.", source="GSPO, arXiv 2507.18071, abstract",
               failure=at_least("early_logratio_std_token", 0.1, "its token log-ratio's spread, first 10 steps, is 0.1 "
                                "or more: a noisy token ratio"),
               mechanism=above("mean_clip_frac", 0),
               switches=("ratio_level", "clip", "clip_high"), rivals=["dropout_gmpo"], costs=["mean_clip_frac"]),
        "a noisy token ratio", "the default, dropout 0.1 in the learner only, 60 steps", numbers="-"),
}


# ---------------------------------------------------------------- 5. the field past the chapter

G4_REGIME = "4 answers to each of 32 problems a step"
DPPO = Record(  # DPPO-TV's and DPPO-KL's, which differ in their divergence and its bound alone
    claim="The ratio is a noisy single-sample estimate of the true policy divergence; DPPO achieves superior training "
          "stability and efficiency.", source="DPPO, arXiv 2602.04879, abstract; sail-sg/Stable-RL core_algos.py",
    failure=STALE, mechanism=above("mean_clip_frac", 0), switches=("objective", "clip"), rivals=["lag_decoupled_tis"],
    costs=["mean_clip_frac"])
TOP_ENTROPY = Number("final", "higher", ACCURACY, 1.0)  # the 80/20 rule's, against its random control and every token
MANY_REGIME = "inequalities with 2-6 right digits, 16 updates a rollout"
FIELD = {
    "sapo": Judged(
        "field", ["book_token_noclip", "book_sapo"], LESSONS["instability_ppo"].number,
        Record(claim="SAPO replaces hard clipping with a smooth, temperature-controlled gate that adaptively attenuates "
                     "off-policy updates ... improved training stability.",
               source="SAPO, arXiv 2511.20347, abstract; TRL sapo, verl compute_policy_loss_sapo", failure=DECAY,
               mechanism=Mechanism("mean_sapo_gate", "below 1", lambda without, with_: with_ < 1),
               switches=("objective", "clip"), rivals=["book_ppo_clip"], costs=[]),
        "a sigmoid gate in place of the clip (--clip, the book's 10, is inert with it)",
        "lesson 1's far off-policy epochs, the ratio per token"),
    "gmpo": Judged(
        "field", ["book_token_noclip", "book_gmpo"], LESSONS["instability_ppo"].number,
        Record(claim="Replacing GRPO's arithmetic mean with the geometric mean of token-level rewards, as the latter is "
                     "inherently less sensitive to outliers.",
               source="GMPO, arXiv 2507.20673, abstract; verl compute_policy_loss_geo_mean", failure=DECAY,
               mechanism=above("mean_clip_frac", 0), switches=("objective", "clip"), rivals=["book_ppo_clip"],
               costs=["mean_clip_frac"]),
        "the geometric mean of the token ratios, clipped in log space", "lesson 1's far off-policy epochs, the ratio "
                                                                          "per token"),
    "icepop": Judged(
        "field", ["lag_decoupled", "lag_decoupled_icepop"], STABLE,
        Record(claim="IcePop only calibrates gradients within the acceptable region and discards all noisy gradient "
                     "updates beyond that boundary.", source="IcePop, Ring-1T, arXiv 2510.18855, sec. 2.3.2 (alpha 0.5, "
                                                                 "beta 5)",
               failure=STALE, mechanism=above("mean_is_masked_frac", 0), switches=("tis_cap", "tis_floor", "tis_mode"),
               rivals=["lag_decoupled_tis"], costs=["mean_is_masked_frac"]),
        "weights outside [0.5, 5] set to 0, not truncated", LAG_DECOUPLED, also=(SPIKES,), seeds=10),
    "sequence_is": Judged(
        "field", ["lag_decoupled", "lag_decoupled_seq_is"], STABLE,
        Record(claim="Per-sequence weight (product of tokens; unbiased, high variance).",
               source="verl rollout_corr_helper.py, rollout_is sequence; TRL sequence_mask, cap 3", failure=STALE,
               mechanism=above("mean_is_masked_frac", 0), switches=("tis_cap", "tis_mode"),
               rivals=["lag_decoupled_tis"], costs=["mean_is_masked_frac"]),
        "one weight an answer, the product of its tokens', masked above 3", LAG_DECOUPLED, also=(SPIKES,), seeds=10),
    "rejection": Judged(
        "field", ["lag_decoupled", "lag_decoupled_reject"], STABLE,
        Record(claim="Rejection sampling (RS) corrects for any distribution shift between data collection and training: "
                     "binary filtering for outlier exclusion.",
               source="verl docs/algo/rollout_corr.md; rollout_corr_helper.py, rollout_rs seq_mean_k3", failure=STALE,
               mechanism=above("mean_rejected_frac", 0), switches=("rejection", "rejection_bound"),
               rivals=["lag_decoupled_tis"], costs=["mean_rejected_frac"]),
        "answers whose mean k3 from the sampler passes 0.01 dropped", LAG_DECOUPLED, also=(SPIKES,), seeds=10),
    "dppo_tv": Judged(
        "field", ["lag_decoupled", "lag_decoupled_dppo_tv"], STABLE, DPPO,
        "a trust region on each probability's move from the sampler, TV 0.15", LAG_DECOUPLED, also=(SPIKES,), seeds=10),
    "dppo_kl": Judged(
        "field", ["lag_decoupled", "lag_decoupled_dppo_kl"], STABLE, DPPO,
        "the same on the binary KL, 0.05", LAG_DECOUPLED, also=(SPIKES,), seeds=10),
    "vespo": Judged(
        "field", ["lag_decoupled_tis", "lag_decoupled_vespo"], STABLE,
        Record(claim="A closed-form reshaping kernel on sequence-level importance weights ... maintains stable training "
                     "under staleness ratios up to 64x.",
               source="VESPO, arXiv 2602.10693, abstract; FloyedShen/VESPO core_algos.py", failure=STALE,
               mechanism=Mechanism("mean_is_weight_mean", "below 1", lambda without, with_: with_ < 1),
               switches=("objective", "loss_agg"), rivals=["lag_decoupled_icepop"], costs=["mean_is_weight_mean"]),
        "a Gamma weight of each answer's ratio to the sampler, in place of TIS's truncated weight of each token",
        LAG_DECOUPLED + " (the run without: TIS, C = 2, whose cap VESPO keeps inside its weight)", also=(SPIKES,)),
    "top_entropy": Judged(
        "field", ["many_top_entropy_random", "many_top_entropy"], TOP_ENTROPY,
        Record(claim="Utilizing only 20% of the tokens while maintaining performance comparable to full-gradient "
                     "updates.", source="the 80/20 rule, arXiv 2506.01939, abstract; TRL top_entropy_quantile",
               failure=Failure("final", "it ends 5 points or more behind every token's run (many): the gradient "
                               "of a random 20% of tokens costs accuracy",
                               lambda control, every: TOP_ENTROPY.gain(control, every) >= 0.05,
                               against="many"),
               mechanism=within("mean_low_entropy_frac", 0.75, 0.85), switches=("top_entropy_random",),
               rivals=["many_entropy"], costs=["mean_low_entropy_frac"]),
        "the 20% of tokens by entropy, not at random", MANY_REGIME + "; beside a random 20% (the control) and every "
                                                                     "token (many)", keeps="many"),
    "adaptive_entropy": Judged(
        "field", ["many", "many_adaptive_entropy"], Number("final", "higher", ACCURACY, 1.0),
        Record(claim="Mitigating premature entropy collapse is critical for improved test performance.",
               source="Skywork-OR1, arXiv 2505.22312, abstract; TRL use_adaptive_entropy",
               failure=at_most_failure("entropy", 0.2, "its entropy, last 10 steps, is at or below 0.2 nats, the target"),
               mechanism=within("entropy", 0.1, 0.4), switches=("adaptive_entropy",), rivals=["many_entropy"],
               costs=[]),
        "the entropy bonus steered towards 0.2 nats", MANY_REGIME),
    "rloo": Judged(
        "field", ["g4_nobaseline", "g4_rloo"], Number("eval_mean", "higher", ACCURACY, 1.0),
        Record(claim="RLOO is a variant of REINFORCE that reduces variance by using leave-one-out baselines.",
               source="RLOO, arXiv 2402.14740; TRL docs/source/paper_index.md",
               failure=at_least("mean_adv_mean", 0.1, "its advantages' mean is 0.1 or more: without a baseline every "
                                "right answer is pushed up and no wrong one down"),
               mechanism=within("mean_adv_to_centred", 4 / 3 - 1e-3, 4 / 3 + 1e-3), switches=("baseline",),
               rivals=["g4"], costs=[]),
        "the mean of the other answers as the baseline, against none (REINFORCE)", G4_REGIME),
    "reinforce_pp": Judged(
        "field", ["g4", "g4_reinforce_pp"], Number("eval_mean", "higher", ACCURACY, 1.0),
        Record(claim="Normalizing advantages across the entire global batch gives a more stable and effectively "
                     "unbiased estimate.", source="REINFORCE++, arXiv 2501.03262, abstract (v9)",
               failure=at_least("mean_zero_std_frac", 0.2, "a fifth or more of its groups' rewards are all equal: "
                                "GRPO gives them nothing"),
               mechanism=above("mean_equal_groups_adv", 0), switches=("baseline",), rivals=["g4_drgrpo"], costs=[]),
        "the batch's mean and std over its tokens as the baseline", G4_REGIME),
    "luspo": Judged(
        "field", ["dropout_gspo", "dropout_luspo"], Number("late_resp_len", "higher", LENGTH),
        Record(claim="We rectify the length bias inherent in GSPO ... thereby resolving the issue of response length "
                     "collapse.", source="LUSPO, arXiv 2602.05261, abstract; TRL loss_type luspo",
               failure=Failure("late_resp_len", "its answers, 2nd half, are at most 0.8 times as long as in its first "
                               "10 steps: GSPO's length collapse",
                               lambda run: run["late_resp_len"] <= 0.8 * run["early_resp_len"]),
               mechanism=at_most("mean_token_weight_spread", 1.001), switches=("loss_agg",), rivals=["dropout"],
               costs=[]),
        "GSPO's loss times each answer's length", "the default, dropout 0.1 in the learner only, GSPO, 60 steps"),
    "k3_plus": Judged(
        "field", ["kl_onpolicy", "kl_onpolicy_k3plus"], Number("mean_kl_exact", "lower", KL_EXACT, 0.0),
        Record(claim="The expected gradient of k1 and k3 estimator is not the expected gradient of KL; k2 gives the "
                     "right gradient, so we use a straight-through trick.",
               source="verl, verl/trainer/ppo/core_algos.py, kl_penalty",
               failure=at_least("mean_kl_grad_bias", 0.05, "its KL term's gradient is 5% or more off the exact KL's"),
               mechanism=at_most("mean_kl_grad_bias", 0.01), switches=("kl_estimator",), rivals=["kl_onpolicy_k2"],
               costs=[]),
        "k3's value with k2's gradient", "KL 0.1 on the samples of the policy itself", seeds=8),
}


# ---------------------------------------------------------------- 6. every judged pair

def judged():
    """[(name, Judged)] of every lesson, fix and variant, under the name the command line and the pages give it:
    a lesson's own (instability), fix_<item> (fix_tis), field_<method> (field_sapo)."""
    return ([*LESSONS.items()] + [("fix_" + item, fix) for item, fix in FIXES.items()]
            + [("field_" + method, variant) for method, variant in FIELD.items()])
