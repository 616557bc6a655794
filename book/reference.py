"""GRPO's step as its authors write it, twice, for reading beside grpo.py: the chapter's (`grpo_step_book`, the
book's ch07/03_rlvr_grpo_scripts_advanced/7_5_plus_kl.py) and the papers' (`grpo_step_paper`, DeepSeekMath's as
TRL and verl run it). Neither runs in training: train.py runs grpo.grpo_step, and tests/test_reference.py holds it
equal to each of these at its flags (--recipe book; the defaults), weight for weight. Each is its own copy of the
formulas, the group advantage included, so that an edit of grpo.py that changes what the step computes makes that
test fail: the test then says which step and which flags no longer agree.

    python -m pytest -q tests/test_reference.py
"""
import copy

import torch

from grpo import token_logprobs
from rollouts import rollout


def grpo_step_book(policy, ref_policy, opt, enc, next_problems, n_prompts, cfg, generator):
    """One step of the chapter's own GRPO, as its scripts write it (ch07/03_rlvr_grpo_scripts_advanced/
    7_5_plus_kl.py: train_rlvr_grpo, compute_grpo_loss_plus_kl) -> the last update's loss. Each inner epoch samples
    new answers from a copy of the policy frozen for the step; an answer's log-prob is summed over its tokens and
    scored at temperature 1; the ratio of those sums is clipped in the book's torch.where form; the KL is k1 on
    them. grpo.grpo_step under --recipe book leaves the same weights and loss
    (tests/test_reference.py::test_the_books_step_and_grpo_step_under_recipe_book_leave_the_same_weights_and_loss)."""
    problems = [next_problems() for _ in range(n_prompts)]
    pi_old = copy.deepcopy(policy).requires_grad_(False)  # frozen for the step: every inner epoch samples from it
    for _ in range(cfg.mu):  # the book's inner epochs, each on answers of its own
        batch = rollout(pi_old, enc, problems, cfg, generator)  # G answers a prompt, at T 0.8 and top-p 0.9
        r = batch.rewards["total"].view(-1, cfg.group_size)  # (n_prompts, G)
        A = ((r - r.mean(1, keepdim=True)) / (r.std(1, keepdim=True) + 1e-4)).view(-1)  # (B,) group-relative

        def logp(model):  # (B,) each answer's log-prob, its tokens' summed, at temperature 1
            return token_logprobs(model, batch.tokens, batch.mask, batch.loss_mask, 1.0, "textbook")[0].sum(1)
        with torch.no_grad():  # pi_old and pi_ref (the warm start), fixed for the update
            old_logp = logp(pi_old)
            ref_logp = logp(ref_policy) if cfg.kl > 0 else None
        new_logp = logp(policy)  # pi_theta's sums, with gradient
        ratio = torch.exp(new_logp - old_logp)  # (B,) a whole answer's ratio
        unclipped = ratio * A
        clipped = ratio.clamp(1 - cfg.clip, 1 + cfg.clip) * A  # the book's eps: 10
        loss = -torch.where(A >= 0, torch.minimum(unclipped, clipped), torch.maximum(unclipped, clipped)).mean()
        if cfg.kl > 0:  # k1 on the sums: beta * mean(log pi - log pi_ref)
            loss = loss + cfg.kl * (new_logp - ref_logp).mean()
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(policy.parameters(), cfg.max_grad_norm)  # the gradient-norm limit
        opt.step()
    return loss


def grpo_step_paper(policy, ref_policy, opt, enc, next_problems, n_prompts, cfg, generator):
    """One step of GRPO as the papers write it (DeepSeekMath, arXiv 2402.03300, as TRL and verl run it) -> the
    last update's loss: mu updates on one batch, each token's ratio to the policy that sampled it clipped, k3 per
    token. At the default flags, and with --kl > 0, grpo.grpo_step leaves the same weights and loss
    (tests/test_reference.py::test_the_papers_step_*)."""
    batch = rollout(policy, enc, [next_problems() for _ in range(n_prompts)], cfg, generator)  # G answers a prompt
    r = batch.rewards["total"].view(-1, cfg.group_size)  # (n_prompts, G)
    A = ((r - r.mean(1, keepdim=True)) / (r.std(1, keepdim=True) + 1e-4)).view(-1, 1)  # (B, 1) group-relative
    m = batch.loss_mask.float()  # (B, T): the answers' tokens

    def logp(model):  # (B, T) log pi of each answer token, by the full log-softmax (grpo.token_logprobs)
        return token_logprobs(model, batch.tokens, batch.mask, batch.loss_mask, cfg.temperature, "textbook")[0]
    with torch.no_grad():  # pi_old (the policy that sampled) and pi_ref (the warm start), fixed for all updates
        old_logp = logp(policy)
        ref_logp = logp(ref_policy) if cfg.kl > 0 else None
    for _ in range(cfg.mu):  # mu updates on one batch: the first at ratio 1, the later ones off-policy
        new_logp = logp(policy)  # pi_theta, with gradient
        ratio = torch.exp(new_logp - old_logp)  # (B, T) pi_theta / pi_old
        loss = -torch.minimum(ratio * A, ratio.clamp(1 - cfg.clip, 1 + cfg.clip) * A)  # PPO's clipped surrogate
        if cfg.kl > 0:  # k3 (Schulman): r - 1 - log r, r = pi_ref / pi_theta
            loss = loss + cfg.kl * (torch.exp(ref_logp - new_logp) - 1 - (ref_logp - new_logp))
        loss = ((loss * m).sum(1) / m.sum(1)).mean()  # each answer's mean over its tokens, then the batch's
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(policy.parameters(), cfg.max_grad_norm)  # the gradient-norm limit
        opt.step()
    return loss
