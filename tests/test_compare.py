"""`hccl-bench compare` (docs/ci.md): the CI gate's exit statuses, outputs and its refusals of bad input."""

import json
import shutil
import subprocess
from pathlib import Path
from xml.etree import ElementTree as ET

import pandas as pd
import pytest
from click.testing import CliRunner
from helpers import run_cli as run

from hcclsim.analysis import gate
from hcclsim.cli import cli
from hcclsim.engine.execution import Noise
from hcclsim.results import read as results_read
from hcclsim.sweeping.sweep import COLUMNS
from hcclsim.sweeping.sweep import columns as sweep_columns

ROOT = Path(__file__).resolve().parents[1]
BASELINE = ROOT / "results" / "baselines" / "switch8-allreduce.csv"




def assert_error(status, out, err, *needles):
    assert status == 2, err
    assert out == ""
    assert err.startswith("hccl-bench: error: ") and err.count("\n") == 1 and "Traceback" not in err, err
    for needle in needles:
        assert needle in err, err


def rows() -> pd.DataFrame:
    """A small hand-made results table: 2 algorithms x 3 sizes, busbw = 2(n-1)/n * size / time."""
    out = []
    for algo, alpha in (("ring", 14.0), ("tree", 6.0)):
        for size in (1024, 65536, 4194304):
            t = alpha + size / 50e3
            algbw = size / (t * 1e3)
            out.append(["all_reduce", algo, "switch8", 8, "analytic", size, size // 4, "float32", -1, t, algbw,
                        algbw * 1.75, "none"])
    return pd.DataFrame(out, columns=COLUMNS)


def scaled(df, algo, size, busbw=1.0, time=None):
    """A copy with one row's busbw multiplied by busbw and its time by time (default 1/busbw)."""
    df = df.copy()
    i = (df.algorithm == algo) & (df.size_bytes == size)
    df.loc[i, "busbw_GBps"] *= busbw
    df.loc[i, "algbw_GBps"] *= busbw
    df.loc[i, "time_us"] *= 1 / busbw if time is None else time
    return df


@pytest.fixture
def base(tmp_path):
    path = tmp_path / "base.csv"
    rows().to_csv(path, index=False)
    return path


def write(tmp_path, df, name="cur.csv"):
    path = tmp_path / name
    if name.endswith(".json"):
        path.write_text(json.dumps({"schema_version": 1, "rows": df.to_dict(orient="records")}))
    else:
        df.to_csv(path, index=False)
    return path


# -------------------------------------------------------------------------------- the musts

def test_a_file_compared_with_itself_passes(capsys, base):
    status, out, err = run(capsys, "compare", base, base)
    assert (status, err) == (0, "")
    assert "PASS: 0 regressions, 0 improvements, 6 within limits, of 6 common rows" in out


def test_the_committed_baseline_compared_with_itself_passes(capsys):
    status, out, _ = run(capsys, "compare", BASELINE, BASELINE)
    assert status == 0 and "of 36 common rows" in out


def test_busbw_10_percent_lower_in_one_row_fails_and_names_it(capsys, base, tmp_path):
    cur = write(tmp_path, scaled(rows(), "tree", 65536, busbw=0.9))
    status, out, err = run(capsys, "compare", base, cur)
    assert (status, err) == (1, "")
    assert "FAIL: 1 regression, 0 improvements, 5 within limits" in out
    line = next(x for x in out.splitlines() if "regression " in x and "tree" in x)
    assert "64K" in line and "-10.0%" in line and "+11.1%" in line          # sizes as nccl-tests flags
    assert "ring" not in "".join(x for x in out.splitlines() if "regression " in x)


def test_a_missing_file_is_exit_2(capsys, base, tmp_path):
    assert_error(*run(capsys, "compare", base, tmp_path / "nope.csv"), "CURRENT: no such file", "nope.csv")
    assert_error(*run(capsys, "compare", tmp_path / "nope.csv", base), "BASELINE: no such file")


# ------------------------------------------------------------------------------------- limits

def test_improvements_are_reported_but_pass(capsys, base, tmp_path):
    cur = write(tmp_path, scaled(rows(), "ring", 4194304, busbw=1.25))
    status, out, _ = run(capsys, "compare", base, cur)
    assert status == 0
    assert "PASS: 0 regressions, 1 improvement" in out
    line = next(x for x in out.splitlines() if "improvement " in x)
    assert "ring" in line and "4M" in line and "+25.0%" in line and "-20.0%" in line


def test_changes_within_the_tolerance_pass_and_beyond_it_fail(capsys, base, tmp_path):
    cur = write(tmp_path, scaled(rows(), "ring", 1024, busbw=0.97))
    assert run(capsys, "compare", base, cur)[0] == 0                       # -3 % < 5 %
    assert run(capsys, "compare", base, cur, "--tolerance", "2%")[0] == 1
    assert run(capsys, "compare", base, cur, "--tolerance", "2")[0] == 1     # the % is optional


def test_fail_on_overrides_the_tolerance_per_metric(capsys, base, tmp_path):
    # busbw -4 %, time unchanged (a busbw-only change, as if the size column were edited)
    cur = write(tmp_path, scaled(rows(), "ring", 1024, busbw=0.96, time=1.0))
    assert run(capsys, "compare", base, cur)[0] == 0
    status, out, _ = run(capsys, "compare", base, cur, "--fail-on", "busbw:-3%")
    assert status == 1 and "limits: time +5%, busbw -3%" in out
    assert run(capsys, "compare", base, cur, "--tolerance", "1%", "--fail-on", "busbw:-5%")[0] == 0
    # time +10 % only: passes a time:+20% limit, fails the default
    cur = write(tmp_path, scaled(rows(), "tree", 1024, busbw=1.0, time=1.10))
    assert run(capsys, "compare", base, cur)[0] == 1
    assert run(capsys, "compare", base, cur, "--fail-on", "time:+20%", "--fail-on", "busbw:-3%")[0] == 0
    assert run(capsys, "compare", base, cur, "--fail-on", "time_us:20")[0] == 0


def test_limits_parse():
    assert gate.limits_from(0.05, ["busbw:-3%", "time:+10%"]) == {"time": 0.10, "busbw": 0.03}
    assert gate.limits_from(0.02, ["busbw_GBps:4"]) == {"time": 0.02, "busbw": 0.04}
    assert gate.parse_tolerance("0") == 0 and gate.parse_tolerance("7.5%") == 0.075


@pytest.mark.parametrize("argv,needle", [
    (["--fail-on", "busbw"], "--fail-on: expected METRIC:THRESHOLD such as busbw:-3% or time:+10%, got 'busbw'"),
    (["--fail-on", "bsbw:-3%"], "unknown metric 'bsbw' (did you mean 'busbw'?)"),
    (["--fail-on", "busbw:+3%"], "busbw regresses when it falls; write busbw:-3%"),
    (["--fail-on", "time:-10%"], "time regresses when it rises; write time:+10%"),
    (["--fail-on", "busbw:lots"], "expected a percentage such as 5% or 3.5, got 'lots'"),
    (["--fail-on", "busbw:-3%", "--fail-on", "busbw:-4%"], "busbw given twice"),
    (["--tolerance", "-5%"], "--tolerance: expected a percentage >= 0"),
    (["--format", "html"], "'--format'"),
])
def test_bad_limits_are_exit_2(capsys, base, argv, needle):
    assert_error(*run(capsys, "compare", base, base, *argv), needle)


# -------------------------------------------------------------------------------------- bad input

def test_no_common_rows_is_exit_2_never_a_pass(capsys, base, tmp_path):
    other = rows().assign(topology="switch16", ranks=16)
    assert_error(*run(capsys, "compare", base, write(tmp_path, other)), "no common rows", "switch16")


def test_mismatched_columns_are_exit_2(capsys, base, tmp_path):
    renamed = write(tmp_path, rows().rename(columns={"busbw_GBps": "busbw"}))
    assert_error(*run(capsys, "compare", base, renamed), "CURRENT", "missing column(s) busbw_GBps")
    no_key = write(tmp_path, rows().drop(columns=["engine"]), "nokey.csv")
    assert_error(*run(capsys, "compare", no_key, base), "BASELINE", "missing column(s) engine")


@pytest.mark.parametrize("name,text,needle", [
    ("x.txt", "a,b\n", "no nccl-tests table"),         # any other suffix is read as a log
    ("x.json", "{not json", "malformed JSON"),
    ("x.json", "[1, 2]", "not a hccl-bench results file"),
    ("x.json", '{"schema_version": 2, "rows": []}',
     "schema_version 2 is not supported (this hccl-bench reads version 1); regenerate the file"),
    ("x.json", '{"rows": []}', "schema_version None is not supported"),
    ("x.csv", "", "malformed CSV (empty file; expected a header line)"),
    ("x.csv", ",".join(COLUMNS) + "\n", "no rows"),
])
def test_bad_files_are_exit_2(capsys, base, tmp_path, name, text, needle):
    path = tmp_path / name
    path.write_text(text)
    assert_error(*run(capsys, "compare", base, path), needle)


def test_a_non_number_and_duplicate_keys_are_exit_2(capsys, base, tmp_path):
    bad = rows().astype({"time_us": object})
    bad.loc[0, "time_us"] = "fast"
    assert_error(*run(capsys, "compare", base, write(tmp_path, bad)),
                 "line 2, column time_us: expected a finite number >= 0, got 'fast'")
    dup = pd.concat([rows(), rows().iloc[:1].assign(time_us=lambda d: d.time_us * 2)])
    assert_error(*run(capsys, "compare", base, write(tmp_path, dup, "dup.csv")), "2 rows share their keys")


def edited(column, value, row=5):
    """rows() with one cell replaced (the last row by default: a bad value is found wherever it is)."""
    df = rows().astype({column: object})
    df.loc[row, column] = value
    return df


# (column, value, what the error says after "column COLUMN: "): the cases first
CSV_CASES = [
    ("time_us", -1.0, "expected a finite number >= 0, got '-1.0'"),
    ("time_us", "inf", "expected a finite number >= 0, got 'inf'"),
    ("time_us", "NaN", "expected a finite number >= 0, got 'NaN'"),
    ("ranks", 8.7, "expected a whole number >= 1 and < 2**53, got '8.7'"),
    ("algorithm", "", "expected a non-empty string, got an empty field"),
    ("busbw_GBps", -0.5, "expected a finite number >= 0, got '-0.5'"),
    ("algbw_GBps", "1e999", "expected a finite number >= 0, got '1e999'"),
    ("size_bytes", -8, "expected a whole number >= 0 and < 2**53, got '-8'"),
    ("size_bytes", "1K", "expected a whole number >= 0 and < 2**53, got '1K'"),
    ("ranks", 0, "expected a whole number >= 1 and < 2**53, got '0'"),
    ("count", "", "expected a whole number >= 0 and < 2**53, got an empty field"),
    ("root", -2, "expected a whole number >= -1 and < 2**53, got '-2'"),
    ("topology", "   ", "expected a non-empty string, got an empty field"),
]


@pytest.mark.parametrize("column,value,says", CSV_CASES)
def test_an_impossible_value_in_csv_is_exit_2_naming_line_and_column(capsys, base, tmp_path, column, value, says):
    cur = write(tmp_path, edited(column, value))
    assert_error(*run(capsys, "compare", base, cur), "CURRENT", "cur.csv", f"line 7, column {column}: {says}")
    assert_error(*run(capsys, "compare", cur, base), "BASELINE", "cur.csv", f"line 7, column {column}: {says}")


JSON_CASES = [
    ("time_us", -1.0, "expected a finite number >= 0, got -1.0"),
    ("time_us", float("inf"), "expected a finite number >= 0, got inf"),
    ("time_us", float("nan"), "expected a finite number >= 0, got nan"),
    ("time_us", None, "expected a finite number >= 0, got null"),
    ("ranks", 8.7, "expected a whole number >= 1 and < 2**53, got 8.7"),
    ("ranks", True, "expected a whole number >= 1 and < 2**53, got true"),
    ("ranks", "8", "expected a whole number >= 1 and < 2**53, got the string '8'"),
    ("size_bytes", 2.0 ** 60, "expected a whole number >= 0 and < 2**53, got 1.152921504606847e+18"),
    ("size_bytes", 2 ** 53 + 1, "expected a whole number >= 0 and < 2**53, got 9007199254740993"),  # not 2**53
    ("size_bytes", 10 ** 400, "expected a whole number >= 0 and < 2**53, got 1" + "0" * 29 + "... (401 characters)"),
    ("algorithm", "", "expected a non-empty string, got ''"),
    ("engine", 1, "expected a non-empty string, got 1"),
]


@pytest.mark.parametrize("column,value,says", JSON_CASES)
def test_an_impossible_value_in_json_is_exit_2_naming_its_path(capsys, base, tmp_path, column, value, says):
    cur = write(tmp_path, edited(column, value), "cur.json")
    assert_error(*run(capsys, "compare", base, cur), "CURRENT", "cur.json", f"rows[5].{column}: {says}")


def test_a_key_absent_from_one_json_row_is_exit_2(capsys, base, tmp_path):
    records = rows().to_dict(orient="records")
    del records[2]["busbw_GBps"]
    path = tmp_path / "cur.json"
    path.write_text(json.dumps({"schema_version": 1, "rows": records}))
    assert_error(*run(capsys, "compare", base, path), "rows[2].busbw_GBps: expected a finite number >= 0, "
                 "got nothing (the key is absent)")


def test_whole_numbers_written_as_floats_are_read_exactly(capsys, base, tmp_path):
    """ranks and sizes as 8.0 (JSON, or a CSV pandas wrote from a float column) are the same rows."""
    floats = rows().astype({"ranks": float, "size_bytes": float, "count": float})
    for name in ("cur.csv", "cur.json"):
        status, out, err = run(capsys, "compare", base, write(tmp_path, floats, name), "--tolerance", "0")
        assert (status, err) == (0, ""), err
        assert "6 within limits, of 6 common rows" in out
    assert "8.0,analytic,1024.0" in (tmp_path / "cur.csv").read_text()


def test_percentile_and_counter_columns_are_checked_and_counters_may_be_empty(capsys, base, tmp_path):
    spread = rows().assign(time_us_p50=rows().time_us, time_us_max=rows().time_us * 1.1, events=float("nan"))
    ok = write(tmp_path, spread)
    assert ok.read_text().splitlines()[1].endswith(",")                      # events written as an empty field
    assert run(capsys, "compare", base, ok)[0] == 0                           # as for analytic rows
    spread.loc[3, "time_us_max"] = -2.0
    assert_error(*run(capsys, "compare", base, write(tmp_path, spread)),
                 "line 5, column time_us_max: expected a finite number >= 0, got '-2.0'")
    spread.loc[3, "time_us_max"] = 1.0
    spread.loc[1, "events"] = -1.0
    assert_error(*run(capsys, "compare", base, write(tmp_path, spread)),
                 "line 3, column events: expected a finite number >= 0 or nothing, got '-1.0'")


def test_every_column_a_sweep_writes_has_a_type():
    noisy = Noise(iters=3)
    assert set(sweep_columns(stats=True, auto=True, noise=noisy, matrix=True)) == set(results_read.COLUMN_TYPES)


@pytest.mark.parametrize("text,needle", [
    ("a,b\n1,2,3\n", "malformed CSV: line 2 has 3 fields, the header 2"),
    (",".join(COLUMNS) + ",\n" + "x," * len(COLUMNS) + "\n", "header field 14 has no column name"),
    (",".join(COLUMNS + ["time_us"]) + "\n", "the header names column 'time_us' twice"),
])
def test_a_malformed_csv_is_exit_2(capsys, base, tmp_path, text, needle):
    path = tmp_path / "x.csv"
    path.write_text(text)
    assert_error(*run(capsys, "compare", base, path), needle)


def test_a_short_line_is_refused_not_padded(capsys, base, tmp_path):
    """Two writers interleaving lines leave a line with too few fields: never read as empty values."""
    cur = write(tmp_path, rows())
    lines = cur.read_text().splitlines()
    lines[3] = ",".join(lines[3].split(",")[:7])
    cur.write_text("\n".join(lines) + "\n")
    assert_error(*run(capsys, "compare", base, cur), "malformed CSV: line 4 has 7 fields, the header 13")


def test_blank_lines_are_skipped_and_line_numbers_stay_true(capsys, base, tmp_path):
    cur = write(tmp_path, edited("time_us", -3.0))
    lines = cur.read_text().splitlines()
    cur.write_text("\n".join(lines[:2] + [""] + lines[2:]) + "\n")
    assert_error(*run(capsys, "compare", base, cur), "line 8, column time_us")


@pytest.mark.parametrize("field,value,says", [
    ("schema_version", True, "schema_version: expected an integer such as 1, got true"),
    ("hccl_bench_version", "", "hccl_bench_version: expected a non-empty string, got ''"),
    ("inputs_sha256", "abc", "inputs_sha256: expected 64 lowercase hex digits, got the string 'abc'"),
    ("git_revision", 7, "git_revision: expected 40 lowercase hex digits, got 7"),
    ("topology", "switch8", "topology: expected an object, got the string 'switch8'"),
])
def test_mistyped_metadata_is_exit_2(capsys, base, tmp_path, field, value, says):
    path = tmp_path / "cur.json"
    path.write_text(json.dumps({"schema_version": 1, field: value, "rows": rows().to_dict(orient="records")}))
    assert_error(*run(capsys, "compare", base, path), "cur.json", says)
    sidecar = Path(str(base) + ".meta.json")
    sidecar.write_text(json.dumps({"schema_version": 1, field: value}))
    assert_error(*run(capsys, "compare", base, base), "base.csv.meta.json", says)


def test_an_empty_json_key_is_exit_2(capsys, base, tmp_path):
    records = rows().to_dict(orient="records")
    records[1][""] = 3
    path = tmp_path / "cur.json"
    path.write_text(json.dumps({"schema_version": 1, "rows": records}))
    assert_error(*run(capsys, "compare", base, path), "rows[1] has a key with no column name")


def test_a_negative_time_no_longer_passes_the_gate_as_an_improvement(capsys, base, tmp_path):
    """The issue's case: time_us -1 read as a 100 % improvement, exit 0."""
    cur = write(tmp_path, rows().assign(time_us=lambda d: d.time_us.where(d.index != 0, -1.0)))
    status, out, err = run(capsys, "compare", base, cur)
    assert status == 2 and "improvement" not in out + err


def test_a_directory_is_not_called_missing(capsys, base, tmp_path):
    assert_error(*run(capsys, "compare", base, tmp_path), "CURRENT: a directory, not a file")


def test_identical_repeated_rows_count_once(capsys, tmp_path):
    """Tiny AllGather sizes round to 0 bytes: several identical rows, which compare takes once."""
    out = tmp_path / "ag.csv"
    status, _, err = run(capsys, "sweep", "-t", "switch8", "-c", "all_gather", "-a", "ring", "-b", "8", "-e", "1K",
                         "-f", "2", "-q", "-o", out, "--format", "csv")
    assert status == 0, err
    assert pd.read_csv(out).size_bytes.eq(0).sum() > 1
    status, _, err = run(capsys, "compare", out, out)
    assert status == 0, err


# ----------------------------------------------------------------------------- rows in one file only

def test_rows_in_one_file_are_reported_and_fail_only_when_strict(capsys, base, tmp_path):
    cur = write(tmp_path, rows().iloc[1:])
    status, out, _ = run(capsys, "compare", base, cur)
    assert status == 0
    assert "1 row only in BASELINE: all_reduce ring switch8 8r analytic 1024B float32" in out
    assert "1 only in BASELINE, 0 only in CURRENT" in out
    status, out, _ = run(capsys, "compare", base, cur, "--strict")
    assert status == 1 and "FAIL" in out and "(--strict: these fail)" in out


def test_only_the_first_few_unmatched_rows_are_listed(tmp_path):
    many = write(tmp_path, pd.concat([rows().assign(size_bytes=rows().size_bytes + k) for k in range(3)]), "m.csv")
    c = gate.compare(results_read.load_results(str(many)), results_read.load_results(str(write(tmp_path, rows()))))
    (line,) = gate.only_in_lines(c)
    assert line.startswith("12 rows only in BASELINE") and line.endswith("; and 7 more")


# ---------------------------------------------------------------------------------------- formats

def test_markdown_has_the_regression_in_a_table(capsys, base, tmp_path):
    cur = write(tmp_path, scaled(rows(), "tree", 65536, busbw=0.9))
    status, out, _ = run(capsys, "compare", base, cur, "--format", "markdown")
    assert status == 1
    lines = out.splitlines()
    assert lines[0].startswith("### hccl-bench compare: ") and "FAIL: 1 regression" in lines[0]
    table = [x for x in lines if x.startswith("|")]
    header, rule, *body = table
    cells = [c.strip() for c in header.strip("|").split("|")]
    assert cells[:8] == ["status", *gate.KEYS] and set(rule) <= set("|-")
    assert all(len(row.strip("|").split("|")) == len(cells) for row in body)
    (row,) = body
    values = dict(zip(cells, (c.strip() for c in row.strip("|").split("|"))))
    assert values["status"] == "**regression**" and values["algorithm"] == "tree"
    assert values["size_bytes"] == "65536" and values["busbw change"] == "-10.0%"


def test_junit_has_a_testcase_per_row_and_a_failure_per_regression(capsys, base, tmp_path):
    cur = write(tmp_path, scaled(scaled(rows(), "tree", 65536, busbw=0.9), "ring", 1024, busbw=1.5).iloc[:-1])
    junit = tmp_path / "gate.xml"
    status, _, _ = run(capsys, "compare", base, cur, "--junit", junit)
    assert status == 1
    root = ET.parse(junit).getroot()
    suite = root.find("testsuite")
    cases = suite.findall("testcase")
    assert len(cases) == 6 and suite.get("tests") == "6"
    assert (suite.get("failures"), suite.get("skipped"), root.get("failures")) == ("1", "1", "1")
    failed = [c for c in cases if c.find("failure") is not None]
    assert [(c.get("classname"), c.get("name")) for c in failed] == [
        ("all_reduce.tree", "switch8 8r analytic 65536B float32")]
    assert "busbw -10.0%" in failed[0].find("failure").get("message")
    skipped = [c for c in cases if c.find("skipped") is not None]
    assert skipped[0].get("name").endswith("4194304B float32") and skipped[0].get("classname") == "all_reduce.tree"


def test_junit_of_a_pass_has_no_failures(capsys, base, tmp_path):
    junit = tmp_path / "gate.xml"
    assert run(capsys, "compare", base, base, "--junit", junit, "--format", "markdown")[0] == 0
    suite = ET.parse(junit).getroot().find("testsuite")
    assert suite.get("failures") == "0" and len(suite.findall("testcase")) == 6


def test_junit_unwritable_is_exit_2(capsys, base, tmp_path):
    assert_error(*run(capsys, "compare", base, base, "--junit", tmp_path / "no" / "dir.xml"), "--junit: cannot write")


# -------------------------------------------------------------------------------- files and sweep

def test_json_and_csv_of_the_same_rows_compare_equal(capsys, base, tmp_path):
    cur = write(tmp_path, rows(), "cur.json")
    status, out, _ = run(capsys, "compare", base, cur, "--tolerance", "0")
    assert status == 0 and "0 improvements" in out


def test_parquet_reads(capsys, base, tmp_path):
    pytest.importorskip("pyarrow")
    path = tmp_path / "cur.parquet"
    scaled(rows(), "ring", 65536, busbw=0.5).to_parquet(path, index=False)
    assert run(capsys, "compare", base, path)[0] == 1


def test_a_sweep_today_matches_the_committed_baseline(capsys, tmp_path):
    """The CI job of docs/ci.md, for the ring only (the other algorithms' rows are only in BASELINE)."""
    out = tmp_path / "ring.json"
    status, _, _ = run(capsys, "sweep", "-t", "switch8", "-c", "all_reduce", "-a", "ring", "-b", "1K", "-e", "64M",
                       "-f", "8", "-o", out, "--format", "csv")
    assert status == 0
    status, text, _ = run(capsys, "compare", BASELINE, out, "--tolerance", "0")
    assert status == 0 and "of 6 common rows" in text and "30 only in BASELINE" in text
    status, _, _ = run(capsys, "compare", BASELINE, out, "--strict")
    assert status == 1


def test_the_baseline_is_committed_not_ignored():
    git = shutil.which("git")
    if git is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    r = subprocess.run([git, "check-ignore", "-q", str(BASELINE)], cwd=ROOT, check=False)
    assert r.returncode == 1                                            # 1 = not ignored


def test_help_exits_0(capsys):
    status, out, _ = run(capsys, "compare", "--help")
    assert status == 0
    for flag in ("--tolerance", "--fail-on", "--strict", "--format", "--junit"):
        assert flag in out
    assert CliRunner().invoke(cli, ["compare", "-h"]).exit_code == 0


# ------------------------------------------------------------------------------ what-ifs (--set)

def whatif(tmp_path, name, *overrides):
    path = tmp_path / name
    argv = ["sweep", "-t", "switch8", "-a", "ring", "-b", "1M", "-e", "4M", "-q", "-o", str(path)]
    for item in overrides:
        argv += ["--set", item]
    assert CliRunner().invoke(cli, argv).exit_code == 0
    return path


def test_a_set_run_is_labelled_and_compare_says_how_the_inputs_differ(capsys, tmp_path):
    """switch8 ring AllReduce at 1 and 4 MiB: 14 steps of S/8 over 50 vs 40 GB/s, so the times rise (they are
    slower) and compare fails, naming the key that changed, with the rows matched on the preset's name."""
    base, slower = whatif(tmp_path, "b.csv"), whatif(tmp_path, "c.csv", "bandwidth=40GB/s")
    assert set(pd.read_csv(slower).topology) == {"switch8[bandwidth=40GB/s]"}
    status, out, _ = run(capsys, "compare", base, slower)
    assert status == 1 and "2 regressions, 0 improvements, 0 within limits, of 2 common rows" in out
    assert "inputs differ: topology.bandwidth is 50GB/s in BASELINE, 40GB/s in CURRENT; topology.name is " \
           "switch8 in BASELINE, switch8[bandwidth=40GB/s] in CURRENT" in out.replace("\n", " ")
    status, out, _ = run(capsys, "compare", base, base)
    assert status == 0 and "inputs differ" not in out


def test_another_topology_is_not_matched_as_a_what_if(capsys, tmp_path):
    """Only one preset's runs are matched across labels: switch8 against ring8 keeps 'no common rows'."""
    base = whatif(tmp_path, "b.csv")
    ring = tmp_path / "r.csv"
    assert CliRunner().invoke(cli, ["sweep", "-t", "ring8", "-a", "ring", "-b", "1M", "-e", "4M", "-q", "-o",
                                    str(ring)]).exit_code == 0
    assert_error(*run(capsys, "compare", base, ring), "no common rows")
