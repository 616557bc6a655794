"""train.py --model FOLDER --task math --data FILE end to end, on a tiny random Qwen3 with
a tokenizer in Qwen's layout and a few MATH-style problems, all written here: the stop
tokens, the chat template, a book checkpoint through --init, --keep-checkpoints; and the
one-line refusals of bad input (a wrong folder, foreign weights, a corrupt data file)."""
import json
import os

import pytest
import torch

import rewards
import tasks
import train
from book import qwen3
from book.hf_tokenizer import load_pretrained_tokenizer
from book.qwen3 import load_pretrained, read_safetensors
from config import GRPOConfig
from harness import cli
from model import CheckpointError
from rollouts import rollout
from test_qwen3 import book_state_dict, write_folder
from test_qwen_tokenizer import CORPUS, learn_ranks, qwen_tokenizer_json

PROBLEMS = [{"problem": f"What is ${a} + {b}$?", "answer": str(a + b)} for a in range(6) for b in range(4)]


@pytest.fixture(scope="module")
def book(tmp_path_factory):
    """(model folder, training file, test file) for a tiny Qwen3 whose vocabulary is the tokenizer's
    plus 11 padding rows, as Qwen3-0.6B's embedding has more rows than its tokenizer has tokens."""
    root = tmp_path_factory.mktemp("book")
    spec = qwen_tokenizer_json(learn_ranks(CORPUS, 150))
    n_vocab = len(spec["model"]["vocab"]) + len(spec["added_tokens"])
    write_folder(str(root / "qwen"), vocab_size=n_vocab + 11, max_position_embeddings=512)
    (root / "qwen" / "tokenizer.json").write_text(json.dumps(spec))
    (root / "train.jsonl").write_text("\n".join(json.dumps(p) for p in PROBLEMS[:16]))
    (root / "test.json").write_text(json.dumps(PROBLEMS[12:]))  # overlaps train in 4 problems: dropped from train
    return str(root / "qwen"), str(root / "train.jsonl"), str(root / "test.json")


def book_args(book, tmp_path, *extra):
    folder, data, test = book
    return cli.get_parser().parse_args(
        ["--model", folder, "--task", "math", "--data", data, "--eval-data", test, "--runs-dir", str(tmp_path),
         "--run-name", "r", "--prompts-per-step", "2", "--group-size", "4", "--max-new-tokens", "6",
         "--temperature", "0.8", "--top-p", "0.9", "--eval-every", "2", "--threads", "1", *extra])


def test_the_chapters_run_on_a_tiny_qwen3(book, tmp_path, capsys, monkeypatch):
    answers = []

    def score(text, answer, n_tokens, cfg=None):  # a random model never answers: reward odd-length text instead
        answers.append(answer)
        r = float(len(text) % 2)
        return {"total": r, "correct": r, "format": 0.0, "format_paid": 0.0, "overlong": 0.0}
    monkeypatch.setattr(rewards, "score", score)
    run_dir = train.main(book_args(book, tmp_path, "--steps", "2", "--kl", "0.02", "--grad-checkpoint"))
    rows = [json.loads(line) for line in open(os.path.join(run_dir, "metrics.jsonl"))]
    assert [r["step"] for r in rows] == [0, 1, 2] and "eval_acc" in rows[0] and "eval_acc" in rows[2]
    assert all(torch.isfinite(torch.tensor([r["loss"], r["kl"], r["entropy"]])).all() for r in rows[1:])
    assert "12 training problems, 12 held out" in capsys.readouterr().out
    config = json.load(open(os.path.join(run_dir, "config.json")))
    assert config["weights_dtype"] == "float32" and config["model"] == book[0]
    start, end = (load_pretrained(os.path.join(run_dir, f"model_step{s}")) for s in (0, 2))
    assert not torch.equal(start.lm_head_weight, end.lm_head_weight)  # trained, and saved loadable
    assert os.path.exists(os.path.join(run_dir, "model_step2", "tokenizer.json"))
    assert answers and set(answers) <= {p["answer"] for p in PROBLEMS[:12]}  # the training split's answers
    assert not os.path.exists(os.path.join(run_dir, "ckpt_latest.pt"))
    sample = json.loads(open(os.path.join(run_dir, "samples.jsonl")).readline())
    assert sample["prompt"].startswith("You are a helpful math assistant.") and sample["answer"] in {p["answer"]
                                                                                                     for p in PROBLEMS}


def test_a_rollout_ends_each_turn_at_any_of_the_stop_tokens(book):
    """With <|im_end|> and <|endoftext|> both stop tokens (the reasoning Qwen3's
    generation_config.json), a completion ends at the first of either: its text stops
    there, without the token, and it is not truncated."""
    folder, data, _ = book
    model, enc = qwen3.load_pretrained(folder), load_pretrained_tokenizer(folder)
    problems, cfg = tasks.load_math(data)[:2], GRPOConfig(group_size=4, max_new_tokens=12)
    free = rollout(model, enc, problems, cfg, torch.Generator().manual_seed(0))
    P, rows = free.prompt_len, free.tokens[:, free.prompt_len:].tolist()
    assert free.truncated.all()  # a random model never wrote <|endoftext|>
    a, b = rows[0][3], rows[1][6]  # ids two completions do write: make them the stop tokens
    assert max(a, b) < enc.n_vocab
    enc.stop_tokens = (a, b)
    out = rollout(model, enc, problems, cfg, torch.Generator().manual_seed(0))  # the same draws, cut at a stop
    for i, row in enumerate(rows):
        n = next((j for j, t in enumerate(row) if t in (a, b)), None)
        assert out.texts[i] == enc.decode(row[:n]) and bool(out.truncated[i]) == (n is None)
    assert (~out.truncated).sum() >= 2


def test_chat_template_wraps_every_prompt_the_run_samples_and_evaluates(book, tmp_path, monkeypatch):
    from harness import evaluation
    import rollouts
    seen = []
    for module in (rollouts, evaluation):
        real = module.generate
        monkeypatch.setattr(module, "generate", lambda m, prompts, *a, real=real, **k: seen.append(prompts) or
                            real(m, prompts, *a, **k))
    train.main(book_args(book, tmp_path, "--steps", "1", "--eval-every", "1", "--chat-template"))
    enc = load_pretrained_tokenizer(book[0], chat=True)
    wrapped = {tuple(enc.encode_chat(tasks.MathProblem(p["problem"], p["answer"]).prompt)) for p in PROBLEMS}
    assert len(seen) == 3 and all(tuple(p) in wrapped for prompts in seen for p in prompts)  # eval, step, eval


def test_init_loads_a_book_checkpoint_and_keep_checkpoints_bounds_the_saved_folders(book, tmp_path):
    """--model FOLDER --init PATH.pth: the config and tokenizer from the folder, the weights
    from the book's state_dict (a head of its own); --steps 0 evaluates them and saves them."""
    W = read_safetensors(os.path.join(book[0], "model.safetensors"))
    head = torch.randn_like(W["model.embed_tokens.weight"])
    state = book_state_dict({**W, "lm_head.weight": head})
    torch.save(state, tmp_path / "book.pth")
    run_dir = train.main(book_args(book, tmp_path, "--steps", "0", "--init", str(tmp_path / "book.pth")))
    saved = load_pretrained(os.path.join(run_dir, "model_step0"))
    assert not saved.cfg.tie_word_embeddings and torch.equal(saved.lm_head.weight, head)
    assert all(torch.equal(p, state[qwen3.book_name(n)]) for n, p in saved.named_parameters())
    assert [json.loads(line)["step"] for line in open(os.path.join(run_dir, "metrics.jsonl"))] == [0]
    run_dir = train.main(book_args(book, tmp_path, "--run-name", "kept", "--steps", "3", "--eval-every", "1",
                                   "--keep-checkpoints", "2"))
    assert sorted(n for n in os.listdir(run_dir) if n.startswith("model_step")) == ["model_step2", "model_step3"]


def test_bad_input_is_one_line_and_leaves_no_run(book, tmp_path):
    folder, data, test = book
    (tmp_path / "corrupt.jsonl").write_text('{"problem": "1+1?", "answer": "2"}\n{oops\n')
    (tmp_path / "llama").mkdir()
    (tmp_path / "llama" / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"]}))
    cases = [(["--model", str(tmp_path / "nowhere")], CheckpointError, "not a folder"),
             (["--model", str(tmp_path / "llama")], CheckpointError, "implements Qwen3ForCausalLM only"),
             (["--data", str(tmp_path / "corrupt.jsonl")], ValueError, "line 2: not valid JSON"),
             (["--eval-data", data, "--data", data], ValueError, "every problem is also in --eval-data"),
             (["--init", data], CheckpointError, "cannot read .*train.jsonl")]
    for extra, error, message in cases:
        with pytest.raises(error, match=message) as e:
            train.main(book_args(book, tmp_path, "--steps", "1", *extra))
        assert "\n" not in str(e.value)
        assert not os.path.exists(tmp_path / "r" / "metrics.jsonl")
    for argv, message in [(["--task", "math", "--data", data], "--task math needs"),
                          (["--data", data], "--data and --eval-data are for --task math"),
                          (["--grad-checkpoint"], "--grad-checkpoint is for --model"),
                          (["--chat-template"], "--chat-template is for --model")]:
        with pytest.raises(ValueError, match=message):
            args = cli.get_parser().parse_args(argv)
            cli.check_args(args)
            cli.check_book_args(args)


def test_a_run_saved_before_these_flags_still_resumes(tiny_warm, tmp_path):
    """ckpt_latest.pt of an older run has no --model, --task, ... in its args: their defaults apply."""
    args = cli.get_parser().parse_args(["--init", tiny_warm[0], "--runs-dir", str(tmp_path), "--run-name", "old",
                                          "--level", "easy", "--prompts-per-step", "2", "--group-size", "2",
                                          "--max-new-tokens", "8", "--eval-size", "4", "--steps", "1",
                                          "--threads", "1"])
    run_dir = train.main(args)
    path = os.path.join(run_dir, "ckpt_latest.pt")
    ckpt = torch.load(path, weights_only=True)
    for new in ("model", "dtype", "grad_checkpoint", "task", "data", "eval_data", "eval_batch_size"):
        del ckpt["args"][new]
    torch.save(ckpt, path)
    train.main(cli.get_parser().parse_args(["--resume", run_dir, "--steps", "2", "--threads", "1"]))
    assert [json.loads(line)["step"] for line in open(os.path.join(run_dir, "metrics.jsonl"))] == [0, 1, 2]
