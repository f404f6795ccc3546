"""Provenance that can be replayed, and multirun parents and experiments that can be told apart:
``dtlab.command`` is a shell command that runs the same job again, a multirun job's parent is named
by its overrides, and an experiment carries MLflow 3's experiment type and its YAML's summary."""
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from mlflow.tracking import MlflowClient

from components.core.provenance import job_label, parent_run_name, replay_command, reproducibility_tags
from components.core.tracker import EXPERIMENT_KIND, EXPERIMENT_KIND_TAG, NOTE_TAG, Tracker

ROOT = Path(__file__).resolve().parents[2]


def test_the_command_is_dtlab_run_with_the_jobs_overrides_shell_quoted():
    # Prepare / Execute
    cmd = reproducibility_tags(["experiment=error_feedback", "experiment.seeds=[0]", "debug=true"])["dtlab.command"]
    # Assert: the subcommand is there and the list survives a shell
    assert cmd == "dtlab run experiment=error_feedback 'experiment.seeds=[0]' debug=true"
    assert shlex.split(cmd)[2:] == ["experiment=error_feedback", "experiment.seeds=[0]", "debug=true"]


def test_a_sweep_trials_command_runs_that_trial_not_the_sweep():
    # Prepare: a trial's overrides as the Optuna sweeper passes them
    overrides = ["experiment=platform_probe", "hparams_search=platform_probe_optuna", "debug=true",
                 "experiment.variants.a.params.value=3.25", "++experiment.variants.a.params.fail_at_step=-1",
                 "sweep_run_id=abc123", "sweep_trial=4"]
    # Execute
    cmd = shlex.split(replay_command(overrides))
    # Assert: the sweep's bookkeeping is dropped and Hydra is told to run one job
    assert cmd[:2] == ["dtlab", "run"]
    assert not any(a.startswith(("sweep_run_id", "sweep_trial")) for a in cmd)
    assert cmd[-1] == "hydra.mode=RUN"
    assert "++experiment.variants.a.params.fail_at_step=-1" in cmd
    assert "hydra.mode=RUN" not in replay_command(["experiment=x", "hparams_search=null"])


def test_a_trials_command_passes_preflight_as_one_run():
    from pipelines.preflight import jobs_of

    # Prepare: what a trial of the probe's sweep records
    args = shlex.split(replay_command(["experiment=platform_probe", "hparams_search=platform_probe_optuna",
                                       "debug=true", "experiment.variants.a.params.value=3.25",
                                       "sweep_run_id=abc", "sweep_trial=2"]))[2:]
    # Execute: the validation `dtlab run` does first (it composes the hparams_search YAML too)
    jobs, multirun = jobs_of(args, multirun=False)
    # Assert: one job, not a sweep
    assert multirun is False and jobs == [args]


def test_multirun_parents_are_named_by_their_overrides():
    # Prepare: two jobs of one multirun, a sweep trial and a single run
    job = {"_job": 0, "debug": False, "_overrides": ["experiment=error_feedback",
                                                     "experiment.variants.dist_ef21.params.step=0.25041307629998927",
                                                     "experiment.seeds=[1]"]}
    trial = {"_job": 3, "debug": True, "sweep_trial": 3,
             "_overrides": ["experiment=platform_probe", "hparams_search=platform_probe_optuna", "debug=true",
                            "experiment.variants.a.params.value=1.5", "sweep_run_id=r", "sweep_trial=3"]}
    # Execute / Assert
    assert parent_run_name("error_feedback", job, "20261202-1200") == "error_feedback · step=0.2504,seeds=[1]"
    assert parent_run_name("platform_probe", trial, "x") == "platform_probe-debug · #3 value=1.5"
    assert parent_run_name("error_feedback", {"_job": "", "debug": True}, "20261202-1200") == \
        "error_feedback-debug-20261202-1200"
    # two keys ending alike keep enough of their path to be told apart; a long label is cut
    assert job_label(["a.link.bandwidth=80Mbps", "b.link.bandwidth=1Gbps"]) == \
        "a.link.bandwidth=80Mbps,b.link.bandwidth=1Gbps"
    long = job_label([f"experiment.common.k{i}=value{i}" for i in range(30)], width=40)
    assert len(long) == 40 and long.endswith("…")


def test_an_experiment_gets_its_type_and_description(tmp_path):
    # Prepare
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    tracker = Tracker(uri, background=False)
    client = MlflowClient(tracking_uri=uri)
    old = client.create_experiment("made_before")   # an experiment from before these tags
    # Execute
    new = tracker.experiment_id("fresh", description="EF21 vs CGD on 4 agents")
    again = tracker.experiment_id("made_before", description="the platform itself")
    edited = tracker.experiment_id("fresh", description="a summary edited since")
    # Assert: MLflow 3's model-development view (not GenAI), the YAML's summary as the description
    for eid, note in ((new, "a summary edited since"), (old, "the platform itself")):
        tags = client.get_experiment(eid).tags
        assert tags[EXPERIMENT_KIND_TAG] == EXPERIMENT_KIND == "custom_model_development"
        assert tags[NOTE_TAG] == note
    assert again == old and edited == new


def _dtlab(runs, *args, timeout=600):
    env = {**os.environ, "DTLAB_RUNS_DIR": str(runs), "RAY_ADDRESS": "",
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    env.pop("MLFLOW_TRACKING_URI", None)
    return subprocess.run(list(args), capture_output=True, text=True, timeout=timeout, env=env, cwd=ROOT)


def _config(client, run_id) -> dict:
    """The parent's config.yaml, less what tells a multirun job from a single run (its number and
    overrides), none of which changes what the job runs."""
    path = client.download_artifacts(run_id, "config.yaml")
    cfg = yaml.safe_load(Path(path).read_text())
    return {k: v for k, v in cfg.items() if k not in ("_job", "_overrides", "sweep_run_id", "sweep_trial")}


@pytest.mark.slow   # two debug runs of the probe (a multirun job on the Ray launcher, then its replay): ~60 s
def test_a_multirun_jobs_recorded_command_replays_the_same_job(tmp_path):
    # Prepare: a one-job multirun on the Ray launcher (the job runs in a Ray worker process)
    r = _dtlab(tmp_path, sys.executable, "-m", "pipelines.cli", "run", "-m", "experiment=platform_probe", "debug=true",
               "only=[a]", "experiment.variants.a.params.value=2.5,3.5", "cluster.include_dashboard=false")
    assert r.returncode == 0, r.stderr[-3000:]
    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path}/mlflow.db")
    exp = client.get_experiment_by_name("platform_probe")
    parents = client.search_runs([exp.experiment_id], "tags.`dtlab.kind` = 'parent'")
    job = next(p for p in parents if p.data.tags["hydra.job"] == "1")
    command = job.data.tags["dtlab.command"]
    # the summary names both jobs, their overrides, status and parent run
    summary = [ln for ln in r.stdout.splitlines() if ln.lstrip().startswith("#")]
    assert len(summary) == 2 and all("FINISHED" in ln for ln in summary), r.stdout[-2000:]
    assert any("value=3.5" in ln and job.info.run_id in ln for ln in summary)
    assert job.info.run_name == "platform_probe-debug · only=[a],value=3.5,include_dashboard=false"
    # Execute: the recorded command, as a shell would run it
    assert shlex.split(command)[:2] == ["dtlab", "run"] and "default_worker" not in command
    replay = _dtlab(tmp_path, "bash", "-c", command)
    # Assert: a single run whose parent has the same config
    assert replay.returncode == 0, replay.stderr[-3000:]
    after = client.search_runs([exp.experiment_id], "tags.`dtlab.kind` = 'parent'", order_by=["attributes.start_time DESC"])
    new = after[0]
    assert new.info.run_id not in {p.info.run_id for p in parents}
    assert new.data.tags["hydra.job"] == ""
    assert _config(client, new.info.run_id) == _config(client, job.info.run_id)
    assert new.data.tags["dtlab.command"] == command
