"""The GPU presets against published nccl-tests measurements (validation/, docs/validation.md): the
must-holds of the hardware issue, each as a band of `hccl-bench validate` (every checked point within
the tolerance the validation file documents).

Bands that do not hold yet are marked xfail(strict=True): the suite records them, and the day one of
them starts to pass the mark must come off (a strict xfail that passes fails the suite).
"""

from __future__ import annotations

import pytest

from hcclsim.analysis import validate as V
from hcclsim.network.config import load_topology
from hcclsim.sweeping.sweep import sweep

GIB = 1 << 30


@pytest.fixture(scope="module")
def dgx_h100():
    return V.validate(["dgx-h100"]).summary.set_index(["case", "band", "metric"]).status


def not_yet(why: str):
    return pytest.mark.xfail(strict=True, reason=why)


HOLDS = [
    ("all_reduce ring (Together)", "large", "busbw"),                 # ring within 10 % at >= 64 MiB
    ("all_reduce ring (Together)", "small", "time"),                   # 8 B - 8 KiB within 30 %
    ("all_reduce nvls (Together)", "small", "time"),
    ("all_reduce default (xxrjun 10 nodes, #290)", "medium", "busbw"),
    ("all_gather ring (Together)", "large", "busbw"),                 # AllGather within 15 % at >= 64 MiB
    ("all_gather default (Together, xxrjun)", "large", "busbw"),
    ("reduce_scatter ring (Together)", "large", "busbw"),             # ReduceScatter within 15 %
    ("reduce_scatter default (Together, xxrjun)", "large", "busbw"),
    ("all_reduce nvls (Together)", "medium", "busbw"),                # NVLS within 25 % at 64 KiB-64 MiB
    ("all_reduce nvls (Together)", "large", "busbw"),                 # NVLS within 10 % at >= 64 MiB
    ("all_reduce default (xxrjun 10 nodes, #290)", "large", "busbw"),
    ("all_reduce nvls (Azure ND H100 v5, busbw only)", "large", "busbw"),
    # ring within 25 % at 64 KiB-64 MiB: a one-thread -g 8 loop of 20 at 256 KiB-1 MiB takes ~44 us, the model
    # eight launches and a 20th of the collective, ~36 us (+23.7 %)
    ("all_reduce ring (Together)", "medium", "busbw"),
    # Azure's -g 8 -n 40 table: ~42 us flat at 64 KiB-2 MiB, the model eight launches and a 40th (+19 %)
    ("all_reduce nvls (Azure ND H100 v5, busbw only)", "medium", "busbw"),
]


@pytest.mark.parametrize("case,band,metric", HOLDS)
def test_dgx_h100_band_within_its_tolerance(dgx_h100, case, band, metric):
    assert dgx_h100[(case, band, metric)] == V.PASS


@pytest.fixture(scope="module")
def h100_cluster():
    return V.validate(["h100-cluster"]).summary.set_index(["case", "band", "metric"]).status


CLUSTER_HOLDS = [                                                  # AllReduce 15 %, AllToAll 25 %, >= 256 MiB
    ("IB 2 nodes, ring (#309 gj-aion)", "large", "busbw"),
    ("H100 2 nodes, all_to_all (xxrjun, 45 node pairs)", "large", "busbw"),
    ("H100 10 nodes, all_to_all (xxrjun, 2 runs)", "large", "busbw"),
    ("H100 10 nodes, all_reduce default (xxrjun, 2 runs)", "large", "busbw"),   # rings at 4-16 GiB ~320 GB/s
]
CLUSTER_GAPS = [
    pytest.param("IB 4 nodes, default (#309 gj-aion)", "large", "busbw",
                 marks=not_yet("NVLSTree at 256 MiB +33.7 % (a measured dip below its 128 MiB neighbour) and "
                               "512 MiB +16.6 %; the rings from 1 GiB are within 4 %")),
]


@pytest.mark.parametrize("case,band,metric", CLUSTER_HOLDS)
def test_h100_cluster_band_within_its_tolerance(h100_cluster, case, band, metric):
    assert h100_cluster[(case, band, metric)] == V.PASS


@pytest.mark.parametrize("case,band,metric", CLUSTER_GAPS)
def test_h100_cluster_band_not_yet_within_its_tolerance(h100_cluster, case, band, metric):
    assert h100_cluster[(case, band, metric)] == V.PASS


@pytest.fixture(scope="module")
def dgx_a100():
    return V.validate(["dgx-a100"]).summary.set_index(["case", "band", "metric"]).status


A100_RAMP = ("the A100 logs ramp to their plateau only past 1 GiB; NCCL's own cost model, which the preset is, "
             "misses it by the same (docs/validation.md, 'What does not match yet')")
A100_BANDS = [
    ("all_reduce default (superbench, thanos)", "small", "time"),            # 8 B-8 KiB within 30 %
    *(pytest.param(case, band, "busbw", marks=not_yet(A100_RAMP)) for case, band in (
        ("all_reduce default (superbench, thanos)", "medium"), ("all_reduce default (superbench, thanos)", "large"),
        ("all_reduce default (Azure ND A100 v4, busbw only)", "medium"),
        ("all_reduce default (Azure ND A100 v4, busbw only)", "large"),
        ("all_gather default (superbench)", "large"), ("reduce_scatter default (superbench)", "large"))),
]


@pytest.mark.parametrize("case,band,metric", A100_BANDS)
def test_dgx_a100_band_within_its_tolerance(dgx_a100, case, band, metric):
    assert dgx_a100[(case, band, metric)] == V.PASS


def _allreduce(sets, algorithm="ring", preset="h100-cluster", size=8 * GIB):
    rows = sweep(load_topology(preset, ["endpoint.protocol=simple", *sets]), ["all_reduce"], algorithm, [size]).rows
    return rows.busbw_GBps.iloc[0], rows.time_us.iloc[0]


def test_h100_cluster_rings_carry_20_gbps_per_channel_across_the_network():
    """Ring/Simple on 4 nodes: each NIC carries 2 of the 16 channels, 2 x 20 = 40 of its 48 GB/s, so busbw
    levels at 8 NICs x 40 = 320 GB/s (the uncapped model: 8 x 48 = 384)."""
    busbw, _ = _allreduce(["scale_out.domains=4"])
    assert 0.98 * 320 < busbw <= 320


def test_h100_cluster_more_channels_reach_the_nic():
    """24 channels (NCCL_MIN_CTAS=24): 3 x 20 = 60 GB/s per NIC exceeds its 48, so the NIC is the limit again:
    8 x 48 = 384 GB/s. Slower NICs (200 Gb/s: 25 x 0.96 = 24 GB/s < 40) are the limit at 16 channels too,
    exactly as without the per-channel rate."""
    busbw, _ = _allreduce(["scale_out.domains=4", "endpoint.channels=24"])
    assert 0.98 * 384 < busbw <= 384
    slow = ["scale_out.domains=4", "scale_out.bandwidth=200Gb/s"]
    busbw, t = _allreduce(slow)
    assert 0.98 * 192 < busbw <= 192
    assert t == _allreduce([*slow, "endpoint.simple.net_channel_bandwidth=0"])[1]


def test_per_channel_network_rate_leaves_nvlink_and_trees_alone():
    """The rate is per ring channel across a NIC: a single node (no NIC) and the tree (its channels reach
    several peers) take the same time with and without it."""
    for preset, algorithm, sets in (("dgx-h100", "ring", []), ("h100-cluster", "tree", ["scale_out.domains=4"])):
        plain = _allreduce([*sets, "endpoint.simple.net_channel_bandwidth=0"], algorithm, preset, GIB)[1]
        assert _allreduce([*sets, "endpoint.simple.net_channel_bandwidth=1GB/s"], algorithm, preset, GIB)[1] == plain


def test_every_gpu_preset_validates_with_enough_points():
    """dgx-h100, h100-cluster and dgx-a100 each compare with at least 20 measured points."""
    res = V.validate(["dgx-h100", "h100-cluster", "dgx-a100"])
    counts = res.points.groupby("preset").size()
    assert set(counts.index) == {"dgx-h100", "h100-cluster", "dgx-a100"} and (counts >= 20).all(), counts


def test_generic_topologies_model_no_library():
    """switch8 and two-tier-128 keep the ideal links: every row says protocol none, so the closed forms of
    docs/algorithms.md hold exactly (the algorithm tests check them)."""
    for preset in ("switch8", "two-tier-128", "ring8", "torus-4x4"):
        rows = sweep(load_topology(preset), ["all_reduce"], "ring", [8, GIB]).rows
        assert set(rows.protocol) == {"none"}, preset
