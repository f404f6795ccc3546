"""What a running variant gets besides its params: identity, seed, prepared inputs, progress."""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable


@dataclass
class RunContext:
    """Handed to every technique function and prepare step.

    ``nodes`` are Ray actors standing for machines, shared by the experiment's variants (see
    components.core.raytools.NodeActor); techniques host their per-node objects there.
    ``progress(step, total, **live)`` reports progress (rate-limited) to the driver's live table;
    it is a no-op when nothing listens, so techniques can be called directly in tests.
    ``seed`` is the one seed this call runs (the DAG runs the experiment's seeds as separate
    calls); ``inputs`` holds exactly the prepared outputs the technique or step declared, under
    the names it declared them: read them with :meth:`input`. ``device`` is where its torch work
    runs: "cpu", or "cuda" when the experiment asked for it and Ray gave the task a GPU.
    """

    experiment: str = "adhoc"
    variant: str = "adhoc"
    seed: int = 0
    run: str = ""  # the parent run's id: two runs (or robustness jobs) sharing a head never share keys
    device: str = "cpu"  # the torch device this call runs on (components.core.devices.resolve)
    inputs: dict[str, Any] = field(default_factory=dict)
    workdir: Path = field(default_factory=lambda: Path("runs") / "scratch")
    nodes: list[Any] | None = None  # the experiment's NodeActor pool (resources.nodes), if any
    reporter: Callable[[str, int, int, dict], None] | None = None
    min_interval_s: float = 0.25
    _last: float = 0.0

    def host_key(self, *parts: Any) -> str:
        """The key under which this call hosts objects on shared actors (``NodeActor.host``).

        Unique per (run, experiment, variant, seed), so seeds of one variant running at once on the
        experiment's node pool never overwrite or drop each other's objects; ``parts`` tell apart
        several objects of one call (an instance index, a role).
        """
        base = f"{self.run or 'local'}/{self.experiment}/{self.variant}/s{self.seed}"
        return "/".join([base, *map(str, parts)])

    def input(self, name: str) -> Any:
        """The prepared input ``name`` (declared in the technique's or step's ``inputs``)."""
        if name not in self.inputs:
            from components.core.errors import ConfigError

            raise ConfigError("inputs", name, "a declared, prepared input; this call has: "
                              + (", ".join(sorted(self.inputs)) or "none"))
        return self.inputs[name]

    def progress(self, step: int, total: int, **live: float) -> None:
        if self.reporter is None:
            return
        now = time.monotonic()
        if step < total and now - self._last < self.min_interval_s:
            return
        self._last = now
        self.reporter(self.variant, int(step), int(total), {k: float(v) for k, v in live.items()})
