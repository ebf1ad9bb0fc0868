"""Direct collectives striped across the two tiers: a share of every piece goes through the NICs.

Inside one scale-up domain a rank has two ways to a rack-mate: its scale-up port (rank -> switch ->
rank) and its scale-out NIC (NIC -> the domain's leaf switch -> the peer's NIC). ``striped`` uses both at
once (issue 13; docs/algorithms.md, "striped"): AllGather and ReduceScatter as ``direct``
runs them (every rank PUTs the piece each peer needs straight to it), AllReduce as ``direct_twoshot``
(a striped ReduceScatter of 1/N pieces, then a striped AllGather), with every piece cut in two:

* 1-f of it over the scale-up switch, all N-1 PUTs at once (as direct);
* f of it through the NICs, in N-1 rounds, round k to the rank k places on (r -> r+k): a PUT into
  the leaf and the leaf's send on to the peer, which STREAM-depends on it (cut-through: the bytes go
  out as they come in, so a round costs the NIC path's latency once). A route from a rank to its leaf
  is the NIC's first hop, from the leaf to a rank the NIC's last (network/topology.py).

The leaf holds a round's bytes at the piece's own chunks (chunks elsewhere may differ in size), in one
of its three buffers. AllGather sends every peer the same bytes; a ReduceScatter's differ for every
pair, so there a round waits until the round that last used its slot has left the leaf, which the
checker needs to tell the pieces in flight apart. Where the two shares fit side by side twice (f <= 1/2)
the NIC share sits at the end of the piece in odd rounds and at its start in even ones, which doubles
the slots: a slot comes back every R = 6 rounds (3 when f > 1/2). That wait is the IR's, not the
hardware's (a switch forwards without holding bytes): it costs only where R-1 rounds are shorter than
the NIC's first hop (NIC shares of some tens of KiB), and ``nic=auto`` counts it.

Alpha-beta (o: issue overhead; a_u, a_o: the latency of the scale-up and the NIC path, two hops each;
h: the NIC's first hop; B_u, B_o: the paths' bandwidths; b: the bytes of one piece, S/N):

    T_up  = o + a_u + (N-1)(1-f) b / B_u                              (N-1 PUTs share the port)
    T_out = a_o + (N-1) c [+ floor((N-2)/R) max(0, h - (R-1) c)]     (N-1 rounds of c = o + f b / B_o
                                                                      on the NIC; [ReduceScatter's waits])

A step takes max(T_up, T_out) (f = 0: T_up, the direct schedule); AllReduce two steps. ``nic=auto``
takes the split that finishes first: T_up falls and T_out grows with f, so without the waits the best
f equalises them,

    f = ((N-1) b / B_u + o + a_u - a_o - (N-1) o) / ((N-1) b (1/B_u + 1/B_o)),

and with them it is where the time (convex for each R) stops falling, found by bisection over the K
chunks of a piece (Paths.best_chunks). For large pieces f -> B_o / (B_u + B_o) and busbw -> B_u + B_o,
for all three collectives (AllGather: (N-1)/N S / T with T = (N-1) b / (B_u + B_o); AllReduce: twice
the time, twice the factor). Small pieces favour the port, whose path is shorter: f = 0 below
(N-1) b = B_u (a_o - a_u) when o = 0.

Only inside one domain (why_not): across domains each rank's NIC already carries its own share of the
cross-domain bytes in these symmetric collectives, so a share sent through the scale-up fabric and a
peer's NIC would move bytes from one busy NIC to another equally busy one (the domain's L NICs bound the
cross-domain bytes either way), and striping the intra-domain pieces onto the NIC would add to the
bottleneck (f = 0: ``direct``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from hcclsim.network.topology import P_LEAF, Topology
from hcclsim.schedule import (
    DEP_SHIFT,
    IN,
    ORDER,
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
)
from hcclsim.schedule import collectives as C
from hcclsim.schedule.algorithm import Algorithm, Problem, opt, register

# Chunks per piece: the split's resolution, 1/1024 (an estimate of what is fine enough: rounding f to it
# costs at most 0.05 % / f of the NIC path, 0.25 % near f = 0.2); a power of two, so that a sweep's
# power-of-two sizes cut into equal chunks, which the analytic engine's one-instance path counts exactly.
K = 1024
SLOT_BUFFERS = (TMP, IN, OUT)       # the leaf's buffers, which hold the rounds' slots


def ends(m: int) -> int:
    """Where in a piece the NIC share sits: at its end, or (2m <= K: the two do not overlap) at its end and
    its start in turn, round k at end k mod 2, which doubles the leaf's slots per piece."""
    return 2 if 2 * m <= K else 1


def lag(m: int) -> int:
    """Rounds between two that use one slot of the leaf (a buffer and an end)."""
    return len(SLOT_BUFFERS) * ends(m)


def nic_start(m: int, k: int) -> int:
    """First chunk, within its piece, of round k's NIC share (the scale-up share is the rest)."""
    return K - m if k % ends(m) == 0 else 0


@dataclass(frozen=True)
class StripedOptions:
    nic: str = opt("auto", "share of every piece sent through the NICs: a fraction 0..1, or auto (the split "
                           "that finishes first)")

    def __post_init__(self):
        if self.nic == "auto":
            return
        try:
            f = float(self.nic)
        except ValueError:
            raise ValueError(f"nic expects a fraction 0..1 or auto, got {self.nic!r}") from None
        if not 0 <= f <= 1:
            raise ValueError(f"nic expects a fraction 0..1 or auto, got {self.nic!r}")


@dataclass(frozen=True)
class Step:
    """Every rank PUTs to every rank k places on: which piece (an Affine of the peer offset k), how,
    between which buffers. by_dst: the piece is the receiver's (ReduceScatter: what a pair sends is its
    own), else the sender's (AllGather: the same piece to every peer)."""

    by_dst: bool
    kind: int
    sbuf: int
    dbuf: int

    def piece(self, n: int, k: int) -> Affine:
        return rot(1, k if self.by_dst else 0, n, K)


def _steps(collective: str) -> list[Step]:
    scatter, gather = Step(True, PUT_REDUCE, IN, OUT), Step(False, PUT, IN, OUT)
    if collective == C.ALL_GATHER:
        return [gather]
    if collective == C.REDUCE_SCATTER:
        return [scatter]
    return [scatter, replace(gather, sbuf=OUT)]


@dataclass(frozen=True)
class Paths:
    """The two ways to a rack-mate, as the analytic engine times them: latencies (s), bandwidths (B/s)."""

    a_up: float         # rank -> scale-up switch -> rank
    b_up: float
    hop_out: float      # rank -> leaf (the NIC's first hop)
    a_out: float        # rank -> leaf -> rank
    b_out: float
    overhead: float     # per transfer a rank issues

    def t_up(self, n: int, piece_bytes: float, f: float) -> float:
        return self.overhead + self.a_up + (n - 1) * piece_bytes * (1 - f) / self.b_up

    def t_out(self, n: int, piece_bytes: float, m: int, by_dst: bool) -> float:
        c = self.overhead + m / K * piece_bytes / self.b_out            # one round on the NIC
        wait = (n - 2) // lag(m) * max(0.0, self.hop_out - (lag(m) - 1) * c) if by_dst else 0.0
        return self.a_out + (n - 1) * c + wait

    def time(self, n: int, piece_bytes: float, m: int, steps: list[Step]) -> float:
        """The steps one after another (module docstring), m of K chunks through the NICs."""
        up = self.t_up(n, piece_bytes, m / K)
        return sum(max(up, self.t_out(n, piece_bytes, m, st.by_dst)) if m else up for st in steps)

    def best_chunks(self, n: int, piece_bytes: float, steps: list[Step]) -> int:
        """m of K chunks of a piece through the NICs: the split that finishes first. Where the leaf's slots
        do not change (1 <= m <= K/2, K/2 < m <= K) the time is convex in m (a max of T_up, falling, and
        T_out, rising and convex), so its least is where it stops falling; m = 0 (no NIC path) is compared
        apart."""
        def least(lo, hi):
            while lo < hi:
                mid = (lo + hi) // 2
                rising = self.time(n, piece_bytes, mid + 1, steps) >= self.time(n, piece_bytes, mid, steps)
                lo, hi = (lo, mid) if rising else (mid + 1, hi)
            return lo

        candidates = (0, least(1, K // 2), least(K // 2 + 1, K))
        return min(candidates, key=lambda m: (self.time(n, piece_bytes, m, steps), m))


def leaf(topo: Topology) -> int:
    """Node id of domain 0's scale-out leaf: after the ranks and the scale-up switches."""
    return topo.nranks + topo.domains


def paths(topo: Topology) -> Paths:
    def lat(route):
        return float(topo.link_lat[route].sum())

    def bw(route):
        return float(topo.link_bw[route].min())

    up, nic = topo.route(0, 1), topo.route(0, leaf(topo))
    out = nic + topo.route(leaf(topo), 1)
    return Paths(lat(up), bw(up), lat(nic), lat(out), bw(out), topo.endpoint.issue_overhead)


def _plus(a: Affine, c: int) -> Affine:
    return replace(a, c3=a.c3 + c)


def compile_striped(problem: Problem, label: str, m: int) -> Schedule:
    """The schedule with m of the K chunks of every piece through the NICs (m = 0: direct's transfers,
    m = K: the NICs alone)."""
    n, coll = problem.nranks, problem.collective
    layout = Layout(1, n * K) if coll == C.ALL_REDUCE else Layout(n, K)
    b = ScheduleBuilder(coll, label, n, (1, n), layout, nnodes=leaf(problem.topology) + 1)
    me, sw, grid = rank_of(1, n), const(leaf(problem.topology)), (1, n)
    entry: list = []
    arrived: list = []                           # (template, offset k) of a step's transfers into the peers
    for s, st in enumerate(_steps(coll)):
        if s:
            entry, arrived = [_wait(b, n, arrived, 2 * n)], []
        g = b.next_group()
        for k in range(1, n) if m < K else ():
            at = _plus(st.piece(n, k), m if nic_start(m, k) == 0 else 0)
            t = b.op(src=me, dst=rank_of(1, n, 0, k), schunk=at, nchunks=K - m, group=g, inst=grid,
                     kind=st.kind, sbuf=st.sbuf, dbuf=st.dbuf, chan=k - 1, deps=entry)
            arrived.append((t, k))
        if m:
            arrived += _nic_rounds(b, n, st, m, g, entry, sw)
    return b.build()


def _nic_rounds(b: ScheduleBuilder, n: int, st: Step, m: int, g: int, entry: list, sw: Affine) -> list:
    """The NIC share: round k (group g + k - 1) PUTs m chunks of the piece for rank j + k (at its end or
    start, nic_start) into the same chunks of one of the leaf's buffers, from which the leaf streams them
    on (group g + k). Returns (template, k) of the sends into the peers."""
    every = lag(m)
    ups: dict[int, int] = {}
    downs: dict[int, int] = {}

    def at(k):
        return _plus(st.piece(n, k), nic_start(m, k))

    def buffer(k):
        return SLOT_BUFFERS[k // ends(m) % len(SLOT_BUFFERS)]

    def down(k, group):
        downs[k] = b.op(src=sw, dst=rank_of(1, n, 0, k), schunk=at(k), nchunks=m, group=group, inst=(1, n),
                        kind=st.kind, sbuf=buffer(k), dbuf=st.dbuf, chan=n, deps=[stream(ups[k])])

    for k in range(1, n):
        group = g if k == 1 else b.next_group()
        deps = list(entry) if k == 1 else [order(ups[k - 1])]
        if k > every and st.by_dst:     # the slot's previous round (its sender j + every) has left the leaf
            deps.append((downs[k - every], DEP_SHIFT, 0, every, ORDER))
        ups[k] = b.op(src=rank_of(1, n), dst=sw, schunk=at(k), nchunks=m, group=group, inst=(1, n), kind=PUT,
                      sbuf=st.sbuf, dbuf=buffer(k), chan=n - 1, deps=deps)
        if k > 1:
            down(k - 1, group)
    down(n - 1, b.next_group())
    return [(downs[k], k) for k in range(1, n)]


def _wait(b: ScheduleBuilder, n: int, arrived: list, chan: int) -> int:
    """A zero-byte local op: rank j's piece is reduced once every transfer into it (template t of offset
    k, sent by rank j - k) has landed."""
    return b.op(src=rank_of(1, n), dst=rank_of(1, n), schunk=const(0), nchunks=0, group=b.next_group(),
                inst=(1, n), chan=chan, deps=[(t, DEP_SHIFT, 0, -k) for t, k in arrived])


@register
class Striped(Algorithm):
    name = "striped"
    summary = "direct collectives inside one domain over its scale-up port and its scale-out NIC at once"
    collectives = (C.ALL_GATHER, C.REDUCE_SCATTER, C.ALL_REDUCE)
    requires = "one switched scale-up domain and its fat-tree scale-out NICs (scale_out.domains = 1)"
    Options = StripedOptions

    def why_not(self, problem: Problem) -> str | None:
        t = problem.topology
        if t.kind != "hierarchical" or t.tiers[0].kind != "switch" or t.tiers[1].kind != "fat_tree":
            return "needs a switched scale-up and a fat-tree scale-out (the NIC path to a rack-mate is " \
                   "NIC -> leaf -> NIC)"
        if t.domains != 1:
            return "stripes inside one scale-up domain (scale_out.domains = 1): across domains every NIC " \
                   "already carries its share of the cross-domain bytes (docs/algorithms.md, 'striped')"
        if t.params[P_LEAF] != t.local:
            return "needs the domain's NICs on one leaf (scale_out.leaf_size = scale_up.ranks)"
        return None

    def structure_key(self, problem, sizing, dtype_size):
        if self.options.nic != "auto":
            return round(float(self.options.nic) * K)
        block = sizing.block_elems * dtype_size
        piece = block / problem.nranks if problem.collective == C.ALL_REDUCE else block
        return paths(problem.topology).best_chunks(problem.nranks, piece, _steps(problem.collective))

    def compile(self, problem: Problem, key) -> Schedule:
        return compile_striped(problem, self.label, int(key))
