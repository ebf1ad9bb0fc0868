"""Honest progress (issue 12, item 5): the bar advances per point of a packet sweep and shows the time
left, weighing each unit by its estimated seconds; a long packet sweep says what it will take before it
starts, and -q silences that. The callbacks are captured, not the terminal."""

import pytest
from helpers import run_cli as run

import hcclsim.cli._long as long_module
from hcclsim.sweeping import cost

PACKET = ["sweep", "-t", "switch8", "--engine", "packet", "-a", "ring,tree", "-b", "1K", "-e", "64K", "-f", "8",
          "--format", "csv"]


@pytest.fixture
def progress(monkeypatch):
    """Every _Progress the command makes, recording start(units) and advance(unit)."""
    made = []

    class Recorder(long_module._Progress):
        def __init__(self, enabled):
            super().__init__(enabled=False)
            self.started, self.advanced = [], []
            made.append(self)

        def start(self, units):
            self.started = list(units)

        def advance(self, unit):
            self.advanced.append(unit)
    monkeypatch.setattr(long_module, "_Progress", Recorder)
    return made


def test_a_packet_sweep_advances_once_per_point(capsys, progress):
    status, out, err = run(capsys, *PACKET, "-q")
    assert status == 0, err
    bar, = progress
    assert len(bar.advanced) == 2 * 3 == out.count("\n") - 1            # 2 algorithms x 1K, 8K, 64K
    assert all(u.points == 1 and u.cost > 0 for u in bar.advanced)
    assert sorted(id(u) for u in bar.advanced) == sorted(id(u) for u in bar.started)


def test_the_bar_shows_points_and_the_time_left():
    from rich.progress import TimeRemainingColumn

    units = []
    from hcclsim.network.config import load_topology
    from hcclsim.sweeping.sweep import sweep

    sweep(load_topology("switch8"), ["all_reduce"], "ring", [1 << 10, 1 << 20], engine="packet", on_start=units.extend)
    bar = long_module._Progress(enabled=True)
    bar.start(units)
    try:
        assert any(isinstance(c, TimeRemainingColumn) for c in bar.bar.columns)
        task = bar.bar.tasks[0]
        assert task.fields["points"] == 2 and task.total == pytest.approx(sum(u.cost for u in units))
        bar.advance(units[1])                                       # the 1 MiB point: more of the time
        assert task.fields["done"] == 1 and task.completed == pytest.approx(units[1].cost)
        assert units[1].cost > units[0].cost
    finally:
        bar.stop()


def test_a_long_packet_sweep_says_what_it_will_take_unless_quiet(capsys, monkeypatch, progress):
    monkeypatch.setattr(cost, "NOTE_SECONDS", 0.0)
    status, _, err = run(capsys, *PACKET)
    assert status == 0 and err.count("hccl-bench: the packet engine will process ~") == 1, err
    assert "here (estimated from the schedules; --max-events caps it)" in err
    status, _, err = run(capsys, *PACKET, "-q")
    assert status == 0 and "packet engine will process" not in err, err
    monkeypatch.setattr(cost, "NOTE_SECONDS", 1e9)
    status, _, err = run(capsys, *PACKET)
    assert status == 0 and "packet engine will process" not in err, err
