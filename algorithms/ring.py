"""Ring: multi-channel, chunked and pipelined (NCCL's ring).

AllReduce = ring ReduceScatter (N-1 steps) then ring AllGather (N-1 steps).
Each channel is its own ring over 1/C of the data; channel c runs clockwise
when c is even and counter-clockwise when odd, so two channels use both
directions of a bidirectional link. Each step's piece is cut into P chunks
that a channel sends in order; chunk p of step s leaves rank r once chunk p
of step s-1 has arrived there (the pipeline). Wave w groups chunk p of step
w - p for every p: those leave a rank at the same time and share its link,
so a pipelined ring pays (2(N-1) + P - 1) alphas and the same bandwidth term.

Rail-aligned rings (``rails``, on by default on two-tier fabrics): ring
position (i, j) -- domain i, j-th rank of the ring inside it -- is rank
i*L + ((j + o - i) mod L) for the channel's order o, so the ring enters domain
i at local o - i, leaves it from local o - i - 1 and crosses to the same local
(the same rail) of domain i + 1; C = L channels spread the scale-out traffic
over every NIC (NCCL's one ring per NIC, src/graph/search.cc). The flat ring
(``rails=off``) on two tiers is laid out by position too (position (i, j) is rank
i*L + j): a template per position in a domain over the D domains, whose step is a
symmetry of the tiers, so the analytic engine times one domain (docs/model.md).

Mesh rings (``permute``, on by default on a full mesh): channel c runs on the
Hamiltonian cycle c of mesh_cycles(N), cycles that share no link, so the N-1
channels use every link of every rank once (RCCL's rings over the MI300X xGMI
mesh, src/graph/rome_models.cc) instead of the one link each way a rank-order
ring uses. On a graph wiring (also on by default, when the wiring has a Hamiltonian
cycle) the cycles are hcclsim.network.wiring.ring_cycles: within each link's count,
both ways round (NCCL's rings over a DGX-1's NVLink cube mesh).

Broadcast and Reduce are a pipelined chain from (to) the root. Where the endpoint models a library's
protocol (``chain``: stream) every rank forwards what streams in (a STREAM dependency: it starts once the
first byte is in and pays its step latency once), as NCCL's chain does: each channel keeps up to
NCCL_STEPS steps in flight and the channels' steps interleave on the links, so the chain is full after a
latency per hop, not after a store-and-forward chunk per hop (NCCL's cost model prices it the same way:
one step latency and S over the bus bandwidth, src/graph/tuning.cc:363-366, v2.28.9). Elsewhere (store) a
rank forwards a chunk once it is in.

Alpha-beta (switch, P = 1, any C): AllReduce 2(N-1)(a + S/(N B)); AllGather and
ReduceScatter (N-1)(a + S/(N B)); Broadcast (N-2+P)(a + S/(P B)) -- docs/model.md -- and streamed
(N-1) a + S/B.
Rail rings on a rail fabric: AllReduce 2(N-1) S/(N L B_out) + a_out while the
NICs are the bottleneck; mesh rings on a full mesh: AllReduce 2(N-1)(a + S/(N C B)),
C = len(mesh_cycles(N)) (N-1 = 7 on 8 ranks); on a graph wiring the same with B the
slowest link's bandwidth over the rings it carries -- docs/algorithms.md (ring, closed forms).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from itertools import pairwise
from math import gcd

import numpy as np

from hcclsim.network.wiring import ring_cycles, wiring_of
from hcclsim.schedule import (
    ORDER,
    OUT,
    PUT,
    PUT_REDUCE,
    Affine,
    Layout,
    ScheduleBuilder,
    const,
    rank_of,
    rot,
    stream,
)
from hcclsim.schedule import collectives as C
from hcclsim.schedule.algorithm import Algorithm, Problem, auto_chunks, opt, register

RAILS = ("auto", "on", "off")
PERMUTE = RAILS
CHAIN = ("auto", "stream", "store")


@dataclass(frozen=True)
class RingOptions:
    channels: int = opt(0, "rings run side by side, alternating direction (0: L, one per NIC, with rail "
                           "rings; one per cycle with mesh rings; 2 where links are bidirectional "
                           "point-to-point -- ring, full_mesh, torus2d, graph -- else 1)")
    chunks: int = opt(0, "pipelined chunks per step (0: 1 for AllReduce/AllGather/ReduceScatter; "
                         "Broadcast/Reduce one per chunk_size bytes)")
    chunk_size: int = opt(128 << 10, "bytes per pipelined chunk for Broadcast/Reduce when chunks=0")
    max_chunks: int = opt(64, "upper bound on automatic chunks")
    chain: str = opt("auto", "Broadcast/Reduce: stream (each rank forwards what streams in, paying its step "
                             "latency once), store (each chunk forwarded once it is in), or auto (stream where "
                             "the endpoint models a library's protocol, else store)")
    rails: str = opt("auto", "lay each ring one NIC (rail) apart, entering and leaving every domain through "
                             "a different NIC per channel: on, off, or auto (on for hierarchical topologies "
                             "with several domains of several ranks)")
    permute: str = opt("auto", "lay channel c's ring on Hamiltonian cycle c of a set that shares no link "
                               "(mesh_cycles; on a graph wiring ring_cycles, within each link's count), so "
                               "the channels use every link: on, off, or auto (on for full_mesh topologies "
                               "and graph wirings with a Hamiltonian cycle)")

    def __post_init__(self):
        if self.channels < 0 or self.chunks < 0 or self.chunk_size < 1 or self.max_chunks < 1:
            raise ValueError("channels and chunks must be >= 0, chunk_size and max_chunks >= 1")
        if self.rails not in RAILS:
            raise ValueError(f"rails must be one of {', '.join(RAILS)}, not {self.rails!r}")
        if self.permute not in PERMUTE:
            raise ValueError(f"permute must be one of {', '.join(PERMUTE)}, not {self.permute!r}")
        if self.chain not in CHAIN:
            raise ValueError(f"chain must be one of {', '.join(CHAIN)}, not {self.chain!r}")


@register
class Ring(Algorithm):
    name = "ring"
    summary = "multi-channel pipelined ring (NCCL-like); bandwidth-optimal, 2(N-1) latency steps"
    collectives = (C.ALL_REDUCE, C.ALL_GATHER, C.REDUCE_SCATTER, C.BROADCAST, C.REDUCE)
    requires = "any topology, any rank count (rails=on: a hierarchical topology; permute=on: a flat one)"
    Options = RingOptions

    def _rails(self, problem: Problem) -> bool:
        topo = problem.topology
        if self.options.rails == "auto":
            return topo.kind == "hierarchical" and topo.domains > 1 and topo.local > 1
        return self.options.rails == "on"

    def _permute(self, problem: Problem) -> bool:
        if self.options.permute == "auto":
            kind = problem.topology.kind
            return kind == "full_mesh" or kind == "graph" and bool(_cycles(problem.topology))
        return self.options.permute == "on"

    def why_not(self, problem: Problem) -> str | None:
        if self.options.rails == "on" and problem.topology.kind != "hierarchical":
            return f"rails=on needs a hierarchical topology (domains of ranks), not {problem.topology.kind!r}"
        if self.options.permute == "on" and problem.topology.kind == "hierarchical":
            return "permute=on lays rings over a flat topology's ranks, not over a hierarchical one (rails)"
        if self.options.permute == "on" and not _cycles(problem.topology):
            return "permute=on needs a Hamiltonian cycle of the links, and this wiring has none"
        return None

    def _channels(self, problem: Problem) -> int:
        if self.options.channels:
            return self.options.channels
        if self._rails(problem):
            return problem.topology.local
        if self._permute(problem):
            return len(_cycles(problem.topology))
        return 2 if problem.topology.kind in ("ring", "full_mesh", "torus2d", "graph") else 1

    def _streams(self, problem: Problem) -> bool:
        if self.options.chain == "auto":
            return problem.topology.endpoint.protocol != "none"
        return self.options.chain == "stream"

    def structure_key(self, problem, sizing, dtype_size):
        if self.options.chunks:
            return self.options.chunks
        if problem.collective in (C.BROADCAST, C.REDUCE) and not self._streams(problem):
            return auto_chunks(sizing.size_bytes, self.options.chunk_size, self.options.max_chunks)
        return 1

    def compile(self, problem: Problem, key):
        n, coll = problem.nranks, problem.collective
        chans, P = self._channels(problem), int(key)
        if coll in (C.BROADCAST, C.REDUCE):
            return _chain(problem, self.label, P, self._streams(problem))
        k = chans * P
        layout = Layout(C.nblocks(coll, n), n * k if coll == C.ALL_REDUCE else k)
        topo = problem.topology
        rails = self._rails(problem)
        if rails or topo.kind == "hierarchical" and topo.domains > 1 and topo.local > 1:
            # rings over ring positions, the D domains the instances: a domain step is a symmetry of the tiers
            # (of the rail rings' too, turning the rail); the flat ring is the rank order, position j of a domain
            # its j-th rank
            D, L = topo.domains, topo.local
            b = ScheduleBuilder(coll, self.label, n, (D, L), layout)
            channels = [rail_order(D, L, c) if rails else (0, 1 - 2 * (c % 2)) for c in range(chans)]
            _rings(b, coll, P, channels, L, (D, 1), *_rail_ends(D, L, k, rail_layout(D, L)[:2] if rails else (0, L - 1)))
            if rails:
                b.notes["rails"] = True
            return b.build()
        if self._permute(problem):
            b = ScheduleBuilder(coll, self.label, n, (1, n), layout)
            cycles = _cycles(topo)
            _rings(b, coll, P, [(c % len(cycles), 1) for c in range(chans)], n, (1, 1), *_mesh_ends(cycles, k))
            b.notes["permute"] = True
            return b.build()
        b = ScheduleBuilder(coll, self.label, n, (1, n), layout)
        _rings(b, coll, P, [(0, 1 - 2 * (c % 2)) for c in range(chans)], 1, (1, n), *_flat_ends(n, k))
        return b.build()


def _cycles(topo) -> list[tuple[int, ...]]:
    """The Hamiltonian cycles mesh rings run on: ring_cycles of a graph wiring, else mesh_cycles."""
    if topo.kind == "graph":
        return list(ring_cycles(topo.nranks, wiring_of(topo)))
    return mesh_cycles(topo.nranks)


def _rings(b: ScheduleBuilder, coll: str, P: int, channels: list[tuple[int, int]], J: int, inst: tuple[int, int],
           ends, upstream) -> None:
    """Every channel's ring, built as arrays: one template per (step, chunk, channel c, ring position j < J)
    (a flat ring on one tier: J = 1, its instances the ranks; on two tiers, rail rings or not: the L
    positions in a domain, instances the domains; mesh rings: the n positions), in wave order: wave w, one group, holds chunk p of step w - p
    for every p (the pipeline: a channel's chunks of one step leave in order, one step behind each other).

    channels[c] = (order, dir): channel c's ring (its order or cycle) and direction. ends(o, j, dir, back)
    -> (src, dst, block): who sends to whom and the block (weighted by the chunks per block) of the position
    ``back`` places behind: -dir*(s+1) in ReduceScatter step s, -dir*s in AllGather step s, the flat ring's
    rule by ring position. upstream(j, dir) -> (j', si, sj): the position and instance shift the chunk
    arrives from. A transfer waits for that arrival, for its own send of the chunk in the previous step to
    have left, and for the channel's previous chunk of the step to have left."""
    (rs, step), chans = _steps(coll, b.nranks), len(channels)
    pairs = np.argwhere(np.ones((len(step), P), bool))                      # (step index, chunk) ...
    pairs = pairs[np.lexsort((pairs[:, 1], pairs.sum(1)))]                  # ... by wave, then chunk
    slot = np.empty((len(step), P), np.int64)
    slot[pairs[:, 0], pairs[:, 1]] = np.arange(len(pairs))
    q, c, j = (x.ravel() for x in np.indices((len(pairs), chans, J)))
    s_idx, p = pairs[q, 0], pairs[q, 1]
    rs, step = rs[s_idx], step[s_idx]
    o, d = (np.array(x)[c] for x in zip(*channels))
    src, dst, block = ends(o, j, d, np.where(rs, -d * (step + 1), -d * step))

    def tid(s_idx, p, j):
        return (slot[s_idx, p] * chans + c) * J + j

    uj, si, sj = upstream(j, d)
    T = len(q)
    deps = np.zeros((T, 3, 5), np.int64)        # step 0 and chunk 0 index garbage here: `has` drops those
    deps[:, 0, 0], deps[:, 0, 2], deps[:, 0, 3] = tid(s_idx - 1, p, uj), si, sj
    deps[:, 1, 0], deps[:, 2, 0] = tid(s_idx - 1, p, j), tid(s_idx, p - 1, j)
    deps[:, 1:, 4] = ORDER
    has = np.stack([s_idx > 0, s_idx > 0, p > 0], 1)
    b.ops(T, src=src, dst=dst, schunk=replace(block, c3=block.c3 + c * P + p), group=s_idx + p, inst=inst,
          kind=np.where(rs, PUT_REDUCE, PUT), chan=c, ndeps=has.sum(1), deps=deps[has])


def _flat_ends(n: int, k: int):
    """The flat ring: instance j is rank j; it sends to j + dir the block of rank j + back."""
    def ends(o, j, d, back):
        return rank_of(1, n), rank_of(1, n, 0, d), rot(1, back, n, weight=k)
    return ends, lambda j, d: (j, 0, -d)


def _rail_ends(D: int, L: int, k: int, layout: tuple[int, int]):
    """Rings by position on the (D, L) grid, laid out as rail_rank: template position j of every domain i
    (the instance); upstream, position j - dir may sit in the previous or next domain."""
    def ends(o, j, d, back):
        return (rail_rank(D, L, o, j, 0, layout), rail_rank(D, L, o, j, d, layout),
                _scaled(rail_rank(D, L, o, j, back, layout), k))

    def upstream(j, d):
        di, uj = np.divmod(j - d, L)
        return uj, di, 0
    return ends, upstream


def _mesh_ends(cycles: list, k: int):
    """Mesh rings: position j of cycle o is rank cycles[o][j], every endpoint a constant."""
    cyc = np.array(cycles)
    n = cyc.shape[1]

    def ends(o, j, d, back):
        return (Affine(c3=cyc[o, j]), Affine(c3=cyc[o, (j + 1) % n]), Affine(c3=cyc[o, (j + back) % n] * k))
    return ends, lambda j, d: ((j - 1) % n, 0, 0)


def _steps(coll: str, n: int) -> tuple[np.ndarray, np.ndarray]:
    """(reduce, step) of every step in order: ReduceScatter steps 0..n-2 (reduce True), AllGather steps
    0..n-2."""
    phases = {C.ALL_REDUCE: (True, False), C.REDUCE_SCATTER: (True,), C.ALL_GATHER: (False,)}[coll]
    return np.repeat(phases, n - 1), np.tile(np.arange(n - 1), len(phases))


def rail_layout(D: int, L: int) -> tuple[int, int, bool]:
    """(a, e, paired): ring order o enters domain i at local o + a*i and leaves it from local o + a*i + e.

    Same rail at every boundary needs e = a (the exit's rail is the next domain's entry) and, for the
    wrap from domain D-1 to 0, D*a = 0 mod L; a = -L/gcd(D, L) (-1 when L divides D) is such a value
    unless gcd(D, L) = 1, where no a != 0 is: then a = 0, e = L-1 (every domain entered on rail o, left
    from o - 1, the boundary hop crossing to rail o over NVLink first, PXN). paired: channels 2m and
    2m+1 can run one ring in both directions with every NIC's uplink and downlink used once (L and
    gcd(D, L) even); otherwise every channel runs forward on its own order."""
    g = gcd(D, L)
    a = (-(L // g)) % L
    e = a if a else L - 1
    return a, e, L % 2 == 0 and g % 2 == 0 and a != 0


def rail_order(D: int, L: int, c: int) -> tuple[int, int]:
    """(order o, direction) of channel c's rail ring on D domains of L ranks.

    Paired (see rail_layout): pair m = c // 2 takes order o_m = 2q(m // q) + m % q with q = L/gcd(D, L),
    channel 2m forward, 2m+1 backward. At a boundary the forward ring of o leaves through rail o + a*i + e
    and enters through o + a*(i+1); the backward one the other way round on the same rail; the orders
    o_m and o_m + e (= o_m - q) never coincide, so the L channels use every NIC once each way.
    Otherwise channel c runs forward on order c mod L: entries o + a*i are distinct over o."""
    if not rail_layout(D, L)[2]:
        return c % L, 1
    q = L // gcd(D, L)
    m = (c // 2) % (L // 2)
    return 2 * q * (m // q) + m % q, 1 if c % 2 == 0 else -1


def _walk(L: int, e: int, j):
    """Local offset of the j-th rank a ring visits in a domain: 0, 1, ..., L-1 without e, then e."""
    return np.where(j == L - 1, e, j + (j >= e))


def rail_rank(D: int, L: int, o: int, j: int, shift: int = 0, layout: tuple[int, int] | None = None) -> Affine:
    """Rank at ring position i*L + j + shift, for every domain i (the instance), in ring order o:
    position (i', j') is rank i'*L + ((o + a*i' + walk(j')) mod L); D*a = 0 mod L keeps it affine in i
    across the wrap from domain D-1 to domain 0. layout: (a, e), rail_layout's unless given ((0, L-1), o = 0:
    the rank order)."""
    a, e = layout if layout is not None else rail_layout(D, L)[:2]
    di, dj = np.divmod(j + shift, L)
    return Affine(a1=1, c1=di % D, m1=D, w1=L, a2=a, c2=(o + a * di + _walk(L, e, dj)) % L, m2=L, w2=1)


def _scaled(a: Affine, weight: int) -> Affine:
    """a * weight (for a's with c3 = 0)."""
    return Affine(a.a1, a.b1, a.c1, a.m1, a.w1 * weight, a.a2, a.b2, a.c2, a.m2, a.w2 * weight, 0)


def mesh_cycles(n: int) -> list[tuple[int, ...]]:
    """Directed Hamiltonian cycles of the complete digraph on n ranks that share no link (arc): n-1 of them,
    every link once, for odd n and for n divisible by 4 from 8 on; n-2 otherwise (n = 4 and 6 have no n-1,
    Tillson 1980; n = 2 mod 4 is not constructed here). Ring position p of cycle c is rank cycles[c][p].

    Odd n = 2k+1 (1-rotational): ranks Z_2k and inf = 2k; cycle g = (inf, g+z_0, ..., g+z_{2k-1}) for g in
    Z_2k, z = 0, 1, -1, 2, -2, ..., k. z's steps +1, -2, +3, ... are every nonzero difference of Z_2k once,
    so the 2k translates use every link between Z_2k ranks once, inf -> g and g+k -> inf once each.
    Even n: that construction on n-1 ranks, rank n-1 (new) put inside one link a -> b of every cycle
    (a -> new -> b). For n = 2k+2 with k odd >= 3 the links taken out are those of the path
    R = 0, 1, 3, ..., 2k-1, inf, k+1, k+3, ..., 2k-2, 2, 4, ..., k-1, which visits every rank once and takes
    one link from each cycle (the cycle holding a -> b is g = a - z_t where b - a is z's step t; inf -> b is
    in cycle b, a -> inf in a - k: R's links land in cycles 0, the odd g, k-1, k+1, the other evens and k,
    each once), so (new, R) is the n-1-th cycle. Otherwise the link g -> g+1 of cycle g is taken out and
    not used again (n-2 cycles)."""
    if n <= 2:
        return [tuple(range(n))]
    if n % 2:
        k = (n - 1) // 2
        z = [0] + [v for t in range(1, k + 1) for v in ((t, -t) if t < k else (t,))]
        return [(2 * k, *((g + x) % (2 * k) for x in z)) for g in range(2 * k)]
    base, new, k = mesh_cycles(n - 1), n - 1, (n - 2) // 2
    path = [0, *range(1, 2 * k, 2), 2 * k, *range(k + 1, 2 * k - 1, 2), *range(2, k, 2)] if k % 2 and k > 1 else []
    cut = dict(pairwise(path)) if path else {g: (g + 1) % (2 * k) for g in range(2 * k)}
    out = []
    for cyc in base:
        p = next(i for i, r in enumerate(cyc) if cut.get(r) == cyc[(i + 1) % len(cyc)])
        out.append((*cyc[:p + 1], new, *cyc[p + 1:]))
    return out + [(new, *path)] if path else out


def _chain(problem: Problem, label: str, P: int, streams: bool):
    """Pipelined chain: Broadcast root -> root+1 -> ... ; Reduce root+1 -> ... -> root. streams: a rank
    forwards chunk p as it streams in (cut-through), else once it is in."""
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
            deps = [] if h == 0 else [stream(tid[(h - 1, p)]) if streams else tid[(h - 1, p)]]
            if p > 0:
                deps.append(tid[(h, p - 1)])
            src, dst = (first + h) % n, (first + h + 1) % n
            tid[(h, p)] = b.op(src=const(src), dst=const(dst), schunk=const(p), group=g, kind=kind,
                               sbuf=OUT, dbuf=OUT, deps=deps)
    return b.build()
