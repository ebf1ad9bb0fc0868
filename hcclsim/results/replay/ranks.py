"""The ranks of one job replayed together (docs/replay.md, "Every rank of one job"): each collective matched
across the ranks' Kineto traces, its measured time the fastest rank's kernel.

Which files are one job: two or more Kineto traces whose distributedInfo gives the same world size, one
file per rank. Refused in one line: the same rank twice, and such files given with other traces (a rank
file, or a trace of another world size, beside them: which are the job is then a guess).

Matching: the k-th collective of a process group on one of its ranks is the k-th on every other
(ProcessGroupNCCL issues a group's collectives in program order on each rank; AMD-AGI/TraceLens
NcclAnalyser.build_df_long matches them the same way, by process group and position). Their kind, dtype and
size must agree (AllToAllv's sizes may differ: its largest is kept); a group must have as many collectives
on each rank that traces it. A collective with no process group in the trace (PyTorch < 2.1) is one of the
world's when every rank of the world has it.

The estimator: a collective's kernel starts on each rank when that rank launches it and ends when the
collective ends, so every rank but the last to launch also counts its wait for the others; the minimum over
the ranks is the kernel of the last one, the collective's own time (TraceLens' comm_latency,
NcclAnalyser.build_df_nccl_implicit_sync_cat, AMD-AGI/TraceLens@171dd74). It needs no clock common to the
hosts, as the latest start to the earliest end would. It still holds the last rank's wait for its peers'
data inside the collective, and the skew of ranks launched nearly together.

The job's exposed time is taken the same way: each collective on the rank where it ran fastest, its kernel
less what that rank's compute on other streams covers (formats.exposed_one), summed; none unless every rank
file has compute kernels. A rank's own exposed time also counts its waits for the others.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import replace

from ...core.errors import ConfigError
from ...schedule import collectives as C
from .formats import Record, Trace, exposed_one


def separate_jobs(traces: list[Trace]) -> None:
    """--placement places each trace as a job: the rank files of one job are refused, not taken as several."""
    worlds = {t.world[1] for t in traces if t.world}
    ranks = {t.world[0] for t in traces if t.world}
    if len(traces) > 1 and all(t.world for t in traces) and len(worlds) == 1 and len(ranks) == len(traces):
        raise ConfigError(f"--placement: {traces[0].path}, {traces[1].path}{', ...' if len(traces) > 2 else ''}: "
                          f"ranks {', '.join(str(t.world[0]) for t in traces)} of one job (distributedInfo world "
                          f"size {worlds.pop()}): expected one trace per job (without --placement the rank files "
                          f"of one job replay as that job)")


def one_job(traces: list[Trace]) -> Trace | None:
    """The ranks of one job merged into one trace (each collective's minimum over ranks), or None when the
    traces are separate (each replayed alone). Refuses a set that is neither."""
    by_world = defaultdict(list)
    for t in traces:
        if t.world:
            by_world[t.world[1]].append(t)
    jobs = {w: ts for w, ts in by_world.items() if len(ts) > 1}
    if not jobs:
        return None
    world, ranks = next(iter(jobs.items()))
    others = [t.path for t in traces if all(t is not r for r in ranks)]
    if others:
        raise ConfigError(f"{ranks[0].path}, {ranks[1].path}: ranks of one job (world size {world}), given with "
                          f"{others[0]}: expected the rank files of one job alone (replay the others separately)")
    seen = {}
    for t in ranks:
        if t.world[0] in seen:
            raise ConfigError(f"{seen[t.world[0]]} and {t.path} are both rank {t.world[0]} of a world of {world}: "
                              f"expected one file per rank of one job (replay them separately, or as separate "
                              f"jobs with --placement)")
        seen[t.world[0]] = t.path
    return merge(sorted(ranks, key=lambda t: t.world[0]))


def merge(ranks: list[Trace]) -> Trace:
    """One trace of the matched collectives (ranks in rank order); records replay does not model (wait, ...)
    as the lowest rank has them."""
    sequences = [_sequences(t) for t in ranks]
    world = ranks[0].world[1]
    exposed = []                     # per timed collective, on the rank where it ran fastest (its own time)
    records = [r for r in ranks[0].records if r.kind is None]
    for group in dict.fromkeys(g for seq in sequences for g in seq):
        members = [(t, seq[group]) for t, seq in zip(ranks, sequences) if group in seq]
        first, firsts = members[0]
        if not group:
            part = next(((t, i, r) for t, recs in members for i, r in recs if r.group_size not in (None, world)), None)
            if part:                           # several groups' collectives in one nameless sequence
                raise ConfigError(f"{part[0].path}: record {part[1]} ({part[2].name!r}): a collective of {part[2].group_size} "
                                  f"ranks without a process group name: with the rank files of one job (world "
                                  f"{world}) the collectives of different groups cannot be told apart; expected "
                                  f"traces that name their process groups (PyTorch 2.1 and later), or replay each "
                                  f"file alone")
        for t, recs in members[1:]:
            if len(recs) != len(firsts):
                raise ConfigError(f"{t.path}: process group {group!r}: {len(recs)} collectives, {first.path} has "
                                  f"{len(firsts)}: expected the same steps traced on every rank of one job")
        for k in range(len(firsts)):
            rec, (fast, fast_rec) = _matched(group, k, [(t, recs[k]) for t, recs in members], world)
            records.append(rec)
            if fast_rec is not None:
                exposed.append(exposed_one(fast_rec, fast.compute))
    records.sort(key=lambda r: r.start_us)
    path = f"{ranks[0].path} (+{len(ranks) - 1} ranks)"
    job_exposed = sum(exposed) if all(t.compute for t in ranks) else None
    return Trace(path, ranks[0].format, records, hardware=ranks[0].hardware, exposed=job_exposed)


def _sequences(trace: Trace) -> dict:
    """Per process group, (index in the trace, record) of its collectives in order."""
    out = defaultdict(list)
    for i, r in enumerate(trace.records):
        if r.kind is not None:
            out[r.group].append((i, r))
    return out


def _what(r: Record) -> str:
    size = "no size" if r.size_bytes is None else f"{r.size_bytes} bytes"
    return f"{r.kind} of {size} ({r.dtype or 'no dtype'}, group size {r.group_size or '?'})"


def _matched(group: str, k: int, members: list, world: int) -> tuple[Record, tuple]:
    (t0, (i0, r0)), rest = members[0], members[1:]
    for t, (i, r) in rest:
        same = (r.kind, r.dtype, r.group_size) == (r0.kind, r0.dtype, r0.group_size)
        if not same or (r.kind != C.ALL_TO_ALLV and r.size_bytes != r0.size_bytes):
            raise ConfigError(f"{t.path}: record {i} ({r.name!r}), collective {k} of process group {group!r}: "
                              f"{_what(r)}, where {t0.path} record {i0} is {_what(r0)}: expected the same "
                              f"collective on every rank of one job")
    recs = [r for _, (_, r) in members]
    times = [r.measured_us for r in recs if r.measured_us is not None]
    timed = [(r.measured_us, j) for j, r in enumerate(recs) if r.measured_us is not None]
    fast = (members[min(timed)[1]][0], recs[min(timed)[1]]) if timed else (None, None)
    out = replace(max(recs, key=lambda r: r.count_in or 0) if r0.kind == C.ALL_TO_ALLV else r0,
                  start_us=r0.start_us, measured_us=min(times, default=None),
                  measured_max_us=max(times, default=None), over_ranks=len(times))
    if out.group_size is None and not group and len(members) == world:
        out.group_size = world            # no process group in the trace, and on every rank of the world
    return out, fast
