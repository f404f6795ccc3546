import pytest

from components.core.claims import (STATUSES, Claim, ClaimOutcome, check, evaluate, noise_figure, outcome_status,
                                    referenced_variants)
from components.core.errors import ConfigError
from components.core.result import Result
from pipelines.experiment import build_spec
from pipelines.outcome import SeedOutcome, VariantOutcome
from pipelines.stages.evaluate import judge

M = {"a": {"loss": 1.0, "bytes": 100.0}, "b": {"loss": 1.5, "bytes": 400.0}}


def test_expressions():
    assert evaluate("a.loss <= 1.02 * b.loss", M) is True
    assert evaluate("a.bytes / b.bytes", M) == 0.25
    assert evaluate("min(a.loss, b.loss) < 1 or a.bytes < 200", M) is True
    assert evaluate("a.loss < b.loss < 2", M) is True
    assert referenced_variants("a.loss < b.loss") == {"a", "b"}


@pytest.mark.parametrize("expr", ["__import__('os')", "a.loss.__class__", "open('x')", "[x for x in a]", "lambda: 1"])
def test_unsafe_expressions_rejected(expr):
    with pytest.raises(ConfigError):
        evaluate(expr, M)


def test_a_metric_not_reported_is_not_run_and_a_variant_without_results_fails():
    # Execute: a metric the variant did not report; a variant with no results (it crashed)
    missing = check(Claim("c", "a.accuracy > 0.5 or True"), M)
    crashed = check(Claim("c", "z.loss < 1"), M)
    # Assert: neither passes; only the crash fails
    assert (missing.holds, missing.status) == (False, "not run") and "accuracy" in missing.error
    assert (crashed.holds, crashed.status) == (False, "fails") and "'z'" in crashed.error


def test_nan_fails():
    out = check(Claim("c", "a.loss * 0 + x.loss"), {"a": {"loss": 1.0}, "x": {"loss": float("nan")}})
    assert out.holds is False


def test_measured_is_reported():
    out = check(Claim("c", "a.loss < b.loss", measured="a.loss / b.loss"), M)
    assert out.holds and out.measured == "0.6667"


def test_paired_pairs_seed_by_seed_and_its_se_needs_two_seeds():
    # Prepare: a constant gain of 0.1 per seed under large between-seed noise
    seed_metrics = {"a": {0: {"m": 1.1}, 1: {"m": 2.1}, 2: {"m": 0.6}},
                    "b": {0: {"m": 1.0}, 1: {"m": 2.0}, 2: {"m": 0.5}}}
    agg = {"a": {"m": 1.2667, "m_se": 0.44}, "b": {"m": 1.1667, "m_se": 0.44}}
    claim = Claim("gain", "paired(a.m - b.m) >= 0.05 and paired(a.m - b.m) > 2 * paired_se(a.m - b.m)")
    unpaired = Claim("gain_unpaired", "a.m - b.m >= 0.05 and a.m - b.m > 2 * a.m_se")
    # Execute
    paired_out = check(claim, agg, seed_metrics)
    unpaired_out = check(unpaired, agg, seed_metrics)
    one_seed = check(claim, agg, {v: {0: s[0]} for v, s in seed_metrics.items()})
    # Assert: pairing sees the gain the noise hides; one seed cannot pass a claim about noise
    assert paired_out.holds and not unpaired_out.holds
    assert not one_seed.holds and "standard error of one seed" in one_seed.error


def test_seed_max_and_min_judge_the_worst_and_best_seed_where_the_mean_hides_one():
    # Prepare: two seeds well below a level, one stuck above it; the mean is below
    seed_metrics = {"a": {0: {"m": 1.9}, 1: {"m": 2.6}, 2: {"m": 1.9}}, "b": {0: {"m": 2.4}, 1: {"m": 2.4}, 2: {"m": 2.4}}}
    agg = {"a": {"m": 2.1333}, "b": {"m": 2.4}}
    # Execute
    mean_below = check(Claim("c", "a.m < b.m"), agg, seed_metrics)
    every_below = check(Claim("c", "seed_max(a.m - b.m) < 0", measured="seed_max(a.m - b.m)"), agg, seed_metrics)
    best = evaluate("seed_min(a.m)", agg, seed_metrics=seed_metrics)
    # Assert: the stuck seed decides the worst case, the mean does not see it
    assert mean_below.holds and not every_below.holds and every_below.measured == "0.2"
    assert best == 1.9
    with pytest.raises(ConfigError):
        evaluate("seed_max(a.m, b.m)", agg, seed_metrics=seed_metrics)


def test_claim_over_an_axis_counts_its_cells():
    # Prepare
    metrics = {"php_x": {"acc": 0.9}, "php_y": {"acc": 0.5}, "fml_x": {"acc": 0.8}, "fml_y": {"acc": 0.6}}
    axes = (("pattern", ("x", "y")),)
    # Execute
    every = check(Claim("c", "php_{pattern}.acc > fml_{pattern}.acc", over=("pattern",), axes=axes), metrics)
    one = check(Claim("c", "php_{pattern}.acc > fml_{pattern}.acc", over=("pattern",), axes=axes, at_least=1,
                      measured="php_{pattern}.acc - fml_{pattern}.acc"), metrics)
    # Assert
    assert not every.holds and one.holds
    assert one.measured.startswith("1/2 cells hold (need 1)") and [c["holds"] for c in one.cells] == [True, False]


# ------------------------------------------------------------------------------------------ premises
def test_premise_outcome_separates_setting_from_technique():
    # Prepare: the claim "a beats b by 1", stated for a setting where b is weak (b.loss >= 1.2)
    claim = Claim("c", "b.loss - a.loss >= 1", premise="b.loss >= 1.2", premise_measured="b.loss")
    strong_b = {"a": {"loss": 1.0}, "b": {"loss": 1.1}}
    # Execute
    setting = check(claim, strong_b)                       # fails, and its premise fails
    technique = check(claim, M)                             # fails under its premise
    vacuous = check(Claim("c", "a.loss < 2", premise="b.loss >= 1.2"), strong_b)
    # Assert
    assert (setting.holds, setting.premise_holds, setting.status) == (False, False, "premise not met")
    assert setting.premise_measured == "1.1"
    assert (technique.premise_holds, technique.status) == (True, "fails")
    assert (vacuous.holds, vacuous.status) == (True, "premise not met")  # a pass in the wrong setting is no pass


def test_a_premise_that_cannot_be_computed_never_excuses_a_failure():
    # Execute: the premise reads a metric no run reported, or a NaN
    missing = check(Claim("c", "a.loss > 5", premise="z.loss > 0"), M)
    nan = check(Claim("c", "a.loss > 5", premise="x.v > 0"), {**M, "x": {"v": float("nan")}})
    # Assert
    assert missing.premise_holds is None and missing.status == "fails" and "'z'" in missing.premise_error
    assert nan.premise_holds is None and nan.status == "fails"


def test_premise_over_an_axis_must_hold_on_every_cell():
    # Prepare
    axes = (("p", ("x", "y")),)
    metrics = {"php_x": {"acc": 0.5, "gap": 0.3}, "php_y": {"acc": 0.5, "gap": 0.0}}
    claim = Claim("c", "php_{p}.acc > 0.9", over=("p",), axes=axes, premise="php_{p}.gap > 0.1")
    # Execute
    out = check(claim, metrics)
    # Assert
    assert out.premise_holds is False and out.status == "premise not met"


def test_stored_outcome_without_premise_fields_reads_back():
    # Prepare: claims.json as written before premises (compare reads ClaimOutcome(**c))
    old = {"name": "c", "paper": "p", "measured": "1", "holds": False, "gate": True, "error": "", "skipped": False,
           "cells": []}
    # Execute
    out = ClaimOutcome(**old)
    # Assert
    assert out.premise_holds is None and out.status == "fails" and outcome_status(old) == "fails"
    assert outcome_status({**old, "skipped": True}) == "not run"


def test_measured_figure_carries_its_standard_error_over_seeds():
    # Prepare: a paired gain over three seeds and a mean with its SE
    seed_metrics = {"a": {0: {"m": 1.1}, 1: {"m": 2.1}, 2: {"m": 0.7}}, "b": {0: {"m": 1.0}, 1: {"m": 2.0}, 2: {"m": 0.5}}}
    agg = {"a": {"m": 1.3, "m_se": 0.4}, "b": {"m": 1.1667, "m_se": 0.44}}
    claim = Claim("g", "paired(a.m - b.m) > 0", measured="[paired(a.m - b.m), a.m, a.m / b.m]")
    # Execute
    out = check(claim, agg, seed_metrics)
    plain = check(Claim("g", "a.loss < b.loss", measured="a.loss"), M)
    # Assert: SE where the term is a mean over seeds, none on a derived ratio or a one-seed figure
    assert out.measured_pm == "[0.1333 ± 0.03333, 1.3 ± 0.4, 1.114]"
    assert plain.measured_pm == ""


# ------------------------------------------------------------------------------------------ issue 30 item 12
def _ran(name: str, per_seed: dict[int, dict[str, float]]) -> VariantOutcome:
    o = VariantOutcome(name, "probe", "technique", "core", status="FINISHED")
    for s, m in per_seed.items():
        o.seeds[s] = SeedOutcome(s, result=Result(metrics=dict(m)))
    keys = set().union(*per_seed.values())
    o.result = Result(metrics={k: sum(m[k] for m in per_seed.values()) / len(per_seed) for k in keys})
    return o


SPACESERVE = {"name": "x", "variants": {v: {"technique": "probe", "params": {}}
                                        for v in ("tm", "sis_fcfs", "sis_srpt", "spaceserve")},
              "claims": {"twsrft": {"holds": "paired(spaceserve.enc_s / sis_fcfs.enc_s) <= 0.85",
                                    "measured": "[paired(spaceserve.enc_s / sis_fcfs.enc_s), spaceserve.enc_s, "
                                                "sis_fcfs.enc_s, sis_srpt.enc_s]"},
                         "near_saturation": {"holds": "spaceserve.tpot_r20 <= 0.5 * tm.tpot_r20",
                                             "measured": "[spaceserve.tpot_r1 / tm.tpot_r1, spaceserve.tpot_r20 / tm.tpot_r20]",
                                             "gate": False}}}


def test_a_claim_whose_holds_can_be_computed_is_judged_with_absent_measured_terms_as_n_a():
    # Prepare: only=[tm,sis_fcfs,spaceserve]: sis_srpt is named by `measured` alone
    spec = build_spec(SPACESERVE)
    outcomes = {"tm": _ran("tm", {0: {"tpot_r1": 1.0}}),
                "sis_fcfs": _ran("sis_fcfs", {0: {"enc_s": 2.0}, 1: {"enc_s": 4.0}}),
                "spaceserve": _ran("spaceserve", {0: {"enc_s": 1.0, "tpot_r1": 0.5}, 1: {"enc_s": 2.0, "tpot_r1": 0.5}})}
    # Execute
    twsrft, near = judge(spec, outcomes)
    # Assert
    assert twsrft.status == "holds" and twsrft.measured == "[0.5, 1.5, 3, n/a]"


def test_a_missing_metric_is_not_run_never_fails():
    # Prepare: rates without 20 (no *_r20 metric); the other measured term is still shown
    spec = build_spec(SPACESERVE)
    outcomes = {v: _ran(v, {0: {"enc_s": 1.0, "tpot_r1": r}}) for v, r in (("tm", 1.0), ("sis_fcfs", 1.0),
                                                                          ("sis_srpt", 1.0), ("spaceserve", 0.25))}
    # Execute
    _, near = judge(spec, outcomes)
    # Assert
    assert near.status == "not run" and near.skipped and not near.holds
    assert near.measured == "[0.25, n/a]" and "tpot_r20 was not reported" in near.error


def test_a_nan_still_fails_where_a_missing_metric_is_not_run():
    # Prepare / Execute
    nan = check(Claim("c", "a.t <= 0.5 * b.t"), {"a": {"t": float("nan")}, "b": {"t": 1.0}})
    missing = check(Claim("c", "a.t <= 0.5 * b.t"), {"a": {}, "b": {"t": 1.0}})
    # Assert
    assert nan.status == "fails" and missing.status == "not run"


def test_cells_not_run_leave_a_claim_over_an_axis_undecided_unless_the_rest_decide_it():
    # Prepare: rate 20 was not run; need 2 of 3 cells
    axes = (("r", (1, 5, 20)),)
    metrics = {"s": {"t_r1": 1.0, "t_r5": 1.0}, "b": {"t_r1": 4.0, "t_r5": 1.0}}

    def claim(at_least):
        return Claim("c", "s.t_r{r} <= 0.5 * b.t_r{r}", over=("r",), axes=axes, at_least=at_least)
    # Execute
    undecided, failed, held = check(claim(2), metrics), check(claim(3), {**metrics, "b": {"t_r1": 1.0, "t_r5": 1.0}}), \
        check(claim(1), metrics)
    # Assert: 1 holds + 1 not run could reach 2; with none holding, 3 cannot be reached
    assert undecided.status == "not run" and [c["status"] for c in undecided.cells] == ["holds", "fails", "not run"]
    assert failed.status == "fails" and held.status == "holds"


# ------------------------------------------------------------------------------------------ timed claims
def test_a_timed_effect_inside_its_noise_floor_is_inconclusive():
    # Prepare: "speedup >= 1.3", the speedup known to within its noise floor
    claim = Claim("t", "a.speedup >= 1.3", measured="a.speedup", noise=("a.speedup_noise",))

    def at(speedup, noise):
        return check(claim, {"a": {"speedup": speedup, "speedup_noise": noise}})
    # Execute
    inside, above, below, quiet = at(1.35, 0.1), at(1.6, 0.1), at(1.1, 0.1), at(1.35, 0.01)
    # Assert: the threshold within the floor of the figure: neither holds nor fails
    assert (inside.status, inside.holds, inside.inconclusive) == ("inconclusive", False, True)
    assert "measured verdict: holds" in inside.error and inside.noise_measured == "a.speedup 1.35 ± 0.1"
    assert above.status == "holds" and below.status == "fails" and quiet.status == "holds"
    assert at(1.25, 0.1).status == "inconclusive"   # a measured failure inside the floor is no failure either


def test_every_combination_of_two_timed_figures_is_tried():
    # Prepare: one figure must be high, the other low; each alone is clear, the low one is within its floor
    claim = Claim("t", "s.frac >= 0.9 and s.geo <= 1.15", noise=("s.frac_noise", "s.geo_noise"))
    metrics = {"s": {"frac": 0.95, "frac_noise": 0.01, "geo": 1.1, "geo_noise": 0.08}}
    # Execute
    out = check(claim, metrics)
    clear = check(claim, {"s": {**metrics["s"], "geo_noise": 0.01}})
    # Assert
    assert out.status == "inconclusive" and clear.status == "holds"


def test_paired_seeds_move_by_their_own_floor_and_an_unknown_floor_leaves_the_verdict():
    # Prepare: the speedup per seed with its floor; the aggregate floor would not reach the threshold
    seed_metrics = {"a": {0: {"sp": 1.4, "sp_noise": 0.2}, 1: {"sp": 1.4, "sp_noise": 0.2}}}
    agg = {"a": {"sp": 1.4, "sp_noise": 0.05}}
    claim = Claim("t", "paired(a.sp) >= 1.3", noise=("a.sp_noise",))
    # Execute
    out = check(claim, agg, seed_metrics)
    unknown = check(claim, {"a": {"sp": 1.4}}, {"a": {0: {"sp": 1.4}}})
    # Assert
    assert out.status == "inconclusive"
    assert unknown.status == "holds" and "noise floor unknown" in unknown.error


def test_inconclusive_status_stored_and_ordered_after_a_premise():
    # Prepare
    stored = {"name": "c", "paper": "", "measured": "1", "holds": False, "gate": True, "inconclusive": True}
    # Execute / Assert
    assert "inconclusive" in STATUSES and outcome_status(stored) == "inconclusive"
    assert outcome_status({**stored, "premise_holds": False}) == "premise not met"
    assert outcome_status({**stored, "skipped": True}) == "not run"
    assert ClaimOutcome(**stored).status == "inconclusive"


def test_noise_names_a_figures_floor_in_the_spec():
    # Prepare
    exp = {"name": "x", "variants": {"a": {"technique": "probe", "params": {}}},
           "claims": {"t": {"holds": "a.speedup >= 1.3", "noise": "a.speedup_noise"}}}
    # Execute
    (claim,) = build_spec(exp).claims
    # Assert: one name or a list; a bad name is one ConfigError naming the key
    assert claim.noise == ("a.speedup_noise",) and noise_figure("a.speedup_noise") == ("a", "speedup", "speedup_noise")
    for bad in ("a.speedup", "a.x_noise + 1", "b.speedup_noise", ["a.speedup_noise", 3]):
        with pytest.raises(ConfigError) as e:
            build_spec({**exp, "claims": {"t": {**exp["claims"]["t"], "noise": bad}}})
        assert e.value.key == "experiment.claims.t.noise"
