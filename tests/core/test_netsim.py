import pytest

from components.core.errors import ConfigError
from components.core.netsim import Link, overlapped_s, parse_bandwidth, parse_seconds


def test_units():
    assert parse_bandwidth("80Mbps") == 80e6
    assert parse_bandwidth("100Gbps") == 100e9
    assert parse_bandwidth(1e9) == 1e9
    assert parse_seconds("50us") == pytest.approx(50e-6)
    assert parse_seconds("2ms") == pytest.approx(2e-3)


@pytest.mark.parametrize("bad", ["0Mbps", "fast", -5, 0])
def test_bad_bandwidth(bad):
    with pytest.raises(ConfigError):
        parse_bandwidth(bad)


def test_alpha_beta_model():
    link = Link.from_config({"bandwidth": "80Mbps", "latency": "1ms"})
    # 10 MB over 80 Mbps = 1 s, plus one latency
    assert link.transfer_s(10e6) == pytest.approx(1.0 + 1e-3)
    assert link.transfer_s(10e6, messages=3) == pytest.approx(1.0 + 3e-3)
    assert link.transfer_s(0, messages=0) == 0.0


def test_ring_allreduce_matches_textbook():
    link = Link(8e9, 0.0)  # 1 GB/s
    # 2 (n-1)/n * bytes / bandwidth
    assert link.ring_allreduce_s(1e9, 4) == pytest.approx(2 * 3 / 4 * 1.0)
    assert link.ring_allreduce_s(1e9, 1) == 0.0


def test_slow_link_is_slower_and_overlap_hides_only_what_fits():
    slow, fast = Link.from_config({"bandwidth": "80Mbps"}), Link.from_config({"bandwidth": "100Gbps"})
    assert slow.transfer_s(1e6) > 1000 * fast.transfer_s(1e6)
    assert overlapped_s(2.0, 1.0) == (2.0, 1.0)
    t, hidden = overlapped_s(1.0, 4.0)
    assert t == 4.0 and hidden == pytest.approx(0.25)


def test_unknown_link_key():
    with pytest.raises(ConfigError) as e:
        Link.from_config({"bandwidht": "1Gbps"})
    assert e.value.key == "link.bandwidht"
