"""Rail-aligned rings (ring:rails): one ring per NIC on two-tier fabrics (docs/algorithms.md, ring)."""

from math import gcd

import numpy as np
import pytest
from helpers import busbw, compile_for, same_schedule, time_of

from hcclsim.engine import analytic, packet
from hcclsim.network.topology import build_flat, build_hierarchical
from hcclsim.schedule import collectives as C
from hcclsim.schedule.algorithm import Problem, parse_spec
from hcclsim.schedule.checker import check
from hcclsim.schedule.expand import expand

COLLS = ["all_reduce", "all_gather", "reduce_scatter"]
SHAPES = [(2, 2), (2, 8), (3, 4), (4, 4), (2, 3), (3, 5), (4, 6), (3, 2), (1, 4), (4, 1), (5, 6)]   # (D, L)


def two_tier(D, L, up="switch", out="rail", b_up=400e9, a_up=0.0, b_out=50e9, a_out=0.0):
    return build_hierarchical("t", up, L, b_up, a_up, False, out, D, b_out, a_out)


@pytest.mark.parametrize("D,L", SHAPES)
@pytest.mark.parametrize("coll", COLLS)
@pytest.mark.parametrize("spec", ["ring:rails=on", "ring:rails=on:channels=3:chunks=2"])
def test_rail_rings_compute_the_collective(D, L, coll, spec):
    s = compile_for(spec, coll, two_tier(D, L))
    # the rings follow the (D, L) grid, not the fabric: a fat tree of rings compiles the same schedule
    assert same_schedule(compile_for(spec, coll, two_tier(D, L, up="ring", out="fat_tree")), s)
    for count in (1, 3, 7, 2 * D * L + 1):         # uneven counts too
        check(s, count)


def test_auto_turns_rails_on_for_several_domains_of_several_ranks_only():
    assert compile_for("ring", "all_reduce", two_tier(2, 4)).notes.get("rails")
    for topo in (two_tier(1, 4), two_tier(4, 1), build_flat("s", "switch", 8, 50e9, 0.0)):
        assert not compile_for("ring", "all_reduce", topo).notes.get("rails")
    assert not compile_for("ring:rails=off", "all_reduce", two_tier(2, 4)).notes.get("rails")
    assert compile_for("ring:rails=on", "all_reduce", two_tier(1, 4)).notes.get("rails")
    algo = parse_spec("ring:rails=on")
    assert "hierarchical" in algo.unsupported(Problem("all_reduce", build_flat("s", "switch", 8, 50e9, 0.0)))
    with pytest.raises(Exception, match="rails must be one of"):
        parse_spec("ring:rails=maybe")


@pytest.mark.parametrize("D,L", [(2, 8), (4, 4), (3, 4), (2, 3), (4, 6), (16, 8)])
def test_one_ring_per_nic_every_nic_used_once_each_way(D, L):
    """Default rail rings, C = L channels: in every step each NIC uplink and each NIC downlink carries
    exactly one transfer, and where gcd(D, L) > 1 no boundary hop touches NVLink (same rail)."""
    topo = two_tier(D, L)
    s = compile_for("ring", "all_reduce", topo)
    assert len(set(s.tmpl[:, 2].tolist())) == L                      # F_CHAN: L channels
    ex = expand(s)
    n = topo.nranks
    nic_up, nic_down = set(range(topo.nlinks - 2 * n, topo.nlinks - n)), set(range(topo.nlinks - n, topo.nlinks))
    groups = s.tmpl[ex["tmpl"], 1]
    for g in (0, int(groups.max()) // 2, int(groups.max())):
        loads = np.zeros(topo.nlinks, int)
        for x in np.flatnonzero(groups == g):
            route = topo.route(int(ex["src"][x]), int(ex["dst"][x]))
            loads[route] += 1
            if gcd(D, L) > 1 and set(route) & nic_up:
                assert len(route) == 2, route                         # NIC -> rail switch -> NIC
        assert (loads[sorted(nic_up)] == 1).all() and (loads[sorted(nic_down)] == 1).all()


def rail_ring_time(steps, S, N, L, b_out, alpha):
    """steps (2(N-1) AllReduce, N-1 AllGather/ReduceScatter) of S/(N L) bytes, each on its own NIC;
    the boundary sender issues step after step back to back and only the last pays the boundary path's
    latency alpha."""
    return steps * S / (N * L * b_out) + alpha


@pytest.mark.parametrize("D,L", [(2, 8), (4, 4), (3, 4)])
def test_rail_ring_closed_form_where_the_nics_bind(D, L):
    """Derivation in docs/algorithms.md (ring, closed forms): b = S/(N C) per transfer, C = L. A boundary
    hop costs x = b/B_out + 2 a_out, an NVLink hop (L-1 transfers share each rank's scale-up link, or L
    where gcd(D, L) = 1 and the boundary hop first crosses NVLink) y = b (L-1 or L)/B_up + 2 a_up. A transfer
    starts when its chunk arrived and its sender's previous send left, so the longest path sits at one
    boundary sender for every step: (steps) b/B_out + alpha (alpha: the boundary path latency, 2 a_out, plus
    2 a_up with PXN), when y <= b/B_out and alpha <= (L-1)(b/B_out - y) (checked below)."""
    b_up, b_out, a_up, a_out = 400e9, 50e9, 300e-9, 1e-6
    N = D * L
    S = (1 << 30) // (4 * N * L) * (4 * N * L)          # every chunk the same size
    topo = two_tier(D, L, b_up=b_up, a_up=a_up, b_out=b_out, a_out=a_out)
    b = S / (N * L)
    same_rail = gcd(D, L) > 1
    y = b * (L - 1 if same_rail else L) / b_up + 2 * a_up
    alpha = 2 * a_out + (0 if same_rail else 2 * a_up)                      # PXN: NVLink hop first
    assert y <= b / b_out and alpha <= (L - 1) * (b / b_out - y)           # the regime of the formula
    assert time_of("ring", "all_reduce", topo, S) == pytest.approx(
        rail_ring_time(2 * (N - 1), S, N, L, b_out, alpha), rel=1e-9)
    for coll in ("all_gather", "reduce_scatter"):
        assert time_of("ring", coll, topo, S) == pytest.approx(
            rail_ring_time(N - 1, S, N, L, b_out, alpha), rel=1e-9)


def test_busbw_approaches_L_nics_on_2_domains_of_8():
    """2 x 8 rail fabric, B_up = 8 B_out: at 1 GiB busbw = S/T x 2(N-1)/N with T above, just under the
    limit min(L B_out, L B_up/(L-1)) = L B_out = 400 GB/s (the NICs: each carries 1/L of what a rank
    sends, NVLink the other (L-1)/L at 8x the speed); the flat ring stays at one NIC, B_out."""
    L, D, b_out, a_out, S = 8, 2, 50e9, 1e-6, 1 << 30
    N = L * D
    topo = two_tier(D, L, b_up=8 * b_out, a_up=300e-9, b_out=b_out, a_out=a_out)
    want = S / rail_ring_time(2 * (N - 1), S, N, L, b_out, 2 * a_out) * 2 * (N - 1) / N / 1e9
    assert busbw("ring", "all_reduce", topo, S) == pytest.approx(want, rel=1e-9)
    assert 0.99 * L * b_out / 1e9 < want < L * b_out / 1e9
    assert busbw("ring:rails=off", "all_reduce", topo, S) < b_out / 1e9


@pytest.mark.parametrize("D,L,b_up", [(2, 8, 100e9), (4, 4, 100e9), (2, 8, 400e9), (3, 8, 400e9)])
def test_zero_latency_busbw_is_the_slower_tier(D, L, b_up):
    """Zero latency: every step costs b max(1/B_out, s/B_up), s = L-1 NVLink sharers (L where the boundary
    hop crosses NVLink, gcd(D, L) = 1), so busbw = min(L B_out, L B_up / s)."""
    b_out = 50e9
    s = L - 1 if gcd(D, L) > 1 else L
    size = (1 << 30) // (4 * D * L * L) * (4 * D * L * L)
    got = busbw("ring", "all_reduce", two_tier(D, L, b_up=b_up, b_out=b_out), size)
    assert got == pytest.approx(min(L * b_out, L * b_up / s) / 1e9, rel=1e-9)


@pytest.mark.parametrize("coll", COLLS)
def test_packet_engine_agrees_on_2_domains_of_4(coll):
    topo = two_tier(2, 4, a_up=300e-9, a_out=1e-6)
    s = compile_for("ring", coll, topo, 64 << 20)
    sz = C.sizing(coll, 64 << 20, 4, topo.nranks)
    a = analytic.run(s, topo, [sz.block_elems], 4).time[0]
    p = packet.run(s, topo, [sz.block_elems], 4).time[0]
    assert p == pytest.approx(a, rel=0.03)
