"""The chapter's lessons, the closing list's fixes and the field's variants: for each, the experiments it runs
and the check that judges them, in one place.

    python experiments.py --list               # each experiment and its exact train.py flags
    python experiments.py instability          # a lesson's experiments (fix_tis: a fix's, field_sapo: a variant's)
    python experiments.py table                # each judged, seed by seed, on the runs in runs/exp (report.py)

In reading order: the experiments (EXPERIMENTS, each a list of train.py flags on top of COMMON); the checks a
lesson uses; then the three collections that read them, each a dict of named records. LESSONS: a broken run
beside its fix and a check of their two summaries for one seed (Lesson). FIXES: an item of the chapter's closing
list, judged by the number it was made to move, by a margin of twice that number's spread over seeds without it,
and the gates that show its mechanism at work in the run without it (Fix). FIELD: a variant of the field past
the chapter, judged as the lesson or fix it stands beside is (Variant). A lesson, a fix and a variant answer the
same three questions (its experiments, its check, its claim); `judged()` lists them all under the names the
command line gives them. The checks read run_summary's numbers (report.py); this file imports nothing of the
project.
"""
from typing import Callable, NamedTuple

# ---------------------------------------------------------------- 1. the experiments: train.py flags

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
                                       "(docs/adding_a_variant.md builds it)"),
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
    "lag_decoupled": ([*LAG, "--lag-pi-old", "learner"], "rollouts 4 steps old, pi_old the learner at the step "
                      "(decoupled PPO): the stale sampler is not the policy the ratio starts from"),
    "lag_decoupled_tis": ([*LAG, "--lag-pi-old", "learner", "--tis-cap", "2"],
                          "... with truncated importance sampling, C = 2"),
    "lag_decoupled_masked": ([*LAG, "--lag-pi-old", "learner", "--off-policy-mask", "0.1"],
                             "... with off-policy sequence masking, delta 0.1"),
    "lag_decoupled_dual_clip": ([*LAG, "--lag-pi-old", "learner", "--dual-clip", "3"], "... with the dual clip, c = 3"),
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
    "g4_rloo": ([*G4, "--baseline", "leave_one_out"], "... RLOO's: the mean of the other 3 answers, undivided"),
    "g4_reinforce_pp": ([*G4, "--baseline", "batch"], "... REINFORCE++'s: the batch's mean and std over its tokens"),
    "search_dropout_luspo": ([*SEARCH, "--dropout", "0.1", "--steps", "60", "--ratio-level", "gspo", "--clip", "3e-4",
                              "--clip-high", "4e-4", "--loss-agg", "luspo"],
                             "... GSPO with each answer's loss scaled by its length (LUSPO)"),
    # the KL's gradient where pi samples its own tokens (one update a rollout, at the sampler's temperature), its
    # exact value and its estimator's gradient bias logged beside (--exact-kl)
    "kl_onpolicy": (KL_ONPOLICY, "k3 per token, beta 0.1, one update a rollout, the exact KL and k3's gradient bias "
                                 "logged"),
    "kl_onpolicy_k3plus": ([*KL_ONPOLICY, "--kl-estimator", "k3+"], "... with k3+: k3's value, k2's gradient (verl)"),
    "kl_onpolicy_k2": ([*KL_ONPOLICY, "--kl-estimator", "k2"], "... with k2, whose gradient is k3+'s and whose value "
                                                               "is biased"),
    # rivals: the method a learner would pick instead of a fix or a variant, in its regime (lessons.RIVALS)
    "book_runaway_format_w01": ([*RUNAWAY, "--kl", "0", "--mu", "1", "--format-check", "book", "--format-weight",
                                 "0.1"], "the book's 7_6 format bonus at 0.1, the book's other remedy (7.6)"),
    "book_runaway_tis": ([*RUNAWAY, "--kl", "0", "--mu", "1", "--tis-cap", "2"],
                         "the runaway with truncated importance sampling towards the learner, C = 2"),
    "book_runaway_mask_truncated": ([*RUNAWAY, "--kl", "0", "--mu", "1", "--mask-truncated"],
                                    "the runaway with the answers cut at the cap out of the loss (DAPO's overlong "
                                    "filtering)"),
    "ds8": (["--prompts-per-step", "8"], "the default at 8 prompts a step: more groups, not redrawn ones"),
    "kl_reuse_k3plus": ([*KL_REUSE, "--loss-agg", "token_mean", "--steps", "50", "--kl-estimator", "k3+"],
                        "the strong KL on 16 updates a rollout by k3+ (k2's gradient) instead of re-weighting"),
    "rare_format_nostd": ([*RARE, "--format-weight", "0.1", "--adv-norm", "none"],
                          "... the format bonus of 0.1 in the sum, no std to drown it in (Dr. GRPO's advantages)"),
    "search_dropout_gmpo": ([*SEARCH, "--dropout", "0.1", "--steps", "60", "--objective", "gmpo", "--clip", "0.4"],
                            "the noisy token ratio with GMPO's geometric mean, clipped in log space at 0.4"),
}


# ---------------------------------------------------------------- 2. what every judged method names

class Number(NamedTuple):
    """A number of run_summary that a method is made to move, the way, and by how much two runs must differ before
    the difference counts: twice that number's spread over the seeds of the run without the method (two seeds of one
    run differ too; tests/test_verdicts.py holds each to this), or a lesson's own rule (10 or 15 points)."""
    key: str       # a run_summary key, named in METRICS
    side: str      # "higher" or "lower": the way the method is made to move it
    margin: tuple  # (size, unit): "points" or "nats" (the number's own unit), "relative" (a share of the other run's)

    def gain(self, other, own):
        """How far one run's summary (own) is ahead of another's on this number, in its unit: + ahead, - behind."""
        return own[self.key] - other[self.key] if self.side == "higher" else other[self.key] - own[self.key]

    def need(self, other):
        size, unit = self.margin
        return size * (abs(other[self.key]) if unit == "relative" else 1)

    def moved(self, without, with_):
        """The method's run moved the number its way by at least the margin (and by more than 0: 2% of 0 asks
        nothing)."""
        gain = self.gain(without, with_)
        return gain > 0 and gain >= self.need(without)

    def against(self, rival, own):
        """'better', 'same' or 'worse': a method's run beside a rival's, by the margin either way."""
        gain = self.gain(rival, own)
        if gain > 0 and gain >= self.need(rival):
            return "better"
        return "worse" if gain < 0 and -gain >= self.need(rival) else "same"

    @property
    def text(self):
        return f"{METRICS[self.key]} {self.side}, by >= {margin_text(*self.margin)}"


def margin_text(size, unit):
    if unit == "nats":
        return f"{size:g} nats"
    return f"{size * 100:g} points" if unit == "points" else f"{size * 100:g}% of the other run's"


class Mechanism(NamedTuple):
    """What a method does by construction, as a number of its own run: it acts in every seed, or the wiring is
    wrong, or the regime gives the method nothing to act on (the run without it shows which: report.py prints both)."""
    key: str        # a run_summary key, named in METRICS
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


METRICS = {  # run_summary's keys, as the tables and the records name them
    # outcomes: what a learner cares about
    "mean_signal_groups": "groups with signal a step", "late_resp_len_wrong": "wrong answers' length, 2nd half",
    "late_resp_len": "answers' length, 2nd half", "mean_truncated_frac": "cut share, mean of the run",
    "sampled_final": "sampled held-out accuracy, end", "final": "greedy held-out accuracy, end",
    "eval_mean": "greedy held-out accuracy, mean of the evaluations", "drop": "greedy accuracy's fall from its peak",
    "kl_bias": "KL estimate's bias, \\|mean (estimate - exact) / exact\\| over the run",
    "distinct_final": "different right answers a held-out problem in 16 samples, end",
    "sampler_entropy": "the sampled policy's entropy, last 10 steps", "entropy": "the learner's entropy, last 10 steps",
    "entropy_peak_share": "the learner's highest 20-step entropy, of ln V",
    "think_half_step": "steps until half the sampled answers reason", "reward": "training reward, last 10 steps",
    "grad_limited_steps": "steps whose largest gradient norm passed its limit, 1 (--max-grad-norm)",
    "mean_kl_exact": "exact KL(pi \\|\\| pi_ref), mean of the run",
    # mechanisms and costs: what a method does, means of the run unless named
    "grad_norm_peak": "the run's largest gradient norm", "kl_low": "the KL term's lowest step",
    "mean_sampler_gap": "\\|log pi_old - log pi_sampler\\| a token",
    "mean_format_paid_wrong": "format bonus paid to a wrong answer",
    "mean_token_weight_spread": "a token's largest weight in the mean over its smallest",
    "mean_reward_overlong": "overlong penalty an answer", "mean_tis_weight_above_2": "tokens whose TIS weight passes 2",
    "mean_ppo_kl": "KL(pi_old \\|\\| pi) an update", "mean_clip_frac_high": "tokens the clip stops above",
    "mean_clip_frac": "tokens the clip or the region stops", "mean_neg_ratio_above_3": "wrong answers' tokens at "
    "ratio > 3", "mean_adv_correct_corr": "the advantage's correlation with correctness",
    "mean_off_policy_masked_frac": "answers masked", "early_logratio_std_seq": "the ratio's spread an answer, first "
    "10 steps", "mean_is_masked_frac": "tokens whose weight is 0", "mean_rejected_frac": "tokens rejected",
    "mean_is_weight_mean": "the importance weight applied", "mean_low_entropy_frac": "tokens without a gradient",
    "mean_adv_to_centred": "\\|A\\| over \\|r - group mean\\|", "mean_equal_groups_adv": "\\|A\\| in all-equal groups",
    "mean_kl_grad_bias": "the KL gradient's bias", "mean_zero_std_frac": "groups with no signal",
    "early_logratio_std_token": "the token ratio's spread, first 10 steps",
}


class Record(NamedTuple):
    """What every judged method names, whatever it is (a lesson's fix, an item of the closing list, a method of the
    field): its source's claim, what it does by construction, what a learner would pick instead, what it costs."""
    claim: str            # one sentence, as its source states it
    source: str           # where: the paper (arXiv id, section) or the code (repository, file)
    mechanism: Mechanism  # what it does by construction: it must act in every seed
    rivals: list          # [experiment]: what a learner would pick instead, in the same regime, judged by the same number
    costs: list           # [run_summary key]: the share of tokens or answers it drops or zeroes, or what it pays


# ---------------------------------------------------------------- 3. the lessons

def broken_vs_fixed(broken, fixed, points=0.15, gap=None):
    """The lessons' one test: the broken run's greedy accuracy falls at least `points` from
    its own peak and ends at least `gap` (by default `points`) below the fixed run's. (15 points:
    one prompt a step is noisy, and runs that do not collapse still drift; EXPERIMENTS.md says how far.)"""
    gap = points if gap is None else gap
    return broken["peak"] - broken["final"] >= points and fixed["final"] - broken["final"] >= gap


def falls_and_trails(broken, fixed):
    """Lesson 1's test: broken_vs_fixed with the fix 10 points ahead at the end, not 15. In the book's regime
    PPO's clip run drifts too, and the knobs that stop its drift stop the collapse without a clip as well
    (EXPERIMENTS.md, lesson 1's ablation); the clip's mechanism, the update it bounds, separates the two runs
    where their accuracy does not (the lesson's Record)."""
    return broken_vs_fixed(broken, fixed, *GREEDY_RULES[falls_and_trails])


# the checks on greedy accuracy -> (the broken run's fall from its peak, its gap below the fix at the end)
GREEDY_RULES = {broken_vs_fixed: (0.15, 0.15), falls_and_trails: (0.15, 0.10)}


def sampled_falls(run, points=0.15):
    """The held-out accuracy of answers drawn as the rollouts draw them falls `points` from its
    peak: what the book's 7_3 log shows of its runaway (its training reward, sampled at T 0.8 and
    top-p 0.9, 0.6-0.9 -> 0.04-0.25), where greedy decoding falls less (46.2% -> 33.0%)."""
    return run["sampled_peak"] is not None and run["sampled_peak"] - run["sampled_final"] >= points


def runs_away(broken, fixed, points=0.15):
    """The runaway by the signs of the book's 7_3 log: the learner's entropy (a 20-step mean)
    reaches half its maximum, ln V, and the sampled held-out accuracy falls `points` from its
    peak and ends `points` below the fix's. Greedy accuracy and the answers at the cap are
    reported beside it, as signs of their own (report.lesson_table)."""
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


class Lesson(NamedTuple):
    """A lesson of the chapter: a broken run beside its fix, judged seed by seed."""
    experiments: list  # [broken, fixed]: two names of EXPERIMENTS
    check: Callable    # check(broken's summary, fixed's summary, of one seed: run_summary's numbers) -> bool
    rule: str          # what the check asks, in words (the pages print it)
    number: Number     # the check's number alone, to set the fix beside its rivals
    record: Record     # the fix's claim, mechanism, rivals and costs
    words: tuple       # (what its mechanism does, what its check finds): how the verdict lines say them


CLIP = Record(
    claim="The clipped_ratio enforces a maximum deviation from the old policy to ensure that updates remain relatively "
          "conservative and improve training stability.",
    source="the book, ch07_main.ipynb, 7.4 (7_4_plus_clip_ratio.py); PPO, arXiv 1707.06347, sec. 3",
    mechanism=below_without("grad_norm_peak", 0.5), rivals=["book_clip10"], costs=["mean_clip_frac"])
K3 = Record(
    claim="We estimate the KL divergence with the following unbiased estimator (Schulman, 2020), which is guaranteed "
          "to be positive.",
    source="DeepSeekMath, arXiv 2402.03300, sec. 4.1.1 (k3 per token); the book blames the sum over tokens (7.5)",
    mechanism=Mechanism("kl_low", "at least 0", lambda without, with_: with_ >= 0),
    rivals=["book_nokl", "book_kl_beta002"], costs=[])
LESSONS = {
    "instability": Lesson(["book_noclip", "book_ppo_clip"], falls_and_trails,
                          "no clip's greedy accuracy falls >= 15 points from its peak and ends >= 10 below PPO's clip "
                          "(which drifts down too)",
                          Number("final", "higher", (0.10, "points")), CLIP,
                          ("The clip bounds the update", "accuracy is rescued")),
    "naive_kl": Lesson(["book_kl", "book_kl_k3"], broken_vs_fixed,
                       "k1 on summed log-probs' greedy accuracy falls >= 15 points from its peak and ends >= 15 below "
                       "k3 per token", Number("final", "higher", (0.15, "points")), K3,
                       ("k3 stays non-negative", "accuracy is rescued")),
    "naive_kl_reuse": Lesson(["kl_naive", "kl_k3"], broken_vs_fixed,
                             "the same in our default regime (two updates a rollout)", Number("final", "higher", (0.15, "points")),
                             K3._replace(rivals=["default"]), ("k3 stays non-negative", "accuracy is rescued")),
    "runaway": Lesson(["book_runaway", "book_runaway_keepmask"], runs_away,
                      "the book's 7_3's entropy reaches half of ln V, and its sampled accuracy falls >= 15 points "
                      "from its peak and ends >= 15 below the fix's", Number("sampled_final", "higher", (0.15, "points")),
                      Record(claim="We preserve the truncation masks during sampling from pi_old and apply them to "
                                   "pi_theta during training, ensuring both policies share identical action subspaces.",
                             source="DeepSeek-V3.2, arXiv 2512.02556, sec. 3.1, Keep Sampling Mask (the book's item 11)",
                             mechanism=at_most("mean_sampler_gap", 0.01),
                             rivals=["book_runaway_k3", "book_runaway_T1"], costs=[]),
                      ("The learner keeps to the sampler's support", "the runaway is stopped")),
    "format_exploit": Lesson(["book_runaway_format", "book_runaway_format_gated"], reward_hides_the_collapse,
                             "both runs' sampled accuracy falls >= 15 points; ungated, the format reward ends above 0.9 "
                             "and the reward keeps half its peak (it hides the fall); gated, it loses more than half",
                             Number("sampled_final", "higher", (0.15, "points")),
                             Record(claim="The model already gets too many rewards from following the <think> tag "
                                          "format; another improvement could be to make the format reward conditional, "
                                          "only awarded if the answer is also correct.",
                                    source="the book, ch07_main.ipynb, 7.6 (7_6_plus_format_reward.py)",
                                    mechanism=at_most("mean_format_paid_wrong", 0),
                                    rivals=["book_runaway_format_w01"], costs=[]),
                             ("The gate pays no wrong answer", "the ungated reward hides the collapse")),
}
# the four lessons the pages number, in the chapter's order of their failures
NUMBERED = {"instability": 1, "naive_kl": 2, "runaway": 3, "format_exploit": 4}
LABELS = {  # experiment -> how the pages' verdict lines name it
    "book_noclip": "no clip", "book_ppo_clip": "PPO's clip", "book_kl": "k1 on summed log-probs",
    "book_kl_k3": "k3 per token", "kl_naive": "k1 on summed log-probs", "kl_k3": "k3 per token",
    "book_runaway": "the book's 7_3", "book_runaway_keepmask": "the learner on the sampler's support",
    "book_runaway_format": "ungated", "book_runaway_format_gated": "gated", "book_clip10": "the book's clip, eps 10",
    "book_nokl": "no KL", "book_kl_beta002": "k1 at beta 0.02", "book_runaway_k3": "a k3 KL, beta 0.1",
    "book_runaway_T1": "the sampler at T 1", "book_runaway_format_w01": "the bonus at 0.1", "default": "no KL",
}


# ---------------------------------------------------------------- 4. the fixes

class Fix(NamedTuple):
    """An item of the chapter's closing list, or another named fix: the same run without it and with it, judged
    by the number its source says it moves."""
    numbers: str     # its numbers in the book's list ("1, 2"), or where else it comes from ("DAPO", "gdpo.py"; "-")
    fixes: str       # what it fixes
    regime: str      # where it runs: the regime in which that failure happens
    without: str     # the experiment without it (a name of EXPERIMENTS)
    with_: str       # the same experiment with it
    number: Number   # the number it is judged by, the way and the margin
    gates: list      # [(run_summary key, what it is)]: numbers of the run *without* it that show the failure present,
    # so that a fix that moves nothing can be told from a fix with nothing to act on
    record: Record   # its claim, mechanism, rivals and costs

    @property
    def experiments(self):
        """[without, with]: a Lesson's [broken, fixed]."""
        return [self.without, self.with_]

    def check(self, without, with_):
        """One seed's two summaries: its number moved its way by its margin."""
        return self.number.moved(without, with_)

    @property
    def rule(self):
        return f"{self.fixes}: {self.number.text}"


LAG_DECOUPLED = "rollouts 4 steps old, pi_old the learner (decoupled), lr 3e-4"
RARE_REGIME = "a warm start that seldom reasons, 16 updates a rollout"
# the closing list (the book's 7_7_improvements: olmo3_style.py items 1-7, deepseek_v32_style.py 8-12) and the other
# named fixes: item -> Fix. Each margin is twice the std over seeds 0-2 of the run without the fix, rounded up to two
# digits, as results.jsonl records them (tests/test_verdicts.py holds each to that rule): in points for a share (an
# accuracy, the cut share, the KL's relative bias), relative for a count or a length, whose scale the regime sets
# (the prompts a step, the cap), in nats for an entropy
FIXES = {
    "dynamic_sampling": Fix(
        numbers="1, 2", fixes="groups with no signal", regime="the default at 4 prompts a step",
        without="ds4", with_="ds4_dynamic", number=Number("eval_mean", "higher", (0.012, "points")),
        gates=[("mean_zero_std_frac", "groups with no signal")],
        record=Record(claim="Over-sample and filter out prompts with the accuracy equal to 1 and 0 ... the experiment "
                            "achieves the same performance faster.",
                      source="DAPO, arXiv 2503.14476, sec. 3.2 and Fig. 6",
                      mechanism=above_without("mean_signal_groups", 1.1), rivals=["ds8"],
                      costs=["mean_zero_std_frac"])),
    "token_mean": Fix(
        numbers="3", fixes="long answers weighing less per token", regime="the runaway's task, default settings",
        without="search", with_="search_token", number=Number("late_resp_len", "lower", (0.25, "relative")),
        gates=[("mean_truncated_frac", "answers cut at the cap")],
        record=Record(claim="Sample-level loss calculation ... leads to an unhealthy increase in entropy and response "
                            "length.", source="DAPO, arXiv 2503.14476, sec. 3.3",
                      mechanism=at_most("mean_token_weight_spread", 1.001), rivals=["search_drgrpo"], costs=[])),
    "drgrpo": Fix(
        numbers="7", fixes="the same, and the std's weight on easy groups",
        regime="the runaway's task, default settings",
        without="search", with_="search_drgrpo", number=Number("late_resp_len_wrong", "lower", (0.26, "relative")),
        gates=[("mean_truncated_frac", "answers cut at the cap")],
        record=Record(claim="An optimization bias in GRPO ... artificially increases response length (especially "
                            "for incorrect outputs) during training.", source="Dr. GRPO, arXiv 2503.20783, abstract",
                      mechanism=at_most("mean_token_weight_spread", 1.001), rivals=["search_token"], costs=[])),
    "overlong": Fix(
        numbers="DAPO", fixes="answers cut at the cap", regime="the runaway",
        without="book_runaway", with_="book_runaway_overlong", number=Number("mean_truncated_frac", "lower",
                                                                             (0.038, "points")),
        gates=[("mean_truncated_frac", "answers cut at the cap")],
        record=Record(claim="The longer the response, the greater the punishment it receives ... signaling to the "
                            "model to avoid excessively long responses.", source="DAPO, arXiv 2503.14476, sec. 3.4",
                      mechanism=Mechanism("mean_reward_overlong", "below 0", lambda without, with_: with_ < 0),
                      rivals=["book_runaway_mask_truncated"], costs=["mean_reward_overlong"])),
    "keep_mask": Fix(
        numbers="11", fixes="a learner with mass where top-p never samples", regime="the runaway",
        without="book_runaway", with_="book_runaway_keepmask_T1",
        number=Number("entropy_peak_share", "lower", (0.015, "points")),
        gates=[("mean_tis_weight_mean", "the learner's mass on what the sampler can draw")],
        record=Record(claim="Combining top-p sampling with the Keep Sampling Mask strategy effectively preserves "
                            "language consistency during RL training.",
                      source="DeepSeek-V3.2, arXiv 2512.02556, sec. 3.1",
                      mechanism=below_without("mean_sampler_gap", 0.5), rivals=["book_runaway_tis"], costs=[])),
    "tis": Fix(
        numbers="6, as a sampler weight", fixes="a sampler that is not the policy the ratio starts from",
        regime=LAG_DECOUPLED, without="lag_decoupled", with_="lag_decoupled_tis",
        number=Number("grad_limited_steps", "lower", (0.14, "points")),
        gates=[("mean_sampler_kl_k3", "KL(sampler || pi_old) a token"),
               ("mean_tis_weight_above_2", "tokens whose weight pi_old / pi_sampler passes the cap, 2")],
        record=Record(claim="The implementation gap implicitly turns the on-policy RL to be off-policy; a simple yet "
                            "effective importance sampling technique handles such discrepancy.",
                      source="Yao et al. 2025, 'Your Efficient RL Framework Secretly Brings You Off-Policy RL Training'",
                      mechanism=above("mean_tis_weight_above_2", 0), rivals=["lag_decoupled_masked"],
                      costs=["mean_is_weight_mean"])),
    "kl_reweight": Fix(
        numbers="9", fixes="a KL estimated on pi_old's samples", regime="KL 0.5, 16 updates a rollout, token mean, 50 steps",
        without="kl_reuse", with_="kl_reuse_reweight", number=Number("kl_bias", "lower", (1.7, "points")),
        gates=[("mean_ppo_kl", "KL(pi_old || pi) an update")],
        record=Record(claim="We correct the K3 estimator to obtain an unbiased KL estimate using the importance-sampling "
                            "ratio between the current policy and the old policy.",
                      source="DeepSeek-V3.2, arXiv 2512.02556, sec. 3.1",
                      mechanism=above("mean_ppo_kl", 1e-4), rivals=["kl_reuse_k3plus"], costs=[])),
    "entropy_bonus": Fix(
        numbers="-", fixes="lost diversity: one right answer kept of several",
        regime="inequalities with 2-6 right digits, 16 updates a rollout",
        without="many", with_="many_entropy", number=Number("distinct_final", "higher", (0.08, "relative")),
        gates=[("distinct_fall", "the different right answers a problem: their fall from step 0")],
        record=Record(claim="A positive value adds an entropy bonus that encourages exploration by keeping the policy "
                            "from collapsing to near-deterministic outputs.",
                      source="TRL, grpo_config.py, entropy_coef (PPO, arXiv 1707.06347, sec. 5)",
                      mechanism=above_without("entropy", 1.1), rivals=["many_klcov"], costs=[])),
    "clip_higher": Fix(
        numbers="5", fixes="a rare token that pays, clipped", regime=RARE_REGIME,
        without="rare", with_="rare_clip_higher", number=Number("entropy", "higher", (0.006, "nats")),
        gates=[("mean_clip_high_lowp_frac", "of the high-clipped tokens, the share below p 0.2")],
        record=Record(claim="We increase the value of eps_high to leave more room for the increase of low-probability "
                            "tokens; this effectively enhances the policy's entropy.",
                      source="DAPO, arXiv 2503.14476, sec. 3.1",
                      mechanism=below_without("mean_clip_frac_high", 0.9), rivals=["rare_cispo"],
                      costs=["mean_clip_frac"])),
    "cispo": Fix(
        numbers="-", fixes="a rare token that pays, its gradient dropped", regime=RARE_REGIME,
        without="rare", with_="rare_cispo", number=Number("think_half_step", "lower", (0.4, "relative")),
        gates=[("mean_clip_high_lowp_frac", "of the high-clipped tokens, the share below p 0.2")],
        record=Record(claim="These tokens were clipped out after the first on-policy update, preventing them from "
                            "contributing to subsequent off-policy gradient updates.",
                      source="MiniMax-M1 (CISPO), arXiv 2506.13585, sec. 3.1",
                      mechanism=above("mean_clip_frac", 0), rivals=["rare_clip_higher"], costs=[])),
    "gdpo": Fix(
        numbers="gdpo.py", fixes="a rare reward term drowned by a common one",
        regime=RARE_REGIME + ", a format bonus of 0.1",
        without="rare_format", with_="rare_format_gdpo", number=Number("think_half_step", "lower", (0.25, "relative")),
        gates=[("mean_adv_correct_corr", "the correctness reward's correlation with the advantage")],
        record=Record(claim="GRPO in multi-reward settings leads to reward advantages collapse; GDPO resolves this by "
                            "decoupling reward normalization across individual rewards.",
                      source="GDPO, arXiv 2601.05242, abstract (NVlabs/GDPO)",
                      mechanism=above_without("mean_adv_correct_corr", 1.0), rivals=["rare_format_nostd"], costs=[])),
    "dual_clip": Fix(
        numbers="-", fixes="stale wrong answers made likelier: an unbounded loss",
        regime="rollouts 4 steps old, pi_old their sampler, lr 3e-4",
        without="lag", with_="lag_dual_clip", number=Number("grad_limited_steps", "lower", (0.07, "points")),
        gates=[("mean_neg_ratio_above_3", "of the wrong answers' tokens, the share with ratio > 3")],
        record=Record(claim="Where A < 0, r A is unbounded below as the ratio grows; the dual clip bounds it by c A, "
                            "c > 1 (paraphrase).",
                      source="Ye et al. 2020, arXiv 1912.09729; verl compute_policy_loss_vanilla, clip_ratio_c",
                      mechanism=above("mean_neg_ratio_above_3", 0), rivals=["lag_masked"], costs=[])),
    "off_policy_mask": Fix(
        numbers="10", fixes="stale wrong answers far from the policy", regime=LAG_DECOUPLED,
        without="lag_decoupled", with_="lag_decoupled_masked", number=Number("grad_limited_steps", "lower",
                                                                             (0.14, "points")),
        gates=[("mean_sampler_kl_k3", "KL(sampler || pi_old) a token"),
               ("mean_neg_far_frac", "answers the mask at delta 0.1 would drop")],
        record=Record(claim="We mask negative sequences that introduce significant policy divergence; this improves "
                            "stability in certain training scenarios that would otherwise exhibit instability.",
                      source="DeepSeek-V3.2, arXiv 2512.02556, sec. 3.1",
                      mechanism=above("mean_off_policy_masked_frac", 0), rivals=["lag_decoupled_tis"],
                      costs=["mean_off_policy_masked_frac"])),
    "gspo": Fix(
        numbers="-", fixes="a noisy token ratio", regime="the runaway's task, dropout 0.1 in the learner only, 60 steps",
        without="search_dropout", with_="search_dropout_gspo", number=Number("reward", "higher", (0.034, "points")),
        gates=[("early_logratio_std_token", "the token log-ratio's spread, first 10 steps")],
        record=Record(claim="GSPO defines the importance ratio based on sequence likelihood ... and achieves superior "
                            "training efficiency and performance compared to GRPO.",
                      source="GSPO, arXiv 2507.18071, abstract",
                      mechanism=Mechanism("early_logratio_std_seq", "at most half the token ratio's spread without it",
                                          lambda without, with_: with_ <= 0.5 * without, "early_logratio_std_token"),
                      rivals=["search_dropout_gmpo"], costs=["mean_clip_frac"])),
}


# ---------------------------------------------------------------- 5. the field past the chapter

class Variant(NamedTuple):
    """A method of the field past the chapter (field_methods.py), in the regime where the failure it answers lives:
    its run beside the same run without it, and beside its rivals, by the number its source says it moves."""
    what: str        # what it changes
    regime: str      # where it runs
    without: str     # the run without it (a name of EXPERIMENTS)
    run: str         # its own run
    number: Number   # the number it is judged by: moved by its margin against the run without (or by `rule`)
    record: Record   # its claim, mechanism, rivals and costs
    rule: Callable = None  # a lesson's check in the number's place (SAPO, GMPO: lesson 1's)

    @property
    def experiments(self):
        return [self.without, self.run]

    def check(self, without, with_):
        return self.rule(without, with_) if self.rule else self.number.moved(without, with_)


def not_worse(number):
    """A check for a method that claims to keep what it is given (the 80/20 rule: the accuracy with 20% of the
    tokens): not behind the run without it by the number's margin."""
    return lambda without, with_: number.against(without, with_) != "worse"


STALE = Number("grad_limited_steps", "lower", (0.14, "points"))  # the stale sampler's: as TIS, beside the same run
LESSON1 = Number("final", "higher", (0.10, "points"))
MANY_FINAL = Number("final", "higher", (0.049, "points"))
G4_REGIME = "4 answers to each of 32 problems a step"
FIELD = {
    "sapo": Variant("a sigmoid gate in place of the clip", "lesson 1's far off-policy epochs", "book_noclip",
                    "book_sapo", LESSON1, Record(
                        claim="SAPO replaces hard clipping with a smooth, temperature-controlled gate that adaptively "
                              "attenuates off-policy updates ... improved training stability.",
                        source="SAPO, arXiv 2511.20347, abstract; TRL sapo, verl compute_policy_loss_sapo",
                        mechanism=below_without("grad_norm_peak", 0.5), rivals=["book_ppo_clip"], costs=[]),
                    falls_and_trails),
    "gmpo": Variant("the geometric mean of the token ratios, clipped in log space", "lesson 1's far off-policy epochs",
                    "book_noclip", "book_gmpo", LESSON1, Record(
                        claim="Replacing GRPO's arithmetic mean with the geometric mean of token-level rewards, as the "
                              "latter is inherently less sensitive to outliers.",
                        source="GMPO, arXiv 2507.20673, abstract; verl compute_policy_loss_geo_mean",
                        mechanism=below_without("grad_norm_peak", 0.5), rivals=["book_ppo_clip"],
                        costs=["mean_clip_frac"]), falls_and_trails),
    "icepop": Variant("weights outside [0.5, 5] set to 0, not truncated", LAG_DECOUPLED, "lag_decoupled",
                      "lag_decoupled_icepop", STALE, Record(
                          claim="IcePop only calibrates gradients within the acceptable region and discards all noisy "
                                "gradient updates beyond that boundary.",
                          source="IcePop, Ring-1T, arXiv 2510.18855, sec. 2.3.2 (alpha 0.5, beta 5)",
                          mechanism=above("mean_is_masked_frac", 0), rivals=["lag_decoupled_tis"],
                          costs=["mean_is_masked_frac"])),
    "sequence_is": Variant("one weight an answer, the product of its tokens', masked above 3", LAG_DECOUPLED,
                           "lag_decoupled", "lag_decoupled_seq_is", STALE, Record(
                               claim="Per-sequence weight (product of tokens; unbiased, high variance).",
                               source="verl rollout_corr_helper.py, rollout_is sequence; TRL sequence_mask, cap 3",
                               mechanism=above("mean_is_masked_frac", 0), rivals=["lag_decoupled_tis"],
                               costs=["mean_is_masked_frac"])),
    "rejection": Variant("answers whose mean k3 from the sampler passes 0.01 dropped", LAG_DECOUPLED, "lag_decoupled",
                         "lag_decoupled_reject", STALE, Record(
                             claim="Rejection sampling (RS) corrects for any distribution shift between data "
                                   "collection and training: binary filtering for outlier exclusion.",
                             source="verl docs/algo/rollout_corr.md; rollout_corr_helper.py, rollout_rs seq_mean_k3",
                             mechanism=above("mean_rejected_frac", 0), rivals=["lag_decoupled_tis"],
                             costs=["mean_rejected_frac"])),
    "dppo_tv": Variant("a trust region on each probability's move from the sampler, TV 0.15", LAG_DECOUPLED,
                       "lag_decoupled", "lag_decoupled_dppo_tv", STALE, Record(
                           claim="The ratio is a noisy single-sample estimate of the true policy divergence; DPPO "
                                 "achieves superior training stability and efficiency.",
                           source="DPPO, arXiv 2602.04879, abstract; sail-sg/Stable-RL core_algos.py",
                           mechanism=above("mean_clip_frac", 0), rivals=["lag_decoupled_tis"],
                           costs=["mean_clip_frac"])),
    "dppo_kl": Variant("the same on the binary KL, 0.05", LAG_DECOUPLED, "lag_decoupled", "lag_decoupled_dppo_kl",
                       STALE, Record(
                           claim="The ratio is a noisy single-sample estimate of the true policy divergence; DPPO "
                                 "achieves superior training stability and efficiency.",
                           source="DPPO, arXiv 2602.04879, abstract; sail-sg/Stable-RL core_algos.py",
                           mechanism=above("mean_clip_frac", 0), rivals=["lag_decoupled_tis"],
                           costs=["mean_clip_frac"])),
    "vespo": Variant("a Gamma weight of each answer's ratio to the sampler", LAG_DECOUPLED, "lag_decoupled",
                     "lag_decoupled_vespo", STALE, Record(
                         claim="A closed-form reshaping kernel on sequence-level importance weights ... maintains "
                               "stable training under staleness ratios up to 64x.",
                         source="VESPO, arXiv 2602.10693, abstract; FloyedShen/VESPO core_algos.py",
                         mechanism=Mechanism("mean_is_weight_mean", "below 1", lambda without, with_: with_ < 1),
                         rivals=["lag_decoupled_tis"], costs=["mean_is_weight_mean"])),
    "top_entropy": Variant("the gradient on the top 20% of tokens by entropy",
                           "inequalities with 2-6 right digits, 16 updates a rollout", "many", "many_top_entropy",
                           MANY_FINAL, Record(
                               claim="Utilizing only 20% of the tokens while maintaining performance comparable to "
                                     "full-gradient updates.",
                               source="the 80/20 rule, arXiv 2506.01939, abstract; TRL top_entropy_quantile",
                               mechanism=within("mean_low_entropy_frac", 0.75, 0.85), rivals=["many_entropy"],
                               costs=["mean_low_entropy_frac"]), not_worse(MANY_FINAL)),
    "adaptive_entropy": Variant("the entropy bonus steered towards 0.2 nats",
                                "inequalities with 2-6 right digits, 16 updates a rollout", "many",
                                "many_adaptive_entropy", MANY_FINAL, Record(
                                    claim="Mitigating premature entropy collapse is critical for improved test "
                                          "performance.",
                                    source="Skywork-OR1, arXiv 2505.22312, abstract; TRL use_adaptive_entropy",
                                    mechanism=within("entropy", 0.1, 0.4), rivals=["many_entropy"], costs=[])),
    "rloo": Variant("the mean of the other answers as the baseline, undivided", G4_REGIME, "g4", "g4_rloo",
                    Number("eval_mean", "higher", (0.011, "points")), Record(
                        claim="RLOO is a variant of REINFORCE that reduces variance by using leave-one-out baselines.",
                        source="RLOO, arXiv 2402.14740; TRL docs/source/paper_index.md",
                        mechanism=within("mean_adv_to_centred", 4 / 3 - 1e-3, 4 / 3 + 1e-3), rivals=["g4_drgrpo"],
                        costs=[])),
    "reinforce_pp": Variant("the batch's mean and std over its tokens as the baseline", G4_REGIME, "g4",
                            "g4_reinforce_pp", Number("eval_mean", "higher", (0.011, "points")), Record(
                                claim="Normalizing advantages across the entire global batch gives a more stable and "
                                      "effectively unbiased estimate.",
                                source="REINFORCE++, arXiv 2501.03262, abstract (v9)",
                                mechanism=above("mean_equal_groups_adv", 0), rivals=["g4_drgrpo"], costs=[])),
    "luspo": Variant("GSPO's loss times each answer's length", "the runaway's task, dropout 0.1 in the learner only",
                     "search_dropout", "search_dropout_luspo", Number("late_resp_len", "higher", (0.2, "relative")),
                     Record(claim="We rectify the length bias inherent in GSPO ... thereby resolving the issue of "
                                  "response length collapse.",
                            source="LUSPO, arXiv 2602.05261, abstract; TRL loss_type luspo",
                            mechanism=at_most("mean_token_weight_spread", 1.001), rivals=["search_dropout_gspo"],
                            costs=[])),
    "k3_plus": Variant("k3's value with k2's gradient", "KL 0.1 on the samples of the policy itself", "kl_onpolicy",
                       "kl_onpolicy_k3plus", Number("mean_kl_exact", "lower", (0.12, "relative")), Record(
                           claim="The expected gradient of k1 and k3 estimator is not the expected gradient of KL; k2 "
                                 "gives the right gradient, so we use a straight-through trick.",
                           source="verl, verl/trainer/ppo/core_algos.py, kl_penalty",
                           mechanism=at_most("mean_kl_grad_bias", 0.01), rivals=["kl_onpolicy_k2"], costs=[])),
}


# ---------------------------------------------------------------- 6. every judged pair

def judged():
    """[(name, record)] of every lesson, fix and variant, under the name the command line and the pages give it:
    a lesson's own (instability), fix_<item> (fix_tis), field_<method> (field_sapo). Each has .experiments
    ([without, with]), .check (the outcome, one seed), .number (the outcome's number, beside its rivals), .record."""
    return ([*LESSONS.items()] + [("fix_" + item, fix) for item, fix in FIXES.items()]
            + [("field_" + method, variant) for method, variant in FIELD.items()])
