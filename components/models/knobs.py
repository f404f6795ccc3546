"""Training knobs declared once: the fields the techniques that train a tiny model share, and their checks.

A technique's params dataclass inherits a mixin, so the knobs stay top-level keys of its ``params:``
(``experiment.common.tensor_parallel.steps=1500`` keeps working: a nested ``model:``/``train:``
block would move every such path and every experiment YAML). A technique that wants other defaults
redeclares just those fields (``steps: int = 600``); its ``check()`` calls the mixin's check, so the
ranges, and the messages naming the key, are the same everywhere.

- :class:`Steps`: ``batch``, ``steps``, ``lr``: any optimizer loop (the DiT trainer).
- :class:`GPTShape`: the shared GPT's size, ``n_layer``, ``n_head``, ``d_model``, ``context``
  (MeCeFO's timing microbenchmark).
- :class:`GPTTrainKnobs`: both, plus the warm-up + cosine schedule of
  :func:`components.training.ddp.optim.lr_at` (``warmup``, ``final_lr_frac``, ``weight_decay``) and
  the validation windows (``eval_every``, ``eval_batches``): subspace_pp, context_parallel,
  tensor_parallel, mecefo.
- :func:`require_positive_ints`: the "a positive integer" check over named fields.

It lives beside the models, not in components/training, because the diffusion and serving families
use it too and already import components/models (no new import edge between families).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from components.core.errors import require


def require_positive_ints(obj, *keys: str) -> None:
    """ConfigError naming the first of ``keys`` whose value on ``obj`` is not an integer >= 1."""
    for k in keys:
        v = getattr(obj, k)
        require(isinstance(v, int) and v >= 1, k, v, "a positive integer")


@dataclass
class Steps:
    """An optimizer loop: ``steps`` updates on batches of ``batch`` examples at learning rate ``lr``."""

    batch: int = 16
    steps: int = 1500
    lr: float = 3e-3

    def check_steps(self) -> None:
        require_positive_ints(self, "batch", "steps")
        require(self.lr > 0, "lr", self.lr, "a positive learning rate")


@dataclass
class GPTShape:
    """The size of the shared GPT (:class:`components.models.gpt.GPTConfig`)."""

    n_layer: int = 2
    n_head: int = 4
    d_model: int = 64
    context: int = 64

    def check_shape(self) -> None:
        require_positive_ints(self, "n_layer", "n_head", "d_model")
        require(self.d_model % self.n_head == 0, "n_head", self.n_head, f"a positive divisor of d_model={self.d_model}")
        require(self.context >= 2, "context", self.context, "at least 2 tokens")

    def gpt(self, vocab_size: int, **extra):
        """The :class:`GPTConfig` of this size (``extra``: its other fields, e.g. ``block``)."""
        from components.models.gpt import GPTConfig

        return GPTConfig(vocab_size=vocab_size, n_layer=self.n_layer, n_head=self.n_head, d_model=self.d_model,
                         context=self.context, **extra)


@dataclass
class GPTTrainKnobs(GPTShape, Steps):
    """The shared GPT trained with AdamW under a linear warm-up then cosine decay to
    ``final_lr_frac * lr``, validated every ``eval_every`` steps on ``eval_batches`` fixed windows."""

    warmup: int = 50
    final_lr_frac: float = 0.1           # cosine decay to this fraction of lr
    weight_decay: float = 0.1            # AdamW weight decay
    eval_every: int = 100
    eval_batches: int = 4

    #: 0 lets ``eval_every: 0`` mean "final evaluation only" (for loops that support it)
    EVAL_EVERY_MIN: ClassVar[int] = 1

    def check_knobs(self, *positive: str) -> None:
        """Check the knobs, and that each of ``positive`` (the technique's own counts) is an integer >= 1."""
        self.check_steps()
        self.check_shape()
        require_positive_ints(self, "eval_batches", *positive)
        if self.EVAL_EVERY_MIN == 0:
            require(isinstance(self.eval_every, int) and self.eval_every >= 0, "eval_every", self.eval_every,
                    "0 (final only) or a positive interval")
        else:
            require_positive_ints(self, "eval_every")
        require(0 <= self.warmup < self.steps, "warmup", self.warmup, f"in [0, steps={self.steps})")
        require(0 <= self.final_lr_frac <= 1, "final_lr_frac", self.final_lr_frac, "a fraction in [0, 1]")
        require(self.weight_decay >= 0, "weight_decay", self.weight_decay, "a non-negative number")
