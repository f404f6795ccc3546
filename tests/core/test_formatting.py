"""The one value formatter behind tables, logs and claim reports."""
from components.core.formatting import fmt


def test_floats_round_to_the_requested_digits_and_missing_values_read_as_asked():
    # Prepare
    values = [0.123456, None, True, 3, [1.0, None, 2.5e-7]]

    # Execute
    default = [fmt(v) for v in values]
    live = [fmt(v, 3, "–") for v in values]

    # Assert
    assert default == ["0.1235", "", "True", "3", "[1, , 2.5e-07]"]
    assert live == ["0.123", "–", "True", "3", "[1, –, 2.5e-07]"]
