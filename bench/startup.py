"""Startup: wall time of whole ``hccl-bench`` commands, from process start to exit.

Each command runs as a subprocess: once untimed (so the Numba on-disk cache is warm and the
OS file cache holds the modules), then RUNS timed runs; min and median are reported, and each command's
minimum over the interpreter's own (``python -c pass``): issue 12 asks --version and --help within 0.25 s
of it and a warm default sweep under a second.
"""

from __future__ import annotations

import subprocess
import time

from ._common import ROOT, child_env, median, note, table, title, venv_bin

RUNS = 3
TIMEOUT = 300
COMMANDS = [
    ("hccl-bench --version", ["--version"]),
    ("hccl-bench --help", ["--help"]),
    ("hccl-bench sweep --help", ["sweep", "--help"]),
    ("hccl-bench sweep  (the default study)", ["sweep"]),
    ("hccl-bench sweep -t switch8 -a ring -e 1K", ["sweep", "-t", "switch8", "-a", "ring", "-e", "1K"]),
]


def wall_time(argv: list[str]) -> tuple[float, subprocess.CompletedProcess]:
    t0 = time.perf_counter()
    out = subprocess.run(argv, check=False, cwd=ROOT, env=child_env(), capture_output=True, text=True,
                         timeout=TIMEOUT)
    return time.perf_counter() - t0, out


def measure(argv: list[str]) -> dict:
    """{'times': [...], 'rows': stdout lines} or {'error': ...}."""
    try:
        _, first = wall_time(argv)                 # warm the Numba cache and the file cache
        if first.returncode != 0:
            lines = first.stderr.strip().splitlines() or [f"exit status {first.returncode}"]
            return {"error": f"exit {first.returncode}: {lines[-1]}"}
        times = [wall_time(argv)[0] for _ in range(RUNS)]
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {TIMEOUT} s"}
    return {"times": times, "lines": len(first.stdout.splitlines())}


def main(argv=()) -> int:
    title(f"startup: wall time of a whole hccl-bench process, warm Numba cache ({RUNS} runs after 1 warm-up)")
    base = min(measure([venv_bin("python"), "-c", "pass"])["times"])
    rows = [["python -c pass", f"{base:.3f}", "", "", "", ""]]
    for label, args in COMMANDS:
        r = measure([venv_bin("hccl-bench"), *args])
        if "error" in r:
            rows.append([label, "FAILED", "", "", "", r["error"][:90]])
        else:
            t = r["times"]
            rows.append([label, f"{min(t):.3f}", f"{median(t):.3f}", f"{max(t):.3f}", f"+{min(t) - base:.3f}",
                         f"{r['lines']} lines"])
    print(table(["command", "min s", "median s", "max s", "over python", "stdout"], rows))
    note("wall time from process start to exit, measured around subprocess.run (output captured, not shown)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
