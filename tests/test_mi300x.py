"""The mi300x-8gpu preset (RCCL on an xGMI full mesh) against its constants and against published rccl-tests
runs (validation/mi300x-8gpu.toml). Bands that do not hold are strict xfails, as in tests/test_hardware.py."""

from __future__ import annotations

import pytest

from hcclsim.analysis import validate as V
from hcclsim.network.config import load_topology
from hcclsim.sweeping.sweep import sweep

CASE = "all_reduce default (hisohara AAC8, ROCm docs)"
KIB, GIB = 1 << 10, 1 << 30


@pytest.fixture(scope="module")
def topo():
    return load_topology("mi300x-8gpu")


@pytest.fixture(scope="module")
def result():
    return V.validate(["mi300x-8gpu"])


@pytest.fixture(scope="module")
def bands(result):
    return result.summary.set_index(["band", "metric"]).status


def ring_time_us(size, protocol):
    forced = load_topology("mi300x-8gpu", [f"endpoint.protocol={protocol}"])
    return float(sweep(forced, ["all_reduce"], "ring", [size]).rows.time_us.iloc[0])


@pytest.mark.parametrize("size", [224, 224 * KIB, 28 << 20, 7 << 27])       # whole elements per 1/56 chunk
def test_ring_allreduce_is_rccls_own_cost_model(size):
    """Ring AllReduce on 8 ranks, 14 steps over 7 link-disjoint rings of 1/7 of the data each:
    LL      12 us + 14 x 0.8 us + (14/8) S / (7 x 48 GB/s x 0.08)   (baseLat, hwLat, bwRatio 0.08)
    Simple  17 us + 14 x 2.1 us + (14/8) S / (7 x 48 GB/s)          (48 = 64 GB/s x 0.75, RCCL's xGMI width)
    -- RCCL's ncclTopoGetAlgoTime for ring on gfx942 (tuning_model_5), derived by hand."""
    ll = 12 + 14 * 0.8 + 1.75 * size / (7 * 48e9 * 0.08) * 1e6
    simple = 17 + 14 * 2.1 + 1.75 * size / (7 * 48e9) * 1e6
    assert ring_time_us(size, "ll") == pytest.approx(ll, rel=1e-4)
    assert ring_time_us(size, "simple") == pytest.approx(simple, rel=1e-4)


def test_auto_switches_from_ll_to_simple_where_rccls_model_does(topo):
    """LL and Simple times (above) meet at S = 23.2 us / (1.75/26.88 GB/s - 1.75/336 GB/s) = 387,337 B;
    LL128 (off on gfx942) is never picked."""
    rows = sweep(topo, ["all_reduce"], "ring", [8, 368 * KIB, 400 * KIB, GIB]).rows
    assert list(rows.protocol) == ["ll", "ll", "simple", "simple"]


def test_large_allreduce_uses_all_seven_links(topo):
    """At 8 GiB busbw approaches 7 x 48 = 336 GB/s (rank-order rings would use 2 of the 7 links: 96)."""
    rows = sweep(topo, ["all_reduce"], "ring", [8 * GIB]).rows
    assert 330 < float(rows.busbw_GBps.iloc[0]) < 336
    off = sweep(topo, ["all_reduce"], "ring:permute=off", [8 * GIB]).rows
    assert 94 < float(off.busbw_GBps.iloc[0]) < 96


def test_auto_chooses_among_what_rccl_runs(topo):
    rows = sweep(topo, ["all_reduce", "all_to_all"], "auto", [KIB, GIB]).rows
    assert set(zip(rows.collective, rows.chosen)) == {("all_reduce", "ring"), ("all_to_all", "direct")}


def test_validates_with_enough_points(result):
    assert len(result.points) >= 20 and set(result.points.case) == {CASE}


def not_yet(why: str):
    return pytest.mark.xfail(strict=True, reason=why)


@pytest.mark.parametrize("band,metric", [
    ("large", "busbw"),                              # >= 64 MiB within 10 %: +6 to +9 %
    pytest.param("small", "time", marks=not_yet(
        "RCCL's own model (12 us base + 14 x 0.8 us) gives 23 us; the AAC8 pod measures 13.7 us at 1-8 KiB, "
        "and the ROCm docs' one-process -g 8 run 34-45 us (its host launch loop; no sourced HIP launch cost)")),
    pytest.param("medium", "busbw", marks=not_yet(
        "64 KiB-2 MiB: the AAC8 pod is up to 2.3x faster than RCCL's model (17.5 us at 256 KiB against 40 us), "
        "while the ROCm docs' -g 8 run sits on its ~44 us floor (model up to 61 % faster at 64 KiB)")),
])
def test_mi300x_band(bands, band, metric):
    assert bands[(band, metric)] == V.PASS


def test_packet_engine_agrees_with_the_analytic_one(topo):
    """Mesh rings are contention-free (one transfer per link per step): the engines agree within 3 %."""
    sizes = [224 * KIB, 28 << 20]
    rows = sweep(topo, ["all_reduce"], "ring", sizes, engine="analytic,packet").rows.set_index(["engine", "size_bytes"])
    for size in sizes:
        assert rows.time_us[("packet", size)] == pytest.approx(rows.time_us[("analytic", size)], rel=0.03)
