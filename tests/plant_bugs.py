"""Plant realistic one-line bugs, one at a time, in a scratch copy; run the test meant to catch each.

    python tests/plant_bugs.py            # every bug, ~8 minutes on 2 cores; prints caught / MISSED per bug
    python tests/plant_bugs.py TIS KL     # only the bugs whose names contain one of these words

Each entry is (bug, file, original text, planted text, the tests that guard it). A
test that cannot catch its bug is a defect; when you add a flag, add its bug here.
(Not collected by pytest: the file name does not start with test_.)
"""
import os
import shutil
import subprocess
import sys
import tempfile

SRC = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUGS = [
 ("step seed ignores step", "train.py", "rank_seed(seed * 1_000_003 + step, rank)", "rank_seed(seed * 1_000_003, rank)",
  "tests/test_train.py::test_each_step_draws_its_own_problems tests/test_train.py::test_resume_continues_exactly"),
 ("pi_old refreshed every update", "grpo.py", "            if old_logp is None:\n                old_logp = logp.detach()", "            if True:\n                old_logp = logp.detach()",
  "tests/test_grpo_step.py -k 'later_updates or old_logprobs or ppo_kl'"),
 ("no pi_old pass for K>1", "grpo.py", "                if epoch > 0 or cfg.minibatches > 1:", "                if epoch > 0:",
  "tests/test_grpo_step.py -k 'old_logprobs or later_updates'"),
 ("prompt in loss mask", "rollouts.py", "    loss_mask[:, :P - 1] = False", "    pass",
  "tests/test_grpo_step.py -k loss_mask"),
 ("mask_truncated ignored", "grpo.py", "loss_mask = batch.loss_mask & ~batch.truncated[:, None] if cfg.mask_truncated else batch.loss_mask", "loss_mask = batch.loss_mask",
  "tests/test_grpo_step.py -k loss_mask"),
 ("KL against the policy", "grpo.py", "ref_logp = batch_logprobs(ref_model, batch,", "ref_logp = batch_logprobs(policy, batch,",
  "tests/test_grpo_step.py -k kl_term"),
 ("reference copied after resume state", "train.py", "        ref_model = copy.deepcopy(model).eval().requires_grad_(False)\n    opt = torch.optim.Adam(model.parameters(), lr=cfg.lr)\n    if state is not None:\n        model.load_state_dict(state[\"model\"])", "        pass\n    opt = torch.optim.Adam(model.parameters(), lr=cfg.lr)\n    if state is not None:\n        model.load_state_dict(state[\"model\"])\n    if cfg.kl > 0:\n        ref_model = copy.deepcopy(model).eval().requires_grad_(False)",
  "tests/test_train.py::test_resume_continues_exactly"),
 ("log-probs ignore temperature", "grpo.py", "        logp, ent = linear_logprobs_and_entropy(rows, model.lm_head_weight, targets, temperature)", "        logp, ent = linear_logprobs_and_entropy(rows, model.lm_head_weight, targets, 1.0)",
  "tests/test_grpo_step.py -k 'same_distribution or fused_and_unfused'"),
 ("CISPO weight keeps gradient", "grpo.py", "    return ratio.clamp(1 - eps_low, 1 + eps_high).detach() * adv * logp", "    return ratio.clamp(1 - eps_low, 1 + eps_high) * adv * logp",
  "tests/test_grpo_step.py -k cispo"),
 ("clip fraction counts padding", "grpo.py", '''    stats.mean("clip_frac_low", low, m)''', '''    stats.mean("clip_frac_low", low)''',
  "tests/test_grpo_step.py -k padding"),
 ("minibatches overlap", "rollouts.py", "for part in torch.arange(B // G).tensor_split(min(K, B // G))]", "for part in torch.arange(B // G)[:max(1, B // G // K)].repeat(K).tensor_split(min(K, B // G))]",
  "tests/test_grpo_step.py -k minibatch"),
 ("minibatches unbalanced (chunk)", "rollouts.py", "for part in torch.arange(B // G).tensor_split(min(K, B // G))]", "for part in torch.arange(B // G).chunk(K)]",
  "tests/test_grpo_step.py -k minibatch"),
 ("TIS cap not applied", "grpo.py", "    return torch.exp((old_logp - sampler_logp).clamp(max=20.0)).clamp(max=cap)", "    return torch.exp((old_logp - sampler_logp).clamp(max=20.0))",
  "tests/test_improvements.py -k tis"),
 ("GDPO sums raw terms", "grpo.py", "    total = sum(w * group_advantages(terms[k], G, \"group\") for k, w in weights.items() if w != 0)  # (B,)", "    total = sum(w * terms[k] for k, w in weights.items() if w != 0)  # (B,)",
  "tests/test_improvements.py -k gdpo"),
 ("book format: a close after any open", "rewards.py", "    return 1.0 if 0 <= start < close else 0.0", "    return 1.0 if start >= 0 and completion.find(CLOSE, start) >= 0 else 0.0",
  "tests/test_rewards.py -k book"),
 ("recipe overrides explicit flags", "train.py", "    return ap, ap.parse_args(argv)", "    args = ap.parse_args(argv)\n    if recipe:\n        vars(args).update(grpo.RECIPES[recipe])\n    return ap, args",
  "tests/test_improvements.py -k 'recipe or explicit'"),
 ("training tests do not train (lr 0)", "grpo.py", "    opt.step()\n", "    pass\n",
  "tests/test_train.py::test_training_steps_see_mixed_rewards_and_gradients"),
 # the whole-step test of each GRPOConfig field (tests/test_whole_step.py), then the reference, guards, evaluation
 ("groups not adjacent", "rollouts.py", "repeated = [p for p in problems for _ in range(cfg.group_size)]", "repeated = [p for _ in range(cfg.group_size) for p in problems]",
  "tests/test_whole_step.py -k group_size"),
 ("Dr. GRPO divides by the padded width", "grpo.py", "mask.shape[0] * max_len)", "mask.shape[0] * mask.shape[1])",
  "tests/test_whole_step.py -k max_new_tokens"),
 ("sampler ignores temperature", "rollouts.py", "stop, cfg.temperature, cfg.top_k", "stop, 1.0, cfg.top_k",
  "tests/test_whole_step.py -k temperature_is"),
 ("nucleus drops the token that crosses top_p", "model.py", "drop = cum - sorted_logits.softmax(-1) >= top_p", "drop = cum >= top_p",
  "tests/test_whole_step.py -k top_p_and_top_k"),
 ("top-k keeps k - 1", "model.py", "logits.masked_fill(logits < kth,", "logits.masked_fill(logits <= kth,",
  "tests/test_whole_step.py -k top_p_and_top_k"),
 ("learner temperature ignored", "grpo.py", "T = cfg.temperature if cfg.learner_temperature is None else cfg.learner_temperature", "T = cfg.temperature",
  "tests/test_whole_step.py -k learner_temperature"),
 ("sampler at the learner temperature", "rollouts.py", "stop, cfg.temperature, cfg.top_k", "stop, cfg.learner_temperature or cfg.temperature, cfg.top_k",
  "tests/test_whole_step.py -k learner_temperature"),
 ("format weight not passed to score", "rollouts.py", "format_weight=cfg.format_weight, gated=cfg.gated,", "gated=cfg.gated,",
  "tests/test_whole_step.py -k format_weight"),
 ("gated not passed to score", "rollouts.py", "format_weight=cfg.format_weight, gated=cfg.gated,", "format_weight=cfg.format_weight,",
  "tests/test_whole_step.py -k gated"),
 ("format check not passed to score", "rollouts.py", "overlong_cache=cfg.overlong_cache, format_check=cfg.format_check)", "overlong_cache=cfg.overlong_cache)",
  "tests/test_whole_step.py -k format_check"),
 ("overlong cache not passed to score", "rollouts.py", "overlong_cache=cfg.overlong_cache, format_check=cfg.format_check)", "format_check=cfg.format_check)",
  "tests/test_whole_step.py -k overlong"),
 ("adv_norm ignored", "grpo.py", 'return group_advantages(batch.rewards["total"], cfg.group_size, cfg.adv_norm)', 'return group_advantages(batch.rewards["total"], cfg.group_size)',
  "tests/test_whole_step.py -k adv_norm"),
 ("reward_norm ignored by the step", "grpo.py", "adv = advantages(batch, cfg)  # (B,)", 'adv = group_advantages(batch.rewards["total"], cfg.group_size, cfg.adv_norm)  # (B,)',
  "tests/test_whole_step.py -k reward_norm"),
 ("dynamic sampling keeps whole rounds", "rollouts.py", "parts.append(take_rows(part, group_rows(keep, G)))", "parts.append(part)",
  "tests/test_whole_step.py -k dynamic_sampling"),
 ("one sampling round too many", "rollouts.py", "range(cfg.max_sampling_rounds if", "range(cfg.max_sampling_rounds + 1 if",
  "tests/test_whole_step.py -k max_sampling_rounds"),
 ("resampled from the updated policy", "grpo.py", "rollout(pi_old, enc,", "rollout(policy, enc,",
  "tests/test_whole_step.py -k resample"),
 ("resampled pi_old scored by the updated policy", "grpo.py", "old_logp = batch_logprobs(pi_old, batch,", "old_logp = batch_logprobs(policy, batch,",
  "tests/test_whole_step.py -k resample"),
 ("resampled epochs draw new prompts", "grpo.py", "first.problems[::cfg.group_size]", "[next_problems() for _ in range(n_prompts)]",
  "tests/test_whole_step.py -k resample"),
 ("A factored out of PPO's min", "grpo.py", "surr = torch.minimum(ratio * adv, ratio.clamp(1 - eps_low, 1 + eps_high) * adv)", "surr = torch.minimum(ratio, ratio.clamp(1 - eps_low, 1 + eps_high)) * adv",
  "tests/test_whole_step.py -k clip_zeroes"),
 ("clip_high ignored", "grpo.py", "return cfg.clip, cfg.clip if cfg.clip_high is None else cfg.clip_high", "return cfg.clip, cfg.clip",
  "tests/test_whole_step.py -k clip_high"),
 ("dual clip not passed", "grpo.py", "obj = clipped_objective(ratio, A, eps_low, eps_high, cfg.dual_clip)", "obj = clipped_objective(ratio, A, eps_low, eps_high)",
  "tests/test_whole_step.py -k dual_clip"),
 ("book objective runs PPO's", "grpo.py", "obj = book_objective(ratio, A, eps_low, eps_high)", "obj = clipped_objective(ratio, A, eps_low, eps_high)",
  "tests/test_whole_step.py -k objective_sets"),
 ("book clip fraction counts only A > 0", "grpo.py", "low, high = torch.zeros_like(m), r > 1 + eps_high", "low, high = torch.zeros_like(m), (r > 1 + eps_high) & (A > 0)",
  "tests/test_grpo.py -k book_clip"),
 ("ratio level not passed", "grpo.py", "ratio = policy_ratio(logp, old_logp, mask, cfg.ratio_level)", "ratio = policy_ratio(logp, old_logp, mask)",
  "tests/test_whole_step.py -k ratio_level"),
 ("token KL ignores the estimator", "grpo.py", "kl = kl_penalty(logp, ref_logp, cfg.kl_estimator)", "kl = kl_penalty(logp, ref_logp)",
  "tests/test_whole_step.py -k kl_estimator"),
 ("sequence KL ignores the estimator", "grpo.py", "cfg.kl_estimator).expand_as(logp)", '"k3").expand_as(logp)',
  "tests/test_whole_step.py -k kl_estimator"),
 ("sequence KL of mean log-probs", "grpo.py", "kl_penalty((logp * mask).sum(1, keepdim=True), (ref_logp * mask).sum(1, keepdim=True),", "kl_penalty((logp * mask).mean(1, keepdim=True), (ref_logp * mask).mean(1, keepdim=True),",
  "tests/test_whole_step.py -k kl_estimator"),
 ("KL reweight ratio detached", "grpo.py", 'kl = kl * policy_ratio(logp, old_logp, mask, "token" if cfg.kl_level == "token" else "sequence")', 'kl = kl * policy_ratio(logp, old_logp, mask, "token" if cfg.kl_level == "token" else "sequence").detach()',
  "tests/test_whole_step.py -k kl_estimator"),
 ("entropy bonus is a penalty", "grpo.py", 'loss = loss - cfg.entropy_coef * terms["entropy_bonus"]', 'loss = loss + cfg.entropy_coef * terms["entropy_bonus"]',
  "tests/test_whole_step.py -k entropy_coef"),
 ("fused_head ignored", "grpo.py", "T, cfg.fused_head, support)", "T, True, support)",
  "tests/test_whole_step.py -k fused_head"),
 ("TIS weight not applied", "grpo.py", "obj = obj.expand_as(logp) if token_weight is None else obj * token_weight", "obj = obj.expand_as(logp)",
  "tests/test_whole_step.py -k tis_cap"),
 ("kept support not used by the learner", "grpo.py", "support = None if batch.support is None else batch.support[rows]", "support = None",
  "tests/test_whole_step.py -k keep_sampling_mask"),
 ("off-policy mask not applied", "grpo.py", "A = adv[rows] * keep  # (b,)", "A = adv[rows]  # (b,)",
  "tests/test_whole_step.py -k off_policy_mask"),
 ("off-policy mask drops positives too", "grpo.py", "return (~((adv < 0) & (kl > delta))).to(logp.dtype)", "return (~(kl > delta)).to(logp.dtype)",
  "tests/test_whole_step.py -k off_policy_mask"),
 ("lr not given to Adam", "train.py", "opt = torch.optim.Adam(model.parameters(), lr=cfg.lr)", "opt = torch.optim.Adam(model.parameters())",
  "tests/test_whole_step.py -k lr_is"),
 ("max_grad_norm not passed", "grpo.py", "optimizer_step(model, opt, loss, cfg.max_grad_norm)", "optimizer_step(model, opt, loss, 1.0)",
  "tests/test_whole_step.py -k max_grad_norm"),
 ("a new flag without a whole-step test", "grpo.py", '    max_grad_norm: float = knob("optimisation", 1.0, "gradient clipping")\n', '    max_grad_norm: float = knob("optimisation", 1.0, "gradient clipping")\n    weight_decay: float = knob("optimisation", 0.0, "AdamW weight decay")\n',
  "tests/test_whole_step.py::test_every_grpo_config_field_has_a_whole_step_test"),
 ("reference is the policy itself", "train.py", "ref_model = copy.deepcopy(model).eval().requires_grad_(False)", "ref_model = model",
  "tests/test_train.py::test_the_reference_stays_the_warm_start_across_a_run_and_its_resume"),
 ("NaN gradient not checked", "distributed.py", "return bool(torch.isfinite(all_sum(loss.detach())) and torch.isfinite(grad_norm))", "return bool(torch.isfinite(all_sum(loss.detach())))",
  "tests/test_train.py::test_nan_guard_stops_a_finite_loss_with_a_non_finite_gradient tests/test_grpo.py::test_nan_guard_fires_for_a_finite_loss_with_a_non_finite_gradient"),
 ("resume reads only the flags the run saved", "train.py", 'vars(saved).update(state["args"])', 'saved = argparse.Namespace(**state["args"])',
  "tests/test_train.py::test_a_run_saved_before_a_flag_existed_resumes_with_its_default"),
 ("evaluation samples", "evaluation.py", "stop_tokens(enc), greedy=True)", "stop_tokens(enc))",
  "tests/test_evaluation.py -k greedy"),
 ("evaluation pairs chunks with the first problems", "evaluation.py", "max(map(len, prompts))), chunk):", "max(map(len, prompts))), mine):",
  "tests/test_evaluation.py -k hand_built"),
 ("held-out set drawn from the training split", "tasks.py", 'for p in problems(level, EVAL_SEED, split="eval"):', "for p in problems(level, EVAL_SEED):",
  "tests/test_evaluation.py -k held_out"),
 ("book recipe scores at the sampler's temperature", "grpo.py", "top_p=0.9, learner_temperature=1.0,", "top_p=0.9,",
  "tests/test_improvements.py -k book_recipe"),
 ("a listed command repeats a flag", "experiments.py", "    return [x for name, values in merged.items() for x in (name, *values)]", "    return [x for flags in flag_lists for x in flags]",
  "tests/test_experiments.py -k each_flag_once"),
 ("an experiment named after a recipe spells its flags", "experiments.py", '"dapo": (["--recipe", "dapo"]', '"dapo": (["--clip-high", "0.28", "--loss-agg", "token_mean"]',
  "tests/test_experiments.py -k named_after_a_recipe"),
 ("first moves from a running mean, not a trailing window", "experiments.py", "trailing = [(s, sum(v for _, v in logged[max(0, i - window + 1):i + 1]) / min(window, i + 1))", "trailing = [(s, sum(v for _, v in logged[:i + 1]) / (i + 1))",
  "tests/test_experiments.py -k first_moves"),
 ("train.py starts from another warm start", "sft.py", 'DEFAULT_CKPT = "checkpoints/warmstart.pt"', 'DEFAULT_CKPT = "checkpoints/warm_start.pt"',
  "tests/test_warmstart.py -k train_starts"),
]
only = sys.argv[1:]  # python tests/plant_bugs.py "TIS" "off-policy": only the bugs whose names contain one of these
results = []
for name, f, old, new, tests in [b for b in BUGS if not only or any(w in b[0] for w in only)]:
    work = os.path.join(tempfile.mkdtemp(), "tree")
    shutil.copytree(SRC, work, ignore=shutil.ignore_patterns("runs", ".git", "__pycache__", "figures"))
    p = os.path.join(work, f)
    src = open(p).read()
    if src.count(old) != 1:  # the code moved on: fix the entry, or the bug goes unguarded
        results.append((name, "MUTATION NOT APPLIED (%d matches of its original text)" % src.count(old)))
        print(f"{name}: {results[-1][1]}", flush=True)
        continue
    open(p, "w").write(src.replace(old, new))
    r = subprocess.run(f"cd {work} && {sys.executable} -m pytest -q -x -p no:cacheprovider {tests}", shell=True,
                       capture_output=True, text=True)
    shutil.rmtree(os.path.dirname(work))
    results.append((name, "caught" if r.returncode != 0 else "MISSED"))
    print(f"{name}: {results[-1][1]}  ({tests})", flush=True)
missed = [n for n, s in results if s != "caught"]
print(f"{len(results) - len(missed)} of {len(results)} planted bugs caught")
sys.exit(1 if missed else 0)
