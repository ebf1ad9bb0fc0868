"""Phase builders over one axis of the (D, L) rank grid, for two-tier algorithms.

A *phase* is one collective step run by every group of ranks that share a
coordinate: along the ``l`` axis the L ranks of each domain (scale-up), along
the ``d`` axis the D ranks of each rail (scale-out), all groups at once. Every
template is replicated over the whole grid (``inst=(D, L)``) with ``rank_of`` /
``switch_of`` endpoints, so schedules stay small and take the symmetric path.

Data is addressed as a grid of *sub-pieces* ``(l, d)`` (:class:`Grid`). A phase
along an axis moves :class:`Pieces` indexed by that axis: either the rank's own
sub-piece of each index (``span=False``) or every sub-piece of the index, i.e.
a whole row across the other axis (``span=True``, strided when not contiguous).

Dependencies: a phase takes ``entry`` -- dep tuples meaning "this rank has
finished the previous phase" -- and returns its own ``exit`` deps. The first
transfer a rank sends to a peer also waits for the peer's ``entry`` (the peer
is ready to be written: a rendezvous), so phases never race on buffers.

Per phase, with n ranks along the axis, piece P bytes, path latency a and
bandwidth B (contention-free): ring reduce-scatter / all-gather
``(n-1)(a + P/B)``, and ``(n-1)(a + P/(C B))`` with C channels alternating
direction on point-to-point links (a ring or full mesh: both directions work);
direct ``a + (n-1)P/B``; in-switch (switch hop latency h, so a = 2h through the
switch), pipelined over Q parts of P/Q bytes, wave w carrying the upload of
part w and the multicast of part w-1. A link streams its parts back to back
(order dependencies: the next part leaves once the previous one has left), so
with y = P/(Q B), "left" the time a transfer's last byte leaves its source and
"arrived" left + h:

    reduce-scatter  up[w] left (w+1)(n-1)y (the n-1 uploads of a part share my uplink);
                    down[w] left max(up[w] arrived, down[w-1] left) + y = up[w] arrived + y
    all-gather      up[w] left (w+1)y;
                    down[w] left max(up[w] arrived, down[w-1] left) + (n-1)y (n-1 multicasts
                    share my downlink) = h + y + (w+1)(n-1)y

(n-1 >= 1 settles both maxima: the upload in reduce-scatter, the previous
multicast in all-gather from w = 1), so both take 2h + (n-1)P/B + P/(Q B): the
hops' latency once, not once per part. (The ring's order dependency is on the
rank's own previous step, which left one path latency before the upstream's
arrived: it never binds, and the ring's form is the plain alpha-beta one.)
The in-switch phase never beats a ring on bandwidth -- a rank's uplink
(downlink) carries (n-1)P either way, plus the pipeline's fill P/(Q B) -- and
wins on latency, 2h against 2(n-1)h.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from hcclsim.schedule import (
    DATA,
    DEP_ALL,
    DEP_COL,
    DEP_ROW,
    DEP_SHIFT,
    OUT,
    PUT,
    PUT_REDUCE,
    TMP,
    Affine,
    ScheduleBuilder,
    order,
    rank_of,
    rot,
    switch_of,
)


@dataclass(frozen=True)
class Grid:
    """Sub-piece (l, d) starts at chunk l*wl + d*wd and is q chunks long."""

    D: int
    L: int
    wl: int
    wd: int
    q: int = 1

    def n(self, axis: str) -> int:
        return self.L if axis == "l" else self.D

    def step(self, axis: str, s: int) -> tuple[int, int]:
        """Instance shift (di, dj) of s positions along the axis."""
        return (0, s) if axis == "l" else (s, 0)

    def peer(self, axis: str, s: int) -> Affine:
        return rank_of(self.D, self.L, *self.step(axis, s))


@dataclass(frozen=True)
class Pieces:
    """The pieces a phase along ``axis`` moves, indexed by the rank's coordinate on that axis."""

    grid: Grid
    axis: str
    span: bool     # True: every sub-piece of the index (a row across the other axis); False: the rank's own

    def at(self, off: int) -> Affine:
        """Start chunk of piece (x + off) mod n, x the instance's coordinate on the axis."""
        g = self.grid
        if self.axis == "l":
            return rot(1, off, g.L, g.wl, outer=None if self.span else (1, 0, 0, g.D, g.wd))
        return rot(0, off, g.D, g.wd, i_coef=1, outer=None if self.span else (0, 1, 0, g.L, g.wl))

    @property
    def shape(self) -> dict:
        """nchunks / nrun / rstride of one piece."""
        g = self.grid
        if not self.span:
            return {"nchunks": g.q}
        m, w = (g.D, g.wd) if self.axis == "l" else (g.L, g.wl)
        if w == g.q or m == 1:
            return {"nchunks": m * g.q}
        return {"nchunks": g.q, "nrun": m, "rstride": w}

    def part(self, off: int, c: int, k: int) -> tuple[Affine, dict]:
        """Start chunk and shape of part c of k of piece (x + off): the piece cut into k equal
        slices (of its one run, or the same slice of each of its runs). k must divide g.q."""
        if self.grid.q % k:
            raise ValueError(f"{k} parts do not divide a sub-piece of {self.grid.q} chunks")
        shape = dict(self.shape)
        size = shape["nchunks"] // k
        shape["nchunks"] = size
        a = self.at(off)
        return replace(a, c3=a.c3 + c * size), shape


# ----------------------------------------------------------------------------------- dependencies

def moved(deps, di: int, dj: int, D: int, L: int) -> list:
    """The deps of the rank shifted by (di, dj) on the grid, normalised and without duplicates.
    Deps other than DEP_ALL must point to templates that cover the whole (D, L) grid."""
    out = {}
    for t, mode, si, sj, *kind in deps:
        si = (si + di) % D if mode in (DEP_SHIFT, DEP_ROW) else 0
        sj = (sj + dj) % L if mode in (DEP_SHIFT, DEP_COL) else 0
        out[(t, mode, si, sj, kind[0] if kind else DATA)] = None
    return list(out)


def ready(g: Grid, entry: list, axis: str, s: int) -> list:
    """Deps of a first send to the peer s places along the axis: me done, and the peer done.
    entry must be normalised (as ``moved`` returns it)."""
    same = DEP_ROW if axis == "l" else DEP_COL      # barriers a move along the axis leaves alone
    peer = moved([e for e in entry if e[1] not in (same, DEP_ALL)], *g.step(axis, s), g.D, g.L)
    return list(dict.fromkeys(entry + peer))


def barrier(axis: str, templates) -> list:
    """Every rank of my domain (axis l) or my rail (axis d) has run these templates."""
    mode = DEP_ROW if axis == "l" else DEP_COL
    return [(t, mode, 0, 0) for t in templates]


def everything(templates) -> list:
    return [(t, DEP_ALL, 0, 0) for t in templates]


# ----------------------------------------------------------------------------------- phases

def _ring(b: ScheduleBuilder, pcs: Pieces, entry, reduce: bool, channels: int) -> list:
    g, ax = pcs.grid, pcs.axis
    n, inst = g.n(ax), (g.D, g.L)
    entry = moved(entry, 0, 0, g.D, g.L)
    if n == 1:
        return entry
    dirs = [1 if c % 2 == 0 else -1 for c in range(channels)]    # channel c: part c, alternating direction
    prev: list = [None] * channels
    for s in range(n - 1):
        grp = b.next_group()
        for c, d in enumerate(dirs):
            # reduce-scatter: send piece x-d(s+1) (the partial sum grows around the ring, ends at its
            # owner); all-gather: forward piece x-ds (own piece first).
            start, shape = pcs.part(-d * (s + 1) if reduce else -d * s, c, channels)
            back = (prev[c], DEP_SHIFT, *g.step(ax, -d))       # the part arrived from my upstream
            deps = ready(g, entry, ax, d) if prev[c] is None else [back, order(prev[c])]
            prev[c] = b.op(src=g.peer(ax, 0), dst=g.peer(ax, d), schunk=start, group=grp, inst=inst, chan=c,
                           kind=PUT_REDUCE if reduce else PUT, sbuf=OUT, dbuf=OUT, deps=deps, **shape)
    # done: my last sends, and my upstream's last sends into me, on every channel
    return [x for c, d in enumerate(dirs)
            for x in ((prev[c], DEP_SHIFT, *g.step(ax, -d)), (prev[c], DEP_SHIFT, 0, 0))]


def ring_rs(b: ScheduleBuilder, pcs: Pieces, entry, channels: int = 1) -> list:
    """Ring reduce-scatter along the axis: rank x ends with the sum over its group of piece x."""
    return _ring(b, pcs, entry, True, channels)


def ring_ag(b: ScheduleBuilder, pcs: Pieces, entry, channels: int = 1) -> list:
    """Ring all-gather along the axis: rank x starts with piece x, ends with every piece."""
    return _ring(b, pcs, entry, False, channels)


def _direct(b: ScheduleBuilder, pcs: Pieces, entry, reduce: bool) -> list:
    g, ax = pcs.grid, pcs.axis
    n = g.n(ax)
    entry = moved(entry, 0, 0, g.D, g.L)
    if n == 1:
        return entry
    grp, ts = b.next_group(), []
    for s in range(1, n):
        # reduce-scatter: my contribution to peer x+s's piece; all-gather: my piece to peer x+s
        ts.append(b.op(src=g.peer(ax, 0), dst=g.peer(ax, s), schunk=pcs.at(s if reduce else 0), group=grp,
                       inst=(g.D, g.L), kind=PUT_REDUCE if reduce else PUT, sbuf=OUT, dbuf=OUT,
                       deps=ready(g, entry, ax, s), **pcs.shape))
    return barrier(ax, ts)


def direct_rs(b: ScheduleBuilder, pcs: Pieces, entry) -> list:
    """Every rank adds its part of piece y straight into rank y, all n-1 peers at once."""
    return _direct(b, pcs, entry, True)


def direct_ag(b: ScheduleBuilder, pcs: Pieces, entry) -> list:
    """Every rank writes its piece straight to the n-1 peers at once."""
    return _direct(b, pcs, entry, False)


def _along_l(pcs: Pieces) -> None:
    if pcs.axis != "l":
        raise ValueError("in-switch phases run along the l axis (inside a domain)")


def switch_rs(b: ScheduleBuilder, pcs: Pieces, entry, nranks: int, parts: int = 1) -> list:
    """In-switch reduce-scatter along l, pipelined over ``parts``: every rank adds part w of piece y
    (y != me) into the domain switch's table, then the switch adds the sum of the others into part w
    of rank y's piece. Wave w: uploads of part w, and the switch's sends of part w-1."""
    _along_l(pcs)
    g = pcs.grid
    entry = moved(entry, 0, 0, g.D, g.L)
    if g.L == 1:
        return entry
    inst, sw, me = (g.D, g.L), switch_of(g.D, nranks), g.peer("l", 0)
    ups: list[list[int]] = []
    down = None
    for w in range(parts + 1):
        grp = b.next_group()
        if w < parts:           # a rank uploads its parts in order (template s-1: piece x+s)
            row = []
            for s in range(1, g.L):
                start, shape = pcs.part(s, w, parts)
                row.append(b.op(src=me, dst=sw, schunk=start, group=grp, inst=inst, kind=PUT_REDUCE, sbuf=OUT,
                                dbuf=OUT, chan=s - 1, deps=[order(ups[-1][s - 1])] if ups else list(entry), **shape))
            ups.append(row)
        if w:                   # the L-1 contributions to part w-1 of my piece are in; sent in order
            start, shape = pcs.part(0, w - 1, parts)
            deps = [(t, DEP_SHIFT, 0, -s) for s, t in enumerate(ups[w - 1], 1)]
            deps = moved(deps + (list(entry) if down is None else [order(down)]), 0, 0, g.D, g.L)
            down = b.op(src=sw, dst=me, schunk=start, group=grp, inst=inst, kind=PUT_REDUCE, sbuf=OUT,
                        dbuf=OUT, chan=g.L - 1, deps=deps, **shape)
    return barrier("l", [down])     # the last sends depend, through their chains, on every transfer


def switch_ag(b: ScheduleBuilder, pcs: Pieces, entry, nranks: int, parts: int = 1) -> list:
    """In-switch all-gather along l, pipelined over ``parts``: every rank writes part w of its piece
    to the domain switch, which multicasts it to the L-1 others (one transfer per destination).
    Wave w: the upload of part w, and the multicasts of part w-1."""
    _along_l(pcs)
    g = pcs.grid
    entry = moved(entry, 0, 0, g.D, g.L)
    if g.L == 1:
        return entry
    inst, sw, me = (g.D, g.L), switch_of(g.D, nranks), g.peer("l", 0)
    ups: list[int] = []
    downs: list[int] = []
    for w in range(parts + 1):
        grp = b.next_group()
        if w < parts:
            start, shape = pcs.part(0, w, parts)
            ups.append(b.op(src=me, dst=sw, schunk=start, group=grp, inst=inst, kind=PUT, sbuf=OUT, dbuf=TMP,
                            chan=0, deps=[order(ups[-1])] if ups else list(entry), **shape))
        if w:                   # template s-1: my piece's part w-1 to rank x+s, after the previous one
            start, shape = pcs.part(0, w - 1, parts)
            downs = [b.op(src=sw, dst=g.peer("l", s), schunk=start, group=grp, inst=inst, kind=PUT, sbuf=TMP,
                          dbuf=OUT, chan=s, deps=[(ups[w - 1], DEP_SHIFT, 0, 0)]
                          + (moved(entry, 0, s, g.D, g.L) if w == 1 else [order(downs[s - 1])]), **shape)
                     for s in range(1, g.L)]
    return barrier("l", downs)


def exchange(b: ScheduleBuilder, g: Grid, axis: str, entry, src_at, dst_at, shape: dict, sbuf: int, dbuf: int,
             pairwise: bool) -> list:
    """All-to-all along the axis: rank x writes src_at(s) of its sbuf to dst_at(s) of peer x+s's dbuf,
    for s = 0..n-1 (s = 0 is a local copy: no links, no time). pairwise: one peer per step, in
    n-1 steps; else all peers at once."""
    n, inst = g.n(axis), (g.D, g.L)
    entry = moved(entry, 0, 0, g.D, g.L)
    ts = []
    grp = b.next_group()
    for s in range(n):
        if pairwise and s >= 2:
            grp = b.next_group()
        deps = ready(g, entry, axis, s) + ([ts[-1]] if pairwise and s >= 2 else [])
        ts.append(b.op(src=g.peer(axis, 0), dst=g.peer(axis, s), schunk=src_at(s), dchunk=dst_at(s), group=grp,
                       inst=inst, kind=PUT, sbuf=sbuf, dbuf=dbuf, deps=deps, **shape))
    return barrier(axis, ts)
