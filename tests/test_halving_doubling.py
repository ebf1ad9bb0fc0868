from itertools import pairwise

import pytest
from helpers import busbw, compile_for, counts_to_check, time_of

from hcclsim.network.topology import build_flat
from hcclsim.schedule.checker import check

B, LAT = 50e9, 500e-9
ALPHA = 2 * LAT                                   # one switch = two link hops
COLLS = ["all_reduce", "all_gather", "reduce_scatter"]


@pytest.mark.parametrize("n", range(2, 18))
@pytest.mark.parametrize("coll", COLLS)
def test_schedule_computes_the_collective(n, coll):
    topo = build_flat("t", "switch", n, B, 0.0)
    s = compile_for("halving_doubling", coll, topo)
    for count in counts_to_check(n):
        check(s, count)


@pytest.mark.parametrize("n", [2, 4, 8, 16])
def test_powers_of_two_are_the_alpha_beta_formulas(n):
    topo = build_flat("t", "switch", n, B, LAT)
    size = n * 4 * 1024 * 3
    k = n.bit_length() - 1
    assert time_of("halving_doubling", "all_reduce", topo, size) == pytest.approx(
        2 * k * ALPHA + 2 * (n - 1) / n * size / B, rel=1e-9)
    for coll in ("all_gather", "reduce_scatter"):
        assert time_of("halving_doubling", coll, topo, size) == pytest.approx(
            k * ALPHA + (n - 1) / n * size / B, rel=1e-9)


def test_six_ranks_fold_and_unfold():
    # 6 = 4 + 2: ranks 1 and 3 fold into 0 and 2, then 4 new ranks run two steps per phase.
    topo = build_flat("t", "switch", 6, B, LAT)
    size = 6 * 4 * 4 * 1024
    assert time_of("halving_doubling", "all_reduce", topo, size) == pytest.approx(
        6 * ALPHA + (1 + 2 * 3 / 4 + 1) * size / B, rel=1e-9)           # fold S, RS+AG 2(3/4)S, unfold S
    # new ranks 0, 1 hold two blocks each: doubling moves 2 then 4 blocks; fold one block, unfold all six
    for coll in ("all_gather", "reduce_scatter"):
        assert time_of("halving_doubling", coll, topo, size) == pytest.approx(
            4 * ALPHA + (1 + 2 + 4 + 6) / 6 * size / B, rel=1e-9)


def test_eight_rank_reference_points(switch8):
    zero = build_flat("z", "switch", 8, B, 0.0)
    for coll in COLLS:
        assert busbw("halving_doubling", coll, zero, 1 << 30) == pytest.approx(50.0, rel=1e-9)
    t = time_of("halving_doubling", "all_reduce", switch8, 256)
    assert t == pytest.approx(6 * ALPHA + 2 * 7 / 8 * 256 / B, rel=1e-9)    # 6.009 us: 3 + 3 steps
    assert t < time_of("ring", "all_reduce", switch8, 256)


def test_one_group_per_step():
    topo = build_flat("t", "switch", 12, B, LAT)              # 12 = 8 + 4: fold, 3 + 3 steps, unfold
    s = compile_for("halving_doubling", "all_reduce", topo)
    assert len(s.group_ptr) - 1 == 8
    assert s.ntransfers == 4 + 2 * 3 * 8 + 4


@pytest.mark.parametrize("coll", COLLS)
def test_time_grows_with_size(switch8, coll):
    times = [time_of("halving_doubling", coll, switch8, 1 << k) for k in range(6, 31, 2)]
    assert all(a < b for a, b in pairwise(times))
