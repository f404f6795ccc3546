"""A character-level text corpus built from Python's own help text (``pydoc_data.topics``).

Shipped with every CPython, so nothing is downloaded. Deterministic: topics in sorted key
order, joined by blank lines; optionally extended with the docstrings of a fixed list of stdlib
modules when more text helps. The vocabulary is every character that occurs, sorted, so token
ids are stable across runs and machines with the same Python.

The prepare step ``char_corpus`` caches the encoded train/val split; training code draws
random context windows with :func:`sample_batch`.
"""
from __future__ import annotations

import importlib
import inspect
from dataclasses import dataclass

import numpy as np

from components.core.errors import require
from components.core.registry import prepare_step

#: stdlib modules whose docstrings can extend the corpus (fixed order: deterministic text)
STDLIB_DOC_MODULES = ("collections", "functools", "itertools", "json", "os", "pathlib", "re",
                      "statistics", "string", "textwrap", "typing", "unittest")


def pydoc_text(extra_docstrings: bool = False) -> str:
    """The corpus text: every pydoc topic (sorted keys), blank-line separated."""
    from pydoc_data.topics import topics

    parts = [topics[k].strip() for k in sorted(topics)]
    if extra_docstrings:
        for name in STDLIB_DOC_MODULES:
            mod = importlib.import_module(name)
            for _, obj in sorted(vars(mod).items()):
                doc = inspect.getdoc(obj) if callable(obj) else None
                if doc and len(doc) > 80:
                    parts.append(doc.strip())
    return "\n\n".join(parts)


@dataclass(frozen=True)
class CharTokenizer:
    """Character <-> id over a fixed, sorted alphabet; unknown characters are an error."""

    alphabet: str

    @classmethod
    def fit(cls, text: str) -> "CharTokenizer":
        return cls("".join(sorted(set(text))))

    @property
    def vocab_size(self) -> int:
        return len(self.alphabet)

    def encode(self, text: str) -> np.ndarray:
        table = {c: i for i, c in enumerate(self.alphabet)}
        try:
            return np.fromiter((table[c] for c in text), dtype=np.int64, count=len(text))
        except KeyError as e:
            raise ValueError(f"character {e.args[0]!r} is not in the tokenizer's alphabet") from None

    def decode(self, ids) -> str:
        return "".join(self.alphabet[int(i)] for i in ids)


@dataclass
class CharCorpus:
    """Encoded train/val token arrays and their tokenizer."""

    tokenizer: CharTokenizer
    train: np.ndarray
    val: np.ndarray

    @property
    def vocab_size(self) -> int:
        return self.tokenizer.vocab_size


def build_corpus(val_frac: float = 0.1, extra_docstrings: bool = False, max_chars: int | None = None) -> CharCorpus:
    """Tokenise the corpus and split it: the last ``val_frac`` of the text is validation."""
    require(0.0 < val_frac < 0.5, "val_frac", val_frac, "a fraction in (0, 0.5)")
    text = pydoc_text(extra_docstrings)
    if max_chars is not None:
        require(max_chars >= 1000, "max_chars", max_chars, "at least 1000 characters")
        text = text[:max_chars]
    tok = CharTokenizer.fit(text)
    ids = tok.encode(text).astype(np.int16 if tok.vocab_size < 2 ** 15 else np.int32)
    cut = int(len(ids) * (1 - val_frac))
    return CharCorpus(tok, ids[:cut], ids[cut:])


def sample_batch(data: np.ndarray, batch: int, context: int, rng: np.random.Generator):
    """``batch`` random windows: (inputs, next-character targets), both int64 tensors (B, T)."""
    import torch

    require(len(data) > context + 1, "context", context, f"shorter than the data ({len(data)} tokens)")
    starts = rng.integers(0, len(data) - context - 1, size=batch)
    idx = starts[:, None] + np.arange(context + 1)[None, :]
    win = torch.from_numpy(data[idx].astype(np.int64))
    return win[:, :-1], win[:, 1:]


@dataclass
class CharCorpusParams:
    val_frac: float = 0.1
    extra_docstrings: bool = False
    max_chars: int | None = None

    def check(self):
        require(0.0 < self.val_frac < 0.5, "val_frac", self.val_frac, "a fraction in (0, 0.5)")
        require(self.max_chars is None or self.max_chars >= 1000, "max_chars", self.max_chars,
                "null or at least 1000 characters")


@prepare_step("char_corpus", params=CharCorpusParams,
              summary="Character-level corpus from pydoc_data.topics: tokenizer + 90/10 train/val split.")
def prepare_char_corpus(p: CharCorpusParams, ctx) -> CharCorpus:
    return build_corpus(p.val_frac, p.extra_docstrings, p.max_chars)
