"""Long sweeps (docs/config.md, "Long sweeps"): rows written as they finish, Ctrl-C keeps them,
--resume completes a file with no point computed twice, --jobs gives the same rows as --jobs 1."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
from helpers import record_units
from helpers import run_cli as run

import hcclsim.cli._long as long_module
from hcclsim.network.config import load_topology
from hcclsim.results.incremental import RowWriter, sidecar
from hcclsim.schedule import collectives as C
from hcclsim.sweeping import executors
from hcclsim.sweeping.sweep import size_grid, sweep

# switch8, two collectives, every algorithm, 16 B .. 64 KiB by 4: 7 sizes, a dozen blocks
SWEEP = ["sweep", "-t", "switch8", "-c", "all_reduce,all_gather", "-e", "64K", "-f", "4", "-j", "1", "-q"]
KEY = ["collective", "algorithm", "engine", "size_bytes"]




@pytest.fixture
def fresh(capsys, tmp_path):
    """The uninterrupted run's CSV text (and the rows, for counting)."""
    path = tmp_path / "fresh.csv"
    status, _, _ = run(capsys, *SWEEP, "--format", "csv", "-o", str(path))
    assert status == 0
    return path.read_text()


def interrupt_after(monkeypatch, blocks):
    """Ctrl-C right after the writer has written `blocks` blocks (as if it came then)."""
    class Interrupting(RowWriter):
        def __call__(self, frame):
            super().__call__(frame)
            self.blocks = getattr(self, "blocks", 0) + 1
            if self.blocks == blocks:
                raise KeyboardInterrupt
    monkeypatch.setattr(long_module, "RowWriter", Interrupting)


def test_ctrl_c_keeps_every_finished_row_and_resume_completes_it(capsys, monkeypatch, tmp_path, fresh):
    path = tmp_path / "out.csv"
    interrupt_after(monkeypatch, 3)
    status, out, err = run(capsys, *SWEEP, "--format", "csv", "-o", str(path))
    assert status == 130 and out == ""
    assert err.count("\n") == 1 and "finished rows kept in" in err and "--resume" in err, err
    n = int(err.split("interrupted; ")[1].split(" finished rows")[0])  # how units are cut is not the point
    kept = path.read_text()
    assert 7 <= n < len(fresh.splitlines()) - 1                          # at least a unit, not all
    assert kept == "".join(fresh.splitlines(keepends=True)[:n + 1])    # header + the rows it says, as a fresh run
    monkeypatch.undo()

    computed = record_units(monkeypatch)
    status, out, err = run(capsys, *SWEEP, "--format", "csv", "-o", str(path), "--resume")
    assert status == 0 and "error" not in err, err
    assert path.read_text() == fresh and out == fresh                  # same text; no duplicates
    before = pd.read_csv(pd.io.common.StringIO(kept))
    done = set(zip(*(before[c] for c in KEY)))
    assert computed and not done & set(computed)                       # nothing computed twice
    assert len(computed) + len(before) == len(fresh.splitlines()) - 1

    computed.clear()                                                    # resuming a complete file: no work
    status, _, _ = run(capsys, *SWEEP, "-o", str(path), "--resume", "--format", "csv")
    assert status == 0 and computed == [] and path.read_text() == fresh


def in_progress(path, text, tmp_path):
    """path holds text, as a sweep with the fixture's inputs still writing it would leave it."""
    path.write_text(text)
    meta = json.loads((tmp_path / "fresh.csv.meta.json").read_text())
    Path(f"{path}.meta.json").write_text(json.dumps({**meta, "in_progress": True}))


def test_resume_drops_a_line_cut_short_by_a_crash(capsys, tmp_path, fresh):
    path = tmp_path / "out.csv"
    lines = fresh.splitlines(keepends=True)
    in_progress(path, "".join(lines[:10]) + lines[10][:17], tmp_path)  # killed mid-write
    status, _, err = run(capsys, *SWEEP, "-o", str(path), "--resume", "--format", "csv")
    assert status == 0 and "error" not in err and path.read_text() == fresh


def test_resume_in_a_different_order_ends_in_the_sweep_order(capsys, tmp_path, fresh):
    """Rows appended out of order (as parallel workers finish) are sorted at the end."""
    path = tmp_path / "out.csv"
    lines = fresh.splitlines(keepends=True)
    in_progress(path, lines[0] + "".join(lines[30:37]) + "".join(lines[8:15]), tmp_path)
    status, _, _ = run(capsys, *SWEEP, "-o", str(path), "--resume", "--format", "csv")
    assert status == 0 and path.read_text() == fresh


def test_json_goes_to_a_sidecar_until_the_end(capsys, monkeypatch, tmp_path):
    fresh = tmp_path / "fresh.json"
    assert run(capsys, *SWEEP, "-o", str(fresh))[0] == 0
    assert not Path(sidecar(str(fresh))).exists()
    want = json.loads(fresh.read_text())

    path = tmp_path / "out.json"
    interrupt_after(monkeypatch, 2)
    status, _, err = run(capsys, *SWEEP, "-o", str(path))
    assert status == 130 and f"kept in {path}.partial.csv" in err
    assert not path.exists()
    partial = pd.read_csv(sidecar(str(path)))
    assert 7 <= len(partial) < len(want)
    # the sidecar keeps floats exactly
    assert partial.to_dict(orient="records") == want[:len(partial)]
    monkeypatch.undo()

    status, _, _ = run(capsys, *SWEEP, "-o", str(path), "--resume")
    assert status == 0 and not Path(sidecar(str(path))).exists()
    assert json.loads(path.read_text()) == want


def test_jobs_2_gives_the_same_rows_as_jobs_1(monkeypatch):
    topo = load_topology("two-tier-128")
    sizes = size_grid(8, 1 << 24, 4)
    one = sweep(topo, ["all_reduce", "all_gather", "broadcast"], "all,auto", sizes, engine="analytic", jobs=1).rows
    # force the worker pool even for this short sweep, and let the workers run every queued unit
    monkeypatch.setattr(executors, "SERIAL_SECONDS", 0.0)
    monkeypatch.setattr(executors, "STEAL", False)
    submitted = []

    class Pool(executors.ProcessPoolExecutor):
        def submit(self, *a, **k):
            future = super().submit(*a, **k)
            submitted.append(future)
            return future
    monkeypatch.setattr(executors, "ProcessPoolExecutor", Pool)
    two = sweep(topo, ["all_reduce", "all_gather", "broadcast"], "all,auto", sizes, engine="analytic", jobs=2).rows
    assert len(submitted) > 3 and all(f.done() and not f.cancelled() for f in submitted)
    pd.testing.assert_frame_equal(one, two, check_exact=True)
    assert "auto" in set(two.algorithm)


def test_jobs_2_with_this_process_helping_gives_the_same_rows(monkeypatch):
    topo = load_topology("switch8")
    sizes = size_grid(16, 1 << 20, 4)
    one = sweep(topo, ["all_reduce", "reduce_scatter"], "all", sizes, engine="analytic,packet", jobs=1).rows
    monkeypatch.setattr(executors, "SERIAL_SECONDS", 0.0)
    two = sweep(topo, ["all_reduce", "reduce_scatter"], "all", sizes, engine="analytic,packet", jobs=2).rows
    pd.testing.assert_frame_equal(one, two, check_exact=True)


@pytest.mark.parametrize(("argv", "needles"), [
    (["--resume"], ["--resume: needs -o/--output FILE"]),
    (["--resume", "-o", "{path}", "-t", "ring8"], ["topology.name=switch8, this sweep has topology.name=ring8"]),
    (["--resume", "-o", "{path}", "-d", "float16"], ["dtype=float32, this sweep has dtype=float16"]),
    (["--resume", "-o", "{path}", "--stats"], ["stats=False, this sweep has stats=True"]),
    (["-j", "0"], ["--jobs: expected a whole number >= 1"]),
])
def test_resume_and_jobs_errors_are_one_line_exit_2(capsys, tmp_path, fresh, argv, needles):
    path = tmp_path / "fresh.csv"           # written by the fixture
    argv = [a.format(path=path) for a in argv]
    base = [a for a in SWEEP if a not in ("-j", "1")] if "-j" in argv else SWEEP
    status, out, err = run(capsys, *base, *argv)
    assert status == 2 and out == "" and err.count("\n") == 1 and err.startswith("hccl-bench: error: "), err
    for needle in needles:
        assert needle in err, err
    assert path.read_text() == fresh        # a refused resume leaves the file alone


def test_resume_of_a_missing_file_starts_from_scratch(capsys, tmp_path, fresh):
    path = tmp_path / "new.csv"
    status, _, _ = run(capsys, *SWEEP, "-o", str(path), "--resume", "--format", "csv")
    assert status == 0 and path.read_text() == fresh


def test_sigint_in_a_subprocess_keeps_rows_and_resume_finishes(tmp_path):
    """The real thing: Ctrl-C (SIGINT to the process group) once the first rows are on disk."""
    path = tmp_path / "out.csv"
    argv = [sys.executable, "-m", "hcclsim.cli", "sweep", "-t", "h100-cluster", "-c", "all", "-b", "8",
            "-e", "1G", "-f", "2", "-o", str(path), "--format", "csv", "-q", "-j", "2"]
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        if path.exists() and path.read_text().count("\n") > 1:
            break
        time.sleep(0.05)
    if proc.poll() is not None:
        pytest.skip("the sweep finished before it could be interrupted")
    os.killpg(proc.pid, signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    if proc.returncode == 0:
        pytest.skip("the sweep finished before the signal arrived")
    assert proc.returncode == 130, err
    assert err.count("\n") == 1 and "finished rows kept in" in err, err
    kept = pd.read_csv(path)
    assert len(kept) >= 1
    done = subprocess.run([*argv, "--resume"], capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr
    rows = pd.read_csv(path)
    assert path.read_text() == done.stdout                      # the file is the whole sweep, in order
    # every point once: the same keys, as many times each, as an uninterrupted sweep gives (tiny
    # AllGather sizes round to 0 bytes, so a key can legitimately appear twice)
    want = sweep(load_topology("h100-cluster"), list(C.COLLECTIVES), "all", size_grid(8, 1 << 30, 2)).rows
    assert rows[KEY].value_counts().to_dict() == want[KEY].value_counts().to_dict()
    kept = kept.drop_duplicates(KEY)
    merged = rows.drop_duplicates(KEY).merge(kept, on=KEY, suffixes=("", "_kept"))
    assert len(merged) == len(kept) and (merged.time_us == merged.time_us_kept).all()
