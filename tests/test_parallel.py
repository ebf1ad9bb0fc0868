"""Parallel sweeps that scale, and the packet engine's event budget (issue 12, items 2 and 5): a packet
point is a unit, an analytic block one unit per structure key (cut by sizes when long); rows are the
same whatever --jobs or however blocks are cut; workers get the sweep's function once and keep it; the
event estimate bounds the engine's count; a sweep past --max-events is refused in one line before it
starts, with the mtu that would fit."""

import os
from functools import partial

import numpy as np
import pandas as pd
import pytest
from helpers import assert_one_line_error
from helpers import run_cli as run

from hcclsim.network.config import load_topology
from hcclsim.sweeping import cost, executors
from hcclsim.sweeping.sweep import size_grid, sweep

SIZES = [64 << 10, 1 << 20]


def units_of(topo, algorithms, sizes, engine, collective="all_reduce"):
    got = []
    result = sweep(topo, [collective], algorithms, sizes, engine=engine, stats=True, on_start=got.extend)
    return got, result.rows


def test_a_packet_sweep_of_n_points_makes_n_units():
    units, rows = units_of(load_topology("switch8"), "ring,tree,direct_oneshot", [1 << 10, 64 << 10, 1 << 20],
                           "analytic,packet")
    packet = [u for u in units if u.engines == ("packet",)]
    assert len(packet) == 9 and all(len(u.sizes) == 1 for u in packet)
    assert len(rows) == 18
    analytic = [u for u in units if u.engines == ("analytic",)]
    # every analytic size once, each block's units covering its sizes
    for label in ("ring", "tree", "direct_oneshot"):
        mine = sorted(s for u in analytic if u.label == label for s in u.sizes)
        assert mine == [1 << 10, 64 << 10, 1 << 20]


def test_rows_are_identical_whatever_jobs_or_however_blocks_are_cut(monkeypatch):
    topo = load_topology("switch8")
    args = (["all_reduce", "all_gather"], "all", size_grid(16, 1 << 20, 16))
    one = sweep(topo, *args, engine="analytic,packet", jobs=1).rows
    monkeypatch.setattr(executors, "SERIAL_SECONDS", 0.0)
    two = sweep(topo, *args, engine="analytic,packet", jobs=2).rows
    pd.testing.assert_frame_equal(one, two, check_exact=True)
    # every analytic key cut into one unit per size: the same rows
    monkeypatch.setattr(cost, "LONG_SECONDS", 0.0)
    monkeypatch.setattr(cost, "UNIT_SECONDS", 1e-12)
    monkeypatch.setattr(cost, "COMPILE_SECONDS_PER_TEMPLATE", 0.0)
    units = []
    cut = sweep(topo, *args, engine="analytic", jobs=2, on_start=units.extend).rows
    assert all(len(u.sizes) == 1 for u in units)
    pd.testing.assert_frame_equal(one[one.engine == "analytic"].reset_index(drop=True), cut, check_exact=True)


class Token:
    """Counts how often it is unpickled in this process."""
    loads = 0

    def __setstate__(self, state):
        Token.loads += 1


def _where(token, unit):
    return os.getpid(), id(token), Token.loads


def test_workers_get_the_sweep_function_once_and_keep_it(monkeypatch):
    monkeypatch.setattr(executors, "SERIAL_SECONDS", 0.0)
    monkeypatch.setattr(executors, "STEAL", False)        # instant units: else this process may take them all
    token = Token()
    got = [r for _, r in executors.run_local(partial(_where, token), list(range(12)), jobs=2)]
    in_workers = [r for r in got if r[0] != os.getpid()]
    assert len(in_workers) >= 6
    for pid in {r[0] for r in in_workers}:
        mine = [r for r in in_workers if r[0] == pid]
        assert len({r[1] for r in mine}) == 1 and max(r[2] for r in mine) <= 1      # one object, unpickled once at most


def test_units_run_longest_first():
    class U:
        def __init__(self, cost):
            self.cost = cost
    units = [U(c) for c in (1, 5, 3, 4, 2)]
    assert [u.cost for u in executors._two_ended(units, 2)] == [5, 3, 1, 2, 4]     # both ends start long
    seen = []
    list(executors.run_local(lambda u: seen.append(u.cost), units, jobs=1))
    assert seen == [1, 5, 3, 4, 2]                                                  # serial: the sweep's order


@pytest.mark.parametrize(("name", "sets", "algorithms"), [
    ("switch8", [], "ring,tree,direct_oneshot,in_switch,halving_doubling"),
    ("ring8", [], "ring,direct_oneshot"),
    ("two-tier-128", ["scale_out.domains=2"], "ring,hierarchical"),
])
def test_the_event_estimate_bounds_the_engines_count(name, sets, algorithms):
    units, rows = units_of(load_topology(name, sets), algorithms, SIZES, "packet")
    assert len(units) == len(rows)
    for u in units:
        counted = rows[(rows.algorithm == u.label) & (rows.size_bytes == u.sizes[0])].events.iloc[0]
        assert counted <= u.events.events <= cost.EVENTS_FACTOR * counted, (u.label, u.sizes, counted, u.events)


def test_the_event_estimate_of_a_ring_by_hand():
    # ring AllReduce on switch8 at 1 MiB: 2(n-1) = 14 steps of 8 transfers of 128 KiB, 32 packets of 4 KiB
    # each, over 2 hops: 2 x 2 x 14 x 8 x 32 = 14336 events, and one per transfer: 14448
    units, rows = units_of(load_topology("switch8"), "ring", [1 << 20], "packet")
    assert units[0].events.events == 14448
    assert rows.events.iloc[0] <= 14448


def test_past_the_budget_is_refused_in_one_line_with_the_mtu_that_fits(capsys, tmp_path):
    out = tmp_path / "rows.csv"
    args = ["sweep", "-t", "switch8", "--engine", "packet", "-a", "ring", "-b", "1M", "-e", "1M", "-o", out]
    status, stdout, err = run(capsys, *args, "--max-events", "14447")
    # packets <= transfers + bytes / mtu: 5 x 112 + 4 x 112 x 128 KiB / mtu <= 14447 needs mtu >= 4228.4: 8K
    assert_one_line_error(status, stdout, err, "--max-events: the packet engine would process ~1.4e4 events",
                          "all_reduce ring at 1 MiB on switch8", "the budget is 1.4e4", "raise --max-events",
                          "HCCL_BENCH_MAX_EVENTS", "use a larger mtu (--set mtu=8K fits)")
    assert not out.exists() or out.read_text().count("\n") <= 1     # refused before any point ran
    status, stdout, err = run(capsys, *args, "--max-events", "14448", "-q")
    assert status == 0 and out.exists(), err


def test_when_no_mtu_fits_the_way_out_is_fewer_sizes(capsys):
    status, out, err = run(capsys, "sweep", "-t", "switch8", "--engine", "packet", "-a", "ring", "-e", "1M",
                           "--max-events", "100")
    assert_one_line_error(status, out, err, "--max-events:", "use fewer or smaller sizes, or --engine analytic")


@pytest.mark.parametrize("value", ["0", "1.5", "lots", "-3"])
def test_the_budget_must_be_a_whole_number(capsys, monkeypatch, value):
    status, out, err = run(capsys, "sweep", "-t", "switch8", "--max-events", value)
    assert_one_line_error(status, out, err, "--max-events: expected a whole number of events >= 1")
    monkeypatch.setenv(cost.ENV, value)
    status, out, err = run(capsys, "sweep", "-t", "switch8", "--engine", "packet", "-e", "64")
    assert_one_line_error(status, out, err, f"{cost.ENV}: expected a whole number of events >= 1")


def test_the_budget_applies_to_tune_and_from_the_environment(capsys, monkeypatch):
    monkeypatch.setenv(cost.ENV, "1000")
    status, out, err = run(capsys, "tune", "-t", "switch8", "--engine", "packet", "-b", "1M", "-e", "1M")
    assert_one_line_error(status, out, err, "--max-events: the packet engine would process")
    status, out, err = run(capsys, "tune", "-t", "switch8", "--engine", "packet", "-b", "1M", "-e", "1M",
                           "--max-events", "1e9")
    assert status == 0, err


def test_count_and_duration_read_as_people_write_them():
    assert [cost.count(n) for n in (14447, 3.2e10, 100, 5.6e8)] == ["1.4e4", "3.2e10", "1e2", "5.6e8"]
    assert [cost.duration(s) for s in (30, 600, 7200)] == ["30 s", "10 min", "2 h"]
    assert np.isclose(cost.DEFAULT_EVENTS / cost.EVENTS_PER_SECOND / 60, 8.3, atol=0.1)       # "about 8 minutes"
