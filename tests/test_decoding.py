"""The fast decode path against the reference (use_cache=False), for the GPT and Qwen3: the
fixed-shape step, the shared prefill, the compiled step (one graph, no break: what a CUDA
graph can capture), finished rows looked for every few tokens, and the bad inputs."""
import warnings

import pytest
import torch

import decoding
from book.qwen3 import Qwen3, Qwen3Config
from decoding import generate
from model import GPT, GPTConfig

V = 64
pytestmark = pytest.mark.roundings  # every test here compares a fast path's numbers with the reference's


def sharp(model, scale):
    """Larger weights than init: sharper, more varied distributions, rows that stop early."""
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(scale) if p.dim() > 1 else p.add_(0.3 * torch.randn_like(p))
    return model.eval()


def gpt(seed=0):
    torch.manual_seed(seed)
    return sharp(GPT(GPTConfig(vocab_size=V, max_seq_len=48, n_layer=2, n_head=2, d_model=32)), 8.0)


def qwen(seed=0):
    torch.manual_seed(seed)
    return sharp(Qwen3(Qwen3Config(vocab_size=V, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=2, head_dim=24, rope_theta=10_000.0,
                                   max_position_embeddings=48)), 4.0)


def grpo_prompts(seed=0, n=4, G=3):
    """n ragged prompts (1-8 tokens), each G times in a row: a GRPO batch's layout."""
    g = torch.Generator().manual_seed(seed)
    prompts = [torch.randint(0, V - 4, (int(torch.randint(1, 9, (1,), generator=g)),), generator=g).tolist()
               for _ in range(n)]
    return [p for p in prompts for _ in range(G)]


def stop_id(model, prompts, n=16, **kw):
    """An id that rows sampled as sample_both samples emit at different places (or never)."""
    free = generate(model, prompts, n, V - 1, generator=torch.Generator().manual_seed(7), use_cache=False, **kw)
    rows = free.tokens[:, -n:].tolist()
    return max(range(V - 1), key=lambda tok: len({r.index(tok) if tok in r else None for r in rows}))


def same(a, b):
    assert torch.equal(a.tokens, b.tokens) and torch.equal(a.mask, b.mask)
    torch.testing.assert_close(a.logp, b.logp, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(a.entropy, b.entropy, rtol=1e-4, atol=1e-5)


def sample_both(model, prompts, eos, n=16, **kw):
    return [generate(model, prompts, n, eos, generator=torch.Generator().manual_seed(7), use_cache=c, **kw)
            for c in (False, True)]


@pytest.mark.parametrize("make", [gpt, qwen])
@pytest.mark.parametrize("kw", [dict(greedy=True), dict(temperature=1.0), dict(temperature=0.8, top_k=10, top_p=0.9)])
def test_fixed_shape_decoding_equals_the_reference(make, kw):
    """Ragged prompts, each G times (the shared prefill), rows that stop at different places."""
    model, prompts = make(), grpo_prompts()
    eos = stop_id(model, prompts, **kw)
    reference, fast = sample_both(model, prompts, eos, **kw)
    same(reference, fast)
    lengths = fast.mask[:, max(map(len, prompts)):].sum(1)
    assert lengths.min() < lengths.max()  # some rows stopped before others: the check compares something
    assert len({tuple(r) for r in fast.tokens.tolist()}) > 1


@pytest.mark.parametrize("make", [gpt, qwen])
def test_compiled_decode_step_is_one_graph_and_equals_the_reference(make, monkeypatch):
    """torch.compile(fullgraph=True) of the decode step, recompiles an error: one graph for
    every token (no break, no shape or branch that depends on the data, no host read), the
    property that lets a CUDA graph capture it, and the reference's tokens."""
    monkeypatch.setattr(decoding, "FAILED", [])
    model, prompts = make(), grpo_prompts(1)
    eos = stop_id(model, prompts)
    torch.compiler.reset()
    with warnings.catch_warnings(record=True) as caught, torch._dynamo.config.patch(error_on_recompile=True):
        warnings.simplefilter("always")
        reference, fast = sample_both(model, prompts, eos, compile=True)
    fallbacks = [str(w.message) for w in caught if str(w.message).startswith("decoding:")]
    assert decoding.FAILED == [] and fallbacks == []  # compiled, not the eager fallback
    same(reference, fast)
    lengths = fast.mask[:, max(map(len, prompts)):].sum(1)
    assert lengths.min() < lengths.max()


def test_a_compile_that_fails_falls_back_to_eager_with_one_warning(monkeypatch):
    monkeypatch.setattr(decoding, "FAILED", [])

    def broken_compile(fn, **kw):
        def compiled(*a):
            raise RuntimeError("no C++ compiler found\nsecond line")
        return compiled
    monkeypatch.setattr(torch, "compile", broken_compile)
    model, prompts = gpt(), grpo_prompts(2)
    eager = generate(model, prompts, 12, V - 1, generator=torch.Generator().manual_seed(1))
    with pytest.warns(UserWarning) as caught:
        a = generate(model, prompts, 12, V - 1, generator=torch.Generator().manual_seed(1), compile=True)
        b = generate(model, prompts, 12, V - 1, generator=torch.Generator().manual_seed(1), compile=True)
    assert len(caught) == 1  # once per process, not once per call
    message = str(caught[0].message)
    assert "compile of the decode step failed" in message and "no C++ compiler found" in message
    assert "\n" not in message and "second line" not in message
    same(eager, a)
    same(eager, b)


def test_looking_for_finished_rows_every_few_tokens_changes_nothing():
    """check_every > 1 (a GPU's default: no host sync per token) runs a few steps past the
    end, then trims them: the same tokens, masks and log-probs as looking after every one."""
    model, prompts = gpt(), grpo_prompts(3)
    P, n = max(map(len, prompts)), 30
    free = generate(model, prompts, n, V - 1, generator=torch.Generator().manual_seed(7), use_cache=False)
    rows = free.tokens[:, P:].tolist()
    stops = sorted({r[2 + i % 9] for i, r in enumerate(rows)})  # ids that end every row, each at its own place
    every = [generate(model, prompts, n, stops, generator=torch.Generator().manual_seed(7), check_every=k)
             for k in (1, 5)]
    same(*every)
    length = every[0].tokens.shape[1] - P
    assert length < n and length % 5 != 0  # all rows ended between two looks: check_every=5 ran past the end


@pytest.mark.parametrize("use_cache", [True, False])
def test_a_stop_id_inside_the_prompt_ends_nothing(use_cache):
    model, stop = gpt(), V - 2
    prompts = [p[:1] + [stop] + p[1:] for p in grpo_prompts(4)]  # the stop id inside every prompt
    P = max(map(len, prompts))
    out = generate(model, prompts, 12, stop, greedy=True, use_cache=use_cache)
    full = 0
    for row, real in zip(out.tokens[:, P:].tolist(), out.mask[:, P:].tolist()):
        n = sum(real)
        assert real == [True] * n + [False] * (len(real) - n) and n >= 1
        assert stop not in row[:n - 1]  # a row ends at its own first sampled stop id, or at the cap
        full += n == 12
    assert full >= 1  # some rows never sampled it and ran all 12 tokens


def test_bad_budgets_and_devices_are_refused_in_one_line():
    model = gpt()
    with pytest.raises(ValueError, match=r"^prompt \(8\) \+ max_new_tokens \(41\) exceeds max_seq_len 48$"):
        generate(model, [[1] * 8], 41, V - 1)
    with pytest.raises(ValueError, match=r"^cuda_graph=True needs a CUDA device; the model is on cpu$"):
        generate(model, [[1, 2]], 4, V - 1, cuda_graph=True)


@pytest.mark.parametrize("threads", [1, 2])
def test_the_sampler_draws_multinomials_tokens_from_the_same_generator(threads):
    """sample() writes torch.multinomial's draw out (no host check of p): the same tokens
    for the same generator, which is left in the same state, at any vocabulary size."""
    torch.set_num_threads(threads)
    try:
        for V_, rows in [(7, 3), (287, 64), (151_936, 4)]:
            logits = torch.randn(rows, V_, generator=torch.Generator().manual_seed(V_)) * 3
            g1, g2 = torch.Generator().manual_seed(1), torch.Generator().manual_seed(1)
            for _ in range(3):
                ours, _, _ = decoding.sample(logits, 1.0, 0, 1.0, g1, greedy=False)
                theirs = torch.multinomial(logits.log_softmax(-1).exp(), 1, generator=g2).squeeze(1)
                assert torch.equal(ours, theirs)
            assert torch.equal(torch.rand(4, generator=g1), torch.rand(4, generator=g2))
    finally:
        torch.set_num_threads(1)
