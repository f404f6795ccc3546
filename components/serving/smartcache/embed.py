"""Prepare step ``smartcache_embeddings``: unit embeddings of every query text the workload can
produce, computed once and cached (MiniLM is the slow part, ~80 texts per CPU-second).

``model``: ``minilm`` = all-MiniLM-L6-v2 from the offline wheel (the experiment); ``bow`` = the
shared hashed bag of words (word-order and paraphrase blind), which only the debug flavour uses so
that it runs in seconds without loading MiniLM (:mod:`components.data.text_embeddings`).
"""
from dataclasses import dataclass, field
from typing import Literal

from components.core.registry import prepare_step
from components.data.conversations import KBParams, all_queries, make_kb
from components.data.text_embeddings import embed

MODEL_NAMES = {"minilm": "all-MiniLM-L6-v2", "bow": "bag of words"}


@dataclass
class EmbedParams:
    kb: dict = field(default_factory=dict)            # KBParams keys (the same KB as the LM's)
    model: Literal["minilm", "bow"] = "minilm"

    def check(self):
        KBParams(**self.kb).check()


@prepare_step("smartcache_embeddings", params=EmbedParams, seeded=False,
              summary="Unit embeddings of every query text of the SmartCache workload: all-MiniLM-L6-v2 (offline), "
                      "or a hashed bag of words for the debug flavour.")
def prepare_embeddings(p: EmbedParams, ctx) -> dict:
    texts = all_queries(make_kb(KBParams(**p.kb)))
    return {"texts": texts, "emb": embed(texts, p.model, batch_size=32), "model": MODEL_NAMES[p.model]}
