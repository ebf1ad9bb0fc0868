"""Operations of a workload graph and the device they run on (docs/studies/README.md, "Workload sections").

A workload is one level above the schedule IR: a handful of operations with dependencies, each a
compute op (a GEMM or generic FLOPs + bytes), a collective (its time from the network engines) or a
fused GEMM+collective body. Every op is described by the resources it needs:

    flops      work for the compute units (0: none)
    bytes      device-memory (HBM) traffic
    net_time   seconds the network needs for it alone (collectives, fused bodies; 0: none)
    sm_share   fraction of the compute units it occupies while it runs, doing no FLOPs (an SM-based
               collective); offloaded collectives take none

Its time alone is max(flops / (peak_flops * gemm_efficiency), bytes / memory_bandwidth, net_time)
(hcclsim.studies.workload.fluid has the shared-resource model).

GEMM memory traffic (gemm_bytes): with tile = 0 the compulsory traffic (m*k + k*n + m*n) * dtype bytes --
each operand read once and the result written once -- which is what a GEMM moves when its on-chip
blocking (L2 / SRAM) captures all reuse, as large, well-tiled GEMMs nearly do. It is a lower bound; with
tile = T (the edge of the output block kept on chip) A is re-read once per column of blocks and B once per
row of blocks: (m*k*ceil(n/T) + k*n*ceil(m/T) + m*n) * dtype. We default to the compulsory form because
it needs no unsourced constant and because a compute-bound GEMM's slowdown does not depend on it unless
memory saturates; the tile makes that sensitivity explicit when wanted.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from ...core.errors import ConfigError
from ...network.params import Endpoint

KINDS = ("gemm", "compute", "collective", "fused")


@dataclass(frozen=True)
class Device:
    """What a rank's compute offers: from the topology's [endpoint] table."""

    peak_flops: float = 0.0          # FLOP/s; 0 = unknown (compute ops are then refused)
    gemm_efficiency: float = 1.0     # fraction of peak a GEMM reaches alone
    memory_bandwidth: float = 0.0    # bytes/s; 0 = not a limit

    @classmethod
    def of(cls, endpoint: Endpoint) -> Device:
        return cls(endpoint.peak_flops, endpoint.gemm_efficiency, endpoint.memory_bandwidth)

    @property
    def flops(self) -> float:
        """FLOP/s a compute op reaches with every compute unit."""
        return self.peak_flops * self.gemm_efficiency


@dataclass(frozen=True)
class Op:
    name: str
    kind: str                        # one of KINDS
    flops: float = 0.0
    bytes: float = 0.0
    net_time: float = 0.0
    sm_share: float = 0.0
    deps: tuple = ()                 # names of ops that must finish before this one starts
    stream: str | None = None        # ops on one stream run in the order they were added
    info: dict = field(default_factory=dict, compare=False)    # what it is (dims, collective, ...)

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ConfigError(f"op {self.name!r}: unknown kind {self.kind!r}; expected one of: {', '.join(KINDS)}")
        for key in ("flops", "bytes", "net_time"):
            v = getattr(self, key)
            if not (v >= 0 and math.isfinite(v)):
                raise ConfigError(f"op {self.name!r}: {key}: expected a finite number >= 0, got {v!r}")
        if not 0 <= self.sm_share < 1:
            raise ConfigError(f"op {self.name!r}: sm_share: expected a number in [0, 1), got {self.sm_share!r}")


def gemm_flops(m: int, n: int, k: int) -> float:
    """2mnk: one multiply and one add per term of each of the m*n dot products of length k."""
    return 2.0 * m * n * k


def gemm_bytes(m: int, n: int, k: int, dtype_size: int, tile: int = 0) -> float:
    """Device-memory traffic of C[m,n] = A[m,k] B[k,n] (module docstring): compulsory (tile = 0) or tiled."""
    if tile <= 0:
        return float((m * k + k * n + m * n) * dtype_size)
    return float((m * k * math.ceil(n / tile) + k * n * math.ceil(m / tile) + m * n) * dtype_size)


def gemm(name: str, m: int, n: int, k: int, dtype_size: int, tile: int = 0, deps=(), stream=None) -> Op:
    for key, v in (("m", m), ("n", n), ("k", k)):
        if not (isinstance(v, int) and v >= 1):
            raise ConfigError(f"GEMM {name!r}: {key}: expected a whole number >= 1, got {v!r}")
    return Op(name, "gemm", flops=gemm_flops(m, n, k), bytes=gemm_bytes(m, n, k, dtype_size, tile),
              deps=tuple(deps), stream=stream, info={"m": m, "n": n, "k": k, "dtype_size": dtype_size, "tile": tile})


def gemm_rows(op: Op, pieces: int, name: str, deps=(), stream=None) -> Op:
    """One of ``pieces`` row blocks of a GEMM as a GEMM of its own (m / pieces rows; B is read again by each)."""
    i = op.info
    return gemm(name, i["m"] // pieces, i["n"], i["k"], i["dtype_size"], i["tile"], deps, stream)


def compute(name: str, flops: float, nbytes: float, deps=(), stream=None, **info) -> Op:
    return Op(name, "compute", flops=float(flops), bytes=float(nbytes), deps=tuple(deps), stream=stream, info=info)


@dataclass(frozen=True)
class CollectiveCost:
    """One timed collective (hcclsim.studies.workload.collective.CollectiveTimer)."""

    collective: str
    algorithm: str                   # as asked ('auto' stays 'auto')
    chosen: str                      # the algorithm that ran
    size_bytes: int                  # as the sweep reports it (after nccl-tests' rounding)
    time: float                      # seconds alone, from the engine (a percentile under noise)
    traffic: float                   # device-memory bytes per rank
    sm_share: float                  # compute units it takes while it runs (0 when offloaded)


def collective(name: str, cost: CollectiveCost, deps=(), stream=None) -> Op:
    return Op(name, "collective", bytes=cost.traffic, net_time=cost.time, sm_share=cost.sm_share,
              deps=tuple(deps), stream=stream,
              info={"collective": cost.collective, "algorithm": cost.chosen, "size_bytes": cost.size_bytes})


def fused(name: str, gemm_op: Op, cost: CollectiveCost, fraction: float = 1.0, deps=(), stream=None) -> Op:
    """A GEMM and a collective streaming through each other (compute-aware in-switch fusion): one op that
    needs the GEMM's FLOPs and both ops' memory traffic and the collective's network time, each scaled by
    fraction (the share of the work in this body); it moves at the pace of the slowest of the three. It
    takes no separate compute units for the collective: the GEMM's own threads issue the switch requests."""
    return Op(name, "fused", flops=gemm_op.flops * fraction, bytes=(gemm_op.bytes + cost.traffic) * fraction,
              net_time=cost.time * fraction, deps=tuple(deps), stream=stream,
              info={**gemm_op.info, "collective": cost.collective, "algorithm": cost.chosen,
                    "size_bytes": cost.size_bytes, "gemm_flops": gemm_op.flops * fraction,
                    "gemm_bytes": gemm_op.bytes * fraction, "coll_time": cost.time * fraction})
