"""An event-driven fluid simulation of one rank running a workload graph.

Tensor-parallel ranks run the same ops on equal shares of the data and their collectives are
symmetric, so one representative rank stands for all of them: a collective's time (from the network
engines) already includes waiting for its peers, and the rank's own resources are the only ones that
its ops share. (Skewed or jittered peers enter through the collective's time: a percentile of noisy
iterations, hcclsim.execution.)

Resources of the rank:

* compute units, 1.0 in all. A running SM-based collective occupies its ``sm_share`` for as long as it
  runs (spinning while it waits on peers too); the compute ops running (GEMMs, fused bodies, generic
  compute) split what is left equally. Offloaded collectives take none.
* memory bandwidth (``memory_bandwidth``; 0 = unlimited), shared max-min fairly (water-filling): each
  running op demands the bandwidth it would use at the pace its other limits allow, ops demanding less
  than an equal share get their demand, the rest split what remains equally.

An op's progress rate (fraction of its work per second) is the minimum over what it needs:
compute share * peak_flops * gemm_efficiency / flops, memory allocation / bytes, 1 / net_time.
Rates are constant between events and recomputed whenever an op starts or ends, so the simulation is
exact (piecewise linear) and deterministic: ops start in the order they were added, ties finish together.
An op starts when every op it depends on has finished, and after the op added before it on the same
stream has finished (a CUDA-like stream). Its slowdown is (finish - start) / time alone - 1, where its
time alone is the same rate rule with nothing else running.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from ...core.errors import ConfigError
from .ops import Device, Op

# A finish within this relative distance of the next event happens at that event (float round-off).
_TIE = 1e-12


def waterfill(demands, capacity: float) -> np.ndarray:
    """Max-min fair shares of capacity for the given demands (math.inf allowed): the smallest demands are
    met in full while they are below an equal share of what is left; the others split the remainder."""
    d = np.asarray(demands, np.float64)
    out = np.zeros(len(d))
    if math.isinf(capacity):
        return d.copy()
    left, k = float(capacity), len(d)
    for i in sorted(range(len(d)), key=lambda i: (d[i], i)):
        give = min(d[i], left / k)
        out[i] = give
        left -= give
        k -= 1
    return out


@dataclass
class SimResult:
    ops: pd.DataFrame      # one row per op, in the order added
    makespan: float        # seconds


def _preds(ops: list[Op]) -> list[list[int]]:
    index = {}
    for i, op in enumerate(ops):
        if op.name in index:
            raise ConfigError(f"workload: two ops are named {op.name!r}; names must be unique")
        index[op.name] = i
    last_on = {}
    preds = []
    for i, op in enumerate(ops):
        p = []
        for d in op.deps:
            if d not in index:
                raise ConfigError(f"workload: op {op.name!r} depends on {d!r}, which is not an op")
            if index[d] >= i:
                raise ConfigError(f"workload: op {op.name!r} depends on {d!r}, which is added after it; "
                                  f"add ops after what they depend on")
            p.append(index[d])
        if op.stream is not None:
            if op.stream in last_on:
                p.append(last_on[op.stream])
            last_on[op.stream] = i
        preds.append(sorted(set(p)))
    return preds


def rates(ops: list[Op], running: list[int], device: Device) -> np.ndarray:
    """Progress rate (fraction of work per second) of each running op; math.inf for an op that needs
    nothing finite."""
    reserved = sum(ops[i].sm_share for i in running)
    if reserved >= 1:
        names = ", ".join(ops[i].name for i in running if ops[i].sm_share > 0)
        raise ConfigError(f"workload: SM-based collectives running at once ({names}) take {reserved:g} of the "
                          f"compute units; expected less than 1")
    computing = [i for i in running if ops[i].flops > 0]
    share = (1.0 - reserved) / len(computing) if computing else 0.0
    if computing and not device.flops > 0:
        raise ConfigError(f"workload: op {ops[computing[0]].name!r} needs endpoint.peak_flops, which is 0 "
                          f"(unknown); set it, e.g. set = [\"endpoint.peak_flops=989TFLOP/s\"]")
    rho = np.full(len(running), math.inf)
    for x, i in enumerate(running):
        op = ops[i]
        if op.flops > 0:
            rho[x] = min(rho[x], share * device.flops / op.flops)
        if op.net_time > 0:
            rho[x] = min(rho[x], 1.0 / op.net_time)
    nbytes = np.array([ops[i].bytes for i in running])
    with np.errstate(invalid="ignore"):
        demand = np.where(nbytes > 0, rho * nbytes, 0.0)
    capacity = device.memory_bandwidth if device.memory_bandwidth > 0 else math.inf
    alloc = waterfill(demand, capacity)
    with np.errstate(divide="ignore", invalid="ignore"):
        mem_rate = np.where(nbytes > 0, alloc / np.where(nbytes > 0, nbytes, 1.0), math.inf)
    return np.minimum(rho, mem_rate)


def time_alone(op: Op, device: Device) -> float:
    """max(flops / (peak * efficiency), bytes / memory_bandwidth, net_time): the op with nothing else."""
    rate = rates([op], [0], device)[0]
    return 0.0 if math.isinf(rate) else 1.0 / rate


def simulate(ops: list[Op], device: Device) -> SimResult:
    """Run the graph on one rank (module docstring). Deterministic."""
    ops = list(ops)
    n = len(ops)
    if n == 0:
        raise ConfigError("workload: no ops to run")
    preds = _preds(ops)
    waiting = [len(p) for p in preds]              # predecessors not finished yet
    succ: list[list[int]] = [[] for _ in range(n)]
    for i, ps in enumerate(preds):
        for p in ps:
            succ[p].append(i)
    ready = [i for i in range(n) if not waiting[i]]
    remaining = np.ones(n)
    start = np.full(n, math.nan)
    finish = np.full(n, math.nan)
    finished = 0
    running: list[int] = []
    t = 0.0
    while finished < n:                            # each event costs the ops running, not all ops
        for i in sorted(ready):
            start[i] = t
            running.append(i)
        ready = []
        rate = rates(ops, running, device)
        with np.errstate(divide="ignore"):
            left = np.where(np.isinf(rate), 0.0, remaining[running] / rate)
        dt = float(left.min())
        t_next = t + dt
        still = []
        for x, i in enumerate(running):
            if left[x] <= dt + _TIE * max(t_next, 1e-30):
                remaining[i] = 0.0
                finish[i] = t_next
                finished += 1
                for j in succ[i]:
                    waiting[j] -= 1
                    if not waiting[j]:
                        ready.append(j)
            else:
                remaining[i] -= rate[x] * dt
                still.append(i)
        running = still
        t = t_next
    alone = np.array([time_alone(op, device) for op in ops])
    dur = finish - start
    with np.errstate(divide="ignore", invalid="ignore"):
        slow = np.where(alone > 0, dur / alone - 1.0, 0.0)
    frame = pd.DataFrame({
        "op": [op.name for op in ops], "kind": [op.kind for op in ops],
        "start_us": start * 1e6, "finish_us": finish * 1e6, "time_us": dur * 1e6, "alone_us": alone * 1e6,
        "slowdown_pct": slow * 100.0, "flops": [op.flops for op in ops], "bytes": [op.bytes for op in ops],
        "net_time_us": [op.net_time * 1e6 for op in ops], "sm_share": [op.sm_share for op in ops]})
    return SimResult(frame, float(np.nanmax(finish)))
