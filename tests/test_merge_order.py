"""GPUs that issue a contribution's addresses in different orders, and the full-table rule that cannot
deadlock: a request that finds the table full goes on unmerged (issue 13 item 3; docs/packet.md)."""

import csv
import io

import numpy as np
import pytest
from helpers import compile_for

from hcclsim.cli import main
from hcclsim.core.errors import ConfigError
from hcclsim.engine import packet
from hcclsim.network.config import load_topology
from hcclsim.network.params import Endpoint, PacketParams
from hcclsim.network.topology import build_flat
from hcclsim.schedule import collectives as C

MIB = 1 << 20
B, A, MTU = 50e9, 500e-9, 4096          # 50 GB/s links (20 ps per byte, exact), 500 ns per hop, 4 KiB packets


def push_all_reduce(size, ranks=8, **packet_keys):
    """The packet run of the push in-switch AllReduce on one reducing switch, and its topology."""
    topo = build_flat("sw", "switch", ranks, B, A, in_switch_reduce=True, packet=PacketParams(**packet_keys))
    s = compile_for("in_switch:mode=push", C.ALL_REDUCE, topo, size)
    e = C.sizing(C.ALL_REDUCE, size, 4, ranks).block_elems
    return packet.simulate(packet.prepare(s, topo, e, 4)), topo


def bytes_down(run, topo):
    """Bytes each switch -> rank link carried (its busy time at 20 ps per byte)."""
    down = (topo.link_src >= topo.nranks) & (topo.link_dst < topo.nranks)
    return np.rint(run.link_busy[down] * B).astype(np.int64)


@pytest.mark.parametrize("order", ["aligned", "rotated", "shuffled"])
@pytest.mark.parametrize("ranks", [2, 4])
@pytest.mark.parametrize("entries", [1, 2, 3, 4])
def test_bypassed_requests_counted_by_hand(order, ranks, entries):
    """32 KiB: one transfer of npk = 8 packets per rank. A rank asks for packet 0's and 1's entries at 0, for
    packet i's at (i-1) T (T = 81.92 ns, as packet i-1 starts), the last at 6 T = 492 ns; no entry is freed
    before 582 ns (packet 0 in: T + 500 ns). So the first `entries` addresses asked for hold the table, the
    N-1 other requests for each merge, and every other request, N (npk - entries) of them, bypasses,
    whatever the order. Each bypassed request reaches every rank once; an address with an entry sends its
    merged result once more: entries + N (npk - entries) packets down each link, npk up. Caught when broken
    (run on patched kernels): pieces not sent on give too few bytes down; the last piece of an address
    whose requests all bypassed sent as a piece and then as a result gives npk - entries packets more."""
    npk = 8
    run, topo = push_all_reduce(npk * MTU, ranks, merge_order=order, reduction_table_entries=entries,
                                table_full="bypass")
    bypassed = ranks * (npk - entries)
    assert run.stats["table_bypass"] == bypassed and run.stats["table_stall_us"] == 0
    assert run.stats["table_peak_entries"] == entries
    assert (run.finish >= 0).all()
    assert (bytes_down(run, topo) == (entries + bypassed) * MTU).all()
    up = (topo.link_src < topo.nranks) & (topo.link_dst >= topo.nranks)
    assert (np.rint(run.link_busy[up] * B) == npk * MTU).all()


def test_the_orders_by_rank():
    """rotated: rank r of N starts its npk packets at r npk / N; shuffled: a permutation per transfer from
    merge_seed; aligned: no order arrays at all (the kernel's default path)."""
    def order(kind, seed=0):
        topo = build_flat("sw", "switch", 4, B, A, in_switch_reduce=True,
                          packet=PacketParams(merge_order=kind, merge_seed=seed))
        s = compile_for("in_switch:mode=push", C.ALL_REDUCE, topo, 8 * MTU)
        p = packet.prepare(s, topo, C.sizing(C.ALL_REDUCE, 8 * MTU, 4, 4).block_elems, 4)
        return [p.addr[p.addr_ptr[x]:p.addr_ptr[x] + 8].tolist() for x in range(4)]   # transfers 0-3: ranks 0-3
    assert order("rotated") == [[0, 1, 2, 3, 4, 5, 6, 7], [2, 3, 4, 5, 6, 7, 0, 1], [4, 5, 6, 7, 0, 1, 2, 3],
                                [6, 7, 0, 1, 2, 3, 4, 5]]
    shuffled = order("shuffled")
    assert all(sorted(a) == list(range(8)) for a in shuffled) and shuffled == order("shuffled")
    assert shuffled != order("shuffled", seed=1) and len({tuple(a) for a in shuffled}) == 4
    topo = build_flat("sw", "switch", 4, B, A, in_switch_reduce=True)
    s = compile_for("in_switch:mode=push", C.ALL_REDUCE, topo, 8 * MTU)
    assert len(packet.prepare(s, topo, C.sizing(C.ALL_REDUCE, 8 * MTU, 4, 4).block_elems, 4).addr) == 0


def test_an_uncoordinated_order_costs_a_small_table_throughput():
    """CAIS's claim, on switch8 at 1 MiB (32 transfers of 8 packets per rank): rotated needs 16 entries, the
    aligned order 9. Below 16 the rotated run bypasses and slows, more the smaller the table (the pieces
    fill the downlinks); the aligned one with 9 entries loses nothing."""
    def run(order, entries):
        r, _ = push_all_reduce(MIB, merge_order=order, reduction_table_entries=entries, table_full="bypass")
        return r.time, r.stats
    full_aligned, s = run("aligned", 1024)
    assert s["table_peak_entries"] == 9
    full_rotated, s = run("rotated", 1024)
    assert s["table_peak_entries"] == 16 and s["table_bypass"] == 0
    assert run("aligned", 9) == (full_aligned, run("aligned", 1024)[1])
    times, bypassed = zip(*((t, s["table_bypass"]) for t, s in (run("rotated", e) for e in (16, 9, 4))))
    assert times[0] == full_rotated and bypassed[0] == 0
    assert times[0] < times[1] < times[2] and 0 < bypassed[1] < bypassed[2]
    assert times[1] > 2 * full_aligned


def test_pieces_of_a_split_address_are_reduced_at_the_destination():
    """With one entry on 2 ranks, 14 of each rank's 15 packets down are pieces of split addresses (as counted
    above). Reduced for free, the downlink never idles from the first piece on: 2 hops and 16 packet times
    T. Reduced on arrival at 10 GB/s (R = 409.6 ns a packet; the push AllReduce's results are plain writes,
    so without bypass nothing is reduced), the pieces queue for the reduction unit from the first one's
    arrival, 2 hops and 2 T: 14 R after it. Caught when broken (patched): pieces written, not reduced, give
    the free time."""
    def run(endpoint):
        topo = build_flat("sw", "switch", 2, B, A, in_switch_reduce=True, endpoint=endpoint,
                          packet=PacketParams(merge_order="rotated", reduction_table_entries=1, table_full="bypass"))
        s = compile_for("in_switch:mode=push", C.ALL_REDUCE, topo, 8 * MTU)
        return packet.simulate(packet.prepare(s, topo, C.sizing(C.ALL_REDUCE, 8 * MTU, 4, 2).block_elems, 4)).time
    free, slow = run(Endpoint()), run(Endpoint(reduction_bandwidth=10e9))
    T, R = MTU / B, MTU / 10e9
    assert free == pytest.approx(2 * A + 16 * T, rel=1e-9)
    assert slow == pytest.approx(2 * A + 2 * T + 14 * R, rel=1e-9)


def test_the_wait_rule_deadlocks_when_the_orders_differ(capsys):
    """Waiting for an entry: on 2 ranks with one entry, rank 0 holds packet 0's entry and waits for one for
    packet 1; rank 1, which starts at packet 4, waits too, before it reaches packet 0. Refused as bad input,
    naming the fix; the aligned order with the same table does not deadlock. Caught when broken (patched
    kernel): without its count of blocked transfers the point ends as an internal error, exit 3."""
    argv = ["sweep", "-t", "switch8", "--set", "ranks=2", "--set", "in_switch_reduce=true", "--set",
            "reduction_table_entries=1", "-c", "all_reduce", "-a", "in_switch:mode=push", "-b", "32K", "-e", "32K",
            "--engine", "packet"]
    assert main(argv) == 0
    capsys.readouterr()
    assert main([*argv, "--set", "merge_order=rotated"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("hccl-bench: error: --engine packet: 2 transfers wait for ever")
    assert 'table_full = "bypass"' in err[0]
    assert main([*argv, "--set", "merge_order=rotated", "--set", "table_full=bypass", "--stats",
                 "--format", "csv"]) == 0
    [row] = csv.DictReader(io.StringIO(capsys.readouterr().out))
    assert row["table_bypass"] == str(2 * (8 - 1))                     # as counted by hand above


@pytest.mark.parametrize("item,expect", [
    ("merge_order=sideways", "merge_order: unknown merge_order 'sideways'"),
    ("table_full=drop", "table_full: unknown table_full 'drop'"),
    ("merge_seed=-1", "merge_seed: expected a whole number >= 0, got -1"),
])
def test_the_keys_are_checked(item, expect):
    with pytest.raises(ConfigError, match=expect):
        load_topology("dgx-h100", [item])
    tier = load_topology("dgx-h100", ["merge_order=shuffled", "merge_seed=3", "table_full=bypass"]).tiers[0].packet
    assert (tier.merge_order, tier.merge_seed, tier.table_full) == ("shuffled", 3, "bypass")


def test_the_cais_study_shows_the_cost_in_the_chunked_nvls_layer():
    """scenarios/cais-tp-layer.toml, section merge-order, its nvls variant (the cais one is the same run with
    fused collectives, docs/studies/cais-tp-layer.md): a larger table never hurts; with 64 entries the
    coordinated order loses nothing against 1024, the uncoordinated one loses; at 32 both lose."""
    import tomllib
    from pathlib import Path

    from hcclsim.studies.workload.section import run_section
    path = Path(__file__).resolve().parents[1] / "scenarios" / "cais-tp-layer.toml"
    [section] = [t for t in tomllib.loads(path.read_text(encoding="utf-8"))["workload"] if t["name"] == "merge-order"]
    section["variant"] = [v for v in section["variant"] if v["name"] == "nvls"]
    t = run_section(section, "merge-order").set_index(["merge_order", "reduction_table_entries"]).layer_us
    for order in ("aligned", "rotated"):
        assert t[order, 32] > t[order, 64] >= t[order, 1024]
    assert t["rotated", 32] > t["aligned", 32]
    assert t["aligned", 64] == t["aligned", 1024] < t["rotated", 64]


def links(run, topo):
    """(bytes up each rank -> switch link, bytes down each switch -> rank link)."""
    up = (topo.link_src < topo.nranks) & (topo.link_dst >= topo.nranks)
    return np.rint(run.link_busy[up] * B).astype(np.int64), bytes_down(run, topo)


@pytest.mark.parametrize("spec", ["in_switch:chunks=1", "in_switch:mode=push:chunks=1"])
@pytest.mark.parametrize("coll", [C.ALL_REDUCE, C.REDUCE_SCATTER, C.ALL_GATHER])
def test_every_in_switch_schedule_completes_in_any_order(spec, coll):
    """4 ranks, 128 KiB, one chunk (contributions of 8 packets; NVLS's AllReduce has a multicast job per
    shard besides its reductions, AllGather only multicasts). With a table that never fills, any order
    moves exactly the aligned order's bytes over every link and bypasses nothing; with 2 entries and
    bypass every request still goes up once, more goes down where requests merge (pieces), and a
    multicast, which merges nothing, sends its one packet per address whatever the table."""
    topo = build_flat("sw", "switch", 4, B, A, in_switch_reduce=True)
    s = compile_for(spec, coll, topo, 128 << 10)
    e = C.sizing(coll, 128 << 10, 4, 4).block_elems

    def run(**keys):
        t = build_flat("sw", "switch", 4, B, A, in_switch_reduce=True, packet=PacketParams(**keys))
        r = packet.simulate(packet.prepare(s, t, e, 4))
        assert (r.finish >= 0).all()
        return r, links(r, t)
    _, (up, down) = run()
    for order in ("rotated", "shuffled"):
        r, (u, d) = run(merge_order=order)
        assert r.stats["table_bypass"] == 0 and (u == up).all() and (d == down).all()
        r, (u, d) = run(merge_order=order, reduction_table_entries=2, table_full="bypass")
        assert (u == up).all() and (d >= down).all() and r.stats["table_bypass"] > 0
        assert (d == down).all() == (coll == C.ALL_GATHER)
