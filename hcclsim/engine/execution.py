"""The execution model: what a collective costs beyond its transfers, and noisy iterations.

An engine times a schedule's transfers on the network. This module puts that time on a device's
timeline (docs/execution.md has the model and every rule's reasoning):

* the topology the engines see (``device_topology``): the protocol's usable share of each link and
  its extra latency per transfer, a hidden per-transfer issue cost taken off the transfers, and the
  reduction throughput of where the collective runs (message engines, or the compute units);
* host and control-core costs around the transfers (``overheads``): the host launch with
  ``--launch host`` (none with ``device``: the collective was launched ahead and a compute kernel
  releases it through a semaphore); HCCL's graph generation and metadata copy per collective and the
  control core's scheduling per subgraph (one per channel a rank drives). An exposed cost adds to the
  time; costs listed in ``[endpoint] hidden`` are prepared while the previous collective runs, so in a
  stream of collectives each one takes max(its device time, the hidden costs);
* noisy iterations (``Noise``): each rank arrives uniformly at random within ``skew`` of the first,
  and each transfer starts after an exponential delay of mean ``jitter``; an iteration's time runs
  from the first arrival to the last byte landing. Seeded, so runs repeat exactly.

    time = launch + exposed host costs + max(engine time, hidden costs)
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from ..core.errors import ConfigError
from ..network.topology import Topology
from ..schedule.ir import F_CHAN, F_ID, F_IL, Schedule

LAUNCHES = ("host", "device")

# protocol -> (usable fraction of link bandwidth, extra seconds per transfer). NVIDIA NCCL's protocols as
# its cost model describes them (NVIDIA/nccl v2.28 src/graph/tuning.cc): LL sends 8-byte lines of 4 data
# bytes and a 4-byte flag, half the bandwidth (the model's "busBw * .5" for Ring/LL); LL128 carries 120
# data bytes per 128-byte line (the model rounds it to 0.92); Simple uses the full bandwidth behind memory
# fences. Latency per ring step on NVLink, hwLat[NVLINK][Ring] = {LL .6, LL128 1.9, Simple 3.4} us: the
# presets' link latencies already stand for LL's step (dgx-h100 takes its 0.6 us path from it), so a
# protocol adds its excess over LL. "none" is the ideal link the network model describes by itself.
PROTOCOL_COSTS = {
    "none": (1.0, 0.0),
    "ll": (0.5, 0.0),
    "ll128": (120.0 / 128.0, 1.9e-6 - 0.6e-6),
    "simple": (1.0, 3.4e-6 - 0.6e-6),
}


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
    if launch not in LAUNCHES:
        raise ConfigError(f"--launch: expected one of: {', '.join(LAUNCHES)}, got {launch!r}")
    return launch


def device_topology(topo: Topology) -> Topology:
    """The topology as the engines should see it under the endpoint's protocol and execution."""
    if "device" in topo.cache:
        return topo.cache["device"]
    ep = topo.endpoint
    share, extra = PROTOCOL_COSTS[ep.protocol]
    issue = (0.0 if "issue_overhead" in ep.hidden else ep.issue_overhead) + extra
    reduce_bw = ep.sm_reduction_bandwidth if ep.execution == "sm" else ep.reduction_bandwidth
    if (share, issue, reduce_bw) == (1.0, ep.issue_overhead, ep.reduction_bandwidth):
        out = topo
    else:
        out = dataclasses.replace(topo, link_bw=topo.link_bw * share,
                                  endpoint=dataclasses.replace(ep, issue_overhead=issue, reduction_bandwidth=reduce_bw))
    topo.cache["device"] = out
    return out


def channels(schedule: Schedule) -> int:
    """Subgraphs per rank: the channels (message engines) the schedule issues on."""
    return len(np.unique(schedule.tmpl[:, F_CHAN]))


def overheads(topo: Topology, schedule: Schedule, launch: str = "host") -> tuple[float, float]:
    """(exposed seconds added to the time, hidden seconds that only the engine time can cover)."""
    ep = topo.endpoint
    costs = {"graph_generation": ep.graph_generation, "metadata_copy": ep.metadata_copy,
             "subgraph_schedule": ep.subgraph_schedule * channels(schedule)}
    exposed = sum(v for k, v in costs.items() if k not in ep.hidden)
    hidden = sum(v for k, v in costs.items() if k in ep.hidden)
    if "issue_overhead" in ep.hidden:      # the control core prepares every work-queue element of a rank ahead
        per_rank = int((schedule.tmpl[:, F_ID] * schedule.tmpl[:, F_IL]).sum()) / schedule.nranks
        hidden += ep.issue_overhead * per_rank
    launch_cost = ep.launch_overhead if check_launch(launch) == "host" else 0.0
    return launch_cost + exposed, hidden


def run(engine_run, schedule: Schedule, topo: Topology, block_elems, dtype_size: int,
        launch: str = "host", noise: Noise = QUIET):
    """(seconds[iters, sizes], engine stats or None): the schedule timed by an engine, with the costs above."""
    device = device_topology(topo)
    exposed, hidden = overheads(topo, schedule, launch)
    if not noise.active:
        timing = engine_run(schedule, device, block_elems, dtype_size)
        one = exposed + np.maximum(timing.time, hidden)
        return np.tile(one, (noise.iters, 1)), timing.stats
    rng = np.random.default_rng(noise.seed)
    out = np.empty((noise.iters, len(np.atleast_1d(block_elems))))
    stats = None
    for it in range(noise.iters):
        release = rng.uniform(0.0, noise.skew, topo.nranks) if noise.skew > 0 else None
        seed = int(rng.integers(0, 2 ** 31 - 1))
        timing = engine_run(schedule, device, block_elems, dtype_size, release=release, jitter=noise.jitter,
                            seed=seed)
        out[it] = exposed + np.maximum(timing.time, hidden)
        stats = stats or timing.stats          # counters of the first iteration
    return out, stats


PERCENTILE_COLUMNS = ["time_us_p50", "time_us_p75", "time_us_p95", "time_us_min", "time_us_max"]


def summarize(samples: np.ndarray) -> dict[str, np.ndarray]:
    """Percentile columns (microseconds) per size from seconds[iters, sizes], like PARAM's latency table.
    Percentiles interpolate linearly between iterations (numpy's default)."""
    us = samples * 1e6
    p50, p75, p95 = np.percentile(us, [50, 75, 95], axis=0)
    return {"time_us_p50": p50, "time_us_p75": p75, "time_us_p95": p95, "time_us_min": us.min(axis=0),
            "time_us_max": us.max(axis=0)}
