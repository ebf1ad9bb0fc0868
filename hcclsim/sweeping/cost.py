"""What a sweep's units will cost before any runs: packet-engine events and seconds, analytic seconds,
how units are cut so that workers balance, and the event budget (--max-events).

A packet point's events are 2 per packet per hop (as hcclsim.engine.packet.PacketProblem.estimate counts
them: every template's largest transfer, max_transfer_bytes, cut at the smallest mtu, over the fabric's
longest route) and one per transfer, once per protocol timed and per noisy iteration. An upper bound; tests/test_parallel.py
keeps it within EVENTS_FACTOR of the events the engine counts. A sweep whose events pass the budget is
refused before it starts, in one line with the mtu that would fit.

Units (hcclsim.sweeping.sweep.Unit): a packet-engine point is a unit (its seconds are its events at
EVENTS_PER_SECOND); an analytic block is one unit per structure key (each key is compiled and timed apart
anyway), and a long key's sizes are cut in pieces when its engine time dwarfs its compile time. The
seconds only order the units (longest first) and drive the progress bar's time left.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from ..core.budget import Limit, format_bytes
from ..core.errors import ConfigError
from ..core.units import DTYPE_SIZE
from ..engine.analytic import max_transfer_bytes
from ..engine.execution import protocols
from ..schedule import collectives as C
from ..schedule.algorithm import Problem
from ..schedule.ir import F_ID, F_IL
from .budget import dims

ENV = "HCCL_BENCH_MAX_EVENTS"
# Estimate: the packet kernel on this project's 2-core machine, 2026-12 (10-40 M events/s on 64-rank ring,
# tree and direct_oneshot points of 256 KiB to 64 MiB, and bench/packet.py's 64-rank 1 GiB ring).
EVENTS_PER_SECOND = 20e6
POINT_SECONDS = 0.02          # estimate: compile, expand and prepare of one small packet point (15-30 ms measured)
DEFAULT_EVENTS = 10 ** 10     # about 8 minutes at EVENTS_PER_SECOND: the ~10 minutes issue 12 lets a sweep take unasked
NOTE_SECONDS = 5.0            # a packet sweep estimated longer than this says so before it starts
EVENTS_FACTOR = 4.0           # the estimate is >= the engine's count and at most this many times it (tests: 1.0-1.05 on one
                              # switch, up to 3.9 where the longest route is much longer than most, ring8)
# Estimates for ordering analytic units, from profiles of h100-cluster sweeps (ring, tree, hierarchical):
# compile 30-80 us per template, the engine 0.1-0.3 us per template, size and protocol, plus a fixed cost.
COMPILE_SECONDS_PER_TEMPLATE, ENGINE_SECONDS_PER_TEMPLATE_SIZE, UNIT_SECONDS = 50e-6, 0.3e-6, 5e-3
LONG_SECONDS = 0.5            # an analytic key longer than this, mostly engine time, is cut by sizes


def parse(value, where: str = "--max-events") -> int:
    """A budget of events: a whole number, e.g. 2000000000 or 2e9."""
    try:
        n = float(str(value).strip())
    except ValueError:
        n = math.nan
    if not (n >= 1 and math.isfinite(n) and n == int(n)):
        raise ConfigError(f"{where}: expected a whole number of events >= 1 (e.g. 2e9), got {value!r}")
    return int(n)


EVENTS = Limit(ENV, parse, lambda: DEFAULT_EVENTS)      # limited(), else $HCCL_BENCH_MAX_EVENTS, else the default
current, limited = EVENTS.current, EVENTS.limited


@dataclass(frozen=True)
class PointEvents:
    """A packet point's events, and what they are made of: events = per_packet x packets + per_transfer x
    transfers, where packets = sum over transfers of ceil(bytes / mtu), at most transfers + nbytes / mtu."""

    events: float
    per_packet: float      # 2 x hops x protocols x runs
    per_transfer: float    # protocols x runs
    transfers: float
    nbytes: float


def point_events(schedule, topo, block_elems: int, dtype_size: int, runs: int = 1) -> PointEvents:
    """The events of one packet point (module docstring)."""
    ninst = (schedule.tmpl[:, F_ID] * schedule.tmpl[:, F_IL]).astype(np.float64)
    size = max_transfer_bytes(schedule, np.array([int(block_elems)]), dtype_size)[:, 0]
    mtu = min(t.packet.mtu for t in topo.tiers)
    per_transfer = float(len(protocols(topo, schedule)) * runs)
    per_packet = 2.0 * topo.max_hops * per_transfer
    packets, transfers = float((ninst * np.ceil(size / mtu)).sum()), float(ninst.sum())
    return PointEvents(per_packet * packets + per_transfer * transfers, per_packet, per_transfer, transfers,
                       float((ninst * size).sum()))


def _analytic_seconds(algo, problem, key, nsizes: int) -> tuple[float, float]:
    """(compile seconds, engine seconds) of one structure key at nsizes sizes (estimates, above)."""
    d = dims(algo, problem, key)
    templates = d.templates if d is not None else problem.nranks      # a plug-in: a guess
    nproto = 3 if problem.topology.endpoint.protocol == "auto" else 1
    return COMPILE_SECONDS_PER_TEMPLATE * templates, ENGINE_SECONDS_PER_TEMPLATE_SIZE * templates * nsizes * nproto


def split(ctx, unit, schedules: dict, candidates) -> list:
    """unit (one engine; hcclsim.sweeping.sweep.Unit) as the units that run it, each with its estimated
    seconds (and events, for the packet engine). schedules caches compiled schedules by (label, key);
    candidates(collective): the algorithms an `-a auto` unit chooses among."""
    ws = DTYPE_SIZE[ctx.dtype]
    problem = Problem(unit.collective, ctx.topology, ctx.root)
    auto = isinstance(unit.algorithm, str)
    if unit.engines == ("packet",):
        algos = candidates(unit.collective) if auto else [unit.algorithm]
        runs = ctx.noise.iters if ctx.noise.active else 1
        out = []
        for s in unit.sizes:
            sz = C.sizing(unit.collective, s, ws, ctx.topology.nranks, ctx.traffic)
            worst = max((_events(a, problem, sz, ws, runs, schedules) for a in algos), key=lambda p: p.events)
            out.append(replace(unit, sizes=(s,), events=worst, cost=POINT_SECONDS + worst.events / EVENTS_PER_SECOND))
        return out if not auto else [replace(unit, events=_sum(u.events for u in out), cost=sum(u.cost for u in out))]
    if auto:
        return [replace(unit, cost=UNIT_SECONDS * len(unit.sizes) * len(candidates(unit.collective)))]
    groups: dict = {}
    for s in unit.sizes:
        sz = C.sizing(unit.collective, s, ws, ctx.topology.nranks, ctx.traffic)
        groups.setdefault(unit.algorithm.structure_key(problem, sz, ws), []).append(s)
    out = []
    for key, sizes in groups.items():
        compile_s, engine_s = _analytic_seconds(unit.algorithm, problem, key, len(sizes))
        pieces = max(1, min(len(sizes), int(engine_s // max(compile_s, UNIT_SECONDS)))) \
            if compile_s + engine_s > LONG_SECONDS else 1
        for part in np.array_split(np.array(sizes, dtype=object), pieces):
            share = len(part) / len(sizes)
            out.append(replace(unit, sizes=tuple(int(s) for s in part), cost=UNIT_SECONDS + compile_s + share * engine_s))
    return out


def _events(algo, problem, sizing, ws: int, runs: int, schedules: dict) -> PointEvents:
    key = algo.structure_key(problem, sizing, ws)
    if (algo.label, key) not in schedules:
        schedules[(algo.label, key)] = algo.compile(problem, key)
    return point_events(schedules[(algo.label, key)], problem.topology, sizing.block_elems, ws, runs)


def _sum(points) -> PointEvents:
    points = list(points)
    return PointEvents(sum(p.events for p in points), max(p.per_packet for p in points),
                       max(p.per_transfer for p in points), sum(p.transfers for p in points),
                       sum(p.nbytes for p in points))


def count(n: float) -> str:
    """5.6e8, 3.2e10, 4000: how many, in two digits."""
    mantissa, _, exponent = f"{n:.2g}".partition("e")
    return f"{mantissa}e{int(exponent)}" if exponent else mantissa


def duration(seconds: float) -> str:
    """About how long: '40 s', '12 min', '2.5 h'."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.2g} h"


def packet_events(units) -> float:
    return sum(u.events.events for u in units if u.events is not None)


def packet_seconds(units) -> float:
    return sum(u.cost for u in units if u.events is not None)


def check(units, topo) -> None:
    """Refuse (ConfigError) a sweep whose packet-engine events pass the budget, naming its largest point
    and the mtu that would fit (module docstring)."""
    limit, total = current(), packet_events(units)
    if total <= limit:
        return
    worst = max((u for u in units if u.events is not None), key=lambda u: u.events.events)
    at = f" at {format_bytes(worst.sizes[0])}" if len(worst.sizes) == 1 else ""
    raise ConfigError(f"--max-events: the packet engine would process ~{count(total)} events (about "
                      f"{duration(packet_seconds(units))} here), {count(worst.events.events)} of them for "
                      f"{worst.collective} {worst.label}{at} on {topo.name}; the budget is {count(limit)}; raise "
                      f"--max-events (or {ENV}), or {_way_out(units, topo, limit)}")


def _way_out(units, topo, limit: float) -> str:
    """A larger mtu that brings the events under limit (packets <= transfers + bytes / mtu), when one below
    every tier's switch buffer does; else fewer sizes."""
    points = [u.events for u in units if u.events is not None]
    fixed = sum((p.per_packet + p.per_transfer) * p.transfers for p in points)
    moved = sum(p.per_packet * p.nbytes for p in points)
    mtu = min(t.packet.mtu for t in topo.tiers)
    if limit > fixed:
        fits = 1 << max(math.ceil(math.log2(moved / (limit - fixed))), mtu.bit_length())
        if fits <= min(t.packet.switch_buffer for t in topo.tiers):
            keys = " ".join(f"--set {'mtu' if t.name == 'flat' else t.name + '.mtu'}={_size(fits)}"
                            for t in topo.tiers if t.packet.mtu < fits)
            return f"use a larger mtu ({keys} fits)"
    return "use fewer or smaller sizes, or --engine analytic"


def _size(n: int) -> str:
    for unit, scale in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if n >= scale and n % scale == 0:
            return f"{n // scale}{unit}"
    return str(n)
