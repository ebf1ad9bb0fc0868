"""The packet engine: a discrete-event simulation of packets over the same schedules.

``prepare`` turns a schedule, a topology and one size into the flat arrays the kernel reads
(the explicit transfers, their routes, packet counts, in-switch reduction jobs, link and
switch parameters in integer picoseconds); ``run`` runs ``packet_kernel`` on each size and returns
the same ``Timing`` as the analytic engine, plus the packet engine's counters. docs/packet.md
describes the model.

Before anything is expanded, ``check`` estimates a point from the schedule's templates alone
(``estimate``: transfers, dependencies, packets, the calendar) and refuses it past the memory budget
(hcclsim.core.budget), or when its times could pass PS_LIMIT: every time is a 64-bit count of
picoseconds, so a slow link, a long latency or skew could otherwise wrap around silently.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import numpy as np

from ..core import budget as B
from ..core.errors import ConfigError, InternalError
from ..core.jit import njit
from ..network.topology import (
    FAT_TREE,
    HIERARCHICAL,
    P_KIND,
    P_LEAF,
    P_OUTKIND,
    P_UPKIND,
    SWITCH,
    Topology,
    route_kernel,
)
from ..schedule.expand import expand
from ..schedule.ir import (
    DEP_COL,
    DEP_ROW,
    DEP_SHIFT,
    F_ID,
    F_IL,
    F_KIND,
    F_N,
    F_NRUN,
    ORDER,
    PUT_REDUCE,
    STREAM,
    Schedule,
)
from . import packet_kernel as K
from .analytic import Timing, max_transfer_bytes

PS_LIMIT = 1 << 62                # picoseconds a point's times may reach (53 days; the kernel's are int64)
# Bytes of memory per transfer, dependency, packet slot and calendar bucket, measured as peak RSS growth
# of prepare + packet_kernel (ring, direct, in_switch and hierarchical points of 8k-520k transfers:
# 510-540 per transfer with 2-hop routes, 1067 with 64-hop ones; tests/test_budget.py): the explicit
# schedule, routes (a buffer of max_hops links per transfer), transfer table and kernel state per
# transfer; dependency CSRs; packets in flight (rows of 64 bytes, grown by doubling); 64 slots of 8
# bytes per bucket, doubled with their contents. Per link and node, counted: the kernel's port row (16
# int64) and the link's 5 parameters; a node's rows (ranks and switches, 8 int64 at most) and table.
BYTES_PER_TRANSFER, BYTES_PER_HOP, BYTES_PER_DEP, BYTES_PER_PACKET, BYTES_PER_BUCKET = 480, 8, 40, 128, 1024
BYTES_PER_LINK, BYTES_PER_NODE = 200, 100
STAT_NAMES = ("events", "peak_queue_bytes", "table_peak_entries", "table_stall_us", "table_bypass", "busiest_link_util")


@njit
def routes_kernel(params, src, dst, max_hops):
    """Path CSR (ptr, links) of every (src, dst) pair."""
    X = len(src)
    ptr = np.zeros(X + 1, np.int64)
    links = np.empty(X * max_hops, np.int64)
    out = np.empty(max_hops, np.int64)
    for x in range(X):
        h = route_kernel(params, src[x], dst[x], out)
        for k in range(h):
            links[ptr[x] + k] = out[k]
        ptr[x + 1] = ptr[x] + h
    return ptr, links[: ptr[X]]


@dataclass
class PacketProblem:
    """Everything packet_kernel needs for one (schedule, topology, size)."""

    xt: np.ndarray
    path_links: np.ndarray
    child_ptr: np.ndarray        # DATA dependents of each transfer (released when it has arrived)
    child_idx: np.ndarray
    order_ptr: np.ndarray        # ORDER dependents (released when its last byte has left)
    order_idx: np.ndarray
    ndeps: np.ndarray
    jobs: np.ndarray
    job_fan_ptr: np.ndarray
    job_fan_idx: np.ndarray
    job_pk_ptr: np.ndarray
    addr_ptr: np.ndarray         # merge_order: contribution x issues addresses addr[addr_ptr[x]:]; both empty: in order
    addr: np.ndarray
    job_bypass: np.ndarray       # per job: a request that finds the table full goes on unmerged (table_full)
    link_ser: np.ndarray
    link_lat: np.ndarray
    link_buf: np.ndarray
    link_cut: np.ndarray
    node_table: np.ndarray
    nranks: int
    engines: int
    issue_ps: int
    reduce_ser: int
    wsh: int
    nbuckets: int
    explicit: dict = field(default_factory=dict)
    max_delay: int = 0           # ps: the farthest ahead of now an event is ever scheduled
    release_ps: np.ndarray | None = None   # per transfer: issues nothing before (skew, WQE ready); None = 0
    jitter_ps: np.ndarray | None = None    # per transfer: extra start delay (jitter); None = 0

    def with_noise(self, release_s, jitter_s, avail_s=None) -> PacketProblem:
        """This problem with ranks released at release_s (seconds per rank, or None), each transfer
        delayed by jitter_s (seconds per transfer, or None) and issued no earlier than avail_s after its
        rank's release (seconds per transfer, or None: when its work-queue element is ready,
        hcclsim.engine.execution.control_core); the calendar grows to reach that far."""
        src = self.xt[:, K.X_SRC]
        rel = np.zeros(len(self.xt)) if release_s is None else \
            np.where(src < self.nranks, np.asarray(release_s, np.float64)[np.minimum(src, self.nranks - 1)], 0.0)
        rel = _ps(rel if avail_s is None else rel + avail_s) + (0 if self.release_ps is None else self.release_ps)
        jit = np.zeros(len(self.xt), np.int64) if jitter_s is None else _ps(jitter_s)
        extra = int(rel.max(initial=0)) + int(jit.max(initial=0))
        nbuckets = 1 << int(np.ceil(np.log2(((self.max_delay + extra) >> self.wsh) + 3)))
        return dataclasses.replace(self, release_ps=rel, jitter_ps=jit, nbuckets=max(nbuckets, self.nbuckets),
                                   max_delay=self.max_delay + extra)

    def args(self, want_trace: bool):
        return (self.xt, self.path_links, self.child_ptr, self.child_idx, self.order_ptr, self.order_idx, self.ndeps, self.jobs, self.job_fan_ptr,
                self.job_fan_idx, self.job_pk_ptr, self.addr_ptr, self.addr, self.job_bypass, self.link_ser, self.link_lat, self.link_buf, self.link_cut,
                self.node_table, self.nranks, self.engines, self.issue_ps,
                np.zeros(len(self.xt), np.int64) if self.release_ps is None else self.release_ps,
                np.zeros(len(self.xt), np.int64) if self.jitter_ps is None else self.jitter_ps,
                self.reduce_ser, self.wsh, self.nbuckets, want_trace)

    @property
    def packets(self) -> int:
        return int(self.xt[:, K.X_NPK].sum())

    def estimate(self) -> tuple[int, dict[str, float]]:
        """(events, bytes of memory by what holds them) the kernel will take: 2 events per packet per hop;
        its state per transfer, route, dependency, packet in flight and bucket (_bytes)."""
        hops = np.maximum(self.xt[:, K.X_PLEN], 1)
        events = int(2 * (self.xt[:, K.X_NPK] * hops).sum())
        return events, _bytes(len(self.xt), len(self.path_links), len(self.child_idx) + len(self.order_idx),
                              self.packets, self.nbuckets, len(self.link_ser), len(self.node_table))


def _bytes(transfers, hops, deps, packets, buckets, links, nodes) -> dict[str, float]:
    """Bytes of memory a point takes, by what holds them (the constants above); hops: route entries."""
    return {"transfers": BYTES_PER_TRANSFER * transfers + BYTES_PER_HOP * hops + BYTES_PER_DEP * deps
            + BYTES_PER_LINK * links + BYTES_PER_NODE * nodes,
            "packets": BYTES_PER_PACKET * min(packets, 4 * transfers + 4096),
            "calendar": BYTES_PER_BUCKET * buckets}


ADVICE = {"transfers": "use fewer ranks, chunks or channels, or --engine analytic",
          "packets": "use a larger mtu (e.g. --set mtu=64K) or a smaller size",
          "calendar": "use larger bandwidths or less --skew/--jitter (the event calendar spans the longest delay), "
                      "or --engine analytic"}


def advice(parts: dict[str, float]) -> str:
    """How to ask for less, by what holds most of a point's memory (_bytes)."""
    return ADVICE[max(parts, key=parts.get)]


def explicit_size(s: Schedule) -> tuple[int, int]:
    """(transfers, dependencies) of the schedule's explicit form (what expand makes), from its templates."""
    ninst = (s.tmpl[:, F_ID] * s.tmpl[:, F_IL]).astype(np.float64)
    u = s.dep_t
    per = np.select([s.dep_mode == DEP_SHIFT, s.dep_mode == DEP_ROW, s.dep_mode == DEP_COL],
                    [np.ones(len(u)), s.tmpl[u, F_IL], s.tmpl[u, F_ID]], ninst[u])
    consumer = np.repeat(np.arange(s.ntemplates), np.diff(s.dep_ptr))
    return int(ninst.sum()), int((ninst[consumer] * per).sum())


@dataclass(frozen=True)
class Estimate:
    """What one point will take, from the schedule's templates (estimate)."""

    transfers: int
    parts: dict            # bytes of memory by what holds them (_bytes)
    events: float
    longest_ps: float      # an upper bound on its last time

    @property
    def nbytes(self) -> float:
        return sum(self.parts.values())


def estimate(schedule: Schedule, topo: Topology, block_elems: int, dtype_size: int, delay: float = 0.0) -> Estimate:
    """One point (module docstring), before expanding anything: every template's largest transfer
    (max_transfer_bytes) cut at the smallest MTU, over the longest route; delay: seconds of skew and
    jitter on top. Upper bounds, except that packets in flight are taken as at most 4 per transfer."""
    X, E = explicit_size(schedule)
    ninst = (schedule.tmpl[:, F_ID] * schedule.tmpl[:, F_IL]).astype(np.float64)
    size = max_transfer_bytes(schedule, np.array([int(block_elems)]), dtype_size)[:, 0]
    mtus = np.array([t.packet.mtu for t in topo.tiers], np.float64)
    per_transfer = np.ceil(size / mtus.min())
    packets, hops = float((ninst * per_transfer).sum()), topo.max_hops
    ps_byte, ps_reduce, hop_ps = _rates(topo)
    longest = delay * 1e12 + float((ninst * (topo.endpoint.issue_overhead * 1e12 + hops * hop_ps + size * ps_reduce
                                            + (per_transfer + 1) * hops * mtus.max() * ps_byte)).sum())
    return Estimate(X, footprint(X, E, topo, packets, delay), 2 * packets * hops, longest)


def _rates(topo: Topology) -> tuple[float, float, float]:
    """(ps per byte on the slowest link, ps per byte reduced on arrival, ps of the longest hop)."""
    ep = topo.endpoint
    return (float(np.max(1e12 / topo.link_bw)), 1e12 / ep.reduction_bandwidth if ep.reduction_bandwidth > 0 else 0.0,
            (float(topo.link_lat.max()) + max(t.packet.switch_latency for t in topo.tiers)) * 1e12)


def buckets(topo: Topology, delay: float = 0.0) -> float:
    """The calendar's buckets (prepare, with_noise) at most: buckets a full packet wide on the fastest link,
    reaching the longest delay ahead, plus delay seconds of skew and jitter."""
    ps_byte, ps_reduce, hop_ps = _rates(topo)
    mtu = max(t.packet.mtu for t in topo.tiers)
    full = float(np.min(np.array([t.packet.mtu for t in topo.tiers])[topo.link_tier] * 1e12 / topo.link_bw))
    wsh = int(np.clip(np.floor(np.log2(max(full, 1.0))), 4, 21))
    reach = 2 * mtu * ps_byte + hop_ps + topo.endpoint.issue_overhead * 1e12 + mtu * ps_reduce + delay * 1e12
    return 2.0 ** np.ceil(np.log2(min(reach, 2.0 ** 80) / 2 ** wsh + 3))


def footprint(transfers: int, deps: int, topo: Topology, packets: float | None = None,
              delay: float = 0.0) -> dict[str, float]:
    """Bytes of memory of a point of this many transfers and dependencies, by what holds them (_bytes);
    packets unknown: as many in flight as the estimate allows (4 per transfer)."""
    packets = 4 * transfers + 4096 if packets is None else packets
    parts = _bytes(transfers, transfers * topo.max_hops, deps, packets, buckets(topo, delay), topo.nlinks,
                   topo.nnodes)
    parts["transfers"] += 16 * transfers if delay else 0        # the noise's per-transfer delays
    return parts


def check_range(topo: Topology, what: str, delay: float = 0.0, longest_ps: float = 0.0) -> None:
    """ConfigError when a point's times could pass PS_LIMIT: its longest run (longest_ps), skew and jitter
    (delay seconds), or the kernel's products of an MTU's bytes and picoseconds per byte (<< FIX)."""
    ps_byte, ps_reduce, hop_ps = _rates(topo)
    mtu = max(t.packet.mtu for t in topo.tiers)
    if max(longest_ps, delay * 1e12 + hop_ps, mtu * max(ps_byte, ps_reduce) * (1 << K.FIX)) < PS_LIMIT:
        return
    raise ConfigError(f"{what}: its times could pass 2^62 picoseconds (53 days), past what the packet engine "
                      f"counts; use larger bandwidths, smaller latencies{', less --skew/--jitter' if delay else ''} "
                      f"or a smaller size, or --engine analytic")


def check(schedule: Schedule, topo: Topology, block_elems: int, dtype_size: int, delay: float = 0.0) -> Estimate:
    """estimate(...), or ConfigError when the point's times could pass PS_LIMIT (check_range) or its memory
    the budget."""
    est = estimate(schedule, topo, block_elems, dtype_size, delay)
    nbytes = int(block_elems) * schedule.layout.nblocks * dtype_size
    what = (f"--engine packet: {schedule.collective} {schedule.algorithm} on {topo.name} ({topo.nranks} ranks) at "
            f"{B.format_bytes(nbytes)} ({est.transfers:.3g} transfers, {est.events:.3g} events)")
    check_range(topo, what, delay, est.longest_ps)
    B.check(est.nbytes, what, advice(est.parts))
    return est


def _csr(parent: np.ndarray, child: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Children of each of n transfers, as (ptr, idx), from (parent, child) pairs."""
    order = np.argsort(parent, kind="stable")
    return (np.searchsorted(parent[order], np.arange(n + 1)).astype(np.int64),
            np.ascontiguousarray(child[order], np.int64))


def _ps(seconds) -> np.ndarray:
    return np.rint(np.asarray(seconds, np.float64) * 1e12).astype(np.int64)


def _per_byte(bandwidth) -> np.ndarray:
    """Picoseconds per byte in fixed point (<< FIX)."""
    return np.rint(1e12 / np.asarray(bandwidth, np.float64) * (1 << K.FIX)).astype(np.int64)


def _jobs(src, dst, npk, dptr, didx, n, dkind):
    """Fuse 'contributions into a switch, then the switch sends the result' into packet-level jobs.

    A switch-sourced transfer m whose dependencies include transfers into that switch of as many
    packets is driven by a job: packet k of m leaves as soon as packet k of every contribution is in.
    So is a rank-sourced transfer fed through STREAM dependencies (a relay: a streamed chain's hop), whose
    packets the kernel issues as the transfer would be issued (EMIT).
    Returns (job of each transfer, fused flag, jobs[j] = (switch, contributions), fan-out CSR).
    """
    X = len(src)
    job_of = np.full(X, -1, np.int64)
    fused = np.zeros(X, np.int64)
    groups: dict[bytes, list] = {}
    contrib_of: dict[bytes, np.ndarray] = {}
    relays = np.zeros(X, bool)                 # a rank forwarding what streams in (STREAM dependencies)
    np.logical_or.at(relays, np.repeat(np.arange(X), np.diff(dptr)), dkind == STREAM)
    for m in np.nonzero((src >= n) | relays)[0]:
        deps = didx[dptr[m]:dptr[m + 1]]
        if src[m] < n:
            deps = deps[dkind[dptr[m]:dptr[m + 1]] == STREAM]
        c = np.unique(deps[dst[deps] == src[m]])
        if len(c) == 0 or npk[m] == 0 or np.any(npk[c] != npk[m]):
            continue
        key = int(src[m]).to_bytes(8, "little") + c.tobytes()
        groups.setdefault(key, []).append(m)
        contrib_of[key] = c
    owner = {}
    bad = set()
    for key, c in contrib_of.items():
        for x in c.tolist():
            if x in owner and owner[x] != key:
                bad.update((key, owner[x]))
            owner[x] = key
    jobs, fan_ptr, fan_idx = [], [0], []
    for key, ms in groups.items():
        if key in bad:
            continue
        j = len(jobs)
        c = contrib_of[key]
        job_of[c] = j
        fused[ms] = 1
        jobs.append((int(src[ms[0]]), len(c)))
        fan_idx.extend(ms)
        fan_ptr.append(len(fan_idx))
    return (job_of, fused, np.asarray(jobs, np.int64).reshape(-1, 2), np.asarray(fan_ptr, np.int64),
            np.asarray(fan_idx, np.int64))


def node_map_for(schedule: Schedule, topo: Topology, ranks) -> np.ndarray:
    """Schedule node id -> fabric node id, for a schedule of len(ranks) ranks placed on those ranks.

    A schedule's switch node nranks + d (domain d's reducing switch) becomes the reducing switch of
    the fabric rank that the domain's first rank is placed on; a fabric's rail switch l (a scale-out
    reducing switch, which a schedule addresses by the fabric's own node id) becomes the scale-out
    reducing switch of the fabric rank that rank l is placed on. On a fat tree, a switch after the
    schedule's scale-up switches is its leaf k (striped relays through the domain's leaf, node nranks +
    domains), placed on the leaf of the fabric rank that rank k * leaf_size is placed on. A node with
    none is -1 (prepare refuses a schedule that addresses it)."""
    ranks = np.asarray(ranks, np.int64)
    if len(ranks) != schedule.nranks or len(set(ranks.tolist())) != len(ranks) or ranks.min() < 0 \
            or ranks.max() >= topo.nranks:
        raise ConfigError(f"ranks: expected {schedule.nranks} distinct ranks of 0..{topo.nranks - 1}")
    out = np.empty(schedule.nnodes, np.int64)
    out[: schedule.nranks] = ranks
    L = schedule.shape[1]
    rails = topo.out_reduce_switch[:L].tolist()
    p = topo.params
    fat = p[P_KIND] == HIERARCHICAL and p[P_OUTKIND] == FAT_TREE
    up = (topo.domains, -(-schedule.nranks // topo.local)) if fat and p[P_UPKIND] == SWITCH else (0, 0)
    for v in range(schedule.nranks, schedule.nnodes):
        d = v - schedule.nranks
        if v in rails:
            out[v] = topo.out_reduce_switch[ranks[rails.index(v)]]
        elif fat and d >= up[1]:
            k = (d - up[1]) * p[P_LEAF]
            out[v] = topo.nranks + up[0] + ranks[k] // p[P_LEAF] if k < len(ranks) else -1
        else:
            out[v] = topo.reduce_switch[ranks[min(d * L, len(ranks) - 1)]]
    return out


def prepare(schedule: Schedule, topo: Topology, block_elems: int, dtype_size: int,
            node_map: np.ndarray | None = None) -> PacketProblem:
    """The kernel's arrays for one size; node_map places the schedule's nodes on the fabric
    (identity by default). Checks the point first (check)."""
    s, n = schedule, topo.nranks
    check(s, topo, block_elems, dtype_size)
    ex = expand(s)
    t = ex["tmpl"]
    src, dst = ex["src"], ex["dst"]
    if node_map is not None:
        src, dst = node_map[src], node_map[dst]
        if min(src.min(initial=0), dst.min(initial=0)) < 0:
            raise ConfigError("ranks: the schedule reduces in a switch that the fabric ranks it is placed on lack")
    topo.check_routes(src, dst, f"{s.algorithm} ({s.collective})")
    offsets = s.layout.offsets(int(block_elems)) * dtype_size
    nch, nrun = s.tmpl[t, F_N], s.tmpl[t, F_NRUN]
    nbytes = nrun * (offsets[ex["schunk"] + nch] - offsets[ex["schunk"]])
    ptr, links = routes_kernel(topo.params, src, dst, topo.max_hops)
    plen = np.diff(ptr)
    link_mtu = np.array([tier.packet.mtu for tier in topo.tiers], np.int64)[topo.link_tier]
    mtu = np.full(len(src), link_mtu.max(), np.int64)           # the smallest MTU along the path
    if len(links):
        mtu[plen > 0] = np.minimum.reduceat(link_mtu[links], ptr[:-1][plen > 0])
    npk = -(-nbytes // mtu)
    last = nbytes - (npk - 1) * mtu
    dptr, didx = ex["dptr"], ex["didx"]
    job_of, fused, jobs, fan_ptr, fan_idx = _jobs(src, dst, npk, dptr, didx, n, ex["dkind"])
    xt = np.zeros((len(src), K.NX), np.int64)
    xt[:, K.X_SRC], xt[:, K.X_DST], xt[:, K.X_NPK] = src, dst, npk
    xt[:, K.X_PKB], xt[:, K.X_LASTB] = np.minimum(mtu, nbytes), last
    xt[:, K.X_PATH], xt[:, K.X_PLEN] = ptr[:-1], plen
    xt[:, K.X_JOB], xt[:, K.X_FUSED] = job_of, fused
    xt[:, K.X_REDUCE] = (s.tmpl[t, F_KIND] == PUT_REDUCE) & (dst < n) & (topo.endpoint.reduction_bandwidth > 0)
    xt[:, K.X_RANKSRC] = src < n
    consumer = np.repeat(np.arange(len(src)), np.diff(dptr))
    data = ex["dkind"] != ORDER             # DATA and STREAM: a switch output streams anyway (_jobs)
    child_ptr, child_idx = _csr(didx[data], consumer[data], len(src))
    order_ptr, order_idx = _csr(didx[ex["dkind"] == ORDER], consumer[ex["dkind"] == ORDER], len(src))
    # links and switches
    tiers = topo.tiers
    is_switch = np.arange(topo.nnodes) >= n
    node_tier = topo.node_tier.astype(np.int64)
    sw_lat = np.array([tr.packet.switch_latency for tr in tiers])
    sw_buf = np.array([tr.packet.switch_buffer for tr in tiers], np.int64)
    sw_cut = np.array([tr.packet.switching == "cut_through" for tr in tiers])
    sw_tab = np.array([tr.packet.reduction_table_entries for tr in tiers], np.int64)
    head, tail = topo.link_dst.astype(np.int64), topo.link_src.astype(np.int64)
    link_lat = _ps(topo.link_lat + np.where(is_switch[head], sw_lat[node_tier[head]], 0.0))
    link_buf = np.where(is_switch[tail], sw_buf[node_tier[tail]], np.int64(1) << 62)
    link_cut = is_switch[head] & sw_cut[node_tier[head]]
    node_table = np.where(is_switch, sw_tab[node_tier], 0).astype(np.int64)
    link_ser = _per_byte(topo.link_bw)
    ep = topo.endpoint
    issue_ps = int(_ps(ep.issue_overhead))
    reduce_ser = int(_per_byte(ep.reduction_bandwidth)) if ep.reduction_bandwidth > 0 else 0
    # calendar: bucket width at most the time of a full packet on the fastest link
    max_pk = int(mtu.max()) if len(mtu) else 1
    ser_full = (link_mtu * link_ser) >> K.FIX
    wsh = int(np.clip(np.floor(np.log2(max(int(ser_full.min()), 1))), 4, 21))
    max_delay = 2 * int((max_pk * link_ser.max()) >> K.FIX) + int(link_lat.max()) + issue_ps \
        + ((max_pk * reduce_ser) >> K.FIX) + 1
    release = _spread(ex["src"], src, job_of, jobs, s.nranks, topo)
    addr_ptr, addr = _issue_order(ex["src"], xt, jobs, fan_ptr, s.nranks, topo)
    max_delay += int(release.max(initial=0))
    nbuckets = 1 << int(np.ceil(np.log2((max_delay >> wsh) + 3)))
    return PacketProblem(
        xt=xt, path_links=links.astype(np.int64), child_ptr=child_ptr, child_idx=child_idx,
        order_ptr=order_ptr, order_idx=order_idx,
        ndeps=np.diff(dptr).astype(np.int64), jobs=jobs, job_fan_ptr=fan_ptr, job_fan_idx=fan_idx,
        job_pk_ptr=np.concatenate([[0], np.cumsum(npk[fan_idx[fan_ptr[:-1]]] if len(jobs) else [])]).astype(np.int64),
        addr_ptr=addr_ptr, addr=addr, job_bypass=_bypass(job_of, jobs, fan_ptr, fan_idx, topo), link_ser=link_ser, link_lat=link_lat, link_buf=link_buf.astype(np.int64), link_cut=link_cut,
        node_table=node_table, nranks=n, engines=int(ep.message_engines or (1 << 40)), issue_ps=issue_ps,
        reduce_ser=reduce_ser, wsh=wsh, nbuckets=nbuckets, explicit=ex, max_delay=max_delay,
        release_ps=release if release.any() else None)


def _contributors(xt: np.ndarray, jobs: np.ndarray, fan_ptr: np.ndarray) -> np.ndarray:
    """The transfers from a rank into a job that takes table entries (the kernel's rule: more than one
    contribution or more than one fan-out; a relay takes none)."""
    j = xt[:, K.X_JOB]
    x = np.nonzero((j >= 0) & (xt[:, K.X_RANKSRC] == 1))[0]
    return x[(jobs[j[x], 1] > 1) | (np.diff(fan_ptr)[j[x]] > 1)]


def _in_order(xt: np.ndarray, x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(addr_ptr, position within its transfer, owner's index in x) of every packet of contributions x."""
    n = xt[x, K.X_NPK]
    starts = np.cumsum(n) - n
    addr_ptr = np.zeros(len(xt), np.int64)
    addr_ptr[x] = starts
    pos = np.arange(int(n.sum()), dtype=np.int64) - np.repeat(starts, n)
    return addr_ptr, pos, np.repeat(np.arange(len(x)), n)


def _issue_order(rank, xt, jobs, fan_ptr, nranks, topo) -> tuple[np.ndarray, np.ndarray]:
    """(addr_ptr, addr): contribution x issues its i-th packet to address addr[addr_ptr[x] + i], in the order
    its switch tier's merge_order says (PacketParams.merge_order): rotated, schedule rank r of N starts at
    address floor(r npk / N); shuffled, a permutation per transfer drawn from merge_seed. Both empty when
    every contribution issues in order (aligned)."""
    empty = np.zeros(0, np.int64)
    if all(tr.packet.merge_order == "aligned" for tr in topo.tiers):
        return empty, empty
    x = _contributors(xt, jobs, fan_ptr)
    tier = topo.node_tier[jobs[xt[x, K.X_JOB], 0]]
    kind = np.array([tr.packet.merge_order for tr in topo.tiers])[tier]
    if (kind == "aligned").all():
        return empty, empty
    addr_ptr, pos, owner = _in_order(xt, x)
    npk = xt[x, K.X_NPK]
    keys = np.zeros(len(pos))
    seed = np.array([tr.packet.merge_seed for tr in topo.tiers])[tier]
    for s in np.unique(seed[kind == "shuffled"]):
        mine = np.repeat((kind == "shuffled") & (seed == s), npk)
        keys[mine] = np.random.default_rng(int(s)).random(int(mine.sum()))
    addr = np.lexsort((keys, owner)) - (np.arange(len(pos)) - pos)     # in order where keys tie (all but shuffled)
    rotated = np.repeat(kind == "rotated", npk)
    shift = np.repeat(rank[x] * npk // max(nranks, 1), npk)
    addr[rotated] = (pos[rotated] + shift[rotated]) % np.repeat(npk, npk)[rotated]
    return addr_ptr, addr.astype(np.int64)


def _bypass(job_of, jobs, fan_ptr, fan_idx, topo) -> np.ndarray:
    """Per job, 1 where its switch tier's table_full is "bypass" (PacketParams.table_full), unless a fan-out of
    the job contributes to another job (a piece sent on would count there as a whole contribution)."""
    if not len(jobs):
        return np.zeros(0, np.int64)
    byp = np.array([tr.packet.table_full == "bypass" for tr in topo.tiers])[topo.node_tier[jobs[:, 0]]]
    onward = np.maximum.reduceat((job_of[fan_idx] >= 0).astype(np.int64), fan_ptr[:-1]) if len(fan_idx) else 0
    return (byp & (onward == 0)).astype(np.int64)


def _spread(rank, src, job_of, jobs, nranks, topo) -> np.ndarray:
    """Ps before which each transfer issues nothing: schedule rank r's contributions into a reducing
    switch wait r/(N-1) of the switch tier's merge_spread (thread blocks that reach the same address
    apart in time; PacketParams.merge_spread), every other transfer 0."""
    spread = np.array([tr.packet.merge_spread for tr in topo.tiers])[topo.node_tier]
    out = np.zeros(len(src), np.int64)
    mine = (job_of >= 0) & (src < topo.nranks)
    if nranks > 1 and mine.any() and spread.any():
        out[mine] = _ps(spread[jobs[job_of[mine], 0]] * rank[mine] / (nranks - 1))
    return out


@dataclass
class PacketRun:
    """One simulated point: times in seconds, counters, and what a trace needs."""

    time: float
    finish: np.ndarray
    start: np.ndarray
    link_busy: np.ndarray
    stats: dict
    trace: np.ndarray
    problem: PacketProblem


def simulate(problem: PacketProblem, budget: int | None = None, want_trace: bool = False) -> PacketRun:
    """Run the kernel on a prepared problem, after checking its memory against the budget (budget bytes,
    or the one in force)."""
    events, parts = problem.estimate()
    with B.limited(budget):
        B.check(sum(parts.values()), f"--engine packet: this point ({len(problem.xt):.3g} transfers, {events:.3g} "
                f"events)", advice(parts))
    finish, start, busy, stats, trace = K.packet_kernel(*problem.args(want_trace))
    if stats[K.S_BLOCKED]:
        raise ConfigError(f"--engine packet: {stats[K.S_BLOCKED]} transfers wait for ever for a merge-table entry: "
                          f"the ranks issue addresses in different orders (merge_order) and a request that finds "
                          f"the table full waits (table_full = \"wait\"), so each holds entries the others need; "
                          f"set table_full = \"bypass\" or a larger reduction_table_entries")
    if stats[K.S_UNFINISHED]:
        raise InternalError(f"packet engine: {stats[K.S_UNFINISHED]} transfers never finished (deadlock)")
    done = int(finish.max()) if len(finish) else 0
    util = float(busy.max() / done) if done else 0.0
    named = {"events": int(stats[K.S_EVENTS]), "peak_queue_bytes": int(stats[K.S_PEAK_QUEUE]),
             "table_peak_entries": int(stats[K.S_TABLE_PEAK]), "table_stall_us": stats[K.S_TABLE_STALL] / 1e6,
             "table_bypass": int(stats[K.S_BYPASS]), "busiest_link_util": util}
    return PacketRun(time=done / 1e12, finish=finish, start=start, link_busy=busy / 1e12, stats=named,
                     trace=trace, problem=problem)


def run(schedule: Schedule, topo: Topology, block_elems, dtype_size: int, want_links: bool = False,
        budget: int | None = None, release=None, jitter: float = 0.0, seed: int = 0, avail=None) -> Timing:
    """The packet engine behind the analytic engine's interface: one simulation per size, each checked
    first (check; budget: bytes, or the one in force).

    release (seconds per rank) and jitter (mean seconds of an exponential delay per rank-issued
    transfer, drawn from seed; the same draws at every size) describe one noisy iteration
    (hcclsim.engine.execution); the time then runs from the earliest release. avail (seconds per
    transfer of the explicit schedule, or None): a transfer issues no earlier than that after its rank's
    release (its work-queue element is ready, hcclsim.engine.execution.control_core)."""
    block_elems = np.atleast_1d(np.asarray(block_elems, np.int64))
    times = np.zeros(len(block_elems))
    stats = {name: np.zeros(len(block_elems)) for name in STAT_NAMES}
    noisy = release is not None or jitter > 0 or avail is not None
    draws = np.random.default_rng(seed).exponential(jitter, explicit_size(schedule)[0]) if jitter > 0 else None
    delay = (float(np.max(release)) if release is not None else 0.0) + (float(draws.max(initial=0)) if jitter > 0 else 0) \
        + (float(np.max(avail, initial=0)) if avail is not None else 0.0)
    for i, e in enumerate(block_elems):
        with B.limited(budget):
            check(schedule, topo, int(e), dtype_size, delay)
            problem = prepare(schedule, topo, int(e), dtype_size)
        if noisy:
            problem = problem.with_noise(release, draws, avail)
        r = simulate(problem, budget)
        times[i] = r.time - (float(np.min(release)) if release is not None else 0.0)
        for name in STAT_NAMES:
            stats[name][i] = r.stats[name]
    return Timing(time=times, link_bytes=np.zeros((0, len(block_elems))), transfers=schedule.ntransfers,
                  stats=stats)


@dataclass(frozen=True)
class Job:
    """One collective of a concurrent run: its schedule, one size, and where its ranks sit."""

    schedule: Schedule
    block_elems: int
    dtype_size: int = 4
    ranks: tuple[int, ...] | None = None        # fabric rank of each schedule rank (default 0..n-1)


def _merge(parts: list[PacketProblem]) -> PacketProblem:
    """One problem running every part at once (same fabric): transfer, path and job ids offset."""
    zero = np.zeros(1, np.int64)
    xs, paths, cptr, cidx, jobs, fptr, fidx, kptr = [], [], [zero], [], [], [zero], [], [zero]
    optr, oidx = [zero], []
    ordered = any(len(p.addr) for p in parts)
    aptr, addr = [], []
    nx = npath = nchild = norder = njob = nfan = nent = 0
    for p in parts:
        xt = p.xt.copy()
        xt[:, K.X_PATH] += npath
        xt[:, K.X_JOB] = np.where(xt[:, K.X_JOB] >= 0, xt[:, K.X_JOB] + njob, -1)
        xs.append(xt)
        paths.append(p.path_links)
        cptr.append(p.child_ptr[1:] + nchild)
        cidx.append(p.child_idx + nx)
        optr.append(p.order_ptr[1:] + norder)
        oidx.append(p.order_idx + nx)
        norder += len(p.order_idx)
        jobs.append(p.jobs)
        fptr.append(p.job_fan_ptr[1:] + nfan)
        fidx.append(p.job_fan_idx + nx)
        kptr.append(p.job_pk_ptr[1:] + nent)
        if ordered:            # a part issuing in order gets its identity order, so the merged one reads right
            own = (p.addr_ptr, p.addr) if len(p.addr) else _in_order(p.xt, _contributors(p.xt, p.jobs, p.job_fan_ptr))[:2]
            aptr.append(own[0] + sum(len(a) for a in addr))
            addr.append(own[1])
        nx, npath, nchild = nx + len(xt), npath + len(p.path_links), nchild + len(p.child_idx)
        njob, nfan, nent = njob + len(p.jobs), nfan + len(p.job_fan_idx), nent + int(p.job_pk_ptr[-1])
    first = parts[0]
    return PacketProblem(
        xt=np.concatenate(xs), path_links=np.concatenate(paths), child_ptr=np.concatenate(cptr).astype(np.int64),
        child_idx=np.concatenate(cidx), order_ptr=np.concatenate(optr).astype(np.int64),
        order_idx=np.concatenate(oidx).astype(np.int64), ndeps=np.concatenate([p.ndeps for p in parts]),
        jobs=np.concatenate(jobs).reshape(-1, 2), job_fan_ptr=np.concatenate(fptr).astype(np.int64),
        job_fan_idx=np.concatenate(fidx).astype(np.int64), job_pk_ptr=np.concatenate(kptr).astype(np.int64),
        addr_ptr=np.concatenate(aptr) if ordered else first.addr_ptr, addr=np.concatenate(addr) if ordered else first.addr,
        job_bypass=np.concatenate([p.job_bypass for p in parts]), link_ser=first.link_ser, link_lat=first.link_lat, link_buf=first.link_buf, link_cut=first.link_cut,
        node_table=first.node_table, nranks=first.nranks, engines=first.engines, issue_ps=first.issue_ps,
        reduce_ser=first.reduce_ser, wsh=min(p.wsh for p in parts), nbuckets=max(p.nbuckets for p in parts),
        max_delay=max(p.max_delay for p in parts),
        release_ps=None if all(p.release_ps is None for p in parts) else
        np.concatenate([np.zeros(len(p.xt), np.int64) if p.release_ps is None else p.release_ps for p in parts]))


def simulate_concurrent(jobs: list[Job], topo: Topology, budget: int | None = None) -> tuple[list[float], PacketRun]:
    """Run several collectives at the same time on one fabric (they share links, switch buffers,
    reduction tables and message engines). Returns each job's completion time in seconds (all
    start at 0) and the combined run. The jobs together are checked first (check; budget: bytes, or
    the one in force)."""
    if not jobs:
        raise ConfigError("simulate_concurrent: expected at least one job")
    with B.limited(budget):
        each = [check(job.schedule, topo, job.block_elems, job.dtype_size) for job in jobs]
        parts = {k: 2 * sum(e.parts[k] for e in each) for k in each[0].parts}      # the parts, then merged
        B.check(sum(parts.values()), f"--engine packet: {len(jobs)} concurrent collectives on {topo.name} "
                f"({sum(e.transfers for e in each):.3g} transfers)", advice(parts))
    parts = []
    for job in jobs:
        ranks = job.ranks if job.ranks is not None else range(job.schedule.nranks)
        parts.append(prepare(job.schedule, topo, job.block_elems, job.dtype_size,
                             node_map_for(job.schedule, topo, ranks)))
    merged = _merge(parts)
    run_ = simulate(merged, budget)
    times, start = [], 0
    for p in parts:
        times.append(float(run_.finish[start:start + len(p.xt)].max()) / 1e12 if len(p.xt) else 0.0)
        start += len(p.xt)
    return times, run_
