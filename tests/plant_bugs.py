"""Plant realistic one-line bugs, one at a time, in a scratch copy; run the test meant to catch each.

    python tests/plant_bugs.py          # ~3 minutes; prints caught / MISSED per bug

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
 ("book format: the first close, not one after the open", "rewards.py", "completion.find(CLOSE, start) >= 0", "completion.find(CLOSE) > start",
  "tests/test_rewards.py -k book"),
 ("recipe overrides explicit flags", "train.py", "    return ap, ap.parse_args(argv)", "    args = ap.parse_args(argv)\n    if recipe:\n        vars(args).update(grpo.RECIPES[recipe])\n    return ap, args",
  "tests/test_improvements.py -k 'recipe or explicit'"),
 ("training tests do not train (lr 0)", "grpo.py", "    opt.step()\n", "    pass\n",
  "tests/test_train.py::test_training_steps_see_mixed_rewards_and_gradients"),
]
results = []
for name, f, old, new, tests in BUGS:
    work = os.path.join(tempfile.mkdtemp(), "tree")
    shutil.copytree(SRC, work, ignore=shutil.ignore_patterns("runs", ".git", "__pycache__", "figures", "checkpoints"))
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
