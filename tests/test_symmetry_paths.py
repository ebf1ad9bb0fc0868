"""The one-instance paths on two-tier fabrics for the algorithms that joined them (direct_*: one template per
grid offset; tree and nvls_tree: one instance per row, a row being the L rails of a domain): taken, equal to
the general path, and refused where a transfer or a link breaks the symmetry (hand-derived times)."""

import dataclasses

import numpy as np
import pytest
from helpers import compile_for, kernel_calls

from hcclsim.engine import analytic
from hcclsim.network.topology import build_hierarchical
from hcclsim.schedule import DEP_ALL, DEP_COL, PUT, Layout, ScheduleBuilder, const, rank_of
from hcclsim.schedule.expand import expand
from hcclsim.schedule.ir import F_CHAN, F_ID
from hcclsim.schedule.symmetry import schedule_orbits

B_UP, A_UP, B_OUT, A_OUT = 400e9, 300e-9, 50e9, 1e-6


def two_tier(D, L, out="fat_tree", reduce=False, leaf_size=None):
    return build_hierarchical(f"t{D}x{L}", "switch", L, B_UP, A_UP, reduce, out, D, B_OUT, A_OUT,
                              leaf_size=leaf_size)


FABRICS = {"2x8": lambda: two_tier(2, 8), "4x8": lambda: two_tier(4, 8), "4x4 rail": lambda: two_tier(4, 4, "rail"),
           "4x4 NVLS": lambda: two_tier(4, 4, reduce=True),
           "leaf of two domains": lambda: two_tier(4, 4, leaf_size=8)}   # the domain step is no symmetry there
# (spec, collective, rows): the algorithms now on a one-instance path; rows: one instance per row (else per template)
NEW = [("direct", "all_gather", False), ("direct", "reduce_scatter", False), ("direct:chunks=2", "all_to_all", False),
       ("direct_oneshot", "all_reduce", False), ("direct_twoshot", "all_reduce", False),
       ("direct_twoshot:chunks=3", "all_reduce", False), ("tree", "all_reduce", True),
       ("tree:chunks=3", "all_reduce", True), ("nvls_tree:chunks=2", "all_reduce", True)]


def _both(s, topo, blocks, monkeypatch):
    calls = kernel_calls(monkeypatch)
    fast = analytic.run(s, topo, blocks, 4, want_links=True)
    slow = analytic.run(s, topo, blocks, 4, want_links=True, symmetric=False)
    return fast, slow, calls


@pytest.mark.parametrize("fabric", list(FABRICS))
@pytest.mark.parametrize("spec,coll,rows", NEW)
def test_new_algorithms_take_a_one_instance_path_and_time_as_the_general_path(monkeypatch, fabric, spec, coll, rows):
    topo = FABRICS[fabric]()
    if spec.startswith("nvls_tree") != (fabric == "4x4 NVLS"):
        pytest.skip("nvls_tree runs on the reducing fabric only, the others are covered elsewhere")
    s = compile_for(spec, coll, topo)
    orbits = schedule_orbits(s, topo)
    assert orbits is not None
    # without the domain step (a leaf of two domains) direct falls back on the rows as well
    rows = rows or fabric == "leaf of two domains"
    assert np.array_equal(orbits.reps, s.tmpl[:, F_ID] if rows else np.ones(s.ntemplates)), orbits.reps
    blocks = [s.layout.k * 64, s.layout.k * 4096]              # every chunk the same size
    fast, slow, calls = _both(s, topo, blocks, monkeypatch)
    assert calls == {"symmetric": 1, "general": 1}
    np.testing.assert_allclose(fast.time, slow.time, rtol=1e-12)
    np.testing.assert_allclose(fast.link_bytes, slow.link_bytes, rtol=1e-12)


def _rows_schedule(D, L, odd=False, mode=DEP_COL):
    """Group 0: every rank (d, l) PUTs S to (d, l+1) (template A, D x L), and domain 0 does it once more
    (template X, 1 x L: domain 0's rows carry two transfers per link). Group 1: every rank PUTs S to (d+1, l)
    once all of A's column (mode DEP_COL) or all of A (DEP_ALL) has arrived (template B). odd: rank 1 also
    PUTs S to rank L+1 beside B's instance (0, 1), a transfer no rail shift maps onto another."""
    b = ScheduleBuilder("all_gather", "hand", D * L, (D, L), Layout(1, 1))
    g = b.next_group()
    a = b.op(src=rank_of(D, L), dst=rank_of(D, L, 0, 1), schunk=const(0), group=g, inst=(D, L), kind=PUT)
    b.op(src=rank_of(D, L), dst=rank_of(D, L, 0, 1), schunk=const(0), group=g, inst=(1, L), kind=PUT)
    g = b.next_group()
    b.op(src=rank_of(D, L), dst=rank_of(D, L, 1, 0), schunk=const(0), group=g, inst=(D, L), kind=PUT,
         deps=[(a, mode, 0, 0)])
    if odd:
        b.op(src=const(1), dst=const(L + 1), schunk=const(0), group=g, kind=PUT, deps=[(a, mode, 0, 0)])
    return b.build()


@pytest.mark.parametrize("mode", [DEP_COL, DEP_ALL])
def test_rows_that_differ_are_walked_one_by_one(monkeypatch, mode):
    """By hand on the 2 x 4 rail fabric: a PUT inside a domain crosses the rank's uplink and downlink of the
    scale-up switch (2 A_UP), one on the rail crosses its NIC, the rail switch and the other NIC (2 A_OUT).
    Domain 0's links carry A and X: 2S / B_UP + 2 A_UP; the other domain's S / B_UP + 2 A_UP. B waits for
    domain 0 (a column or all of A), then runs alone on every NIC: S / B_OUT + 2 A_OUT."""
    D, L, S = 2, 4, 1 << 20
    topo = two_tier(D, L, "rail")
    s = _rows_schedule(D, L, mode=mode)
    assert np.array_equal(schedule_orbits(s, topo).reps, [D, 1, D])
    fast, slow, calls = _both(s, topo, [S // 4], monkeypatch)
    assert calls == {"symmetric": 1, "general": 1}
    want = 2 * S / B_UP + 2 * A_UP + S / B_OUT + 2 * A_OUT
    assert fast.time[0] == pytest.approx(want, rel=1e-12) and slow.time[0] == pytest.approx(want, rel=1e-12)
    np.testing.assert_allclose(fast.link_bytes, slow.link_bytes, rtol=1e-12)


def test_one_odd_transfer_keeps_the_rows_off_their_path_and_times_right():
    """The odd PUT of rank 1 shares rank 1's NIC, its rail switch and rank L+1's NIC with B's instance (0, 1):
    both take 2S / B_OUT there, which the rail shifts do not see (they would average it over the rails)."""
    D, L, S = 2, 4, 1 << 20
    topo = two_tier(D, L, "rail")
    s = _rows_schedule(D, L, odd=True)
    assert schedule_orbits(s, topo) is None
    want = 2 * S / B_UP + 2 * A_UP + 2 * S / B_OUT + 2 * A_OUT
    for symmetric in (None, False):
        assert analytic.run(s, topo, [S // 4], 4, symmetric=symmetric).time[0] == pytest.approx(want, rel=1e-12)


def test_a_slower_nic_keeps_the_rows_off_their_path_and_times_right():
    """Rank 0's NIC uplink at half the rate: no rail shift maps it onto the others' NICs. B's instance (0, 0)
    then takes S / (B_OUT / 2) on it."""
    D, L, S = 2, 4, 1 << 20
    sym = two_tier(D, L, "rail")
    nic = sym.route(0, L)[0]
    bw = sym.link_bw.copy()
    bw[nic] /= 2
    topo = dataclasses.replace(sym, link_bw=bw)
    s = _rows_schedule(D, L)
    assert schedule_orbits(s, sym) is not None and schedule_orbits(s, topo) is None
    want = 2 * S / B_UP + 2 * A_UP + 2 * S / B_OUT + 2 * A_OUT
    for symmetric in (None, False):
        assert analytic.run(s, topo, [S // 4], 4, symmetric=symmetric).time[0] == pytest.approx(want, rel=1e-12)


def test_direct_on_two_tiers_is_one_template_per_grid_offset():
    """Rank (d, l) PUTs to (d+kd, l+kl) for every offset but (0, 0), template k-1 for k = kd L + kl (its
    channel): the N-1 peers of the flat schedule, each instance a translation of the grid."""
    D, L = 3, 4
    s = compile_for("direct", "all_gather", two_tier(D, L))
    assert s.shape == (D, L) and s.ntemplates == D * L - 1
    ex = expand(s)
    pairs = {(int(a), int(b)) for a, b in zip(ex["src"], ex["dst"])}
    assert pairs == {(a, b) for a in range(D * L) for b in range(D * L) if a != b}
    kd, kl = np.divmod(s.tmpl[ex["tmpl"], F_CHAN] + 1, L)
    assert np.array_equal(ex["dst"] // L, (ex["src"] // L + kd) % D)
    assert np.array_equal(ex["dst"] % L, (ex["src"] % L + kl) % L)


@pytest.mark.parametrize("to_own_switch", [True, False])
def test_a_switch_end_that_does_not_move_with_the_ranks_keeps_the_path_off(to_own_switch):
    """Every rank (d, l) PUTs into a scale-up switch: its own domain's (switch_of: a domain step maps it onto
    the next domain's, a rail step onto itself, as they map the rank end: the path is taken), or domain l's
    (mod D): a rail step moves the rank end to rail l+1 and the switch end to domain l+1's switch, which no
    rank shift does (a rail shift keeps every domain's switch in place): no symmetry, walk every instance."""
    from hcclsim.schedule import Affine, switch_of

    D, L = 4, 4
    topo = two_tier(D, L)
    b = ScheduleBuilder("all_gather", "hand", D * L, (D, L), Layout(1, 1))
    dst = switch_of(D, D * L) if to_own_switch else Affine(b1=1, m1=D, w1=1, c3=D * L)
    b.op(src=rank_of(D, L), dst=dst, schunk=const(0), group=b.next_group(), inst=(D, L), kind=PUT)
    assert (schedule_orbits(b.build(), topo) is not None) == to_own_switch
