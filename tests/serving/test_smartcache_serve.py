"""The SmartCache service on Ray Serve: a repeated turn from another session is answered from the
forest; bad bodies get 422/413 and the replica keeps serving. Marked slow (Serve start + deploy)."""
import pytest
import torch

from components.data.conversations import KBParams, Tokenizer, all_queries, make_kb
from components.models.gpt import GPT, GPTConfig
from components.serving.app import deploy, post_json, undeploy
from components.data.text_embeddings import bow_embed

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def url(serve_instance):
    from components.serving.smartcache.service import build_app

    torch.manual_seed(0)
    kb = make_kb(KBParams(n_entities=6, n_attrs=3))
    model = GPT(GPTConfig(vocab_size=len(Tokenizer(kb.vocab).vocab), n_layer=1, n_head=2, d_model=16, context=56))
    texts = all_queries(kb)
    b = {"lm": {"state": model.state_dict(), "config": model.cfg.to_dict(), "kb": {"n_entities": 6, "n_attrs": 3}},
         "embeddings": {"texts": texts, "emb": bow_embed(texts), "model": "bow"}}
    deploy(build_app(b, "smartcache"), name="test_smartcache", route_prefix="/t_smartcache")
    yield serve_instance.url("/t_smartcache/chat"), kb
    undeploy("test_smartcache")


def test_second_session_hits_the_forest(url):
    u, kb = url
    q = f"what is the {kb.attrs[0]} of {kb.entities[0]} ?"
    s1, a = post_json(u, {"session": "a", "query": q})
    s2, b = post_json(u, {"session": "b", "query": q, "end": True})
    assert s1 == s2 == 200 and not a["hit"] and b["hit"] and b["answer"] == a["answer"]
    assert b["prefill_tokens"] == 0 and b["decode_tokens"] == 0 and a["decode_tokens"] >= 1


@pytest.mark.parametrize("body,status", [
    ({"session": "a"}, 422),                                        # missing query
    ({"session": "a", "query": 7}, 422),                            # wrong type
    ({"session": "a b", "query": "its size ?"}, 422),               # session id pattern
    ({"session": "a", "query": "x" * 5000}, 413),                   # over the byte limit
    ({"session": "a", "query": "its size ?", "tau": 0.1}, 422),     # unknown key
    ({"session": "a", "query": "what is the weather ?"}, 400),      # words outside the LM's vocabulary
])
def test_bad_bodies_rejected_and_service_keeps_serving(url, body, status):
    u, kb = url
    got, out = post_json(u, body)
    assert got == status and "error" in out
    ok, _ = post_json(u, {"session": "c", "query": f"and its {kb.attrs[1]} ?"})
    assert ok == 200
