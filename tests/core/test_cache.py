"""Prepare cache keys: sound (same inputs, same key) and complete (code, params, upstream, seed)."""
import sys
import textwrap

import components
from components.core.cache import StageCache, cache_key, code_version, module_closure
from components.core.params import parse_params
from components.core.probe_prepare import TableParams


def test_key_depends_on_step_params_code_upstream_and_seed():
    # Prepare
    v, p = "v1", {"a": 1}
    # Execute
    k = cache_key("s", p, v)
    # Assert
    assert k == cache_key("s", {"a": 1}, v)
    assert k != cache_key("s", {"a": 2}, v)
    assert k != cache_key("s", p, "v2")
    assert k != cache_key("t", p, v)
    assert k != cache_key("s", p, v, upstream={"x": "abc"})
    assert k != cache_key("s", p, v, seed=0)
    assert cache_key("s", p, v, seed=1) != cache_key("s", p, v, seed=2)


def test_defaults_written_out_give_the_same_key_as_none_written():
    # Prepare
    empty = parse_params(TableParams, {}, "p")
    spelled = parse_params(TableParams, {"n": 3, "scale": 1.0}, "p")
    # Execute / Assert
    assert cache_key("probe_table", empty, "v") == cache_key("probe_table", spelled, "v")
    assert cache_key("probe_table", empty, "v") != cache_key("probe_table", parse_params(TableParams, {"n": 4}, "p"), "v")


def test_code_version_covers_imported_modules_transitively_and_nothing_else(tmp_path, monkeypatch):
    # Prepare: a step module importing a model module (through a helper), and a technique module
    pkg = tmp_path / "zz_spine_fake"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "model.py").write_text("WIDTH = 4\n")
    (pkg / "helper.py").write_text("from components.zz_spine_fake import model\n")
    (pkg / "step.py").write_text(textwrap.dedent("""
        def build():
            from components.zz_spine_fake.helper import model
            return model.WIDTH
    """))
    (pkg / "technique.py").write_text("from components.zz_spine_fake import step\ndef run():\n    return 1\n")
    monkeypatch.setattr(components, "__path__", [*components.__path__, str(tmp_path)])
    module_closure.cache_clear()
    sys.path_importer_cache.clear()
    from components.zz_spine_fake import step  # noqa: PLC0415

    # Execute
    before = code_version(step.build)
    (pkg / "technique.py").write_text("from components.zz_spine_fake import step\ndef run():\n    return 2\n")
    after_technique_edit = code_version(step.build)
    (pkg / "model.py").write_text("WIDTH = 8\n")
    after_model_edit = code_version(step.build)
    # Assert
    assert "components.zz_spine_fake.model" in module_closure("components.zz_spine_fake.step")
    assert "components.zz_spine_fake.technique" not in module_closure("components.zz_spine_fake.step")
    assert before == after_technique_edit
    assert before != after_model_edit
    module_closure.cache_clear()


def test_registry_plumbing_and_its_imports_are_not_hashed():
    """A step that registers itself imports the registry; the registry's own imports (its manifest,
    errors) cannot change what the step computes, so an edit there must not rebuild every cached model."""
    # Execute
    closure = module_closure("components.core.probe_prepare")
    # Assert
    assert "components.core.probe_prepare" in closure
    assert not [m for m in closure if m in ("components.core.registry", "components.core.errors", "components.core.manifest")]


def test_roundtrip_is_atomic(tmp_path):
    c = StageCache(tmp_path)
    assert not c.has("k")
    c.save("k", {"x": [1, 2]})
    assert c.has("k") and c.load("k") == {"x": [1, 2]}
    assert not list(tmp_path.glob("*.tmp"))
