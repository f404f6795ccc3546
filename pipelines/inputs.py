"""An experiment's inputs: what makes a recorded run current (`dtlab reproduce`, the scoreboard).

Inputs = the experiment's resolved config (with the flavour and ``only=`` it ran), the source of
every components/ module its techniques and prepare steps import (the closure the prepare cache
key hashes: components.core.cache.module_closure) and dtlab's version. Each file is hashed on
its own, so a stale run can name the files that changed. Every parent run carries the combined
hash as the tag ``dtlab.input_hash`` and the per-file hashes as the artifact ``inputs.json``.

Modules are found through the registry (``get_technique(name).fn.__module__``), never by
importing all of components/. What a technique looks up by name at run time (a strategy, a
block) is not an import, so it is not in the closure: the prepare cache has the same limit.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from components.core.provenance import ROOT, dtlab_version

HASH_TAG = "dtlab.input_hash"
HASH_ERROR_TAG = "dtlab.input_hash_error"   # why a run has no input hash (hashing failed at run time)
CONFIG_TAG = "dtlab.config_hash"
LEGACY_HASH_TAG = "dtlab.input_hash_legacy"   # a re-keyed run's hash as it ran (see :func:`rekey`)
FLAVOUR_TAG = "dtlab.flavour"
SUBSET_TAG = "dtlab.subset"
ARTIFACT = "inputs.json"


@dataclass
class Inputs:
    """One experiment configuration's inputs: the combined hash and its parts."""
    digest: str                              # what the tag holds
    config: str                              # hash of the resolved config (flavour, only= included)
    version: str                             # dtlab's version
    files: dict[str, str] = field(default_factory=dict)   # repo-relative path -> sha256[:16]
    # this checkout's config under the legacy hash (config_hash(legacy=True)) where it differs: a
    # record made before the full flavour's hash left out the debug block matches it. Never recorded.
    legacy_config: str = field(default="", compare=False)

    def to_json(self) -> dict[str, Any]:
        return {"digest": self.digest, "config": self.config, "version": self.version, "files": self.files}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "Inputs":
        return cls(str(d.get("digest", "")), str(d.get("config", "")), str(d.get("version", "")),
                   dict(d.get("files") or {}))


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:16]


def file_hash(path: str) -> str:
    """sha256[:16] of a repo-relative file's bytes; "missing" when it is gone."""
    try:
        return _sha((ROOT / path).read_bytes())
    except OSError:
        return "missing"


def _normalised(obj: Any) -> Any:
    """The config with this checkout's absolute path written as ``<root>`` (clones elsewhere agree)."""
    text = json.dumps(obj, sort_keys=True, default=str).replace(str(ROOT), "<root>")
    return json.loads(text)


def _flavour(flavour: bool | str) -> str:
    """A flavour name; ``True`` / ``False`` (the older ``debug`` argument) are debug / full."""
    return flavour if isinstance(flavour, str) else ("debug" if flavour else "full")


def _without_defaults(experiment: dict) -> dict:
    """The experiment without the device keys conf/config.yaml gives every experiment at their
    defaults (``device: auto``, ``resources.num_gpus: 0``): a run reads the same either way, so a
    config that spells them out hashes as one that does not (the records before they existed)."""
    out = dict(experiment)
    if out.get("device") == "auto":
        del out["device"]
    res = out.get("resources")
    if isinstance(res, dict) and "num_gpus" in res and res["num_gpus"] == 0 and not isinstance(res["num_gpus"], bool):
        res = {k: v for k, v in res.items() if k != "num_gpus"}
        if res:
            out["resources"] = res
        else:
            del out["resources"]
    return out


def config_hash(experiment: dict, flavour: bool | str, only: list[str] | None, legacy: bool = False) -> str:
    """Hash of the resolved config a run reads. A flavour leaves out the other flavours' blocks, which
    it never reads: the full flavour the ``debug:`` and ``paper:`` blocks, so a debug configuration
    (the tests' size) or the paper's sizes can change without making the board stale. ``legacy``:
    the full flavour's hash as records made before that carry it (the debug block in)."""
    flavour = _flavour(flavour)
    unread = {"full": {"debug", "paper"}, "debug": {"paper"}, "paper": {"debug"}}[flavour]
    if legacy and flavour == "full":
        unread = {"paper"}
    experiment = _without_defaults({k: v for k, v in experiment.items() if k not in unread})
    blob = json.dumps({"experiment": _normalised(experiment), "flavour": flavour,
                       "only": sorted(only or [])}, sort_keys=True, default=str)
    return _sha(blob.encode())


def code_modules(spec) -> list[str]:
    """Every components/ module the spec's techniques and prepare steps import, transitively."""
    from components.core.cache import module_closure
    from components.core.registry import get_prepare_step, get_technique

    roots = {get_technique(v.technique).fn.__module__ for v in spec.variants}
    roots |= {get_prepare_step(p.step).fn.__module__ for p, _ in spec.needed_prepare()}
    mods: set[str] = set()
    for m in roots:
        mods |= set(module_closure(m))
    return sorted(mods)


def module_path(module: str) -> str | None:
    """A module's file relative to the repository root (None outside it)."""
    from components.core.cache import _module_file

    f = _module_file(module)
    if f is None:
        return None
    try:
        return str(Path(f).resolve().relative_to(ROOT))
    except ValueError:
        return None


def of_spec(spec, experiment: dict, flavour: bool | str, only: list[str] | None) -> Inputs:
    """The inputs of a validated spec (what a run records and what reproduce compares)."""
    files = {}
    for m in code_modules(spec):
        p = module_path(m)
        if p is not None:
            files[p] = file_hash(p)
    cfg, version = config_hash(experiment, flavour, only), dtlab_version()
    legacy = config_hash(experiment, flavour, only, legacy=True)
    digest = _sha(json.dumps({"config": cfg, "version": version, "files": files}, sort_keys=True).encode())
    return Inputs(digest, cfg, version, dict(sorted(files.items())), legacy_config=legacy if legacy != cfg else "")


def of_config(cfg: dict) -> Inputs:
    """The inputs of a composed, resolved config (``cfg["experiment"]``, its flavour, ``only``)."""
    from pipelines.experiment import build_spec, overridden_keys, parse_only
    from pipelines.flavours import flavour_of

    only, flavour = parse_only(cfg.get("only")), flavour_of(cfg)
    spec = build_spec(cfg["experiment"], flavour=flavour, only=only, overridden=overridden_keys(cfg.get("_overrides")))
    return of_spec(spec, cfg["experiment"], flavour, only)


def run_tags(spec, cfg: dict) -> tuple[dict[str, str], Inputs]:
    """The tags a parent run carries (flavour, subset, input and config hashes), and its inputs."""
    from pipelines.experiment import parse_only
    from pipelines.flavours import flavour_of

    only, flavour = parse_only(cfg.get("only")), flavour_of(cfg)
    inputs = of_spec(spec, cfg["experiment"], flavour, only)
    tags = {FLAVOUR_TAG: flavour, HASH_TAG: inputs.digest, CONFIG_TAG: inputs.config}
    if only:
        tags[SUBSET_TAG] = ",".join(only)
    return tags, inputs


def unrecorded(tags: dict[str, str]) -> str:
    """Why a run without an input hash is never current: the error its run hit while hashing, or
    its age (a run from before input hashes)."""
    err = tags.get(HASH_ERROR_TAG)
    return f"inputs not recorded (hashing failed: {err})" if err else "inputs not recorded (a run from before input hashes)"


def _files_changed(recorded: Inputs, current: Inputs) -> list[str]:
    out = [p for p in sorted(set(recorded.files) | set(current.files))
           if recorded.files.get(p) != current.files.get(p)]
    return [p + (" (new import)" if p not in recorded.files else " (no longer imported)" if p not in current.files
                 else "") for p in out]


def _version_changed(recorded: Inputs, current: Inputs) -> list[str]:
    return [f"dtlab version {recorded.version} -> {current.version}"] if recorded.version != current.version else []


def changed(recorded: Inputs, current: Inputs) -> list[str]:
    """Why ``recorded`` is not ``current``: the files changed, added or gone, then the config and the
    version; [] when they agree."""
    if recorded.digest == current.digest:
        return []
    if not (recorded.config or recorded.files):
        return ["the input hash (parts not recorded)"]
    out = _files_changed(recorded, current)
    if recorded.config not in {current.config, current.legacy_config or current.config}:
        out.append("the resolved config")
    return out + _version_changed(recorded, current)   # [] : the same parts, a record with the legacy config hash


def upgraded(recorded: dict[str, Any], current: Inputs | None) -> dict[str, Any]:
    """A recorded inputs dict with the legacy config hash, re-keyed to ``current``'s hash when they
    agree (the whole experiment, debug block included, is unchanged, so its hash without the debug
    block is ``current``'s too): a later edit of the debug block then leaves it current. Any other
    record is returned as it is."""
    if current is None or not current.legacy_config:
        return recorded
    rec = Inputs.from_json(recorded)
    if rec.config != current.legacy_config or changed(rec, current):
        return recorded
    return {**recorded, "digest": current.digest, "config": current.config}


def rekey(client, run, recorded: dict[str, Any] | None, current: Inputs) -> bool:
    """Re-key a run recorded with the legacy config hash to ``current``'s hash when its recorded inputs
    (``recorded``: its ``inputs.json``) agree with this checkout's (:func:`upgraded`); its old hash is
    kept in ``LEGACY_HASH_TAG``. True when it was re-keyed. Only `dtlab reproduce` (not a dry run)
    calls it: the one command that writes the board's records."""
    old = run.data.tags.get(HASH_TAG)
    if not old or old == current.digest or not current.legacy_config:
        return False
    if not recorded or upgraded(recorded, current) is recorded:
        return False
    client.set_tag(run.info.run_id, LEGACY_HASH_TAG, old)
    client.set_tag(run.info.run_id, HASH_TAG, current.digest)
    client.set_tag(run.info.run_id, CONFIG_TAG, current.config)
    return True


def code_changed(recorded: Inputs, current: Inputs) -> list[str]:
    """The files and dtlab version that differ, the config left out: a robustness perturbation's config
    differs from the tuned one's by design, its code must not ([] when it is the same; a recorded
    inputs without files cannot be compared and says so)."""
    if not recorded.files:
        return ["the input hash (parts not recorded)"]
    return _files_changed(recorded, current) + _version_changed(recorded, current)
