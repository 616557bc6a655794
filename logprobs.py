"""A model's log-probs of the tokens it answered with, and its entropy at each: what GRPO's ratio,
KL and diagnostics are made of. grpo.batch_logprobs picks which model (pi_theta, pi_old, pi_ref),
at which temperature, over which support; this file computes them.

    token_logprobs_reference   the textbook way: the (n, V) logits, log_softmax, the target's entry
    token_logprobs             the same numbers fast (kernels/): no (n, V) log-softmax, and by
                               default not even the (n, V) logits
    vocab_logprobs             the whole (n, V) distribution, for the exact KL (stats.exact_kl)

tokens, mask (B, L). The model reads tokens[:, :-1] and predicts the targets tokens[:, 1:]; loss_mask
(B, T = L - 1), made once in rollouts.py, marks the completion targets. Only those n positions reach
the LM head: prompt and padding cost no (V)-sized work. Both models (model.GPT, qwen3.Qwen3) give
`model(tokens, mask, hidden=True)` and `lm_head_weight`.
"""
import torch

from kernels import linear_logprobs_and_entropy, reference_logprobs_and_entropy, token_logprobs_and_entropy


def token_logprobs_reference(model, tokens, mask, loss_mask, temperature=1.0, support=None):
    """log pi(target | prefix) and the entropy there, for the targets in loss_mask, the textbook way:
    log_softmax of the logits / temperature, its entry at the target, and -sum p log p
    (kernels' reference_logprobs_and_entropy). -> logp, entropy (B, T), zero outside loss_mask."""
    logits = completion_logits(model, tokens, mask, loss_mask, support)  # (n, V)
    logp, entropy = reference_logprobs_and_entropy(logits, tokens[:, 1:][loss_mask], temperature)  # (n,) each
    zeros = logp.new_zeros(loss_mask.shape)  # (B, T)
    return zeros.masked_scatter(loss_mask, logp), zeros.masked_scatter(loss_mask, entropy)


def token_logprobs(model, tokens, mask, loss_mask, temperature=1.0, fused=True, support=None, groups=None):
    """token_logprobs_reference's (B, T) logp and entropy, fast: the kernels never make the (n, V) log-softmax
    (kernels/logprobs.py), and fused=True (kernels/linear_logprobs.py) goes from the hidden states straight to
    log-probs, so not even the (n, V) logits exist. A kept support needs the (n, V) logits, and its mask one
    byte per logit. groups (P, G), --share-prompts: G rows share their first P tokens, which the small GPT runs
    once a group."""
    targets = tokens[:, 1:][loss_mask]  # (n,)
    if fused and support is None:
        h = model(tokens[:, :-1], mask[:, :-1], hidden=True, groups=groups)[loss_mask]  # (n, d)
        logp, ent = linear_logprobs_and_entropy(h, model.lm_head_weight, targets, temperature)
    else:
        logits = completion_logits(model, tokens, mask, loss_mask, support, groups)  # (n, V)
        logp, ent = token_logprobs_and_entropy(logits, targets, temperature)
    zeros = logp.new_zeros(loss_mask.shape)  # (B, T)
    return zeros.masked_scatter(loss_mask, logp), zeros.masked_scatter(loss_mask, ent)


def vocab_logprobs(model, tokens, mask, loss_mask, temperature=1.0, support=None):
    """(n, V) log pi(v | prefix) of every token v of the vocabulary at the n completion positions of
    loss_mask: log_softmax(logits / temperature)."""
    return (completion_logits(model, tokens, mask, loss_mask, support) / temperature).log_softmax(-1)


def completion_logits(model, tokens, mask, loss_mask, support=None, groups=None):
    """(n, V) logits at the n completion positions of loss_mask. support (B, T, V) bool, DeepSeek-V3.2's
    "keep sampling mask": only the tokens top-k / top-p left at sampling time (the rest -inf), what the
    sampler drew from."""
    h = model(tokens[:, :-1], mask[:, :-1], hidden=True, groups=groups)[loss_mask]  # (n, d)
    logits = h @ model.lm_head_weight.t()  # (n, V)
    return logits if support is None else logits.masked_fill(~support[loss_mask], float("-inf"))
