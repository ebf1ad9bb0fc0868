"""Registry-wide properties: every algorithm, every collective it implements, several topologies.

A new algorithm module is covered here without writing a line: its schedules must compute their
collective, time must grow with size, more bandwidth must never be slower, busbw must never beat
what a rank's links can inject, and the one-instance engine path must agree with the general one.
"""

import dataclasses

import numpy as np
import pytest
from helpers import kernel_calls

from hcclsim.engine import analytic
from hcclsim.network.topology import build_flat, build_hierarchical
from hcclsim.schedule import collectives as C
from hcclsim.schedule.algorithm import Problem, load_all, parse_spec
from hcclsim.schedule.checker import check

SIZES = [0, 4, 1000, 1 << 12, 1 << 16, 1 << 20, 1 << 24, 1 << 28]


def topologies():
    return [
        build_flat("switch6", "switch", 6, 50e9, 500e-9, in_switch_reduce=True),
        build_flat("ring5", "ring", 5, 25e9, 300e-9),
        build_flat("mesh4", "full_mesh", 4, 20e9, 200e-9),
        build_flat("torus", "torus2d", 6, 30e9, 100e-9, dims=(3, 2)),
        build_hierarchical("tt", "switch", 4, 200e9, 300e-9, True, "fat_tree", 3, 25e9, 1e-6),
        build_hierarchical("rail", "ring", 3, 100e9, 200e-9, False, "rail", 2, 25e9, 1e-6),
    ]


# non-default options that change a schedule's structure (pipelining, channels, inner algorithms)
VARIANTS = ["ring:chunks=3", "ring:channels=3:chunks=2", "tree:chunks=3", "in_switch:chunks=3", "direct:chunks=2",
            "direct_twoshot:chunks=2", "hierarchical:chunks=2", "hierarchical:intra=direct:inter=direct"]


def _cases():
    for topo in topologies():
        specs = [(name, cls) for name, cls in load_all().items()]
        specs += [(v, load_all().get(v.split(":")[0])) for v in VARIANTS]
        for name, cls in specs:
            for coll in cls.collectives:
                yield pytest.param(topo, name, coll, id=f"{topo.name}-{name}-{coll}")


CASES = list(_cases())


def _compile(topo, name, coll, size, root=0):
    algo = parse_spec(name)
    problem = Problem(coll, topo, root)
    why = algo.unsupported(problem)
    if why:
        pytest.skip(why)
    sz = C.sizing(coll, size, 4, topo.nranks)
    return algo.compile(problem, algo.structure_key(problem, sz, 4)), sz


def _times(topo, name, coll, sizes=SIZES):
    out = []
    for size in sizes:
        s, sz = _compile(topo, name, coll, size)
        out.append(analytic.run(s, topo, [sz.block_elems], 4).time[0])
    return np.array(out)


@pytest.mark.parametrize("topo,name,coll", CASES)
def test_schedule_computes_the_collective(topo, name, coll):
    root = topo.nranks - 1
    s, _ = _compile(topo, name, coll, 1 << 20, root=root)
    for count in (1, 5, 2 * topo.nranks + 3):
        check(s, count, orders=1)


@pytest.mark.parametrize("topo,name,coll", CASES)
def test_time_grows_with_size_and_busbw_stays_under_the_links(topo, name, coll):
    t = _times(topo, name, coll)
    assert np.all(np.diff(t) >= -1e-15), t
    assert np.all(t > 0)
    inject = max(topo.link_bw[topo.link_src == r].sum() for r in range(topo.nranks))
    bound = inject * (2 if name.startswith("in_switch") else 1)
    for size, secs in zip(SIZES[1:], t[1:]):
        sz = C.sizing(coll, size, 4, topo.nranks)
        busbw = sz.size_bytes / secs * C.busbw_factor(coll, topo.nranks)
        assert busbw <= bound * (1 + 1e-9), (size, busbw / 1e9, bound / 1e9)


@pytest.mark.parametrize("topo,name,coll", CASES)
def test_more_bandwidth_is_never_slower(topo, name, coll):
    faster = dataclasses.replace(topo, link_bw=topo.link_bw * 2)
    slow = _times(topo, name, coll, SIZES[2:])
    fast = _times(faster, name, coll, SIZES[2:])
    assert np.all(fast <= slow * (1 + 1e-12))


# Where the one-instance (symmetric) path must be taken, by hand: a schedule in which every rank does the
# same thing shifted (no root; ring, direct, in-switch and hierarchical phases, not trees or XOR
# partners) on a topology whose rank translations are automorphisms -- every flat kind but the torus
# (its ranks are numbered x*Y + y, so rank + 1 is no symmetry) for the flat (1, N) grid; on two-tier
# fabrics the (D, L) grid of hierarchical, rings and direct, and for trees over the domains (tree, nvls_tree)
# the shift within a domain's row (schedule/symmetry.py's rows path). Not the ring on a full mesh: its
# channels run on different Hamiltonian cycles (ring's permute), which no rank translation maps onto each other.
SYMMETRIC_ALGORITHMS = ("ring", "direct", "direct_oneshot", "direct_twoshot", "in_switch")


def _symmetric_expected(topo, name, coll) -> bool:
    if coll in (C.BROADCAST, C.REDUCE, *C.MATRIX_COLLECTIVES):    # a matrix collective: a template per pair
        return False
    family = name.split(":")[0]
    if topo.domains > 1:        # a domain step (rail rings: turning the rail), or a shift within the domains' rows
        return family in ("hierarchical", "ring", "direct", "direct_oneshot", "direct_twoshot", "tree", "nvls_tree")
    return family in SYMMETRIC_ALGORITHMS and topo.kind != "torus2d" and not (family == "ring" and
                                                                         topo.kind == "full_mesh")


SYMMETRIC_CASES = [p for p in CASES if _symmetric_expected(*p.values)]


@pytest.mark.parametrize("topo,name,coll", SYMMETRIC_CASES)
def test_one_instance_path_agrees_with_the_general_path(monkeypatch, topo, name, coll):
    s, _ = _compile(topo, name, coll, 1 << 20)
    calls = kernel_calls(monkeypatch)
    even = [s.layout.k * 64, s.layout.k * 4096]          # every chunk the same size
    fast = analytic.run(s, topo, even, 4, want_links=True)
    assert calls == {"symmetric": 1, "general": 0}, "the one-instance path was not taken"
    slow = analytic.run(s, topo, even, 4, want_links=True, symmetric=False)
    assert calls == {"symmetric": 1, "general": 1}
    np.testing.assert_allclose(fast.time, slow.time, rtol=1e-12)
    np.testing.assert_allclose(fast.link_bytes, slow.link_bytes, rtol=1e-12)


@pytest.mark.parametrize("topo,name,coll", [p for p in CASES if not _symmetric_expected(*p.values)])
def test_the_one_instance_path_is_refused_where_ranks_differ(monkeypatch, topo, name, coll):
    s, _ = _compile(topo, name, coll, 1 << 20)
    calls = kernel_calls(monkeypatch)
    analytic.run(s, topo, [s.layout.k * 64], 4)
    assert calls == {"symmetric": 0, "general": 1}, "one-instance path taken: if that is right, extend " \
        "_symmetric_expected (and the case is then compared with the general path)"
