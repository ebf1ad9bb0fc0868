"""The packet engine's event loop: one Numba kernel over flat arrays, no object per packet.

Time is integer picoseconds. Events sit in a calendar queue: bucket ``b`` holds the events of
``[b << wsh, (b+1) << wsh)``; a bucket is sorted when its turn comes (calendar._sort) and drained
in order. Keys are ``(time within bucket) << PB | kind << IDB | id``, the id being the link of a
TX_DONE or an ARRIVE, the transfer of a START, the rank of a REDUCED: the order (time, kind, id) is
total and depends on the model alone, not on where the kernel keeps a packet. An event scheduled
into the bucket being drained goes to a small binary heap merged with it.

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
* in-switch reduction ("jobs"): the switch's merge table holds one entry per packet address being
  merged (its counter of contributions); the first contributor to send a packet reserves the entry
  (later contributors find it), and when the last contribution of the packet is in, the switch
  multicasts it on every fan-out transfer and frees the entry. A job of one contribution and one
  fan-out only relays (a PUT into a switch that forwards it) and takes no entry. With the table full a
  request waits (FIFO), or with job_bypass goes on unmerged: its packet's index is address + npk, the
  switch sends it on to every fan-out as a piece of the address (index npk + address, not one of the
  fan-out's npk packets: T_DELIV and T_NEXTPK step back to make room for it), and the address's result
  leaves when merged + bypassed requests reach the count (its last piece, index past npk too, when no
  entry merged any). A contribution issues addresses in the order addr[addr_ptr[x]:] (merge_order), so
  results may leave out of address order; a fan-out's packets are then numbered as sent (T_QUEUED
  counts them), so that its last one is still the one seen arriving;
* a packet that a rank reduces on arrival queues for the rank's reduction unit, and so (with a reduction
  bandwidth) does every packet of a split address, its index past npk.

Two kinds of event skip the calendar when nothing waits for them, which leaves about two queued
events per packet on a two-hop path instead of four (S_EVENTS still counts them, S_QUEUED not):
* a packet's arrival at the end of its path, unless it is its transfer's last packet or a job's
  contribution or reduced on arrival: a transfer's packets follow one path in order, so only the
  last arrival is seen (it counts the others in);
* a port's TX_DONE when, as the port starts a packet, no packet is queued behind it and no port
  waits for its credit: the port is "quiet". Whoever looks at it next either finds that the
  TX_DONE would have run by now in the (time, kind, id) order and applies it (_sending, _settle),
  or queues it after all, at its own key (_unquiet). Either way the run is the one the queued
  TX_DONE would give, bit for bit.

Speed (bench/packet.py): the work an event triggers runs as *actions* on a LIFO stack. The last
action an action pushes would be popped at once, so it is kept in a variable and run directly
(TRY injects a transfer's next packet itself in the common case, as INJECT would right after it);
the blocks of the loop are in the order of the common chains (a port frees -> it starts its next
packet -> the transfer injects its next one; a packet arrives -> the next port starts it), which
therefore run in one pass without touching the stack. State is row-major in a few 1-D arrays (a
row per transfer, packet, link, rank, node) indexed with unsigned offsets. ``_run`` never
allocates or rebinds an array (in Numba that costs reference-count traffic on every pass): when an
action needs room that it does not have, it stops before changing anything and returns;
``packet_kernel`` grows the array and calls ``_run`` again, which runs that action first. The
machine code of ``_run`` is sensitive to small changes (±10 %): measure with ``python -m bench packet``.
"""

from __future__ import annotations

import numpy as np

from ..core.jit import njit
from .calendar import IDB, IDMASK, PAYMASK, PB, U, _heap_pop, _queue, _room, _sort

EV_TX_DONE, EV_ARRIVE, EV_START, EV_REDUCED, EV_EMIT = 0, 1, 2, 3, 4
FIX = 16                                  # link_ser / reduce costs are ps per byte << FIX

# transfer table columns (xt, built by packet.prepare; X_REDUCE: its rank's reduction unit reduces it on arrival)
X_SRC, X_DST, X_NPK, X_PKB, X_LASTB, X_PATH, X_PLEN, X_JOB, X_FUSED, X_REDUCE, X_RANKSRC = range(11)
NX = 11
# The kernel's state is row-major in 1-D arrays: row offsets are uint64 (id << shift) and the
# column constants below are uint64 too, so an index stays unsigned and Numba emits no
# negative-index fix-up on the hot path.
# transfer rows: xt's columns (T_SRC.. = X_SRC..), then the transfer's state
(T_SRC, T_DST, T_NPK, T_PKB, T_LASTB, T_PATH, T_PLEN, T_JOB, T_FUSED, T_REDUCE, T_RANKSRC,
 T_NEXTPK, T_QUEUED, T_DELIV, T_NDEPS, T_XNEXT) = (U(i) for i in range(16))
TSH = 4
# packet rows
P_X, P_IDX, P_BYTES, P_HOP, P_TAIL, P_NEXT, P_PATH, P_L2 = (U(i) for i in range(8))   # P_L2: the link after this one, or -1
PSH = 3
# link rows; L_AH/L_AT: the link's wire, the packets sent on it that have not arrived, in order (an ARRIVE
# names the link and takes the head)
(L_QH, L_QT, L_BUSY, L_HELD, L_USED, L_WHEAD, L_WNEXT, L_WAITING, L_BUSYPS, L_AH, L_AT,
 L_SER, L_LAT, L_BUF, L_CUT, L_UNTIL) = (U(i) for i in range(16))
LSH = 4
# L_BUSY: idle; sending until L_UNTIL with its TX_DONE queued; or sending with none queued, because no
# packet or port waited for it when it started ("quiet": whoever looks next applies the TX_DONE,
# _sending and _settle, or queues it after all, _unquiet)
IDLE, BUSY_EVENT, BUSY_QUIET = 0, 1, 2
# rank rows: ready queue, free engines, reduction-unit queue
R_QH, R_QT, R_FREE, R_RUH, R_RUT = (U(i) for i in range(5))
RSH = 3
# node rows: reduction-table entries in use, FIFO of transfers waiting for one, the table's size
N_USED, N_TWH, N_TWT, N_TABLE = (U(i) for i in range(4))
NSH = 2
# actions; a stack entry is id << 4 | action; E_* run a popped event (8 + its type)
A_NONE, A_TRY, A_INJECT, A_READY, A_ENGINES, A_WAKE_TABLE, A_COMPLETE, A_DELIVER = range(8)
E_TX_DONE, E_ARRIVE, E_START, E_REDUCED, E_EMIT = 8, 9, 10, 11, 12
# _run's saved scalars
Z_NHEAP, Z_CUR, Z_POS, Z_CNT, Z_NOW, Z_NWORK, Z_NSLOTS, Z_FREE, Z_NTR, Z_CSH, Z_BMAX, Z_CPAY = range(12)
NZ = 12
# what _run returns: finished, or which array to grow before calling it again
G_DONE, G_HEAP, G_BUCKETS, G_PACKETS, G_TRACE = range(5)
# statistics
# S_EVENTS counts every event of the model, S_QUEUED those that went through the calendar (the others:
# arrivals and TX_DONEs that nothing waited for, module docstring)
# S_BYPASS: requests that went on unmerged (table_full = "bypass"); S_BLOCKED: transfers still waiting for an
# entry when nothing else can happen (table_full = "wait" with the GPUs' orders differing: a deadlock)
S_EVENTS, S_PEAK_QUEUE, S_TABLE_PEAK, S_TABLE_STALL, S_UNFINISHED, S_QUEUED, S_BYPASS, S_BLOCKED = range(8)
NSTATS = 8


@njit
def _release(ptr, idx, x, xs, work, nwork):
    """Transfer x released its dependents ptr/idx (DATA on arrival, ORDER once it left): each whose
    last dependency this was becomes ready. Returns the new stack size (work has room)."""
    for c in range(ptr[x], ptr[x + 1]):
        y = idx[c]
        yo = (U(y) << TSH) + T_NDEPS
        xs[yo] -= 1
        if xs[yo] == 0:
            work[U(nwork)] = (y << 4) | A_READY
            nwork += 1
    return nwork


@njit
def _enqueue(pk, ls, lk, p):
    """Append packet p to link lk's FIFO."""
    o = U(lk) << LSH
    pk[(U(p) << PSH) + P_NEXT] = -1
    if ls[o + L_QT] < 0:
        ls[o + L_QH] = p
    else:
        pk[(U(ls[o + L_QT]) << PSH) + P_NEXT] = p
    ls[o + L_QT] = p


@njit
def _sending(ls, o, lk, now, cpay):
    """Whether quiet port lk (row o) is still sending where the run stands (at now, running the event
    of payload cpay or what it triggered): its TX_DONE, had it been queued, would not have run yet."""
    until = ls[o + L_UNTIL]
    return until > now or (until == now and ((EV_TX_DONE << IDB) | lk) >= cpay)


@njit
def _settle(ls, o):
    """What quiet port (row o)'s TX_DONE would have done: it is idle, its packet's credit is back."""
    ls[o + L_BUSY] = IDLE
    ls[o + L_USED] -= ls[o + L_HELD]


@njit
def _unquiet(ls, o, lk, bk, bc, heap, nheap, csh, cur, wsh, mask, bmax):
    """Queue port lk (row o)'s TX_DONE, at its own key (room checked): something now waits for it."""
    ls[o + L_BUSY] = BUSY_EVENT
    return _queue(bk, bc, heap, nheap, csh, cur, wsh, mask, ls[o + L_UNTIL], (EV_TX_DONE << IDB) | lk, bmax)


@njit
def _unwire(pk, ls, ao, po):
    """Take the packet at po off the head of the wire of the link at row ao (it has arrived)."""
    q = pk[po + P_NEXT]
    ls[ao + L_AH] = q
    if q < 0:
        ls[ao + L_AT] = -1


@njit
def _slot(pk, free_top, nslots):
    """A packet slot: the free list's head, else the next unused one; (slot, free head, slots used)."""
    if free_top >= 0:
        return free_top, pk[(U(free_top) << PSH) + P_NEXT], nslots
    return nslots, free_top, nslots + 1


@njit
def _new_packet(pk, xs, path_links, ls, x, k, nb, now, p):
    """Fill slot p with packet k of transfer x and queue it at the transfer's first link (returned)."""
    lk = _fill_packet(pk, xs, path_links, x, k, nb, now, p)
    _enqueue(pk, ls, lk, p)
    return lk


@njit
def _fill_packet(pk, xs, path_links, x, k, nb, now, p):
    """Fill slot p with packet k of transfer x, in at its source at now; returns its first link."""
    po = U(p) << PSH
    xo = U(x) << TSH
    pk[po + P_X] = x
    pk[po + P_IDX] = k
    pk[po + P_BYTES] = nb
    pk[po + P_HOP] = 0
    pk[po + P_TAIL] = now
    path = xs[xo + T_PATH]
    pk[po + P_PATH] = path
    pk[po + P_L2] = path_links[U(path + 1)] if xs[xo + T_PLEN] > 1 else -1
    return path_links[U(path)]


@njit
def _run(xs, path_links, child_ptr, child_idx, order_ptr, order_idx, jobs, job_fan_ptr, job_fan_idx, job_pk_ptr, jk_count, jk_held,
         jk_split, addr_ptr, addr, job_bypass,
         finish, start, blocked_at, ls, lt, rs, ns, pk, tr, bk, bc, btmp, heap, work, qstack, z, stats,
         nranks, issue_ps, rel_ps, jit_ps, reduce_ser, wsh, nbuckets, want_trace):
    """Run events and actions until every event is done (G_DONE) or an array must grow (G_*).

    One pass of the loop runs one action; the blocks are in the order of the common chains
    (ARRIVE or TX_DONE -> TRY -> INJECT), so those fall through without looping."""
    mask = nbuckets - 1
    hcap = len(heap)
    pkcap = len(pk) >> PSH
    trcap = len(tr) // 3
    csh = z[Z_CSH]
    nheap, cur, pos, cnt = z[Z_NHEAP], z[Z_CUR], z[Z_POS], z[Z_CNT]
    now, nwork, cpay = z[Z_NOW], z[Z_NWORK], z[Z_CPAY]
    nslots, free_top, ntr = z[Z_NSLOTS], z[Z_FREE], z[Z_NTR]
    queued, implicit, peak_queue = stats[S_QUEUED], stats[S_EVENTS] - stats[S_QUEUED], stats[S_PEAK_QUEUE]
    bmax = z[Z_BMAX]
    code = G_DONE
    act = A_NONE
    ident = 0
    while True:
        if act == A_NONE:
            if nwork > 0:
                nwork -= 1
                w = work[U(nwork)]
                act = w & 15
                ident = w >> 4
            else:                                                   # ---------------- next event
                if pos >= cnt and nheap == 0:                       # current bucket done: find the next
                    bc[U(cur & mask)] = 0
                    cur += 1
                    guard = 0
                    while bc[U(cur & mask)] == 0 and guard < nbuckets:
                        cur += 1
                        guard += 1
                    if guard == nbuckets:                           # the calendar is empty: done
                        break
                    cnt = bc[U(cur & mask)]
                    _sort(bk, (cur & mask) << csh, ((cur & mask) << csh) + cnt, btmp, qstack)
                    pos = 0
                kk = U(((cur & mask) << csh) + pos)
                if nheap > 0 and (pos >= cnt or heap[0] < bk[kk]):
                    key = heap[0]
                    nheap = _heap_pop(heap, nheap)
                else:
                    key = bk[kk]
                    pos += 1
                queued += 1
                now = (cur << wsh) | (key >> PB)
                cpay = key & PAYMASK
                act = E_TX_DONE + (cpay >> IDB)
                ident = key & IDMASK
        if act == E_ARRIVE:                                         # a packet reached the end of link ident
            ao = U(ident) << LSH
            p = ls[ao + L_AH]
            po = U(p) << PSH
            l2 = pk[po + P_L2]
            if l2 >= 0:                                             # on to the next port
                _unwire(pk, ls, ao, po)
                hop = pk[po + P_HOP] + 1
                pk[po + P_HOP] = hop
                plen = xs[(U(pk[po + P_X]) << TSH) + T_PLEN]
                pk[po + P_L2] = path_links[U(pk[po + P_PATH] + hop + 1)] if hop + 1 < plen else -1
                _enqueue(pk, ls, l2, p)
                act = A_TRY
                ident = l2
            else:
                xo = U(pk[po + P_X]) << TSH
                if xs[xo + T_REDUCE] == 1 or (reduce_ser > 0 and pk[po + P_IDX] >= xs[xo + T_NPK] and xs[xo + T_FUSED] == 1
                                              and xs[xo + T_DST] < nranks):   # a piece of a split address
                    ro = U(xs[xo + T_DST]) << RSH                   # queue for the rank's reduction unit
                    t = now + ((pk[po + P_BYTES] * reduce_ser) >> FIX)
                    if not _room(bc, nheap, hcap, csh, cur, wsh, mask, t, 1):
                        code = G_HEAP if t >> wsh == cur else G_BUCKETS
                        break
                    _unwire(pk, ls, ao, po)
                    idle = rs[ro + R_RUH] < 0
                    pk[po + P_NEXT] = -1
                    if rs[ro + R_RUT] < 0:
                        rs[ro + R_RUH] = p
                    else:
                        pk[(U(rs[ro + R_RUT]) << PSH) + P_NEXT] = p
                    rs[ro + R_RUT] = p
                    if idle:
                        nheap, bmax = _queue(bk, bc, heap, nheap, csh, cur, wsh, mask, t, (EV_REDUCED << IDB) | xs[xo + T_DST], bmax)
                    act = A_NONE
                else:
                    _unwire(pk, ls, ao, po)
                    act = A_DELIVER
                    ident = p
        if act == E_TX_DONE:                                        # a port finished sending
            o = U(ident) << LSH
            ls[o + L_BUSY] = IDLE
            held = ls[o + L_HELD]
            if held > 0:                                            # the packet left this switch port
                ls[o + L_USED] -= held
                w = ls[o + L_WHEAD]
                ls[o + L_WHEAD] = -1
                while w >= 0:
                    ls[(U(w) << LSH) + L_WAITING] = 0
                    work[U(nwork)] = (w << 4) | A_TRY
                    nwork += 1
                    w = ls[(U(w) << LSH) + L_WNEXT]
            act = A_TRY if ls[o + L_QH] >= 0 else A_NONE
        if act == A_TRY:                                            # a port starts its next packet
            lk = ident
            o = U(lk) << LSH
            p = ls[o + L_QH]
            act = A_NONE
            if p < 0:
                continue
            if nheap + 3 > hcap or bmax + 3 > (1 << csh):           # room for 3 events anywhere
                code = G_HEAP if nheap + 3 > hcap else G_BUCKETS
                act = A_TRY
                break
            st = ls[o + L_BUSY]
            if st != IDLE:
                if st == BUSY_EVENT:
                    continue                                        # its TX_DONE will start p
                if _sending(ls, o, lk, now, cpay):                  # p waits for its TX_DONE after all
                    nheap, bmax = _unquiet(ls, o, lk, bk, bc, heap, nheap, csh, cur, wsh, mask, bmax)
                    implicit -= 1
                    continue
                _settle(ls, o)
            po = U(p) << PSH
            hop = pk[po + P_HOP]
            nb = pk[po + P_BYTES]
            l2 = pk[po + P_L2]
            cont = l2 >= 0
            o2 = U(0)
            used = 0
            if cont:
                o2 = U(l2) << LSH
                if ls[o2 + L_BUSY] == BUSY_QUIET and not _sending(ls, o2, l2, now, cpay):
                    _settle(ls, o2)
                used = ls[o2 + L_USED]
                if used > 0 and used + nb > ls[o2 + L_BUF]:
                    if ls[o + L_WAITING] == 0:                      # wait, head of line, for credit
                        ls[o + L_WAITING] = 1
                        ls[o + L_WNEXT] = ls[o2 + L_WHEAD]
                        ls[o2 + L_WHEAD] = lk
                    if ls[o2 + L_BUSY] == BUSY_QUIET:               # its TX_DONE will wake the waiters
                        nheap, bmax = _unquiet(ls, o2, l2, bk, bc, heap, nheap, csh, cur, wsh, mask, bmax)
                        implicit -= 1
                    continue
            done = now + ((nb * ls[o + L_SER]) >> FIX)
            done = max(done, pk[po + P_TAIL])                       # cannot finish before its tail is in
            lat = ls[o + L_LAT]
            arrive = now + lat if cont and ls[o + L_CUT] != 0 else done + lat   # cut-through: the head
            if want_trace and lt[2 * lk] >= 0 and now > lt[2 * lk + 1] and ntr >= trcap:
                code = G_TRACE
                act = A_TRY
                break
            if cont:
                used += nb
                ls[o2 + L_USED] = used
                peak_queue = max(peak_queue, used)
            q = pk[po + P_NEXT]
            ls[o + L_QH] = q
            if q < 0:
                ls[o + L_QT] = -1
            ls[o + L_HELD] = nb if hop > 0 else 0                   # credit it held in this port's buffer
            ls[o + L_UNTIL] = done
            ls[o + L_BUSYPS] += done - now
            if want_trace:
                if lt[2 * lk] >= 0 and now <= lt[2 * lk + 1]:
                    lt[2 * lk + 1] = done
                else:
                    if lt[2 * lk] >= 0:
                        tr[3 * ntr] = lk
                        tr[3 * ntr + 1] = lt[2 * lk]
                        tr[3 * ntr + 2] = lt[2 * lk + 1]
                        ntr += 1
                    lt[2 * lk] = now
                    lt[2 * lk + 1] = done
            x = pk[po + P_X]
            xo = U(x) << TSH
            if cont or xs[xo + T_JOB] >= 0 or xs[xo + T_REDUCE] != 0 or pk[po + P_IDX] >= xs[xo + T_NPK] - 1:
                nheap, bmax = _queue(bk, bc, heap, nheap, csh, cur, wsh, mask, arrive, (EV_ARRIVE << IDB) | lk, bmax)
                pk[po + P_TAIL] = done + lat
                pk[po + P_NEXT] = -1                                # onto the link's wire, in order
                if ls[o + L_AT] < 0:
                    ls[o + L_AH] = p
                else:
                    pk[(U(ls[o + L_AT]) << PSH) + P_NEXT] = p
                ls[o + L_AT] = p
            else:                                                   # nothing waits for it to arrive
                xs[xo + T_DELIV] += 1
                implicit += 1
                pk[po + P_NEXT] = free_top
                free_top = p
            if hop == 0:
                if xs[xo + T_FUSED] == 1:                           # a job's packet left the switch
                    xs[xo + T_NEXTPK] += 1
                    if xs[xo + T_NEXTPK] == xs[xo + T_NPK] and order_ptr[x + 1] > order_ptr[x]:
                        nheap, bmax = _queue(bk, bc, heap, nheap, csh, cur, wsh, mask, done, (EV_START << IDB) | (x << 1) | 1, bmax)
                else:
                    xs[xo + T_QUEUED] = 0
                    k = xs[xo + T_NEXTPK]
                    npk = xs[xo + T_NPK]
                    if k >= npk and order_ptr[x + 1] > order_ptr[x]:   # when its last byte has left
                        nheap, bmax = _queue(bk, bc, heap, nheap, csh, cur, wsh, mask, done, (EV_START << IDB) | (x << 1) | 1, bmax)
                    if k < npk and xs[xo + T_JOB] < 0 and free_top >= 0:
                        # INJECT's common case, run here: the next packet joins this (busy) port's queue
                        q, free_top, nslots = _slot(pk, free_top, nslots)     # from the free list
                        nb = xs[xo + T_LASTB] if k == npk - 1 else xs[xo + T_PKB]
                        _new_packet(pk, xs, path_links, ls, x, k, nb, now, q)
                        xs[xo + T_NEXTPK] = k + 1
                        xs[xo + T_QUEUED] = 1
                    elif k < npk:
                        act = A_INJECT
                        ident = x
                    elif xs[xo + T_RANKSRC] == 1:                   # its engine has issued the last packet
                        r = xs[xo + T_SRC]
                        rs[(U(r) << RSH) + R_FREE] += 1
                        act = A_ENGINES
                        ident = r
            if ls[o + L_QH] >= 0 or ls[o + L_WHEAD] >= 0:           # a packet or a port waits for it
                nheap, bmax = _unquiet(ls, o, lk, bk, bc, heap, nheap, csh, cur, wsh, mask, bmax)
            else:                                                   # nobody does yet: no TX_DONE
                ls[o + L_BUSY] = BUSY_QUIET
                implicit += 1
        if act == A_INJECT:                                         # next packet into the first link
            x = ident
            if free_top < 0 and nslots >= pkcap:
                code = G_PACKETS
                break
            xo = U(x) << TSH
            k = xs[xo + T_NEXTPK]
            act = A_NONE
            if xs[xo + T_QUEUED] != 0 or k >= xs[xo + T_NPK]:
                continue
            j = xs[xo + T_JOB]
            a = k                                                   # the packet's address (its index in the job)
            mark = 0                                                # T_NPK: it bypasses the table
            if j >= 0 and (jobs[2 * j + 1] > 1 or job_fan_ptr[j + 1] - job_fan_ptr[j] > 1):   # a relay needs no entry
                if len(addr) > 0:                                   # merge_order: this rank's order of addresses
                    a = addr[addr_ptr[x] + k]
                e = job_pk_ptr[j] + a
                if jk_held[e] == 0:
                    so = U(jobs[2 * j]) << NSH
                    if ns[so + N_USED] < ns[so + N_TABLE]:
                        jk_held[e] = 1
                        ns[so + N_USED] += 1
                        stats[S_TABLE_PEAK] = max(stats[S_TABLE_PEAK], ns[so + N_USED])
                    elif job_bypass[j] != 0:                        # the table is full: on unmerged
                        mark = xs[xo + T_NPK]
                        stats[S_BYPASS] += 1
                    else:                                           # the table is full: wait in FIFO order
                        if blocked_at[x] < 0:
                            blocked_at[x] = now
                        xs[xo + T_XNEXT] = -1
                        if ns[so + N_TWT] < 0:
                            ns[so + N_TWH] = x
                        else:
                            xs[(U(ns[so + N_TWT]) << TSH) + T_XNEXT] = x
                        ns[so + N_TWT] = x
                        continue
                if blocked_at[x] >= 0:
                    stats[S_TABLE_STALL] += now - blocked_at[x]
                    blocked_at[x] = -1
            nb = xs[xo + T_LASTB] if a == xs[xo + T_NPK] - 1 else xs[xo + T_PKB]
            p, free_top, nslots = _slot(pk, free_top, nslots)
            l0 = _new_packet(pk, xs, path_links, ls, x, a + mark, nb, now, p)
            xs[xo + T_NEXTPK] = k + 1
            xs[xo + T_QUEUED] = 1
            act = A_TRY
            ident = l0
            continue
        if act == A_DELIVER:                                        # packet ident is in at its destination
            p = ident
            po = U(p) << PSH
            x = pk[po + P_X]
            xo = U(x) << TSH
            j = xs[xo + T_JOB]
            if j >= 0 and nslots + 2 * (job_fan_ptr[j + 1] - job_fan_ptr[j]) > pkcap:
                code = G_PACKETS
                break
            if j >= 0 and jobs[2 * j] < nranks:                     # a rank relays it: room for its EMITs
                nfan = job_fan_ptr[j + 1] - job_fan_ptr[j]
                short = False
                for f in range(job_fan_ptr[j], job_fan_ptr[j + 1]):
                    m = job_fan_idx[f]
                    t = max(now, rel_ps[m]) + issue_ps + jit_ps[m]
                    if not _room(bc, nheap, hcap, csh, cur, wsh, mask, t, nfan):
                        code = G_HEAP if t >> wsh == cur else G_BUCKETS
                        short = True
                        break
                if short:
                    break
            k = pk[po + P_IDX]
            pk[po + P_NEXT] = free_top                              # free the slot
            free_top = p
            xs[xo + T_DELIV] += 1
            nxt = -1                                                # the last action pushed (runs next)
            if xs[xo + T_DELIV] == xs[xo + T_NPK]:
                finish[x] = now
                nxt = (x << 4) | A_COMPLETE
            if j >= 0:                                              # a contribution to an in-switch job
                part = False                                        # this one goes on alone (bypassed)
                if k >= xs[xo + T_NPK]:                             # it bypassed the table
                    k -= xs[xo + T_NPK]
                    part = True
                e = job_pk_ptr[j] + k
                jk_count[e] += 1
                fin = jk_count[e] == jobs[2 * j + 1]                # the address is complete: its result goes out
                if part:
                    jk_split[e] = jobs[2 * j + 1] > 1               # pieces to add up at the destinations
                    part = not fin or jk_held[e] != 0               # unless it is the result itself
                if fin or part:
                    sw = jobs[2 * j]
                    so = U(sw) << NSH
                    if fin:
                        ns[so + N_USED] -= jk_held[e]               # a relay held none
                        jk_held[e] = 0
                    for f in range(job_fan_ptr[j], job_fan_ptr[j + 1]):
                        m = job_fan_idx[f]
                        mo = U(m) << TSH
                        if start[m] < 0:
                            start[m] = now
                        npm = xs[mo + T_NPK]
                        nb = xs[mo + T_LASTB] if k == npm - 1 else xs[mo + T_PKB]
                        if part:                                    # a piece of the address, unmerged: its
                            # index past npm says so, and it is not one of the transfer's npm packets
                            q, free_top, nslots = _slot(pk, free_top, nslots)
                            lm = _new_packet(pk, xs, path_links, ls, m, npm + k, nb, now, q)
                            xs[mo + T_DELIV] -= 1
                            xs[mo + T_NEXTPK] -= 1
                        if fin:
                            idx = k
                            if len(addr) > 0 and xs[mo + T_JOB] < 0:    # results leave out of address order:
                                idx = xs[mo + T_QUEUED]             # number them as sent (the last one is seen)
                                xs[mo + T_QUEUED] = idx + 1
                            if jk_split[e] != 0:                    # the last piece of a split address
                                idx += npm
                            q, free_top, nslots = _slot(pk, free_top, nslots)
                            if sw < nranks:                         # a rank relays: it issues the packet as
                                t = max(now, rel_ps[m]) + issue_ps + jit_ps[m]   # any transfer (release,
                                _fill_packet(pk, xs, path_links, m, idx, nb, t, q)   # overhead, jitter)
                                nheap, bmax = _queue(bk, bc, heap, nheap, csh, cur, wsh, mask, t, (EV_EMIT << IDB) | q, bmax)
                                continue
                            lm = _new_packet(pk, xs, path_links, ls, m, idx, nb, now, q)
                        if nxt >= 0:
                            work[U(nwork)] = nxt
                            nwork += 1
                        nxt = (lm << 4) | A_TRY
                    if fin and ns[so + N_TWH] >= 0:
                        if nxt >= 0:
                            work[U(nwork)] = nxt
                            nwork += 1
                        nxt = (sw << 4) | A_WAKE_TABLE
            act = A_NONE
            if nxt >= 0:
                act = nxt & 15
                ident = nxt >> 4
            continue
        if act == E_EMIT:                                           # a relaying rank issues packet ident
            p = ident
            lk = path_links[U(pk[(U(p) << PSH) + P_PATH])]
            _enqueue(pk, ls, lk, p)
            act = A_TRY
            ident = lk
        if act == E_REDUCED:                                        # rank ident's reduction unit is done
            ro = U(ident) << RSH
            p = rs[ro + R_RUH]
            po = U(p) << PSH
            q = pk[po + P_NEXT]
            if q >= 0:
                t = now + ((pk[(U(q) << PSH) + P_BYTES] * reduce_ser) >> FIX)
                if not _room(bc, nheap, hcap, csh, cur, wsh, mask, t, 1):
                    code = G_HEAP if t >> wsh == cur else G_BUCKETS
                    break
                rs[ro + R_RUH] = q
                nheap, bmax = _queue(bk, bc, heap, nheap, csh, cur, wsh, mask, t, (EV_REDUCED << IDB) | ident, bmax)
            else:
                rs[ro + R_RUH] = -1
                rs[ro + R_RUT] = -1
            act = A_DELIVER
            ident = p
        elif act == E_START:                                        # issue overhead passed, or a transfer left
            if ident & 1:                                           # its last byte left: release order deps
                x = ident >> 1
                nwork = _release(order_ptr, order_idx, x, xs, work, nwork)
                act = A_NONE
            else:
                act = A_INJECT
                ident = ident >> 1
        elif act == A_READY:
            x = ident
            xo = U(x) << TSH
            act = A_NONE
            if xs[xo + T_FUSED] == 1:
                continue                                            # its job emits its packets
            if xs[xo + T_NPK] == 0 or xs[xo + T_PLEN] == 0:
                start[x] = now
                finish[x] = now                                     # nothing crosses a link
                act = A_COMPLETE
            elif xs[xo + T_RANKSRC] == 0:                           # a switch sends: no engine
                start[x] = now
                act = A_INJECT
            else:
                r = xs[xo + T_SRC]
                ro = U(r) << RSH
                xs[xo + T_XNEXT] = -1
                if rs[ro + R_QT] < 0:
                    rs[ro + R_QH] = x
                else:
                    xs[(U(rs[ro + R_QT]) << TSH) + T_XNEXT] = x
                rs[ro + R_QT] = x
                act = A_ENGINES
                ident = r
        elif act == A_ENGINES:                                      # start what the free engines can
            ro = U(ident) << RSH
            stop = False
            while rs[ro + R_FREE] > 0 and rs[ro + R_QH] >= 0:
                x = rs[ro + R_QH]
                t = max(now, rel_ps[x]) + issue_ps + jit_ps[x]          # release (skew, WQE), overhead, jitter
                if t > now and not _room(bc, nheap, hcap, csh, cur, wsh, mask, t, 1):
                    code = G_HEAP if t >> wsh == cur else G_BUCKETS
                    stop = True
                    break
                rs[ro + R_QH] = xs[(U(x) << TSH) + T_XNEXT]
                if rs[ro + R_QH] < 0:
                    rs[ro + R_QT] = -1
                rs[ro + R_FREE] -= 1
                start[x] = now
                if t > now:
                    nheap, bmax = _queue(bk, bc, heap, nheap, csh, cur, wsh, mask, t, (EV_START << IDB) | (x << 1), bmax)
                else:
                    work[U(nwork)] = (x << 4) | A_INJECT
                    nwork += 1
            if stop:
                break
            act = A_NONE
        elif act == A_COMPLETE:
            nwork = _release(child_ptr, child_idx, ident, xs, work, nwork)
            xo = U(ident) << TSH
            if xs[xo + T_NPK] == 0 or xs[xo + T_PLEN] == 0:
                nwork = _release(order_ptr, order_idx, ident, xs, work, nwork)   # never 'left': now
            act = A_NONE
        elif act == A_WAKE_TABLE:                                   # retry in FIFO order
            so = U(ident) << NSH
            y = ns[so + N_TWH]
            ns[so + N_TWH] = -1
            ns[so + N_TWT] = -1
            base = nwork
            while y >= 0:
                work[U(nwork)] = (y << 4) | A_INJECT
                nwork += 1
                y = xs[(U(y) << TSH) + T_XNEXT]
            i, j2 = base, nwork - 1                                 # reverse: the first one runs first
            while i < j2:
                work[i], work[j2] = work[j2], work[i]
                i += 1
                j2 -= 1
            act = A_NONE
    if act != A_NONE:                                               # stopped for room: run it again first
        work[U(nwork)] = (ident << 4) | act
        nwork += 1
    z[Z_NHEAP], z[Z_CUR], z[Z_POS], z[Z_CNT] = nheap, cur, pos, cnt
    z[Z_NOW], z[Z_NWORK], z[Z_CPAY] = now, nwork, cpay
    z[Z_NSLOTS], z[Z_FREE], z[Z_NTR], z[Z_BMAX] = nslots, free_top, ntr, bmax
    stats[S_EVENTS], stats[S_QUEUED], stats[S_PEAK_QUEUE] = queued + implicit, queued, peak_queue
    return code


@njit
def _grown(a, n):
    """a, or a copy of it with room for n items when it has less."""
    if n <= len(a):
        return a
    b = np.empty(n, a.dtype)
    b[:len(a)] = a
    return b


@njit
def _rows(tr, ntr):
    """The first ntr trace rows as an (ntr, 3) array."""
    out = np.empty((ntr, 3), np.int64)
    for i in range(ntr):
        out[i, 0], out[i, 1], out[i, 2] = tr[3 * i], tr[3 * i + 1], tr[3 * i + 2]
    return out


@njit
def packet_kernel(xt, path_links, child_ptr, child_idx, order_ptr, order_idx, ndeps0, jobs, job_fan_ptr, job_fan_idx, job_pk_ptr,
                  addr_ptr, addr, job_bypass, link_ser, link_lat, link_buf, link_cut, node_table, nranks, engines, issue_ps, rel_ps, jit_ps,
                  reduce_ser, wsh, nbuckets, want_trace):
    """Simulate every transfer of an explicit schedule.

    xt[x, X_*]: the transfer table; path_links[xt[x, X_PATH] + h]: its h-th link.
    jobs[j] = (switch node, contributions needed per packet). link_ser: ps per byte << FIX;
    link_lat: ps (for a link into a switch, plus the switch's latency); link_buf: bytes of
    output buffer (ports leaving a switch; huge for ranks' own ports); link_cut: the switch at
    the link's head forwards cut-through. rel_ps[x]: transfer x issues no earlier (its rank's arrival, skew,
    plus when its engine's control core has its work-queue element ready);
    jit_ps[x]: transfer x starts that much later than its issue overhead alone (jitter). Returns (finish ps, start ps per transfer, busy ps per
    link, stats, trace rows (link, from ps, to ps)).
    """
    X = xt.shape[0]
    L = len(link_ser)
    N = nranks
    nnodes = len(node_table)
    xs = np.zeros(X << TSH, np.int64)
    for x in range(X):
        for c in range(NX):
            xs[(x << TSH) + c] = xt[x, c]
        xs[(U(x) << TSH) + T_NDEPS] = ndeps0[x]
        xs[(U(x) << TSH) + T_XNEXT] = -1
    ls = np.zeros(L << LSH, np.int64)
    for lk in range(L):
        o = U(lk) << LSH
        ls[o + L_QH] = ls[o + L_QT] = ls[o + L_WHEAD] = ls[o + L_WNEXT] = ls[o + L_AH] = ls[o + L_AT] = -1
        ls[o + L_SER], ls[o + L_LAT] = link_ser[lk], link_lat[lk]
        ls[o + L_BUF], ls[o + L_CUT] = link_buf[lk], link_cut[lk]
    lt = np.full(2 * L if want_trace else 0, -1, np.int64)     # a busy interval open per link (trace)
    rs = np.full(N << RSH, -1, np.int64)
    for r in range(N):
        rs[(U(r) << RSH) + R_FREE] = engines
    ns = np.full(nnodes << NSH, -1, np.int64)
    for sw in range(nnodes):
        ns[(U(sw) << NSH) + N_USED] = 0
        ns[(U(sw) << NSH) + N_TABLE] = node_table[sw]
    jobf = np.empty(2 * jobs.shape[0], np.int64)
    for j in range(jobs.shape[0]):
        jobf[2 * j], jobf[2 * j + 1] = jobs[j, 0], jobs[j, 1]
    nentries = job_pk_ptr[len(job_pk_ptr) - 1]
    jk_count = np.zeros(nentries, np.int64)
    jk_held = np.zeros(nentries, np.int64)
    jk_split = np.zeros(nentries, np.int64)                # 1: an address some request bypassed
    finish = np.full(X, -1, np.int64)
    start = np.full(X, -1, np.int64)
    blocked_at = np.full(X, -1, np.int64)
    stats = np.zeros(NSTATS, np.int64)
    pk = np.empty(1024 << PSH, np.int64)
    tr = np.empty(3 * 1024 if want_trace else 0, np.int64)
    z = np.zeros(NZ, np.int64)
    z[Z_FREE] = -1
    z[Z_CSH] = 6                                # 64 events per bucket to start with
    bk = np.empty(nbuckets << 6, np.int64)
    bc = np.zeros(nbuckets, np.int64)
    btmp = np.empty(1 << 6, np.int64)          # _sort's buffer: a bucket's room
    heap = np.empty(64, np.int64)
    qstack = np.empty(128, np.int64)
    # every action that can be pending at once: a READY, COMPLETE and INJECT or two per transfer,
    # TRYs per link (its own and its waiters'), ENGINES per rank, WAKE per switch
    work = np.empty(3 * X + 4 * L + 2 * N + nnodes + 1024, np.int64)
    nwork = 0
    for x in range(X - 1, -1, -1):              # stack: transfer 0 runs first
        if ndeps0[x] == 0:
            work[nwork] = (x << 4) | A_READY
            nwork += 1
    z[Z_NWORK] = nwork
    while True:
        code = _run(xs, path_links, child_ptr, child_idx, order_ptr, order_idx, jobf, job_fan_ptr, job_fan_idx, job_pk_ptr,
                    jk_count, jk_held, jk_split, addr_ptr, addr, job_bypass, finish, start, blocked_at, ls, lt, rs, ns, pk, tr, bk, bc, btmp, heap, work,
                    qstack, z, stats, N, issue_ps, rel_ps, jit_ps, reduce_ser, wsh, nbuckets, want_trace)
        if code == G_HEAP:
            heap = _grown(heap, 2 * len(heap))
        elif code == G_BUCKETS:
            csh = z[Z_CSH]
            bk2 = np.empty(nbuckets << (csh + 1), np.int64)
            for b in range(nbuckets):
                bk2[b << (csh + 1): (b << (csh + 1)) + bc[b]] = bk[b << csh: (b << csh) + bc[b]]
            bk = bk2
            btmp = np.empty(1 << (csh + 1), np.int64)
            z[Z_CSH] = csh + 1
        elif code == G_PACKETS:
            pk = _grown(pk, 2 * len(pk))
        elif code == G_TRACE:
            tr = _grown(tr, 2 * len(tr) + 3)
        else:
            break
    busy_ps = ls[L_BUSYPS::1 << LSH].copy()
    ntr = z[Z_NTR]
    if want_trace:
        tr = _grown(tr, 3 * (ntr + L))
        for lk in range(L):
            if lt[2 * lk] >= 0:
                tr[3 * ntr] = lk
                tr[3 * ntr + 1] = lt[2 * lk]
                tr[3 * ntr + 2] = lt[2 * lk + 1]
                ntr += 1
    for x in range(X):
        if finish[x] < 0:
            stats[S_UNFINISHED] += 1
            stats[S_BLOCKED] += blocked_at[x] >= 0
    return finish, start, busy_ps, stats, _rows(tr, ntr)
