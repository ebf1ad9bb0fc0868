"""CollNet / SHARP: reduction in the rail switches of a rail scale-out (hierarchical:inter=in_switch).

NCCL's CollNetDirect (v2.28.9 src/device/all_reduce.h) scatters a node's data to its NIC heads inside
the node, each head's NIC reduces its shard in the network and the head broadcasts the result back:
intra reduce-scatter -> per-rail in-switch all-reduce -> intra all-gather."""

import dataclasses

import numpy as np
import pytest
from helpers import assert_one_line_error, compile_for, run_cli, time_of

from hcclsim.core.errors import ConfigError, ScheduleError, TopologyError
from hcclsim.engine import analytic, packet
from hcclsim.network.config import load_topology
from hcclsim.network.topology import build_hierarchical
from hcclsim.schedule import collectives as C
from hcclsim.schedule.algorithm import Problem, parse_spec
from hcclsim.schedule.checker import check
from hcclsim.schedule.ir import F_C3, F_SRC
from hcclsim.sweeping import budget as SB

COLLS = ["all_reduce", "reduce_scatter", "all_gather", "broadcast", "reduce"]
MIB = 1 << 20


def rails(D, L, up="switch", up_lat=0.0, out_lat=0.0, up_reduce=False, out_bw=50e9):
    return build_hierarchical("c", up, L, 400e9, up_lat, up_reduce, "rail", D, out_bw, out_lat, out_reduce=True)


# ------------------------------------------------------------------------------------- the key

def test_scale_out_key_makes_every_rail_switch_reduce_its_rail():
    topo = load_topology("h100-cluster", ["scale_out.domains=2", "scale_out.in_switch_reduce=true"])
    # nodes: 16 ranks, the 2 NVSwitch domains (16, 17), then rail switch l = 18 + l serving NIC l of each node
    assert list(topo.out_reduce_switch) == [18 + r % 8 for r in range(16)]
    assert list(topo.reduce_switch) == [16 + r // 8 for r in range(16)]        # NVLS unchanged
    # rail switch 3 -> rank 9 (node 1, GPU 1): NIC 3 of node 1, then NVLink GPU 3 -> switch -> GPU 1
    assert [int(topo.link_tier[x]) for x in topo.route(21, 9)] == [1, 0, 0]
    assert topo.route(18 + 1, 9) == topo.route(1, 9)[-1:]                        # on its rail: the NIC only


def test_sharp_is_off_by_default_on_h100_cluster():
    """NCCL_COLLNET_ENABLE is off by default (v2.28.9 src/init.cc:1927): the preset leaves SHARP off."""
    topo = load_topology("h100-cluster", ["scale_out.domains=2"])
    assert not topo.can_reduce_in_scale_out
    why = parse_spec("hierarchical:inter=in_switch").unsupported(Problem("all_reduce", topo))
    assert "scale_out.in_switch_reduce" in why


def test_a_fat_tree_cannot_reduce_in_its_switches(capsys):
    status, out, err = run_cli(capsys, "sweep", "-t", "two-tier-128", "--set", "scale_out.in_switch_reduce=true",
                               "-b", "1K", "-e", "1K")
    assert_one_line_error(status, out, err, "--set scale_out.in_switch_reduce", "'rail'", "spines")
    with pytest.raises(TopologyError, match="scale_out.in_switch_reduce"):
        build_hierarchical("f", "switch", 4, 1e11, 0.0, False, "fat_tree", 2, 1e10, 0.0, out_reduce=True)
    with pytest.raises(ConfigError, match="in_switch_reduce"):
        load_topology("h100-cluster", ["scale_out.in_switch_reduce=1"])


def test_why_not_without_reducing_rails_or_with_all_to_all():
    plain = build_hierarchical("p", "switch", 2, 1e11, 0.0, False, "rail", 3, 1e10, 0.0)
    algo = parse_spec("hierarchical:inter=in_switch")
    assert "scale_out.in_switch_reduce = true" in algo.unsupported(Problem("all_reduce", plain))
    assert "all_to_all" in algo.unsupported(Problem("all_to_all", rails(3, 2)))
    with pytest.raises(ConfigError, match="inter must be one of ring, direct, in_switch"):
        parse_spec("hierarchical:inter=sharp")


# ------------------------------------------------------------------------------------- correctness

@pytest.mark.parametrize("D,L,up", [(3, 2, "switch"), (2, 3, "ring"), (1, 3, "switch"), (3, 1, "switch")])
def test_every_variant_computes_the_collective(D, L, up):
    t = rails(D, L, up=up, up_reduce=up == "switch")
    n = D * L
    intras = ["ring", "direct"] + (["in_switch"] if up == "switch" else [])
    for coll in COLLS:
        roots = [n - 1, L % n] if coll in ("broadcast", "reduce") else [0]
        for intra in intras:
            more = {"ring": ":channels=2:chunks=3", "in_switch": ":chunks=3"}.get(intra, ":chunks=3")
            for extra in ("", more, ":pipeline=on:chunks=2"):
                spec = f"hierarchical:intra={intra}:inter=in_switch{extra}"
                if parse_spec(spec).unsupported(Problem(coll, t, roots[0])):
                    continue
                for root in roots:
                    s = compile_for(spec, coll, t, root=root)
                    for count in (1, 2 * n + 1):
                        check(s, count)


def test_a_reduced_row_sent_back_on_the_wrong_rail_is_caught():
    """Rail switch l+1 writing its sum into the ranks of rail l: each rank gets another rail's row."""
    s = compile_for("hierarchical:intra=direct:inter=in_switch:chunks=2", "all_reduce", rails(3, 2))
    check(s, 5)
    tm = s.tmpl.copy()
    rail0 = 3 * 2 + 3
    sends = np.flatnonzero(tm[:, F_C3] == rail0)             # the rail switches' sends (src = rail0 + l)
    assert len(sends) == 2
    tm[sends, F_SRC + 2] = 1                                 # src = rail0 + (l + 1) mod L
    with pytest.raises(ScheduleError):
        check(dataclasses.replace(s, tmpl=tm), 5)


def test_placing_a_schedule_moves_its_rail_switches_with_its_ranks():
    t = rails(2, 4)
    s = compile_for("hierarchical:intra=direct:inter=in_switch", "all_reduce", t)
    shifted = [d * 4 + (l + 1) % 4 for d in range(2) for l in range(4)]     # rank (d, l) on fabric rank (d, l+1)
    node = packet.node_map_for(s, t, shifted)
    assert list(node[8 + 2:8 + 2 + 4]) == [10 + (l + 1) % 4 for l in range(4)]


# ------------------------------------------------------------------------------------- time

def test_the_inter_phase_has_the_closed_form():
    """S bytes on D = 4 domains of L = 2, intra direct over a zero-latency scale-up (B_up), one hop h and
    B on the rails, Q parts. Intra RS and AG: (L-1)(S/L)/B_up each. AllReduce's rail phase: rank r's row
    R = S/L goes up in Q parts back to back (part w has left at (w+1)R/(QB)), the switch sends part w back
    once all D are in, one hop later, and its sends follow one another: 2h + R/B + R/(QB).
    ReduceScatter / AllGather: the row's D sub-pieces go up (and S/N comes down), or S/N up and the D
    sub-pieces down: 2h + R/B + S/(N Q B)."""
    D, L, Q, h, B, Bu, S = 4, 2, 4, 3e-6, 50e9, 400e9, 8 * MIB
    t = rails(D, L, out_lat=h, out_bw=B)
    R, N = S / L, D * L
    spec = f"hierarchical:intra=direct:inter=in_switch:chunks={Q}"
    intra = (L - 1) * R / Bu
    assert time_of(spec, "all_reduce", t, S) == pytest.approx(2 * intra + 2 * h + R / B + R / (Q * B), rel=1e-9)
    for coll in ("reduce_scatter", "all_gather"):
        assert time_of(spec, coll, t, S) == pytest.approx(intra + 2 * h + R / B + S / (N * Q * B), rel=1e-9)


def test_sharp_halves_the_rail_bytes_of_a_ring():
    """The rail ring moves 2(D-1)/D of a row per rank, the switch one row: on 8 domains with a negligible
    scale-up, 1.75 against 1 (plus the pipeline's fill of 1/Q)."""
    t = rails(8, 2, out_bw=50e9)
    ring = time_of("hierarchical:intra=direct", "all_reduce", t, 64 * MIB)
    sharp = time_of("hierarchical:intra=direct:inter=in_switch:chunks=64", "all_reduce", t, 64 * MIB)
    intra = 2 * (32 * MIB) / 400e9
    assert (ring - intra) / (sharp - intra) == pytest.approx(1.75 / (1 + 1 / 64), rel=1e-6)


@pytest.mark.parametrize("coll", ["all_reduce", "reduce_scatter", "all_gather"])
def test_analytic_and_packet_engines_agree(coll):
    """Contention-free, 64 parts: the packet engine forwards packet by packet, the analytic engine a part
    at a time, 1/64 of the rail phase apart."""
    t = rails(4, 2, up_lat=2e-7, out_lat=1e-6)
    S = 4 * MIB
    s = compile_for("hierarchical:intra=direct:inter=in_switch:chunks=64", coll, t, S)
    e = C.sizing(coll, S, 4, t.nranks).block_elems
    a = analytic.run(s, t, [e], 4).time[0]
    p = packet.run(s, t, [e], 4).time[0]
    assert p == pytest.approx(a, rel=0.03)


def test_the_budget_rule_bounds_the_compiled_schedule():
    topo = rails(3, 4, up_reduce=True)
    checked = 0
    for spec in ("hierarchical:inter=in_switch", "hierarchical:intra=in_switch:inter=in_switch:chunks=2",
                 "hierarchical:intra=ring:channels=2:inter=in_switch:chunks=3",
                 "hierarchical:intra=direct:inter=in_switch:pipeline=on:chunks=2"):
        algo = parse_spec(spec)
        for coll in COLLS:
            problem = Problem(coll, topo)
            key = algo.structure_key(problem, C.sizing(coll, MIB, 4, topo.nranks), 4)
            rule, exact = SB.dims(algo, problem, key), SB.dims_of(algo.compile(problem, key))
            label = f"{spec} {coll}: rule {rule}, compiled {exact}"
            assert (rule.templates, rule.chunks) == (exact.templates, exact.chunks), label
            assert exact.transfers <= rule.transfers <= 2 * exact.transfers, label
            assert rule.tdeps >= exact.tdeps and rule.xdeps >= exact.xdeps, label
            checked += 1
    assert checked == 20
