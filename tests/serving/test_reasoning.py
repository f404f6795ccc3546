"""The synthetic reasoning task, its exact checker and the reasoning-LM prepare step."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from components.data import reasoning as R
from components.serving import reasoning_lms as L
from components.serving.lms import lm_costs, load_lm


def test_problems_are_deterministic_and_held_out_distinct():
    a = R.held_out_problems(50, "medium", 7)
    assert a == R.held_out_problems(50, "medium", 7)
    assert len({p.text for p in a}) == 50
    assert a != R.held_out_problems(50, "medium", 8)
    for level, spec in R.LEVELS.items():
        p = R.sample_problem(np.random.default_rng(0), level)
        assert len(p.ops) == spec["n_ops"] and R.Problem.parse(p.text) == p


def test_two_surface_forms_are_semantically_equal():
    p = R.Problem(17, (("+", 1), ("*", 9), ("-", 7)))
    a, b = R.solution(p, ["A"] * 3), R.solution(p, ["B"] * 3)
    assert a[:3] == ["(17)+1=18\n", "(18)*9=62\n", "(62)-7=55\n"] and a[3] == b[3] == "A=55."
    assert b[:3] == ["+1(17)=18\n", "*9(18)=62\n", "-7(62)=55\n"]
    assert R.encode(a[0])[0] != R.encode(b[0])[0]          # token-level different from the first token
    for sol in (a, b, R.solution(p, ["B", "A", "B"])):
        assert [R.check_step(p, sol[:i], sol[i]) for i in range(len(sol))] == [True] * 4
        assert R.final_answer(sol) == p.answer == 55
    assert R.parse_step(a[1]) == R.parse_step(b[1]) == (18, "*", 9, 62)


@pytest.mark.parametrize("bad, k", [("(17)+1=19\n", 0), ("(17)+2=19\n", 0), ("(16)+1=17\n", 0), ("+1(17)=18", 0),
                                    ("(18)*9=62\n", 0), ("A=55.", 2), ("A=54.", 3), ("(62)-7=55\n", 3), ("x", 0), ("17+1=18\n", 0)])
def test_checker_rejects_wrong_steps(bad, k):
    p = R.Problem(17, (("+", 1), ("*", 9), ("-", 7)))
    assert not R.check_step(p, R.solution(p, ["A"] * 3)[:k], bad)


def test_perturbations_are_hard_negatives():
    rng = np.random.default_rng(0)
    for _ in range(300):
        p = R.sample_problem(rng)
        sol = R.solution(p, R.sample_forms(rng, len(p.ops), 0.5, 0.2))
        k = int(rng.integers(len(sol)))
        neg = L._perturb(p, sol[:k], sol[k], rng)
        assert not R.check_step(p, sol[:k], neg) and len(neg) == len(sol[k])   # same width


def test_context_fits_longest_judge_sequence():
    p = R.Problem(99, tuple(("*", 9) for _ in range(6)))
    text = p.text + "".join(R.solution(p, ["B"] * 6)) + "?9"
    assert len(text) <= R.max_len("medium")
    with pytest.raises(ValueError):
        R.encode("17 & 3")


def test_training_batches_mask_solution_and_judge_digit():
    s = L._Sampler("medium", 0.5, 0.2, set(), judge_frac=0.5)
    x, y, lm, judge = s.batch(np.random.default_rng(0), 64)
    assert lm.any() and judge.any() and not (lm & judge).any()
    assert (judge.sum(1) <= 1).all()
    digits = y[judge]
    assert all(int(t) in R.DIGIT_IDS for t in digits)
    assert set(R.DIGIT_IDS.index(int(t)) for t in digits) <= {0, 1, 2, 9}
    assert R.JUDGE_ID in x[judge.any(1)].flatten().tolist()


def test_prepare_step_trains_and_loads_both_models():
    p = L.ReasoningLMParams(small_steps=10, base_steps=10, batch=8, n_small_samples=10, n_heldout=20, n_eval=5)
    out = L.train_reasoning_lms(p)
    small, base = load_lm(out, "small"), load_lm(out, "base")
    assert small.num_params() * 5 < base.num_params()
    assert len(out["base"]["stats"]["lm_loss"]) == 10 and out["base"]["stats"]["judge_loss"]
    costs = lm_costs(out)
    assert costs["base"].decode_s / costs["small"].decode_s > 5
    ids = R.encode(R.held_out_problems(1, "medium", out["heldout_seed"])[0].text)
    assert base.generate(ids, 5) == base.generate(ids, 5)      # the two-layer model decodes with its cache
    with torch.no_grad():                                      # cached decoding = full forward
        full = base(torch.tensor([ids]))[0, -1]
        c = base.new_cache()
        base(torch.tensor([ids[:-3]]), cache=c)
        inc = base(torch.tensor([ids[-3:]]), cache=c)[0, -1]
    assert torch.allclose(full, inc, atol=1e-5)


def test_small_model_is_the_checkpoint_nearest_the_target_accuracy(monkeypatch):
    """small_target_acc keeps S's checkpoint whose selection accuracy is nearest the target (a ~60%
    model cannot be pinned by a step count), scored on the last held-out problems only."""
    # Prepare: scripted selection accuracies per checkpoint; remember the weights each one saw
    seen, script = [], iter([0.10, 0.55, 0.90])
    first_eval = {q.text for q in R.held_out_problems(5, "medium", 12345)}

    def fake_acc(model, problems):
        if len(problems) == 6:                 # the selection set
            assert not first_eval & {q.text for q in problems}
            seen.append({k: v.clone() for k, v in model.state_dict().items()})
            return next(script)
        return 0.0

    monkeypatch.setattr(L, "greedy_accuracy", fake_acc)
    p = L.ReasoningLMParams(small_steps=30, base_steps=2, batch=4, n_small_samples=0, judge_frac=0.0,
                            n_heldout=20, n_eval=5, small_target_acc=0.6, select_every=10, n_select=6)
    # Execute
    out = L.train_reasoning_lms(p)
    # Assert: three checkpoints (steps 10, 20, 30); step 20's weights (0.55) are the small model's
    st = out["small"]["stats"]
    assert [s for s, _ in st["selection_curve"]] == [10, 20, 30]
    assert st["selected_step"] == 20 and st["selection_accuracy"] == 0.55
    assert all(torch.equal(out["small"]["state"][k], seen[1][k]) for k in seen[1])
    assert not all(torch.equal(out["small"]["state"][k], seen[2][k]) for k in seen[2])


def test_checkpoint_selection_rejects_overlap_with_eval_problems():
    with pytest.raises(Exception, match="n_select"):
        L.ReasoningLMParams(n_heldout=20, n_eval=15, small_target_acc=0.6, n_select=6).check()
