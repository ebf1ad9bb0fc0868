"""Mesh rings (ring:permute): channel c's ring on Hamiltonian cycle c of a full mesh (docs/algorithms.md, ring)."""

import hcclsim.algorithms.ring as ring_module
import numpy as np
import pytest
from hcclsim.algorithms.ring import mesh_cycles
from helpers import busbw, compile_for, time_of

from hcclsim.core.errors import ScheduleError
from hcclsim.network.topology import build_flat, build_hierarchical
from hcclsim.schedule.algorithm import Problem, parse_spec
from hcclsim.schedule.checker import check
from hcclsim.schedule.expand import expand

COLLS = ["all_reduce", "all_gather", "reduce_scatter"]


def mesh(n, bw=50e9, lat=0.0):
    return build_flat("m", "full_mesh", n, bw, lat)


def decomposition_problems(cycles, n) -> list[str]:
    """What keeps `cycles` from being link-disjoint directed Hamiltonian cycles on n ranks."""
    problems, seen = [], set()
    for c in cycles:
        if sorted(c) != list(range(n)):
            problems.append(f"{c} does not visit every rank exactly once")
        for a, b in zip(c, c[1:] + c[:1]):
            if (a, b) in seen:
                problems.append(f"link {a}->{b} is in two cycles")
            seen.add((a, b))
    return problems


# Expected counts by hand: n-1 (every link once) for odd n and n = 0 mod 4 from 8 on; n-2 for n = 4, 6
# (K*_4 and K*_6 have no decomposition) and n = 2 mod 4 (not constructed); one 2-cycle on 2 ranks.
EXPECTED = {2: 1, 3: 2, 4: 2, 5: 4, 6: 4, 7: 6, 8: 7, 9: 8, 10: 8, 12: 11, 13: 12, 16: 15, 24: 23, 31: 30, 64: 63}


@pytest.mark.parametrize("n", sorted(EXPECTED))
def test_mesh_cycles_are_link_disjoint_hamiltonian_cycles(n):
    cycles = mesh_cycles(n)
    assert len(cycles) == EXPECTED[n]
    assert decomposition_problems([list(c) for c in cycles], n) == [] or n == 2   # 2 ranks: 0->1->0, both links


def test_the_decomposition_check_rejects_broken_cycles():
    good = [list(c) for c in mesh_cycles(8)]
    assert decomposition_problems(good, 8) == []
    assert any("two cycles" in p for p in decomposition_problems(good + [good[0][::-1]], 8))   # a link reused
    short = [good[0][:-1] + [good[0][0]]] + good[1:]                                            # a rank twice
    assert any("exactly once" in p for p in decomposition_problems(short, 8))


@pytest.mark.parametrize("n,spec", [(4, "ring"), (6, "ring"), (8, "ring"), (9, "ring"),
                                    (8, "ring:channels=9:chunks=2")])         # 9 channels: more than cycles
@pytest.mark.parametrize("coll", COLLS)
def test_mesh_rings_compute_the_collective(n, spec, coll):
    s = compile_for(spec, coll, mesh(n))
    assert s.notes.get("permute")
    for count in (1, 97):                           # uneven counts; 97 fills every one of up to 18 chunks
        check(s, count)


def test_a_ring_on_a_broken_cycle_fails_the_checker(monkeypatch):
    """The checker catches a ring laid on a cycle that visits a rank twice (and misses another)."""
    broken = [tuple(c) for c in mesh_cycles(8)]
    broken[3] = broken[3][:-1] + (broken[3][0],)
    monkeypatch.setattr(ring_module, "mesh_cycles", lambda n: broken)
    with pytest.raises(ScheduleError):
        check(compile_for("ring", "all_reduce", mesh(8)), 97)


def test_every_link_carries_one_transfer_per_step():
    """Default mesh rings on 8 ranks: in every step each of the 56 links carries exactly one transfer;
    rank-order rings (permute=off, two channels) use 16 of them."""
    topo = mesh(8)
    for spec, used in (("ring", 56), ("ring:permute=off", 16)):
        s = compile_for(spec, "all_reduce", topo)
        ex = expand(s)
        groups = s.tmpl[ex["tmpl"], 1]
        for g in np.unique(groups):
            links = [topo.route(int(a), int(b))[0] for a, b in zip(ex["src"][groups == g], ex["dst"][groups == g])]
            assert len(links) == len(set(links)) == used


@pytest.mark.parametrize("n,C", [(5, 4), (6, 4), (8, 7)])
def test_mesh_ring_closed_form(n, C):
    """C cycles, each over S/C: every transfer carries S/(N C) on its own link, one hop a step, so
    AllReduce takes 2(N-1)(a + S/(N C B)), AllGather and ReduceScatter (N-1)(a + S/(N C B)); at a = 0
    busbw = C B, the rank's aggregate link bandwidth when C = N-1."""
    B, a, S = 50e9, 700e-9, 4 * n * C << 12                 # S / (N C) whole float32 elements
    topo = mesh(n, B, a)
    assert time_of("ring", "all_reduce", topo, S) == pytest.approx(2 * (n - 1) * (a + S / (n * C * B)), rel=1e-9)
    for coll in ("all_gather", "reduce_scatter"):
        assert time_of("ring", coll, topo, S) == pytest.approx((n - 1) * (a + S / (n * C * B)), rel=1e-9)
    assert busbw("ring", "all_reduce", mesh(n, B), 1 << 30) == pytest.approx(C * B / 1e9, rel=1e-6)
    assert busbw("ring:permute=off", "all_reduce", mesh(n, B), 1 << 30) == pytest.approx(2 * B / 1e9, rel=1e-6)


def test_permute_option():
    switch = build_flat("s", "switch", 8, 50e9, 0.0)
    assert not compile_for("ring", "all_reduce", switch).notes.get("permute")         # auto: full_mesh only
    s = compile_for("ring:permute=on", "all_reduce", switch)                            # any flat topology
    check(s, 5)
    assert busbw("ring:permute=on", "all_reduce", switch, 1 << 28) == pytest.approx(50.0, rel=1e-6)  # one uplink
    two_tier = build_hierarchical("t", "switch", 4, 400e9, 0.0, False, "rail", 2, 50e9, 0.0)
    assert "flat" in parse_spec("ring:permute=on").unsupported(Problem("all_reduce", two_tier))
    with pytest.raises(Exception, match="permute must be one of"):
        parse_spec("ring:permute=sometimes")
