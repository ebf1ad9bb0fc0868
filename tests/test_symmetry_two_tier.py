"""The one-instance (symmetric) path on two-tier fabrics: taken where a symmetry of the tiers maps every
instance of every template onto the others, refused otherwise, and always the general path's times."""

import numpy as np
import pytest
from helpers import compile_for

from hcclsim.engine import analytic
from hcclsim.network.topology import build_hierarchical
from hcclsim.schedule import PUT, Layout, ScheduleBuilder, const, rank_of
from hcclsim.schedule.algorithm import Problem, load_all
from hcclsim.schedule.ir import F_ID
from hcclsim.schedule.symmetry import schedule_orbits

COLLS = ["all_reduce", "reduce_scatter", "all_gather", "all_to_all", "broadcast", "reduce"]


def two_tier(D, L, out="fat_tree", over=1.0, up="switch", reduce=False, out_reduce=False):
    return build_hierarchical(f"t{D}x{L}", up, L, 400e9, 300e-9, reduce, out, D, 50e9, 1e-6,
                              oversubscription=over, out_reduce=out_reduce)


FABRICS = {
    "4x4 fat tree": lambda: two_tier(4, 4),
    "3x8 fat tree": lambda: two_tier(3, 8),
    "3x8 rail": lambda: two_tier(3, 8, "rail"),
    "4x4 fat tree 4:1": lambda: two_tier(4, 4, over=4.0),
    "4x4 ring scale-up, rail": lambda: two_tier(4, 4, "rail", up="ring"),
    "4x4 NVLS, rail reducing": lambda: two_tier(4, 4, "rail", reduce=True, out_reduce=True),
}


def _cases():
    for fabric, make in FABRICS.items():
        topo = make()
        for name, cls in sorted(load_all().items()):
            for coll in COLLS:
                if coll in cls.collectives and not cls().unsupported(_problem(coll, topo)):
                    yield pytest.param(fabric, name, coll, id=f"{fabric}-{name}-{coll}")


def _problem(coll, topo):
    return Problem(coll, topo)


@pytest.mark.parametrize("fabric,name,coll", list(_cases()))
def test_symmetric_path_equals_general_path(fabric, name, coll):
    topo = FABRICS[fabric]()
    s = compile_for(name, coll, topo)
    blocks = [s.layout.k * 64, s.layout.k * 4096]        # every chunk the same size
    fast = analytic.run(s, topo, blocks, 4, want_links=True)
    slow = analytic.run(s, topo, blocks, 4, want_links=True, symmetric=False)
    np.testing.assert_allclose(fast.time, slow.time, rtol=1e-12)
    np.testing.assert_allclose(fast.link_bytes, slow.link_bytes, rtol=1e-12)


@pytest.mark.parametrize("fabric", ["4x4 fat tree", "3x8 fat tree", "3x8 rail", "4x4 fat tree 4:1"])
@pytest.mark.parametrize("coll", ["all_reduce", "all_gather", "reduce_scatter"])
def test_rail_rings_and_hierarchical_take_the_symmetric_path(fabric, coll):
    """The rail rings' domain step also turns the rail ((d, l) -> (d+1, l+a)): a symmetry of every one of
    these fabrics, so their D-instance templates are timed from one instance."""
    topo = FABRICS[fabric]()
    for name in ("ring", "hierarchical"):
        s = compile_for(name, coll, topo)
        assert schedule_orbits(s, topo) is not None, name
    ring = compile_for("ring", coll, topo)
    assert np.all(ring.tmpl[:, F_ID] == topo.domains)     # the twisted case, not the equivariant one


def test_rooted_collectives_are_refused():
    topo = two_tier(4, 4)
    for name in ("ring", "hierarchical", "tree"):
        assert schedule_orbits(compile_for(name, "broadcast", topo), topo) is None, name


def _shifted_ring(D, L, odd: bool):
    """Every rank PUTs to the next rank of its domain; with odd, rank 0 also sends one extra transfer."""
    b = ScheduleBuilder("all_gather", "hand", D * L, (D, L), Layout(1, 1))
    g = b.next_group()
    b.op(src=rank_of(D, L), dst=rank_of(D, L, 0, 1), schunk=const(0), group=g, inst=(D, L), kind=PUT)
    if odd:
        b.op(src=rank_of(D, L), dst=rank_of(D, L, 1, 0), schunk=const(0), group=g, inst=(1, 1), kind=PUT)
    return b.build()


def test_a_schedule_with_one_odd_transfer_is_refused_and_still_times_right():
    D, L = 4, 4
    topo = two_tier(D, L)
    even, odd = _shifted_ring(D, L, False), _shifted_ring(D, L, True)
    assert schedule_orbits(even, topo) is not None
    assert schedule_orbits(odd, topo) is None
    S = 1 << 20
    # by hand: a ring PUT is one hop up, one down the scale-up switch, alone on both: S / 400 GB/s + 2 * 300
    # ns; the odd PUT of rank 0 to rank 4 (domain 1) takes NIC up, leaf -> spine, spine -> leaf, NIC down,
    # alone on each: 4 * 1 us + S / 50 GB/s
    want_even = S / 400e9 + 2 * 300e-9
    want_odd = max(want_even, 4 * 1e-6 + S / 50e9)
    for sched, want in ((even, want_even), (odd, want_odd)):
        for symmetric in (None, False):
            t = analytic.run(sched, topo, [S // 4], 4, symmetric=symmetric).time[0]
            assert t == pytest.approx(want, rel=1e-12)


def test_a_shift_the_fabric_does_not_have_is_refused():
    """A leaf of two domains (leaf_size = 2L): the domain step is no symmetry of the fat tree."""
    D, L = 4, 4
    topo = build_hierarchical("leaf8", "switch", L, 400e9, 300e-9, False, "fat_tree", D, 50e9, 1e-6,
                              leaf_size=2 * L)
    s = compile_for("ring", "all_reduce", topo)
    assert schedule_orbits(s, topo) is None
    blocks = [s.layout.k * 64]
    assert analytic.run(s, topo, blocks, 4).time[0] > 0
