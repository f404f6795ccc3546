"""A model on ``ctx.device`` fed from cpu batches (issue "Run where researchers run: GPUs").

The training family draws its windows on cpu (``components.data.char_corpus.sample_batch``, seeded numpy
generators: a seed gives the same windows on any device) and moves them to the model's device.
:class:`InputsTo` does that move for code that calls the model itself, such as
``components.models.gpt.evaluate_loss``: ``evaluate_loss(InputsTo(model), val, ...)`` evaluates a cuda
model on the same fixed windows as a cpu one. On cpu the move is a no-op and the figures are unchanged.
"""
from __future__ import annotations

import torch


def device_of(model: torch.nn.Module) -> torch.device:
    """Where ``model``'s parameters live."""
    return next(model.parameters()).device


class InputsTo(torch.nn.Module):
    """``model`` with every tensor argument moved to its device first; ``eval``/``train`` reach the model."""

    def __init__(self, model: torch.nn.Module):
        super().__init__()
        self.model = model
        self.train(model.training)

    def forward(self, *args):
        dev = device_of(self.model)
        return self.model(*(a.to(dev) if isinstance(a, torch.Tensor) else a for a in args))
