"""`dtlab prepare`: an experiment's prepare entries built into the shared cache through the run's own
Ray tasks, and nothing else (no MLflow run); what `dtlab reproduce` runs before each configuration."""
from __future__ import annotations

import subprocess
import sys

from pipelines import config, dag
from tests.infra.svc import ROOT, dtlab_env


def test_prepare_builds_what_is_missing_once_and_opens_no_mlflow_run(ray_session, tmp_path):
    # Prepare: an empty cache, and a tracking store that must stay untouched
    cfg = config.compose(["experiment=error_feedback", "debug=true", f"runs_dir={tmp_path}",
                          f"tracking.uri=sqlite:///{tmp_path}/mlflow.db"])
    # Execute
    first = dag.prepare_only(cfg)
    again = dag.prepare_only(cfg)
    # Assert: built once, found the second time (without Ray work); no store was created
    assert first["experiment"] == "error_feedback" and first["built"] == ["problems@0"] and first["needed"] == 1
    assert again["built"] == [] and again["needed"] == 1
    assert any((tmp_path / "cache").iterdir()) and not (tmp_path / "mlflow.db").exists()


def test_prepare_without_an_experiment_is_one_line_and_exit_2():
    # Execute
    r = subprocess.run([sys.executable, "-m", "pipelines.cli", "prepare", "debug=true"], cwd=ROOT, env=dtlab_env(),
                       capture_output=True, text=True, timeout=120)
    # Assert
    assert r.returncode == 2 and r.stderr.strip().count("\n") == 0
    assert "prepare: name an experiment (experiment=NAME); usage: dtlab prepare" in r.stderr


def _probe_experiment(name: str, prepare: dict, reads: dict) -> dict:
    return {"name": name, "family": "core", "summary": "prepare pass check", "seeds": [0, 1],
            "resources": {"num_cpus": 0.5}, "prepare": prepare, "common": {"probe": {"seconds": 0.0, "steps": 1}},
            "variants": {"reader": {"technique": "probe_reader", "role": "technique", "inputs": reads}}}


def test_one_pass_for_two_experiments_builds_a_shared_entry_once_and_says_for_whom(ray_session, tmp_path):
    # Prepare: two experiments whose entries have other names but the same steps, params and upstream (so
    # the same cache keys): a table and a draw per seed from it. Their configs as `dtlab prepare
    # experiment=a,b` composes them.
    table = {"step": "probe_table", "params": {"n": 4}}
    a = _probe_experiment("pass_a", {"table": table, "draw": {"step": "probe_draw", "params": {}}},
                          {"table": "table", "draw": "draw"})
    b = _probe_experiment("pass_b", {"rows": table, "d": {"step": "probe_draw", "inputs": {"table": "rows"}, "params": {}}},
                          {"table": "rows", "draw": "d"})
    cfgs = []
    for exp in (a, b):
        cfg = config.compose(["experiment=platform_probe", f"runs_dir={tmp_path}"])
        cfg["experiment"] = exp
        cfgs.append(cfg)
    # Execute: the pass, then each experiment's own pass
    out = dag.prepare_many(cfgs)
    after = [dag.prepare_only(cfg) for cfg in cfgs]
    # Assert: each shared entry was built once, for the first experiment that needs it; nothing is left to build
    assert out["experiments"] == ["pass_a", "pass_b"] and out["needed"] == 6
    assert out["built"] == {"pass_a": ["table", "draw@0", "draw@1"]} and out["compute_s"] >= 0
    assert list(out["compute_by_experiment"]) == ["pass_a"]     # the shared steps' seconds go to who built them
    assert len([p for p in (tmp_path / "cache").iterdir() if not p.name.endswith(".work")]) == 3
    assert [o["built"] for o in after] == [[], []]


def test_a_pass_loads_a_cached_entry_only_where_a_missing_one_reads_it(ray_session, tmp_path):
    # Prepare: the table already cached (built alone), the draws that read it not yet
    a = _probe_experiment("pass_a", {"table": {"step": "probe_table", "params": {"n": 4}},
                                     "draw": {"step": "probe_draw", "params": {}}}, {"table": "table", "draw": "draw"})
    cfg = config.compose(["experiment=platform_probe", f"runs_dir={tmp_path}"])
    cfg["experiment"] = a
    _, state = dag.prepare_local(dag.validate(cfg), "table", tmp_path)
    # Execute
    out = dag.prepare_many([cfg])
    # Assert: only the draws were built, each from the cached table (its sum reached them)
    assert state == "miss" and out["built"] == {"pass_a": ["draw@0", "draw@1"]}
    spec = dag.validate(cfg)
    draws = [dag.prepare_local(spec, "draw", tmp_path, seed=s) for s in (0, 1)]
    assert [(d["table_sum"], hit) for d, hit in draws] == [(6.0, "hit"), (6.0, "hit")]


def test_an_unknown_experiment_among_several_is_one_line_and_exit_2():
    # Execute
    r = subprocess.run([sys.executable, "-m", "pipelines.cli", "prepare", "experiment=error_feedback,no_such"],
                       cwd=ROOT, env=dtlab_env(), capture_output=True, text=True, timeout=120)
    # Assert: the bad name, before anything was built
    assert r.returncode == 2 and r.stderr.strip().count("\n") == 0 and "no_such" in r.stderr
