"""An embedded Ray session ends with its driver, SIGKILL included: the watchdog init_ray starts
ends every process of that session (and only of that session) within seconds."""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
import uuid

import psutil
import pytest

from components.core import ray_watchdog
from tests.probe_runs import start_probe_run, wait_for_variant_runs

pytestmark = pytest.mark.skipif(not os.path.exists("/proc/self/stat"), reason="the watchdog needs /proc (Linux)")
SLEEP = "import time; time.sleep(120)"


def _gone(pids, timeout_s: float) -> tuple[float, list[int]]:
    """Seconds until none of ``pids`` runs (a zombie counts as gone), and those left at the timeout."""
    def running(pid: int) -> bool:
        try:
            return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            return False

    t0 = time.monotonic()
    while True:
        left = [p for p in pids if running(p)]
        if not left or time.monotonic() - t0 > timeout_s:
            return time.monotonic() - t0, left
        time.sleep(0.1)


def _kill(*procs) -> None:
    for p in procs:
        if p.poll() is None:
            p.kill()
            p.wait()


@pytest.fixture
def fake_session(tmp_path):
    """A fake session without Ray: a 'driver', a member naming the session dir with a child that
    does not (like a ``ray::IDLE`` worker), and decoys: one naming a session whose name extends it,
    one reading the session's logs (no option, like ``tail -f``)."""
    sd = f"{tmp_path}/session_{uuid.uuid4().hex[:8]}_12"
    driver = subprocess.Popen([sys.executable, "-c", SLEEP])
    member = subprocess.Popen([sys.executable, "-c", f"import subprocess, sys; subprocess.Popen([sys.executable, '-c', "
                               f"{SLEEP!r}]); {SLEEP}", f"--session-dir={sd}"])
    decoys = [subprocess.Popen([sys.executable, "-c", SLEEP, f"--session-dir={sd}3"]),
              subprocess.Popen([sys.executable, "-c", SLEEP, f"{sd}/logs/raylet.out"])]
    while not psutil.Process(member.pid).children():
        time.sleep(0.05)
    child = psutil.Process(member.pid).children()[0].pid
    yield sd, driver, member, child, decoys
    _kill(driver, member, *decoys)
    if psutil.pid_exists(child):
        os.kill(child, signal.SIGKILL)


def test_driver_killed_ends_session_and_descendants_only(fake_session):
    # Prepare
    sd, driver, member, child, decoys = fake_session
    assert set(ray_watchdog.session_processes(sd)) == {member.pid, child}
    dog = ray_watchdog.start(sd, pid=driver.pid)
    assert ray_watchdog.start(sd, pid=driver.pid) is dog  # init_ray called again: still one watchdog
    time.sleep(1)
    # Execute
    driver.kill()
    driver.wait()
    elapsed, left = _gone([member.pid, child, dog.pid], timeout_s=15)
    member.poll()
    # Assert
    assert left == [] and elapsed < 10, f"left after {elapsed:.1f} s: {left}"
    assert dog.wait(timeout=5) == 0
    assert [d.poll() for d in decoys] == [None, None]  # not of this session: untouched


def test_session_ended_before_driver_stops_the_watchdog(fake_session):
    # Prepare
    sd, driver, member, child, decoys = fake_session
    dog = ray_watchdog.start(sd, pid=driver.pid)
    time.sleep(1)
    # Execute: the session ends (ray.shutdown) while its driver lives on
    _kill(member)
    os.kill(child, signal.SIGKILL)
    rc = dog.wait(timeout=15)
    # Assert
    assert rc == 0 and driver.poll() is None and [d.poll() for d in decoys] == [None, None]


def test_workers_orphaned_by_their_raylet_are_found_by_its_mark():
    # Prepare: two "workers" re-parented away from a raylet that died first (Ray marks each worker
    # with its raylet's PID), one of another raylet's
    fake_raylet = 4_000_000   # above pid_max: no live process has it
    ours = subprocess.Popen([sys.executable, "-c", SLEEP], env={**os.environ, "RAY_RAYLET_PID": str(fake_raylet)})
    other = subprocess.Popen([sys.executable, "-c", SLEEP], env={**os.environ, "RAY_RAYLET_PID": str(fake_raylet + 1)})
    try:
        # Execute
        found = ray_watchdog.raylet_orphans({fake_raylet})
    finally:
        _kill(ours, other)
    # Assert
    assert ours.pid in found and other.pid not in found
    assert ray_watchdog.raylet_orphans(set()) == {}


def test_sigkilled_dtlab_run_leaves_no_ray_process(tmp_path):
    # Prepare: a debug probe run whose variants take a minute, its Ray session found from its children
    bystanders = {c.pid for c in psutil.Process().children(recursive=True)   # this suite's own Ray daemons
                  if os.path.basename(c.cmdline()[0] if c.cmdline() else "") in ("gcs_server", "raylet")}
    p, client = start_probe_run(tmp_path, "cluster.attach=false")
    decoy = None
    try:
        wait_for_variant_runs(p, client)
        tree = psutil.Process(p.pid).children(recursive=True)
        names = " ".join(" ".join(c.cmdline()) for c in tree)
        assert "gcs_server" in names and "raylet" in names and "ray_watchdog" in names, names
        session = re.search(r"session_[0-9_-]+[0-9]", names).group(0)
        decoy = subprocess.Popen([sys.executable, "-c", SLEEP, f"--session-dir=/tmp/ray/{session}9"])
        # Execute
        t0 = time.monotonic()
        p.kill()
        p.wait()
        elapsed, left = _gone([c.pid for c in tree], timeout_s=20)
    finally:
        _kill(p)
    # Assert
    print(f"\nSIGKILL -> last of {len(tree)} session processes gone: {elapsed:.1f} s")
    assert left == [], f"still running {time.monotonic() - t0:.0f} s after SIGKILL: " + "; ".join(
        f"{c.pid} {' '.join(c.cmdline())[:200]}" for c in tree if c.pid in left)
    assert decoy.poll() is None
    _kill(decoy)
    assert all(psutil.pid_exists(b) for b in bystanders)
    # ... and the runs it left RUNNING end FAILED at the next stale-run check ("driver gone")
    from components.core.provenance import mark_stale

    assert mark_stale(client)
    assert [r.info.status for r in client.search_runs([client.get_experiment_by_name("platform_probe").experiment_id])
            if r.info.status == "RUNNING"] == []
