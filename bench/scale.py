"""Scale: what one 1 MiB AllReduce point costs to compile and time as the rank count grows.

Points (each in a fresh subprocess, so one point's memory does not pollute the next):

* ring on a flat ``switch`` fabric (50 GB/s, 500 ns per hop) of 8 ... 4096 ranks -- the
  symmetric fast path (one instance per template is walked);
* every registered AllReduce algorithm (and the flat ring, ``ring:rails=off``) on the two-tier fabric
  (the constants of the two-tier-128 preset: 8 ranks per scale-up switch at 400 GB/s, 500 ns; fat-tree
  scale-out at 50 GB/s, 2 us) for 128, 1024, 4096 and 16,384 ranks; algorithms whose schedule leaves the
  one-instance path (hcclsim.schedule.symmetry.schedule_orbits: a tree, a flat grid the tiers do not
  share) stop at 4096 (``BENCH_TWO_TIER_ALGO=name[,name]`` picks the algorithms).

Per point: build seconds (the topology), compile seconds (``Algorithm.compile``), engine seconds (``hcclsim.engine.analytic.run``,
including its symmetry detection), both the best of 3; templates and transfers of the schedule;
and peak memory = growth of ``ru_maxrss`` (peak resident set) over a baseline taken after the
imports and a warm-up that loads the Numba kernels, plus the process's absolute peak. The summary
checks issue 12's target at 4096 ranks (<= 2 s and <= 1 GiB per point) and gives the ratio to the
issue's figures (ISSUE_4096).
"""

from __future__ import annotations

import gc
import json
import os
import resource
import subprocess
import sys

from ._common import ROOT, best_of, child_env, note, table, title

SIZE = 1 << 20                      # bytes per AllReduce point
DTYPE_SIZE = 4                      # float32
FLAT_NS = (8, 64, 256, 1024, 4096)
TIER_NS = (128, 1024, 4096, 16384)
GENERAL_MAX = 4096                  # ranks: algorithms off the symmetric path stop here (minutes beyond)
# seconds per 4096-rank two-tier point when issue 12 was filed (two-tier-128, scale_out.domains=512)
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


def _compile(algo_spec: str, topo):
    """(algorithm, problem, sizing, structure key) of a 1 MiB float32 AllReduce on topo."""
    from hcclsim.schedule import collectives as C
    from hcclsim.schedule.algorithm import Problem, parse_spec

    algo = parse_spec(algo_spec)
    problem = Problem(C.ALL_REDUCE, topo)
    sizing = C.sizing(C.ALL_REDUCE, SIZE, DTYPE_SIZE, topo.nranks)
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
    from hcclsim.engine import analytic

    _warm_up(algo_spec)
    gc.collect()
    base = _maxrss_mib()
    build_s, topo = best_of(lambda: FABRICS[fabric](n), 1)
    algo, problem, sizing, key = _compile(algo_spec, topo)
    compile_s, sched = best_of(lambda: algo.compile(problem, key), REPS)
    engine_s, timing = best_of(lambda: analytic.run(sched, topo, [sizing.block_elems], DTYPE_SIZE), REPS)
    peak = _maxrss_mib()
    return {"fabric": fabric, "ranks": n, "algorithm": algo.label, "build_s": build_s, "compile_s": compile_s,
            "engine_s": engine_s, "templates": sched.ntemplates, "transfers": sched.ntransfers,
            "sim_us": float(timing.time[0]) * 1e6, "path": "symmetric" if symmetric_path(sched, topo) else "general",
            "base_mib": base, "peak_mib": peak}


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

HEADERS = ["fabric", "ranks", "algorithm", "path", "templates", "transfers", "build s", "compile s", "engine s",
           "compile+engine s", "peak +MiB", "peak RSS MiB", "simulated us"]


def _row(label: str, n: int, algo: str, r: dict) -> list[str]:
    if "error" in r:
        return [label, str(n), algo, "FAILED: " + r["error"][:60]] + [""] * (len(HEADERS) - 4)
    return [label, str(n), r["algorithm"], r["path"], f"{r['templates']:,}", f"{r['transfers']:,}",
            f"{r['build_s']:.4f}", f"{r['compile_s']:.4f}", f"{r['engine_s']:.4f}",
            f"{r['compile_s'] + r['engine_s']:.4f}", f"{r['peak_mib'] - r['base_mib']:.1f}",
            f"{r['peak_mib']:.0f}", f"{r['sim_us']:.1f}"]


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
        note(f"flat ring, 4096 ranks: {t4k:.4f} s per point, peak RSS {r['peak_mib']:.0f} MiB "
             f"(+{r['peak_mib'] - r['base_mib']:.1f} MiB over baseline)  (target: about 1 s within 2 GiB)")
    for (fabric, n, algo), r in results.items():
        if fabric != "two-tier" or n != 4096:
            continue
        if "error" in r:
            note(f"two-tier {algo}, 4096 ranks: FAILED ({r['error'][:60]})  (target: <= 2 s, <= 1 GiB)")
            continue
        secs = r["build_s"] + r["compile_s"] + r["engine_s"]
        was = ISSUE_4096.get(algo)
        ratio = f", {was / secs:.1f}x faster than the issue's {was} s" if was else ""
        ok = "ok" if secs <= 2 and r["peak_mib"] - r["base_mib"] <= 1024 else "MISSED"
        note(f"two-tier {algo}, 4096 ranks: {secs:.3f} s per point (build + compile + engine), "
             f"+{r['peak_mib'] - r['base_mib']:.0f} MiB{ratio}  (target: <= 2 s, <= 1 GiB: {ok})")


def main(argv=()) -> int:
    title(f"scale: 1 MiB float32 AllReduce, compile + analytic engine per point (best of {REPS}), "
          f"one subprocess per point")
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
