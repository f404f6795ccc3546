"""`dtlab robustness`: perturbations off the tuned configuration, validated before anything runs, run
as multirun jobs tagged ``robustness=<name>``, reported per claim (tuned vs off-tuned); and the
experiment keys they rest on (``robustness:``, a claim's ``premise:``)."""
from __future__ import annotations

import json
import subprocess

import pytest
from mlflow.tracking import MlflowClient

from components.core.errors import ConfigError
from components.core.tracker import tracking_client
from pipelines import config, dag
from pipelines.experiment import build_spec, perturbations
from pipelines.robustness import plan, report
from tests.infra.svc import BIN, ROOT, dtlab_env
from tests.pipelines.test_scoreboard import fake_parent, outcome


def test_plan_runs_tuned_first_then_each_perturbation_with_its_overrides():
    # Execute
    exp, jobs, _ = plan(["experiment=platform_probe", "debug=true", "only=noisy_d"])
    # Assert
    assert exp == "platform_probe"
    assert jobs == [("tuned", ["experiment=platform_probe", "robustness=tuned", "debug=true"]),
                    ("noisy_d", ["experiment=platform_probe", "robustness=noisy_d", "debug=true",
                                 "experiment.seeds=[5]", "++experiment.variants.d.params.noise=3.0"])]


@pytest.mark.parametrize("args, key", [(["experiment=platform_probe", "only=nope"], "only"),
                                       (["debug=true"], "experiment"),
                                       (["experiment=platform_probe", "robustness=x"], "robustness"),
                                       (["experiment=platform_probe", "experiment.robustness=null"], "experiment.robustness")])
def test_plan_rejects_bad_input_naming_the_key(args, key):
    with pytest.raises(ConfigError) as e:
        plan(args)
    assert e.value.key == key


@pytest.mark.parametrize("block, allowed", [({"p": ["experiment.seeds=[1],[2]"]}, "no sweep"),
                                            ({"p": ["cluster.num_cpus=1"]}, "below experiment."),
                                            ({"tuned": ["experiment.seeds=[1]"]}, "other than 'tuned'"),
                                            ({"p": []}, "non-empty list"),
                                            ({"p": {"overrides": ["experiment.seeds=[1]"], "huh": 1}}, "why, overrides")])
def test_bad_perturbation_block_is_one_config_error(block, allowed):
    with pytest.raises(ConfigError) as e:
        perturbations({"robustness": block})
    assert allowed in e.value.allowed


@pytest.mark.parametrize("name", config.experiment_names())
def test_every_experiment_declares_two_perturbations_that_validate(name):
    # Prepare
    cfg = config.compose([f"experiment={name}"])
    # Execute
    declared = perturbations(cfg["experiment"])
    # Assert: at least two, each composes and validates as the job it will be
    assert len(declared) >= 2, f"conf/experiment/{name}.yaml declares {len(declared)} robustness perturbation(s)"
    for label, p in declared.items():
        dag.validate(config.compose([f"experiment={name}", f"robustness={label}", *p["overrides"]]))


def test_report_counts_off_tuned_holds_from_this_sessions_runs(tmp_path):
    # Prepare: an older session's perturbation run (ignored), then this session's tuned and perturbed runs
    client = tracking_client(f"sqlite:///{tmp_path}/mlflow.db")
    fake_parent(client, "x", "a" * 40, [outcome("gain", True, "1")], minute=1, robustness="slow")
    fake_parent(client, "x", "a" * 40, [outcome("gain", True, "1"), outcome("ok", True, "1")], minute=10,
                robustness="tuned")
    fake_parent(client, "x", "a" * 40, [outcome("gain", False, "0"), outcome("ok", True, "1")], minute=11,
                robustness="slow")
    fake_parent(client, "x", "a" * 40, [outcome("gain", False, "0", premise_holds=False), outcome("ok", True, "1")],
                minute=12, robustness="tiny")
    since = client.get_run(client.search_runs([client.get_experiment_by_name("x").experiment_id],
                                              order_by=["attributes.start_time ASC"])[1].info.run_id).info.start_time
    # Execute
    rep = report(client, "x", ["tuned", "slow", "tiny", "absent"], since)
    # Assert
    gain = rep["claims"]["gain"]
    assert gain["tuned"] == "holds"
    assert {k: v["status"] for k, v in gain["outcomes"].items()} == {"tuned": "holds", "slow": "fails",
                                                                     "tiny": "premise not met"}
    assert (gain["held_off_tuned"], gain["judged_off_tuned"]) == (0, 2)
    assert (rep["claims"]["ok"]["held_off_tuned"], rep["claims"]["ok"]["judged_off_tuned"]) == (2, 2)
    assert rep["missing"] == ["absent"]


def test_premise_and_its_variants_are_validated():
    base = {"name": "x", "variants": {"a": {"technique": "probe", "params": {}}}}
    # Execute / Assert: a premise naming an unknown variant, its figure without a premise, a non-string
    for claim, key in (({"premise": "zz.value > 0"}, "experiment.claims.c.premise"),
                       ({"premise_measured": "a.value"}, "experiment.claims.c.premise_measured"),
                       ({"premise": {"holds": "a.value > 1"}}, "experiment.claims.c.premise")):
        with pytest.raises(ConfigError) as e:
            build_spec({**base, "claims": {"c": {"holds": "a.value > 0", **claim}}})
        assert e.value.key == key
    spec = build_spec({**base, "claims": {"c": {"holds": "a.value > 0", "premise": "a.value > 1",
                                                "premise_measured": "a.value"}}})
    assert (spec.claims[0].premise, spec.claims[0].premise_measured) == ("a.value > 1", "a.value")


@pytest.mark.slow   # two real runs, ~40 s: runs in `make bench` (keeps `make test` in its 15 minutes)
def test_claim_fails_off_tune_while_it_holds_tuned(tmp_path):
    """One real `dtlab robustness` run: the probe's ordering claim holds tuned, and each perturbation
    built to break it (noise on d's value, an injected crash of c) makes it fail."""
    # Execute
    proc = subprocess.run([str(BIN / "dtlab"), "robustness", "experiment=platform_probe", "debug=true",
                           f"runs_dir={tmp_path}", "cluster.include_dashboard=false"], cwd=ROOT, env=dtlab_env(),
                          capture_output=True, text=True, timeout=600)
    # Assert
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (path,) = (tmp_path / "reports").glob("robustness-platform_probe-*.json")
    rep = json.loads(path.read_text())
    claim = rep["claims"]["values_ordered"]
    assert {k: v["status"] for k, v in claim["outcomes"].items()} == {"tuned": "holds", "noisy_d": "fails",
                                                                      "c_crashes": "fails"}
    assert (claim["held_off_tuned"], claim["judged_off_tuned"]) == (0, 2)
    assert claim["outcomes"]["noisy_d"]["measured"] == "[1, 2, 3, 1.594]"
    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path}/mlflow.db")
    parents = client.search_runs([client.get_experiment_by_name("platform_probe").experiment_id],
                                 filter_string="tags.`dtlab.kind` = 'parent'")
    from components.core.runs_query import robustness_label

    assert sorted(robustness_label(r) for r in parents) == ["c_crashes", "noisy_d", "tuned"]
    assert "0/2" in proc.stdout and "c_crashes" in proc.stdout


def test_a_premise_on_variants_not_run_is_unknown_not_unmet():
    from pipelines.outcome import VariantOutcome
    from pipelines.stages.evaluate import judge

    # Prepare: the claim reads a; its premise reads b, which only=[a] left out
    exp = {"name": "x", "variants": {v: {"technique": "probe", "params": {}} for v in ("a", "b")},
           "claims": {"c": {"holds": "a.value > 5", "premise": "b.value > 100"}}}
    spec = build_spec(exp, only=["a"])
    o = VariantOutcome("a", "probe", "technique", "core")
    o.result = type("R", (), {"clean_metrics": lambda self: {"value": 1.0}})()
    o.seed_metrics = lambda: {0: {"value": 1.0}}
    # Execute
    (claim,) = judge(spec, {"a": o})
    # Assert: b's premise would be false, but b did not run: the failure stays the technique's
    assert (claim.premise_holds, claim.status, claim.premise_error) == (None, "fails", "not run: b")


def test_a_seed_perturbation_moves_the_variants_that_declare_their_own_seeds():
    # Prepare: subspace_model_parallel's other_seeds sets experiment.seeds=[3,4,5]; ssn_k8, ssn_k16,
    # dense_bf16 and int8 declare seeds: [0]
    # Execute
    _, jobs, _ = plan(["experiment=subspace_model_parallel", "only=other_seeds"])
    spec = dag.validate(config.compose(dict(jobs)["other_seeds"]))
    # Assert: every variant runs on the perturbed seeds (the seed-0-only ones on the first of them)
    seeds = {v.name: v.seeds for v in spec.variants}
    assert seeds["dense_fp32"] == [3, 4, 5]
    assert {seeds[v][0] for v in ("ssn_k8", "ssn_k16", "dense_bf16", "int8")} == {3}
    assert all(0 not in s for s in seeds.values())


def test_a_variant_whose_seeds_cannot_be_moved_is_named():
    from pipelines.robustness import seed_moves

    # Prepare: variant b declares seed 9, which is no position of the experiment's [0, 1]
    exp = {"name": "x", "seeds": [0, 1], "variants": {
        "a": {"technique": "probe", "params": {"value": 1.0}},
        "b": {"technique": "probe", "params": {"value": 1.0}, "seeds": [9]},
        "c": {"technique": "probe", "params": {"value": 1.0}, "seeds": [1]}}}
    base = config.compose(["experiment=platform_probe"])
    tuned = {**base, "experiment": exp}
    perturbed = {**base, "experiment": {**exp, "seeds": [5, 6]}, "_overrides": ["experiment.seeds=[5,6]"]}
    # Execute
    moves, unmoved = seed_moves(tuned, perturbed)
    # Assert
    assert moves == ["experiment.variants.c.seeds=[6]"] and unmoved == ["b"]
