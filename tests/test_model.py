"""The GPT: KV-cache sampling equals full recompute, ragged prompts, EOS, checkpoints; the imports point one way."""
import ast
import os
import re

import pytest
import torch

from decoding import filter_logits, generate
from model import GPT, CheckpointError, GPTConfig, load_checkpoint, save_checkpoint, set_dropout

EOS = 60
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    m = GPT(GPTConfig(vocab_size=64, max_seq_len=48, n_layer=2, n_head=2, d_model=32)).eval()
    with torch.no_grad():  # larger weights than init: sharper, more varied distributions
        for p in m.parameters():
            p.mul_(8.0) if p.dim() > 1 else None
    return m


def prompts(seed=0, n=6):
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(0, 59, (int(torch.randint(1, 9, (1,), generator=g)),), generator=g).tolist()
            for _ in range(n)]


@pytest.mark.roundings
@pytest.mark.parametrize("kw", [dict(greedy=True), dict(temperature=1.0), dict(temperature=0.7, top_k=10, top_p=0.9)])
def test_kv_cache_equals_full_recompute(model, kw):
    ps = prompts(1)
    outs = []
    for use_cache in (True, False):
        g = torch.Generator().manual_seed(123)
        outs.append(generate(model, ps, 20, EOS, generator=g, use_cache=use_cache, **kw))
    a, b = outs
    assert torch.equal(a.tokens, b.tokens) and torch.equal(a.mask, b.mask)
    torch.testing.assert_close(a.logp, b.logp, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(a.entropy, b.entropy, rtol=1e-4, atol=1e-5)


@pytest.mark.roundings
def test_ragged_batch_equals_one_at_a_time(model):
    ps = prompts(2)
    tokens, mask, *_ = generate(model, ps, 15, EOS, greedy=True)
    P = max(map(len, ps))
    for i, p in enumerate(ps):
        one = generate(model, [p], 15, EOS, greedy=True).tokens
        n = one.shape[1] - len(p)
        assert tokens[i, P:P + n].tolist() == one[0, len(p):].tolist()
        assert tokens[i, P - len(p):P].tolist() == p
        assert not mask[i, :P - len(p)].any()  # left padding is not a token


@pytest.mark.roundings
def test_left_padding_does_not_change_logits(model):
    p = prompts(3, 1)[0]
    padded = torch.tensor([[0] * 5 + p])
    mask = torch.tensor([[False] * 5 + [True] * len(p)])
    a = model(torch.tensor([p]))[0]
    b = model(padded, mask)[0, 5:]
    torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4)


def test_eos_stops_rows_independently(model):
    ps = prompts(4, 8)
    free = generate(model, ps, 20, eos_id=63, greedy=True).tokens  # 63 is never in the top: no stop
    P = max(map(len, ps))
    rows = free[:, P:].tolist()

    def stops(tok):
        return [r.index(tok) if tok in r else None for r in rows]
    eos = max(set(sum(rows, [])), key=lambda tok: len(set(stops(tok))))  # rows stop at different places
    assert len(set(stops(eos))) >= 3
    out, mask, *_ = generate(model, ps, 20, eos_id=eos, greedy=True)
    for i in range(len(ps)):
        row, gen = free[i, P:].tolist(), out[i, P:]
        stop = row.index(eos) if eos in row else None
        n = len(row) if stop is None else stop + 1
        assert gen[:n].tolist() == row[:n]  # identical until its own end-of-text
        assert mask[i, P:].sum().item() == n  # the completion is real tokens up to and with its end-of-text
        assert (gen[n:] == eos).all()  # padding after the end


def test_seeded_sampling_is_reproducible(model):
    a = generate(model, prompts(5), 20, EOS, generator=torch.Generator().manual_seed(9)).tokens
    b = generate(model, prompts(5), 20, EOS, generator=torch.Generator().manual_seed(9)).tokens
    c = generate(model, prompts(5), 20, EOS, generator=torch.Generator().manual_seed(10)).tokens
    assert torch.equal(a, b) and not torch.equal(a, c)


def test_filter_logits_top_k_and_top_p():
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]]))
    assert torch.isinf(filter_logits(logits, top_k=2)).tolist() == [[False, False, True, True]]
    assert torch.isinf(filter_logits(logits, top_p=0.7)).tolist() == [[False, False, True, True]]
    assert torch.isinf(filter_logits(logits, top_p=0.5)).tolist() == [[False, True, True, True]]
    assert torch.isinf(filter_logits(logits, top_p=0.81)).tolist() == [[False, False, False, True]]


def test_checkpoint_roundtrip_and_clear_errors(model, tmp_path):
    path = str(tmp_path / "m.pt")
    save_checkpoint(path, model, {"tokenizer": {"merges": []}})
    loaded, ckpt = load_checkpoint(path)
    assert ckpt["tokenizer"] == {"merges": []}
    x = torch.tensor([[1, 2, 3]])
    assert torch.equal(loaded.eval()(x), model(x))
    with pytest.raises(CheckpointError, match="checkpoint not found"):
        load_checkpoint(str(tmp_path / "missing.pt"))
    (tmp_path / "bad.pt").write_bytes(open(path, "rb").read()[:100])  # truncated file
    with pytest.raises(CheckpointError, match="cannot read checkpoint"):
        load_checkpoint(str(tmp_path / "bad.pt"))
    ckpt["model_config"]["d_model"] = 64  # a checkpoint written for another config
    torch.save(ckpt, tmp_path / "other.pt")
    with pytest.raises(CheckpointError, match="does not match"):
        load_checkpoint(str(tmp_path / "other.pt"))


def test_dropout_acts_in_the_learners_forward_only(tmp_path):
    """--dropout: at 0 no dropout module exists (the forward draws nothing from the random state);
    at p > 0 two training-mode forwards differ and two eval-mode ones (the sampler's) agree; the
    weights are unchanged and a checkpoint keeps p."""
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=64, max_seq_len=48, n_layer=2, n_head=2, d_model=32))
    x = torch.randint(0, model.cfg.vocab_size, (3, 9))
    assert not any(isinstance(m, torch.nn.Dropout) for m in model.modules())
    model.train()
    state = torch.get_rng_state()
    first = model(x)
    assert torch.equal(torch.get_rng_state(), state) and torch.equal(first, model(x))
    keys = set(model.state_dict())
    set_dropout(model, 0.2)
    assert set(model.state_dict()) == keys
    assert not torch.equal(model(x), model(x))
    model.eval()
    torch.testing.assert_close(model(x), first, rtol=0, atol=0)  # eval mode: the weights as they are
    save_checkpoint(str(tmp_path / "c.pt"), model, {})
    loaded, _ = load_checkpoint(str(tmp_path / "c.pt"))
    assert loaded.cfg.dropout == 0.2 and sum(isinstance(m, torch.nn.Dropout) for m in loaded.modules()) == 2


def test_checkpoint_holding_a_pickled_object_is_refused(model, tmp_path):
    """weights_only loading: a checkpoint from someone else cannot run code on load."""
    import argparse
    path = str(tmp_path / "evil.pt")
    save_checkpoint(path, model, {"args": argparse.Namespace(lr=1.0)})  # any non-plain object
    with pytest.raises(CheckpointError, match=r"refusing .*pickled object \(argparse.Namespace\)"):
        load_checkpoint(path)


FOLDERS = ("lab", "book", "harness")  # the folders of modules: each module named by its path, lab/report


def project_imports():
    """module -> the project's modules it imports anywhere in its file (an import inside a
    function counts: it is the same arrow, only taken later). The top-level files, kernels/, and
    each module of lab/, book/ and harness/ by its path (lab/report)."""
    files = {f[:-3]: os.path.join(ROOT, f) for f in os.listdir(ROOT) if f.endswith(".py")}
    files["kernels"] = os.path.join(ROOT, "kernels", "__init__.py")
    for folder in FOLDERS:
        files |= {f"{folder}/{f[:-3]}": os.path.join(ROOT, folder, f) for f in os.listdir(os.path.join(ROOT, folder))
                  if f.endswith(".py") and f != "__init__.py"}
    graph = {}
    for name, path in files.items():
        found = set()
        for node in ast.walk(ast.parse(open(path).read())):
            if isinstance(node, ast.Import):
                found |= {a.name.replace(".", "/") for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                module = node.module.replace(".", "/")
                found |= {module} | {f"{module}/{a.name}" for a in node.names}  # from lab import report: lab/report
        graph[name] = found & set(files) - {name}
    return graph


def reachable(graph, start):
    """Every module that `start` reaches along the import arrows."""
    seen, todo = set(), list(graph[start])
    while todo:
        name = todo.pop()
        if name not in seen:
            seen.add(name)
            todo += graph[name]
    return seen


def test_the_imports_point_one_way():
    """No two files import each other, directly or around a loop (what both models use
    sits in decoding.py, which both import)."""
    graph = project_imports()
    assert graph["train"] >= {"harness/stats", "model", "book/qwen3", "grpo"}  # the imports are read, lazy ones too
    looped = sorted(name for name in graph if name in reachable(graph, name))
    assert not looped, f"files in an import loop: {looped}"


def test_docs_design_lists_every_file_in_its_import_layer():
    """docs/design.md's numbered layers: every module, at the top and in the folders (lab/report), sits in one, and
    imports only modules of the layers before its own."""
    text = open(os.path.join(ROOT, "docs", "design.md")).read()
    layers = {name: int(number) for number, names in re.findall(r"^(\d+)\. ([a-z0-9_/, ]+)[:;.]", text, re.M)
              for name in names.split(", ")}
    graph = project_imports()
    assert set(layers) == set(graph), set(layers) ^ set(graph)
    late = [f"{name} imports {other}" for name, found in graph.items() for other in found
            if layers[other] >= layers[name]]
    assert not late, late


@pytest.mark.roundings
def test_a_groups_prompt_run_once_gives_the_same_hidden_states_and_gradients(model):  # --share-prompts
    """forward(..., groups=(P, G)): each group's prompt runs once and its answers attend to its keys
    and values. With left-padded prompts of different lengths and right-padded answers, the hidden
    states at every real position and every parameter's gradient match the plain forward's; rows whose
    prompts differ within a group, dropout in training mode, or a cache fall back to the plain one."""
    from model import shares_prompts
    g = torch.Generator().manual_seed(0)
    P, G, n = 7, 4, 3
    lens = [4, 7, 5]  # each group's prompt, left-padded to P
    tokens = torch.randint(3, model.cfg.vocab_size, (n * G, P + 6), generator=g)
    mask = torch.ones_like(tokens, dtype=torch.bool)
    for i, length in enumerate(lens):
        tokens[i * G:(i + 1) * G, :P] = tokens[i * G, :P]  # one prompt a group
        mask[i * G:(i + 1) * G, :P - length] = False
    mask[1, P + 3:] = False  # answers of different lengths
    mask[6, P + 1:] = False
    assert shares_prompts(tokens, P, G)
    grads = []
    for groups in (None, (P, G)):
        model.zero_grad()
        h = model(tokens, mask, hidden=True, groups=groups)
        (h[mask] * torch.linspace(-1, 1, h.shape[-1])).sum().backward()
        grads.append([p.grad.clone() for p in model.parameters()])
        if groups is None:
            plain = h.detach()
    assert torch.allclose(h.detach()[mask], plain[mask], atol=1e-5)
    assert all(torch.allclose(a, b, rtol=1e-4, atol=1e-4 * b.abs().max()) for a, b in zip(*grads)), \
        max(((a - b).abs().max() / b.abs().max()).item() for a, b in zip(*grads))
    other = tokens.clone()
    other[1, P - 1] = (other[1, P - 1] + 1) % model.cfg.vocab_size  # one row's prompt differs from its group's
    assert not shares_prompts(other, P, G) and not shares_prompts(tokens, P, 1)
    spy = []
    model.hidden_shared_prompts = lambda *a: spy.append(a) or GPT.hidden_shared_prompts(model, *a)
    model(tokens, mask, hidden=True, groups=(P, G))
    model(other, mask, hidden=True, groups=(P, G))
    set_dropout(model, 0.1).train()
    model(tokens, mask, hidden=True, groups=(P, G))
    assert len(spy) == 1  # only the first: shared prompts, no dropout
    set_dropout(model, 0.0)
