"""Scale-out manifests parse and carry what their tools require (no cluster, no network).

- infra/ray/cluster.yaml goes through Ray's own `ray up` preparation and JSON-schema validation
  (ray.autoscaler's prepare_config + validate_config, the code `ray up` runs first).
- infra/kuberay/*.yaml are checked against the required fields of KubeRay's ray.io/v1 RayCluster
  and RayJob CRDs, written down here (the CRDs are not fetched).
"""
from __future__ import annotations

import shlex

import pytest
import yaml

from tests.infra.svc import ROOT

KUBERAY = ROOT / "infra" / "kuberay"
SUBMISSION_MODES = {"K8sJobMode", "HTTPMode", "InteractiveMode", "SidecarMode"}


def _load(path):
    docs = [d for d in yaml.safe_load_all(path.read_text()) if d is not None]
    assert len(docs) == 1, f"{path}: expected one document"
    return docs[0]


def _req(obj: dict, key: str, typ, where: str):
    assert isinstance(obj, dict), f"{where}: expected a mapping, got {type(obj).__name__}"
    assert key in obj, f"{where}: missing required field {key!r}"
    val = obj[key]
    assert isinstance(val, typ) and not isinstance(val, bool) or typ is bool and isinstance(val, bool), \
        f"{where}.{key}: expected {typ}, got {type(val).__name__} ({val!r})"
    return val


def _check_pod_template(tpl: dict, where: str) -> list[dict]:
    spec = _req(tpl, "spec", dict, where)
    containers = _req(spec, "containers", list, f"{where}.spec")
    assert containers, f"{where}.spec.containers is empty"
    for i, c in enumerate(containers):
        w = f"{where}.spec.containers[{i}]"
        _req(c, "name", str, w)
        image = _req(c, "image", str, w)
        assert ":" in image and not image.endswith(":latest"), f"{w}.image must be pinned to a tag: {image}"
        for p in c.get("ports", []):
            assert isinstance(_req(p, "containerPort", int, f"{w}.ports"), int)
        for e in c.get("env", []):
            _req(e, "name", str, f"{w}.env")
        res = c.get("resources", {})
        assert set(res) <= {"requests", "limits", "claims"}, f"{w}.resources: unknown keys {set(res)}"
    return containers


def _check_start_params(params: dict, where: str) -> None:
    assert isinstance(params, dict), f"{where}: rayStartParams must be a mapping"
    for k, v in params.items():
        assert isinstance(v, str), f"{where}.{k}: KubeRay needs string values, got {v!r}"
    assert params.get("metrics-export-port"), f"{where}: set metrics-export-port (Prometheus scrapes it)"


def _check_cluster_spec(spec: dict, where: str) -> list[str]:
    """RayClusterSpec: rayVersion, headGroupSpec, workerGroupSpecs. Returns every image used."""
    import ray

    version = _req(spec, "rayVersion", str, where)
    assert version == ray.__version__, f"{where}.rayVersion {version} != installed ray {ray.__version__}"
    head = _req(spec, "headGroupSpec", dict, where)
    _check_start_params(_req(head, "rayStartParams", dict, f"{where}.headGroupSpec"), f"{where}.headGroupSpec.rayStartParams")
    images = [c["image"] for c in _check_pod_template(_req(head, "template", dict, f"{where}.headGroupSpec"),
                                                       f"{where}.headGroupSpec.template")]
    groups = _req(spec, "workerGroupSpecs", list, where)
    assert groups, f"{where}.workerGroupSpecs is empty"
    names = set()
    for i, g in enumerate(groups):
        w = f"{where}.workerGroupSpecs[{i}]"
        name = _req(g, "groupName", str, w)
        assert name not in names, f"{w}: duplicate groupName {name}"
        names.add(name)
        lo, n, hi = (_req(g, k, int, w) for k in ("minReplicas", "replicas", "maxReplicas"))
        assert 0 <= lo <= n <= hi, f"{w}: need minReplicas <= replicas <= maxReplicas, got {lo}, {n}, {hi}"
        _check_start_params(_req(g, "rayStartParams", dict, w), f"{w}.rayStartParams")
        images += [c["image"] for c in _check_pod_template(_req(g, "template", dict, w), f"{w}.template")]
    return images


def _check_header(doc: dict, kind: str, where: str) -> None:
    assert _req(doc, "apiVersion", str, where) == "ray.io/v1", f"{where}: apiVersion must be ray.io/v1"
    assert _req(doc, "kind", str, where) == kind
    name = _req(_req(doc, "metadata", dict, where), "name", str, f"{where}.metadata")
    assert name == name.lower() and len(name) <= 63 and name.replace("-", "").isalnum(), f"{where}: bad name {name!r}"


def _dtlab_command(entrypoint: str) -> list[str]:
    argv = shlex.split(entrypoint)
    assert argv[:2] == ["dtlab", "run"], f"entrypoint must be the laptop command `dtlab run ...`: {entrypoint}"
    return argv


@pytest.mark.parametrize("name", ["raycluster.yaml", "raycluster-gpu.yaml"])
def test_raycluster_manifest(name):
    doc = _load(KUBERAY / name)
    _check_header(doc, "RayCluster", "raycluster")
    images = _check_cluster_spec(_req(doc, "spec", dict, "raycluster"), "raycluster.spec")
    assert len(set(images)) == 1, f"head and workers must run one image: {set(images)}"


def test_gpu_cluster_offers_ray_the_gpus_its_pods_request():
    """Ray's num-gpus per worker pod equals the nvidia.com/gpu the pod requests and is limited to (the
    device plugin hands out whole GPUs), and every pod runs the CUDA image the Dockerfile builds."""
    # Prepare
    spec = _load(KUBERAY / "raycluster-gpu.yaml")["spec"]
    dockerfile = (ROOT / "infra" / "docker" / "Dockerfile").read_text()
    # Execute
    groups = spec["workerGroupSpecs"]
    # Assert
    assert groups and spec["headGroupSpec"]["rayStartParams"].get("num-gpus") == "0"
    for g in groups:
        res = g["template"]["spec"]["containers"][0]["resources"]
        offered = int(g["rayStartParams"]["num-gpus"])
        assert offered >= 1 and res["requests"]["nvidia.com/gpu"] == res["limits"]["nvidia.com/gpu"] == str(offered)
        assert g["template"]["spec"]["containers"][0]["image"].endswith("-gpu")
    assert "ARG BASE=" in dockerfile and "ARG TORCH_INDEX=" in dockerfile and "py311-gpu" in dockerfile


def test_rayjob_manifest_runs_the_laptop_command():
    from pipelines import config

    doc = _load(KUBERAY / "rayjob.yaml")
    _check_header(doc, "RayJob", "rayjob")
    spec = _req(doc, "spec", dict, "rayjob")
    argv = _dtlab_command(_req(spec, "entrypoint", str, "rayjob.spec"))
    assert spec.get("submissionMode", "K8sJobMode") in SUBMISSION_MODES
    assert "rayClusterSpec" in spec or "clusterSelector" in spec, "rayjob.spec needs rayClusterSpec or clusterSelector"
    if "rayClusterSpec" in spec:
        _check_cluster_spec(spec["rayClusterSpec"], "rayjob.spec.rayClusterSpec")
    for key, typ in (("shutdownAfterJobFinishes", bool), ("ttlSecondsAfterFinished", int), ("activeDeadlineSeconds", int)):
        if key in spec:
            _req(spec, key, typ, "rayjob.spec")
    env = yaml.safe_load(spec.get("runtimeEnvYAML", "") or "{}")
    assert isinstance(env, dict) and set(env) <= {"env_vars", "working_dir", "pip", "py_modules", "conda", "config"}
    assert all(isinstance(v, str) for v in env.get("env_vars", {}).values())
    # the overrides compose into a valid dtlab config, the same way the CLI checks them
    overrides = [a for a in argv[2:] if not a.startswith("-")]
    assert "cluster=remote" in overrides, "a job joins the RayJob's cluster: cluster=remote"
    first = [o.split("=", 1)[0] + "=" + o.split("=", 1)[1].split(",")[0] for o in overrides]
    cfg = config.compose(first)
    assert cfg["cluster"].get("address"), "cluster=remote must resolve to an address"


def test_ray_up_cluster_yaml_passes_rays_own_validation():
    from ray.autoscaler._private.util import prepare_config, validate_config

    raw = _load(ROOT / "infra" / "ray" / "cluster.yaml")
    for key in ("cluster_name", "provider", "auth", "head_start_ray_commands", "worker_start_ray_commands"):
        assert key in raw, f"cluster.yaml: missing {key}"
    cfg = prepare_config(raw)
    validate_config(cfg)
    head_cmds = " ".join(cfg["head_start_ray_commands"])
    assert "--head" in head_cmds and "--metrics-export-port" in head_cmds
    assert any("ray start --address" in c for c in cfg["worker_start_ray_commands"])
    if cfg["provider"]["type"] == "local":
        assert cfg["provider"]["head_ip"] and cfg["provider"]["worker_ips"]


@pytest.mark.parametrize("bad, message", [
    ({"apiVersion": "ray.io/v1alpha1"}, "apiVersion"),
    ({"spec": {"rayVersion": "2.60.0"}}, "headGroupSpec"),
])
def test_schema_checks_reject_bad_manifests(bad, message):
    """The checks above can fail: a wrong apiVersion or a spec without head group is caught."""
    doc = _load(KUBERAY / "raycluster.yaml")
    doc.update(bad)
    with pytest.raises(AssertionError, match=message):
        _check_header(doc, "RayCluster", "raycluster")
        _check_cluster_spec(doc["spec"], "raycluster.spec")


def test_every_cluster_definition_authenticates_and_keeps_the_dashboard_on_loopback():
    """Token auth in the KubeRay specs, the `ray up` commands and the two-node script; the dashboard
    on 127.0.0.1 wherever it is reached through a tunnel (ssh, port-forward)."""
    from ray.autoscaler._private.util import prepare_config

    cluster = _load(KUBERAY / "raycluster.yaml")["spec"]
    gpu = _load(KUBERAY / "raycluster-gpu.yaml")["spec"]
    job = _load(KUBERAY / "rayjob.yaml")["spec"]["rayClusterSpec"]
    for where, spec in (("raycluster", cluster), ("raycluster-gpu", gpu), ("rayjob", job)):
        assert spec.get("authOptions", {}).get("mode") == "token", f"{where}: authOptions.mode must be token"
    assert cluster["headGroupSpec"]["rayStartParams"]["dashboard-host"] == "127.0.0.1"
    assert gpu["headGroupSpec"]["rayStartParams"]["dashboard-host"] == "127.0.0.1"
    cfg = prepare_config(_load(ROOT / "infra" / "ray" / "cluster.yaml"))
    starts = [c for c in cfg["head_start_ray_commands"] + cfg["worker_start_ray_commands"] if "ray start" in c]
    assert starts and all("RAY_AUTH_MODE=token" in c for c in starts), starts
    assert all("0.0.0.0" not in c for c in starts) and "--dashboard-host=127.0.0.1" in " ".join(starts)
    assert any(dst.endswith("/.ray/auth_token") for dst in cfg["file_mounts"]), "the token goes to every node"
    script = (ROOT / "infra" / "multinode.sh").read_text()
    assert "AUTH=token" in script and 'RAY_AUTH_MODE="$AUTH"' in script and "RAY_AUTH_MODE=disabled" not in script
