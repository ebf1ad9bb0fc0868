"""The schedule IR: every transfer of one collective and their dependencies.

A schedule is a list of *templates*. A template is one transfer repeated over
a grid of *instances* ``(i, j)`` with ``0 <= i < inst_d`` and ``0 <= j < inst_l``
(a single explicit transfer is the 1x1 grid). The schedule has a rank shape
``(D, L)`` (``rank = d*L + l``; flat algorithms use ``(1, N)``). Everything an
instance needs -- source node, destination node, source and destination chunk
-- is an :class:`Affine` function of ``(i, j)``:

    value(i, j) = ((a1*i + b1*j + c1) mod m1) * w1 + ((a2*i + b2*j + c2) mod m2) * w2 + c3

so a ring step over 4096 ranks is one row, not 4096. This is how symmetric
algorithms stay small (DESIGN.md, "scale"), and it is read the same way by
the checker (which expands it) and the engines (which walk the instances).

Data identity: every node (rank or switch) has three buffers, IN, OUT and TMP,
each split into ``M = nblocks * k`` chunks (:class:`Layout`). A transfer moves
``nrun`` runs of ``nchunks`` consecutive chunks, run ``r`` starting at
``chunk + r*rstride``, from the source buffer to the destination buffer, either
copying (PUT) or adding (PUT_REDUCE: reduce on arrival, or into a switch's
reduction table). Runs of a strided transfer must line up with blocks
(``rstride`` a multiple of ``k``) so that every run has the same size.

Timing semantics (shared by the engines): a transfer starts when each DATA
dependency has arrived and each ORDER dependency has left its source (its last
byte is on the wire: a channel issuing transfers back to back); a STREAM
dependency (a switch's output fed by the transfers into it) lets the transfer
start once the dependency's first byte has arrived and finish no earlier than
its last byte has (cut-through: what comes in goes out, byte by byte); ``group``
numbers the sets of transfers that run at the same time (they share the links
they have in common); every dependency points to an earlier group. ``chan`` is
the issuing channel / message engine. The checker treats every kind as
happens-before.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..core.errors import ScheduleError

# op kinds
PUT, PUT_REDUCE = 0, 1
KIND_NAMES = {PUT: "put", PUT_REDUCE: "put_reduce"}
# buffers
IN, OUT, TMP = 0, 1, 2
# dependency modes: which instances of the template depended on
DEP_SHIFT, DEP_ROW, DEP_COL, DEP_ALL = 0, 1, 2, 3
# dependency kinds: wait for the data to have arrived, or only for the transfer to have left
# (issue order on one channel: the next transfer's first byte follows the previous one's last), or stream
# through (a switch forwarding what arrives: the packet engine does so for every switch output, its in-switch
# jobs; the analytic engine where a schedule says STREAM)
DATA, ORDER, STREAM = 0, 1, 2

# template fields (columns of Schedule.tmpl)
F_KIND, F_GROUP, F_CHAN, F_ID, F_IL, F_SBUF, F_DBUF, F_N, F_NRUN, F_RSTRIDE = range(10)
F_SRC, F_DST, F_SCH, F_DCH = 10, 20, 30, 40     # each Affine takes 10 columns ...
F_C3 = 50                                         # ... and its constant c3 sits at F_C3 + (0..3)
NF = 54


@dataclass(frozen=True)
class Affine:
    """((a1*i + b1*j + c1) % m1) * w1 + ((a2*i + b2*j + c2) % m2) * w2 + c3."""

    a1: int = 0
    b1: int = 0
    c1: int = 0
    m1: int = 1
    w1: int = 0
    a2: int = 0
    b2: int = 0
    c2: int = 0
    m2: int = 1
    w2: int = 0
    c3: int = 0

    def __call__(self, i, j):
        return ((self.a1 * i + self.b1 * j + self.c1) % self.m1) * self.w1 \
            + ((self.a2 * i + self.b2 * j + self.c2) % self.m2) * self.w2 + self.c3


def const(c: int) -> Affine:
    """The same value for every instance."""
    return Affine(c3=int(c))


def rank_of(D: int, L: int, di: int = 0, dj: int = 0) -> Affine:
    """Rank ((i + di) mod D) * L + ((j + dj) mod L): instance (i, j) shifted by (di, dj)."""
    return Affine(a1=1, c1=di % D, m1=D, w1=L, b2=1, c2=dj % L, m2=L, w2=1)


def switch_of(D: int, nranks: int, di: int = 0) -> Affine:
    """Node nranks + ((i + di) mod D): the scale-up switch of domain i + di."""
    return Affine(a1=1, c1=di % D, m1=D, w1=1, c3=nranks)


def order(t: int, mode: int = DEP_SHIFT, si: int = 0, sj: int = 0) -> tuple[int, int, int, int, int]:
    """An ORDER dependency: start once that transfer has left (same channel, back to back)."""
    return (t, mode, si, sj, ORDER)


def stream(t: int, mode: int = DEP_SHIFT, si: int = 0, sj: int = 0) -> tuple[int, int, int, int, int]:
    """A STREAM dependency: a switch sends on what that transfer brings in as it arrives (cut-through)."""
    return (t, mode, si, sj, STREAM)


def rot(j_coef: int, offset: int, mod: int, weight: int = 1, base: int = 0,
        i_coef: int = 0, outer: tuple[int, int, int, int, int] | None = None) -> Affine:
    """((i_coef*i + j_coef*j + offset) mod mod) * weight + base, plus an optional second term
    outer = (a, b, c, m, w) meaning ((a*i + b*j + c) mod m) * w."""
    a2, b2, c2, m2, w2 = outer if outer else (0, 0, 0, 1, 0)
    return Affine(a1=i_coef, b1=j_coef, c1=offset % mod, m1=mod, w1=weight,
                  a2=a2, b2=b2, c2=c2 % m2, m2=m2, w2=w2, c3=base)


@dataclass(frozen=True)
class Layout:
    """How a buffer is cut into chunks: nblocks blocks of k chunks each. The blocks are 1, one per rank
    (AllGather, ReduceScatter, AllToAll), or for a matrix collective one per unit a rank's buffer holds
    (Layout(M, 1): a chunk is a unit of its traffic, docs/alltoallv.md)."""

    nblocks: int
    k: int

    @property
    def nchunks(self) -> int:
        return self.nblocks * self.k

    def chunk_elements(self, block_elems: int) -> np.ndarray:
        """Elements in each chunk: a block of block_elems split into k near-equal parts
        (the first block_elems % k parts one larger). Shape (nchunks,)."""
        q, r = divmod(int(block_elems), self.k)
        per = np.full(self.k, q, np.int64)
        per[:r] += 1
        return np.tile(per, self.nblocks)

    def offsets(self, block_elems: int) -> np.ndarray:
        """Element offset of each chunk, plus the total at the end. Shape (nchunks + 1,)."""
        return np.concatenate([[0], np.cumsum(self.chunk_elements(block_elems))])


@dataclass(frozen=True)
class Schedule:
    """A compiled collective. Arrays are read by the checker and the engines alike."""

    collective: str
    algorithm: str
    nranks: int
    nnodes: int                  # ranks + switches the schedule addresses
    shape: tuple[int, int]       # (D, L) rank grid of the instances
    layout: Layout
    root: int
    tmpl: np.ndarray             # int64[T, NF]
    dep_ptr: np.ndarray          # int64[T + 1] CSR over templates
    dep_t: np.ndarray            # int64[E] template depended on
    dep_mode: np.ndarray         # int64[E] DEP_*
    dep_si: np.ndarray           # int64[E] instance shift (i)
    dep_sj: np.ndarray           # int64[E] instance shift (j)
    dep_kind: np.ndarray         # int64[E] DATA, ORDER or STREAM
    group_ptr: np.ndarray        # int64[G + 1]: templates of group g are group_ptr[g]:group_ptr[g+1]
    notes: dict = field(default_factory=dict, compare=False)

    @property
    def ntemplates(self) -> int:
        return len(self.tmpl)

    @property
    def ntransfers(self) -> int:
        """Number of transfers the templates stand for."""
        return int((self.tmpl[:, F_ID] * self.tmpl[:, F_IL]).sum())


_BLOCK = 2048       # rows ops() fills at a time: 2048 x NF x 8 bytes = 0.9 MB, within a core's cache (an estimate)


class ScheduleBuilder:
    """Collects templates in order; ``build`` checks and packs them.

    Algorithms call ``op(...)`` with a group number (``next_group()`` hands out
    fresh ones) and dependencies as ``(template_id, mode, si, sj[, kind])`` tuples,
    or plain template ids meaning 'the same instance' (DEP_SHIFT by (0, 0)); kind
    is DATA unless given (``order(t)`` makes an ORDER dependency on the same instance).
    Compilers of large schedules add templates as arrays instead (``ops``, or packed rows: ``append``).
    """

    def __init__(self, collective: str, algorithm: str, nranks: int, shape: tuple[int, int], layout: Layout,
                 nnodes: int | None = None, root: int = 0):
        if shape[0] * shape[1] != nranks:
            raise ScheduleError(f"{algorithm}: rank shape {shape} does not cover {nranks} ranks")
        self.collective, self.algorithm, self.nranks = collective, algorithm, nranks
        self.shape, self.layout, self.root = shape, layout, root
        self.nnodes = nnodes if nnodes is not None else nranks
        self.rows: list[list[int]] = []          # op(): templates not yet packed into a block
        self.deps: list[list[tuple[int, int, int, int, int]]] = []
        self._blocks: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []   # (rows, deps per template, deps)
        self._count = 0
        self._group = -1
        self.notes: dict = {}

    def next_group(self) -> int:
        self._group += 1
        return self._group

    @property
    def ntemplates(self) -> int:
        """Templates added so far."""
        return self._count

    def op(self, *, src: Affine, dst: Affine, schunk: Affine, dchunk: Affine | None = None, nchunks: int = 1,
           group: int, inst: tuple[int, int] = (1, 1), kind: int = PUT, sbuf: int = OUT, dbuf: int = OUT,
           chan: int = 0, nrun: int = 1, rstride: int = 0, deps=()) -> int:
        dchunk = schunk if dchunk is None else dchunk
        row = [kind, group, chan, inst[0], inst[1], sbuf, dbuf, nchunks, nrun, rstride]
        for a in (src, dst, schunk, dchunk):
            row += [a.a1, a.b1, a.c1, a.m1, a.w1, a.a2, a.b2, a.c2, a.m2, a.w2]
        self.rows.append(row + [src.c3, dst.c3, schunk.c3, dchunk.c3])
        norm = []
        for d in deps:
            d = (d, DEP_SHIFT, 0, 0) if isinstance(d, (int, np.integer)) else tuple(d)
            norm.append(d if len(d) == 5 else (*d, DATA))
        self.deps.append(norm)
        self._count += 1
        return self._count - 1

    def ops(self, count: int, *, src: Affine, dst: Affine, schunk: Affine, dchunk: Affine | None = None,
            nchunks=1, group, inst=(1, 1), kind=PUT, sbuf=OUT, dbuf=OUT, chan=0, nrun=1, rstride=0, ndeps=0,
            deps=None) -> np.ndarray:
        """``count`` templates at once, as ``count`` calls of :meth:`op` in a row would add them, for
        compilers that build large schedules as arrays (a Python call per template costs ~50 us).

        Every argument, and every field of an Affine, is a value or an int array of ``count``. Template t
        has ``ndeps[t]`` dependencies: consecutive rows (template, mode, si, sj, kind) of the int array
        ``deps``, in template order. Returns the templates' ids."""
        ends = (src, dst, schunk, schunk if dchunk is None else dchunk)
        cols = [kind, group, chan, inst[0], inst[1], sbuf, dbuf, nchunks, nrun, rstride]
        cols += [v for a in ends for v in (a.a1, a.b1, a.c1, a.m1, a.w1, a.a2, a.b2, a.c2, a.m2, a.w2)]
        cols += [a.c3 for a in ends]
        rows = np.empty((count, NF), np.int64)
        const = [v if np.ndim(v) == 0 else 0 for v in cols]
        arrays = [(col, np.broadcast_to(v, (count,))) for col, v in enumerate(cols) if np.ndim(v)]
        for a in range(0, count, _BLOCK):       # a block of rows at a time, so the column writes stay in cache
            part = rows[a:a + _BLOCK]
            part[:] = const
            for col, v in arrays:
                part[:, col] = v[a:a + _BLOCK]
        return self.append(rows, ndeps, deps)

    def append(self, rows: np.ndarray, ndeps=0, deps=None) -> np.ndarray:
        """Templates already packed as rows of Schedule.tmpl (int64[n, NF]), dependencies as for
        :meth:`ops`. Returns the templates' ids."""
        count = len(rows)
        ndeps = np.broadcast_to(np.asarray(ndeps, np.int64), (count,)).copy()
        deps = np.zeros((0, 5), np.int64) if deps is None else np.asarray(deps, np.int64).reshape(-1, 5)
        if ndeps.sum() != len(deps) or np.any(ndeps < 0):
            raise ScheduleError(f"{self.algorithm}: {len(deps)} dependencies for {int(ndeps.sum())}")
        self._pack()
        self._blocks.append((np.asarray(rows, np.int64).reshape(-1, NF), ndeps, deps))
        self._count += count
        return np.arange(self._count - count, self._count)

    def _pack(self) -> None:
        """Move the templates op() collected into a block, so blocks keep the order templates came in."""
        if not self.rows:
            return
        flat = [d for ds in self.deps for d in ds]
        self._blocks.append((np.asarray(self.rows, np.int64), np.array([len(d) for d in self.deps], np.int64),
                             np.asarray(flat, np.int64).reshape(-1, 5)))
        self.rows, self.deps = [], []

    def build(self) -> Schedule:
        self._pack()
        if not self._count:
            raise ScheduleError(f"{self.algorithm}: empty schedule")
        tmpl, ndeps, dep = (x[0] if len(x) == 1 else np.concatenate(x) for x in zip(*self._blocks))
        T = len(tmpl)
        groups = tmpl[:, F_GROUP]
        if np.any(np.diff(groups) < 0):
            raise ScheduleError(f"{self.algorithm}: templates must be emitted in group order")
        ptr = np.zeros(T + 1, np.int64)
        ptr[1:] = np.cumsum(ndeps)
        consumer = np.repeat(np.arange(T), np.diff(ptr))
        bad = (dep[:, 0] < 0) | (dep[:, 0] >= consumer) | (groups[np.clip(dep[:, 0], 0, T - 1)] >= groups[consumer])
        if bad.any():
            e = int(np.argmax(bad))
            t, u = int(consumer[e]), int(dep[e, 0])
            raise ScheduleError(f"{self.algorithm}: template {t} (group {groups[t]}) depends on "
                                f"template {u}, which is not in an earlier group")
        if groups[0] != 0 or np.any(np.diff(groups) > 1):
            raise ScheduleError(f"{self.algorithm}: groups must be numbered 0, 1, 2, ... without gaps")
        gptr = np.searchsorted(groups, np.arange(groups[-1] + 2)).astype(np.int64)
        return Schedule(collective=self.collective, algorithm=self.algorithm, nranks=self.nranks,
                        nnodes=self.nnodes, shape=self.shape, layout=self.layout, root=self.root,
                        tmpl=np.ascontiguousarray(tmpl), dep_ptr=ptr, dep_t=dep[:, 0].copy(),
                        dep_mode=dep[:, 1].copy(), dep_si=dep[:, 2].copy(), dep_sj=dep[:, 3].copy(),
                        dep_kind=dep[:, 4].copy(), group_ptr=gptr, notes=dict(self.notes))
