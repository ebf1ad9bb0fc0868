"""The explicit form of a schedule: one row per transfer, dependencies as CSR over transfers.

The checker and the packet engine read schedules this way. ``expand_kernel`` walks the
templates' instances in order, so transfer ids follow template order (and so group order).
"""

from __future__ import annotations

import numpy as np

from ..core.jit import njit
from .ir import DEP_COL, DEP_ROW, DEP_SHIFT, F_C3, F_DCH, F_DST, F_ID, F_IL, F_SCH, F_SRC, Schedule


@njit
def _aff(row, base, c3, i, j):
    return ((row[base] * i + row[base + 1] * j + row[base + 2]) % row[base + 3]) * row[base + 4] \
        + ((row[base + 5] * i + row[base + 6] * j + row[base + 7]) % row[base + 8]) * row[base + 9] + row[c3]


@njit
def _ndeps(tmpl, dep_ptr, dep_t, dep_mode, t):
    n = 0
    for e in range(dep_ptr[t], dep_ptr[t + 1]):
        u = dep_t[e]
        if dep_mode[e] == DEP_SHIFT:
            n += 1
        elif dep_mode[e] == DEP_ROW:
            n += tmpl[u, F_IL]
        elif dep_mode[e] == DEP_COL:
            n += tmpl[u, F_ID]
        else:
            n += tmpl[u, F_ID] * tmpl[u, F_IL]
    return n


@njit
def expand_kernel(tmpl, dep_ptr, dep_t, dep_mode, dep_si, dep_sj, dep_kind):
    """(cols int64[X, 7]: template, i, j, src, dst, schunk, dchunk; dptr int64[X+1]; didx int64[E];
    dkind int64[E]: DATA or ORDER)."""
    T = tmpl.shape[0]
    first = np.zeros(T + 1, np.int64)
    for t in range(T):
        first[t + 1] = first[t] + tmpl[t, F_ID] * tmpl[t, F_IL]
    X = first[T]
    cols = np.empty((X, 7), np.int64)
    dptr = np.zeros(X + 1, np.int64)
    x = 0
    for t in range(T):
        nd = _ndeps(tmpl, dep_ptr, dep_t, dep_mode, t)
        for _ in range(tmpl[t, F_ID] * tmpl[t, F_IL]):
            dptr[x + 1] = dptr[x] + nd
            x += 1
    didx = np.empty(dptr[X], np.int64)
    dkind = np.empty(dptr[X], np.int64)
    x = 0
    for t in range(T):
        row = tmpl[t]
        for i in range(row[F_ID]):
            for j in range(row[F_IL]):
                cols[x, 0] = t
                cols[x, 1] = i
                cols[x, 2] = j
                cols[x, 3] = _aff(row, F_SRC, F_C3, i, j)
                cols[x, 4] = _aff(row, F_DST, F_C3 + 1, i, j)
                cols[x, 5] = _aff(row, F_SCH, F_C3 + 2, i, j)
                cols[x, 6] = _aff(row, F_DCH, F_C3 + 3, i, j)
                k = dptr[x]
                for e in range(dep_ptr[t], dep_ptr[t + 1]):
                    u = dep_t[e]
                    ud, ul = tmpl[u, F_ID], tmpl[u, F_IL]
                    ti, tj = (i + dep_si[e]) % ud, (j + dep_sj[e]) % ul
                    mode = dep_mode[e]
                    k0 = k
                    if mode == DEP_SHIFT:
                        didx[k] = first[u] + ti * ul + tj
                        k += 1
                    elif mode == DEP_ROW:
                        for jj in range(ul):
                            didx[k] = first[u] + ti * ul + jj
                            k += 1
                    elif mode == DEP_COL:
                        for ii in range(ud):
                            didx[k] = first[u] + ii * ul + tj
                            k += 1
                    else:
                        for y in range(first[u], first[u + 1]):
                            didx[k] = y
                            k += 1
                    for kk in range(k0, k):
                        dkind[kk] = dep_kind[e]
                x += 1
    return cols, dptr, didx, dkind


@njit
def _first_unrouted(tmpl, hops, nn):
    for t in range(tmpl.shape[0]):
        row = tmpl[t]
        for i in range(row[F_ID]):
            for j in range(row[F_IL]):
                src, dst = _aff(row, F_SRC, F_C3, i, j), _aff(row, F_DST, F_C3 + 1, i, j)
                if src < nn and dst < nn and hops[src * nn + dst] < 0:
                    return src, dst
    return -1, -1


def first_unrouted(s: Schedule, hops: np.ndarray, nn: int) -> tuple[int, int] | None:
    """The first transfer's (source, destination) that hops (nn x nn, -1: no route) has no route for, or
    None; read template by template, without expanding the schedule (a ring over thousands of ranks has
    tens of millions of transfers)."""
    src, dst = _first_unrouted(s.tmpl, hops, nn)
    return None if src < 0 else (int(src), int(dst))


def expand(s: Schedule) -> dict[str, np.ndarray]:
    """Arrays ``tmpl``, ``i``, ``j``, ``src``, ``dst``, ``schunk``, ``dchunk`` (one entry per transfer)
    and the dependency CSR ``dptr``/``didx`` (with ``dkind``, DATA or ORDER) over transfers."""
    cols, dptr, didx, dkind = expand_kernel(s.tmpl, s.dep_ptr, s.dep_t, s.dep_mode, s.dep_si, s.dep_sj, s.dep_kind)
    names = ("tmpl", "i", "j", "src", "dst", "schunk", "dchunk")
    out = {name: np.ascontiguousarray(cols[:, k]) for k, name in enumerate(names)}
    out["dptr"], out["didx"], out["dkind"] = dptr, didx, dkind
    return out
