"""A synthetic multi-step reasoning task: arithmetic chains mod 100 with checkable steps.

A problem is a start value and a list of operations, written ``17|+1|*9|-7|+3|*2|-6>``
(``>`` opens the solution). The chain of thought is one step per operation, steps separated by
``\\n`` (the step delimiter, used as stop token), then the final line ``A=<answer>.``::

    17|+1|*9|-7>(17)+1=18
    (18)*9=62
    (62)-7=55
    A=55.

Every step has two equivalent surface forms, so *semantic* and *token* equivalence differ
(the point of SpecReason versus token-level speculative decoding):

* form A: ``(17)+1=18``  (previous value, operation, result)
* form B: ``+1(17)=18``  (operation, previous value in brackets, result)

Values are always two digits (``05``), operands one digit, arithmetic mod 100; both forms have
the same width, so a step's position in the chain does not depend on the forms before it. Difficulty
levels fix the number of operations and the share of the hard ``*`` steps. Everything is
deterministic from a seed. :func:`check_step` is the exact step checker (used to label judge
training data and to measure judge AUROC); :func:`final_answer` parses the answer line.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from components.core.errors import require
from components.data.char_corpus import CharTokenizer

#: the fixed alphabet: digits, operators, separators, judge marker ``?``, pad `` `` (id 0)
ALPHABET = " \n()*+-.0123456789=>?A|"
TOKENIZER = CharTokenizer(ALPHABET)
PAD, NEWLINE, STOP, JUDGE, OPEN = " ", "\n", ".", "?", ">"
PAD_ID = ALPHABET.index(PAD)
NEWLINE_ID = ALPHABET.index(NEWLINE)
STOP_ID = ALPHABET.index(STOP)
JUDGE_ID = ALPHABET.index(JUDGE)
DIGIT_IDS = [ALPHABET.index(str(d)) for d in range(10)]
#: a step ends at one of these tokens (the step delimiter, or the end of the answer line)
STEP_STOP_IDS = frozenset({NEWLINE_ID, STOP_ID})
MOD = 100
OPS = "+-*"

#: difficulty levels: number of operations and the share of ``*`` steps
LEVELS = {
    "easy": {"n_ops": 4, "p_mul": 0.25},
    "medium": {"n_ops": 6, "p_mul": 1 / 3},   # the sheet's learnable variant
    "hard": {"n_ops": 8, "p_mul": 0.5},
}

_FORM_A = re.compile(r"^\((\d\d)\)([+\-*])(\d)=(\d\d)$")
_FORM_B = re.compile(r"^([+\-*])(\d)\((\d\d)\)=(\d\d)$")
_ANSWER = re.compile(r"^A=(\d\d)\.$")
_PROBLEM = re.compile(r"^(\d\d)((?:\|[+\-*]\d)+)$")


def apply_op(value: int, op: str, operand: int) -> int:
    if op == "+":
        return (value + operand) % MOD
    if op == "-":
        return (value - operand) % MOD
    return (value * operand) % MOD


@dataclass(frozen=True)
class Problem:
    """Start value and operations ``[(op, operand), ...]``."""

    start: int
    ops: tuple[tuple[str, int], ...]

    @property
    def text(self) -> str:
        """The prompt, e.g. ``17|+1|*9>`` (ends with the solution opener)."""
        return f"{self.start:02d}" + "".join(f"|{o}{a}" for o, a in self.ops) + OPEN

    def values(self) -> list[int]:
        """Value before the first operation and after each one."""
        v = [self.start]
        for o, a in self.ops:
            v.append(apply_op(v[-1], o, a))
        return v

    @property
    def answer(self) -> int:
        return self.values()[-1]

    @classmethod
    def parse(cls, text: str) -> "Problem":
        """Inverse of :attr:`text` (the trailing ``>`` is optional); ValueError if malformed."""
        m = _PROBLEM.match(text[:-1] if text.endswith(OPEN) else text)
        if not m:
            raise ValueError(f"not a problem: {text!r} (expected e.g. '17|+1|*9|-7')")
        ops = tuple((t[0], int(t[1])) for t in m.group(2).split("|")[1:])
        return cls(int(m.group(1)), ops)


def step_text(prev: int, op: str, operand: int, form: str) -> str:
    """One step in surface form ``A`` or ``B`` (without the delimiter)."""
    res = apply_op(prev, op, operand)
    if form == "A":
        return f"({prev:02d}){op}{operand}={res:02d}"
    return f"{op}{operand}({prev:02d})={res:02d}"


def answer_text(value: int) -> str:
    return f"A={value:02d}."


def parse_step(text: str) -> tuple[int, str, int, int] | None:
    """(prev, op, operand, result) of a step in either form, or None if it is not a step."""
    t = text.rstrip("\n")
    m = _FORM_A.match(t)
    if m:
        return int(m.group(1)), m.group(2), int(m.group(3)), int(m.group(4))
    m = _FORM_B.match(t)
    if m:
        return int(m.group(3)), m.group(1), int(m.group(2)), int(m.group(4))
    return None


def is_answer(text: str) -> bool:
    """Whether a step is the final-answer line (the stop marker of the loop)."""
    return text.startswith("A=")


def solution(problem: Problem, forms: list[str]) -> list[str]:
    """The correct chain: one step per operation in the given forms, then the answer line.

    Each element is one step *including* its delimiter (``\\n``; the answer ends with ``.``).
    """
    require(len(forms) == len(problem.ops), "forms", len(forms), f"one form per operation ({len(problem.ops)})")
    v = problem.values()
    steps = [step_text(v[i], o, a, f) + NEWLINE for i, ((o, a), f) in enumerate(zip(problem.ops, forms))]
    return steps + [answer_text(v[-1])]


def check_step(problem: Problem, previous_steps: list[str], step: str) -> bool:
    """Exact local check of ``step`` given the steps before it (either form, any mix).

    A step is correct when it applies the next unapplied operation to the value the chain
    holds (the previous step's result, or the start value) and computes the result right.
    The answer line is correct when every operation was applied and it repeats the last
    result. Earlier steps are parsed, not re-checked: this judges the *last* step only, as
    the SpecReason judge does.
    """
    value, k = problem.start, 0
    for s in previous_steps:
        p = parse_step(s)
        if p is None:
            return False
        value, k = p[3], k + 1
    if is_answer(step):
        m = _ANSWER.match(step)
        return bool(m) and k == len(problem.ops) and int(m.group(1)) == value
    if not step.endswith(NEWLINE) or k >= len(problem.ops):
        return False
    p = parse_step(step)
    if p is None:
        return False
    prev, op, operand, res = p
    return (prev == value and (op, operand) == problem.ops[k] and res == apply_op(prev, op, operand))


def final_answer(steps: list[str]) -> int | None:
    """The answer of a finished chain (last step ``A=nn.``), or None."""
    if not steps:
        return None
    m = _ANSWER.match(steps[-1])
    return int(m.group(1)) if m else None


def split_steps(text: str) -> list[str]:
    """Split generated solution text into steps (each keeps its ``\\n``; the answer its ``.``)."""
    out, cur = [], ""
    for ch in text:
        cur += ch
        if ch in (NEWLINE, STOP):
            out.append(cur)
            cur = ""
    if cur:
        out.append(cur)
    return out


def sample_problem(rng: np.random.Generator, level: str = "medium") -> Problem:
    require(level in LEVELS, "level", level, "one of " + ", ".join(LEVELS))
    n, p_mul = LEVELS[level]["n_ops"], LEVELS[level]["p_mul"]
    ops = []
    for _ in range(n):
        if rng.random() < p_mul:
            ops.append(("*", int(rng.integers(2, 10))))
        else:
            ops.append((str("+-"[int(rng.integers(0, 2))]), int(rng.integers(1, 10))))
    return Problem(int(rng.integers(10, 100)), tuple(ops))


def sample_forms(rng: np.random.Generator, n: int, style_b: float, flip: float) -> list[str]:
    """Surface forms of ``n`` steps: a chain style (B with prob ``style_b``), each step flipped w.p. ``flip``."""
    style = "B" if rng.random() < style_b else "A"
    other = "A" if style == "B" else "B"
    return [other if rng.random() < flip else style for _ in range(n)]


def held_out_problems(n: int, level: str = "medium", seed: int = 12345) -> list[Problem]:
    """``n`` distinct evaluation problems (training excludes them, see ``reasoning_lms``)."""
    rng = np.random.default_rng(seed)
    out, seen = [], set()
    while len(out) < n:
        p = sample_problem(rng, level)
        if p.text not in seen:
            seen.add(p.text)
            out.append(p)
    return out


def max_len(level: str = "medium") -> int:
    """Longest sequence: prompt + all steps in form B + answer + judge marker and digit."""
    n = LEVELS[level]["n_ops"]
    return 3 + 3 * n + n * len("+1(17)=18\n") + len("A=00.") + 2


def encode(text: str) -> list[int]:
    return [int(i) for i in TOKENIZER.encode(text)]


def decode(ids) -> str:
    return TOKENIZER.decode(ids)
