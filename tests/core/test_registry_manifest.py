"""The registry's source index: it agrees with the decorators, lists without importing, imports one
module per lookup, keeps a broken module to one line, and takes a new family from a new folder."""
import importlib
import itertools
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from components.core import manifest as M
from components.core import registry
from components.core.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]
_ids = itertools.count()

GOOD = '''
"""A good module."""
from components.core.registry import add, register, technique


@technique("rt_good", family="fam_a", summary="  the good one  ")
def run_good(p, ctx):
    return 1


@register("codec", "rt_plain")
class Plain:
    """Plain codec: the first docstring line.

    More text."""


SUMMARIES = {"one": "first " + "table entry", "two": "second"}
for _name, _cls in {"one": Plain, "two": Plain}.items():
    add("codec", f"rt_{_name}", _cls, SUMMARIES[_name], family="fam_a")
'''
SERVICE = '''
from dataclasses import dataclass
from components.core.registry import register


@dataclass(frozen=True)
class Svc:
    summary: str


SVC = Svc(summary="a served thing")
register("service", "rt_svc", summary=SVC.summary)(SVC)
'''
BAD_SYNTAX = '''
from components.core.registry import technique


@technique("rt_bad", family="fam_a", summary="never parsed")
def run_bad(p, ctx)
    return 1
'''
BAD_IMPORT = '''
from components.core.registry import technique
import rt_no_such_dependency  # noqa: F401


@technique("rt_missing_dep", family="fam_a", summary="imports what is not installed")
def run(p, ctx):
    return 1
'''
DYNAMIC = '''
from components.core.registry import add


class Thing:
    """A thing."""


for _n in ("x", "y"):
    add("codec", "rt_dyn_" + _n.upper(), Thing, "computed name")
'''
NEW_FAMILY = '''
from components.core.registry import technique


@technique("rt_new", family="fam_new", summary="in a folder no code names")
def run(p, ctx):
    return 1
'''


def _package(tmp_path: Path, files: dict[str, str]) -> tuple[str, Path]:
    """A throwaway package (unique name) with ``files`` (relative path -> source); every folder a package."""
    name = f"rt_pkg_{os.getpid()}_{next(_ids)}"
    root = tmp_path / name
    for rel, src in {"__init__.py": "", **files}.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        for folder in [path.parent, *path.parent.parents]:
            if folder == root.parent:
                break
            (folder / "__init__.py").touch()
        path.write_text(textwrap.dedent(src))
    return name, root


@pytest.fixture
def scratch_registry(tmp_path, monkeypatch):
    """The registry pointed at a throwaway package, with empty tables: returns (package name, root)."""
    def use(files: dict[str, str]):
        name, root = _package(tmp_path, files)
        monkeypatch.syspath_prepend(str(tmp_path))
        monkeypatch.setattr(registry, "_INDEX", M.Index(root, name, tmp_path / "manifest.json"))
        monkeypatch.setattr(registry, "_REGISTRY", {k: {} for k in registry.KINDS})
        monkeypatch.setattr(registry, "_IMPORT_FAILED", {})
        monkeypatch.setattr(registry, "_dynamic_imported", set())
        monkeypatch.setattr(registry, "_discovered", False)
        return name, root

    yield use
    for mod in [m for m in sys.modules if m.startswith("rt_pkg_")]:
        del sys.modules[mod]


def _loaded(pkg: str) -> set[str]:
    return {m for m in sys.modules if m == pkg or m.startswith(pkg + ".")}


# ------------------------------------------------------------------------------- the real tree
def test_manifest_agrees_with_the_decorators():
    # Prepare / Execute: import every module (the decorators fill the registry) and read the index
    failed = registry.discover()
    man = registry.manifest(refresh=True)
    live = {(k, n, e.module): e for k, table in registry._REGISTRY.items() for n, e in table.items()
            if e.module.startswith("components.")}
    listed = {(e.kind, e.name, e.module): e for e in man.listings}
    # Assert: the same (kind, name, module) set, and the same fields `dtlab list` shows
    assert failed == [] and man.broken == []
    assert man.dynamic == [], "every registration in the tree is literal: dtlab list imports nothing"
    assert set(listed) == set(live)
    assert len(man.listings) == len(listed), "no (kind, name) is registered twice"
    for key, e in live.items():
        lst = listed[key]
        assert (lst.summary, lst.meta, lst.file) == (e.summary, e.meta, e.file), key
        params = getattr(e.obj, "params", None)
        if isinstance(params, type):
            module, _, cls = lst.params.rpartition(".")
            assert getattr(importlib.import_module(module), cls) is params, key
    assert set(registry.families()) == {p.parent.name for p in (ROOT / "components").glob("*/__init__.py")}


def test_list_and_completion_import_no_registering_module():
    # Execute: the two commands in a fresh interpreter, then what it imported from components/
    code = ("import io, sys, contextlib\nfrom pipelines.cli import main\n"
            "with contextlib.redirect_stdout(io.StringIO()):\n    main(['list']); main(['completion', 'bash'])\n"
            "print(sorted(m for m in sys.modules if m.startswith('components')))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=ROOT,
                       env={**os.environ, "COLUMNS": "200"})
    # Assert: every entry was listed from the source; no module that registers one was imported
    assert r.returncode == 0, r.stderr
    imported = set(eval(r.stdout.strip().splitlines()[-1]))
    registering = {e.module for e in registry.manifest().listings}
    assert "components.core.registry" in imported and imported & registering == set()


# ------------------------------------------------------------------------- the scan and lookups
def test_scan_reads_every_registration_form(scratch_registry):
    # Prepare
    scratch_registry({"fam_a/__init__.py": "", "fam_a/good.py": GOOD, "fam_a/svc.py": SERVICE})
    # Execute
    techniques, codecs, services = (registry.entries(k) for k in ("technique", "codec", "service"))
    # Assert: decorator, @register with a docstring summary, a loop over a literal table, register(...)(obj)
    assert techniques["rt_good"].summary == "the good one" and techniques["rt_good"].family == "fam_a"
    assert codecs["rt_plain"].summary == "Plain codec: the first docstring line."
    assert (codecs["rt_one"].summary, codecs["rt_two"].summary) == ("first table entry", "second")
    assert codecs["rt_one"].meta == {"family": "fam_a"}
    assert services["rt_svc"].summary == "a served thing"
    assert techniques["rt_good"].file.endswith("fam_a/good.py") and techniques["rt_good"].line == 6


def test_listing_imports_nothing_and_a_lookup_imports_only_its_module(scratch_registry):
    # Prepare
    pkg, _ = scratch_registry({"fam_a/good.py": GOOD, "fam_a/svc.py": SERVICE, "fam_b/other.py": NEW_FAMILY.replace(
        "fam_new", "fam_b")})
    # Execute
    names = registry.names("technique")
    after_listing = _loaded(pkg)
    tech = registry.get_technique("rt_good")
    # Assert
    assert names == ["rt_good", "rt_new"] and after_listing == set()
    assert tech.fn(None, None) == 1
    assert _loaded(pkg) == {pkg, f"{pkg}.fam_a", f"{pkg}.fam_a.good"}


def test_a_broken_module_is_one_line_and_breaks_only_its_own_lookups(scratch_registry):
    # Prepare: one module that does not parse, one that does not import, one good
    pkg, _ = scratch_registry({"fam_a/good.py": GOOD, "fam_a/bad_syntax.py": BAD_SYNTAX,
                               "fam_a/bad_import.py": BAD_IMPORT})
    # Execute
    listed = registry.entries("technique")
    good = registry.get_technique("rt_good")
    with pytest.raises(ConfigError) as missing_dep:
        registry.get_technique("rt_missing_dep", "experiment.variants.v.technique")
    with pytest.raises(ConfigError) as unparsable:
        registry.get_technique("rt_bad", "experiment.variants.w.technique")
    # Assert: listing goes on; the good entry loads; each failure is one line naming the file and the error
    assert set(listed) == {"rt_good", "rt_missing_dep"} and good.name == "rt_good"
    dep = str(missing_dep.value)
    assert dep.startswith("experiment.variants.v.technique='rt_missing_dep': ") and "\n" not in dep
    assert "fam_a/bad_import.py" in dep and "ModuleNotFoundError" in dep and "rt_no_such_dependency" in dep
    bad = str(unparsable.value)
    assert bad.startswith("experiment.variants.w.technique='rt_bad': not found: technique 'rt_bad' is likely in ")
    assert "fam_a/bad_syntax.py" in bad and "SyntaxError" in bad and "\n" not in bad
    lines = sorted(str(b) for b in registry.broken())
    assert len(lines) == 2 and all("\n" not in s for s in lines)
    assert "bad_import.py" in lines[0] and "bad_syntax.py" in lines[1] and "(line 6)" in lines[1]
    assert f"{pkg}.fam_a.bad_syntax" not in sys.modules


def test_list_command_shows_everything_and_one_line_per_broken_module(scratch_registry, capsys, monkeypatch):
    # Prepare
    scratch_registry({"fam_a/good.py": GOOD, "fam_a/bad_syntax.py": BAD_SYNTAX})
    monkeypatch.setenv("COLUMNS", "250")
    from pipelines.cli import cmd_list

    # Execute
    cmd_list(["technique"])
    out = capsys.readouterr().out
    # Assert
    assert "rt_good" in out
    broken = [line for line in out.splitlines() if line.startswith("broken module")]
    assert len(broken) == 1 and "bad_syntax.py" in broken[0] and "SyntaxError" in broken[0]


def test_a_computed_name_falls_back_to_importing_that_module(scratch_registry):
    # Prepare
    pkg, _ = scratch_registry({"fam_a/good.py": GOOD, "fam_a/dyn.py": DYNAMIC})
    # Execute
    man = registry.manifest()
    codecs = registry.entries("codec")
    # Assert: the scan names the module it cannot read; listing imports that one module, and no other
    assert man.dynamic == [f"{pkg}.fam_a.dyn"]
    assert {"rt_dyn_X", "rt_dyn_Y", "rt_plain"} <= set(codecs) and codecs["rt_dyn_X"].summary == "computed name"
    assert f"{pkg}.fam_a.good" not in sys.modules


def test_a_new_family_folder_is_a_family(scratch_registry):
    # Prepare
    scratch_registry({"fam_a/good.py": GOOD, "fam_new/tech.py": NEW_FAMILY})
    # Execute
    tech = registry.get_technique("rt_new")
    # Assert: accepted without any edit to registry.py; a family that is no folder is refused
    assert "fam_new" in registry.families() and registry.FAMILIES == registry.families()
    assert tech.family == "fam_new" and registry.entries("technique")["rt_new"].family == "fam_new"
    with pytest.raises(ValueError, match="nowhere"):
        registry.technique("rt_x", family="nowhere", summary="s")


def test_the_manifest_is_cached_per_file_and_refreshed_when_a_file_changes(tmp_path, monkeypatch):
    # Prepare: a first scan writes the cache file
    name, root = _package(tmp_path, {"fam_a/good.py": GOOD, "fam_a/svc.py": SERVICE})
    cache = tmp_path / "manifest.json"
    first = M.Index(root, name, cache).manifest()
    scanned: list[str] = []
    real_scan = M.scan_source
    monkeypatch.setattr(M, "scan_source", lambda src, module, *a: scanned.append(module) or real_scan(src, module, *a))
    # Execute: a new process (a new Index) with nothing changed, then after one file changes
    again = M.Index(root, name, cache).manifest()
    (root / "fam_a" / "svc.py").write_text(textwrap.dedent(SERVICE).replace('"rt_svc"', '"rt_svc2"') + "\n")
    changed = M.Index(root, name, cache).manifest()
    # Assert: the warm read parses nothing; the edit re-scans exactly that file
    assert again.listings == first.listings
    assert scanned == [f"{name}.fam_a.svc"]
    assert "rt_svc2" in changed.of("service") and "rt_svc" not in changed.of("service")


# -------------------------------------------------------------------------------- the commands
def test_a_broken_technique_fails_only_the_experiments_that_use_it(tmp_path):
    # Prepare: a copy of the repository whose `probe` technique (platform_probe's) does not parse
    copy = tmp_path / "repo"
    for part in ("components", "conf", "pipelines", "hydra_plugins"):
        shutil.copytree(ROOT / part, copy / part, ignore=shutil.ignore_patterns("__pycache__"))
    probe = copy / "components" / "core" / "probe.py"
    probe.write_text(probe.read_text() + "\ndef broken(:\n")
    env = {**os.environ, "DTLAB_REGISTRY_MANIFEST": str(tmp_path / "manifest.json"), "COLUMNS": "250",
           "MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path}/mlflow.db", "DTLAB_CONF_DIR": str(copy / "conf")}

    def cli(*args):
        return subprocess.run([sys.executable, "-m", "pipelines.cli", *args], capture_output=True, text=True,
                              timeout=300, cwd=copy, env=env)

    # Execute
    listing = cli("list")
    uses_it = cli("run", "experiment=platform_probe", "debug=true", f"runs_dir={tmp_path}/runs")
    other = subprocess.run([sys.executable, "-c", "from pipelines.preflight import check; "
                            "print(check(['experiment=error_feedback', 'debug=true'], False)['experiment']['name'])"],
                           capture_output=True, text=True, timeout=300, cwd=copy, env=env)
    # Assert: listing lists the rest and names the module once; the experiment using it fails in one line
    assert listing.returncode == 0, listing.stderr
    assert "error_feedback" in listing.stdout and "prepare_step" in listing.stdout
    assert [line for line in listing.stdout.splitlines() if "probe.py" in line and "SyntaxError" in line] != []
    assert uses_it.returncode == 2 and "Traceback" not in uses_it.stderr
    assert len(uses_it.stderr.strip().splitlines()) == 1
    assert "components/core/probe.py" in uses_it.stderr and "SyntaxError" in uses_it.stderr
    assert other.returncode == 0 and other.stdout.strip() == "error_feedback", other.stderr
