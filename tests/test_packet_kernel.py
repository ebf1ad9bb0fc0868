"""The packet kernel's event order and the events it does not queue (packet_kernel's docstring), on
points small enough to time by hand: 4 KiB packets at 50 GB/s take t = 81.92 ns on a link, a hop
takes 500 ns more."""

import numpy as np
import pytest
from helpers import compile_for

from hcclsim.engine import packet
from hcclsim.engine import packet_kernel as K
from hcclsim.engine.calendar import MAX_RUNS, _sort
from hcclsim.network.params import PacketParams
from hcclsim.network.topology import build_flat
from hcclsim.schedule import Layout, ScheduleBuilder, const
from hcclsim.schedule import collectives as C

T, HOP = 4096 / 50e9, 500e-9


def saf_switch(n, **kw):
    return build_flat("s", "switch", n, 50e9, 500e-9, packet=PacketParams(switching="store_and_forward", **kw))


def into_rank0(*senders):
    """One 4 KiB PUT from each sender to rank 0, all in one group, in this order (4 ranks)."""
    b = ScheduleBuilder("all_gather", "hand", 4, (1, 4), Layout(4, 1))
    g = b.next_group()
    for src in senders:
        b.op(src=const(src), dst=const(0), schunk=const(src), dchunk=const(src), group=g)
    return b.build()


@pytest.mark.parametrize("senders", [(3, 1), (1, 3)])
def test_packets_arriving_at_once_go_on_in_the_order_of_their_links(senders):
    """Both packets reach the switch at t + 500 ns, over rank 1's link (1) and rank 3's (3): the port to
    rank 0 sends rank 1's first, whatever the schedule's order, and rank 3's one packet time later."""
    topo = saf_switch(4)
    assert [topo.route(1, 0)[0], topo.route(3, 0)[0]] == [1, 3]
    run = packet.simulate(packet.prepare(into_rank0(*senders), topo, 1024, 4))
    finish = dict(zip(senders, run.finish / 1e12))
    assert finish[1] == pytest.approx(2 * (T + HOP), rel=1e-12)
    assert finish[3] == pytest.approx(2 * (T + HOP) + T, rel=1e-12)


@pytest.mark.parametrize("buffer,want", [(4096, 663.84e-9 + 2 * (T + HOP)), (8192, 600e-9 + 2 * (T + HOP))])
def test_a_sender_waiting_for_credit_at_a_quiet_port_goes_when_the_port_frees(buffer, want):
    """Rank 1's packet leaves the switch over [t + 500 ns, 2t + 500 ns] = [581.92, 663.84] ns with no
    packet queued behind it (its port frees without a queued event). Rank 3, released at 600 ns, finds
    that port's one-packet buffer still holding it and waits for its credit until 663.84 ns; with room
    for two it goes at once."""
    prob = packet.prepare(into_rank0(1, 3), saf_switch(4, switch_buffer=buffer), 1024, 4)
    run = packet.simulate(prob.with_noise(np.array([0, 0, 0, 600e-9]), None))
    assert run.finish[0] / 1e12 == pytest.approx(2 * (T + HOP), rel=1e-12)
    assert run.finish[1] / 1e12 == pytest.approx(want, rel=1e-12)


def test_a_contention_free_ring_queues_two_events_per_packet():
    """Ring AllReduce of 1 MiB on 8 ranks: 14 steps of 8 transfers of 32 packets, 2 hops each. The model
    has 4 events per packet (2 port frees, 2 arrivals) and one 'has left' event per transfer of the
    first 13 steps: 14 x 8 x 32 x 4 + 13 x 8 = 14440. Queued: a transfer's 32 arrivals at the switch,
    the last packet's at its destination, 31 frees of the rank's port (a packet waits behind each but
    the last), the 104 'has left' events: 14 x 8 x 64 + 104 = 7272."""
    topo = saf_switch(8)
    s = compile_for("ring", "all_reduce", topo, 1 << 20)
    prob = packet.prepare(s, topo, C.sizing("all_reduce", 1 << 20, 4, 8).block_elems, 4)
    _, _, _, stats, _ = K.packet_kernel(*prob.args(False))
    assert (stats[K.S_EVENTS], stats[K.S_QUEUED]) == (14440, 7272)


@pytest.mark.parametrize("runs", [1, 2, 3, MAX_RUNS, MAX_RUNS + 1, 300])
def test_a_bucket_of_runs_sorts(runs):
    """_sort merges up to MAX_RUNS ascending runs and quicksorts more; ties (equal keys) included."""
    rng = np.random.default_rng(runs)
    keys = np.concatenate([np.sort(rng.integers(0, 50, rng.integers(1, 40))) for _ in range(runs)])
    a = np.concatenate([[7, 7], keys, [5]]).astype(np.int64)            # sorted in place between 2 and -1
    _sort(a, 2, 2 + len(keys), np.empty(len(keys), np.int64), np.empty(128, np.int64))
    assert a[:2].tolist() == [7, 7] and a[-1] == 5
    assert a[2:-1].tolist() == sorted(keys.tolist())
