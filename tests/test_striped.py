"""Striping across tiers (algorithms/striped.py): the schedules compute their collectives, the split that
finishes first, the closed forms, both engines, and the 800 GB/s link passed on mtia300-rack."""

import numpy as np
import pytest
from hcclsim.algorithms import striped as ST
from helpers import assert_one_line_error, busbw, compile_for, run_cli, time_of

from hcclsim.core.errors import ScheduleError
from hcclsim.engine import analytic, packet
from hcclsim.network.config import load_topology
from hcclsim.network.topology import build_flat, build_hierarchical
from hcclsim.schedule import collectives as C
from hcclsim.schedule.algorithm import Problem, parse_spec
from hcclsim.schedule.checker import check
from hcclsim.schedule.expand import expand
from hcclsim.schedule.ir import F_C3, F_N
from hcclsim.schedule.symmetry import schedule_orbits

MIB, GIB = 1 << 20, 1 << 30
K = ST.K
COLLS = ("all_gather", "reduce_scatter", "all_reduce")
UNSTRIPED = {"all_gather": "direct", "reduce_scatter": "direct", "all_reduce": "direct_twoshot"}


def rack(n, up=800e9, out=200e9, up_lat=500e-9, out_lat=1e-6):
    """One scale-up domain of n chips on a switch, their NICs on one leaf (as mtia300-rack with domains=1)."""
    return build_hierarchical("rack", "switch", n, up, up_lat, False, "fat_tree", 1, out, out_lat)


def counts(coll, n):
    """Elements per block for the checker: every chunk holds some, unevenly (K + 5 does not divide by K)."""
    return (K + 5,) if coll != "all_reduce" else (n * K + 7,)


@pytest.mark.parametrize("n", range(2, 10))
@pytest.mark.parametrize("coll", COLLS)
def test_striped_schedules_compute_their_collective(n, coll):
    for spec in ("striped", "striped:nic=0.7", "striped:nic=1"):
        s = compile_for(spec, coll, rack(n), GIB)        # auto at 1 GiB sends about a fifth through the NICs
        for count in counts(coll, n):
            check(s, count)


def up_share(s):
    """Templates of the scale-up share: rank to rank, bytes to move."""
    ex = expand(s)
    rank_to_rank = np.unique(ex["tmpl"][(ex["src"] < s.nranks) & (ex["dst"] < s.nranks)])
    return rank_to_rank[s.tmpl[rank_to_rank, F_N] > 0]


def sent_bytes(s, topo, count):
    """Bytes the ranks put on their links (scale-up ports and NICs) at `count` elements per block."""
    timing = analytic.run(s, topo, [count], 4, want_links=True, symmetric=False)
    return timing.link_bytes[topo.link_src < topo.nranks].sum()


@pytest.mark.parametrize("coll", COLLS)
def test_a_broken_split_is_rejected(coll):
    """The scale-up share cut to K - 2m chunks (f taken off twice: the shares sum to 1 - f) leaves chunks
    unsent; grown to the whole piece (the NIC share sent over both tiers: 1 + f) reduces them twice, which the
    checker sees, or, for AllGather, copies them twice: the bytes sent show it."""
    n, topo = 5, rack(5)
    algo = parse_spec("striped:nic=0.25")
    m = algo.structure_key(Problem(coll, topo), None, 4)
    assert m == 256
    count = counts(coll, n)[0]
    good = algo.compile(Problem(coll, topo), m)
    check(good, count)
    ups = up_share(good)
    assert len(ups) == (n - 1) * (2 if coll == "all_reduce" else 1) and np.all(good.tmpl[ups, F_N] == K - m)
    even = K * 16                                      # elements per block that cut into equal chunks
    steps, piece = (2, even * 4 / n) if coll == "all_reduce" else (1, even * 4)    # per step, to each peer
    assert sent_bytes(good, topo, even) == pytest.approx(steps * n * (n - 1) * piece, rel=1e-12)
    after = np.array([ST.nic_start(m, k) == 0 for k in range(1, n)] * (len(ups) // (n - 1)))   # up: m..K
    for chunks in (K - 2 * m, K):
        bad = algo.compile(Problem(coll, topo), m)
        bad.tmpl[ups, F_N] = chunks
        if chunks == K:                                # the whole piece, from its first chunk
            bad.tmpl[ups[after], F_C3 + 2] -= m
            bad.tmpl[ups[after], F_C3 + 3] -= m
        if coll == "all_gather" and chunks == K:
            check(bad, count)                          # a copy made twice computes the same result, but
            assert sent_bytes(bad, topo, even) == pytest.approx(n * (n - 1) * piece * (1 + m / K), rel=1e-12)
            continue
        with pytest.raises(ScheduleError, match="expected"):
            check(bad, count)


def test_no_share_through_the_nics_is_the_unstriped_algorithm_exactly():
    topo = rack(8)
    for coll in COLLS:
        for size in (64 << 10, MIB, 64 * MIB):
            assert time_of("striped:nic=0", coll, topo, size) == time_of(UNSTRIPED[coll], coll, topo, size)
        sz = C.sizing(coll, MIB, 4, 8)
        runs = [packet.run(compile_for(spec, coll, topo, MIB), topo, [sz.block_elems], 4).time[0]
                for spec in ("striped:nic=0", UNSTRIPED[coll])]
        assert runs[0] == runs[1]


def test_closed_form_of_a_fixed_split():
    """4 chips, B_u = 300 GB/s over two 500 ns hops (a_u = 1 us), B_o = 100 GB/s over two 1 us hops
    (a_o = 2 us), f = 1/4 (256 of 1024 chunks): a step takes max(a_u + 3 (3/4) b / B_u, a_o + 3 (1/4) b / B_o)
    = a_o + (3/4) b / B_o, the two slopes being equal (2.25 / 300 = 0.75 / 100 per GB)."""
    topo = rack(4, up=300e9, out=100e9)
    for coll, size in (("all_gather", 64 * MIB), ("reduce_scatter", 64 * MIB), ("all_reduce", 64 * MIB)):
        steps, b = (2, size / 4) if coll == "all_reduce" else (1, size / 4)      # a piece is S/N either way
        step = max(1e-6 + 3 * 0.75 * b / 300e9, 2e-6 + 3 * 0.25 * b / 100e9)
        assert time_of("striped:nic=0.25", coll, topo, size) == pytest.approx(steps * step, rel=1e-12)


@pytest.mark.parametrize("coll", COLLS)
def test_large_message_busbw_is_both_tiers(coll):
    """With f = B_o / (B_u + B_o) a step of N-1 pieces takes (N-1) b / (B_u + B_o): AllGather's busbw
    (N-1)/N S / T = (N-1) b / T = B_u + B_o; AllReduce moves S = N b in two such steps with the factor
    2 (N-1)/N: B_u + B_o again. 800 + 200 GB/s, latencies a few us against ms: within 0.3 %."""
    topo = rack(16)
    got = busbw("striped", coll, topo, GIB)
    assert got == pytest.approx(1000, rel=3e-3)
    assert busbw(UNSTRIPED[coll], coll, topo, GIB) <= 800


@pytest.mark.parametrize("coll", COLLS)
def test_engines_agree_and_the_packet_engine_gains_too(coll):
    topo = rack(8)
    sz = C.sizing(coll, 16 * MIB, 4, 8)
    times = {}
    for spec in ("striped", UNSTRIPED[coll]):
        s = compile_for(spec, coll, topo, 16 * MIB)
        a, p = analytic.run(s, topo, [sz.block_elems], 4), packet.run(s, topo, [sz.block_elems], 4)
        assert p.time[0] == pytest.approx(a.time[0], rel=0.03)
        assert p.stats["table_stall_us"][0] == 0
        times[spec] = p.time[0]
    assert times["striped"] < 0.85 * times[UNSTRIPED[coll]]


@pytest.mark.parametrize("coll", COLLS)
def test_auto_is_the_split_that_finishes_first(coll):
    """Against every f = i/16 on the analytic engine, at sizes where the port's shorter path wins (f = 0),
    where the leaf's slots would make rounds wait (ReduceScatter's pieces, 1 MiB), and where bandwidth
    rules."""
    topo = rack(8)
    for size in (256 << 10, MIB, 4 * MIB, 64 * MIB):
        auto = time_of("striped", coll, topo, size)
        grid = [time_of(f"striped:nic={i / 16}", coll, topo, size) for i in range(17)]
        assert auto <= min(grid) * (1 + 1e-12), (size, auto, min(grid))
    sz = C.sizing(coll, 64 * MIB, 4, 8)
    m = parse_spec("striped").structure_key(Problem(coll, topo), sz, 4)
    assert 0.18 < m / K < 0.2                       # B_o / (B_u + B_o) = 0.2, less for the NIC's longer path


def test_the_one_instance_path_agrees_with_the_general_one():
    """The leaf is the one node every rank shift leaves in place, so every instance of a template times
    alike (schedule/symmetry.py) and the analytic engine walks one."""
    topo = rack(6)
    for coll in COLLS:
        s = compile_for("striped", coll, topo, 64 * MIB)
        assert schedule_orbits(s, topo) is not None
        even = [s.layout.k * 64, s.layout.k * 4096]
        fast, slow = analytic.run(s, topo, even, 4), analytic.run(s, topo, even, 4, symmetric=False)
        np.testing.assert_allclose(fast.time, slow.time, rtol=1e-12)


def test_where_striping_cannot_run_it_says_why():
    cases = [(build_flat("s8", "switch", 8, 50e9, 500e-9), "fat-tree scale-out"),
             (build_hierarchical("two", "switch", 4, 800e9, 5e-7, False, "fat_tree", 2, 200e9, 1e-6),
              "scale_out.domains = 1"),
             (build_hierarchical("half", "switch", 4, 800e9, 5e-7, False, "fat_tree", 1, 200e9, 1e-6,
                                 leaf_size=2),
              "scale_out.leaf_size"),
             (build_hierarchical("rail", "switch", 4, 800e9, 5e-7, False, "rail", 1, 200e9, 1e-6),
              "fat-tree scale-out")]
    for topo, why in cases:
        assert why in parse_spec("striped").unsupported(Problem("all_reduce", topo))


@pytest.mark.parametrize("value", ["2", "-0.1", "half"])
def test_a_bad_share_is_one_line(capsys, value):
    status, out, err = run_cli(capsys, "sweep", "-t", "mtia300-rack", "--set", "scale_out.domains=1",
                               "-a", f"striped:nic={value}", "-b", "1M", "-e", "1M")
    assert_one_line_error(status, out, err, "striped", "nic expects a fraction 0..1 or auto", value)


def test_mtia300_rack_passes_its_800_gbps_link():
    topo = load_topology("mtia300-rack", ["scale_out.domains=1"])
    assert busbw("striped", "all_reduce", topo, GIB) > 990
    assert busbw("direct_twoshot", "all_reduce", topo, GIB) <= 800


def test_a_rank_reaches_a_leaf_over_its_nic():
    """2 domains of 4 on a fat tree: nodes 0..7 ranks, 8, 9 the scale-up switches, 10, 11 the leaves, 12
    the spine. A rank's own leaf is one NIC hop away; the other leaf is up through the spine."""
    topo = build_hierarchical("two", "switch", 4, 800e9, 5e-7, False, "fat_tree", 2, 200e9, 1e-6)

    def hops(a, b):
        return [(int(topo.link_src[x]), int(topo.link_dst[x])) for x in topo.route(a, b)]

    assert hops(0, 10) == [(0, 10)] and hops(10, 3) == [(10, 3)]
    assert hops(0, 11) == [(0, 10), (10, 12), (12, 11)]
    assert hops(11, 2) == [(11, 12), (12, 10), (10, 2)]
    assert hops(0, 1) == [(0, 8), (8, 1)]                       # rank to rank inside a domain: scale-up
