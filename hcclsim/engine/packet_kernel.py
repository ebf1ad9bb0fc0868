"""The packet engine's event loop: one Numba kernel over flat arrays, no object per packet.

Time is integer picoseconds. Events sit in a calendar queue: bucket ``b`` holds the events of
``[b << wsh, (b+1) << wsh)``; a bucket is sorted (hand-written quicksort) when its turn comes
and drained in order. Keys are ``(time within bucket) << PB | payload``, so the order
``(time, payload)`` is total and a run never depends on how the queue stores events. An event
scheduled into the bucket being drained goes to a small binary heap merged with it.

Model (docs/packet.md):
* a transfer is ready when its dependencies have finished; a rank starts ready transfers in
  order on its message engines; after the issue overhead its packets are injected one at a
  time into the first link (a transfer keeps at most one packet waiting there, so transfers
  sharing a link take turns packet by packet);
* every link is an output port: a FIFO of packets serialised one at a time at the link's
  bandwidth, then the link's latency; a packet going on through a switch first needs room in
  the next port's buffer (lossless credits: the port waits, head of line, until there is);
* switches forward cut-through (from the head's arrival) or store-and-forward, after their
  switching latency;
* in-switch reduction ("jobs"): a contributor reserves an entry of the switch's reduction
  table for each packet before sending it (waiting while the table is full); when all
  contributions of a packet are in, the switch multicasts it on every fan-out transfer and
  frees the entry;
* a packet that a rank reduces on arrival queues for the rank's reduction unit.
"""

from __future__ import annotations

import numpy as np

from ..jit import njit, njit_inline

EV_TX_DONE, EV_ARRIVE, EV_START, EV_REDUCED = 0, 1, 2, 3
PB = 42                                   # payload bits: (id << 2) | event type
PMASK = (1 << PB) - 1
FIX = 16                                  # link_ser / reduce costs are ps per byte << FIX

# transfer table columns
X_SRC, X_DST, X_NPK, X_PKB, X_LASTB, X_PATH, X_PLEN, X_JOB, X_FUSED, X_REDUCE, X_RANKSRC = range(11)
NX = 11
# packet slot columns
K_X, K_IDX, K_BYTES, K_HOP, K_TAIL, K_NEXT = range(6)
# actions run at the current time
A_READY, A_TRY, A_INJECT, A_ENGINES, A_WAKE_TABLE, A_COMPLETE = range(6)
# statistics
S_EVENTS, S_PEAK_QUEUE, S_TABLE_PEAK, S_TABLE_STALL, S_UNFINISHED = range(5)
NSTATS = 5


@njit_inline
def _heap_push(heap, n, key):
    """Push onto a binary min-heap with room for it (callers grow it first)."""
    i = n
    heap[i] = key
    while i > 0:
        p = (i - 1) >> 1
        if heap[p] <= heap[i]:
            break
        heap[p], heap[i] = heap[i], heap[p]
        i = p
    return n + 1


@njit
def _grow_rows(a):
    """The same array with twice the rows (rare path)."""
    b = np.empty((2 * a.shape[0],) + a.shape[1:], a.dtype)
    b[:a.shape[0]] = a
    return b


@njit
def _grow_cols(a):
    b = np.empty((a.shape[0], 2 * a.shape[1]), a.dtype)
    b[:, :a.shape[1]] = a
    return b


@njit
def _heap_pop(heap, n):
    top = heap[0]
    n -= 1
    heap[0] = heap[n]
    i = 0
    while True:
        c = 2 * i + 1
        if c >= n:
            break
        if c + 1 < n and heap[c + 1] < heap[c]:
            c += 1
        if heap[i] <= heap[c]:
            break
        heap[i], heap[c] = heap[c], heap[i]
        i = c
    return top, n


@njit
def _qsort(a, lo, hi):
    """Sort a[lo:hi] in place: quicksort (median of three, smaller side first, explicit stack),
    insertion sort below 16 elements. Not recursive: Numba's cache cannot reload recursive kernels."""
    stack = np.empty(128, np.int64)
    top = 0
    while True:
        while hi - lo > 16:
            m = (lo + hi) >> 1
            h = hi - 1
            if a[m] < a[lo]:
                a[m], a[lo] = a[lo], a[m]
            if a[h] < a[m]:
                a[h], a[m] = a[m], a[h]
                if a[m] < a[lo]:
                    a[m], a[lo] = a[lo], a[m]
            piv = a[m]
            i, j = lo, h
            while True:
                while a[i] < piv:
                    i += 1
                while piv < a[j]:
                    j -= 1
                if i >= j:
                    break
                a[i], a[j] = a[j], a[i]
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
            v = a[i]
            j = i - 1
            while j >= lo and a[j] > v:
                a[j + 1] = a[j]
                j -= 1
            a[j + 1] = v
        if top == 0:
            return
        top -= 2
        lo = stack[top]
        hi = stack[top + 1]


@njit_inline
def _room(bk, bc, heap, nheap, cur, wsh, t):
    """0 when an event at time t can be queued without growing anything; 1: grow the heap; 2: the bucket."""
    b = t >> wsh
    if b == cur:
        return 1 if nheap >= len(heap) else 0
    return 2 if bc[b & (bk.shape[0] - 1)] >= bk.shape[1] else 0


@njit_inline
def _queue(bk, bc, heap, nheap, cur, wsh, t, payload):
    """Queue an event (room checked by _room); returns the new heap size."""
    key = ((t & ((1 << wsh) - 1)) << PB) | payload
    b = t >> wsh
    if b == cur:
        return _heap_push(heap, nheap, key)
    bi = b & (bk.shape[0] - 1)
    bk[bi, bc[bi]] = key
    bc[bi] += 1
    return nheap


@njit_inline
def _push(work, nwork, action, ident):
    """Push an action (work has room for every action that can be pending: see the kernel)."""
    work[nwork, 0] = action
    work[nwork, 1] = ident
    return nwork + 1


@njit_inline
def _fill_packet(pk, p, x, idx, nbytes, now):
    pk[p, K_X] = x
    pk[p, K_IDX] = idx
    pk[p, K_BYTES] = nbytes
    pk[p, K_HOP] = 0
    pk[p, K_TAIL] = now
    pk[p, K_NEXT] = -1


@njit_inline
def _enqueue(pk, q_head, q_tail, lk, p):
    pk[p, K_NEXT] = -1
    if q_tail[lk] < 0:
        q_head[lk] = p
    else:
        pk[q_tail[lk], K_NEXT] = p
    q_tail[lk] = p


@njit
def packet_kernel(xt, path_links, child_ptr, child_idx, ndeps0, jobs, job_fan_ptr, job_fan_idx, job_pk_ptr,
                  link_ser, link_lat, link_buf, link_cut, node_table, nranks, engines, issue_ps, reduce_ser,
                  wsh, nbuckets, want_trace):
    """Simulate every transfer of an explicit schedule.

    xt[x, X_*]: the transfer table; path_links[xt[x, X_PATH] + h]: its h-th link.
    jobs[j] = (switch node, contributions needed per packet). link_ser: ps per byte << FIX;
    link_lat: ps (for a link into a switch, plus the switch's latency); link_buf: bytes of
    output buffer (ports leaving a switch; huge for ranks' own ports); link_cut: the switch at
    the link's head forwards cut-through. Returns (finish ps, start ps per transfer, busy ps per
    link, stats, trace rows (link, from ps, to ps)).
    """
    X = xt.shape[0]
    L = len(link_ser)
    N = nranks
    ndeps = ndeps0.copy()
    next_pk = np.zeros(X, np.int64)
    queued = np.zeros(X, np.bool_)
    delivered = np.zeros(X, np.int64)
    finish = np.full(X, -1, np.int64)
    start = np.full(X, -1, np.int64)
    xnext = np.full(X, -1, np.int64)            # links of the per-rank ready queues and table queues
    blocked_at = np.full(X, -1, np.int64)
    rq_head = np.full(N, -1, np.int64)
    rq_tail = np.full(N, -1, np.int64)
    free_eng = np.full(N, engines, np.int64)
    pk = np.empty((1024, 6), np.int64)
    nslots = 0
    free_top = -1
    q_head = np.full(L, -1, np.int64)
    q_tail = np.full(L, -1, np.int64)
    busy = np.zeros(L, np.bool_)
    cur_held = np.zeros(L, np.int64)
    buf_used = np.zeros(L, np.int64)
    w_head = np.full(L, -1, np.int64)           # ports waiting for room in this port's buffer
    w_next = np.full(L, -1, np.int64)
    waiting = np.zeros(L, np.bool_)
    busy_ps = np.zeros(L, np.int64)
    ru_head = np.full(N, -1, np.int64)
    ru_tail = np.full(N, -1, np.int64)
    nentries = job_pk_ptr[len(job_pk_ptr) - 1]
    jk_count = np.zeros(nentries, np.int64)
    jk_held = np.zeros(nentries, np.bool_)
    nnodes = len(node_table)
    tbl_used = np.zeros(nnodes, np.int64)
    tw_head = np.full(nnodes, -1, np.int64)
    tw_tail = np.full(nnodes, -1, np.int64)
    stats = np.zeros(NSTATS, np.int64)
    tr = np.empty((1024 if want_trace else 0, 3), np.int64)
    ntr = 0
    open_from = np.full(L, -1, np.int64)
    open_to = np.zeros(L, np.int64)
    bk = np.empty((nbuckets, 64), np.int64)
    bc = np.zeros(nbuckets, np.int64)
    heap = np.empty(64, np.int64)
    nheap = 0
    cur = 0                                     # the bucket being drained
    pos = 0
    cnt = 0                                     # bc of the current bucket when it was sorted
    pending = 0
    now = 0
    # every action that can be pending at once: a READY, COMPLETE and INJECT or two per transfer,
    # TRYs per link (its own and its waiters'), ENGINES per rank, WAKE per switch
    work = np.empty((3 * X + 4 * L + 2 * N + nnodes + 1024, 2), np.int64)
    nwork = 0
    for x in range(X - 1, -1, -1):              # stack: transfer 0 runs first
        if ndeps[x] == 0:
            nwork = _push(work, nwork, A_READY, x)

    while True:
        # ---------------------------------------------------------------- actions at 'now'
        while nwork > 0:
            nwork -= 1
            act = work[nwork, 0]
            ident = work[nwork, 1]
            if act == A_TRY:                                        # a port starts its next packet
                lk = ident
                if busy[lk] or q_head[lk] < 0:
                    continue
                p = q_head[lk]
                x = pk[p, K_X]
                hop = pk[p, K_HOP]
                nb = pk[p, K_BYTES]
                cont = hop + 1 < xt[x, X_PLEN]
                if cont:
                    l2 = path_links[xt[x, X_PATH] + hop + 1]
                    if buf_used[l2] > 0 and buf_used[l2] + nb > link_buf[l2]:
                        if not waiting[lk]:
                            waiting[lk] = True
                            w_next[lk] = w_head[l2]
                            w_head[l2] = lk
                        continue
                    buf_used[l2] += nb
                    stats[S_PEAK_QUEUE] = max(stats[S_PEAK_QUEUE], buf_used[l2])
                q_head[lk] = pk[p, K_NEXT]
                if q_head[lk] < 0:
                    q_tail[lk] = -1
                busy[lk] = True
                cur_held[lk] = nb if hop > 0 else 0                 # credit it held in this port's buffer
                done = now + ((nb * link_ser[lk]) >> FIX)
                done = max(done, pk[p, K_TAIL])                            # cannot finish before its tail is in
                busy_ps[lk] += done - now
                if want_trace:
                    if open_from[lk] >= 0 and now <= open_to[lk]:
                        open_to[lk] = done
                    else:
                        if open_from[lk] >= 0:
                            if ntr >= tr.shape[0]:
                                t2 = np.empty((2 * tr.shape[0], 3), np.int64)
                                t2[:ntr] = tr[:ntr]
                                tr = t2
                            tr[ntr, 0] = lk
                            tr[ntr, 1] = open_from[lk]
                            tr[ntr, 2] = open_to[lk]
                            ntr += 1
                        open_from[lk] = now
                        open_to[lk] = done
                room = _room(bk, bc, heap, nheap, cur, wsh, done)
                if room == 1:
                    heap = _grow_rows(heap)
                elif room == 2:
                    bk = _grow_cols(bk)
                nheap = _queue(bk, bc, heap, nheap, cur, wsh, done, (lk << 2) | EV_TX_DONE)
                if cont and link_cut[lk]:
                    arrive = now + link_lat[lk]                     # the head reaches the switch
                else:
                    arrive = done + link_lat[lk]
                pk[p, K_TAIL] = done + link_lat[lk]
                room = _room(bk, bc, heap, nheap, cur, wsh, arrive)
                if room == 1:
                    heap = _grow_rows(heap)
                elif room == 2:
                    bk = _grow_cols(bk)
                nheap = _queue(bk, bc, heap, nheap, cur, wsh, arrive, (p << 2) | EV_ARRIVE)
                pending += 2
                if hop == 0 and xt[x, X_FUSED] == 0:
                    queued[x] = False
                    if next_pk[x] >= xt[x, X_NPK]:
                        if xt[x, X_RANKSRC] == 1:                   # its engine has issued the last packet
                            free_eng[xt[x, X_SRC]] += 1
                            nwork = _push(work, nwork, A_ENGINES, xt[x, X_SRC])
                    else:
                        nwork = _push(work, nwork, A_INJECT, x)
            elif act == A_INJECT:                                   # next packet into the first link
                x = ident
                if queued[x] or next_pk[x] >= xt[x, X_NPK]:
                    continue
                k = next_pk[x]
                j = xt[x, X_JOB]
                if j >= 0:
                    e = job_pk_ptr[j] + k
                    if not jk_held[e]:
                        sw = jobs[j, 0]
                        if tbl_used[sw] >= node_table[sw]:
                            if blocked_at[x] < 0:
                                blocked_at[x] = now
                            xnext[x] = -1
                            if tw_tail[sw] < 0:
                                tw_head[sw] = x
                            else:
                                xnext[tw_tail[sw]] = x
                            tw_tail[sw] = x
                            continue
                        jk_held[e] = True
                        tbl_used[sw] += 1
                        stats[S_TABLE_PEAK] = max(stats[S_TABLE_PEAK], tbl_used[sw])
                    if blocked_at[x] >= 0:
                        stats[S_TABLE_STALL] += now - blocked_at[x]
                        blocked_at[x] = -1
                nb = xt[x, X_LASTB] if k == xt[x, X_NPK] - 1 else xt[x, X_PKB]
                if free_top >= 0:
                    p = free_top
                    free_top = pk[p, K_NEXT]
                else:
                    if nslots >= pk.shape[0]:
                        pk = _grow_rows(pk)
                    p = nslots
                    nslots += 1
                _fill_packet(pk, p, x, k, nb, now)
                next_pk[x] = k + 1
                queued[x] = True
                l0 = path_links[xt[x, X_PATH]]
                _enqueue(pk, q_head, q_tail, l0, p)
                nwork = _push(work, nwork, A_TRY, l0)
            elif act == A_READY:
                x = ident
                if xt[x, X_FUSED] == 1:
                    continue                                        # its job emits its packets
                if xt[x, X_NPK] == 0 or xt[x, X_PLEN] == 0:
                    start[x] = now
                    finish[x] = now                                 # nothing crosses a link
                    nwork = _push(work, nwork, A_COMPLETE, x)
                elif xt[x, X_RANKSRC] == 0:                         # a switch sends: no engine
                    start[x] = now
                    nwork = _push(work, nwork, A_INJECT, x)
                else:
                    r = xt[x, X_SRC]
                    xnext[x] = -1
                    if rq_tail[r] < 0:
                        rq_head[r] = x
                    else:
                        xnext[rq_tail[r]] = x
                    rq_tail[r] = x
                    nwork = _push(work, nwork, A_ENGINES, r)
            elif act == A_ENGINES:                                  # start what the free engines can
                r = ident
                while free_eng[r] > 0 and rq_head[r] >= 0:
                    x = rq_head[r]
                    rq_head[r] = xnext[x]
                    if rq_head[r] < 0:
                        rq_tail[r] = -1
                    free_eng[r] -= 1
                    start[x] = now
                    if issue_ps > 0:
                        room = _room(bk, bc, heap, nheap, cur, wsh, now + issue_ps)
                        if room == 1:
                            heap = _grow_rows(heap)
                        elif room == 2:
                            bk = _grow_cols(bk)
                        nheap = _queue(bk, bc, heap, nheap, cur, wsh, now + issue_ps, (x << 2) | EV_START)
                        pending += 1
                    else:
                        nwork = _push(work, nwork, A_INJECT, x)
            elif act == A_COMPLETE:
                x = ident
                for c in range(child_ptr[x], child_ptr[x + 1]):
                    y = child_idx[c]
                    ndeps[y] -= 1
                    if ndeps[y] == 0:
                        nwork = _push(work, nwork, A_READY, y)
            else:                                                   # A_WAKE_TABLE: retry in FIFO order
                sw = ident
                y = tw_head[sw]
                tw_head[sw] = -1
                tw_tail[sw] = -1
                base = nwork
                while y >= 0:
                    nwork = _push(work, nwork, A_INJECT, y)
                    y = xnext[y]
                i, j2 = base, nwork - 1                             # reverse: the stack pops the first one first
                while i < j2:
                    work[i, 1], work[j2, 1] = work[j2, 1], work[i, 1]
                    i += 1
                    j2 -= 1
        # ---------------------------------------------------------------- next event
        if pending == 0:
            break
        if pos >= cnt and nheap == 0:                               # current bucket done: find the next
            bc[cur & (nbuckets - 1)] = 0
            cur += 1
            guard = 0
            while bc[cur & (nbuckets - 1)] == 0:
                cur += 1
                guard += 1
                if guard > nbuckets:                                # lost events: a bug, never a hang
                    stats[S_UNFINISHED] = -1
                    return finish, start, busy_ps, stats, tr[:ntr]
            cnt = bc[cur & (nbuckets - 1)]
            _qsort(bk[cur & (nbuckets - 1)], 0, cnt)
            pos = 0
        bi = cur & (nbuckets - 1)
        if nheap > 0 and (pos >= cnt or heap[0] < bk[bi, pos]):
            key, nheap = _heap_pop(heap, nheap)
        else:
            key = bk[bi, pos]
            pos += 1
        pending -= 1
        stats[S_EVENTS] += 1
        now = (cur << wsh) | (key >> PB)
        payload = key & PMASK
        typ = payload & 3
        ident = payload >> 2
        if typ == EV_TX_DONE:
            lk = ident
            busy[lk] = False
            if cur_held[lk] > 0:                                    # the packet left this switch port
                buf_used[lk] -= cur_held[lk]
                w = w_head[lk]
                w_head[lk] = -1
                while w >= 0:
                    waiting[w] = False
                    nwork = _push(work, nwork, A_TRY, w)
                    w = w_next[w]
            nwork = _push(work, nwork, A_TRY, lk)
        elif typ == EV_START:
            nwork = _push(work, nwork, A_INJECT, ident)
        deliver = -1
        if typ == EV_ARRIVE:
            p = ident
            x = pk[p, K_X]
            hop = pk[p, K_HOP] + 1
            if hop < xt[x, X_PLEN]:                                 # on to the next port
                pk[p, K_HOP] = hop
                l2 = path_links[xt[x, X_PATH] + hop]
                _enqueue(pk, q_head, q_tail, l2, p)
                nwork = _push(work, nwork, A_TRY, l2)
            elif xt[x, X_REDUCE] == 1 and reduce_ser > 0 and xt[x, X_DST] < N:
                r = xt[x, X_DST]                                    # queue for the rank's reduction unit
                idle = ru_head[r] < 0
                pk[p, K_NEXT] = -1
                if ru_tail[r] < 0:
                    ru_head[r] = p
                else:
                    pk[ru_tail[r], K_NEXT] = p
                ru_tail[r] = p
                if idle:
                    room = _room(bk, bc, heap, nheap, cur, wsh, now + ((pk[p, K_BYTES] * reduce_ser) >> FIX))
                    if room == 1:
                        heap = _grow_rows(heap)
                    elif room == 2:
                        bk = _grow_cols(bk)
                    nheap = _queue(bk, bc, heap, nheap, cur, wsh, now + ((pk[p, K_BYTES] * reduce_ser) >> FIX), (p << 2) | EV_REDUCED)
                    pending += 1
            else:
                deliver = p
        elif typ == EV_REDUCED:                                     # the reduction unit finished ident
            p = ident
            r = xt[pk[p, K_X], X_DST]
            ru_head[r] = pk[p, K_NEXT]
            if ru_head[r] < 0:
                ru_tail[r] = -1
            else:
                q = ru_head[r]
                room = _room(bk, bc, heap, nheap, cur, wsh, now + ((pk[q, K_BYTES] * reduce_ser) >> FIX))
                if room == 1:
                    heap = _grow_rows(heap)
                elif room == 2:
                    bk = _grow_cols(bk)
                nheap = _queue(bk, bc, heap, nheap, cur, wsh, now + ((pk[q, K_BYTES] * reduce_ser) >> FIX), (q << 2) | EV_REDUCED)
                pending += 1
            deliver = p
        if deliver >= 0:
            p = deliver
            x = pk[p, K_X]
            k = pk[p, K_IDX]
            pk[p, K_NEXT] = free_top                                # free the slot
            free_top = p
            delivered[x] += 1
            if delivered[x] == xt[x, X_NPK]:
                finish[x] = now
                nwork = _push(work, nwork, A_COMPLETE, x)
            j = xt[x, X_JOB]
            if j >= 0:                                              # a contribution to an in-switch job
                e = job_pk_ptr[j] + k
                jk_count[e] += 1
                if jk_count[e] == jobs[j, 1]:
                    sw = jobs[j, 0]
                    jk_held[e] = False
                    tbl_used[sw] -= 1
                    for f in range(job_fan_ptr[j], job_fan_ptr[j + 1]):
                        m = job_fan_idx[f]
                        if start[m] < 0:
                            start[m] = now
                        nb = xt[m, X_LASTB] if k == xt[m, X_NPK] - 1 else xt[m, X_PKB]
                        if free_top >= 0:
                            q = free_top
                            free_top = pk[q, K_NEXT]
                        else:
                            if nslots >= pk.shape[0]:
                                pk = _grow_rows(pk)
                            q = nslots
                            nslots += 1
                        _fill_packet(pk, q, m, k, nb, now)
                        lm = path_links[xt[m, X_PATH]]
                        _enqueue(pk, q_head, q_tail, lm, q)
                        nwork = _push(work, nwork, A_TRY, lm)
                    if tw_head[sw] >= 0:
                        nwork = _push(work, nwork, A_WAKE_TABLE, sw)
    for lk in range(L):
        if want_trace and open_from[lk] >= 0:
            if ntr >= tr.shape[0]:
                t2 = np.empty((2 * tr.shape[0] + 1, 3), np.int64)
                t2[:ntr] = tr[:ntr]
                tr = t2
            tr[ntr, 0] = lk
            tr[ntr, 1] = open_from[lk]
            tr[ntr, 2] = open_to[lk]
            ntr += 1
    for x in range(X):
        if finish[x] < 0:
            stats[S_UNFINISHED] += 1
    return finish, start, busy_ps, stats, tr[:ntr]
