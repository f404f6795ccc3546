"""Bad input: one line naming key, value and what is allowed; exit code 2; before Ray starts."""
import os
import subprocess
import sys

import pytest

DTLAB = [sys.executable, "-m", "pipelines.cli", "run"]


def run_cli(*args, env_extra=None):
    env = {**os.environ, "RAY_ADDRESS": "", **(env_extra or {})}
    return subprocess.run(DTLAB + list(args), capture_output=True, text=True, timeout=120, env=env,
                          cwd=os.path.dirname(os.path.dirname(os.path.dirname(__file__))))


@pytest.mark.parametrize("args, must_name", [
    (["experiment=nope"], "experiment='nope'"),
    (["experiment=error_feedback", "nosuchkey=1"], "nosuchkey"),
    (["experiment=error_feedback", "experiment.variants.ef.technique=nope"], "experiment.variants.ef.technique='nope'"),
    (["experiment=error_feedback", "experiment.variants.ef.params.iters=abc"], "experiment.variants.ef.params.iters='abc'"),
    (["experiment=error_feedback", "++experiment.variants.ef.params.step=-0.1"], "experiment.variants.ef.params.step=-0.1"),
    (["experiment=error_feedback", "experiment.variants.ef.params.iters=5"], "++KEY=VALUE"),
    (["experiment=error_feedback", "~experiment.variants.ef.params.compressor.ratio",
      "+experiment.variants.ef.params.compressor.k=400"], "compressor.k=400"),
    (["experiment=error_feedback", "experiment.variants.ef.params.method=sgd"], "experiment.variants.ef.params.method='sgd'"),
    (["experiment=error_feedback", "experiment.common.error_feedback.link.bandwidth=0Mbps"], "link.bandwidth='0Mbps'"),
    (["experiment=error_feedback", "debug=maybe"], "debug"),
    (["experiment=error_feedback", "only=[ef,nope]"], "only='nope'"),
    (["experiment=error_feedback", "only=ef,nope"], "use -m for a multirun"),
    (["-m", "experiment=error_feedback", "experiment.variants.ef.params.method=ef,sgd"], "experiment.variants.ef.params.method='sgd'"),
])
def test_bad_input_is_one_line_exit_2(args, must_name):
    r = run_cli(*args)
    assert r.returncode == 2, r.stderr
    lines = [ln for ln in r.stderr.strip().splitlines() if ln.strip()]
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith("dtlab: error: ")
    assert must_name in lines[0], lines[0]
    assert "ray" not in r.stdout.lower()  # nothing started


# ---------------------------------------------------------------- the validation pass, in process
PP = ["experiment=platform_probe", "debug=true"]
SW = PP + ["hparams_search=platform_probe_optuna"]
EF = ["experiment=error_feedback", "debug=true"]
BW = "experiment.common.error_feedback.link.bandwidth"


@pytest.mark.parametrize("overrides, multirun, must_name", [
    (EF + [f"{BW}=1.2.3Mbps"], False, "bandwidth='1.2.3Mbps'"),
    (EF + [f"{BW}=.Gbps"], False, "bandwidth='.Gbps'"),
    (EF + [f"{BW}=inf"], False, "finite bandwidth"),
    (EF + [f"{BW}=1e999bps"], False, "finite bandwidth"),
    (PP + ["experiment.seeds=[0],,[1]"], True, "experiment.seeds='[0],,[1]'"),
    (PP + ["experiment.seeds=range(0"], True, "experiment.seeds='range(0'"),
    (SW + ["hydra.sweeper.direction=sideways"], True, "direction='sideways': minimize or maximize"),
    (PP + ["experiment.seeds=[0],[1]", "hydra/launcher=nope"], True, "hydra/launcher='nope'"),
    (SW + ["hydra.sweeper.sampler._target_=optuna.samplers.Nope"], True, "sampler._target_='optuna.samplers.Nope'"),
    (PP + ["runs_dir=/proc/nope"], False, "runs_dir='/proc/nope'"),
    (SW + ["experiment.variants.a.params.value=interval(2.0,0.02)"], True, "low <= high"),
    (SW + ["experiment.variants.a.params.zz_nokey=interval(0,1)"], True, "Could not override 'experiment.variants.a.params.zz_nokey'"),
    (PP + ["cluster.num_cpus=-2"], False, "cluster.num_cpus=-2"),
    (PP + ["cluster.num_cpus=inf"], False, "cluster.num_cpus=inf"),
    (SW + ["objective='a.value +'"], True, "objective='a.value +'"),
    (SW + ["objective=zz.value"], True, "variant 'zz' does not run here"),
    (SW + ["hydra.sweeper.n_jobs=0"], True, "n_jobs=0: an integer >= 1"),
    (SW + ["hydra.sweeper.n_trials=-1"], True, "n_trials=-1"),
    (EF + ["++experiment.variants.ef.params.step=inf"], False, "step=inf: a finite number"),
    (PP + ["experiment.common.probe.seconds=inf"], False, "seconds=inf: a finite number"),
    (PP + ["only=[]"], False, "only=[]"),
    (PP + ["experiment.common.probe.steps=range(300,-300,-1)"], True, "steps=0"),   # job 301 of 600
    (PP + ["experiment.common.probe.steps=interval(1,9)"], True, "need an Optuna sweep"),
])
def test_validation_pass_rejects_in_one_line(overrides, multirun, must_name, tmp_path):
    from components.core.errors import ConfigError
    from pipelines.preflight import check

    # Execute
    with pytest.raises(ConfigError) as e:
        check(overrides + ([f"runs_dir={tmp_path}"] if not any(o.startswith("runs_dir") for o in overrides) else []),
              multirun)
    # Assert
    assert must_name in str(e.value) and "\n" not in str(e.value), str(e.value)


def test_every_job_of_a_large_multirun_is_checked_quickly(tmp_path):
    import time

    from pipelines.preflight import check, jobs_of

    # Prepare: 599 jobs, all valid
    overrides = PP + ["experiment.common.probe.steps=range(1,600)", f"runs_dir={tmp_path}"]
    # Execute
    t0 = time.perf_counter()
    check(overrides, True)
    elapsed = time.perf_counter() - t0
    # Assert
    assert len(jobs_of(overrides, True)[0]) == 599
    print(f"599 multirun jobs composed and validated in {elapsed:.1f} s")
    assert elapsed < 120  # 599 full Hydra compositions take minutes


@pytest.mark.parametrize("text, where", [("name: x\nvariants:\n\ta: {technique: probe}\n", ":3:1"),
                                         ("name: x\nseeds: [0, 1\nvariants: {}\n", "zz_broken.yaml:")])
def test_yaml_syntax_error_is_one_line_with_file_and_line(text, where, tmp_path, monkeypatch):
    import shutil

    from components.core.errors import ConfigError
    from pipelines import config
    from pipelines.preflight import check

    # Prepare: a copy of conf/ with a broken experiment file
    conf = tmp_path / "conf"
    shutil.copytree(config.CONF_DIR, conf)
    (conf / "experiment" / "zz_broken.yaml").write_text(text)
    monkeypatch.setattr(config, "CONF_DIR", conf)
    # Execute
    with pytest.raises(ConfigError) as e:
        check(["experiment=zz_broken", f"runs_dir={tmp_path}"], False)
    # Assert
    assert "YAML syntax error at" in str(e.value) and where in str(e.value) and "\n" not in str(e.value)


def test_params_refuse_non_finite_floats_unless_infinity_is_the_default():
    import dataclasses
    import math

    from components.core.errors import ConfigError
    from components.core.params import parse_params

    # Prepare
    @dataclasses.dataclass
    class P:
        step: float = 0.1
        cap: float = math.inf                                             # "no cap"
        limit: float = dataclasses.field(default=1.0, metadata={"finite": False})

    # Execute / Assert
    for raw in ({"step": math.inf}, {"step": math.nan}, {"step": -math.inf}, {"cap": math.nan}):
        with pytest.raises(ConfigError):
            parse_params(P, raw)
    assert parse_params(P, {"cap": math.inf, "limit": math.inf}).cap == math.inf


@pytest.mark.parametrize("text", ["1.2.3Mbps", ".Gbps", "inf", "1e999bps", "nan", "Mbps", "-5Mbps"])
def test_bad_bandwidth_strings_are_config_errors(text):
    from components.core.errors import ConfigError
    from components.core.netsim import parse_bandwidth

    with pytest.raises(ConfigError):
        parse_bandwidth(text)


def test_good_bandwidth_strings_parse():
    from components.core.netsim import parse_bandwidth

    assert parse_bandwidth(".5Gbps") == 5e8 and parse_bandwidth("80Mbps") == 8e7 and parse_bandwidth("1.5e9") == 1.5e9


def test_a_valid_multirun_over_experiments_passes(tmp_path):
    from pipelines.preflight import check, jobs_of

    overrides = ["experiment=platform_probe,error_feedback", "debug=true", f"runs_dir={tmp_path}"]
    assert check(overrides, True)["experiment"]["name"] == "platform_probe"
    assert len(jobs_of(overrides, True)[0]) == 2
