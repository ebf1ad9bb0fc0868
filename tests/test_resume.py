"""--resume checks what it resumes (hcclsim.results.incremental, docs/config.md "Long sweeps"): rows made
with other inputs, invalid rows, a newer schema and files that are not ours are refused in one line,
leaving every file byte for byte as it was; a different grid is completed into the union."""

import json
from pathlib import Path

import pandas as pd
import pytest
from helpers import record_units
from helpers import run_cli as run

import hcclsim.cli._long as long_module
from hcclsim.results.incremental import RowWriter, sidecar

SWEEP = ["sweep", "-t", "switch8", "-a", "ring", "-b", "1K", "-e", "64K", "-f", "8", "-q", "--format", "csv", "-j", "1"]
HEADER = "collective,algorithm,topology,ranks,engine,size_bytes,count,dtype,root,time_us,algbw_GBps,busbw_GBps,protocol"


def files(folder: Path) -> dict:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def refused(capsys, folder: Path, *argv) -> str:
    """Run argv; assert a one-line refusal (status 2) that changed no file in folder; return the message."""
    before = files(folder)
    status, out, err = run(capsys, *argv)
    assert status == 2 and out == "" and err.count("\n") == 1 and err.startswith("hccl-bench: error: --resume: "), err
    assert files(folder) == before
    return err


@pytest.fixture
def made(capsys, tmp_path):
    """r.csv as `sweep SWEEP -o r.csv` writes it (3 rows: ring at 1K, 8K, 64K)."""
    path = tmp_path / "r.csv"
    status, _, err = run(capsys, *SWEEP, "-o", path)
    assert status == 0, err
    return path


# ------------------------------------------------------------------------------------ other inputs

@pytest.mark.parametrize(("change", "named"), [
    (["--set", "bandwidth=5GB/s"], "made with topology.bandwidth=50GB/s, this sweep has topology.bandwidth=5GB/s"),
    (["--set", "endpoint.launch_overhead=1us"], "launch_overhead=0.0, this sweep has "),
    (["--protocol", "simple"], "endpoint.protocol=none, this sweep has topology.resolved.endpoint.protocol=simple"),
    (["-t", "ring8"], "made with topology.name=switch8, this sweep has topology.name=ring8"),
    (["--engine", "packet"], "made with engines=analytic, this sweep has engines=packet"),
    (["--engine", "analytic,packet"], "made with engines=analytic, this sweep has engines=analytic,packet"),
    (["--launch", "device"], "made with launch=host, this sweep has launch=device"),
    (["--seed", "3"], "made with noise.seed=0, this sweep has noise.seed=3"),
    (["--iters", "2"], "made with noise.iters=1, this sweep has noise.iters=2"),
    (["--skew", "1us"], "made with noise.skew_s=0.0, this sweep has noise.skew_s=1e-06"),
    (["--jitter", "1us"], "made with noise.jitter_s=0.0, this sweep has noise.jitter_s=1e-06"),
    (["-d", "float16"], "made with dtype=float32, this sweep has dtype=float16"),
    (["-r", "1"], "made with root=0, this sweep has root=1"),
    (["--stats"], "made with stats=False, this sweep has stats=True"),
])
def test_other_inputs_are_refused_naming_what_differs(capsys, made, change, named):
    err = refused(capsys, made.parent, *SWEEP, "-o", made, "--resume", *change)
    assert named in err and "write to another file" in err, err


def test_a_seed_of_a_noisy_sweep_is_checked_too(capsys, tmp_path):
    path = tmp_path / "n.csv"
    noisy = [*SWEEP, "--iters", "3", "--jitter", "1us", "-o", path]
    assert run(capsys, *noisy, "--seed", "1")[0] == 0
    assert "noise.seed=1, this sweep has noise.seed=2" in refused(capsys, tmp_path, *noisy, "--seed", "2", "--resume")


def test_a_json_file_is_checked_against_its_embedded_metadata(capsys, tmp_path):
    path = tmp_path / "r.json"
    assert run(capsys, *SWEEP, "-o", path)[0] == 0
    err = refused(capsys, tmp_path, *SWEEP, "-o", path, "--resume", "--set", "bandwidth=5GB/s")
    assert "topology.bandwidth=50GB/s, this sweep has topology.bandwidth=5GB/s" in err


# ------------------------------------------------------------------------------------ another grid

def test_another_grid_and_algorithm_list_give_the_union_computing_only_what_is_new(capsys, monkeypatch, made):
    computed = record_units(monkeypatch)
    wider = ["-a", "ring,tree", "-b", "1K", "-e", "512K", "-f", "8"]
    status, _, err = run(capsys, *SWEEP, *wider, "-o", made, "--resume")
    assert status == 0, err
    # ring at 512K and tree at 1K..512K: 5 new points; ring at 1K, 8K and 64K were in the file
    assert sorted(computed) == sorted([("all_reduce", "ring", "analytic", 512 << 10)] +
                                      [("all_reduce", "tree", "analytic", s << 10) for s in (1, 8, 64, 512)])
    fresh = made.parent / "fresh.csv"
    assert run(capsys, *SWEEP, *wider, "-o", fresh)[0] == 0
    assert made.read_text() == fresh.read_text()
    meta, want = (json.loads(Path(f"{p}.meta.json").read_text()) for p in (made, fresh))
    assert meta["inputs"]["sizes"] == [1 << 10, 8 << 10, 64 << 10, 512 << 10] and "in_progress" not in meta
    assert meta["inputs_sha256"] == want["inputs_sha256"] and meta["setup_sha256"] == want["setup_sha256"]


def test_a_grid_that_does_not_cover_the_file_keeps_its_rows(capsys, monkeypatch, made):
    computed = record_units(monkeypatch)
    status, _, err = run(capsys, *SWEEP, "-b", "512K", "-e", "512K", "-o", made, "--resume")
    assert status == 0, err
    assert computed == [("all_reduce", "ring", "analytic", 512 << 10)]
    rows = pd.read_csv(made)
    assert list(rows.size_bytes) == [1 << 10, 8 << 10, 64 << 10, 512 << 10]
    meta = json.loads(Path(f"{made}.meta.json").read_text())
    assert meta["inputs"]["sizes"] == [1 << 10, 8 << 10, 64 << 10, 512 << 10]


def test_sizes_that_round_to_the_same_point_are_not_taken_for_duplicates(capsys, tmp_path):
    """AllGather of 1..16 B on 8 ranks is 0 B five times: five identical rows, a resume keeps them."""
    path = tmp_path / "ag.csv"
    argv = ["sweep", "-t", "switch8", "-c", "all_gather", "-a", "ring", "-b", "1", "-e", "16", "-f", "2", "-q",
            "--format", "csv", "-o", path]
    assert run(capsys, *argv)[0] == 0
    before = path.read_text()
    assert before.count(",0,0,float32,") == 5
    status, _, err = run(capsys, *argv, "--resume")
    assert status == 0 and path.read_text() == before, err
    lines = before.splitlines(keepends=True)
    path.write_text(before + lines[-1])                           # a sixth copy: more than the grid asks for
    assert "appears 6 times, the file's grid asks for it 5 time(s)" in refused(capsys, tmp_path, *argv, "--resume")


# ------------------------------------------------------------------------------------ bad rows

def edited(path: Path, line: int, column: str, value: str) -> None:
    lines = path.read_text().splitlines(keepends=True)
    cells = lines[line - 1].rstrip("\n").split(",")
    cells[HEADER.split(",").index(column)] = value
    lines[line - 1] = ",".join(cells) + "\n"
    path.write_text("".join(lines))


@pytest.mark.parametrize(("line", "column", "value", "expected"), [
    (3, "time_us", "-14.3", "time_us is '-14.3', expected a finite number >= 0"),
    (2, "time_us", "nan", "time_us is 'nan', expected a finite number >= 0"),
    (4, "busbw_GBps", "inf", "busbw_GBps is 'inf', expected a finite number >= 0"),
    (2, "algbw_GBps", "", "algbw_GBps is '', expected a finite number >= 0"),
    (3, "size_bytes", "8192.5", "size_bytes is '8192.5', expected a whole number >= 0"),
    (3, "size_bytes", "lots", "size_bytes is 'lots', expected a whole number >= 0"),
    (2, "ranks", "9", "ranks is '9', expected 8"),
    (2, "engine", "packet", "engine is 'packet', expected one of analytic"),
    (4, "root", "0", "root is '0', expected 0 for broadcast and reduce, -1 otherwise"),
    (3, "size_bytes", "4096", "size_bytes 4096 is not a size of the file's grid"),
])
def test_an_invalid_row_is_refused_naming_its_line(capsys, made, line, column, value, expected):
    edited(made, line, column, value)
    err = refused(capsys, made.parent, *SWEEP, "-o", made, "--resume")
    assert f"'{made}' line {line}: " in err and expected in err, err


def test_a_duplicated_row_and_a_repeated_key_are_refused(capsys, made):
    lines = made.read_text().splitlines(keepends=True)
    made.write_text("".join(lines) + lines[2])
    err = refused(capsys, made.parent, *SWEEP, "-o", made, "--resume")
    assert f"'{made}' line 5: all_reduce ring analytic 8192 B appears 2 times" in err, err
    made.write_text("".join(lines) + lines[2].replace("14.2867", "15"))
    err = refused(capsys, made.parent, *SWEEP, "-o", made, "--resume")
    assert f"'{made}' line 5: all_reduce ring analytic 8192 B appears before with other values" in err, err


def test_a_row_of_the_wrong_width_is_refused(capsys, made):
    lines = made.read_text().splitlines(keepends=True)
    made.write_text("".join(lines[:2]) + lines[2].rstrip("\n") + "," + lines[3])     # two rows run together
    err = refused(capsys, made.parent, *SWEEP, "-o", made, "--resume")
    assert "malformed CSV" in err and "line 3" in err, err


def test_an_invalid_json_row_is_refused(capsys, tmp_path):
    path = tmp_path / "r.json"
    assert run(capsys, *SWEEP, "-o", path)[0] == 0
    rows = json.loads(path.read_text())
    rows[1]["time_us"] = True
    path.write_text(json.dumps(rows))
    err = refused(capsys, tmp_path, *SWEEP, "-o", path, "--resume")
    assert f"'{path}' row 2: time_us is True, expected a finite number >= 0" in err, err


# ------------------------------------------------------------------------------------ files not ours

@pytest.mark.parametrize("text", [HEADER + "\nall_reduce,ring,switch8,8,analytic,1024,256,float32,-1,1,1,1,none\n",
                                  "a,b\n1,2\n3,4",                    # no final newline
                                  "a,b\n1,2\n3,4\n"])
def test_a_csv_without_our_sidecar_is_refused_untouched(capsys, tmp_path, text):
    path = tmp_path / "theirs.csv"
    path.write_text(text)
    err = refused(capsys, tmp_path, *SWEEP, "-o", path, "--resume")
    assert "has no sidecar" in err and "not resumed" in err, err
    assert path.read_text() == text


@pytest.mark.parametrize(("text", "in_progress"), [("a,b\n1,2\n3,4\n", False), ("a,b\n1,2\n3,4", True)])
def test_our_sidecar_beside_a_foreign_header_is_refused_untouched(capsys, made, text, in_progress):
    """Even a sidecar saying the file is being written does not let a resume cut a foreign file's last line."""
    made.write_text(text)
    side = Path(f"{made}.meta.json")
    side.write_text(json.dumps({**json.loads(side.read_text()), "in_progress": in_progress}))
    assert "has columns a,b but this sweep writes" in refused(capsys, made.parent, *SWEEP, "-o", made, "--resume")


def test_a_last_line_cut_short_in_a_finished_file_is_not_ours_to_repair(capsys, made):
    made.write_text(made.read_text()[:-9])
    assert "last line is incomplete, but hccl-bench had finished writing it" in \
        refused(capsys, made.parent, *SWEEP, "-o", made, "--resume")


def test_a_sidecar_without_the_setup_is_refused(capsys, made):
    side = Path(f"{made}.meta.json")
    meta = json.loads(side.read_text())
    del meta["setup"], meta["setup_sha256"]                        # as hccl-bench before this check wrote it
    side.write_text(json.dumps(meta))
    assert "does not record the sweep's setup" in refused(capsys, made.parent, *SWEEP, "-o", made, "--resume")


def test_a_newer_schema_is_refused_not_rewritten(capsys, made):
    side = Path(f"{made}.meta.json")
    side.write_text(json.dumps({**json.loads(side.read_text()), "schema_version": 2}))
    err = refused(capsys, made.parent, *SWEEP, "-o", made, "--resume")
    assert "schema_version 2 is not supported" in err
    assert json.loads(side.read_text())["schema_version"] == 2


@pytest.mark.parametrize(("name", "content"), [("bad.csv", b"\xff\xfe\x00garbage\n"), ("bad.parquet", b"PAR1junk")])
def test_unreadable_files_are_refused_in_one_line(capsys, tmp_path, made, name, content):
    if name.endswith(".parquet"):
        pytest.importorskip("pyarrow")
    path = tmp_path / name
    path.write_bytes(content)
    Path(f"{path}.meta.json").write_bytes(Path(f"{made}.meta.json").read_bytes())
    err = refused(capsys, tmp_path, *SWEEP, "-o", path, "--resume")
    assert ("not UTF-8" if name.endswith(".csv") else "cannot read Parquet") in err, err


# ------------------------------------------------------------------------------------ what the sweep leaves

def test_an_interrupted_file_says_it_is_in_progress_and_resumes(capsys, monkeypatch, tmp_path, made):
    path = tmp_path / "out.json"
    wider = ["-a", "ring,tree"]

    class Interrupting(RowWriter):
        def __call__(self, frame):
            super().__call__(frame)
            raise KeyboardInterrupt
    monkeypatch.setattr(long_module, "RowWriter", Interrupting)
    assert run(capsys, *SWEEP, *wider, "-o", path)[0] == 130
    monkeypatch.undo()
    partial = Path(sidecar(str(path)))
    meta = json.loads(Path(f"{partial}.meta.json").read_text())
    assert meta["in_progress"] is True and meta["setup_sha256"] == \
        json.loads(Path(f"{made}.meta.json").read_text())["setup_sha256"]
    err = refused(capsys, tmp_path, *SWEEP, *wider, "-o", path, "--resume", "--seed", "1")
    assert f"--resume: '{partial}' was made with noise.seed=0" in err
    status, _, err = run(capsys, *SWEEP, *wider, "-o", path, "--resume")
    assert status == 0, err
    assert not partial.exists() and not Path(f"{partial}.meta.json").exists()
    assert len(json.loads(path.read_text())) == 6


def test_rows_left_in_the_partial_file_after_the_final_one_was_written_count_once(capsys, tmp_path):
    path = tmp_path / "r.json"
    assert run(capsys, *SWEEP, "-o", path)[0] == 0
    want = path.read_text()
    csv = run(capsys, *SWEEP)[1]                                  # the same rows, as a crash would leave them
    partial = Path(sidecar(str(path)))
    partial.write_text(csv)
    meta = json.loads(Path(f"{path}.meta.json").read_text())
    Path(f"{partial}.meta.json").write_text(json.dumps({**meta, "schema_version": 1, "in_progress": True}))
    status, _, err = run(capsys, *SWEEP, "-o", path, "--resume")
    assert status == 0, err
    assert path.read_text() == want and not partial.exists()


def test_a_json_file_of_schema_1_resumes_into_schema_2(capsys, monkeypatch, tmp_path):
    """A file an earlier hccl-bench wrote (one object, the metadata beside "rows") is read, completed, and
    written as a fresh sweep writes it: the rows as a list, the metadata in the sidecar."""
    fresh = tmp_path / "fresh.json"
    assert run(capsys, *SWEEP, "-o", fresh)[0] == 0
    path = tmp_path / "r.json"
    assert run(capsys, *SWEEP, "-e", "8K", "-o", path)[0] == 0               # 2 of the 3 rows
    side = Path(f"{path}.meta.json")
    meta = {**json.loads(side.read_text()), "schema_version": 1}
    path.write_text(json.dumps({**meta, "rows": json.loads(path.read_text())}, indent=2) + "\n")
    side.unlink()
    computed = record_units(monkeypatch)
    status, _, err = run(capsys, *SWEEP, "-o", path, "--resume")
    assert status == 0, err
    assert [size for _, _, _, size in computed] == [65536]                   # only the missing point
    assert path.read_text() == fresh.read_text()
    assert json.loads(side.read_text()) == json.loads(Path(f"{fresh}.meta.json").read_text())
