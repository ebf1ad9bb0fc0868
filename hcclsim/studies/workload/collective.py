"""A collective op's time (from the network engines) and its device-memory traffic per rank.

Time: ``hcclsim.api.run_sweep(topology=<Topology>, collective=, algorithm=, sizes=[size], engine=)`` --
the same number `hccl-bench sweep` prints, with the topology's endpoint costs (launch, protocol,
execution). With rank skew or jitter it is the chosen percentile of the noisy iterations
(``time_us_p50`` ... ``time_us_p95``). Each distinct call is made once (cached per timer).

Traffic per rank, read off the compiled schedule (so it is exact for whatever the algorithm does):

    traffic = (sum over transfers of  bytes * ([src is a rank] + [dst is a rank] * (1 + [reduce]))) / ranks

A transfer reads its bytes from the sender's memory and writes them into the receiver's; one that
reduces on arrival (PUT_REDUCE) also reads the receiver's own operand before writing the sum. Switch
nodes have no device memory. E.g. ring AllReduce of S on N ranks: (N-1)/N*S sent and received in
each of its two phases, reduced on arrival in the first, = 5(N-1)/N * S; in-switch (NVLS-like)
AllReduce: S sent up and S multicast back = 2S. Transfer sizes are the schedule's
(hcclsim.engine.analytic.max_transfer_bytes: exact when a block's chunks divide evenly, else an upper
bound of a few elements).
"""

from __future__ import annotations

import numpy as np

from ...api import run_sweep
from ...core import budget
from ...core.units import DTYPE_SIZE, parse_dtype
from ...engine.analytic import max_transfer_bytes
from ...engine.execution import PERCENTILE_COLUMNS
from ...engine.packet import explicit_size
from ...network.topology import Topology
from ...schedule import collectives as C
from ...schedule.algorithm import Problem, parse_spec
from ...schedule.expand import expand
from ...schedule.ir import F_KIND, PUT_REDUCE
from .ops import CollectiveCost

PERCENTILES = tuple(c.removeprefix("time_us_") for c in PERCENTILE_COLUMNS)   # p50, p75, p95, min, max
# Bytes of the explicit schedule schedule_traffic reads, counted from the arrays: expand's int64[X, 7] table
# and its 7 columns, its dependency CSR (2 int64 per dependency), and 4 arrays per transfer here.
EXPAND_PER_TRANSFER, EXPAND_PER_DEP = 160, 16


def schedule_traffic(topology: Topology, collective: str, algorithm: str, size: int, dtype: str = "float32") -> float:
    """Device-memory bytes per rank of one collective (module docstring)."""
    ws = DTYPE_SIZE[parse_dtype(dtype)]
    algo = parse_spec(algorithm)
    problem = Problem(C.canonical(collective), topology, 0)
    sizing = C.sizing(problem.collective, int(size), ws, topology.nranks)
    if sizing.count == 0:
        return 0.0
    schedule = algo.compile(problem, algo.structure_key(problem, sizing, ws))
    transfers, deps = explicit_size(schedule)
    budget.check(EXPAND_PER_TRANSFER * transfers + EXPAND_PER_DEP * deps,
                 f"the memory traffic of {collective} {algorithm} on {topology.name} ({transfers:.3g} transfers)",
                 "use fewer ranks or smaller algorithm options (chunks, channels)")
    per_template = max_transfer_bytes(schedule, np.array([sizing.block_elems]), ws)[:, 0]
    ex = expand(schedule)
    n = topology.nranks
    reduce = schedule.tmpl[ex["tmpl"], F_KIND] == PUT_REDUCE
    touches = (ex["src"] < n).astype(np.float64) + (ex["dst"] < n) * (1.0 + reduce)
    return float((per_template[ex["tmpl"]] * touches).sum() / n)


class CollectiveTimer:
    """Times collectives on one topology with one engine, launch mode and noise; caches each call."""

    def __init__(self, topology: Topology, engine: str = "analytic", dtype: str = "float32", launch: str = "host",
                 noise: dict | None = None, percentile: str = "p50"):
        self.topology, self.engine, self.dtype, self.launch = topology, engine, dtype, launch
        self.noise = {k: v for k, v in (noise or {}).items() if v is not None}
        self.percentile = percentile
        self._cache: dict = {}
        ep = topology.endpoint
        self.sm_share = ep.sm_share if ep.execution == "sm" else 0.0

    @property
    def noisy(self) -> bool:
        return any(_positive(self.noise.get(k, 0)) for k in ("skew", "jitter")) or self.noise.get("iters", 1) > 1

    def cost(self, collective: str, algorithm: str, size: int) -> CollectiveCost:
        key = (C.canonical(collective), algorithm, int(size))
        if key not in self._cache:
            self._cache[key] = self._cost(*key)
        return self._cache[key]

    def _cost(self, collective: str, algorithm: str, size: int) -> CollectiveCost:
        extra = {"launch": self.launch, **self.noise} if (self.noisy or self.launch != "host") else {}
        rows = run_sweep(topology=self.topology, collective=collective, algorithm=algorithm, sizes=[size],
                         engine=self.engine, dtype=self.dtype, **extra)
        row = rows.iloc[0]
        column = f"time_us_{self.percentile}" if self.noisy else "time_us"
        chosen = str(row["chosen"]) if "chosen" in rows.columns else str(row["algorithm"])
        return CollectiveCost(collective, algorithm, chosen, int(row["size_bytes"]), float(row[column]) * 1e-6,
                              schedule_traffic(self.topology, collective, chosen, size, self.dtype), self.sm_share)


def _positive(v) -> bool:
    if isinstance(v, str):
        from ...core.units import parse_time

        return parse_time(v, "") > 0
    return bool(v and v > 0)
