"""What a multirun prints and hands back, without Ray: one summary line per job, a job whose task
died comes back FAILED naming the Ray error (not a crash of the whole multirun), and third-party
import chatter (faiss's loader) stays below WARNING."""
import logging
import subprocess
import sys

from hydra.core.utils import JobStatus

from hydra_plugins.dtlab_optuna_sweeper.sweeper import infra_cause
from components.core.verbosity import quiet_loggers
from hydra_plugins.dtlab_ray_launcher.launcher import lost_job, short_overrides, summary_lines


def test_the_summary_has_one_line_per_job_with_status_headline_and_parent():
    # Prepare
    rows = [{"idx": 0, "overrides": short_overrides(["experiment=error_feedback", "experiment.seeds=[0]"]),
             "status": "FINISHED", "headline": "claims 5/6 hold", "parent": "aaa111"},
            {"idx": 1, "overrides": short_overrides(["experiment=error_feedback", "experiment.seeds=[1]"]),
             "status": "FAILED", "headline": "RuntimeError: job 1: variants failed: dist_cgd", "parent": "bbb222"}]
    # Execute
    lines = summary_lines(rows)
    # Assert: a header, then per job its number, overrides (the experiment is in the name already), status,
    # headline and parent run
    assert lines[0] == "multirun: 2 job(s), 1 finished"
    assert lines[1].split()[:4] == ["#0", "seeds=[0]", "FINISHED", "claims"] and lines[1].endswith("parent aaa111")
    assert "FAILED" in lines[2] and "variants failed: dist_cgd" in lines[2] and lines[2].endswith("parent bbb222")
    assert summary_lines([]) == []


def test_a_job_whose_worker_died_is_a_failed_return_a_sweeper_can_classify():
    from ray.exceptions import WorkerCrashedError

    # Execute
    ret = lost_job(["experiment=x", "seed=1"], WorkerCrashedError())
    # Assert
    assert ret.status == JobStatus.FAILED and ret.overrides == ["experiment=x", "seed=1"]
    try:
        ret.return_value
        raise AssertionError("a failed JobReturn raises its error")
    except RuntimeError as e:
        text = str(e)
    assert text.startswith("WorkerCrashedError") and "\n" not in text
    assert infra_cause([text])


def test_faiss_loader_info_is_quiet():
    # Prepare: the root logger at INFO, as Hydra's job logging sets it
    logger = logging.getLogger("faiss.loader")
    logger.setLevel(logging.NOTSET)
    root = logging.getLogger()
    old = root.level
    root.setLevel(logging.INFO)
    try:
        assert logger.isEnabledFor(logging.INFO)
        # Execute
        quiet_loggers()
        # Assert: its INFO lines (the build it loads, the other build's ModuleNotFoundError) are dropped
        assert not logger.isEnabledFor(logging.INFO) and logger.isEnabledFor(logging.WARNING)
    finally:
        root.setLevel(old)


def test_a_job_that_imports_faiss_prints_nothing_about_its_loader():
    # Prepare: INFO on the root logger (Hydra's job logging), faiss imported after the launcher's set-up
    def run(quiet: bool) -> str:
        code = ("import logging; logging.basicConfig(level=logging.INFO)\n"
                + ("from components.core.verbosity import quiet_loggers; quiet_loggers()\n" if quiet else "")
                + "import faiss")
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr[-2000:]
        return r.stdout + r.stderr

    # Execute / Assert: faiss's loader speaks at INFO (the precondition), and not after quiet_loggers
    assert "faiss.loader" in run(quiet=False)
    assert "faiss" not in run(quiet=True)
