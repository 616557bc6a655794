import getpass
import os
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
# The tests name the project's files as a learner types them (checkpoints/warmstart.pt, train.py): run from any
# folder (python -m pytest -q path/to/tests), they run in the project's own.
os.chdir(ROOT)
import pytest  # noqa: E402
import torch  # noqa: E402

# One inductor cache per vector width. PyTorch's compiled-graph cache keys a graph by the thread count but not by
# the vector width its C++ was written for, so a decode step compiled at AVX-512 and loaded again under
# ATEN_CPU_CAPABILITY=avx2 or default (or the reverse) runs 16-lane code built for 8 lanes: out of bounds, "tuple
# args required", or an abort. A learner's own CPU compiles at one width only and never meets it; .ci/run's passes
# under other widths would.
os.environ["TORCHINDUCTOR_CACHE_DIR"] = os.path.join(tempfile.gettempdir(), f"torchinductor_{getpass.getuser()}",
                                                     os.environ.get("ATEN_CPU_CAPABILITY") or "native")

# tiny test models: one thread is as fast and immune to a busy second core. TEST_THREADS=2 runs the in-process
# tests on two threads, each sum split in two (.ci/run does, for the tests marked `roundings`)
torch.set_num_threads(int(os.environ.get("TEST_THREADS", "1")))


def pytest_make_parametrize_id(config, val, argname):
    """A case given as a dict of flags is named by them, 'temperature=0.8-top_p=0.9' (pytest's own: kw2), so that
    `-k top_p` selects the cases of a flag, a new one included."""
    if isinstance(val, dict):
        return "-".join(f"{k}={v}" for k, v in val.items()) or "defaults"
    return None


def pytest_configure(config):
    config.addinivalue_line("markers", "roundings: compares numbers made two ways (batch shapes, the KV cache, two "
                            "processes, the fused kernels, the textbook formulas); .ci/run runs these again under "
                            "other vector widths and two threads, where another CPU's rounding shows")
    if "s" not in config.option.reportchars:  # a skipped test says why even under -q: a record not yet made whole
        config.option.reportchars += "s"

# A warm start small enough to train in seconds but good enough that GRPO has signal on
# `--level easy`: pass@8 ~40%, so groups mix right and wrong answers and steps have
# non-zero advantages and gradients (a warm start that is always wrong tests nothing).
TINY_WARM_FLAGS = ["--steps", "150", "--n-layer", "1", "--d-model", "64", "--n-head", "2", "--warmup", "10",
                   "--level", "easy", "--eval-level", "easy", "--eval-size", "16", "--pass-k", "0",
                   "--threads", "1", "--log-every", "1000"]


@pytest.fixture(scope="session")
def tiny_warm(tmp_path_factory):
    """Path of the tiny warm start (built once per test session), and its SFT losses."""
    from harness import sft
    path = str(tmp_path_factory.mktemp("warm") / "tiny.pt")
    _, _, losses = sft.main(sft.get_parser().parse_args([*TINY_WARM_FLAGS, "--out", path]))
    return path, losses


@pytest.fixture(scope="session")
def warm_policy(tiny_warm):
    """Factory of a fresh copy of the tiny warm start, and its tokenizer: make() -> (model, enc)."""
    from model import load_checkpoint
    from tokenizer import build_tokenizer
    enc = build_tokenizer(load_checkpoint(tiny_warm[0])[1]["tokenizer"])

    def make():
        return load_checkpoint(tiny_warm[0])[0], enc
    return make


@pytest.fixture
def project(tmp_path):
    """A copy of the project's code (what git tracks or would add; not tests/, docs/, figures/ or bench/), committed
    in a git repository of its own: a tree with no edits whatever the checkout's state, which a test may edit.
    experiments.py sets the runs of edited code beside the others (NAME+grpo.py), so its tests run here."""
    import shutil
    import subprocess
    root = ROOT
    files = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"], cwd=root,
                           capture_output=True, text=True, check=True).stdout.split()
    copy = tmp_path / "project"
    for name in files:
        if name.split("/")[0] not in ("tests", "docs", "figures", "bench") and os.path.isfile(os.path.join(root, name)):
            os.makedirs(copy / os.path.dirname(name), exist_ok=True)
            shutil.copy2(os.path.join(root, name), copy / name)
    git = ["git", "-c", "user.name=test", "-c", "user.email=test@example.com"]
    for cmd in (["init", "-q"], ["add", "-A"], ["commit", "-q", "-m", "the code as the test found it"]):
        subprocess.run(git + cmd, cwd=copy, check=True)
    return copy


@pytest.fixture(scope="session")
def enc():
    """A bytes-only tokenizer (259 tokens): enough for models that need no trained merges."""
    from tokenizer import build_tokenizer
    return build_tokenizer({"merges": []})


@pytest.fixture
def tiny_model(enc):
    """Factory of a fresh 1-layer GPT for `enc`, seeded."""
    from model import GPT, GPTConfig

    def make(seed=0):
        torch.manual_seed(seed)
        return GPT(GPTConfig(vocab_size=enc.n_vocab, max_seq_len=48, n_layer=1, n_head=2, d_model=32))
    return make


@pytest.fixture
def digit_reward(monkeypatch):
    """A trivially learnable reward with mixed values from the start: 1 for a leading digit."""
    import rewards

    def score(text, answer, n_tokens, cfg=None):
        r = float(text[:1].isdigit())
        return {"total": r, "correct": r, "format": 0.0, "format_paid": 0.0, "overlong": 0.0}
    monkeypatch.setattr(rewards, "score", score)


# The one slow check: `python harness/sft.py` from scratch (about 3 minutes of one core). It starts
# in the background as soon as the tests are collected, so it runs on the second core while
# the rest of the suite (one thread) runs on the first; test_warmstart.py waits for it.
FRESH_BUILD_TEST = "test_a_fresh_build_reaches_the_shipped_quality"


def pytest_collection_finish(session):
    if any(item.name == FRESH_BUILD_TEST for item in session.items):
        import subprocess
        import tempfile
        out = tempfile.mkdtemp(prefix="fresh_warm_")
        log = open(os.path.join(out, "sft.log"), "w")
        cmd = [sys.executable, "harness/sft.py", "--out", os.path.join(out, "warmstart.pt"), "--pass-k", "0", "--threads", "1"]
        session.config.fresh_build = (subprocess.Popen(cmd, cwd=ROOT, stdout=log,
                                                       stderr=subprocess.STDOUT, env={**os.environ, "OMP_NUM_THREADS": "1"}),
                                      out)


def pytest_sessionfinish(session):
    """Stop the background build if the session ends first (-x, Ctrl-C), and remove its folder."""
    if hasattr(session.config, "fresh_build"):
        import shutil
        proc, out = session.config.fresh_build
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        shutil.rmtree(out, ignore_errors=True)


@pytest.fixture(scope="session")
def fresh_build(request):
    """(process, folder) of the background `python harness/sft.py` started at collection."""
    return request.config.fresh_build
