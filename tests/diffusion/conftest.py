"""Shared pieces of the diffusion tests: a tiny randomised DiT, and prepared inputs (a seeded full-compute
reference and an oracle classifier) to hand a technique through its RunContext."""
import pytest
import torch

from components.diffusion.sampling import BlockRunner, draw, sample
from components.models.dit import DiT, DiTConfig


@pytest.fixture(scope="module")
def model():
    torch.set_num_threads(1)   # tiny tensors: a second thread only adds contention
    torch.manual_seed(0)
    m = DiT(DiTConfig(img_size=8, patch=2, d=32, heads=4, depth=4))
    with torch.no_grad():   # adaLN-zero: an untrained DiT is the identity; randomise it
        for p in m.parameters():
            p.add_(0.05 * torch.randn_like(p))
    return m.eval().requires_grad_(False)


class _Oracle(torch.nn.Module):
    """A classifier that answers class 0 for everything."""

    def forward(self, z):
        return torch.nn.functional.one_hot(torch.zeros(len(z), dtype=torch.long), 10).float()


@pytest.fixture
def prepared_inputs():
    """``prepared_inputs(model, steps)``: the ``model``, ``reference`` (4 samples of seed 3's noise at CFG 2) and
    ``classifier`` inputs a foresight technique reads, for a RunContext (patch ``load_dit`` / ``load_classifier``
    of the technique's module to pass them through)."""
    def make(model, steps: int) -> dict:
        noise, y = draw(3, 4, model)
        ref = {"noise": noise, "y": y, "x": sample(model, noise, y, steps, 2.0, BlockRunner()), "steps": steps,
               "cfg_scale": 2.0, "size": 8}
        return {"model": model, "reference": ref, "classifier": _Oracle()}
    return make
