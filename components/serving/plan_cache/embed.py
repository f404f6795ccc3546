"""Prepare step ``agent_query_embeddings``: every question of the request stream embedded once (the
semantic-cache baselines key on these), so no embedding model loads at run time.

``embedder: minilm`` is the offline all-MiniLM-L6-v2 (the full experiment); ``bow`` is the shared
hashed bag of words (:mod:`components.data.text_embeddings`), a cheap stand-in for the debug flavour
and unit tests only (it loads in no time; MiniLM takes ~20 s).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from components.core.registry import prepare_step
from components.data.text_embeddings import embed


@dataclass
class QueryEmbeddingParams:
    embedder: Literal["minilm", "bow"] = "minilm"
    batch_size: int = 32          # MiniLM batch (the sheet measured 32 as the fastest on this CPU)


@prepare_step("agent_query_embeddings", params=QueryEmbeddingParams, inputs=("tasks",), seeded=True,
              summary="The agent workload's questions embedded once (offline MiniLM, or hashed bag of words for "
                      "debug) for the semantic-cache baselines.")
def prepare_query_embeddings(p: QueryEmbeddingParams, ctx) -> dict:
    qs = ctx.input("tasks")["questions"]
    uniq = sorted(set(qs))
    emb = embed(uniq, p.embedder, batch_size=p.batch_size, key="embedder")
    row = {q: i for i, q in enumerate(uniq)}
    return {"vectors": emb[[row[q] for q in qs]], "embedder": p.embedder}
