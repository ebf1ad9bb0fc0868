"""In-switch reduction and multicast (NVLink SHARP), pipelined over P chunks: as NVLS runs, or as a push.

Needs every rank under one switch that reduces (``in_switch_reduce = true``). The switch node
holds a reduction buffer (TMP) and a multicast buffer (OUT) that start zeroed.

``mode = nvls`` (default): as NCCL's NVLS kernels run (``multimem.ld_reduce`` and ``multimem.st``
on a multicast address), whose every access includes the issuing GPU itself:

* ReduceScatter -- every rank PUT_REDUCEs chunk p of every block, its own included, into the
  switch; the switch sends reduced chunk p of block r to rank r (ld_reduce's result).
  Per rank: S up, S/N down.
* AllGather -- every rank PUTs chunk p of its block to the switch, which multicasts it to all N
  ranks, the owner included (multimem.st). Per rank: S/N up, S down.
* AllReduce -- both, per chunk: the buffer is cut into N shards of P chunks (chunk p of shard s
  is chunk s P + p); every rank PUT_REDUCEs chunk p of all N shards into the switch (U), the
  switch sends reduced shard s to rank s (D, into its TMP), rank s PUTs it back into the
  switch's multicast buffer (G) and the switch multicasts it to all N ranks (M). Per rank:
  S + S/N up, S/N + S down.

``mode = push``: every rank's data crosses the switch once and no link carries what its rank
already has:

* AllReduce -- every rank PUT_REDUCEs chunk p of its input into the switch's buffer; once all
  N contributions of chunk p are in, the switch multicasts the reduced chunk into every
  rank's output (one PUT per destination). Per rank: S up, S down.
* ReduceScatter -- every rank PUT_REDUCEs chunk p of the N-1 blocks it does not keep into
  the switch; the switch sends the reduced chunk p of block r to rank r only, which adds its
  own part on arrival (PUT_REDUCE).
* AllGather -- every rank PUTs chunk p of its block to the switch, which multicasts it to
  the N-1 other ranks.

Both modes: Reduce is the push AllReduce with the reduced chunk sent to the root only;
Broadcast: the root PUTs chunk p to the switch, which multicasts it to the N-1 others.

Pipelining: uploads (rank -> switch links) and downloads (switch -> rank links) use different
links. Two-stage collectives run P+1 waves, wave w (one group) holding the upload of chunk w
and the download of chunk w-1. The NVLS AllReduce's four stages alternate directions, so it
runs 2P+2 groups: group 2q (uplinks) holds U(q) and G(q-1), group 2q+1 (downlinks) D(q) and
M(q-1), each link carrying (1+1/N) S/P per pair of groups. Every stage of a rank (or of the
switch) issues its chunks in order, back to back.

Alpha-beta on one switch (a = one link hop's latency, so a path rank -> switch -> rank costs
alpha = 2a; B the link bandwidth; S the size; y = S/(P B) one chunk of the buffer over B):

  nvls  AllReduce       4a + (P+1) (1+1/N) y + min(P-1, 2) y   -> (1+1/N) S/B:
                        busbw 2(N-1)/N B x N/(N+1) = 2(N-1)/(N+1) B (1.556 B on 8 ranks)
        AllGather, ReduceScatter   2a + P y + y/N = 2a + S/B + S/(N P B)   -> busbw (N-1)/N B
  push  AllReduce       2a + (P+1) y                            -> busbw 2(N-1)/N B
        AllGather, ReduceScatter   2a + y/N + P (N-1) y/N       -> busbw B
  both  Broadcast, Reduce  2a + (P+1) y

(NVLS AllReduce: the fill and drain groups hold one stage only; the first upload and the last
multicast take y, not (1+1/N) y, and the pipeline of U -> D -> G -> M adds 4a; P = 1 gives
4a + 2 (1+1/N) S/B.)

P: option ``chunks``; 0 (default) picks ceil(S / chunk_size) clamped to 1..max_chunks. Small
messages get one chunk (latency-optimal); large ones get max_chunks = 64. The automatic P is
also capped so that a schedule stays O(N) templates: P (templates per chunk and direction)
<= 4096, i.e. P <= 4096 // (N-1) (push AllGather / ReduceScatter), 4096 // N (nvls AllGather /
ReduceScatter), 4096 // (N+1) (nvls AllReduce, 2 (N+1) templates per chunk).
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

TEMPLATE_BUDGET = 4096     # automatic chunks keep P x (templates per chunk and direction) under this
MODES = ("nvls", "push")


@dataclass(frozen=True)
class InSwitchOptions:
    mode: str = opt("nvls", "nvls: as NVLS runs, every access includes the issuing GPU (AllReduce: S + S/N up "
                            "and down per rank); push: a rank's own data never crosses its link (S up, S down)")
    chunks: int = opt(0, "pipelined chunks (0: one per chunk_size bytes, between 1 and max_chunks)")
    chunk_size: int = opt(32 << 10, "bytes per chunk when chunks=0 (chunks leave back to back, so finer "
                                     "chunks only shrink the pipeline fill: under ~3 % from 1 MiB)")
    max_chunks: int = opt(64, "upper bound on automatic chunks")

    def __post_init__(self):
        if self.chunks < 0 or self.chunk_size < 1 or self.max_chunks < 1:
            raise ValueError("chunks must be >= 0, chunk_size and max_chunks >= 1")
        if self.mode not in MODES:
            raise ValueError(f"mode must be one of {', '.join(MODES)}, got {self.mode!r}")


@register
class InSwitch(Algorithm):
    name = "in_switch"
    summary = "NVLS: ranks reduce into the switch, the switch multicasts back (mode=push: own data stays); pipelined"
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
        per_chunk = _templates_per_chunk(problem.collective, problem.nranks, self.options.mode)
        # past P x per_chunk ~ 4096 the fill left to hide is a fraction of a per cent, while the
        # schedule grows as P N
        return int(min(P, max(1, TEMPLATE_BUDGET // per_chunk)))

    def compile(self, problem: Problem, key) -> Schedule:
        n, coll, P, root = problem.nranks, problem.collective, int(key), problem.root
        node = int(problem.topology.reduce_switch[0])
        sw = switch_of(1, n) if node == n else const(node)     # switch_of keeps the symmetric fast path
        nvls = self.options.mode == "nvls"
        if nvls and coll == C.ALL_REDUCE:
            b = ScheduleBuilder(coll, self.label, n, (1, n), Layout(1, n * P), nnodes=problem.topology.nnodes)
            _nvls_all_reduce(b, n, P, sw)
            return b.build()
        b = ScheduleBuilder(coll, self.label, n, (1, n), Layout(C.nblocks(coll, n), P),
                            nnodes=problem.topology.nnodes, root=root)
        first = 0 if nvls else 1        # the first block offset k a rank sends or receives (0: its own)
        ups: list[list[int]] = []
        downs: list[list[int]] = []
        for w in range(P + 1):          # wave w: upload chunk w, multicast chunk w-1
            g = b.next_group()
            if w < P:                   # a rank uploads its chunks in order
                ops = _upload(coll, n, P, root, sw, w, first)
                ups.append([b.op(group=g, chan=x, **op, deps=[order(ups[-1][x])] if w else [])
                            for x, op in enumerate(ops)])
            if w:                       # the switch multicasts its chunks in order
                p = w - 1
                ops = _multicast(coll, n, P, root, sw, p, first)
                chan0 = len(ups[p])
                downs.append([b.op(group=g, chan=chan0 + x, **op,
                                   deps=_arrived(coll, ups[p], first) + ([order(downs[-1][x])] if p else []))
                              for x, op in enumerate(ops)])
        return b.build()


def _templates_per_chunk(coll: str, n: int, mode: str) -> int:
    """Templates one chunk adds on its busiest direction (what the automatic P is capped by)."""
    if coll in (C.ALL_GATHER, C.REDUCE_SCATTER):
        return n if mode == "nvls" else n - 1
    if coll == C.ALL_REDUCE and mode == "nvls":
        return n + 1
    return 1


def _upload(coll: str, n: int, P: int, root: int, sw: Affine, p: int, first: int) -> list[dict]:
    """The ops moving chunk p into the switch: every rank's (reduced or copied), or the root's."""
    if coll == C.BROADCAST:
        return [{"src": const(root), "dst": sw, "schunk": const(p), "kind": PUT, "sbuf": IN, "dbuf": TMP}]
    op = {"src": rank_of(1, n), "dst": sw, "inst": (1, n), "sbuf": IN, "dbuf": TMP}
    if coll == C.ALL_GATHER:                    # rank j's own block j
        return [op | {"schunk": rot(1, 0, n, weight=P, base=p), "kind": PUT}]
    if coll == C.REDUCE_SCATTER:                # block j+k, k = first..N-1 (push: a rank keeps its own block)
        return [op | {"schunk": rot(1, k, n, weight=P, base=p), "kind": PUT_REDUCE} for k in range(first, n)]
    return [op | {"schunk": const(p), "kind": PUT_REDUCE}]


def _arrived(coll: str, ups: list[int], first: int) -> list[tuple[int, int, int, int]]:
    """Dependencies of multicast instance j (switch -> rank, or block j) on chunk p's uploads."""
    if coll == C.REDUCE_SCATTER:                # block j: from rank j-k in template k
        return [(t, DEP_SHIFT, 0, -k) for k, t in enumerate(ups, start=first)]
    if coll in (C.ALL_REDUCE, C.REDUCE):        # every rank's contribution
        return [(ups[0], DEP_ALL, 0, 0)]
    return [(ups[0], DEP_SHIFT, 0, 0)]          # AllGather: block j came from rank j; Broadcast: the root


def _down(sw: Affine, dst: Affine, schunk: Affine, inst: tuple[int, int], kind: int = PUT,
          sbuf: int = TMP, dbuf: int = OUT) -> dict:
    return {"src": sw, "dst": dst, "schunk": schunk, "inst": inst, "kind": kind, "sbuf": sbuf, "dbuf": dbuf}


def _multicast(coll: str, n: int, P: int, root: int, sw: Affine, p: int, first: int) -> list[dict]:
    """The switch's PUTs of chunk p, one per destination, as templates."""
    if coll == C.ALL_REDUCE:
        return [_down(sw, rank_of(1, n), const(p), (1, n))]
    if coll == C.REDUCE:
        return [_down(sw, const(root), const(p), (1, 1))]
    block = rot(1, 0, n, weight=P, base=p)      # chunk p of block j
    if coll == C.REDUCE_SCATTER:                # block j to rank j only (push: which adds its own part)
        return [_down(sw, rank_of(1, n), block, (1, n), PUT if first == 0 else PUT_REDUCE)]
    if coll == C.ALL_GATHER:                    # block j to rank j+k: one template per k
        return [_down(sw, rank_of(1, n, 0, k), block, (1, n)) for k in range(first, n)]
    return [_down(sw, rot(1, root + 1, n), const(p), (1, n - 1))]      # Broadcast: every rank but the root


def _nvls_all_reduce(b: ScheduleBuilder, n: int, P: int, sw: Affine) -> None:
    """NVLS AllReduce: chunk p of shard s is chunk s P + p; U(p) -> D(p) -> G(p) -> M(p) (module docstring).

    Group 2q (uplinks): U(q), G(q-1); group 2q+1 (downlinks): D(q), M(q-1). Channels: the ReduceScatter's
    (U on 0..N-1, D on N) and the AllGather's (G on 0, M on 1..N)."""
    def shard(p: int, k: int = 0) -> Affine:       # chunk p of shard j+k
        return rot(1, k, n, weight=P, base=p)

    rank = rank_of(1, n)
    U: list[list[int]] = []
    D: list[int] = []
    G: list[int] = []
    M: list[list[int]] = []
    for q in range(P + 1):
        g = b.next_group()
        if q < P:                               # rank j adds chunk q of shard j+k into the switch
            U.append([b.op(group=g, chan=k, src=rank, dst=sw, inst=(1, n), kind=PUT_REDUCE, sbuf=IN, dbuf=TMP,
                           schunk=shard(q, k), deps=[order(U[-1][k])] if q else []) for k in range(n)])
        if q:                                   # rank j puts reduced shard j into the switch's multicast buffer
            p = q - 1
            G.append(b.op(group=g, chan=0, src=rank, dst=sw, inst=(1, n), kind=PUT, sbuf=TMP, dbuf=OUT,
                          schunk=shard(p), deps=[D[p]] + ([order(G[-1])] if p else [])))
        g = b.next_group()
        if q < P:                               # reduced chunk q of shard j to rank j (ld_reduce's result)
            arrived = [(t, DEP_SHIFT, 0, -k) for k, t in enumerate(U[q])]      # from rank j-k in template k
            D.append(b.op(group=g, chan=n, **_down(sw, rank, shard(q), (1, n), dbuf=TMP),
                          deps=arrived + ([order(D[-1])] if q else [])))
        if q:                                   # shard j to rank j+k, its owner included (multimem.st)
            p = q - 1
            M.append([b.op(group=g, chan=1 + k, **_down(sw, rank_of(1, n, 0, k), shard(p), (1, n), sbuf=OUT),
                           deps=[G[p]] + ([order(M[-1][k])] if p else [])) for k in range(n)])
