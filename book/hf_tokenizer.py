"""The book's model brings its own tokenizer: `load_pretrained_tokenizer(folder)` builds a tiktoken Encoding from a
Hugging Face tokenizer.json (Qwen's byte-level BPE, its split pattern, its added tokens such as `<|im_start|>` and
`<think>`), behind a thin wrapper that applies Qwen's NFC normaliser first. It gives Hugging Face's ids exactly;
tests/test_qwen_tokenizer.py compares the two on digits, LaTeX, unicode and whitespace. Its stop tokens are the
folder's eos_token_id (generation_config.json, else config.json), so the reasoning Qwen3-0.6B ends a turn at
<|im_end|>; with chat=True (`train.py --chat-template`) prompts go inside Qwen3's chat template with thinking on, as
the book's Qwen3Tokenizer does for that model (CHAT_TEMPLATE). tokenizer.py's encode_prompt and stop_tokens read
the wrapper's `chat`, `encode_chat` and `stop_tokens`.

    python train.py --model qwen3-0.6b-base --task math ...   # docs/book_model.md
"""
import json
import os
import re
import unicodedata

import tiktoken

# ---------------------------------------------------------------- a Hugging Face tokenizer.json (Qwen's)
#
# tiktoken and Hugging Face's BPE agree when the merges are tiktoken's own: tiktoken merges
# the adjacent pair whose concatenation has the lowest rank, Hugging Face the pair listed
# first in `merges`, and a token id is its rank. Qwen's vocabulary began as tiktoken ranks
# (Qwen 1 shipped qwen.tiktoken), and its tokenizer.json lists the merges in id order,
# each being the last step of tiktoken's own merging of that token. `check_merges` verifies
# exactly that, so a file where the two algorithms could part is refused instead of being
# tokenised differently.

def bytes_to_unicode():
    """GPT-2's byte-level alphabet, byte -> character: tokenizer.json spells each token's
    bytes with these (printable bytes stand for themselves; a space is 'Ġ', a newline 'Ċ')."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    table, n = {}, 0
    for b in range(256):
        table[b] = chr(b) if b in printable else chr(256 + n)
        n += b not in printable
    return table


def bpe_parts(piece, ranks, below):
    """tiktoken's byte-pair merging of `piece` (bytes) with the ranks < below -> its parts."""
    parts = [piece[i:i + 1] for i in range(len(piece))]
    while len(parts) > 1:
        pair_ranks = [ranks.get(a + b, below) for a, b in zip(parts, parts[1:])]
        r = min(pair_ranks)
        if r >= below:
            break
        i = pair_ranks.index(r)  # the leftmost of the lowest, as tiktoken
        parts[i:i + 2] = [parts[i] + parts[i + 1]]
    return parts


def check_merges(ranks, merges, where):
    """Refuse (ValueError) merges that tiktoken's ranks would not reproduce: merge k must
    make the k-th token after the single bytes, and be the last step of tiktoken's own
    merging of that token with lower ranks only. (About 3 s in Python for 151k merges of
    10-byte tokens, measured on a synthetic vocabulary; Qwen's tokens are shorter.)"""
    singles = [t for t in ranks if len(t) == 1]
    if len(singles) != 256 or len(merges) != len(ranks) - 256:
        raise ValueError(f"{where}: {len(singles)} single-byte tokens and {len(merges)} merges for "
                         f"{len(ranks)} tokens; a byte-level BPE has 256, and one merge per other token")
    last = max(ranks[t] for t in singles)
    for a, b in merges:
        r = ranks.get(a + b)
        if r is None or r <= last:
            raise ValueError(f"{where}: merge {a!r} + {b!r} is {'not a token' if r is None else 'out of id order'}; "
                             "tiktoken ranks cannot express it")
        last = r
        if len(a) + len(b) > 2 and bpe_parts(a + b, ranks, r) != [a, b]:
            raise ValueError(f"{where}: merge {a!r} + {b!r} is not how tiktoken's ranks build {a + b!r}; "
                             "the two BPE algorithms would give different ids")


def _read_bpe(tok, where):
    """tokenizer.json -> (split pattern, ranks {bytes: id}, merges [(bytes, bytes)], added {text: id}),
    refusing (ValueError) any part that is not Qwen's byte-level BPE."""
    pre, model = tok.get("pre_tokenizer") or {}, tok.get("model") or {}
    steps = pre.get("pretokenizers") or [{}, {}]
    split, level = steps[0], steps[-1]
    if not (pre.get("type") == "Sequence" and len(steps) == 2 and split.get("type") == "Split"
            and split.get("behavior") == "Isolated" and not split.get("invert") and "Regex" in split.get("pattern", {})
            and level.get("type") == "ByteLevel" and not level.get("use_regex", True)
            and not level.get("add_prefix_space")):
        raise ValueError(f"{where}: pre-tokenizer {json.dumps(pre)[:150]} is not Qwen's (a regex split, then bytes)")
    if tok.get("normalizer") not in (None, {"type": "NFC"}):
        raise ValueError(f"{where}: normalizer {json.dumps(tok['normalizer'])[:100]} is not implemented (NFC or none)")
    if model.get("type") != "BPE" or model.get("dropout") or model.get("byte_fallback") \
            or model.get("continuing_subword_prefix") or model.get("end_of_word_suffix"):
        raise ValueError(f"{where}: model {model.get('type')} with these options is not plain byte-level BPE")
    if (tok.get("decoder") or {}).get("type", "ByteLevel") != "ByteLevel":
        raise ValueError(f"{where}: decoder {tok['decoder'].get('type')} is not ByteLevel")
    added = {}
    for t in tok.get("added_tokens", []):
        if t.get("lstrip") or t.get("rstrip") or t.get("single_word") or t.get("normalized"):
            raise ValueError(f"{where}: added token {t['content']!r} strips, matches words or is normalised: "
                             "not implemented")
        added[t["content"]] = t["id"]
    byte_of = {c: b for b, c in bytes_to_unicode().items()}

    def as_bytes(token):
        try:
            return bytes(byte_of[c] for c in token)
        except KeyError:
            raise ValueError(f"{where}: token {token!r} is not written in the byte-level alphabet") from None
    ranks = {as_bytes(t): i for t, i in model["vocab"].items() if t not in added}
    pairs = [m.split(" ") if isinstance(m, str) else m for m in model.get("merges", [])]  # "a b" or [a, b]
    if any(len(p) != 2 for p in pairs):
        raise ValueError(f"{where}: a merge that is not two tokens: {next(p for p in pairs if len(p) != 2)}")
    merges = [(as_bytes(a), as_bytes(b)) for a, b in pairs]
    return split["pattern"]["Regex"], ranks, merges, added


def load_pretrained_tokenizer(path, chat=False):
    """A model folder's tokenizer.json (or the file itself) -> a PretrainedTokenizer, whose
    encode / decode are tiktoken's and give Hugging Face's ids, whose stop tokens are the
    folder's eos_token_id (`read_stop_tokens`), and which wraps prompts in Qwen3's chat
    template if chat. ValueError, one line, for a file this code does not implement."""
    where = os.path.join(path, "tokenizer.json") if os.path.isdir(path) else path
    try:
        with open(where, encoding="utf-8") as f:
            tok = json.load(f)
        pattern, ranks, merges, added = _read_bpe(tok, where)
    except FileNotFoundError:
        raise ValueError(f"{where}: no such file (want the tokenizer.json of a Hugging Face model folder)") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"{where} is not valid JSON: {e}") from None
    except (KeyError, TypeError, AttributeError) as e:
        raise ValueError(f"{where}: not a Hugging Face tokenizer.json ({type(e).__name__}: {e})") from None
    check_merges(ranks, merges, where)
    ids = sorted([*ranks.values(), *added.values()])
    if ids != list(range(len(ids))):
        raise ValueError(f"{where}: token ids are not 0..{len(ids) - 1} without gaps or repeats")
    if "<|endoftext|>" not in added:
        raise ValueError(f"{where} has no <|endoftext|> token")
    enc = tiktoken.Encoding(name=os.path.basename(os.path.abspath(path)), pat_str=pattern, mergeable_ranks=ranks,
                            special_tokens=added)
    if chat and not set(CHAT_SPECIALS) <= set(added):
        raise ValueError(f"{where} has no {' and '.join(CHAT_SPECIALS)} tokens: no chat template to wrap prompts in")
    stop = read_stop_tokens(os.path.dirname(where), enc.n_vocab, added["<|endoftext|>"])
    return PretrainedTokenizer(enc, tok.get("normalizer") is not None, stop, chat)


def read_stop_tokens(folder, n_vocab, default):
    """eos_token_id (an id or a list of ids) of the folder's generation_config.json, else
    of its config.json, else (default,): the ids that end a completion, as Hugging Face's
    generate reads them. Qwen3-0.6B (the reasoning model) lists [151645, 151643]:
    <|im_end|> ends its turn, <|endoftext|> its text; Qwen3-0.6B-Base, 151643 only."""
    for name in ("generation_config.json", "config.json"):
        where = os.path.join(folder, name)
        try:
            with open(where, encoding="utf-8") as f:
                ids = json.load(f).get("eos_token_id")
        except FileNotFoundError:
            continue
        except (UnicodeDecodeError, ValueError, AttributeError) as e:
            raise ValueError(f"{where}: not a JSON object ({type(e).__name__}: {e})") from None
        if ids is None:
            continue
        listed = [ids] if type(ids) is int else ids
        if not (isinstance(listed, list) and listed and all(type(i) is int and 0 <= i < n_vocab for i in listed)):
            raise ValueError(f"{where}: eos_token_id {ids!r} is not a token id of the tokenizer (0..{n_vocab - 1}) "
                             "or a list of them")
        return tuple(listed)
    return (default,)


# Qwen3's chat template for one user turn with thinking on: what the book's Qwen3Tokenizer
# (reasoning_from_scratch/qwen3.py) builds with apply_chat_template=True,
# add_generation_prompt=True, add_thinking=True. The model then opens <think> itself.
CHAT_TEMPLATE = "<|im_start|>user\n{prompt}<|im_end|>\n<|im_start|>assistant\n"
CHAT_SPECIALS = ("<|im_start|>", "<|im_end|>")


class PretrainedTokenizer:
    """tiktoken's Encoding behind tiktoken's encode / decode signatures, doing first what
    Hugging Face does before its BPE: take the allowed added tokens out of the raw text,
    then NFC-normalise each remaining piece (tiktoken has no normaliser). stop_tokens: the
    ids that end a completion; chat: prompts go inside CHAT_TEMPLATE (`encode_prompt`)."""

    def __init__(self, enc, nfc, stop_tokens=None, chat=False):
        self.enc, self.nfc, self.chat = enc, nfc, chat
        self.stop_tokens = tuple(stop_tokens or (enc.eot_token,))
        self.n_vocab, self.eot_token, self.special_tokens_set = enc.n_vocab, enc.eot_token, enc.special_tokens_set
        self.special_ids = {s: enc.encode_single_token(s) for s in enc.special_tokens_set}

    def encode(self, text, allowed_special=frozenset(), disallowed_special="all"):
        specials = self.special_tokens_set
        allowed = specials if allowed_special == "all" else set(allowed_special) & specials
        banned = specials - allowed if disallowed_special == "all" else set(disallowed_special)
        if banned and (hit := _alternation(banned).search(text)):  # as tiktoken: no silent special tokens
            raise ValueError(f"text contains the special token {hit[0]!r}: pass allowed_special or disallowed_special")
        ids = []
        for i, part in enumerate(_alternation(allowed).split(text) if allowed else [text]):
            if i % 2:  # a captured special token
                ids.append(self.special_ids[part])
            elif part:
                ids += self.enc.encode_ordinary(unicodedata.normalize("NFC", part) if self.nfc else part)
        return ids

    def encode_chat(self, prompt):
        """CHAT_TEMPLATE around prompt: its <|im_start|> and <|im_end|> as their ids, the text
        between them encoded piece by piece as the book's tokenizer does (so "user\\n" and
        the prompt are one piece), the prompt's own characters as plain text: a problem that
        contains "<|im_end|>" cannot end the turn."""
        ids = []
        for i, part in enumerate(_alternation(CHAT_SPECIALS).split(CHAT_TEMPLATE)):
            if i % 2:  # a special token of the template
                ids.append(self.special_ids[part])
            elif part:
                ids += self.encode(part.replace("{prompt}", prompt), disallowed_special=())
        return ids

    def decode(self, ids):
        # ids past the tokenizer (Qwen3's embedding has 151,936 rows for 151,669 tokens) have
        # no text: a sampled one decodes to nothing rather than failing the step
        return self.enc.decode([i for i in ids if 0 <= i < self.n_vocab])


def _alternation(strings):
    """A regex that captures any of the strings, longest first (leftmost-longest matching)."""
    return re.compile("(" + "|".join(map(re.escape, sorted(strings, key=len, reverse=True))) + ")")
