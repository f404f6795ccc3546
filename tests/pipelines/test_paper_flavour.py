"""The paper flavour (issue "Run where researchers run: GPUs"): the papers' sizes for GPU nodes, applied
like the debug block, validated here on CPU, never run by the suite, and invisible to the board's hashes."""
import copy

import pytest

from components.core.errors import ConfigError
from pipelines import config, dag
from pipelines.experiment import build_spec
from pipelines.flavours import PAPER_SUSTAINED_FLOPS, flavour_of, normalise_flavour, paper_notes
from pipelines.inputs import config_hash
from tests.pipelines.test_debug_flavour import EXP as DEBUG_EXP

# the experiments whose claims need scale (the list): each has a paper block
NEEDS_SCALE = ("fal", "duo", "mecefo", "subspace_model_parallel", "context_parallel_compression", "foresight",
               "compactfusion", "training_composed")

# the debug flavour's test experiment (two probes), with a paper block
EXP = {**DEBUG_EXP, "debug": {"variants.a.params.seconds": 0.1},
       "paper": {"estimate": {"flops": 1.32e15, "minutes": 1.0, "memory_gb": 2, "basis": "two probes"},
                 "set": {"variants.a.params.seconds": 30.0, "variants.b.params.seconds": 30.0}}}


def test_paper_block_applies_like_debug_and_overrides_win():
    # Execute
    full, paper = build_spec(EXP), build_spec(EXP, flavour="paper")
    kept = build_spec(EXP, flavour="paper", overridden={"variants.b.params.seconds"})
    # Assert
    assert [v.params_raw["seconds"] for v in full.variants] == [1.0, 1.0] and full.flavour == "full"
    assert [v.params_raw["seconds"] for v in paper.variants] == [30.0, 30.0] and paper.flavour == "paper"
    assert kept.variant("b").params_raw["seconds"] == 1.0          # the command line wins over the block
    assert paper_notes(full) == [] and "1 minutes" in paper_notes(paper)[0]


@pytest.mark.parametrize("edit, key", [
    (lambda p: p["estimate"].pop("flops"), "experiment.paper.estimate.flops"),
    (lambda p: p["estimate"].update(memory_gb=-1), "experiment.paper.estimate.memory_gb"),
    (lambda p: p["estimate"].update(gpus=0), "experiment.paper.estimate.gpus"),
    (lambda p: p["estimate"].update(basis=" "), "experiment.paper.estimate.basis"),
    (lambda p: p.update(sizes={}), "experiment.paper.sizes"),
    (lambda p: p.update(set={}), "experiment.paper.set"),
    (lambda p: p["set"].update({"variants.zzz.params.seconds": 1}), "experiment.paper.set.variants.zzz.params.seconds"),
])
def test_a_bad_paper_block_is_one_error_naming_its_key(edit, key):
    # Prepare
    bad = copy.deepcopy(EXP)
    edit(bad["paper"])
    # Execute / Assert: the shape is checked in every flavour, the paths when the block is applied
    flavour = "paper" if "zzz" in key else "full"
    with pytest.raises(ConfigError) as e:
        build_spec(bad, flavour=flavour)
    assert e.value.key == key


def test_one_flavour_a_run():
    assert flavour_of({"debug": True}) == "debug" and flavour_of({"flavour": "debug"}) == "debug"
    assert flavour_of({}) == "full" and flavour_of({"flavour": "paper", "debug": False}) == "paper"
    assert normalise_flavour({"flavour": "debug", "debug": False})["debug"] is True
    with pytest.raises(ConfigError, match="one flavour"):
        flavour_of({"flavour": "paper", "debug": True})
    with pytest.raises(ConfigError, match="full, debug, paper"):
        flavour_of({"flavour": "huge"})
    with pytest.raises(ConfigError, match="no paper block"):
        build_spec({k: v for k, v in EXP.items() if k != "paper"}, flavour="paper")


def test_the_paper_block_never_stales_the_board_or_a_debug_run():
    # Prepare
    bare = {k: v for k, v in EXP.items() if k != "paper"}
    edited = copy.deepcopy(EXP)
    edited["paper"]["set"]["variants.a.params.seconds"] = 60.0
    # Execute / Assert: full and debug hashes ignore the block; the paper hash follows it (and ignores debug)
    for flavour in ("full", "debug"):
        assert config_hash(bare, flavour, None) == config_hash(EXP, flavour, None) == config_hash(edited, flavour, None)
    assert config_hash(bare, True, None) == config_hash(EXP, "debug", None)          # the older bool argument
    assert config_hash(EXP, "paper", None) != config_hash(edited, "paper", None)
    assert config_hash(EXP, "paper", None) == config_hash({**EXP, "debug": {}}, "paper", None)
    assert config_hash(bare, "full", None, legacy=True) == config_hash(EXP, "full", None, legacy=True)


def test_the_experiments_that_need_scale_have_a_paper_flavour():
    names = config.experiment_names()
    assert [n for n in NEEDS_SCALE if n not in names] == []
    assert [n for n in NEEDS_SCALE if not config.raw_experiments()[n].get("paper")] == []


@pytest.mark.parametrize("name", [n for n in config.experiment_names() if config.raw_experiments()[n].get("paper")])
def test_paper_flavour_passes_preflight_and_states_a_consistent_estimate(name, tmp_path):
    # Prepare: on this CPU machine the GPUs it asks for are taken away, as a user trying it here would
    cfg = config.compose([f"experiment={name}", "flavour=paper", "experiment.resources.num_gpus=0", f"runs_dir={tmp_path}"])
    # Execute
    spec = dag.validate(cfg)
    # Assert
    assert spec.flavour == "paper" and spec.device == "auto"
    paper = cfg["experiment"]["paper"]
    assert paper["set"].get("resources.num_gpus", 0) >= 1, "the paper flavour asks for its GPUs"
    est = paper["estimate"]
    implied = est["flops"] / (est.get("gpus", 1) * PAPER_SUSTAINED_FLOPS) / 60
    assert 0.9 <= est["minutes"] / implied <= 1.1, f"{name}: minutes {est['minutes']} vs {implied:.3g} from its FLOPs"
    means = [c for c in spec.claims if c.gate]
    if means and spec.seeds:
        assert len(spec.seeds) >= min(3, len(build_spec(cfg["experiment"]).seeds)), "gated means keep their seeds"


def test_without_a_gpu_the_paper_flavour_is_refused_in_one_line(tmp_path):
    # Prepare: this machine's torch sees no CUDA (CI and make test are CPU-only)
    cfg = config.compose(["experiment=fal", "flavour=paper", f"runs_dir={tmp_path}"])
    # Execute / Assert
    with pytest.raises(ConfigError) as e:
        dag.validate(cfg)
    assert e.value.key == "experiment.resources.num_gpus" and "GPU" in e.value.allowed


def test_reproduce_paper_flavour_chooses_the_experiments_with_a_block(capsys):
    from pipelines.reproduce import parse_args, select

    # Execute
    chosen = select(parse_args(["--flavour", "paper"]))
    # Assert
    assert set(NEEDS_SCALE) <= set(chosen)
    assert all(config.raw_experiments()[n].get("paper") for n in chosen)
    with pytest.raises(SystemExit) as e:
        select(parse_args(["--flavour", "paper", "experiment=arnold"]))
    assert e.value.code == 2 and "no paper block" in capsys.readouterr().err


def test_the_root_device_defaults_hash_as_if_absent(tmp_path):
    """conf/config.yaml gives every experiment ``device: auto`` and ``resources.num_gpus: 0`` (so the
    command line can set them); a config at those defaults hashes as the records made before them."""
    # Prepare
    cfg = config.compose(["experiment=arnold", f"runs_dir={tmp_path}"])
    spelled = cfg["experiment"]
    bare = {k: v for k, v in spelled.items() if k != "device"}
    bare["resources"] = {k: v for k, v in spelled["resources"].items() if k != "num_gpus"}
    # Execute / Assert
    assert spelled["device"] == "auto" and spelled["resources"]["num_gpus"] == 0
    assert config_hash(spelled, "full", None) == config_hash(bare, "full", None)
    assert config_hash({**spelled, "device": "cpu"}, "full", None) != config_hash(bare, "full", None)
    gpu = {**spelled, "resources": {**spelled["resources"], "num_gpus": 1}}
    assert config_hash(gpu, "full", None) != config_hash(bare, "full", None)
