"""The full-experiment benchmarks print well-formed tables, whatever metrics a run produced.

`make bench` runs these scripts only after hours of experiments, so a broken column (a renamed helper,
a cell that raises on a missing metric) would show up last. Here each script's ``main`` runs on a fake
outcome (its baseline with a few metrics, a variant with none) in place of the experiment.
"""
from __future__ import annotations

import importlib.util
from pathlib import Path
from types import SimpleNamespace

import pytest

ROOT = Path(__file__).resolve().parents[2]

# benchmark -> the variant its ratios divide by
BASELINES = {"compactfusion": "sync", "context_parallel_compression": "ring_fp32", "diffusion_composed": "sync",
             "duo": "fp32", "fal": "pre_ln", "mecefo": "fault_free", "subspace_model_parallel": "dense_fp32",
             "training_composed": "fp32"}


# serving benchmarks (their experiment runs into a store whose prepared LMs the load test reuses) -> baseline
SERVING = {"plan_cache": "always_large", "smartcache": "prefix", "specreason": "base_only"}


def load(name: str):
    spec = importlib.util.spec_from_file_location(f"bench_{name}", ROOT / "benchmarks" / f"bench_{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def variant(metrics: dict, status: str = "FINISHED") -> SimpleNamespace:
    seed = SimpleNamespace(result=SimpleNamespace(metrics=metrics))
    return SimpleNamespace(status=status, role="baseline", wall_s=12.0, result=SimpleNamespace(metrics=metrics),
                           seeds={0: seed})


def fake_outcome(baseline: str) -> SimpleNamespace:
    base = {"final_val_loss": 1.5, "final_val_loss_se": 0.01, "psnr_db": 30.0, "bytes_per_step": 4096.0,
            "sim_step_s": 0.02, "tokens_per_s": 1000.0, "time_ratio_exact": 1.0, "accuracy": 0.8, "cost_s": 2.0,
            "sim_latency_s": 0.5}
    claim = SimpleNamespace(name="c", gate=True, skipped=False, holds=True, measured="x.a = 1",
                            measured_pm="x.a = 1 ± 0.1", premise_measured="")
    return SimpleNamespace(variants={baseline: variant(base), "other": variant({}, status="FAILED")},
                           claims=[claim], claims_held=1, claims_judged=1)


def tables(text: str) -> list[list[str]]:
    """Runs of consecutive lines that start with '|'."""
    out, cur = [], []
    for line in text.splitlines() + [""]:
        if line.startswith("|"):
            cur.append(line)
        elif cur:
            out.append(cur)
            cur = []
    return out


@pytest.mark.parametrize("name", sorted(BASELINES))
def test_full_experiment_benchmark_prints_well_formed_tables(name, monkeypatch, capsys):
    # Prepare
    mod = load(name)
    monkeypatch.setattr(mod, "run_isolated", lambda *a, **k: (fake_outcome(BASELINES[name]), 321.0, 45.0))

    # Execute
    mod.main([])

    # Assert
    text = capsys.readouterr().out
    assert text.startswith(f"## {name} full experiment: 45 s wall, peak memory 321 MB")
    found = tables(text)
    assert len(found) >= 2                           # the variant table and the claims table
    for rows in found:
        widths = {row.count("|") for row in rows}
        assert len(widths) == 1, rows                # every row as wide as the header
        assert set(rows[1].strip("|").split("|")) == {"---"}
    variant_rows = [r for r in found[0][2:]]
    assert [r.split("|")[1].strip() for r in variant_rows] == [BASELINES[name], "other"]
    assert "| c | True | True | x.a = 1 ± 0.1 |" in text   # the claim's ± SE form


@pytest.mark.parametrize("name", sorted(SERVING))
def test_serving_benchmark_prints_well_formed_tables(name, capsys):
    # Prepare
    mod = load(name)

    # Execute
    mod.tables(fake_outcome(SERVING[name]))

    # Assert
    found = tables(capsys.readouterr().out)
    assert len(found) == 2
    for rows in found:
        assert len({row.count("|") for row in rows}) == 1, rows
    assert found[0][2].split("|")[1].strip() == SERVING[name]


def test_board_cost_reads_results_md_rows_and_sums_them(tmp_path, capsys):
    # Prepare: the committed board and an empty store (a fresh clone's), named by tracking.uri=, which
    # wins over the MLFLOW_TRACKING_URI that a session fixture sets once an e2e test has run
    mod = load("reproduce")
    uri = f"tracking.uri=sqlite:///{tmp_path}/mlflow.db"

    # Execute
    mod.main([str(ROOT / "RESULTS.md"), uri])

    # Assert: one row per experiment of the file, well formed, from RESULTS.md, and the sum last
    text = capsys.readouterr().out
    (found,) = tables(text)
    assert len({row.count("|") for row in found}) == 1
    assert len(found) - 2 == len(mod.results_rows(ROOT / "RESULTS.md")) > 0
    assert all(row.rstrip(" |").endswith("RESULTS.md") for row in found[2:])
    assert text.strip().splitlines()[-1].startswith("total ")


def run_recorder(uri: str, experiment: str):
    """``run(name, start_s, wall_s, parent=None, tags=None) -> run id``: a FINISHED run of ``experiment`` in
    the store at ``uri`` with that wall time, as the DAG records parents, variants and seed tasks; and the
    client."""
    from mlflow.tracking import MlflowClient

    client, t0 = MlflowClient(uri), 1_800_000_000_000
    exp_id = client.create_experiment(experiment)

    def run(name, start_s, wall_s, parent=None, tags=None):
        r = client.create_run(exp_id, start_time=t0 + int(start_s * 1000), run_name=name,
                              tags={**(tags or {}), **({"mlflow.parentRunId": parent} if parent else {})})
        client.set_terminated(r.info.run_id, "FINISHED", end_time=t0 + int((start_s + wall_s) * 1000))
        return r.info.run_id

    return run, client


def test_profile_lists_stages_and_slowest_tasks_of_a_stored_run(tmp_path, capsys):
    # Prepare: one board run as the DAG records it: a parent with its stage metrics, a variant with
    # two seed tasks (40 s and 25 s) and a one-seed variant (10 s), 50 s of wall in all
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    run, client = run_recorder(uri, "probe_exp")
    parent = run("probe_exp-1", 0, 50, tags={"dtlab.kind": "parent", "dtlab.flavour": "full"})
    for key, value in {"platform.ray_init_s": 6.0, "platform.execute_s": 40.0, "reproduce.wall_s": 50.0}.items():
        client.log_metric(parent, key, value)
    slow = run("slow", 5, 40, parent)
    run("slow@0", 5, 40, slow)
    run("slow@1", 5, 25, slow)
    run("quick", 30, 10, parent)

    # Execute
    load("reproduce").main(["--profile=2", f"tracking.uri={uri}"])

    # Assert: one row, its stages, the two slowest tasks by name, and the tasks' sum against the wall;
    # no experiment of this checkout is called probe_exp, so no claim reads its tasks
    (found,) = tables(capsys.readouterr().out)
    row = [c.strip() for c in found[2].strip("|").split("|")]
    assert row[:5] == ["probe_exp", "tuned", "0m50s", "6", "–"] and row[5] == "40"
    assert row[-3] == "75 s / 50 s = 1.50"
    assert row[-2] == "0 / 0 / 75"
    assert row[-1] == "slow@0 40 s, slow@1 25 s"


def test_profile_splits_task_seconds_by_what_the_claims_read(tmp_path, capsys):
    # Prepare: a duo board run: fp32 (its gated claims' baseline) with one seed task of 40 s, the
    # powersgd control (read only by a control claim) 10 s, and a task no claim of duo names 5 s;
    # 55 s of tasks in 50 s of wall
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    run, _ = run_recorder(uri, "duo")
    parent = run("duo-1", 0, 50, tags={"dtlab.kind": "parent", "dtlab.flavour": "full"})
    run("fp32@10", 0, 40, run("fp32", 0, 40, parent))
    run("powersgd", 10, 10, parent)
    run("extra", 40, 5, parent)
    mod = load("reproduce")

    # Execute
    reads = mod.claim_reads("duo")
    mod.main(["--profile=1", f"tracking.uri={uri}"])

    # Assert: the split of the tasks' seconds, and the gated floor at this run's packing (40 s / 1.1)
    assert reads["fp32"] == reads["duo4"] == "gated" and reads["powersgd"] == reads["ef1"] == "control"
    out = capsys.readouterr().out
    (found,) = tables(out)
    row = [c.strip() for c in found[2].strip("|").split("|")]
    assert row[-2] == "40 / 10 / 5"
    assert "the gated tasks alone 0m36s, control tasks 0m09s, unread tasks 0m05s" in out.strip().splitlines()[-1]


@pytest.mark.parametrize("bad", ["--profile=0", "--profile=x"])
def test_profile_rejects_a_bad_count_in_one_line(bad, capsys):
    # Execute
    with pytest.raises(SystemExit) as e:
        load("reproduce").main([bad])
    # Assert
    err = capsys.readouterr().err.strip().splitlines()
    assert e.value.code == 2 and len(err) == 1 and bad in err[0]


def test_attention_share_is_the_attention_backward_over_the_whole_pass():
    # Prepare
    share = load("mecefo").attention_bwd_share
    d, seq = 64, 32
    attn = 8 * d * d + 2 * seq * d           # projections and causal scores, per token and layer
    # Execute
    alone = share(2, d, 0.0, seq, 0)         # no FFN, no head: attention is the whole pass
    half = share(2, d, attn, seq, 0)         # an FFN as costly as the attention
    # Assert: backward is twice the forward, so its share of the pass is 2/3 of the forward share
    assert alone == pytest.approx((1.0, 2 / 3))
    assert half == pytest.approx((0.5, 1 / 3))


def test_separability_tabulates_each_phrasing_and_kind_and_draws_the_curves(tmp_path, capsys):
    # Prepare: the debug flavour's bag-of-words embeddings, built in a fresh runs dir
    plot = tmp_path / "sep.png"
    # Execute
    load("smartcache").separability(str(tmp_path / "runs"), str(plot), debug=True)
    # Assert: both phrasings, a row per kind with the figures the experiment reports, a row per threshold
    out = capsys.readouterr().out
    assert "## templated phrasing" in out and "## natural phrasing" in out
    found = tables(out)
    assert len(found) == 4                                   # per phrasing: the kinds, then the thresholds
    kinds = [r.split("|")[1].strip() for r in found[0][2:]]
    assert kinds == ["explicit", "followup"]
    assert len(found[1]) - 2 == len(load("smartcache").TAUS)
    assert plot.read_bytes()[:4] == b"\x89PNG"
