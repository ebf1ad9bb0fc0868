import numpy as np
import pytest
from helpers import busbw, compile_for, counts_to_check, time_of

from hcclsim.engine import analytic
from hcclsim.network.topology import build_flat, build_hierarchical
from hcclsim.schedule import collectives as C
from hcclsim.schedule.algorithm import Problem, parse_spec
from hcclsim.schedule.checker import check
from hcclsim.schedule.symmetry import equivariant, link_orbits

COLLS = ["all_reduce", "reduce_scatter", "all_gather", "broadcast", "reduce"]
ROOTED = ("broadcast", "reduce")
LAT, BW = 500e-9, 50e9


def nvls(n, lat=0.0):
    return build_flat("nvls", "switch", n, BW, lat, in_switch_reduce=True)


def roots(coll, n):
    return [0, n - 1] if coll in ROOTED else [0]


@pytest.mark.parametrize("coll", COLLS)
def test_in_switch_computes_the_collective_on_2_to_17_ranks(coll):
    for n in range(2, 18):
        topo = nvls(n)
        for root in roots(coll, n):
            s = compile_for("in_switch:chunks=1", coll, topo, root=root)
            for count in counts_to_check(n):
                check(s, count)


@pytest.mark.parametrize("n", [2, 3, 7, 16])
@pytest.mark.parametrize("coll", COLLS)
def test_pipelined_in_switch_computes_the_collective(n, coll):
    topo = nvls(n)
    for root in roots(coll, n):
        s = compile_for("in_switch:chunks=3", coll, topo, root=root)
        for count in counts_to_check(n):
            check(s, count)


def test_in_switch_on_a_one_domain_hierarchical_topology():
    topo = build_hierarchical("h", "switch", 6, 100e9, 1e-7, True, "fat_tree", 1, 50e9, 1e-6)
    for coll in COLLS:
        s = compile_for("in_switch:chunks=2", coll, topo, root=5)
        for count in counts_to_check(6):
            check(s, count)


def closed_form(coll: str, n: int, size: float, P: int) -> float:
    """One hop a = LAT (rank -> switch or switch -> rank); y = one chunk of the whole buffer over B.
    Chunks stream back to back (order dependencies), so the hop latencies are paid once, not per chunk."""
    a, y = LAT, size / P / BW
    if coll in ("all_gather", "reduce_scatter"):      # N-1 blocks share a link; one 1/N block fills
        return 2 * a + y / n + P * (n - 1) * y / n
    return 2 * a + (P + 1) * y


@pytest.mark.parametrize("n", [2, 5, 8, 16])
@pytest.mark.parametrize("P", [1, 4])
@pytest.mark.parametrize("coll", COLLS)
def test_in_switch_is_its_alpha_beta_formula(n, P, coll):
    topo = nvls(n, LAT)
    size = n * P * 4 * 1024 * 3                 # divides evenly into N blocks of P chunks
    for root in roots(coll, n):
        t = time_of(f"in_switch:chunks={P}", coll, topo, size, root=root)
        assert t == pytest.approx(closed_form(coll, n, size, P), rel=1e-12)


def test_issue_reference_points(switch8):
    zero = nvls(8)
    bw = busbw("in_switch", "all_reduce", zero, 1 << 30)
    ideal = 2 * 7 / 8 * 50.0                                 # 87.5 GB/s: every link carries S once
    assert bw >= 1.6 * 50.0
    assert bw == pytest.approx(ideal * 64 / 65, rel=1e-9)    # 64 chunks, 65 waves (fill + drain)
    assert bw > 1.7 * busbw("ring", "all_reduce", zero, 1 << 30)
    small = time_of("in_switch", "all_reduce", nvls(8, 500e-9), 256)
    assert small == pytest.approx(2 * (500e-9 + 256 / 50e9), rel=1e-12)    # ~1.01 us: one chunk


def test_default_chunk_count_follows_the_size():
    algo = parse_spec("in_switch")
    prob = Problem("all_reduce", nvls(8))

    def key(size, a=algo):
        return a.structure_key(prob, C.sizing("all_reduce", size, 4, 8), 4)

    assert key(256) == 1 and key(32 << 10) == 1 and key(1 << 20) == 32 and key(1 << 30) == 64
    assert key(1 << 30, parse_spec("in_switch:chunks=5")) == 5
    assert key(1 << 30, parse_spec("in_switch:max_chunks=8")) == 8
    for coll in ("all_gather", "reduce_scatter"):        # N-1 templates per chunk: capped on many ranks
        big = algo.structure_key(Problem(coll, nvls(1025)), C.sizing(coll, 1 << 30, 4, 1025), 4)
        assert big == 4096 // 1024
        assert algo.structure_key(Problem(coll, nvls(8)), C.sizing(coll, 1 << 30, 4, 8), 4) == 64


@pytest.mark.parametrize("coll", COLLS)
def test_symmetric_path_equals_general_path(coll):
    n = 12
    topo = nvls(n, 300e-9)
    s = compile_for("in_switch:chunks=3", coll, topo, root=n - 1)
    if coll not in ROOTED:
        assert equivariant(s) and link_orbits(topo, s.shape) is not None
    blocks = [n * 3 * 64, n * 3 * 4096]
    fast = analytic.run(s, topo, blocks, 4, want_links=True)
    slow = analytic.run(s, topo, blocks, 4, want_links=True, symmetric=False)
    np.testing.assert_allclose(fast.time, slow.time, rtol=1e-12)
    np.testing.assert_allclose(fast.link_bytes, slow.link_bytes, rtol=1e-12)


def test_refused_without_a_reducing_switch():
    algo = parse_spec("in_switch")
    plain = build_flat("s", "switch", 8, BW, 0.0)
    why = algo.unsupported(Problem("all_reduce", plain))
    assert "needs a switch that reduces (in_switch_reduce = true)" in why
    ring = build_flat("r", "ring", 8, BW, 0.0)
    why = algo.unsupported(Problem("all_gather", ring))
    assert "in_switch_reduce = true" in why and "'ring'" in why
    two = build_hierarchical("h", "switch", 4, 100e9, 1e-7, True, "fat_tree", 2, 50e9, 1e-6)
    assert "one reducing switch" in algo.unsupported(Problem("all_reduce", two))
    assert algo.unsupported(Problem("all_to_all", nvls(8))).startswith("does not implement all_to_all")
    assert algo.unsupported(Problem("all_reduce", nvls(8))) is None


@pytest.mark.parametrize("coll,up,down", [("all_reduce", 1.0, 1.0), ("reduce_scatter", 7 / 8, 1 / 8),
                                          ("all_gather", 1 / 8, 7 / 8)])
def test_every_link_carries_what_the_collective_needs(coll, up, down):
    """Bytes per uplink / downlink as a fraction of S: every rank's data crosses the switch once."""
    topo = nvls(8)
    size = 8 * 4 * 4096
    s = compile_for("in_switch:chunks=4", coll, topo, size)
    t = analytic.run(s, topo, [C.sizing(coll, size, 4, 8).block_elems], 4, want_links=True)
    np.testing.assert_allclose(t.link_bytes[:8, 0], up * size)       # links 0..N-1: rank -> switch
    np.testing.assert_allclose(t.link_bytes[8:, 0], down * size)     # links N..2N-1: switch -> rank
