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


# ---------------------------------------------------------------- 2. the lessons

def broken_vs_fixed(broken, fixed, points=0.15, gap=None):
    """The lessons' one test: the broken run's greedy accuracy falls at least `points` from
    its own peak and ends at least `gap` (by default `points`) below the fixed run's. (15 points:
    one prompt a step is noisy, and runs that do not collapse still drift; EXPERIMENTS.md says how far.)"""
    gap = points if gap is None else gap
    return broken["peak"] - broken["final"] >= points and fixed["final"] - broken["final"] >= gap


def falls_and_trails(broken, fixed):
    """Lesson 1's test: broken_vs_fixed with the fix 10 points ahead at the end, not 15. In the
    book's regime PPO's clip run drifts too (5-26 points below its own peak over seeds 0-4 under
    four roundings), and the knobs that stop its drift stop the collapse without a clip as well
    (EXPERIMENTS.md, lesson 1's ablation); 15 points ahead held in 17 of those 20 pairs."""
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
    claim: str         # what the check asks, in words (the pages print it)


LESSONS = {
    "instability": Lesson(["book_noclip", "book_ppo_clip"], falls_and_trails,
                          "with 4 inner epochs and no clipping accuracy falls >= 15 points from its peak and ends "
                          ">= 10 below PPO's clip at 0.2, which drifts down too"),
    "naive_kl": Lesson(["book_kl", "book_kl_k3"], broken_vs_fixed,
                       "with the book's k1 KL on summed log-probs accuracy falls >= 15 points from its peak and ends "
                       ">= 15 below k3 per token"),
    "naive_kl_reuse": Lesson(["kl_naive", "kl_k3"], broken_vs_fixed,
                             "the same in our default regime, where the sampler is the learner but each rollout "
                             "serves two updates"),
    "runaway": Lesson(["book_runaway", "book_runaway_keepmask"], runs_away,
                      "on-policy without KL (the book's 7_3), the learner's entropy reaches half of ln V, and the "
                      "sampled held-out accuracy falls >= 15 points from its peak and ends >= 15 below the learner on "
                      "the sampler's support"),
    "format_exploit": Lesson(["book_runaway_format", "book_runaway_format_gated"], reward_hides_the_collapse,
                             "with the book's 7_6 format bonus both runs run away (sampled accuracy falls >= 15 points "
                             "from its peak); ungated the format reward ends above 0.9 and the total reward's lowest "
                             "50-step mean after its peak stays >= half of it (it hides the collapse); gated it drops "
                             "below half"),
    "instability_runaway": Lesson(["book_runaway_noclip", "book_runaway_ppo_clip"], broken_vs_fixed,
                                  "the instability lesson on the runaway's task"),
}
# the four lessons the pages number, in the chapter's order of their failures
NUMBERED = {"instability": 1, "naive_kl": 2, "runaway": 3, "format_exploit": 4}
LABELS = {  # experiment -> how the pages' verdict lines name it
    "book_noclip": "no clip", "book_ppo_clip": "PPO's clip", "book_kl": "k1 on summed log-probs",
    "book_kl_k3": "k3 per token", "kl_naive": "k1 on summed log-probs", "kl_k3": "k3 per token",
    "book_runaway": "the book's 7_3", "book_runaway_keepmask": "the learner on the sampler's support",
    "book_runaway_format": "ungated", "book_runaway_format_gated": "gated", "book_runaway_noclip": "no clip",
    "book_runaway_ppo_clip": "PPO's clip",
}


# ---------------------------------------------------------------- 3. the fixes

def better(key, higher, margin, relative=False):
    """A fix's check: its own metric moved the way the fix is made to move it, by at least
    `margin`: in the metric's own unit, or, relative, as a share of the run without it. Any
    difference at all is not enough: two seeds of the same run differ too."""
    def check(without, with_):
        gain = with_[key] - without[key] if higher else without[key] - with_[key]
        return gain > 0 and gain >= margin * (abs(without[key]) if relative else 1)  # > 0: 2% of 0 asks nothing
    return check


def margin_text(size, unit):
    if unit == "nats":
        return f"{size:g} nats"
    return f"{size * 100:g} points" if unit == "points" else f"{size * 100:g}% of the run without it"


METRICS = {  # run_summary's keys, as the fixes table and the fixes' claims name them
    "mean_signal_groups": "groups with signal a step", "late_resp_len_wrong": "wrong answers' length, 2nd half",
    "mean_truncated_frac": "cut share, mean of the run", "sampled_final": "sampled held-out accuracy, end",
    "drop": "greedy accuracy's fall from its peak",
    "kl_bias": "KL estimate's bias, \\|mean (estimate - exact) / exact\\| over the run",
    "distinct_final": "different right answers a held-out problem in 16 samples, end",
    "sampler_entropy": "the sampled policy's entropy, last 10 steps",
    "think_half_step": "steps until half the sampled answers reason",
    "grad_limited_steps": "steps whose largest gradient norm passed its limit, 1 (--max-grad-norm)",
}


class Fix(NamedTuple):
    """An item of the chapter's closing list, or another named fix: the same run without it and with it, judged
    by the number it was made to move."""
    numbers: str   # its numbers in the book's list ("1, 2"), or where else it comes from ("DAPO", "gdpo.py"; "-")
    fixes: str     # what it fixes
    regime: str    # where it runs: the regime in which that failure happens
    without: str   # the experiment without it (a name of EXPERIMENTS)
    with_: str     # the same experiment with it
    metric: str    # the number it is judged by: a key of run_summary, named in METRICS
    side: str      # "higher" or "lower": the way it is made to move that number
    margin: tuple  # (size, unit), unit "points", "relative" (a share of the run without it) or "nats": by how much
    gates: list    # [(run_summary key, what it is)]: numbers of the run *without* it that show its mechanism at
    # work, so that a fix that moves nothing can be told from a fix with nothing to act on

    @property
    def experiments(self):
        """[without, with]: a Lesson's [broken, fixed]."""
        return [self.without, self.with_]

    def check(self, without, with_):
        """One seed's two summaries: its metric moved its way by its margin (better)."""
        size, unit = self.margin
        return better(self.metric, self.side == "higher", size, unit == "relative")(without, with_)

    @property
    def claim(self):
        return f"{self.fixes}: {METRICS[self.metric]} {self.side} with it, by at least {margin_text(*self.margin)}"


# the closing list (the book's 7_7_improvements: olmo3_style.py items 1-7, deepseek_v32_style.py 8-12) and
# the other named fixes: item -> Fix. Each margin is twice the std over seeds 0-2 of the run without the fix,
# rounded up to two digits, as results.jsonl records them (tests/test_verdicts.py holds each to that rule): in
# points for a share (an accuracy, the cut share, the KL's relative bias), relative for a count or a length, whose
# scale the regime sets (the prompts a step, the cap), in nats for an entropy
FIXES = {
    "dynamic_sampling": Fix(
        numbers="1, 2", fixes="groups with no signal", regime="the default at 4 prompts a step",
        without="ds4", with_="ds4_dynamic", metric="mean_signal_groups", side="higher", margin=(0.017, "relative"),
        gates=[("mean_zero_std_frac", "groups with no signal")]),
    "token_mean": Fix(
        numbers="3", fixes="long wrong answers weighing less per token", regime="the runaway's task, default settings",
        without="search", with_="search_token", metric="late_resp_len_wrong", side="lower", margin=(0.25, "relative"),
        gates=[("mean_truncated_frac", "answers cut at the cap")]),
    "drgrpo": Fix(
        numbers="7", fixes="the same, and the std's weight on easy groups",
        regime="the runaway's task, default settings",
        without="search", with_="search_drgrpo", metric="late_resp_len_wrong", side="lower", margin=(0.25, "relative"),
        gates=[("mean_truncated_frac", "answers cut at the cap")]),
    "overlong": Fix(
        numbers="DAPO", fixes="answers cut at the cap", regime="the runaway",
        without="book_runaway", with_="book_runaway_overlong", metric="mean_truncated_frac", side="lower",
        margin=(0.084, "points"),
        gates=[("mean_truncated_frac", "answers cut at the cap")]),
    "keep_mask": Fix(
        numbers="11", fixes="a learner with mass where top-p never samples", regime="the runaway",
        without="book_runaway", with_="book_runaway_keepmask_T1", metric="sampled_final", side="higher",
        margin=(0.18, "points"),
        gates=[("mean_tis_weight_mean", "the learner's mass on what the sampler can draw")]),
    "tis": Fix(
        numbers="6, as a sampler weight", fixes="a sampler that is not the policy the ratio starts from",
        regime="rollouts 4 steps old, pi_old the learner (decoupled), lr 3e-4",
        without="lag_decoupled", with_="lag_decoupled_tis", metric="grad_limited_steps", side="lower",
        margin=(0.13, "points"),
        gates=[("mean_sampler_kl_k3", "KL(sampler || pi_old) a token"),
               ("mean_tis_weight_above_2", "tokens whose weight pi_old / pi_sampler passes the cap, 2")]),
    "kl_reweight": Fix(
        numbers="9", fixes="a KL estimated on pi_old's samples",
        regime="KL 0.5, 16 updates a rollout, token mean, 50 steps",
        without="kl_reuse", with_="kl_reuse_reweight", metric="kl_bias", side="lower", margin=(0.32, "points"),
        gates=[("mean_ppo_kl", "KL(pi_old || pi) an update")]),
    # judged by what it exists for, answers kept diverse, not by the entropy it raises by construction
    "entropy_bonus": Fix(
        numbers="-", fixes="lost diversity: one right answer kept of several",
        regime="inequalities with 2-6 right digits, 16 updates a rollout",
        without="many", with_="many_entropy", metric="distinct_final", side="higher", margin=(0.17, "relative"),
        gates=[("distinct_fall", "the different right answers a problem: their fall from step 0")]),
    "clip_higher": Fix(
        numbers="5", fixes="a rare token that pays, clipped",
        regime="a warm start that seldom reasons, 16 updates a rollout",
        without="rare", with_="rare_clip_higher", metric="think_half_step", side="lower", margin=(0.33, "relative"),
        gates=[("mean_clip_high_lowp_frac", "of the high-clipped tokens, the share below p 0.2")]),
    "cispo": Fix(
        numbers="-", fixes="a rare token that pays, its gradient dropped",
        regime="a warm start that seldom reasons, 16 updates a rollout",
        without="rare", with_="rare_cispo", metric="think_half_step", side="lower", margin=(0.33, "relative"),
        gates=[("mean_clip_high_lowp_frac", "of the high-clipped tokens, the share below p 0.2")]),
    "gdpo": Fix(
        numbers="gdpo.py", fixes="a rare reward term drowned by a common one",
        regime="a warm start that seldom reasons, 16 updates a rollout, a format bonus of 0.1",
        without="rare_format", with_="rare_format_gdpo", metric="think_half_step", side="lower",
        margin=(0.25, "relative"),
        gates=[("mean_adv_correct_corr", "the correctness reward's correlation with the advantage")]),
    "dual_clip": Fix(
        numbers="-", fixes="stale wrong answers made likelier: an unbounded loss",
        regime="rollouts 4 steps old, pi_old their sampler, lr 3e-4",
        without="lag", with_="lag_dual_clip", metric="grad_limited_steps", side="lower", margin=(0.039, "points"),
        gates=[("mean_neg_ratio_above_3", "of the wrong answers' tokens, the share with ratio > 3")]),
    "off_policy_mask": Fix(
        numbers="10", fixes="stale wrong answers far from the policy",
        regime="rollouts 4 steps old, pi_old the learner (decoupled), lr 3e-4",
        without="lag_decoupled", with_="lag_decoupled_masked", metric="grad_limited_steps", side="lower",
        margin=(0.13, "points"),
        gates=[("mean_sampler_kl_k3", "KL(sampler || pi_old) a token"),
               ("mean_neg_far_frac", "answers the mask at delta 0.1 would drop")]),
    "gspo": Fix(
        numbers="-", fixes="a noisy token ratio",
        regime="the runaway's task, dropout 0.1 in the learner only, 60 steps",
        without="search_dropout", with_="search_dropout_gspo", metric="sampler_entropy", side="lower",
        margin=(0.13, "nats"),
        gates=[("early_logratio_std_token", "the token log-ratio's spread, first 10 steps")]),
}


# ---------------------------------------------------------------- 4. the field past the chapter

class Variant(NamedTuple):
    """A method of the field past the chapter (field_methods.py), judged as the chapter's lesson or fix beside it."""
    source: str  # the paper or the library it comes from
    what: str    # what it changes
    beside: str  # the chapter's lesson or fix it stands beside, by its command-line name ("instability", "fix_tis")
    run: str     # its experiment: the regime of the lesson or fix beside it, with the method's flags

    @property
    def chapter(self):
        """The Lesson or the Fix it stands beside."""
        return dict(judged())[self.beside]

    @property
    def experiments(self):
        """[the run without it, its own run]: the run without is the broken or without-run of the one beside it."""
        return [self.chapter.experiments[0], self.run]

    @property
    def check(self):
        return self.chapter.check

    @property
    def claim(self):
        return f"{self.what}: judged as {self.beside} is ({self.chapter.claim})"


# method -> Variant. Each is judged where the failure it answers lives, as the lesson or fix beside it is: against
# the same run without, by the same check, the same number and the same margin (a fix's: twice the spread of the
# run without it over seeds, which test_verdicts holds it to; a lesson's: 15 points). BNPO has no run: in one
# process it is token_mean, number for number (tests/test_whole_step.py), so its run would repeat search_token's.
FIELD = {
    "sapo": Variant("SAPO, arXiv 2511.20347", "a sigmoid gate in place of the clip", "instability", "book_sapo"),
    "gmpo": Variant("GMPO, arXiv 2507.20673", "the geometric mean of the token ratios, clipped in log space",
                    "instability", "book_gmpo"),
    "icepop": Variant("IcePop, arXiv 2510.18855", "weights outside [0.5, 2] set to 0, not truncated", "fix_tis",
                      "lag_decoupled_icepop"),
    "sequence_is": Variant("TRL sequence_mask; verl rollout_is", "one weight an answer, masked above 3", "fix_tis",
                           "lag_decoupled_seq_is"),
    "rejection": Variant("verl rollout_rs", "answers whose mean k3 from the sampler passes 0.01 dropped", "fix_tis",
                         "lag_decoupled_reject"),
    "dppo_tv": Variant("DPPO, arXiv 2602.04879", "a trust region on each probability's move from the sampler, TV 0.15",
                       "fix_tis", "lag_decoupled_dppo_tv"),
    "dppo_kl": Variant("DPPO, arXiv 2602.04879", "the same on the binary KL, 0.05", "fix_tis", "lag_decoupled_dppo_kl"),
    "vespo": Variant("VESPO, arXiv 2602.10693", "a Gamma weight of each answer's ratio to the sampler", "fix_tis",
                     "lag_decoupled_vespo"),
    "top_entropy": Variant("the 80/20 rule, arXiv 2506.01939", "the gradient on the top 20% of tokens by entropy",
                           "fix_entropy_bonus", "many_top_entropy"),
    "adaptive_entropy": Variant("Skywork-OR1, arXiv 2505.22312", "the entropy bonus steered towards 0.2 nats",
                                "fix_entropy_bonus", "many_adaptive_entropy"),
    "rloo": Variant("RLOO, arXiv 2402.14740", "the mean of the other answers as the baseline", "fix_drgrpo",
                    "search_rloo"),
    "reinforce_pp": Variant("REINFORCE++, arXiv 2501.03262", "the batch's mean and std over its tokens", "fix_drgrpo",
                            "search_reinforce_pp"),
    "luspo": Variant("LUSPO, arXiv 2602.05261", "GSPO's loss times each answer's length", "fix_gspo",
                     "search_dropout_luspo"),
    "k3_plus": Variant("verl's k3+", "k3's value with k2's gradient", "naive_kl", "book_kl_k3plus"),
}


# ---------------------------------------------------------------- 5. every judged pair

def judged():
    """[(name, record)] of every lesson, fix and variant, under the name the command line and the pages give it:
    a lesson's own (instability), fix_<item> (fix_tis), field_<method> (field_sapo)."""
    return ([*LESSONS.items()] + [("fix_" + item, fix) for item, fix in FIXES.items()]
            + [("field_" + method, variant) for method, variant in FIELD.items()])
