import numpy as np
import pytest
from helpers import busbw, compile_for, counts_to_check, time_of

from hcclsim.engine import analytic
from hcclsim.network.topology import build_flat
from hcclsim.schedule.algorithm import ALGORITHMS, Problem, load_all, parse_spec
from hcclsim.schedule.checker import check
from hcclsim.schedule.symmetry import equivariant, link_orbits

# (spec, collective) for every variant the three names offer
VARIANTS = [("direct", "all_gather"), ("direct", "reduce_scatter"), ("direct", "all_to_all"),
            ("direct", "broadcast"), ("direct", "reduce"),
            ("direct_oneshot", "all_reduce"), ("direct_twoshot", "all_reduce")]
ROOTED = ("broadcast", "reduce")
LAT, BW = 500e-9, 50e9


def roots(coll, n):
    return [0, n - 1] if coll in ROOTED else [0]


@pytest.mark.parametrize("spec,coll", VARIANTS)
def test_direct_computes_the_collective_on_2_to_17_ranks(spec, coll):
    for n in range(2, 18):
        topo = build_flat("t", "switch", n, BW, 0.0)
        for root in roots(coll, n):
            s = compile_for(spec, coll, topo, root=root)
            for count in counts_to_check(n):
                check(s, count)


@pytest.mark.parametrize("n", [2, 3, 7])
@pytest.mark.parametrize("spec,coll", [(s + ":chunks=3", c) for s, c in VARIANTS])
def test_pipelined_direct_computes_the_collective(n, spec, coll):
    topo = build_flat("t", "ring", n, BW, 0.0)        # multi-hop paths: routing must not matter to the result
    for root in roots(coll, n):
        s = compile_for(spec, coll, topo, root=root)
        for count in counts_to_check(n):
            check(s, count)


def closed_form(spec: str, coll: str, n: int, size: float, P: int = 1) -> float:
    """Chunks stream back to back on a channel (order dependencies): the latency is paid once per
    phase; two-shot's all-gather of chunk p waits for the reduce-scatter of chunk p, so the last
    all-gather chunk trails the reduce-scatter by one chunk."""
    alpha, piece = 2 * LAT, size / n / BW
    if spec == "direct_twoshot":             # wave w: reduce-scatter chunk w and all-gather chunk w-1 share a NIC
        live = [1] + [2] * (P - 1) + [1]
        rs = ag = 0.0
        for p in range(P):
            rs += live[p] * (n - 1) * piece / P
            ag = max(rs + alpha, ag) + live[p + 1] * (n - 1) * piece / P
        return ag + alpha
    if coll in ("broadcast", "reduce", "all_reduce"):        # a link carries N-1 copies of S
        return alpha + (n - 1) * size / BW
    return alpha + (n - 1) * piece


@pytest.mark.parametrize("n", [2, 5, 8, 16])
@pytest.mark.parametrize("spec,coll", VARIANTS)
def test_direct_is_its_alpha_beta_formula(n, spec, coll):
    topo = build_flat("t", "switch", n, BW, LAT)
    size = n * 4 * 1024 * 6                    # divides evenly: into N blocks, N pieces, 1..3 chunks
    for root in roots(coll, n):
        assert time_of(spec, coll, topo, size, root=root) == pytest.approx(closed_form(spec, coll, n, size),
                                                                           rel=1e-12)
    if spec == "direct_twoshot":
        assert closed_form(spec, coll, n, size) == pytest.approx(2 * (2 * LAT + (n - 1) * size / n / BW))
    for P in (2, 3):
        t = time_of(f"{spec}:chunks={P}", coll, topo, size, root=roots(coll, n)[-1])
        assert t == pytest.approx(closed_form(spec, coll, n, size, P), rel=1e-12)


def test_issue_reference_points(switch8):
    one = time_of("direct_oneshot", "all_reduce", switch8, 256)
    assert one == pytest.approx(1e-6 + 7 * 256 / 50e9, rel=1e-12)           # ~1.04 us
    assert one < time_of("ring", "all_reduce", switch8, 256) / 10            # ring: 14 us
    zero = build_flat("z", "switch", 8, 50e9, 0.0)
    assert busbw("direct", "all_to_all", zero, 1 << 30) == pytest.approx(50.0, rel=0.01)
    assert busbw("direct", "all_gather", zero, 1 << 30) == pytest.approx(50.0, rel=0.01)
    assert busbw("direct_twoshot", "all_reduce", zero, 1 << 30) == pytest.approx(50.0, rel=0.01)
    # oneshot pushes N-1 full copies through each NIC: busbw 2(N-1)/N * B / (N-1) = 2B/N
    assert busbw("direct_oneshot", "all_reduce", zero, 1 << 30) == pytest.approx(2 * 50.0 / 8, rel=1e-9)


@pytest.mark.parametrize("kind", ["switch", "ring", "full_mesh"])
def test_symmetric_path_equals_general_path(kind):
    n = 12
    topo = build_flat("t", kind, n, BW, 300e-9)
    for spec, coll in VARIANTS:
        if coll in ROOTED:
            continue
        s = compile_for(spec + ":chunks=2", coll, topo)
        assert equivariant(s) and link_orbits(topo, s.shape) is not None
        blocks = [n * 2 * 64, n * 2 * 4096]
        fast = analytic.run(s, topo, blocks, 4, want_links=True)
        slow = analytic.run(s, topo, blocks, 4, want_links=True, symmetric=False)
        np.testing.assert_allclose(fast.time, slow.time, rtol=1e-12)
        np.testing.assert_allclose(fast.link_bytes, slow.link_bytes, rtol=1e-12)


def test_schedules_stay_linear_in_ranks():
    n = 64
    topo = build_flat("t", "switch", n, BW, 0.0)
    one = compile_for("direct", "all_gather", topo)
    assert one.ntemplates == n - 1 and one.ntransfers == n * (n - 1)
    two = compile_for("direct_twoshot", "all_reduce", topo)
    assert two.ntemplates == 2 * (n - 1) + 1                # + the wait joining the N-1 reductions
    assert len(two.dep_t) <= 2 * n                          # O(N) dependencies, not O(N^2)


def test_one_registration_per_name_and_clear_refusals():
    load_all()
    for name in ("direct", "direct_oneshot", "direct_twoshot"):
        assert name in ALGORITHMS
    topo = build_flat("t", "switch", 4, BW, 0.0)
    why = parse_spec("direct").unsupported(Problem("all_reduce", topo))
    assert "direct_oneshot" in why and "direct_twoshot" in why
    assert "all_gather" in parse_spec("direct_oneshot").unsupported(Problem("all_gather", topo))
    assert parse_spec("direct:chunks=4").label == "direct:chunks=4"


def test_each_nic_carries_n_minus_1_pieces():
    n, size = 8, 8 * 4 * 4096
    topo = build_flat("t", "switch", n, BW, 0.0)
    for spec, coll, per_link in [("direct", "all_to_all", (n - 1) / n),
                                 ("direct_twoshot", "all_reduce", 2 * (n - 1) / n),
                                 ("direct_oneshot", "all_reduce", n - 1)]:
        s = compile_for(spec, coll, topo, size)
        t = analytic.run(s, topo, [size // 4 // (n if coll == "all_to_all" else 1)], 4, want_links=True)
        np.testing.assert_allclose(t.link_bytes[:, 0], per_link * size)    # every up- and downlink alike
