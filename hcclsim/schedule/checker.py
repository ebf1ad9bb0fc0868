"""The schedule checker: execute a schedule on small integer buffers and prove it computes its collective.

Every transfer of the expanded schedule is applied (copy or add) in a
dependency-respecting order. The run is repeated in several orders -- the
emitted one, its mirror and seeded random ones -- so a schedule whose
result depends on the order of transfers it leaves unordered (a race) fails.
"""

from __future__ import annotations

import heapq

import numpy as np

from ..core.errors import ScheduleError
from . import collectives as C
from .expand import expand
from .ir import F_DBUF, F_KIND, F_N, F_NRUN, F_RSTRIDE, F_SBUF, PUT_REDUCE, Schedule


def _orders(ex: dict, seeds: int):
    n = len(ex["tmpl"])
    dptr, didx = ex["dptr"], ex["didx"]
    children = [[] for _ in range(n)]
    indeg = np.zeros(n, np.int64)
    for x in range(n):
        for u in didx[dptr[x]:dptr[x + 1]]:
            children[u].append(x)
            indeg[x] += 1
    keys = [np.arange(n), -np.arange(n)] + [np.random.default_rng(s).permutation(n) for s in range(seeds)]
    for key in keys:
        deg = indeg.copy()
        heap = [(key[x], x) for x in range(n) if deg[x] == 0]
        heapq.heapify(heap)
        order = []
        while heap:
            _, x = heapq.heappop(heap)
            order.append(x)
            for c in children[x]:
                deg[c] -= 1
                if deg[c] == 0:
                    heapq.heappush(heap, (key[c], c))
        if len(order) != n:
            raise ScheduleError("dependency cycle in schedule")
        yield order


def check(schedule: Schedule, count_per_block: int, seed: int = 0, orders: int = 3) -> None:
    """Raise ScheduleError unless the schedule computes its collective for this block size (in elements; a
    matrix collective's: per unit of the traffic its schedule carries in notes["traffic"])."""
    s = schedule
    n, lay = s.nranks, s.layout
    if s.collective in C.MATRIX_COLLECTIVES and "traffic" not in s.notes:
        raise ScheduleError(f"{s.algorithm}: a {s.collective} schedule carries its traffic matrix in "
                            f"notes['traffic'] (hcclsim.schedule.matrix.Traffic); this one does not")
    ex = expand(s)
    off = lay.offsets(count_per_block)
    M = lay.nchunks
    for name, hi in (("src", s.nnodes), ("dst", s.nnodes)):
        if len(ex[name]) and (ex[name].min() < 0 or ex[name].max() >= hi):
            raise ScheduleError(f"{s.algorithm}: a transfer's {name} node is outside 0..{hi - 1}")
    t = ex["tmpl"]
    nrun, nch, stride = s.tmpl[t, F_NRUN], s.tmpl[t, F_N], s.tmpl[t, F_RSTRIDE]
    last = (nrun - 1) * stride + nch
    for name in ("schunk", "dchunk"):
        if len(t) and ((ex[name] < 0).any() or (ex[name] + last > M).any()):
            raise ScheduleError(f"{s.algorithm}: a transfer's {name} range leaves the {M} chunks")
    for k, order in enumerate(_orders(ex, orders)):
        rng = np.random.default_rng(seed)
        values, inb, out, tmp = C.initial_buffers(s.collective, n, s.nnodes, lay, count_per_block, s.root, rng,
                                                  s.notes.get("traffic"))
        bufs = (inb, out, tmp)
        for x in order:
            tt = t[x]
            row = s.tmpl[tt]
            sb, db = bufs[row[F_SBUF]], bufs[row[F_DBUF]]
            sn, dn = ex["src"][x], ex["dst"][x]
            for r in range(row[F_NRUN]):
                sc = ex["schunk"][x] + r * row[F_RSTRIDE]
                dc = ex["dchunk"][x] + r * row[F_RSTRIDE]
                s0, s1 = off[sc], off[sc + row[F_N]]
                d0, d1 = off[dc], off[dc + row[F_N]]
                if s1 - s0 != d1 - d0:
                    raise ScheduleError(f"{s.algorithm}: template {tt} moves chunks of unequal sizes")
                if row[F_KIND] == PUT_REDUCE:
                    db[dn, d0:d1] += sb[sn, s0:s1]
                else:
                    db[dn, d0:d1] = sb[sn, s0:s1]
        bad = C.check_result(s.collective, n, lay, count_per_block, s.root, values, out, s.notes.get("traffic"))
        if bad:
            which = ["emitted", "mirrored"][k] if k < 2 else f"random #{k - 1}"
            per = "unit" if s.collective in C.MATRIX_COLLECTIVES else "block"
            where = f"{s.algorithm} {s.collective} on {n} ranks, {count_per_block} elements per {per}"
            if k == 0:
                raise ScheduleError(f"{where}, emitted order: {bad}")
            raise ScheduleError(f"{where}: the result depends on the execution order (a race between transfers "
                                f"the dependencies leave unordered): the emitted order computes the collective, "
                                f"the {which} order does not: {bad}")
