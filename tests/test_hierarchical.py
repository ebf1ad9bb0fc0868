from dataclasses import replace

import numpy as np
import pytest
from helpers import busbw, compile_for, same_schedule, time_of

from hcclsim.core.errors import ConfigError
from hcclsim.engine import analytic
from hcclsim.network.topology import build_flat, build_hierarchical
from hcclsim.schedule import collectives as C
from hcclsim.schedule.algorithm import Problem, parse_spec
from hcclsim.schedule.checker import check
from hcclsim.schedule.symmetry import equivariant, link_orbits

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
    checked, again = [], 0
    for spec in specs(coll):
        for root in roots:
            s = compile_for(spec, coll, t, root=root)
            if any(same_schedule(replace(s, algorithm=c.algorithm), c) for c in checked):
                again += 1
                continue
            checked.append(s)
            for count in (1, 3, n, 2 * n + 1):
                check(s, count)
    # intra=auto compiles a schedule checked above, for every inter and root: at zero latency the ring's
    # (its in-switch phase wins only on latency; AllToAll's auto is direct); more where phases coincide
    # (a ring and a direct phase over 2 ranks are one exchange)
    assert again >= len(INTER) * len(roots)


@pytest.mark.parametrize("D,L", [(2, 3), (3, 4), (2, 5), (3, 2)])
@pytest.mark.parametrize("coll", ["all_reduce", "reduce_scatter", "all_gather", "broadcast", "reduce"])
def test_pipelined_in_switch_and_channels_compute_the_collective(D, L, coll):
    """Sub-pieces of K chunks: the in-switch pipeline's parts and the ring's channels cut every
    piece; the inter phases and the root's scatter/gather move K-chunk sub-pieces."""
    n = D * L
    roots = [n - 1, (L + 1) % n] if coll in ("broadcast", "reduce") else [0]
    cases = [(f"hierarchical:intra=in_switch:chunks={q}", topo(D, L, reduce=True)) for q in (2, 3)]
    cases += [("hierarchical:intra=in_switch:chunks=2:inter=direct", topo(D, L, reduce=True))]
    cases += [(f"hierarchical:intra=ring:channels={c}", topo(D, L, up=up)) for c, up in
              ((2, "ring"), (3, "full_mesh"), (2, "switch"))]
    cases += [("hierarchical:channels=2:inter=direct", topo(D, L, up="ring", out="rail"))]
    for spec, t in cases:
        for root in roots:
            s = compile_for(spec, coll, t, root=root)
            assert s.layout.k % s.notes["parts"] == 0
            for count in (1, 3, n, 2 * n + 1, 7 * n + 5):
                check(s, count)


def test_one_rank_per_domain_and_root_zero():
    t = topo(3, 1, reduce=True)
    for coll in COLLS:
        for spec in specs(coll):
            s = compile_for(spec, coll, t)
            for count in (1, 5):
                check(s, count)


def key_of(spec, coll, t, size):
    algo = parse_spec(spec)
    return algo.structure_key(Problem(coll, t), C.sizing(coll, size, 4, t.nranks), 4)


def test_refusals_and_auto_choice():
    algo = parse_spec("hierarchical")
    assert algo.unsupported(Problem("all_reduce", build_flat("f", "switch", 8, 50e9, 0.0))) == \
        "needs a two-tier topology (kind = hierarchical)"
    plain, reducing = topo(2, 4), topo(2, 4, reduce=True)
    assert "in_switch_reduce" in parse_spec("hierarchical:intra=in_switch").unsupported(Problem("all_reduce", plain))
    assert "all_to_all" in parse_spec("hierarchical:intra=in_switch").unsupported(Problem("all_to_all", reducing))
    assert compile_for("hierarchical", "all_reduce", plain).notes["intra"] == "ring"
    assert compile_for("hierarchical", "all_to_all", reducing).notes["intra"] == "direct"
    # auto takes the in-switch phase only where it is cheaper than the ring: never at zero latency
    # (same bytes on the busiest link plus the pipeline fill), at small sizes once hops cost time
    assert compile_for("hierarchical", "all_reduce", reducing).notes["intra"] == "ring"
    assert compile_for("hierarchical", "all_reduce", reducing, size=256).notes["intra"] == "ring"
    slow = topo(2, 4, up_lat=500e-9, reduce=True)
    for coll in ("all_reduce", "reduce_scatter", "all_gather", "broadcast", "reduce"):
        assert key_of("hierarchical", coll, slow, 256) == ("in_switch", 1)
        assert key_of("hierarchical", coll, slow, 1 << 30) == ("ring", 1)
    assert key_of("hierarchical", "all_to_all", slow, 256) == ("direct", 1)


def test_structure_key_follows_size_and_options():
    reducing, ring_up, mesh_up = topo(2, 4, reduce=True), topo(2, 4, up="ring"), topo(2, 4, up="full_mesh")
    sw = "hierarchical:intra=in_switch"
    # chunks: ceil(size / 32 KiB) in 1..64, like in_switch
    assert [key_of(sw, "all_reduce", reducing, x) for x in (256, 32 << 10, 1 << 20, 1 << 30)] == \
        [("in_switch", 1), ("in_switch", 1), ("in_switch", 32), ("in_switch", 64)]
    assert key_of(sw + ":chunks=5", "all_reduce", reducing, 1 << 30) == ("in_switch", 5)
    assert key_of(sw + ":max_chunks=8", "all_gather", reducing, 1 << 30) == ("in_switch", 8)
    assert key_of(sw + ":chunk_size=1024", "all_reduce", reducing, 4096) == ("in_switch", 4)
    big = build_hierarchical("t", "switch", 129, 400e9, 0.0, True, "fat_tree", 2, 50e9, 0.0)
    assert key_of(sw, "all_reduce", big, 1 << 30) == ("in_switch", 4096 // 128)   # Q (L-1) templates capped
    # channels: 2 on point-to-point scale-up links, else 1; never more than one part for direct / all_to_all
    assert key_of("hierarchical", "all_reduce", ring_up, 1 << 20) == ("ring", 2)
    assert key_of("hierarchical", "all_reduce", mesh_up, 1 << 20) == ("ring", 2)
    assert key_of("hierarchical", "all_reduce", topo(2, 4), 1 << 20) == ("ring", 1)
    assert key_of("hierarchical:channels=3", "all_reduce", topo(2, 4), 1 << 20) == ("ring", 3)
    assert key_of("hierarchical:intra=direct", "all_reduce", ring_up, 1 << 20) == ("direct", 1)
    assert key_of("hierarchical:intra=ring", "all_to_all", ring_up, 1 << 20) == ("ring", 1)


def test_labels_and_bad_options():
    assert parse_spec("hierarchical").label == "hierarchical"
    assert parse_spec("hierarchical:intra=direct").label == "hierarchical:intra=direct"
    assert parse_spec("hierarchical:inter=direct:intra=ring").label == "hierarchical:intra=ring:inter=direct"
    with pytest.raises(ConfigError, match="intra must be one of"):
        parse_spec("hierarchical:intra=tree")
    with pytest.raises(ConfigError, match="inter must be one of"):
        parse_spec("hierarchical:inter=tree")
    assert parse_spec("hierarchical:chunks=4:channels=2").label == "hierarchical:channels=2:chunks=4"
    for bad in ("channels=-1", "chunks=-2", "chunk_size=0", "max_chunks=0"):
        with pytest.raises(ConfigError, match="must be >= 0"):
            parse_spec(f"hierarchical:{bad}")


# ------------------------------------------------------------------------------------- engine paths

@pytest.mark.parametrize("kw", [{"out": "rail"}, {"up": "ring"}, {"up": "full_mesh"},
                                {"reduce": True, "os": 4.0}, {"leaf": 8}])
def test_symmetric_path_equals_general_path(kw):
    D, L = 4, 4
    t = topo(D, L, up_lat=100e-9, out_lat=700e-9, **kw)
    for coll in ["all_reduce", "reduce_scatter", "all_gather", "all_to_all"]:
        specs = ["hierarchical", "hierarchical:intra=direct:inter=direct", "hierarchical:inter=direct",
                 "hierarchical:channels=3"]
        if kw.get("reduce") and coll != "all_to_all":
            specs += ["hierarchical:intra=in_switch:chunks=3",
                      "hierarchical:intra=in_switch:chunks=2:inter=direct"]
        for spec in specs:
            s = compile_for(spec, coll, t)
            assert equivariant(s)
            blocks = [s.layout.k * 64, s.layout.k * 4096]     # every chunk the same size
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
    hier, ring = busbw("hierarchical", "all_reduce", t, S), busbw("ring:rails=off", "all_reduce", t, S)
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


def in_switch_phase(L, P, h, B, Q, gather=False):
    """One in-switch reduce-scatter (gather: all-gather) along l, pipelined over Q parts of P/Q bytes,
    by hand; h = rank -> switch hop, y = one part's time on a link. Part w's upload leaves once part
    w-1's has left (order: the uplink streams back to back), the L-1 uploads of reduce-scatter share
    the uplink; the switch's send of part w leaves once part w has arrived and its part w-1 has left,
    the L-1 multicasts of all-gather share the downlink. Returns when the last part arrived."""
    y = P / (Q * B)
    up_left = down_left = 0.0
    for _ in range(Q):
        up_left += (1 if gather else L - 1) * y
        down_left = max(up_left + h, down_left) + (L - 1 if gather else 1) * y
    return down_left + h


def in_switch_closed_form(L, P, h, B, Q):
    """The recursion's closed form, both directions: the Q parts stream back to back on each link, so
    the up and down hops' latency is paid once (2h, not (Q+1)h), plus the busiest link's (L-1)P and
    the fill of one part."""
    return 2 * h + (L - 1) * P / B + P / (Q * B)


def test_direct_and_in_switch_closed_forms():
    L, D, a1, a2, B1, B2 = 4, 3, 150e-9, 900e-9, 400e9, 50e9
    up, out = 2 * a1, 4 * a2
    t = topo(D, L, up_bw=B1, up_lat=a1, reduce=True, out_bw=B2, out_lat=a2)
    S = D * L * 4 * 1024 * 12
    Q, cs = 3, ":chunk_size=262144"           # automatic chunks: ceil(S / 256 KiB), every chunk equal
    assert key_of("hierarchical:intra=in_switch" + cs, "all_reduce", t, S) == ("in_switch", Q)
    inter_ring = 2 * (D - 1) * (out + S / (L * D * B2))
    inter_direct = 2 * (out + (D - 1) * S / (L * D * B2))
    intra = {"ring": 2 * (L - 1) * (up + S / (L * B1)), "direct": 2 * (up + (L - 1) * S / (L * B1)),
             "in_switch": 2 * in_switch_closed_form(L, S / L, a1, B1, Q)}
    for name, x in intra.items():
        for inter, y in (("ring", inter_ring), ("direct", inter_direct)):
            got = time_of(f"hierarchical:intra={name}:inter={inter}" + cs, "all_reduce", t, S)
            assert got == pytest.approx(x + y, rel=1e-12), (name, inter)
    # here 2h + P/(Q B) = 422.88 ns < 2 (L-1) h = 900 ns: auto takes the in-switch phases
    auto = time_of("hierarchical" + cs, "all_reduce", t, S)
    assert auto == time_of("hierarchical:intra=in_switch" + cs, "all_reduce", t, S)


@pytest.mark.parametrize("L", [2, 4, 5])
@pytest.mark.parametrize("Q", [1, 2, 5, 8])
def test_pipelined_in_switch_closed_forms(Q, L):
    """2h + (L-1) P/B + P/(Q B) per in-switch phase, P = S/L the piece a rank owns along l: the parts
    stream back to back on every link (order dependencies), so the hops' latency is paid once."""
    D, a1, a2, B1, B2 = 3, 150e-9, 900e-9, 400e9, 50e9
    N, out = D * L, 4 * a2
    t = topo(D, L, up_bw=B1, up_lat=a1, reduce=True, out_bw=B2, out_lat=a2)
    S = N * 4 * 40 * 3 * 7                    # every chunk the same size for Q in 1, 2, 5, 8
    spec = f"hierarchical:intra=in_switch:chunks={Q}"
    phase = in_switch_closed_form(L, S / L, a1, B1, Q)
    for gather in (False, True):             # L = 2: the recursion's maxima tie
        assert in_switch_phase(L, S / L, a1, B1, Q, gather) == pytest.approx(phase, rel=1e-12)
    inter_rs = (D - 1) * (out + S / (N * B2))
    assert time_of(spec, "reduce_scatter", t, S) == pytest.approx(phase + inter_rs, rel=1e-12)
    assert time_of(spec, "all_gather", t, S) == pytest.approx(inter_rs + phase, rel=1e-12)
    assert time_of(spec, "all_reduce", t, S) == pytest.approx(2 * phase + 2 * inter_rs, rel=1e-12)
    root_hop = 2 * a1 + (L - 1) * S / (L * B1) + out + (D - 1) * S / (N * B2)    # root's scatter / gather
    for root in (0, 7 % N):                  # and a root off rail 0
        want = root_hop + inter_rs + phase
        assert time_of(spec, "broadcast", t, S, root=root) == pytest.approx(want, rel=1e-12)
        assert time_of(spec, "reduce", t, S, root=root) == pytest.approx(want, rel=1e-12)


def test_ring_channels_use_both_directions():
    """C rings alternating direction on a ring (full_mesh) scale-up: an intra step costs
    a + max(links' sharers) P/(C B): halved by 2 channels, 2P/(3B) with 3 (two share a direction);
    unchanged on a switch, where both directions of a step leave through the one uplink."""
    L, D, a1, a2, B1, B2 = 4, 3, 150e-9, 900e-9, 400e9, 50e9
    N, out = D * L, 4 * a2
    S = N * 4 * 6 * 1024
    inter = 2 * (D - 1) * (out + S / (N * B2))
    for up, hop in (("ring", a1), ("full_mesh", a1), ("switch", 2 * a1)):
        t = topo(D, L, up=up, up_bw=B1, up_lat=a1, out_bw=B2, out_lat=a2)
        for C_, share in ((1, 1), (2, 1), (3, 2)):
            per_step = S / (L * B1) * (1 if up == "switch" else share / C_)
            want = 2 * (L - 1) * (hop + per_step) + inter
            got = time_of(f"hierarchical:intra=ring:channels={C_}", "all_reduce", t, S)
            assert got == pytest.approx(want, rel=1e-12), (up, C_)
        if up != "switch":      # the default takes two channels: the intra bandwidth term halves
            default = time_of("hierarchical", "all_reduce", t, S)
            assert default == pytest.approx(2 * (L - 1) * (hop + S / (2 * L * B1)) + inter, rel=1e-12)
            rs = time_of("hierarchical", "reduce_scatter", t, S)
            want = (L - 1) * (hop + S / (2 * L * B1)) + (D - 1) * (out + S / (N * B2))
            assert rs == pytest.approx(want, rel=1e-12)


def test_auto_is_the_faster_of_ring_and_in_switch():
    """On the 128-rank reducing fabric: the pipelined in-switch phases lose to the ring only by their
    fill at zero latency (218.73 against 218.97 GB/s at 1 GiB), so auto keeps the ring there; with
    500 ns hops an in-switch phase pays its two hops once (its parts stream back to back) against
    the ring's 2(L-1) = 14, so auto takes it at 256 B and, now that the 64 parts no longer pay a
    hop each, at 1 GiB too: it saves (L-2) a_up = 6 us of latency per phase and its fill costs
    a 2 MiB part, 5.24 us."""
    zero = build_hierarchical("tt", "switch", 8, 400e9, 0.0, True, "fat_tree", 16, 50e9, 0.0)
    # by hand, no latency, L = 8, D = 16, N = 128, Q = min(GiB / 32 KiB, 64) = 64 parts: each in-switch
    # phase (reduce-scatter, all-gather) (L-1) S/(L B_up) + S/(L Q B_up) (the fill), the inter ring
    # allreduce of the 1/L piece 2(D-1) S/(L D B_out): busbw = S/T x 2(N-1)/N = 218.73 GB/s
    L, D, Q = 8, 16, 64
    T = 2 * ((L - 1) * GiB / (L * 400e9) + GiB / (L * Q * 400e9)) + 2 * (D - 1) * GiB / (L * D * 50e9)
    assert busbw("hierarchical:intra=in_switch", "all_reduce", zero, GiB) == pytest.approx(
        GiB / T * 2 * (L * D - 1) / (L * D) / 1e9, rel=1e-12)
    ring = 2 * (L - 1) * GiB / (L * 400e9) + 2 * (D - 1) * GiB / (L * D * 50e9)     # no fill: 218.97 GB/s
    assert time_of("hierarchical:intra=ring", "all_reduce", zero, GiB) == pytest.approx(ring, rel=1e-12)
    kinds = ("auto", "ring", "in_switch")
    for size in (256, GiB):
        ring = busbw("hierarchical:intra=ring", "all_reduce", zero, size)
        assert busbw("hierarchical", "all_reduce", zero, size) == ring
    slow = build_hierarchical("tt", "switch", 8, 400e9, 500e-9, True, "fat_tree", 16, 50e9, 500e-9)
    small = {x: time_of(f"hierarchical:intra={x}", "all_reduce", slow, 256) for x in kinds}
    assert small["auto"] == small["in_switch"] < small["ring"] - 11.9e-6     # 62.0 us against 74.0 us
    big = {x: time_of(f"hierarchical:intra={x}", "all_reduce", slow, GiB) for x in kinds}
    assert big["auto"] == big["in_switch"] < big["ring"]                      # 9803.3 us against 9804.8 us
    saved = 2 * (6 * 2 * 500e-9 - (GiB / 8) / (64 * 400e9))                   # two phases, Q = 64
    assert big["ring"] - big["in_switch"] == pytest.approx(saved, rel=1e-9)   # 1.5 us out of two 9.8 ms
    for topo_ in (zero, slow, topo(3, 4, up_lat=100e-9, reduce=True, out_lat=300e-9)):
        for size in (256, 64 << 10, 1 << 20, 16 << 20, GiB):
            for coll in ("all_reduce", "reduce_scatter", "all_gather", "broadcast"):
                ts = [time_of(f"hierarchical:intra={x}", coll, topo_, size) for x in kinds]
                assert ts[0] == min(ts[1:]), (coll, size, ts)


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
        assert busbw("ring:rails=off", "all_reduce", topo(D, L, os=os), S) == pytest.approx(50.0, rel=1e-9)
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
