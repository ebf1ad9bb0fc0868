"""The collectives: names, size semantics (as nccl-tests), busbw factors, and their specs.

A spec says what every buffer holds before the collective and what the
result must be after it -- the checker runs schedules against it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..core.errors import ConfigError, unknown
from ..core.names import ALL_GATHER, ALL_REDUCE, ALL_TO_ALL, BROADCAST, COLLECTIVES, REDUCE, REDUCE_SCATTER
from .ir import Layout

__all__ = ["ALL_GATHER", "ALL_REDUCE", "ALL_TO_ALL", "BROADCAST", "COLLECTIVES", "REDUCE", "REDUCE_SCATTER"]
# NCCL / nccl-tests spellings are accepted too.
ALIASES = {"allreduce": ALL_REDUCE, "allgather": ALL_GATHER, "reducescatter": REDUCE_SCATTER,
           "alltoall": ALL_TO_ALL, "all2all": ALL_TO_ALL, "bcast": BROADCAST}
# nccl-tests rounds AllGather/ReduceScatter per-rank counts down to a multiple of 4 elements (ALIGN).
NCCL_TESTS_ALIGN = 4


def canonical(name: str, where: str = "--collective") -> str:
    key = str(name).strip().lower().replace("-", "_")
    key = ALIASES.get(key.replace("_", ""), key)
    if key not in COLLECTIVES:
        raise ConfigError(f"{where}: {unknown('collective', name, COLLECTIVES)}")
    return key


def busbw_factor(collective: str, n: int) -> float:
    """nccl-tests' bus-bandwidth factors (its doc/PERFORMANCE.md)."""
    if n <= 1:
        return 0.0 if collective != BROADCAST and collective != REDUCE else 1.0
    if collective == ALL_REDUCE:
        return 2.0 * (n - 1) / n
    if collective in (ALL_GATHER, REDUCE_SCATTER, ALL_TO_ALL):
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
    block_elems: int      # elements per block of the Layout


def sizing(collective: str, requested_bytes: int, dtype_size: int, n: int) -> Sizing:
    count = requested_bytes // dtype_size
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
                    rng: np.random.Generator):
    """(values, IN, OUT, TMP): values[r] is rank r's data; buffers are int64[nnodes, total].

    Positions that hold nothing meaningful get distinct huge negative 'garbage', so a
    result that reads or keeps them cannot pass.
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
    return values, inb, out, tmp


def check_result(collective: str, n: int, layout: Layout, block_elems: int, root: int,
                 values: np.ndarray, out: np.ndarray) -> str | None:
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
    else:
        wants = [(j, blk[r], values[r, blk[j]]) for r in range(n) for j in range(n)]
    off = layout.offsets(block_elems)
    for r, where, want in wants:
        got = out[r, where]
        if not np.array_equal(got, want):
            bad = int(np.argmax(got != want))
            pos = (where.start or 0) + bad                         # element of the whole buffer
            chunk = int(np.searchsorted(off, pos, side="right")) - 1
            held = f"{got[bad]}" + (" (garbage: an unwritten position)" if got[bad] <= GARBAGE // 2 else "")
            return (f"rank {r}, chunk {chunk} (block {chunk // layout.k}), element {pos - off[chunk]} of the chunk: "
                    f"holds {held}, expected {want[bad]}")
    return None


def _blocks(block_elems: int, nb: int) -> list[slice]:
    return [slice(b * block_elems, (b + 1) * block_elems) for b in range(nb)]
