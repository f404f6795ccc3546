"""Bounded HTTP load test run from a second process on loopback: throughput and p50/p99 latency.

Usage::

    from components.serving.loadtest import run_load_test
    res = run_load_test(info.url("/cascade"), bodies=[{"pixels": [...]}, ...],
                        n_requests=400, concurrency=4, max_seconds=20)
    res.throughput_rps, res.p50_ms, res.p99_ms, res.n_ok, res.status_counts

- The client is a separate Python process (``subprocess``; this file run as a script, stdlib
  only, so it starts in ~50 ms) that keeps ``concurrency`` threads, each with one keep-alive
  ``http.client`` connection, POSTing the JSON ``bodies`` round-robin. It stops after
  ``n_requests`` or ``max_seconds``, whichever comes first; the parent kills it if it overruns.
- Only loopback URLs are accepted (127.0.0.1 / localhost / ::1).
- Latency is per request, send to full response read; throughput = completed / elapsed wall.
  Non-2xx answers are counted in ``status_counts`` and ``n_err`` and kept out of the latency
  percentiles; ``warmup`` requests are sent first and not counted.
"""
from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass, field
from urllib.parse import urlparse

LOOPBACK = ("127.0.0.1", "localhost", "::1")
MAX_REQUESTS = 100_000
MAX_SECONDS = 600.0


@dataclass
class LoadResult:
    url: str
    n_sent: int
    n_ok: int
    n_err: int
    elapsed_s: float
    throughput_rps: float
    p50_ms: float
    p99_ms: float
    mean_ms: float
    max_ms: float
    concurrency: int
    status_counts: dict[str, int] = field(default_factory=dict)
    stopped_by: str = "count"          # "count" or "time"

    def to_dict(self) -> dict:
        return asdict(self)


def _check(url: str, n_requests: int, concurrency: int, max_seconds: float) -> None:
    from components.core.errors import require

    host = urlparse(url).hostname
    require(urlparse(url).scheme == "http" and host in LOOPBACK, "url", url, "an http:// URL on loopback (127.0.0.1)")
    require(1 <= n_requests <= MAX_REQUESTS, "n_requests", n_requests, f"an integer in [1, {MAX_REQUESTS}]")
    require(1 <= concurrency <= 64, "concurrency", concurrency, "an integer in [1, 64]")
    require(0 < max_seconds <= MAX_SECONDS, "max_seconds", max_seconds, f"seconds in (0, {MAX_SECONDS:.0f}]")


def run_load_test(url: str, bodies: list, n_requests: int = 200, concurrency: int = 4,
                  max_seconds: float = 30.0, warmup: int = 5, timeout_s: float = 10.0) -> LoadResult:
    """Run the load test in a child process and return its figures (see module docstring)."""
    _check(url, n_requests, concurrency, max_seconds)
    if not bodies:
        raise ValueError("bodies: at least one request body is needed")
    spec = {"url": url, "bodies": bodies, "n": n_requests, "concurrency": concurrency,
            "max_seconds": max_seconds, "warmup": warmup, "timeout_s": timeout_s}
    proc = subprocess.run([sys.executable, __file__], input=json.dumps(spec), capture_output=True, text=True,
                          timeout=max_seconds + timeout_s + 30)
    if proc.returncode != 0:
        raise RuntimeError(f"load-test client exited {proc.returncode}: {proc.stderr.strip()[-2000:]}")
    return LoadResult(**json.loads(proc.stdout.strip().splitlines()[-1]))


def _percentile(sorted_ms: list[float], q: float) -> float:
    if not sorted_ms:
        return float("nan")
    k = min(len(sorted_ms) - 1, max(0, int(round(q * (len(sorted_ms) - 1)))))
    return sorted_ms[k]


def _client(spec: dict) -> dict:
    """The child process's work: returns LoadResult fields."""
    import http.client

    u = urlparse(spec["url"])
    path = u.path or "/"
    payloads = [json.dumps(b).encode() for b in spec["bodies"]]
    n, conc, timeout = int(spec["n"]), int(spec["concurrency"]), float(spec["timeout_s"])
    lock = threading.Lock()
    counter = {"next": 0}
    lat_ms: list[float] = []
    statuses: dict[str, int] = {}

    def connect():
        return http.client.HTTPConnection(u.hostname, u.port or 80, timeout=timeout)

    def one(conn, body: bytes) -> tuple[int, object]:
        conn.request("POST", path, body=body, headers={"content-type": "application/json"})
        r = conn.getresponse()
        r.read()
        return r.status, conn

    # warm-up (not counted): the first request of a fresh replica pays lazy imports
    conn = connect()
    for i in range(int(spec["warmup"])):
        try:
            one(conn, payloads[i % len(payloads)])
        except (OSError, http.client.HTTPException):
            conn.close()
            conn = connect()
    conn.close()

    t0 = time.perf_counter()
    deadline = t0 + float(spec["max_seconds"])
    stopped = {"by": "count"}

    def worker():
        c = connect()
        while True:
            with lock:
                i = counter["next"]
                if i >= n:
                    break
                if time.perf_counter() >= deadline:
                    stopped["by"] = "time"
                    break
                counter["next"] = i + 1
            t = time.perf_counter()
            try:
                status, _ = one(c, payloads[i % len(payloads)])
            except (OSError, http.client.HTTPException) as e:
                status = type(e).__name__
                c.close()
                c = connect()
            dt = (time.perf_counter() - t) * 1e3
            with lock:
                statuses[str(status)] = statuses.get(str(status), 0) + 1
                if isinstance(status, int) and 200 <= status < 300:
                    lat_ms.append(dt)
        c.close()

    threads = [threading.Thread(target=worker, daemon=True) for _ in range(conc)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - t0
    lat_ms.sort()
    sent = sum(statuses.values())
    ok = len(lat_ms)
    return {"url": spec["url"], "n_sent": sent, "n_ok": ok, "n_err": sent - ok, "elapsed_s": elapsed,
            "throughput_rps": ok / elapsed if elapsed > 0 else 0.0,
            "p50_ms": _percentile(lat_ms, 0.50), "p99_ms": _percentile(lat_ms, 0.99),
            "mean_ms": sum(lat_ms) / ok if ok else float("nan"), "max_ms": lat_ms[-1] if lat_ms else float("nan"),
            "concurrency": conc, "status_counts": statuses, "stopped_by": stopped["by"]}


if __name__ == "__main__":
    print(json.dumps(_client(json.loads(sys.stdin.read()))))
