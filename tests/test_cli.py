"""The command line (docs/config.md, "Exit statuses"): help, exact CSV output, files, one-line errors."""

import io
import json
import textwrap
from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner
from helpers import assert_one_line_error
from helpers import run_cli as run

import hcclsim.cli.sweep as sweep_module
import hcclsim.sweeping.sweep as sweeping
from hcclsim.cli import cli
from hcclsim.network.config import ENDPOINT_KEYS, FLAT_KEYS, HIER_KEYS, OUT_KEYS, UP_KEYS, load_topology
from hcclsim.sweeping.sweep import COLUMNS, STAT_COLUMNS, sweep

HEADER = "collective,algorithm,topology,ranks,engine,size_bytes,count,dtype,root,time_us,algbw_GBps,busbw_GBps,protocol"
# sweep -t switch8 -a ring -e 4K -f 16: sizes 16, 256, 4096 (default -b 16).
EXPECTED_CSV = f"""\
{HEADER}
all_reduce,ring,switch8,8,analytic,16,4,float32,-1,14.001120000000006,0.0011427657215994146,0.0019998400127989755,none
all_reduce,ring,switch8,8,analytic,256,64,float32,-1,14.008960000000007,0.01827401891360957,0.031979533098816744,none
all_reduce,ring,switch8,8,analytic,4096,1024,float32,-1,14.143360000000001,0.2896058645187565,0.5068102629078238,none
"""
SWEEP = ["sweep", "-t", "switch8", "-a", "ring", "-e", "4K", "-f", "16"]






def ring_allreduce_us(size_bytes, n=8, alpha=1e-6, bw=50e9, dtype_size=4):
    """2(N-1)(alpha + S/(N B)); the piece each step moves is S/N rounded up to a whole element."""
    piece = -(-size_bytes // dtype_size // n) * dtype_size
    return 2 * (n - 1) * (alpha + piece / bw) * 1e6


# ------------------------------------------------------------------------------------------- help

@pytest.mark.parametrize("args", [["--help"], ["-h"], ["sweep", "--help"], ["topologies", "--help"],
                                  ["algorithms", "--help"]])
def test_every_help_exits_0(args):
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    assert "Usage:" in result.output


def test_help_through_main(capsys):
    status, out, err = run(capsys, "sweep", "--help")
    assert status == 0 and err == ""
    for flag in ("--collective", "--algorithm", "--topology", "--set", "--minbytes", "--maxbytes", "--stepfactor",
                 "--dtype", "--root", "--engine", "--format", "--output"):
        assert flag in out
    status, out, _ = run(capsys, "--version")
    assert status == 0 and out.startswith("hccl-bench, version ")


def test_bare_command_prints_the_help_with_status_0(capsys):
    status, out, err = run(capsys)
    assert (status, err) == (0, "") and out.startswith("Usage: hccl-bench")   # not "error: Usage: ..." with 2


def _closed_stdout(args):
    """(status, stderr) of `python -m hcclsim.cli ARGS` whose stdout's only reader closed before it wrote."""
    import os
    import subprocess
    import sys
    p = subprocess.Popen([sys.executable, "-m", "hcclsim.cli", *args], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, env={**os.environ, "HCCL_BENCH_SERVER": "0"})
    p.stdout.close()                           # every write of the command hits EPIPE
    err = p.stderr.read()
    return p.wait(timeout=300), err


@pytest.mark.parametrize("args", [["sweep", "-a", "ring", "-b", "1K", "-e", "1M"],                   # rich's table
                                  ["sweep", "-a", "ring", "-b", "1K", "-e", "1M", "--format", "csv"],
                                  ["topologies", "switch8"], ["--version"], []])
def test_a_reader_that_has_gone_is_status_141_and_silent(args):
    """`hccl-bench sweep | head`: stdout's reader closed before anything was written. rich and click exited 1
    on the broken pipe (a failed gate here) and Python's final flush added a message and 120; the command ends
    as SIGPIPE ends a writer, 141, with nothing on stderr."""
    assert _closed_stdout(args) == (141, b"")


def test_a_verdict_is_not_turned_into_success_by_a_reader_that_has_gone(tmp_path, capsys):
    """compare finds a regression (status 1) and its table then hits the closed pipe: 141, never 0."""
    base, cur = tmp_path / "base.csv", tmp_path / "cur.csv"
    head = "collective,algorithm,topology,ranks,engine,size_bytes,count,dtype,root,time_us,algbw_GBps,busbw_GBps\n"
    base.write_text(head + "all_reduce,ring,switch8,8,analytic,1024,256,float32,-1,10,0.1,0.2\n")
    cur.write_text(head + "all_reduce,ring,switch8,8,analytic,1024,256,float32,-1,20,0.05,0.1\n")
    assert run(capsys, "compare", base, cur)[0] == 1               # the verdict, read to the end
    status, _ = _closed_stdout(["compare", str(base), str(cur)])
    assert status == 141


def test_a_closed_stderr_leaves_stdout_alone(tmp_path):
    """The broken pipe was stderr's: stdout (a results file) is not sent to /dev/null."""
    import os
    import subprocess
    import sys
    out = tmp_path / "out.txt"
    code = ("import sys\nfrom hcclsim.cli import _reader_gone\nsys.stdout.write('before\\n'); sys.stdout.flush()\n"
            "status = _reader_gone()\nsys.stdout.write(f'after {status}\\n')\n")
    with open(out, "w") as f:
        p = subprocess.Popen([sys.executable, "-c", code], stdout=f, stderr=subprocess.PIPE,
                             env={**os.environ, "HCCL_BENCH_SERVER": "0"})
        p.stderr.close()
        assert p.wait(timeout=60) == 0
    assert out.read_text() == "before\nafter 141\n"


def test_every_command_is_listed_in_the_top_level_help():
    out = CliRunner().invoke(cli, ["--help"]).output
    for name in cli.commands:
        assert name in out


# ------------------------------------------------------------------------------------------ sweep

def test_sweep_csv_is_exact(capsys):
    status, out, err = run(capsys, *SWEEP, "--format", "csv")
    assert (status, err) == (0, "")
    assert out == EXPECTED_CSV


def test_expected_csv_is_the_closed_form_ring_time():
    """Each row of EXPECTED_CSV is 2(N-1)(1us + S/(8 x 50GB/s)), N = 8, printed exactly (to the last bit,
    which the engine's sums may round differently); switch8 models no protocol (the ideal link: protocol none)."""
    for line, size in zip(EXPECTED_CSV.splitlines()[1:], (16, 256, 4096), strict=True):
        t = ring_allreduce_us(size)
        algbw = size / (t * 1e-6) / 1e9
        head, numbers, tail = line.split(",")[:9], line.split(",")[9:12], line.split(",")[12:]
        assert ",".join(head + tail) == f"all_reduce,ring,switch8,8,analytic,{size},{size // 4},float32,-1,none"
        assert [float(v) for v in numbers] == pytest.approx([t, algbw, algbw * 2 * 7 / 8], rel=1e-12)
    assert ring_allreduce_us(256) == pytest.approx(14 * (1 + 256 / 8 / 50e9 * 1e6), rel=1e-15)  # S/N whole


def test_sweep_table_is_the_default_format(capsys):
    status, out, err = run(capsys, *SWEEP)
    assert (status, err) == (0, "")
    assert "all_reduce · ring · switch8 (8 ranks) · analytic" in out
    for size, t in (("16", "14.00"), ("256", "14.01"), ("4K", "14.14")):          # sizes as nccl-tests flags
        assert any(line.split()[:1] == [size] and t in line.split() for line in out.splitlines()), out


def test_sweep_json_on_stdout(capsys):
    status, out, err = run(capsys, *SWEEP, "--format", "json")
    assert (status, err) == (0, "")
    rows = json.loads(out)                          # the rows only, as in a JSON file (its metadata: -o)
    assert [r["size_bytes"] for r in rows] == [16, 256, 4096] and rows[0]["topology"] == "switch8"
    assert [r["time_us"] for r in rows] == pytest.approx([ring_allreduce_us(s) for s in (16, 256, 4096)],
                                                         rel=1e-9)


def test_set_changes_the_numbers(capsys):
    status, out, err = run(capsys, *SWEEP, "--set", "latency=0", "--set", "bandwidth=100GB/s", "-b", "4K",
                           "--format", "csv")
    assert (status, err) == (0, "")
    rows = pd.read_csv(io.StringIO(out))
    assert rows.time_us.tolist() == pytest.approx([ring_allreduce_us(4096, alpha=0.0, bw=100e9)], rel=1e-5)
    assert rows.busbw_GBps.tolist() == pytest.approx([100.0], rel=1e-5)       # latency-free ring: the link


def test_sweep_from_a_toml_file(capsys, tmp_path):
    path = tmp_path / "mine.toml"
    path.write_text('[topology]\nkind = "switch"\nranks = 8\nbandwidth = "400Gbps"\nlatency = "500ns"\n')
    status, out, _ = run(capsys, "sweep", "-t", str(path), "-a", "ring", "-e", "4K", "-f", "16", "--format", "csv")
    assert status == 0
    assert out == EXPECTED_CSV.replace(",switch8,", ",mine,")


def _reference_rows():
    topo = load_topology("switch8")
    return sweep(topo, ["all_reduce"], "ring", [16, 256, 4096]).rows


def _same_rows(got: pd.DataFrame, rtol: float):
    want = _reference_rows()
    assert list(got.columns) == COLUMNS
    pd.testing.assert_frame_equal(got, want, check_dtype=False, check_exact=False, rtol=rtol, atol=0)


def test_output_csv_reads_back(capsys, tmp_path):
    path = tmp_path / "x.csv"
    status, out, err = run(capsys, *SWEEP, "--format", "csv", "-o", str(path))
    assert (status, err) == (0, "") and out == EXPECTED_CSV          # -o writes as well as printing
    assert path.read_text() == EXPECTED_CSV
    _same_rows(pd.read_csv(path), rtol=0)                             # floats written exactly


def test_output_json_reads_back(capsys, tmp_path):
    path = tmp_path / "x.json"
    status, _, _ = run(capsys, *SWEEP, "-o", str(path))
    assert status == 0
    meta = json.loads(Path(f"{path}.meta.json").read_text())
    assert meta["schema_version"] == 2 and meta["inputs"]["algorithm"] == "ring"
    _same_rows(pd.DataFrame(json.loads(path.read_text())), rtol=0)    # floats round-trip exactly


def test_output_parquet_reads_back(capsys, tmp_path):
    pytest.importorskip("pyarrow")
    path = tmp_path / "x.parquet"
    status, _, err = run(capsys, *SWEEP, "--format", "csv", "-o", str(path))
    assert (status, err) == (0, "")
    _same_rows(pd.read_parquet(path), rtol=0)


# ----------------------------------------------------------------------------------------- errors

@pytest.fixture
def files(tmp_path):
    def write(name, text):
        path = tmp_path / name
        path.write_text(textwrap.dedent(text))
        return str(path)
    good = '[topology]\nkind = "switch"\nranks = 8\nbandwidth = "50GB/s"\n'
    return {
        "malformed": write("malformed.toml", '[topology\nkind = "switch"\n'),
        "unknown_key": write("unknown_key.toml", good + 'latncy = "1us"\n'),
        "bad_unit": write("bad_unit.toml", good.replace("50GB/s", "50GBs")),
    }


ERRORS = [
    (["sweep", "-c", "allreduc"], ["--collective: unknown collective 'allreduc' (did you mean 'all_reduce'?)"]),
    (["sweep", "-c", "all_reduce,gather"], ["--collective: unknown collective 'gather'"]),
    (["sweep", "-t", "switch8", "-a", "nosuchalgo"], ["--algorithm: unknown algorithm 'nosuchalgo'",
                                                      "expected one of:", "ring"]),
    (["sweep", "-t", "switch8", "-a", "ring:foo=1"], ["--algorithm: ring has no option 'foo'"]),
    (["sweep", "-t", "switch9"], ["--topology: unknown preset 'switch9' (did you mean 'switch8'?)"]),
    (["sweep", "-t", "{malformed}"], ["{malformed}: malformed TOML: "]),
    (["sweep", "-t", "{unknown_key}"], ["{unknown_key}: topology.latncy: unknown key (did you mean 'latency'?)"]),
    (["sweep", "-t", "{bad_unit}"], ["{bad_unit}: topology.bandwidth: unknown bandwidth unit 'GBs'"]),
    (["sweep", "-t", "missing.toml"], ["--topology: no such file 'missing.toml'"]),
    ([*SWEEP, "-b", "1K", "-e", "16"], ["-b/--b (1024) is larger than -e/--e (16)"]),
    ([*SWEEP, "-f", "1"], ["-f/--f: expected a whole factor >= 2, got 1"]),
    ([*SWEEP, "-f", "two"], ["'-f'", "'two' is not a valid integer", "(see 'hccl-bench sweep --help')"]),
    ([*SWEEP, "-b", "1.5"], ["'--minbytes': expected a whole number of bytes, got '1.5'"]),
    ([*SWEEP, "-e", "-4K"], ["'--maxbytes': expected a size such as 8, 64K, 1M or 1G, got '-4K'"]),
    ([*SWEEP, "--set", "ranks=0"], ["--set ranks: expected a whole number >= 1, got 0"]),
    ([*SWEEP, "--set", "ranks=1"], ["ring cannot run all_reduce on switch8[ranks=1]: a collective needs at least 2"]),
    ([*SWEEP, "--set", "rank=4"], ["--set rank: unknown key (did you mean 'ranks'?)"]),
    ([*SWEEP, "--set", "bandwidth=fast"], ["--set bandwidth: expected a bandwidth such as 50GB/s"]),
    ([*SWEEP, "--set", "scale_out.domains=4"], ["--set scale_out.domains: there is no table 'scale_out'"]),
    ([*SWEEP, "--set", "ranks"], ["--set: expected KEY=VALUE"]),
    ([*SWEEP, "-o", "x.txt"], ["-o/--output: expected a file ending in .csv, .json or .parquet, got 'x.txt'"]),
    ([*SWEEP, "-o", "/nonexistent-dir/x.csv"], ["-o/--output: cannot write '/nonexistent-dir/x.csv'"]),
    ([*SWEEP, "-d", "float33"], ["--dtype: unknown dtype 'float33' (did you mean 'float32'?)"]),
    ([*SWEEP, "-r", "8"], ["--root: expected a rank in 0..7, got 8"]),
    ([*SWEEP, "--engine", "warp"], ["--engine: unknown engine 'warp'; expected one or more of: analytic, packet"]),
    ([*SWEEP, "--engine", "packet,packet"], ["--engine: expected engine names without repeats"]),
    ([*SWEEP, "--trace", "x.txt"], ["--trace: expected a file ending in .json, got 'x.txt'"]),
    ([*SWEEP, "--format", "xml"], ["'--format'"]),
    ([*SWEEP, "--bogus"], ["No such option '--bogus'"]),
    (["bogus"], ["No such command 'bogus'"]),
    (["topologies", "switch9"], ["topologies NAME: unknown preset 'switch9' (did you mean 'switch8'?)"]),
    (["topologies", "{unknown_key}"], ["{unknown_key}: topology.latncy: unknown key"]),
]


@pytest.mark.parametrize("argv,needles", ERRORS, ids=[" ".join(a[len(SWEEP) if a[:len(SWEEP)] == SWEEP else 0:])
                                                     for a, _ in ERRORS])
def test_bad_input_is_one_line_and_exit_2(capsys, files, argv, needles):
    argv = [a.format(**files) for a in argv]
    status, out, err = run(capsys, *argv)
    assert_one_line_error(status, out, err, *[n.format(**files) for n in needles])


def test_bad_output_suffix_fails_before_the_sweep_runs(capsys, monkeypatch):
    def boom(*a, **k):
        raise AssertionError("the sweep ran")
    monkeypatch.setattr(sweeping, "sweep", boom)   # the command imports it when it runs
    assert_one_line_error(*run(capsys, *SWEEP, "-o", "x.xlsx"), "-o/--output: expected a file ending in .csv")


def test_internal_error_is_one_line_and_exit_3(capsys, monkeypatch):
    def boom(*a, **k):
        raise RuntimeError("engine exploded")
    monkeypatch.setattr(sweeping, "sweep", boom)   # the command imports it when it runs
    status, out, err = run(capsys, *SWEEP)
    assert_one_line_error(status, out, err, "internal error: RuntimeError: engine exploded",
                          "(run with --debug for a traceback)", expected_status=3)


def test_debug_shows_the_traceback_of_an_internal_error(capsys, monkeypatch):
    def boom(*a, **k):
        raise RuntimeError("engine exploded")
    monkeypatch.setattr(sweeping, "sweep", boom)   # the command imports it when it runs
    status, out, err = run(capsys, "--debug", *SWEEP)
    assert status == 3 and out == ""
    assert err.startswith("Traceback") and "RuntimeError: engine exploded" in err
    assert err.splitlines()[-1].startswith("hccl-bench: error: internal error: RuntimeError: engine exploded")


def test_user_errors_never_show_a_traceback_even_with_debug(capsys):
    status, out, err = run(capsys, "--debug", *SWEEP, "--set", "ranks=0")
    assert_one_line_error(status, out, err, "--set ranks")


# ---------------------------------------------------------------------------------------- listings

def test_topologies_lists_presets(capsys):
    status, out, err = run(capsys, "topologies")
    assert (status, err) == (0, "")
    assert "switch8" in out and "50GB/s" in out and "+in-switch reduce" in out
    # per rank, each way: a full mesh's 7 links of 64 GB/s, a ring's two of 100, a torus's four (without the
    # mesh's link from a rank to itself); a graph's NV1 and NV2 links (25 and 50 GB/s) summed
    lines = {line.split()[0]: line for line in out.splitlines() if line.strip()}
    assert "full_mesh 448GB/s (7 x 64GB/s) 800ns" in lines["mi300x-8gpu"]
    assert "ring 200GB/s (2 x 100GB/s)" in lines["ring8"] and "torus2d 400GB/s (4 x 100GB/s)" in lines["torus-4x4"]
    assert "graph 150GB/s (4 links of 25GB/s-50GB/s)" in lines["dgx1-v100"]
    assert "switch 450GB/s 300ns" in lines["dgx-h100"]


def test_topologies_name_prints_the_toml(capsys):
    import tomllib

    from hcclsim.network.config import preset_dir
    status, out, err = run(capsys, "topologies", "switch8")
    assert (status, err) == (0, "")
    assert out == (preset_dir() / "switch8.toml").read_text(encoding="utf-8")
    assert tomllib.loads(out)["topology"]["kind"] == "switch"


def test_topologies_file_prints_that_file(capsys, tmp_path, monkeypatch):
    text = '[topology]\nkind = "ring"\nranks = 4\nbandwidth = "1GB/s"\n'
    (tmp_path / "switch8").write_text(text)        # a file named like a preset, given as a path
    monkeypatch.chdir(tmp_path)
    status, out, _ = run(capsys, "topologies", "./switch8")
    assert (status, out) == (0, text)
    status, out, _ = run(capsys, "topologies", "switch8")
    assert status == 0 and out == text             # sweep -t switch8 would load this file too


def test_algorithms_lists_names(capsys):
    status, out, err = run(capsys, "algorithms")
    assert (status, err) == (0, "")
    assert "ring" in out and "all_reduce" in out and "channels=0" in out


# ------------------------------------------------------------------------------------- the docs

DOCS = Path(__file__).resolve().parents[1] / "docs" / "config.md"


def test_docs_example_is_the_real_output():
    text = DOCS.read_text(encoding="utf-8")
    block = text.split("$ hccl-bench " + " ".join(SWEEP) + " --format csv\n", 1)[1]
    lines = [line.strip() for line in block.splitlines()[:4]]
    assert "\n".join(lines) + "\n" == EXPECTED_CSV


def test_docs_list_every_key_and_flag():
    text = DOCS.read_text(encoding="utf-8")
    tables = {"scale_up", "scale_out"}
    for key in sorted((FLAT_KEYS | HIER_KEYS | UP_KEYS | OUT_KEYS | ENDPOINT_KEYS) - tables):
        assert f"| `{key}` |" in text, key
    for table in tables:
        assert f"`[topology.{table}]`" in text
    assert "`[endpoint]`" in text
    for column in COLUMNS + STAT_COLUMNS:
        assert f"| `{column}` |" in text, column
    for param in sweep_module.sweep_cmd.params:
        for flag in param.opts:
            assert f"`{flag}" in text, flag
