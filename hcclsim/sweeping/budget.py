"""What a sweep's points cost, known before anything is compiled or expanded.

A point is one (collective, algorithm, structure key, engine) of a sweep with the sizes it times at once.
Its cost follows from the schedule's dimensions (``Dims``): templates and their dependencies (what the
compiler builds in Python), transfers and expanded dependencies (what the packet engine's transfer table
holds, what the analytic engine walks) and layout chunks (the analytic engine's byte prefix).

* Before any unit runs, ``check_units`` takes the dimensions from each built-in algorithm's own rules
  (``RULES``: the same formulas its ``compile`` follows, from its options and structure key) and refuses
  a point whose compiler, engine or iteration samples would pass the budget (hcclsim.core.budget).
* Once a schedule is compiled, ``check_schedule`` takes its exact dimensions (cheap: templates only) and
  checks the analytic engine's own arrays before it runs (the packet engine checks itself,
  hcclsim.engine.packet.prepare). This also covers plug-in algorithms, which have no rule here.

The bytes per template, dependency, link and sample were measured (peak RSS growth of the stage alone,
tests/test_budget.py keeps the estimates within a factor of what is allocated); each constant says where.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import numpy as np

from ..core import budget
from ..core.units import DTYPE_SIZE
from ..engine import packet
from ..engine.analytic import plan_pool
from ..engine.execution import Noise
from ..schedule import collectives as C
from ..schedule.algorithm import Problem
from ..schedule.ir import Schedule
from ..schedule.symmetry import schedule_orbits


@dataclass(frozen=True)
class Dims:
    """A schedule's size: templates, their dependency entries, transfers, expanded dependencies, chunks."""

    templates: int
    tdeps: int
    transfers: int
    xdeps: int
    chunks: int


def dims_of(s: Schedule) -> Dims:
    """The exact dimensions of a compiled schedule (what expand() would make of it)."""
    return Dims(s.ntemplates, len(s.dep_t), *packet.explicit_size(s), s.layout.nchunks)


# ------------------------------------------------------------------------------ the algorithms' rules
# Each rule follows its algorithm's compile (algorithms/NAME.py) from the options and the structure key,
# asking the algorithm what it decides itself (ring's _channels and _rails, tree's _chains);
# tests/test_budget.py compares every rule with dims_of the compiled schedule, so a rule cannot drift.

def _ring(algo, problem, key) -> Dims:
    n, coll, P = problem.nranks, problem.collective, int(key)
    if coll in (C.BROADCAST, C.REDUCE):                   # a pipelined chain: n-1 hops x P chunks
        return Dims((n - 1) * P, 2 * (n - 1) * P, (n - 1) * P, 2 * (n - 1) * P, P)
    chans, topo = algo._channels(problem), problem.topology
    per_rank = (2 if coll == C.ALL_REDUCE else 1) * (n - 1) * P * chans     # steps x chunks x channels
    # a template per ring position: a domain's L on two tiers (rail rings or not), every rank on mesh and graph
    # rings (permute), one for a flat ring whose instances are the ranks
    two_tier = topo.kind == "hierarchical" and topo.domains > 1 and topo.local > 1
    positions = topo.local if algo._rails(problem) or two_tier else n if algo._permute(problem) else 1
    templates = per_rank * positions
    return Dims(templates, 3 * templates, per_rank * n, 3 * per_rank * n, n * chans * P)


def _direct(algo, problem, key) -> Dims:
    n, coll, P = problem.nranks, problem.collective, int(key)
    if coll in (C.BROADCAST, C.REDUCE):                   # the root and n-1 peers, P pieces in order
        t, tdeps = (n - 1) * P, (n - 1) * (P - 1)
        return Dims(t, tdeps, t, tdeps, P)
    if algo.twoshot:                                      # two steps of n-1 PUTs, a wait per piece
        sends = 2 * (n - 1) * P
        tdeps = 2 * sends + n * P
        return Dims(sends + P, tdeps, (sends + P) * n, tdeps * n, n * P)
    t, tdeps = (n - 1) * P, (n - 1) * (P - 1)            # n-1 peers x P pieces, each after the previous
    return Dims(t, tdeps, t * n, tdeps * n, P if coll == C.ALL_REDUCE else n * P)


def _halving_doubling(algo, problem, key) -> Dims:
    n, coll = problem.nranks, problem.collective
    pof2 = 1 << (n.bit_length() - 1)
    steps = (2 if coll == C.ALL_REDUCE else 1) * (pof2.bit_length() - 1)
    t = steps * pof2 + 2 * (n - pof2)                    # one transfer per new rank and step, the folds
    return Dims(t, 4 * t, t, 4 * t, pof2 if coll == C.ALL_REDUCE else n)


def _tree(algo, problem, key) -> Dims | None:
    if getattr(algo, "_chains", lambda p: False)(problem):   # NCCL's multi-node shape: checked once compiled
        return None
    n, P = problem.nranks, int(key) if key else 1
    if problem.collective == C.ALL_REDUCE:               # 2 trees x (reduce + broadcast) x n-1 edges
        t = 4 * (n - 1) * P
        return Dims(t, 3 * t, t, 3 * t, 2 * P)
    t = (n - 1) * P
    return Dims(t, t * (n.bit_length() + 2), t, t * (n.bit_length() + 2), P)


def _in_switch(algo, problem, key) -> Dims:
    n, coll, P = problem.nranks, problem.collective, int(key)
    nvls = algo.options.mode == "nvls"
    if nvls and coll == C.ALL_REDUCE:                    # per chunk: n uploads, G, D, n multicasts
        tdeps = P * (4 * n + 3)
        return Dims(P * (2 * n + 2), tdeps, P * (2 * n + 2) * n, tdeps * n, n * P)
    first = 0 if nvls else 1
    ups = n - first if coll == C.REDUCE_SCATTER else 1
    downs = n - first if coll == C.ALL_GATHER else 1
    wait = n if coll in (C.REDUCE_SCATTER, C.ALL_REDUCE, C.REDUCE) else 1     # a multicast's expanded deps
    down_inst = 1 if coll == C.REDUCE else n
    return Dims(P * (ups + downs), P * (2 * ups + downs * (ups + 1)), P * (ups + downs) * n,
                P * (n * ups + down_inst * downs * (wait + 1)), C.nblocks(coll, n) * P)


def _hierarchical(algo, problem, key) -> Dims:
    topo, coll = problem.topology, problem.collective
    D, L, n = topo.domains, topo.local, problem.nranks
    intra, K, *pipelined = key
    if pipelined:                      # pipeline=on: Q copies of one chunk's phases (chunk 0's templates moved)
        one = _hierarchical(algo, problem, (intra, K))
        return Dims(*(pipelined[0] * v for v in dataclasses.astuple(one)))
    inter = algo.options.inter
    if coll == C.ALL_TO_ALL:           # an exchange along l, then one along d after the domain's barrier
        t = L + D
        return Dims(t, 2 * t + 2 * D * L, t * n, 4 * t * n + 2 * D * n * L * L, L * D * K)
    c, Q = algo.parts(problem, key)                 # the intra phases' parts, the scale-out in-switch phase's
    up = 0 if L == 1 else {"ring": (L - 1) * c, "direct": L - 1}.get(intra, c * L)
    n_up, n_out = (2, 2) if coll == C.ALL_REDUCE else (1, 1)
    # scale-out in-switch phases (inter=in_switch): all-reduce Q uploads and Q sends back; reduce-scatter
    # and all-gather Q (D + 1), each send waiting for the D uploads of its part (or the D sends wait for one)
    out = 0 if inter != "in_switch" or D == 1 else 2 * Q if coll == C.ALL_REDUCE else Q * (D + 1)
    rails = out if inter == "in_switch" else n_out * (D - 1)
    t = n_up * up + rails + (2 if coll in (C.BROADCAST, C.REDUCE) else 0)
    # a phase's first sends wait for the end of the previous phase: a ring's last sends (2 per channel),
    # a direct phase's barrier (n-1 templates over a domain or a rail), an in-switch phase's (1 template)
    first = {"ring": K, "direct": L, "in_switch": L}.get(intra, L) + (1 if inter == "ring" else D)
    end = max({"ring": 4 * K, "direct": 2 * L * L, "in_switch": 2 * L}.get(intra, 2 * L),
              4 if inter == "ring" else 2 * D * D)
    # Broadcast's scatter and Reduce's gather: (D-1) L instances waiting for every instance of the rail phase
    rooted = L * D * (n * (1 if inter == "ring" else D) + L) if coll in (C.BROADCAST, C.REDUCE) else 0
    entries = 2 * max(2 * K, L, D)                     # ready(): my end of the previous phase and my peer's
    return Dims(t, 3 * t + 3 * first * entries + out * (D + 2), t * n,
                4 * t * n + 3 * first * n * end + rooted + out * n * (D + 2), L * D * K)


def _striped(algo, problem, key) -> Dims:
    """Per step (AllReduce two): N-1 scale-up PUTs unless every chunk goes out (m = K), and unless none does
    (m = 0) N-1 rounds of a PUT into the leaf and its send on; a later step opens with a wait on the
    previous step's arrivals, on which its PUTs and first round depend. A round depends on the previous
    one's PUT (and, for a ReduceScatter's pieces, on the send lag(m) rounds before); a send on its PUT.
    Every template is one per rank and every dependency the same rank's (DEP_SHIFT)."""
    from ..algorithms import striped

    n, m = problem.nranks, int(key)
    up, rounds = (n - 1) * (m < striped.K), (n - 1) * (m > 0)
    t = tdeps = 0
    for s, step in enumerate(striped._steps(problem.collective)):
        waits = int(s > 0)
        t += waits + up + 2 * rounds
        tdeps += waits * (up + rounds) + waits * up
        if rounds:
            later = max(0, n - 1 - striped.lag(m)) if step.by_dst else 0
            tdeps += waits + (n - 2) + later + (n - 1)
    return Dims(t, tdeps, t * n, tdeps * n, n * striped.K)


def _matrix(algo, problem, key) -> Dims:
    """A matrix collective (key: its traffic): direct one PUT per pair; hierarchical also one PUT per rail pair
    (d, l) -> (d', l) with something staged, fed by the pairs staged for it (and, pairwise, the previous)."""
    units, L = key.units, problem.topology.local
    n = len(units)
    pairs = (units > 0) & ~np.eye(n, dtype=bool)
    npairs = int(pairs.sum())
    if algo.name != "hierarchical":
        return Dims(npairs, 0, npairs, 0, key.chunks)
    i, j = np.nonzero(pairs & (np.arange(n)[:, None] // L != np.arange(n)[None, :] // L))
    via = i // L * L + j % L
    sends = len(set(zip(via, j // L)))
    deps = len(i) + (sends - len(set(via)) if algo.options.inter == "ring" else 0)
    staged = int(np.bincount(via, units[i, j], n).max()) if len(i) else 0
    return Dims(npairs + sends, deps, npairs + sends, deps, max(key.chunks, staged))


RULES = {"ring": _ring, "direct": _direct, "direct_oneshot": _direct, "direct_twoshot": _direct,
         "halving_doubling": _halving_doubling, "tree": _tree, "in_switch": _in_switch,
         "hierarchical": _hierarchical, "striped": _striped}


def dims(algo, problem, key) -> Dims | None:
    """The schedule's dimensions from the algorithm's rule, before compiling; None for an algorithm
    without one (a plug-in: checked once compiled)."""
    rule = RULES.get(algo.name)
    if rule and problem.collective in C.MATRIX_COLLECTIVES:
        return _matrix(algo, problem, key)
    return rule(algo, problem, key) if rule else None


# ------------------------------------------------------------------------------------------ costs
# Bytes per template and per dependency entry the compiler takes, measured as the peak RSS growth of
# compile (ring, tree, direct, halving_doubling, in_switch, hierarchical schedules of 4k to 1M templates:
# 1170-1240 per template, 110-260 per dependency): the builder's Python rows and tuples, then the arrays.
COMPILE_PER_TEMPLATE, COMPILE_PER_DEP = 1300, 250
# The analytic engine, measured the same way: the symmetric path keeps 4 float64 per template and size
# (390 bytes per template at 16 sizes measured) and the link orbits, Python sets and dicts per link and
# node (230-320 bytes per link measured); the general path 2 float64 per pool row and size, 1 per
# chunk and size (the byte prefix) and its pool plan per template.
SYMMETRIC_PER_TEMPLATE_SIZE, ORBITS_PER_LINK, ORBITS_PER_NODE = 32, 350, 200
POOL_PER_ROW_SIZE, PREFIX_PER_CHUNK_SIZE, PLAN_PER_TEMPLATE = 16, 8, 80
# Iteration samples: 6 float64 per iteration, size and engine (the samples, the best protocol's, their
# percentiles; 33-45 bytes measured with 10^6 iterations).
PER_SAMPLE = 48


def compile_bytes(d: Dims) -> float:
    return COMPILE_PER_TEMPLATE * d.templates + COMPILE_PER_DEP * d.tdeps


def symmetric_bytes(d: Dims, topo, nsizes: int) -> float:
    """The analytic engine's symmetric path (one instance per template) on nsizes sizes at once."""
    return SYMMETRIC_PER_TEMPLATE_SIZE * d.templates * nsizes + ORBITS_PER_LINK * topo.nlinks \
        + ORBITS_PER_NODE * topo.nnodes


def general_bytes(s: Schedule, nsizes: int) -> float:
    """The analytic engine's general path (every instance) on nsizes sizes at once, with the exact pool."""
    rows = plan_pool(s)[2]
    return POOL_PER_ROW_SIZE * rows * nsizes + PREFIX_PER_CHUNK_SIZE * (s.layout.nchunks + 1) * nsizes \
        + PLAN_PER_TEMPLATE * s.ntemplates


def samples_bytes(iters: int, nsizes: int, nengines: int = 1) -> float:
    return PER_SAMPLE * iters * nsizes * nengines


# ------------------------------------------------------------------------------------------ checks

def _name(collective: str, topo, label: str, size_bytes, engines) -> str:
    lo, hi = min(size_bytes), max(size_bytes)
    at = budget.format_bytes(lo) + ("" if lo == hi else f" to {budget.format_bytes(hi)}")
    return f"{collective} {label} on {topo.name} ({topo.nranks} ranks, --engine {','.join(engines)}) at {at}"


HINTS = {"compile": "use fewer ranks or smaller algorithm options (chunks, channels)",
         "analytic": "use fewer ranks or fewer sizes",
         "samples": "use fewer --iters or fewer sizes"}


def _protocols(topo) -> int:
    return 3 if topo.endpoint.protocol == "auto" else 1


def check_point(algo, problem, sizings, keys, engines, noise: Noise) -> None:
    """Refuse (budget.BudgetError) the points of one algorithm -- these sizes (their sizings and structure
    keys), these engines, these iterations -- whose compiler, engine or samples would pass the budget,
    before anything is allocated. Structure keys without a rule (plug-ins) are checked once compiled."""
    topo = problem.topology
    samples = samples_bytes(noise.iters, len(sizings), len(engines))
    groups: dict = {}
    for sz, key in zip(sizings, keys):
        groups.setdefault(key, []).append(sz.size_bytes)
    worst = (samples, HINTS["samples"], f"{noise.iters} iterations", [s.size_bytes for s in sizings])
    for key, size_bytes in groups.items():
        d = dims(algo, problem, key)
        if d is None:
            continue
        name = _name(problem.collective, topo, algo.label, size_bytes, engines)
        parts = {HINTS["compile"]: compile_bytes(d)}
        if "analytic" in engines:
            parts[HINTS["analytic"]] = symmetric_bytes(d, topo, len(size_bytes)) * _protocols(topo)
        if "packet" in engines:
            delay = noise.skew + noise.jitter * (math.log(max(d.transfers, 2)) + 1)   # ~ the largest draw
            packet.check_range(topo, name, delay)
            mtu = min(t.packet.mtu for t in topo.tiers)          # no transfer moves more than the buffer
            packets = d.transfers * -(-max(size_bytes) // mtu)
            footprint = packet.footprint(d.transfers, d.xdeps, topo, packets, delay)
            parts[packet.advice(footprint)] = sum(footprint.values())
        hint = max(parts, key=parts.get)
        need = samples + parts[hint]
        if need > worst[0]:
            worst = (need, hint if parts[hint] > samples else HINTS["samples"],
                     f"{d.templates:.3g} templates, {d.transfers:.3g} transfers"
                     + (f", {noise.iters} iterations" if noise.iters > 1 else ""), size_bytes)
    need, hint, detail, size_bytes = worst
    budget.check(need, f"{_name(problem.collective, topo, algo.label, size_bytes, engines)} ({detail})", hint)


def check_schedule(schedule: Schedule, topo, engines, size_bytes, noise: Noise) -> None:
    """Refuse a compiled schedule whose analytic timing (these sizes at once) would pass the budget, from
    its exact dimensions and pool plan (the packet engine checks itself, hcclsim.engine.packet.check)."""
    if "analytic" not in engines:
        return
    # the engine's own test (hcclsim.engine.analytic.run); the orbits are cached on the topology
    symmetric = not noise.active and schedule_orbits(schedule, topo) is not None
    d = dims_of(schedule)
    need = symmetric_bytes(d, topo, len(size_bytes)) * _protocols(topo) if symmetric \
        else general_bytes(schedule, len(size_bytes))
    budget.check(need, f"{_name(schedule.collective, topo, schedule.algorithm, size_bytes, ['analytic'])} "
                 f"({d.templates:.3g} templates, {d.transfers:.3g} transfers)", HINTS["analytic"])


def check_units(ctx, units, candidates) -> None:
    """check_point for every (algorithm, engines) a sweep's units (hcclsim.sweeping.sweep.Unit) will run,
    before the first one runs. A unit of `-a auto` (its algorithm a string) times every algorithm of
    candidates(collective) with the analytic engine, and the chosen ones with its engines."""
    ws = DTYPE_SIZE[ctx.dtype]
    for unit in units:
        problem = Problem(unit.collective, ctx.topology, ctx.root)
        auto = isinstance(unit.algorithm, str)
        for algo in candidates(unit.collective) if auto else [unit.algorithm]:
            sizings = [C.sizing(unit.collective, s, ws, ctx.topology.nranks, ctx.traffic) for s in unit.sizes]
            keys = [algo.structure_key(problem, sz, ws) for sz in sizings]
            engines = tuple(dict.fromkeys(("analytic", *unit.engines))) if auto else unit.engines
            check_point(algo, problem, sizings, keys, engines, ctx.noise)
