"""Prepare step ``smartcache_bundle``: the LM and the query embeddings together, the one prepare
output ``dtlab serve smartcache`` builds its service from (a service reads one entry)."""
from components.core.registry import prepare_step


@prepare_step("smartcache_bundle", inputs=("lm", "embeddings"), seeded=False,
              summary="The SmartCache LM and query embeddings in one output, for the served application.")
def prepare_bundle(p, ctx) -> dict:
    return {"lm": ctx.input("lm"), "embeddings": ctx.input("embeddings")}
