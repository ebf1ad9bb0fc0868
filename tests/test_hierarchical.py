import numpy as np
import pytest

from hcclsim.algorithm import Problem, parse_spec
from hcclsim.checker import check
from hcclsim.engine import analytic
from hcclsim.errors import ConfigError
from hcclsim.symmetry import equivariant, link_orbits
from hcclsim.topology import build_flat, build_hierarchical

from helpers import busbw, compile_for, time_of

COLLS = ["all_reduce", "reduce_scatter", "all_gather", "all_to_all", "broadcast", "reduce"]
INTRA = ["auto", "ring", "direct", "in_switch"]
INTER = ["ring", "direct"]
GiB = 1 << 30


def topo(D, L, up="switch", up_bw=400e9, up_lat=0.0, reduce=False, out="fat_tree", out_bw=50e9, out_lat=0.0,
         os=1.0, leaf=None):
    return build_hierarchical("t", up, L, up_bw, up_lat, reduce, out, D, out_bw, out_lat, os, leaf)


def specs(coll):
    for intra in INTRA:
        for inter in INTER:
            if not (intra == "in_switch" and coll == "all_to_all"):
                yield f"hierarchical:intra={intra}:inter={inter}"


# ------------------------------------------------------------------------------------- correctness

@pytest.mark.parametrize("D,L", [(2, 2), (2, 3), (3, 2), (3, 4), (4, 2), (2, 5)])
@pytest.mark.parametrize("coll", COLLS)
def test_every_variant_computes_the_collective(D, L, coll):
    t = topo(D, L, reduce=True)
    n = D * L
    roots = [n - 1, (L + 1) % n] if coll in ("broadcast", "reduce") else [0]
    for spec in specs(coll):
        for root in roots:
            s = compile_for(spec, coll, t, root=root)
            for count in (1, 3, n, 2 * n + 1):
                check(s, count)


def test_one_rank_per_domain_and_root_zero():
    t = topo(3, 1, reduce=True)
    for coll in COLLS:
        for spec in specs(coll):
            s = compile_for(spec, coll, t)
            for count in (1, 5):
                check(s, count)


def test_refusals_and_auto_choice():
    algo = parse_spec("hierarchical")
    assert algo.unsupported(Problem("all_reduce", build_flat("f", "switch", 8, 50e9, 0.0))) == \
        "needs a two-tier topology (kind = hierarchical)"
    plain, reducing = topo(2, 4), topo(2, 4, reduce=True)
    assert "in_switch_reduce" in parse_spec("hierarchical:intra=in_switch").unsupported(Problem("all_reduce", plain))
    assert "all_to_all" in parse_spec("hierarchical:intra=in_switch").unsupported(Problem("all_to_all", reducing))
    assert compile_for("hierarchical", "all_reduce", plain).notes["intra"] == "ring"
    assert compile_for("hierarchical", "all_reduce", reducing).notes["intra"] == "in_switch"
    assert compile_for("hierarchical", "all_to_all", reducing).notes["intra"] == "direct"


def test_labels_and_bad_options():
    assert parse_spec("hierarchical").label == "hierarchical"
    assert parse_spec("hierarchical:intra=direct").label == "hierarchical:intra=direct"
    assert parse_spec("hierarchical:inter=direct:intra=ring").label == "hierarchical:intra=ring:inter=direct"
    with pytest.raises(ConfigError, match="intra must be one of"):
        parse_spec("hierarchical:intra=tree")
    with pytest.raises(ConfigError, match="inter must be one of"):
        parse_spec("hierarchical:inter=tree")


# ------------------------------------------------------------------------------------- engine paths

@pytest.mark.parametrize("kw", [{"out": "rail"}, {"up": "ring"}, {"up": "full_mesh"},
                                {"reduce": True, "os": 4.0}, {"leaf": 8}])
def test_symmetric_path_equals_general_path(kw):
    D, L = 4, 4
    t = topo(D, L, up_lat=100e-9, out_lat=700e-9, **kw)
    for coll in ["all_reduce", "reduce_scatter", "all_gather", "all_to_all"]:
        for spec in ["hierarchical", "hierarchical:intra=direct:inter=direct", "hierarchical:inter=direct"]:
            s = compile_for(spec, coll, t)
            assert equivariant(s)
            blocks = [D * L * 64, D * L * 4096] if coll in ("all_reduce",) else [64, 4096]
            fast = analytic.run(s, t, blocks, 4, want_links=True)
            slow = analytic.run(s, t, blocks, 4, want_links=True, symmetric=False)
            np.testing.assert_allclose(fast.time, slow.time, rtol=1e-12)
            np.testing.assert_allclose(fast.link_bytes, slow.link_bytes, rtol=1e-12)
    if kw == {"out": "rail"}:      # the grid's translations are symmetries: the one-instance path ran
        assert link_orbits(t, (D, L)) is not None
    if kw == {"leaf": 8}:          # a leaf of two domains is not: the general path ran
        assert link_orbits(t, (D, L)) is None


# ------------------------------------------------------------------------------------- closed forms

def allreduce_ring_ring(L, D, S, a_up, b_up, a_out, b_out):
    return 2 * (L - 1) * (a_up + S / (L * b_up)) + 2 * (D - 1) * (a_out + S / (L * D * b_out))


@pytest.mark.parametrize("up_lat,out_lat", [(0.0, 0.0), (100e-9, 500e-9)])
def test_128_rank_target(up_lat, out_lat):
    L, D, S = 8, 16, GiB
    t = topo(D, L, up_lat=up_lat, out_lat=out_lat)
    # a_up: rank -> switch -> rank; a_out: NIC -> leaf -> spine -> leaf -> NIC (each domain is a leaf)
    want = allreduce_ring_ring(L, D, S, 2 * up_lat, 400e9, 4 * out_lat, 50e9)
    assert time_of("hierarchical", "all_reduce", t, S) == pytest.approx(want, rel=1e-12)
    hier, ring = busbw("hierarchical", "all_reduce", t, S), busbw("ring", "all_reduce", t, S)
    if up_lat == 0:
        assert ring == pytest.approx(50.0, rel=1e-6)          # the flat ring crosses a 50 GB/s NIC every step
        assert hier == pytest.approx(218.97, rel=1e-4)
    assert hier > 4 * ring


def test_other_collectives_closed_forms():
    L, D, a1, a2, B1, B2 = 4, 3, 150e-9, 900e-9, 400e9, 50e9
    up, out = 2 * a1, 4 * a2
    t = topo(D, L, up_bw=B1, up_lat=a1, out_bw=B2, out_lat=a2)
    N, S = D * L, D * L * 4 * 1024 * 12
    rs = (L - 1) * (up + S / (L * B1)) + (D - 1) * (out + S / (N * B2))
    assert time_of("hierarchical", "reduce_scatter", t, S) == pytest.approx(rs, rel=1e-12)
    assert time_of("hierarchical", "all_gather", t, S) == pytest.approx(rs, rel=1e-12)
    a2a_direct = up + (L - 1) * S / (L * B1) + out + (D - 1) * S / (D * B2)
    a2a_ring = (L - 1) * (up + S / (L * B1)) + (D - 1) * (out + S / (D * B2))
    assert time_of("hierarchical:inter=direct", "all_to_all", t, S) == pytest.approx(a2a_direct, rel=1e-12)
    assert time_of("hierarchical:intra=ring", "all_to_all", t, S) == pytest.approx(a2a_ring, rel=1e-12)
    # Broadcast: root scatters rows, rails scatter sub-pieces, ring AG per rail, ring AG per domain
    bc = up + (L - 1) * S / (L * B1) + out + (D - 1) * S / (N * B2) \
        + (D - 1) * (out + S / (N * B2)) + (L - 1) * (up + S / (L * B1))
    for root in (0, 5):
        assert time_of("hierarchical", "broadcast", t, S, root=root) == pytest.approx(bc, rel=1e-12)
        assert time_of("hierarchical", "reduce", t, S, root=root) == pytest.approx(bc, rel=1e-12)


def test_direct_and_in_switch_closed_forms():
    L, D, a1, a2, B1, B2 = 4, 3, 150e-9, 900e-9, 400e9, 50e9
    up, out = 2 * a1, 4 * a2
    t = topo(D, L, up_bw=B1, up_lat=a1, reduce=True, out_bw=B2, out_lat=a2)
    S = D * L * 4 * 1024 * 12
    inter_ring = 2 * (D - 1) * (out + S / (L * D * B2))
    inter_direct = 2 * (out + (D - 1) * S / (L * D * B2))
    intra = {"ring": 2 * (L - 1) * (up + S / (L * B1)), "direct": 2 * (up + (L - 1) * S / (L * B1)),
             "in_switch": 2 * (up + S / B1)}    # up (L-1) pieces then down one; the reverse for the AG
    for name, x in intra.items():
        for inter, y in (("ring", inter_ring), ("direct", inter_direct)):
            got = time_of(f"hierarchical:intra={name}:inter={inter}", "all_reduce", t, S)
            assert got == pytest.approx(x + y, rel=1e-12), (name, inter)
    assert time_of("hierarchical", "all_reduce", t, S) == time_of("hierarchical:intra=in_switch", "all_reduce", t, S)


# ------------------------------------------------------------------------------------- fabrics

def test_oversubscription_slows_the_inter_phase():
    """Each domain is one leaf: a scale-out phase sends L flows (one per rail) -- ring -- or L(D-1) --
    direct -- through a leaf uplink of L*B/os, so its bandwidth term grows by os for both inter
    choices, while the flat ring (one flow per leaf) does not notice. A leaf of m domains: the ring
    steps that leave it get m*B/os per flow (x max(1, os/m)); direct gets B/(os(D-m)) per flow against
    B/(D-1) at the NIC (x max(1, os(D-m)/(D-1)))."""
    L, D, S, B = 4, 4, 4 * 4 * 4096 * 64, 50e9
    intra = 2 * (L - 1) * S / (L * 400e9)
    P = S / (L * D)                                       # what one rank sends per scale-out transfer

    def t(spec, os, leaf=None):
        return time_of(spec, "all_reduce", topo(D, L, os=os, leaf=leaf), S)

    for os in (1.0, 4.0):
        assert t("hierarchical", os) == pytest.approx(intra + 2 * (D - 1) * os * P / B, rel=1e-12)
        assert t("hierarchical:inter=direct", os) == pytest.approx(intra + 2 * (D - 1) * os * P / B, rel=1e-12)
        assert busbw("ring", "all_reduce", topo(D, L, os=os), S) == pytest.approx(50.0, rel=1e-9)
    m = 2
    for os in (1.0, 4.0):
        ring = intra + 2 * (D - 1) * max(1.0, os / m) * P / B
        direct = intra + 2 * max(D - 1, os * (D - m)) * P / B
        assert t("hierarchical", os, leaf=m * L) == pytest.approx(ring, rel=1e-12)
        assert t("hierarchical:inter=direct", os, leaf=m * L) == pytest.approx(direct, rel=1e-12)
    assert t("hierarchical", 4.0, leaf=m * L) > t("hierarchical", 1.0, leaf=m * L)
    assert t("hierarchical:inter=direct", 4.0) > t("hierarchical:inter=direct", 1.0)


def test_rail_versus_fat_tree():
    """Same-rail traffic on a rail fabric is NIC -> rail switch -> NIC (2 hops, never oversubscribed);
    on the fat tree it goes through leaf and spine (4 hops)."""
    L, D, S, a1, a2 = 8, 4, 8 * 4 * 4096 * 16, 100e-9, 600e-9
    rail = topo(D, L, up_lat=a1, out="rail", out_lat=a2)
    fat = topo(D, L, up_lat=a1, out_lat=a2)
    fat4 = topo(D, L, up_lat=a1, out_lat=a2, os=4.0)
    for spec in ("hierarchical", "hierarchical:inter=direct"):
        steps = 2 * (D - 1) if spec == "hierarchical" else 2
        gap = time_of(spec, "all_reduce", fat, S) - time_of(spec, "all_reduce", rail, S)
        assert gap == pytest.approx(steps * 2 * a2, rel=1e-9)
        assert time_of(spec, "all_reduce", fat4, S) > time_of(spec, "all_reduce", fat, S)
    want = allreduce_ring_ring(L, D, S, 2 * a1, 400e9, 2 * a2, 50e9)
    assert time_of("hierarchical", "all_reduce", rail, S) == pytest.approx(want, rel=1e-12)
    # AllToAll: phase 1 already put every block on its destination's rail, so phase 2 stays on rails
    a2a = 2 * a1 + (L - 1) * S / (L * 400e9) + (D - 1) * (2 * a2 + S / (D * 50e9))
    assert time_of("hierarchical", "all_to_all", rail, S) == pytest.approx(a2a, rel=1e-12)
