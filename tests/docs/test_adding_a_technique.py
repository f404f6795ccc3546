"""docs/adding-a-technique.md works as written: its module sample names nothing it does not import
or define (beyond the placeholders the sample leaves to the reader), and a toy technique added the
way it says (a module, its experiment YAML, its test; no shared file) is listed by `dtlab list`,
runs in its debug flavour and passes its own test, in a temporary copy of the repository."""
from __future__ import annotations

import ast
import builtins
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.infra.svc import ROOT, dtlab_env

DOC = ROOT / "docs" / "adding-a-technique.md"
# what the module sample computes inside its elided loop ("..."): left to the reader on purpose
PLACEHOLDERS = {"loss", "losses", "ps", "accs", "rows", "png_bytes"}


def _python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", DOC.read_text(), flags=re.S)


def _undefined(tree: ast.Module) -> set[str]:
    """Names a module loads that nothing in it binds (imports, defs, classes, assignments,
    parameters, loop and comprehension targets) and that are not builtins."""
    bound, loaded = set(dir(builtins)), set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            bound |= {(a.asname or a.name).split(".")[0] for a in node.names}
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound.add(node.name)
        elif isinstance(node, ast.arg):
            bound.add(node.arg)
        elif isinstance(node, ast.Name):
            (bound if isinstance(node.ctx, (ast.Store, ast.Del)) else loaded).add(node.id)
    return loaded - bound


def test_the_module_sample_imports_what_it_uses():
    # Prepare: the first code block is the technique module
    module = _python_blocks()[0]
    # Execute
    missing = _undefined(ast.parse(module))
    # Assert: only the elided loop's own results are left undefined (np, RunContext: imported)
    assert missing <= PLACEHOLDERS, f"the sample uses names it never imports: {sorted(missing - PLACEHOLDERS)}"
    assert "RunContext" in module and "import numpy as np" in module


TOY_MODULE = '''"""Toy technique for the docs test: a noisy sum whose noise shrinks with iters."""
from dataclasses import dataclass

import numpy as np

from components.core.context import RunContext
from components.core.errors import require
from components.core.registry import technique
from components.core.result import Result


@dataclass
class ToySumParams:
    iters: int = 10
    scale: float = 1.0

    def check(self):
        require(self.iters >= 1, "iters", self.iters, "a positive integer")


@technique("toy_sum", family="toyfam", params=ToySumParams, summary="Docs test: a noisy sum.")
def run_toy_sum(p: ToySumParams, ctx: RunContext) -> Result:
    rng = np.random.default_rng(ctx.seed)
    losses = []
    for step in range(p.iters):
        losses.append(float(p.scale * abs(rng.standard_normal()) / (step + 1)))
        ctx.progress(step + 1, p.iters, loss=losses[-1])
    return Result(metrics={"final_loss": losses[-1]}, series={"loss": losses})
'''

TOY_YAML = """name: toy_sum
family: toyfam
summary: Docs test experiment.
seeds: [0, 1, 2]
resources: {num_cpus: 1, nodes: 0}
variants:
  base: {technique: toy_sum, role: baseline, params: {iters: 2}}
  ours: {technique: toy_sum, role: technique, params: {iters: 50}}
claims:
  lower_loss:
    paper: "more iterations, lower loss"
    holds: "ours.final_loss < base.final_loss"
    measured: "[ours.final_loss, base.final_loss]"
report:
  baseline: base
  table: [final_loss]
  plots:
    - {kind: series, metric: loss, logy: true}
debug:
  seeds: [0]
"""

TOY_TEST = '''from components.core.context import RunContext
from components.toyfam.toy_sum import ToySumParams, run_toy_sum


def test_toy_sum_is_a_function_of_its_seed():
    a = run_toy_sum(ToySumParams(iters=5), RunContext(seed=3))
    b = run_toy_sum(ToySumParams(iters=5), RunContext(seed=3))
    assert a.metrics == b.metrics and len(a.series["loss"]) == 5
'''


@pytest.mark.slow
def test_a_technique_added_as_the_doc_says_is_listed_runs_and_touches_no_shared_file(tmp_path):
    # Prepare: a copy of the repository's tracked files, committed, then the toy's four files
    repo = tmp_path / "repo"
    files = subprocess.run(["git", "-C", str(ROOT), "ls-files", "-z"], capture_output=True, text=True,
                           check=True).stdout.split("\0")
    for f in filter(None, files):
        if (ROOT / f).is_file():
            (repo / f).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / f, repo / f)
    git = ["git", "-C", str(repo), "-c", "user.email=t@t", "-c", "user.name=t"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-qm", "copy"], check=True)
    (repo / "components" / "toyfam").mkdir()
    (repo / "components" / "toyfam" / "__init__.py").write_text('"""Toy family (docs test)."""\n')
    (repo / "components" / "toyfam" / "toy_sum.py").write_text(TOY_MODULE)
    (repo / "conf" / "experiment" / "toy_sum.yaml").write_text(TOY_YAML)
    (repo / "tests" / "toyfam").mkdir()
    (repo / "tests" / "toyfam" / "__init__.py").write_text("")
    (repo / "tests" / "toyfam" / "test_toy_sum.py").write_text(TOY_TEST)
    env = {**dtlab_env(), "PYTHONPATH": str(repo), "XDG_CACHE_HOME": str(tmp_path / "cache"), "COLUMNS": "300",
           "MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path}/mlflow.db"}
    env.pop("RAY_ADDRESS", None)

    def dtlab(*args):
        return subprocess.run([sys.executable, "-m", "pipelines.cli", *args], cwd=repo, env=env,
                              capture_output=True, text=True, timeout=600)

    # Execute
    listed = dtlab("list")
    ran = dtlab("run", "experiment=toy_sum", "debug=true", f"runs_dir={tmp_path / 'runs'}", "cluster.include_dashboard=false")
    own_test = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/toyfam"],
                              cwd=repo, env=env, capture_output=True, text=True, timeout=300)
    status = subprocess.run([*git, "status", "--porcelain", "--untracked-files=all"], capture_output=True,
                            text=True, check=True).stdout.split("\n")
    # Assert: listed with its file, the debug run holds its claim, its test passes, only new files
    assert listed.returncode == 0 and "toy_sum" in listed.stdout and "toyfam/toy_sum.py" in listed.stdout, \
        [line for line in listed.stdout.splitlines() if "toy" in line or "experiments" in line]
    assert ran.returncode == 0, ran.stdout[-2000:] + ran.stderr[-2000:]
    assert "lower_loss" in ran.stdout
    assert own_test.returncode == 0, own_test.stdout[-2000:]
    changed = sorted(line[3:] for line in status if line.strip())
    assert changed == ["components/toyfam/__init__.py", "components/toyfam/toy_sum.py", "conf/experiment/toy_sum.yaml",
                       "tests/toyfam/__init__.py", "tests/toyfam/test_toy_sum.py"], changed
    assert os.path.exists(repo / "components" / "toyfam" / "toy_sum.py")
