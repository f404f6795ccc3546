"""Bad keys and values name what the user typed: a typo gets "did you mean", a bad value under
``experiment.common`` is reported against the ``common`` key, not the variant it was merged into."""
import pytest

from components.core.errors import ConfigError
from pipelines.config import missing_key_hint
from pipelines.preflight import check

BASE = ["experiment=error_feedback", "debug=true"]


def test_hint_names_the_close_key_at_the_level_that_is_missing():
    # Prepare
    cfg = {"experiment": {"common": {"error_feedback": {"link": {"bandwidth": "1Gbps"}, "steps": 3}}}}
    # Execute
    typo = missing_key_hint(cfg, "experiment.common.error_feedback.lnk.bandwidth")
    new = missing_key_hint(cfg, "experiment.common.error_feedback.zz_nothing_like_it")
    there = missing_key_hint(cfg, "experiment.common.error_feedback.link.bandwidth")
    # Assert
    assert "did you mean `link`" in typo and "experiment.common.error_feedback" in typo
    assert "did you mean" not in new and "++" in new and "link" in new
    assert there == ""


def test_typo_in_an_override_key_says_did_you_mean():
    # Execute
    with pytest.raises(ConfigError) as e:
        check([*BASE, "experiment.common.error_feedback.lnk.bandwidth=80Mbps"], multirun=False)
    # Assert
    assert "did you mean `link`" in str(e.value)
    assert "add it with ++" not in str(e.value)


def test_typo_in_a_multirun_override_key_says_did_you_mean():
    # Execute
    with pytest.raises(ConfigError) as e:
        check([*BASE, "experiment.seeds=[0],[1]", "experiment.common.error_feedback.lnk.bandwidth=80Mbps"],
              multirun=True)
    # Assert
    assert "did you mean `link`" in str(e.value)


def test_bad_value_under_common_is_reported_against_the_common_key():
    # Execute
    with pytest.raises(ConfigError) as e:
        check([*BASE, "experiment.common.error_feedback.link.bandwidth=80Mbs"], multirun=False)
    # Assert
    assert e.value.key == "experiment.common.error_feedback.link.bandwidth"
    assert e.value.value == "80Mbs" and "bandwidth" in e.value.allowed


def test_bad_value_on_a_variant_is_still_reported_against_the_variant():
    # Execute
    with pytest.raises(ConfigError) as e:
        check([*BASE, "++experiment.variants.gd.params.link.bandwidth=80Mbs"], multirun=False)
    # Assert
    assert e.value.key == "experiment.variants.gd.params.link.bandwidth"
