"""The switch's merge table on the packet engine: occupancy from the GPUs' spread, stalls, relays (issue 13)."""

import math

import pytest
from helpers import compile_for

from hcclsim.core.errors import ConfigError
from hcclsim.engine import analytic, packet
from hcclsim.network.config import load_topology
from hcclsim.network.params import PacketParams
from hcclsim.network.topology import build_flat
from hcclsim.schedule import collectives as C

MIB = 1 << 20
B, A, MTU = 50e9, 500e-9, 4096          # switch8: 50 GB/s links, 500 ns per hop, 4 KiB packets


def push_all_reduce(size=MIB, **packet_keys):
    """(packet seconds, stats) of the push in-switch AllReduce on an 8-rank reducing switch."""
    topo = build_flat("switch8", "switch", 8, B, A, in_switch_reduce=True, packet=PacketParams(**packet_keys))
    s = compile_for("in_switch:mode=push", C.ALL_REDUCE, topo, size)
    t = packet.run(s, topo, [C.sizing(C.ALL_REDUCE, size, 4, 8).block_elems], 4)
    return t.time[0], {k: v[0] for k, v in t.stats.items()}


def need(spread):
    """Entries in use at once, by hand: the first rank reserves packet k's entry when k joins its port's
    queue, as k-1 starts serialising; the entry is freed when the last rank's packet k is in, spread
    later: 2 packet times, one hop and the spread, over one packet time between entries."""
    packet_time = MTU / B
    return math.ceil((spread + A + 2 * packet_time) / packet_time)


@pytest.mark.parametrize("spread", [0.0, 2e-6])
def test_occupancy_follows_the_spread(spread):
    """Coordinated (spread 0): 9 entries; 2 us apart: 24 more (B x spread / mtu). Caught when broken (run
    on a patched kernel): a table never freed holds every packet (256); one freed at the first
    contribution misses the spread (31 at 2 us)."""
    _, stats = push_all_reduce(merge_spread=spread)
    assert stats["table_peak_entries"] == need(spread)
    assert stats["table_stall_us"] == 0
    assert need(0) == 9 and need(2e-6) == 33


def test_a_table_below_the_need_stalls_and_slows_and_above_it_costs_nothing():
    """Little's law below the need: a rank waiting for an entry has an idle port, so an entry is held one
    packet time and one hop: 4 entries of 4 KiB per 582 ns = 28 GB/s instead of 50 (plus the last
    multicast, under 1 us); at the need or above, the time does not move. A table never freed would deadlock here (4 of
    the 256 entries this run needs), which the engine reports as an error."""
    full = push_all_reduce()[0]
    at_need = push_all_reduce(reduction_table_entries=need(0))[0]
    small, stats = push_all_reduce(reduction_table_entries=4)
    assert at_need == pytest.approx(full, rel=1e-9)
    assert stats["table_peak_entries"] == 4 and stats["table_stall_us"] > 0
    bound = 4 * MTU / (A + MTU / B)
    assert small == pytest.approx(MIB / bound, rel=0.05)


def test_an_uncoordinated_table_between_the_two_needs_only_throttles_the_leaders():
    """With the spread, ranks ahead wait for entries (stalls), but the last rank finds every entry
    reserved and sets the pace: the time is the coordinated one plus the spread, whatever the table
    between the two needs (the model's limit, docs/packet.md)."""
    spread = 2e-6
    coordinated = push_all_reduce()[0]
    for entries in (need(0), 16, need(spread)):
        t, stats = push_all_reduce(merge_spread=spread, reduction_table_entries=entries)
        assert t == pytest.approx(coordinated + spread, rel=1e-3)
        assert (stats["table_stall_us"] > 0) == (entries < need(spread))


def test_a_switch_that_only_relays_takes_no_table_entry():
    """striped's NIC path (a PUT into the leaf, the leaf's send on) on 32 chips of mtia300-rack: the leaf
    merges nothing, so even a one-entry table never stalls it, and the engines agree. Message engines
    unlimited: with the preset's 16, 31 scale-up PUTs and a NIC round queue for engines in the packet
    engine only (1.5x at 64 MiB, not the table)."""
    topo = load_topology("mtia300-rack", ["scale_up.ranks=32", "scale_out.domains=1", "endpoint.message_engines=0",
                                          "scale_out.reduction_table_entries=1"])
    size = 4 * MIB
    s = compile_for("striped:nic=0.25", C.ALL_REDUCE, topo, size)     # a quarter through the leaf
    e = C.sizing(C.ALL_REDUCE, size, 4, 32).block_elems
    p = packet.run(s, topo, [e], 4)
    assert p.stats["table_peak_entries"][0] == 0 and p.stats["table_stall_us"][0] == 0
    assert p.time[0] == pytest.approx(analytic.run(s, topo, [e], 4).time[0], rel=0.03)


def test_merge_spread_is_a_time_key_of_a_tier():
    assert load_topology("dgx-h100", ["merge_spread=2us"]).tiers[0].packet.merge_spread == pytest.approx(2e-6)
    assert load_topology("mtia300-rack", ["scale_up.merge_spread=1.5us"]).tiers[0].packet.merge_spread \
        == pytest.approx(1.5e-6)
    with pytest.raises(ConfigError, match="merge_spread"):
        load_topology("dgx-h100", ["merge_spread=fast"])


def test_skew_spreads_the_requests_as_merge_spread_does(capsys):
    """The spread can come from noise instead of a key: with --skew S each rank starts its transfers at its own
    arrival, uniform within S of the first, so the table holds more than the coordinated 9 entries and at
    most what a spread of S needs (33 at 2 us: the first and last arrivals are at most S apart)."""
    import csv
    import io

    from helpers import run_cli

    def peak(*noise):
        status, out, err = run_cli(capsys, "sweep", "-t", "switch8", "--set", "in_switch_reduce=true", "-a",
                                   "in_switch:mode=push", "-b", "1M", "-e", "1M", "--engine", "packet", "--stats",
                                   "--format", "csv", "-q", *noise)
        assert status == 0, err
        return int(next(csv.DictReader(io.StringIO(out)))["table_peak_entries"])

    assert peak() == need(0) == 9
    assert need(0) < peak("--skew", "2us", "--iters", "3", "--seed", "1") <= need(2e-6)
