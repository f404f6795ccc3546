"""Debug flavours of both experiments through the real DAG: every child run and every claim computed."""
from __future__ import annotations

import pytest


def _claims_computed(outcome):
    assert outcome.claims
    for c in outcome.claims:
        # every metric a claim names was produced (a timed claim may sit inside its noise floor in debug)
        assert c.error == "" or c.status == "inconclusive", (c.name, c.error)
        assert c.measured not in ("", "n/a"), c.name


@pytest.mark.parametrize("name, variants", [
    ("adaptive_beam_search", 14),
    ("hybrid_einsum", 4),
])
def test_debug_flavour_end_to_end(run_experiment, mlflow_client, name, variants):
    out = run_experiment(name)
    assert len(out.variants) == variants and not out.failed
    for v, o in out.variants.items():
        assert o.result is not None and o.result.metrics, (v, o.error)
    _claims_computed(out)
    children = mlflow_client.search_runs([out.experiment_id], f"tags.mlflow.parentRunId = '{out.parent_run_id}'")
    assert len(children) >= variants
