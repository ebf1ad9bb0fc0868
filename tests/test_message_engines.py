"""MTIA-style message engines (hcclsim.engine.execution.control_core, docs/execution.md "Message engines"): the
control core's WQE unrolling rate, express and fetch doorbells, queue pairs with re-targeting, and near-memory
reduction per engine; each by its closed form on both engines, the defaults free, bad values refused."""

from __future__ import annotations

import csv
import io

import pytest
from helpers import assert_one_line_error, compile_for, run_cli
from test_execution import ALPHA, B, N, switch, timed

from hcclsim.core.units import parse_time
from hcclsim.engine.execution import control_core
from hcclsim.network.config import load_topology, preset_names
from hcclsim.studies import scenario as S
from hcclsim.studies import study as R

ENGINES = ["analytic", "packet"]
AG = 8 << 10                          # ring AllGather: blocks of 1 KiB, one step tau = ALPHA + 1 KiB / B
TAU = ALPHA + 1024 / B


def reuses(spec, coll, **endpoint):
    topo = switch(**endpoint)
    return list(control_core(topo, compile_for(spec, coll, topo, 1 << 20)).reuses)


# ------------------------------------------------------------------------------------------- defaults

def test_defaults_and_inert_settings_cost_nothing():
    small = compile_for("direct", "all_to_all", switch(), 1 << 20)
    for name in preset_names():                   # no preset sets a control-core cost (none is sourced)
        cc = control_core(load_topology(name), small)
        assert cc.ready is None and cc.hidden == 0.0, name
    base = timed("direct", "all_to_all", switch(), 64 << 10)[0]
    for inert in ({"doorbell": "fetch"}, {"queue_pairs": 2}, {"qp_reuse": 5e-6}, {"message_engines": 3},
                  {"queue_pairs": 1 << 40, "qp_reuse": 5e-6}):          # more QPs than peers: never re-targets
        assert timed("direct", "all_to_all", switch(**inert), 64 << 10)[0] == base, inert


# ------------------------------------------------------------------------------ the control core's rate

@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("rate", [1e5, 1e7])       # 10 us per WQE (above tau), 100 ns (below)
def test_wqe_rate_exposed_ring_takes_the_later_of_unrolling_and_the_chain(engine, rate):
    # step k's WQE is ready at k/R and its data after k-1 steps: T = max_k (k/R + (N-k) tau), an endpoint
    expected = max(1 / rate + (N - 1) * TAU, (N - 1) / rate + TAU)
    assert timed("ring", "all_gather", switch(wqe_rate=rate), AG, engine)[0] == pytest.approx(expected, abs=1e-12)


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("rate", [1e5, 1e7])
def test_wqe_rate_hidden_costs_max_of_wire_and_unrolling(engine, rate):
    wire = timed("ring", "all_gather", switch(), AG, engine)[0]
    assert wire == pytest.approx((N - 1) * TAU, abs=1e-12)
    hidden = timed("ring", "all_gather", switch(wqe_rate=rate, hidden=("wqe_rate",)), AG, engine)[0]
    assert hidden == pytest.approx(max(wire, (N - 1) / rate), abs=1e-12)


# ----------------------------------------------------------------------------------------- doorbells

@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("spec,coll,on_path", [("ring", "all_gather", N - 1), ("direct", "all_to_all", 1)])
def test_fetch_doorbell_costs_the_fetch_per_wqe_on_the_critical_path(engine, spec, coll, on_path):
    fetch = 300e-9
    express = timed(spec, coll, switch(doorbell="express", wqe_fetch_latency=fetch), AG, engine)[0]
    assert express == timed(spec, coll, switch(), AG, engine)[0]
    got = timed(spec, coll, switch(doorbell="fetch", wqe_fetch_latency=fetch), AG, engine)[0]
    assert got - express == pytest.approx(on_path * fetch, abs=1e-12)


# -------------------------------------------------------------------------------------- queue pairs

@pytest.mark.parametrize("q", range(1, N + 1))
def test_direct_all_to_all_retargets_a_qp_for_each_peer_beyond_the_first_q(q):
    # one engine: a rank's 7 WQEs go to 7 distinct peers; the first Q find a QP free, each later one re-targets
    assert reuses("direct", "all_to_all", message_engines=1, queue_pairs=q, qp_reuse=1e-6) == [max(0, N - 1 - q)] * N


def test_qps_are_per_engine_and_reused_least_recently_used_first():
    # two engines: channels 0..6 (peers 1..7) alternate, so engine 0 has peers 1,3,5,7 and engine 1 has 2,4,6
    assert reuses("direct", "all_to_all", message_engines=2, queue_pairs=2, qp_reuse=1e-6) == [(4 - 2) + (3 - 2)] * N
    # halving-doubling on one engine visits peers at distance 4, 2, 1, 1, 2, 4: Q = 1 misses all but the
    # repeat and the first (4); Q = 2 evicts 4 for 1 and then 1 for 4 (2); Q = 3 holds all three
    for q, want in [(1, 4), (2, 2), (3, 0)]:
        assert reuses("halving_doubling", "all_reduce", message_engines=1, queue_pairs=q, qp_reuse=1e-6) == [want] * N


@pytest.mark.parametrize("q", [4, 6, 7, 16])
def test_more_peers_than_qps_is_slower_by_the_reuses_times_the_reuse_cost(q):
    # analytic: the re-targets of a rank's engine run one after another on its control core, and the last
    # PUT waits for all of them: exactly (N - 1 - Q) x qp_reuse later
    cost, size = 10e-6, N * N * 64
    base = timed("direct", "all_to_all", switch(message_engines=1), size)[0]
    got = timed("direct", "all_to_all", switch(message_engines=1, queue_pairs=q, qp_reuse=cost), size)[0]
    assert got - base == pytest.approx(max(0, N - 1 - q) * cost, abs=1e-12)


@pytest.mark.parametrize("q", [4, 6])
def test_packet_engine_pays_the_reuses_less_the_wire_time_they_overlap(q):
    # one engine sends a rank's 7 PUTs (512 B each, inject = 512 B / B) one after another; without QP limits the
    # last leaves at 6 x inject. With Q QPs the first Q leave at once and PUT Q + j waits for j re-targets
    # (j x qp_reuse, far longer than the injections): the last leaves at (N - 1 - Q) x qp_reuse.
    cost, size, inject = 10e-6, N * N * 64, 512 / B
    base = timed("direct", "all_to_all", switch(message_engines=1), size, "packet")[0]
    got = timed("direct", "all_to_all", switch(message_engines=1, queue_pairs=q, qp_reuse=cost), size, "packet")[0]
    assert got - base == pytest.approx((N - 1 - q) * cost - (N - 2) * inject, abs=1e-12)


def test_reuse_cost_through_the_command(capsys):
    def time_us(*sets):
        args = ["sweep", "-t", "switch8", "-c", "all_to_all", "-a", "direct", "-b", "1K", "-e", "1K", "--format", "csv",
                "--set", "endpoint.message_engines=1", *[a for s in sets for a in ("--set", s)]]
        status, out, err = run_cli(capsys, *args)
        assert status == 0, err
        return float(next(csv.DictReader(io.StringIO(out)))["time_us"])
    assert time_us("endpoint.queue_pairs=4", "endpoint.qp_reuse=10us") - time_us() == pytest.approx(30.0, abs=1e-6)


# ------------------------------------------------------------------------------- reduction per engine

@pytest.mark.parametrize("engines,reducing", [(1, 1), (4, 4), (16, 7)])
def test_a_rank_reduces_at_the_engines_it_reduces_on_times_the_per_engine_rate(engines, reducing):
    # direct ReduceScatter: 7 PUT_REDUCEs into each rank at once, one channel (engine) each; reduction-bound
    # (7 x 5 GB/s < 50 GB/s links): T = alpha + 7 (S/8) / (engines reducing x R_e)
    size, per_engine = 1 << 20, 5e9
    got = timed("direct", "reduce_scatter", switch(message_engines=engines, engine_reduction_bandwidth=per_engine),
                size)[0]
    assert got == pytest.approx(ALPHA + (N - 1) * size / N / (reducing * per_engine), rel=1e-12)
    rank = timed("direct", "reduce_scatter", switch(reduction_bandwidth=reducing * per_engine), size)[0]
    assert got == rank


def test_packet_engine_reduces_per_engine_within_3_percent():
    size, per_engine = 1 << 20, 5e9
    got = timed("direct", "reduce_scatter", switch(message_engines=4, engine_reduction_bandwidth=per_engine), size,
                "packet")[0]
    assert got == pytest.approx(ALPHA + (N - 1) * size / N / (4 * per_engine), rel=0.03)


# ---------------------------------------------------------------------------------------- bad values

@pytest.mark.parametrize("item,message", [
    ("endpoint.wqe_rate=-5", ("--set endpoint.wqe_rate: expected work-queue elements per second, 0 (no limit) or a "
                             "finite number >= 1, got -5")),
    ("endpoint.wqe_rate=0.5", ("--set endpoint.wqe_rate: expected work-queue elements per second, 0 (no limit) or a "
                              "finite number >= 1, got 0.5")),
    ("endpoint.wqe_rate=true", ("--set endpoint.wqe_rate: expected work-queue elements per second, 0 (no limit) or a "
                               "finite number >= 1, got True")),
    ("endpoint.doorbell=ring", "--set endpoint.doorbell: unknown doorbell 'ring'; expected one of: express, fetch"),
    ("endpoint.wqe_fetch_latency=-1us", ("--set endpoint.wqe_fetch_latency: expected a time such as 500ns, 1.5us or "
                                        "2ms, got '-1us'")),
    ("endpoint.queue_pairs=-1", "--set endpoint.queue_pairs: expected a whole number >= 0, got -1"),
    ("endpoint.queue_pairs=2.5", "--set endpoint.queue_pairs: expected a whole number >= 0, got 2.5"),
    ("endpoint.qp_reuse=abc", "--set endpoint.qp_reuse: expected a time such as 500ns, 1.5us or 2ms, got 'abc'"),
    ("endpoint.engine_reduction_bandwidth=-3GB/s", ("--set endpoint.engine_reduction_bandwidth: expected a bandwidth "
                                                   "such as 50GB/s, 400Gb/s or 400Gbps, got '-3GB/s'")),
])
def test_bad_values_are_refused_in_one_line(capsys, item, message):
    status, out, err = run_cli(capsys, "sweep", "-t", "switch8", "-a", "ring", "-b", "1K", "-e", "1K", "--set", item)
    assert_one_line_error(status, out, err)
    assert err == f"hccl-bench: error: {message}\n"


def test_rank_and_engine_reduction_bandwidth_together_are_refused(tmp_path, capsys):
    path = tmp_path / "both.toml"
    path.write_text('[topology]\nkind = "switch"\nranks = 4\nbandwidth = "50GB/s"\n'
                    '[endpoint]\nreduction_bandwidth = "10GB/s"\nengine_reduction_bandwidth = "5GB/s"\n')
    status, out, err = run_cli(capsys, "sweep", "-t", path, "-a", "ring", "-b", "1K", "-e", "1K")
    assert_one_line_error(status, out, err)
    assert err == (f"hccl-bench: error: {path}: endpoint.engine_reduction_bandwidth: set the rank's "
                   f"reduction_bandwidth or the per-engine engine_reduction_bandwidth, not both\n")


# ------------------------------------------------------------------------------------------- the study

def test_the_study_shows_more_peers_than_qps_slower_by_the_reuses():
    section = next(s for s in S.load("hccl-inference-put").sections if s.name == "queue-pairs")
    df = R.run_section(section).frame.rename(columns={"endpoint.queue_pairs": "q", "endpoint.qp_reuse": "cost"})
    # 127 peers on 16 engines (channel k - 1 on engine (k - 1) mod 16): 15 engines hold 8 peers, one 7; the
    # busiest engine's last PUT waits for max(0, 8 - Q) re-targets
    base = df[df.q == 0].set_index(["cost", "size_bytes"]).time_us
    assert len(df) == 20
    for q, rows in df[df.q > 0].groupby("q"):
        got = rows.set_index(["cost", "size_bytes"]).time_us - base
        for (cost, _), extra in got.items():
            assert extra * 1e-6 == pytest.approx(max(0, 8 - q) * parse_time(cost, "qp_reuse"), abs=1e-12)
