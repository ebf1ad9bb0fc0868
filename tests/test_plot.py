"""`hccl-bench plot` (hcclsim/results/plot.py): PNG and SVG from sweep output, --by file, one-line errors, no matplotlib."""

import builtins
import json
from xml.etree import ElementTree as ET

import pandas as pd
import pytest
from helpers import assert_one_line_error
from helpers import run_cli as run

from hcclsim.cli import main
from hcclsim.results import plot as P

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
ALGOS = ("ring", "tree")






@pytest.fixture(scope="module")
def sweep_csv(tmp_path_factory):
    """A real `sweep -o` CSV: AllReduce and AllGather, ring and tree, 1K..1M on switch8."""
    path = tmp_path_factory.mktemp("plot") / "ar.csv"
    status = main(["sweep", "-t", "switch8", "-c", "all_reduce,all_gather", "-a", ",".join(ALGOS),
                   "-b", "1K", "-e", "1M", "-f", "4", "-o", str(path)])
    assert status == 0 and path.is_file()
    return path


def svg_text(path) -> str:
    root = ET.parse(path).getroot()                 # parses as XML
    assert root.tag.endswith("svg")
    return " ".join(t for el in root.iter() for t in (el.text, el.tail) if t)


def test_png_from_a_sweep_csv(capsys, sweep_csv, tmp_path):
    out = tmp_path / "ar.png"
    status, stdout, err = run(capsys, "plot", sweep_csv, "-o", out)
    assert status == 0, err
    assert stdout == "" and str(out) in err
    data = out.read_bytes()
    assert data[:8] == PNG_MAGIC and len(data) > 5000


def test_svg_names_algorithms_collectives_topology_and_binary_sizes(capsys, sweep_csv, tmp_path):
    out = tmp_path / "ar.svg"
    status, _, err = run(capsys, "plot", sweep_csv, "-o", out, "--metric", "busbw,time,algbw")
    assert status == 0, err
    text = svg_text(out)
    for needle in (*ALGOS, "all_reduce", "all_gather", "switch8", "8 ranks", "1K", "1M",
                   "busbw (GB/s)", "time (us)", "algbw (GB/s)"):
        assert needle in text, needle


def test_collective_filter_keeps_one_panel(capsys, sweep_csv, tmp_path):
    out = tmp_path / "ag.svg"
    status, _, err = run(capsys, "plot", sweep_csv, "-o", out, "-c", "allgather")
    assert status == 0, err
    text = svg_text(out)
    assert "all_gather" in text and "all_reduce" not in text


def test_by_file_draws_one_line_per_file(capsys, sweep_csv, tmp_path):
    slower = tmp_path / "slower.csv"
    df = pd.read_csv(sweep_csv)
    df = df[df.algorithm == "ring"].assign(time_us=lambda d: d.time_us * 2, busbw_GBps=lambda d: d.busbw_GBps / 2)
    df.to_csv(slower, index=False)
    base = tmp_path / "base.csv"
    pd.read_csv(sweep_csv).query("algorithm == 'ring'").to_csv(base, index=False)
    out = tmp_path / "runs.svg"
    status, _, err = run(capsys, "plot", base, slower, "--by", "file", "-o", out)
    assert status == 0, err
    text = svg_text(out)
    assert "base.csv" in text and "slower.csv" in text
    # the same rows in two files cannot be told apart by algorithm
    status, out_, err = run(capsys, "plot", base, slower, "-o", tmp_path / "x.png")
    assert_one_line_error(status, out_, err, "--by file")


def test_load_adds_file_and_algbw_and_labels_lines(tmp_path):
    """algbw is size / time as nccl-tests defines it; labels name what varies, the title what does not."""
    rows = [{"collective": "all_reduce", "algorithm": "ring", "topology": "t", "ranks": 4, "engine": "analytic",
             "size_bytes": s, "dtype": "float32", "time_us": t, "busbw_GBps": b}
            for s, t, b in ((0, 1.0, 0.0), (1024, 2.0, 0.5), (4096, 4.0, 1.5))]
    path = tmp_path / "a.json"
    path.write_text(json.dumps({"schema_version": 1, "rows": rows}))
    df = P.load([path])
    assert df.size_bytes.tolist() == [1024, 4096]                     # size 0 has no place on a log axis
    assert df.algbw_GBps.tolist() == pytest.approx([0.512, 1.024])
    assert set(df.file) == {"a.json"}
    assert P.line_label({"file": "a.json", "algorithm": "ring", "ranks": 4}, ["ranks"], "file") == "a.json (4 ranks)"
    assert P.title(df) == "t · 4 ranks · analytic engine · float32"
    assert P.file_labels(["x/a.csv", "y/a.csv"]) == ["x/a.csv", "y/a.csv"]


def test_size_ticks_are_binary_and_few():
    assert P.size_ticks(1024, 1 << 30) == [1 << 10, 1 << 15, 1 << 20, 1 << 25, 1 << 30]
    assert P.size_ticks(16, 4096) == [1 << e for e in range(4, 13)]
    assert all(len(P.size_ticks(1, 1 << e)) <= P.MAX_TICKS for e in range(45))


@pytest.mark.parametrize("argv, needles", [
    (["nope.csv"], ["no such file", "nope.csv"]),
    (["{csv}", "--metric", "busbww"], ["unknown metric 'busbww'", "did you mean 'busbw'"]),
    (["{csv}", "--metric", "busbw,latency"], ["unknown metric 'latency'"]),
    (["{csv}", "-c", "broadcast"], ["no rows of that collective", "all_reduce"]),
    (["{csv}", "-c", "allreduc"], ["unknown collective"]),
    (["{csv}", "--by", "rank"], ["--by"]),
])
def test_bad_input_is_one_line_exit_2(capsys, sweep_csv, tmp_path, argv, needles):
    argv = [a.replace("{csv}", str(sweep_csv)) for a in argv]
    out = tmp_path / "x.png"
    status, stdout, err = run(capsys, "plot", *argv, "-o", out)
    assert_one_line_error(status, stdout, err, *needles)
    assert not out.exists()


@pytest.mark.parametrize("name", ["x.pdf", "x", "x.png.txt"])
def test_bad_suffix_is_one_line_exit_2(capsys, sweep_csv, tmp_path, name):
    status, out, err = run(capsys, "plot", sweep_csv, "-o", tmp_path / name)
    assert_one_line_error(status, out, err, "unknown picture format", ".png or .svg")


def test_missing_output_and_files_are_usage_errors(capsys, sweep_csv):
    assert_one_line_error(*run(capsys, "plot", sweep_csv), "-o")
    assert_one_line_error(*run(capsys, "plot", "-o", "x.png"), "FILE")


def test_unwritable_output_is_one_line_exit_2(capsys, sweep_csv, tmp_path):
    status, out, err = run(capsys, "plot", sweep_csv, "-o", tmp_path / "no" / "such" / "dir.png")
    assert_one_line_error(status, out, err, "cannot write")


def test_missing_matplotlib_says_how_to_install(capsys, sweep_csv, tmp_path, monkeypatch):
    real_import = builtins.__import__

    def no_matplotlib(name, *args, **kwargs):
        if name == "matplotlib" or name.startswith("matplotlib."):
            raise ImportError(f"No module named {name!r}")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_matplotlib)
    out = tmp_path / "x.png"
    status, stdout, err = run(capsys, "plot", sweep_csv, "-o", out)
    assert_one_line_error(status, stdout, err)
    assert err == "hccl-bench: error: plotting needs matplotlib: pip install 'hccl-bench[plot]'\n"
    assert not out.exists()
