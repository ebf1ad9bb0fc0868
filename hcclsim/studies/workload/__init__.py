"""Workloads: compute ops and collectives overlapping on one rank, one level above the schedule IR.

    ops         Op (gemm, compute, collective, fused), Device (the [endpoint] compute), GEMM FLOPs/traffic
    collective  a collective's time (hcclsim.api.run_sweep, cached) and its device-memory traffic per rank
    fluid       the event-driven fluid simulation of one rank (compute units, memory water-filling)
    patterns    the graphs [[workload]] sections build: a GEMM under collectives, a tensor-parallel layer
    section     run_section(table, where): a [[workload]] table of a scenario file -> a DataFrame

The model and the schema are documented in docs/studies/README.md ("Workload sections").
"""

from .collective import CollectiveTimer, schedule_traffic
from .fluid import SimResult, simulate, time_alone, waterfill
from .ops import CollectiveCost, Device, Op, collective, compute, fused, gemm, gemm_bytes, gemm_flops
from .section import check_section, run_section

__all__ = [
           "CollectiveCost",
           "CollectiveTimer",
           "Device",
           "Op",
           "SimResult",
           "check_section",
           "collective",
           "compute",
           "fused",
           "gemm",
           "gemm_bytes",
           "gemm_flops",
           "run_section",
           "schedule_traffic",
           "simulate",
           "time_alone",
           "waterfill",
]
