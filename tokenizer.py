"""A tiktoken tokenizer built in code: byte-level BPE with `<think>` special tokens.

tiktoken cannot download an encoding here, so we construct a `tiktoken.Encoding` from
ranks we make ourselves:
- ranks 0..255 are the raw bytes, so any text (any bytes) round-trips;
- then a few BPE merges learned from the problem corpus (`learn_merges`). The split
  pattern keeps every digit its own piece, so numbers stay digit-by-digit (arithmetic is
  much easier to learn that way) while boilerplate like "Evaluate" or "\\boxed{" becomes
  one token each and a solved problem is 41% fewer tokens than with bytes alone;
- then the special tokens `<|endoftext|>`, `<think>`, `</think>`, one id each.

Special tokens in user text: prompts are encoded with `encode_text`, which treats the
characters "<think>" as plain text (several byte tokens), so a user cannot inject a
control token; only our own trusted completions use `encode_completion`, which maps the
tags to their single ids. (tiktoken's default would raise on them instead.)

    python tokenizer.py "Evaluate left to right: 7+5"   # show the tokens

The book's model brings its own tokenizer, read from a Hugging Face tokenizer.json into the same
kind of tiktoken Encoding (book/hf_tokenizer.py); the functions below take either.
"""
import argparse
import collections
import re

import tiktoken

from tasks import THINK_CLOSE, THINK_OPEN

# Split pattern: "\\boxed{"-style commands, words (with their leading space), single
# digits, runs of whitespace, single other characters. BPE never merges across pieces.
SPLIT_PATTERN = r"\\[A-Za-z]+\{| ?[A-Za-z]+|\d|\s+|[^\sA-Za-z\d]"
SPECIALS = ("<|endoftext|>", THINK_OPEN, THINK_CLOSE)


def learn_merges(texts, n_merges, split=lambda t: re.findall(SPLIT_PATTERN, t)):
    """Byte-pair merges (most frequent adjacent pair first) over the corpus' pieces (split)."""
    pieces = collections.Counter(m.encode() for t in texts for m in split(t))
    words = {p: [bytes([b]) for b in p] for p in pieces}  # piece -> its current tokens
    merges = []
    for _ in range(n_merges):
        pairs = collections.Counter()
        for p, toks in words.items():
            for a, b in zip(toks, toks[1:]):
                pairs[a, b] += pieces[p]
        if not pairs:
            break
        (a, b), _ = max(pairs.items(), key=lambda kv: (kv[1], kv[0]))  # ties: deterministic
        merges.append(a + b)
        for p, toks in words.items():
            words[p] = _merge(toks, a, b)
    return merges


def _merge(toks, a, b):
    out, i = [], 0
    while i < len(toks):
        if i + 1 < len(toks) and toks[i] == a and toks[i + 1] == b:
            out.append(a + b)
            i += 2
        else:
            out.append(toks[i])
            i += 1
    return out


def build_tokenizer(spec):
    """spec = {"merges": [hex strings]} (what checkpoints store) -> tiktoken.Encoding."""
    ranks = {bytes([i]): i for i in range(256)}
    for m in spec["merges"]:
        ranks.setdefault(bytes.fromhex(m), len(ranks))
    specials = {s: len(ranks) + i for i, s in enumerate(SPECIALS)}
    return tiktoken.Encoding(name="grpo-arith", pat_str=SPLIT_PATTERN,
                             mergeable_ranks=ranks, special_tokens=specials)


def make_spec(texts, n_merges=48):
    return {"merges": [m.hex() for m in learn_merges(texts, n_merges)]}


def encode_text(enc, text):
    """Untrusted text (prompts): special-token strings are encoded as plain bytes."""
    return enc.encode(text, disallowed_special=())


def encode_completion(enc, text):
    """Trusted text we wrote ourselves: <think> and </think> become their single ids."""
    return enc.encode(text, allowed_special={THINK_OPEN, THINK_CLOSE}, disallowed_special=())


def encode_prompt(enc, text):
    """A task's prompt: untrusted text, inside Qwen3's chat template if the tokenizer was
    loaded with chat=True (book/hf_tokenizer.py, the reasoning model), as it is."""
    if getattr(enc, "chat", False):
        return enc.encode_chat(text)
    return encode_text(enc, text)


def stop_tokens(enc):
    """The ids that end a completion: the model folder's eos_token_id for a Hugging Face
    tokenizer (book/hf_tokenizer.py's stop_tokens), <|endoftext|> for ours."""
    return getattr(enc, "stop_tokens", (enc.eot_token,))


def decode_completions(enc, tokens, mask, prompt_len):
    """Text of each row's completion (tokens after prompt_len where mask), stop tokens dropped."""
    rows, stop = [], set(stop_tokens(enc))
    for toks, m in zip(tokens[:, prompt_len:].tolist(), mask[:, prompt_len:].tolist()):
        rows.append(enc.decode([t for t, keep in zip(toks, m) if keep and t not in stop]))
    return rows


if __name__ == "__main__":
    import tasks

    ap = argparse.ArgumentParser(description="Show how a text is tokenized.")
    ap.add_argument("text", nargs="?", default=None, help="text to encode (default: a problem)")
    ap.add_argument("--merges", type=int, default=48, help="BPE merges to learn")
    args = ap.parse_args()
    stream = tasks.problems("mixed", seed=0)
    corpus = [p.prompt + p.solution() for p, _ in zip(stream, range(2000))]
    enc = build_tokenizer(make_spec(corpus, args.merges))
    text = args.text or corpus[0]
    ids = encode_completion(enc, text)
    print(f"vocab {enc.n_vocab}, {len(text)} chars -> {len(ids)} tokens")
    print(" | ".join(enc.decode([i]) for i in ids))
