"""Ring: multi-channel, chunked and pipelined (NCCL's ring).

AllReduce = ring ReduceScatter (N-1 steps) then ring AllGather (N-1 steps).
Each channel is its own ring over 1/C of the data; channel c runs clockwise
when c is even and counter-clockwise when odd, so two channels use both
directions of a bidirectional link. Each step's piece is cut into P chunks
that a channel sends in order; chunk p of step s leaves rank r once chunk p
of step s-1 has arrived there (the pipeline). Wave w groups chunk p of step
w - p for every p: those leave a rank at the same time and share its link,
so a pipelined ring pays (2(N-1) + P - 1) alphas and the same bandwidth term.

Broadcast and Reduce are a pipelined chain from (to) the root.

Alpha-beta (switch, P = 1, any C): AllReduce 2(N-1)(a + S/(N B)); AllGather and
ReduceScatter (N-1)(a + S/(N B)); Broadcast (N-2+P)(a + S/(P B)) -- docs/model.md.
"""

from __future__ import annotations

from dataclasses import dataclass

from hcclsim.schedule import OUT, PUT, PUT_REDUCE, Layout, ScheduleBuilder, const, order, rank_of, rot
from hcclsim.schedule import collectives as C
from hcclsim.schedule.algorithm import Algorithm, Problem, auto_chunks, opt, register


@dataclass(frozen=True)
class RingOptions:
    channels: int = opt(0, "rings run side by side, alternating direction (0: 2 where links are "
                           "bidirectional point-to-point -- ring, full_mesh, torus2d -- else 1)")
    chunks: int = opt(0, "pipelined chunks per step (0: 1 for AllReduce/AllGather/ReduceScatter; "
                         "Broadcast/Reduce one per chunk_size bytes)")
    chunk_size: int = opt(128 << 10, "bytes per pipelined chunk for Broadcast/Reduce when chunks=0")
    max_chunks: int = opt(64, "upper bound on automatic chunks")

    def __post_init__(self):
        if self.channels < 0 or self.chunks < 0 or self.chunk_size < 1 or self.max_chunks < 1:
            raise ValueError("channels and chunks must be >= 0, chunk_size and max_chunks >= 1")


@register
class Ring(Algorithm):
    name = "ring"
    summary = "multi-channel pipelined ring (NCCL-like); bandwidth-optimal, 2(N-1) latency steps"
    collectives = (C.ALL_REDUCE, C.ALL_GATHER, C.REDUCE_SCATTER, C.BROADCAST, C.REDUCE)
    requires = "any topology, any rank count"
    Options = RingOptions

    def _channels(self, problem: Problem) -> int:
        if self.options.channels:
            return self.options.channels
        return 2 if problem.topology.kind in ("ring", "full_mesh", "torus2d") else 1

    def structure_key(self, problem, sizing, dtype_size):
        if self.options.chunks:
            return self.options.chunks
        if problem.collective in (C.BROADCAST, C.REDUCE):
            return auto_chunks(sizing.size_bytes, self.options.chunk_size, self.options.max_chunks)
        return 1

    def compile(self, problem: Problem, key):
        n, coll = problem.nranks, problem.collective
        chans, P = self._channels(problem), int(key)
        if coll in (C.BROADCAST, C.REDUCE):
            return _chain(problem, self.label, P)
        k = chans * P
        layout = Layout(C.nblocks(coll, n), n * k if coll == C.ALL_REDUCE else k)
        b = ScheduleBuilder(coll, self.label, n, (1, n), layout)
        phases = {C.ALL_REDUCE: ("rs", "ag"), C.REDUCE_SCATTER: ("rs",), C.ALL_GATHER: ("ag",)}[coll]
        steps = [(ph, s) for ph in phases for s in range(n - 1)]
        tid: dict[tuple[int, int, int], int] = {}   # (step index, chunk, channel) -> template
        for w in range(len(steps) + P - 1):         # wave w: chunk p of step w - p, for every p
            g = b.next_group()
            for p in range(P):
                s_idx = w - p
                if not 0 <= s_idx < len(steps):
                    continue
                ph, s = steps[s_idx]
                for c in range(chans):
                    d = 1 if c % 2 == 0 else -1
                    offset = -d * (s + 1) if ph == "rs" else -d * s     # block sent by rank j: (j + offset) mod n
                    chunk = rot(1, offset, n, weight=k, base=c * P + p)
                    deps = []
                    if s_idx > 0:
                        up = tid[(s_idx - 1, p, c)]
                        deps.append((up, 0, 0, -d))                    # the chunk arrived from my upstream
                        deps.append(order(up))                         # my own previous send of it has left
                    if p > 0:
                        deps.append(order(tid[(s_idx, p - 1, c)]))     # the channel sends a step's chunks in order
                    tid[(s_idx, p, c)] = b.op(src=rank_of(1, n), dst=rank_of(1, n, 0, d), schunk=chunk, group=g,
                                              inst=(1, n), kind=PUT_REDUCE if ph == "rs" else PUT, chan=c,
                                              deps=deps)
        return b.build()


def _chain(problem: Problem, label: str, P: int):
    """Pipelined chain: Broadcast root -> root+1 -> ... ; Reduce root+1 -> ... -> root."""
    n, root, coll = problem.nranks, problem.root, problem.collective
    b = ScheduleBuilder(coll, label, n, (1, n), Layout(1, P), root=root)
    first = root if coll == C.BROADCAST else root + 1
    kind = PUT if coll == C.BROADCAST else PUT_REDUCE
    tid: dict[tuple[int, int], int] = {}
    for w in range(n - 1 + P - 1):           # wave w: hop h carries chunk w - h
        g = None
        for h in range(n - 1):
            p = w - h
            if not 0 <= p < P:
                continue
            g = b.next_group() if g is None else g
            deps = [tid[(h - 1, p)]] if h > 0 else []
            if p > 0:
                deps.append(tid[(h, p - 1)])
            src, dst = (first + h) % n, (first + h + 1) % n
            tid[(h, p)] = b.op(src=const(src), dst=const(dst), schunk=const(p), group=g, kind=kind,
                               sbuf=OUT, dbuf=OUT, deps=deps)
    return b.build()
