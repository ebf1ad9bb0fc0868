"""In-switch reduction and multicast (NVLink SHARP), pipelined over P chunks: as NVLS runs, or as a push.

Needs every rank under one switch that reduces (``in_switch_reduce = true``). The switch node
holds a reduction buffer (TMP) and a multicast buffer (OUT) that start zeroed.

NVLS has two modes, named here as the hardware names them. Pull (``multimem.ld_reduce``): a GPU
loads from a multicast address, the switch reads every GPU's copy, reduces and returns the result.
Push (``multimem.st`` / ``multimem.red``): a GPU stores, the switch multicasts the value or reduces it
into the destination. ``mode = nvls`` (default; ``pull`` is the same schedule) is NCCL's NVLS
kernels: the reduction by pull, the distribution by multicast store, every access including the
issuing GPU itself; ``mode = push`` does both by push.

``mode = nvls`` / ``pull``:

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

``mode = push`` (``multimem.red`` into the switch, its multicast or unicast out): every rank's data
crosses the switch once and no link carries what its rank already has:

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

P: option ``chunks``; 0 (default) picks it by ``chunking``:

* ``fixed``: ceil(S / chunk_size) clamped to 1..max_chunks. Small messages get one chunk
  (latency-optimal); large ones get max_chunks = 64. Each stage hands its chunk whole to the
  next (the formulas above): many fine chunks stand in for a pipeline that streams.
* ``nccl``: NCCL's NVLS steps, so that one chunk is one step of all C channels (C =
  ``[endpoint] in_switch_channels``): a channel moves one chunk c per head and step, c shrinking
  with the message as NCCL's calcCollChunking does (v2.28.9 src/enqueue.cc:2041-2055, called per
  channel, :656-668: nBytes = S/C, concurrentOps = H heads): from NCCL_NVLS_CHUNKSIZE = 128 KiB
  (src/transport/nvls.cc:153), 64 KiB if S/C < 64 H 128 KiB, then 32 KiB if S/C < 8 H 64 KiB,
  then 16 KiB if S/C < 2 H 32 KiB; P = ceil(S / (C H c)). NCCL's heads are the channels of its NVLS
  search, one GPU each, at most NCCL_MAX_NVLS_ARITY = 32 (src/graph/search.cc:1038,
  src/include/device.h:207): H = min(N, 32) for AllReduce, AllGather, ReduceScatter (the schedule
  still gives every rank a shard: above 32 ranks, a GB300 NVL72 domain, a head's extra reduced shard
  is S/32 in NCCL and S/N here), the root alone for Broadcast and Reduce (which NCCL does not run on
  NVLS: the rule extrapolated). On 8 ranks and 16 channels: c = 16 K below
  8 MiB, 32 K below 64 MiB, 64 K below 1 GiB, 128 K from 1 GiB; P = 2 at 4-8 MiB, 8 at 32-64 MiB,
  64 at 512 MiB-1 GiB. Within a step the switch streams: NCCL's multimem.ld_reduce returns the
  reduced value as the switch reads it and multimem.st is multicast as it arrives, so a switch
  output (D, M, a multicast) STREAM-depends on the transfers into the switch it forwards: its first
  byte leaves once theirs are in, its last once theirs are (hcclsim/schedule/ir.py; the packet
  engine forwards packet by packet). A rank's own re-store G still waits for its reduced chunk D
  whole (NCCL's reduce warps pass it through registers: an extra a + chunk of fill per step chain).
* ``auto`` (default): ``nccl`` where the endpoint sets in_switch_channels (the GPU presets),
  ``fixed`` elsewhere, so the generic topologies keep the closed forms above.

Per-step cost: NCCL's NVLS kernel runs every step as wait, copy, fence.acq_rel.sys, post
(src/device/prims_simple.h:236-294), in series with the step's data. Every transfer a rank
issues into the switch pays the endpoint's in_switch_step_latency o before it starts
(hcclsim/engine/execution.py). A rank's uploads of consecutive chunks are issued back to back
(U(q) after U(q-1) has left, plus o), and so are its multicast stores G: two chains running side
by side, so in steady state each step pays o once, in series with its data. With NCCL's
streamed steps, the nvls AllReduce (P >= 1; u = (1+1/N) y):

  4a + (P+1) o + 2y + (P-1) u

(U(P-1) leaves at o + y + (P-1)(o + u); D streams it back a later, the last store G pays o and
y/N alone on the uplinks, the last multicast M takes y alone on the downlinks, a after the store's
first byte). With whole chunks (``fixed``, P >= 3): 4a + P o + 2y + P u + max(o + y/N, u).
The analytic engine shares a link among the transfers of a group for the whole group; when a
chain waits o the packet engine hands the link to the others, so with o > 0 the packet engine is
the faster of the two (on dgx-h100, NVLS AllReduce: within 1 % at 4-16 MiB, up to ~10 % at
256-512 MiB, 5 % at 1 GiB); with o = 0 they agree within 3 %.

The automatic P is also capped so that a schedule stays O(N) templates: P (templates per chunk
and direction) <= 4096, i.e. P <= 4096 // (N-1) (push AllGather / ReduceScatter), 4096 // N
(nvls AllGather / ReduceScatter), 4096 // (N+1) (nvls AllReduce, 2 (N+1) templates per chunk:
455 on 8 ranks, fewer than NCCL's 512 steps at 8 GiB).
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
    stream,
    switch_of,
)
from hcclsim.schedule import collectives as C
from hcclsim.schedule.algorithm import Algorithm, Problem, auto_chunks, opt, register

TEMPLATE_BUDGET = 4096     # automatic chunks keep P x (templates per chunk and direction) under this
MODES = ("nvls", "pull", "push")     # pull: the hardware's name for nvls (multimem.ld_reduce), the same schedule
CHUNKINGS = ("auto", "fixed", "nccl")
# NCCL_NVLS_CHUNKSIZE's default, the largest NVLS chunk (NVIDIA/nccl v2.28.9 src/transport/nvls.cc:153; below
# the Simple step of 4 MiB / NCCL_STEPS = 512 KiB); calcCollChunking halves it to these while a channel's bytes
# are below factor x heads x the current chunk (src/enqueue.cc:2052-2054)
NVLS_CHUNK = 128 << 10
NVLS_SHRINK = ((64, 64 << 10), (8, 32 << 10), (2, 16 << 10))
NVLS_MAX_HEADS = 32        # NCCL_MAX_NVLS_ARITY (v2.28.9 src/include/device.h:207): NVLS heads, one per search channel


@dataclass(frozen=True)
class InSwitchOptions:
    mode: str = opt("nvls", "nvls (or pull): as NCCL's NVLS runs, multimem.ld_reduce pulls every GPU's copy "
                            "through the switch and multimem.st multicasts, the issuing GPU included (AllReduce: "
                            "S + S/N up and down per rank); push: multimem.red/st writes, the switch reduces or "
                            "multicasts into the others, a rank's own data never crosses its link (S up, S down)")
    chunks: int = opt(0, "pipelined chunks (0: as chunking says)")
    chunk_size: int = opt(32 << 10, "bytes per chunk with chunking=fixed (chunks leave back to back, so finer "
                                     "chunks only shrink the pipeline fill: under ~3 % from 1 MiB)")
    max_chunks: int = opt(64, "upper bound on chunks with chunking=fixed")
    chunking: str = opt("auto", "chunks when chunks=0: fixed: chunk_size, up to max_chunks, each passed whole "
                                 "from stage to stage; nccl: NCCL's NVLS steps (a chunk per step of the "
                                 "endpoint's in_switch_channels, shrinking with the message), each streamed "
                                 "through the switch; auto: nccl where the endpoint sets in_switch_channels")

    def __post_init__(self):
        if self.chunks < 0 or self.chunk_size < 1 or self.max_chunks < 1:
            raise ValueError("chunks must be >= 0, chunk_size and max_chunks >= 1")
        if self.mode not in MODES:
            raise ValueError(f"mode must be one of {', '.join(MODES)}, got {self.mode!r}")
        if self.chunking not in CHUNKINGS:
            raise ValueError(f"chunking must be one of {', '.join(CHUNKINGS)}, got {self.chunking!r}")


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
        if self.options.chunking == "nccl" and not topo.endpoint.in_switch_channels:
            return "chunking=nccl needs the endpoint's NVLS channel count ([endpoint] in_switch_channels)"
        return None

    def structure_key(self, problem, sizing, dtype_size):
        if self.options.chunks:
            return self.options.chunks
        channels = problem.topology.endpoint.in_switch_channels
        if not self._nccl_steps(problem):
            P = auto_chunks(sizing.size_bytes, self.options.chunk_size, self.options.max_chunks)
        else:
            P = nccl_steps(problem.collective, sizing.size_bytes, problem.nranks, channels)
        per_chunk = _templates_per_chunk(problem.collective, problem.nranks, self.options.mode)
        # past P x per_chunk ~ 4096 the fill left to hide is a fraction of a per cent, while the
        # schedule grows as P N
        return int(min(P, max(1, TEMPLATE_BUDGET // per_chunk)))

    def _nccl_steps(self, problem: Problem) -> bool:
        """Whether chunks are NCCL's steps (streamed through the switch) rather than fixed ones."""
        chunking = self.options.chunking
        return chunking == "nccl" or (chunking == "auto" and problem.topology.endpoint.in_switch_channels > 0)

    def compile(self, problem: Problem, key) -> Schedule:
        n, coll, P, root = problem.nranks, problem.collective, int(key), problem.root
        node = int(problem.topology.reduce_switch[0])
        sw = switch_of(1, n) if node == n else const(node)     # switch_of keeps the symmetric fast path
        nvls = self.options.mode != "push"
        feed = stream if self._nccl_steps(problem) else _whole
        if nvls and coll == C.ALL_REDUCE:
            b = ScheduleBuilder(coll, self.label, n, (1, n), Layout(1, n * P), nnodes=problem.topology.nnodes)
            _nvls_all_reduce(b, n, P, sw, feed)
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
                                   deps=_arrived(coll, ups[p], first, feed) + ([order(downs[-1][x])] if p else []))
                              for x, op in enumerate(ops)])
        return b.build()


def nvls_chunk(channel_bytes: int, heads: int) -> int:
    """Bytes one NVLS channel moves per head and step: calcCollChunking's NVLS branch on one channel's bytes."""
    c = NVLS_CHUNK
    for factor, smaller in NVLS_SHRINK:
        if channel_bytes < factor * heads * c and c > smaller:
            c = smaller
    return c


def nccl_steps(coll: str, size_bytes: int, n: int, channels: int) -> int:
    """Steps of every NVLS channel for a message of size_bytes (nccl-tests' size) on n ranks (module docstring)."""
    nvls_heads = min(n, NVLS_MAX_HEADS)
    heads = 1 if coll in (C.BROADCAST, C.REDUCE) else nvls_heads
    c = nvls_chunk(size_bytes // channels, nvls_heads)
    return max(1, -(-size_bytes // (channels * heads * c)))


def _templates_per_chunk(coll: str, n: int, mode: str) -> int:
    """Templates one chunk adds on its busiest direction (what the automatic P is capped by)."""
    if coll in (C.ALL_GATHER, C.REDUCE_SCATTER):
        return n - 1 if mode == "push" else n
    if coll == C.ALL_REDUCE and mode != "push":
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


def _whole(t: int, mode: int = DEP_SHIFT, si: int = 0, sj: int = 0) -> tuple[int, int, int, int]:
    """A switch output waits for its chunk whole (chunking=fixed)."""
    return (t, mode, si, sj)


def _arrived(coll: str, ups: list[int], first: int, feed=_whole) -> list[tuple]:
    """Dependencies of multicast instance j (switch -> rank, or block j) on chunk p's uploads."""
    if coll == C.REDUCE_SCATTER:                # block j: from rank j-k in template k
        return [feed(t, DEP_SHIFT, 0, -k) for k, t in enumerate(ups, start=first)]
    if coll in (C.ALL_REDUCE, C.REDUCE):        # every rank's contribution
        return [feed(ups[0], DEP_ALL, 0, 0)]
    return [feed(ups[0], DEP_SHIFT, 0, 0)]      # AllGather: block j came from rank j; Broadcast: the root


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


def _nvls_all_reduce(b: ScheduleBuilder, n: int, P: int, sw: Affine, feed=_whole) -> None:
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
            arrived = [feed(t, DEP_SHIFT, 0, -k) for k, t in enumerate(U[q])]  # from rank j-k in template k
            D.append(b.op(group=g, chan=n, **_down(sw, rank, shard(q), (1, n), dbuf=TMP),
                          deps=arrived + ([order(D[-1])] if q else [])))
        if q:                                   # shard j to rank j+k, its owner included (multimem.st)
            p = q - 1
            M.append([b.op(group=g, chan=1 + k, **_down(sw, rank_of(1, n, 0, k), shard(p), (1, n), sbuf=OUT),
                           deps=[feed(G[p])] + ([order(M[-1][k])] if p else [])) for k in range(n)])
