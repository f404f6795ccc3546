"""MLflow tracking, in one place: parent/child runs, params, series, artifacts, failure states.

Every write goes through an explicit ``MlflowClient`` (no global active run), so the DAG can hold a
parent and many children open at once. The configured URI is used as given: conf/tracking/'s
defaults already resolve to ``MLFLOW_TRACKING_URI`` when it is set, so an explicit ``tracking.uri=``
wins over the variable and the variable over the default.

Writes are off the caller's critical path: ``start_run`` (which must return the run id) and the
reads run at once; every other call is queued for one background writer thread, which runs them
in order and merges consecutive metrics, params and tags of a run into as few ``log_batch`` calls
as MLflow allows. ``end`` is queued after the run's writes, so a run never ends before its last
metric lands; ending the last open run, ``flush()``, ``close()`` and interpreter exit wait until
the queue is written. A write that fails is not lost silently: it is logged, and its run ends
FAILED with the error in the ``error`` tag.
"""
from __future__ import annotations

import atexit
import contextlib
import json
import logging
import math
import os
import queue
import re
import signal
import threading
import time
import weakref
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

_MAX_BATCH = 1000  # MLflow's limit on metrics (and on all entities) per log_batch call
_MAX_PARAMS_TAGS = 100  # MLflow's limit on params, and on tags, per log_batch call
_MAX_PARAM = 6000  # MLflow's limit on a param value's length
# MLflow 3's experiment type, read by its UI (mlflow/server/js: "mlflow.experimentKind"); without it an
# experiment with no runs of a known kind opens in the GenAI view
EXPERIMENT_KIND_TAG, EXPERIMENT_KIND = "mlflow.experimentKind", "custom_model_development"
NOTE_TAG = "mlflow.note.content"  # the experiment's description in the UI

log = logging.getLogger(__name__)


_READY: set[str] = set()  # SQLite stores this process has opened (schema created or checked)


def tracking_client(uri: str):
    """An ``MlflowClient`` for ``uri``: every dtlab process reaches its store through here.

    MLflow creates a fresh SQLite store's tables (its schema migration) on first contact, and two
    processes doing that at once race: the loser dies with ``table ... already exists`` (a `dtlab
    run` beside a `dtlab ui`, two multirun drivers, a sweep and its jobs). So the first contact
    of each process with a SQLite store happens under an exclusive file lock (``<db>.lock``
    beside the database): the second process waits for the first's migration, then finds the
    tables. A new store starts as a copy of an empty migrated one (:func:`_copy_empty_store`). A
    store that cannot be opened is left for the caller's first call to report."""
    from mlflow.tracking import MlflowClient

    db = sqlite_path(uri)
    if db is None or uri in _READY:
        return MlflowClient(tracking_uri=uri)
    db.parent.mkdir(parents=True, exist_ok=True)
    with _locked(db.with_name(db.name + ".lock")):
        if not db.exists() or db.stat().st_size == 0:
            _copy_empty_store(db)
        client = MlflowClient(tracking_uri=uri)  # MLflow may open the store here already: under the lock too
        try:
            client.search_experiments(max_results=1)  # opens the store: creates or checks its schema
            _READY.add(uri)
        except Exception as e:  # noqa: BLE001 - reported by the caller's own first call
            log.debug("tracking store %s not ready: %s", uri, e)
    return client


@contextlib.contextmanager
def _locked(path: Path):
    """An exclusive lock on the file ``path`` (created) for the block; no lock where fcntl is missing."""
    with open(path, "a") as f:
        try:
            import fcntl

            fcntl.flock(f, fcntl.LOCK_EX)
        except ImportError:  # not POSIX: no lock
            pass
        yield


def _copy_empty_store(db: Path) -> bool:
    """Start a new SQLite store as a copy of an empty, fully migrated one (made once per MLflow
    version). MLflow builds a new store by replaying its schema migrations (1.3-1.6 s here),
    paid by every fresh runs_dir, test store and `dtlab run` on a new machine; the copy takes
    milliseconds. The template has MLflow's tables and no experiment: MLflow then adds its Default
    experiment with this store's own artifact root, as for a store it built. Any failure leaves the
    store to MLflow, which builds it the slow way."""
    import shutil

    tmp = db.with_name(f".{db.name}.{os.getpid()}.tmp")
    try:
        template = _empty_store_template()
        shutil.copyfile(template, tmp)
        os.replace(tmp, db)
        return True
    except Exception as e:  # noqa: BLE001 - the slow path still works
        log.debug("no empty-store template for %s: %s", db, e)
        tmp.unlink(missing_ok=True)   # a partial copy (a full disk) must not stay beside the store
        return False


def _empty_store_template() -> Path:
    """The template for this MLflow version, built (under a lock, atomically) on first use."""
    import sqlite3

    import mlflow
    from mlflow.store.db.utils import _initialize_tables, _verify_schema, create_sqlalchemy_engine_with_retry

    from components.core.cache import user_cache_dir

    root = user_cache_dir()
    path = root / f"mlflow-{mlflow.__version__}-empty.db"
    if path.is_file():
        return path
    root.mkdir(parents=True, exist_ok=True)
    with _locked(root / (path.name + ".lock")):
        if path.is_file():
            return path
        tmp = root / f".{path.name}.{os.getpid()}.tmp"
        tmp.unlink(missing_ok=True)
        engine = create_sqlalchemy_engine_with_retry(f"sqlite:///{tmp}")
        try:
            _initialize_tables(engine)
            _verify_schema(engine)
        finally:
            engine.dispose()
        with contextlib.closing(sqlite3.connect(tmp)) as con:
            con.execute("DELETE FROM experiments")   # none is created by the migrations; kept exact anyway
            con.commit()
        os.replace(tmp, path)
    return path


def sqlite_path(uri: str) -> Path | None:
    """The database file of a ``sqlite:///PATH`` tracking URI; None for any other store."""
    return Path(uri[len("sqlite:///"):]) if uri.startswith("sqlite:///") else None


def resolve_tracking_uri(configured: str | None) -> str:
    """The configured URI, else MLFLOW_TRACKING_URI (never MLflow's CWD default). The variable's
    precedence over conf/tracking/'s defaults lives in those defaults (``${dtlab_env:...}``), so an
    explicit ``tracking.uri=`` override is never overruled by the environment."""
    if configured:
        return configured
    env = os.environ.get("MLFLOW_TRACKING_URI")
    if not env:
        raise ValueError("no tracking URI configured and MLFLOW_TRACKING_URI unset")
    return env


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
    db = sqlite_path(uri)
    return (db.parent / "artifacts").resolve().as_uri() if db is not None else None


def ensure_experiment(client, name: str, description: str | None = None) -> str:
    """The id of experiment ``name`` in ``client``'s store, created (or restored) if need be; every
    experiment dtlab creates goes through here. A new one keeps its artifacts beside a SQLite store's
    database (MLflow's default is ``./mlruns`` under whatever directory the process runs in; None, the
    server's own root, for any other store). It carries MLflow 3's experiment type
    (``mlflow.experimentKind``: model development, not the GenAI view) and, when given, its
    description (``mlflow.note.content``, what the UI shows on the experiment's page)."""
    tags = {EXPERIMENT_KIND_TAG: EXPERIMENT_KIND, **({NOTE_TAG: description} if description else {})}
    exp = client.get_experiment_by_name(name)
    if exp is None:
        root = _local_artifact_root(client.tracking_uri)
        try:
            return client.create_experiment(name, artifact_location=f"{root}/{name}" if root else None, tags=tags)
        except Exception:  # created concurrently by another job of a multirun
            exp = client.get_experiment_by_name(name)
            if exp is None:
                raise
    if exp.lifecycle_stage == "deleted":
        client.restore_experiment(exp.experiment_id)
    for k, v in tags.items():   # experiments made before these tags, or a summary edited since
        if exp.tags.get(k) != v:
            client.set_experiment_tag(exp.experiment_id, k, v)
    return exp.experiment_id


class _Batch:
    """Metrics, params and tags queued for one run, written together."""

    __slots__ = ("metrics", "params", "tags")

    def __init__(self):
        self.metrics: list = []
        self.params: dict[str, Any] = {}
        self.tags: dict[str, Any] = {}


class Tracker:
    """MLflow runs through one client; writes queued for a background writer (see the module doc).

    ``background=False`` writes every call before returning (the old behaviour; for debugging).
    ``writer_s`` adds up the seconds the writer spent in MLflow, ``wait_s`` the seconds callers
    spent waiting for it (flushes).
    """

    def __init__(self, uri: str, background: bool = True):
        self.uri = uri
        # no mlflow.set_tracking_uri: it rewrites MLFLOW_TRACKING_URI for the whole process, so a
        # second Tracker (a test, a benchmark's temp store) would redirect every later run
        self.client = tracking_client(uri)
        self.background = background
        self.writer_s = 0.0
        self.wait_s = 0.0
        self.errors: dict[str, str] = {}  # run id -> the first write that failed for it
        self._open: set[str] = set()
        self._queue: queue.Queue = queue.Queue()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        _LIVE.add(self)

    # ------------------------------------------------------------------ immediate (reads, run ids)
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

    def experiment_id(self, name: str, description: str | None = None) -> str:
        """:func:`ensure_experiment` in this tracker's store."""
        return ensure_experiment(self.client, name, description)

    def start_run(self, experiment_id: str, name: str, tags: Mapping[str, str] | None = None,
                  parent_id: str | None = None) -> str:
        """Create the run now (its id is needed at once); its other writes are queued."""
        from components.core.provenance import DRIVER_TAG, driver_id

        tags = {DRIVER_TAG: driver_id(), **(tags or {})}
        if parent_id:
            tags["mlflow.parentRunId"] = parent_id
        with _signals_held():  # a run created is a run registered open: a signal cannot orphan it
            run = self.client.create_run(experiment_id, run_name=name, tags={k: str(v) for k, v in tags.items()})
            with self._lock:
                self._open.add(run.info.run_id)
        return run.info.run_id

    def open_ids(self) -> list[str]:
        """Runs started here and not yet ended (what an interrupted run must end)."""
        with self._lock:
            return list(self._open)

    # ------------------------------------------------------------------ queued writes
    def log_params(self, run_id: str, params: Mapping[str, Any]) -> None:
        self._put(run_id, "params", {safe_key(k): v for k, v in flatten(params).items()})

    def log_metrics(self, run_id: str, metrics: Mapping[str, float], step: int = 0) -> None:
        from mlflow.entities import Metric

        ts = int(time.time() * 1000)
        self._put(run_id, "metrics", [Metric(safe_key(k), float(v), ts, step)
                                      for k, v in metrics.items() if v is not None])

    def log_series(self, run_id: str, name: str, steps: Iterable[float], values: Iterable[float],
                   max_points: int | None = None, x_name: str | None = None) -> None:
        """A metric series in as few calls as MLflow allows.

        Integer x values are MLflow steps. A curve over something else (``x_name`` given, or x
        values that are not integers: a deferral ratio, alpha, p) is logged with step = index and
        its x values as the metric ``<name>.x`` at the same steps, so no x is rounded away and the
        chart can be read against ``<name>.x``.

        With ``max_points``, a longer series is thinned to that many evenly spaced points (first
        and last kept): SQLite stores take ~0.25 ms a point, and curves need no more resolution.
        """
        from mlflow.entities import Metric

        pairs = [(float(s), float(v)) for s, v in zip(steps, values)
                 if v is not None and not (isinstance(v, float) and math.isnan(v))]
        curve = x_name is not None or any(math.isfinite(s) and not s.is_integer() for s, _ in pairs)
        if max_points and len(pairs) > max_points:
            idx = sorted({round(i * (len(pairs) - 1) / (max_points - 1)) for i in range(max_points)})
            pairs = [pairs[i] for i in idx]
        ts = int(time.time() * 1000)
        if not curve:
            self._put(run_id, "metrics", [Metric(name, v, ts, int(s)) for s, v in pairs])
            return
        self._put(run_id, "metrics", [m for i, (x, v) in enumerate(pairs)
                                      for m in (Metric(name, v, ts, i), Metric(f"{name}.x", x, ts, i))])

    def set_tags(self, run_id: str, tags: Mapping[str, Any]) -> None:
        self._put(run_id, "tags", {safe_key(k): str(v)[:5000] for k, v in tags.items()})

    def log_text(self, run_id: str, text: str, path: str) -> None:
        self._put(run_id, "call", (self.client.log_text, (run_id, text, path)))

    def log_json(self, run_id: str, obj: Any, path: str) -> None:
        # serialised now: the caller may change ``obj`` after this returns
        self.log_text(run_id, json.dumps(obj, indent=2, default=str), path)

    def log_bytes(self, run_id: str, data: bytes, path: str) -> None:
        self._put(run_id, "call", (self._write_bytes, (run_id, bytes(data), path)))

    def log_figure(self, run_id: str, fig: Any, path: str) -> None:
        """Rendered here, in the caller's thread (matplotlib's text layout is not thread-safe);
        the file is written by the writer. Draw figures inside :meth:`submit` to move the
        drawing itself off the caller's path too."""
        import io

        buf = io.BytesIO()
        fig.savefig(buf, format=Path(path).suffix.lstrip(".") or "png")
        self.log_bytes(run_id, buf.getvalue(), path)

    def submit(self, fn: Callable, *args, **kwargs) -> None:
        """Run ``fn(*args, **kwargs)`` on the writer, in order with the queued writes (e.g. drawing
        a run's plots); tracker calls made inside it are written at once, in order. Matplotlib is
        not thread-safe: draw either only in submitted functions or only in the caller's thread."""
        self.submit_for(None, fn, *args, **kwargs)

    def submit_for(self, run_id: str | None, fn: Callable, *args, **kwargs) -> None:
        """:meth:`submit` on behalf of ``run_id``: if ``fn`` raises, the error is recorded on that run,
        which then ends FAILED with it (as for a failed write)."""
        self._put(run_id, "call", (fn, args, kwargs))

    def end(self, run_id: str, status: str = "FINISHED", error: str | None = None) -> None:
        """End the run after every write queued for it. Ending the last open run waits for the
        queue (nothing is left unwritten when the caller returns or crashes on)."""
        with _signals_held():  # off the open list means queued to end
            with self._lock:
                self._open.discard(run_id)
                last = not self._open
            self._put(run_id, "end", (status, error))
        if last:
            self.flush()

    def flush(self, timeout_s: float | None = None) -> bool:
        """Wait until everything queued so far is written; False if ``timeout_s`` ran out."""
        if self._thread is None or threading.current_thread() is self._thread:
            return True
        t0 = time.perf_counter()
        try:
            if timeout_s is None:
                self._queue.join()
                return True
            while self._queue.unfinished_tasks:
                if time.perf_counter() - t0 > timeout_s:
                    return False
                time.sleep(0.01)
            return True
        finally:
            self.wait_s += time.perf_counter() - t0

    def close(self) -> None:
        """Flush and stop the writer thread (a later write starts a new one)."""
        self.flush()
        with self._lock:
            t, self._thread = self._thread, None
            if t is not None:
                self._queue.put(None)
        if t is not None:
            t.join(timeout=30)

    # ------------------------------------------------------------------ the writer
    def _put(self, run_id: str | None, kind: str, payload: Any) -> None:
        if not self.background or (self._thread is not None and threading.current_thread() is self._thread):
            self._apply([(run_id, kind, payload)])
            return
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._drain, name="dtlab-tracker", daemon=True)
                self._thread.start()
        self._queue.put((run_id, kind, payload))

    def _drain(self) -> None:
        while True:
            first = self._queue.get()
            if first is None:
                self._queue.task_done()
                return
            items = [first]
            while len(items) < 10_000:  # everything queued meanwhile, merged into fewer calls
                try:
                    nxt = self._queue.get_nowait()
                except queue.Empty:
                    break
                if nxt is None:
                    self._queue.put(None)  # handled on the next round, after these
                    self._queue.task_done()
                    break
                items.append(nxt)
            try:
                self._apply(items)
            finally:
                for _ in items:
                    self._queue.task_done()

    def _apply(self, items: list) -> None:
        """Run queued items in order; consecutive metrics/params/tags become one batch per run."""
        t0 = time.perf_counter()
        batches: dict[str, _Batch] = {}
        try:
            for run_id, kind, payload in items:
                if kind in ("metrics", "params", "tags"):
                    b = batches.setdefault(run_id, _Batch())
                    if kind == "metrics":
                        b.metrics.extend(payload)
                    else:
                        getattr(b, kind).update(payload)
                    continue
                self._write_batches(batches)  # what came before is written before a call or an end
                batches = {}
                if kind == "end":
                    self._end_now(run_id, *payload)
                else:
                    fn, args, *kw = payload
                    self._guard(run_id, fn, *args, **(kw[0] if kw else {}))
            self._write_batches(batches)
        finally:
            self.writer_s += time.perf_counter() - t0

    def _write_batches(self, batches: dict[str, _Batch]) -> None:
        from mlflow.entities import Param, RunTag

        for run_id, b in batches.items():
            params = [Param(k, v) for k, v in b.params.items()]
            tags = [RunTag(k, v) for k, v in b.tags.items()]
            metrics = b.metrics
            while params or tags or metrics:
                p, params = params[:_MAX_PARAMS_TAGS], params[_MAX_PARAMS_TAGS:]
                t, tags = tags[:_MAX_PARAMS_TAGS], tags[_MAX_PARAMS_TAGS:]
                n = _MAX_BATCH - len(p) - len(t)
                m, metrics = metrics[:n], metrics[n:]
                self._guard(run_id, self.client.log_batch, run_id, metrics=m, params=p, tags=t)

    def _guard(self, run_id: str | None, fn: Callable, *args, **kwargs) -> None:
        try:
            fn(*args, **kwargs)
        except Exception as e:  # noqa: BLE001 - recorded on the run, which then ends FAILED
            if not self.background:
                raise
            msg = f"tracking write failed: {type(e).__name__}: {e}"[:2000]
            log.warning("%s (run %s)", msg.splitlines()[0], run_id)
            if run_id is not None:
                self.errors.setdefault(run_id, msg)

    def _end_now(self, run_id: str, status: str, error: str | None) -> None:
        lost = self.errors.get(run_id)
        if lost and status == "FINISHED":
            status = "FAILED"
        error = "\n".join(e for e in (error, lost) if e)
        if error:
            self._guard(run_id, self.client.set_tag, run_id, "error", error[:5000])
        try:
            self.client.set_terminated(run_id, status=status)
        except Exception as e:  # noqa: BLE001
            log.warning("could not end MLflow run %s: %s", run_id, e)

    def _write_bytes(self, run_id: str, data: bytes, path: str) -> None:
        import tempfile

        with tempfile.TemporaryDirectory() as d:
            p = Path(d) / Path(path).name
            p.write_bytes(data)
            parent = str(Path(path).parent)
            self.client.log_artifact(run_id, str(p), None if parent == "." else parent)


_HELD = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


@contextlib.contextmanager
def _signals_held():
    """Hold Ctrl-C, SIGTERM and SIGHUP back for the block and deliver them right after it, so a
    handler that raises cannot land between two steps that must go together (a run created and
    registered open). Python runs signal handlers in the main thread whichever thread the kernel
    picked, so the handlers are swapped for a recorder (a thread mask would not do: another thread
    would take the signal). Outside the main thread handlers cannot run anyway: nothing to hold."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught: list[int] = []
    old = {sig: signal.signal(sig, lambda signum, _frame: caught.append(signum)) for sig in _HELD}
    try:
        yield
    finally:
        for sig, handler in old.items():
            signal.signal(sig, signal.SIG_DFL if handler is None else handler)
        for sig in caught:
            signal.raise_signal(sig)


_LIVE: "weakref.WeakSet[Tracker]" = weakref.WeakSet()


@atexit.register
def _flush_all() -> None:
    """Nothing queued is lost when the interpreter exits (the writer is a daemon thread)."""
    for t in list(_LIVE):
        try:
            t.flush(timeout_s=60)
        except Exception:  # noqa: BLE001
            pass
