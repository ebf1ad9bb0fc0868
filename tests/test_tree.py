from itertools import pairwise

import pytest
from hcclsim.algorithms.tree import dtree_parents
from helpers import busbw, compile_for, counts_to_check, time_of

from hcclsim.network.topology import build_flat
from hcclsim.schedule import collectives as C
from hcclsim.schedule.algorithm import Problem, parse_spec
from hcclsim.schedule.checker import check

B, LAT = 50e9, 500e-9


def _children(parent):
    kids = [[] for _ in parent]
    for r, p in enumerate(parent):
        if p >= 0:
            kids[p].append(r)
    return kids


@pytest.mark.parametrize("n", list(range(2, 18)) + [64, 100, 4096])
def test_double_binary_trees_span_all_ranks_and_complement(n):
    for parent in dtree_parents(n):
        assert parent.count(-1) == 1
        assert max(len(k) for k in _children(parent)) <= 2
        for r in range(n):                       # every rank reaches the root
            seen = 0
            while parent[r] >= 0:
                r, seen = parent[r], seen + 1
                assert seen < n
    if n % 2 == 0:                               # mirrored trees: no rank is interior in both
        interior = [{r for r, k in enumerate(_children(p)) if k} for p in dtree_parents(n)]
        assert not interior[0] & interior[1]


@pytest.mark.parametrize("n", range(2, 18))
@pytest.mark.parametrize("spec", ["tree", "tree:chunks=3"])
def test_tree_schedule_computes_the_collective(n, spec):
    topo = build_flat("t", "switch", n, B, 0.0)
    for coll, roots in (("all_reduce", [0]), ("broadcast", [0, n - 1]), ("reduce", [0, n - 1])):
        for root in roots:
            s = compile_for(spec, coll, topo, root=root)
            for count in counts_to_check(n):
                check(s, count)


@pytest.mark.parametrize("n, root", [(8, 0), (8, 5), (5, 0), (5, 4), (13, 7)])
def test_binomial_broadcast_and_reduce_are_log_steps(n, root):
    topo = build_flat("t", "switch", n, B, LAT)
    size = 4 * 1024 * 9
    K = (n - 1).bit_length()                     # ceil(log2 n): one transfer per rank link per step
    want = K * (2 * LAT + size / B)
    assert time_of("tree", "broadcast", topo, size, root=root) == pytest.approx(want, rel=1e-9)
    assert time_of("tree", "reduce", topo, size, root=root) == pytest.approx(want, rel=1e-9)


def binomial_broadcast_reference(n: int, P: int, alpha: float, chunk: float) -> float:
    """The pipelined binomial broadcast by hand: chunk p of edge u -> v leaves once it has arrived at u,
    u's send of chunk p to its previous child has arrived (data dependencies) and the edge's chunk p-1
    has left (order: the edge streams its chunks back to back); a wave's sends from u share u's uplink."""
    K = (n - 1).bit_length()
    todo = sorted((p + K - (v & -v).bit_length(), v, p) for v in range(1, n) for p in range(P))
    share: dict = {}
    for w, v, _ in todo:
        share[(w, v & (v - 1))] = share.get((w, v & (v - 1)), 0) + 1
    left: dict = {}
    for w, v, p in todo:
        u, low = v & (v - 1), v & -v
        start = left[(u, p)] + alpha if u else 0.0
        if u + 2 * low < n and (u == 0 or 2 * low < (u & -u)):
            start = max(start, left[(u + 2 * low, p)] + alpha)
        if p:
            start = max(start, left[(v, p - 1)])
        left[(v, p)] = start + share[(w, u)] * chunk
    return max(left.values()) + alpha


@pytest.mark.parametrize("n", [2, 4, 5, 8, 13])
@pytest.mark.parametrize("P", [1, 2, 4, 8])
def test_pipelined_binomial_broadcast_shares_the_roots_uplink(n, P):
    # The root's K sends of chunk p are chained by data dependencies (each waits for the previous
    # child's copy to arrive), its chunks by order ones (back to back), and a wave's sends share its
    # uplink: the send of chunk p in step s leaves at s alpha + (the root's bytes up to wave s + p) / B,
    # both dependencies tying there. So the last leaves at (K-1) alpha + K S / B and arrives alpha later:
    # K (alpha + S/B) whatever P (latency paid once per step, not per chunk; no gain on a switch either,
    # the root's uplink carries K S). Reduce is the mirror image.
    topo = build_flat("t", "switch", n, B, LAT)
    K, size, alpha = (n - 1).bit_length(), 4 * 1024 * 8 * 3, 2 * LAT
    want = K * (alpha + size / B)
    assert binomial_broadcast_reference(n, P, alpha, size / (P * B)) == pytest.approx(want, rel=1e-12)
    for root in (0, n - 1):
        assert time_of(f"tree:chunks={P}", "broadcast", topo, size, root=root) == pytest.approx(want, rel=1e-12)
        assert time_of(f"tree:chunks={P}", "reduce", topo, size, root=root) == pytest.approx(want, rel=1e-12)


def test_tree_allreduce_targets_on_eight_ranks(switch8):
    zero = build_flat("z", "switch", 8, B, 0.0)
    bw = busbw("tree", "all_reduce", zero, 1 << 30)
    assert 0.8 * 50 <= bw <= 50 * 7 / 8                # double binary tree ideal: B (N-1)/N = 43.75
    assert bw == pytest.approx(43.75 * 64 / 65.5, rel=1e-9)       # P = 64: T = (P + 1.5) 2S/(P B), derived below
    t = time_of("tree", "all_reduce", switch8, 256)
    alpha = 2 * LAT
    assert 6 * alpha < t <= 6 * alpha + 6 * 2 * 256 / B           # 2H = 6 waves of (alpha + <= 2 S/B)
    assert t < time_of("ring", "all_reduce", switch8, 256)        # 14 us


@pytest.mark.parametrize("P", [5, 16, 64])
def test_double_tree_allreduce_at_zero_latency_by_hand(P):
    """8 ranks, no latency, P chunks per tree: T = (4P + 6) tau = (P + 1.5) 2S/(P B), tau = S/(2P B)
    the time of one chunk (S/2 per tree, cut into P) alone on a link.

    Tree 0: 0 -> 4 -> {2, 6}, 2 -> {1, 3}, 6 -> {5, 7}; tree 1 its mirror r -> 7-r (7 -> 3 -> {5, 1},
    5 -> {6, 4}, 1 -> {2, 0}). Chunk p leaves height h in wave p + h (reduce) and depth d in wave
    p + 3 + d (broadcast); every dependency (children's chunk p, the edge's chunk p-1) is in the wave
    before, so a path through the dependency graph has one transfer per wave, waves 0 .. P+4, and a
    transfer takes (the most sharers of its wave on its uplink or downlink) x tau.
    Upper bound, the busiest link of each wave: waves 0-2 (reduces only) 2 (a node's two children into
    its downlink; every rank sends one reduce up); wave 3, 3 (4's downlink: 2 -> 4, 6 -> 4, 0 -> 4);
    waves 4..P, 4 (4's uplink in wave 4: to 0, to 2, to 6, to 5; from wave 5 every rank but 0 and 7
    has 4 on both its links; in wave P into 4: from 2, 6, 0 and 5); wave P+1, 3 (out of 4: to 0, 2,
    6); waves P+2..P+4, 2 (broadcasts to two children). Sum: 3*2 + 3 + 4(P-3) + 3 + 3*2 = 4P + 6.
    A path that meets it (P >= 5): 1 -> 2 chunks 0, 1, 2 (waves 0-2, 2 each), 2 -> 4 chunk 2 (wave 3,
    3), 4 -> 0 chunk 2 (wave 4, 4), 0 -> 4 chunks 2 .. P-3 (waves 5..P, 4 each: into 4), 4 -> 2
    chunks P-3, P-2, P-1 (waves P+1..P+3: 3, 2, 2), 2 -> 1 chunk P-1 (wave P+4, 2).
    busbw = S/T x 2(N-1)/N = B (N-1)/N x P/(P + 1.5): 43.75 x 64/65.5 GB/s at P = 64."""
    zero = build_flat("z", "switch", 8, B, 0.0)
    size = 4 * 2 * P * 1024                     # 2P chunks of 1024 elements: all equal
    want = (4 * P + 6) * size / (2 * P * B)
    assert time_of(f"tree:chunks={P}", "all_reduce", zero, size) == pytest.approx(want, rel=1e-12)


def test_more_chunks_approach_the_double_tree_bound():
    zero = build_flat("z", "switch", 8, B, 0.0)
    got = [busbw(f"tree:chunks={P}:max_chunks=1024", "all_reduce", zero, 1 << 30) for P in (1, 4, 16, 64, 256)]
    assert all(a < b for a, b in pairwise(got))
    assert got[-1] <= 50 * 7 / 8 and got[-1] > 0.99 * 50 * 7 / 8


def test_structure_key_follows_size_and_caps_templates():
    algo = parse_spec("tree")
    small = Problem("all_reduce", build_flat("t", "switch", 8, B, LAT))
    key = lambda problem, size: algo.structure_key(problem, C.sizing(problem.collective, size, 4, problem.nranks), 4)
    assert key(small, 256) == 1
    assert key(small, 3 << 20) == 24                                # 128 KiB chunks
    assert key(small, 1 << 30) == 64
    assert algo.structure_key(Problem("broadcast", small.topology), C.sizing("broadcast", 1 << 30, 4, 8), 4) == 1
    big = Problem("all_reduce", build_flat("b", "switch", 4096, B, LAT))
    assert key(big, 1 << 30) == (1 << 18) // (4 * 4095)          # 16 chunks: 262k templates, not 1M
    capped = parse_spec("tree:max_templates=1000")
    topo = build_flat("m", "switch", 64, B, LAT)
    s = compile_for("tree:max_templates=1000", "all_reduce", topo, size=1 << 30)
    assert s.layout.k == 2 * (1000 // (4 * 63)) and s.ntemplates <= 1000
    assert capped.options.max_templates == 1000


@pytest.mark.parametrize("coll", ["all_reduce", "broadcast", "reduce"])
def test_time_grows_with_size(switch8, coll):
    times = [time_of("tree", coll, switch8, 1 << k) for k in range(4, 31, 2)]
    assert all(a < b for a, b in pairwise(times))
