"""Traffic matrices everywhere a sweep goes (docs/alltoallv.md): --resume with --matrix, the rows' matrix
column, tune, the Python API, scenario files, --trace and compare's gate.

Sizes by hand: hot:0:0.5 on 8 ranks is whole units: every rank sends rank 0 half its traffic and each of
the others 1/14, i.e. 7 units to rank 0 and 1 to each other rank: 14 units a rank, 112 in all. A requested
size S (float32) is S/4 elements a rank on average, a unit is floor(8 (S/4) / 112) elements and the size
reported floor(unit * 112 / 8) * 4 bytes: 1K -> unit 18 -> 1008 B; 8K -> 146 -> 8176 B; 64K -> 1170 -> 65520 B.
Uniform all_to_allv (one unit a pair, 64 in all) keeps 1K: unit 32 -> 1024 B.
"""

import dataclasses
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hcclsim.algorithms import striped as ST
from helpers import assert_one_line_error
from helpers import run_cli as run

import hcclsim
from hcclsim.core.errors import ConfigError, ScheduleError
from hcclsim.network.topology import build_flat, build_hierarchical
from hcclsim.results.read import load_results
from hcclsim.schedule import collectives as C
from hcclsim.schedule import matrix as M
from hcclsim.schedule.algorithm import Problem, parse_spec
from hcclsim.schedule.checker import check
from hcclsim.schedule.ir import F_C3
from hcclsim.studies import scenario as S
from hcclsim.studies import study as R
from hcclsim.sweeping import budget as SB
from hcclsim.sweeping.sweep import COLUMNS

HOT = "hot:0:0.5"
SWEEP = ["sweep", "-c", "all_to_allv", "-t", "switch8", "-a", "direct", "-b", "1K", "-f", "8", "-q", "-j", "1",
         "--format", "csv"]


def files(folder: Path) -> dict:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def refused(capsys, folder: Path, *argv) -> str:
    """argv refused in one line (status 2), every file in folder byte for byte as it was."""
    before = files(folder)
    status, out, err = run(capsys, *argv)
    assert_one_line_error(status, out, err, "--resume: ")
    assert files(folder) == before
    return err


def hot_csv(path: Path, changed: bool = False) -> Path:
    """hot:0:0.5's weights as a file (7 to rank 0, 1 to the others); changed: rank 7 sends its 7 to rank 1
    instead (other traffic, the same total: the same sizes)."""
    w = np.ones((8, 8))
    w[:, 0] = 7
    if changed:
        w[7, :2] = 1, 7
    path.write_text("\n".join(",".join(f"{x:g}" for x in row) for row in w) + "\n")
    return path


@pytest.fixture
def made(capsys, tmp_path):
    """r.csv: hot:0:0.5 at 1K and 8K."""
    path = tmp_path / "r.csv"
    status, _, err = run(capsys, *SWEEP, "-e", "8K", "--matrix", HOT, "-o", path)
    assert status == 0, err
    return path


# ------------------------------------------------------------------------------------------ --resume

def test_resume_with_the_same_matrix_completes_the_file(capsys, made):
    before = made.read_text().splitlines()
    status, _, err = run(capsys, *SWEEP, "-e", "64K", "--matrix", HOT, "-o", made, "--resume")
    assert status == 0, err
    rows = pd.read_csv(made, keep_default_na=False)
    assert list(rows.size_bytes) == [1008, 8176, 65520]
    assert set(rows.matrix) == {HOT}
    assert made.read_text().splitlines()[:3] == before         # the rows kept as they were
    meta = json.loads(Path(f"{made}.meta.json").read_text())
    assert meta["setup"]["matrix"] == HOT and meta["inputs"]["matrix"] == HOT


@pytest.mark.parametrize("change, named", [
    (["--matrix", "hot:1:0.5"], "made with --matrix hot:0:0.5, this sweep has --matrix hot:1:0.5"),
    ([], "made with --matrix hot:0:0.5, this sweep has no --matrix (uniform)"),
])
def test_resume_with_another_matrix_is_refused_naming_both(capsys, made, change, named):
    assert named in refused(capsys, made.parent, *SWEEP, "-e", "64K", *change, "-o", made, "--resume")


def test_resume_of_a_matrix_file_checks_its_contents(capsys, tmp_path):
    m, out = hot_csv(tmp_path / "m.csv"), tmp_path / "r.csv"
    assert run(capsys, *SWEEP, "-e", "1K", "--matrix", m, "-o", out)[0] == 0
    assert run(capsys, *SWEEP, "-e", "8K", "--matrix", m, "-o", out, "--resume")[0] == 0
    assert list(pd.read_csv(out).size_bytes) == [1008, 8176]     # the file's bytes are hot:0:0.5's weights
    hot_csv(m, changed=True)                                     # the same name, other traffic
    err = refused(capsys, tmp_path, *SWEEP, "-e", "64K", "--matrix", m, "-o", out, "--resume")
    assert f"made with --matrix {m} (contents sha256 " in err and "other traffic" in err


def test_a_file_from_before_the_matrix_column_resumes_and_reads_as_uniform(capsys, tmp_path):
    out = tmp_path / "r.csv"
    assert run(capsys, *SWEEP, "-e", "1K", "-o", out)[0] == 0
    old = pd.read_csv(out)
    assert list(old.matrix) == ["uniform"] and list(old.size_bytes) == [1024]
    old.drop(columns="matrix").to_csv(out, index=False)         # as hccl-bench wrote it before the column
    assert list(load_results(str(out)).matrix) == ["uniform"]
    status, _, err = run(capsys, *SWEEP, "-e", "8K", "-o", out, "--resume")
    assert status == 0, err
    rows = pd.read_csv(out)
    assert list(rows.matrix) == ["uniform"] * 2 and list(rows.size_bytes) == [1024, 8192]


# ------------------------------------------------------------------------------------ rows and flags

def test_rows_name_the_matrix_and_only_a_sweep_of_all_to_allv_has_the_column(capsys, tmp_path):
    status, out, err = run(capsys, *SWEEP, "-c", "all_gather,all_to_allv", "-e", "1K", "--matrix", HOT)
    assert status == 0, err
    rows = pd.read_csv(pd.io.common.StringIO(out), keep_default_na=False)
    assert dict(zip(rows.collective, rows.matrix)) == {"all_gather": "", "all_to_allv": HOT}
    assert rows.size_bytes[rows.collective == "all_to_allv"].tolist() == [1008]
    status, out, _ = run(capsys, *SWEEP, "-c", "all_gather", "-e", "1K")
    assert out.splitlines()[0] == ",".join(COLUMNS)


def test_matrix_with_send_recv_or_pp_ring_is_refused(capsys):
    # it would scale their single messages by all_to_allv's matrix (send_recv of 1K reported 0 bytes)
    for other in ("send_recv", "pp_ring"):
        assert_one_line_error(*run(capsys, *SWEEP, "-c", f"all_to_allv,{other}", "-e", "1K", "--matrix", HOT),
                              "--matrix: ", "send_recv and pp_ring keep their own pattern")


def test_trace_times_the_matrix(capsys, tmp_path):
    trace = tmp_path / "t.json"
    assert run(capsys, *SWEEP, "-e", "1K", "--matrix", HOT, "--trace", trace)[0] == 0
    other = json.loads(trace.read_text())["otherData"]
    assert other["size_bytes"] == 1008 and other["matrix"] == "hot:0:0.5"


def test_tune_takes_a_matrix(capsys):
    status, out, err = run(capsys, "tune", "-c", "all_to_allv", "-t", "switch8", "-b", "1K", "-e", "8K", "-f", "8",
                           "--matrix", HOT, "--format", "csv")
    assert status == 0, err
    ranges = pd.read_csv(pd.io.common.StringIO(out))
    assert ranges.min_size_bytes.tolist() == [1008] and ranges.max_size_bytes.tolist() == [8176]
    assert ranges.matrix.tolist() == [HOT]
    assert_one_line_error(*run(capsys, "tune", "-c", "all_reduce", "-t", "switch8", "--matrix", HOT),
                          "--matrix: sets all_to_allv's traffic")


# ------------------------------------------------------------------------------------------- the API

def test_the_api_takes_a_matrix_and_records_it(tmp_path):
    rows = hcclsim.sweep("switch8", "all_to_allv", "direct", [1024], matrix=HOT)
    assert rows.size_bytes.tolist() == [1008] and rows.matrix.tolist() == [HOT]
    assert rows.attrs["provenance"]["setup"]["matrix"] == HOT
    m = hot_csv(tmp_path / "m.csv")
    assert hcclsim.sweep("switch8", "all_to_allv", "direct", [1024], matrix=m).size_bytes.tolist() == [1008]
    traffic = M.parse(HOT, 8)
    assert hcclsim.sweep("switch8", "all_to_allv", "direct", [1024], matrix=traffic).size_bytes.tolist() == [1008]
    ranges = hcclsim.tune("switch8", "all_to_allv", [1024], matrix=HOT)
    assert ranges.min_size_bytes.tolist() == [1008]


@pytest.mark.parametrize("matrix, needle", [
    (np.ones((8, 8)), "matrix: expected a --matrix value"),
    (M.uniform(4), "has 4 ranks, expected 8"),
    ("zipf", "expected zipf:S"),
])
def test_the_api_refuses_a_bad_matrix(matrix, needle):
    with pytest.raises(ConfigError, match=needle):
        hcclsim.sweep("switch8", "all_to_allv", "direct", [1024], matrix=matrix)


# ------------------------------------------------------------------------------------- scenario files

HEAD = '[scenario]\ntitle = "t"\nreproduces = "r"\n'
SECTION = '[[sweep]]\nname = "s"\ntopology = "switch8"\ncollective = "all_to_allv"\nalgorithm = "direct"\n' \
          'sizes = ["1K"]\n'


def test_a_scenario_sweep_takes_a_matrix(tmp_path):
    path = tmp_path / "s.toml"
    path.write_text(HEAD + SECTION + f'matrix = "{HOT}"\n')
    frame = R.run_section(S.load(str(path)).sections[0]).frame
    assert frame.size_bytes.tolist() == [1008] and frame.matrix.tolist() == [HOT]


@pytest.mark.parametrize("line, needles", [
    ("matrix = 3\n", ["[[sweep]] s: matrix: expected a --matrix value"]),
    ('matrix = "zipf:x"\n', ["[[sweep]] s: matrix: 'zipf:x': expected zipf:S"]),
    ('matrix = "BAD"\n', ["[[sweep]] s: matrix ", "small.csv: a 2 x 2 matrix, expected 8 x 8"]),
])
def test_a_bad_scenario_matrix_is_refused_on_load(capsys, tmp_path, line, needles):
    (tmp_path / "small.csv").write_text("0,1\n1,0\n")
    path = tmp_path / "s.toml"
    path.write_text(HEAD + SECTION + line.replace("BAD", str(tmp_path / "small.csv")))
    assert_one_line_error(*run(capsys, "run", path, "-o", tmp_path / "out"), str(path), *needles)
    assert not (tmp_path / "out").exists()


def test_a_scenario_matrix_needs_all_to_allv(capsys, tmp_path):
    path = tmp_path / "s.toml"
    path.write_text(HEAD + SECTION.replace("all_to_allv", "all_reduce") + f'matrix = "{HOT}"\n')
    assert_one_line_error(*run(capsys, "run", path, "-o", tmp_path / "out"),
                          "[[sweep]] s: matrix: sets all_to_allv's traffic; the collectives are all_reduce")


# ------------------------------------------------------------------------------------------- compare

def test_compare_refuses_different_matrices_and_compares_the_same(capsys, tmp_path):
    a, b, c = tmp_path / "a.csv", tmp_path / "b.csv", tmp_path / "c.csv"
    for path, matrix in ((a, HOT), (b, HOT), (c, "hot:1:0.5")):        # hot:1 has hot:0's sizes
        assert run(capsys, *SWEEP, "-e", "1K", "--matrix", matrix, "-o", path)[0] == 0
    status, _, err = run(capsys, "compare", a, b)
    assert status == 0, err
    assert_one_line_error(*run(capsys, "compare", a, c), "all_to_allv direct switch8 8r analytic 1008B",
                          "BASELINE timed --matrix hot:0:0.5, CURRENT --matrix hot:1:0.5", "different traffic")


def test_compare_refuses_one_matrix_file_with_other_contents(capsys, tmp_path):
    m, a, b = tmp_path / "m.csv", tmp_path / "a.csv", tmp_path / "b.csv"
    hot_csv(m)
    assert run(capsys, *SWEEP, "-e", "1K", "--matrix", m, "-o", a)[0] == 0
    hot_csv(m, changed=True)
    assert run(capsys, *SWEEP, "-e", "1K", "--matrix", m, "-o", b)[0] == 0
    assert_one_line_error(*run(capsys, "compare", a, b), f"--matrix {m} has other contents in BASELINE")


def test_compare_matches_an_old_file_without_the_column_as_uniform(capsys, tmp_path):
    old, new = tmp_path / "old.csv", tmp_path / "new.csv"
    assert run(capsys, *SWEEP, "-e", "1K", "-o", new)[0] == 0
    pd.read_csv(new).drop(columns="matrix").to_csv(old, index=False)
    assert run(capsys, "compare", old, new)[0] == 0


# ------------------------------------------------------------------------------------ leftovers

@pytest.mark.parametrize("n", [2, 5, 9])
def test_the_striped_budget_rule_is_the_compiled_schedules_dimensions(n):
    """Every share: none through the NICs, some with two slot ends (2m <= K: lag 6), some with one (lag 3,
    so a ReduceScatter on 9 ranks waits), all; and nic=auto's own key."""
    topo = build_hierarchical("rack", "switch", n, 800e9, 500e-9, False, "fat_tree", 1, 200e9, 1e-6)
    for coll in ("all_gather", "reduce_scatter", "all_reduce"):
        problem = Problem(coll, topo)
        auto = parse_spec("striped")
        keys = [0, ST.K // 4, 3 * ST.K // 4, ST.K,
                auto.structure_key(problem, C.sizing(coll, 64 << 20, 4, n), 4)]
        for key in keys:
            algo = parse_spec("striped")
            assert SB.dims(algo, problem, key) == SB.dims_of(algo.compile(problem, key)), (coll, key)


def test_the_checker_counts_a_matrix_schedules_elements_per_unit():
    topo, traffic = build_flat("t", "switch", 4, 50e9, 0.0), M.parse("hot:0", 4)
    algo, problem = parse_spec("direct"), Problem(C.ALL_TO_ALLV, topo)
    s = algo.compile(problem, algo.structure_key(problem, C.sizing(C.ALL_TO_ALLV, 1 << 10, 4, 4, traffic), 4))
    wrong = s.tmpl.copy()
    wrong[0, F_C3 + 1] = 2                                  # rank 0's units for rank 1 sent to rank 2
    with pytest.raises(ScheduleError, match=r"direct all_to_allv on 4 ranks, 3 elements per unit, emitted order"):
        check(dataclasses.replace(s, tmpl=wrong), 3)
