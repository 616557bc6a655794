"""Fused log-prob + entropy kernels. See each file's docstring."""
from .logprobs import token_logprobs_and_entropy
from .linear_logprobs import linear_logprobs_and_entropy

__all__ = ["token_logprobs_and_entropy", "linear_logprobs_and_entropy"]
