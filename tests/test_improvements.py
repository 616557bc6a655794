"""The chapter's list of GRPO improvements, each against a hand-written formula, and the recipes.

Truncated importance sampling, the kept sampling mask, off-policy sequence masking,
re-weighted KL, GDPO and the entropy bonus; every recipe resolves and prints its flags.
"""
import json
import math
import os
import subprocess
import sys

import pytest
import torch

import config
import field_methods
import grpo
import rollouts
import tasks
from config import GRPOConfig
from harness import cli
from model import GPT, GPTConfig
from tokenizer import build_tokenizer

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_tis_weight_is_the_capped_learner_to_sampler_ratio():
    old = torch.log(torch.tensor([[0.5, 0.2, 0.9]]))
    sampler = torch.log(torch.tensor([[0.25, 0.4, 0.1]]))  # ratios 2, 0.5, 9
    torch.testing.assert_close(field_methods.tis_weights(old, sampler, 3.0), torch.tensor([[2.0, 0.5, 3.0]]))  # cap reached once
    torch.testing.assert_close(field_methods.tis_weights(old, sampler, 10.0), torch.tensor([[2.0, 0.5, 9.0]]))  # never
    assert torch.equal(field_methods.tis_weights(old, sampler, 0.0), torch.ones(1, 3))  # off


def test_off_policy_mask_drops_only_far_negative_sequences():
    sampler = torch.zeros(4, 3)
    logp = torch.tensor([[-1.0, -1, 0], [-1, -1, 0], [-0.1, 0, 0], [-3, 0, 0]])
    mask = torch.tensor([[1, 1, 0], [1, 1, 0], [1, 1, 1], [1, 1, 1]], dtype=torch.bool)
    adv = torch.tensor([-1.0, 1.0, -1.0, -0.5])
    # length-normalised KL from the sampler: 1, 1, 0.033, 1
    assert field_methods.off_policy_keep(logp, sampler, adv, mask, 0.5).tolist() == [0.0, 1.0, 1.0, 0.0]
    assert field_methods.off_policy_keep(logp, sampler, adv, mask, math.inf).tolist() == [1.0] * 4  # off
    assert field_methods.off_policy_keep(logp, sampler, -adv.abs(), mask, 0.0).tolist() == [0.0] * 4  # all masked


def test_reweighted_kl_is_ratio_times_k3_and_plain_k3_on_policy():
    logp = torch.tensor([[-1.0, -2.0]], requires_grad=True)
    old, ref = torch.tensor([[-1.5, -2.0]]), torch.tensor([[-0.5, -1.0]])
    mask = torch.ones(1, 2, dtype=torch.bool)
    cfg = GRPOConfig(kl=0.1, kl_reweight=True)
    k3 = lambda lr: math.exp(lr) - 1 - lr  # noqa: E731  lr = log pi_ref - log pi
    got = grpo.kl_penalty(logp, ref, mask, cfg.kl_estimator, cfg.kl_level, old)
    want = [math.exp(0.5) * k3(0.5), 1.0 * k3(1.0)]
    torch.testing.assert_close(got, torch.tensor([want]))
    on_policy = grpo.kl_penalty(logp, ref, mask, "k3", "token", logp.detach())
    torch.testing.assert_close(on_policy, grpo.kl_penalty(logp, ref, mask, "k3"))
    on_policy.sum().backward()  # on-policy the gradient of r * k3 is d(k3) + k3 (the ratio's own)
    torch.testing.assert_close(logp.grad, torch.tensor([[1 - math.exp(0.5) + k3(0.5), 1 - math.exp(1.0) + k3(1.0)]]))


def gdpo(terms, weights, G):
    """GDPO's advantages as grpo.advantages makes them: each paid term's group advantage, then
    field_methods.gdpo_advantages."""
    per_term = {k: grpo.group_advantages(terms[k], G) for k, w in weights.items() if w != 0}
    return field_methods.gdpo_advantages(per_term, weights)


def test_gdpo_is_nvlabs_formula_on_a_batch_of_two_prompts():
    """NVlabs/GDPO (trl-GDPO's grpo_trainer): each reward's advantage within its group, (r - mean) / (std + 1e-4)
    with the std over G - 1; their weighted sum; then that sum's batch mean taken off and divided by its batch std
    + 1e-4. Two prompts of 4 answers, by hand: prompt 1's correctness 1, 0, 0, 0 and format 1, 1, 1, 0; prompt 2's
    correctness 1, 1, 1, 1 (no signal) and format 1, 0, 1, 0."""
    terms = {"correct": torch.tensor([1.0, 0, 0, 0, 1, 1, 1, 1]), "format_paid": torch.tensor([1.0, 1, 1, 0, 1, 0, 1, 0]),
             "overlong": torch.zeros(8)}
    weights = {"correct": 1.0, "format_paid": 0.5, "overlong": 0.0}
    c1 = [(x - 0.25) / (0.5 + 1e-4) for x in (1, 0, 0, 0)]  # mean 1/4, std over 3: 1/2
    f1 = [(x - 0.75) / (0.5 + 1e-4) for x in (1, 1, 1, 0)]
    c2 = [0.0] * 4  # all 1: 0 / (0 + eps)
    f2 = [(x - 0.5) / ((1 / 3) ** 0.5 + 1e-4) for x in (1, 0, 1, 0)]  # mean 1/2, std over 3: sqrt(1/3)
    s = torch.tensor([c + 0.5 * f for c, f in zip(c1 + c2, f1 + f2)])
    want = (s - s.mean()) / (s.std() + 1e-4)
    torch.testing.assert_close(gdpo(terms, weights, 4), want)
    # the form this project had: the sum normalised again within each group, not over the batch, differs here
    within = torch.cat([(g - g.mean()) / (g.std() + 1e-4) for g in s.view(2, 4)])
    assert not torch.allclose(within, want, atol=1e-3)


def test_gdpo_keeps_the_sparse_term_from_drowning():
    """Sum-then-normalise: a dense format term sets the scale; GDPO gives correctness its own."""
    correct = torch.tensor([1.0, 0, 0, 0, 0, 0, 0, 0])
    fmt = torch.tensor([0.0, 1, 1, 1, 1, 0, 0, 0])
    total = correct + 2.0 * fmt
    plain = grpo.group_advantages(total, 8)
    mine = gdpo({"correct": correct, "format_paid": fmt}, {"correct": 1.0, "format_paid": 2.0}, 8)
    assert plain[0] < 0 < mine[0]  # the only correct answer: punished by the plain sum, rewarded by GDPO


def distinct_magnitudes(adv):
    return sorted({round(abs(a), 3) for a in adv.tolist()})  # 3 places: the eps of the std moves the 5th


def every_two_rollout_group():
    """All 16 groups of 2 rollouts scored by 2 binary rewards (GDPO, arXiv 2601.05242, Fig. 2),
    side by side in one batch: terms (32,) each."""
    combos = torch.tensor([[a, b, c, d] for a in (0, 1) for b in (0, 1) for c in (0, 1) for d in (0, 1)],
                          dtype=torch.float)  # (16, 4): rollout 1's two rewards, rollout 2's two
    return {"correct": combos[:, [0, 2]].reshape(-1), "format_paid": combos[:, [1, 3]].reshape(-1)}


def test_gdpo_tells_apart_the_reward_tuples_that_grpo_merges():
    """GRPO normalises the summed reward: at 2 rollouts any two different totals, (0, 1), (0, 2)
    or (1, 2), give the same +-1/sqrt(2), so its advantages take 2 magnitudes. GDPO normalises
    each reward first: a group apart in one reward gets +-1/sqrt(2), apart in both +-sqrt(2),
    3 magnitudes, and its batch-wise normalisation after the sum keeps them."""
    terms, weights = every_two_rollout_group(), {"correct": 1.0, "format_paid": 1.0}
    grpo_adv = grpo.group_advantages(terms["correct"] + terms["format_paid"], 2)
    mine = gdpo(terms, weights, 2)
    half = round(2 ** -0.5, 3)
    assert distinct_magnitudes(grpo_adv) == [0.0, half]
    assert len(distinct_magnitudes(mine)) == 3
    small, large = distinct_magnitudes(mine)[1:]
    assert abs(large / small - 2.0) < 1e-3  # apart in both rewards: twice the advantage of apart in one


def test_entropy_bonus_gradient_equals_autograd_through_the_reference(monkeypatch):
    enc = build_tokenizer({"merges": []})
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=enc.n_vocab, max_seq_len=16, n_layer=1, n_head=2, d_model=32))
    g = torch.Generator().manual_seed(1)
    tokens = torch.randint(0, enc.n_vocab, (3, 9), generator=g)
    mask = torch.ones(3, 9, dtype=torch.bool)
    loss_mask = mask[:, 1:] & (torch.arange(8) >= 3)
    grads = []
    for fused, backend in [(True, "auto"), (False, "reference")]:
        monkeypatch.setenv("KERNELS_BACKEND", backend)
        model.zero_grad()
        _, ent = grpo.token_logprobs(model, tokens, mask, loss_mask, 0.8, "fused" if fused else "logits")
        (-0.1 * grpo.aggregate(ent, loss_mask, "token_mean")).backward()
        grads.append([p.grad.clone() for p in model.parameters()])
    for a, b in zip(*grads):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)
    assert any(a.abs().max() > 0 for a in grads[0])


def test_kept_sampling_mask_makes_learner_and_sampler_agree_under_top_p():
    enc = build_tokenizer({"merges": []})
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=enc.n_vocab, max_seq_len=48, n_layer=1, n_head=2, d_model=32))
    with torch.no_grad():
        model.wte.weight.mul_(6)  # a peaked distribution, so top-p cuts a real tail
    stream = tasks.problems("easy", 0)
    cfg = GRPOConfig(group_size=4, max_new_tokens=5, top_p=0.7, keep_sampling_mask=True)
    batch = rollouts.rollout(model, enc, [next(stream) for _ in range(3)], cfg, torch.Generator().manual_seed(0))
    assert batch.support.shape == (*batch.loss_mask.shape, enc.n_vocab)
    kept, _ = grpo.token_logprobs(model, batch.tokens, batch.mask, batch.loss_mask, support=batch.support)
    full, _ = grpo.token_logprobs(model, batch.tokens, batch.mask, batch.loss_mask)
    m = batch.loss_mask
    torch.testing.assert_close(kept[m], batch.sampler_logp[m], rtol=1e-4, atol=1e-5)  # the sampler's distribution
    assert (full[m] - batch.sampler_logp[m]).abs().max() > 1e-2  # without the mask: a gap top-p created
    assert batch.support[m].sum(-1).float().mean() < enc.n_vocab / 2  # top-p really truncated


@pytest.mark.parametrize("name", list(config.RECIPES))
def test_every_recipe_prints_its_resolved_flags(name, capsys):
    # a recipe for the book's reasoning model (its chat template) is checked with a --model folder named
    model = ["--model", "qwen3-folder"] if config.RECIPES[name].get("chat_template") else []
    out = subprocess.run([sys.executable, "train.py", "--recipe", name, "--print-config", "--max-grad-norm", "0.5",
                          *model], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    resolved = json.loads(out.stdout)
    assert resolved["max_grad_norm"] == 0.5  # an explicit flag wins
    for key, value in config.RECIPES[name].items():
        assert resolved[key] == value, key
    _, args = cli.parse_args(["--recipe", name, *model])
    cli.check_args(args)  # never refused (a per-answer ratio or KL under token_mean, say), never warned
    cli.warn_inert_flags(args)
    assert capsys.readouterr().err == ""


def test_book_recipe_prints_the_books_values():
    """7_5_plus_kl.py's algorithm, typed here as the book gives it (not read from RECIPES)."""
    out = subprocess.run([sys.executable, "train.py", "--recipe", "book", "--print-config"], cwd=ROOT,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    resolved = json.loads(out.stdout)
    book = dict(prompts_per_step=1, group_size=8, temperature=0.8, top_p=0.9, learner_temperature=1.0,
                ratio_level="sequence", objective="book", clip=10.0, mu=2, minibatches=1, resample_epochs=True,
                kl_estimator="k1", kl_level="sequence", loss_agg="seq_mean")
    assert {k: resolved[k] for k in book} == book
    assert resolved["kl"] > 0 and resolved["clip_high"] is None  # a k1 penalty to a reference; eps 10 on both sides


def test_book_qwen3_format_recipe_prints_the_values_of_the_books_7_6_run():
    """7_6_plus_format_reward.py's defaults with the chapter's --max_new_tokens 1024, typed here
    as the book gives them (--num_rollouts 8, --temperature 0.8, --top_p 0.9, --clip_eps 10,
    --inner_epochs 1, --kl_coeff 0.0, --format_reward_weight 1.0, no --conditional_reward,
    lr 1e-5), from the reasoning model in its chat template, graded as evaluate_math500_stream."""
    _, args = cli.parse_args(["--recipe", "book_qwen3_format"])  # (--print-config prints them: the test above)
    resolved = vars(args)
    book = dict(prompts_per_step=1, group_size=8, max_new_tokens=1024, temperature=0.8, top_p=0.9,
                learner_temperature=1.0, ratio_level="sequence", objective="book", clip=10.0, mu=1, kl=0.0,
                format_weight=1.0, format_check="book", gated=False, lr=1e-5, max_grad_norm=1.0, adv_norm="group",
                chat_template=True, eval_fallback="number", eval_size=500)
    assert {k: resolved[k] for k in book} == book and resolved["clip_high"] is None
    with pytest.raises(ValueError, match="--chat-template is for --model"):  # the reasoning model's recipe
        cli.check_book_args(args)


SOURCES = {  # recipe -> the values its source gives, typed here from the source (not read from RECIPES)
    # DeepSeekMath sec. 4.2: "The KL coefficient is 0.04", "a single update following each exploration stage";
    # eq. 3-4: k3 per token inside each answer's mean; 4.1.2: group mean and std
    "grpo": dict(kl=0.04, kl_estimator="k3", kl_level="token", mu=1, loss_agg="seq_mean", adv_norm="group",
                 ratio_level="token", objective="ppo"),
    # DAPO sec. 4.1: eps_low 0.2, eps_high 0.28; eq. 12 token-level; 3.2 dynamic sampling; eq. 13 with
    # L_cache / L_max = 4096 / 20480 = 8 / 40; 2.3 no KL
    "dapo": dict(clip=0.2, clip_high=0.28, loss_agg="token_mean", dynamic_sampling=True, overlong_cache=8, kl=0.0),
    # Dr. GRPO sec. 3.2 and table 6: no std, the generation budget as the normaliser, no KL, 1 inner epoch, eps 0.2
    "drgrpo": dict(adv_norm="none", loss_agg="constant", kl=0.0, mu=1, clip=0.2, group_size=8),
    # GSPO eq. 7 and sec. 5.1: the length-normalised ratio, 3e-4 / 4e-4, four minibatches, no KL (eq. 5)
    "gspo": dict(ratio_level="gspo", clip=3e-4, clip_high=4e-4, minibatches=4, kl=0.0),
    # MiniMax-M1 sec. 3.1: eq. 4-5, no lower bound, DAPO's dynamic sampling and length penalty, no KL
    "cispo": dict(objective="cispo", clip=float("inf"), loss_agg="token_mean", dynamic_sampling=True,
                  overlong_cache=8, kl=0.0),
    # olmo3_style.py: 7_5's sampler and inner epochs, items 1-7 (8 tries, token-level, no KL, eps 0.2 / 10 on per-token
    # ratios in the torch.where form, no std)
    "olmo3": dict(prompts_per_step=1, temperature=0.8, top_p=0.9, learner_temperature=1.0, mu=2, resample_epochs=True,
                  dynamic_sampling=True, max_sampling_rounds=8, loss_agg="token_mean", kl=0.0, ratio_level="token",
                  objective="book", clip=0.2, clip_high=10.0, adv_norm="none", tis_cap=0.0),
    # deepseek_v32_style.py: 7_5 with items 8-12 (--kl_coeff 0.0, the re-weighted KL, delta 0.1, the kept mask, std kept)
    "deepseek_v32": dict(prompts_per_step=1, temperature=0.8, top_p=0.9, learner_temperature=1.0, mu=2,
                         resample_epochs=True, kl=0.0, kl_reweight=True, off_policy_mask=0.1, keep_sampling_mask=True,
                         adv_norm="group", objective="book", clip=10.0),
    # gdpo.py: 7_5's algorithm, a 0.1 bonus for a boxed answer, each term normalised first, --kl_coeff 0.02 (k1 summed)
    "gdpo": dict(prompts_per_step=1, temperature=0.8, top_p=0.9, mu=2, resample_epochs=True, reward_norm="norm_then_sum",
                 format_weight=0.1, format_check="boxed", kl=0.02, kl_estimator="k1", kl_level="sequence"),
    # the field's (field_methods.py): TRL sapo_temperature_pos / _neg 1.0 / 1.05, its grpo (seq-mean) normaliser
    "sapo": dict(objective="sapo", sapo_tau_pos=1.0, sapo_tau_neg=1.05, loss_agg="seq_mean", ratio_level="token"),
    # verl examples/gmpo_trainer: clip_ratio_low = clip_ratio_high = 0.4, on the log-ratio
    "gmpo": dict(objective="gmpo", clip=0.4, clip_high=0.4, loss_agg="seq_mean", ratio_level="token"),
    # verl examples/dppo_trainer/run_qwen30b_dppo.sh: TV 0.15, KL 0.05, norm_adv_by_std_in_grpo False, token sums
    "dppo_tv": dict(objective="dppo_tv", clip=0.15, clip_high=0.15, adv_norm="none", loss_agg="constant"),
    "dppo_kl": dict(objective="dppo_kl", clip=0.05, clip_high=0.05, adv_norm="none", loss_agg="constant"),
    # TRL loss_type "luspo" with importance_sampling_level "sequence": GSPO's ratio and clip, each answer times its length
    "luspo": dict(ratio_level="gspo", clip=3e-4, clip_high=4e-4, loss_agg="luspo", kl=0.0),
    # the VESPO authors' compute_policy_loss_vespo defaults (k_pos 2, lambda_pos 3, k_neg 3, lambda_neg 2), token-mean
    "vespo": dict(objective="vespo", vespo_k_pos=2.0, vespo_lambda_pos=3.0, vespo_k_neg=3.0, vespo_lambda_neg=2.0,
                  loss_agg="token_mean", ratio_level="token"),
}


@pytest.mark.parametrize("name", list(SOURCES))
def test_each_recipe_resolves_to_the_values_of_its_source(name):
    _, args = cli.parse_args(["--recipe", name])
    assert {k: getattr(args, k) for k in SOURCES[name]} == SOURCES[name]


def test_config_imports_alone_without_side_effects():
    """config.py holds GRPOConfig and RECIPES; importing it runs nothing (no torch, no project
    module), so a notebook can read the flags' defaults before it loads a model."""
    code = "import sys, config; print(sorted(m for m in sys.modules if m in ('torch', 'grpo', 'train', 'model')))"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.strip() == "[]" and out.stderr == ""


def test_explicit_flag_overrides_the_recipe():
    _, args = cli.parse_args(["--recipe", "dapo", "--clip-high", "0.4", "--no-dynamic-sampling"])
    assert args.clip_high == 0.4 and args.dynamic_sampling is False and args.loss_agg == "token_mean"
