"""In-switch reduction and multicast (NVLink SHARP / NVLS-like), pipelined over P chunks.

Needs every rank under one switch that reduces (``in_switch_reduce = true``). The switch node
holds a reduction buffer that starts zeroed:

* AllReduce -- every rank PUT_REDUCEs chunk p of its input into the switch's buffer; once all
  N contributions of chunk p are in, the switch multicasts the reduced chunk into every
  rank's output (one PUT per destination).
* ReduceScatter -- every rank PUT_REDUCEs chunk p of the N-1 blocks it does not keep into
  the switch; the switch sends the reduced chunk p of block r to rank r only, which adds its
  own part on arrival (PUT_REDUCE), so no link carries a rank's own block.
* Reduce -- as AllReduce, with the reduced chunk sent to the root only.
* AllGather -- every rank PUTs chunk p of its block to the switch, which multicasts it to
  the N-1 other ranks.
* Broadcast -- the root PUTs chunk p to the switch, which multicasts it to the N-1 others.

Pipelining: uploads (rank -> switch links) and multicasts (switch -> rank links) use
different links, so the multicast of chunk p runs while chunk p+1 is being reduced: wave w
holds the upload of chunk w and the multicast of chunk w-1. A rank uploads its chunks in
order; the switch multicasts its chunks in order.

Alpha-beta on one switch (a = one link hop's latency, so a path rank -> switch -> rank costs
alpha = 2a; B the link bandwidth; S the size):

    AllReduce       (P+1) (a + S/(P B))                       -> S/B: busbw 2(N-1)/N B as P grows
    AllGather       a + S/(N P B) + P (a + (N-1) S/(N P B))   (N-1 blocks down to each rank)
    ReduceScatter   the same, mirrored                        (N-1 blocks up from each rank)
    Broadcast, Reduce  (P+1) (a + S/(P B))

P: option ``chunks``; 0 (default) picks ceil(S / chunk_size) clamped to 1..max_chunks. The
fill/drain wave costs a factor (P+1)/P, and every wave pays a, so: small messages get one
chunk (latency-optimal, 2a + 2S/B: 1.01 us at 256 B with 500 ns hops, vs 14 us for ring);
large ones get max_chunks = 64 (AllReduce busbw 2(N-1)/N B x P/(P+1): 86.2 GB/s at 1 GiB on
8 ranks and 50 GB/s links; the 1.6 B = 80 GB/s target needs P >= 11). A 256 KiB chunk
takes 5 us at 50 GB/s, so the per-wave latency stays a small fraction in between.
AllGather (ReduceScatter) pipelining only hides the upload (download) of 1/N of a chunk, a
fill costing 1/(P(N-1)) of the time, so their automatic P is also capped at 4096 // (N-1):
schedules stay O(N) templates.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from hcclsim.schedule import (
    DEP_ALL,
    DEP_SHIFT,
    IN,
    OUT,
    PUT,
    PUT_REDUCE,
    TMP,
    Affine,
    Layout,
    Schedule,
    ScheduleBuilder,
    const,
    order,
    rank_of,
    rot,
    switch_of,
)
from hcclsim.schedule import collectives as C
from hcclsim.schedule.algorithm import Algorithm, Problem, auto_chunks, opt, register

TEMPLATE_BUDGET = 4096     # automatic AllGather / ReduceScatter chunks keep P (N-1) templates under this


@dataclass(frozen=True)
class InSwitchOptions:
    chunks: int = opt(0, "pipelined chunks (0: one per chunk_size bytes, between 1 and max_chunks)")
    chunk_size: int = opt(32 << 10, "bytes per chunk when chunks=0 (chunks leave back to back, so finer "
                                     "chunks only shrink the pipeline fill: under ~3 % from 1 MiB)")
    max_chunks: int = opt(64, "upper bound on automatic chunks")

    def __post_init__(self):
        if self.chunks < 0 or self.chunk_size < 1 or self.max_chunks < 1:
            raise ValueError("chunks must be >= 0, chunk_size and max_chunks >= 1")


@register
class InSwitch(Algorithm):
    name = "in_switch"
    summary = "NVLS-like: ranks reduce into the switch, the switch multicasts back; pipelined"
    collectives = (C.ALL_REDUCE, C.REDUCE_SCATTER, C.ALL_GATHER, C.BROADCAST, C.REDUCE)
    requires = "every rank under one switch that reduces (in_switch_reduce = true)"
    Options = InSwitchOptions

    def why_not(self, problem: Problem) -> str | None:
        topo = problem.topology
        if not topo.can_reduce_in_switch:
            has_switch = topo.kind in ("switch", "hierarchical")
            extra = "" if has_switch else f"; a {topo.kind!r} topology has no switch"
            return f"needs a switch that reduces (in_switch_reduce = true){extra}"
        switches = np.unique(topo.reduce_switch)
        if len(switches) != 1:
            return (f"needs every rank under one reducing switch; this topology has {len(switches)} "
                    f"(one per scale-up domain)")
        return None

    def structure_key(self, problem, sizing, dtype_size):
        if self.options.chunks:
            return self.options.chunks
        P = auto_chunks(sizing.size_bytes, self.options.chunk_size, self.options.max_chunks)
        if problem.collective in (C.ALL_GATHER, C.REDUCE_SCATTER):
            # N-1 templates per chunk, and only a 1/N-sized fill (drain) to hide: past
            # P (N-1) ~ 4096 the gain is below 0.03 % while the schedule grows as P N.
            P = min(P, max(1, TEMPLATE_BUDGET // (problem.nranks - 1)))
        return int(P)

    def compile(self, problem: Problem, key) -> Schedule:
        n, coll, P, root = problem.nranks, problem.collective, int(key), problem.root
        node = int(problem.topology.reduce_switch[0])
        sw = switch_of(1, n) if node == n else const(node)     # switch_of keeps the symmetric fast path
        b = ScheduleBuilder(coll, self.label, n, (1, n), Layout(C.nblocks(coll, n), P),
                            nnodes=problem.topology.nnodes, root=root)
        ups: list[list[int]] = []
        downs: list[list[int]] = []
        for w in range(P + 1):          # wave w: upload chunk w, multicast chunk w-1
            g = b.next_group()
            if w < P:                   # a rank uploads its chunks in order
                ops = _upload(coll, n, P, root, sw, w)
                ups.append([b.op(group=g, chan=x, **op, deps=[order(ups[-1][x])] if w else [])
                            for x, op in enumerate(ops)])
            if w:                       # the switch multicasts its chunks in order
                p = w - 1
                ops = _multicast(coll, n, P, root, sw, p)
                chan0 = len(ups[p])
                downs.append([b.op(group=g, chan=chan0 + x, **op,
                                   deps=_arrived(coll, ups[p]) + ([order(downs[-1][x])] if p else []))
                              for x, op in enumerate(ops)])
        return b.build()


def _upload(coll: str, n: int, P: int, root: int, sw: Affine, p: int) -> list[dict]:
    """The ops moving chunk p into the switch: every rank's (reduced or copied), or the root's."""
    if coll == C.BROADCAST:
        return [{"src": const(root), "dst": sw, "schunk": const(p), "kind": PUT, "sbuf": IN, "dbuf": TMP}]
    op = {"src": rank_of(1, n), "dst": sw, "inst": (1, n), "sbuf": IN, "dbuf": TMP}
    if coll == C.ALL_GATHER:                    # rank j's own block j
        return [op | {"schunk": rot(1, 0, n, weight=P, base=p), "kind": PUT}]
    if coll == C.REDUCE_SCATTER:                # block j+k, k = 1..N-1: a rank keeps its own block
        return [op | {"schunk": rot(1, k, n, weight=P, base=p), "kind": PUT_REDUCE} for k in range(1, n)]
    return [op | {"schunk": const(p), "kind": PUT_REDUCE}]


def _arrived(coll: str, ups: list[int]) -> list[tuple[int, int, int, int]]:
    """Dependencies of multicast instance j (switch -> rank, or block j) on chunk p's uploads."""
    if coll == C.REDUCE_SCATTER:                # block j: from rank j-k in template k
        return [(t, DEP_SHIFT, 0, -k) for k, t in enumerate(ups, start=1)]
    if coll in (C.ALL_REDUCE, C.REDUCE):        # every rank's contribution
        return [(ups[0], DEP_ALL, 0, 0)]
    return [(ups[0], DEP_SHIFT, 0, 0)]          # AllGather: block j came from rank j; Broadcast: the root


def _multicast(coll: str, n: int, P: int, root: int, sw: Affine, p: int) -> list[dict]:
    """The switch's PUTs of chunk p, one per destination, as templates."""
    def down(dst: Affine, schunk: Affine, inst: tuple[int, int], kind: int = PUT) -> dict:
        return {"src": sw, "dst": dst, "schunk": schunk, "inst": inst, "kind": kind, "sbuf": TMP, "dbuf": OUT}

    if coll == C.ALL_REDUCE:
        return [down(rank_of(1, n), const(p), (1, n))]
    if coll == C.REDUCE:
        return [down(const(root), const(p), (1, 1))]
    if coll == C.REDUCE_SCATTER:                # block j to rank j only, which adds its own part on arrival
        return [down(rank_of(1, n), rot(1, 0, n, weight=P, base=p), (1, n), PUT_REDUCE)]
    if coll == C.ALL_GATHER:                    # block j to rank j+k: one template per k
        return [down(rank_of(1, n, 0, k), rot(1, 0, n, weight=P, base=p), (1, n)) for k in range(1, n)]
    return [down(rot(1, root + 1, n), const(p), (1, n - 1))]      # Broadcast: every rank but the root
