"""nvls_tree: NCCL's NVLSTree AllReduce (algorithms/nvls_tree.py) -- correctness, chunks, closed forms, the
per-channel cap and the NIC load behind NCCL's two-node factor."""

import numpy as np
import pytest
from hcclsim.algorithms._phases import nic_load
from helpers import compile_for, time_of

from hcclsim.core.errors import ConfigError
from hcclsim.engine import analytic
from hcclsim.network.config import load_topology
from hcclsim.network.topology import build_flat, build_hierarchical
from hcclsim.schedule import collectives as C
from hcclsim.schedule.algorithm import Problem, parse_spec
from hcclsim.schedule.checker import check
from hcclsim.sweeping.sweep import algorithms_for, sweep

GiB = 1 << 30


def reducing(D, L, out="rail"):
    return build_hierarchical("t", "switch", L, 400e9, 0.0, True, out, D, 50e9, 0.0)


@pytest.mark.parametrize("D", [1, 2, 3, 4, 5])
@pytest.mark.parametrize("L", [1, 2, 3, 4])
def test_nvls_tree_computes_the_allreduce(D, L):
    if D * L < 2:
        return
    t = reducing(D, L)
    for Q in (1, 3):
        s = compile_for(f"nvls_tree:chunks={Q}", "all_reduce", t)
        for count in (1, 2 * D * L + 1):
            check(s, count)


def key(spec, topo, size):
    algo = parse_spec(spec)
    return algo.structure_key(Problem("all_reduce", topo), C.sizing("all_reduce", size, 4, topo.nranks), 4)


def test_chunks_follow_nccls_rule():
    """calcCollChunking for NVLSTree (src/enqueue.cc:2056-2068), 16 channels x L = 8 heads = 128 pieces a
    loop: the chunk is 128 KiB (64 KiB from 4 domains), cut to 64 KiB below 4 x 128 x 128 KiB = 64 MiB
    and to 32 KiB below 128 x 64 KiB = 8 MiB; a pipeline chunk is one loop, 128 x chunk bytes."""
    two, four = reducing(2, 8), reducing(4, 8)
    assert key("nvls_tree", two, GiB) == GiB // (128 * (128 << 10)) == 64
    assert key("nvls_tree", two, 64 << 20) == 4            # not below 64 MiB: 128 KiB chunks
    assert key("nvls_tree", two, 32 << 20) == 4            # 64 KiB
    assert key("nvls_tree", two, 8 << 20) == 1             # 64 KiB: one loop of 8 MiB
    assert key("nvls_tree", two, 4 << 20) == 1             # 32 KiB
    assert key("nvls_tree", two, 256) == 1
    assert key("nvls_tree", four, GiB) == 128              # 64 KiB chunks from 4 domains
    assert key("nvls_tree", four, 16 << 20) == 2
    assert key("nvls_tree:chunks=5", four, GiB) == 5
    assert key("nvls_tree:channels=1", two, 1 << 20) == 2     # 1 MiB < 4 x 8 x 128 KiB: 64 KiB; 2 loops of 8
    assert key("nvls_tree", four, 16 * GiB) == 256 and key("nvls_tree:max_chunks=1000", four, 16 * GiB) == 1000
    assert key("nvls_tree:max_templates=100", four, GiB) == 100 // (2 * 8 + 2 + 4 * 3)


def test_one_chunk_closed_form_on_three_domains():
    """two-tier-128 with a reducing switch, 3 domains (odd: tree 1 is tree 0 shifted by one), one chunk:
    reduce-scatter up (L pieces share the uplink) h + S/B_up, down h + S/(L B_up); the trees 0 -> 2 -> 1
    and 1 -> 0 -> 2 (height 2) never put two transfers on one NIC or leaf link in a step: 4 steps of
    a_out + S/(2L B_out), a_out four 2 us hops; all-gather up h + S/(L B_up), multicast h + S/B_up."""
    h, a_out, B_up, B_out = 500e-9, 8e-6, 400e9, 50e9
    for L in (2, 4):
        topo = load_topology("two-tier-128", ["scale_out.domains=3", f"scale_up.ranks={L}",
                                              "scale_up.in_switch_reduce=true"])
        assert topo.path_latency(0, L) == pytest.approx(a_out)
        S = 3 * L * 2 * 4 * 1024
        want = 4 * h + 2 * S / B_up + 2 * S / (L * B_up) + 4 * (a_out + S / (2 * L * B_out))
        assert time_of("nvls_tree:chunks=1", "all_reduce", topo, S) == pytest.approx(want, rel=1e-9)


@pytest.mark.parametrize("D,load", [(2, 1.0), (3, 1.5), (4, 2.0), (16, 2.0)])
def test_nic_load_is_what_makes_two_domains_twice_as_fast(D, load):
    """NCCL counts NVLSTree's inter-node bandwidth twice on <= 2 nodes (src/graph/tuning.cc:297-298).
    The mechanism: on 2 domains each is the root of one tree and the leaf of the other, so a NIC sends
    half its row up and half down, the row once; from 4 domains one is interior in a tree (half up,
    two halves down) and a leaf in the other (half up): twice the row. 3 domains: 0 is the root of
    tree 0 (child 2) and interior in tree 1 (parent 1, child 2): 1.5 rows."""
    assert nic_load(D) == load
    L, S = 2, 64 * D * 2 * 4 * 8
    t = reducing(D, L)
    s = compile_for("nvls_tree:chunks=2", "all_reduce", t)
    links = analytic.run(s, t, [C.sizing("all_reduce", S, 4, t.nranks).block_elems], 4, want_links=True).link_bytes
    nic_up = (t.link_tier == 1) & (t.link_src < t.nranks)
    assert links[nic_up, 0].max() == pytest.approx(load * S / L)


def test_refusals_and_options():
    algo = parse_spec("nvls_tree")
    assert "two-tier" in algo.unsupported(Problem("all_reduce", build_flat("f", "switch", 8, 50e9, 0.0, True)))
    plain = build_hierarchical("t", "switch", 4, 400e9, 0.0, False, "rail", 2, 50e9, 0.0)
    assert "in_switch_reduce" in algo.unsupported(Problem("all_reduce", plain))
    assert "does not implement" in algo.unsupported(Problem("all_gather", reducing(2, 4)))
    for bad in ("chunks=-1", "channels=-1", "chunk_size=0", "channel_bw=-1", "max_templates=0"):
        with pytest.raises(ConfigError, match="must be"):
            parse_spec(f"nvls_tree:{bad}")


def test_per_channel_cap_follows_ncclS_table():
    """perChMaxNVLSTreeBws[Hopper] = 57.7 GB/s on 2 nodes, 45.5 on more (src/graph/tuning.cc:196), over
    L = 8 NVLS channels: bus bandwidth at most 461.6 / 364 GB/s. The schedule states it on a rank's
    busiest link, its NVLink uplink with (1 + 1/L) S against the 2(n-1)/n S of bus bandwidth."""
    for D, per in ((2, 57.7e9), (4, 45.5e9), (8, 45.5e9)):
        topo = load_topology("h100-cluster", [f"scale_out.domains={D}"])
        n = 8 * D
        s = compile_for("nvls_tree:chunks=1", "all_reduce", topo)
        assert s.notes["rate_cap"] == pytest.approx(8 * per * (1 + 1 / 8) / (2 * (n - 1) / n))
    assert compile_for("nvls_tree:channel_bw_2=0", "all_reduce", load_topology(
        "h100-cluster", ["scale_out.domains=2"])).notes["rate_cap"] == 0


def test_cap_binds_where_the_endpoint_models_channels():
    """h100-cluster on 2 nodes at 4 GiB: the NVLink uplink (450 GB/s x 0.824 x NVLS's 0.85 = 315 GB/s)
    carries (1 + 1/L) S, so busbw could reach 2(n-1)/n x 315/1.125 = 525 GB/s; NCCL's per-channel cap
    holds it at 8 x 57.7 = 461.6 -- and only where channels are modelled (endpoint.channels > 0)."""
    size = 4 * GiB
    capped = sweep(load_topology("h100-cluster", ["scale_out.domains=2"]), ["all_reduce"], "nvls_tree", [size])
    free = sweep(load_topology("h100-cluster", ["scale_out.domains=2", "endpoint.channels=0"]), ["all_reduce"],
                 "nvls_tree", [size])
    busbw = float(capped.rows.busbw_GBps.iloc[0])
    assert 0.97 * 461.6 < busbw <= 461.6
    assert 480 < float(free.rows.busbw_GBps.iloc[0]) < 525.3


def test_h100_cluster_offers_ncclS_algorithms():
    """-a auto and tune choose among what NCCL runs across nodes: AllReduce ring, tree, nvls_tree. At 8 B
    the tree wins: 2(L-1) chain steps and 2 tree steps against the ring's 2(n-1) steps and NVLS's 25 us."""
    topo = load_topology("h100-cluster", ["scale_out.domains=2"])
    assert [a.name for a in algorithms_for("library", "all_reduce", topo)] == ["ring", "tree", "nvls_tree"]
    assert [a.name for a in algorithms_for("library", "all_gather", topo)] == ["ring"]
    rows = sweep(topo, ["all_reduce"], "library", [8]).rows
    best = rows.loc[rows.time_us.idxmin()]
    assert best.algorithm == "tree"
    assert np.isfinite(rows.time_us).all()
