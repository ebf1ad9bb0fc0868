"""Phase builders over one axis of the (D, L) rank grid, for two-tier algorithms.

A *phase* is one collective step run by every group of ranks that share a
coordinate: along the ``l`` axis the L ranks of each domain (scale-up), along
the ``d`` axis the D ranks of each rail (scale-out), all groups at once. Every
template is replicated over the whole grid (``inst=(D, L)``) with ``rank_of`` /
``switch_of`` endpoints, so schedules stay small and take the symmetric path --
except the double binary tree over the domains (``dtree_ar``), which is not
translation-invariant in d: one template per domain and edge, over the L rails.
A :class:`Pipeline` runs a phase sequence chunk by chunk.

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
wins on latency, 2h against 2(n-1)h. Along d the in-switch phases run in the rail's scale-out
switch (CollNet / SHARP, rail_switch); switch_ar, the in-network all-reduce of a piece every rank of the
group holds, takes 2h + P/B + P/(Q B) the same way (part w up by (w+1)y, back h + y after its last
contribution arrived).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import lru_cache

import numpy as np

from hcclsim.schedule import (
    DATA,
    DEP_ALL,
    DEP_COL,
    DEP_ROW,
    DEP_SHIFT,
    ORDER,
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
from hcclsim.schedule.ir import F_C3, F_GROUP


@dataclass(frozen=True)
class Grid:
    """Sub-piece (l, d) starts at chunk base + l*wl + d*wd and is q chunks long (base: where a
    pipeline's chunk starts, :class:`Pipeline`)."""

    D: int
    L: int
    wl: int
    wd: int
    q: int = 1
    base: int = 0

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
            return rot(1, off, g.L, g.wl, g.base, outer=None if self.span else (1, 0, 0, g.D, g.wd))
        return rot(0, off, g.D, g.wd, g.base, i_coef=1, outer=None if self.span else (0, 1, 0, g.L, g.wl))

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


def switch_reduces(topo) -> bool:
    """Every rank's reducing switch is its domain's scale-up switch, node nranks + d."""
    r = range(topo.nranks)
    return topo.can_reduce_in_switch and all(int(topo.reduce_switch[x]) == topo.nranks + x // topo.local for x in r)


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


def domain_switch(g: Grid, nranks: int) -> Affine:
    """The scale-up switch of my domain (node nranks + d): where a phase along l reduces."""
    return switch_of(g.D, nranks)


def rail_switch(g: Grid, node0: int) -> Affine:
    """The scale-out switch of my rail (node node0 + l): where a phase along d reduces (CollNet)."""
    return rot(1, 0, g.L, 1, node0)


def rail_switches(topo) -> int | None:
    """The node of rail 0's switch when every rank's scale-out reducing switch is its rail's
    (scale_out.in_switch_reduce on a rail scale-out: rail l's is that node + l), else None."""
    if not topo.can_reduce_in_scale_out:
        return None
    node0 = int(topo.out_reduce_switch[0])
    r = np.arange(topo.nranks)
    return node0 if np.array_equal(topo.out_reduce_switch, node0 + r % topo.local) else None


def switch_rs(b: ScheduleBuilder, pcs: Pieces, entry, sw: Affine, parts: int = 1, own: bool = False) -> list:
    """In-switch reduce-scatter along the pieces' axis in the group's switch sw (domain_switch along l,
    rail_switch along d), pipelined over ``parts``: every rank adds part w of piece y (y != me) into
    the switch's table, then the switch adds the sum of the others into part w of rank y's piece.
    Wave w: uploads of part w, and the switch's sends of part w-1. own: as NVLS (multimem.ld_reduce)
    and SHARP run, every rank uploads its own piece too and the switch writes the whole sum back (per
    rank: S up, S/n down, against (n-1)S/n and S/n)."""
    g, ax = pcs.grid, pcs.axis
    n = g.n(ax)
    entry = moved(entry, 0, 0, g.D, g.L)
    if n == 1:
        return entry
    inst, me = (g.D, g.L), g.peer(ax, 0)
    first = 0 if own else 1       # the first piece offset a rank uploads (0: its own)
    ups: list[list[int]] = []
    down = None
    for w in range(parts + 1):
        grp = b.next_group()
        if w < parts:           # a rank uploads its parts in order (template s - first: piece x+s)
            row = []
            for s in range(first, n):
                start, shape = pcs.part(s, w, parts)
                row.append(b.op(src=me, dst=sw, schunk=start, group=grp, inst=inst, kind=PUT_REDUCE, sbuf=OUT,
                                dbuf=OUT, chan=s - first, deps=[order(ups[-1][s - first])] if ups else list(entry),
                                **shape))
            ups.append(row)
        if w:                   # the contributions to part w-1 of my piece are in; sent in order
            start, shape = pcs.part(0, w - 1, parts)
            deps = [(t, DEP_SHIFT, *g.step(ax, -s)) for s, t in enumerate(ups[w - 1], first)]
            deps = moved(deps + (list(entry) if down is None else [order(down)]), 0, 0, g.D, g.L)
            down = b.op(src=sw, dst=me, schunk=start, group=grp, inst=inst, kind=PUT if own else PUT_REDUCE,
                        sbuf=OUT, dbuf=OUT, chan=n - first, deps=deps, **shape)
    return barrier(ax, [down])     # the last sends depend, through their chains, on every transfer


def switch_ag(b: ScheduleBuilder, pcs: Pieces, entry, sw: Affine, parts: int = 1, own: bool = False) -> list:
    """In-switch all-gather along the pieces' axis in the group's switch sw, pipelined over ``parts``:
    every rank writes part w of its piece to the switch, which multicasts it to the n-1 others (one
    transfer per destination). Wave w: the upload of part w, and the multicasts of part w-1. own: as
    NVLS (multimem.st) and SHARP run, the multicast reaches the owner too (per rank: S/n up, S down,
    against (n-1)S/n)."""
    g, ax = pcs.grid, pcs.axis
    n = g.n(ax)
    entry = moved(entry, 0, 0, g.D, g.L)
    if n == 1:
        return entry
    inst, me = (g.D, g.L), g.peer(ax, 0)
    first = 0 if own else 1
    ups: list[int] = []
    downs: list[int] = []
    for w in range(parts + 1):
        grp = b.next_group()
        if w < parts:
            start, shape = pcs.part(0, w, parts)
            ups.append(b.op(src=me, dst=sw, schunk=start, group=grp, inst=inst, kind=PUT, sbuf=OUT, dbuf=TMP,
                            chan=0, deps=[order(ups[-1])] if ups else list(entry), **shape))
        if w:                   # template s - first: my piece's part w-1 to rank x+s, after the previous one
            start, shape = pcs.part(0, w - 1, parts)
            downs = [b.op(src=sw, dst=g.peer(ax, s), schunk=start, group=grp, inst=inst, kind=PUT, sbuf=TMP,
                          dbuf=OUT, chan=1 + s - first, deps=[(ups[w - 1], DEP_SHIFT, 0, 0)]
                          + (moved(entry, *g.step(ax, s), g.D, g.L) if w == 1 else [order(downs[s - first])]),
                          **shape)
                     for s in range(first, n)]
    return barrier(ax, downs)


def switch_ar(b: ScheduleBuilder, row: Pieces, axis: str, entry, sw: Affine, parts: int = 1) -> list:
    """In-switch all-reduce along the axis in the group's switch sw, pipelined over ``parts`` (SHARP's
    in-network AllReduce, as CollNet runs it): every rank adds part w of its piece (``row.at(0)``, the
    same piece on every rank of the group) into the switch's table; once all n contributions of part w
    are in, the switch writes the sum into every rank's piece, its own included. Per rank: S up, S
    down. Wave w: the uploads of part w, and the switch's sends of part w-1."""
    g = row.grid
    entry = moved(entry, 0, 0, g.D, g.L)
    if g.n(axis) == 1:
        return entry
    inst, me = (g.D, g.L), g.peer(axis, 0)
    group = DEP_ROW if axis == "l" else DEP_COL          # every rank of my domain / my rail
    ups: list[int] = []
    down = None
    for w in range(parts + 1):
        grp = b.next_group()
        if w < parts:
            start, shape = row.part(0, w, parts)
            ups.append(b.op(src=me, dst=sw, schunk=start, group=grp, inst=inst, kind=PUT_REDUCE, sbuf=OUT,
                            dbuf=OUT, chan=0, deps=[order(ups[-1])] if ups else list(entry), **shape))
        if w:
            start, shape = row.part(0, w - 1, parts)
            down = b.op(src=sw, dst=me, schunk=start, group=grp, inst=inst, kind=PUT, sbuf=OUT, dbuf=OUT, chan=1,
                        deps=[(ups[w - 1], group, 0, 0)] + ([] if down is None else [order(down)]), **shape)
    return barrier(axis, [down])


# ----------------------------------------------------------------------------------- trees

def btree_parents(n: int) -> list[int]:
    """NCCL's ncclGetBtree (src/graph/trees.cc): parent of each rank in the in-order binary tree with
    rank 0 on top (-1: root)."""
    parent = [-1] * n
    for r in range(1, n):
        bit = r & -r
        up = (r ^ bit) | (bit << 1)
        parent[r] = up if up < n else r ^ bit
    return parent


def dtree_parents(n: int) -> tuple[list[int], list[int]]:
    """NCCL's ncclGetDtree: the two trees' parent lists (tree 1 mirrors tree 0 if n is even, else shifts it)."""
    t0 = btree_parents(n)
    if n % 2 == 0:
        t1 = [-1 if t0[n - 1 - r] < 0 else n - 1 - t0[n - 1 - r] for r in range(n)]
    else:
        t1 = [-1 if t0[(r - 1) % n] < 0 else (t0[(r - 1) % n] + 1) % n for r in range(n)]
    return t0, t1


@dataclass(frozen=True)
class TreeShape:
    root: int
    parent: list[int]
    children: list[list[int]]
    height: list[int]      # 0 for leaves
    depth: list[int]       # 0 for the root


def tree_shape(parent: list[int]) -> TreeShape:
    n = len(parent)
    children: list[list[int]] = [[] for _ in range(n)]
    for r, p in enumerate(parent):
        if p >= 0:
            children[p].append(r)
    root = parent.index(-1)
    seen, depth = [root], [0] * n
    for v in seen:                       # breadth first: parents before children
        for c in children[v]:
            depth[c] = depth[v] + 1
            seen.append(c)
    height = [0] * n
    for v in reversed(seen):
        if parent[v] >= 0:
            height[parent[v]] = max(height[parent[v]], height[v] + 1)
    return TreeShape(root, parent, children, height, depth)


def levels(value: list[int]) -> list[list[int]]:
    """Ranks grouped by value (height or depth), in rank order."""
    out: list[list[int]] = [[] for _ in range(max(value) + 1)]
    for r, x in enumerate(value):
        out[x].append(r)
    return out


@lru_cache(maxsize=64)
def dtree_shapes(D: int) -> tuple[TreeShape, TreeShape]:
    """The two trees of ncclGetDtree over D ranks."""
    t0, t1 = dtree_parents(D)
    return tree_shape(t0), tree_shape(t1)


def nic_load(D: int) -> float:
    """Pieces a rank's NIC sends (and receives) per piece in the double binary tree over D domains, at
    the busiest domain: half the piece per tree, once up to the parent and once down to each child (a
    domain interior in one tree and a leaf in the other: 3/2 + 1/2 = 2; on 2 domains each is the
    root of one tree and the leaf of the other: 1)."""
    if D == 1:
        return 0.0
    shapes = dtree_shapes(D)
    return max(sum((sh.parent[v] >= 0) + len(sh.children[v]) for sh in shapes) / 2 for v in range(D))


def dtree_ar(b: ScheduleBuilder, row: Pieces, entry) -> list:
    """Double binary tree AllReduce along d (NCCL's ncclGetDtree over the D ranks of each rail): rank
    (d, l) holds row l; tree t reduces half t of it up to its root (PUT_REDUCE into the parent) and
    broadcasts the sum back down. A rank of height h sends up in step h, one of depth k sends down
    in step H + k (H: the root's height): 2H groups, both trees side by side. Returns 'my rail holds
    the sum' (every domain's, a barrier along d)."""
    g = row.grid
    D, L = g.D, g.L
    entry = moved(entry, 0, 0, D, L)
    if D == 1:
        return entry
    shapes = dtree_shapes(D)
    H = max(sh.height[sh.root] for sh in shapes)
    inst = (1, L)       # one template per domain and edge, its instances the L rails
    node = [rank_of(D, L, v) for v in range(D)]
    at = [moved(entry, v, 0, D, L) for v in range(D)]       # domain v finished the previous phase
    halves = [row.part(0, t, 2) for t in range(2)]
    red: list[dict[int, int]] = [{} for _ in shapes]    # red[t][v]: v's send up
    down: list[dict[int, int]] = [{} for _ in shapes]   # down[t][c]: the send that delivered the sum to c
    for step in range(2 * H):
        grp = b.next_group()
        for t, sh in enumerate(shapes):
            half, shape = halves[t]
            if step < H:                     # reduce: the ranks of height `step` send up
                for v in (v for v in range(D) if sh.height[v] == step and v != sh.root):
                    up = sh.parent[v]
                    deps = list(dict.fromkeys(at[v] + at[up] + [red[t][c] for c in sh.children[v]]))
                    red[t][v] = b.op(src=node[v], dst=node[up], schunk=half, group=grp, inst=inst, kind=PUT_REDUCE,
                                     sbuf=OUT, dbuf=OUT, chan=2 * t, deps=deps, **shape)
                continue
            for v in (v for v in range(D) if sh.depth[v] == step - H and sh.children[v]):
                # broadcast: the ranks of depth `step - H` send down
                have = at[v] + [red[t][c] for c in sh.children[v]] if v == sh.root else [down[t][v]]
                for c in sh.children[v]:
                    down[t][c] = b.op(src=node[v], dst=node[c], schunk=half, group=grp, inst=inst, kind=PUT,
                                      sbuf=OUT, dbuf=OUT, chan=2 * t + 1, deps=have, **shape)
    # the sends into the leaves: each waited, through its chain, for every other transfer of its tree
    return barrier("d", [down[t][v] for t, sh in enumerate(shapes) for v in range(D) if not sh.children[v]])


# ----------------------------------------------------------------------------------- pipelining

class Pipeline:
    """A phase sequence run once per chunk of the data, the chunks one after another as a pipeline.

    The phases of chunk 0 are built on the pipeline itself (it stands in for the ScheduleBuilder: the
    phase builders call its ``next_group`` and ``op``); chunk p is the same templates moved ``stride``
    chunks of the layout further, in groups p later: chunk p's g-th group is the schedule's group
    p + g, so wave w holds step w - p of every chunk p (chunk p can be in the scale-out phase while
    chunk p+1 is still in the scale-up one, as NCCL's kernels overlap them), and every template of
    chunk p follows the same template of chunk p-1 (an order dependency: each stream issues its
    chunks back to back). :meth:`emit` writes all of them into an empty builder, in group order (the
    copies are made as arrays, so a schedule of 10^5 templates costs one chunk's phases)."""

    def __init__(self, b: ScheduleBuilder, chunks: int, stride: int):
        self.b, self.chunks, self.stride = b, chunks, stride
        self.ops: list[tuple[int, dict, list]] = []      # chunk 0: (group, op kwargs, normalised deps)
        self.group = -1

    def next_group(self) -> int:
        self.group += 1
        return self.group

    def op(self, *, group: int, deps=(), **kw) -> int:
        norm = []
        for d in deps:
            d = (int(d), DEP_SHIFT, 0, 0) if not isinstance(d, tuple) else d
            norm.append(d if len(d) == 5 else (*d, DATA))
        self.ops.append((group, kw, norm))
        return len(self.ops) - 1

    def emit(self) -> None:
        b, T, Q = self.b, len(self.ops), self.chunks
        if b.ntemplates:
            raise ValueError("a pipeline's templates must be the whole schedule")
        one = ScheduleBuilder(b.collective, b.algorithm, b.nranks, b.shape, b.layout, b.nnodes, b.root)
        for _, kw, _ in self.ops:
            one.op(group=0, **kw)
        rows0 = np.asarray(one.rows, np.int64)
        n0 = np.array([len(d) for _, _, d in self.ops], np.int64)          # chunk 0's dependencies
        d0 = np.array([d for _, _, ds in self.ops for d in ds], np.int64).reshape(-1, 5)
        p, k = np.repeat(np.arange(Q), T), np.tile(np.arange(T), Q)          # template k of chunk p
        group = p + np.array([g for g, _, _ in self.ops], np.int64)[k]
        order_ = np.lexsort((k, p, group))                                  # the order they are written in
        real = np.empty(Q * T, np.int64)
        real[order_] = np.arange(Q * T)
        c, t = p[order_], k[order_]                                          # chunk, template of each row
        rows = rows0[t]
        rows[:, F_GROUP] = np.concatenate([[0], np.cumsum(np.diff(group[order_]) != 0)])   # numbered 0, 1, ...
        rows[:, F_C3 + 2] += c * self.stride
        rows[:, F_C3 + 3] += c * self.stride
        # chunk c's copy of each dependency of chunk 0 (the same templates of chunk c), then, from chunk 1
        # on, the order dependency on the same template of chunk c-1
        nd = n0[t] + (c > 0)
        end = np.cumsum(nd)
        deps = np.zeros((int(end[-1]) if len(end) else 0, 5), np.int64)
        x = np.repeat(np.arange(Q * T), n0[t])                               # the row of each copied dependency
        j = np.arange(len(x)) - (np.cumsum(n0[t]) - n0[t])[x]                # which of its row's it is
        d = d0[(np.cumsum(n0) - n0)[t[x]] + j]
        d[:, 0] = real[c[x] * T + d[:, 0]]
        deps[end[x] - nd[x] + j] = d
        later = np.flatnonzero(c > 0)
        deps[end[later] - 1] = np.stack([real[order_[later] - T], np.full(len(later), DEP_SHIFT),
                                         np.zeros(len(later), np.int64), np.zeros(len(later), np.int64),
                                         np.full(len(later), ORDER)], 1)
        b.append(rows, nd, deps)


def tree_allreduce(b: ScheduleBuilder, chunks: int, intra: str) -> None:
    """AllReduce as NCCL's multi-node trees run it, pipelined over ``chunks``: in every domain a
    reduce-scatter of the rows (intra "switch": in the switch, as NVLS runs it; "ring": each row
    reduced along a chain of the L ranks into its owner, L chains side by side), a double binary tree
    per rail on the row (dtree_ar), and the all-gather back (NVLS multicast / the chains' broadcast).
    The builder's layout is Layout(1, chunks * L * D * 2): chunk p's rows start at p * L * D * 2, a
    row is D sub-pieces of 2 chunks, and the trees take one half of it each."""
    D, L = b.shape
    c = Pipeline(b, chunks, L * D * 2)
    rows = Pieces(Grid(D, L, wl=2 * D, wd=2, q=2), "l", span=True)
    if intra == "switch":
        sw = domain_switch(rows.grid, b.nranks)
        switch_ag(c, rows, dtree_ar(c, rows, switch_rs(c, rows, [], sw, own=True)), sw, own=True)
    else:
        ring_ag(c, rows, dtree_ar(c, rows, ring_rs(c, rows, [])))
    c.emit()


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
