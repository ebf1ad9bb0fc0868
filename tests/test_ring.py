import numpy as np
import pytest
from helpers import busbw, compile_for, counts_to_check, time_of

from hcclsim.engine import analytic
from hcclsim.network.topology import build_flat
from hcclsim.schedule import collectives as C
from hcclsim.schedule.checker import check

RING_COLLS = ["all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce"]


@pytest.mark.parametrize("n", [2, 3, 5, 8, 12])
@pytest.mark.parametrize("coll", RING_COLLS)
@pytest.mark.parametrize("spec", ["ring", "ring:channels=2", "ring:channels=3:chunks=2"])
def test_ring_schedule_computes_the_collective(n, coll, spec):
    topo = build_flat("t", "switch", n, 50e9, 0.0)
    for root in ([0, n - 1] if coll in ("broadcast", "reduce") else [0]):
        s = compile_for(spec, coll, topo, root=root)
        for count in counts_to_check(n):
            check(s, count)


@pytest.mark.parametrize("n", [2, 5, 8, 16])
def test_ring_allreduce_is_the_alpha_beta_formula(n):
    lat, bw = 500e-9, 50e9
    topo = build_flat("t", "switch", n, bw, lat)
    size = n * 4 * 1024 * 7
    alpha = 2 * lat                           # one switch = two link hops
    assert time_of("ring", "all_reduce", topo, size) == pytest.approx(2 * (n - 1) * (alpha + size / (n * bw)),
                                                                      rel=1e-12)
    assert time_of("ring", "all_gather", topo, size) == pytest.approx((n - 1) * (alpha + size / (n * bw)),
                                                                      rel=1e-12)


def test_issue_reference_points(switch8):
    zero = build_flat("z", "switch", 8, 50e9, 0.0)
    assert busbw("ring", "all_reduce", zero, 1 << 30) == pytest.approx(50.0, rel=0.01)
    assert busbw("ring", "all_gather", zero, 1 << 30) == pytest.approx(50.0, rel=0.01)
    assert busbw("ring", "reduce_scatter", zero, 1 << 30) == pytest.approx(50.0, rel=0.01)
    assert time_of("ring", "all_reduce", switch8, 256) == pytest.approx(14e-6, rel=0.01)


@pytest.mark.parametrize("kind", ["switch", "ring", "full_mesh"])
@pytest.mark.parametrize("spec", ["ring", "ring:channels=3"])
def test_symmetric_path_equals_general_path(kind, spec):
    n = 12
    topo = build_flat("t", kind, n, 50e9, 300e-9)
    for coll in ["all_reduce", "all_gather", "reduce_scatter"]:
        s = compile_for(spec, coll, topo)
        blocks = [n * 6 * 64, n * 6 * 4096]           # divide evenly: the two paths must agree exactly
        fast = analytic.run(s, topo, blocks, 4, want_links=True)
        slow = analytic.run(s, topo, blocks, 4, want_links=True, symmetric=False)
        np.testing.assert_allclose(fast.time, slow.time, rtol=1e-12)
        np.testing.assert_allclose(fast.link_bytes, slow.link_bytes, rtol=1e-12)


def test_bidirectional_ring_topology_doubles_ring_bandwidth():
    topo = build_flat("r", "ring", 8, 50e9, 0.0)
    one = busbw("ring:channels=1", "all_reduce", topo, 1 << 28)
    two = busbw("ring:channels=2", "all_reduce", topo, 1 << 28)
    assert one == pytest.approx(50.0, rel=1e-6)
    assert two == pytest.approx(100.0, rel=1e-6)


def test_multichannel_ring_through_one_nic_shares_it():
    topo = build_flat("s", "switch", 8, 50e9, 0.0)
    assert busbw("ring:channels=4", "all_reduce", topo, 1 << 28) == pytest.approx(50.0, rel=1e-6)


def test_broadcast_chain_pipelines():
    topo = build_flat("s", "switch", 8, 50e9, 0.0)
    size = 1 << 26
    t = time_of("ring:chunks=16", "broadcast", topo, size)
    assert t == pytest.approx((8 - 2 + 16) * size / 16 / 50e9, rel=1e-9)
    assert C.busbw_factor("broadcast", 8) == 1.0


@pytest.mark.parametrize("P", [1, 3, 16])
@pytest.mark.parametrize("coll", ["broadcast", "reduce"])
def test_broadcast_chain_pays_one_alpha_per_hop_and_per_chunk(switch8, coll, P):
    """The chain root -> root+1 -> ... (Reduce: the mirror image) by hand. Hop h sends chunk p once
    chunk p has *arrived* from hop h-1 and its own chunk p-1 has arrived, and the hops of one wave use
    different links, so every send takes alpha + c (c = S/(P B), alpha = 2 x 500 ns through the
    switch) and chunk p arrives over hop h at (h + p + 1)(alpha + c): the last, p = P-1 over hop N-2,
    at (N-2+P)(alpha + c). A chain that forwarded a chunk once it had only *left* the previous rank
    would take (N-2) c + P (alpha + c), (N-2) alpha less: the zero-latency test above cannot tell."""
    n, B, alpha = 8, 50e9, 2 * 500e-9
    size = 4 * P * 1024 * 3                      # P chunks of equal size
    want = (n - 2 + P) * (alpha + size / (P * B))
    for root in (0, 5):
        t = time_of(f"ring:chunks={P}", coll, switch8, size, root=root)
        assert t == pytest.approx(want, rel=1e-12), (root, t, want)


def streaming_switch(issue=0.0):
    """switch8 (50 GB/s, 500 ns a hop) whose endpoint models a library: the chain streams (chain = auto)."""
    from hcclsim.network.params import Endpoint
    return build_flat("s", "switch", 8, 50e9, 500e-9, endpoint=Endpoint(issue_overhead=issue, protocol="ll128"))


@pytest.mark.parametrize("coll", ["broadcast", "reduce"])
@pytest.mark.parametrize("issue", [0.0, 2e-6])
def test_a_streamed_chain_pays_a_latency_per_hop_and_the_size_once(coll, issue):
    """chain = stream: each rank forwards what streams in, so the chain takes (N-1)(alpha + o) + S/(share B)
    after the protocol's base latency, in both engines: LL128 (share 0.92, step latency 1.3 us, base 14 us,
    docs/execution.md), alpha = 2 x 500 ns, o the issue overhead. The store-and-forward chain of one chunk
    takes (N-1)(alpha + o + S/(share B)): 7 times the size."""
    from hcclsim.engine import packet
    from hcclsim.engine.execution import run as run_exec
    topo, size = streaming_switch(issue), 1 << 20
    a, bw = 2 * 500e-9 + 1.3e-6 + issue, 0.92 * 50e9
    want = {"stream": 14e-6 + 7 * a + size / bw, "store": 14e-6 + 7 * (a + size / bw)}
    for chain, t in want.items():
        for engine, rel in ((analytic, 1e-12), (packet, 0.03)):
            s = compile_for(f"ring:chain={chain}:chunks=1", coll, topo, size, root=5)
            sz = C.sizing(coll, size, 4, 8)
            got = run_exec(engine.run, s, topo, [sz.block_elems], 4, "device", size_bytes=[size])[0][0, 0]
            assert got == pytest.approx(t, rel=rel), (chain, engine.__name__, got, t)
    assert compile_for("ring", coll, topo, size).notes == compile_for("ring:chain=stream", coll, topo, size).notes


def test_the_chain_streams_where_a_library_runs_it_and_stores_elsewhere(switch8):
    size = 1 << 20
    assert time_of("ring", "broadcast", switch8, size) == time_of("ring:chain=store", "broadcast", switch8, size)
    assert time_of("ring", "broadcast", switch8, size) > time_of("ring:chain=stream", "broadcast", switch8, size)


def pipelined_ring_reference(steps: int, P: int, alpha: float, chunk_time: float) -> float:
    """The pipelined ring by hand: chunk p of step s leaves once chunk p of step s-1 has arrived
    from upstream and my previous chunks have left; the chunks of one wave share my link."""
    share = [sum(1 for p in range(P) if 0 <= w - p < steps) for w in range(steps + P - 1)]
    left = {}
    for s in range(steps):
        for p in range(P):
            start = max(left.get((s - 1, p), -alpha) + alpha, left.get((s, p - 1), 0.0))
            left[(s, p)] = start + share[s + p] * chunk_time
    return max(left.values()) + alpha


@pytest.mark.parametrize("P", [2, 4, 7])
def test_pipelined_ring_matches_its_reference_recursion(switch8, P):
    n, size = 8, 8 * 4 * 1024 * 21
    alpha, chunk = 2 * 500e-9, size / (n * P * 50e9)
    assert time_of(f"ring:chunks={P}", "all_reduce", switch8, size) == pytest.approx(
        pipelined_ring_reference(2 * (n - 1), P, alpha, chunk), rel=1e-12)
    assert time_of(f"ring:chunks={P}", "reduce_scatter", switch8, size) == pytest.approx(
        pipelined_ring_reference(n - 1, P, alpha, chunk), rel=1e-12)
    # never below the bandwidth bound, and the latency is no longer paid once per chunk
    assert time_of(f"ring:chunks={P}", "all_reduce", switch8, size) < (2 * (n - 1) + P - 1) * alpha \
        + 2 * (n - 1) * size / (n * 50e9)
