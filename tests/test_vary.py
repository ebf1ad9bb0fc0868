"""What-ifs on the command line (hcclsim/sweeping/vary.py): which --set items vary, and their combinations."""

from __future__ import annotations

import io
import json

import pandas as pd
import pytest
from helpers import run_cli as run

from hcclsim.core.errors import ConfigError
from hcclsim.sweeping.vary import combinations, split


def test_a_list_given_to_a_one_value_key_varies_it():
    fixed, axes = split(["bandwidth=50GB/s", "scale_out.oversubscription=[1,4]", "latency=[1us, 2us]"])
    assert fixed == ["bandwidth=50GB/s"]
    assert axes == [("scale_out.oversubscription", ["1", "4"]), ("latency", ["1us", "2us"])]


def test_a_key_that_takes_a_list_is_set_not_varied_unless_given_lists():
    fixed, axes = split(['endpoint.algorithms=["ring","tree"]', "dims=[2,4]"])
    assert fixed == ['endpoint.algorithms=["ring","tree"]', "dims=[2,4]"] and axes == []
    _, axes = split(["dims=[[2,4],[4,4]]"])
    assert axes == [("dims", ["[2,4]", "[4,4]"])]
    # a graph's links are a list of [a, b, count]: one wiring is set, a list of wirings varies
    fixed, axes = split(["links=[[0, 1, 1], [1, 2, 1]]"])
    assert fixed == ["links=[[0, 1, 1], [1, 2, 1]]"] and axes == []
    _, axes = split(["links=[[[0, 1, 1]], [[0, 1, 2]]]"])
    assert [k for k, _ in axes] == ["links"] and len(axes[0][1]) == 2


def test_set_links_rewires_a_graph_preset(capsys):
    status, out, err = run(capsys, "sweep", "-t", "dgx1-v100", "--set", "ranks=3", "--set",
                           "links=[[0, 1, 1], [1, 2, 1], [2, 0, 2]]", "-a", "ring", "-b", "1M", "-e", "1M",
                           "--format", "csv", "-q")
    assert status == 0, err
    assert pd.read_csv(io.StringIO(out)).ranks.tolist() == [3]


def test_vary_items_and_their_combinations_first_key_slowest():
    _, axes = split(["a=[1,2]"], ["b=x,y,z"])
    assert combinations(axes) == [[("a", "1"), ("b", "x")], [("a", "1"), ("b", "y")], [("a", "1"), ("b", "z")],
                                  [("a", "2"), ("b", "x")], [("a", "2"), ("b", "y")], [("a", "2"), ("b", "z")]]


@pytest.mark.parametrize("sets,varies,needle", [
    (["a=[]"], [], "--set a: an empty list varies nothing"),
    ([], ["a="], "--vary: expected KEY=a,b,c"),
    ([], ["=1,2"], "--vary: expected KEY=a,b,c"),
    (["a=[1,2]"], ["a=3,4"], "--set/--vary a: given more than once"),
    (["a=1"], ["a=3,4"], "--set/--vary a: given more than once"),
])
def test_bad_what_ifs_are_refused(sets, varies, needle):
    with pytest.raises(ConfigError, match=needle.replace("[", r"\[")):
        split(sets, varies)


def ring_us(size: int, bandwidth: float) -> float:
    """switch8 ring AllReduce: 14 steps of S/8 over one switch (2 hops of 500 ns)."""
    return 14 * (1e-6 + size / 8 / bandwidth) * 1e6


@pytest.mark.parametrize("what", [["--vary", "bandwidth=25GB/s,50GB/s"], ["--set", "bandwidth=[25GB/s, 50GB/s]"]])
def test_a_what_if_sweeps_each_value_labelled_and_in_its_own_column(capsys, what):
    status, out, _ = run(capsys, "sweep", "-t", "switch8", "-a", "ring", "-b", "1M", "-e", "1M", *what,
                         "--format", "csv")
    rows = pd.read_csv(io.StringIO(out))
    assert status == 0 and list(rows.topology) == ["switch8[bandwidth=25GB/s]", "switch8[bandwidth=50GB/s]"]
    assert list(rows.bandwidth) == ["25GB/s", "50GB/s"]
    assert list(rows.time_us) == pytest.approx([ring_us(1 << 20, 25e9), ring_us(1 << 20, 50e9)], rel=1e-12)


def test_a_what_if_writes_one_file_and_is_not_resumed(capsys, tmp_path):
    out = tmp_path / "w.csv"
    argv = ["sweep", "-t", "switch8", "-a", "ring", "-b", "1M", "-e", "1M", "--vary", "latency=500ns,1us", "-q",
            "-o", str(out)]
    assert run(capsys, *argv)[0] == 0
    assert list(pd.read_csv(out).latency) == ["500ns", "1us"]
    meta = json.loads((tmp_path / "w.csv.meta.json").read_text())
    assert meta["inputs"]["varied"] == {"latency": ["500ns", "1us"]}
    status, _, err = run(capsys, *argv, "--resume")
    assert status == 2 and "--resume: not with a varied key" in err
