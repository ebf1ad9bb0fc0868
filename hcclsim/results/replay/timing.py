"""A trace's collectives timed on a topology: per collective, per process group and per trace (docs/replay.md).

Placement: a group of G ranks runs on the topology as it is when it has G ranks; on a one-switch topology
(kind "switch") with another rank count, on the same switch with G ports (`ranks=G`: a subset of a
non-blocking switch sees the same links); anywhere else it is refused (placing a subset on a hierarchy or
a ring is issue 14's item 3). send/recv is one pair: two ports of a switch, else ranks 0 and N-1.

--scale-ranks N sets the data-parallel groups (those of the trace's largest group size) to N ranks and
keeps every collective's size as `sweep` takes it (nccl-tests' whole buffer per rank), because data
parallelism keeps the model: AllReduce of gradients, Broadcast of parameters and Reduce keep their buffer;
AllGather's output and ReduceScatter's input are the whole (FSDP-sharded) tensor, so they keep it too
while each rank's shard becomes 1/N of it; AllToAll(v) keeps what one rank sends (its batch is fixed, its
per-peer blocks become 1/N of it); send/recv keeps its message.
"""

from __future__ import annotations

import math
from collections import defaultdict

import pandas as pd

from ...core.errors import ConfigError, UnsupportedError
from ...core.units import DTYPE_SIZE
from ...network.config import load_topology
from ...schedule import collectives as C
from ...sweeping.sweep import AUTO, split_auto, sweep
from .formats import Record, Trace, exposed_us

COLUMNS = ["trace", "index", "group", "collective", "name", "dtype", "ranks", "size_bytes", "measured_us",
           "auto_algorithm", "auto_us", "best_algorithm", "best_us", "measured_over_auto", "note"]
# The ranks of one job (ranks.py), after measured_us: how many ranks it is the minimum of, the slowest one.
JOB_COLUMNS = ["measured_ranks", "measured_max_us"]


class Placer:
    """Topologies per group size, loaded once (a --set applies to each)."""

    def __init__(self, ref: str, overrides):
        self.ref, self.overrides = ref, list(overrides)
        self.base = load_topology(ref, self.overrides)
        self.cache = {self.base.nranks: self.base}

    def topology(self, n: int):
        if n not in self.cache:
            if self.base.kind != "switch":
                raise ConfigError(
                    f"-t/--topology: a group of {n} ranks on {self.base.name} ({self.base.kind}, "
                    f"{self.base.nranks} ranks): expected a topology of {n} ranks or a one-switch topology "
                    f"(a subset of a switch is that switch with fewer ports); use --set ranks={n}, a preset "
                    f"of {n} ranks, or --scale-ranks {self.base.nranks}")
            self.cache[n] = load_topology(self.ref, [*self.overrides, f"ranks={n}"])
        return self.cache[n]

    def ranks_for(self, rec: Record, n: int) -> int:
        if rec.kind == C.SEND_RECV:
            return 2 if self.base.kind == "switch" else self.base.nranks
        return n


def group_sizes(records, scale: int | None) -> dict:
    """Each record's group size after --scale-ranks (the data-parallel groups: the largest size)."""
    sizes = [r.group_size for r in records if r.kind is not None and r.group_size]
    dp = max(sizes, default=None)
    return {id(r): (scale if scale and r.group_size == dp else r.group_size) for r in records}


def time_traces(traces: list[Trace], topology: str, overrides=(), algorithm: str = "all,auto",
                scale_ranks: int | None = None, engine: str = "analytic"):
    """(rows per collective, rows per process group, rows per trace), as DataFrames; times in us.
    Algorithm columns `ALGO_us` hold each listed algorithm's time (blank where it cannot run)."""
    if scale_ranks is not None and scale_ranks < 2:
        raise ConfigError(f"--scale-ranks: expected a number of ranks >= 2, got {scale_ranks}")
    listed, auto = split_auto(algorithm)
    spec = ",".join([listed or "all", *([AUTO] if auto else [])])
    placer = Placer(topology, overrides)
    rows = []
    for trace in traces:
        groups = group_sizes(trace.records, scale_ranks)
        wanted = defaultdict(set)           # (collective, ranks, dtype) -> sizes
        for r in trace.records:
            n = groups[id(r)]
            if r.kind is not None and r.size_bytes is not None and n and n > 1:
                wanted[(r.kind, placer.ranks_for(r, n), r.dtype)].add(r.size_bytes)
        times = {}
        for (kind, n, dtype), sizes in wanted.items():
            topo = placer.topology(n)
            try:
                result = sweep(topo, [kind], spec, sorted(sizes), dtype=dtype, engine=engine)
            except UnsupportedError as e:
                raise UnsupportedError(f"{trace.path}: {kind} on {n} ranks: {e}") from None
            for row in result.rows.itertuples():
                chosen = getattr(row, "chosen", row.algorithm)       # the column exists with auto only
                times.setdefault((kind, n, dtype, row.size_bytes), {})[row.algorithm] = (row.time_us, chosen)
        for i, r in enumerate(trace.records):
            rows.append(_row(trace, i, r, groups[id(r)], placer, times))
    per = pd.DataFrame(rows)
    algos = sorted({c for c in per.columns if c.endswith("_us") and c not in COLUMNS + JOB_COLUMNS})
    job = [c for c in JOB_COLUMNS if c in per.columns]
    per = per.reindex(columns=COLUMNS[:9] + job + algos + COLUMNS[9:])
    per = per.astype({"ranks": "Int64", "size_bytes": "Int64", "measured_us": float,
                      **{c: t for c, t in zip(JOB_COLUMNS, ("Int64", float)) if c in job}})
    return per, _per_group(per), _per_trace(per, traces, algos)


def _row(trace: Trace, i: int, r: Record, n, placer: Placer, times) -> dict:
    row = {"trace": trace.path, "index": i, "group": r.group, "collective": r.kind or "", "name": r.name,
           "dtype": r.dtype or "", "ranks": n, "size_bytes": r.size_bytes, "measured_us": r.measured_us,
           "note": ""}
    if r.over_ranks is not None:
        row["measured_ranks"], row["measured_max_us"] = r.over_ranks, r.measured_max_us
    if r.kind is None:
        row["note"] = "not modelled"
        return row
    if r.size_bytes is None:
        row["note"] = "no size in the trace"
        return row
    if not n:
        row["note"] = "no group size in the trace"
        return row
    if n < 2:
        row["note"] = "one rank: no communication"
        return row
    m = placer.ranks_for(r, n)
    row["ranks"] = m
    rounded = C.sizing(r.kind, r.size_bytes, DTYPE_SIZE[r.dtype], m).size_bytes
    got = times[(r.kind, m, r.dtype, rounded)]
    listed = {a: t for a, (t, _) in got.items() if a != AUTO}
    for a, t in listed.items():
        row[f"{a}_us"] = t
    if AUTO in got:
        row["auto_us"], row["auto_algorithm"] = got[AUTO]
        if r.measured_us:
            row["measured_over_auto"] = r.measured_us / row["auto_us"]
    if listed:
        best = min(listed, key=listed.get)
        row["best_algorithm"], row["best_us"] = best, listed[best]
    else:                  # none of -a's algorithms runs this collective (ring for AllToAll): auto's choice
        row["best_algorithm"], row["best_us"] = row["auto_algorithm"], row["auto_us"]
    if rounded != r.size_bytes:
        row["note"] = f"timed at {rounded} bytes (nccl-tests' rounding)"
    return row


def _sum(col: pd.Series) -> float:
    return float(col.sum(min_count=1)) if col.notna().any() else math.nan


def _per_group(per: pd.DataFrame) -> pd.DataFrame:
    out = []
    for (trace, group), part in per.groupby(["trace", "group"], sort=False):
        timed = part[part.best_us.notna()]
        out.append({"trace": trace, "group": group, "collectives": len(part), "timed": len(timed),
                    "measured_us": _sum(part.measured_us), "auto_us": _sum(timed.auto_us),
                    "best_us": _sum(timed.best_us)})
    return pd.DataFrame(out)


def _per_trace(per: pd.DataFrame, traces, algos) -> pd.DataFrame:
    """Totals; saves_us: what picking the best algorithm per collective saves against the library's choice
    (auto), or against the best single algorithm per collective kind when auto is not asked for."""
    out = []
    for trace in traces:
        part = per[per.trace == trace.path]
        timed = part[part.best_us.notna()]
        best = _sum(timed.best_us)
        has_auto = timed.auto_us.notna().any()
        if has_auto:
            against = _sum(timed.auto_us)
        else:
            against = sum(min(_sum(k[a]) for a in algos if k[a].notna().all())
                          for _, k in timed.groupby("collective")) if len(timed) else math.nan
        skipped = part[part.best_us.isna()]
        out.append({"trace": trace.path, "format": trace.format, "hardware": trace.hardware,
                    "collectives": len(part), "timed": len(timed),
                    "not_timed": "; ".join(f"{k} x{v}" for k, v in skipped.groupby("name").size().items()),
                    "measured_us": _sum(part.measured_us), "exposed_us": exposed_us(trace),
                    "auto_us": against if has_auto else math.nan, "best_us": best,
                    "saves_us": against - best})
    return pd.DataFrame(out)
