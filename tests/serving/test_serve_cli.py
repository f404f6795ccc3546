"""`dtlab serve`: a serving technique as a standing HTTP service, from a second process."""
import os
import signal
import subprocess
import sys
import time

import pytest

from components.serving.app import free_port, post_json

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(__file__)))


def _cli(*args, **kw):
    env = {**os.environ, "RAY_ADDRESS": ""}
    return subprocess.Popen([sys.executable, "-m", "pipelines.cli", *args], cwd=ROOT, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, **kw)


def test_specreason_service_is_registered_with_a_valid_example():
    from components.core.errors import ConfigError
    from components.core.registry import get, lookup
    from components.serving.lm_deployments import SolveRequest, build_app   # registers the service

    entry = get("service", "specreason")
    svc = entry.obj
    assert entry.file == "components/serving/lm_deployments.py" and entry.summary == svc.summary
    assert (svc.experiment, svc.prepare, svc.build, svc.route_prefix + svc.endpoint) == ("specreason", "lms", build_app,
                                                                                         "/specreason/solve")
    SolveRequest(**svc.example)             # the printed curl body is one the endpoint accepts
    with pytest.raises(ConfigError, match="specreason"):
        lookup("service", "nope", key="serve NAME")


def test_unknown_service_and_bad_port_are_one_line_errors():
    for args, must in ((["serve", "nope"], "serve NAME='nope'"), (["serve", "specreason", "--port", "x"], "--port")):
        p = _cli(*args)
        out, _ = p.communicate(timeout=60)
        assert p.returncode == 2 and must in out, out


@pytest.mark.slow   # Ray start-up and the deployment take ~40 s on 2 busy cores (the stop itself: ~2 s)
def test_serve_specreason_answers_says_debug_and_stops_cleanly(tmp_path, runs_dir):
    """The stop that outlasted 60 s in the whole suite: after the service stopped, the interpreter's last
    garbage collection walked every object the service had loaded (14 s on 2 busy cores for a 2 s stop),
    after Serve's own graceful teardown (replica drains, proxies) that an embedded session does not need.
    Now the loaded objects are frozen out of the collector, and the embedded session ends with ray.shutdown.
    SIGTERM stops it like Ctrl-C (no C++ stack trace) and nothing prints Serve's graceful_shutdown retry."""
    # the session's runs_dir: its prepare cache holds the debug LMs if test_specreason trained them,
    # and the LMs this test trains are reused there (the service serves the experiment's cached models)
    import urllib.request

    port = free_port()
    p = _cli("serve", "specreason", "debug=true", f"runs_dir={runs_dir}", "cluster.include_dashboard=false",
             f"tracking.uri=sqlite:///{tmp_path}/mlflow.db", "--port", str(port), process_group=0)
    url, lines, t0 = None, [], time.time()
    try:
        while time.time() - t0 < 240:
            line = p.stdout.readline()
            if not line:
                break
            lines.append(line)
            if line.startswith("serving specreason at "):
                url = line.split(" at ", 1)[1].strip()
                break
        assert url == f"http://127.0.0.1:{port}/specreason/solve", "".join(lines)
        assert any(x.startswith("DEBUG: debug=true serves the debug flavour's tiny models") for x in lines), lines
        status, body = post_json(url, {"problem": "17|+1|*9|-7", "method": "base"})
        assert status == 200 and body["steps"] and body["tokens"], body
        req = urllib.request.Request(url, data=b'{"problem": "17|+1", "method": "small"}', method="POST",
                                     headers={"content-type": "application/json"})
        with urllib.request.urlopen(req, timeout=30) as r:
            assert r.headers.get("x-dtlab-flavour") == "debug"
        status, body = post_json(url, {"problem": "17|+1|*9|-7", "threshold": 99})
        assert status == 422 and "threshold" in str(body), body
        status, _ = post_json(url, {"problem": "17|+1", "method": "small"})
        assert status == 200  # still serving after a bad request
    finally:
        os.kill(p.pid, signal.SIGTERM)
        try:
            rest, _ = p.communicate(timeout=60)  # read to the end: a full pipe would block the child's stop
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            raise
    assert p.returncode == 0 and "dtlab serve specreason: stopped by SIGTERM" in rest, rest[-2000:]
    assert "SIGTERM received" not in rest and "graceful_shutdown failed" not in rest, rest[-2000:]
