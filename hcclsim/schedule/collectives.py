"""The collectives: names, size semantics (as nccl-tests), busbw factors, and their specs.

A spec says what every buffer holds before the collective and what the
result must be after it -- the checker runs schedules against it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..core.errors import ConfigError, unknown
from ..core.names import (
    ALL_GATHER,
    ALL_REDUCE,
    ALL_TO_ALL,
    ALL_TO_ALLV,
    BROADCAST,
    COLLECTIVES,
    MATRIX_COLLECTIVES,
    PP_RING,
    REDUCE,
    REDUCE_SCATTER,
    SEND_RECV,
)
from . import matrix
from .ir import Layout

__all__ = ["ALL_GATHER", "ALL_REDUCE", "ALL_TO_ALL", "ALL_TO_ALLV", "BROADCAST", "COLLECTIVES", "MATRIX_COLLECTIVES",
           "PP_RING", "REDUCE", "REDUCE_SCATTER", "SEND_RECV"]
# NCCL / nccl-tests / PARAM spellings are accepted too.
ALIASES = {"allreduce": ALL_REDUCE, "allgather": ALL_GATHER, "reducescatter": REDUCE_SCATTER,
           "alltoall": ALL_TO_ALL, "all2all": ALL_TO_ALL, "bcast": BROADCAST, "alltoallv": ALL_TO_ALLV,
           "sendrecv": SEND_RECV, "ppring": PP_RING}
# nccl-tests rounds AllGather/ReduceScatter per-rank counts down to a multiple of 4 elements (ALIGN).
NCCL_TESTS_ALIGN = 4


def canonical(name: str, where: str = "--collective") -> str:
    key = str(name).strip().lower().replace("-", "_")
    key = ALIASES.get(key.replace("_", ""), key)
    if key not in COLLECTIVES + MATRIX_COLLECTIVES:
        raise ConfigError(f"{where}: {unknown('collective', name, COLLECTIVES + MATRIX_COLLECTIVES)}")
    return key


def busbw_factor(collective: str, n: int) -> float:
    """nccl-tests' bus-bandwidth factors (its doc/PERFORMANCE.md); AllToAllv as AllToAll (PARAM comms_utils.py
    getBusBW), send_recv and pp_ring 1 (nccl-tests src/sendrecv.cu SendRecvGetBw)."""
    if n <= 1:
        return 0.0 if collective != BROADCAST and collective != REDUCE else 1.0
    if collective == ALL_REDUCE:
        return 2.0 * (n - 1) / n
    if collective in (ALL_GATHER, REDUCE_SCATTER, ALL_TO_ALL, ALL_TO_ALLV):
        return (n - 1) / n
    return 1.0


def nblocks(collective: str, n: int) -> int:
    """Blocks a buffer is cut into: one per rank where the collective addresses ranks' parts."""
    return n if collective in (ALL_GATHER, REDUCE_SCATTER, ALL_TO_ALL) else 1


@dataclass(frozen=True)
class Sizing:
    """What a requested size means for one collective on n ranks (nccl-tests semantics)."""

    size_bytes: int       # the size reported (nccl-tests' 'size' column): whole buffer, after rounding
    count: int            # elements in that buffer
    block_elems: int      # elements per block of the Layout (a matrix collective: per unit of its traffic)
    traffic: matrix.Traffic | None = None     # a matrix collective's traffic


def default_traffic(collective: str, n: int) -> matrix.Traffic:
    """A matrix collective's traffic without --matrix: AllToAllv uniform, send_recv rank 0 -> rank n-1,
    pp_ring every rank to the next."""
    if collective == SEND_RECV:
        return matrix.pair(n, 0, n - 1)
    return matrix.ring(n) if collective == PP_RING else matrix.uniform(n)


def sizing(collective: str, requested_bytes: int, dtype_size: int, n: int,
           traffic: matrix.Traffic | None = None) -> Sizing:
    """traffic: a matrix collective's (default_traffic when None). Its size is the bytes a rank sends on
    average (AllToAllv, as nccl-tests' alltoall and PARAM's all_to_allv size a rank's buffer; pp_ring: each
    rank's message) or the one message (send_recv); the matrix is scaled to it in whole elements per unit,
    so a uniform matrix gives AllToAll's size."""
    count = requested_bytes // dtype_size
    if collective in MATRIX_COLLECTIVES:
        t = traffic or default_traffic(collective, n)
        senders = 1 if collective == SEND_RECV else n
        unit = count * senders // t.total
        return Sizing(unit * t.total // senders * dtype_size, unit * t.total // senders, unit, t)
    if collective in (ALL_GATHER, REDUCE_SCATTER):
        per_rank = count // (NCCL_TESTS_ALIGN * n) * NCCL_TESTS_ALIGN
        return Sizing(per_rank * n * dtype_size, per_rank * n, per_rank)
    if collective == ALL_TO_ALL:
        per_peer = count // n
        return Sizing(per_peer * n * dtype_size, per_peer * n, per_peer)
    return Sizing(count * dtype_size, count, count)


# ------------------------------------------------------------------------------- specs (checker)

GARBAGE = -(10 ** 12)      # initial buffers hold this or less where they hold nothing meaningful


def initial_buffers(collective: str, n: int, nnodes: int, layout: Layout, block_elems: int, root: int,
                    rng: np.random.Generator, traffic: matrix.Traffic | None = None):
    """(values, IN, OUT, TMP): values[r] is rank r's data; buffers are int64[nnodes, total].

    Positions that hold nothing meaningful get distinct huge negative 'garbage', so a
    result that reads or keeps them cannot pass. A matrix collective (block_elems elements per unit of
    its traffic): rank i's IN holds its units for rank j from traffic.send_offsets[i, j], rank j's OUT
    receives them from traffic.recv_offsets[j, i]; a rank's units for itself start in place.
    """
    total = layout.nblocks * block_elems
    values = rng.integers(1, 1000, size=(n, total), dtype=np.int64)
    garbage = GARBAGE - np.arange(nnodes * total, dtype=np.int64).reshape(nnodes, total) * 1000
    inb, out, tmp = garbage.copy(), garbage.copy(), garbage.copy() - 7
    inb[n:], out[n:], tmp[n:] = 0, 0, 0     # switches: reduction tables start empty
    blk = _blocks(block_elems, layout.nblocks)
    if collective in (ALL_REDUCE, REDUCE_SCATTER, REDUCE):
        inb[:n], out[:n] = values, values
    elif collective == ALL_GATHER:
        for r in range(n):
            out[r, blk[r]] = values[r, blk[r]]
        inb[:n] = out[:n]
    elif collective == ALL_TO_ALL:
        inb[:n] = values
        for r in range(n):
            out[r, blk[r]] = values[r, blk[r]]
    elif collective == BROADCAST:
        inb[root], out[root] = values[root], values[root]
    elif collective in MATRIX_COLLECTIVES:
        inb[:n] = values
        for r in range(n):
            out[r, _part(traffic, block_elems, r, r, True)] = values[r, _part(traffic, block_elems, r, r, False)]
    return values, inb, out, tmp


def check_result(collective: str, n: int, layout: Layout, block_elems: int, root: int,
                 values: np.ndarray, out: np.ndarray, traffic: matrix.Traffic | None = None) -> str | None:
    """None when OUT holds the collective's result, else a one-line description of the first mismatch:
    the rank, the chunk of its output buffer (and the block the chunk belongs to), the element within
    the chunk, what it holds and what it should."""
    total_sum = values.sum(axis=0)
    blk = _blocks(block_elems, layout.nblocks)
    if collective == ALL_REDUCE:
        wants = [(r, slice(None), total_sum) for r in range(n)]
    elif collective == REDUCE:
        wants = [(root, slice(None), total_sum)]
    elif collective == BROADCAST:
        wants = [(r, slice(None), values[root]) for r in range(n)]
    elif collective == REDUCE_SCATTER:
        wants = [(r, blk[r], total_sum[blk[r]]) for r in range(n)]
    elif collective == ALL_GATHER:
        wants = [(r, blk[b], values[b, blk[b]]) for r in range(n) for b in range(n)]
    elif collective in MATRIX_COLLECTIVES:
        wants = [(j, _part(traffic, block_elems, i, j, True), values[i, _part(traffic, block_elems, i, j, False)], i)
                 for i, j in zip(*np.nonzero(traffic.units))]
    else:
        wants = [(j, blk[r], values[r, blk[j]]) for r in range(n) for j in range(n)]
    off = layout.offsets(block_elems)
    for r, where, want, *sender in wants:
        got = out[r, where]
        if not np.array_equal(got, want):
            bad = int(np.argmax(got != want))
            pos = (where.start or 0) + bad                         # element of the whole buffer
            chunk = int(np.searchsorted(off, pos, side="right")) - 1
            held = f"{got[bad]}" + (" (garbage: an unwritten position)" if got[bad] <= GARBAGE // 2 else "")
            if sender:                                             # a matrix collective: a chunk is a unit
                return (f"rank {r}, unit {chunk} (from rank {sender[0]}), element {pos - off[chunk]} of the unit: "
                        f"holds {held}, expected {want[bad]}")
            return (f"rank {r}, chunk {chunk} (block {chunk // layout.k}), element {pos - off[chunk]} of the chunk: "
                    f"holds {held}, expected {want[bad]}")
    return None


def _part(traffic: matrix.Traffic, unit: int, i: int, j: int, received: bool) -> slice:
    """Where rank i's units for rank j sit: in j's output (received) or in i's input."""
    start = traffic.recv_offsets[j, i] if received else traffic.send_offsets[i, j]
    return slice(int(start) * unit, int(start + traffic.units[i, j]) * unit)


def _blocks(block_elems: int, nb: int) -> list[slice]:
    return [slice(b * block_elems, (b + 1) * block_elems) for b in range(nb)]
