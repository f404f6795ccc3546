"""A debug run starts embedded Ray without its dashboard (seconds of fixed cost for a dashboard that dies with
the run) unless the command line asks for one; a full run keeps the configured dashboard."""
import pytest

from pipelines.dag import _cluster_for

CLUSTER = {"address": None, "include_dashboard": True, "dashboard_host": "127.0.0.1"}


@pytest.mark.parametrize("debug, overrides, expect", [
    (True, ["experiment=platform_probe", "debug=true"], False),
    (True, ["experiment=platform_probe", "debug=true", "cluster.include_dashboard=true"], True),
    (False, ["experiment=platform_probe"], True),
])
def test_debug_run_drops_the_dashboard_unless_asked(debug, overrides, expect):
    # Prepare
    cfg = {"cluster": dict(CLUSTER), "debug": debug, "_overrides": overrides}
    # Execute
    cluster = _cluster_for(cfg)
    # Assert: only include_dashboard may change, and the run's config is not modified in place
    assert cluster["include_dashboard"] is expect
    assert {k: v for k, v in cluster.items() if k != "include_dashboard"} == \
        {k: v for k, v in CLUSTER.items() if k != "include_dashboard"}
    assert cfg["cluster"] == CLUSTER
