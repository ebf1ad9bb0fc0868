"""The execution model (hcclsim.engine.execution, docs/execution.md): launch, compiled-collective costs, protocol,
offload vs SM reduction, and noisy iterations (skew, jitter, percentiles)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
from helpers import assert_one_line_error, compile_for, run_cli

from hcclsim import api
from hcclsim.engine import analytic, packet
from hcclsim.engine.execution import PERCENTILE_COLUMNS, QUIET, Noise, channels, device_topology
from hcclsim.engine.execution import run as run_exec
from hcclsim.network.config import load_topology
from hcclsim.network.params import Endpoint
from hcclsim.network.topology import build_flat
from hcclsim.schedule import collectives as C

MIB = 1 << 20
N, B, ALPHA = 8, 50e9, 1e-6          # 8 ranks on one switch, 50 GB/s, 0.5 us per hop = 1 us per path


def switch(**endpoint):
    return build_flat("s", "switch", N, B, ALPHA / 2, in_switch_reduce=True, endpoint=Endpoint(**endpoint))


def timed(spec, coll, topo, size, engine="analytic", launch="host", noise=QUIET):
    """seconds[iters] of one point through the execution model."""
    s = compile_for(spec, coll, topo, size)
    sz = C.sizing(coll, size, 4, topo.nranks)
    run = analytic.run if engine == "analytic" else packet.run
    samples, _, _ = run_exec(run, s, topo, [sz.block_elems], 4, launch, noise, [sz.size_bytes])
    return samples[:, 0]


def ring_allreduce(size, alpha=ALPHA, bw=B, per_step=0.0):
    return 2 * (N - 1) * (alpha + per_step + size / N / bw)


# ------------------------------------------------------------------------------------------- launch

@pytest.mark.parametrize("spec,coll", [("ring", "all_reduce"), ("tree", "all_reduce"), ("in_switch", "all_reduce"),
                                       ("direct_oneshot", "all_reduce"), ("direct", "all_to_all"),
                                       ("ring", "all_gather"), ("tree", "broadcast")])
@pytest.mark.parametrize("engine", ["analytic", "packet"])
def test_device_triggered_is_faster_by_exactly_the_launch_overhead(spec, coll, engine):
    topo = switch(launch_overhead=5e-6)
    host = timed(spec, coll, topo, 256 << 10, engine, "host")[0]
    device = timed(spec, coll, topo, 256 << 10, engine, "device")[0]
    assert host - device == pytest.approx(5e-6, abs=1e-15)
    assert device == timed(spec, coll, switch(), 256 << 10, engine)[0]   # device: the network alone


def test_launch_difference_through_the_command(capsys):
    def time_us(launch):
        status, out, err = run_cli(capsys, "sweep", "-t", "switch8", "-a", "ring", "-b", "1K", "-e", "1K",
                                   "--set", "endpoint.launch_overhead=7us", "--launch", launch, "--format", "csv")
        assert status == 0, err
        return float(out.splitlines()[1].split(",")[9])
    assert time_us("host") - time_us("device") == pytest.approx(7.0, abs=1e-6)


@pytest.mark.parametrize("engine", ["analytic", "packet"])
@pytest.mark.parametrize("size", [1024, 64 * MIB])
@pytest.mark.parametrize("gpus,iters", [(1, 20), (8, 20), (8, 1), (8, 3), (2, 100)])
def test_a_loop_is_timed_as_nccl_tests_times_it(engine, size, gpus, iters):
    """nccl-tests times N back-to-back iterations from the first launch to the last collective's end: each
    iteration costs max(D, H) and the shorter of the two is paid once more in the window (D the collective's
    device time, H = G x 7 us, the host's G launches; src/common.cu BenchTime). 1 KiB: D (~15 us) under H
    for G = 8; 64 MiB: D (~2.6 ms on 50 GB/s) over it."""
    topo = switch(launch_overhead=7e-6)
    launch = f"loop:{gpus}:n={iters}"
    d = timed("ring", "all_reduce", topo, size, engine, "device")[0]
    assert d == pytest.approx(ring_allreduce(size), rel=1e-9)
    h = gpus * 7e-6
    got = timed("ring", "all_reduce", topo, size, engine, launch)[0]
    assert got == pytest.approx(max(d, h) + min(d, h) / iters, rel=1e-12)
    if iters == 1:                  # one iteration overlaps nothing: its launches, then its collective
        assert got == pytest.approx(d + h, rel=1e-12)


def test_a_loop_of_more_gpus_than_ranks_is_refused(capsys):
    status, out, err = run_cli(capsys, "sweep", "-t", "switch8", "-a", "ring", "-b", "1K", "-e", "1K",
                               "--launch", "loop:9")
    assert_one_line_error(status, out, err, "--launch: 'loop:9' has one host thread driving 9 GPUs, but switch8 "
                                            "has 8 ranks; expected G <= 8")


def test_a_loop_defaults_to_nccl_tests_20_iterations():
    topo = switch(launch_overhead=7e-6)
    assert timed("ring", "all_reduce", topo, 1024, launch="loop:8")[0] == \
        timed("ring", "all_reduce", topo, 1024, launch="loop:8:n=20")[0]
    assert timed("ring", "all_reduce", topo, 1024, launch="loop")[0] == \
        timed("ring", "all_reduce", topo, 1024, launch="loop:1:n=20")[0]


# -------------------------------------------------------------------------------- compiled-collective costs

def test_exposed_host_and_control_core_costs_add_up():
    base = timed("ring:channels=2", "all_reduce", switch(), MIB)[0]
    topo = switch(graph_generation=3e-6, metadata_copy=2e-6, subgraph_schedule=1e-6)
    assert channels(compile_for("ring:channels=2", "all_reduce", topo)) == 2
    assert timed("ring:channels=2", "all_reduce", topo, MIB)[0] == pytest.approx(base + 3e-6 + 2e-6 + 2 * 1e-6,
                                                                                  abs=1e-15)


def test_hidden_costs_cost_only_what_the_collective_cannot_cover():
    topo = switch(graph_generation=30e-6, metadata_copy=20e-6, hidden=("graph_generation", "metadata_copy"))
    small, large = 1 << 10, 64 * MIB
    assert timed("ring", "all_reduce", switch(), small)[0] < 50e-6 < timed("ring", "all_reduce", switch(), large)[0]
    assert timed("ring", "all_reduce", topo, small)[0] == pytest.approx(50e-6, abs=1e-15)   # the host is slower
    assert timed("ring", "all_reduce", topo, large)[0] == timed("ring", "all_reduce", switch(), large)[0]


def test_issue_overhead_is_one_more_alpha_per_step_in_both_engines():
    o = 2e-6
    topo = switch(issue_overhead=o)
    for symmetric in (None, False):
        s = compile_for("ring", "all_reduce", topo, 4 * MIB)
        t = analytic.run(s, topo, [C.sizing("all_reduce", 4 * MIB, 4, N).block_elems], 4, symmetric=symmetric).time[0]
        assert t == pytest.approx(ring_allreduce(4 * MIB, per_step=o), rel=1e-12)
    assert timed("ring", "all_reduce", topo, 4 * MIB, "packet")[0] == pytest.approx(
        ring_allreduce(4 * MIB, per_step=o), rel=0.03)
    hidden = switch(issue_overhead=o, hidden=("issue_overhead",))      # work-queue elements prepared ahead
    assert timed("ring", "all_reduce", hidden, 4 * MIB)[0] == pytest.approx(ring_allreduce(4 * MIB), rel=1e-12)


def test_a_local_zero_byte_wait_issues_nothing_in_either_engine():
    """direct_twoshot's wait between its two steps is a zero-byte op of a rank to itself (no link): it costs
    no issue overhead, so the time is two steps of o + alpha + (N-1) (S/N) / B. The analytic engine charged
    it a third o, the packet engine never did."""
    o, size = 1e-6, 8 * MIB
    topo = switch(issue_overhead=o)
    want = 2 * (o + ALPHA + (N - 1) * size / N / B)
    for symmetric in (None, False):
        s = compile_for("direct_twoshot", "all_reduce", topo, size)
        t = analytic.run(s, topo, [C.sizing("all_reduce", size, 4, N).block_elems], 4, symmetric=symmetric).time[0]
        assert t == pytest.approx(want, rel=1e-12)
    assert timed("direct_twoshot", "all_reduce", topo, size, "packet")[0] == pytest.approx(want, rel=1e-9)


def test_an_empty_collective_costs_nothing_where_a_library_runs_it():
    """NCCL drops a collective of count 0 before planning or launching it (src/enqueue.cc:2554-2555). The real
    input: Together's NCCL 2.26.2 AllGather log prints its size-0 rows (8-64 B on 8 ranks round to 0 per rank)
    at 0.89-0.94 us, the host's call alone, and its 128 B-1 KiB rows at 34.6-34.9 us. Point-to-point operations are kept
    when empty (AllToAll's sends still synchronise), and a fabric with no library (protocol none) keeps the
    alpha-beta price, (N-1) alpha for a ring."""
    log = Path(__file__).parents[1] / "validation/logs/h100_together_220944_all_gather_ring.txt"
    rows = [line.split() for line in log.read_text().splitlines() if line.strip()[:1].isdigit()]
    assert [float(r[5]) for r in rows if int(r[0]) <= 1024] == [0.89, 0.91, 0.94, 0.89, 34.73, 34.88, 34.58, 34.88]
    h100 = load_topology("dgx-h100")
    for engine in ("analytic", "packet"):
        for coll in ("all_gather", "reduce_scatter", "all_reduce", "broadcast", "reduce"):
            small = 16 if coll in ("all_gather", "reduce_scatter") else 0     # 0 bytes either way
            assert timed("ring", coll, h100, small, engine)[0] == 0.0, (coll, engine)
            assert timed("ring", coll, h100, 4096, engine)[0] > 10e-6             # a launch and a latency
        assert timed("direct", "all_to_all", h100, 16, engine)[0] > 10e-6           # 0 per peer: still sent
        assert timed("ring", "all_gather", h100, 16, engine, launch="loop:8")[0] == 0.0
    assert timed("ring", "all_gather", switch(), 16)[0] == pytest.approx((N - 1) * ALPHA, rel=1e-12)


# ------------------------------------------------------------------------------------ where it runs

def test_reduction_bandwidth_of_offload_and_sm_execution():
    red = 10e9                       # slower than the 50 GB/s links: the reduction bounds reduce-scatter
    offload = switch(reduction_bandwidth=red, sm_reduction_bandwidth=40e9)
    sm = switch(reduction_bandwidth=red, sm_reduction_bandwidth=40e9, execution="sm")
    size = 8 * MIB
    ring_rs = lambda bw: (N - 1) * (ALPHA + size / N / bw)
    assert timed("ring", "reduce_scatter", offload, size)[0] == pytest.approx(ring_rs(red), rel=1e-12)
    assert timed("ring", "reduce_scatter", sm, size)[0] == pytest.approx(ring_rs(40e9), rel=1e-12)
    # direct: 7 blocks arrive at once and share the rank's reducer
    assert timed("direct", "reduce_scatter", offload, size)[0] == pytest.approx(ALPHA + 7 * size / N / red, rel=1e-12)
    # the packet engine queues packets at the same reducer
    assert timed("direct", "reduce_scatter", offload, size, "packet")[0] == pytest.approx(
        ALPHA + 7 * size / N / red, rel=0.03)
    # a copy-only collective does not reduce
    assert timed("ring", "all_gather", offload, size)[0] == timed("ring", "all_gather", switch(), size)[0]


def test_symmetric_and_general_paths_agree_with_endpoint_costs():
    topo = switch(issue_overhead=1e-6, reduction_bandwidth=20e9)
    for spec, coll in [("ring", "all_reduce"), ("direct", "reduce_scatter"), ("direct_twoshot", "all_reduce"),
                       ("ring:channels=2:chunks=3", "all_reduce")]:
        s = compile_for(spec, coll, topo, MIB)
        blocks = [C.sizing(coll, x, 4, N).block_elems for x in (1 << 10, MIB, 16 * MIB)]
        a = analytic.run(s, topo, blocks, 4).time
        b = analytic.run(s, topo, blocks, 4, symmetric=False).time
        np.testing.assert_allclose(a, b, rtol=1e-12)


# ----------------------------------------------------------------------------------------- protocol

def test_protocols_trade_latency_for_bandwidth():
    """NCCL's defaults (src/graph/tuning.cc): time = base + 2(N-1)(alpha + step + S/(N B share))."""
    size = 64 * MIB
    none = timed("ring", "all_reduce", switch(), size)[0]
    assert none == pytest.approx(ring_allreduce(size), rel=1e-12)
    assert timed("ring", "all_reduce", switch(protocol="ll"), size)[0] == pytest.approx(
        6.6e-6 + ring_allreduce(size, bw=B / 2), rel=1e-12)
    assert timed("ring", "all_reduce", switch(protocol="ll128"), size)[0] == pytest.approx(
        14e-6 + ring_allreduce(size, bw=B * 0.92, per_step=1.3e-6), rel=1e-12)
    assert timed("ring", "all_reduce", switch(protocol="simple"), size)[0] == pytest.approx(
        8.4e-6 + ring_allreduce(size, per_step=2.8e-6), rel=1e-12)
    # small messages: LL is the fastest real protocol, large ones: Simple
    small = {p: timed("ring", "all_reduce", switch(protocol=p), 1 << 10)[0] for p in ("ll", "ll128", "simple")}
    large = {p: timed("ring", "all_reduce", switch(protocol=p), 256 * MIB)[0] for p in ("ll", "ll128", "simple")}
    assert min(small, key=small.get) == "ll" and min(large, key=large.get) == "simple"


def test_auto_takes_the_fastest_protocol_per_size():
    """protocol = auto: per size, the smallest of the three closed forms above, and the row says which."""
    topo = switch(protocol="auto")
    sizes = [1 << 10, 1 << 20, 4 * MIB, 256 * MIB]
    s = compile_for("ring", "all_reduce", topo, 1 << 20)
    blocks = [C.sizing("all_reduce", x, 4, N).block_elems for x in sizes]
    seconds, _, names = run_exec(analytic.run, s, topo, blocks, 4, "host", QUIET, sizes)
    forms = {"ll": lambda x: 6.6e-6 + ring_allreduce(x, bw=B / 2),
             "ll128": lambda x: 14e-6 + ring_allreduce(x, bw=B * 0.92, per_step=1.3e-6),
             "simple": lambda x: 8.4e-6 + ring_allreduce(x, per_step=2.8e-6)}
    for i, x in enumerate(sizes):
        want = min(forms, key=lambda p: forms[p](x))
        assert names[i] == want and seconds[0, i] == pytest.approx(forms[want](x), rel=1e-12)
    # by hand: LL = LL128 where 14 S (1/(8 x 25e9) - 1/(8 x 46e9)) = 25.6 us, S = 0.80 MB; LL128 = Simple
    # where 14 S (1/(8 x 46e9) - 1/(8 x 50e9)) = 15.4 us, S = 5.06 MB
    assert list(names) == ["ll", "ll128", "ll128", "simple"]


def test_channels_used_follow_nccls_per_call_reduction():
    """nc = clamp(floor(S / channel_bytes), 1, channels); LL's threshold grows with the rank count."""
    from hcclsim.engine.execution import channels_used
    topo = switch(protocol="auto", channels=24)
    sizes = np.array([1, 5120, 64 << 10, 1 << 20, 1 << 30])
    assert channels_used(topo, "ll128", sizes).tolist() == [1, 1, 12, 24, 24]         # 640 threads x 8 B
    assert channels_used(topo, "simple", sizes).tolist() == [1, 1, 2, 24, 24]         # 512 x 64 B
    assert channels_used(topo, "ll", sizes).tolist() == [1, 1, 2, 24, 24]             # 512 x 8 B x 8 ranks
    assert channels_used(switch(protocol="auto"), "ll", sizes).tolist() == [0] * 5    # channels not modelled


def test_per_channel_and_protocol_caps_limit_a_ranks_rate():
    """A rank injects at most min(share x B, bandwidth_cap, channels used x channel_bandwidth)."""
    from hcclsim.network.params import Protocol
    size = 64 * MIB
    capped = switch(protocol="simple", channels=4,
                    simple=Protocol(share=1.0, step_latency=0.0, base_latency=0.0, channel_bandwidth=5e9,
                                    channel_bytes=0))
    assert timed("ring", "all_reduce", capped, size)[0] == pytest.approx(ring_allreduce(size, bw=20e9), rel=1e-12)
    ll = switch(protocol="ll", ll=Protocol(share=0.5, bandwidth_cap=10e9))
    assert timed("ring", "all_reduce", ll, size)[0] == pytest.approx(ring_allreduce(size, bw=10e9), rel=1e-12)


def test_link_efficiency_and_in_switch_costs():
    """The tier's efficiency scales every link; an in-switch collective pays its fixed latency instead of
    the protocol's base and step latencies, and moves at in_switch_efficiency of the links."""
    import dataclasses

    from hcclsim.network.params import PacketParams
    size = 64 * MIB
    eff = switch(protocol="simple")
    eff = dataclasses.replace(eff, tiers=(dataclasses.replace(eff.tiers[0], packet=PacketParams(efficiency=0.5)),))
    assert timed("ring", "all_reduce", eff, size)[0] == pytest.approx(
        8.4e-6 + ring_allreduce(size, bw=B / 2, per_step=2.8e-6), rel=1e-12)
    plain = timed("in_switch", "all_reduce", switch(), size)[0]
    nvls = timed("in_switch", "all_reduce", switch(protocol="auto", in_switch_latency=25e-6), size)[0]
    assert nvls == pytest.approx(25e-6 + plain, rel=1e-12)           # no base, no step latencies
    half = timed("in_switch", "all_reduce", switch(in_switch_efficiency=0.5), size)[0]
    assert half == pytest.approx(timed("in_switch", "all_reduce",
                                       build_flat("s", "switch", N, B / 2, ALPHA / 2, in_switch_reduce=True),
                                       size)[0], rel=1e-12)


def test_device_topology_is_the_topology_itself_without_costs():
    topo = switch()
    assert device_topology(topo) is topo
    ll = switch(protocol="ll")
    assert device_topology(ll).link_bw.max() == B / 2 and ll.link_bw.max() == B


# ------------------------------------------------------------------------------------- skew and jitter

def test_without_noise_every_percentile_is_the_time(capsys):
    status, out, err = run_cli(capsys, "sweep", "-t", "switch8", "-a", "ring", "-b", "1K", "-e", "1M", "-f", "32",
                               "--iters", "5", "--format", "csv")
    assert status == 0, err
    header, *rows = out.splitlines()
    cols = header.split(",")
    assert cols[-5:] == PERCENTILE_COLUMNS
    for row in rows:
        values = row.split(",")
        t = values[cols.index("time_us")]
        assert all(values[cols.index(c)] == t for c in PERCENTILE_COLUMNS), row


def test_the_table_shows_the_spread(capsys):
    status, out, err = run_cli(capsys, "sweep", "-t", "switch8", "-a", "ring", "-b", "1K", "-e", "1K", "--iters", "3",
                               "--jitter", "1us")
    assert status == 0, err
    head = [line.split() for line in out.splitlines()[1:3]]          # the headers: names, then units
    assert {"p95", "max"} <= set(head[0]) and "(us)" in head[1]


def test_resume_keeps_the_percentile_columns(capsys, tmp_path):
    out = tmp_path / "n.csv"
    args = ["sweep", "-t", "switch8", "-b", "1K", "-e", "1M", "--iters", "3", "--jitter", "1us", "-q", "--format", "csv"]
    status, _, err = run_cli(capsys, *args, "-a", "ring", "-o", out)
    assert status == 0, err
    status, _, err = run_cli(capsys, *args, "-a", "ring,tree", "-o", out, "--resume")
    assert status == 0, err
    status, whole, err = run_cli(capsys, *args, "-a", "ring,tree")
    assert status == 0, err
    assert out.read_text() == whole                  # the seeded draws do not depend on what was resumed


def spread(jitter, skew=0.0, seed=1, spec="ring", iters=64):
    t = timed(spec, "all_reduce", switch(), 64 << 10, noise=Noise(iters, skew, jitter, seed))
    p50, p95 = np.percentile(t, [50, 95])
    return t, p50, p95


def test_jitter_orders_percentiles_and_widens_the_spread():
    quiet = timed("ring", "all_reduce", switch(), 64 << 10)[0]
    t1, p50_1, p95_1 = spread(500e-9)
    t2, p50_2, p95_2 = spread(2e-6)
    assert p95_1 >= p50_1 > 0 and p95_2 >= p50_2 > 0
    assert t1.min() > quiet and t2.min() > quiet              # a delay before each of the 14 steps
    assert p95_2 - t2.min() > p95_1 - t1.min()                # 4x the jitter: a wider spread
    assert t2.max() - t2.min() > t1.max() - t1.min()
    # the mean delay adds about 14 x jitter on the critical path or more (it is a max over ranks)
    assert p50_1 - quiet > 14 * 500e-9 * 0.5


def test_noise_is_seeded():
    a, b, c = spread(1e-6, 1e-6, seed=3)[0], spread(1e-6, 1e-6, seed=3)[0], spread(1e-6, 1e-6, seed=4)[0]
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)


def test_skew_delays_a_collective_by_up_to_the_skew():
    quiet = timed("direct_oneshot", "all_reduce", switch(), 64 << 10)[0]
    t = spread(0.0, skew=4e-6, spec="direct_oneshot")[0]
    # one-shot: everyone waits for the last rank to arrive; the first arrival starts the clock
    assert np.all(t >= quiet) and np.all(t <= quiet + 4e-6 + 1e-15)
    assert t.max() - t.min() > 1e-6


@pytest.mark.parametrize("spec,coll", [("ring", "all_reduce"), ("direct_oneshot", "all_reduce"),
                                       ("in_switch", "all_reduce"), ("direct", "all_to_all")])
def test_the_packet_engine_takes_skew_and_jitter_too(spec, coll):
    topo = switch()
    quiet = timed(spec, coll, topo, 64 << 10, "packet")[0]
    skewed = timed(spec, coll, topo, 64 << 10, "packet", noise=Noise(8, 3e-6, 0.0, 5))
    assert np.all(skewed >= quiet - 1e-12) and np.all(skewed <= quiet + 3e-6 + 1e-12) and skewed.max() > quiet
    small = timed(spec, coll, topo, 64 << 10, "packet", noise=Noise(16, 0.0, 250e-9, 5))
    large = timed(spec, coll, topo, 64 << 10, "packet", noise=Noise(16, 0.0, 1e-6, 5))
    assert np.all(small > quiet) and np.median(large) > np.median(small)
    assert large.max() - large.min() > small.max() - small.min()
    again = timed(spec, coll, topo, 64 << 10, "packet", noise=Noise(16, 0.0, 1e-6, 5))
    np.testing.assert_array_equal(large, again)


def test_both_engines_see_the_same_noise_in_distribution():
    topo = switch()
    a = timed("ring", "all_reduce", topo, 1 * MIB, noise=Noise(40, 1e-6, 500e-9, 11))
    p = timed("ring", "all_reduce", topo, 1 * MIB, "packet", noise=Noise(40, 1e-6, 500e-9, 11))
    assert np.median(p) == pytest.approx(np.median(a), rel=0.05)


def test_noise_through_the_api_and_the_p50_is_time_us():
    df = api.run_sweep(topology="switch8", algorithm="ring,auto", sizes=["4K", "1M"], iters=9, skew="1us",
                       jitter="200ns", seed=2)
    assert set(PERCENTILE_COLUMNS) <= set(df.columns)
    np.testing.assert_array_equal(df.time_us, df.time_us_p50)
    assert (df.time_us_min <= df.time_us_p50).all() and (df.time_us_p50 <= df.time_us_p75).all()
    assert (df.time_us_p75 <= df.time_us_p95).all() and (df.time_us_p95 <= df.time_us_max).all()
    again = api.run_sweep(topology="switch8", algorithm="ring,auto", sizes=["4K", "1M"], iters=9, skew="1us",
                          jitter="200ns", seed=2)
    assert df.equals(again)


# ---------------------------------------------------------------------------------------- errors

@pytest.mark.parametrize("args,needles", [
    (["--iters", "0"], ["--iters: expected a whole number >= 1"]),
    (["--skew", "-1us"], ["--skew"]),
    (["--jitter", "5"], ["--jitter: expected a time"]),
    (["--set", "endpoint.launch_overhed=5us"], ["--set endpoint.launch_overhed: unknown key",
                                                "did you mean 'launch_overhead'"]),
    (["--set", "endpoint.hidden=['graph_gen']"], ["--set endpoint.hidden: unknown name 'graph_gen'"]),
    (["--set", "endpoint.execution=gpu"], ["--set endpoint.execution", "offload, sm"]),
    (["--set", "endpoint.sm_share=1.5"], ["--set endpoint.sm_share: expected a number in [0, 1)"]),
    (["--set", "endpoint.protocol=LL"], ["--set endpoint.protocol"]),
    (["--set", "endpoint.peak_flops=5GB/s"], ["--set endpoint.peak_flops: unknown unit 'GB/s'"]),
])
def test_bad_execution_input_is_one_line(capsys, args, needles):
    status, out, err = run_cli(capsys, "sweep", "-t", "switch8", "-a", "ring", "-b", "1K", "-e", "1K", *args)
    assert_one_line_error(status, out, err, *needles)


@pytest.mark.parametrize("launch", ["gpu", "loop:0", "loop:x", "loop:8:n=0", "loop:n=2:8", "loop:8:9", "host:n=3",
                                    "loop:8:n=", "loop:gpus=8", "loop:8:n=2:n=3", "device:8"])
def test_launch_choice_is_checked(capsys, launch):
    status, out, err = run_cli(capsys, "sweep", "--launch", launch)
    assert_one_line_error(status, out, err, "--launch", "loop:G:n=N", repr(launch))


def test_old_topology_endpoint_table_says_where_it_moved(tmp_path, capsys):
    f = tmp_path / "t.toml"
    f.write_text('[topology]\nkind = "switch"\nranks = 4\nbandwidth = "50GB/s"\n\n'
                 '[topology.endpoint]\nmessage_engines = 2\n')
    status, out, err = run_cli(capsys, "sweep", "-t", str(f))
    assert_one_line_error(status, out, err, "rename [topology.endpoint] to [endpoint]")


def test_endpoint_table_in_a_file(tmp_path):
    f = tmp_path / "t.toml"
    f.write_text('[topology]\nkind = "switch"\nranks = 4\nbandwidth = "50GB/s"\n\n'
                 '[endpoint]\nlaunch_overhead = "4us"\nhidden = ["metadata_copy"]\nexecution = "sm"\n'
                 'sm_share = 0.15\npeak_flops = "989TFLOP/s"\n')
    ep = load_topology(str(f)).endpoint
    assert dataclasses.asdict(ep) == {**dataclasses.asdict(Endpoint()), "launch_overhead": 4e-6,
                                      "hidden": ("metadata_copy",), "execution": "sm", "sm_share": 0.15,
                                      "peak_flops": 989e12}


def test_auto_reports_the_counters_of_the_protocol_it_kept():
    """With protocol auto the packet engine's counters are those of the protocol each size kept: equal to a
    run with that protocol forced (LL at 1 KiB, Simple at 64 MiB on this switch, by the closed forms above)."""
    sizes = [1 << 10, 64 * MIB]
    s = compile_for("ring", "all_reduce", switch(protocol="auto"), 1 << 10)
    blocks = [C.sizing("all_reduce", x, 4, N).block_elems for x in sizes]
    _, auto_stats, names = run_exec(packet.run, s, switch(protocol="auto"), blocks, 4, "host", QUIET, sizes)
    assert list(names) == ["ll", "simple"]
    for i, proto in enumerate(names):
        _, forced, _ = run_exec(packet.run, s, switch(protocol=proto), [blocks[i]], 4, "host", QUIET, [sizes[i]])
        assert {k: v[i] for k, v in auto_stats.items()} == {k: v[0] for k, v in forced.items()}
