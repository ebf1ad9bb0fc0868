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

from hcclsim.schedule import PUT, PUT_REDUCE, Layout, ScheduleBuilder, const
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
        real = [2 * q if q < rem else q + rem for q in range(pof2 + 1)]    # rank of new rank q (real[pof2] = n)
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
        pairs = range(rem)
        if coll == C.ALL_GATHER:
            net.step([(2 * i + 1, 2 * i, 2 * i + 1, 1, PUT) for i in pairs])
        else:
            net.step([(2 * i + 1, 2 * i, 0, whole, PUT_REDUCE) for i in pairs])
        if coll != C.ALL_GATHER:
            m = pof2 // 2
            while m:                                        # recursive halving: distance N/2, N/4, ..., 1
                net.step([(real[q], real[q ^ m], *_aligned(q ^ m, m, span), PUT_REDUCE) for q in range(pof2)])
                m //= 2
        if coll != C.REDUCE_SCATTER:
            m = 1
            while m < pof2:                                 # recursive doubling: distance 1, 2, ..., N/2
                net.step([(real[q], real[q ^ m], *_aligned(q, m, span), PUT) for q in range(pof2)])
                m *= 2
        if coll == C.REDUCE_SCATTER:
            net.step([(2 * i, 2 * i + 1, 2 * i + 1, 1, PUT) for i in pairs])
        else:
            net.step([(2 * i, 2 * i + 1, 0, whole, PUT) for i in pairs])
        return net.b.build()


def _aligned(q: int, m: int, span) -> tuple[int, int]:
    """Chunks of the m new ranks aligned with q: what q keeps after halving at distance m (the
    partner sends it), and what q holds before doubling at distance m (q sends it)."""
    lo = q & ~(m - 1)
    return span(lo, lo + m)


class _Net:
    """Emits one group per step. A step's transfer src -> dst starts once both src and dst finished
    their previous step (every transfer they sent or received in it): a pairwise exchange is a
    rendezvous, so no transfer runs alongside an earlier group it is not grouped with."""

    def __init__(self, b: ScheduleBuilder, n: int):
        self.b = b
        self.node = [const(x) for x in range(max(n, b.layout.nchunks))]
        self.ready: list[list[int]] = [[] for _ in range(n)]     # transfers of each rank's latest step

    def step(self, transfers) -> None:
        """transfers: (src, dst, first chunk, chunks, kind), all running at the same time."""
        if not transfers:
            return
        g = self.b.next_group()
        made = []
        for src, dst, chunk, count, kind in transfers:
            deps = sorted(set(self.ready[src] + self.ready[dst]))
            made.append((src, dst, self.b.op(src=self.node[src], dst=self.node[dst], schunk=self.node[chunk],
                                             nchunks=count, group=g, kind=kind, deps=deps)))
        involved: dict[int, list[int]] = {}
        for src, dst, t in made:
            involved.setdefault(src, []).append(t)
            involved.setdefault(dst, []).append(t)
        for r, ts in involved.items():
            self.ready[r] = ts
