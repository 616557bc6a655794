"""Log-prob of the chosen token and entropy for GRPO, without the (N, V) log-softmax.

    from kernels import token_logprobs_and_entropy, linear_logprobs_and_entropy

logprobs.py works from logits, linear_logprobs.py from hidden states and the LM-head
weight; each file's docstring teaches its method. Triton is optional: without it (macOS,
Windows) both run on their chunked PyTorch paths.
"""
from .linear_logprobs import linear_logprobs_and_entropy
from .logprobs import reference_logprobs_and_entropy, token_logprobs_and_entropy

__all__ = ["token_logprobs_and_entropy", "linear_logprobs_and_entropy", "reference_logprobs_and_entropy"]
