"""Log-prob of the chosen token and entropy from logits (placeholder: PyTorch reference only)."""
import torch
import torch.nn.functional as F


def token_logprobs_and_entropy(logits, targets, temperature=1.0):
    """logits (..., V), targets (...) -> logp (...), entropy (...), both float32."""
    logp_all = F.log_softmax(logits.float() / temperature, dim=-1)  # (..., V)
    logp = logp_all.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    entropy = -(logp_all.exp() * logp_all).sum(-1)
    return logp, entropy
