"""`[endpoint] selection = "library"`: -a auto and tune choose as NCCL 2.28.9's own cost model does
(hcclsim/sweeping/library.py, docs/execution.md "Choosing like the library").

Expected values are derived by hand from NCCL's constants (src/graph/tuning.cc, v2.28.9) in the comments."""

import io

import pandas as pd
import pytest
from helpers import run_cli as run

from hcclsim.network.config import load_topology
from hcclsim.sweeping import library as L
from hcclsim.sweeping.sweep import sweep, with_protocol

GIB = 1 << 30
CLUSTER = ["ring", "tree", "nvls_tree"]          # h100-cluster's endpoint.algorithms for AllReduce


def cluster(nodes):
    return load_topology("h100-cluster", [f"scale_out.domains={nodes}"])


# ------------------------------------------------------------------- the cost model, by hand

def test_one_dgx_h100_ring_ll_and_nvls_by_hand():
    """DGX-H100, AllReduce, 8 ranks. Search result from the preset's links: totalBw = 450 GB/s x 0.824 =
    370.8; the first SM90 speed <= 370.8 is 60, floor(370.8/60) = 6 rings, duplicated (60 >= 50) into
    12 x 30 GB/s. NVLS: 8 heads at the first speed with 9 s <= 370.8 = 40, bwInter raised to the top, 60.
    Ring/LL: busBw = min(llMaxBws[Hopper][1 node] 141, 12 x 30 x .5 = 180) = 141, algbw 141 x 8/14;
    latency baseLat 6.6 + 14 steps x hwLat[NVLink][Ring][LL] 0.6 = 15.0 us.
    NVLS/Simple: 8 x min(40 x .85 x 7/8 x 2 = 59.5, 60) = 476 bus, x 8/14 = 272 GB/s; latency 25 us.
    Equal at S = 10 us / (14/1,128,000 - 1/272,000) us/B = 1,144,835.8 B."""
    topo = load_topology("dgx-h100")
    comm = L.comm_of(topo)
    assert (comm.graphs[L.RING].channels, comm.graphs[L.RING].bw_intra) == (12, 30.0)
    assert (comm.graphs[L.NVLS].channels, comm.graphs[L.NVLS].bw_intra, comm.graphs[L.NVLS].bw_inter) == (8, 40.0, 60.0)
    assert L.algo_time(comm, "allreduce", L.RING, L.LL, 8) == pytest.approx(15.0 + 8 * 14 / (141.0 * 8 * 1000))
    assert L.algo_time(comm, "allreduce", L.NVLS, L.SIMPLE, GIB) == pytest.approx(25.0 + GIB / 272_000)
    small = L.choose(topo, "all_reduce", 1_144_835, ["ring", "in_switch"])
    large = L.choose(topo, "all_reduce", 1_144_836, ["ring", "in_switch"])
    assert (small.algorithm, small.protocol, large.algorithm, large.protocol) == ("ring", "ll", "in_switch", "simple")
    assert large.why.startswith("library (NCCL 2.28.9 cost model: NVLS/Simple 29.2 us < Ring/LL 29.2 us")


def test_four_node_tree_nvls_tree_and_ring_by_hand():
    """h100-cluster at 4 nodes (32 ranks, 8 per node). NIC path 400 Gb/s x 0.96 = 48 GB/s: one ring/tree
    channel per NIC at 48 (8 x 48), tree pattern TREE on SM90 (x .85); NVLS 8 x 40 (9 x 40 <= 370.8) / 48.
    Tree/LL: latency 6.8 + 2 x (7 x 0.6 + log2(4) x 5.0) = 35.2 us; bw: min(8 x 48 x .92, 8 x 36.0) = 288,
    LL: min(288 / 3.8, llMaxBws[Intel][>2 nodes] 20.4) = 20.4, x .85 x .5 = 8.67 GB/s.
    NVLSTree: 8 x min(59.5, 48, perChMaxNVLSTreeBws[Hopper][>2] 45.5) = 364 bus, x 32/62; latency
    25 + 2 x 2 x 20.9 = 108.6 us. Ring/Simple: 8 x 48 = 384 bus x 32/62; latency 8.4 + 56 x 3.4 + 6 x 14 =
    282.8, x 1.4 above 64 B per channel and rank: 395.92 us. At 1 GiB Ring 395.92 + 2^30 x 62 / 12,288,000
    = 5813.6 beats NVLSTree 108.6 + 2^30 x 62 / 11,648,000 = 5823.9; at 256 MiB NVLSTree 1537.4 wins."""
    topo = cluster(4)
    comm = L.comm_of(topo)
    assert L.algo_time(comm, "allreduce", L.TREE, L.LL, 8) == pytest.approx(35.2 + 8 / (1000 * 20.4 * .85 * .5))
    assert L.algo_time(comm, "allreduce", L.NVLS_TREE, L.SIMPLE, 256 << 20) == \
        pytest.approx(108.6 + (256 << 20) * 62 / (364_000 * 32))
    assert L.algo_time(comm, "allreduce", L.RING, L.SIMPLE, GIB) == pytest.approx(282.8 * 1.4 + GIB * 62 / (384_000 * 32))
    assert (L.choose(topo, "all_reduce", GIB, CLUSTER).algorithm, L.choose(topo, "all_reduce", 256 << 20, CLUSTER).algorithm) \
        == ("ring", "nvls_tree")


def test_a_wrong_constant_changes_the_pick(monkeypatch):
    """The broken case: with LL's bandwidth cap halved (llMaxBws[Hopper][1 node] 70.5 instead of 141) Ring/LL
    at 1 MiB costs 15 + 2^20 x 14 / 564,000 = 41.0 us > NVLS's 25 + 2^20 / 272,000 = 28.9: NVLS would be
    picked, so the hand-derived pick above would fail."""
    topo = load_topology("dgx-h100")
    assert L.choose(topo, "all_reduce", 1 << 20, ["ring", "in_switch"]).algorithm == "ring"
    monkeypatch.setattr(L, "LL_MAX_BWS", tuple((39.0, 39.0, 20.4) if i != 2 else (70.5, 45.0, 35.0) for i in range(4)))
    broken = load_topology("dgx-h100")                      # a fresh topology: its model is computed again
    assert L.choose(broken, "all_reduce", 1 << 20, ["ring", "in_switch"]).algorithm == "in_switch"


# ------------------------------------------------------------------- h100-cluster, per size band

@pytest.mark.parametrize("nodes, expected", [
    # 1 node: NVLSTree needs several nodes and in_switch is not listed; Ring LL -> LL128 -> Simple
    (1, ["ring/ll", "ring/ll", "ring/ll128", "ring/simple", "ring/simple"]),
    # predictions.md: Tree/LL -> Tree/LL128 at 138 KiB, NVLSTree from 5.6 MiB, Ring/Simple from 0.97 GiB
    (4, ["tree/ll", "tree/ll128", "nvls_tree/simple", "nvls_tree/simple", "ring/simple"]),
    (8, ["tree/ll", "tree/ll128", "nvls_tree/simple", "nvls_tree/simple", "nvls_tree/simple"]),
])
def test_h100_cluster_picks_per_band(nodes, expected):
    topo = cluster(nodes)
    got = [L.choose(topo, "all_reduce", s, CLUSTER) for s in (8, 1 << 20, 16 << 20, 256 << 20, GIB)]
    assert [f"{c.algorithm}/{c.protocol}" for c in got] == expected


def test_what_the_model_does_not_decide_says_why():
    assert "does not tune all_to_all" in L.choose(cluster(4), "all_to_all", 1 << 20, ["direct"])
    assert "no algorithm" in L.choose(cluster(4), "all_reduce", 1 << 20, ["direct_oneshot"])
    assert "compute_capability" in L.choose(load_topology("switch8"), "all_reduce", 1 << 20, ["ring"])
    forced = load_topology("dgx-h100", ["endpoint.protocol=ll"])      # NCCL_PROTO=LL: NVLS (Simple) is out
    assert L.choose(forced, "all_reduce", GIB, ["ring", "in_switch"]).protocol == "ll"


# ------------------------------------------------------------------- -a auto uses it

def test_auto_runs_the_librarys_pick_with_its_protocol():
    topo = cluster(4)
    sizes = [8, GIB]
    auto = sweep(topo, ["all_reduce", "all_to_all"], "auto", sizes).rows
    ar = auto[auto.collective == "all_reduce"]
    assert ar.chosen.tolist() == ["tree", "ring"] and ar.protocol.tolist() == ["ll", "simple"]
    assert ar.chosen_by.iloc[0].startswith("library (NCCL 2.28.9 cost model: Tree/LL 35.2 us < ")
    for row in ar.itertuples():                     # the simulator times the pick, protocol forced
        ref = sweep(with_protocol(topo, row.protocol), ["all_reduce"], row.chosen, [row.size_bytes]).rows
        assert row.time_us == ref.time_us.iloc[0]
    a2a = auto[auto.collective == "all_to_all"]
    assert a2a.chosen.tolist() == ["direct"] * 2 and a2a.chosen_by.str.startswith("fastest (library: ").all()
    fastest = sweep(load_topology("h100-cluster", ["scale_out.domains=4", "endpoint.selection=fastest"]),
                    ["all_reduce"], "auto", sizes).rows
    assert set(fastest.chosen_by) == {"fastest"}


def test_tune_shows_nccls_pick_beside_the_fastest(capsys):
    status, out, _ = run(capsys, "tune", "-t", "dgx-h100", "-b", "1M", "-e", "2M", "--format", "csv")
    assert status == 0
    got = pd.read_csv(io.StringIO(out), keep_default_na=False)
    assert list(zip(got.library_algorithm, got.library_protocol)) == [("ring", "ll"), ("in_switch", "simple")]
    lost = got.library_loss.astype(float)            # NCCL's pick is the fastest at 1 MiB, not at 2 MiB here
    assert got.algorithm.tolist() == ["ring", "ring"] and lost.iloc[0] == 0 and lost.iloc[1] > 0
    status, out, _ = run(capsys, "tune", "-t", "dgx-h100", "-b", "1M", "-e", "2M")
    assert "all_reduce: NCCL 2.28.9's cost model picks" in out and "in_switch/simple" in out


@pytest.mark.parametrize("setting, needle", [
    ("endpoint.selection=bogus", "endpoint.selection"),
    ("endpoint.compute_capability=-1", "endpoint.compute_capability"),
])
def test_bad_selection_is_one_line_and_exit_2(capsys, setting, needle):
    status, _, err = run(capsys, "sweep", "-t", "dgx-h100", "--set", setting, "-e", "8")
    assert status == 2 and err.startswith("hccl-bench: error: ") and needle in err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
