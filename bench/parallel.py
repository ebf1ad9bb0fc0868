"""Parallel sweeps: wall time of ``hccl-bench sweep`` with ``--jobs 1`` against ``--jobs 2`` (and all cores),
and on a local Dask cluster with ``--executor dask``.

The two sweeps of issue 12 (SWEEPS), each with its target speed-up at ``--jobs 2`` (TARGETS):

* packet: 64 ranks on one switch (switch8 --set ranks=64), AllReduce by ring, tree and direct_oneshot,
  256 KiB .. 64 MiB by 2, timed by the packet engine: 27 points, each a unit of work; the 64 MiB
  direct_oneshot point alone is about a third of the work, which bounds the speed-up. Target 1.7x.
* analytic: h100-cluster (128 ranks), every collective and algorithm, 8 B .. 1 GiB by 2: 672 points,
  one unit per structure key, after about a second of interpreter start and imports (serial). Target 1.3x.

Each run is a fresh ``hccl-bench`` process, as a user runs it (interpreter start, imports and cached
Numba kernels included), after one untimed run that warms the Numba cache; the best of REPS runs
counts, the runs of a sweep taking turns. With the dask extra installed, the packet sweep then runs
with ``--executor dask`` on a LocalCluster started here (as many worker processes as cores, one thread
each; one untimed run first, as the workers load the kernels at their first unit, then the best of
REPS); the cluster shares the machine with hccl-bench's own process. The rows (the -o CSV text) are
checked identical to ``--jobs 1`` for every run.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from ._common import child_env, note, server, table, title, venv_bin

REPS = 3
TIMEOUT = 600
COMMON = ["-q", "--format", "csv"]
SWEEPS = {
    "packet": ["sweep", "-t", "switch8", "--set", "ranks=64", "--engine", "packet", "-a", "ring,tree,direct_oneshot",
               "-b", "256K", "-e", "64M", "-f", "2", *COMMON],
    "analytic": ["sweep", "-t", "h100-cluster", "--engine", "analytic", "-c", "all", "-a", "all", "-b", "8", "-e", "1G",
                 "-f", "2", *COMMON],
}
TARGETS = {"packet": 1.7, "analytic": 1.3}         # --jobs 2 against --jobs 1 (issue 12)


def hccl_bench(args: list[str], out: Path) -> float:
    t0 = time.perf_counter()
    subprocess.run([venv_bin("hccl-bench"), *args, "-o", str(out)], check=True, env=child_env(),
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=TIMEOUT)
    return time.perf_counter() - t0


def best(runs: dict[str, list[str]], tmp: Path) -> dict[str, tuple[float, str]]:
    """{name: (best wall seconds of REPS runs, the -o CSV text)}; the runs take turns, so that load from
    other processes spreads over all of them."""
    times = {name: float("inf") for name in runs}
    for _ in range(REPS):
        for name, args in runs.items():
            times[name] = min(times[name], hccl_bench(args, tmp / f"{name}.csv"))
    return {name: (times[name], (tmp / f"{name}.csv").read_text()) for name in runs}


def dask_cluster():
    """A LocalCluster (one single-threaded worker process per core), or None without the dask extra."""
    try:
        from distributed import LocalCluster
    except ImportError:
        return None
    return LocalCluster(n_workers=os.cpu_count() or 1, threads_per_worker=1, processes=True,
                        dashboard_address=":0")


def measure(name: str, args: list[str], tmp: Path, with_dask: bool) -> list[list[str]]:
    jobs = sorted({1, 2, os.cpu_count() or 1})
    hccl_bench([*args, "-j", "1"], tmp / "warm.csv")
    runs = best({f"--jobs {j}": [*args, "-j", str(j)] for j in jobs}, tmp)
    cluster = dask_cluster() if with_dask else None      # started only now: idle, it still takes some CPU
    if cluster is not None:
        with cluster:
            dask = [*args, "--executor", "dask", "--scheduler", cluster.scheduler_address]
            hccl_bench(dask, tmp / "warm.csv")                  # the workers load the kernels
            runs |= best({f"dask, {len(cluster.workers)} workers": dask}, tmp)
    with server(True):
        hccl_bench([*args, "-j", "1"], tmp / "warm.csv")
        warm = best({f"server, --jobs {j}": [*args, "-j", str(j)] for j in jobs}, tmp)
    serial, want = runs["--jobs 1"]
    points = want.count("\n") - 1

    def row(how, seconds, text, base):
        return [f"{name} ({points} points)", how, f"{seconds:.2f}", f"{base / seconds:.2f}x",
                f"{TARGETS[name]}x" if how.endswith("--jobs 2") else "", "yes" if text == want else "NO"]
    return ([row(how, seconds, text, serial) for how, (seconds, text) in runs.items()]
            + [row(how, seconds, text, warm["server, --jobs 1"][0]) for how, (seconds, text) in warm.items()])


def main(argv=()) -> int:
    cores = os.cpu_count() or 1
    title(f"parallel: hccl-bench sweep COMMON -j N / --executor dask, fresh process, best of {REPS}")
    note(f"COMMON = {' '.join(COMMON)}")
    for name, args in SWEEPS.items():
        note(f"{name}: hccl-bench {' '.join(args[:-len(COMMON)])} COMMON")
    with_dask = importlib.util.find_spec("distributed") is not None
    load = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as tmp:
        rows = [r for name, args in SWEEPS.items() for r in measure(name, args, Path(tmp), with_dask and name == "packet")]
    print(table(["sweep", "how", "wall s", "speed-up vs --jobs 1", "target", "rows identical"], rows))
    note("a server row's speed-up is against the server's --jobs 1")
    note(f"{cores} cores; load average {load:.2f} before, {os.getloadavg()[0]:.2f} after (1 min; other processes' "
         f"load takes cores from --jobs 2)"
         + ("" if with_dask else "; no dask extra, so no --executor dask run"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
