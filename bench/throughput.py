"""Throughput: points per second of ``hcclsim.sweeping.sweep.sweep`` on the switch8 preset.

For every registered algorithm (found at run time with ``load_all``) and every collective it
implements that can run on switch8, one call of ``sweep`` over the sizes 8 B .. 1 GiB, factor 2
(nccl-tests' ``-b 8 -e 1G -f 2``: 28 sizes). A point is one (algorithm, size) row of the result.
The call is repeated (after one warm-up call) until MIN_SECONDS have passed; the best call counts.
Each call compiles the schedule(s) and runs the analytic engine, as a user's sweep does.
"""

from __future__ import annotations

import time

from ._common import note, table, title

MIN_SECONDS = 0.5
MAX_CALLS = 50


def bench_one(topo, coll: str, algo: str, sizes: list[int]) -> dict:
    from hcclsim.schedule.algorithm import Problem, parse_spec
    from hcclsim.sweeping.sweep import sweep

    why = parse_spec(algo).unsupported(Problem(coll, topo))
    if why:
        return {"skipped": why}
    try:
        result = sweep(topo, [coll], algo, sizes)           # warm-up; also tells whether it runs at all
    except Exception as e:  # noqa: BLE001 -- a half-written algorithm must not stop the benchmark
        return {"error": f"{type(e).__name__}: {e}"}
    if result.skipped:
        return {"skipped": result.skipped[0][2]}
    best, calls, t_start = float("inf"), 0, time.perf_counter()
    while calls < MAX_CALLS and (calls < 3 or time.perf_counter() - t_start < MIN_SECONDS):
        t0 = time.perf_counter()
        rows = sweep(topo, [coll], algo, sizes).rows
        best = min(best, time.perf_counter() - t0)
        calls += 1
    return {"points": len(rows), "seconds": best, "calls": calls}


def main(argv=()) -> int:
    from hcclsim.network.config import load_topology
    from hcclsim.schedule import collectives as C
    from hcclsim.schedule.algorithm import load_all
    from hcclsim.sweeping.sweep import size_grid

    topo = load_topology("switch8")
    sizes = size_grid(8, 1 << 30, 2)
    title(f"throughput: hcclsim.sweeping.sweep.sweep on switch8, -b 8 -e 1G -f 2 ({len(sizes)} sizes), best call")
    rows, total_pts, total_s = [], 0, 0.0
    skipped: dict[str, list[str]] = {}          # reason -> 'algorithm collective'...
    for name, cls in sorted(load_all().items()):
        for coll in [c for c in C.COLLECTIVES if c in cls.collectives]:
            r = bench_one(topo, coll, name, sizes)
            if "points" in r:
                total_pts += r["points"]
                total_s += r["seconds"]
                rows.append([name, coll, str(r["points"]), f"{r['seconds'] * 1e3:.2f}",
                             f"{r['seconds'] / r['points'] * 1e6:.1f}", f"{r['points'] / r['seconds']:,.0f}",
                             str(r["calls"])])
            else:
                reason = r.get("skipped") or "ERROR " + r["error"]
                skipped.setdefault(reason[:100], []).append(f"{name} {coll}")
    print(table(["algorithm", "collective", "points", "ms/sweep", "us/point", "points/s", "calls"], rows))
    if total_s:
        note(f"all algorithms: {total_pts} points in {total_s * 1e3:.1f} ms = {total_pts / total_s:,.0f} points/s")
    for reason, what in skipped.items():
        note(f"not run: {', '.join(what)}: {reason}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
