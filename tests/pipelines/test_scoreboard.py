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

from components.core.claims import ClaimOutcome
from components.core.errors import ConfigError
from components.core.tracker import ensure_experiment, tracking_client
from pipelines import scoreboard as sb
from pipelines.experiment import build_spec
from tests.infra.svc import ROOT, dtlab_env

EXP = "sb_fake"
_T0 = int(time.time() * 1000) - 3_600_000


def fake_parent(client, exp: str, commit: str, claims: list[ClaimOutcome], *, minute: int, dirty: bool = False,
                debug: bool = False, robustness: str | None = None, png: bytes | None = None,
                status: str = "FINISHED", extra: dict | None = None, inputs: dict | None = None,
                operands: dict | None = None) -> str:
    """A parent run as dtlab's report stage leaves it: reproducibility tags and claims.json (and, when
    given, inputs.json with its hash tag, and claim_operands.json)."""
    exp_id = ensure_experiment(client, exp)   # its files beside the test's store, not in ./mlruns of the checkout
    tags = {"dtlab.kind": "parent", "experiment": exp, "family": "core", "git.commit": commit,
            "git.dirty": str(dirty).lower(), "debug": str(debug)}
    if robustness:
        tags["robustness"] = robustness
    tags.update(extra or {})
    if inputs is not None:
        tags["dtlab.input_hash"] = inputs["digest"]
    run = client.create_run(exp_id, start_time=int(_T0 + minute * 60_000), tags=tags,
                            run_name=f"{exp}-{commit[:4]}-{minute}")
    rid = run.info.run_id
    client.log_text(rid, json.dumps([asdict(c) for c in claims]), "claims.json")
    if inputs is not None:
        client.log_text(rid, json.dumps(inputs), "inputs.json")
    if operands is not None:
        client.log_text(rid, json.dumps(operands), "claim_operands.json")
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
    return tracking_client(f"sqlite:///{tmp_path}/mlflow.db")


def test_history_across_two_code_versions_and_latest_tuned_run(client):
    # Prepare: the claim fails on commit aaaa, holds on commit bbbb (twice: the newest counts), then a
    # perturbation run, a KILLED parent without claims and a RUNNING one (none is "the latest tuned run")
    fake_parent(client, EXP, "aaaa" * 10, [outcome("gain", False, "[0.01, 3]")], minute=1)
    fake_parent(client, EXP, "bbbb" * 10, [outcome("gain", True, "[0.07, 3]")], minute=2)
    latest = fake_parent(client, EXP, "bbbb" * 10, [outcome("gain", True, "[0.08, 3]")], minute=3)
    fake_parent(client, EXP, "bbbb" * 10, [outcome("gain", False, "[0.0, 9]")], minute=3.5, debug=True)
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
    assert row["status"] == "holds" and row["measured"] == "[0.08, 3]" and row["debug"] is False
    assert row["code_version"] == "bbbbbbbbbb" and row["git_commit"] == "bbbb" * 10
    assert [(p["version"], p["status"], p["value"]) for p in row["history"]] == [
        ("aaaaaaaaaa", "fails", 0.01), ("bbbbbbbbbb", "holds", 0.08)]
    assert row["off_tuned"]["perturbations"]["other_seeds"]["status"] == "fails"
    assert (row["off_tuned"]["held"], row["off_tuned"]["judged"]) == (0, 1)


def test_off_tuned_counts_a_failed_run_and_leaves_inconclusive_unjudged(client):
    # Prepare: the tuned run, a perturbation inside the noise floor, one whose run crashed after judging
    fake_parent(client, EXP, "aaaa" * 10, [outcome("gain", True, "1.4x")], minute=1)
    fake_parent(client, EXP, "aaaa" * 10, [outcome("gain", False, "1.1x", inconclusive=True)], minute=2,
                robustness="loaded")
    fake_parent(client, EXP, "aaaa" * 10, [outcome("gain", False, "n/a", error="variant 'b' has no results")],
                minute=3, robustness="crash", status="FAILED")
    # Execute
    (row,), _ = sb.collect(client, experiments=[EXP])
    # Assert: as `dtlab robustness` counts: inconclusive is not a verdict; the crash is, and says so
    off = row["off_tuned"]
    assert (off["held"], off["judged"]) == (0, 1)
    assert sb.off_tuned_text(off) == "0/1 hold · crash: fails (run FAILED) · loaded: inconclusive"


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
    # its files beside the store's database, never in ./mlruns of whatever directory dtlab ran from
    assert run.info.artifact_uri.startswith((tmp_path / "artifacts").resolve().as_uri() + "/"), run.info.artifact_uri
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
    rows, _ = sb.collect(client, experiments=[EXP], include_debug=True)
    console = Console(file=io.StringIO(), width=160)
    # Execute
    sb.print_table(rows, console)
    # Assert
    text = console.file.getvalue()
    assert "aaaaaaaaaa+dirty" in text and "NOT ON THE BOARD (debug)" in text and "premise not met" in text
    assert "premise NOT MET: z.m > 1 = 0.5" in text
    assert "0 gated claims judged" in text  # a debug run is shown, never counted


def test_debug_subset_and_overridden_runs_never_replace_the_board_row(client):
    # Prepare: a full run, then newer debug, only= and experiment-override runs (tags old and new)
    board = fake_parent(client, EXP, "aaaa" * 10, [outcome("gain", True, "1")], minute=1)
    fake_parent(client, EXP, "aaaa" * 10, [outcome("gain", False, "2")], minute=2, debug=True)
    fake_parent(client, EXP, "aaaa" * 10, [outcome("gain", False, "3")], minute=3,
                extra={"dtlab.overrides": "experiment=sb_fake only=[ef,ef21]"})
    fake_parent(client, EXP, "aaaa" * 10, [outcome("gain", False, "4")], minute=4,
                extra={"dtlab.flavour": "full", "dtlab.overrides": "experiment.seeds=[7]"})
    newest = fake_parent(client, EXP, "aaaa" * 10, [outcome("gain", False, "5")], minute=5,
                         extra={"dtlab.flavour": "full", "dtlab.subset": "ef"})
    # Execute
    rows, latest = sb.collect(client, experiments=[EXP])
    with_debug, _ = sb.collect(client, experiments=[EXP], include_debug=True)
    # Assert: the board row is the full run; --include-debug adds the newest other run, marked
    assert latest[EXP].info.run_id == board and [(r["run_id"], r["status"]) for r in rows] == [(board, "holds")]
    assert [(r["run_id"], r["board"], r["off_board"]) for r in with_debug] == [(board, True, ""),
                                                                            (newest, False, "only=ef")]
    assert sb.counts(with_debug)["empirical"]["judged"] == 1


def test_stale_row_names_the_files_that_changed(client):
    from pipelines.inputs import Inputs

    # Prepare: recorded inputs vs this checkout's: one file differs, one import is new
    recorded = {"digest": "d1", "config": "c", "version": "1", "files": {"components/a.py": "x", "components/b.py": "y"}}
    current = Inputs("d2", "c", "1", {"components/a.py": "x", "components/b.py": "z", "components/c.py": "w"})
    fake_parent(client, EXP, "aaaa" * 10, [outcome("gain", True, "1")], minute=1, inputs=recorded)
    # Execute
    stale, _ = sb.collect(client, experiments=[EXP], current=lambda e: current)
    fresh, _ = sb.collect(client, experiments=[EXP], current=lambda e: Inputs.from_json(recorded))
    # Assert
    assert stale[0]["stale"] == ["components/b.py", "components/c.py (new import)"]
    assert fresh[0]["stale"] == []


def test_a_perturbation_run_on_other_code_is_marked_stale_and_not_counted(client):
    from pipelines.inputs import Inputs

    # Prepare: the tuned run on this checkout's code; other_seeds on this code (its config differs, as every
    # perturbation's does); sheet_schedule on code where one file has changed since
    current = Inputs("d-tuned", "c-tuned", "1", {"components/a.py": "x", "components/b.py": "y"})
    fake_parent(client, EXP, "bbbb" * 10, [outcome("gain", True, "1")], minute=3, inputs=current.to_json())
    fake_parent(client, EXP, "bbbb" * 10, [outcome("gain", False, "0.5")], minute=4, robustness="other_seeds",
                inputs={"digest": "d-seeds", "config": "c-seeds", "version": "1", "files": dict(current.files)})
    fake_parent(client, EXP, "aaaa" * 10, [outcome("gain", True, "2")], minute=2, robustness="sheet_schedule",
                inputs={"digest": "d-old", "config": "c-sheet", "version": "1",
                        "files": {"components/a.py": "old", "components/b.py": "y"}})
    # Execute
    (row,), _ = sb.collect(client, experiments=[EXP], current=lambda e: current)
    # Assert: both shown; only the one on this code counted; the stale one names what changed
    off = row["off_tuned"]
    assert off["perturbations"]["other_seeds"]["stale"] == []
    assert off["perturbations"]["sheet_schedule"]["stale"] == ["components/a.py"]
    assert (off["held"], off["judged"]) == (0, 1)
    assert sb.off_tuned_text(off) == "0/1 hold · other_seeds: fails · sheet_schedule: holds (stale)"


def test_figures_are_labelled_and_accounting_claims_counted_apart(client, monkeypatch):
    from rich.console import Console

    # Prepare: a claim without measured: (its holds operands recorded), a list measured:, an accounting
    # claim, and a status another version may add
    monkeypatch.setattr(sb, "_experiment_configs", lambda: {EXP: {"claims": {
        "bare": {"holds": "a.m >= 2 * b.m"},
        "listed": {"holds": "a.m > 0", "measured": "[a.m, b.m / a.m]"},
        "bytes": {"holds": "a.bytes <= b.bytes / 12", "kind": "accounting"},
        "timed": {"holds": "a.t < b.t"}}}})
    fake_parent(client, EXP, "aaaa" * 10, [outcome("bare", True, ""), outcome("listed", True, "[4, 0.5]"),
                                           outcome("bytes", True, "0.08"),
                                           ClaimOutcome("timed", "", "", False, True)], minute=1,
                operands={"bare": [["a.m", "4"], ["b.m", "2"]]})
    rows, _ = sb.collect(client, experiments=[EXP])
    for r in rows:  # a status this version does not know, counted all the same
        r["status"] = "inconclusive" if r["claim"] == "timed" else r["status"]
    console = Console(file=io.StringIO(), width=200)
    # Execute
    sb.print_table(rows, console)
    c = sb.counts(rows)
    # Assert
    by = {r["claim"]: r for r in rows}
    assert by["bare"]["measured_labelled"] == "a.m = 4\nb.m = 2"
    assert by["listed"]["measured_labelled"] == "a.m = 4\nb.m / a.m = 0.5"
    assert (c["empirical"]["judged"], c["empirical"]["holds"], c["empirical"]["inconclusive"]) == (3, 2, 1)
    assert (c["accounting"]["judged"], c["accounting"]["holds"]) == (1, 1)
    text = console.file.getvalue()
    assert "3 gated claims judged: 2 holds · 0 fails · 0 premise not met · 1 inconclusive" in text
    assert "accounting checks (true by construction): 1/1 hold" in text and "b.m / a.m = 0.5" in text


def test_holds_operands_are_named_with_their_values():
    from components.core.claims import Claim
    from pipelines.figures import claim_operands, operands

    # Prepare
    grid = Claim("g", "a_{p}.m > b.m", over=("p",), axes=(("p", ("x", "y")),))
    paired = Claim("p", "paired(a.m - b.m) > 2 * paired_se(a.m - b.m) and a.missing > 0")
    metrics = {"a_x": {"m": 3.0}, "a_y": {"m": 1.0}, "b": {"m": 2.0}, "a": {"m": 2.0}}
    seeds = {"a": {0: {"m": 2.0}, 1: {"m": 4.0}}, "b": {0: {"m": 1.0}, 1: {"m": 1.0}}}
    # Execute
    ops = claim_operands([grid, paired, Claim("m", "a.m > 0", measured="a.m")], metrics, seeds)
    # Assert: every operand by name, per cell; a metric not reported reads n/a; claims with measured: skipped
    assert operands("max(a.m, b.n) + 2 * c.k") == ["a.m", "b.n", "c.k"]
    assert operands("seed_max(a.m - b.m) < c.k") == ["seed_max(a.m - b.m)", "c.k"]   # the worst seed is one figure
    assert ops["g"] == [["x: a_x.m", "3"], ["x: b.m", "2"], ["y: a_y.m", "1"], ["y: b.m", "2"]]
    assert ops["p"] == [["paired(a.m - b.m)", "2"], ["paired_se(a.m - b.m)", "1"], ["a.missing", "n/a"]]
    assert "m" not in ops


def test_claim_kind_is_checked():
    exp = {"name": "x", "variants": {"a": {"technique": "probe", "params": {"value": 1.0}}},
           "claims": {"c": {"holds": "a.value > 0", "kind": "bookkeeping"}}}
    with pytest.raises(ConfigError) as e:
        build_spec(exp)
    assert e.value.key == "experiment.claims.c.kind" and "accounting" in e.value.allowed
    exp["claims"]["c"]["kind"] = "accounting"
    assert build_spec(exp).claim_kinds == {"c": "accounting"}


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


def test_end_of_run_table_shows_the_premise_value_and_the_holds_operands():
    from rich.console import Console

    from pipelines.live import claim_defs, claims_table

    # Prepare: a claim without measured: whose premise is not met
    from components.core.claims import Claim

    claim = Claim("gain", "a.m >= b.m", premise="b.m > 1", premise_measured="b.m")
    out = ClaimOutcome("gain", "", "", False, True, premise="b.m > 1", premise_holds=False, premise_measured="0.5")
    console = Console(file=io.StringIO(), width=200)
    # Execute
    console.print(claims_table([out], defs=claim_defs([claim]), operands={"gain": [["a.m", "0.4"], ["b.m", "0.5"]]}))
    # Assert
    text = console.file.getvalue()
    assert "premise NOT MET: b.m > 1 = 0.5" in text and "a.m = 0.4" in text and "b.m = 0.5" in text


def test_compare_two_runs_side_by_side_and_refuses_two_experiments(client, tmp_path):
    from pipelines import compare

    # Prepare: two runs of one experiment (the second a multirun job), one of another
    a = fake_parent(client, EXP, "aaaa" * 10, [outcome("gain", True, "0.07")], minute=1)
    b = fake_parent(client, EXP, "bbbb" * 10, [outcome("gain", False, "0.01")], minute=2, extra={"hydra.job": "1"})
    other = fake_parent(client, "sb_other", "aaaa" * 10, [outcome("gain", True, "1")], minute=3)
    for rid, v in ((a, 2.0), (b, 3.0)):
        client.log_text(rid, json.dumps([{"variant": "x", "role": "technique", "loss": v}]), "comparison.json")
    # Execute
    p = compare.pair(client, a[:10], f"{EXP}@1")
    page = compare.compare(client.tracking_uri, [a, b], str(tmp_path))
    # Assert
    assert (p["a"]["run_id"], p["b"]["run_id"]) == (a, b)
    assert [(r["claim"], r["a"]["status"], r["b"]["status"]) for r in p["claims"]] == [("gain", "holds", "fails")]
    assert p["metrics"] == [{"variant": "x", "metric": "loss", "a": 2.0, "b": 3.0, "b/a": 1.5}]
    assert "holds" in open(page).read()
    with pytest.raises(ValueError, match="a run of experiment 'sb_fake' like RUN_A"):
        compare.pair(client, a, other)
