"""tree:shape=chains: NCCL's multi-node Tree AllReduce (a chain in each domain, a double binary tree over the
domains per rail; algorithms/tree.py)."""

import pytest
from helpers import compile_for, time_of

from hcclsim.core.errors import ConfigError
from hcclsim.network.config import load_topology
from hcclsim.network.topology import build_flat, build_hierarchical
from hcclsim.schedule import collectives as C
from hcclsim.schedule.algorithm import Problem, parse_spec
from hcclsim.schedule.checker import check
from hcclsim.sweeping.sweep import sweep

GiB = 1 << 30


def two_tier(D, L, up="switch", out="rail"):
    return build_hierarchical("t", up, L, 400e9, 0.0, False, out, D, 50e9, 0.0)


@pytest.mark.parametrize("D,L", [(2, 2), (2, 3), (3, 2), (3, 4), (5, 2), (4, 3), (1, 4), (3, 1)])
def test_chains_compute_the_allreduce(D, L):
    for up in ("switch", "ring"):
        t = two_tier(D, L, up)
        for Q in (1, 2):
            s = compile_for(f"tree:shape=chains:chunks={Q}", "all_reduce", t)
            for count in (1, 2 * D * L + 1):
                check(s, count)
    s = compile_for("tree:shape=chains:chunks=2", "all_reduce", build_flat("f", "switch", 5, 50e9, 0.0))
    check(s, 11)                 # one domain: NCCL's single-node tree, a chain through the ranks


def test_auto_shape_and_keys():
    """chains on a two-tier topology of several domains of several ranks; a chunk is 2L channels x
    NCCL's 512 KiB Simple step."""
    hier, flat = two_tier(4, 8), build_flat("f", "switch", 8, 50e9, 0.0)
    assert compile_for("tree", "all_reduce", hier).notes["shape"] == "chains"
    assert "shape" not in compile_for("tree", "all_reduce", flat).notes
    assert "shape" not in compile_for("tree", "all_reduce", two_tier(3, 1)).notes
    assert "shape" not in compile_for("tree:shape=flat", "all_reduce", hier).notes
    assert "shape" not in compile_for("tree", "broadcast", hier).notes         # chains: AllReduce only

    def key(spec, size):
        algo = parse_spec(spec)
        return algo.structure_key(Problem("all_reduce", hier), C.sizing("all_reduce", size, 4, hier.nranks), 4)

    assert key("tree", 512 << 20) == (512 << 20) // (16 * (512 << 10)) == 64
    assert key("tree", GiB) == 64 and key("tree:max_chunks=1000", GiB) == 128
    assert key("tree", 8 << 20) == 1 and key("tree", 9 << 20) == 2 and key("tree", 256) == 1
    assert key("tree:step_size=65536", 8 << 20) == 8
    assert key("tree:max_templates=100", GiB) == 100 // (2 * 7 + 4 * 3)
    with pytest.raises(ConfigError, match="shape must be one of"):
        parse_spec("tree:shape=ring")


def test_one_chunk_closed_form():
    """two-tier-128 resized, one chunk: the chains are a ring reduce-scatter and all-gather through the
    switch (L-1 steps each of 2h + S/(L B_up), a row per rank and step); on 3 domains the trees
    0 -> 2 -> 1 and 1 -> 0 -> 2 put one transfer on a NIC per step: 2H = 4 steps of a_out + S/(2L B_out);
    on 2 domains each is the root of one tree and the leaf of the other: 2 steps."""
    h, a_out, B_up, B_out = 500e-9, 8e-6, 400e9, 50e9
    for D, H in ((2, 1), (3, 2)):
        for L in (2, 4):
            topo = load_topology("two-tier-128", [f"scale_out.domains={D}", f"scale_up.ranks={L}"])
            S = D * L * 2 * 4 * 1024
            want = 2 * (L - 1) * (2 * h + S / (L * B_up)) + 2 * H * (a_out + S / (2 * L * B_out))
            assert time_of("tree:chunks=1", "all_reduce", topo, S) == pytest.approx(want, rel=1e-9), (D, L)


def test_per_channel_cap_follows_ncclS_table():
    """perChMaxTreeBws[Hopper] = 38.7 / 41.4 / 36.0 GB/s on 1 / 2 / 3+ nodes (src/graph/tuning.cc:190)
    over L = 8 channels caps the bus bandwidth NCCL counts for a tree, 2S per collective; a rank's
    busiest link carries the chains' 2(L-1)/L S. On 2 nodes at 1 GiB the cap holds nccl-tests' busbw
    (2(n-1)/n S/T) at (n-1)/n x 8 x 41.4 = 310.5 GB/s; without it the NVLink (370.8 GB/s under
    2(L-1)/L S) would allow 2(n-1)/n x 370.8 / 1.75 = 397 GB/s."""
    for D, per in ((2, 41.4e9), (4, 36.0e9)):
        s = compile_for("tree:chunks=1", "all_reduce", load_topology("h100-cluster", [f"scale_out.domains={D}"]))
        assert s.notes["rate_cap"] == pytest.approx(8 * per * (2 * 7 / 8) / 2)
    s = compile_for("tree:shape=chains:chunks=1", "all_reduce", load_topology("dgx-h100"))
    assert s.notes["rate_cap"] == pytest.approx(8 * 38.7e9 * (2 * 7 / 8) / 2)
    rows = sweep(load_topology("h100-cluster", ["scale_out.domains=2"]), ["all_reduce"], "tree", [GiB]).rows
    assert 0.95 * 310.5 < float(rows.busbw_GBps.iloc[0]) <= 15 / 16 * 8 * 41.4


def test_sixteen_domains_closed_form():
    """two-tier-128 as shipped (16 domains of 8), up to 8 MiB (one chunk: 2L x 512 KiB = 8 MiB). Tree 0 is
    0 -> 8 -> {4, 12} -> {2, 6, 10, 14} -> odd ranks (H = 4), tree 1 its mirror: in reduce steps 0-2
    every parent takes two children's halves in one step (its NIC and its leaf's spine link shared by
    two: S/(L B_out) each), in step 3 the roots' single children send alone (S/(2L B_out)); broadcast
    steps 4-7 mirror them (a root sends to one child, the others to two). Every step of a kind takes
    the same time, so the trees cost 8 a_out + 7 S/(L B_out), a_out = four 2 us hops; the chains
    2(L-1)(a_up + S/(L B_up)), a_up = two 500 ns hops."""
    topo = load_topology("two-tier-128")
    L, B_up, B_out, a_up, a_out = 8, 400e9, 50e9, 1e-6, 8e-6
    for S in (2 << 20, 4 << 20, 8 << 20):
        want = 2 * (L - 1) * (a_up + S / (L * B_up)) + 8 * a_out + 7 * S / (L * B_out)
        assert time_of("tree", "all_reduce", topo, S) == pytest.approx(want, rel=1e-9)
