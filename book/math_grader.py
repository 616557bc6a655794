r"""Is a MATH answer right? `math_answer_equal(prediction, answer)`, a pure normaliser.

    python book/math_grader.py "\dfrac{1}{2}" "0.5"      # True: try a pair

MATH's reference answers are LaTeX written by people: `\frac{14}{3}`, `3\sqrt{13}`,
`\left( 3, \frac{\pi}{2} \right)`, `[2,5)`, `90^\circ`, `\text{Evelyn}`, `6 - 5i`. A
model's last `\boxed{...}` (rewards.extract_boxed) is compared with one in three steps:

1. `canonical`: the same string for the same written answer. Drops what never changes
   the value: surrounding `$`, `\(`, `\boxed{}`, `\left` / `\right`, spacing commands and
   all whitespace (so `2\pi` is `2 \pi`), `\dfrac` / `\tfrac` (as `\frac`), `^\circ` and
   `°`, `\%`, `\$`, thousands separators (`1,000`), `\text{...}` wrappers, a trailing unit
   word after a number (`5 cm`, `4\text{ square units}`), a mixed number's implicit plus
   (`2\frac{1}{2}` is 5/2); text answers and choice letters are case-folded.
2. `split`: tuples, intervals, vectors and sets compare element by element. The brackets
   must match exactly, so the interval `[2,5]` is not `[2,5)`; `(a, b)` and `[a, b]` are
   ordered, `\{a, b\}`, a bare list `a, b` (all solutions) and `A \cup B` are not.
3. `value`: an element that is arithmetic (integers, decimals, `\frac`, `a/b`, `\sqrt`,
   `\sqrt[n]`, `^`, `\pi`, `\infty`, `i`, single-letter variables, implicit products like
   `3\sqrt{13}` or `2xy`, plain-text `3*sqrt(13)` and `2pi`; a run of three letters or
   more is a word, not a product) is evaluated by a small parser below, never by `eval`: numbers
   must agree to a relative 1e-9, and an expression with variables must agree at two
   fixed points for every variable (`x^2+7x+10` is `(x+2)(x+5)`; `p - q` is not `q - p`).
   An equation `x = 5` matches `5` by its right-hand side.

Anything else is equal only if its canonical strings are. The grader never raises and
never runs long: inputs over MAX_CHARS characters are compared as stripped strings only.
tests/test_math_task.py holds a table of answer pairs, each checked both ways.

Where this departs from the book (reasoning_from_scratch/ch03.py, `grade_answer`): the
book normalises with regexes, then asks sympy whether the difference simplifies to 0.
Its normaliser keeps `\pi` as text, so `2\pi` and `2 \pi` differ, and drops brackets
before splitting a tuple, so `[2,5]` and `[2,5)` are equal; here both come out the other
way. No sympy: the evaluator is ~60 lines a reader can follow, and it is fast enough to
grade every rollout of a step.
"""
import cmath
import math
import re
import sys

MAX_CHARS = 300  # longer inputs: string comparison only (bounded time on garbage)
TOLERANCE = 1e-9  # relative

WRAPPERS = ("\\text", "\\textbf", "\\textit", "\\textrm", "\\mathrm", "\\mathbf", "\\mbox", "\\textnormal",
            "\\boxed", "\\displaystyle")
DROP = [r"\\left", r"\\right", r"(?<!\\)\\[,;:! ]", r"\\quad", r"\\qquad", r"~",
        r"\^\s*\{\s*\\circ\s*\}", r"\^\s*\\circ", r"°", r"\\circ", r"\\%", r"%", r"\\\$", r"\$"]
RENAME = {"\\dfrac": "\\frac", "\\tfrac": "\\frac", "\\cdot": "*", "\\times": "*", "\\div": "/", "∞": "\\infty",
          "π": "\\pi"}


def math_answer_equal(prediction, answer):
    """True if prediction states the same answer as answer (both strings, MATH's forms)."""
    if not isinstance(prediction, str) or not isinstance(answer, str):
        return False
    if len(prediction) > MAX_CHARS or len(answer) > MAX_CHARS:
        return prediction.strip() == answer.strip()
    try:
        return equal(canonical(prediction), canonical(answer))
    except (RecursionError, OverflowError, ValueError, ZeroDivisionError):  # deep nesting, huge numbers
        return False


# ---------------------------------------------------------------- 1. one spelling per answer

def unwrap(s, command):
    r"""`\text{abc}` -> `abc` for every occurrence of the command, braces balanced."""
    while (i := s.find(command + "{")) >= 0:
        depth, j = 0, i + len(command)
        for j in range(j, len(s)):
            depth += {"{": 1, "}": -1}.get(s[j], 0)
            if depth == 0:
                break
        else:
            return s  # unbalanced: leave it
        s = s[:i] + s[i + len(command) + 1:j] + s[j + 1:]
    return s


def canonical(s):
    s = s.strip()
    for outer in (("\\(", "\\)"), ("\\[", "\\]"), ("$", "$")):
        if s.startswith(outer[0]) and s.endswith(outer[1]) and len(s) > 1:
            s = s[len(outer[0]):-len(outer[1])].strip()
    for command in WRAPPERS:
        s = unwrap(s, command)
    for old, new in RENAME.items():
        s = s.replace(old, new)
    s = re.sub(r"(?<![\\A-Za-z])(sqrt|pi)(?![A-Za-z])", r"\\\1", s)  # plain-text sqrt(2), 2*pi
    s = re.sub(r"(\d),\\!\s*(\d)", r"\1,\2", s)  # 11,\! 111 (a thin space after a thousands comma)
    for pattern in DROP:
        s = re.sub(pattern, "", s)
    s = s.strip()
    if re.fullmatch(r"-?\d{1,3}(,\d{3})+(\.\d+)?", s):  # 1,000,000 (a list would have spaces: 1, 000)
        s = s.replace(",", "")
    s = strip_unit(s)
    s = re.sub(r"^(-?)(\d+)\s+(\d+)/(\d+)$", r"\1(\2+\3/\4)", s)  # mixed number 2 1/2
    s = re.sub(r"\s+", "", s)
    # LaTeX's one-character arguments get braces: \frac12 is \frac{1}{2}, x^23 is x^{2}3
    s = re.sub(r"\\frac(\w)(\w)", r"\\frac{\1}{\2}", s)
    s = re.sub(r"\\frac(\w)\{", r"\\frac{\1}{", s)
    s = re.sub(r"\\frac(\{[^{}]*\})(\w)", r"\\frac\1{\2}", s)
    s = re.sub(r"\\sqrt(\w)", r"\\sqrt{\1}", s)
    s = re.sub(r"([_^])(\w)", r"\1{\2}", s)
    s = re.sub(r"^(-?)(\d+)\\frac\{(\d+)\}\{(\d+)\}$", r"\1(\2+\3/\4)", s)  # mixed number 2\frac{1}{2}
    if re.fullmatch(r"\(?[A-Ea-e]\)?", s):  # a choice: (C), C
        return s.strip("()").upper()
    return s.lower() if re.fullmatch(r"[A-Za-z]{2,}", s) else s  # text answers: Evelyn, evelyn


def strip_unit(s):
    r"""`5 cm`, `12 square units`, `3.5\ meters^2` -> the number before the words."""
    # (a word is a whole run of letters, so the match cannot backtrack over ways to cut one)
    m = re.fullmatch(r"(.*?)\s*(?:(?<![\\A-Za-z])[A-Za-z]{2,}(?![A-Za-z])\.?\s*)+(\^\{?\d\}?)?", s)
    if m and m[1] and not re.search(r"[A-Za-z]", re.sub(r"\\(frac|sqrt|pi)", "", m[1])) \
            and value(re.sub(r"\s+", "", m[1])) is not None:
        return m[1]
    return s


# ---------------------------------------------------------------- 2. tuples, intervals, sets

def top_level(s, sep):
    """Split s at each sep outside brackets (any of ( [ { close any of ) ] })."""
    parts, depth, start, i = [], 0, 0, 0
    while i < len(s):
        if s[i] in "([{":
            depth += 1
        elif s[i] in ")]}":
            depth -= 1
        elif depth == 0 and s.startswith(sep, i):
            parts.append(s[start:i])
            start = i + len(sep)
            i = start
            continue
        i += 1
    return parts + [s[start:]]


def split(s):
    """(kind, elements, ordered) for a compound answer, or None for a single one."""
    m = re.fullmatch(r"\\begin\{([pb]matrix)\}(.*)\\end\{\1\}", s)
    if m:
        rows = [r.split("&") for r in m[2].split("\\\\")]
        return f"matrix{len(rows)}x{len(rows[0])}", [x for r in rows for x in r], True
    if len(parts := top_level(s, "\\cup")) > 1:
        return "union", parts, False
    if s.startswith("\\{") and s.endswith("\\}"):
        return "set", top_level(s[2:-2], ","), False
    if len(s) > 2 and s[0] in "([" and s[-1] in ")]" and len(inner := top_level(s[1:-1], ",")) > 1 \
            and len(top_level(s, ",")) == 1:  # one bracket pair around the whole answer
        return s[0] + s[-1], inner, True
    if len(parts := top_level(s, ",")) > 1:
        return "list", parts, False
    return None


def equal(a, b):
    if a == b:
        return True
    if re.fullmatch(r"-?\d+", a) and re.fullmatch(r"-?\d+", b):  # integers: exactly, 007 is 7
        return int(a) == int(b)
    sa, sb = split(a), split(b)
    if sa or sb:
        if not (sa and sb) or sa[0] != sb[0] or len(sa[1]) != len(sb[1]):
            return False
        if sa[2]:  # ordered: element by element
            return all(equal(x, y) for x, y in zip(sa[1], sb[1]))
        rest = list(sb[1])  # unordered: match each element once
        for x in sa[1]:
            hit = next((k for k, y in enumerate(rest) if equal(x, y)), None)
            if hit is None:
                return False
            rest.pop(hit)
        return True
    a, b = rhs(a, b), rhs(b, a)
    return a == b or close(value(a), value(b))


def rhs(s, other):
    """`x=5` -> `5` when the other answer is not an equation."""
    m = re.fullmatch(r"[A-Za-z]=(.+)", s)
    return m[1] if m and "=" not in other else s


def close(u, v):
    if u is None or v is None or len(u) != len(v):
        return False
    def near(x, y):  # relative; infinities only equal themselves
        return x == y or (cmath.isfinite(x) and cmath.isfinite(y) and abs(x - y) <= TOLERANCE * max(1.0, abs(x), abs(y)))
    return all(near(x, y) for x, y in zip(u, v))


# ---------------------------------------------------------------- 3. the value of an expression

TOKEN = re.compile(r"\d+\.?\d*|\.\d+|\\frac|\\sqrt|\\pi|\\infty|\*\*|[A-Za-z]|[-+*/^(){}\[\]]")
POINTS = [{c: 0.5 + (ord(c) * 0.618034) % 1 for c in "abcdefghjklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"},
          {c: -1.3 - (ord(c) * 0.414214) % 1 for c in "abcdefghjklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"}]


def value(s):
    """The values of an arithmetic expression at the POINTS (a tuple of complex), or None
    if s is not one this parser reads (an unknown command, a subscript, a stray symbol)."""
    if not s or re.search(r"[A-Za-z]{3,}", re.sub(r"\\[A-Za-z]+", "", s)):  # a word is text, not a product
        return None
    tokens = TOKEN.findall(s)
    if "".join(tokens) != s:  # something the tokenizer does not know
        return None
    try:
        out = []
        for point in POINTS:
            parser = Parser(tokens, point)
            v = parser.expr()
            if parser.i != len(tokens):
                return None
            out.append(v)
        return tuple(out)
    except (IndexError, KeyError):  # ran off the end, an unknown token
        return None


class Parser:
    """Recursive descent over the tokens, as the grammar reads:
        expr  := term (('+' | '-') term)*
        term  := unary (('*' | '/') unary | unary)*     (the bare 'unary': an implicit product)
        unary := ('-' | '+') unary | power
        power := atom ('^' unary)?
        atom  := number | letter | \\pi | \\infty | ( expr ) | { expr } | [ expr ]
               | \\frac atom atom | \\sqrt ([ expr ])? atom
    """
    STARTS = set("({[") | {"\\frac", "\\sqrt", "\\pi", "\\infty"}

    def __init__(self, tokens, point):
        self.t, self.i, self.point = tokens, 0, point

    def peek(self):
        return self.t[self.i] if self.i < len(self.t) else None

    def take(self):
        self.i += 1
        return self.t[self.i - 1]

    def expr(self):
        v = self.term()
        while self.peek() in ("+", "-"):
            v = v + self.term() if self.take() == "+" else v - self.term()
        return v

    def term(self):
        v = self.unary()
        while (tok := self.peek()) is not None:
            if tok in ("*", "/"):
                self.take()
                v = v * self.unary() if tok == "*" else v / self.unary()
            elif tok in self.STARTS or tok[0].isalnum() or tok[0] == ".":
                v = v * self.power()  # 3\sqrt{13}, 2x, (x+1)(x-1)
            else:
                break
        return v

    def unary(self):
        if self.peek() in ("-", "+"):
            return -self.unary() if self.take() == "-" else self.unary()
        return self.power()

    def power(self):
        base = self.atom()
        if self.peek() in ("^", "**"):
            self.take()
            exponent = self.unary()
            if abs(exponent) > 1000:
                raise OverflowError
            return base ** exponent
        return base

    def atom(self):
        tok = self.take()
        if tok in ("(", "{", "["):
            v = self.expr()
            if self.take() not in (")", "}", "]"):
                raise KeyError(tok)
            return v
        if tok == "\\frac":
            return self.atom() / self.atom()
        if tok == "\\sqrt":
            n = 2
            if self.peek() == "[":
                self.take()
                n = self.expr()
                self.take()
            return self.atom() ** (1 / n)
        if tok == "\\pi":
            return complex(math.pi)
        if tok == "\\infty":
            return complex(math.inf)
        if tok == "i":
            return 1j
        if tok[0].isalpha():
            return complex(self.point[tok])
        if tok[0].isdigit() or tok[0] == ".":
            return complex(float(tok))
        raise KeyError(tok)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        raise SystemExit("usage: python book/math_grader.py PREDICTION ANSWER")
    print(math_answer_equal(sys.argv[1], sys.argv[2]))
