"""What a GRPO step reads, in one place: `GRPOConfig` (its fields are train.py's flags) and RECIPES.

    python train.py --help                       # the flags, grouped as below, with these defaults
    python train.py --recipe dapo --print-config # a recipe's resolved flags, without training

A field's default here is its only default: harness/cli.py makes `--field-name` from it (`flag`),
so edit a value and `python train.py` follows. grpo.py reads the fields as `cfg.<name>`;
nothing else in this file runs, so importing it has no side effects.

The run's own settings (how many prompts a step, how often to evaluate, where to save) are
harness/cli.py's flags, not fields here: grpo_step is handed them as arguments, if at all.

A recipe is a named set of flags (`--recipe NAME`; flags typed explicitly still win), of both
kinds: a recipe may set prompts_per_step or eval_every too. Each
cites the paper or the book's script its values come from; where a value departs from the
source, the comment beside it says so and why. Every recipe departs in two ways at our scale:
lr 1e-4 with Adam (the papers use 1e-6 with AdamW, the book 1e-5), and 8 answers of at most
40 tokens a prompt (DeepSeekMath: 64 of up to 1,024).
"""
from dataclasses import dataclass, field


def flag(group, default, help, choices=None, type=None, inf=None):
    """A GRPOConfig field and its command-line flag: harness/cli.py makes `--field-name` from it, so
    the default here is the only one. inf: what the value inf means, for a float field where it
    means something (its help says so; inf anywhere else, and nan anywhere, is refused)."""
    return field(default=default, metadata={"group": group, "help": help, "choices": choices, "type": type,
                                            "inf": inf})


@dataclass
class GRPOConfig:
    # the eight a learner changes first
    group_size: int = flag("the step's main settings", 8, "G: completions per prompt")
    max_new_tokens: int = flag("the step's main settings", 40, "completion length cap (L_max)")
    temperature: float = flag("the step's main settings", 1.0, "sampling temperature")
    mu: int = flag("the step's main settings", 2, "epochs: passes over each step's rollouts, each of --minibatches "
                   "optimizer steps (the ratio moves away from 1 after the first step)")
    clip: float = flag("the step's main settings", 0.2, "eps_low of the clipped ratio", inf="no clipping")
    kl: float = flag("the step's main settings", 0.0, "beta: KL penalty to the warm-start policy")
    loss_agg: str = flag("the step's main settings", "seq_mean", "GRPO, DAPO, or Dr. GRPO aggregation; bnpo: each "
                         "process's own tokens (TRL bnpo; in one process, token_mean); luspo: GSPO's per-answer loss "
                         "times the answer's length (TRL luspo, Liu et al. 2026)",
                         ["seq_mean", "token_mean", "constant", "bnpo", "luspo"])
    lr: float = flag("the step's main settings", 1e-4, "Adam learning rate")
    # rollouts
    top_p: float = flag("rollouts", 1.0, "nucleus sampling")
    top_k: int = flag("rollouts", 0, "top-k sampling (0: off)")
    learner_temperature: float = flag("rollouts", None, "temperature of the learner's log-probs (pi_theta, pi_old, "
                                      "pi_ref); default: --temperature (the book: 1)", type=float)
    sampler_dtype: str = flag("rollouts", "float32", "the sampler's weights: bfloat16 samples from a bf16 copy of the "
                              "policy beside the fp32 learner, as a vLLM sampler beside a trainer does; int8 / fp8 "
                              "from a copy fake-quantized to 8 bits per output channel (8-bit rollouts)",
                              ["float32", "bfloat16", "int8", "fp8"])
    # rewards
    format_weight: float = flag("rewards", 0.0, "w in reward = correct + w * format")
    format_check: str = flag("rewards", "strict", "ours (one non-empty think block, then the answer), the "
                             "book's 7_6 (<think> before </think>), or its gdpo.py's (a \\boxed{} answer)",
                             ["strict", "book", "boxed"])
    gated: bool = flag("rewards", False, "format reward only for correct answers")
    overlong_cache: int = flag("rewards", 0, "DAPO soft overlong penalty over the last N tokens (0: off)")
    # advantages and sampling
    adv_norm: str = flag("advantages and sampling", "group", "divide by the std of the group, the batch, or not (Dr. GRPO)",
                         ["group", "batch", "none"])
    baseline: str = flag("advantages and sampling", "group", "what each reward is compared with: its group's mean, then "
                         "--adv-norm (GRPO); the mean of the other G - 1 answers, undivided (leave_one_out: RLOO, "
                         "Ahmadian et al. 2024; verl's rloo); the batch's mean over its tokens, divided by their std "
                         "(batch: REINFORCE++, Hu 2025; verl's reinforce_plus_plus); or none at all, the reward itself (REINFORCE, "
                         "the run RLOO's source compares with)", ["group", "leave_one_out", "batch", "none"])
    adv_clip: float = flag("advantages and sampling", 0.0, "C: clamp each advantage to [-C, C], so that one right answer "
                           "in a group of wrong ones weighs at most C (0: off)")
    reward_norm: str = flag("advantages and sampling", "sum_then_norm", "normalise the summed reward, or each term "
                            "first (GDPO)", ["sum_then_norm", "norm_then_sum"])
    dynamic_sampling: bool = flag("advantages and sampling", False, "DAPO: drop groups with equal rewards, draw more")
    max_sampling_rounds: int = flag("advantages and sampling", 3, "rollout rounds per step with dynamic sampling")
    # objective
    minibatches: int = flag("objective", 1, "K: optimizer steps per epoch, each on 1/K of the groups (K * mu per step)")
    resample_epochs: bool = flag("objective", False, "each epoch after the first samples fresh answers to the same "
                                 "prompts from a frozen copy of pi_old (the book's --inner_epochs)")
    clip_high: float = flag("objective", None, "eps_high (DAPO clip-higher); default: --clip", type=float,
                            inf="no clipping above")
    dual_clip: float = flag("objective", 0.0, "dual-clip constant c > 1 for negative advantages (0: off)")
    objective: str = flag("objective", "ppo", "PPO's clipped surrogate, CISPO's clipped weights, the book's "
                          "torch.where form, or the field's (field_methods.py): SAPO's sigmoid gate (TRL sapo, verl "
                          "sapo); GMPO's geometric mean, --clip in log space (verl geo_mean; GMPO: 0.4); DPPO's trust "
                          "region on the probability's move from the sampler, --clip its TV (0.15) or binary KL "
                          "(0.05) bound (verl dppo_tv, dppo_kl); VESPO's Gamma weight of each answer's ratio (TRL vespo; "
                          "token_mean). Each field objective wants its sources' value typed, or its --recipe",
                          ["ppo", "cispo", "book", "sapo", "gmpo", "dppo_tv", "dppo_kl", "vespo"])
    sapo_tau_pos: float = flag("objective", 1.0, "SAPO's gate temperature where A > 0 (TRL sapo_temperature_pos, verl "
                               "tau_pos: 1.0)")
    sapo_tau_neg: float = flag("objective", 1.05, "SAPO's gate temperature where A <= 0 (TRL sapo_temperature_neg, "
                               "verl tau_neg: 1.05)")
    vespo_k_pos: float = flag("objective", 2.0, "VESPO's k where A >= 0: phi(w) = e^lambda w^k e^(-lambda w) (TRL "
                              "vespo_k_pos and the authors' code: 2)")
    vespo_lambda_pos: float = flag("objective", 3.0, "VESPO's lambda where A >= 0 (TRL vespo_lambda_pos: 3)")
    vespo_k_neg: float = flag("objective", 3.0, "VESPO's k where A < 0 (TRL vespo_k_neg: 3)")
    vespo_lambda_neg: float = flag("objective", 2.0, "VESPO's lambda where A < 0 (TRL vespo_lambda_neg: 2)")
    ratio_level: str = flag("objective", "token", "token (GRPO), gspo, or the book's summed sequence ratio",
                            ["token", "gspo", "sequence"])
    kl_estimator: str = flag("objective", "k3", "Schulman's KL estimator; k3+: k3's value with k2's gradient, "
                             "unbiased on samples of pi (verl's k3+)", ["k1", "k2", "k3", "k3+"])
    kl_level: str = flag("objective", "token", "per token, or the book's on summed log-probs", ["token", "sequence"])
    exact_kl: bool = flag("objective", False, "also log kl_exact, the KL term's value summed over the whole "
                          "vocabulary (two more no-grad passes an update; vocabularies up to 4,096)")
    mask_truncated: bool = flag("objective", False, "truncated completions contribute no loss")
    entropy_coef: float = flag("objective", 0.0, "alpha: subtract alpha * entropy from the loss (an entropy bonus); "
                               "with --adaptive-entropy, its starting value")
    adaptive_entropy: bool = flag("objective", False, "steer alpha each step towards --entropy-target (Skywork-OR1's "
                                  "adaptive entropy control; TRL use_adaptive_entropy): +delta while the learner's "
                                  "entropy is at or below it, -delta above, applied only at or below it (the entropy "
                                  "over every token: TRL's, with --top-entropy-quantile, over the kept ones)")
    entropy_target: float = flag("objective", 0.2, "tgt-ent, nats, for --adaptive-entropy (TRL entropy_target and the "
                                 "Skywork-OR1 scripts: 0.2)")
    entropy_coef_delta: float = flag("objective", 0.005, "delta: alpha's step for --adaptive-entropy (TRL "
                                     "entropy_coef_delta: 0.005; the Skywork-OR1 scripts: 1e-4)")
    entropy_coef_max: float = flag("objective", 1.0, "alpha's ceiling for --adaptive-entropy (TRL entropy_coef_max: 1; "
                                   "the Skywork-OR1 scripts: 0.005)")
    top_entropy_quantile: float = flag("objective", 1.0, "rho: the policy gradient only on the update's top rho of "
                                       "tokens by entropy, and the entropy bonus too, as TRL's (the 80/20 rule, arXiv "
                                       "2506.01939, which uses 0.2; TRL top_entropy_quantile; 1: every token)")
    top_entropy_random: bool = flag("objective", False, "the control --top-entropy-quantile is judged against: keep "
                                    "the same share of tokens, drawn at random, not the highest-entropy ones")
    kl_cov: float = flag("objective", 0.0, "k: KL-Cov (Cui et al.), the share k of an update's tokens whose log-prob "
                         "most covaries with their advantage pay |log pi - log pi_old| (verl's kl_cov_ratio; 0: off)")
    logprobs: str = flag("objective", "auto", "how the learner's log-probs are made: textbook (the (n, V) logits, "
                         "log_softmax and the target's entry), fused (kernels/: from the hidden states, never the "
                         "logits), logits (kernels/ on the logits, without their log-softmax); auto: textbook on a CPU "
                         "below a 4,096-token vocabulary, fused from it and on a GPU (grpo.token_logprobs)",
                         ["auto", "textbook", "fused", "logits"])
    share_prompts: bool = flag("objective", False, "the learner runs each group's prompt once (the small GPT): a "
                               "default run in 0.8 of the time, the same numbers up to float rounding, which a run "
                               "that samples amplifies (docs/performance.md); the recorded runs were made without it")
    # off-policy corrections
    tis_cap: float = flag("off-policy corrections", 0.0, "C: truncated importance sampling, weight each token by "
                          "min(pi_old / pi_sampler, C) (0: off); with --tis-floor or --tis-mode, the band's top",
                          inf="no cap")
    tis_floor: float = flag("off-policy corrections", 0.0, "the lower bound of --tis-cap's weight: truncated to it, or "
                            "masked below it (TRL vllm_importance_sampling_clip_min; 0: none)")
    tis_mode: str = flag("off-policy corrections", "token_truncate", "how --tis-cap bounds the weight: truncate it to "
                         "[floor, C], or set it to 0 outside (mask: IcePop, MIS), per token or one an answer "
                         "(sequence: the product of its tokens') (TRL vllm_importance_sampling_mode; verl rollout_is)",
                         ["token_truncate", "token_mask", "sequence_truncate", "sequence_mask"])
    keep_sampling_mask: bool = flag("off-policy corrections", False, "log-probs over the support top-k / top-p "
                                    "sampled from (DeepSeek-V3.2)")
    off_policy_mask: float = flag("off-policy corrections", float("inf"), "delta: drop negative-advantage sequences "
                                  "whose KL to the sampler exceeds it (DeepSeek-V3.2)", inf="off")
    rejection: str = flag("off-policy corrections", None, "drop the tokens (token_*) or whole answers (seq_mean_*, "
                          "seq_max_*) whose k1 / k2 / k3 divergence from the sampler passes --rejection-bound (verl "
                          "rollout_rs, but for its seq_sum_*; default: off)", ["token_k1", "token_k2", "token_k3", "seq_mean_k1",
                          "seq_mean_k2", "seq_mean_k3", "seq_max_k2", "seq_max_k3"], type=str)
    rejection_bound: float = flag("off-policy corrections", None, "U for --rejection: k2, k3 <= U; k1 a ratio band "
                                  "[1/U, U] (verl rollout_rs_threshold, no default; its presets: seq_mean_k3 0.01, "
                                  "token_k1 2)", type=float)
    kl_reweight: bool = flag("off-policy corrections", False, "weight the KL estimate by pi / pi_old (DeepSeek-V3.2)")
    rollout_lag: int = flag("off-policy corrections", None, "K: the learner trains on the rollouts sampled K steps ago, "
                            "as an asynchronous trainer does (default: off, on-policy; a run with a lag cannot --resume: its queue of "
                            "batches is not saved)", type=int)
    lag_pi_old: str = flag("off-policy corrections", "sampler", "with --rollout-lag, pi_old is the policy that sampled "
                           "the batch (sampler: the ratio absorbs the staleness) or the learner as the step finds it "
                           "(learner: decoupled PPO, AReaL; the stale sampler's log-probs reach only --tis-cap and "
                           "--off-policy-mask)", ["sampler", "learner"])
    # optimisation
    max_grad_norm: float = flag("optimisation", 1.0, "the gradient-norm limit: a larger norm is scaled down to it",
                                inf="no limit")

    @property
    def clip_range(self):
        """(eps_low, eps_high): grpo_loss clips the ratio to [1 - eps_low, 1 + eps_high]."""
        return self.clip, self.clip if self.clip_high is None else self.clip_high


# name -> flags: GRPOConfig fields, and harness/cli.py's run flags where a recipe needs them (prompts_per_step; the
# book_qwen3 recipes also set its evaluation: eval_every, eval_size, eval_fallback, chat_template). Each follows
# the paper or book script named above it, value by value; at our scale every one departs in the same ways
# (this file's docstring: lr 1e-4 with Adam, 8 answers of at most 40 tokens), and any other departure is named.
INF = float("inf")
RECIPES = {
    # DeepSeekMath (Shao et al. 2024, arXiv 2402.03300, sec. 4.1-4.2): k3 per token inside each answer's mean
    # (eq. 3-4), group mean and std (4.1.2); "The KL coefficient is 0.04"; "The policy model only has a single
    # update following each exploration stage". It gives no clip eps: PPO's 0.2 (our default) stands in.
    "grpo": dict(kl=0.04, kl_estimator="k3", kl_level="token", mu=1, minibatches=1),
    # DAPO (Yu et al. 2025, sec. 3-4.1): eps 0.2 / 0.28, the token-level loss, dynamic sampling, the soft overlong
    # penalty with L_cache / L_max = 4,096 / 20,480 (8 / 40 here), no KL. Departures: 2 updates per rollout
    # (DAPO: 16), and dynamic sampling stops after --max-sampling-rounds 3 (DAPO: until the batch is full)
    "dapo": dict(clip_high=0.28, loss_agg="token_mean", dynamic_sampling=True, overlong_cache=8, kl=0.0,
                 mu=1, minibatches=2),
    # Dr. GRPO (Liu et al. 2025, sec. 3.2, table 6): no std, the token sum over the generation budget, no KL,
    # one inner epoch
    "drgrpo": dict(adv_norm="none", loss_agg="constant", kl=0.0, mu=1, minibatches=1),
    # GSPO (Zheng et al. 2025, eq. 5-7, sec. 5.1): the length-normalised sequence ratio clipped to
    # [1 - 3e-4, 1 + 4e-4], "each batch of rollout data is partitioned into four minibatches"
    "gspo": dict(ratio_level="gspo", clip=3e-4, clip_high=4e-4, kl=0.0, mu=1, minibatches=4),
    # CISPO (MiniMax-M1, arXiv 2506.13585, sec. 3.1): clipped, detached IS weights on every token's log-prob,
    # the token-level loss, no lower bound, DAPO's dynamic sampling and length penalty, no KL. Departures: the
    # paper tunes eps_high but does not give it (DAPO's 0.28 here); 2 updates per rollout (M1: 16)
    "cispo": dict(objective="cispo", clip=INF, clip_high=0.28, loss_agg="token_mean", dynamic_sampling=True,
                  overlong_cache=8, kl=0.0, mu=1, minibatches=2),
    # the book's own algorithm, 7_5_plus_kl.py: one prompt and 8 answers per step, sampled at T 0.8 / top-p
    # 0.9 and scored at T 1; two inner epochs that sample again from the frozen copy; the summed
    # sequence ratio in the torch.where form at eps 10; k1 on summed log-probs. Departures (EXPERIMENTS.md, "How
    # a lesson is judged"): beta 0.1 (the script: 0.001), lr 1e-4 with Adam (1e-5 with AdamW)
    "book": dict(prompts_per_step=1, group_size=8, temperature=0.8, top_p=0.9, learner_temperature=1.0,
                 mu=2, minibatches=1, resample_epochs=True, ratio_level="sequence", objective="book",
                 clip=10.0, kl=0.1, kl_estimator="k1", kl_level="sequence", loss_agg="seq_mean", lr=1e-4),
}
# The book's 7_7_improvements/ scripts are its own algorithm plus numbered items of the chapter's closing list:
# olmo3_style.py, items 1-7 on 7_5_plus_kl.py: (1, 2) groups with equal rewards dropped, others drawn, up to 8
# tries; (3) the token-level loss on per-token ratios; (4) no KL; (5) clip higher, eps 0.2 / 10; (6) the ratio
# capped at 1 + 10 (what the script calls truncated importance sampling: the high clip of the book's torch.where
# form does it here; --tis-cap is Yao et al.'s sampler correction, which the script has not); (7) no std.
# Departure: the second inner epoch samples its prompt again without dropping a group.
RECIPES["olmo3"] = dict(RECIPES["book"], dynamic_sampling=True, max_sampling_rounds=8, ratio_level="token",
                        loss_agg="token_mean", kl=0.0, clip=0.2, clip_high=10.0, adv_norm="none")
# deepseek_v32_style.py, items 8-12 on 7_5_plus_kl.py: (8) a KL of zero for math; (9) the KL re-weighted by
# pi / pi_old (inert at beta 0, as in the script); (10) off-policy sequence masking, delta 0.1; (11) the kept
# sampling mask; (12) GRPO's std kept, as the script keeps it (DeepSeek-V3.2's own section 3.1 writes R_i - mean(R),
# no std). Departure: (10) measures the distance from the sampler's log-probs (as DeepSeek-V3.2 takes them from its
# sampler), the script from pi_old's at T 1 (field_methods.off_policy_keep)
RECIPES["deepseek_v32"] = dict(RECIPES["book"], kl=0.0, kl_reweight=True, off_policy_mask=0.1,
                               keep_sampling_mask=True, adv_norm="group")
# gdpo.py: a bonus of 0.1 for a boxed answer, each reward term normalised in its group before the sum (GDPO),
# beta 0.02 (k1 on summed log-probs, as 7_5), two inner epochs. Departure: the script runs the reasoning Qwen3
# (7_6's model) and grades an answer without a box by its last number; our reward needs the box
RECIPES["gdpo"] = dict(RECIPES["book"], reward_norm="norm_then_sum", format_weight=0.1, format_check="boxed",
                       kl=0.02)
# ... and at the book's own scale, for its Qwen3-0.6B on MATH (docs/book_model.md): 7_5's lr, KL and budget,
# graded on MATH-500 as the book grades it (the last number when there is no box)
RECIPES["book_qwen3"] = dict(RECIPES["book"], max_new_tokens=512, lr=1e-5, kl=0.001, eval_every=50, eval_size=500,
                             eval_fallback="number")
# the book's 7_6_plus_format_reward.py as the chapter runs it (--steps 500 --max_new_tokens 1024, the rest its
# defaults): book_qwen3 from the reasoning Qwen3-0.6B in its chat template, with one inner epoch, no KL, and a
# format bonus of weight 1 for <think> before </think>, ungated. Departures: this file's docstring.
RECIPES["book_qwen3_format"] = dict(
    RECIPES["book_qwen3"], max_new_tokens=1024, mu=1, resample_epochs=False, kl=0.0, format_weight=1.0,
    format_check="book", gated=False, chat_template=True)
# The field past the chapter (field_methods.py): each recipe sets its method as its source gives it, and leaves the
# rest at our defaults (this file's docstring: lr, group size, length), so a run differs from the default by the method.
# SAPO (arXiv 2511.20347; TRL loss_type "sapo", verl "sapo"): the gate at tau_pos 1, tau_neg 1.05,
# each answer's mean (TRL and verl aggregate SAPO seq-mean-token-mean)
RECIPES["sapo"] = dict(objective="sapo", sapo_tau_pos=1.0, sapo_tau_neg=1.05, loss_agg="seq_mean")
# GMPO (arXiv 2507.20673; verl "geo_mean" and its examples/gmpo_trainer scripts): the token
# log-ratios clipped to [-0.4, 0.4], the range (e^-0.4, e^0.4)
RECIPES["gmpo"] = dict(objective="gmpo", clip=0.4, clip_high=0.4, loss_agg="seq_mean")
# DPPO (Qi et al. 2026, arXiv 2602.04879; verl examples/dppo_trainer/run_qwen30b_dppo.sh): the TV bound 0.15, the
# binary KL's 0.05, no std and Dr. GRPO's constant normaliser (the script: norm_adv_by_std_in_grpo False,
# seq-mean-token-sum-norm, which verl's agg_loss divides by the batch and the length cap, as --loss-agg constant does).
# Departure: no truncation of the ratio pi / mu (the script sets clip_ratio_c 1e4 for the same). The bare
# --objective dppo_tv / dppo_kl / gmpo ask for --clip, and --objective vespo for --loss-agg (harness/cli.py)
RECIPES["dppo_tv"] = dict(objective="dppo_tv", clip=0.15, clip_high=0.15, adv_norm="none", loss_agg="constant")
RECIPES["dppo_kl"] = dict(RECIPES["dppo_tv"], objective="dppo_kl", clip=0.05, clip_high=0.05)
# LUSPO (Liu et al. 2026, arXiv 2602.05261; TRL loss_type "luspo", which requires the sequence level): GSPO's recipe
# with each answer's loss scaled by its length
RECIPES["luspo"] = dict(RECIPES["gspo"], loss_agg="luspo")
# VESPO (Shen et al. 2026, arXiv 2602.10693; the authors' compute_policy_loss_vespo and TRL loss_type "vespo"): the
# Gamma kernel at k 2 / lambda 3 for A >= 0 and k 3 / lambda 2 for A < 0, the token-level mean (the authors'
# token-mean, TRL's normaliser for vespo)
RECIPES["vespo"] = dict(objective="vespo", vespo_k_pos=2.0, vespo_lambda_pos=3.0, vespo_k_neg=3.0,
                        vespo_lambda_neg=2.0, loss_agg="token_mean")
