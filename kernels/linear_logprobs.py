"""Log-prob and entropy from hidden states and the LM-head weight (placeholder: reference only)."""
from .logprobs import token_logprobs_and_entropy


def linear_logprobs_and_entropy(hidden, weight, targets, temperature=1.0):
    """hidden (N, d), weight (V, d), targets (N,) -> logp (N,), entropy (N,)."""
    return token_logprobs_and_entropy(hidden @ weight.t(), targets, temperature)
