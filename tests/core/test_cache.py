from components.core.cache import StageCache, cache_key, code_version
from components.core.probe import run_probe


def test_key_depends_on_params_and_code(tmp_path):
    v = code_version(run_probe)
    k1 = cache_key("s", {"a": 1}, v)
    assert k1 == cache_key("s", {"a": 1}, v)
    assert k1 != cache_key("s", {"a": 2}, v)
    assert k1 != cache_key("s", {"a": 1}, v + "x")
    assert k1 != cache_key("t", {"a": 1}, v)


def test_roundtrip_is_atomic(tmp_path):
    c = StageCache(tmp_path)
    assert not c.has("k")
    c.save("k", {"x": [1, 2]})
    assert c.has("k") and c.load("k") == {"x": [1, 2]}
    assert not list(tmp_path.glob("*.tmp"))
