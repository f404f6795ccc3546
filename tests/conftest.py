"""Shared fixtures: one Ray session and one MLflow store per test process (one for `make test`; each
pytest-xdist worker has its own under `make test TEST_WORKERS=2`).

``run_experiment(name, *overrides)`` runs an experiment's debug flavour through the real DAG
(prepare -> execute -> evaluate -> report) and returns the RunOutcome.
"""
from __future__ import annotations

import os

import pytest

os.environ.setdefault("RAY_AUTH_MODE", "token")  # the suite runs with Ray's token auth, as dtlab does
os.environ.setdefault("RAY_DEDUP_LOGS", "1")
# No silent `ray.init()` from a first `.remote()` / `ray.get`: a test that uses Ray asks for `ray_session`.
# Auto-init would otherwise start (or find) some other cluster, depending on which tests ran before it in
# this process (under pytest-xdist each worker runs a different subset).
os.environ.setdefault("RAY_ENABLE_AUTO_CONNECT", "0")


def pytest_configure(config):
    """The Ray token file, made once before any test starts Ray: under pytest-xdist two workers start
    their sessions at about the same time, and neither should read the file while the other writes it."""
    if not hasattr(config, "workerinput"):   # the controller (or the only process without xdist)
        from components.core.raytools import ensure_token

        ensure_token()


@pytest.fixture(scope="session")
def runs_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("runs")


@pytest.fixture(scope="session")
def tracking_uri(runs_dir):
    uri = f"sqlite:///{runs_dir}/mlflow.db"
    old = os.environ.get("MLFLOW_TRACKING_URI")
    os.environ["MLFLOW_TRACKING_URI"] = uri
    yield uri
    if old is None:
        os.environ.pop("MLFLOW_TRACKING_URI", None)
    else:
        os.environ["MLFLOW_TRACKING_URI"] = old


@pytest.fixture(scope="session")
def ray_session():
    import ray

    from components.core.raytools import init_ray

    if not ray.is_initialized():  # embedded, the way dtlab starts it (token file 0600), never a running head
        init_ray({"attach": False, "num_cpus": 2, "include_dashboard": False, "logging_level": "ERROR",
                  "log_to_driver": False, "auth_mode": os.environ["RAY_AUTH_MODE"]})
    yield ray


@pytest.fixture(scope="session")
def serve_instance(ray_session):
    """One Ray Serve instance for the whole test session (a ``ServeInfo``: host, port, ``url(route)``),
    on 127.0.0.1 and a free port, on the shared ``ray_session`` (Serve start + stop costs ~7 s, so it
    is never per test). Its users (tests/serving, tests/diffusion, tests/infra) give every application
    its own name and route prefix, and undeploy a heavy one at the end of their module::

        def test_my_endpoint(serve_instance):
            deploy(MyDeployment.bind(...), name="my_app", route_prefix="/my")   # unique name per module
            status, body = post_json(serve_instance.url("/my"), {...})

    Here, not under tests/serving: a fixture imported into another module is a second definition,
    set up (and shut down) a second time."""
    from components.serving.app import serve_session

    with serve_session() as info:
        yield info


@pytest.fixture(scope="session")
def run_experiment(ray_session, tracking_uri, runs_dir):
    from pipelines import config, dag

    def _run(name: str, *overrides: str, debug: bool = True):
        cfg = config.compose([f"experiment={name}", f"debug={str(debug).lower()}", f"runs_dir={runs_dir}", *overrides])
        return dag.run(cfg, console=None)

    return _run


@pytest.fixture(scope="session")
def mlflow_client(tracking_uri):
    from mlflow.tracking import MlflowClient

    return MlflowClient(tracking_uri=tracking_uri)
