"""Generated bad inputs (tests/reliability/fuzz.py): each is one line, exit 2, before Ray starts.

In process (fast): the preflight's validation pass on every generated input of a deterministic
sample (all of them with DTLAB_FUZZ_ALL=1, as `make reliability` runs it). Through the real
`dtlab run`: a small sample, checking exit 2, one stderr line, no traceback, no Ray session
started and no MLflow run created.
"""
import os
import sqlite3
import subprocess
import sys
import time

import pytest

from tests.reliability import fuzz

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SAMPLE = 200   # param mutations in `make test` (every 24th of ~4,900; all of them in `make reliability`); option, sweep and YAML cases always all

# Found by this suite in files the reliability work does not own (reported to their owners): a
# compound require() names the first key while the second is at fault, and one check divides by
# the value. Listed so the suite passes while they stand; each must still reproduce (else: remove it).
KNOWN_DEFECTS: dict[str, str] = {}  # label -> where: a defect found and not yet fixed (must still reproduce)


def _selected(cases):
    if os.environ.get("DTLAB_FUZZ_ALL"):
        return cases
    params = [c for c in cases if not c.label.startswith(("option.", "yaml."))]
    stride = max(1, len(params) // SAMPLE)
    return [c for c in cases if c.label.startswith(("option.", "yaml."))] + params[::stride]


def test_generated_bad_inputs_are_rejected_cleanly(tmp_path, capsys, monkeypatch):
    # Prepare: Ray may be up already (the suite's shared session): any start of it is recorded
    import ray

    started = []
    monkeypatch.setattr(ray, "init", lambda *a, **k: started.append(k) or (_ for _ in ()).throw(
        AssertionError("the validation pass started Ray")))
    cases = _selected(fuzz.all_cases())
    conf = fuzz.conf_copy(tmp_path)
    t0 = time.perf_counter()
    # Execute
    outcomes = [fuzz.check_in_process(c, tmp_path / "runs", conf) for c in cases]
    elapsed = time.perf_counter() - t0
    # Assert
    s = fuzz.summary(outcomes)
    with capsys.disabled():
        print(f"\nfuzz: {s['bad_inputs']} bad inputs, {s['rejected_cleanly']} rejected cleanly; "
              f"{s['edge_inputs']} edge inputs ({s['edge_rejected']} rejected, "
              f"{s['edge_inputs'] - s['edge_rejected']} accepted as in range), {elapsed:.0f} s")
    unclean = [f"{o.case.label}: {o.case.overrides[-1][:80]} -> {'; '.join(o.problems)} {o.message[:160]}"
               for o in outcomes if not o.clean and o.case.label not in KNOWN_DEFECTS]
    assert not unclean, "\n".join(unclean)
    fixed = [o.case.label for o in outcomes if o.clean and o.case.label in KNOWN_DEFECTS]
    assert not fixed, f"known defects no longer reproduce, remove them from KNOWN_DEFECTS: {fixed}"
    assert s["bad_inputs"] >= 150
    assert started == []
    assert not (tmp_path / "runs" / "mlflow.db").exists()  # the pass never touches the tracking store


# the two slowest (~14 s each: a late multirun job, a runs_dir under /proc) run in `make bench`; the generated
# test above rejects the same inputs in process
SUBPROCESS_SAMPLE = ["option.only_empty", "option.mr_double_comma", "option.sw_n_jobs0", "option.sw_objective_syntax",
                     pytest.param("option.mr_bad_late_job", marks=pytest.mark.slow), "yaml.tab_indent",
                     pytest.param("option.runs_dir_proc", marks=pytest.mark.slow)]


@pytest.mark.parametrize("label", SUBPROCESS_SAMPLE)
def test_real_dtlab_run_rejects_in_one_line(label, tmp_path):
    # Prepare
    case = next(c for c in (fuzz.yaml_cases() if label.startswith("yaml.") else fuzz.option_cases())
                if c.label == label)   # not all_cases(): its parameter cases compose every experiment (~5-12 s)
    env = {**os.environ, "DTLAB_RUNS_DIR": str(tmp_path / "runs"), "RAY_TMPDIR": str(tmp_path / "ray"),
           "RAY_ADDRESS": ""}
    env.pop("MLFLOW_TRACKING_URI", None)
    if case.yaml is not None:
        conf = fuzz.conf_copy(tmp_path)
        (conf / "experiment" / "zz_broken.yaml").write_text(case.yaml)
        env["DTLAB_CONF_DIR"] = str(conf)
    args = (["-m"] if case.multirun else []) + case.overrides
    # Execute
    r = subprocess.run([sys.executable, "-m", "pipelines.cli", "run", *args], capture_output=True, text=True,
                       timeout=180, env=env, cwd=ROOT)
    # Assert
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert r.returncode == 2, r.stderr[-2000:]
    assert len(lines) == 1 and lines[0].startswith("dtlab: error: ") and case.names in lines[0], r.stderr[-2000:]
    assert "Traceback" not in r.stdout + r.stderr
    assert not (tmp_path / "ray").exists()  # no Ray session was started
    db = tmp_path / "runs" / "mlflow.db"
    if db.exists():
        assert sqlite3.connect(db).execute("select count(*) from runs").fetchone()[0] == 0
