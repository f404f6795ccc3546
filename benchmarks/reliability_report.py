"""`make reliability`: the figures a user can quote about dtlab's handling of bad input and faults.

1. Every generated bad `dtlab run` input (tests/reliability/fuzz.py), through the preflight's
   validation pass in process: tried / rejected cleanly (one line naming the key), and the edge
   inputs a declared type allows (in range or rejected, never a traceback).
2. Every request schema's generated bad bodies through the real FastAPI stack (ASGI, no Ray):
   requests sent / 4xx / 5xx.
3. The fault drills and the deployed services' bad-body and load tests, as pytest runs (slow ones
   included): actor kill, injected failure, each signal to a run, a multirun and a sweep (then
   resumed), SIGKILL then `dtlab gc` and no Ray process left, concurrent runs into one store. Faults injected / survived
   (tests passed), and the runs left RUNNING in every MLflow store those tests wrote.
4. The regression tests of the defects found trying dtlab as a new user would (DEFECTS), counted the same way.
Prints one table; exit 1 if any figure is not clean.
"""
from __future__ import annotations

import glob
import os
import sqlite3
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

DRILLS = [
    "tests/federated/test_ray_federated.py::test_actor_killed_mid_round_is_a_dropped_participant",
    "tests/pipelines/test_sweeps.py::test_ray_launcher_grid_and_failed_job",
    "tests/pipelines/test_signals.py",
    "tests/reliability/test_interrupts.py",
    "tests/reliability/test_drills.py",
    "tests/infra/test_ray_watchdog.py",
    "tests/reliability/test_fuzz_inputs.py::test_real_dtlab_run_rejects_in_one_line",
    "tests/serving/test_lm_endpoints.py::test_invalid_requests_get_4xx_and_service_keeps_serving",
    "tests/serving/test_gatekeeper_serve.py::test_invalid_bodies_rejected_and_service_keeps_serving",
    "tests/serving/test_serving_app.py",
    "tests/serving/test_loadtest.py",
]

# The defects found trying dtlab as a new user would (multi-seed node pools, shared heads, exposed ports,
# sweep resume, replayable commands, broken modules, exceptions across Ray, late failures on valid
# overrides, CLI interrupts and previews): each one's regression tests, reported beside the drills.
DEFECTS = [
    "tests/pipelines/test_node_pool_seeds.py",
    "tests/infra/test_ray_head.py",
    "tests/pipelines/test_sweep_resume.py",
    "tests/pipelines/test_provenance_replay.py",
    "tests/pipelines/test_multirun_output.py",
    "tests/core/test_registry_manifest.py",
    "tests/core/test_errors.py",
    "tests/pipelines/test_validate_hooks.py",
    "tests/pipelines/test_debug_keys_in_base.py",
    "tests/coding/test_ers_channel_sim.py",
    "tests/algorithms/test_zero_comm_matroid_matching.py",
    "tests/core/test_claims.py",
    "tests/pipelines/test_cli_run.py",
    "tests/pipelines/test_cli_hints.py",
    "tests/pipelines/test_cli_timing.py",
    "tests/serving/test_serve_cli.py",
    "tests/pipelines/test_plots.py",
    "tests/core/test_plotting.py",
    "tests/pipelines/test_compare_html.py",
]


def fuzz_inputs() -> dict:
    from tests.reliability import fuzz
    from tests.reliability.test_fuzz_inputs import KNOWN_DEFECTS

    with tempfile.TemporaryDirectory() as d:
        conf = fuzz.conf_copy(Path(d))
        t0 = time.perf_counter()
        outs = [fuzz.check_in_process(c, Path(d) / "runs", conf) for c in fuzz.all_cases()]
        s = fuzz.summary(outs)
    s["seconds"] = time.perf_counter() - t0
    s["unclean"] = [(o.case.label, "; ".join(o.problems), KNOWN_DEFECTS.get(o.case.label, "NEW"))
                    for o in outs if not o.clean]
    return s


def bodies() -> dict:
    import json

    from tests.reliability import test_serving_bodies as tb

    codes = [tb._post(tb._app(m), "/run", json.dumps(b, allow_nan=True).encode())[0] for m, _, b in tb.CASES]
    return {"sent": len(codes), "4xx": sum(400 <= c < 500 for c in codes), "5xx": sum(c >= 500 for c in codes),
            "2xx": sum(200 <= c < 300 for c in codes)}


def drills(basetemp: Path, tests: list[str] = DRILLS) -> dict:
    """Run ``tests`` (slow ones included) and count them from their JUnit XML, with the runs left RUNNING."""
    xml = basetemp.parent / f"{basetemp.name}.xml"
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--basetemp={basetemp}",
           f"--junitxml={xml}", "-m", "slow or not slow", "--timeout=1800", *tests]
    rc = subprocess.run(cmd, cwd=ROOT).returncode
    cases = ET.parse(xml).getroot().iter("testcase")
    total = passed = skipped = 0
    failed = []
    for c in cases:
        total += 1
        if c.find("skipped") is not None:
            skipped += 1
        elif c.find("failure") is not None or c.find("error") is not None:
            failed.append(f"{c.get('classname')}::{c.get('name')}")
        else:
            passed += 1
    running = []
    for db in sorted({os.path.realpath(p) for p in glob.glob(str(basetemp / "**" / "*.db"), recursive=True)}):
        try:
            rows = sqlite3.connect(db).execute("select name from runs where status='RUNNING'").fetchall()
        except sqlite3.DatabaseError:
            continue  # not an MLflow store (optuna.db, caches)
        running += [f"{db}: {name}" for (name,) in rows]
    return {"rc": rc, "total": total, "passed": passed, "skipped": skipped, "failed": failed,
            "running": len(running), "running_runs": running}


def main() -> int:
    f = fuzz_inputs()
    b = bodies()
    with tempfile.TemporaryDirectory(prefix="dtlab-reliability-") as d:
        dr = drills(Path(d) / "t")
        de = drills(Path(d) / "defects", DEFECTS)
    rows = [
        ("bad `dtlab run` inputs tried / rejected cleanly", f"{f['bad_inputs']} / {f['rejected_cleanly']}"),
        ("edge inputs (type-valid) tried / rejected / unclean",
         f"{f['edge_inputs']} / {f['edge_rejected']} / {f['edge_unclean']}"),
        ("fuzz pass time", f"{f['seconds']:.0f} s"),
        ("bad HTTP bodies sent / 4xx / 5xx", f"{b['sent']} / {b['4xx']} / {b['5xx']}"),
        ("fault drills + serving tests run / survived (skipped)", f"{dr['total']} / {dr['passed']} ({dr['skipped']})"),
        ("runs left RUNNING after the drills", str(dr["running"])),
        ("defect regression tests run / passed (skipped)", f"{de['total']} / {de['passed']} ({de['skipped']})"),
        ("runs left RUNNING after the defect tests", str(de["running"])),
    ]
    w = max(len(r[0]) for r in rows)
    print("\n" + "dtlab reliability".center(w + 16, "="))
    for k, v in rows:
        print(f"{k:<{w}}  {v}")
    for label, why, owner in f["unclean"]:
        print(f"  unclean: {label}: {why} [{owner}]")
    for name in dr["failed"]:
        print(f"  failed drill: {name}")
    for name in de["failed"]:
        print(f"  failed defect test: {name}")
    for name in dr["running_runs"] + de["running_runs"]:
        print(f"  left RUNNING: {name}")
    clean = (f["rejected_cleanly"] == f["bad_inputs"] and not f["unclean"] and b["5xx"] == 0 and b["2xx"] == 0
             and not dr["failed"] and dr["running"] == 0 and not de["failed"] and de["running"] == 0)
    return 0 if clean else 1


if __name__ == "__main__":
    sys.exit(main())
