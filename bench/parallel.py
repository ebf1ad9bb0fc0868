"""Parallel sweeps: wall time of ``hccl-bench sweep`` with ``--jobs 1`` against ``--jobs 2`` (and all cores).

A few hundred points: h100-cluster (128 ranks), every collective and algorithm, 8 B .. 1 GiB by 2,
analytic engine. Workers cost about a second each to start (imports, cached Numba kernels), so
--jobs pays only when the blocks' work is several times that (docs/config.md, "Long sweeps"). Each run is a fresh ``hccl-bench`` process, as a user runs it
(interpreter start, imports and cached Numba kernels included); the best of REPS runs counts. The rows
are checked identical across --jobs.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from ._common import note, table, title

REPS = 2
ARGS = ["sweep", "-t", "h100-cluster", "-c", "all", "-a", "all", "-b", "8", "-e", "1G", "-f", "2", "-q",
        "--format", "csv"]


def run(jobs: int, out: Path) -> float:
    best = float("inf")
    for _ in range(REPS):
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-m", "hcclsim.cli", *ARGS, "-j", str(jobs), "-o", str(out)],
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        best = min(best, time.perf_counter() - t0)
    return best


def main(argv=()) -> int:
    cores = os.cpu_count() or 1
    title(f"parallel: hccl-bench {' '.join(ARGS[:-2])} -j N, fresh process, best of {REPS}")
    subprocess.run([sys.executable, "-m", "hcclsim.cli", *ARGS, "-j", "1"], check=True,   # warm the Numba cache
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    with tempfile.TemporaryDirectory() as tmp:
        jobs = sorted({1, 2, cores})
        times, texts = {}, {}
        for j in jobs:
            out = Path(tmp) / f"j{j}.csv"
            times[j] = run(j, out)
            texts[j] = out.read_text()
        points = texts[1].count("\n") - 1
        rows = [[str(j), f"{times[j]:.2f}", f"{times[1] / times[j]:.2f}x",
                 "yes" if texts[j] == texts[1] else "NO"] for j in jobs]
        print(table(["--jobs", "wall s", "speed-up vs 1", "rows identical"], rows))
        note(f"{points} points; {cores} cores; load average {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
