"""`dtlab reproduce`: what is current (input hashes), what runs and why, RESULTS.md generated from a
recorded store byte for byte, `--check` from the file alone, bad input, Ctrl-C. Parent runs are
written straight into a temporary SQLite store (no Ray); the platform_probe technique is imported
directly so that its inputs are computed without importing all of components/."""
from __future__ import annotations

import io
import json
import subprocess
import sys
from types import SimpleNamespace

import pytest
from rich.console import Console

import components.core.probe  # noqa: F401 - registers `probe` (platform_probe's only technique)
from components.core.claims import ClaimOutcome
from components.core.tracker import tracking_client
from pipelines import config, reproduce, results_md
from pipelines.inputs import (HASH_ERROR_TAG, HASH_TAG, LEGACY_HASH_TAG, Inputs, changed, config_hash, of_config,
                             upgraded)
from tests.infra.svc import ROOT, dtlab_env
from tests.pipelines.test_scoreboard import fake_parent

EXP = "platform_probe"


@pytest.fixture
def client(tmp_path):
    return tracking_client(f"sqlite:///{tmp_path}/mlflow.db")


@pytest.fixture(scope="module")
def probe_inputs() -> Inputs:
    return of_config(config.compose([f"experiment={EXP}"]))


def _claims(holds: bool = True) -> list[ClaimOutcome]:
    return [ClaimOutcome("values_ordered", "probe values are reported as configured", "[1, 2, 3, 4]", holds, True)]


def _store(client, inputs: Inputs) -> None:
    """A board run, a newer debug run (never on the board) and a robustness run, as dtlab leaves them."""
    rec = inputs.to_json()
    fake_parent(client, EXP, "aaaa" * 10, _claims(), minute=1, inputs=rec, png=b"p",
                extra={"dtlab.flavour": "full", "dtlab.machine": "2 cores · 8 GiB · no GPU"})
    fake_parent(client, EXP, "aaaa" * 10, _claims(False), minute=2, debug=True, extra={"dtlab.flavour": "debug"})
    fake_parent(client, EXP, "aaaa" * 10, _claims(False), minute=3, robustness="noisy_d", inputs=rec)


def test_results_md_is_the_same_bytes_from_the_same_store(client, tmp_path, probe_inputs):
    # Prepare
    _store(client, probe_inputs)
    current = {EXP: probe_inputs}.get
    # Execute: two generations from one store
    first = results_md.write(client, tmp_path / "a" / "RESULTS.md", current=current)
    again = results_md.write(client, tmp_path / "b" / "RESULTS.md", current=current)
    text = (tmp_path / "a" / "RESULTS.md").read_text()
    # Assert: byte for byte; the board run (not the newer debug run); figures labelled; plots linked
    assert text == (tmp_path / "b" / "RESULTS.md").read_text()
    assert first["experiments"] == again["experiments"]
    section = text.split(f"## {EXP}", 1)[1]
    assert "a.value = 1<br>b.value = 2<br>c.value = 3<br>d.value = 4" in section
    assert "| values_ordered | probe values are reported as configured |" in section and "| holds |" in section
    assert "| fails" in section  # the noisy_d perturbation's column
    assert f"[{EXP}](#{EXP}) |" in text and "0/1 |" in text  # robustness k/n in the summary row
    assert "2 cores · 8 GiB · no GPU" in text and "DEBUG FLAVOUR" not in text
    assert "results/plots/platform_probe/loss.png" in text
    assert (tmp_path / "a" / "results" / "plots" / EXP / "loss.png").exists()
    flavour, recorded = results_md.read_inputs(text)
    assert flavour == "full" and recorded[EXP]["digest"] == probe_inputs.digest


def test_a_perturbation_whose_run_failed_counts_and_is_marked(client, tmp_path, probe_inputs):
    # Prepare: the board run, then c_crashes as `dtlab robustness` leaves it: a FAILED parent whose report
    # judged the claim (fails: variant c has no results), on a newer code version than the board run
    _store(client, probe_inputs)
    fake_parent(client, EXP, "bbbb" * 10, _claims(False), minute=4, robustness="c_crashes", status="FAILED",
                inputs=probe_inputs.to_json())
    # Execute
    model = results_md.write(client, tmp_path / "RESULTS.md", current={EXP: probe_inputs}.get)
    text = (tmp_path / "RESULTS.md").read_text()
    # Assert: both perturbations judged (0/2, not 0/1), the crash marked, each run's code version named
    (entry,) = [e for e in model["experiments"] if e["name"] == EXP]
    assert (entry["robustness"]["k"], entry["robustness"]["n"]) == (0, 2)
    assert "| fails (run FAILED) | fails |" in text  # columns c_crashes, noisy_d
    assert "c_crashes (code bbbbbbbbbb" in text and ", run FAILED)" in text
    assert "- **Code version:** aaaaaaaaaa" in text and "robustness runs: aaaaaaaaaa, bbbbbbbbbb" in text


def test_a_perturbation_on_code_that_changed_since_is_listed_stale_and_not_counted(client, tmp_path, probe_inputs):
    # Prepare: the board run, then old_code: a perturbation whose run recorded another probe.py
    _store(client, probe_inputs)
    old = probe_inputs.to_json()
    old["files"] = {k: ("0" * 16 if k.endswith("probe.py") else v) for k, v in old["files"].items()}
    fake_parent(client, EXP, "cccc" * 10, _claims(True), minute=5, robustness="old_code", inputs=old)
    # Execute
    model = results_md.write(client, tmp_path / "RESULTS.md", current={EXP: probe_inputs}.get)
    text = (tmp_path / "RESULTS.md").read_text()
    carried = results_md.write(tracking_client(f"sqlite:///{tmp_path}/empty.db"), tmp_path / "RESULTS.md",
                               current={EXP: probe_inputs}.get)
    # Assert: shown with its mark, counted out (0/1: noisy_d alone), and the mark survives being carried
    (entry,) = [e for e in model["experiments"] if e["name"] == EXP]
    assert (entry["robustness"]["k"], entry["robustness"]["n"]) == (0, 1)
    assert entry["robustness"]["labels"] == ["noisy_d", "old_code"] and entry["robustness"]["runs"]["old_code"]["stale"]
    assert "old_code (code cccccccccc" in text and "stale: its code has changed since, not counted)" in text
    assert "| fails | holds (stale) |" in text          # columns noisy_d, old_code
    (kept,) = [e for e in carried["experiments"] if e["name"] == EXP]
    assert kept["robustness"]["runs"]["old_code"]["stale"] and (kept["robustness"]["k"], kept["robustness"]["n"]) == (0, 1)


def test_check_passes_for_current_inputs_and_names_a_changed_file(client, tmp_path, probe_inputs):
    # Prepare: RESULTS.md recording this checkout's inputs, and one whose record of probe.py differs
    # (what an edit to components/core/probe.py after the run looks like)
    _store(client, probe_inputs)
    path = tmp_path / "RESULTS.md"
    results_md.write(client, path, current={EXP: probe_inputs}.get)
    edited = dict(probe_inputs.files, **{"components/core/probe.py": "0" * 16})
    old = Inputs("0" * 16, probe_inputs.config, probe_inputs.version, edited).to_json()
    stale = tmp_path / "stale.md"
    stale.write_text(path.read_text().replace(json.dumps({"experiment": EXP, **probe_inputs.to_json(),
                                                          "overrides": [f"experiment={EXP}"]}, sort_keys=True),
                                              json.dumps({"experiment": EXP, **old, "overrides": [f"experiment={EXP}"]},
                                                         sort_keys=True)))
    console = Console(file=io.StringIO(), width=200)
    # Execute
    ok = reproduce.check(str(path), console)
    bad = reproduce.check(str(stale), console)
    # Assert
    out = console.file.getvalue()
    assert ok == 0 and bad == 1
    assert f"stale {EXP}: components/core/probe.py" in out and "0/1 recorded experiment(s) current" in out


def _header_and_summary(text: str) -> list[str]:
    """The header's and summary line's aggregates (code versions, dates, machine, wall, counts)."""
    return [line for line in text.splitlines() if line.startswith(("- **", "**"))]


def _old_results(client, tmp_path, probe_inputs):
    """A RESULTS.md written from a store with the board run, and an empty store (a fresh clone's)."""
    _store(client, probe_inputs)
    path = tmp_path / "RESULTS.md"
    results_md.write(client, path, current={EXP: probe_inputs}.get)
    return path, path.read_text(), tracking_client(f"sqlite:///{tmp_path}/empty.db")


def test_a_current_section_is_carried_into_a_file_written_from_a_store_without_it(client, tmp_path, probe_inputs):
    # Prepare: the file as a committed board leaves it; a store that lacks its run
    path, old, empty = _old_results(client, tmp_path, probe_inputs)
    # Execute: re-write it from the empty store, the inputs unchanged
    model = results_md.write(empty, path, current={EXP: probe_inputs}.get)
    text = path.read_text()
    # Assert: the section kept with one mark, the row marked, the counts as before, the inputs still recorded
    old_section = old.split(f"## {EXP}\n", 1)[1].split("\n## ", 1)[0].split("<details>", 1)[0]
    new_section = text.split(f"## {EXP}\n", 1)[1].split("\n## ", 1)[0].split("<details>", 1)[0]
    assert new_section.count(results_md.CARRIED) == 1 and text.count(results_md.CARRIED) == 1
    assert new_section.replace(f" · {results_md.CARRIED}", "") == old_section
    assert text.count(f"[{EXP}](#{EXP}) (carried) |") == 1 and "0/1 |" in text
    assert _header_and_summary(text) == [line.replace("experiments ·", "experiments (1 carried from the previous "
                                                      "RESULTS.md) ·") for line in _header_and_summary(old)]
    assert "**1 gated claims judged: 1 holds · 0 fails" in text and "2 cores · 8 GiB · no GPU" in text
    assert results_md.read_inputs(text) == results_md.read_inputs(old)
    (entry,) = [e for e in model["experiments"] if e["name"] == EXP]
    assert entry["counts"]["holds"] == 1 and entry["carried"]


@pytest.mark.parametrize("change", ["inputs", "flavour"])
def test_a_section_whose_inputs_changed_or_of_another_flavour_is_not_carried(client, tmp_path, probe_inputs, change):
    # Prepare: the old file; this checkout's inputs differ in one file (or a debug board is written over it)
    path, old, empty = _old_results(client, tmp_path, probe_inputs)
    moved = Inputs("f" * 16, probe_inputs.config, probe_inputs.version,
                   dict(probe_inputs.files, **{"components/core/probe.py": "1" * 16}))
    # Execute
    results_md.write(empty, path, "full" if change == "inputs" else "debug",
                     current={EXP: moved if change == "inputs" else probe_inputs}.get)
    text = path.read_text()
    # Assert: not run, nothing carried, no recorded inputs
    assert "carried" not in text and f"## {EXP}\n\nNot run." in text
    assert "0 of " in text and "**0 gated claims judged" in text
    assert EXP not in results_md.read_inputs(text)[1]


def test_writing_a_carried_file_again_gives_the_same_bytes(client, tmp_path, probe_inputs):
    # Prepare: the old file, carried once
    path, _, empty = _old_results(client, tmp_path, probe_inputs)
    results_md.write(empty, path, current={EXP: probe_inputs}.get)
    first = path.read_bytes()
    # Execute: again from the same store
    results_md.write(empty, path, current={EXP: probe_inputs}.get)
    # Assert: byte for byte, still one mark each
    text = path.read_text()
    assert path.read_bytes() == first
    assert text.count(results_md.CARRIED) == 1 and text.count("(carried)") == 1


def test_a_run_in_the_store_replaces_the_carried_section(client, tmp_path, probe_inputs):
    # Prepare: the old file, carried once; then a new store with a newer board run (another commit)
    path, _, empty = _old_results(client, tmp_path, probe_inputs)
    results_md.write(empty, path, current={EXP: probe_inputs}.get)
    fresh = tracking_client(f"sqlite:///{tmp_path}/fresh.db")
    fake_parent(fresh, EXP, "cccc" * 10, _claims(False), minute=5, inputs=probe_inputs.to_json(),
                extra={"dtlab.flavour": "full"})
    # Execute
    results_md.write(fresh, path, current={EXP: probe_inputs}.get)
    text = path.read_text()
    # Assert: the store's run, not the carried one
    run_line = next(line for line in text.splitlines() if line.startswith("Run `"))
    assert "carried" not in run_line and "code cccccccccc" in run_line and "code aaaaaaaaaa" not in text.split("Robustness runs:")[0]
    assert "**1 gated claims judged: 0 holds · 1 fails" in text


def test_a_tuned_rerun_on_the_same_inputs_keeps_the_old_perturbation_columns(client, tmp_path, probe_inputs):
    # Prepare: the old file has the noisy_d column (it fails there); a fresh store holds only a newer tuned run
    path, old, _ = _old_results(client, tmp_path, probe_inputs)
    assert "| fails |" in old.split(f"## {EXP}", 1)[1]
    fresh = tracking_client(f"sqlite:///{tmp_path}/fresh.db")
    fake_parent(fresh, EXP, "cccc" * 10, _claims(), minute=5, inputs=probe_inputs.to_json(), extra={"dtlab.flavour": "full"})
    # Execute
    model = results_md.write(fresh, path, current={EXP: probe_inputs}.get)
    section = path.read_text().split(f"## {EXP}", 1)[1]
    # Assert: the new run's section, with the old column, counted against the new tuned status
    assert "code cccccccccc" in section and "carried" not in section
    assert "Robustness runs: noisy_d (code aaaaaaaaaa" in section and "| holds |  | fails |" in section
    (e,) = [e for e in model["experiments"] if e["name"] == EXP]
    assert (e["robustness"]["k"], e["robustness"]["n"]) == (0, 1)


def test_a_tuned_rerun_on_changed_inputs_drops_the_old_perturbation_columns(client, tmp_path, probe_inputs):
    # Prepare: as above, but this checkout's inputs differ from the file's (one file changed)
    path, _, _ = _old_results(client, tmp_path, probe_inputs)
    now = Inputs(probe_inputs.digest + "x", probe_inputs.config, probe_inputs.version,
                 {**probe_inputs.files, "components/core/probe.py": "0" * 16})
    fresh = tracking_client(f"sqlite:///{tmp_path}/fresh.db")
    fake_parent(fresh, EXP, "cccc" * 10, _claims(), minute=5, inputs=now.to_json(), extra={"dtlab.flavour": "full"})
    # Execute
    results_md.write(fresh, path, current={EXP: now}.get)
    # Assert: no perturbation judged on other inputs is shown beside the new run
    assert "noisy_d" not in path.read_text().split(f"## {EXP}", 1)[1]


def test_a_file_recording_the_inputs_but_not_the_stores_newer_run_is_rewritten(client, tmp_path, probe_inputs):
    # Prepare: the file records these inputs; the store then gets a newer run on them
    path, _, _ = _old_results(client, tmp_path, probe_inputs)
    fake_parent(client, EXP, "cccc" * 10, _claims(), minute=9, inputs=probe_inputs.to_json(), extra={"dtlab.flavour": "full"})
    jobs = [reproduce.Job(EXP, "", [f"experiment={EXP}"], probe_inputs)]
    # Execute
    reproduce.judge(jobs, client, "full", force=False)
    # Assert: current, but the file does not show the store's latest run: it is written again
    assert jobs[0].why == [] and not reproduce._file_current(path, jobs)


def test_judge_skips_current_runs_and_names_what_changed(client, probe_inputs):
    # Prepare: the board run has this checkout's inputs; a job whose inputs differ in one file
    _store(client, probe_inputs)
    moved = Inputs("f" * 16, probe_inputs.config, probe_inputs.version,
                   dict(probe_inputs.files, **{"components/core/probe.py": "1" * 16}))
    jobs = [reproduce.Job(EXP, "", [f"experiment={EXP}"], probe_inputs),
            reproduce.Job(EXP, "", [f"experiment={EXP}"], moved),
            reproduce.Job(EXP, "c_crashes", [], probe_inputs)]
    forced = [reproduce.Job(EXP, "", [f"experiment={EXP}"], probe_inputs)]
    # Execute
    reproduce.judge(jobs, client, "full", force=False)
    reproduce.judge(forced, client, "full", force=True)
    # Assert: current (the debug run newer than it does not count), changed file named, never run, forced
    assert [j.why for j in jobs] == [[], ["components/core/probe.py"], ["never run"]]
    assert [j.state for j in jobs] == ["current", "queued", "queued"]
    assert forced[0].why == ["--force"]


def test_an_experiment_results_md_records_with_current_inputs_is_current_without_a_store_run(client, probe_inputs):
    # Prepare: an empty store (a fresh clone); RESULTS.md records this checkout's inputs for EXP
    recorded = {EXP: probe_inputs.to_json()}
    moved = Inputs("f" * 16, probe_inputs.config, probe_inputs.version,
                   dict(probe_inputs.files, **{"components/core/probe.py": "1" * 16}))
    jobs = [reproduce.Job(EXP, "", [f"experiment={EXP}"], probe_inputs),
            reproduce.Job(EXP, "", [f"experiment={EXP}"], moved)]
    # Execute
    reproduce.judge(jobs, client, "full", force=False, recorded=recorded)
    # Assert: current and said why; a changed file runs, named
    assert [j.why for j in jobs] == [[], ["components/core/probe.py"]]
    assert "RESULTS.md" in jobs[0].note and not jobs[1].note


def test_results_elsewhere_carries_from_the_board_named_by_from(client, tmp_path, probe_inputs):
    # Prepare: the committed board (it records EXP), a fresh store, and an empty place to write to
    committed, old, empty = _old_results(client, tmp_path, probe_inputs)
    elsewhere = tmp_path / "elsewhere" / "RESULTS.md"
    opts = reproduce.parse_args(["--results", str(elsewhere), "--from", str(committed)])
    jobs = [reproduce.Job(EXP, "", [f"experiment={EXP}"], probe_inputs)]
    # Execute: judge as cmd_reproduce does, then write the board elsewhere
    reproduce.judge(jobs, empty, "full", force=False,
                    recorded=reproduce._recorded(reproduce.previous_path(opts, str(tmp_path)), "full"))
    results_md.write(empty, elsewhere, current={EXP: probe_inputs}.get,
                     previous=reproduce.previous_path(opts, str(tmp_path)))
    # Assert: nothing re-runs, the new file carries EXP's section, the committed file is untouched
    assert jobs[0].why == [] and results_md.CARRIED in elsewhere.read_text()
    assert results_md.read_inputs(elsewhere.read_text()) == results_md.read_inputs(old)
    assert committed.read_text() == old


def test_results_elsewhere_without_from_carries_nothing(tmp_path, probe_inputs):
    # Prepare: --results names a file that does not exist (a board isolated from the committed one)
    opts = reproduce.parse_args(["--results", str(tmp_path / "new.md")])
    # Execute
    recorded = reproduce._recorded(reproduce.previous_path(opts, str(tmp_path)), "full")
    # Assert: nothing recorded, so every experiment without a store run runs
    assert recorded == {}


def _probe_cfg(debug: bool, steps: int | None = None) -> dict:
    """platform_probe's composed config; ``steps``: its debug block's step count edited."""
    cfg = config.compose([f"experiment={EXP}", f"debug={str(debug).lower()}"])
    if steps is not None:
        cfg["experiment"]["debug"] = {**cfg["experiment"]["debug"], "common.probe.steps": steps}
    return cfg


def test_a_debug_block_edit_stales_debug_records_only():
    # Prepare: both flavours' inputs as recorded, then the debug block's step count edited
    full, debug = of_config(_probe_cfg(False)), of_config(_probe_cfg(True))
    # Execute
    full_now, debug_now = of_config(_probe_cfg(False, steps=9)), of_config(_probe_cfg(True, steps=9))
    # Assert: a full run never reads the debug block, so its record stays current; the debug one does not
    assert full_now.digest == full.digest and changed(full, full_now) == []
    assert debug_now.digest != debug.digest and changed(debug, debug_now) == ["the resolved config"]


def test_a_record_with_the_legacy_config_hash_is_current_until_the_yaml_changes():
    # Prepare: a full record made before the full hash left out the debug block (the whole experiment hashed)
    cfg = _probe_cfg(False)
    now = of_config(cfg)
    legacy = config_hash(cfg["experiment"], False, None, legacy=True)
    recorded = Inputs("0" * 16, legacy, now.version, dict(now.files))
    # Execute
    same, edited = changed(recorded, now), changed(recorded, of_config(_probe_cfg(False, steps=9)))
    # Assert: current while nothing changed; an edit anywhere (the debug block included) is one the
    # legacy hash saw, so it is named
    assert now.legacy_config == legacy != now.config and same == []
    assert edited == ["the resolved config"]


def _legacy_record(inputs: Inputs, cfg: dict) -> dict:
    """``inputs`` as a run made before the full flavour's hash left out the debug block records them."""
    legacy = config_hash(cfg["experiment"], False, None, legacy=True)
    return {**inputs.to_json(), "config": legacy, "digest": "0" * 16}


def test_reproduce_rekeys_a_legacy_run_and_the_board_records_the_new_hash(client, tmp_path, probe_inputs):
    # Prepare: the board run recorded with the legacy config hash, its YAML unchanged since
    rec = _legacy_record(probe_inputs, _probe_cfg(False))
    fake_parent(client, EXP, "aaaa" * 10, _claims(), minute=1, inputs=rec, extra={"dtlab.flavour": "full"})
    jobs = [reproduce.Job(EXP, "", [f"experiment={EXP}"], probe_inputs)]
    dry = [reproduce.Job(EXP, "", [f"experiment={EXP}"], probe_inputs)]
    # Execute: a dry run first (it must not write), then the real judge, then RESULTS.md
    reproduce.judge(dry, client, "full", force=False)
    untouched = client.get_run(dry[0].latest.info.run_id).data.tags[HASH_TAG]
    reproduce.judge(jobs, client, "full", force=False, rekey_runs=True)
    tags = client.get_run(jobs[0].latest.info.run_id).data.tags
    results_md.write(client, tmp_path / "RESULTS.md", current={EXP: probe_inputs}.get)
    # Assert: current both times; re-keyed only by the real one, the old hash kept; the file records the new hash
    assert dry[0].why == [] == jobs[0].why and untouched == "0" * 16
    assert tags[HASH_TAG] == probe_inputs.digest and tags[LEGACY_HASH_TAG] == "0" * 16
    _, recorded = results_md.read_inputs((tmp_path / "RESULTS.md").read_text())
    assert (recorded[EXP]["config"], recorded[EXP]["digest"]) == (probe_inputs.config, probe_inputs.digest)


def test_a_carried_legacy_record_is_rekeyed_and_a_changed_one_is_not(client, tmp_path, probe_inputs):
    # Prepare: a committed board whose record of EXP has the legacy hash; a fresh store
    path, old, empty = _old_results(client, tmp_path, probe_inputs)
    legacy = _legacy_record(probe_inputs, _probe_cfg(False))
    lines = [json.dumps({"experiment": EXP, **{k: v for k, v in legacy.items()},
                         "overrides": [f"experiment={EXP}"]}, sort_keys=True)
             if line.startswith("{") and f'"experiment": "{EXP}"' in line else line for line in old.splitlines()]
    path.write_text("\n".join(lines) + "\n")
    assert results_md.read_inputs(path.read_text())[1][EXP]["config"] == legacy["config"]
    moved = Inputs("f" * 16, probe_inputs.config, probe_inputs.version,
                   dict(probe_inputs.files, **{"components/core/probe.py": "1" * 16}),
                   legacy_config=probe_inputs.legacy_config)
    # Execute
    results_md.write(empty, path, current={EXP: probe_inputs}.get)
    _, carried = results_md.read_inputs(path.read_text())
    # Assert: carried with this checkout's hash; a record whose files changed is never re-keyed
    assert results_md.CARRIED in path.read_text() and carried[EXP]["config"] == probe_inputs.config
    assert upgraded(legacy, moved) is legacy and upgraded(legacy, probe_inputs)["config"] == probe_inputs.config


def test_a_perturbation_of_a_carried_experiment_does_not_rerun_its_tuned_run(client, probe_inputs):
    # Prepare: an empty store; RESULTS.md records EXP as current; one of its perturbations never ran
    jobs = [reproduce.Job(EXP, "", [f"experiment={EXP}"], probe_inputs),
            reproduce.Job(EXP, "c_crashes", [], probe_inputs)]
    # Execute
    reproduce.judge(jobs, client, "full", force=False, recorded={EXP: probe_inputs.to_json()})
    # Assert: only the perturbation runs; it is judged against the recorded tuned run when the file is written
    assert jobs[0].why == [] and jobs[0].state == "current" and jobs[0].note
    assert jobs[1].why == ["never run"] and jobs[1].state == "queued"


def test_a_perturbation_run_joins_the_carried_section_and_counts_against_its_statuses(client, tmp_path, probe_inputs):
    # Prepare: the committed board (tuned holds, noisy_d fails it); a fresh store with two perturbation runs only
    path, old, empty = _old_results(client, tmp_path, probe_inputs)
    fake_parent(empty, EXP, "dddd" * 10, _claims(True), minute=6, robustness="a_keeps", inputs=probe_inputs.to_json())
    fake_parent(empty, EXP, "dddd" * 10, _claims(False), minute=7, robustness="noisy_d", inputs=probe_inputs.to_json())
    # Execute
    model = results_md.write(empty, path, current={EXP: probe_inputs}.get)
    text = path.read_text()
    again = results_md.write(tracking_client(f"sqlite:///{tmp_path}/empty2.db"), path, current={EXP: probe_inputs}.get)
    # Assert: still carried; a column per perturbation (noisy_d's now from the store's run), 1/2 in the row
    (entry,) = [e for e in model["experiments"] if e["name"] == EXP]
    assert entry["carried"] and (entry["robustness"]["k"], entry["robustness"]["n"]) == (1, 2)
    assert entry["robustness"]["kept"] == ["a_keeps"]
    section = text.split(f"## {EXP}\n", 1)[1].split("\n## ", 1)[0]
    assert results_md.CARRIED in section and "| premise | a_keeps | noisy_d |" in section
    assert "| holds |  | holds | fails |" in section   # tuned status, no premise, then a_keeps, noisy_d
    assert "a_keeps (code dddddddddd" in section and "noisy_d (code dddddddddd" in section
    assert section.count("Robustness runs: ") == 1
    assert f"[{EXP}](#{EXP}) (carried) |" in text and " 1/2 |" in text
    # carried once more from a store without them: the same bytes
    (kept,) = [e for e in again["experiments"] if e["name"] == EXP]
    assert path.read_text() == text and (kept["robustness"]["k"], kept["robustness"]["n"]) == (1, 2)


@pytest.mark.parametrize("tags, why", [
    ({}, "inputs not recorded (a run from before input hashes)"),
    ({HASH_ERROR_TAG: "OSError: components/x.py unreadable"},
     "inputs not recorded (hashing failed: OSError: components/x.py unreadable)")])
def test_a_run_without_an_input_hash_says_why_it_is_not_current(client, probe_inputs, tags, why):
    # Prepare: a full run without the hash tag: an old run, or one whose hashing failed (its error tagged)
    fake_parent(client, EXP, "aaaa" * 10, _claims(), minute=1, extra={"dtlab.flavour": "full", **tags})
    jobs = [reproduce.Job(EXP, "", [f"experiment={EXP}"], probe_inputs)]
    # Execute
    reproduce.judge(jobs, client, "full", force=False)
    # Assert: it runs, and the reason says which of the two it is
    assert jobs[0].why == [why] and jobs[0].state == "queued"


def test_robustness_jobs_are_planned_per_perturbation(probe_inputs):
    # Execute
    jobs = reproduce.plan_jobs([EXP], {"flavour": "full", "robustness": True})
    # Assert: the experiment's own run, then each declared perturbation with its overrides
    assert [(j.key, j.inputs.digest == probe_inputs.digest) for j in jobs] == [
        (EXP, True), (f"{EXP}/noisy_d", False), (f"{EXP}/c_crashes", False)]
    assert "robustness=noisy_d" in jobs[1].overrides and "experiment.seeds=[5]" in jobs[1].overrides


def test_robustness_with_names_plans_only_those_perturbations(probe_inputs):
    # Prepare
    opts = reproduce.parse_args([f"experiment={EXP}", "--robustness=c_crashes"])
    # Execute
    jobs = reproduce.plan_jobs(reproduce.select(opts), opts)
    # Assert: the experiment's own run and the one perturbation asked for
    assert [j.key for j in jobs] == [EXP, f"{EXP}/c_crashes"]


@pytest.mark.parametrize("args, message", [
    (["experiment=nope"], "experiment='nope': one of"),
    (["--family", "nope"], "--family='nope': one of"),
    (["cluster.address=10.0.0.5:6379"], "cluster.address='10.0.0.5:6379': reproduce finds the cluster by RAY_ADDRESS"),
    (["debug=true"], "debug='true'"),
    (["--flavour", "tiny"], "--flavour='tiny'"),
    (["--from", "/nonexistent/RESULTS.md"], "--from='/nonexistent/RESULTS.md': a RESULTS.md written by dtlab reproduce"),
    (["--from", "ROOT/README.md"], "a RESULTS.md written by dtlab reproduce"),
    (["--from", "ROOT/RESULTS.md", "--flavour", "debug"], "a full board; --flavour debug carries only from a debug one"),
    ([f"experiment={EXP}", "--robustness=nope"], "--robustness='nope': one of c_crashes, noisy_d"),
])
def test_bad_input_is_one_line_and_exit_2(args, message, capsys):
    # Prepare
    args = [a.replace("ROOT/", f"{ROOT}/") for a in args]
    # Execute
    with pytest.raises(SystemExit) as e:
        reproduce.select(reproduce.parse_args(args))
    # Assert
    err = capsys.readouterr().err.strip()
    assert e.value.code == 2 and message in err and len(err.splitlines()) == 1


def test_robustness_on_an_experiment_without_a_block_is_refused(tmp_path, monkeypatch, capsys):
    # Prepare: a conf/ whose only experiment declares no robustness: block
    (tmp_path / "experiment").mkdir()
    (tmp_path / "experiment" / "bare.yaml").write_text("name: bare\nfamily: core\n")
    monkeypatch.setattr(config, "CONF_DIR", tmp_path)
    # Execute
    with pytest.raises(SystemExit) as e:
        reproduce.select(reproduce.parse_args(["--robustness"]))
    # Assert
    assert e.value.code == 2 and "experiment 'bare' declares no robustness: block" in capsys.readouterr().err


def test_ctrl_c_stops_the_running_child_and_marks_the_job_killed(tmp_path, monkeypatch):
    # Prepare: a job whose child ignores SIGINT (as under a background shell) and ends on SIGTERM with 7;
    # the progress callback raises KeyboardInterrupt (Ctrl-C) once the child runs
    monkeypatch.setattr(reproduce, "prepare_command", lambda job, passthrough: [
        sys.executable, "-c", "print('{}')"])
    monkeypatch.setattr(reproduce, "job_command", lambda job, passthrough: [
        sys.executable, "-c", "import signal, sys, time; signal.signal(signal.SIGINT, signal.SIG_IGN); "
                              "signal.signal(signal.SIGTERM, lambda *a: sys.exit(7)); print('up', flush=True); "
                              "time.sleep(60)"])
    job = reproduce.Job(EXP, "", [], None)
    seen = []

    def tick():
        seen.append(1)
        log = tmp_path / "logs" / f"{EXP}.log"   # (ticks come during the prepare pass too, before it exists)
        if log.exists() and log.read_text().startswith("up"):
            raise KeyboardInterrupt

    # Execute
    with pytest.raises(KeyboardInterrupt):
        reproduce.run_job(job, [], tmp_path / "logs", tick)
    # Assert: the child got SIGTERM and ended (its exit code 7), the job is killed, not done
    assert job.state == "killed" and job.returncode == 7 and seen


def test_the_prepare_pass_runs_before_the_run_and_is_timed_apart(tmp_path, monkeypatch):
    # Prepare: a pass that leaves a marker and reports what it built; a run that exits 3 without the marker
    marker = tmp_path / "prepared"
    monkeypatch.setattr(reproduce, "prepare_command", lambda job, passthrough: [
        sys.executable, "-c", f"import json, pathlib; pathlib.Path({str(marker)!r}).touch(); "
                              "print('building...'); print(json.dumps({'built': ['corpus', 'lm@0'], 'needed': 3}))"])
    monkeypatch.setattr(reproduce, "job_command", lambda job, passthrough: [
        sys.executable, "-c", f"import pathlib, sys; sys.exit(0 if pathlib.Path({str(marker)!r}).exists() else 3)"])
    job = reproduce.Job(EXP, "", [], None)
    # Execute
    rc = reproduce.run_job(job, [], tmp_path / "logs", lambda: None)
    # Assert: the run found what the pass left; the pass's time and what it built are the job's, apart from wall_s
    assert rc == 0 and job.state == "done"
    assert job.prepare_built == ["corpus", "lm@0"] and job.prepare_s is not None and job.wall_s is not None
    assert (tmp_path / "logs" / f"{EXP}.prepare.log").read_text().startswith("building...")


def test_a_failed_prepare_pass_fails_the_job_without_running_it(tmp_path, monkeypatch):
    # Prepare
    ran = tmp_path / "ran"
    monkeypatch.setattr(reproduce, "prepare_command", lambda job, passthrough: [
        sys.executable, "-c", "import sys; print('dtlab: error: boom', file=sys.stderr); sys.exit(2)"])
    monkeypatch.setattr(reproduce, "job_command", lambda job, passthrough: [
        sys.executable, "-c", f"import pathlib; pathlib.Path({str(ran)!r}).touch()"])
    job = reproduce.Job(EXP, "", [], None)
    # Execute
    rc = reproduce.run_job(job, [], tmp_path / "logs", lambda: None)
    # Assert: failed with the pass's exit code, its log named, and the run never started
    assert rc == 2 and job.state == "failed" and job.wall_s is None and not ran.exists()
    assert f"{EXP}.prepare.log" in job.note


def test_a_run_after_a_cold_prepare_pass_says_so_and_the_header_sums_the_passes(client, tmp_path, probe_inputs):
    # Prepare: the board run as reproduce records it after a pass that built two entries in 95 s
    rid = fake_parent(client, EXP, "aaaa" * 10, _claims(), minute=1, inputs=probe_inputs.to_json(),
                      extra={"dtlab.flavour": "full", "reproduce.prepare_built": "corpus, lm@0"})
    client.log_metric(rid, "reproduce.wall_s", 300.0)
    client.log_metric(rid, "reproduce.prepare_s", 95.0)
    current = {EXP: probe_inputs}.get
    # Execute: written from the store, then carried from that file into one written from an empty store
    results_md.write(client, tmp_path / "RESULTS.md", current=current)
    text = (tmp_path / "RESULTS.md").read_text()
    carried = results_md.write(tracking_client(f"sqlite:///{tmp_path}/empty.db"), tmp_path / "RESULTS.md", current=current)
    # Assert: the wall is the run's (warm); the pass is named on the run line and summed in the header, also carried
    assert "wall 5m00s (warm cache; its cold prepare, a pass before the run: 1m35s)" in text
    assert "cold prepare passes: 1m35s (platform_probe 1m35s)" in text
    assert carried["cold_prepare"] == {"own": {EXP: 95.0}, "shared": []}
    assert "cold prepare passes: 1m35s" in (tmp_path / "RESULTS.md").read_text()


def test_one_board_pass_prepares_every_experiment_and_each_skips_its_own(tmp_path, monkeypatch):
    # Prepare: two experiments' own configurations and a perturbation; the board's pass built for one of them.
    # An experiment's own pass would fail (exit 9): a job the board pass covered never starts one.
    monkeypatch.setattr(reproduce, "board_prepare_command", lambda tuned, passthrough: [
        sys.executable, "-c", "import json; print(json.dumps({'built': {'a': ['lm', 'data@0'], 'b': []}, "
                              "'compute_by_experiment': {'a': 42.0}}))"])
    monkeypatch.setattr(reproduce, "prepare_command", lambda job, passthrough: [sys.executable, "-c", "exit(9)"])
    monkeypatch.setattr(reproduce, "job_command", lambda job, passthrough: [sys.executable, "-c", "pass"])
    a, b = reproduce.Job("a", "", ["experiment=a"], None), reproduce.Job("b", "", ["experiment=b"], None)
    pert = reproduce.Job("a", "other_seeds", ["experiment=a", "experiment.seeds=[5]"], None)
    # Execute
    rc = reproduce.board_prepare([a, b, pert], [], tmp_path / "logs", lambda: None)
    rcs = [reproduce.run_job(j, [], tmp_path / "logs", lambda: None) for j in (a, b, pert)]
    # Assert: a carries the pass (its seconds, what it built first, who shared it); b found its entries cached;
    # the perturbation was not in the pass and ran its own (which failed here, as its command says)
    assert rc == 0 and rcs == [0, 0, 9]
    assert a.prepare_built == ["lm", "data@0"] and a.prepare_pass.startswith("board-") and a.prepare_shared == ["a"]
    assert a.prepare_s is not None and a.prepare_s > 0 and a.prepare_compute_s == 42.0
    assert b.prepare_built == [] and b.prepare_s == 0.0 and not b.prepare_pass
    assert pert.state == "failed" and "prepare pass failed" in pert.note


def test_a_failed_board_pass_leaves_each_job_its_own_pass(tmp_path, monkeypatch):
    # Prepare
    monkeypatch.setattr(reproduce, "board_prepare_command", lambda tuned, passthrough: [sys.executable, "-c", "exit(2)"])
    a, b = reproduce.Job("a", "", ["experiment=a"], None), reproduce.Job("b", "", ["experiment=b"], None)
    # Execute
    rc = reproduce.board_prepare([a, b], [], tmp_path / "logs", lambda: None)
    # Assert: nothing recorded on the jobs, so each runs its own pass
    assert rc == 2 and a.prepare_s is None and b.prepare_s is None and a.state == b.state == "queued"


def test_a_shared_prepare_pass_is_counted_once_in_the_header_and_survives_carrying():
    # Prepare: two experiments built in one 20-minute board pass, one in its own 95 s pass, one warm
    shared = {"seconds": 1200.0, "built": ["lm"], "shared": ["a", "b"], "compute_s": 453.0}
    entries = [{"name": "a", "prepare": shared}, {"name": "b", "prepare": {**shared, "built": ["dit"]}},
               {"name": "c", "prepare": {"seconds": 95.0, "built": ["corpus"]}},
               {"name": "d", "prepare": {"seconds": 0.0, "built": []}}]
    recorded = SimpleNamespace(data=SimpleNamespace(
        metrics={"reproduce.prepare_s": 1200.0, "reproduce.prepare_compute_s": 453.0},
        tags={"reproduce.prepare_built": "lm", "reproduce.prepare_pass": "board-1", "reproduce.prepare_shared": "a, b"}))
    # Execute
    passes = results_md.cold_passes(entries)
    text = results_md._cold_text({"cold_prepare": passes})
    line = "Run `a` (`abc`) · code 1234567 · 2026-12-07 10:00 UTC · wall 5m00s" + results_md.prepare_text(shared)
    parsed = results_md._parse_cold_prepare(["## a", "", line])
    # Assert: 20m + 1m35s, the shared pass once; the run line says it was shared, and a carried section parses back
    assert results_md.prepare_pass(recorded) == shared     # what reproduce's _record leaves on the run
    assert passes == {"own": {"c": 95.0}, "shared": [{"seconds": 1200.0, "experiments": ["a", "b"]}]}
    assert "cold prepare passes: 21m35s (one pass shared by a, b 20m00s, c 1m35s)" in text
    assert ("one pass before the runs shared by 2 experiments: 20m00s; its own steps 7m33s of compute)"
            in results_md.prepare_text(shared))
    assert parsed == {"seconds": 1200.0, "shared_n": 2}


def test_ctrl_c_during_the_board_pass_stops_it_and_records_nothing_on_the_jobs(tmp_path, monkeypatch):
    # Prepare: a board pass that writes its pid and would run a minute; Ctrl-C arrives at the first tick
    import psutil

    pid_file = tmp_path / "pass.pid"
    monkeypatch.setattr(reproduce, "board_prepare_command", lambda tuned, passthrough: [
        sys.executable, "-c", f"import os, time; open({str(pid_file)!r}, 'w').write(str(os.getpid())); time.sleep(60)"])
    a, b = reproduce.Job("a", "", ["experiment=a"], None), reproduce.Job("b", "", ["experiment=b"], None)

    def tick():
        if pid_file.exists() and pid_file.read_text():
            raise KeyboardInterrupt

    # Execute
    with pytest.raises(KeyboardInterrupt):
        reproduce.board_prepare([a, b], [], tmp_path / "logs", tick)
    # Assert: the pass's process is gone; each job is queued again with no pass recorded (the next reproduce resumes)
    assert not psutil.pid_exists(int(pid_file.read_text())) or psutil.Process(int(pid_file.read_text())).status() == "zombie"
    assert a.state == b.state == "queued" and a.prepare_s is None and b.prepare_s is None and not a.prepare_pass


def test_a_second_ctrl_c_while_the_child_stops_never_leaves_it_running(tmp_path):
    # Prepare: a child that takes 0.5 s to stop after SIGTERM; its wait is interrupted once (a second Ctrl-C)
    import subprocess

    child = subprocess.Popen([sys.executable, "-c", "import signal, sys, time; "
                              "signal.signal(signal.SIGTERM, lambda *a: (time.sleep(0.5), sys.exit(5))); "
                              "print('up', flush=True); time.sleep(60)"], stdout=subprocess.PIPE, text=True)
    assert child.stdout.readline().strip() == "up"
    real_wait, calls = child.wait, []

    def wait(timeout=None):
        calls.append(timeout)
        if len(calls) == 1:
            raise KeyboardInterrupt
        return real_wait(timeout)

    child.wait = wait
    # Execute
    reproduce.stop_child(child, grace_s=30)
    # Assert: it waited on after the second interrupt, and the child ended by its own handler (not SIGKILL)
    assert len(calls) >= 2 and child.returncode == 5


def test_a_child_that_outlives_the_grace_period_is_killed(tmp_path):
    # Prepare: a child that ignores SIGTERM
    import subprocess

    child = subprocess.Popen([sys.executable, "-c", "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
                              "print('up', flush=True); time.sleep(60)"], stdout=subprocess.PIPE, text=True)
    assert child.stdout.readline().strip() == "up"
    # Execute
    reproduce.stop_child(child, grace_s=0.5)
    # Assert
    assert child.returncode == -9


def test_eta_adds_the_last_wall_times_of_what_is_left():
    # Prepare
    jobs = [reproduce.Job("a", "", [], None, last_wall_s=100.0, state="done"),
            reproduce.Job("b", "", [], None, last_wall_s=60.0, state="running", started=1000.0),
            reproduce.Job("c", "", [], None, last_wall_s=30.0),
            reproduce.Job("d", "", [], None, state="current")]
    # Execute
    left, known = reproduce._eta(jobs, now=1040.0)
    unknown = reproduce._eta([*jobs, reproduce.Job("e", "", [], None)], now=1040.0)
    # Assert: 20 s left of b, 30 s of c; an experiment never run makes the ETA a lower bound
    assert (left, known) == (50.0, True) and unknown == (50.0, False)


def test_cli_dry_run_lists_what_would_run_and_why(tmp_path):
    # Execute
    # (--results: a board of its own, so the committed RESULTS.md's recorded inputs do not make EXP current)
    r = subprocess.run([sys.executable, "-m", "pipelines.cli", "reproduce", f"experiment={EXP}", "--dry-run",
                        "--results", str(tmp_path / "RESULTS.md"),
                        f"runs_dir={tmp_path}", f"tracking.uri=sqlite:///{tmp_path}/mlflow.db"],
                       cwd=ROOT, capture_output=True, text=True, timeout=300, env=dtlab_env())
    # Assert
    assert r.returncode == 0, r.stderr
    assert f"run     {EXP}: never run" in r.stdout and not (tmp_path / "RESULTS.md").exists()


@pytest.mark.parametrize("dirty", ["true", "false"])
def test_a_dirty_checkout_is_named_before_anything_runs(tmp_path, monkeypatch, capsys, dirty):
    # Prepare: the checkout's state as git reports it
    import components.core.provenance as provenance

    monkeypatch.setattr(provenance, "git_state", lambda: {"git.commit": "c0ffee", "git.dirty": dirty})
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path}/mlflow.db")
    # Execute
    reproduce.cmd_reproduce([f"experiment={EXP}", "--dry-run", "--results", str(tmp_path / "RESULTS.md"),
                             f"runs_dir={tmp_path}"])
    # Assert: a warning exactly when the tree is dirty, and still the plan
    out = " ".join(capsys.readouterr().out.split())
    assert ("uncommitted changes" in out) == (dirty == "true") and f"run {EXP}: never run" in out


def test_a_run_records_its_flavour_subset_and_the_inputs_reproduce_computes(run_experiment, mlflow_client, runs_dir):
    # Prepare: what reproduce computes for platform_probe's debug flavour with a subset
    overrides = [f"experiment={EXP}", "debug=true", f"runs_dir={runs_dir}", "only=[a,b]"]
    expected = of_config(config.compose(overrides))
    # Execute
    outcome = run_experiment(EXP, "only=[a,b]")
    # Assert: the parent carries them, and the board never takes it (debug, subset)
    run = mlflow_client.get_run(outcome.parent_run_id)
    tags = run.data.tags
    assert (tags["dtlab.flavour"], tags["dtlab.subset"], tags["dtlab.input_hash"]) == ("debug", "a,b", expected.digest)
    arts = {a.path for a in mlflow_client.list_artifacts(outcome.parent_run_id)}
    assert {"inputs.json", "claim_operands.json"} <= arts
    from components.core.runs_query import off_board

    assert off_board(run) == "debug" and off_board(run, "debug") == "only=a,b"


def test_the_machine_line_names_its_measured_speed():
    """reproduce names the host's speed beside its description: hosts that print the same CPU model
    have run the same code 1.3-2.7x apart, and a board's wall times mean little without it."""
    from pipelines.results_md import SPEED_UNIT, machine_speed, machine_text

    # Execute: a short measurement, and the line with and without it
    speed = machine_speed(seconds=0.05)
    line, bare = machine_text(speed), machine_text()

    # Assert
    assert 0 < speed < float("inf")
    assert line == f"{bare} · {speed:.0f} {SPEED_UNIT}"
