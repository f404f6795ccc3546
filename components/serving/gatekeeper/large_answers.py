"""Prepare step ``cascade_large_answers``: the base (large) model's greedy answers on the LM cascade's test
problems (Gatekeeper, Rabanser et al. 2025; the technique is components/serving/gatekeeper/lm.py).

The base model is never fine-tuned and decodes greedily on fixed held-out problems, so its answers are the
same for every arm and seed. They were computed in each of the experiment's 22 LM jobs (about 18 s of CPU
each for the 2L/d96 base on 500 problems); here once per model pair, as the digits cascade's prepare step
already caches its large model's predictions."""
from __future__ import annotations

from dataclasses import dataclass

import torch

from components.core.errors import require
from components.core.registry import prepare_step
from components.data import reasoning as R
from components.serving.gatekeeper.answers import greedy_answers
from components.serving.lms import load_lm


@dataclass
class LargeAnswersParams:
    """The technique's held-out split: validation first (n_val problems), then the test problems answered."""

    n_val: int = 300
    n_test: int = 500

    def check(self):
        require(self.n_val >= 10, "n_val", self.n_val, "at least 10 problems")
        require(self.n_test >= 10, "n_test", self.n_test, "at least 10 problems")


@prepare_step("cascade_large_answers", params=LargeAnswersParams, inputs=("lms",),
              summary="The base reasoning GPT's greedy answers (correctness, confidence, token counts) on the LM "
                      "cascade's held-out test problems: shared by every arm and seed of gatekeeper_lm.")
def prepare_large_answers(p: LargeAnswersParams, ctx) -> dict:
    lms = ctx.input("lms")
    test = R.held_out_problems(p.n_val + p.n_test, lms["level"], lms["heldout_seed"])[p.n_val:]
    threads = torch.get_num_threads()
    torch.set_num_threads(1)     # as in the technique's own jobs: the same sums, so the same greedy choices
    try:
        out = greedy_answers(load_lm(lms, "base"), test)
    finally:
        torch.set_num_threads(threads)
    return {"n_val": p.n_val, "n_test": p.n_test, **out}
