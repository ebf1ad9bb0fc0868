"""The foundation issue's reference points, end to end through hcclsim.sweep (the CLI's path)."""

import pytest

from hcclsim.network.config import load_topology
from hcclsim.sweeping.sweep import sweep

GIB = 1 << 30


def rows(topo, collective, algorithms, size):
    df = sweep(topo, [collective], algorithms, [size]).rows
    return {r.algorithm: r for r in df.itertuples()}


@pytest.fixture
def zero_latency():
    return load_topology("switch8", ["latency=0"])


def test_bandwidth_at_1gib_on_the_8_rank_switch(zero_latency):
    ar = rows(zero_latency, "all_reduce", "ring,tree,in_switch,in_switch:mode=push", GIB)
    assert ar["ring"].busbw_GBps == pytest.approx(50.0, rel=0.01)
    assert ar["tree"].busbw_GBps >= 0.8 * 50
    assert ar["in_switch:mode=push"].busbw_GBps >= 1.6 * 50
    # as NVLS runs, a link carries (1 + 1/N) S: busbw tends to 2(N-1)/(N+1) B = 77.8 GB/s
    assert 0.95 * 2 * 7 / 9 * 50 <= ar["in_switch"].busbw_GBps < 2 * 7 / 9 * 50
    assert rows(zero_latency, "all_gather", "ring", GIB)["ring"].busbw_GBps == pytest.approx(50.0, rel=0.01)
    assert rows(zero_latency, "reduce_scatter", "ring", GIB)["ring"].busbw_GBps == pytest.approx(50.0, rel=0.01)
    assert rows(zero_latency, "all_to_all", "direct", GIB)["direct"].busbw_GBps == pytest.approx(50.0, rel=0.01)


def test_latency_at_256_bytes_on_the_8_rank_switch():
    ar = rows(load_topology("switch8"), "all_reduce", "ring,tree,direct_oneshot,direct_twoshot", 256)
    assert ar["ring"].time_us == pytest.approx(14.0, rel=0.01)          # 2(N-1) path latencies of 1 us
    best_direct = min(ar["direct_oneshot"].time_us, ar["direct_twoshot"].time_us)
    assert best_direct < ar["tree"].time_us < ar["ring"].time_us


def test_hierarchical_beats_a_flat_ring_on_the_two_tier_fabric():
    topo = load_topology("two-tier-128", ["scale_up.latency=0", "scale_out.latency=0"])
    assert topo.nranks == 128
    ar = rows(topo, "all_reduce", "ring:rails=off,hierarchical", GIB)
    flat = ar["ring:rails=off"].busbw_GBps                                 # the flat rank-order ring
    assert flat == pytest.approx(50.0, rel=0.01)                          # bound by the 50 GB/s NICs
    assert ar["hierarchical"].busbw_GBps > 3 * flat


def test_skipped_algorithms_say_why():
    result = sweep(load_topology("two-tier-128"), ["all_reduce"], "all", [1 << 20])
    reasons = {algo: why for _, algo, why in result.skipped}
    assert "in_switch" in reasons and "in_switch_reduce" in reasons["in_switch"]
    assert {"ring", "tree", "hierarchical"} <= set(result.rows.algorithm)
