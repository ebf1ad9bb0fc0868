"""The Python API: what `hccl-bench sweep` and `tune` do, returning pandas DataFrames (docs/api.md).

    import hcclsim
    rows = hcclsim.sweep(topology="dgx-h100", collective="all_reduce", algorithm="ring,in_switch",
                         b="1K", e="1G", f=4)
    ranges = hcclsim.tune(topology="dgx-h100", collective="all_reduce")

`hcclsim.sweep` and `hcclsim.tune` are run_sweep and run_tune (hcclsim/__init__.py).

Every returned frame carries its provenance (hcclsim.results.provenance.metadata) in
``df.attrs["provenance"]`` and the skipped algorithms in ``df.attrs["skipped"]``; write_results writes a frame as `sweep -o` does.
"""

from __future__ import annotations

import os

import pandas as pd

from .core import budget
from .core.errors import ConfigError
from .core.units import parse_size, parse_time
from .engine.execution import Noise
from .network.config import DEFAULT_PRESET, load_topology
from .network.topology import Topology
from .results.provenance import metadata
from .schedule import collectives as C
from .sweeping.executors import open_executor
from .sweeping.sweep import LIBRARY, size_grid
from .sweeping.sweep import sweep as _core_sweep

__all__ = ["load_topology", "read_results", "run_sweep", "run_tune", "write_results"]


def _topology(topology, overrides) -> Topology:
    if isinstance(topology, Topology):
        if overrides:
            raise ConfigError("overrides: apply them when loading: hcclsim.load_topology(name, overrides=[...])")
        return topology
    return load_topology(str(topology), list(overrides))


def _sizes(sizes, b, e, f) -> list[int]:
    if sizes is not None:
        if any(x is not None for x in (b, e, f)):
            raise ConfigError("sizes: give either sizes=[...] or b/e/f, not both")
        sizes = [parse_size(s, "sizes") for s in ([sizes] if isinstance(sizes, (int, str)) else sizes)]
        if not sizes:
            raise ConfigError("sizes: expected at least one size")
        return sorted(set(sizes))
    return size_grid(parse_size(16 if b is None else b, "b"), parse_size("1G" if e is None else e, "e"),
                     4 if f is None else int(f))


def _seconds(value, where: str) -> float:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if not value >= 0:
            raise ConfigError(f"{where}: expected a time >= 0, got {value!r}")
        return float(value)
    return parse_time(value, where)


def _collectives(collective) -> list[str]:
    if isinstance(collective, str):
        collective = list(C.COLLECTIVES) if collective.strip() == "all" else collective.split(",")
    return [C.canonical(c) for c in collective if str(c).strip()]


def run_sweep(topology=DEFAULT_PRESET, collective=C.ALL_REDUCE, algorithm: str = "all", sizes=None, *, b=None,
              e=None, f=None, dtype: str = "float32", root: int = 0, engine="analytic", stats: bool = False,
              overrides=(), launch: str = "host", iters: int = 1, skew=0, jitter=0, seed: int = 0,
              jobs: int | None = None, executor: str = "local", scheduler: str | None = None,
              max_memory=None, matrix=None) -> pd.DataFrame:
    """`hccl-bench sweep` as a function: one row per (collective, algorithm, engine, size), columns as in
    docs/results.md.

    topology: a preset name, a TOML path or a Topology; collective: a name, a comma list, a list or 'all';
    algorithm: like -a ('all', 'ring,tree', 'ring:channels=2', 'auto'); sizes: a list of sizes (ints or
    '64K'), or b/e/f as nccl-tests' -b/-e/-f (defaults 16, 1G, 4); overrides: ['bandwidth=100GB/s', ...]; launch, iters, skew, jitter
    and seed as the command's flags (times in seconds or strings such as '2us'). jobs, executor and scheduler as
    --jobs, --executor and --scheduler, except that jobs defaults to 1 (this process); the rows are the same
    whichever runs them. max_memory: as --max-memory (bytes or a size such as '8G'; default: the
    HCCL_BENCH_MAX_MEMORY environment variable, else hcclsim.core.budget.default()). matrix: all_to_allv's
    traffic as --matrix takes it ('zipf:1.2', 'traffic.csv'), or a hcclsim.schedule.matrix.Traffic; rows of a
    sweep that runs all_to_allv get a matrix column (docs/alltoallv.md)."""
    if jobs is not None and (isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1):
        raise ConfigError(f"jobs: expected a whole number >= 1, got {jobs!r}")
    limit = None if max_memory is None else budget.parse(max_memory, "max_memory")
    with budget.limited(limit):
        topo = _topology(topology, overrides)
    grid = _sizes(sizes, b, e, f)
    colls = _collectives(collective)
    matrix = os.fspath(matrix) if isinstance(matrix, os.PathLike) else matrix
    noise = Noise(iters, _seconds(skew, "skew"), _seconds(jitter, "jitter"), seed)
    with open_executor(executor, scheduler, jobs) as run_units, budget.limited(limit):
        result = _core_sweep(topo, colls, algorithm, grid, dtype=dtype, root=root, engine=engine, stats=stats,
                             launch=launch, noise=noise, jobs=jobs or 1, executor=run_units, matrix=matrix)
    rows = result.rows
    rows.attrs["provenance"] = metadata(topo, collectives=colls, algorithm=algorithm, sizes=grid, dtype=dtype,
                                        root=root, engine=engine, stats=stats, launch=launch, noise=noise,
                                        matrix=matrix,
                                        given={"topology": topo.name if isinstance(topology, Topology)
                                               else str(topology), "overrides": list(overrides)})
    rows.attrs["skipped"] = list(result.skipped)
    return rows


def run_tune(topology=DEFAULT_PRESET, collective=C.ALL_REDUCE, sizes=None, *, b=None, e=None, f=None,
             dtype: str = "float32", engine: str = "analytic", overrides=(), max_memory=None,
             matrix=None) -> pd.DataFrame:
    """`hccl-bench tune` as a function: the fastest algorithm per size range (hcclsim.analysis.tune.size_ranges),
    over every applicable algorithm; sizes default to b=8, e=1G, f=2 as in the command; max_memory and matrix
    as run_sweep's."""
    from .analysis.tune import size_ranges

    if sizes is None:
        b, e, f = (8 if b is None else b), ("1G" if e is None else e), (2 if f is None else f)
    rows = run_sweep(topology, collective, LIBRARY, sizes, b=b, e=e, f=f, dtype=dtype, engine=engine,
                     overrides=overrides, max_memory=max_memory, matrix=matrix)
    ranges = size_ranges(rows, engine)
    ranges.attrs = dict(rows.attrs)
    return ranges


def read_results(path) -> pd.DataFrame:
    """A results file (CSV, JSON or Parquet, as `sweep -o` writes) with every column; its metadata (the
    FILE.meta.json sidecar, or embedded in a JSON file of schema_version 1; None when absent) in
    ``attrs["provenance"]``. Every value is checked as `compare` checks it (hcclsim.results.read) and an
    unsupported schema_version is refused with what to do."""
    from pathlib import Path

    from .results.provenance import json_rows, read_metadata
    from .results.read import load_results

    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"results: no such file {str(path)!r}")
    load_results(str(p))                       # refuses a bad value, naming its place, before anything is returned
    meta = read_metadata(p)
    suffix = p.suffix.lower()
    if suffix == ".json":
        df = pd.DataFrame(json_rows(p, f"results {str(path)!r}")[0])
        empty = [c for c in df.columns if df[c].isna().all()]
        df[empty] = df[empty].astype(float)    # null throughout (the analytic engine's --stats): NaN, as in CSV
    elif suffix == ".csv":
        df = pd.read_csv(p)
    elif suffix == ".parquet":
        df = pd.read_parquet(p)
    else:
        raise ConfigError(f"results {str(path)!r}: expected a file ending in .csv, .json or .parquet")
    df.attrs["provenance"] = meta
    return df


def write_results(df: pd.DataFrame, path) -> None:
    """Write a frame from run_sweep/run_tune as `-o` does, with its provenance in a sidecar PATH.meta.json."""
    from .results.report import write

    write(df, str(path), df.attrs.get("provenance"))
