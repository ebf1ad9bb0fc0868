"""The analytic engine: alpha-beta timing of a schedule's dependency graph.

Model (docs/model.md): a transfer starts when the transfers it depends on have
finished and takes

    latency of its path  +  bytes * max over its links of (sharers / bandwidth)

where ``sharers`` is the number of transfers of the same group that cross that
link (the link's bandwidth is divided among concurrent transfers). The
collective's time is the latest finish. With one transfer per link per group
this is exactly the alpha-beta model (alpha = path latency).

A STREAM dependency (a switch forwarding what comes in) streams instead: the
transfer's first byte leaves once the dependency's first byte has arrived, and
its last byte no earlier than the dependency's last byte has arrived, so it
leaves at max(first-in + bytes / rate, last-in): the fluid form of the packet
engine's in-switch jobs, without their one packet of serialisation.

All sizes of a sweep are one array axis: the schedule is walked once and every
instance carries a vector of finish times, one per size.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..core.jit import njit
from ..network.topology import Topology, route_kernel
from ..schedule.expand import first_unrouted
from ..schedule.ir import (
    DEP_COL,
    DEP_ROW,
    DEP_SHIFT,
    F_C3,
    F_DST,
    F_ID,
    F_IL,
    F_KIND,
    F_N,
    F_NRUN,
    F_SCH,
    F_SRC,
    ORDER,
    PUT_REDUCE,
    STREAM,
    Schedule,
)
from ..schedule.symmetry import schedule_orbits


@dataclass(frozen=True)
class Timing:
    """What an engine returns for one schedule over a vector of sizes."""

    time: np.ndarray          # float64[S] seconds: the collective's completion time per size
    link_bytes: np.ndarray    # float64[nlinks, S] bytes each link carried (zeros unless asked for)
    transfers: int            # transfers the schedule stands for
    stats: dict | None = None  # engine counters per size (the packet engine's events, queues, ...)


@njit
def _aff(row, base, c3, i, j):
    return ((row[base] * i + row[base + 1] * j + row[base + 2]) % row[base + 3]) * row[base + 4] \
        + ((row[base + 5] * i + row[base + 6] * j + row[base + 7]) % row[base + 8]) * row[base + 9] + row[c3]


@njit
def _alloc_kernel(rows, last_use, cls, ncls):
    """Give every template a slot in a pool, reusing the slots of templates whose consumers are done.

    rows[t]: pool rows template t needs; cls[t]: its size class (equal rows). Returns (offset, pool_rows).
    """
    T = len(rows)
    # templates grouped by the template after which they can be freed
    order = np.argsort(last_use, kind="mergesort")
    free_ptr = np.searchsorted(last_use[order], np.arange(T + 1))
    slot = np.empty(T, np.int64)
    nslots = np.zeros(ncls, np.int64)
    stack = np.empty(T, np.int64)       # free slots, per class, as linked stacks inside one array
    top = np.full(ncls, -1, np.int64)
    nxt = np.empty(T, np.int64)         # nxt[t]: next free template-slot record below t on its class stack
    for t in range(T):
        c = cls[t]
        if top[c] >= 0:
            rec = top[c]
            slot[t] = stack[rec]
            top[c] = nxt[rec]
        else:
            slot[t] = nslots[c]
            nslots[c] += 1
        for k in range(free_ptr[t], free_ptr[t + 1]):
            u = order[k]
            cu = cls[u]
            stack[u] = slot[u]
            nxt[u] = top[cu]
            top[cu] = u
    class_rows = np.zeros(ncls, np.int64)
    for t in range(T):
        class_rows[cls[t]] = rows[t]
    base = np.zeros(ncls + 1, np.int64)
    for c in range(ncls):
        base[c + 1] = base[c] + nslots[c] * class_rows[c]
    offset = np.empty(T, np.int64)
    for t in range(T):
        offset[t] = base[cls[t]] + slot[t] * rows[t]
    return offset, base[ncls]


@njit
def analytic_kernel(tmpl, dep_ptr, dep_t, dep_mode, dep_si, dep_sj, dep_kind, group_ptr, offset, summarize,
                    pool_rows, params, link_bw, link_lat, max_hops, prefix, want_links, nranks, overhead, red_bw,
                    release, jitter, seed, inst_first, avail, part):
    """Finish time of the last transfer per part and size (part[t]: the part of template t, e.g. one of
    several jobs merged into one schedule; empty: one part); optionally bytes per link per size.

    prefix[s, c]: bytes before chunk c at size s. pool rows of template t start at offset[t]:
    one row per instance, then (if summarize[t]) per-i maxima, per-j maxima and the overall max.
    A row holds 3*S times: when the transfer arrived (S sizes), when it left its source, when its first
    byte arrived.
    Endpoint costs: overhead before the first byte of every transfer a rank issues (a switch's
    multicast has no engine); a reduction into a rank runs
    at most at red_bw shared by that rank's reductions of the group (0: free); with release (one time per rank, or empty) a rank's transfers start no
    earlier than its release, and with jitter > 0 each transfer is delayed by an exponential draw of
    that mean (seeded: the same seed gives the same times). avail (one time per transfer in the order of
    hcclsim.schedule.expand, whose template t starts at inst_first[t]; or empty): a transfer starts no
    earlier than that after its rank's release (its work-queue element is ready).
    """
    if jitter > 0:
        np.random.seed(seed)
    red_cnt = np.zeros(nranks if red_bw > 0 else 0, np.int64)
    S = prefix.shape[0]
    S3 = 3 * S
    nlinks = len(link_bw)
    pool = np.zeros(pool_rows * S3)
    gmax = np.zeros((part.max() + 1 if len(part) else 1, S))
    cnt = np.zeros(nlinks, np.int64)
    touched = np.empty(nlinks, np.int64)
    links = np.empty(max_hops, np.int64)
    start = np.empty(S)
    last_in = np.empty(S)
    link_bytes = np.zeros((nlinks if want_links else 0, S))
    for g in range(len(group_ptr) - 1):
        t0, t1 = group_ptr[g], group_ptr[g + 1]
        ntouched = 0
        for t in range(t0, t1):
            row = tmpl[t]
            for i in range(row[F_ID]):
                for j in range(row[F_IL]):
                    dst = _aff(row, F_DST, F_C3 + 1, i, j)
                    h = route_kernel(params, _aff(row, F_SRC, F_C3, i, j), dst, links)
                    for k in range(h):
                        lk = links[k]
                        if cnt[lk] == 0:
                            touched[ntouched] = lk
                            ntouched += 1
                        cnt[lk] += 1
                    if red_bw > 0 and row[F_KIND] == PUT_REDUCE and dst < nranks:
                        red_cnt[dst] += 1
        for t in range(t0, t1):
            row = tmpl[t]
            nd, nl = row[F_ID], row[F_IL]
            ninst = nd * nl
            nch, nrun = row[F_N], row[F_NRUN]
            for i in range(nd):
                for j in range(nl):
                    for s in range(S):
                        start[s] = 0.0
                        last_in[s] = 0.0
                    for e in range(dep_ptr[t], dep_ptr[t + 1]):
                        u = dep_t[e]
                        ud, ul = tmpl[u, F_ID], tmpl[u, F_IL]
                        ti, tj = (i + dep_si[e]) % ud, (j + dep_sj[e]) % ul
                        mode = dep_mode[e]
                        if mode == DEP_SHIFT:
                            r = offset[u] + ti * ul + tj
                        elif mode == DEP_ROW:
                            r = offset[u] + ud * ul + ti
                        elif mode == DEP_COL:
                            r = offset[u] + ud * ul + ud + tj
                        else:
                            r = offset[u] + ud * ul + ud + ul
                        kind = dep_kind[e]
                        if kind == STREAM:
                            for s in range(S):
                                start[s] = max(start[s], pool[r * S3 + 2 * S + s])
                                last_in[s] = max(last_in[s], pool[r * S3 + s])
                        else:
                            base = r * S3 + (S if kind == ORDER else 0)
                            for s in range(S):
                                start[s] = max(start[s], pool[base + s])
                    src, dst = _aff(row, F_SRC, F_C3, i, j), _aff(row, F_DST, F_C3 + 1, i, j)
                    h = route_kernel(params, src, dst, links)
                    lat = 0.0
                    inv = 0.0
                    for k in range(h):
                        lk = links[k]
                        lat += link_lat[lk]
                        x = cnt[lk] / link_bw[lk]
                        inv = max(inv, x)
                    if red_bw > 0 and row[F_KIND] == PUT_REDUCE and dst < nranks:
                        inv = max(inv, red_cnt[dst] / red_bw)
                    delay = 0.0                              # a rank issues it: its engine's costs
                    ready = 0.0
                    if src < nranks and h > 0:               # (a local op, no link, issues nothing)
                        delay = overhead
                        if jitter > 0:
                            delay += -jitter * np.log(1.0 - np.random.random())
                        if len(release):
                            ready = release[src]
                        if len(avail):
                            ready += avail[inst_first[t] + i * nl + j]
                    c = _aff(row, F_SCH, F_C3 + 2, i, j)
                    base = (offset[t] + i * nl + j) * S3
                    p = part[t] if len(part) else 0
                    for s in range(S):
                        nb = nrun * (prefix[s, c + nch] - prefix[s, c])
                        first = max(start[s], ready) + (delay if nb > 0 else 0.0)   # nor a zero-byte one
                        left = max(first + nb * inv, last_in[s])
                        f = left + lat
                        pool[base + s] = f
                        pool[base + S + s] = left
                        pool[base + 2 * S + s] = first + lat
                        gmax[p, s] = max(gmax[p, s], f)
                        if want_links:
                            for k in range(h):
                                link_bytes[links[k], s] += nb
            if summarize[t]:
                b0 = offset[t] + ninst
                for i in range(nd):
                    for j in range(nl):
                        src = (offset[t] + i * nl + j) * S3
                        for s in range(S3):
                            v = pool[src + s]
                            ri, ci, ai = (b0 + i) * S3 + s, (b0 + nd + j) * S3 + s, (b0 + nd + nl) * S3 + s
                            pool[ri] = max(pool[ri], v)
                            pool[ci] = max(pool[ci], v)
                            pool[ai] = max(pool[ai], v)
        for k in range(ntouched):
            cnt[touched[k]] = 0
        red_cnt[:] = 0
    return gmax, link_bytes


@njit
def symmetric_kernel(tmpl, dep_ptr, dep_t, dep_mode, dep_si, dep_kind, group_ptr, params, link_bw, link_lat,
                     max_hops, orbit, orbit_size, rank_orbit, rank_orbit_size, reps, shape_of, nbytes, want_links,
                     nranks, overhead, red_bw):
    """analytic_kernel for schedules whose instances a symmetry of the topology maps onto each other
    (hcclsim.schedule.symmetry.schedule_orbits).

    reps[t] = 1: every instance of template t finishes at the same time and instance (0, 0) is walked;
    reps[t] = ID: the instances of each row r do, and instance (r, 0) is walked for every r (then one more
    slot holds the maxima over the rows, for dependencies on a whole column or template). A link's sharers
    are its orbit's hops divided by the orbit's size, and a rank's reductions of a group are its rank
    orbit's reductions divided by the orbit's ranks. nbytes[shape_of[t], s]: the largest transfer of
    template t at size s (transfer_bytes).
    """
    red = np.zeros(len(rank_orbit_size))
    T, S = len(tmpl), nbytes.shape[1]
    start = np.empty(S)
    last_in = np.empty(S)
    slot0 = np.zeros(T + 1, np.int64)        # template t's slots: its representatives, then their maxima
    for t in range(T):
        slot0[t + 1] = slot0[t] + reps[t] + (reps[t] > 1)
    norb = len(orbit_size)
    fin = np.zeros((slot0[T], S))
    left = np.zeros((slot0[T], S))
    first = np.zeros((slot0[T], S))
    gmax = np.zeros(S)
    hops = np.zeros(norb)
    widest = 0                               # representatives of the largest group: their routes are kept
    for g in range(len(group_ptr) - 1):
        widest = max(widest, slot0[group_ptr[g + 1]] - slot0[group_ptr[g]])
    routes = np.empty((widest, max_hops), np.int64)
    nhops = np.empty(widest, np.int64)
    orbit_bytes = np.zeros((norb if want_links else 0, S))
    for g in range(len(group_ptr) - 1):
        t0, t1 = group_ptr[g], group_ptr[g + 1]
        for t in range(t0, t1):
            row = tmpl[t]
            weight = row[F_ID] * row[F_IL] // reps[t]       # the instances a representative stands for
            for r in range(reps[t]):
                dst = _aff(row, F_DST, F_C3 + 1, r, 0)
                x = slot0[t] - slot0[t0] + r
                h = route_kernel(params, _aff(row, F_SRC, F_C3, r, 0), dst, routes[x])
                nhops[x] = h
                for k in range(h):
                    hops[orbit[routes[x, k]]] += weight
                if row[F_KIND] == PUT_REDUCE and dst < nranks:
                    red[rank_orbit[dst]] += weight
        for t in range(t0, t1):
            row = tmpl[t]
            weight = row[F_ID] * row[F_IL] // reps[t]
            for r in range(reps[t]):
                src, dst = _aff(row, F_SRC, F_C3, r, 0), _aff(row, F_DST, F_C3 + 1, r, 0)
                links = routes[slot0[t] - slot0[t0] + r]
                h = nhops[slot0[t] - slot0[t0] + r]
                lat = 0.0
                inv = 0.0
                for k in range(h):
                    lk = links[k]
                    lat += link_lat[lk]
                    x = hops[orbit[lk]] / orbit_size[orbit[lk]] / link_bw[lk]
                    inv = max(inv, x)
                if red_bw > 0 and row[F_KIND] == PUT_REDUCE and dst < nranks:
                    inv = max(inv, red[rank_orbit[dst]] / rank_orbit_size[rank_orbit[dst]] / red_bw)
                x = slot0[t] + r
                start[:] = 0.0
                last_in[:] = 0.0
                for e in range(dep_ptr[t], dep_ptr[t + 1]):
                    u, kind, mode = dep_t[e], dep_kind[e], dep_mode[e]
                    if reps[u] == 1:
                        y = slot0[u]
                    elif mode == DEP_SHIFT or mode == DEP_ROW:       # a row of u: its representative
                        y = slot0[u] + (r + dep_si[e]) % tmpl[u, F_ID]
                    else:                                           # a column or all of u: every row
                        y = slot0[u] + reps[u]
                    if kind == STREAM:
                        for s in range(S):
                            start[s] = max(start[s], first[y, s])
                            last_in[s] = max(last_in[s], fin[y, s])
                    else:
                        done = left if kind == ORDER else fin
                        for s in range(S):
                            start[s] = max(start[s], done[y, s])
                delay = overhead if src < nranks and h > 0 else 0.0      # a local op issues nothing
                for s in range(S):
                    b = nbytes[shape_of[t], s]
                    d = delay if b > 0 else 0.0                      # nor does a zero-byte one
                    left[x, s] = max(start[s] + d + b * inv, last_in[s])
                    first[x, s] = start[s] + d + lat
                    f = left[x, s] + lat
                    fin[x, s] = f
                    gmax[s] = max(gmax[s], f)
                    if want_links:
                        for k in range(h):
                            orbit_bytes[orbit[links[k]], s] += b * weight
            if reps[t] > 1:
                x = slot0[t] + reps[t]
                for s in range(S):
                    for y in range(slot0[t], x):
                        fin[x, s] = max(fin[x, s], fin[y, s])
                        left[x, s] = max(left[x, s], left[y, s])
                        first[x, s] = max(first[x, s], first[y, s])
        for t in range(t0, t1):
            for x in range(slot0[t] - slot0[t0], slot0[t] - slot0[t0] + reps[t]):
                for k in range(nhops[x]):
                    hops[orbit[routes[x, k]]] = 0.0
        red[:] = 0.0
    return gmax, orbit_bytes


def max_transfer_bytes(s: Schedule, block_elems: np.ndarray, dtype_size: int) -> np.ndarray:
    """bytes[t, s]: an upper bound, exact when chunks divide evenly, on template t's largest transfer."""
    shape_of, nbytes = transfer_bytes(s, block_elems, dtype_size)
    return nbytes[shape_of]


def transfer_bytes(s: Schedule, block_elems: np.ndarray, dtype_size: int) -> tuple[np.ndarray, np.ndarray]:
    """(shape_of int64[T], bytes float64[shapes, S]): max_transfer_bytes of template t is
    bytes[shape_of[t]], one row per distinct (chunks, runs) of the schedule's templates.

    A run of n chunks holds n*q elements plus at most min(n, r*(n//k + 1)) extra ones, where a
    block of E elements is cut into k chunks of q = E // k, the first r = E % k one larger.
    """
    k = s.layout.k
    wide = int(s.tmpl[:, F_NRUN].max()) + 1
    shapes, shape_of = np.unique(s.tmpl[:, F_N] * wide + s.tmpl[:, F_NRUN], return_inverse=True)
    n, nrun = np.divmod(shapes[:, None], wide)
    q, r = np.divmod(np.asarray(block_elems, np.int64)[None, :], k)
    extra = np.minimum(n, r * (n // k + 1))
    return shape_of.ravel().astype(np.int64), (nrun * (n * q + extra) * dtype_size).astype(np.float64)


def plan_pool(s: Schedule):
    """Pool offsets for every template (slots reused once all consumers have run)."""
    T = s.ntemplates
    ninst = s.tmpl[:, F_ID] * s.tmpl[:, F_IL]
    summarize = np.zeros(T, np.bool_)
    summarize[s.dep_t[s.dep_mode != DEP_SHIFT]] = True
    rows = ninst + np.where(summarize, s.tmpl[:, F_ID] + s.tmpl[:, F_IL] + 1, 0)
    consumer = np.repeat(np.arange(T), np.diff(s.dep_ptr))
    last_use = np.arange(T, dtype=np.int64)
    np.maximum.at(last_use, s.dep_t, consumer)
    _, cls = np.unique(rows, return_inverse=True)
    offset, pool_rows = _alloc_kernel(rows.astype(np.int64), last_use, cls.astype(np.int64), int(cls.max()) + 1)
    return offset, summarize, int(pool_rows)


def chunk_prefix(s: Schedule, block_elems: np.ndarray, dtype_size: int) -> np.ndarray:
    """prefix[s, c]: bytes before chunk c, for each block size (elements) of the sweep."""
    lay = s.layout
    out = np.empty((len(block_elems), lay.nchunks + 1), np.float64)
    for x, e in enumerate(block_elems):
        out[x] = lay.offsets(int(e)) * dtype_size
    return out


def run(schedule: Schedule, topo: Topology, block_elems, dtype_size: int, want_links: bool = False,
        symmetric: bool | None = None, release=None, jitter: float = 0.0, seed: int = 0, avail=None,
        part=None) -> Timing:
    """Time a schedule on a topology for each block size (elements per block) given.

    symmetric: None picks the one-instance path whenever it is valid (see hcclsim.schedule.symmetry);
    False forces the general path (tests compare the two). The topology's endpoint gives the
    per-transfer issue overhead and the ranks' reduction bandwidth. release (seconds per rank) and
    jitter (mean seconds of an exponential delay per transfer, drawn from seed) describe one noisy
    iteration (hcclsim.engine.execution); the time is then measured from the earliest release. avail
    (seconds per transfer of the explicit schedule, or None): when each transfer's work-queue element is
    ready after its rank's release (hcclsim.engine.execution.control_core); per transfer, so the general path.
    part (int per template, or None): time becomes one row per part (hcclsim.engine.concurrent); the general path.
    """
    block_elems = np.atleast_1d(np.asarray(block_elems, np.int64))
    if topo.routes_partial:                         # a graph wiring without a host path
        topo.refuse_unrouted(first_unrouted(schedule, *topo.hop_table()),
                             f"{schedule.algorithm} ({schedule.collective})")
    ep = topo.endpoint
    noisy = release is not None or jitter > 0 or avail is not None or part is not None
    orbits = schedule_orbits(schedule, topo) if symmetric is not False and not noisy else None
    s = schedule
    if orbits is not None:
        orbit, sizes = orbits.link, orbits.link_size
        shape_of, nbytes = transfer_bytes(s, block_elems, dtype_size)
        t, ob = symmetric_kernel(s.tmpl, s.dep_ptr, s.dep_t, s.dep_mode, s.dep_si, s.dep_kind, s.group_ptr,
                                 topo.params, topo.link_bw, topo.link_lat, topo.max_hops, orbit, sizes, orbits.rank,
                                 orbits.rank_size, orbits.reps, shape_of, nbytes, want_links, topo.nranks,
                                 ep.issue_overhead, ep.reduction_bandwidth)
        links = ob[orbit] / sizes[orbit][:, None] if want_links else np.zeros((0, len(block_elems)))
        return Timing(time=t, link_bytes=links, transfers=s.ntransfers)
    offset, summarize, pool_rows = plan_pool(schedule)
    prefix = chunk_prefix(schedule, block_elems, dtype_size)
    rel = np.zeros(0) if release is None else np.asarray(release, np.float64)
    first = np.concatenate([[0], np.cumsum(s.tmpl[:, F_ID] * s.tmpl[:, F_IL])]).astype(np.int64)
    t, links = analytic_kernel(s.tmpl, s.dep_ptr, s.dep_t, s.dep_mode, s.dep_si, s.dep_sj, s.dep_kind, s.group_ptr,
                               offset, summarize, pool_rows, topo.params, topo.link_bw, topo.link_lat, topo.max_hops,
                               prefix, want_links, topo.nranks, ep.issue_overhead, ep.reduction_bandwidth, rel,
                               float(jitter), int(seed), first, np.zeros(0) if avail is None else avail,
                               np.zeros(0, np.int64) if part is None else part)
    if part is None:
        t = t[0]
    if len(rel):
        t = t - rel.min()
    return Timing(time=t, link_bytes=links, transfers=s.ntransfers)
