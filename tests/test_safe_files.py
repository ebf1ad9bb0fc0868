"""Files written safely (hcclsim.results.safefile): one writer per -o, rows appended in whole lines, final
files and `run` folders replaced atomically, `run -o` checked before any work."""

import errno
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
from helpers import run_cli as run

from hcclsim.core.errors import ConfigError
from hcclsim.results import incremental, report
from hcclsim.results.safefile import OutputLock, replace, replace_text
from hcclsim.studies import study as R

SWEEP = ["sweep", "-t", "switch8", "-a", "ring,tree", "-b", "1K", "-e", "64K", "-f", "8", "-q", "--format", "csv",
         "-j", "1"]
STUDY = ('[scenario]\ntitle = "t"\nreproduces = "r"\n'
         '[[sweep]]\nname = "one"\ntopology = "switch8"\nalgorithms = ["ring"]\nsizes = ["1K"]\n'
         '[[sweep]]\nname = "two"\ntopology = "switch8"\nalgorithms = ["tree"]\nsizes = ["1K"]\n')

# A sweep that stops after its first block is on disk until the file GO exists (then goes on): argv is
# STARTED GO and hccl-bench's own arguments.
PAUSED = """
import sys, time
from pathlib import Path
import hcclsim.sweeping.sweep as S
from hcclsim.cli import main

started, go = Path(sys.argv[1]), Path(sys.argv[2])
real, calls = S.run_unit, []

def paused(ctx, unit):
    calls.append(unit)
    if len(calls) == 2:
        started.write_text("")
        deadline = time.monotonic() + 120
        while not go.exists() and time.monotonic() < deadline:
            time.sleep(0.02)
    return real(ctx, unit)

S.run_unit = paused
sys.exit(main(sys.argv[3:]))
"""


def leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.startswith(".") or p.suffix in (".lock", ".tmp"))


# ------------------------------------------------------------------------------------ one writer

def test_a_second_writer_of_one_output_is_refused_at_once(capsys, tmp_path):
    out, ref = tmp_path / "r.csv", tmp_path / "ref.csv"
    started, go = tmp_path / "started", tmp_path / "go"
    script = tmp_path / "paused.py"
    script.write_text(PAUSED)
    first = subprocess.Popen([sys.executable, str(script), str(started), str(go), *SWEEP, "-o", str(out)],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while not started.exists() and first.poll() is None and time.monotonic() < deadline:
            time.sleep(0.02)
        assert started.exists(), first.communicate()
        assert out.read_text().count("\n") == 4                      # header + ring's 3 rows, whole lines
        second = subprocess.run([sys.executable, "-m", "hcclsim.cli", *SWEEP, "-o", str(out)], capture_output=True,
                                text=True, timeout=120, check=False)
        assert first.poll() is None                                  # refused while the first still held it
        assert second.returncode == 2 and second.stdout == "" and second.stderr.count("\n") == 1, second.stderr
        assert f"'{out}' is being written by another hccl-bench (pid {first.pid}," in second.stderr
    finally:
        go.write_text("")
        stdout, stderr = first.communicate(timeout=120)
    assert first.returncode == 0, stderr
    assert run(capsys, *SWEEP, "-o", ref)[0] == 0
    assert out.read_text() == ref.read_text() == stdout
    assert Path(f"{out}.meta.json").read_text() == Path(f"{ref}.meta.json").read_text()
    assert leftovers(tmp_path) == []                                 # the lock file is gone too


def test_the_lock_names_its_holder_and_a_dead_holders_lock_is_taken_over(tmp_path):
    out = tmp_path / "r.csv"
    with OutputLock(out):
        assert Path(f"{out}.lock").read_text() == f"{os.getpid()}\n"
        with pytest.raises(ConfigError, match=f"being written by another hccl-bench \\(pid {os.getpid()},"):
            OutputLock(out).__enter__()
    assert not Path(f"{out}.lock").exists()
    Path(f"{out}.lock").write_text("999999\n")                       # left by a run killed with -9: not locked
    with OutputLock(out):
        assert Path(f"{out}.lock").read_text() == f"{os.getpid()}\n"


def test_a_sweep_refused_by_the_lock_touches_nothing(capsys, tmp_path):
    out = tmp_path / "r.csv"
    out.write_text("precious\n")
    with OutputLock(out):
        status, stdout, err = run(capsys, *SWEEP, "-o", out)
    assert status == 2 and stdout == "" and err.count("\n") == 1 and "is being written by another" in err
    assert out.read_text() == "precious\n" and not Path(f"{out}.meta.json").exists()


# ------------------------------------------------------------------------------------ whole lines

def test_a_failed_append_leaves_only_whole_lines(capsys, monkeypatch, tmp_path):
    """The disk fills half-way through a block: the half is cut off, the rows before are kept, and a
    resume completes the file."""
    out, ref = tmp_path / "r.csv", tmp_path / "ref.csv"
    assert run(capsys, *SWEEP, "-o", ref)[0] == 0
    real, calls = os.write, []

    class Full:
        def __getattr__(self, name):
            return getattr(os, name)

        @staticmethod
        def write(fd, data):
            calls.append(len(data))
            if len(calls) == 2:                      # tree's block: 20 bytes land, then no space
                real(fd, bytes(data[:20]))
                raise OSError(errno.ENOSPC, "No space left on device")
            return real(fd, data)
    monkeypatch.setattr(incremental, "os", Full())
    status, _, err = run(capsys, *SWEEP, "-o", out)
    monkeypatch.undo()
    assert status == 2 and "No space left on device" in err and "rows written before are kept" in err, err
    lines = ref.read_text().splitlines(keepends=True)
    assert out.read_text() == "".join(lines[:4])                       # header + ring, no piece of tree
    status, _, err = run(capsys, *SWEEP, "-o", out, "--resume")
    assert status == 0 and out.read_text() == ref.read_text(), err


# ------------------------------------------------------------------------------------ atomic files

def test_a_failed_replace_leaves_the_old_file_and_no_temporary(tmp_path):
    path = tmp_path / "r.json"
    path.write_text("old\n")

    def half(tmp):
        Path(tmp).write_text("new, but only ha")
        raise OSError(errno.ENOSPC, "No space left on device")
    with pytest.raises(OSError):
        replace(path, half)
    assert path.read_text() == "old\n" and [p.name for p in tmp_path.iterdir()] == ["r.json"]
    replace_text(path, "new\n")
    assert path.read_text() == "new\n" and [p.name for p in tmp_path.iterdir()] == ["r.json"]


def test_every_final_file_goes_through_a_temporary_name(monkeypatch, tmp_path):
    renamed = []
    real = os.replace
    monkeypatch.setattr(os, "replace", lambda a, b: (renamed.append((Path(a).name, Path(b).name)), real(a, b)))
    df = pd.DataFrame({"a": [1]})
    report.write(df, str(tmp_path / "x.csv"), {"k": 1})
    report.write(df, str(tmp_path / "x.json"), {"k": 1})
    assert [b for _, b in renamed] == ["x.csv", "x.csv.meta.json", "x.json", "x.json.meta.json"]
    assert all(a.startswith(f".{b}.") and a.endswith(".tmp") for a, b in renamed)


def test_rows_written_without_metadata_drop_a_stale_sidecar(tmp_path):
    path = tmp_path / "x.csv"
    report.write(pd.DataFrame({"a": [1]}), str(path), {"k": 1})
    report.write(pd.DataFrame({"a": [2]}), str(path))
    assert not Path(f"{path}.meta.json").exists()


# ------------------------------------------------------------------------------------ run -o

def no_work(monkeypatch):
    def refuse(section):
        raise AssertionError("a section ran")
    monkeypatch.setattr(R, "run_section", refuse)


@pytest.mark.parametrize(("target", "expected"), [
    ("file", "'{tmp}/file' is a file; expected a folder"),
    ("file/sub", "'{tmp}/file' is a file; expected a folder"),
    ("", "expected a folder name, got ''"),
])
def test_run_refuses_a_place_it_cannot_write_before_any_work(capsys, monkeypatch, tmp_path, target, expected):
    (tmp_path / "file").write_text("mine\n")
    (tmp_path / "study.toml").write_text(STUDY)
    no_work(monkeypatch)
    where = str(tmp_path / target) if target else ""
    status, out, err = run(capsys, "run", tmp_path / "study.toml", "-o", where, "-q")
    assert status == 2 and out == "" and err.count("\n") == 1, err
    assert expected.format(tmp=tmp_path) in err, err
    assert (tmp_path / "file").read_text() == "mine\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file", "study.toml"]


@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="needs /proc")
def test_run_into_proc_is_refused(capsys, monkeypatch, tmp_path):
    (tmp_path / "study.toml").write_text(STUDY)
    no_work(monkeypatch)
    status, _, err = run(capsys, "run", tmp_path / "study.toml", "-o", "/proc/x", "-q")
    assert status == 2 and err.count("\n") == 1 and "cannot write into '/proc/x'" in err, err


def test_a_failed_run_leaves_its_folder_as_it_was(capsys, monkeypatch, tmp_path):
    out = tmp_path / "out"
    (tmp_path / "study.toml").write_text(STUDY)
    assert run(capsys, "run", tmp_path / "study.toml", "-o", out, "-q")[0] == 0
    (out / "notes.txt").write_text("mine\n")
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    assert {"one.csv", "one.csv.meta.json", "two.csv", "scenario.toml", "notes.txt"} <= set(before)
    real = R.run_section

    def second_fails(section):
        if section.name == "two":
            raise ConfigError("two: broken")
        return real(section)
    monkeypatch.setattr(R, "run_section", second_fails)
    (tmp_path / "study.toml").write_text(STUDY.replace('sizes = ["1K"]', 'sizes = ["2K"]'))
    status, _, err = run(capsys, "run", tmp_path / "study.toml", "-o", out, "-q")
    assert status == 2 and "two: broken" in err
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before    # one.csv not half-updated, no staging
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out", "study.toml"]


def test_a_run_into_an_existing_folder_replaces_its_files_and_keeps_the_others(capsys, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "notes.txt").write_text("mine\n")
    (out / "one.csv").write_text("stale\n")
    (tmp_path / "study.toml").write_text(STUDY)
    assert run(capsys, "run", tmp_path / "study.toml", "-o", out, "-q")[0] == 0
    assert (out / "notes.txt").read_text() == "mine\n"
    assert list(pd.read_csv(out / "one.csv").size_bytes) == [1024]
    assert json.loads((out / "two.csv.meta.json").read_text())["scenario"]["section"] == "two"
    assert [p.name for p in out.iterdir() if p.name.startswith(".")] == []
