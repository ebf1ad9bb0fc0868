"""Sweeps: the grid of collectives x algorithms x sizes on one topology, as tidy rows.

For each (collective, algorithm) the sizes are grouped by the algorithm's
structure key, each group's schedule is compiled once, and the engine times
all of the group's sizes in one call (sizes are an array axis).

`-a auto` adds, per collective, rows with algorithm 'auto' and a `chosen` column: at each size the
fastest applicable algorithm by the analytic engine (hcclsim.tune.best_per_size, the rule
`hccl-bench tune` uses), timed by the requested engines. `chosen` names the algorithm that ran a row
(itself, for the other rows); it exists only when auto was asked for.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from . import collectives as C
from .algorithm import ALGORITHMS, Algorithm, Problem, load_all, parse_spec
from .engine import analytic, packet
from .errors import ConfigError, UnsupportedError
from .topology import Topology
from .tune import best_per_size
from .units import DTYPE_SIZE, parse_dtype

COLUMNS = ["collective", "algorithm", "topology", "ranks", "engine", "size_bytes", "count", "dtype", "root",
           "time_us", "algbw_GBps", "busbw_GBps"]
ENGINES = {"analytic": analytic.run, "packet": packet.run}
STAT_COLUMNS = list(packet.STAT_NAMES)
AUTO = "auto"


def parse_engines(spec) -> list[str]:
    """'analytic', 'packet' or 'analytic,packet' (or a list) -> engine names in order."""
    names = [e.strip() for e in (spec.split(",") if isinstance(spec, str) else spec) if e.strip()]
    for name in names:
        if name not in ENGINES:
            raise ConfigError(f"--engine: unknown engine {name!r}; expected one or more of: {', '.join(ENGINES)} "
                              f"(comma-separated)")
    if not names or len(set(names)) != len(names):
        raise ConfigError(f"--engine: expected engine names without repeats, got {spec!r}")
    return names


def size_grid(b: int, e: int, f: int) -> list[int]:
    """nccl-tests' -b/-e/-f: b, b*f, b*f^2, ... up to e (inclusive)."""
    if b > e:
        raise ConfigError(f"-b/--b ({b}) is larger than -e/--e ({e}); expected b <= e")
    if f < 2:
        raise ConfigError(f"-f/--f: expected a whole factor >= 2, got {f}")
    out, s = [], b
    while s <= e:
        out.append(s)
        if s == 0:
            break
        s *= f
    return out


def split_auto(spec: str) -> tuple[str, bool]:
    """'ring,auto' -> ('ring', True): the listed algorithms without 'auto', and whether it was listed."""
    tokens = [t.strip() for t in spec.split(",") if t.strip()]
    for t in tokens:
        if t.startswith(AUTO + ":"):
            raise ConfigError(f"--algorithm: auto takes no options, got {t!r}")
    return ",".join(t for t in tokens if t != AUTO), AUTO in tokens


def algorithms_for(spec: str, collective: str) -> list[Algorithm]:
    """'all' -> every registered algorithm implementing the collective; else the listed specs."""
    load_all()
    if spec.strip() == "all":
        return [cls() for name, cls in ALGORITHMS.items() if collective in cls.collectives]
    return [parse_spec(s) for s in spec.split(",") if s.strip()]


@dataclass
class SweepResult:
    rows: pd.DataFrame
    skipped: list[tuple[str, str, str]] = field(default_factory=list)    # (collective, algorithm, reason)


def metrics(collective: str, n: int, size_bytes: np.ndarray, seconds: np.ndarray) -> dict[str, np.ndarray]:
    """time_us, algbw_GBps and busbw_GBps exactly as nccl-tests defines them (GB = 1e9 bytes)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        algbw = np.where(seconds > 0, size_bytes / seconds / 1e9, 0.0)
    return {"time_us": seconds * 1e6, "algbw_GBps": algbw, "busbw_GBps": algbw * C.busbw_factor(collective, n)}


def time_algorithm(algo: Algorithm, problem: Problem, sizes: list[int], dtype: str, engines=("analytic",)):
    """(Sizing per size, {engine: (seconds per size, stats per size or None)}) for one algorithm.

    Compiles once per structure key; every engine times the same schedules."""
    ws = DTYPE_SIZE[dtype]
    n = problem.nranks
    sizings = [C.sizing(problem.collective, s, ws, n) for s in sizes]
    keys = [algo.structure_key(problem, sz, ws) for sz in sizings]
    out = {e: (np.zeros(len(sizes)), {c: np.full(len(sizes), np.nan) for c in STAT_COLUMNS}) for e in engines}
    for key in dict.fromkeys(keys):
        idx = [i for i, k in enumerate(keys) if k == key]
        schedule = algo.compile(problem, key)
        for engine in engines:
            timing = ENGINES[engine](schedule, problem.topology, [sizings[i].block_elems for i in idx], ws)
            out[engine][0][idx] = timing.time
            for name, values in (timing.stats or {}).items():
                out[engine][1][name][idx] = values
    return sizings, out


def sweep(topology: Topology, collectives=(C.ALL_REDUCE,), algorithms: str = "all", sizes=(1 << 20,),
          dtype: str = "float32", root: int = 0, engine="analytic", stats: bool = False,
          on_row=None) -> SweepResult:
    """Run the grid; rows in a stable order (collective, algorithm as listed, engine as listed, size).

    engine: 'analytic', 'packet', 'analytic,packet' or a list; stats adds the engines' counters
    (STAT_COLUMNS; empty for the analytic engine)."""
    dtype = parse_dtype(dtype)
    engines = parse_engines(engine)
    if not 0 <= root < topology.nranks:
        raise ConfigError(f"--root: expected a rank in 0..{topology.nranks - 1}, got {root}")
    sizes = sorted({int(s) for s in sizes})
    listed, auto = split_auto(algorithms)
    frames, skipped = [], []

    def rows(coll, label, sizings, engine_name, seconds, counters):
        size_bytes = np.array([s.size_bytes for s in sizings], np.float64)
        return pd.DataFrame({
            "collective": coll, "algorithm": label, "topology": topology.name,
            "ranks": topology.nranks, "engine": engine_name, "size_bytes": size_bytes.astype(np.int64),
            "count": [s.count for s in sizings], "dtype": dtype,
            "root": root if coll in (C.BROADCAST, C.REDUCE) else -1,
            **metrics(coll, topology.nranks, size_bytes, seconds), **(counters if stats else {})})

    def emit(frame, chosen):
        frame = frame[COLUMNS + (STAT_COLUMNS if stats else [])]
        if auto:
            frame = frame.assign(chosen=chosen)
        frames.append(frame)
        if on_row:
            on_row(frame)

    for coll in [C.canonical(c) for c in collectives]:
        problem = Problem(coll, topology, root)
        algos = algorithms_for(listed, coll) if listed else []
        runnable = []
        for algo in algos:
            why = algo.unsupported(problem)
            if why:
                skipped.append((coll, algo.label, why))
            else:
                runnable.append(algo)
        if not runnable and listed.strip() != "all" and len(algos) == 1 and not auto:
            raise UnsupportedError(f"--algorithm: {algos[0].label} cannot run {coll} on {topology.name}: "
                                   f"{skipped[-1][2]}")
        for algo in runnable:
            sizings, timed = time_algorithm(algo, problem, sizes, dtype, engines)
            for engine_name, (seconds, counters) in timed.items():
                emit(rows(coll, algo.label, sizings, engine_name, seconds, counters), algo.label)
        if not auto:
            continue
        candidates = [a for a in algorithms_for("all", coll) if not a.unsupported(problem)]
        if not candidates:
            skipped.append((coll, AUTO, "no algorithm can run it"))
            continue
        timed = {a.label: (a, *time_algorithm(a, problem, sizes, dtype)) for a in candidates}
        sizings = next(iter(timed.values()))[1]
        scores = pd.concat([rows(coll, label, sz, "analytic", *t["analytic"]) for label, (_, sz, t) in timed.items()])
        pick = best_per_size(scores, "analytic").set_index("size_bytes")["algorithm"]
        chosen = [pick[s.size_bytes] for s in sizings]
        for engine_name in engines:
            seconds, counters = np.zeros(len(sizes)), {c: np.full(len(sizes), np.nan) for c in STAT_COLUMNS}
            for label in dict.fromkeys(chosen):
                idx = [i for i, c in enumerate(chosen) if c == label]
                algo, _, t = timed[label]
                if engine_name != "analytic":        # time only the sizes this algorithm won
                    t = time_algorithm(algo, problem, [sizes[i] for i in idx], dtype, (engine_name,))[1]
                    idx_t = slice(None)
                else:
                    idx_t = idx
                sec, cnt = t[engine_name]
                seconds[idx] = sec[idx_t]
                for c in STAT_COLUMNS:
                    counters[c][idx] = cnt[c][idx_t]
            emit(rows(coll, AUTO, sizings, engine_name, seconds, counters), chosen)
    if not frames:
        reasons = "; ".join(f"{a}: {w}" for _, a, w in skipped) or "nothing to run"
        raise UnsupportedError(f"no algorithm can run on {topology.name}: {reasons}")
    return SweepResult(pd.concat(frames, ignore_index=True), skipped)
