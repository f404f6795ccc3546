"""SIGTERM and SIGHUP as Ctrl-C in a driver: a `timeout`, a closed terminal or a scheduler ends a
run, a multirun or a sweep the way Ctrl-C does, so no MLflow run is left RUNNING.

Process plumbing shared by the DAG (pipelines/dag.py), the Ray launcher and the Optuna sweeper
(hydra_plugins/), so it sits below both.
"""
from __future__ import annotations

import contextlib
import signal
import threading

_received: list[str] = []  # signals turned into Terminated during this process's current run


class Terminated(KeyboardInterrupt):
    """SIGTERM or SIGHUP reached the driver: the run ends like Ctrl-C (its runs KILLED, with the reason)."""


@contextlib.contextmanager
def terminate_as_interrupt():
    """In a driver's main thread, turn SIGTERM and SIGHUP into :class:`Terminated` for the block
    (a `timeout`, a closed terminal or a scheduler then leaves no MLflow run RUNNING)."""
    in_worker = False
    try:
        import ray

        in_worker = ray.is_initialized() and ray.get_runtime_context().worker.mode == ray.WORKER_MODE
    except Exception:  # noqa: BLE001 - no Ray context: a plain driver
        pass
    if threading.current_thread() is not threading.main_thread() or in_worker:
        yield lambda: None
        return

    def handler(signum, _frame):
        _received.append(signal.Signals(signum).name)  # Ray's waits re-raise it as a bare KeyboardInterrupt
        raise Terminated(f"stopped by {signal.Signals(signum).name}")

    def install() -> None:  # again after ray.init, which sets its own SIGTERM handler in the driver
        for sig in (signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, handler)

    old = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGHUP)}
    _received.clear()
    install()
    try:
        yield install
    finally:
        for sig, h in old.items():
            signal.signal(sig, h)


def interrupt_reason(e: BaseException) -> str:
    """``stopped by SIGTERM`` / ``SIGHUP`` / ``Ctrl-C (SIGINT)``: what ended the driver."""
    if isinstance(e, Terminated):
        return str(e)
    return f"stopped by {_received[-1]}" if _received else "stopped by Ctrl-C (SIGINT)"
