"""Point-to-point: send_recv (rank 0 to rank N-1) and pp_ring (every rank to the next, nccl-tests'
sendrecv_perf): the checker, closed forms on both engines, and nccl-tests' size and busbw (factor 1)."""

import pytest

from hcclsim.engine import analytic, packet
from hcclsim.network.config import load_topology
from hcclsim.network.topology import build_flat
from hcclsim.schedule import collectives as C
from hcclsim.schedule.algorithm import Problem, parse_spec
from hcclsim.schedule.checker import check
from hcclsim.sweeping.sweep import sweep

POINT_TO_POINT = (C.SEND_RECV, C.PP_RING)


def compiled(coll, topo, size=1 << 20):
    algo, problem = parse_spec("direct"), Problem(coll, topo)
    assert algo.unsupported(problem) is None
    sz = C.sizing(coll, size, 4, topo.nranks)
    return algo.compile(problem, algo.structure_key(problem, sz, 4)), sz


@pytest.mark.parametrize("coll", POINT_TO_POINT)
def test_point_to_point_passes_the_checker_on_2_to_17_ranks(coll):
    for n in range(2, 18):
        topo = build_flat("t", "switch", n, 50e9, 0.0)
        s, _ = compiled(coll, topo)
        assert s.ntransfers == (1 if coll == C.SEND_RECV else n)
        for unit in (1, 4):
            check(s, unit)


def test_a_size_is_the_message_and_busbw_is_algbw():
    """nccl-tests sendrecv.cu: sendcount = count, busBw = algBw (factor 1)."""
    for coll in POINT_TO_POINT:
        sz = C.sizing(coll, 1000, 4, 8)
        assert (sz.size_bytes, sz.count, sz.block_elems) == (1000, 250, 250)
        assert C.busbw_factor(coll, 8) == 1.0
    assert C.canonical("sendrecv") == C.SEND_RECV and C.canonical("pp-ring") == C.PP_RING


@pytest.mark.parametrize("where", ["switch8", "two-tier"])
def test_point_to_point_times_one_message_on_its_path(where):
    """One switch: each message alone on its links, a + S/B (pp_ring: each rank's link carries one
    message out and one in). Two domains of 4: rank 0 -> 7 and the ring's 3 -> 4 and 7 -> 0 cross the
    scale-out tier, a_out + S/B_out (slower than the ring's scale-up hops)."""
    if where == "switch8":
        topo = load_topology("switch8")
        a, B = topo.path_latency(0, 7), 50e9
    else:
        topo = load_topology("two-tier-128", ["scale_out.domains=2", "scale_up.ranks=4"])
        a, B = topo.path_latency(0, 7), 50e9
        assert a > topo.path_latency(0, 1)
    S = 1 << 20
    for coll in POINT_TO_POINT:
        s, sz = compiled(coll, topo, S)
        for engine in (analytic, packet):
            assert engine.run(s, topo, [sz.block_elems], 4).time[0] == pytest.approx(a + S / B, rel=1e-9), \
                (coll, engine)
    rows = sweep(topo, list(POINT_TO_POINT), "direct", [S]).rows
    assert (rows.size_bytes == S).all()
    assert rows.busbw_GBps.tolist() == rows.algbw_GBps.tolist()
    assert rows.algbw_GBps.tolist() == pytest.approx((S / (rows.time_us * 1e-6) / 1e9).tolist())


def test_hierarchical_does_not_claim_point_to_point():
    algo = parse_spec("hierarchical")
    topo = load_topology("two-tier-128", ["scale_out.domains=2", "scale_up.ranks=4"])
    assert "does not implement send_recv" in algo.unsupported(Problem(C.SEND_RECV, topo))
