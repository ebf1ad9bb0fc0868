"""Halving-doubling: Rabenseifner AllReduce, recursive-doubling AllGather, recursive-halving ReduceScatter.

Power-of-two N (Thakur, Rabenseifner & Gropp 2005, as in MPICH). ReduceScatter by recursive halving:
in the step of distance m (m = N/2, N/4, ..., 1) rank r sends to r ^ m the half of its current range
of 2m blocks that r ^ m keeps, reduced on arrival; after log2 N steps rank r holds block r, reduced.
AllGather by recursive doubling: in the step of distance m (m = 1, 2, ..., N/2) rank r sends the m
blocks it holds to r ^ m. AllReduce (Rabenseifner) is the ReduceScatter of the buffer cut into N
pieces followed by the AllGather of the pieces. Each step's pairwise exchanges are one group; an exchange
starts once both ranks finished their previous step (a rendezvous, as MPI_Sendrecv).

On a switch (a = path latency, S = size, B = link bandwidth), exact when N pieces divide S:

    AllReduce                  2 log2(N) a + 2 (N-1)/N S/B
    AllGather, ReduceScatter     log2(N) a +   (N-1)/N S/B

Other N = 2^k + r, the standard handling (MPICH; TRG 2005): ranks 0..2r-1 pair up and the odd rank of
each pair folds its data into the even one (AllReduce, ReduceScatter: its whole buffer, reduced on
arrival; AllGather: its block); the 2^k remaining ranks run the power-of-two algorithm as new ranks
(new rank q is rank 2q for q < r, rank q + r after), a new rank's block being the blocks of the ranks
folded into it; then the even rank hands the odd one its result (AllReduce, AllGather: the whole buffer;
ReduceScatter: its block). That adds a + S/B before and a + S/B after (AllReduce), a + S/(N B) and
a + S/B (AllGather; the unfold also re-sends the odd rank's own block), a + S/B and a + S/(N B)
(ReduceScatter); the steps in between move pieces of unequal sizes (on 6 ranks AllGather and
ReduceScatter take 4a + 13/6 S/B, AllReduce 6a + 7/2 S/B).
"""

from __future__ import annotations

import numpy as np

from hcclsim.schedule import PUT, PUT_REDUCE, Affine, Layout, ScheduleBuilder
from hcclsim.schedule import collectives as C
from hcclsim.schedule.algorithm import Algorithm, Problem, register


@register
class HalvingDoubling(Algorithm):
    name = "halving_doubling"
    summary = "Rabenseifner AllReduce, recursive-halving/doubling ReduceScatter/AllGather; log2(N) steps per phase"
    collectives = (C.ALL_REDUCE, C.ALL_GATHER, C.REDUCE_SCATTER)
    requires = "any topology, any rank count (other than powers of two: fold the first 2r ranks in pairs)"

    def compile(self, problem: Problem, key):
        n, coll = problem.nranks, problem.collective
        pof2 = 1 << (n.bit_length() - 1)
        rem = n - pof2
        q = np.arange(pof2 + 1)
        real = np.where(q < rem, 2 * q, q + rem)            # rank of new rank q (real[pof2] = n)
        q = q[:pof2]
        if coll == C.ALL_REDUCE:
            layout = Layout(1, pof2)                        # piece q ends reduced on new rank q

            def span(a, b):                                 # chunks of new ranks a..b-1: (first, count)
                return a, b - a
        else:
            layout = Layout(n, 1)                           # block j belongs to rank j

            def span(a, b):
                return real[a], real[b] - real[a]
        whole = layout.nchunks
        net = _Net(ScheduleBuilder(coll, self.label, n, (1, n), layout), n)
        even = 2 * np.arange(rem)
        if coll == C.ALL_GATHER:
            net.step(even + 1, even, even + 1, 1, PUT)
        else:
            net.step(even + 1, even, 0, whole, PUT_REDUCE)
        if coll != C.ALL_GATHER:
            m = pof2 // 2
            while m:                                        # recursive halving: distance N/2, N/4, ..., 1
                net.step(real[q], real[q ^ m], *_aligned(q ^ m, m, span), PUT_REDUCE)
                m //= 2
        if coll != C.REDUCE_SCATTER:
            m = 1
            while m < pof2:                                 # recursive doubling: distance 1, 2, ..., N/2
                net.step(real[q], real[q ^ m], *_aligned(q, m, span), PUT)
                m *= 2
        if coll == C.REDUCE_SCATTER:
            net.step(even, even + 1, even + 1, 1, PUT)
        else:
            net.step(even, even + 1, 0, whole, PUT)
        return net.b.build()


def _aligned(q: np.ndarray, m: int, span) -> tuple[np.ndarray, np.ndarray]:
    """Chunks of the m new ranks aligned with q: what q keeps after halving at distance m (the
    partner sends it), and what q holds before doubling at distance m (q sends it)."""
    lo = q & ~(m - 1)
    return span(lo, lo + m)


class _Net:
    """Emits one group per step. A step's transfer src -> dst starts once both src and dst finished
    their previous step (every transfer they sent or received in it): a pairwise exchange is a
    rendezvous, so no transfer runs alongside an earlier group it is not grouped with. Built as arrays
    (a 4096-rank AllReduce has 10^5 transfers)."""

    def __init__(self, b: ScheduleBuilder, n: int):
        self.b = b
        self.ready = np.full((n, 0), -1, np.int64)      # transfers of each rank's latest step (-1: none)

    def step(self, src: np.ndarray, dst: np.ndarray, chunk, count, kind: int) -> None:
        """Transfers src[x] -> dst[x] of count chunks from chunk (values or arrays), all at the same time."""
        if not len(src):
            return
        deps = np.sort(np.concatenate([self.ready[src], self.ready[dst]], 1), 1)
        keep = (deps >= 0) & np.concatenate([np.ones((len(deps), 1), bool), deps[:, 1:] != deps[:, :-1]], 1)
        dep = np.zeros((int(keep.sum()), 5), np.int64)
        dep[:, 0] = deps[keep]
        ids = self.b.ops(len(src), src=Affine(c3=src), dst=Affine(c3=dst), schunk=Affine(c3=chunk), nchunks=count,
                         group=self.b.next_group(), kind=kind, ndeps=keep.sum(1), deps=dep)
        ranks, ts = np.concatenate([src, dst]), np.concatenate([ids, ids])
        order = np.argsort(ranks, kind="stable")
        ranks, ts = ranks[order], ts[order]
        nth = np.arange(len(ranks)) - np.searchsorted(ranks, ranks)          # a rank's k-th transfer of the step
        ready = np.full((len(self.ready), max(self.ready.shape[1], int(nth.max()) + 1)), -1, np.int64)
        ready[:, : self.ready.shape[1]] = self.ready                         # ranks not in this step keep theirs
        ready[ranks] = -1
        ready[ranks, nth] = ts
        self.ready = ready
