"""Several traces on one fabric (`replay --placement`): each trace a job, their collectives timed together.

A trace is a job of G ranks, G its largest process group after --scale-ranks (timing.group_sizes); the
jobs' ranks are placed on the fabric by hcclsim.network.placement. Pairing rule: round k runs the k-th
timed collective of every trace at once, as the same step of several jobs started together would; a
trace with fewer timed collectives sits out the rounds after its last. A collective of a smaller group
than its job (a send/recv: two ranks) runs on the job's first ranks. Each is compiled as a job of its
group size would compile it (concurrent.job_fabric), with -a's one algorithm or with what auto picks for
it there, and timed alone and together by hcclsim.engine.concurrent, as the shared-fabric study does.
"""

from __future__ import annotations

import pandas as pd

from ...core.errors import ConfigError
from ...core.units import DTYPE_SIZE
from ...engine import concurrent
from ...engine.packet import Job
from ...network.config import load_topology
from ...network.placement import POLICIES, place
from ...schedule.algorithm import parse_spec
from ...sweeping.sweep import AUTO, split_auto, sweep
from .formats import Trace
from .timing import group_sizes

DEFAULT = "all,auto"           # replay's -a default: with --placement, auto's one choice per collective
ROUNDS = ["round", "job", "trace", "index", "collective", "ranks", "size_bytes", "algorithm", "alone_us",
          "together_us", "slowdown", "busiest_links"]
JOBS = ["job", "trace", "ranks", "placed", "collectives", "alone_us", "together_us", "slowdown"]


def parse_placement(text: str) -> tuple[str, int]:
    """'packed', 'spread', 'random' or 'random:SEED' -> (policy, seed)."""
    policy, colon, seed = text.strip().partition(":")
    if policy not in POLICIES or (colon and (policy != "random" or not seed.isdigit())):
        raise ConfigError(f"--placement: {text!r}: expected {', '.join(POLICIES)} or random:SEED (a whole number)")
    return policy, int(seed) if seed else 0


def _algorithm(spec: str) -> str:
    """The one algorithm every collective runs with, or AUTO."""
    listed, auto = split_auto(spec)
    if spec == DEFAULT or (auto and not listed):
        return AUTO
    if auto or not listed or "," in listed or listed == "all":
        raise ConfigError(f"-a/--algorithm: {spec!r}: with --placement each collective runs one algorithm; expected "
                          f"one algorithm (e.g. ring) or auto")
    return listed


def _timed(trace: Trace, scale: int | None) -> list[tuple[int, object, int]]:
    """(index in the trace, record, group size) of each collective replay times, in order."""
    groups = group_sizes(trace.records, scale)
    out = [(i, r, groups[id(r)]) for i, r in enumerate(trace.records)
           if r.kind is not None and r.size_bytes is not None and groups[id(r)] and groups[id(r)] > 1]
    if not out:
        raise ConfigError(f"{trace.path}: no collective to time: expected a trace with at least one collective of "
                          f"known size and group (--placement places each trace as a job)")
    return [(i, r, 2 if r.kind == "send_recv" else n) for i, r, n in out]


def time_jobs(traces: list[Trace], topology: str, overrides=(), algorithm: str = DEFAULT,
              scale_ranks: int | None = None, engine: str = "analytic", placement: str = "packed"):
    """(rows per round and job, rows per job), as DataFrames; times in us."""
    policy, seed = parse_placement(placement)
    if scale_ranks is not None and scale_ranks < 2:
        raise ConfigError(f"--scale-ranks: expected a number of ranks >= 2, got {scale_ranks}")
    spec = _algorithm(algorithm)
    overrides = list(overrides)
    topo = load_topology(topology, overrides)
    plans = [_timed(t, scale_ranks) for t in traces]
    placed = place(topo, [max(n for _, _, n in p) for p in plans], policy, seed, "--placement")

    cache = {}

    def compiled(r, n: int, where: str):
        """(job, size timed, algorithm) of a collective of n ranks, once per kind, size and dtype."""
        key = (r.kind, n, r.size_bytes, r.dtype)
        if key not in cache:
            group = concurrent.job_fabric(topology, overrides, topo, n, where)
            name = spec if spec != AUTO else sweep(group, [r.kind], AUTO, [r.size_bytes], dtype=r.dtype).rows.chosen.iloc[0]
            algo = parse_spec(name, "-a/--algorithm")
            cache[key] = (*concurrent.compile_job(group, r.kind, algo, r.size_bytes, DTYPE_SIZE[r.dtype], where),
                          algo.label)
        return cache[key]

    rows = []
    for k in range(max(len(p) for p in plans)):
        members = [(j, p[k]) for j, p in enumerate(plans) if k < len(p)]
        jobs, info = [], []
        for j, (i, r, n) in members:
            job, timed, label = compiled(r, n, f"{traces[j].path}: collective {i}")
            jobs.append(Job(job.schedule, job.block_elems, job.dtype_size, placed[j][:n]))
            info.append({"round": k, "job": j, "trace": traces[j].path, "index": i, "collective": r.kind, "ranks": n,
                         "size_bytes": timed, "algorithm": label})
        try:
            run = concurrent.run(jobs, topo, engine)
        except ConfigError as e:
            raise ConfigError(f"--placement: round {k} (" + ", ".join(f"job {x['job']}: {x['collective']} of "
                              f"{x['size_bytes']} B" for x in info) + f"): {e}") from None
        busiest = "; ".join(f"{name} {util:.0%}" for _, name, util in run.busiest)
        for x, alone, together in zip(info, run.alone, run.together):
            rows.append({**x, "alone_us": alone * 1e6, "together_us": together * 1e6,
                         "slowdown": _ratio(together, alone), "busiest_links": busiest})
    per = pd.DataFrame(rows, columns=ROUNDS)
    return per, _per_job(per, traces, placed)


def _per_job(per: pd.DataFrame, traces, placed) -> pd.DataFrame:
    out = []
    for j, trace in enumerate(traces):
        part = per[per.job == j]
        alone, together = float(part.alone_us.sum()), float(part.together_us.sum())
        out.append({"job": j, "trace": trace.path, "ranks": len(placed[j]), "placed": _spans(placed[j]),
                    "collectives": len(part), "alone_us": alone, "together_us": together,
                    "slowdown": _ratio(together, alone)})
    return pd.DataFrame(out, columns=JOBS)


def _ratio(together: float, alone: float) -> float:
    """together / alone; 1 when both are 0 (a zero-byte collective, which the packet engine times 0)."""
    return together / alone if alone else (1.0 if together == 0 else float("inf"))


def _spans(ranks) -> str:
    """Fabric ranks as runs: (0, 1, 2, 3, 8, 9) -> '0-3,8-9'."""
    runs = []
    for r in ranks:
        if runs and r == runs[-1][1] + 1:
            runs[-1][1] = r
        else:
            runs.append([r, r])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)
