"""Sweeps: the grid of collectives x algorithms x sizes on one topology, as tidy rows.

For each (collective, algorithm) the sizes are grouped by the algorithm's
structure key, each group's schedule is compiled once, and the engine times
all of the group's sizes in one call (sizes are an array axis).

`-a auto` adds, per collective, rows with algorithm 'auto' and `chosen`, `chosen_by` columns: at each size
the endpoint's `selection` picks among the library's algorithms -- "fastest": the fastest by the analytic
engine (hcclsim.sweeping.best.best_per_size, the rule `hccl-bench tune` uses); "library": NCCL's own cost
model's algorithm and protocol (hcclsim.sweeping.library), the protocol forced for that point, falling back
to the fastest where the model does not decide -- timed by the requested engines. `chosen` names the
algorithm that ran a row (itself, for the other rows), `chosen_by` the rule and its reason ("listed" for
the other rows); they exist only when auto was asked for.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import partial
from typing import NamedTuple

import numpy as np
import pandas as pd

from ..core import budget
from ..core.errors import ConfigError, UnsupportedError
from ..core.units import DTYPE_SIZE, parse_dtype
from ..engine import analytic, packet
from ..engine.execution import PERCENTILE_COLUMNS, QUIET, Noise, check_launch, summarize
from ..engine.execution import run as run_engine
from ..network.config import MAX_COUNT
from ..network.topology import Topology
from ..schedule import collectives as C
from ..schedule import matrix as M
from ..schedule.algorithm import ALGORITHMS, Algorithm, Problem, load_all, parse_spec
from ..schedule.expand import first_unrouted
from . import cost, library
from .best import best_per_size
from .budget import check_schedule, check_units, compile_bytes, dims

COLUMNS = ["collective", "algorithm", "topology", "ranks", "engine", "size_bytes", "count", "dtype", "root",
           "time_us", "algbw_GBps", "busbw_GBps", "protocol"]
MATRIX = "matrix"           # the column naming all_to_allv's traffic (only in sweeps that run it)
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


LIBRARY = "library"


def library_algorithms(topology: Topology, collective: str) -> tuple[str, ...]:
    """The endpoint's algorithms for this collective (its table's entry, or the list for all), checked."""
    where = f"{topology.name}: endpoint.algorithms"
    table = dict(topology.endpoint.algorithms)
    for key, names in table.items():
        if key != "*":
            C.canonical(key, f"{where}.{key}")
        for name in names:
            ALGORITHMS.get(name, where)
    by_name = {C.canonical(k): v for k, v in table.items() if k != "*"}
    if collective in C.MATRIX_COLLECTIVES and collective not in by_name and C.ALL_TO_ALL in by_name:
        collective = C.ALL_TO_ALL       # NCCL runs all three as AllToAll: grouped ncclSend/ncclRecv (nccl-tests
        #                                 src/alltoall.cu, alltoallv.cu, sendrecv.cu RunColl)
    return by_name.get(collective, table.get("*", ()))


def algorithms_for(spec: str, collective: str, topology: Topology | None = None) -> list[Algorithm]:
    """'all' -> every registered algorithm implementing the collective; 'library' -> those of them the
    topology's collective library implements (its endpoint's algorithms; all when it names none): what
    `-a auto` and `tune` choose among; else the listed specs."""
    load_all()
    if spec.strip() == LIBRARY and topology is not None and topology.endpoint.algorithms:
        names = library_algorithms(topology, collective)
        return [ALGORITHMS.get(name)() for name in names if collective in ALGORITHMS.get(name).collectives]
    if spec.strip() in ("all", LIBRARY):
        return [cls() for name, cls in ALGORITHMS.items() if collective in cls.collectives]
    return [parse_spec(s) for s in spec.split(",") if s.strip()]


@dataclass
class SweepResult:
    rows: pd.DataFrame
    skipped: list[tuple[str, str, str]] = field(default_factory=list)    # (collective, algorithm, reason)

    def with_columns(self, values: dict[str, str]) -> SweepResult:
        """The rows with a column per varied key (sweeping/vary.py), holding its value as given."""
        return SweepResult(self.rows.assign(**values), self.skipped)

    def joined(self, others: list[SweepResult]) -> SweepResult:
        """These rows then the others' (a what-if's sweeps, in the order of their values)."""
        parts = [self, *others]
        return SweepResult(pd.concat([p.rows for p in parts], ignore_index=True),
                           list(dict.fromkeys(x for p in parts for x in p.skipped)))


def metrics(collective: str, n: int, size_bytes: np.ndarray, seconds: np.ndarray) -> dict[str, np.ndarray]:
    """time_us, algbw_GBps and busbw_GBps exactly as nccl-tests defines them (GB = 1e9 bytes)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        algbw = np.where(seconds > 0, size_bytes / seconds / 1e9, 0.0)
    return {"time_us": seconds * 1e6, "algbw_GBps": algbw, "busbw_GBps": algbw * C.busbw_factor(collective, n)}


def time_algorithm(algo: Algorithm, problem: Problem, sizes: list[int], dtype: str, engines=("analytic",),
                   launch: str = "host", noise: Noise = QUIET, compiler=None, traffic=None):
    """(Sizing per size, {engine: (seconds[iters, sizes], stats per size, protocol per size)}) for one algorithm.

    Compiles once per structure key (compiler(algo, problem, key) in place of algo.compile: schedules kept
    across sweeps, hcclsim.analysis.calibrate.Schedules); every engine times the same schedules, on the
    device's timeline (hcclsim.engine.execution: launch, endpoint costs, noisy iterations). traffic: an
    all_to_allv's matrix (hcclsim.schedule.matrix; None: the collective's default)."""
    ws = DTYPE_SIZE[dtype]
    n = problem.nranks
    sizings = [C.sizing(problem.collective, s, ws, n, traffic) for s in sizes]
    keys = [algo.structure_key(problem, sz, ws) for sz in sizings]
    out = {e: (np.zeros((noise.iters, len(sizes))), {c: np.full(len(sizes), np.nan) for c in STAT_COLUMNS},
               np.empty(len(sizes), object)) for e in engines}
    for key in dict.fromkeys(keys):
        idx = [i for i, k in enumerate(keys) if k == key]
        schedule = compiler(algo, problem, key) if compiler else algo.compile(problem, key)
        check_schedule(schedule, problem.topology, engines, [sizings[i].size_bytes for i in idx], noise)
        for engine in engines:
            samples, stats, protocols = run_engine(ENGINES[engine], schedule, problem.topology,
                                                   [sizings[i].block_elems for i in idx], ws, launch, noise,
                                                   [sizings[i].size_bytes for i in idx])
            out[engine][0][:, idx] = samples
            out[engine][2][idx] = protocols
            for name, values in (stats or {}).items():
                out[engine][1][name][idx] = values
    return sizings, out


class Context(NamedTuple):
    """What every unit of one sweep shares (picklable, for workers)."""

    topology: Topology
    dtype: str
    root: int
    stats: bool              # add the engines' counters
    auto: bool               # -a includes auto: rows get a chosen column
    launch: str
    noise: Noise
    max_memory: int | None = None   # the memory budget of a point (hcclsim.core.budget), for workers
    compiler: object = None         # time_algorithm's compiler (None: algo.compile)
    traffic: object = None          # all_to_allv's matrix (hcclsim.schedule.matrix.Traffic; None: uniform)
    matrix: str | None = None       # the matrix column's value on all_to_allv rows (None: no such column)


def _frame(ctx: Context, coll, label, sizings, engine_name, samples, counters, protocols):
    topology, dtype, root, stats = ctx.topology, ctx.dtype, ctx.root, ctx.stats
    size_bytes = np.array([s.size_bytes for s in sizings], np.float64)
    spread = summarize(samples)
    seconds = spread["time_us_p50"] / 1e6
    return pd.DataFrame({
        "collective": coll, "algorithm": label, "topology": topology.name,
        "ranks": topology.nranks, "engine": engine_name, "size_bytes": size_bytes.astype(np.int64),
        "count": [s.count for s in sizings], "dtype": dtype,
        "root": root if coll in (C.BROADCAST, C.REDUCE) else -1,
        **metrics(coll, topology.nranks, size_bytes, seconds), "protocol": list(protocols), **spread,
        **(counters if stats else {})})


def columns(stats: bool = False, auto: bool = False, noise: Noise = QUIET, matrix: bool = False) -> list[str]:
    """The columns of a sweep's rows, in order, for these options; matrix: the sweep runs all_to_allv."""
    return COLUMNS + (PERCENTILE_COLUMNS if noise.percentiles else []) + (STAT_COLUMNS if stats else []) \
        + (["chosen", "chosen_by"] if auto else []) + ([MATRIX] if matrix else [])


def _finish(ctx: Context, frame, chosen, chosen_by="listed"):
    matrix = np.where(frame.collective == C.ALL_TO_ALLV, ctx.matrix or "", "")
    frame = frame.assign(chosen=chosen, chosen_by=chosen_by, **{MATRIX: matrix})
    return frame[columns(ctx.stats, ctx.auto, ctx.noise, ctx.matrix is not None)]


def with_protocol(topology: Topology, protocol: str) -> Topology:
    """The topology with its endpoint's protocol forced (the library's pick), when the endpoint leaves it to
    auto; built once per protocol."""
    if topology.endpoint.protocol != "auto":
        return topology
    key = ("with_protocol", protocol)
    if key not in topology.cache:
        topology.cache[key] = replace(topology, endpoint=replace(topology.endpoint, protocol=protocol))
    return topology.cache[key]


def _library_picks(topology: Topology, coll: str, sizings, candidates) -> tuple[list, list[str]]:
    """Per size, (algorithm label, forced protocol) of the library's pick, or None where the fastest decides;
    and the chosen_by text of each."""
    if topology.endpoint.selection != LIBRARY:
        return [None] * len(sizings), ["fastest"] * len(sizings)
    picks, why = [], []
    for sz in sizings:
        c = library.choose(topology, coll, sz.size_bytes, [a.label for a in candidates])
        picks.append((c.algorithm, c.protocol) if isinstance(c, library.Choice) else None)
        why.append(c.why if isinstance(c, library.Choice) else f"fastest (library: {c})")
    return picks, why


@dataclass(frozen=True)
class Unit:
    """Some points of one (collective, algorithm, engine) block of a sweep: a packet-engine point, an
    analytic block's structure key or part of one (hcclsim.sweeping.cost.split), an `-a auto` block.

    algorithm is an Algorithm, or AUTO. Units are what executors (hcclsim.sweeping.executors) distribute;
    cost (estimated seconds) orders them, events (hcclsim.sweeping.cost.PointEvents) is the packet
    engine's estimate."""
    index: int
    collective: str
    algorithm: object
    sizes: tuple
    engines: tuple
    cost: float = 0.0
    events: object = None

    @property
    def label(self) -> str:
        return AUTO if self.algorithm == AUTO else self.algorithm.label

    @property
    def points(self) -> int:
        return len(self.sizes) * len(self.engines)


def run_unit(ctx: Context, unit: Unit) -> list[pd.DataFrame]:
    """The rows of one unit, one frame per engine (in the unit's engine order), under the sweep's memory
    budget. Picklable, for workers."""
    with budget.limited(ctx.max_memory):
        return _unit_rows(ctx, unit)


def unsupported(algo: Algorithm, problem: Problem) -> str | None:
    """Why a sweep cannot run the algorithm on the problem: the algorithm's own reason, or on a wiring where
    some pairs have no route (a graph without a host path) the pair its schedule would send over, so that
    the sweep skips it instead of failing. The schedule is compiled at 1 MiB, once per topology, unless
    compiling it would pass the memory budget (the sweep's own check then refuses the point, before
    compiling it: hcclsim.sweeping.budget); a matrix collective's pairs are its traffic's, which its engines
    check."""
    why = algo.unsupported(problem)
    topo = problem.topology
    if why or not topo.routes_partial or problem.collective in C.MATRIX_COLLECTIVES:
        return why
    memo = ("unrouted", algo.label, problem.collective, problem.root)
    if memo not in topo.cache:
        key = algo.structure_key(problem, C.sizing(problem.collective, 1 << 20, 4, problem.nranks), 4)
        d = dims(algo, problem, key)
        if d is not None and compile_bytes(d) > budget.current():
            return None
        pair = first_unrouted(algo.compile(problem, key), *topo.hop_table())
        topo.cache[memo] = None if pair is None else topo.no_route(pair)
    return topo.cache[memo]


def auto_candidates(topology: Topology, collective: str, root: int = 0) -> list[Algorithm]:
    """What `-a auto` chooses among: the library's algorithms (algorithms_for LIBRARY) that can run the problem."""
    problem = Problem(collective, topology, root)
    return [a for a in algorithms_for(LIBRARY, collective, topology) if not unsupported(a, problem)]


def _unit_rows(ctx: Context, unit: Unit) -> list[pd.DataFrame]:
    topology, dtype, root = ctx.topology, ctx.dtype, ctx.root
    how = (ctx.launch, ctx.noise, ctx.compiler, ctx.traffic)
    coll, sizes, engines = unit.collective, list(unit.sizes), unit.engines
    problem = Problem(coll, topology, root)
    if unit.algorithm != AUTO:
        sizings, timed = time_algorithm(unit.algorithm, problem, sizes, dtype, engines, *how)
        return [_finish(ctx, _frame(ctx, coll, unit.label, sizings, e, *timed[e]), unit.label) for e in engines]
    candidates = auto_candidates(topology, coll, root)
    by_label = {a.label: a for a in candidates}
    sizings = [C.sizing(coll, s, DTYPE_SIZE[dtype], topology.nranks, ctx.traffic) for s in sizes]
    picks, why = _library_picks(topology, coll, sizings, candidates)
    rest = [i for i, p in enumerate(picks) if p is None]       # sizes the fastest decides
    timed = {}
    if rest:
        timed = {a.label: time_algorithm(a, problem, [sizes[i] for i in rest], dtype, ("analytic",), ctx.launch,
                                         compiler=ctx.compiler, traffic=ctx.traffic)
                 for a in candidates}
        scores = pd.concat([_frame(ctx, coll, label, sz, "analytic", *t["analytic"]) for label, (sz, t) in timed.items()])
        pick = best_per_size(scores, "analytic").set_index("size_bytes")["algorithm"]
        for i in rest:
            picks[i] = (pick[sizings[i].size_bytes], None)
    chosen = [label for label, _ in picks]
    out = []
    for engine_name in engines:
        seconds = np.zeros((ctx.noise.iters, len(sizes)))
        counters = {c: np.full(len(sizes), np.nan) for c in STAT_COLUMNS}
        protocols = np.empty(len(sizes), object)
        for label, proto in dict.fromkeys(picks):
            idx = [i for i, p in enumerate(picks) if p == (label, proto)]
            if proto is None and engine_name == "analytic" and ctx.noise == QUIET:   # timed above, every candidate
                t, idx_t = timed[label][1], [rest.index(i) for i in idx]
            else:                                       # time only the sizes this pick won
                forced = topology if proto is None else with_protocol(topology, proto)
                t = time_algorithm(by_label[label], Problem(coll, forced, root), [sizes[i] for i in idx], dtype,
                                   (engine_name,), *how)[1]
                idx_t = slice(None)
            sec, cnt, prot = t[engine_name]
            seconds[:, idx] = sec[:, idx_t]
            protocols[idx] = prot[idx_t]
            for c in STAT_COLUMNS:
                counters[c][idx] = cnt[c][idx_t]
        out.append(_finish(ctx, _frame(ctx, coll, AUTO, sizings, engine_name, seconds, counters, protocols),
                           chosen, why))
    return out


ROW_KEY = ["collective", "algorithm", "engine", "size_bytes"]


def _done_keys(previous) -> set:
    if previous is None or previous.empty:
        return set()
    return set(zip(*(previous[k].astype(str) if k != "size_bytes" else previous[k].astype(np.int64)
                     for k in ROW_KEY)))


def sweep(topology: Topology, collectives=(C.ALL_REDUCE,), algorithms: str = "all", sizes=(1 << 20,),
          dtype: str = "float32", root: int = 0, engine="analytic", stats: bool = False,
          on_row=None, previous: pd.DataFrame | None = None, jobs: int = 1, executor=None,
          on_start=None, on_unit=None, launch: str = "host", noise: Noise = QUIET, compiler=None,
          matrix=None) -> SweepResult:
    """Run the grid; rows in a stable order (collective, algorithm as listed, engine as listed, size).

    engine: 'analytic', 'packet', 'analytic,packet' or a list; stats adds the engines' counters
    (STAT_COLUMNS; empty for the analytic engine). on_row(frame) gets each finished (collective,
    algorithm, engine) unit's rows as they finish (in completion order when jobs > 1), then
    on_unit(unit). previous: rows
    already computed (`--resume`): their (collective, algorithm, engine, size) points are skipped
    and they are merged into the result in the sweep's order. jobs/executor: how units run
    (hcclsim.sweeping.executors; default the local process pool). on_start(units) gets the units to run,
    after the packet engine's events were checked against the event budget (hcclsim.sweeping.cost).
    launch ('host' or 'device') and noise (iterations, skew, jitter, seed) put every point on the device's
    timeline (hcclsim.engine.execution); with several iterations rows get PERCENTILE_COLUMNS and time_us is the p50.
    compiler: compiles the schedules the engines time, in place of each algorithm's compile (time_algorithm).
    matrix: all_to_allv's traffic, a --matrix value (file or distribution, hcclsim.schedule.matrix.parse) or
    a Traffic; None: uniform. A sweep that runs all_to_allv gives its rows a matrix column: the value as given
    (a Traffic's label; 'uniform' without one) on all_to_allv's rows, empty on the others'."""
    from .executors import get_executor

    dtype = parse_dtype(dtype)
    engines = parse_engines(engine)
    if not 0 <= root < topology.nranks:
        raise ConfigError(f"--root: expected a rank in 0..{topology.nranks - 1}, got {root}")
    sizes = sorted({int(s) for s in sizes})
    if sizes and sizes[-1] > MAX_COUNT:
        raise ConfigError(f"size {sizes[-1]}: expected at most 2^62 bytes (sizes are 64-bit counts)")
    listed, auto = split_auto(algorithms)
    canonical = [C.canonical(c) for c in collectives]
    if matrix is not None and C.ALL_TO_ALLV not in canonical:
        raise ConfigError(f"--matrix: sets all_to_allv's traffic; the collectives are {', '.join(canonical)}")
    if matrix is not None and {C.SEND_RECV, C.PP_RING} & set(canonical):
        raise ConfigError("--matrix: sets all_to_allv's traffic, and send_recv and pp_ring keep their own pattern; "
                          "sweep them without --matrix (to another -o file)")
    if matrix is not None and not isinstance(matrix, (str, M.Traffic)):
        raise ConfigError(f"matrix: expected a --matrix value (a .csv or .npy file, or a distribution such as "
                          f"zipf:1.2) or a hcclsim.schedule.matrix.Traffic, got {type(matrix).__name__}")
    traffic = M.parse(matrix, topology.nranks) if isinstance(matrix, str) else matrix
    if traffic is not None and traffic.n != topology.nranks:
        raise ConfigError(f"matrix: {traffic!r} has {traffic.n} ranks, expected {topology.nranks} (one row and "
                          f"one column per rank of the topology)")
    label = None if C.ALL_TO_ALLV not in canonical else "uniform" if matrix is None else \
        matrix.strip() if isinstance(matrix, str) else traffic.label
    ctx = Context(topology, dtype, root, stats, auto, check_launch(launch), noise, budget.current(), compiler, traffic,
                  label)
    skipped, blocks = [], []           # blocks: (collective, algorithm) in the sweep's order
    for coll in canonical:
        problem = Problem(coll, topology, root)
        algos = algorithms_for(listed, coll, topology) if listed else []
        runnable = []
        for algo in algos:
            why = unsupported(algo, problem)
            if why:
                skipped.append((coll, algo.label, why))
            else:
                runnable.append(algo)
        if not runnable and listed.strip() not in ("all", LIBRARY) and len(algos) == 1 and not auto:
            raise UnsupportedError(f"--algorithm: {algos[0].label} cannot run {coll} on {topology.name}: "
                                   f"{skipped[-1][2]}")
        blocks += [(coll, algo) for algo in runnable]
        if auto:
            if any(not unsupported(a, problem) for a in algorithms_for(LIBRARY, coll, topology)):
                blocks.append((coll, AUTO))
            else:
                skipped.append((coll, AUTO, "no algorithm can run it"))
    if not blocks:
        reasons = "; ".join(f"{a}: {w}" for _, a, w in skipped) or "nothing to run"
        raise UnsupportedError(f"no algorithm can run on {topology.name}: {reasons}")
    done = _done_keys(previous)
    units, schedules = [], {}
    ws = DTYPE_SIZE[dtype]

    def candidates(coll):
        return auto_candidates(topology, coll, root)
    for i, (coll, algo) in enumerate(blocks):
        label = AUTO if algo == AUTO else algo.label
        nbytes = {s: C.sizing(coll, s, ws, topology.nranks, ctx.traffic).size_bytes for s in sizes}
        for e in engines:
            todo = tuple(s for s in sizes if (coll, label, e, nbytes[s]) not in done)
            if todo:
                units.append(Unit(i, coll, algo, todo, (e,)))
    check_units(ctx, units, candidates)          # before split compiles anything
    units = [part for unit in units for part in cost.split(ctx, unit, schedules, candidates)]
    del schedules
    cost.check(units, topology)
    if on_start:
        on_start(units)
    frames = []
    for unit, result in get_executor(executor)(partial(run_unit, ctx), units, jobs):
        for frame in result:
            if done:
                keep = [k not in done for k in zip(frame.collective, frame.algorithm, frame.engine,
                                                   frame.size_bytes.astype(np.int64))]
                frame = frame[keep].reset_index(drop=True)
            if frame.empty:
                continue
            frames.append(frame)
            if on_row:
                on_row(frame)
        if on_unit:
            on_unit(unit)
    rows = order_rows(pd.concat(([previous] if previous is not None and not previous.empty else []) + frames,
                                ignore_index=True), blocks, engines)
    return SweepResult(rows, skipped)


def order_rows(rows: pd.DataFrame, blocks, engines) -> pd.DataFrame:
    """rows in the sweep's stable order: block (collective, algorithm) as run, engine as listed, size;
    rows of other blocks (an earlier sweep's, when resuming) after them, in their own order."""
    block_rank = {(c, AUTO if a == AUTO else a.label): i for i, (c, a) in enumerate(blocks)}
    engine_rank = {e: i for i, e in enumerate(engines)}
    key = pd.DataFrame({
        "b": [block_rank.get(k, len(block_rank)) for k in zip(rows.collective, rows.algorithm)],
        "e": rows.engine.map(engine_rank).fillna(len(engine_rank)).to_numpy(),
        "s": rows.size_bytes.to_numpy(), "i": np.arange(len(rows))})
    order = key.sort_values(["b", "e", "s", "i"], kind="mergesort").index
    return rows.iloc[order].reset_index(drop=True)

