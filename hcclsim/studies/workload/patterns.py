"""Workload graphs the [[workload]] sections build: a GEMM under collectives, and a tensor-parallel layer.

overlap -- one GEMM on the compute stream and ``count`` collectives back to back on the communication
stream, all released at t = 0. count = 0: as many as it takes to cover the GEMM even as slowed by them
(its time with one collective always beside it, over a collective's time alone), so the GEMM runs under
communication from start to end: the concurrent-GEMM experiment.

tp_layer -- one transformer layer of a tensor-parallel group (Megatron-style), every rank holding 1/tp
of each weight, on ``tokens`` tokens of ``hidden`` features:

    attention: [AllGather]  QKV GEMM (m=tokens, n=qkv/tp, k=hidden)  attention core  out-projection GEMM
               (m=tokens, n=hidden, k=hidden/tp)  AllReduce (or ReduceScatter)
    MLP:       [AllGather]  up GEMM (n=ffn/tp, x2 when gated)  down GEMM (n=hidden, k=ffn/tp)  AllReduce (or RS)

Each block's collective carries the block's output activations, tokens * hidden * dtype bytes.
``collectives = "all_reduce"`` puts an AllReduce after each row-parallel GEMM; ``"rs_ag"`` (sequence
parallelism) a ReduceScatter there and an AllGather before the next column-parallel GEMM -- the same
bytes, split so that each half can overlap with a GEMM. Elementwise ops (norms, activations, residual
adds) are left out: they are small and the same in every schedule. The attention core is a generic
compute op: 4 * tokens * seq * hidden/tp FLOPs (QK^T and PV), halved when causal, moving Q, K, V and O
once (4 * tokens * hidden/tp * dtype bytes, FlashAttention-like).

Schedules:

    sequential  every op after the previous one (one stream): the GEMM, then its collective
    chunked     each collective's GEMM split into ``chunks`` GEMMs of tokens/chunks rows (each reads the
                weights again); chunk i's collective (of 1/chunks of the bytes, timed by the engine at that
                size) runs on the communication stream while the compute stream runs chunk i+1
                (T3-like). Collectives on the stream run one at a time. With rs_ag the AllGather side is
                chunked the same way (chunk i's GEMM waits for chunk i's AllGather). The next block
                starts when the last chunk's collective is done.
    fused       compute-aware fusion at ``tiles`` granularity: the GEMM's tiles are pushed into the
                collective as they are produced (GEMM+AllReduce/ReduceScatter), or consumed as they
                arrive (AllGather+GEMM). A two-stage pipeline over K tiles takes a + (K-1) max(a, b) + b
                (a, b: one tile of each stage); it is built as exactly that: a head (one tile of the
                first stage alone), a fused body (K-1 tiles of both, moving at the slower one's pace,
                sharing the rank's resources), and a tail (one tile of the second stage alone; a
                collective tail is timed by the engine at 1/K of the size, so it pays the network
                latency once more).
"""

from __future__ import annotations

import dataclasses
import math

from ...core import budget
from ...core.errors import ConfigError
from .collective import CollectiveTimer
from .fluid import rates, time_alone
from .ops import Device, Op, collective, compute, fused, gemm, gemm_rows

SCHEDULES = ("sequential", "chunked", "fused")
COLLECTIVE_SETS = ("all_reduce", "rs_ag")
# Bytes one op of a graph takes, built and simulated: measured 1.3-2.2 KiB per op (peak RSS growth of overlap
# graphs of 2000 and 8000 collectives): the Op with its name and info, the simulation's state and table row.
BYTES_PER_OP = 2500


def check_ops(nops: int, what: str, smaller: str) -> None:
    """Refuse a graph of nops ops whose building and simulation would pass the memory budget, before it is built."""
    budget.check(BYTES_PER_OP * nops, f"{what} ({nops} ops)", smaller)


def part(op: Op, fraction: float, name: str, deps=(), stream=None) -> Op:
    """A fraction of an op's work (one tile or chunk of it) as an op of its own."""
    info = {**op.info, "fraction": fraction}
    return dataclasses.replace(op, name=name, flops=op.flops * fraction, bytes=op.bytes * fraction,
                               net_time=op.net_time * fraction, deps=tuple(deps), stream=stream, info=info)


# ------------------------------------------------------------------------------------------ overlap

def overlap(p: dict, timer: CollectiveTimer, device: Device, dtype_size: int) -> list[Op]:
    g = gemm("gemm", p["m"], p["n"], p["k"], dtype_size, p["gemm_tile"], stream="compute")
    cost = timer.cost(p["collective"], p["algorithm"], p["size"])
    name = p["collective"]
    count = p["count"] or _covering(g, collective(name, cost), device)
    check_ops(1 + count, f"overlap: {count} collectives of {cost.size_bytes} bytes",
              "use a smaller GEMM (m, n, k), a larger collective size, or count = N")
    return [g] + [collective(f"{name}#{i + 1}", cost, stream="comm") for i in range(count)]


def _covering(g: Op, c: Op, device: Device) -> int:
    """How many collectives back to back last at least as long as the GEMM slowed by them: the GEMM's time
    with one of them always running beside it, over one's time alone (a collective beside the GEMM never
    runs faster than alone)."""
    if c.net_time <= 0 and c.bytes <= 0:
        return 1
    rate = rates([g, c], [0, 1], device)[0]
    return max(1, math.ceil((1.0 / rate) / time_alone(c, device) * (1 + 1e-12)))


# ----------------------------------------------------------------------------------------- tp layer

def _blocks(p: dict, tp: int):
    h, ffn = p["hidden"], p["ffn"]
    n_up = ffn * (2 if p["gated"] else 1)
    for key, v in (("hidden", h), ("ffn", ffn), ("qkv", p["qkv"])):
        if v % tp:
            raise ConfigError(f"{key}: {v} is not a multiple of tp = {tp}; every rank holds 1/tp of the weights")
    return [("attn", p["qkv"] // tp, h // tp, True), ("mlp", n_up // tp, ffn // tp, False)]


def tp_layer(p: dict, timer: CollectiveTimer, device: Device, dtype_size: int) -> list[Op]:
    tp = timer.topology.nranks
    if p["tp"] not in (0, tp):
        raise ConfigError(f"tp: {p['tp']}, but the topology has {tp} ranks; the tensor-parallel group is the "
                          f"whole topology (change its ranks with set = [\"ranks=...\"])")
    T, h, tile = p["tokens"], p["hidden"], p["gemm_tile"]
    S = T * h * dtype_size
    pieces = {"sequential": 1, "chunked": p["chunks"], "fused": p["tiles"]}[p["schedule"]]
    if T % pieces:
        what = "chunks" if p["schedule"] == "chunked" else "tiles"
        raise ConfigError(f"tokens: {T} is not a multiple of {pieces} ({what}); the GEMMs are split by rows of tokens")
    rs_ag = p["collectives"] == "rs_ag"
    check_ops(2 * (4 * pieces + 6), f"tp_layer: {p['schedule']} in {pieces} pieces",
              "use fewer chunks or tiles")
    build = {"sequential": _sequential, "chunked": _chunked, "fused": _fused}[p["schedule"]]
    ops: list[Op] = []
    for block, n_in, k_out, core in _blocks(p, tp):
        g_in = gemm(f"{block}.gemm_in", T, n_in, h, dtype_size, tile)
        g_out = gemm(f"{block}.gemm_out", T, h, k_out, dtype_size, tile)
        mid = []
        if core:
            flops = 4.0 * T * p["seq"] * (h // tp) * (0.5 if p["causal"] else 1.0)
            mid = [compute(f"{block}.core", flops, 4.0 * T * (h // tp) * dtype_size)]
        prev = [ops[-1].name] if ops else []
        ops += build(block, g_in, mid, g_out, S, rs_ag, pieces, timer, p["algorithm"], prev)
    return ops


def _sequential(block, g_in, mid, g_out, S, rs_ag, _, timer, algorithm, prev):
    chain = []
    if rs_ag:
        chain.append(collective(f"{block}.all_gather", timer.cost("all_gather", algorithm, S)))
    chain += [g_in, *mid, g_out]
    name = "reduce_scatter" if rs_ag else "all_reduce"
    chain.append(collective(f"{block}.{name}", timer.cost(name, algorithm, S)))
    return [dataclasses.replace(op, stream="main", deps=()) for op in chain]


def _chunked(block, g_in, mid, g_out, S, rs_ag, C, timer, algorithm, prev):
    ops = []
    if rs_ag:
        ag = timer.cost("all_gather", algorithm, S // C)
        for i in range(C):
            ops.append(collective(f"{block}.all_gather[{i}]", ag, stream="comm"))
            ops.append(gemm_rows(g_in, C, f"{block}.gemm_in[{i}]", deps=[ops[-1].name], stream="compute"))
    else:
        ops.append(dataclasses.replace(g_in, stream="compute", deps=tuple(prev)))   # all of the last block's output
    ops += [dataclasses.replace(op, stream="compute") for op in mid]
    name = "reduce_scatter" if rs_ag else "all_reduce"
    cost = timer.cost(name, algorithm, S // C)
    for i in range(C):
        ops.append(gemm_rows(g_out, C, f"{block}.gemm_out[{i}]", stream="compute"))
        ops.append(collective(f"{block}.{name}[{i}]", cost, deps=[ops[-1].name], stream="comm"))
    return ops


def _fused(block, g_in, mid, g_out, S, rs_ag, K, timer, algorithm, prev):
    ops = []
    if rs_ag:
        ag_tile = timer.cost("all_gather", algorithm, S // K)
        ops += [collective(f"{block}.all_gather[head]", ag_tile),
                fused(f"{block}.all_gather+gemm_in", g_in, timer.cost("all_gather", algorithm, S), (K - 1) / K),
                part(g_in, 1 / K, f"{block}.gemm_in[tail]")]
    else:
        ops.append(g_in)
    ops += mid
    name = "reduce_scatter" if rs_ag else "all_reduce"
    ops += [part(g_out, 1 / K, f"{block}.gemm_out[head]"),
            fused(f"{block}.gemm_out+{name}", g_out, timer.cost(name, algorithm, S), (K - 1) / K),
            collective(f"{block}.{name}[tail]", timer.cost(name, algorithm, S // K))]
    return [dataclasses.replace(op, stream="main", deps=()) for op in ops]


PATTERNS = {"overlap": overlap, "tp_layer": tp_layer}
