"""MLflow tracking, in one place: parent/child runs, params, series, artifacts, failure states.

Every write goes through an explicit ``MlflowClient`` (no global active run), so the DAG can hold a
parent and many children open at once. ``MLFLOW_TRACKING_URI`` wins over the configured URI.
"""
from __future__ import annotations

import json
import math
import os
import re
import time
from pathlib import Path
from typing import Any, Iterable, Mapping

_MAX_BATCH = 1000  # MLflow's limit on metrics per log_batch call
_MAX_PARAM = 6000  # MLflow's limit on a param value's length


def resolve_tracking_uri(configured: str | None) -> str:
    """MLFLOW_TRACKING_URI when set, else the configured URI (never MLflow's CWD default)."""
    env = os.environ.get("MLFLOW_TRACKING_URI")
    if env:
        return env
    if not configured:
        raise ValueError("no tracking URI configured and MLFLOW_TRACKING_URI unset")
    return configured


def flatten(d: Mapping[str, Any], prefix: str = "") -> dict[str, str]:
    """{'a': {'b': 1}} -> {'a.b': '1'}; lists are JSON strings; values cut to MLflow's limit."""
    out: dict[str, str] = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, Mapping):
            out.update(flatten(v, key + "."))
        else:
            s = json.dumps(v) if isinstance(v, (list, tuple)) else str(v)
            out[key] = s[:_MAX_PARAM]
    return out


_BAD_KEY = re.compile(r"[^A-Za-z0-9_\-. :/]")


def safe_key(key: str) -> str:
    """A key MLflow accepts (alphanumerics and _-. :/), at most 250 characters."""
    return _BAD_KEY.sub("_", key.lstrip("+~"))[:250]


def _local_artifact_root(uri: str) -> str | None:
    """For a sqlite store, artifacts go beside the DB (not MLflow's ./mlruns default)."""
    if uri.startswith("sqlite:///"):
        db = Path(uri[len("sqlite:///"):])
        return (db.parent / "artifacts").resolve().as_uri()
    return None


class Tracker:
    def __init__(self, uri: str):
        import mlflow
        from mlflow.tracking import MlflowClient

        self.uri = uri
        if uri.startswith("sqlite:///"):
            Path(uri[len("sqlite:///"):]).parent.mkdir(parents=True, exist_ok=True)
        mlflow.set_tracking_uri(uri)
        self.client = MlflowClient(tracking_uri=uri)

    def check_reachable(self, timeout_s: float = 3.0) -> None:
        """Fail fast with one clear error when the tracking store cannot be reached.

        For an HTTP server a plain TCP connect comes first: MLflow's own client would retry with
        backoff for minutes before giving up.
        """
        if self.uri.startswith(("http://", "https://")):
            import socket
            from urllib.parse import urlparse

            u = urlparse(self.uri)
            port = u.port or (443 if u.scheme == "https" else 80)
            try:
                socket.create_connection((u.hostname, port), timeout=timeout_s).close()
            except OSError as e:
                raise ConnectionError(f"MLflow tracking server {self.uri} is unreachable ({e.strerror or e}); "
                                      "start it (infra/mlflow_server.sh start) or use tracking=local") from None
        try:
            self.client.search_experiments(max_results=1)
        except Exception as e:  # noqa: BLE001 - any failure here means "store unusable"
            msg = str(e).splitlines()[0][:200] if str(e) else type(e).__name__
            raise ConnectionError(f"MLflow tracking store {self.uri} is unreachable: {msg}") from None

    def experiment_id(self, name: str) -> str:
        exp = self.client.get_experiment_by_name(name)
        if exp is not None:
            if exp.lifecycle_stage == "deleted":
                self.client.restore_experiment(exp.experiment_id)
            return exp.experiment_id
        root = _local_artifact_root(self.uri)
        loc = f"{root}/{name}" if root else None
        try:
            return self.client.create_experiment(name, artifact_location=loc)
        except Exception:  # created concurrently by another job of a multirun
            exp = self.client.get_experiment_by_name(name)
            if exp is None:
                raise
            return exp.experiment_id

    def start_run(self, experiment_id: str, name: str, tags: Mapping[str, str] | None = None,
                  parent_id: str | None = None) -> str:
        tags = dict(tags or {})
        if parent_id:
            tags["mlflow.parentRunId"] = parent_id
        run = self.client.create_run(experiment_id, run_name=name, tags={k: str(v) for k, v in tags.items()})
        return run.info.run_id

    def log_params(self, run_id: str, params: Mapping[str, Any]) -> None:
        from mlflow.entities import Param

        flat = flatten(params)
        items = [Param(safe_key(k), v) for k, v in flat.items()]
        for i in range(0, len(items), 100):
            self.client.log_batch(run_id, params=items[i:i + 100])

    def log_metrics(self, run_id: str, metrics: Mapping[str, float], step: int = 0) -> None:
        from mlflow.entities import Metric

        ts = int(time.time() * 1000)
        items = [Metric(safe_key(k), float(v), ts, step) for k, v in metrics.items() if v is not None]
        for i in range(0, len(items), _MAX_BATCH):
            self.client.log_batch(run_id, metrics=items[i:i + _MAX_BATCH])

    def log_series(self, run_id: str, name: str, steps: Iterable[float], values: Iterable[float],
                   max_points: int | None = None) -> None:
        """A per-step metric series in as few calls as MLflow allows.

        With ``max_points``, a longer series is thinned to that many evenly spaced steps (first and
        last kept): SQLite stores take ~0.25 ms a point, and curves need no more resolution.
        """
        from mlflow.entities import Metric

        pairs = [(int(s), float(v)) for s, v in zip(steps, values)
                 if v is not None and not (isinstance(v, float) and math.isnan(v))]
        if max_points and len(pairs) > max_points:
            idx = sorted({round(i * (len(pairs) - 1) / (max_points - 1)) for i in range(max_points)})
            pairs = [pairs[i] for i in idx]
        ts = int(time.time() * 1000)
        items = [Metric(name, v, ts, s) for s, v in pairs]
        for i in range(0, len(items), _MAX_BATCH):
            self.client.log_batch(run_id, metrics=items[i:i + _MAX_BATCH])

    def set_tags(self, run_id: str, tags: Mapping[str, Any]) -> None:
        from mlflow.entities import RunTag

        self.client.log_batch(run_id, tags=[RunTag(safe_key(k), str(v)[:5000]) for k, v in tags.items()])

    def log_text(self, run_id: str, text: str, path: str) -> None:
        self.client.log_text(run_id, text, path)

    def log_json(self, run_id: str, obj: Any, path: str) -> None:
        self.client.log_text(run_id, json.dumps(obj, indent=2, default=str), path)

    def log_bytes(self, run_id: str, data: bytes, path: str) -> None:
        import tempfile

        with tempfile.TemporaryDirectory() as d:
            p = Path(d) / Path(path).name
            p.write_bytes(data)
            parent = str(Path(path).parent)
            self.client.log_artifact(run_id, str(p), None if parent == "." else parent)

    def log_figure(self, run_id: str, fig: Any, path: str) -> None:
        self.client.log_figure(run_id, fig, path)

    def end(self, run_id: str, status: str = "FINISHED", error: str | None = None) -> None:
        if error:
            self.set_tags(run_id, {"error": error[:5000]})
        self.client.set_terminated(run_id, status=status)
