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
