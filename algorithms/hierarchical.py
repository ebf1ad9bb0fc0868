"""Hierarchical (two-tier) collectives on D scale-up domains of L ranks (rank = d*L + l).

Scale-up phases run inside every domain at once (along l), scale-out phases on
every *rail* at once (the D ranks with the same l, one per domain), each on
1/L of the data, so all L NICs of a domain work in parallel:

  AllReduce      intra reduce-scatter -> inter allreduce (RS + AG) of the 1/L piece -> intra all-gather
  ReduceScatter  intra reduce-scatter -> inter reduce-scatter
  AllGather      inter all-gather -> intra all-gather
  AllToAll       intra exchange to the rank on the destination's rail (staged in TMP) -> inter exchange
  AllToAllv      the same with a traffic matrix's per-pair sizes (_all_to_allv: explicit transfers)
  Broadcast      scatter in the root's domain -> scatter + all-gather per rail -> intra all-gather
  Reduce         intra reduce-scatter -> reduce-scatter + gather per rail -> gather in the root's domain

Options: intra = ring | direct | in_switch, inter = ring | direct | in_switch. intra=auto:
AllToAll direct; else in_switch where the scale-up switch reduces *and* the
alpha-beta cost of its phase (below) is lower than the ring's at this size, else
ring. For AllToAll, "ring" is a pairwise exchange in n-1 steps, "direct" all peers
at once. The root's scatter/gather phases of Broadcast/Reduce are always direct.
channels: rings side by side in the intra ring phases, alternating direction
(default 2 on a ring or full_mesh scale-up, whose links are point-to-point, else 1).
inter=in_switch is CollNet / SHARP (NCCL v2.28.9 src/device/all_reduce.h CollNetDirect: a node's data
scattered to its NIC heads, each head's shard reduced in the network and broadcast back): rail switch l
(scale_out.in_switch_reduce) reduces rail l, returning the result to every rank of the rail, the sender
included; AllReduce's two inter phases become one in-network all-reduce of the row (_phases.switch_ar).
intra=direct is CollNetDirect; CollNetChain's chain inside a node moves the bytes of intra=ring.
chunks: the in-switch phases' pipeline depth Q (default ceil(size / chunk_size)
in 1..max_chunks, and at most 4096 // (L-1): the phase has Q L templates).
pipeline=on (AllReduce, ReduceScatter, AllGather): the data is cut into Q such chunks and
the phases run chunk by chunk as one pipeline (_phases.Pipeline): chunk p is in the
scale-out phase while chunk p+1 is in the scale-up one, so the time tends to the slower
tier's instead of the sum below; off (default): one after another, as the formulas state.

Alpha-beta, contention-free, S bytes, P = S/L the piece of an intra phase, a_up / a_out
the path latencies of one scale-up / scale-out hop pair, B_up / B_out the per-rank
bandwidths, ring/ring, one channel:

  AllReduce      2(L-1)(a_up + S/(L B_up)) + 2(D-1)(a_out + S/(L D B_out))
  ReduceScatter, AllGather   (L-1)(a_up + S/(L B_up)) + (D-1)(a_out + S/(N B_out))
  AllToAll (default: intra direct, inter ring)   a_up + (L-1)S/(L B_up) + (D-1)(a_out + S/(D B_out))
  Broadcast, Reduce   a_up + (L-1)S/(L B_up) + a_out + (D-1)S/(N B_out)        (root's scatter / gather)
                      + (D-1)(a_out + S/(N B_out)) + (L-1)(a_up + S/(L B_up))

inter=in_switch (h one rail hop, Q parts): AllReduce's inter phases 2h + P/B_out + P/(Q B_out);
ReduceScatter, AllGather 2h + P/B_out + S/(N Q B_out).

Intra phase replacements for (L-1)(a_up + P/B_up): C ring channels on a ring / full_mesh
scale-up (a_up one hop) (L-1)(a_up + P/(C B_up)); direct a_up + (L-1)P/B_up; in-switch
a_up + (L-1)P/B_up + P/(Q B_up) (rank -> switch -> rank, pipelined over Q parts: each link
streams its parts back to back, so the two hops' latency is paid once, not once per part).
The in-switch phase carries as many bytes on a rank's busiest link as the ring does, plus
the pipeline fill P/(Q B_up), so it wins only on latency, (L-2) a_up against that fill: at
zero latency (or L = 2) the ring is always faster (auto then keeps the ring); with L = 8,
400 GB/s and a_up = 1 us it wins while a part is under 2.4 MB (1 GiB AllReduce: 64 parts of
2 MiB). On a fat tree each phase's bandwidth term is also bounded by the leaf uplinks: all
L rails of a domain leave its leaf at once, so oversubscription os slows the inter phases by
os when a leaf is one domain.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from hcclsim.algorithms._phases import (
    Grid,
    Pieces,
    Pipeline,
    direct_ag,
    direct_rs,
    domain_switch,
    everything,
    exchange,
    rail_switch,
    rail_switches,
    ring_ag,
    ring_rs,
    switch_ag,
    switch_ar,
    switch_reduces,
    switch_rs,
)

from hcclsim.schedule import DATA, IN, OUT, PUT, TMP, Affine, Layout, ScheduleBuilder, const, rot
from hcclsim.schedule import collectives as C
from hcclsim.schedule.algorithm import Algorithm, Problem, auto_chunks, opt, register

INTRA = ("auto", "ring", "direct", "in_switch")
INTER = ("ring", "direct", "in_switch")
PIPELINE = ("off", "on")
TEMPLATE_BUDGET = 4096     # automatic chunks keep an in-switch phase's Q (L-1) templates under this


@dataclass(frozen=True)
class HierarchicalOptions:
    intra: str = opt("auto", "scale-up phases: ring, direct or in_switch (auto: in_switch where the "
                             "scale-up switch reduces and its alpha-beta cost at this size is below the "
                             "ring's, else ring; all_to_all: direct)")
    inter: str = opt("ring", "scale-out phases, one rank per domain on each rail: ring, direct or in_switch "
                             "(CollNet/SHARP: the rail's switch reduces and multicasts; needs "
                             "scale_out.in_switch_reduce)")
    channels: int = opt(0, "rings side by side in the intra ring phases, alternating direction (0: 2 on a "
                           "ring or full_mesh scale-up, else 1)")
    chunks: int = opt(0, "pipeline depth of the in-switch phases, scale-up and scale-out (0: one per "
                         "chunk_size bytes, between 1 and max_chunks)")
    chunk_size: int = opt(32 << 10, "bytes per in-switch chunk when chunks=0 (as in_switch)")
    max_chunks: int = opt(64, "upper bound on automatic chunks")
    pipeline: str = opt("off", "on: the phases run chunk by chunk as one pipeline (chunks as above; chunk p in "
                               "the scale-out phase while chunk p+1 is in the scale-up one); off: one after "
                               "another (all_reduce, reduce_scatter, all_gather)")

    def __post_init__(self):
        if self.channels < 0 or self.chunks < 0 or self.chunk_size < 1 or self.max_chunks < 1:
            raise ValueError("channels and chunks must be >= 0, chunk_size and max_chunks >= 1")
        if self.pipeline not in PIPELINE:
            raise ValueError(f"pipeline must be one of {', '.join(PIPELINE)}, got {self.pipeline!r}")
        if self.intra not in INTRA:
            raise ValueError(f"intra must be one of {', '.join(INTRA)}, got {self.intra!r}")
        if self.inter not in INTER:
            raise ValueError(f"inter must be one of {', '.join(INTER)}, got {self.inter!r}")


@register
class Hierarchical(Algorithm):
    name = "hierarchical"
    summary = "two-tier: scale-up phases inside each domain, scale-out phases on every rail in parallel"
    collectives = (C.ALL_REDUCE, C.REDUCE_SCATTER, C.ALL_GATHER, C.ALL_TO_ALL, C.BROADCAST, C.REDUCE, C.ALL_TO_ALLV)
    requires = "a two-tier topology (kind = hierarchical)"
    Options = HierarchicalOptions

    def why_not(self, problem: Problem) -> str | None:
        topo = problem.topology
        if topo.domains <= 1:
            return "needs a two-tier topology (kind = hierarchical)"
        if problem.collective == C.ALL_TO_ALLV and (self.options.intra not in ("auto", "direct")
                                                   or self.options.inter not in ("ring", "direct")
                                                   or self.options.pipeline == "on"):
            return "all_to_allv runs intra=direct (or auto) with inter=ring or direct, pipeline=off"
        if self.options.pipeline == "on" and problem.collective not in (C.ALL_REDUCE, C.REDUCE_SCATTER,
                                                                         C.ALL_GATHER):
            return f"pipeline=on pipelines all_reduce, reduce_scatter and all_gather, not {problem.collective}"
        if self.options.intra == "in_switch":
            if problem.collective == C.ALL_TO_ALL:
                return "intra=in_switch: all_to_all has nothing for a switch to reduce or multicast"
            if not switch_reduces(topo):
                return "intra=in_switch needs a scale-up switch that reduces (scale_up.in_switch_reduce = true)"
        if self.options.inter == "in_switch":
            if problem.collective == C.ALL_TO_ALL:
                return "inter=in_switch: all_to_all has nothing for a switch to reduce or multicast"
            if rail_switches(topo) is None:
                return ("inter=in_switch needs rail switches that reduce (scale_out.in_switch_reduce = true on a "
                        "rail scale-out)")
        return None

    def _channels(self, problem: Problem) -> int:
        if self.options.channels:
            return self.options.channels
        return 2 if problem.topology.tiers[0].kind in ("ring", "full_mesh") else 1

    def _chunks(self, problem: Problem, size: int) -> int:
        if self.options.chunks:
            return self.options.chunks
        cap = max(1, TEMPLATE_BUDGET // max(1, problem.topology.local - 1))
        return min(auto_chunks(size, self.options.chunk_size, self.options.max_chunks), cap)

    def _intra(self, problem: Problem, size: int) -> str:
        choice = self.options.intra
        if choice != "auto":
            return choice
        if problem.collective == C.ALL_TO_ALL:
            return "direct"
        topo = problem.topology
        if not switch_reduces(topo) or topo.local == 1:
            return "ring"
        # one intra phase on pieces of P = size/L bytes (all collectives move a row of S/L per rank);
        # the in-switch phase streams its Q parts back to back, so it pays the up and down hops once
        L, Q, B, n = topo.local, self._chunks(problem, size), topo.tiers[0].bandwidth, topo.nranks
        P, a = size / L, topo.path_latency(0, 1)
        in_switch = topo.path_latency(0, n) + topo.path_latency(n, 0) + (L - 1) * P / B + P / (Q * B)
        ring = (L - 1) * (a + P / B)
        return "in_switch" if in_switch < ring else "ring"

    def structure_key(self, problem, sizing, dtype_size):
        """(intra, K), or (intra, K, Q) with pipeline=on: the intra phases' kind, the chunks of a
        sub-piece and the pipeline's chunks (an in-switch phase then takes one part per chunk: the
        pipeline streams them). K: the intra phases' parts (in-switch pipeline parts, ring channels,
        or 1), times the scale-out in-switch phase's parts Q unless intra=in_switch already cuts Q."""
        if problem.collective == C.ALL_TO_ALLV:
            return sizing.traffic
        intra = self._intra(problem, sizing.size_bytes)
        pipelined = self.options.pipeline == "on"
        Q = self._chunks(problem, sizing.size_bytes)
        if problem.collective == C.ALL_TO_ALL or problem.topology.local == 1:
            K = 1
        else:
            K = {"in_switch": 1 if pipelined else Q, "ring": self._channels(problem)}.get(intra, 1)
        if self.options.inter == "in_switch" and not pipelined and (intra != "in_switch" or K == 1):
            K *= Q
        return (intra, K, Q) if pipelined else (intra, K)

    def parts(self, problem: Problem, key) -> tuple[int, int]:
        """(intra parts, inter parts) of a structure key: how the phases cut a sub-piece of K chunks."""
        intra, K, *pipelined = key
        if self.options.inter != "in_switch" or pipelined:
            return K, 1
        if intra == "ring" and problem.topology.local > 1:
            return self._channels(problem), K // self._channels(problem)
        return (K if intra == "in_switch" else 1), K

    def compile(self, problem: Problem, key):
        topo, coll = problem.topology, problem.collective
        D, L, n = topo.domains, topo.local, problem.nranks
        if coll == C.ALL_TO_ALLV:
            return _all_to_allv(problem, self.label, key or C.default_traffic(coll, n), self.options.inter == "ring")
        if key is None:
            key = self.structure_key(problem, C.sizing(coll, 0, 4, n), 4)
        intra, K, *pipelined = key
        Q = pipelined[0] if pipelined else 1
        inter = self.options.inter
        parts = self.parts(problem, key)
        blocks = coll in (C.REDUCE_SCATTER, C.ALL_GATHER, C.ALL_TO_ALL)
        # sub-piece (l, d) of pipeline chunk p is K chunks: chunks p*K.. of block d*L + l of a per-rank
        # layout, or from chunk p*L*D*K + (l*D + d)*K of one buffer (so a row l, and each of its K parts,
        # is contiguous there); the pipeline moves chunk 0's templates to chunk p
        layout = Layout(n, Q * K) if blocks else Layout(1, Q * L * D * K)
        nnodes = topo.nnodes if inter == "in_switch" else n + D if intra == "in_switch" else n
        b = ScheduleBuilder(coll, self.label, n, (D, L), layout, nnodes=nnodes, root=problem.root)
        b.notes.update(intra=intra, inter=inter, parts=K, chunks=Q)
        g = Grid(D, L, wl=Q * K, wd=L * Q * K, q=K) if blocks else Grid(D, L, wl=D * K, wd=K, q=K)
        pipe = Pipeline(b, Q, K if blocks else L * D * K) if pipelined else None
        _phases_of(pipe or b, g, coll, intra, inter, parts, problem.root, rail_switches(topo))
        if pipe:
            pipe.emit()
        return b.build()


def _phases_of(b, g: Grid, coll: str, intra: str, inter: str, parts: tuple[int, int], root: int,
               rail0: int | None) -> None:
    """The collective's phases on the data of grid g (b: the builder, or one chunk of a pipeline);
    parts: the intra and inter phases' parts of a sub-piece; rail0: rail 0's reducing switch (inter=in_switch)."""
    n = g.D * g.L
    K, Q = parts
    rows, cells = Pieces(g, "l", span=True), Pieces(g, "d", span=False)

    def up_rs(entry):
        if intra == "in_switch":
            return switch_rs(b, rows, entry, domain_switch(g, n), K)
        return ring_rs(b, rows, entry, K) if intra == "ring" else direct_rs(b, rows, entry)

    def up_ag(entry):
        if intra == "in_switch":
            return switch_ag(b, rows, entry, domain_switch(g, n), K)
        return ring_ag(b, rows, entry, K) if intra == "ring" else direct_ag(b, rows, entry)

    # the scale-out in-switch phases run as SHARP does: every rank's whole piece goes into the rail switch,
    # which returns the result to every member, the sender included
    def out_rs(b, pcs, entry):
        if inter == "in_switch":
            return switch_rs(b, pcs, entry, rail_switch(g, rail0), Q, own=True)
        return (ring_rs if inter == "ring" else direct_rs)(b, pcs, entry)

    def out_ag(b, pcs, entry):
        if inter == "in_switch":
            return switch_ag(b, pcs, entry, rail_switch(g, rail0), Q, own=True)
        return (ring_ag if inter == "ring" else direct_ag)(b, pcs, entry)

    if coll == C.ALL_REDUCE and inter == "in_switch":      # CollNet: the row reduced in its rail's switch
        up_ag(switch_ar(b, rows, "d", up_rs([]), rail_switch(g, rail0), Q))
    elif coll == C.ALL_REDUCE:
        up_ag(out_ag(b, cells, out_rs(b, cells, up_rs([]))))
    elif coll == C.REDUCE_SCATTER:
        out_rs(b, cells, up_rs([]))
    elif coll == C.ALL_GATHER:
        up_ag(out_ag(b, cells, []))
    elif coll == C.ALL_TO_ALL:
        _all_to_all(b, g, intra == "ring", inter == "ring")
    elif coll == C.BROADCAST:
        up_ag(out_ag(b, cells, _scatter(b, g, root)))
    else:
        _gather(b, g, root, out_rs(b, cells, up_rs([])))


def _all_to_all(b: ScheduleBuilder, g: Grid, intra_pairwise: bool, inter_pairwise: bool) -> None:
    """Rank (d, l) first hands rank (d, l') everything bound for rail l' (IN blocks d'*L + l', staged
    at TMP blocks d'*L + l), then rank (d, l') sends TMP blocks d'*L .. d'*L+L-1 to (d', l') at OUT
    blocks d*L .. d*L+L-1."""
    D, L = g.D, g.L
    strided = {"nchunks": 1, "nrun": D, "rstride": L} if D > 1 else {"nchunks": 1}
    entry = exchange(b, g, "l", [], lambda s: rot(1, s, L), lambda s: rot(1, 0, L), strided, IN, TMP,
                     intra_pairwise)
    exchange(b, g, "d", entry, lambda s: rot(0, s, D, L, i_coef=1), lambda s: rot(0, 0, D, L, i_coef=1),
             {"nchunks": L}, TMP, OUT, inter_pairwise)


def _all_to_allv(problem: Problem, label: str, traffic, pairwise: bool):
    """AllToAll's two phases with the traffic's per-pair sizes, one explicit transfer per piece (O(N^2)).

    Phase 1 (one group): rank (d, l') hands rank (d, l) its units for every rank on rail l: those for
    its own domain straight into (d, l)'s output, those for rank (d', l), d' != d, into (d, l)'s TMP at
    stage[(d, l), d', l'] (its own, l' = l, by a local copy). TMP holds, per domain d', the units from
    (d, 0), ..., (d, L-1) in order, which is also their order in (d', l)'s output, so phase 2 is one PUT
    per rail pair: (d, l) -> (d', l) once the L pieces for d' are staged; all at once, or pairwise
    (d' = d + s in step s, after the rank's previous PUT).
    """
    topo, units = problem.topology, traffic.units
    D, L, n = topo.domains, topo.local, problem.nranks
    # staged[v, d', l']: what rank v = (d, l) stages from (d, l') for (d', l), none for d' = d
    staged = units.reshape(D, L, D, L).transpose(0, 3, 2, 1).reshape(n, D, L).copy()
    staged[np.arange(n), np.arange(n) // L, :] = 0
    flat = staged.reshape(n, -1)
    stage = (np.cumsum(flat, axis=1) - flat).reshape(n, D, L)
    layout = Layout(max(traffic.chunks, int(flat.sum(axis=1).max())), 1)
    b = ScheduleBuilder(C.ALL_TO_ALLV, label, n, (D, L), layout, root=problem.root)
    b.notes.update(traffic=traffic, intra="direct", inter="ring" if pairwise else "direct")
    src, dst = np.divmod(np.arange(n * n), n)
    (sd, sl), (dd, dl) = np.divmod(src, L), np.divmod(dst, L)
    move = (units[src, dst] > 0) & (src != dst)
    g = b.next_group()
    home = move & (sd == dd)                    # straight to the destination, inside the domain
    s_, d_ = src[home], dst[home]
    b.ops(len(s_), src=Affine(c3=s_), dst=Affine(c3=d_), schunk=Affine(c3=traffic.send_offsets[s_, d_]),
          dchunk=Affine(c3=traffic.recv_offsets[d_, s_]), nchunks=units[s_, d_], group=g, sbuf=IN, dbuf=OUT)
    away = move & (sd != dd)                    # to the rank of my domain on the destination's rail
    s_, d_, v_ = src[away], dst[away], sd[away] * L + dl[away]
    ups = b.ops(len(s_), src=Affine(c3=s_), dst=Affine(c3=v_), schunk=Affine(c3=traffic.send_offsets[s_, d_]),
                dchunk=Affine(c3=stage[v_, dd[away], sl[away]]), nchunks=units[s_, d_], group=g, sbuf=IN, dbuf=TMP)
    # phase 2: one PUT per (v, d2) with something staged, in step order (d2 = d + step), then rank order
    key = (dd[away] - sd[away]) % D * n + v_
    order = np.argsort(key, kind="stable")
    sends, nfeed = np.unique(key[order], return_counts=True)
    if not len(sends):                                  # nothing leaves a domain
        return b.build()
    v, step = sends % n, sends // n
    d2 = (v // L + step) % D
    deps = [np.stack([ups[order], np.repeat(np.arange(len(sends)), nfeed)], 1)]      # (template, send)
    first = b.ntemplates
    if pairwise:                                        # after the rank's previous PUT
        by_rank = np.lexsort((step, v))
        later = by_rank[1:][v[by_rank[1:]] == v[by_rank[:-1]]]
        earlier = by_rank[:-1][v[by_rank[1:]] == v[by_rank[:-1]]]
        deps.append(np.stack([first + earlier, later], 1))
    deps = np.concatenate(deps)
    deps = deps[np.argsort(deps[:, 1], kind="stable")]
    steps = np.unique(step)
    groups = [b.next_group() for _ in (steps if pairwise else steps[:1])]
    group = np.asarray(groups)[np.searchsorted(steps, step)] if pairwise else groups[0]
    rows = np.zeros((len(deps), 5), np.int64)
    rows[:, 0], rows[:, 4] = deps[:, 0], DATA           # DEP_SHIFT (0, 0): the same (only) instance
    b.ops(len(sends), src=Affine(c3=v), dst=Affine(c3=d2 * L + v % L), schunk=Affine(c3=stage[v, d2, 0]),
          dchunk=Affine(c3=traffic.recv_offsets[d2 * L + v % L, v // L * L]), nchunks=staged[v, d2].sum(axis=1),
          group=group, sbuf=TMP, dbuf=OUT, ndeps=np.bincount(deps[:, 1], minlength=len(sends)), deps=rows)
    return b.build()


def _scatter(b: ScheduleBuilder, g: Grid, root: int) -> list:
    """Broadcast's first half: the root hands row l to rank (d0, l), which hands sub-piece (l, d) to
    rank (d, l). Returns deps meaning 'every rank holds its sub-piece'."""
    D, L = g.D, g.L
    d0, l0 = divmod(root, L)
    ts = []
    if L > 1:   # instance j: rank (d0, l0+1+j), j < L-1
        ts.append(b.op(src=const(root), dst=rot(1, l0 + 1, L, 1, base=d0 * L), schunk=rot(1, l0 + 1, L, g.wl),
                       nchunks=D * g.q, group=b.next_group(), inst=(1, L - 1), kind=PUT, sbuf=OUT, dbuf=OUT))
    # instance (i, j): rank (d0, j) -> rank (d0+1+i, j), i < D-1
    ts.append(b.op(src=rot(1, 0, L, 1, base=d0 * L), dst=_other_domain(d0, D, L, L, 1),
                   schunk=_other_domain(d0, D, L, g.wd, g.wl), nchunks=g.q, group=b.next_group(),
                   inst=(D - 1, L), kind=PUT, sbuf=OUT, dbuf=OUT, deps=everything(ts)))
    return everything(ts[-1:])


def _gather(b: ScheduleBuilder, g: Grid, root: int, entry) -> None:
    """Reduce's last half: rank (d, l) holds the reduced sub-piece (l, d); it goes to rank (d0, l),
    which then holds row l and hands it to the root."""
    D, L = g.D, g.L
    d0, l0 = divmod(root, L)
    deps = everything(sorted({t for t, *_ in entry}))
    t = b.op(src=_other_domain(d0, D, L, L, 1), dst=rot(1, 0, L, 1, base=d0 * L),
             schunk=_other_domain(d0, D, L, g.wd, g.wl), nchunks=g.q, group=b.next_group(), inst=(D - 1, L),
             kind=PUT, sbuf=OUT, dbuf=OUT, deps=deps)
    if L > 1:
        b.op(src=rot(1, l0 + 1, L, 1, base=d0 * L), dst=const(root), schunk=rot(1, l0 + 1, L, g.wl),
             nchunks=D * g.q, group=b.next_group(), inst=(1, L - 1), kind=PUT, sbuf=OUT, dbuf=OUT,
             deps=everything([t]))


def _other_domain(d0: int, D: int, L: int, wd: int, wl: int) -> Affine:
    """((d0 + 1 + i) mod D) * wd + j * wl: something of domain d0+1+i on rail j."""
    return Affine(a1=1, c1=(d0 + 1) % D, m1=D, w1=wd, b2=1, m2=L, w2=wl)
