"""`dtlab scoreboard`: one table over every experiment's latest tuned parent run, its history across
code versions, tuned vs off-tuned, the HTML page and the MLflow table; and the sub-study baselines
of the comparison table. Parent runs are written straight into a temporary SQLite store (no Ray)."""
from __future__ import annotations

import io
import json
import subprocess
import sys
import time
from dataclasses import asdict

import pytest
from mlflow.tracking import MlflowClient

from components.core.claims import ClaimOutcome
from components.core.errors import ConfigError
from pipelines import scoreboard as sb
from pipelines.experiment import build_spec
from tests.infra.svc import ROOT, dtlab_env

EXP = "sb_fake"
_T0 = int(time.time() * 1000) - 3_600_000


def fake_parent(client, exp: str, commit: str, claims: list[ClaimOutcome], *, minute: int, dirty: bool = False,
                debug: bool = False, robustness: str | None = None, png: bytes | None = None,
                status: str = "FINISHED") -> str:
    """A parent run as dtlab's report stage leaves it: reproducibility tags and claims.json."""
    e = client.get_experiment_by_name(exp)
    exp_id = e.experiment_id if e else client.create_experiment(exp)
    tags = {"dtlab.kind": "parent", "experiment": exp, "family": "core", "git.commit": commit,
            "git.dirty": str(dirty).lower(), "debug": str(debug)}
    if robustness:
        tags["robustness"] = robustness
    run = client.create_run(exp_id, start_time=_T0 + minute * 60_000, tags=tags,
                            run_name=f"{exp}-{commit[:4]}-{minute}")
    rid = run.info.run_id
    client.log_text(rid, json.dumps([asdict(c) for c in claims]), "claims.json")
    if png is not None:
        client.log_image(rid, _image(png), "plots/loss.png")
    client.set_terminated(rid, status)
    return rid


def _image(seed: bytes):
    import numpy as np

    rng = np.random.default_rng(len(seed))
    return (rng.random((60, 90, 3)) * 255).astype("uint8")


def outcome(name: str, holds: bool, measured: str, premise_holds: bool | None = None, **kw) -> ClaimOutcome:
    return ClaimOutcome(name, "paper says so", measured, holds, True, premise="z.m > 1" if premise_holds is not None else "",
                        premise_holds=premise_holds, **kw)


@pytest.fixture
def client(tmp_path):
    return MlflowClient(tracking_uri=f"sqlite:///{tmp_path}/mlflow.db")


def test_history_across_two_code_versions_and_latest_tuned_run(client):
    # Prepare: the claim fails on commit aaaa, holds on commit bbbb (twice: the newest counts), then a
    # perturbation run, a KILLED parent without claims and a RUNNING one (none is "the latest tuned run")
    fake_parent(client, EXP, "aaaa" * 10, [outcome("gain", False, "[0.01, 3]")], minute=1)
    fake_parent(client, EXP, "bbbb" * 10, [outcome("gain", True, "[0.07, 3]")], minute=2)
    latest = fake_parent(client, EXP, "bbbb" * 10, [outcome("gain", True, "[0.08, 3]")], minute=3, debug=True)
    fake_parent(client, EXP, "bbbb" * 10, [outcome("gain", False, "[0.0, 3]")], minute=4, robustness="other_seeds")
    e = client.get_experiment_by_name(EXP)
    killed = client.create_run(e.experiment_id, start_time=_T0 + 5 * 60_000, tags={"dtlab.kind": "parent"})
    client.set_terminated(killed.info.run_id, "KILLED")  # ended before its report: no claims.json
    client.create_run(e.experiment_id, start_time=_T0 + 6 * 60_000, tags={"dtlab.kind": "parent"})
    # Execute
    rows, runs = sb.collect(client, experiments=[EXP])
    # Assert
    (row,) = rows
    assert runs[EXP].info.run_id == latest == row["run_id"]
    assert row["status"] == "holds" and row["measured"] == "[0.08, 3]" and row["debug"] is True
    assert row["code_version"] == "bbbbbbbbbb" and row["git_commit"] == "bbbb" * 10
    assert [(p["version"], p["status"], p["value"]) for p in row["history"]] == [
        ("aaaaaaaaaa", "fails", 0.01), ("bbbbbbbbbb", "holds", 0.08)]
    assert row["off_tuned"]["perturbations"]["other_seeds"]["status"] == "fails"
    assert (row["off_tuned"]["held"], row["off_tuned"]["judged"]) == (0, 1)


def test_premise_not_met_and_not_run_statuses_and_status_filter(client):
    # Prepare: a failure under an unmet premise, a plain failure, and a claim the run did not judge
    fake_parent(client, EXP, "cccc" * 10, [outcome("setting", False, "1", premise_holds=False),
                                           outcome("technique", False, "2", premise_holds=True),
                                           ClaimOutcome("skipped", "", "n/a", False, True, skipped=True)], minute=1)
    # Execute
    rows, _ = sb.collect(client, experiments=[EXP])
    only_premise, _ = sb.collect(client, experiments=[EXP], status="premise not met")
    # Assert
    assert {r["claim"]: r["status"] for r in rows} == {"setting": "premise not met", "technique": "fails",
                                                       "skipped": "not run"}
    assert [r["claim"] for r in only_premise] == ["setting"]
    never_run = [r for r in sb.collect(client)[0] if r["experiment"] == "platform_probe"]
    assert never_run and all(r["status"] == "not run" and r["paper"] for r in never_run)  # paper text from the YAML
    with pytest.raises(ValueError, match="--experiment 'nope'"):
        sb.collect(client, experiments=["nope"])


def test_stored_claims_of_an_older_version_still_read():
    # Prepare: claims.json as written before premises existed, and one with a key from a newer version
    old = {"name": "c", "paper": "", "measured": "1", "holds": True, "gate": True, "error": "", "skipped": False,
           "cells": []}
    # Execute
    outs = sb.claim_outcomes([old, {**old, "name": "d", "from_the_future": 1}])
    # Assert
    assert [o.status for o in outs] == ["holds", "holds"] and outs[0].premise_holds is None


def test_html_table_plots_sparklines_and_mlflow_table(client, tmp_path):
    # Prepare
    fake_parent(client, EXP, "aaaa" * 10, [outcome("gain", False, "0.01")], minute=1)
    fake_parent(client, EXP, "bbbb" * 10, [outcome("gain", True, "0.07", measured_pm="0.07 ± 0.01")], minute=2,
                png=b"x")
    # Execute
    out = sb.scoreboard(client.tracking_uri, tmp_path / "reports", experiments=[EXP], console=None)
    # Assert: the page holds the row, the plot inlined, and a sparkline with one dot per version
    page = (tmp_path / "reports" / "scoreboard.html").read_text()
    assert "<table id='scoreboard'>" in page and "0.07 ± 0.01" in page
    assert page.count("class='plot'") == 1 and "data:image/png;base64," in page
    assert page.count("<svg class='spark'") == 1 and page.count("<circle") == 2
    run = client.get_run(out["mlflow_run_id"])
    assert run.data.tags["dtlab.kind"] == "scoreboard"
    assert client.get_experiment(run.info.experiment_id).name == sb.SCOREBOARD_EXPERIMENT
    table = json.loads(open(client.download_artifacts(run.info.run_id, "scoreboard.json", str(tmp_path))).read())
    assert table["columns"][:3] == ["experiment", "family", "claim"]
    assert table["data"][0][:3] == [EXP, "core", "gain"] and "holds" in table["data"][0]


def test_cli_json_filters_and_bad_status(client, tmp_path):
    # Prepare
    fake_parent(client, EXP, "aaaa" * 10, [outcome("gain", True, "1")], minute=1)
    cmd = [sys.executable, "-m", "pipelines.cli", "scoreboard", f"runs_dir={tmp_path}",
           f"tracking.uri={client.tracking_uri}"]
    # Execute
    def run(*args):
        return subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=300, env=dtlab_env())

    ok = run(*cmd, "--json", "--experiment", EXP, "--status", "holds", "--no-mlflow")
    bad = run(*cmd, "--status", "maybe")
    helped = run(*cmd[:4], "--help")
    # Assert
    assert ok.returncode == 0, ok.stderr
    assert [(r["experiment"], r["claim"], r["status"]) for r in json.loads(ok.stdout)] == [(EXP, "gain", "holds")]
    assert bad.returncode == 2 and "--status='maybe'" in bad.stderr and "premise not met" in bad.stderr
    assert "--family" in helped.stdout and helped.returncode == 0


def test_terminal_table_shows_premise_and_debug_marker(client):
    from rich.console import Console

    # Prepare
    fake_parent(client, EXP, "aaaa" * 10, [outcome("setting", False, "1", premise_holds=False,
                                                   premise_measured="0.5")], minute=1, debug=True, dirty=True)
    rows, _ = sb.collect(client, experiments=[EXP])
    console = Console(file=io.StringIO(), width=160)
    # Execute
    sb.print_table(rows, console)
    # Assert
    text = console.file.getvalue()
    assert "aaaaaaaaaa+dirty" in text and "DEBUG" in text and "premise not met" in text and "premise NOT MET: z.m > 1 = 0.5" in text


# ------------------------------------------------------------- sub-study baselines (report.baseline mapping)
def _exp(baseline) -> dict:
    return {"name": "x", "seeds": [0], "variants": {v: {"technique": "probe", "role": "technique", "params": {"value": i + 1.0}}
                                                    for i, v in enumerate(("a", "b", "lm_a", "lm_b"))},
            "report": {"baseline": baseline, "table": ["value"]}}


def test_each_sub_study_is_ratioed_to_its_own_baseline():
    from pipelines.outcome import VariantOutcome
    from pipelines.stages.evaluate import comparison

    # Prepare: digits-like variants ratioed to b, LM-like ones to lm_b
    spec = build_spec(_exp({"b": ["a"], "lm_b": ["lm_a"]}))
    outcomes = {}
    for v in spec.variants:
        o = VariantOutcome(v.name, v.technique, v.role, v.family)
        o.result = type("R", (), {"clean_metrics": lambda self, v=v: {"value": v.params.value}})()
        outcomes[v.name] = o
    # Execute
    rows = {r["variant"]: r for r in comparison(spec, outcomes)}
    # Assert
    assert rows["a"]["value/b"] == 0.5 and "value/lm_b" not in rows["a"]
    assert rows["lm_a"]["value/lm_b"] == 0.75 and "value/b" not in rows["lm_a"]


@pytest.mark.parametrize("baseline, key", [({"nope": ["a"]}, "experiment.report.baseline.nope"),
                                           ({"b": ["zzz"]}, "experiment.report.baseline.b"),
                                           ({"b": ["a"], "lm_b": ["a"]}, "experiment.report.baseline.lm_b"),
                                           ({"b": "a"}, "experiment.report.baseline.b")])
def test_bad_baseline_mapping_names_the_key(baseline, key):
    with pytest.raises(ConfigError) as e:
        build_spec(_exp(baseline))
    assert e.value.key == key
