"""Shared helpers of the benchmarks: aligned plain-text tables, timing, the repository root."""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def table(headers: list[str], rows: list[list[str]]) -> str:
    """Columns padded to their widest cell; the first column left-aligned, the others right-aligned."""
    cells = [headers, *rows]
    widths = [max(len(str(r[c])) for r in cells) for c in range(len(headers))]

    def line(r):
        parts = [str(v).ljust(w) if c == 0 else str(v).rjust(w) for c, (v, w) in enumerate(zip(r, widths))]
        return "  ".join(parts).rstrip()

    rule = "  ".join("-" * w for w in widths)
    return "\n".join([line(headers), rule, *(line(r) for r in rows)])


def title(text: str) -> None:
    print(f"\n== {text} ==", flush=True)


def note(text: str) -> None:
    print(f"   {text}", flush=True)


def best_of(fn, reps: int):
    """(min seconds, last result) of reps calls of fn()."""
    best, out = float("inf"), None
    for _ in range(reps):
        t0 = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t0)
    return best, out


def median(xs) -> float:
    return statistics.median(xs)


def venv_bin(name: str) -> str:
    """A console script installed next to this interpreter (the venv's), else the bare name."""
    path = Path(sys.executable).parent / name
    return str(path) if path.exists() else name


def child_env() -> dict:
    """The environment for benchmark subprocesses: ours, with the repository importable."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    return env


@contextmanager
def server(on: bool):
    """Children run their commands in a warm server (started here, in a temporary folder) or locally."""
    saved = {k: os.environ.get(k) for k in ("HCCL_BENCH_SERVER", "HCCL_BENCH_SERVER_DIR")}
    with tempfile.TemporaryDirectory() as sockets:
        os.environ["HCCL_BENCH_SERVER_DIR"] = sockets
        os.environ["HCCL_BENCH_SERVER"] = "1" if on else "0"
        started = on and subprocess.run([venv_bin("hccl-bench"), "server", "start", "--idle", "10"], cwd=ROOT,
                                        env=child_env(), capture_output=True, text=True, timeout=900, check=False)
        try:
            if started and started.returncode != 0:
                raise RuntimeError(f"hccl-bench server start: {started.stderr.strip()}")
            yield
        finally:
            if on:
                subprocess.run([venv_bin("hccl-bench"), "server", "stop"], cwd=ROOT, env=child_env(),
                               capture_output=True, timeout=60, check=False)
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
