"""A run ended by SIGTERM or SIGHUP (a `timeout`, a closed terminal, a scheduler) leaves no MLflow
run RUNNING: its runs end KILLED with the signal named, as with Ctrl-C."""
import signal

import pytest

from tests.probe_runs import start_probe_run, wait_for_variant_runs


@pytest.mark.parametrize("sig", [signal.SIGTERM, pytest.param(signal.SIGHUP, marks=pytest.mark.slow)])
def test_signal_ends_every_run_killed(sig, tmp_path):
    # Prepare: a debug probe run whose variants take a minute (the command line wins over debug)
    p, client = start_probe_run(tmp_path)
    try:
        exp, running = wait_for_variant_runs(p, client)
        # Execute
        p.send_signal(sig)
        rc = p.wait(timeout=120)
    finally:
        if p.poll() is None:
            p.kill()
    # Assert
    runs = client.search_runs([exp.experiment_id])
    assert rc != 0
    assert [r.info.status for r in runs if r.info.status == "RUNNING"] == []
    parent = next(r for r in runs if r.data.tags.get("dtlab.kind") == "parent")
    assert parent.info.status == "KILLED" and signal.Signals(sig).name in parent.data.tags.get("error", "")
    assert float(client.get_run(running[0].info.run_id).data.params["seconds"]) == 60.0  # the override won
