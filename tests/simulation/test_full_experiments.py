"""Full `arnold` and `mozart` experiments (slow: run by `make bench`): every variant finishes and
every claim is computed; the claim tables are printed (whether each claim holds is the scoreboard's
business, not this test's)."""
import pytest


@pytest.mark.slow
@pytest.mark.parametrize("name", ["arnold", "mozart"])
def test_full_experiment_claim_table(run_experiment, name):
    o = run_experiment(name, debug=False)
    assert not o.failed, o.failed
    print(f"\n{name}: claim | holds | measured | paper")
    for c in o.claims:
        assert not c.error, (c.name, c.error)
        print(f"  {c.name} | {'yes' if c.holds else 'NO'}{'' if c.gate else ' (not gated)'} | {c.measured} | {c.paper}")
