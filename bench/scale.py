"""Scale: what one 1 MiB AllReduce point costs to compile and time as the rank count grows.

Points (each in a fresh subprocess, so one point's memory does not pollute the next):

* ring on a flat ``switch`` fabric (50 GB/s, 500 ns per hop) of 8 ... 4096 ranks -- the
  symmetric fast path (one instance per template is walked);
* a two-tier algorithm on the two-tier fabric (the constants of the two-tier-128 preset: 8 ranks
  per scale-up switch at 400 GB/s, 500 ns; fat-tree scale-out at 50 GB/s, 2 us) for 128, 1024 and
  4096 ranks. The algorithm is found at run time: the registered AllReduce algorithm whose schedule
  is equivariant on the (domains, ranks per domain) grid, names with 'ring', then 'hier' first
  (``BENCH_TWO_TIER_ALGO=name`` picks one);
* the flat ring laid over that two-tier fabric for 128 and 1024 ranks: the same ring, but a
  rank-shift is no symmetry of that fabric, so the engine walks every transfer (the general path).

Per point: compile seconds (``Algorithm.compile``), engine seconds (``hcclsim.engine.analytic.run``,
including its symmetry detection), both the best of 3; templates and transfers of the schedule;
and peak memory = growth of ``ru_maxrss`` (peak resident set) over a baseline taken after the
imports and a warm-up that loads the Numba kernels, plus the process's absolute peak.
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
TIER_NS = (128, 1024, 4096)
GENERAL_NS = (128, 1024)
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
    from hcclsim.schedule.symmetry import equivariant, link_orbits

    return bool(equivariant(schedule)) and link_orbits(topo, schedule.shape) is not None


def two_tier_algorithm() -> tuple[str | None, str]:
    """(name, why) of an AllReduce algorithm built for the two tiers: its schedule is equivariant on the
    (domains, ranks per domain) grid, so the engine can take the symmetric path if the fabric allows."""
    from hcclsim.schedule.algorithm import load_all
    from hcclsim.schedule.symmetry import equivariant

    reg = load_all()
    forced = os.environ.get("BENCH_TWO_TIER_ALGO")
    if forced:
        return forced, "BENCH_TWO_TIER_ALGO"
    topo = two_tier_topology(2 * LOCAL)
    found, broken = [], []
    for name, cls in reg.items():
        if name == "ring" or "all_reduce" not in cls.collectives:
            continue
        try:
            algo, problem, _, key = _compile(name, topo)
            if algo.unsupported(problem):
                continue
            sched = algo.compile(problem, key)
            if sched.shape == (topo.domains, topo.local) and equivariant(sched):
                found.append(name)
        except Exception as e:  # noqa: BLE001 -- a half-written algorithm must not stop the benchmark
            broken.append(f"{name} ({type(e).__name__})")
    found.sort(key=lambda nm: ("ring" not in nm, "hier" not in nm, nm))
    why = f"AllReduce algorithms equivariant on the (domains, local) grid: {', '.join(found) or 'none'}"
    if broken:
        why += f"; failed to compile: {', '.join(broken)}"
    return (found[0] if found else None), why


# ------------------------------------------------------------------------------------ one point (child)

def _maxrss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0     # Linux: KiB


def _warm_up(algo_spec: str) -> None:
    """Load (or compile, on a cold cache) every Numba kernel the point will call."""
    from hcclsim.engine import analytic

    for topo, spec in ((flat_topology(8), "ring"), (two_tier_topology(2 * LOCAL), "ring:rails=off"),
                       (two_tier_topology(2 * LOCAL), algo_spec)):
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
    tier_algo, why = two_tier_algorithm()
    points = [("flat switch", "flat", n, "ring") for n in FLAT_NS]
    notes = [f"two-tier algorithm: {tier_algo or 'none registered -- two-tier symmetric points skipped'} ({why})"]
    if tier_algo:
        points += [("two-tier", "two-tier", n, tier_algo) for n in TIER_NS]
    points += [("two-tier, flat ring", "two-tier", n, "ring:rails=off") for n in GENERAL_NS]
    points += [("two-tier, rail rings", "two-tier", n, "ring") for n in GENERAL_NS]
    return points, notes


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
        if fabric == "two-tier" and n == 4096 and "error" not in r:
            note(f"two-tier {algo}, 4096 ranks: {r['compile_s'] + r['engine_s']:.4f} s per point, peak RSS "
                 f"{r['peak_mib']:.0f} MiB")
    gen = [(n, r) for (fabric, n, algo), r in results.items() if fabric == "two-tier" and algo == "ring"
           and "error" not in r]
    for n, r in gen:
        note(f"flat ring over two-tier, {n} ranks (general path): {r['compile_s'] + r['engine_s']:.4f} s per "
             f"point, {r['transfers'] / max(r['engine_s'], 1e-12) / 1e6:.1f} M transfers/s in the engine")


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
