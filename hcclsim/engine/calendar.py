"""The packet engine's event queue: a calendar of buckets sorted when their turn comes, and a small
binary heap for events scheduled into the bucket being drained (see packet_kernel's docstring).

Keys are ``(time within bucket) << PB | kind << IDB | id``; all helpers work on flat int64 arrays
and never allocate (the kernel grows arrays outside its loop). None is recursive: Numba's on-disk
cache cannot reload recursive functions.
"""

from __future__ import annotations

import numpy as np

from ..core.jit import njit

PB = 42                                   # payload bits: kind << IDB | id
IDB = PB - 3                              # 3 bits of kind: TX_DONE, ARRIVE, START, REDUCED, EMIT
IDMASK = (1 << IDB) - 1
PAYMASK = (1 << PB) - 1
U = np.uint64                             # unsigned indices: no negative-index wraparound checks


@njit
def _heap_push(heap, n, key):
    """Push onto a binary min-heap with room for it; returns the new size."""
    i = n
    while i > 0:
        p = (i - 1) >> 1
        if heap[U(p)] <= key:
            break
        heap[U(i)] = heap[U(p)]
        i = p
    heap[U(i)] = key
    return n + 1


@njit
def _heap_pop(heap, n):
    """Remove the top of a binary min-heap of n keys; returns the new size."""
    n -= 1
    v = heap[U(n)]
    i = 0
    while True:
        c = 2 * i + 1
        if c >= n:
            break
        if c + 1 < n and heap[U(c + 1)] < heap[U(c)]:
            c += 1
        if v <= heap[U(c)]:
            break
        heap[U(i)] = heap[U(c)]
        i = c
    heap[U(i)] = v
    return n


@njit
def _qsort(a, lo, hi, stack):
    """Sort a[lo:hi] in place: quicksort (median of three, smaller side first, explicit stack of
    128), insertion sort below 16 elements. Not recursive: Numba's cache cannot reload recursive kernels."""
    top = 0
    while True:
        while hi - lo > 16:
            m = (lo + hi) >> 1
            h = hi - 1
            if a[U(m)] < a[U(lo)]:
                a[U(m)], a[U(lo)] = a[U(lo)], a[U(m)]
            if a[U(h)] < a[U(m)]:
                a[U(h)], a[U(m)] = a[U(m)], a[U(h)]
                if a[U(m)] < a[U(lo)]:
                    a[U(m)], a[U(lo)] = a[U(lo)], a[U(m)]
            piv = a[U(m)]
            i, j = lo, h
            while True:
                while a[U(i)] < piv:
                    i += 1
                while piv < a[U(j)]:
                    j -= 1
                if i >= j:
                    break
                a[U(i)], a[U(j)] = a[U(j)], a[U(i)]
                i += 1
                j -= 1
            if j + 1 - lo < hi - j - 1:         # push the larger side, sort the smaller now
                stack[top] = j + 1
                stack[top + 1] = hi
                hi = j + 1
            else:
                stack[top] = lo
                stack[top + 1] = j + 1
                lo = j + 1
            top += 2
        for i in range(lo + 1, hi):
            v = a[U(i)]
            j = i - 1
            while j >= lo and a[U(j)] > v:
                a[U(j + 1)] = a[U(j)]
                j -= 1
            a[U(j + 1)] = v
        if top == 0:
            return
        top -= 2
        lo = stack[top]
        hi = stack[top + 1]


MAX_RUNS = 16      # estimate: more ascending runs than this are quicksorted (the 64-rank ring's buckets hold 2-4)


@njit
def _merge(src, so, dst, do, lo, mid, hi):
    """Merge the sorted runs [lo, mid) and [mid, hi) of src into [lo, hi) of dst; src and dst hold
    position i at i - so and i - do."""
    i, j, k = lo, mid, lo
    while i < mid and j < hi:
        if src[U(j - so)] < src[U(i - so)]:
            dst[U(k - do)] = src[U(j - so)]
            j += 1
        else:
            dst[U(k - do)] = src[U(i - so)]
            i += 1
        k += 1
    while i < mid:
        dst[U(k - do)] = src[U(i - so)]
        i += 1
        k += 1
    while j < hi:
        dst[U(k - do)] = src[U(j - so)]
        j += 1
        k += 1


@njit
def _sort(a, lo, hi, tmp, stack):
    """Sort a[lo:hi] in place. A bucket is mostly a few ascending runs (the events that draining the
    buckets before it queued, in the order it drained them): up to MAX_RUNS runs are merged bottom up
    through tmp (room for hi - lo; it holds position i at i - lo), more are quicksorted. stack: room for
    MAX_RUNS + 2 run bounds and _qsort's 128 entries."""
    nr = 0
    stack[0] = lo
    for i in range(lo + 1, hi):
        if a[U(i)] < a[U(i - 1)]:
            nr += 1
            if nr >= MAX_RUNS:
                _qsort(a, lo, hi, stack)
                return
            stack[nr] = i
    nr += 1
    stack[nr] = hi
    in_tmp = False
    while nr > 1:                                       # merge runs pairwise, a -> tmp -> a ...
        so, do = (lo, 0) if in_tmp else (0, lo)
        w = 0
        for r in range(0, nr, 2):
            mid = stack[r + 1]
            end = stack[r + 2] if r + 1 < nr else mid
            if in_tmp:
                _merge(tmp, so, a, do, stack[r], mid, end)
            else:
                _merge(a, so, tmp, do, stack[r], mid, end)
            stack[w] = stack[r]
            w += 1
        stack[w] = hi
        nr = w
        in_tmp = not in_tmp
    if in_tmp:
        for i in range(lo, hi):
            a[U(i)] = tmp[U(i - lo)]


@njit
def _room(bc, nheap, hcap, csh, cur, wsh, mask, t, need):
    """Whether `need` more events at time t fit without growing the heap or a bucket."""
    b = t >> wsh
    if b == cur:
        return nheap + need <= hcap
    return bc[U(b & mask)] + need <= (1 << csh)


@njit
def _queue(bk, bc, heap, nheap, csh, cur, wsh, mask, t, payload, bmax):
    """Queue an event (room checked by _room); returns the new heap size and the fullest bucket's count
    (bmax: at least every bucket's count)."""
    key = ((t & ((1 << wsh) - 1)) << PB) | payload
    b = t >> wsh
    if b == cur:
        return _heap_push(heap, nheap, key), bmax
    bi = U(b & mask)
    c = bc[bi]
    bk[U((b & mask) << csh) + U(c)] = key
    bc[bi] = c + 1
    return nheap, max(bmax, c + 1)
