"""The paper's regime for Adaptive Beam Search: embeddings of NON-overlapping real passages, with
held-out queries from the same sources and out-of-distribution queries from another text.

Why: ``ann_vectors(kind=pydoc_minilm)`` cuts 40-word windows at stride 10, so every query has
near-copies of its own text in the base set and greedy search alone almost reaches recall 0.98 (no
stop rule can then save anything). Here a passage shares no words with any other passage of its
document, so a query's neighbours are merely related text, as in the paper's embedding benchmarks.

Sources (all shipped with Python, nothing downloaded; deterministic for one Python version):
- base and in-distribution queries: ``pydoc_data.topics`` (the help topics) and the docstrings of the
  standard library's modules (one document per module, its docstrings in source order; tests,
  ``idlelib`` and ``site-packages`` left out), cut into consecutive ``words``-word passages;
  a passage sharing a 12-word run with an earlier one dropped (pydoc repeats sections across topics),
  shuffled by ``seed``, the first ``n_queries`` held out as queries;
- out-of-distribution queries: IDLE's release notes and change logs (``idlelib/NEWS*.txt``,
  ``ChangeLog``, ``HISTORY.txt``, ...), prose about an application's history, not API reference.

Own module (not beside the search code) so that its cache entry, the slow MiniLM embedding,
survives edits of the search and the sweep.
"""
from __future__ import annotations

import ast
import os
import sysconfig
from dataclasses import dataclass
from typing import Literal

import numpy as np

from components.core.errors import require
from components.core.registry import prepare_step

_SKIP_DIRS = {"test", "tests", "idle_test", "idlelib", "site-packages", "dist-packages", "__pycache__"}
SHINGLE = 12        # words: two passages sharing a run this long are near-copies (one is dropped)
_OOD_FILES = ("NEWS.txt", "NEWS2x.txt", "ChangeLog", "HISTORY.txt", "TODO.txt", "extend.txt", "README.txt")


def windows(text: str, words: int) -> list[str]:
    """Consecutive, non-overlapping ``words``-word passages of ``text`` (a partial last one dropped)."""
    toks = text.split()
    return [" ".join(toks[i:i + words]) for i in range(0, len(toks) - words + 1, words)]


def stdlib_docstrings() -> list[str]:
    """One document per standard-library module: its module, class and function docstrings, in order."""
    lib = sysconfig.get_paths()["stdlib"]
    docs = []
    for root, dirs, files in os.walk(lib):
        dirs[:] = sorted(d for d in dirs if d not in _SKIP_DIRS)
        for f in sorted(files):
            if not f.endswith(".py"):
                continue
            try:
                with open(os.path.join(root, f), encoding="utf-8") as fh:
                    tree = ast.parse(fh.read())
            except (SyntaxError, UnicodeDecodeError, ValueError):
                continue
            parts = [ast.get_docstring(n) for n in ast.walk(tree)
                     if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))]
            text = "\n".join(p for p in parts if p)
            if text:
                docs.append(text)
    return docs


def shingles(text: str, run: int = SHINGLE) -> set[str]:
    """Every ``run``-word run of consecutive words in ``text``."""
    t = text.split()
    return {" ".join(t[i:i + run]) for i in range(len(t) - run + 1)}


def _dedupe(texts: list[str], taken: set[str] | None = None) -> list[str]:
    """Keep a passage only if it shares no ``SHINGLE``-word run with a passage kept before it (or with
    ``taken``): pydoc repeats whole sections across topics (~22% of its passages would otherwise have a
    near-copy, shifted by a few words), and near-copies are exactly what this set must not have."""
    seen, out = set(taken or ()), []
    for t in texts:
        sh = shingles(t)
        if not sh & seen:
            seen |= sh
            out.append(t)
    return out


def in_distribution_passages(words: int = 40, stdlib: bool = True) -> list[str]:
    """pydoc topics (sorted keys) then stdlib docstrings, as non-overlapping passages without near-copies."""
    from pydoc_data.topics import topics

    docs = [topics[k] for k in sorted(topics)] + (stdlib_docstrings() if stdlib else [])
    return _dedupe([w for d in docs for w in windows(d, words)])


def ood_passages(words: int = 40) -> list[str]:
    """IDLE's release notes and change logs as non-overlapping passages without near-copies."""
    root = os.path.join(sysconfig.get_paths()["stdlib"], "idlelib")
    out = []
    for f in _OOD_FILES:
        path = os.path.join(root, f)
        if os.path.exists(path):
            with open(path, encoding="utf-8", errors="replace") as fh:
                out += windows(fh.read(), words)
    return _dedupe(out)


@dataclass
class PassageParams:
    n: int = 6000                   # base passages (at most: the sources give ~6.6k at 40 words)
    n_queries: int = 500            # held-out passages of the same sources
    n_ood: int = 500                # queries from IDLE's release notes
    words: int = 40                 # words per passage; passages never overlap
    k_gt: int = 100                 # ground-truth depth
    stdlib: bool = True             # add the stdlib docstrings to pydoc's topics (~1.6k passages alone)
    model: Literal["minilm", "bow"] = "minilm"   # bow: hashed bag of words (debug flavour, no model load)
    seed: int = 0                   # the held-out split and the choice of OOD queries

    def check(self):
        require(self.n >= 20, "n", self.n, "at least 20 base passages")
        require(1 <= self.n_queries <= 5000, "n_queries", self.n_queries, "an integer in [1, 5000]")
        require(1 <= self.n_ood <= 5000, "n_ood", self.n_ood, "an integer in [1, 5000]")
        require(8 <= self.words <= 200, "words", self.words, "an integer in [8, 200] (MiniLM reads 256 tokens)")
        require(1 <= self.k_gt <= self.n, "k_gt", self.k_gt, f"an integer in [1, n={self.n}]")


def make_passage_set(p: PassageParams) -> dict:
    """Base vectors, in-distribution and OOD queries with exact ground truth (keys as ``ann_vectors``
    plus ``ood_queries``, ``ood_gt_ids``, ``ood_gt_dist``)."""
    from components.data.embeddings import exact_knn
    from components.data.text_embeddings import embed

    rng = np.random.default_rng(p.seed)
    pool = in_distribution_passages(p.words, p.stdlib)
    require(len(pool) >= p.n_queries + p.k_gt + 1, "n_queries", p.n_queries,
            f"fewer than the {len(pool)} passages of {p.words} words minus k_gt={p.k_gt}")
    pool = [pool[i] for i in rng.permutation(len(pool))]
    queries, base = pool[:p.n_queries], pool[p.n_queries:p.n_queries + p.n]
    ood = ood_passages(p.words)
    ood = _dedupe([ood[i] for i in rng.permutation(len(ood))], set().union(*map(shingles, base + queries)))[:p.n_ood]
    require(len(base) >= p.k_gt, "k_gt", p.k_gt, f"at most the {len(base)} base passages the sources give")
    emb = embed(base + queries + ood, model=p.model, key="model")
    nb, nq = len(base), len(queries)
    xb, xq, xo = (np.ascontiguousarray(a) for a in (emb[:nb], emb[nb:nb + nq], emb[nb + nq:]))
    gi, gd = exact_knn(xb, xq, p.k_gt)
    oi, od = exact_knn(xb, xo, p.k_gt)
    info = {"kind": f"passages_{p.model}", "n": nb, "d": int(xb.shape[1]), "n_queries": nq, "n_ood": len(ood),
            "words": p.words, "pool": len(pool), "overlap": 0,
            "sources": "pydoc_data.topics + stdlib docstrings; OOD: idlelib release notes"}
    return {"base": xb, "queries": xq, "gt_ids": gi, "gt_dist": gd, "ood_queries": xo, "ood_gt_ids": oi,
            "ood_gt_dist": od, "info": info}


@prepare_step("abs_passages", params=PassageParams,
              summary="Non-overlapping real passages (pydoc topics + stdlib docstrings) embedded with MiniLM, "
                      "held-out and out-of-distribution (IDLE release notes) queries, exact ground truth.")
def prepare_passages(p: PassageParams, ctx) -> dict:
    return make_passage_set(p)
