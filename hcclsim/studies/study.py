"""Running a scenario (hcclsim.studies.scenario reads and checks it): each section's table, written to results/NAME/.

run_section() computes one section's DataFrame; write_section() writes it as CSV with a provenance
sidecar (hcclsim.results.provenance) and, for a sweep that asks (`plot = {...}`), a PNG (hcclsim.results.plot);
copy_source() keeps the scenario file beside its tables.
"""

from __future__ import annotations

import hashlib
import importlib.util
from pathlib import Path

import numpy as np
import pandas as pd

from ..core.errors import ConfigError
from ..core.units import DTYPE_SIZE
from ..schedule import collectives as C
from .scenario import (
    AUTO,
    BEST_FIXED,
    Result,
    Scenario,
    Section,
    _read_text,
    load_topology_in,
    variants,
    within,
)

# ------------------------------------------------------------------------------------- running

def _sweep_kwargs(spec: dict, launch) -> dict:
    return {**spec["extra"], **({"launch": launch} if launch else {})}


def _with_columns(frame: pd.DataFrame, cols: dict, launch) -> pd.DataFrame:
    """The varied keys (and the launch mode, when the section names one) as the first columns."""
    lead = {**cols, **({"launch": launch} if launch else {})}
    return pd.concat([pd.DataFrame({k: [v] * len(frame) for k, v in lead.items()}, index=frame.index), frame],
                     axis=1)


def _skipped(frames) -> list:
    return list(dict.fromkeys(tuple(x) for f in frames for x in f.attrs.get("skipped", [])))


def run_sweep_section(section: Section) -> Result:
    from ..api import run_sweep

    spec, frames = section.spec, []
    for cols, overrides, launch in variants(spec):
        with within(section.where):
            rows = run_sweep(spec["topology"], spec["collectives"], spec["algorithm"], spec["sizes"],
                             dtype=spec["dtype"], root=spec["root"], engine=spec["engine"], overrides=overrides,
                             **_sweep_kwargs(spec, launch))
        frames.append(rows)
    frame = pd.concat([_with_columns(f, c, la) for f, (c, _, la) in zip(frames, variants(spec))], ignore_index=True)
    return Result(section, frame, _skipped(frames))


REPLAY_COLUMNS = ["kind", "op", "label", "collective", "size_bytes", "dtype", "calls", "algorithm", "chosen",
                  "engine", "time_us", "busbw_GBps", "total_us", "ops_covered", "topology", "ranks"]


def _replay_rows(spec: dict, overrides: list, launch, where: str):
    """Per-op rows (every applicable algorithm and auto) of one combination, and the sweeps' skips."""
    from ..api import run_sweep

    groups = {}
    for op in spec["ops"]:
        groups.setdefault((op["collective"], op["dtype"]), set()).add(op["size"])
    timed, skipped = {}, []
    algorithm = ",".join(x for x in (spec["algorithm"], AUTO) if x)
    for (coll, dtype), sizes in groups.items():
        with within(where):
            rows = run_sweep(spec["topology"], coll, algorithm, sorted(sizes), dtype=dtype, engine=spec["engine"],
                             overrides=overrides, **_sweep_kwargs(spec, launch))
        skipped += rows.attrs.get("skipped", [])
        timed[(coll, dtype)] = rows
    out = []
    for i, op in enumerate(spec["ops"], 1):
        rows = timed[(op["collective"], op["dtype"])]
        nbytes = C.sizing(op["collective"], op["size"], DTYPE_SIZE[op["dtype"]], int(rows.ranks.iloc[0])).size_bytes
        for r in rows[rows.size_bytes == nbytes].itertuples(index=False):
            out.append({"kind": "op", "op": i, "label": op["label"], "collective": op["collective"],
                        "size_bytes": nbytes, "dtype": op["dtype"], "calls": op["count"], "algorithm": r.algorithm,
                        "chosen": r.chosen, "engine": r.engine, "time_us": r.time_us, "busbw_GBps": r.busbw_GBps,
                        "total_us": r.time_us * op["count"], "ops_covered": 1, "topology": r.topology,
                        "ranks": r.ranks})
    return pd.DataFrame(out, columns=REPLAY_COLUMNS), skipped


def replay_totals(ops: pd.DataFrame, nops: int) -> pd.DataFrame:
    """One total row per (engine, algorithm): time x calls summed over the ops it ran, ops_covered of nops;
    then best_fixed: per collective the one algorithm with the smallest summed time over all of that
    collective's ops (a static per-collective choice, as a fixed NCCL_ALGO would make)."""
    out = []
    for engine, part in ops.groupby("engine", sort=False):
        first = part.iloc[0]
        common = {"kind": "total", "op": pd.NA, "label": "", "collective": "", "size_bytes": pd.NA, "dtype": "",
                  "calls": int(part.drop_duplicates("op").calls.sum()), "engine": engine, "time_us": np.nan,
                  "busbw_GBps": np.nan, "topology": first.topology, "ranks": first.ranks}
        for algo, rows in part.groupby("algorithm", sort=False):
            chosen = ", ".join(dict.fromkeys(rows.chosen)) if algo == AUTO else algo
            out.append({**common, "algorithm": algo, "chosen": chosen, "total_us": rows.total_us.sum(),
                        "ops_covered": rows.op.nunique()})
        picks, total = [], 0.0
        fixed = part[part.algorithm != AUTO]
        for coll, rows in fixed.groupby("collective", sort=False):
            need = rows.op.nunique()
            sums = rows.groupby("algorithm", sort=False).agg(t=("total_us", "sum"), n=("op", "nunique"))
            sums = sums[sums.n == need].sort_values("t", kind="stable")
            if not sums.empty:
                picks.append(f"{coll}:{sums.index[0]}")
                total += float(sums.t.iloc[0])
        covered = fixed[fixed.collective.isin([p.split(":")[0] for p in picks])].op.nunique()
        out.append({**common, "algorithm": BEST_FIXED, "chosen": ", ".join(picks), "total_us": total,
                    "ops_covered": covered})
    return pd.DataFrame(out, columns=REPLAY_COLUMNS)


def run_replay_section(section: Section) -> Result:
    spec, frames, skipped = section.spec, [], []
    for cols, overrides, launch in variants(spec):
        ops, skips = _replay_rows(spec, overrides, launch, section.where)
        skipped += skips
        both = pd.concat([ops, replay_totals(ops, len(spec["ops"]))], ignore_index=True)
        frames.append(_with_columns(both, cols, launch))
    frame = pd.concat(frames, ignore_index=True)
    for col in ("op", "size_bytes"):
        frame[col] = frame[col].astype("Int64")
    return Result(section, frame, list(dict.fromkeys(tuple(x) for x in skipped)))


def run_workload_section(section: Section) -> Result:
    from .workload import run_section as run_workload

    return Result(section, run_workload(dict(section.raw), section.where))


def run_jobs_section(section: Section) -> Result:
    from .jobs import run_section as run_jobs

    return Result(section, run_jobs(section.spec))


RUNNERS = {"sweep": run_sweep_section, "replay": run_replay_section, "workload": run_workload_section,
           "jobs": run_jobs_section}


def run_section(section: Section) -> Result:
    return RUNNERS[section.kind](section)


# ------------------------------------------------------------------------------------- writing

def provenance(scenario: Scenario, result: Result) -> dict:
    """What `sweep -o` records (hcclsim.results.provenance.metadata, for the section's topology without its varied
    keys), plus the scenario: file, its sha256, the section as written, and every combination's topology."""
    from ..results.provenance import inputs_hash, metadata, resolved_topology

    s = result.section
    head = {"name": scenario.name, "file": scenario.label, "sha256": scenario.sha256, "title": scenario.title,
            "section": s.name, "kind": s.kind, "as_written": s.raw}
    if s.kind == "workload":
        meta = dict(result.frame.attrs.get("provenance") or {})
        meta.setdefault("inputs_sha256", hashlib.sha256((scenario.sha256 + s.name).encode()).hexdigest())
        return {**meta, "scenario": head}
    spec = s.spec
    if s.kind == "jobs":
        jobs, topo = spec["jobs"], spec["topology"]
        meta = metadata(topo, collectives=list(dict.fromkeys(j["collective"] for j in jobs)),
                        algorithm=",".join(dict.fromkeys(j["algorithm"] for j in jobs)),
                        sizes=sorted({j["size"] for j in jobs}), dtype=spec["dtype"], engine=",".join(spec["engines"]),
                        given={"topology": s.raw.get("topology"), "overrides": s.raw.get("set", [])})
        meta["inputs_sha256"] = inputs_hash(resolved_topology(topo), {"section": s.raw})
        return {**meta, "scenario": head}
    base = load_topology_in(spec, spec["overrides"], s.where)
    if s.kind == "sweep":
        colls, algorithm, sizes, root = spec["collectives"], spec["algorithm"], spec["sizes"], spec["root"]
    else:
        colls = list(dict.fromkeys(op["collective"] for op in spec["ops"]))
        algorithm = ",".join(x for x in (spec["algorithm"], AUTO) if x)
        sizes, root = sorted({op["size"] for op in spec["ops"]}), 0
    meta = metadata(base, collectives=colls, algorithm=algorithm, sizes=sizes, dtype=spec["dtype"], root=root,
                    engine=spec["engine"], given={"topology": spec["topology"], "overrides": spec["overrides"]})
    canonical = {k: v for k, v in spec.items() if k != "topologies"}
    variants_ = [{"columns": cols, "launch": launch, "topology": resolved_topology(t)}
                 for (cols, _, launch), t in zip(variants(spec), spec["topologies"])]
    meta["inputs_sha256"] = inputs_hash(resolved_topology(base), {"section": canonical, "variants": variants_})
    return {**meta, "scenario": {**head, "variants": variants_}}


def write_section(scenario: Scenario, result: Result, out_dir: Path, figures: bool = True) -> list[Path]:
    """results/NAME/<section>.csv (+ .meta.json) and, for a sweep with plot = {...} or a workload,
    <section>.png when figures is true (matplotlib present). Returns the paths written."""
    from ..results.report import write

    out_dir.mkdir(parents=True, exist_ok=True)
    csv = out_dir / f"{result.section.name}.csv"
    write(result.frame, str(csv), provenance(scenario, result))
    written = [csv]
    if figures and result.section.kind == "sweep" and result.section.spec["plot"]:
        written.append(draw_figure(result, out_dir / f"{result.section.name}.png"))
    if figures and result.section.kind == "workload":
        written.append(draw_workload_figure(result, out_dir / f"{result.section.name}.png"))
    return written


def plot_available() -> bool:
    return importlib.util.find_spec("matplotlib") is not None


def draw_figure(result: Result, out: Path) -> Path:
    """hcclsim.results.plot.draw over the section's rows (those plot.collectives/algorithms keep), one line per
    algorithm and varied value (a varied key that only changes the rank count is named by the ranks)."""
    from ..results import plot

    how, data = result.section.spec["plot"], result.frame
    for key, col in (("collectives", "collective"), ("algorithms", "algorithm")):
        if key in how:
            data = data[data[col].isin(how[key])]
    extra = [k for k, _ in result.section.spec["vary"]] + (["launch"] if result.section.spec["launch"] else [])
    varying = [k for k in extra if data[k].nunique() > 1 and not _same_as_ranks(data, k)]
    if varying:
        tags = data[varying].astype(str).apply(lambda r: ", ".join(f"{k}={v}" for k, v in r.items()), axis=1)
        data = data.assign(algorithm=data.algorithm + " (" + tags + ")")
    return plot.draw(data[data.size_bytes > 0], out, how["metrics"])


# what a workload figure shows: the first of these columns the table has
WORKLOAD_METRICS = (("layer_us", "layer time (us)"), ("gemm_slowdown_pct", "GEMM slowdown (%)"),
                    ("makespan_us", "makespan (us)"))


def draw_workload_figure(result: Result, out: Path) -> Path:
    """A bar per variant, grouped by case and by the section's swept parameters (its list values and its
    `vary` keys, e.g. skew and jitter): layer time for a layer, GEMM slowdown for an overlap."""
    from ..results import plot

    df, raw = result.frame, result.section.raw
    metric, ylabel = next((m, y) for m, y in WORKLOAD_METRICS if m in df.columns)
    swept = [k for k, v in raw.items() if isinstance(v, list) and k not in ("set", "cases", "variant")]
    swept += list(raw.get("vary", {}))
    keys = [c for c in ["case"] + [next((c for c in (k, f"{k}_us") if c in df.columns), None) for k in swept]
            if c is not None and c in df.columns and df[c].nunique(dropna=False) > 1]
    label = df[keys].astype(str).apply(lambda r: ", ".join(v if k == "case" else f"{k}={v}" for k, v in r.items()),
                                       axis=1) if keys else pd.Series(result.section.name, index=df.index)
    table = df.assign(group=label).pivot_table(index="group", columns="variant", values=metric, sort=False)
    table = table[list(dict.fromkeys(df.variant))]
    return plot.draw_bars(table, out, ylabel, f"{result.section.name}: {ylabel} per variant")


def _same_as_ranks(data: pd.DataFrame, key: str) -> bool:
    pairs = data[[key, "ranks"]].astype(str).drop_duplicates()
    return len(pairs) == pairs[key].nunique() == pairs["ranks"].nunique()


def copy_source(scenario: Scenario, out_dir: Path) -> Path:
    """The scenario file as run, beside its tables (scenario.toml)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    dest = out_dir / "scenario.toml"
    try:
        dest.write_text(_read_text(scenario.path, scenario.label), encoding="utf-8")
    except OSError as e:
        raise ConfigError(f"-o {str(out_dir)!r}: cannot write ({e.strerror or e})") from None
    return dest
