"""training_composed: the variants are Hydra compositions of the conf/training pieces (no fourth
implementation), bad pieces fail before Ray, and the debug flavour runs end to end (slow)."""
import subprocess
import sys

import pytest

from pipelines import config
from pipelines.experiment import build_spec


def _spec(*overrides, debug=False):
    cfg = config.compose(["experiment=training_composed", *overrides])
    return {v.name: v for v in build_spec(dict(cfg["experiment"]), debug=debug).variants}


def test_variants_are_compositions_of_the_pieces():
    # Prepare / Execute
    v = _spec()
    # Assert: block, sync and recovery each come from their piece; the shared knobs from dp_small
    assert (v["composed"].technique, v["composed"].params.block, v["composed"].params.bits) == ("duo", "fal", 1)
    assert v["composed"].params.takeover["recovery"] == "mecefo"
    assert (v["fal"].technique, v["fal"].params.block, v["fal"].params.takeover["recovery"]) == ("ddp_train", "fal", "ndb")
    assert (v["duo"].technique, v["duo"].params.block) == ("duo", "pre_ln")
    assert v["mecefo"].params.takeover["recovery"] == "mecefo" and v["mecefo"].params.method == "fp32"
    assert v["fp32"].params.takeover["recovery"] == "ndb" and v["fp32"].params.block == "pre_ln"
    schedule = {n: {k: x.params.takeover[k] for k in ("failure_rate", "down_steps")} for n, x in v.items()}
    assert len({tuple(s.values()) for s in schedule.values()}) == 1          # one failure schedule for all
    assert len({(x.params.steps, x.params.lr, x.params.model) for x in v.values()}) == 1


def test_debug_flavour_fails_replica_one_once():
    v = _spec(debug=True)
    assert all(x.params.takeover["kills"] == [[5, 1]] and x.params.workers == 2 for x in v.values())


def test_bad_piece_value_is_one_line_before_ray():
    # Prepare / Execute: a failure rate of 1 on the composed variant
    r = subprocess.run([sys.executable, "-m", "pipelines.cli", "run", "experiment=training_composed",
                        "experiment.variants.composed.params.takeover.failure_rate=1.0"],
                       capture_output=True, text=True, timeout=120)
    # Assert
    assert r.returncode == 2, r.stdout + r.stderr
    assert "takeover.failure_rate=1.0: a probability in [0, 1)" in r.stderr
    assert "Ray:" not in r.stdout                   # rejected before the cluster starts


@pytest.mark.slow   # five Ray Train jobs, ~2 min: runs in `make bench`
def test_debug_experiment_end_to_end(run_experiment, mlflow_client):
    out = run_experiment("training_composed")
    assert not out.failed, {n: (o.status, o.error) for n, o in out.variants.items()}
    for name, o in out.variants.items():
        m = o.result.metrics
        assert m["ranks_agree"] == 1.0 and m["takeover_microbatches"] == 6, name   # replica 1 down steps 5..10
        assert m["sim_step_s"] > m["sim_step_s_fault_free"] > 0 and 0 < m["throughput_loss"] < 1
        assert mlflow_client.get_run(o.run_id).info.status == "FINISHED"
    judged = {c.name: c for c in out.claims}
    assert all(not c.error and not c.skipped for c in judged.values()), [(c.name, c.error) for c in out.claims]
    # the composed variant's first 20 steps (the failure at step 5 among them) on Ray Train, bit for bit
    assert out.variants["composed"].result.metrics["ray_check_bitwise"] == 1.0
    assert judged["in_process_ranks_equal_ray_train"].holds is True
