"""The import layers hold: components/ and hydra_plugins/ never import pipelines/ (the launcher and
sweeper share the signal and verbosity plumbing through components.core), and no two project
modules import each other, directly or around a loop, except the registry's index, whose entries
call back into the registry lazily to import their module."""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("components", "pipelines", "hydra_plugins")
ALLOWED_CYCLES = [{"components.core.manifest", "components.core.registry"}]


def _modules() -> dict[str, Path]:
    out = {}
    for pkg in PACKAGES:
        for f in (ROOT / pkg).rglob("*.py"):
            parts = f.relative_to(ROOT).with_suffix("").parts
            out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = f
    return out


def _imports(path: Path, known: set[str]) -> set[str]:
    """Project modules ``path`` imports anywhere in the file (function-level imports included)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        names = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        found |= {n for n in names if n in known}
    return found


def _graph() -> dict[str, set[str]]:
    mods = _modules()
    return {m: _imports(p, set(mods)) - {m} for m, p in mods.items()}


def _cycles(graph: dict[str, set[str]]) -> list[set[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on, out, n = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = n[0]
        n[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = set()
            while True:
                w = stack.pop()
                on.discard(w)
                comp.add(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(comp)

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_lower_layers_never_import_pipelines():
    # Prepare / Execute
    graph = _graph()
    upward = sorted(f"{m} -> {d}" for m, deps in graph.items() if not m.startswith("pipelines")
                    for d in deps if d.startswith("pipelines"))
    # Assert
    assert upward == []


def test_no_import_cycles_but_the_registry_index():
    # Prepare / Execute
    cycles = _cycles(_graph())
    # Assert
    assert [sorted(c) for c in cycles if c not in ALLOWED_CYCLES] == []


def test_the_cycle_finder_finds_a_loop():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [{"a", "b", "c"}]
