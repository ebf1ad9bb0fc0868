"""Several collectives at once on one fabric, on either engine: each job's time alone and together.

The packet engine runs the jobs' transfers in one simulation (packet.simulate_concurrent). The
analytic engine times one schedule, so the jobs become one: every transfer of every job, placed on
the fabric by packet.node_map_for, as an explicit transfer (a 1x1 template) in its own job's group
number. Group g of every job is one group of the merged schedule, so the jobs' g-th steps share the
links they have in common, the analytic engine's rule for transfers that run at the same time; the
dependencies stay within each job, so a job never waits for another's step.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..core.errors import ConfigError, HcclSimError
from ..network.config import load_topology
from ..network.topology import Topology
from ..schedule import collectives as C
from ..schedule.algorithm import Algorithm, Problem
from ..schedule.expand import expand, first_unrouted
from ..schedule.ir import F_C3, F_DCH, F_DST, F_GROUP, F_ID, F_IL, F_SCH, F_SRC, NF, Schedule
from . import analytic, packet
from .packet import Job

ENGINES = ("analytic", "packet")
BUSIEST = 3         # links reported per run: enough to see the shared uplinks (an estimate of what a reader scans)


@dataclass(frozen=True)
class Shared:
    """One engine's run of the jobs: seconds per job alone and together, and the busiest links
    (link id, its name, the fraction of the joint run it was busy)."""

    engine: str
    alone: list[float]
    together: list[float]
    busiest: list[tuple[int, str, float]]

    @property
    def slowdown(self) -> list[float]:
        return [t / a for t, a in zip(self.together, self.alone)]


def job_fabric(ref: str, overrides, topo: Topology, nranks: int, where: str) -> Topology:
    """The fabric a job of nranks ranks on topo (preset or file ref, with overrides) is compiled for, as a
    job launched on nranks ranks sees it: scale_out.domains = nranks / ranks per domain on a hierarchy,
    ranks = nranks otherwise. Placement then decides which links its traffic crosses, not its algorithm."""
    local = topo.nranks // topo.domains
    if topo.kind == "hierarchical":
        if nranks % local:
            raise ConfigError(f"{where}: ranks: {nranks}: expected a multiple of the {local} ranks per domain of "
                              f"{topo.name}")
        resize = f"scale_out.domains={nranks // local}"
    else:
        resize = f"ranks={nranks}"
    try:
        return load_topology(ref, [*overrides, resize])
    except HcclSimError as e:
        raise type(e)(f"{where}: ranks: {e}") from None


def compile_job(group: Topology, collective: str, algo: Algorithm, size: int, dtype_size: int,
                where: str) -> tuple[Job, int]:
    """The collective compiled for its job fabric (job_fabric), not yet placed, and the size it times
    (nccl-tests' rounding)."""
    problem = Problem(collective, group, 0)
    why = algo.unsupported(problem)
    if why:
        raise ConfigError(f"{where}: algorithm: {algo.label} does not run here: {why}")
    sz = C.sizing(collective, size, dtype_size, group.nranks)
    schedule = algo.compile(problem, algo.structure_key(problem, sz, dtype_size))
    pair = first_unrouted(schedule, *group.hop_table()) if group.routes_partial else None
    if pair:
        raise ConfigError(f"{where}: algorithm: {algo.label} does not run here: it {group.no_route(pair)}")
    return Job(schedule, sz.block_elems, dtype_size), sz.size_bytes


def merge(jobs: list[Job], topo: Topology) -> tuple[Schedule, np.ndarray]:
    """The jobs as one schedule on the whole fabric, and the job of each of its templates."""
    first = jobs[0]
    for k, job in enumerate(jobs):
        if (job.schedule.layout, job.block_elems, job.dtype_size) != (first.schedule.layout, first.block_elems,
                                                                       first.dtype_size):
            raise ConfigError(f"jobs[{k}]: the analytic engine times concurrent jobs of one chunk layout and size "
                              f"(job 0's); expected the same collective, size and algorithm family, or engine packet")
    rows, targets, counts, kinds, part = [], [], [], [], []
    base = 0
    for k, job in enumerate(jobs):
        s = job.schedule
        where = packet.node_map_for(s, topo, job.ranks if job.ranks is not None else range(s.nranks))
        ex = expand(s)
        src, dst = where[ex["src"]], where[ex["dst"]]
        if min(src.min(initial=0), dst.min(initial=0)) < 0:
            raise ConfigError(f"jobs[{k}].ranks: the schedule reduces in a switch that the fabric ranks it is "
                              f"placed on lack")
        row = np.zeros((len(src), NF), np.int64)
        row[:, :F_SRC] = s.tmpl[ex["tmpl"], :F_SRC]
        row[:, F_ID] = row[:, F_IL] = 1
        for a in (F_SRC, F_DST, F_SCH, F_DCH):
            row[:, a + 3] = row[:, a + 8] = 1               # moduli of a constant Affine
        row[:, F_C3:F_C3 + 4] = np.column_stack([src, dst, ex["schunk"], ex["dchunk"]])
        rows.append(row)
        targets.append(ex["didx"] + base)
        counts.append(np.diff(ex["dptr"]))
        kinds.append(ex["dkind"])
        part.append(np.full(len(src), k, np.int64))
        base += len(src)
    tmpl, part = np.concatenate(rows), np.concatenate(part)
    order = np.argsort(tmpl[:, F_GROUP], kind="stable")      # group order; a dependency's group is earlier
    new = np.empty_like(order)
    new[order] = np.arange(len(order))
    counts = np.concatenate(counts)
    consumer = new[np.repeat(np.arange(len(counts)), counts)]
    by = np.argsort(consumer, kind="stable")
    dep_t, dep_kind = new[np.concatenate(targets)][by], np.concatenate(kinds)[by]
    tmpl = np.ascontiguousarray(tmpl[order])
    groups = tmpl[:, F_GROUP]
    zero = np.zeros(len(dep_t), np.int64)
    merged = Schedule(collective=first.schedule.collective, algorithm="concurrent", nranks=topo.nranks,
                      nnodes=topo.nnodes, shape=(1, topo.nranks), layout=first.schedule.layout, root=0, tmpl=tmpl,
                      dep_ptr=np.concatenate([[0], np.cumsum(np.bincount(consumer, minlength=len(tmpl)))]).astype(
                          np.int64),
                      dep_t=dep_t.astype(np.int64), dep_mode=zero, dep_si=zero, dep_sj=zero,
                      dep_kind=dep_kind.astype(np.int64),
                      group_ptr=np.searchsorted(groups, np.arange(groups[-1] + 2)).astype(np.int64))
    return merged, part[order]


def _analytic(jobs: list[Job], topo: Topology, want_links: bool):
    s, part = merge(jobs, topo)
    t = analytic.run(s, topo, [jobs[0].block_elems], jobs[0].dtype_size, want_links=want_links, part=part)
    return [float(x) for x in t.time[:, 0]], (t.link_bytes[:, 0] / topo.link_bw if want_links else None)


def _packet(jobs: list[Job], topo: Topology, want_links: bool):
    times, run = packet.simulate_concurrent(jobs, topo)
    return times, run.link_busy


def _name(topo: Topology, link: int) -> str:
    return (f"{topo.tiers[topo.link_tier[link]].name} {topo.node_name(int(topo.link_src[link]))}->"
            f"{topo.node_name(int(topo.link_dst[link]))}")


def run(jobs: list[Job], topo: Topology, engine: str = "analytic") -> Shared:
    """Each job alone on its ranks, then all together, on one engine."""
    if engine not in ENGINES:
        raise ConfigError(f"engine: {engine!r}: expected one of {', '.join(ENGINES)}")
    if not jobs:
        raise ConfigError("jobs: expected at least one job")
    time = _analytic if engine == "analytic" else _packet
    alone = [time([job], topo, False)[0][0] for job in jobs]
    together, busy = time(jobs, topo, True)
    util = busy / (max(together) or 1.0)                  # (all zero-byte: nothing was busy)
    top = np.argsort(-util, kind="stable")[:BUSIEST]
    return Shared(engine, alone, together, [(int(k), _name(topo, int(k)), float(util[k])) for k in top if util[k] > 0])
