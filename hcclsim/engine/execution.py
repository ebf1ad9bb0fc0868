"""The execution model: what a collective costs beyond its transfers, and noisy iterations.

An engine times a schedule's transfers on the network. This module puts that time on a device's
timeline (docs/execution.md has the model and every rule's reasoning):

* the topology the engines see (``device_topology``): each link at the share of its peak the library
  pushes (tier efficiency, protocol share, in-switch efficiency), a rank's rate capped by the channels
  it runs on, a NIC's by the ring channels that cross it, the protocol's step latency per transfer, a
  hidden per-transfer issue cost taken off the transfers, and the reduction throughput of where the
  collective runs;
* the protocol (``protocols``, ``base_latency``): one, or with ``auto`` every one the library could
  use, each size keeping the fastest;
* host and control-core costs around the transfers (``overheads``): the host launch with
  ``--launch host`` (none with ``device``: the collective was launched ahead and a compute kernel
  releases it through a semaphore; with ``loop[:G]`` the back-to-back loop of nccl-tests, where G launches
  per iteration overlap the previous iteration's device time); HCCL's graph generation and metadata copy per collective and the
  control core's scheduling per subgraph (one per channel a rank drives); the message engines' control cores
  (``control_core``: a WQE waits until its engine has unrolled it and re-targeted a queue pair for it).
  An exposed cost adds to the
  time; costs listed in ``[endpoint] hidden`` are prepared while the previous collective runs, so in a
  stream of collectives each one takes max(its device time, the hidden costs);
* noisy iterations (``Noise``): each rank arrives uniformly at random within ``skew`` of the first,
  and each transfer starts after an exponential delay of mean ``jitter``; an iteration's time runs
  from the first arrival to the last byte landing. Seeded, so runs repeat exactly.

    time = launch + exposed host costs + base latency + max(engine time, hidden costs)
    loop:  time = max(D, H) + min(D, H) / n,  D that without the launch, H = G x launch_overhead

(loop: nccl-tests' timed window of n iterations, which opens with the first launch and closes when the last
collective is done: each iteration takes max(D, H) in steady state, and the first launch or the last device
time, whichever is shorter, is not hidden behind anything: ``loop_time``.)

An empty collective (count 0) costs nothing where the endpoint models a library (a protocol): NCCL returns
before it plans or launches anything (``EMPTY_DISCARDED``).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from ..core.errors import ConfigError
from ..core.jit import njit
from ..core.names import ALL_GATHER, ALL_REDUCE, BROADCAST, REDUCE, REDUCE_SCATTER
from ..network.params import WIRE_PROTOCOLS
from ..network.topology import Topology
from ..schedule.expand import expand
from ..schedule.ir import F_CHAN, F_ID, F_IL, Schedule

LAUNCHES = ("host", "device", "loop")

@dataclass(frozen=True)
class Noise:
    """Iterations and their noise (sweep --iters/--skew/--jitter/--seed)."""

    iters: int = 1
    skew: float = 0.0      # seconds: ranks arrive uniformly within [0, skew] of the first
    jitter: float = 0.0    # seconds: mean of each transfer's exponential start delay
    seed: int = 0

    def __post_init__(self):
        if not isinstance(self.iters, int) or self.iters < 1:
            raise ConfigError(f"--iters: expected a whole number >= 1, got {self.iters!r}")
        for name in ("skew", "jitter"):
            if not getattr(self, name) >= 0:
                raise ConfigError(f"--{name}: expected a time >= 0, got {getattr(self, name)!r}")

    @property
    def active(self) -> bool:
        return self.skew > 0 or self.jitter > 0

    @property
    def percentiles(self) -> bool:
        """Whether rows get percentile columns: several iterations or any noise asked for."""
        return self.iters > 1 or self.active


QUIET = Noise()


def check_launch(launch: str) -> str:
    """host, device, loop, loop:G, loop:n=N or loop:G:n=N (G host launches per iteration: one thread driving G
    GPUs; N timed iterations)."""
    parse_launch(launch)
    return launch


# nccl-tests' timed iterations per point when -n is not given: `int iters = 20;` (NVIDIA/nccl-tests 2.19.6,
# a0b82b2, src/common.cu:98).
NCCL_TESTS_ITERS = 20


def parse_launch(launch: str) -> tuple[str, int, int]:
    """'loop:8' -> ('loop', 8, 20); 'loop:8:n=50' -> ('loop', 8, 50); 'host' -> ('host', 1, 20)."""
    kind, *parts = str(launch).split(":")
    gpus, iters = "1", str(NCCL_TESTS_ITERS)
    ok = kind in LAUNCHES and (kind == "loop" or not parts)
    if parts and not parts[0].startswith("n="):
        gpus = parts.pop(0)
    if parts and parts[0].startswith("n="):
        iters = parts.pop(0)[2:]
    if not (ok and not parts and all(x.isascii() and x.isdigit() and int(x) >= 1 for x in (gpus, iters))):
        raise ConfigError(f"--launch: expected host, device, loop, loop:G, loop:n=N or loop:G:n=N (G >= 1 GPUs "
                          f"per host thread, as nccl-tests' -g; N >= 1 timed iterations, its -n), got {launch!r}")
    return kind, int(gpus), int(iters)


def loop_time(device, host: float, iters: int):
    """Seconds per iteration nccl-tests reports for a back-to-back loop of `iters` collectives, each taking
    `device` on the GPUs and `host` to launch: it times from the first launch (the GPUs idle, synchronised
    before the timer) to the last collective's end and divides by iters (src/common.cu:725-772, BenchTime).
    Launch k + 1 overlaps collective k, so the window is iters x max(device, host) plus the shorter of the two
    once: the first launch when the device is the longer, the last collective when the host is."""
    return np.maximum(device, host) + np.minimum(device, host) / iters


def in_switch(schedule: Schedule) -> bool:
    """Whether the schedule reduces or multicasts in a switch (it addresses nodes beyond the ranks)."""
    return schedule.nnodes > schedule.nranks


def protocols(topo: Topology, schedule: Schedule) -> tuple[str, ...]:
    """The protocols to time a schedule with: the endpoint's, or every one the library could pick (auto).
    In-switch collectives run Simple only, as NCCL's NVLS does (src/graph/tuning.cc:272-282)."""
    p = topo.endpoint.protocol
    if p != "auto":
        return (p,)
    return ("simple",) if in_switch(schedule) else WIRE_PROTOCOLS


def channels_used(topo: Topology, protocol: str, size_bytes: np.ndarray) -> np.ndarray:
    """Channels a collective of each size runs on: the endpoint's channels, less one while the message is
    below channels x channel_bytes (NCCL's per-call reduction, src/enqueue.cc topoGetAlgoInfo); LL's
    threshold grows with the rank count, as for NCCL's ring. 0 everywhere when channels are not modelled."""
    ep = topo.endpoint
    size_bytes = np.asarray(size_bytes, np.float64)
    if ep.channels == 0 or protocol == "none":
        return np.zeros(len(size_bytes), np.int64)
    per = getattr(ep, protocol).channel_bytes * (topo.nranks if protocol == "ll" else 1)
    if per == 0:
        return np.full(len(size_bytes), ep.channels, np.int64)
    return np.clip(np.floor(size_bytes / per), 1, ep.channels).astype(np.int64)


def rate_cap(topo: Topology, protocol: str, nchannels: int, own: float = 0.0) -> float:
    """Bytes/s a rank can inject under the protocol with that many channels (inf: no cap). own: the
    algorithm's own per-channel limit, as the rate of a rank's links (a schedule's notes["rate_cap"]:
    NCCL's perChMaxTreeBw / perChMaxNVLSTreeBw), applied where channels are modelled."""
    if protocol == "none":
        return np.inf
    proto = getattr(topo.endpoint, protocol)
    cap = proto.bandwidth_cap or np.inf
    if nchannels and proto.channel_bandwidth:
        cap = min(cap, nchannels * proto.channel_bandwidth)
    if nchannels and own:
        cap = min(cap, own)
    return cap


def net_cap(topo: Topology, schedule: Schedule, protocol: str, nchannels: int) -> float:
    """Bytes/s a rank's NIC carries at most each way under the protocol (inf: no cap). Rings laid one per NIC
    (the ring's rails, as NCCL's search lays them) cross every NIC with channels / NICs of their channels, each
    one connection to the next rank moving at most the protocol's net_channel_bandwidth; one NIC per rank."""
    if protocol == "none" or not nchannels or not schedule.notes.get("rails"):
        return np.inf
    per = getattr(topo.endpoint, protocol).net_channel_bandwidth
    return nchannels / topo.local * per if per else np.inf


def device_topology(topo: Topology, protocol: str | None = None, cap: float = np.inf,
                    switch_ops: bool = False, net: float = np.inf, reducers: int = 1) -> Topology:
    """The topology as the engines see it: each link at the share of its peak the library pushes (the tier's
    efficiency, the protocol's share; in-switch operations at the switch's efficiency), links out of a rank
    capped at what its channels inject, a rank's NIC links both ways at what its channels carry across the
    network (net), the protocol's step latency, the issue overhead and the WQE fetch per transfer, and a
    rank's reduction throughput (per engine: reducers engines reduce, engines_reducing)."""
    protocol = topo.endpoint.protocol if protocol is None else protocol
    key = ("device", protocol, cap, switch_ops, net, reducers)
    if key in topo.cache:
        return topo.cache[key]
    ep = topo.endpoint
    wire = None if protocol in ("none", "auto") else getattr(ep, protocol)
    share = wire.share if wire else 1.0
    # an in-switch collective pays its fixed latency instead of the protocol's (NCCL: NVLS latency = intraLat) and
    # in_switch_step_latency instead of the protocol's step latency, on every transfer a rank issues into the switch:
    # once per step of a channel (algorithms/in_switch.py)
    if switch_ops and ep.in_switch_latency:
        extra = ep.in_switch_step_latency
    else:
        extra = wire.step_latency if wire else 0.0
    # a fetch doorbell: the engine reads each WQE from memory after the doorbell, at issue (never hidden)
    fetch = ep.wqe_fetch_latency if ep.doorbell == "fetch" else 0.0
    issue = (0.0 if "issue_overhead" in ep.hidden else ep.issue_overhead) + extra + fetch
    reduce_bw = ep.sm_reduction_bandwidth if ep.execution == "sm" else \
        ep.engine_reduction_bandwidth * reducers or ep.reduction_bandwidth
    bw = topo.link_bw * np.array([t.packet.efficiency for t in topo.tiers])[topo.link_tier] * share
    if switch_ops and ep.in_switch_efficiency != 1.0:
        switches = np.unique(topo.reduce_switch[topo.reduce_switch >= 0])
        bw = np.where(np.isin(topo.link_src, switches) | np.isin(topo.link_dst, switches),
                      bw * ep.in_switch_efficiency, bw)
    if np.isfinite(cap):
        bw = np.where(topo.link_src < topo.nranks, np.minimum(bw, cap * topo.cap_share), bw)
    if np.isfinite(net):
        nic = (topo.link_tier == 1) & ((topo.link_src < topo.nranks) | (topo.link_dst < topo.nranks))
        bw = np.where(nic, np.minimum(bw, net), bw)
    lat = topo.link_lat
    if wire and wire.net_step_latency and len(topo.tiers) > 1:
        # every path between domains leaves its rank through exactly one NIC: charge the network's extra
        # step latency on those links (rank -> scale-out switch)
        nic_up = (topo.link_src < topo.nranks) & (topo.link_tier == 1)
        lat = np.where(nic_up, lat + wire.net_step_latency, lat)
    if np.array_equal(bw, topo.link_bw) and lat is topo.link_lat and \
            (issue, reduce_bw) == (ep.issue_overhead, ep.reduction_bandwidth):
        out = topo
    else:
        out = dataclasses.replace(topo, link_bw=bw, link_lat=lat,
                                  endpoint=dataclasses.replace(ep, issue_overhead=issue, reduction_bandwidth=reduce_bw))
    topo.cache[key] = out
    return out


def channels(schedule: Schedule) -> int:
    """Subgraphs per rank: the channels (message engines) the schedule issues on."""
    return len(np.unique(schedule.tmpl[:, F_CHAN]))


def engines_reducing(topo: Topology, schedule: Schedule) -> int:
    """Message engines whose near-memory units reduce for a rank: one per channel, at most message_engines
    (0: no limit). A rank reduces at engine_reduction_bandwidth times this."""
    return min(channels(schedule), topo.endpoint.message_engines or channels(schedule))


@njit
def _control_kernel(stream, dst, nstreams, per_wqe, queue_pairs, qp_reuse):
    """(ready seconds per transfer, WQEs per stream, QP re-targets per stream) of transfers in the compiled
    graph's order; stream[x] < 0: no WQE. An engine's control core works through its stream in order: each WQE
    takes per_wqe to unroll and, when no QP of the engine holds its peer, qp_reuse to re-target the least
    recently used one (the first queue_pairs peers find a QP free)."""
    q = max(queue_pairs, 1)
    ready = np.zeros(len(stream))
    clock = np.zeros(nstreams)
    count = np.zeros(nstreams, np.int64)
    reuses = np.zeros(nstreams, np.int64)
    peer = np.full((nstreams, q), -1, np.int64)
    used = np.zeros((nstreams, q), np.int64)          # when each QP was last used (its WQE's number)
    for x in range(len(stream)):
        s = stream[x]
        if s < 0:
            continue
        count[s] += 1
        clock[s] += per_wqe
        if queue_pairs > 0:
            k = 0
            for c in range(q):
                if peer[s, c] == dst[x]:
                    k = c
                    break
                if used[s, c] < used[s, k]:
                    k = c
            if peer[s, k] != dst[x]:
                if peer[s, k] >= 0:
                    reuses[s] += 1
                    clock[s] += qp_reuse
                peer[s, k] = dst[x]
            used[s, k] = count[s]
        ready[x] = clock[s]
    return ready, count, reuses


@dataclass(frozen=True)
class ControlCore:
    """What the message engines' control cores add to one collective (control_core)."""

    ready: np.ndarray | None  # seconds per transfer (expand's order) before its WQE can issue; None: never waits
    hidden: float             # seconds of unrolling prepared behind the previous collective (hidden wqe_rate)
    reuses: np.ndarray        # QP re-targets per rank


def control_core(topo: Topology, schedule: Schedule) -> ControlCore:
    """The control cores' unrolling (wqe_rate) and QP re-targeting (queue_pairs, qp_reuse) of one collective.

    A WQE is a transfer a rank issues to another node; it belongs to the engine of its channel (channel mod
    message_engines; every channel its own engine when that is 0), whose control core unrolls the rank's
    WQEs of that engine in the compiled graph's order (templates, then instances, as expand lists them):
    WQE k of an engine is ready k / wqe_rate after the rank starts, plus qp_reuse for every re-target before
    it. With wqe_rate in hidden the unrolling was done behind the previous collective: only the re-targets
    delay WQEs, and the busiest engine's WQEs / wqe_rate is a hidden cost."""
    ep, n = topo.endpoint, schedule.nranks
    unroll = ep.wqe_rate > 0
    qps = 0 < ep.queue_pairs < schedule.nnodes - 1 and ep.qp_reuse > 0     # else a QP per possible peer
    if not (unroll or qps):
        return ControlCore(None, 0.0, np.zeros(n, np.int64))
    ex = expand(schedule)
    src, dst = ex["src"], ex["dst"]
    _, chan = np.unique(schedule.tmpl[ex["tmpl"], F_CHAN], return_inverse=True)
    engines = ep.message_engines or int(chan.max(initial=0)) + 1
    wqe = (src < n) & (src != dst)
    key = np.where(wqe, src * engines + chan.ravel() % engines, -1)
    streams, stream = np.unique(key, return_inverse=True)
    skip = int(streams[0] < 0) if len(streams) else 0           # the key of transfers that are no WQE
    stream = np.where(wqe, stream.ravel() - skip, -1)
    hide = "wqe_rate" in ep.hidden
    per_wqe = 1.0 / ep.wqe_rate if unroll and not hide else 0.0
    ready, count, reuses = _control_kernel(stream.astype(np.int64), dst.astype(np.int64), len(streams) - skip,
                                           per_wqe, ep.queue_pairs if qps else 0, ep.qp_reuse)
    retargets = np.bincount(streams[skip:] // engines, reuses, n).astype(np.int64)
    hidden = float(count.max(initial=0)) / ep.wqe_rate if unroll and hide else 0.0
    waits = per_wqe > 0 or retargets.any()
    return ControlCore(ready if waits else None, hidden, retargets)


def base_latency(topo: Topology, schedule: Schedule, protocol: str) -> float:
    """Seconds a collective costs once under the protocol: an in-switch collective's fixed latency (NVLS's
    25 us in NCCL's model) or the protocol's base latency (kernel start-up and set-up)."""
    if in_switch(schedule) and topo.endpoint.in_switch_latency:
        return topo.endpoint.in_switch_latency
    return 0.0 if protocol == "none" else getattr(topo.endpoint, protocol).base_latency


def overheads(topo: Topology, schedule: Schedule) -> tuple[float, float]:
    """(exposed seconds added to the time, hidden seconds that only the engine time can cover), beside the
    protocol's base latency and the launch (launched)."""
    ep = topo.endpoint
    costs = {"graph_generation": ep.graph_generation, "metadata_copy": ep.metadata_copy,
             "subgraph_schedule": ep.subgraph_schedule * channels(schedule)}
    exposed = sum(v for k, v in costs.items() if k not in ep.hidden)
    hidden = sum(v for k, v in costs.items() if k in ep.hidden)
    if "issue_overhead" in ep.hidden:      # the control core prepares every work-queue element of a rank ahead
        per_rank = int((schedule.tmpl[:, F_ID] * schedule.tmpl[:, F_IL]).sum()) / schedule.nranks
        hidden += ep.issue_overhead * per_rank
    return exposed, hidden


def launched(topo: Topology, device, launch: str):
    """Seconds per point of a collective that takes `device` seconds on the GPUs (every cost but the launch),
    under --launch: the host's launch added (host), nothing (device), nccl-tests' loop window (loop)."""
    kind = parse_launch(launch)[0]
    host, iters = host_issue(topo, launch)
    if kind == "loop":
        return loop_time(device, host, iters)
    return np.asarray(device, np.float64) + (topo.endpoint.launch_overhead if kind == "host" else 0.0)


def discards_empty(topo: Topology, collective: str) -> bool:
    """Whether an empty collective (count 0) costs nothing: where the endpoint models a library (EMPTY_DISCARDED)."""
    return topo.endpoint.protocol != "none" and collective in EMPTY_DISCARDED


def host_issue(topo: Topology, launch: str) -> tuple[float, int]:
    """(seconds the host spends launching one iteration of a back-to-back loop, timed iterations) for --launch
    loop[:G][:n=N]: G launches from one thread (nccl-tests -g G), which the previous iteration's device time
    hides (loop_time); (0, 0) unless loop."""
    kind, gpus, iters = parse_launch(launch)
    if gpus > topo.nranks:
        raise ConfigError(f"--launch: {launch!r} has one host thread driving {gpus} GPUs, but {topo.name} has "
                          f"{topo.nranks} ranks; expected G <= {topo.nranks}")
    return (gpus * topo.endpoint.launch_overhead, iters) if kind == "loop" else (0.0, 0)


def _timed(engine_run, schedule, device, block_elems, dtype_size, noise, nranks, ready=None):
    """(seconds[iters, sizes], stats) of the engine on one device topology, quiet or noisy; ready: seconds per
    transfer before its WQE can issue (control_core), or None."""
    more = {} if ready is None else {"avail": ready}
    if not noise.active:
        timing = engine_run(schedule, device, block_elems, dtype_size, **more)
        return np.tile(timing.time, (noise.iters, 1)), timing.stats
    rng = np.random.default_rng(noise.seed)
    out = np.empty((noise.iters, len(block_elems)))
    stats = None
    for it in range(noise.iters):
        release = rng.uniform(0.0, noise.skew, nranks) if noise.skew > 0 else None
        seed = int(rng.integers(0, 2 ** 31 - 1))
        timing = engine_run(schedule, device, block_elems, dtype_size, release=release, jitter=noise.jitter,
                            seed=seed, **more)
        out[it] = timing.time
        stats = stats or timing.stats          # counters of the first iteration
    return out, stats


# Collectives a library drops when their count is 0: "Empty collectives can be discarded" (NVIDIA/nccl v2.28.9
# src/enqueue.cc:2554-2555, taskAppend) -- no plan, no launch; nccl-tests' size-0 rows of NCCL 2.26.2 take
# the host's call alone, 0.9 us (validation/logs/h100_together_220944_all_gather_ring.txt). Point-to-point
# operations (AllToAll and the matrix collectives are grouped sends and receives) are kept even when empty
# (p2pTaskAppend has no such test) and synchronise their peers.
EMPTY_DISCARDED = frozenset({ALL_REDUCE, ALL_GATHER, REDUCE_SCATTER, BROADCAST, REDUCE})


def run(engine_run, schedule: Schedule, topo: Topology, block_elems, dtype_size: int,
        launch: str = "host", noise: Noise = QUIET, size_bytes=None):
    """(seconds[iters, sizes], engine stats or None, protocol per size): the schedule timed by an engine with
    the costs above. size_bytes (the nccl-tests size of each point) sets the channels a point runs on; with
    protocol auto every protocol is timed and each size keeps the fastest (by its mean time over the
    iterations: the quiet time when there is no noise), with that protocol's engine counters."""
    block_elems = np.atleast_1d(np.asarray(block_elems))
    size_bytes = np.zeros(len(block_elems)) if size_bytes is None else np.asarray(size_bytes, np.float64)
    exposed, hidden = overheads(topo, schedule)
    control = control_core(topo, schedule)
    hidden += control.hidden
    reducers = engines_reducing(topo, schedule)
    host_issue(topo, launch)                    # refuses a loop of more GPUs than ranks before anything runs
    ops = in_switch(schedule)
    best, best_mean, names, stats = None, None, np.empty(len(block_elems), object), None
    for proto in protocols(topo, schedule):
        own = schedule.notes.get("rate_cap", 0.0)
        caps = [(rate_cap(topo, proto, int(c), own), net_cap(topo, schedule, proto, int(c)))
                for c in channels_used(topo, proto, size_bytes)]
        samples = np.empty((noise.iters, len(block_elems)))
        base = base_latency(topo, schedule, proto)
        proto_stats = None
        for cap in dict.fromkeys(caps):
            idx = np.flatnonzero([c == cap for c in caps])
            device = device_topology(topo, proto, cap[0], ops, cap[1], reducers)
            got, st = _timed(engine_run, schedule, device, block_elems[idx], dtype_size, noise, topo.nranks,
                             control.ready)
            samples[:, idx] = launched(topo, exposed + base + np.maximum(got, hidden), launch)
            proto_stats = _merge_stats(proto_stats, st, np.arange(len(block_elems))[idx], len(block_elems))
        mean = samples.mean(axis=0)
        take = np.ones(len(block_elems), bool) if best is None else mean < best_mean
        if best is None:
            best, best_mean = samples.copy(), mean.copy()
        best[:, take], best_mean[take], names[take] = samples[:, take], mean[take], proto
        if proto_stats:
            stats = stats or {k: np.full(len(block_elems), np.nan) for k in proto_stats}
            for k, v in proto_stats.items():
                stats[k][take] = v[take]
    if discards_empty(topo, schedule.collective):
        best[:, block_elems == 0] = 0.0
    return best, stats, names


def _merge_stats(stats, new, idx, n):
    if not new:
        return stats
    stats = stats or {k: np.full(n, np.nan) for k in new}
    for k, v in new.items():
        stats[k][idx] = v
    return stats


PERCENTILE_COLUMNS = ["time_us_p50", "time_us_p75", "time_us_p95", "time_us_min", "time_us_max"]


def summarize(samples: np.ndarray) -> dict[str, np.ndarray]:
    """Percentile columns (microseconds) per size from seconds[iters, sizes], like PARAM's latency table.
    Percentiles interpolate linearly between iterations (numpy's default)."""
    us = samples * 1e6
    p50, p75, p95 = np.percentile(us, [50, 75, 95], axis=0)
    return {"time_us_p50": p50, "time_us_p75": p75, "time_us_p95": p95, "time_us_min": us.min(axis=0),
            "time_us_max": us.max(axis=0)}
