"""The mi300x-8gpu preset (RCCL on an xGMI full mesh) against its constants and against published rccl-tests
runs (validation/mi300x-8gpu.toml). Bands that do not hold are strict xfails, as in tests/test_hardware.py."""

from __future__ import annotations

import pytest

from hcclsim.analysis import validate as V
from hcclsim.network.config import load_topology
from hcclsim.sweeping.sweep import sweep

RING_SMALL = "all_reduce AAC8, RCCL ring (8-512 B)"
MSCCL_LL = "all_reduce AAC8, MSCCL all-pairs LL (1 KiB-256 KiB)"
MSCCL_SIMPLE = "all_reduce AAC8, MSCCL all-pairs Simple (512 KiB-16 MiB)"
RING_LARGE = "all_reduce AAC8, RCCL ring (32 MiB-8 GiB)"
ROCM_DOCS = "all_reduce ROCm docs, -g 8"
MSCCL_LL_SET = ["endpoint.protocol=ll", "endpoint.ll.share=0.5"]      # the MSCCL LL case's overrides
KIB, GIB = 1 << 10, 1 << 30


@pytest.fixture(scope="module")
def topo():
    return load_topology("mi300x-8gpu")


@pytest.fixture(scope="module")
def result():
    return V.validate(["mi300x-8gpu"])


@pytest.fixture(scope="module")
def bands(result):
    return result.summary.set_index(["case", "band", "metric"]).status


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
    assert len(result.points) >= 60
    assert set(result.points.case) == {RING_SMALL, MSCCL_LL, MSCCL_SIMPLE, RING_LARGE, ROCM_DOCS}


@pytest.mark.parametrize("size", [8 * KIB, 128 * KIB])
def test_msccl_allpairs_ll_is_a_two_shot_at_rccls_latencies(size):
    """MSCCL's all-pairs XML as direct_twoshot: two steps, each a hop (0.8 us) and 1/8 of the data on every
    link at LL's 8 of 16 bytes (48 GB/s x 0.5), after RCCL's LL base latency (12 us), derived by hand:
    8 KiB: 13.6 + 2 x 1024 B / 24 GB/s = 13.685 us; 128 KiB: 13.6 + 2 x 16384 / 24e9 = 14.965 us."""
    forced = load_topology("mi300x-8gpu", MSCCL_LL_SET)
    t = float(sweep(forced, ["all_reduce"], "direct_twoshot", [size]).rows.time_us.iloc[0])
    assert t == pytest.approx(12 + 2 * 0.8 + 2 * (size / 8) / (48e9 * 0.5) * 1e6, rel=1e-4)


def test_aac8_small_sizes_are_not_rccls_ring(result):
    """The case split matters: at 1-8 KiB the AAC8 pod measures 13.7 us, which RCCL's ring (23.3 us) misses by
    more than the 30 % tolerance while the two-shot passes -- a ring there would fail the small band."""
    pts = result.points[(result.points.case == MSCCL_LL) & (result.points.size_bytes <= 8 * KIB)]
    assert len(pts) == 4
    for size, measured, predicted in zip(pts.size_bytes, pts.measured_time_us, pts.predicted_time_us):
        assert abs(predicted / measured - 1) < 0.30
        assert ring_time_us(int(size), "ll") / measured - 1 > 0.30


def not_yet(why: str):
    return pytest.mark.xfail(strict=True, reason=why)


@pytest.mark.parametrize("case,band,metric", [
    (MSCCL_LL, "small", "time"),                     # 1-32 KiB within 11 % (13.7-15.5 us measured, 13.6-13.9 model)
    (MSCCL_LL, "medium", "busbw"),                   # 64-256 KiB within 7 %
    (RING_LARGE, "medium", "busbw"),                 # 32 MiB: +11 %
    (RING_LARGE, "large", "busbw"),                  # >= 64 MiB within 10 %: +6 to +9 %
    (ROCM_DOCS, "large", "busbw"),                   # +6 to +8 %
    pytest.param(RING_SMALL, "small", "time", marks=not_yet(
        "128-512 B match RCCL's ring/LL (23.2 us model, 23.0-23.4 measured), but 8-64 B take 16-19 us "
        "(+20 to +42 %): no RCCL mechanism for it was found")),
    pytest.param(MSCCL_SIMPLE, "medium", "busbw", marks=not_yet(
        "MSCCL's Simple all-pairs is within 10 % to 2 MiB, then +19/+28/+36 % at 4/8/16 MiB: the links run at "
        "~2/3 of 48 GB/s there; no sourced per-channel or reduction rate explains it")),
    pytest.param(ROCM_DOCS, "medium", "busbw", marks=not_yet(
        "the -g 8 ring at 4-32 MiB is +16 to +33 % (the model's 8-launch loop costs nothing: no HIP launch cost)")),
])
def test_mi300x_band(bands, case, band, metric):
    assert bands[(case, band, metric)] == V.PASS


def test_packet_engine_agrees_with_the_analytic_one(topo):
    """Mesh rings are contention-free (one transfer per link per step): the engines agree within 3 %."""
    sizes = [224 * KIB, 28 << 20]
    rows = sweep(topo, ["all_reduce"], "ring", sizes, engine="analytic,packet").rows.set_index(["engine", "size_bytes"])
    for size in sizes:
        assert rows.time_us[("packet", size)] == pytest.approx(rows.time_us[("analytic", size)], rel=0.03)
