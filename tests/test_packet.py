"""The packet engine: agreement with the analytic engine where nothing contends, and the effects the
analytic engine cannot show where something does (docs/packet.md explains each number)."""

import dataclasses
import json

import numpy as np
import pytest
from helpers import compile_for

from hcclsim.cli import main
from hcclsim.core.errors import ConfigError
from hcclsim.engine import analytic, packet
from hcclsim.network.params import Endpoint, PacketParams
from hcclsim.network.topology import build_flat, build_hierarchical
from hcclsim.schedule import collectives as C

MIB = 1 << 20


def both(spec, coll, topo, size, root=0):
    """(analytic seconds, packet seconds, packet busbw GB/s, packet stats) for one point."""
    s = compile_for(spec, coll, topo, size, root=root)
    sz = C.sizing(coll, size, 4, topo.nranks)
    a = analytic.run(s, topo, [sz.block_elems], 4).time[0]
    p = packet.run(s, topo, [sz.block_elems], 4)
    busbw = sz.size_bytes / p.time[0] * C.busbw_factor(coll, topo.nranks) / 1e9
    return a, p.time[0], busbw, {k: v[0] for k, v in p.stats.items()}


def switch8(**kw):
    return build_flat("switch8", "switch", 8, 50e9, 500e-9, in_switch_reduce=True, **kw)


@pytest.mark.parametrize("spec,coll", [("ring", "all_reduce"), ("in_switch", "all_reduce"),
                                       ("direct_oneshot", "all_reduce"), ("direct_twoshot", "all_reduce"),
                                       ("direct", "all_to_all")])
def test_engines_agree_within_3_percent_at_64mib_on_the_8_rank_switch(spec, coll):
    a, p, _, _ = both(spec, coll, switch8(), 64 * MIB)
    assert p == pytest.approx(a, rel=0.03)


CROSS = [
    ("ring", "all_reduce"), ("ring", "all_gather"), ("ring", "reduce_scatter"),
    ("tree", "broadcast"), ("direct", "all_gather"), ("direct", "reduce_scatter"), ("direct", "all_to_all"),
    ("direct_twoshot", "all_reduce"), ("in_switch", "all_reduce"), ("in_switch", "all_gather"),
    ("halving_doubling", "all_reduce"),
]


@pytest.mark.parametrize("spec,coll", CROSS)
@pytest.mark.parametrize("kind", ["switch", "ring"])
def test_engines_agree_on_flat_contention_free_fabrics(spec, coll, kind):
    topo = build_flat(kind, kind, 6, 50e9, 300e-9, in_switch_reduce=kind == "switch")
    if spec == "in_switch" and kind != "switch":
        pytest.skip("needs a reducing switch")
    a, p, _, _ = both(spec, coll, topo, 4 * MIB)
    assert p == pytest.approx(a, rel=0.03)


def test_tree_allreduce_agrees_where_nothing_queues():
    """On a ring topology every tree edge has its own links; on a switch four streams meet on every
    downlink, so the agreement needs buffers that never fill (see the next test)."""
    ring = build_flat("ring", "ring", 6, 50e9, 300e-9)
    a, p, _, _ = both("tree", "all_reduce", ring, 4 * MIB)
    assert p == pytest.approx(a, rel=0.03)
    for n in (6, 8):
        deep = build_flat("s", "switch", n, 50e9, 300e-9, packet=PacketParams(switch_buffer=256 * MIB))
        for size in (16 * MIB, 64 * MIB):
            a, p, _, _ = both("tree", "all_reduce", deep, size)
            assert p == pytest.approx(a, rel=0.03)


def test_tree_on_a_switch_with_finite_buffers_shows_head_of_line_blocking():
    """Two children and two parents write into every rank's downlink at once; with 1 MiB port buffers
    the switch queue fills, credits stall the senders' ports, and packets for other, idle downlinks
    wait behind them: the busiest link idles and the tree runs >= 8 % slower than fair sharing."""
    a, p, _, stats = both("tree", "all_reduce", switch8(), 64 * MIB)
    assert p > 1.08 * a
    assert stats["peak_queue_bytes"] == 1 << 20                      # a port buffer filled up
    assert stats["busiest_link_util"] < 0.9


@pytest.mark.parametrize("coll", ["all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast"])
def test_engines_agree_for_hierarchical_on_a_two_tier_fabric(coll):
    topo = build_hierarchical("tt", "switch", 4, 200e9, 300e-9, False, "fat_tree", 3, 50e9, 1e-6)
    a, p, _, _ = both("hierarchical", coll, topo, 4 * MIB)
    assert p == pytest.approx(a, rel=0.03)


def test_store_and_forward_adds_one_packet_time_per_switch_per_step():
    n, size = 8, 8 * MIB
    cut = both("ring", "all_reduce", switch8(), size)[1]
    saf = both("ring", "all_reduce", switch8(packet=PacketParams(switching="store_and_forward")), size)[1]
    assert cut == pytest.approx(2 * (n - 1) * (1e-6 + size / n / 50e9), rel=1e-9)
    assert saf - cut == pytest.approx(2 * (n - 1) * 4096 / 50e9, rel=1e-6)


@pytest.mark.parametrize("npk", [1, 8])
def test_a_fast_link_after_a_slow_one_waits_for_the_tail(npk):
    """Rank 0 -> switch at 25 GB/s, switch -> rank 1 at 100 GB/s, 500 ns per link, cut-through, one
    transfer of npk 4 KiB packets. By hand (t = 4096 B / 25 GB/s = 163.84 ns, f = 40.96 ns): the
    uplink sends packet k over [k t, (k+1) t]; its head reaches the switch at k t + 500 ns, its tail
    at (k+1) t + 500 ns. The fast downlink starts it on its head but cannot finish it before its
    tail is in, so it finishes at (k+1) t + 500 ns (not k t + 500 ns + f) and packet k reaches rank 1
    at (k+1) t + 1 us: the transfer takes npk t + 1 us = S / B_slow + 2 x 500 ns, as the analytic
    engine says. Without the tail rule the last packet would land t - f = 122.88 ns early."""
    topo = build_flat("slowfast", "switch", 2, 100e9, 500e-9)
    up = int(np.flatnonzero((topo.link_src == 0) & (topo.link_dst == 2))[0])      # rank 0 -> the switch
    bw = topo.link_bw.copy()
    bw[up] = 25e9
    topo = dataclasses.replace(topo, link_bw=bw)
    assert topo.route(0, 1) == [up, int(np.flatnonzero((topo.link_src == 2) & (topo.link_dst == 1))[0])]
    size = npk * 4096
    want = size / 25e9 + 2 * 500e-9
    a, p, _, _ = both("direct", "broadcast", topo, size)
    assert p == pytest.approx(want, rel=1e-12)
    assert a == pytest.approx(want, rel=1e-12)


def test_the_packet_engine_is_deterministic():
    topo = build_hierarchical("tt", "switch", 4, 200e9, 300e-9, True, "fat_tree", 3, 50e9, 1e-6,
                              oversubscription=2)
    s = compile_for("ring", "all_reduce", topo, 2 * MIB)
    sz = C.sizing("all_reduce", 2 * MIB, 4, topo.nranks)
    one = packet.simulate(packet.prepare(s, topo, sz.block_elems, 4), want_trace=True)
    two = packet.simulate(packet.prepare(s, topo, sz.block_elems, 4), want_trace=True)
    np.testing.assert_array_equal(one.finish, two.finish)
    np.testing.assert_array_equal(one.trace, two.trace)
    assert one.stats == two.stats


def test_packet_csv_is_byte_identical_across_runs(capsys):
    argv = ["sweep", "-t", "switch8", "-a", "ring,in_switch,direct_oneshot", "-b", "1K", "-e", "4M", "-f", "16",
            "--engine", "packet", "--stats", "--format", "csv"]
    outs = []
    for _ in range(2):
        assert main(argv) == 0
        outs.append(capsys.readouterr().out)
    assert outs[0] == outs[1] and outs[0].count("\n") == 1 + 3 * 4


def test_oversubscription_4_halves_alltoall_busbw_or_worse():
    def busbw(os_):
        topo = build_hierarchical("tt", "switch", 4, 400e9, 500e-9, False, "fat_tree", 4, 50e9, 1e-6,
                                  oversubscription=os_)
        return both("direct", "all_to_all", topo, 4 * MIB)[2]
    assert busbw(4) <= 0.5 * busbw(1)


def test_a_small_reduction_table_slows_in_switch_allreduce():
    """Little's law: E entries each held for about one hop latency plus a packet time let at most
    E * mtu / (latency + mtu / B) through: 2 entries -> ~14 GB/s per rank instead of 50. The push form
    passes every byte through the table once; NVLS (the default) reduces through it and multicasts
    through it again, so it takes twice as long."""
    small_table = switch8(packet=PacketParams(reduction_table_entries=2))
    default = both("in_switch:mode=push", "all_reduce", switch8(), 64 * MIB)
    small = both("in_switch:mode=push", "all_reduce", small_table, 64 * MIB)
    assert default[3]["table_stall_us"] == 0
    assert small[1] > 3 * default[1]
    assert small[3]["table_peak_entries"] == 2 and small[3]["table_stall_us"] > 0
    bound = 2 * 4096 / (500e-9 + 4096 / 50e9)                      # bytes/s through the table
    assert small[1] == pytest.approx(64 * MIB / bound, rel=0.1)
    nvls = both("in_switch", "all_reduce", small_table, 64 * MIB)
    assert nvls[1] == pytest.approx(2 * 64 * MIB / bound, rel=0.1)


def test_few_message_engines_serialise_issue_overheads():
    def t(engines):
        topo = build_flat("s", "switch", 8, 50e9, 500e-9,
                          endpoint=Endpoint(message_engines=engines, issue_overhead=1e-6))
        return both("direct", "all_to_all", topo, 64 << 10)
    a, unlimited, _, _ = t(0)
    one = t(1)[1]
    assert unlimited == pytest.approx(a, rel=1e-9)                 # one overhead, all PUTs in parallel, as analytic
    # one engine: each of the 7 PUTs (8 KiB = 2 packets) waits for the previous one's last packet to
    # leave, then its own overhead; the last one then sends its 2 packets and crosses the switch
    pkt = 4096 / 50e9
    assert one == pytest.approx(7 * 1e-6 + 6 * pkt + 2 * pkt + 1e-6, rel=1e-9)


def test_reduction_bandwidth_bounds_reduce_on_arrival():
    topo = build_flat("s", "switch", 8, 50e9, 500e-9, endpoint=Endpoint(reduction_bandwidth=25e9))
    a, p, _, _ = both("direct", "reduce_scatter", topo, 8 * MIB)
    # 7 blocks of 1 MiB reduced into each rank at 25 GB/s (half the link rate: twice the plain time)
    assert a == pytest.approx(500e-9 * 2 + 7 * MIB / 25e9, rel=1e-9)
    assert p == pytest.approx(a, rel=0.03)                          # the packet engine agrees


def test_a_point_over_the_memory_budget_is_refused_with_advice():
    s = compile_for("ring", "all_reduce", switch8(), 64 * MIB)
    prob = packet.prepare(s, switch8(), C.sizing("all_reduce", 64 * MIB, 4, 8).block_elems, 4)
    with pytest.raises(ConfigError, match="larger mtu"):
        packet.simulate(prob, budget=1 << 10)


def test_trace_is_chrome_json_with_rank_and_link_tracks(tmp_path, capsys):
    path = tmp_path / "t.json"
    assert main(["sweep", "-t", "switch8", "-a", "ring", "-b", "64K", "-e", "64K", "--trace", str(path)]) == 0
    doc = json.loads(path.read_text())
    names = {e["args"]["name"] for e in doc["traceEvents"] if e["ph"] == "M" and e["name"] == "thread_name"}
    assert "r0 engine 0" in names and any(n.startswith("link ") for n in names)
    spans = [e for e in doc["traceEvents"] if e["ph"] == "X"]
    assert spans and all(e["dur"] >= 0 for e in spans)
    assert max(e["ts"] + e["dur"] for e in spans) == pytest.approx(doc["otherData"]["time_us"], rel=1e-9)
    assert "wrote a packet-engine trace" in capsys.readouterr().err


def test_concurrent_collectives_slow_each_other_only_where_they_share_links():
    fabric = build_flat("f", "switch", 16, 50e9, 500e-9)
    group = build_flat("g", "switch", 8, 50e9, 500e-9)
    s = compile_for("ring", "all_reduce", group, 8 * MIB)
    e = C.sizing("all_reduce", 8 * MIB, 4, 8).block_elems
    (alone,), _ = packet.simulate_concurrent([packet.Job(s, e)], fabric)
    apart, _ = packet.simulate_concurrent([packet.Job(s, e, ranks=tuple(range(8))),
                                           packet.Job(s, e, ranks=tuple(range(8, 16)))], fabric)
    same, _ = packet.simulate_concurrent([packet.Job(s, e), packet.Job(s, e)], fabric)
    assert apart == [alone, alone]                                  # disjoint ranks share no link
    assert all(1.8 * alone < t < 2.05 * alone for t in same)        # same ranks: each gets half the links
    with pytest.raises(ConfigError, match="distinct ranks"):
        packet.simulate_concurrent([packet.Job(s, e, ranks=(0,) * 8)], fabric)


@pytest.mark.parametrize("preset", ["switch8", "ring8", "torus-4x4", "dgx-h100", "two-tier-128", "h100-cluster",
                                    "mtia300-rack"])
def test_every_preset_and_algorithm_runs_on_the_packet_engine(preset):
    """Small sizes, every algorithm: multi-hop paths through ranks (torus), two tiers, in-switch jobs."""
    from hcclsim.network.config import load_topology
    from hcclsim.sweeping.sweep import sweep

    rows = sweep(load_topology(preset), ["all_reduce", "all_gather"], "all", [4096],
                 engine="analytic,packet").rows
    a = rows[rows.engine == "analytic"].set_index(["collective", "algorithm"]).time_us
    p = rows[rows.engine == "packet"].set_index(["collective", "algorithm"]).time_us
    assert len(p) == len(a) > 0 and (p > 0).all()
    assert ((p / a) > 0.5).all() and ((p / a) < 2.0).all()
