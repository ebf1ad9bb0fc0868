"""Scale: what one AllReduce point costs to compile and time as the rank count grows, against issue 12's target.

Points (each in a fresh subprocess, so one point's memory does not pollute the next):

* ring on a flat ``switch`` fabric (50 GB/s, 500 ns per hop) of 8 ... 4096 ranks -- the
  symmetric fast path (one instance per template is walked);
* every registered AllReduce algorithm (and the flat ring, ``ring:rails=off``) on the two-tier fabric
  (the constants of the two-tier-128 preset: 8 ranks per scale-up switch at 400 GB/s, 500 ns; fat-tree
  scale-out at 50 GB/s, 2 us) for 128, 1024, 4096 and 16,384 ranks; algorithms whose schedule leaves the
  one-instance paths (hcclsim.schedule.symmetry.schedule_orbits: halving-doubling's XOR partners, a flat
  grid the tiers do not share) stop at 4096 (``BENCH_TWO_TIER_ALGO=name[,name]`` picks the algorithms).

Per point: build seconds (the topology), orbits seconds (the topology's symmetries, found once per
topology and cached on it), and for a 1 MiB float32 AllReduce compile seconds (``Algorithm.compile``) and
engine seconds (``hcclsim.engine.analytic.run``), both the best of 3; templates and transfers of the
schedule; then every size of the default sweep (``hccl-bench sweep``'s -b 16 -e 1G -f 4, one compile and one
engine call per structure key, as the sweep runs them): the worst point (build + orbits + compile + engine of
the key that costs most) and the whole sweep. Peak memory = growth of ``ru_maxrss`` (peak resident set) over
a baseline taken after the imports and a warm-up that loads the Numba kernels, plus the process's absolute
peak. The summary checks issue 12's target at 4096 ranks (<= 2 s and <= 1 GiB per point) for every
algorithm and gives the ratio to the issue's whole-process figures (ISSUE_4096).
"""

from __future__ import annotations

import gc
import json
import os
import resource
import subprocess
import sys
import time

from ._common import ROOT, best_of, child_env, note, table, title

SIZE = 1 << 20                      # bytes per AllReduce point
DTYPE_SIZE = 4                      # float32
SWEEP_SIZES = [16 << (2 * k) for k in range(14)]      # hccl-bench sweep's default grid: 16 B .. 1 GiB by 4
TARGET_S, TARGET_MIB = 2.0, 1024.0  # issue 12: a 4096-rank two-tier point in <= 2 s and <= 1 GiB
FLAT_NS = (8, 64, 256, 1024, 4096)
TIER_NS = (128, 1024, 4096, 16384)
GENERAL_MAX = 4096                  # ranks: algorithms off the symmetric path stop here (minutes beyond)
# seconds of one whole `hccl-bench sweep` process per 4096-rank two-tier point when issue 12 was filed
# (two-tier-128, scale_out.domains=512, 1 MiB; the issue's figures)
ISSUE_4096 = {"ring": 7.8, "direct_twoshot": 11.8}
LOCAL = 8                           # ranks per scale-up domain
REPS = 3
CHILD_TIMEOUT = 600


def flat_topology(n: int):
    from hcclsim.network.topology import build_flat

    return build_flat(f"switch{n}", "switch", n, 50e9, 500e-9)


def two_tier_topology(n: int):
    from hcclsim.network.topology import build_hierarchical

    return build_hierarchical(f"two-tier-{n}", "switch", LOCAL, 400e9, 500e-9, False, "fat_tree", n // LOCAL,
                              50e9, 2e-6)


FABRICS = {"flat": flat_topology, "two-tier": two_tier_topology}


def _compile(algo_spec: str, topo, size: int = SIZE):
    """(algorithm, problem, sizing, structure key) of a float32 AllReduce of size bytes on topo."""
    from hcclsim.schedule import collectives as C
    from hcclsim.schedule.algorithm import Problem, parse_spec

    algo = parse_spec(algo_spec)
    problem = Problem(C.ALL_REDUCE, topo)
    sizing = C.sizing(C.ALL_REDUCE, size, DTYPE_SIZE, topo.nranks)
    return algo, problem, sizing, algo.structure_key(problem, sizing, DTYPE_SIZE)


def symmetric_path(schedule, topo) -> bool:
    """Whether analytic.run takes the one-instance path for this schedule on this topology."""
    from hcclsim.schedule.symmetry import schedule_orbits

    return schedule_orbits(schedule, topo) is not None


def two_tier_algorithms() -> tuple[list[tuple[str, bool]], str]:
    """([(name, symmetric)], why): every registered AllReduce algorithm that runs on the two-tier fabric,
    and whether its schedule takes the one-instance path there (judged on 2 domains; only those are
    run at 16,384 ranks). ``BENCH_TWO_TIER_ALGO=name[,name]`` picks them."""
    from hcclsim.schedule.algorithm import load_all

    forced = os.environ.get("BENCH_TWO_TIER_ALGO")
    names = forced.split(",") if forced else sorted(n for n, c in load_all().items() if "all_reduce" in c.collectives)
    topo = two_tier_topology(2 * LOCAL)
    found, broken = [], []
    for name in names + ([] if forced else ["ring:rails=off"]):
        try:
            algo, problem, _, key = _compile(name, topo)
            if algo.unsupported(problem):
                continue
            found.append((name, symmetric_path(algo.compile(problem, key), topo)))
        except Exception as e:  # noqa: BLE001 -- a half-written algorithm must not stop the benchmark
            broken.append(f"{name} ({type(e).__name__})")
    why = "two-tier AllReduce algorithms (symmetric path): " + ", ".join(f"{n} ({'yes' if y else 'no'})"
                                                                          for n, y in found)
    if broken:
        why += f"; failed to compile: {', '.join(broken)}"
    return found, why


# ------------------------------------------------------------------------------------ one point (child)

def _maxrss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0     # Linux: KiB


def _warm_up(algo_spec: str) -> None:
    """Load (or compile, on a cold cache) every Numba kernel the point will call."""
    from hcclsim.engine import analytic

    for topo, spec in ((flat_topology(8), "ring"), (two_tier_topology(2 * LOCAL), algo_spec)):
        algo, problem, sizing, key = _compile(spec, topo)
        analytic.run(algo.compile(problem, key), topo, [sizing.block_elems], DTYPE_SIZE)


def measure_point(fabric: str, n: int, algo_spec: str) -> dict:
    _warm_up(algo_spec)
    gc.collect()
    base = _maxrss_mib()
    build_s, topo = best_of(lambda: FABRICS[fabric](n), 1)
    out = {"fabric": fabric, "ranks": n, "build_s": build_s, "base_mib": base, **_one_mib(algo_spec, topo),
           **_sweep(algo_spec, topo)}
    out["peak_mib"] = _maxrss_mib()
    return out


def _one_mib(algo_spec: str, topo) -> dict:
    """The 1 MiB point: the topology's symmetries (first call), then compile and engine, best of REPS."""
    from hcclsim.engine import analytic
    from hcclsim.schedule.symmetry import schedule_orbits

    algo, problem, sizing, key = _compile(algo_spec, topo)
    sched = algo.compile(problem, key)
    orbits_s, orbits = best_of(lambda: schedule_orbits(sched, topo), 1)
    compile_s = float("inf")
    for _ in range(REPS):               # one schedule alive at a time, as in a sweep
        sched = None
        t0 = time.perf_counter()
        sched = algo.compile(problem, key)
        compile_s = min(compile_s, time.perf_counter() - t0)
    engine_s, timing = best_of(lambda: analytic.run(sched, topo, [sizing.block_elems], DTYPE_SIZE), REPS)
    return {"algorithm": algo.label, "orbits_s": orbits_s, "compile_s": compile_s, "engine_s": engine_s,
            "templates": sched.ntemplates, "transfers": sched.ntransfers, "sim_us": float(timing.time[0]) * 1e6,
            "path": _path(orbits)}


def _path(orbits) -> str:
    if orbits is None:
        return "general"
    return "symmetric" if (orbits.reps == 1).all() else "rows"


def _sweep(algo_spec: str, topo) -> dict:
    """The default sweep's sizes, one compile and one engine call per structure key: the costliest key (its
    seconds and largest size) and the total."""
    from hcclsim.engine import analytic

    keys: dict = {}
    for size in SWEEP_SIZES:
        algo, problem, sizing, key = _compile(algo_spec, topo, size)
        keys.setdefault(key, []).append((size, sizing.block_elems))
    worst, total = (0.0, 0), 0.0
    for key, points in keys.items():
        t0 = time.perf_counter()
        sched = algo.compile(problem, key)
        analytic.run(sched, topo, [e for _, e in points], DTYPE_SIZE)
        secs = time.perf_counter() - t0
        del sched
        total += secs
        worst = max(worst, (secs, max(s for s, _ in points)))
    return {"worst_s": worst[0], "worst_size": worst[1], "sweep_s": total, "keys": len(keys)}


def run_point(fabric: str, n: int, algo_spec: str) -> dict:
    """measure_point in a fresh interpreter; {'error': ...} when it fails."""
    cmd = [sys.executable, "-m", "bench.scale", "--point", fabric, str(n), algo_spec]
    try:
        out = subprocess.run(cmd, check=False, cwd=ROOT, env=child_env(), capture_output=True, text=True,
                             timeout=CHILD_TIMEOUT)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {CHILD_TIMEOUT} s"}
    if out.returncode != 0:
        lines = (out.stderr or out.stdout).strip().splitlines() or [f"exit status {out.returncode}"]
        return {"error": lines[-1]}
    return json.loads(out.stdout.strip().splitlines()[-1])


# ------------------------------------------------------------------------------------ report (parent)

HEADERS = ["fabric", "ranks", "algorithm", "path", "templates", "transfers", "build s", "orbits s", "compile s",
           "engine s", "1 MiB point s", "worst point s", "at", "sweep s", "peak +MiB", "peak RSS MiB", "target"]


def point_s(r: dict) -> float:
    """Seconds of the 1 MiB point for a user who runs only it: the topology, its symmetries, compile, engine."""
    return r["build_s"] + r["orbits_s"] + r["compile_s"] + r["engine_s"]


def worst_s(r: dict) -> float:
    """The same for the costliest structure key of the default sweep."""
    return r["build_s"] + r["orbits_s"] + r["worst_s"]


def verdict(r: dict) -> str:
    """Issue 12's target, for 4096-rank two-tier points: ok or MISSED, with what missed."""
    if r["fabric"] != "two-tier" or r["ranks"] != 4096:
        return ""
    secs, mib = max(point_s(r), worst_s(r)), r["peak_mib"] - r["base_mib"]
    over = ([f"{secs:.2f} s"] if secs > TARGET_S else []) + ([f"+{mib:.0f} MiB"] if mib > TARGET_MIB else [])
    return f"MISSED ({', '.join(over)})" if over else f"ok (<= {TARGET_S:g} s, <= 1 GiB)"


def _size(b: int) -> str:
    for unit, scale in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if b >= scale:
            return f"{b // scale}{unit}"
    return str(b)


def _row(label: str, n: int, algo: str, r: dict) -> list[str]:
    if "error" in r:
        return [label, str(n), algo, "FAILED: " + r["error"][:60]] + [""] * (len(HEADERS) - 4)
    return [label, str(n), r["algorithm"], r["path"], f"{r['templates']:,}", f"{r['transfers']:,}",
            f"{r['build_s']:.4f}", f"{r['orbits_s']:.4f}", f"{r['compile_s']:.4f}", f"{r['engine_s']:.4f}",
            f"{point_s(r):.3f}", f"{worst_s(r):.3f}", _size(r["worst_size"]), f"{r['sweep_s']:.3f}",
            f"{r['peak_mib'] - r['base_mib']:.1f}", f"{r['peak_mib']:.0f}", verdict(r)]


def plan() -> tuple[list[tuple[str, str, int, str]], list[str]]:
    """(label, fabric, ranks, algorithm spec) of every point, and notes about the choices."""
    algos, why = two_tier_algorithms()
    points = [("flat switch", "flat", n, "ring") for n in FLAT_NS]
    for name, symmetric in algos:
        points += [("two-tier", "two-tier", n, name) for n in TIER_NS if symmetric or n <= GENERAL_MAX]
    return points, [why]


def _summary(results: dict) -> None:
    def total(key):
        r = results.get(key)
        return None if r is None or "error" in r else r["compile_s"] + r["engine_s"]

    t8, t1k, t4k = total(("flat", 8, "ring")), total(("flat", 1024, "ring")), total(("flat", 4096, "ring"))
    if t8 is not None and t1k is not None:
        note(f"flat ring, 1024 vs 8 ranks: {t1k:.4f} s vs {t8:.4f} s per point -> {t1k - t8:.4f} s more, "
             f"ratio {t1k / t8:.1f}x  (target: well under 1 s more)")
    if t4k is not None:
        r = results[("flat", 4096, "ring")]
        note(f"flat ring, 4096 ranks: {point_s(r):.4f} s per point (build + orbits + compile + engine), peak RSS "
             f"{r['peak_mib']:.0f} MiB (+{r['peak_mib'] - r['base_mib']:.1f} MiB over baseline)  (target: the whole "
             f"process under 1 s, start-up included)")
    for (fabric, n, algo), r in results.items():
        if fabric != "two-tier" or n != 4096:
            continue
        if "error" in r:
            note(f"two-tier {algo}, 4096 ranks: FAILED ({r['error'][:60]})  (target: <= 2 s, <= 1 GiB)")
            continue
        was = ISSUE_4096.get(algo)
        ratio = f"; the issue's whole process took {was} s" if was else ""
        note(f"two-tier {algo}, 4096 ranks: 1 MiB point {point_s(r):.3f} s, worst point of the default sweep "
             f"{worst_s(r):.3f} s (at {_size(r['worst_size'])}), whole default sweep {r['sweep_s']:.3f} s, "
             f"+{r['peak_mib'] - r['base_mib']:.0f} MiB{ratio}  (target: <= 2 s, <= 1 GiB: {verdict(r)})")


def main(argv=()) -> int:
    title(f"scale: float32 AllReduce, compile + analytic engine per point (1 MiB: best of {REPS}; the default "
          f"sweep's sizes: once), one subprocess per point")
    points, notes = plan()
    for text in notes:
        note(text)
    results, rows = {}, []
    for label, fabric, n, algo in points:
        r = run_point(fabric, n, algo)
        results[(fabric, n, algo)] = r
        rows.append(_row(label, n, algo, r))
        print(f"   ... {label} {n} ranks done", file=sys.stderr, flush=True)
    print(table(HEADERS, rows))
    note("peak +MiB: growth of ru_maxrss (peak resident set) over the baseline after imports and a Numba "
         "warm-up; peak RSS: the whole process")
    _summary(results)
    return 0


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[1] == "--point":
        print(json.dumps(measure_point(sys.argv[2], int(sys.argv[3]), sys.argv[4])))
    else:
        raise SystemExit(main(sys.argv[1:]))
