"""The spine's own mechanisms, end to end through the DAG: the seed axis (one task per variant x
seed, aggregates, pairing), the prepare graph (only what is needed, upstream first, by name, per
seed, cached by sound keys), grids and claims over axes, and MLflow's layout of all of it."""
from __future__ import annotations

import copy
import math

import pytest

from components.core.errors import ConfigError
from pipelines import config, dag
from pipelines.experiment import build_spec

PROBE = {"seconds": 0.05, "steps": 2, "mode": "sleep"}


def _experiment(**over) -> dict:
    exp = {"name": "spine_check", "family": "core", "summary": "spine self-check", "seeds": [0, 1, 2],
           "resources": {"num_cpus": 0.5},
           "prepare": {"table": {"step": "probe_table", "params": {"n": 4}},
                       "draw": {"step": "probe_draw", "params": {}},
                       "unused": {"step": "probe_table", "params": {"n": 7}}},
           "common": {"probe": PROBE},
           "variants": {"reader": {"technique": "probe_reader", "role": "technique"},
                        "ours": {"technique": "probe", "role": "technique", "params": {"value": 1.0, "noise": 0.1}},
                        "base": {"technique": "probe", "role": "baseline", "params": {"value": 0.5, "noise": 0.1}}},
           "claims": {"paired_gain": {"holds": "paired(ours.value - base.value) >= 0.4 and "
                                               "paired(ours.value - base.value) > 2 * paired_se(ours.value - base.value)",
                                      "measured": "[paired(ours.value - base.value), paired_se(ours.value - base.value)]"},
                      "reader_sees_its_seed": {"holds": "reader.draw_seed_n == 3 and reader.table_sum == 6"}},
           "report": {"baseline": "base"}}
    exp.update(over)
    return copy.deepcopy(exp)


@pytest.fixture()
def run_custom(ray_session, tracking_uri, runs_dir):
    def _run(exp: dict, *overrides: str, runs=None):
        cfg = config.compose(["experiment=platform_probe", f"runs_dir={runs or runs_dir}", *overrides])
        cfg["experiment"] = exp
        return dag.run(cfg, console=None)

    return _run


def test_seed_axis_runs_one_task_per_seed_and_pairs_technique_with_baseline(run_custom, mlflow_client):
    # Execute
    out = run_custom(_experiment())
    # Assert: aggregates over the three seeds, the per-seed values kept, the paired claim judged
    assert not out.failed, {n: v.error for n, v in out.variants.items()}
    ours, base = out.variants["ours"], out.variants["base"]
    assert sorted(ours.seeds) == [0, 1, 2]
    per_seed = ours.seed_metrics()
    assert sorted(per_seed) == [0, 1, 2] and len({m["value"] for m in per_seed.values()}) == 3
    m = ours.result.metrics
    assert m["value_n"] == 3 and math.isclose(m["value"], sum(v["value"] for v in per_seed.values()) / 3)
    assert m["value_se"] > 0
    diffs = [per_seed[s]["value"] - base.seed_metrics()[s]["value"] for s in range(3)]
    assert all(math.isclose(d, 0.5) for d in diffs)  # same seed, same draw: the noise cancels in pairs
    claims = {c.name: c for c in out.claims}
    assert claims["paired_gain"].holds and claims["paired_gain"].measured.startswith("[0.5, ")
    assert claims["reader_sees_its_seed"].holds
    # MLflow: the variant's run holds the aggregates; one run per seed nested under it
    run = mlflow_client.get_run(ours.run_id)
    assert run.data.metrics["value_n"] == 3 and "value_se" in run.data.metrics
    assert run.data.params["noise"] == "0.1" and run.data.params["fail_at_step"] == "-1"  # defaults logged
    kids = mlflow_client.search_runs([out.experiment_id], f"tags.`mlflow.parentRunId` = '{ours.run_id}'")
    assert sorted(r.data.tags["seed"] for r in kids) == ["0", "1", "2"]
    assert all(r.info.status == "FINISHED" for r in kids)


def test_prepare_graph_runs_only_what_is_needed_in_order_by_name_and_per_seed(run_custom, tmp_path):
    # Prepare: a fresh cache
    exp = _experiment()
    # Execute: twice, the second run from the cache; then with other seeds
    first = run_custom(exp, runs=tmp_path)
    second = run_custom(exp, runs=tmp_path)
    other = run_custom(_experiment(seeds=[5]), runs=tmp_path)
    # Assert: the unused entry never ran; the seeded one ran per seed, its upstream once
    assert first.prepare_cache == {"table": "miss", "draw@0": "miss", "draw@1": "miss", "draw@2": "miss"}
    assert set(second.prepare_cache.values()) == {"hit"}
    assert other.prepare_cache == {"table": "hit", "draw@5": "miss"}
    reader = first.variants["reader"]
    for seed, m in reader.seed_metrics().items():
        assert m["draw_seed"] == seed and m["seed"] == seed       # seed s got the draw built for s
        assert m["n_inputs"] == 2 and m["draw_table_sum"] == 6    # only what it declared; upstream by name


def test_a_failed_seed_fails_its_variant_and_its_claims(run_custom):
    # Prepare
    exp = _experiment(claims={"ours_positive": {"holds": "ours.value > 0"}})
    exp["variants"]["ours"]["params"]["fail_on_seed"] = 1
    # Execute
    out = run_custom(exp)
    # Assert
    ours = out.variants["ours"]
    assert out.failed == ["ours"] and ours.status == "FAILED" and "seed 1" in ours.error
    assert ours.seeds[0].status == "FINISHED" and ours.seeds[1].status == "FAILED"
    claim = out.claims[0]
    assert claim.holds is False and "no results" in claim.error


def test_grid_cells_and_a_claim_over_an_axis(run_custom):
    # Prepare: value on an axis; the claim needs at least 2 of 3 cells
    exp = _experiment(seeds=[0], axes={"level": [0.2, 1.0, 2.0]}, prepare={},
                      variants={"ours": {"technique": "probe", "over": ["level"], "params": {"value": "{level}"}},
                                "base": {"technique": "probe", "role": "baseline", "params": {"value": 0.5}}},
                      claims={"beats_base": {"over": "level", "at_least": 2, "holds": "ours_{level}.value > base.value",
                                             "measured": "ours_{level}.value"},
                              "beats_everywhere": {"over": "level", "holds": "ours_{level}.value > base.value"}})
    exp["variants"]["ours"]["params"]["value"] = "{level}"
    # Execute
    out = run_custom(exp)
    # Assert: typed values substituted, names per cell, quantifiers judged
    assert set(out.variants) == {"ours_0_2", "ours_1_0", "ours_2_0", "base"}
    assert out.variants["ours_2_0"].result.metrics["value"] == 2.0
    claims = {c.name: c for c in out.claims}
    assert claims["beats_base"].holds and claims["beats_base"].measured.startswith("2/3 cells hold")
    assert not claims["beats_everywhere"].holds


def _spec(exp, **kw):
    return build_spec(exp, **kw)


def test_only_selects_a_whole_grid_and_skips_the_prepare_it_does_not_need():
    # Prepare
    exp = _experiment(axes={"level": [1, 2]}, claims={})
    exp["variants"]["ours"]["over"] = ["level"]
    # Execute
    spec = _spec(exp, only=["ours"])
    # Assert
    assert [v.name for v in spec.variants] == ["ours_1", "ours_2"]
    assert spec.needed_prepare() == []
    reader_only = _spec(exp, only=["reader"])
    assert [(p.name, s) for p, s in reader_only.needed_prepare()] == [("table", [None]), ("draw", [0, 1, 2])]


@pytest.mark.parametrize("mutate, key", [
    (lambda e: e.update(seed=0), "experiment.seed"),
    (lambda e: e.update(seeds=[0, 0]), "experiment.seeds"),
    (lambda e: e.update(seeds=[]), "experiment.seeds"),
    (lambda e: e["variants"]["reader"].update(inputs={"table": "nope"}), "experiment.variants.reader.inputs.table"),
    (lambda e: e["variants"]["reader"].update(inputs={"tabel": "table"}), "experiment.variants.reader.inputs.tabel"),
    (lambda e: e["prepare"].pop("table"), "experiment.prepare.draw.inputs.table"),
    (lambda e: e["prepare"]["draw"].update(inputs={"table": "draw"}), "experiment.prepare.draw.inputs"),
    (lambda e: e["variants"]["ours"].update(over=["nope"]), "experiment.variants.ours.over"),
    (lambda e: e["claims"].update(c={"holds": "ours_{x}.value > 0"}), "experiment.claims.c.holds"),
    (lambda e: e["claims"].update(c={"holds": "ours.value > 0", "at_least": 2}), "experiment.claims.c.at_least"),
    (lambda e: e["claims"].update(c={"holds": "paired(ours.value, base.value) > 0"}), "experiment.claims.c.holds"),
    (lambda e: e["claims"]["paired_gain"].update(repeat={"_x": {"suffix": "_x"}}), "experiment.claims.paired_gain_x.holds"),
    (lambda e: e["claims"]["paired_gain"].update(repeat={"_x": {"sufix": "_x"}}), "experiment.claims.paired_gain.repeat._x"),
    (lambda e: e["claims"]["paired_gain"].update(repeat=["_x"]), "experiment.claims.paired_gain.repeat"),
])
def test_bad_spine_input_names_the_key(mutate, key):
    # Prepare
    exp = _experiment()
    mutate(exp)
    # Execute / Assert
    with pytest.raises(ConfigError) as e:
        _spec(exp)
    assert e.value.key.startswith(key), str(e.value)


def test_a_repeated_claim_is_a_named_claim_on_the_suffixed_variants():
    # Prepare: the claim again on *_hard copies of ours and base (gatekeeper's regimes, written once)
    exp = _experiment()
    exp["variants"] |= {"ours_hard": dict(exp["variants"]["ours"]), "base_hard": dict(exp["variants"]["base"])}
    exp["claims"]["paired_gain"] |= {"paper": "gain", "kind": "accounting",
                                     "repeat": {"_hard": {"suffix": "_hard", "paper": "hard regime"}}}
    # Execute
    spec = _spec(exp)
    # Assert: after the last claim that declares it, each variant moved, the paper text noted, the kind kept
    claims = {c.name: c for c in spec.claims}
    assert [c.name for c in spec.claims] == ["paired_gain", "paired_gain_hard", "reader_sees_its_seed"]
    hard = claims["paired_gain_hard"]
    assert hard.holds == claims["paired_gain"].holds.replace("ours.", "ours_hard.").replace("base.", "base_hard.")
    assert hard.measured == "[paired(ours_hard.value - base_hard.value), paired_se(ours_hard.value - base_hard.value)]"
    assert hard.paper == "gain; hard regime" and spec.claim_kinds["paired_gain_hard"] == "accounting"


def test_debug_merges_deeply_and_command_line_overrides_win():
    # Prepare
    exp = _experiment(debug={"common.probe": {"seconds": 0.01}, "seeds": [0]})
    exp["common"]["probe"]["steps"] = 7
    # Execute
    plain = _spec(exp, debug=True)
    overridden = _spec({**exp, "seeds": [4, 5]}, debug=True, overridden={"seeds"})
    # Assert: steps kept (merged, not replaced); the command line's seeds win over debug's
    ours = plain.variant("ours").params
    assert ours.seconds == 0.01 and ours.steps == 7
    assert plain.seeds == [0] and overridden.seeds == [4, 5]


def test_a_run_that_fails_before_execute_leaves_no_actor_behind(run_custom, monkeypatch):
    """The board and node actors start with Ray (execute.spawn), before the parent run and prepare: a
    run that fails in between ends them (execute.release; Ray also ends a job's actors once
    their handles are gone), or they would hold their CPUs in the suite's shared session."""
    import time

    import ray

    # Prepare: prepare fails, after spawn started this run's board and 2 node actors
    def broken(*a, **k):
        raise RuntimeError("prepare broke")

    monkeypatch.setattr(dag, "prepare", broken)
    exp = _experiment(name="spawn_release", resources={"num_cpus": 0.5, "nodes": 2, "node_cpus": 0.25})

    def alive() -> list[str]:
        return [a.get("Name", "") for a in ray._private.state.actors().values()
                if a.get("State") != "DEAD" and a.get("Name", "").startswith("spawn_release-")]

    # Execute
    with pytest.raises(RuntimeError, match="prepare broke"):
        run_custom(exp)
    deadline = time.time() + 15
    while alive() and time.time() < deadline:
        time.sleep(0.2)
    # Assert
    assert alive() == []
