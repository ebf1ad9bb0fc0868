"""Direct one-sided PUT collectives (HCCL-style): every rank writes straight into its peers' buffers.

Three names share one generator (:func:`compile_direct`):

* ``direct`` -- AllGather, ReduceScatter, AllToAll, Broadcast, Reduce. Every rank PUTs the
  piece each peer needs straight to that peer, all PUTs in one group: one template per peer
  offset, rank (d, l) -> rank (d+kd, l+kl) on the topology's (domains, ranks per domain) grid
  (rank j -> rank j+k, k = 1..N-1, on a flat one). ReduceScatter and Reduce use PUT_REDUCE (the
  receiver reduces on arrival). Broadcast / Reduce: only the root sends / receives.
* ``direct_oneshot`` -- AllReduce in one step: every rank PUT_REDUCEs its whole input into
  every peer's output.
* ``direct_twoshot`` -- AllReduce in two steps: a direct ReduceScatter of 1/N pieces (piece q
  is reduced at rank q), then a direct AllGather of the reduced pieces. Rank q starts the
  second step once the N-1 reductions into its piece have landed (a zero-byte local *wait*
  joins them, so a schedule holds O(N) dependencies, not O(N^2)).

Alpha-beta on one switch (alpha = 2 x link latency, B the link bandwidth, S the size as
nccl-tests reports it; a rank's link is shared by its N-1 concurrent PUTs):

    AllGather, ReduceScatter, AllToAll   alpha + (N-1) S/(N B)
    Broadcast, Reduce                    alpha + (N-1) S/B    (the root's link carries N-1 copies)
    AllReduce oneshot                    alpha + (N-1) S/B
    AllReduce twoshot                    2 (alpha + (N-1) S/(N B))

AllToAllv, send_recv and pp_ring (:func:`compile_pairs`): every rank PUTs each peer its units of the
traffic matrix straight into its output, all at once, one explicit transfer per pair that moves
anything (the per-pair sizes are no affine function of the rank: a template per pair, O(N^2) of
them), ordered and on the channels of AllToAll's PUTs, so a uniform matrix times as AllToAll does.

Option ``chunks=P`` cuts every PUT into P pieces that its channel sends one after another:
one-step collectives take P (alpha + (N-1) S/(N P B)) (Broadcast/Reduce/oneshot: S/P per
PUT), twoshot (P+1) alpha + 2 (N-1) S/(N B) (the all-gather of piece p runs beside the
reduce-scatter of piece p+1 and shares the links with it). On these fabrics the analytic
model gains no bandwidth from P; it bounds the size of one PUT (message-engine granularity).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from hcclsim.schedule import (
    DATA,
    DEP_SHIFT,
    IN,
    ORDER,
    OUT,
    PUT,
    PUT_REDUCE,
    Affine,
    Layout,
    Schedule,
    ScheduleBuilder,
    const,
    order,
    rank_of,
)
from hcclsim.schedule import collectives as C
from hcclsim.schedule.algorithm import Algorithm, Problem, opt, register


@dataclass(frozen=True)
class DirectOptions:
    chunks: int = opt(1, "pieces every PUT is cut into, sent one after another on its channel")

    def __post_init__(self):
        if self.chunks < 1:
            raise ValueError("chunks must be >= 1")


ChunkOf = Callable[[np.ndarray, np.ndarray, int], Affine]   # (peer offsets kd, kl; piece p) -> chunk expression


@dataclass(frozen=True)
class Step:
    """Every rank (d, l) PUTs to every rank (d+kd, l+kl), (kd, kl) != (0, 0): which chunks, how, between which
    buffers."""

    schunk: ChunkOf
    dchunk: ChunkOf
    kind: int
    sbuf: int
    dbuf: int


def _plan(collective: str, D: int, L: int, P: int, twoshot: bool) -> tuple[Layout, list[Step]]:
    """The layout and the PUT steps of a rank-symmetric direct collective on the (D, L) rank grid."""
    def own(kd, kl, p):     # block (or piece) of my rank, sub-chunk p
        return _block(D, L, 0, 0, P, p)

    def peer(kd, kl, p):    # the block (or piece) the peer (d+kd, l+kl) owns
        return _block(D, L, kd, kl, P, p)

    def whole(kd, kl, p):
        return const(p)

    n = D * L
    if collective == C.ALL_GATHER:
        return Layout(n, P), [Step(own, own, PUT, IN, OUT)]
    if collective == C.REDUCE_SCATTER:
        return Layout(n, P), [Step(peer, peer, PUT_REDUCE, IN, OUT)]
    if collective == C.ALL_TO_ALL:
        return Layout(n, P), [Step(peer, own, PUT, IN, OUT)]
    if not twoshot:
        return Layout(1, P), [Step(whole, whole, PUT_REDUCE, IN, OUT)]
    return Layout(1, n * P), [Step(peer, peer, PUT_REDUCE, IN, OUT), Step(own, own, PUT, OUT, OUT)]


def _block(D: int, L: int, kd, kl, P: int, p: int) -> Affine:
    """Chunk p of the block of rank (d+kd, l+kl), P chunks per block."""
    return Affine(a1=1, c1=kd % D, m1=D, w1=L * P, b2=1, c2=kl % L, m2=L, w2=P, c3=p)


def compile_direct(problem: Problem, label: str, P: int, twoshot: bool = False) -> Schedule:
    """The shared generator of direct, direct_oneshot and direct_twoshot.

    Ranks are addressed on the topology's (domains, ranks per domain) grid, one template per peer offset
    (kd, kl) over every rank: on a two-tier fabric the translations of the grid are symmetries of the
    tiers, so the analytic engine times one instance per template (hcclsim.schedule.symmetry); on a flat
    one the grid is (1, N), offsets k = 1..N-1."""
    if problem.collective in (C.BROADCAST, C.REDUCE):
        return _rooted(problem, label, P)
    n, D, L = problem.nranks, problem.topology.domains, problem.topology.local
    layout, steps = _plan(problem.collective, D, L, P, twoshot)
    b = ScheduleBuilder(problem.collective, label, n, (D, L), layout, root=problem.root)
    kd, kl = np.divmod(np.arange(1, n), L)          # peer offsets, as linear offset k = kd*L + kl = 1..N-1
    wait_chan = len(steps) * (n - 1)
    sent: dict[tuple[int, int], np.ndarray] = {}    # (step, piece) -> templates of offsets k = 1..N-1
    waits: dict[tuple[int, int], int] = {}          # (step, piece) -> template of the wait gating it
    for w in range(P + len(steps) - 1):             # wave w: step s sends piece w - s
        live = [(s, w - s) for s in range(len(steps)) if 0 <= w - s < P]
        gated = [(s, p) for s, p in live if s > 0]
        if gated:
            g = b.next_group()
            for s, p in gated:
                waits[(s, p)] = _wait(b, D, L, g, sent[(s - 1, p)], kd, kl, waits.get((s, p - 1)), wait_chan)
        g = b.next_group()
        for s, p in live:
            st = steps[s]
            deps = []                                            # per offset: ...
            if p:
                deps.append(np.stack([sent[(s, p - 1)], *np.zeros((3, n - 1), np.int64),
                                      np.full(n - 1, ORDER)], 1))  # ... the channel sends in order
            if s:
                deps.append(np.tile([waits[(s, p)], DEP_SHIFT, 0, 0, DATA], (n - 1, 1)))
            sent[(s, p)] = b.ops(n - 1, src=rank_of(D, L), dst=rank_of(D, L, kd, kl), schunk=st.schunk(kd, kl, p),
                                 dchunk=st.dchunk(kd, kl, p), group=g, inst=(D, L), kind=st.kind, sbuf=st.sbuf,
                                 dbuf=st.dbuf, chan=s * (n - 1) + np.arange(n - 1), ndeps=len(deps),
                                 deps=np.stack(deps, 1) if deps else None)
    return b.build()


def compile_pairs(problem: Problem, label: str, traffic) -> Schedule:
    """One PUT per pair (i, j), i != j, of traffic.units[i, j] units from i's input to j's output, all in
    one group; in AllToAll's order (peer offset (kd, kl) on the (D, L) grid, then the sender), on its
    channel kd*L + kl - 1."""
    n, D, L = problem.nranks, problem.topology.domains, problem.topology.local
    src, dst = np.divmod(np.arange(n * n), n)
    (sd, sl), (dd, dl) = np.divmod(src, L), np.divmod(dst, L)
    k = (dd - sd) % D * L + (dl - sl) % L
    pick = np.lexsort((src, k))
    pick = pick[(k[pick] > 0) & (traffic.units[src[pick], dst[pick]] > 0)]
    src, dst, k = src[pick], dst[pick], k[pick]
    b = ScheduleBuilder(problem.collective, label, n, (D, L), Layout(traffic.chunks, 1), root=problem.root)
    b.notes["traffic"] = traffic
    b.ops(len(src), src=Affine(c3=src), dst=Affine(c3=dst), schunk=Affine(c3=traffic.send_offsets[src, dst]),
          dchunk=Affine(c3=traffic.recv_offsets[dst, src]), nchunks=traffic.units[src, dst], group=b.next_group(),
          sbuf=IN, dbuf=OUT, chan=k - 1)
    return b.build()


def _wait(b: ScheduleBuilder, D: int, L: int, group: int, incoming: np.ndarray, kd, kl, prev: int | None,
          chan: int) -> int:
    """Rank (d, l) waits until the PUTs of templates ``incoming`` (offset (kd, kl), from rank (d-kd, l-kl))
    landed.

    A zero-byte local op (no links, no time): one dependency per template instead of one per
    (sender, receiver) pair.
    """
    deps = [(int(t), DEP_SHIFT, -int(i), -int(j)) for t, i, j in zip(incoming, kd, kl)]
    if prev is not None:
        deps.append(prev)
    return b.op(src=rank_of(D, L), dst=rank_of(D, L), schunk=const(0), nchunks=0, group=group, inst=(D, L),
                chan=chan, deps=deps)


def _rooted(problem: Problem, label: str, P: int) -> Schedule:
    """Broadcast: the root PUTs to every peer; Reduce: every peer PUT_REDUCEs into the root."""
    n, root, coll = problem.nranks, problem.root, problem.collective
    b = ScheduleBuilder(coll, label, n, (1, n), Layout(1, P), root=root)
    bcast = coll == C.BROADCAST
    prev: dict[int, int] = {}
    for p in range(P):
        g = b.next_group()
        for k in range(1, n):
            peer = const((root + k) % n)
            src, dst = (const(root), peer) if bcast else (peer, const(root))
            prev[k] = b.op(src=src, dst=dst, schunk=const(p), group=g, kind=PUT if bcast else PUT_REDUCE,
                           sbuf=IN, dbuf=OUT, chan=k - 1, deps=[order(prev[k])] if p else [])
    return b.build()


class _DirectFamily(Algorithm):
    requires = "any topology, any rank count"
    Options = DirectOptions
    twoshot = False

    def structure_key(self, problem, sizing, dtype_size):
        """The chunks; a matrix collective's traffic (one schedule per matrix)."""
        return sizing.traffic if problem.collective in C.MATRIX_COLLECTIVES else self.options.chunks

    def compile(self, problem: Problem, key) -> Schedule:
        if problem.collective in C.MATRIX_COLLECTIVES:
            return compile_pairs(problem, self.label, key)
        return compile_direct(problem, self.label, int(key), self.twoshot)


@register
class Direct(_DirectFamily):
    name = "direct"
    summary = "one-sided PUTs straight to every peer in one step (HCCL-style); latency-optimal"
    collectives = (C.ALL_GATHER, C.REDUCE_SCATTER, C.ALL_TO_ALL, C.BROADCAST, C.REDUCE, *C.MATRIX_COLLECTIVES)

    def why_not(self, problem: Problem) -> str | None:
        if problem.collective in C.MATRIX_COLLECTIVES and self.options.chunks > 1:
            return f"chunks cuts equal blocks; {problem.collective} sends each pair its own size in one PUT"
        return None

    def unsupported(self, problem: Problem) -> str | None:
        why = super().unsupported(problem)
        if why and problem.collective == C.ALL_REDUCE:
            why += "; for AllReduce use direct_oneshot or direct_twoshot"
        return why


@register
class DirectOneShot(_DirectFamily):
    name = "direct_oneshot"
    summary = "AllReduce: every rank PUT_REDUCEs its whole input into every peer (one step)"
    collectives = (C.ALL_REDUCE,)


@register
class DirectTwoShot(_DirectFamily):
    name = "direct_twoshot"
    summary = "AllReduce: direct reduce-scatter of 1/N pieces, then direct all-gather (two steps)"
    collectives = (C.ALL_REDUCE,)
    twoshot = True
