"""`dtlab run` on the command line: no experiment means no run, Ctrl-C is one line and exit 130,
and --dry-run / `dtlab list NAME OVERRIDES` show what will run (debug overlay and defaults in)."""
import os
import pty
import re
import select
import signal
import subprocess
import sys

import pytest

from pipelines.config import ROOT, experiment_names


def dtlab(*args, timeout=180):
    """A `dtlab` subprocess with stdin closed (not a terminal); (returncode, stdout, stderr)."""
    r = subprocess.run([sys.executable, "-m", "pipelines.cli", *args], capture_output=True, text=True,
                       stdin=subprocess.DEVNULL, timeout=timeout, cwd=ROOT, env={**os.environ, "COLUMNS": "300"})
    return r.returncode, r.stdout, r.stderr


# ------------------------------------------------------------------------- bare `dtlab run`
@pytest.mark.parametrize("args", [(), ("debug=true",)])
def test_run_without_experiment_prints_usage_and_the_list_and_exits_2(args):
    # Execute
    rc, out, err = dtlab("run", *args)
    # Assert: usage, every experiment, exit 2, and nothing started
    assert rc == 2, err[-2000:]
    assert "usage: dtlab run experiment=NAME" in err and "experiment=NAME is required" in err
    assert all(name in err for name in experiment_names())
    assert "Ray:" not in out + err and "MLflow:" not in out


def test_run_without_experiment_on_a_terminal_asks_which():
    # Prepare: stdin and stdout a terminal
    master, slave = pty.openpty()
    p = subprocess.Popen([sys.executable, "-m", "pipelines.cli", "run"], stdin=slave, stdout=slave, stderr=slave,
                         cwd=ROOT, close_fds=True)
    os.close(slave)
    seen = b""
    try:
        while b"which experiment" not in seen and p.poll() is None:
            if select.select([master], [], [], 60)[0]:
                seen += os.read(master, 4096)
        # Execute: an answer that is no experiment
        os.write(master, b"no_such_experiment\n")
        rc = p.wait(timeout=60)
        while select.select([master], [], [], 0.5)[0]:
            try:
                seen += os.read(master, 4096)
            except OSError:
                break
    finally:
        if p.poll() is None:
            p.kill()
        os.close(master)
    text = seen.decode(errors="replace")
    # Assert: it listed the experiments, asked, and refused the unknown answer without running
    assert "error_feedback" in text and "which experiment" in text
    assert rc == 2 and "unknown experiment" in text


def test_which_experiment_takes_a_name_or_a_number():
    from pipelines.cli import which_experiment

    names = experiment_names()
    # Execute / Assert
    assert which_experiment(ask=lambda _: "2", tty=True) == names[1]
    assert which_experiment(ask=lambda _: f" {names[0]} ", tty=True) == names[0]
    with pytest.raises(SystemExit) as e:
        which_experiment(ask=lambda _: "", tty=True)
    assert e.value.code == 2


def test_makefile_demo_names_its_experiment():
    # Assert: `make demo` keeps working once a bare `dtlab run` no longer runs a default
    demo = (ROOT / "Makefile").read_text().split("\ndemo:", 1)[1].split("\n\n", 1)[0]
    assert "dtlab run experiment=error_feedback" in demo


# ---------------------------------------------------------------------------- preview
def test_dry_run_prints_the_debug_flavour_with_technique_defaults_and_starts_nothing(tmp_path):
    # Execute
    rc, out, err = dtlab("run", "experiment=error_feedback", "debug=true", "only=[gd]", f"runs_dir={tmp_path}",
                         "--dry-run")
    # Assert: the debug value (iters 200, not 600), defaults no YAML sets, the prepare step, claims
    assert rc == 0, err[-2000:]
    assert "DEBUG flavour" in out and "gd: technique error_feedback, role baseline, seeds [0]" in out
    assert "      iters = 200" in out and "      tail = 50" in out            # debug block, common + variant
    assert "      tol_grad_norm = 1e-08" in out and "      stop_grad_norm_sq = 1e-26" in out   # technique defaults
    assert "      link.bandwidth = 100Mbps" in out
    assert "problems: step ef_problems" in out and "      quad_dim = 40" in out
    assert re.search(r"ef_lyapunov_within_rho_star \[gated; not run \(needs ef, ef_logreg\)\]", out)
    assert "dist_ef21:" not in out                                           # only= honoured
    assert "nothing started" in out and "Ray:" not in out + err
    assert not (tmp_path / "mlflow.db").exists()


def test_dry_run_of_a_multirun_lists_every_job():
    # Execute
    rc, out, err = dtlab("run", "-m", "experiment=platform_probe", "debug=true", "experiment.seeds=[0],[1,2]",
                         "--dry-run")
    # Assert
    assert rc == 0, err[-2000:]
    assert "#0: experiment=platform_probe debug=true experiment.seeds=[0]" in out
    assert "#1: experiment=platform_probe debug=true experiment.seeds=[1,2]" in out
    assert "2 job(s) checked" in out and "      seconds = 0.2" in out


def test_dry_run_rejects_bad_input_in_one_line():
    # Execute
    rc, out, err = dtlab("run", "experiment=platform_probe", "only=[zz]", "--dry-run")
    # Assert
    assert rc == 2 and len(err.strip().splitlines()) == 1 and "only='zz'" in err


def test_list_experiment_honours_debug_and_other_overrides():
    # Execute: error_feedback's debug block sets seeds [0]; the override wins over it
    rc_full, full, _ = dtlab("list", "error_feedback")
    rc, out, err = dtlab("list", "error_feedback", "debug=true", "only=[gd,ef]", "experiment.seeds=[3,4]")
    # Assert
    assert rc_full == 0 and rc == 0, err[-2000:]
    assert "DEBUG flavour" in out and "DEBUG flavour" not in full
    rows = [line for line in out.splitlines() if re.match(r"^│ \w+ +│ \w+ +│ (baseline|technique)", line)]
    assert sorted(r.split("│")[1].strip() for r in rows) == ["ef", "gd"]
    assert all("3,4" in r for r in rows)
    assert "dist_ef21" in full


def test_list_experiment_rejects_a_bad_override_in_one_line():
    # Execute
    rc, _, err = dtlab("list", "error_feedback", "only=[zz]")
    # Assert
    assert rc == 2 and len(err.strip().splitlines()) == 1 and "only" in err


# ---------------------------------------------------------------------------- Ctrl-C
def test_ctrl_c_during_a_run_is_one_line_and_exit_130(tmp_path):
    from mlflow.tracking import MlflowClient

    from tests.probe_runs import wait_for_variant_runs
    from tests.reliability.test_interrupts import _dtlab, _interruptible

    # Prepare: the store made first (no two processes create its tables at once), then a debug
    # probe run whose variants take a minute
    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path}/mlflow.db")
    client.search_experiments()
    cmd, env = _dtlab(tmp_path, "experiment=platform_probe", "debug=true", "experiment.common.probe.seconds=60")
    p = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                         preexec_fn=_interruptible)
    try:
        exp, _running = wait_for_variant_runs(p, client)
        # Execute
        p.send_signal(signal.SIGINT)
        _, err = p.communicate(timeout=120)
    finally:
        if p.poll() is None:
            p.kill()
    # Assert: exit 130, no traceback, one line that counts the runs it ended
    assert p.returncode == 130, err[-3000:]
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err[-3000:]
    m = re.search(r"dtlab: interrupted by Ctrl-C \(SIGINT\): (\d+) run\(s\) ended KILLED", err)
    assert m, err[-3000:]
    runs = client.search_runs([exp.experiment_id])
    assert [r for r in runs if r.info.status == "RUNNING"] == []
    assert int(m.group(1)) == sum(r.info.status == "KILLED" for r in runs) >= 2


def test_interrupt_line_names_the_signal_and_exits_128_plus_its_number(capsys):
    from pipelines.cli import interrupted

    # Prepare: SIGTERM as the DAG hands it on (runs counted), and a Ctrl-C before any run opened
    term = KeyboardInterrupt("stopped by SIGTERM")
    term.dtlab_runs_ended, term.dtlab_signal = 3, "SIGTERM"
    # Execute
    codes = []
    for e in (term, KeyboardInterrupt()):
        with pytest.raises(SystemExit) as x:
            interrupted(e)
        codes.append(x.value.code)
    err = capsys.readouterr().err.splitlines()
    # Assert
    assert codes == [128 + signal.SIGTERM, 130]
    assert err == ["dtlab: interrupted by SIGTERM: 3 run(s) ended KILLED (their error tag names the signal)",
                   "dtlab: interrupted by Ctrl-C (SIGINT)"]
