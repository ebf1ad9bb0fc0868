"""[[jobs]] sections: several collectives placed on one fabric at once, each job's slowdown per placement.

    [[jobs]]
    name = "shared"
    topology = "two-tier-128"
    set = ["scale_out.oversubscription=4"]
    placement = ["packed", "spread"]        # one run each (hcclsim.network.placement); default packed
    engine = "analytic,packet"
    [[jobs.job]]
    collective = "all_reduce"
    algorithm = "ring"
    size = "256MiB"
    ranks = 64                              # a group size, or the job's fabric ranks as a list

A job's schedule is compiled for a fabric of its own size (concurrent.job_fabric: the topology with
scale_out.domains = G / ranks per domain, or ranks = G for a flat one), as a job launched on G ranks
would be, then placed on the ranks the policy gives it: placement changes which links its traffic
crosses, not its algorithm.
Rows: per placement, engine and job, the time alone and together (hcclsim.engine.concurrent) and
the run's busiest links.
"""

from __future__ import annotations

import pandas as pd

from ..core.errors import ConfigError, HcclSimError
from ..core.units import DTYPE_SIZE, parse_dtype, parse_size
from ..engine import concurrent
from ..engine.packet import Job
from ..network.config import DEFAULT_PRESET, load_topology
from ..network.placement import POLICIES, place
from ..schedule import collectives as C
from ..schedule.algorithm import parse_spec
from ..sweeping.sweep import parse_engines
from .fields import whole_number

KEYS = {"name", "description", "topology", "set", "placement", "engine", "seed", "dtype", "job"}
JOB_KEYS = {"label", "collective", "algorithm", "size", "ranks"}
COLUMNS = ["placement", "engine", "job", "label", "collective", "algorithm", "size_bytes", "ranks",
           "alone_us", "together_us", "slowdown", "busiest_links"]


def _keys(table: dict, allowed: set, where: str) -> None:
    for key in table:
        if key not in allowed:
            raise ConfigError(f"{where}: {key}: unknown key; expected one of: {', '.join(sorted(allowed))}")


def _text(v, where: str) -> str:
    if not isinstance(v, str) or not v.strip():
        raise ConfigError(f"{where}: expected a non-empty string, got {v!r}")
    return v.strip()


def _in(where: str, f, *args):
    """f(*args), an error inside prefixed with where."""
    try:
        return f(*args)
    except HcclSimError as e:
        raise type(e)(f"{where}: {e}") from None


def check_section(table: dict, where: str) -> dict:
    """The section checked and resolved (fabric, each job's schedule) before anything runs."""
    _keys(table, KEYS, where)
    overrides = table.get("set", [])
    if not isinstance(overrides, list) or not all(isinstance(x, str) for x in overrides):
        raise ConfigError(f'{where}: set: expected a list of "KEY=VALUE" strings, got {overrides!r}')
    ref = _text(table.get("topology", DEFAULT_PRESET), f"{where}: topology")
    topo = _in(where, load_topology, ref, overrides)
    engines = _in(f"{where}: engine", parse_engines, table.get("engine", "analytic"))
    seed = whole_number(0)(table.get("seed", 0), f"{where}: seed")
    dtype = _in(where, parse_dtype, table.get("dtype", "float32"), "dtype")
    jobs = table.get("job")
    if not isinstance(jobs, list) or not jobs or not all(isinstance(j, dict) for j in jobs):
        raise ConfigError(f"{where}: job: expected [[jobs.job]] tables (collective, algorithm, size, ranks)")
    explicit = [isinstance(j.get("ranks"), list) for j in jobs]
    if any(explicit) and not all(explicit):
        raise ConfigError(f"{where}: job: ranks: expected a group size in every job or a rank list in every job")
    placements = table.get("placement", "explicit" if all(explicit) else "packed")
    placements = [placements] if isinstance(placements, str) else placements
    if all(explicit) and placements != ["explicit"]:
        raise ConfigError(f"{where}: placement: the jobs list their ranks; expected no placement (or \"explicit\")")
    if not all(explicit) and (not isinstance(placements, list) or not placements
                              or any(p not in POLICIES for p in placements)):
        raise ConfigError(f"{where}: placement: expected one of {', '.join(POLICIES)} or a list of them, "
                          f"got {table['placement']!r}")
    specs = [_job(j, k, where, ref, overrides, topo, dtype) for k, j in enumerate(jobs)]
    ranks = {p: place(topo, [s["nranks"] for s in specs], [s["ranks"] for s in specs] if p == "explicit" else p,
                      seed, "job", where) for p in placements}
    return {"topology": topo, "engines": engines, "jobs": specs, "placements": ranks, "dtype": dtype}


def _job(table: dict, k: int, section: str, ref: str, overrides: list, topo, dtype: str) -> dict:
    where = f"{section}: job[{k}]"
    _keys(table, JOB_KEYS, where)
    for key in ("collective", "size", "ranks"):
        if key not in table:
            raise ConfigError(f"{where}: {key} is missing")
    coll = C.canonical(table["collective"], f"{where}: collective")
    size = parse_size(table["size"], f"{where}: size")
    ranks = table["ranks"]
    g = len(ranks) if isinstance(ranks, list) else whole_number(2)(ranks, f"{where}: ranks")
    if not g:
        raise ConfigError(f"{where}: ranks: expected a group size or a non-empty list of ranks, got []")
    group = concurrent.job_fabric(ref, overrides, topo, g, where)
    algo = parse_spec(_text(table.get("algorithm", "ring"), f"{where}: algorithm"), f"{where}: algorithm")
    job, timed = concurrent.compile_job(group, coll, algo, size, DTYPE_SIZE[dtype], where)
    return {"label": _text(table.get("label", f"job{k}"), f"{where}: label"), "collective": coll,
            "algorithm": algo.label, "size": timed, "ranks": ranks, "nranks": g, "job": job}


def run_section(spec: dict) -> pd.DataFrame:
    rows = []
    for policy, ranks in spec["placements"].items():
        jobs = [Job(s["job"].schedule, s["job"].block_elems, s["job"].dtype_size, r) for s, r in zip(spec["jobs"], ranks)]
        for engine in spec["engines"]:
            r = concurrent.run(jobs, spec["topology"], engine)
            busiest = "; ".join(f"{name} {util:.0%}" for _, name, util in r.busiest)
            for k, s in enumerate(spec["jobs"]):
                rows.append({"placement": policy, "engine": engine, "job": k, "label": s["label"],
                             "collective": s["collective"], "algorithm": s["algorithm"], "size_bytes": s["size"],
                             "ranks": len(ranks[k]), "alone_us": r.alone[k] * 1e6, "together_us": r.together[k] * 1e6,
                             "slowdown": r.slowdown[k], "busiest_links": busiest})
    return pd.DataFrame(rows, columns=COLUMNS)
