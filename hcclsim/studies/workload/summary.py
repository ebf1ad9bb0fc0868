"""One row per simulated workload: its parameters, its time, and what overlap cost the GEMMs and collectives.

    gemm_alone_us       sum over GEMM ops (chunks, tiles, fused bodies' GEMM part) of their time alone
    gemm_us             sum of their durations in the workload (a fused body's whole duration: the GEMM
                        moves at the fused pace)
    gemm_slowdown_pct   (gemm_us / gemm_alone_us - 1) * 100
    coll_alone_us       sum over collective ops (and fused bodies' collective part) of their time alone
    coll_us             sum of their durations in the workload (fused bodies counted here too)
    compute_alone_us    gemm_alone_us plus the other compute ops' time alone
    exposed_us          the makespan beyond compute_alone_us: communication and slowdowns not hidden
                        (float round-off below 1e-9 us shown as 0)
"""

from __future__ import annotations

from ...core.units import parse_time
from .fluid import time_alone
from .ops import Op

PARAM_COLUMNS = {
    "overlap": ("m", "n", "k", "collective", "size", "count"),
    "tp_layer": ("tokens", "hidden", "ffn", "qkv", "seq", "causal", "gated", "schedule", "collectives", "chunks",
                 "tiles"),
}


def _pct(t: float, alone: float) -> float:
    """(t / alone - 1) * 100, with float round-off below 1e-9 % shown as 0."""
    if not alone > 0:
        return 0.0
    x = round((t / alone - 1.0) * 100.0, 9)
    return x + 0.0 if x != 0 else 0.0


def _seconds(v) -> float:
    return float(v) if isinstance(v, (int, float)) else parse_time(v, "")


def summarize(kind, base, variant, p, vary, topo, timer, ops, result, device) -> dict:
    frame = result.ops
    dur = dict(zip(frame.op, frame.time_us))
    alone = dict(zip(frame.op, frame.alone_us))
    gemm_alone = gemm_us = coll_alone = coll_us = other_alone = 0.0
    chosen = []
    for op in ops:
        if op.kind in ("gemm", "fused"):
            gemm_us += dur[op.name]
        if op.kind in ("collective", "fused"):
            coll_us += dur[op.name]
            chosen.append(op.info["algorithm"])
        if op.kind == "gemm":
            gemm_alone += alone[op.name]
        elif op.kind == "compute":
            other_alone += alone[op.name]
        elif op.kind == "collective":
            coll_alone += alone[op.name]
        else:
            part = Op(op.name, "gemm", flops=op.info["gemm_flops"], bytes=op.info["gemm_bytes"])
            gemm_alone += time_alone(part, device) * 1e6
            coll_alone += op.info["coll_time"] * 1e6
    ep = topo.endpoint
    row = {"variant": variant["name"]}
    row.update(vary)
    makespan = result.makespan * 1e6
    row.update({("layer_us" if kind == "tp_layer" else "makespan_us"): makespan,
                "gemm_slowdown_pct": _pct(gemm_us, gemm_alone), "gemm_alone_us": gemm_alone, "gemm_us": gemm_us,
                "coll_alone_us": coll_alone, "coll_us": coll_us, "coll_slowdown_pct": _pct(coll_us, coll_alone),
                "exposed_us": round(makespan - gemm_alone - other_alone, 9) + 0.0, "compute_alone_us": gemm_alone + other_alone})
    row.update({"algorithm": p["algorithm"], "chosen": ",".join(dict.fromkeys(chosen)),
                "execution": ep.execution, "sm_share": ep.sm_share if ep.execution == "sm" else 0.0,
                "engine": p["engine"], "launch": p["launch"],
                "collective_time": base["percentile"] if timer.noisy else "quiet",
                "skew_us": _seconds(p["skew"]) * 1e6, "jitter_us": _seconds(p["jitter"]) * 1e6})
    for key in PARAM_COLUMNS[kind]:
        row[key] = p[key]
    if kind == "overlap":
        row["count"] = sum(op.kind == "collective" for op in ops)
        row["size_bytes"] = next(op.info["size_bytes"] for op in ops if op.kind == "collective")
        del row["size"]
    row.update({"gemm_tile": p["gemm_tile"], "topology": topo.name, "ranks": topo.nranks,
                "workload": base["name"]})
    return row
