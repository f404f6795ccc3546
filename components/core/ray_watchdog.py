"""Ends an embedded Ray session's processes when its driver dies, SIGKILL included.

``ray.init()`` without an address starts gcs_server, raylet, dashboard, agents, the log monitor and
workers as the driver's children; a driver killed by SIGKILL cannot stop them, and they stay up,
listening, for minutes. :func:`start` (called by ``init_ray`` for embedded sessions) spawns this
module as a small process of its own session, so it outlives the driver's process group. It polls
the driver's PID and start time every 0.5 s and remembers the session's processes (those with an
option naming the session, e.g. ``--session-dir=/tmp/ray/session_...``, and their descendants:
workers and agents rename themselves ``ray::...``; a snapshot every 2 s, since a child whose parent
dies first is re-parented; at the end, also every process marked with one of the session's raylet
PIDs, which Ray puts in its workers' environment). Once the driver is gone it sends them SIGTERM,
SIGKILL after a grace period, and exits. It exits too when the session ends normally (``ray.shutdown``).
Nothing outside this session's name is touched, so a ``dtlab up`` head or another driver's Ray is
safe. Linux only (/proc); elsewhere :func:`start` does nothing.

    python -m components.core.ray_watchdog --pid PID --start TICKS --session-dir DIR
"""
from __future__ import annotations

import argparse
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from components.core.provenance import ROOT, _proc_start

POLL_S = 0.5  # driver liveness check
SCAN_S = 2.0  # refresh of the session's process set while the driver lives
GRACE_S = 3.0  # SIGTERM -> SIGKILL
_started: dict[tuple[int, str], subprocess.Popen] = {}  # (driver, session dir) -> its watchdog


def _procs() -> dict[int, tuple[int, str, list[str]]]:
    """Every live (not zombie) process: pid -> (ppid, start ticks, argv)."""
    out = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            stat = Path(f"/proc/{name}/stat").read_text()
            argv = Path(f"/proc/{name}/cmdline").read_bytes().decode(errors="replace").split("\0")
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if fields[0] in "ZX":
            continue
        out[int(name)] = (int(fields[1]), fields[19], argv)
    return out


def session_processes(session_dir: str, exclude: set[int] = frozenset()) -> dict[int, str]:
    """pid -> start ticks of the processes of the Ray session at ``session_dir``: those with an
    option naming the session, as Ray starts its daemons (``--log_dir=/tmp/ray/session_.../logs``;
    the name followed by no further digit, so ``..._12`` is not ``..._123``; a ``tail`` of its logs
    is no option) and all their descendants, less ``exclude``."""
    name = re.compile(re.escape(Path(session_dir).name) + r"(?![0-9])")
    procs = _procs()
    members = {pid for pid, (_, _, argv) in procs.items()
               if any(a.startswith("--") and name.search(a) for a in argv)} - set(exclude)
    children: dict[int, list[int]] = {}
    for pid, (ppid, _, _) in procs.items():
        children.setdefault(ppid, []).append(pid)
    todo = list(members)
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in members and child not in exclude:
                members.add(child)
                todo.append(child)
    return {pid: procs[pid][1] for pid in members}


def raylets(known: dict[int, str]) -> set[int]:
    """The raylet PIDs among ``known`` (a session has one per node it started)."""
    return {pid for pid in _alive(known) if Path(_argv0(pid)).name == "raylet"}


def _argv0(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0].decode(errors="replace")
    except OSError:
        return ""


def raylet_orphans(raylet_pids: set[int], exclude: set[int] = frozenset()) -> dict[int, str]:
    """pid -> start ticks of the processes a raylet of ``raylet_pids`` started (Ray puts
    ``RAY_RAYLET_PID`` in every worker's and agent's environment). A raylet that dies first leaves
    its workers re-parented, out of reach of the descendant walk; this finds them by their mark."""
    if not raylet_pids:
        return {}
    marks = {f"RAY_RAYLET_PID={p}".encode() for p in raylet_pids}
    out = {}
    for pid, (_, start, _) in _procs().items():
        if pid in exclude:
            continue
        try:
            env = set(Path(f"/proc/{pid}/environ").read_bytes().split(b"\0"))
        except OSError:
            continue
        if env & marks:
            out[pid] = start
    return out


def _running(pid: int, start: str) -> bool:
    """Whether ``pid`` still runs as the process that started at ``start`` (a recycled PID does not;
    a zombie, dead but not yet reaped, does not either)."""
    if _proc_start(pid) != start:
        return False
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] not in "ZX"
    except OSError:
        return False


def _alive(known: dict[int, str]) -> dict[int, str]:
    """The entries of ``known`` still running as the same process."""
    return {pid: start for pid, start in known.items() if _running(pid, start)}


def _signal(known: dict[int, str], sig: int) -> None:
    for pid in _alive(known):
        try:
            os.kill(pid, sig)
        except OSError:  # gone meanwhile, or not ours
            pass


def terminate(known: dict[int, str], session_dir: str, grace_s: float = GRACE_S) -> dict[int, str]:
    """SIGTERM the session's processes (``known`` plus a fresh scan), SIGKILL what is left after
    ``grace_s``; returns what still runs (empty unless a process could not be signalled)."""
    me = {os.getpid()}
    known = {**_alive(known), **session_processes(session_dir, me)}
    nodes = raylets(known)

    def scan() -> dict[int, str]:  # a worker started meanwhile, or orphaned by its raylet's exit
        return {**_alive(known), **session_processes(session_dir, me), **raylet_orphans(nodes, me)}

    known = scan()
    _signal(known, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        time.sleep(0.1)
        known = scan()
        if not known:
            return {}
    _signal(known, signal.SIGKILL)
    time.sleep(0.2)
    known = scan()
    _signal(known, signal.SIGKILL)
    return _alive(known)


def watch(pid: int, start: str, session_dir: str) -> int:
    """Wait for driver ``pid`` (start ticks ``start``) to die, then end the session; 0 when done,
    also when the session ended before its driver (normal ``ray.shutdown``)."""
    me = {os.getpid(), pid}
    known = session_processes(session_dir, me)
    next_scan, empty_scans = time.monotonic() + SCAN_S, 0
    while _running(pid, start):
        time.sleep(POLL_S)
        if time.monotonic() >= next_scan:
            next_scan = time.monotonic() + SCAN_S
            now = session_processes(session_dir, me)
            empty_scans = 0 if now else empty_scans + 1
            if empty_scans >= 2:  # the session ended with its driver still alive
                return 0
            known = {**_alive(known), **now}
    return 1 if terminate(known, session_dir) else 0


def start(session_dir: str | None = None, pid: int | None = None) -> subprocess.Popen | None:
    """Spawn the watchdog for driver ``pid`` (this process) and the session at ``session_dir`` (the
    session this process's Ray started); None without /proc or a local Ray node. Its own session
    and no inherited stdio, so killing the driver's process group or reading the driver's output to
    EOF never waits on it. One per driver and session: a second call returns the first one."""
    if session_dir is None:
        worker = getattr(sys.modules.get("ray._private.worker"), "global_worker", None)
        node = getattr(worker, "node", None)
        session_dir = node.get_session_dir_path() if node is not None else None
    pid = os.getpid() if pid is None else pid
    began = _proc_start(pid)
    if not session_dir or not Path("/proc/self/stat").exists() or began in (None, "?"):
        return None
    running = _started.get((pid, str(session_dir)))
    if running is not None and running.poll() is None:
        return running
    cmd = [sys.executable, "-m", "components.core.ray_watchdog", "--pid", str(pid), "--start", began,
           "--session-dir", str(session_dir)]
    dog = subprocess.Popen(cmd, cwd=ROOT, start_new_session=True, stdin=subprocess.DEVNULL,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, close_fds=True)
    _started[(pid, str(session_dir))] = dog
    threading.Thread(target=dog.wait, name="dtlab-ray-watchdog-reaper", daemon=True).start()  # no zombie
    return dog


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="ray_watchdog", description=__doc__.split("\n")[0])
    ap.add_argument("--pid", type=int, required=True, help="the driver's PID")
    ap.add_argument("--start", required=True, help="the driver's start time (clock ticks, /proc/PID/stat)")
    ap.add_argument("--session-dir", required=True, help="the Ray session directory to end")
    a = ap.parse_args(argv)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)  # a closed terminal must not end the watchdog first
    return watch(a.pid, a.start, a.session_dir)


if __name__ == "__main__":
    sys.exit(main())
