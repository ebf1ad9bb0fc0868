"""Validation against published nccl-tests / rccl-tests measurements (docs/validation.md).

A validation file (``validation/PRESET.toml``) names a preset and its cases; each case maps rows of the
measurement CSVs (``validation/*.csv``) to one hccl-bench run (preset, --set overrides, collective,
algorithm) and states the tolerance per size band. Per measured point:

    error = predicted / measured - 1          (busbw, and time where the time is published)

where the measured busbw is recomputed from the published time when there is one (nccl-tests prints
busbw with two decimals, 0.00 below a few KiB), else the published busbw. Per (case, band, metric) the
summary gives the points, mean |error| and worst (signed) error; a band with a tolerance passes when
*every* checked point has |error| <= tolerance. Bands: small < 64 KiB <= medium < 64 MiB <= large.

Measurements validate, they never tune: sources a constant was estimated from are listed under
``excluded`` (with the reason) and never compared, and a topology file ``calibrate`` wrote (fitted to
measurements) is refused as a preset. Pure functions; DataFrames out; errors are ConfigError.
"""

from __future__ import annotations

import csv
import functools
import math
import re
import tomllib
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

import numpy as np
import pandas as pd

from ..core import budget
from ..core.errors import ConfigError, HcclSimError, suggest
from ..core.units import format_size, parse_size
from ..engine.execution import check_launch, discards_empty, launched, parse_launch
from ..network import config
from ..schedule import collectives as C
from ..sweeping import library
from ..sweeping.sweep import auto_candidates, split_auto, sweep
from .calibrate import WARNING, launches_of

KIB, MIB = 1 << 10, 1 << 20
BANDS = (("small", 0, 64 * KIB), ("medium", 64 * KIB, 64 * MIB), ("large", 64 * MIB, math.inf))
BAND_LABELS = {"small": "< 64K", "medium": "64K - 64M", "large": ">= 64M"}
METRICS = ("busbw", "time")
TOLERANCE_KEYS = tuple(f"{b}{'' if m == 'busbw' else '_time'}" for m in METRICS for b, _, _ in BANDS)
PLACEMENTS = ("out-of-place", "in-place")
REQUIRED = ("system", "gpus", "nodes", "collective", "nccl_algo", "library", "library_version", "placement",
            "size_bytes", "time_us", "algbw_GBps", "busbw_GBps", "source", "log")
OPTIONAL = ("gpu", "network", "nccl_proto", "dtype", "note")
TOP_KEYS = ("preset", "description", "data", "excluded", "case", "note")
CASE_KEYS = ("name", "collective", "algorithm", "set", "launch", "match", "sizes", "placement", "data",
             "tolerance", "checked_sizes", "excluded", "note")
EXCLUDE_KEYS = ("log", "source", "reason")
PASS, FAIL, INFO = "pass", "FAIL", "info"
MAX_FACTOR_SLACK = 0.01     # data check: busbw = algbw x factor and algbw = size / time, within print rounding
CALIBRATED = WARNING.split(":", 1)[0]       # '# CALIBRATED', the header calibrate writes on every file


@dataclass(frozen=True)
class Exclusion:
    reason: str
    log: str = ""          # a log file (the CSV's log column), or
    source: str = ""       # a text the source column contains

    def hits(self, df: pd.DataFrame) -> pd.Series:
        if self.log:
            return df["log"] == self.log
        return df["source"].str.contains(self.source, regex=False)

    def describe(self) -> str:
        return f"{'log ' + self.log if self.log else 'source ' + repr(self.source)} ({self.reason})"


@dataclass(frozen=True)
class Case:
    name: str
    collective: str
    algorithm: str
    overrides: tuple = ()
    launch: str | None = None               # how the runs launched (sweep --launch); None: as each log's banner says
    match: tuple = ()                       # ((column, (values...)), ...)
    sizes: tuple = (0, math.inf)            # measured sizes used (inclusive)
    placement: str = "out-of-place"
    data: tuple = ()                        # CSV files (paths)
    tolerance: tuple = ()                   # ((key, limit), ...), keys from TOLERANCE_KEYS
    checked_sizes: tuple = ()               # ((key, (lo, hi)), ...): the sizes a tolerance checks
    excluded: tuple = ()
    note: str = ""


@dataclass(frozen=True)
class Validation:
    name: str
    path: Path
    preset: str
    description: str
    cases: tuple
    excluded: tuple = ()
    note: str = ""


@dataclass
class Result:
    points: pd.DataFrame
    summary: pd.DataFrame
    skipped: list = field(default_factory=list)      # (validation, case or '', reason)
    excluded: list = field(default_factory=list)     # (validation, case, rows, what)

    @property
    def failed(self) -> bool:
        return bool((self.summary["status"] == FAIL).any()) if len(self.summary) else False


# ---------------------------------------------------------------------------------------------- files

def validation_dir() -> Path:
    """The shipped validation/ folder (installed as hcclsim.validation), or the checkout's beside hcclsim/."""
    try:
        return Path(str(resources.files("hcclsim.validation")))
    except ModuleNotFoundError:
        return Path(__file__).resolve().parents[2] / "validation"


def validation_files(directory=None) -> dict[str, Path]:
    d = Path(directory) if directory else validation_dir()
    return {p.stem: p for p in sorted(d.glob("*.toml"))} if d.is_dir() else {}


def _line(text: str, key: str, case: int | None) -> int | None:
    """The line of `key` (in the case-th [[case]] section, or before the first), 1-based; None if not found."""
    section, pattern = -1, re.compile(rf"(^|[\s{{,]){re.escape(key)}\s*=")
    for i, line in enumerate(text.splitlines(), 1):
        if re.match(r"\s*\[\[\s*case\s*\]\]", line):
            section += 1
        elif (section == (-1 if case is None else case)) and pattern.search(line.split("#")[0]):
            return i
    return None


class _Doc:
    """Error messages that name the file, line and key."""

    def __init__(self, path: Path, text: str):
        self.path, self.text = path, text

    def error(self, key: str, msg: str, case: int | None = None) -> ConfigError:
        line = _line(self.text, key.split(".")[-1], case)
        where = f"{self.path}:{line}" if line else str(self.path)
        return ConfigError(f"{where}: {'case ' + str(case + 1) + ': ' if case is not None else ''}{key}: {msg}")

    def keys(self, table: dict, allowed, prefix: str, case=None):
        for k in table:
            if k not in allowed:
                raise self.error(f"{prefix}{k}", f"unknown key{suggest(k, allowed)}; expected one of: "
                                 f"{', '.join(allowed)}", case)

    def string(self, table, key, prefix="", case=None, default=None) -> str:
        v = table.get(key, default)
        if not isinstance(v, str) or not v.strip():
            raise self.error(f"{prefix}{key}", f"expected a non-empty string, got {v!r}", case)
        return v.strip()

    def strings(self, table, key, prefix="", case=None) -> tuple:
        v = table.get(key, [])
        if isinstance(v, str):
            v = [v]
        if not isinstance(v, list) or not all(isinstance(x, str) and x.strip() for x in v):
            raise self.error(f"{prefix}{key}", f"expected a list of strings, got {v!r}", case)
        return tuple(x.strip() for x in v)

    def size_range(self, v, key, case) -> tuple:
        if not isinstance(v, str) or v.count(":") != 1:
            raise self.error(key, f"expected a size range 'LO:HI' such as '64M:' or '8:8K', got {v!r}", case)
        lo, hi = v.split(":")
        try:
            rng = (parse_size(lo.strip(), key) if lo.strip() else 0,
                   parse_size(hi.strip(), key) if hi.strip() else math.inf)
        except ConfigError as e:
            raise self.error(key, str(e).split(": ", 1)[-1], case) from None
        if rng[0] > rng[1]:
            raise self.error(key, f"expected LO <= HI, got {v!r}", case)
        return rng


def _exclusions(doc: _Doc, items, prefix: str, case=None) -> tuple:
    if not isinstance(items, list) or not all(isinstance(x, dict) for x in items):
        raise doc.error(prefix.rstrip("."), "expected a list of tables {log = ..., reason = ...}", case)
    out = []
    for x in items:
        doc.keys(x, EXCLUDE_KEYS, prefix, case)
        if ("log" in x) == ("source" in x):
            raise doc.error(f"{prefix}reason", "an exclusion names exactly one of log or source", case)
        key = "log" if "log" in x else "source"
        out.append(Exclusion(doc.string(x, "reason", prefix, case), **{key: doc.string(x, key, prefix, case)}))
    return tuple(out)


def load_validation(path) -> Validation:
    """One validation TOML, checked strictly (unknown keys and malformed values are ConfigErrors)."""
    path = Path(path)
    doc = _Doc(path, path.read_text(encoding="utf-8") if path.is_file() else "")
    if not path.is_file():
        raise ConfigError(f"{path}: no such validation file")
    try:
        top = tomllib.loads(doc.text)
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{path}: malformed TOML: {e}") from None
    doc.keys(top, TOP_KEYS, "")
    data = tuple(path.parent / d for d in doc.strings(top, "data"))
    cases = top.get("case", [])
    if not isinstance(cases, list) or not cases or not all(isinstance(c, dict) for c in cases):
        raise doc.error("case", "expected at least one [[case]] table")
    out = tuple(_case(doc, c, i, data) for i, c in enumerate(cases))
    names = [c.name for c in out]
    for i, n in enumerate(names):
        if names.index(n) != i:
            raise doc.error("name", f"case name {n!r} used twice", i)
    return Validation(path.stem, path, doc.string(top, "preset"), str(top.get("description", "")), out,
                      _exclusions(doc, top.get("excluded", []), "excluded."), str(top.get("note", "")))


def _case(doc: _Doc, c: dict, i: int, data: tuple) -> Case:
    doc.keys(c, CASE_KEYS, "", i)
    name = doc.string(c, "name", case=i)
    try:
        coll = C.canonical(doc.string(c, "collective", case=i), "collective")
    except ConfigError as e:
        raise doc.error("collective", str(e).split(": ", 1)[-1], i) from None
    match = c.get("match", {})
    if not isinstance(match, dict):
        raise doc.error("match", "expected a table {column = value or [values]}", i)
    for k, v in match.items():
        if k not in REQUIRED + OPTIONAL:
            raise doc.error(f"match.{k}", f"unknown column{suggest(k, REQUIRED + OPTIONAL)}", i)
        if not all(isinstance(x, (str, int)) for x in (v if isinstance(v, list) else [v])):
            raise doc.error(f"match.{k}", f"expected a value or a list of values, got {v!r}", i)
    tol = c.get("tolerance", {})
    if not isinstance(tol, dict):
        raise doc.error("tolerance", f"expected a table with keys among {', '.join(TOLERANCE_KEYS)}", i)
    doc.keys(tol, TOLERANCE_KEYS, "tolerance.", i)
    for k, v in tol.items():
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not v > 0:
            raise doc.error(f"tolerance.{k}", f"expected a fraction > 0 such as 0.10, got {v!r}", i)
    checked = c.get("checked_sizes", {})
    if not isinstance(checked, dict):
        raise doc.error("checked_sizes", "expected a table {band = 'LO:HI'}", i)
    doc.keys(checked, tuple(tol), "checked_sizes.", i)
    placement = c.get("placement", "out-of-place")
    if placement not in PLACEMENTS:
        raise doc.error("placement", f"expected one of {', '.join(PLACEMENTS)}, got {placement!r}", i)
    files = tuple(doc.path.parent / d for d in doc.strings(c, "data", case=i)) or data
    if not files:
        raise doc.error("data", "expected the CSV file(s) to compare with (here or at the top of the file)", i)
    launch = doc.string(c, "launch", case=i) if "launch" in c else None
    try:
        if launch is not None:
            check_launch(launch)
    except ConfigError as e:
        raise doc.error("launch", str(e).split(": ", 1)[-1], i) from None
    return Case(name=name, collective=coll, algorithm=doc.string(c, "algorithm", case=i, default="auto"),
                overrides=doc.strings(c, "set", case=i), launch=launch,
                match=tuple((k, tuple(v if isinstance(v, list) else [v])) for k, v in match.items()),
                sizes=doc.size_range(c["sizes"], "sizes", i) if "sizes" in c else (0, math.inf),
                placement=placement, data=files, tolerance=tuple((k, float(v)) for k, v in tol.items()),
                checked_sizes=tuple((k, doc.size_range(v, f"checked_sizes.{k}", i)) for k, v in checked.items()),
                excluded=_exclusions(doc, c.get("excluded", []), "excluded.", i), note=str(c.get("note", "")))


def _number(v: str, where: str, lo: float, whole: bool = False, empty: bool = False):
    if v.strip() == "" and empty:
        return math.nan
    try:
        x = int(v) if whole else float(v)
    except ValueError:
        x = None
    if x is None or not math.isfinite(x) or x < lo:
        what = "a whole number" if whole else "a number"
        raise ConfigError(f"{where}: expected {what} >= {lo:g}{' or empty' if empty else ''}, got {v!r}")
    return x


def load_data(path) -> pd.DataFrame:
    """A measurement CSV, checked row by row; errors name the file, line and column."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise ConfigError(f"{path}: cannot read the measurement file ({e.strerror or e})") from None
    reader = csv.DictReader(text.splitlines())
    cols = reader.fieldnames or []
    for col in cols:
        if col not in REQUIRED + OPTIONAL:
            raise ConfigError(f"{path}:1: {col}: unknown column{suggest(col, REQUIRED + OPTIONAL)}")
    missing = [c for c in REQUIRED if c not in cols]
    if missing:
        raise ConfigError(f"{path}:1: missing column(s) {', '.join(missing)}")
    rows = []
    for rec in reader:
        where = f"{path}:{reader.line_num}"
        if None in rec or any(v is None for v in rec.values()):
            raise ConfigError(f"{where}: expected {len(cols)} fields")
        for key in ("system", "nccl_algo", "library", "source", "log"):
            if not rec[key].strip():
                raise ConfigError(f"{where}: {key}: expected a non-empty value")
        row = dict(rec, gpus=_number(rec["gpus"], f"{where}: gpus", 1, True),
                   nodes=_number(rec["nodes"], f"{where}: nodes", 1, True),
                   size_bytes=_number(rec["size_bytes"], f"{where}: size_bytes", 1, True),
                   time_us=_number(rec["time_us"], f"{where}: time_us", 0, empty=True),
                   algbw_GBps=_number(rec["algbw_GBps"], f"{where}: algbw_GBps", 0, empty=True),
                   busbw_GBps=_number(rec["busbw_GBps"], f"{where}: busbw_GBps", 0),
                   line=reader.line_num, file=path.name, folder=str(path.parent))
        try:
            row["collective"] = C.canonical(rec["collective"], "collective")
        except ConfigError as e:
            raise ConfigError(f"{where}: {e}") from None
        if rec["placement"] not in PLACEMENTS:
            raise ConfigError(f"{where}: placement: expected one of {', '.join(PLACEMENTS)}, got {rec['placement']!r}")
        if row["time_us"] == 0:
            raise ConfigError(f"{where}: time_us: expected a time > 0 or empty, got {rec['time_us']!r}")
        rows.append(row)
    if not rows:
        raise ConfigError(f"{path}: no measurement rows")
    return pd.DataFrame(rows)


def check_data(df: pd.DataFrame) -> list[str]:
    """Rows whose busbw != algbw x factor, or algbw != size / time, beyond print rounding (one line each)."""
    bad = []
    for r in df.itertuples(index=False):
        factor = C.busbw_factor(r.collective, int(r.gpus))
        checks = [("busbw_GBps", r.busbw_GBps, r.algbw_GBps * factor)] if not math.isnan(r.algbw_GBps) else []
        if not math.isnan(r.time_us):
            checks.append(("algbw_GBps", r.algbw_GBps, r.size_bytes / r.time_us / 1e3))
        for col, got, want in checks:
            if not math.isnan(got) and abs(got - want) > max(0.0101 * factor, MAX_FACTOR_SLACK * want):
                bad.append(f"{r.file}:{r.line}: {col} {got:g}, expected {want:.4g}")
    return bad


# ---------------------------------------------------------------------------------------------- points

def band_of(size: int) -> str:
    return next(name for name, lo, hi in BANDS if lo <= size < hi)


def select(case: Case, data: pd.DataFrame, excluded: tuple) -> tuple[pd.DataFrame, list]:
    """The case's measured points, and (rows, what) for each exclusion that removed rows."""
    keep = (data["collective"] == case.collective) & (data["placement"] == case.placement)
    keep &= data["size_bytes"].between(case.sizes[0], case.sizes[1])
    for col, values in case.match:
        keep &= data[col].astype(str).isin([str(v) for v in values])
    pts, dropped = data[keep], []
    for ex in excluded + case.excluded:
        hit = ex.hits(pts)
        if hit.any():
            dropped.append((int(hit.sum()), ex.describe()))
        pts = pts[~hit]
    return pts.reset_index(drop=True), dropped


def launches(case: Case, pts: pd.DataFrame) -> pd.Series:
    """How each measured point was launched (sweep --launch), from its log's banner (``launches_of``: loop,
    loop:G for one thread driving G GPUs, :n=N for N timed iterations; nccl-tests' defaults, loop, for a log
    without one, such as a published table); a row's log is a path from its CSV's folder. A case's own launch
    is for logs that cannot say it alone (no banner, or runs that launched differently: then it must be one of
    theirs); it is refused where the log's banners say otherwise, and a log the loop model cannot time
    (nccl-tests -m, -G, -z) is refused."""
    found = {}
    for folder, log in sorted(set(zip(pts["folder"], pts["log"]))):
        path = Path(folder) / log
        if case.launch is not None and not path.is_file():
            found[folder, log] = case.launch
            continue
        try:
            said = launches_of(path.read_text(encoding="utf-8", errors="replace"))
        except OSError as e:
            raise ConfigError(f"case {case.name!r}: {path}: cannot read the log ({e.strerror or e}) that says how "
                              f"it launched; give the case a launch") from None
        except ValueError as e:
            raise ConfigError(f"case {case.name!r}: {log}: {e}") from None
        if case.launch is None:
            if len(said) > 1:
                raise ConfigError(f"case {case.name!r}: {log}: its runs launched differently ({', '.join(said)}); "
                                  f"give the case the launch of the run it compares")
            found[folder, log] = said[0] if said else "loop"
        elif said and parse_launch(case.launch) not in [parse_launch(x) for x in said]:
            raise ConfigError(f"case {case.name!r}: launch {case.launch!r}, but {log} says it ran as "
                              f"{' or '.join(repr(x) for x in said)} (its nThread/nGpus/iters banner)")
        else:
            found[folder, log] = case.launch
    return pd.Series([found[k] for k in zip(pts["folder"], pts["log"])], pts.index)


def predict(case: Case, preset: str, sizes, dtype: str, launch: str) -> tuple[pd.DataFrame, int, list]:
    """The analytic model at `sizes`: (size_bytes, time_us, busbw_GBps, chosen, nccl_model_time_us), the rank
    count, skip reasons."""
    topo = config.load_topology(preset, list(case.overrides))
    res = sweep(topo, [case.collective], case.algorithm, sorted({int(s) for s in sizes}), dtype=dtype,
                launch=launch)
    rows = res.rows[res.rows["engine"] == "analytic"].reset_index(drop=True)
    if not rows.empty:
        rows["nccl_model_time_us"] = nccl_model(case, topo, rows["size_bytes"], launch)
    return rows, topo.nranks, [why for _, _, why in res.skipped]


def nccl_model(case: Case, topo, size_bytes, launch: str) -> np.ndarray:
    """Microseconds per point by NCCL's own cost model (sweeping/library.py, the port of its tuner: under `auto`
    the argmin over what `-a auto` chooses among, else the case's algorithm, each at its best protocol or the
    one the endpoint forces), under the same launch as the prediction (execution.launched): the baseline a
    library's tuner gives, beside the simulation. NaN where NCCL's model says nothing: AllToAll
    (point-to-point sends), an algorithm NCCL does not have (direct, hierarchical, ...) or one with options
    (NCCL has no variants), a preset with no compute_capability (RCCL's model is not ported)."""
    out = np.full(len(size_bytes), np.nan)
    rest, auto = split_auto(case.algorithm)
    if auto == bool(rest) or any(c in rest for c in ":,"):
        return out
    names = [a.label for a in auto_candidates(topo, case.collective)] if auto else [rest]
    for i, size in enumerate(int(s) for s in size_bytes):
        if size == 0 and discards_empty(topo, case.collective):
            out[i] = 0.0
        elif isinstance(pick := library.choose(topo, case.collective, size, names), library.Choice):
            out[i] = float(launched(topo, pick.time_us * 1e-6, launch)) * 1e6
    return out


def compare(case: Case, pts: pd.DataFrame, pred: pd.DataFrame, nranks: int) -> pd.DataFrame:
    """Per measured point: predicted and measured time and busbw, and the relative errors."""
    grid = sorted({int(s) for s in pts["size_bytes"]})
    if len(pred) != len(grid):
        raise ConfigError(f"case {case.name!r}: the model returned {len(pred)} sizes for {len(grid)} measured")
    at = dict(zip(grid, range(len(grid))))
    idx = [at[int(s)] for s in pts["size_bytes"]]
    factor = C.busbw_factor(case.collective, nranks)
    with np.errstate(divide="ignore", invalid="ignore"):
        from_time = pts["size_bytes"] / (pts["time_us"] * 1e3) * factor
        meas_busbw = np.where(pts["time_us"].notna(), from_time, pts["busbw_GBps"])
        p_time = pred["time_us"].to_numpy(float)[idx]
        p_busbw = pred["busbw_GBps"].to_numpy(float)[idx]
        n_time = pred["nccl_model_time_us"].to_numpy(float)[idx]
        n_busbw = pts["size_bytes"].to_numpy(float) / (n_time * 1e3) * factor
        out = pd.DataFrame({
            "case": case.name, "collective": case.collective, "algorithm": case.algorithm,
            "overrides": " ".join(case.overrides), "band": [band_of(int(s)) for s in pts["size_bytes"]],
            "size_bytes": pts["size_bytes"].astype(int), "placement": case.placement, "system": pts["system"],
            "nccl_algo": pts["nccl_algo"], "measured_time_us": pts["time_us"], "predicted_time_us": p_time,
            "time_error": p_time / pts["time_us"] - 1, "measured_busbw_GBps": meas_busbw,
            "predicted_busbw_GBps": p_busbw,
            "busbw_error": np.where(meas_busbw > 0, p_busbw / meas_busbw - 1, np.nan),
            "chosen": pred["chosen"].to_numpy()[idx] if "chosen" in pred else case.algorithm,
            "nccl_model_time_us": n_time, "nccl_model_time_error": n_time / pts["time_us"] - 1,
            "nccl_model_busbw_GBps": n_busbw,
            "nccl_model_busbw_error": np.where(meas_busbw > 0, n_busbw / meas_busbw - 1, np.nan),
            "source": pts["source"], "log": pts["log"]})
    return out


def _checked(case: Case, key: str, sizes: pd.Series) -> pd.Series:
    lo, hi = dict(case.checked_sizes).get(key, (0, math.inf))
    return sizes.between(lo, hi)


def _worst(err: np.ndarray) -> float:
    """The error of largest magnitude among the finite ones (signed), NaN when there is none."""
    err = err[np.isfinite(err)]
    return float(err[np.argmax(np.abs(err))]) if err.size else math.nan


def summarize(case: Case, points: pd.DataFrame) -> pd.DataFrame:
    """Per band and metric: points, mean |error|, worst (signed) error, tolerance, checked points, status, and
    the worst error of NCCL's own cost model over the same checked points (NaN where it has none)."""
    tol, rows = dict(case.tolerance), []
    for band, _, _ in BANDS:
        part = points[points["band"] == band]
        for metric in METRICS:
            key = band if metric == "busbw" else f"{band}_time"
            err = part[f"{metric}_error"].to_numpy(float)
            if part.empty or (metric == "time" and key not in tol):
                continue
            ok = np.isfinite(err)
            chk = ok & _checked(case, key, part["size_bytes"]).to_numpy()
            worst, worst_chk = _worst(err[ok]), _worst(err[chk])
            nccl = part[f"nccl_model_{metric}_error"].to_numpy(float) if f"nccl_model_{metric}_error" in part \
                else np.full(len(part), np.nan)
            limit = tol.get(key, math.nan)
            status = INFO if key not in tol or not chk.any() else PASS if abs(worst_chk) <= limit else FAIL
            rows.append({"case": case.name, "collective": case.collective, "algorithm": case.algorithm,
                         "band": band, "metric": metric, "points": int(ok.sum()),
                         "mean_abs_error": float(np.mean(np.abs(err[ok]))) if ok.any() else math.nan,
                         "worst_error": worst, "tolerance": limit, "checked": int(chk.sum()),
                         "worst_checked_error": worst_chk, "status": status,
                         "nccl_model_worst_checked_error": _worst(nccl[chk])})
    return pd.DataFrame(rows)


# ---------------------------------------------------------------------------------------------- running

def available(preset: str) -> bool:
    return preset in config.preset_names() or Path(preset).is_file()


def calibrated_file(preset: str, where: str) -> str | None:
    """The file of `preset` or of its ``extends`` chain that ``calibrate`` wrote (its '# CALIBRATED' header
    line), or None. Such a file holds constants fitted to measurements: comparing it with measurements
    tests the fit, not the model."""
    config.resolve(preset, where)                    # the chain loads (no cycle, no bad file) before it is read
    ref = preset
    while isinstance(ref, str):
        _, label, path = config.locate(ref, where)
        text = path.read_text(encoding="utf-8")
        if any(line.startswith(CALIBRATED) for line in text.splitlines()):
            return label
        ref = tomllib.loads(text).get("extends")
    return None


def run_validation(v: Validation, explicit: bool = False) -> Result:
    """Every case of one validation file. An unavailable preset is skipped with a reason unless explicit
    (then it is a ConfigError), a calibrated one is a ConfigError; a case the algorithm cannot run is
    skipped with the sweep's reason."""
    res = Result(pd.DataFrame(), pd.DataFrame())
    if not available(v.preset):
        if explicit:
            raise ConfigError(f"{v.path}: preset {v.preset!r} not available (known presets: "
                              f"{', '.join(config.preset_names())})")
        res.skipped.append((v.name, "", f"preset {v.preset} not available"))
        return res
    if (fitted := calibrated_file(v.preset, f"{v.path}: preset")) is not None:
        raise ConfigError(f"{v.path}: preset {v.preset!r}: {fitted} was written by `hccl-bench calibrate` (its "
                          f"'{CALIBRATED}' header): its constants are fitted to measurements, so comparing it "
                          f"with measurements validates nothing; name the preset it was calibrated from")
    cache: dict[Path, pd.DataFrame] = {}
    points, summaries = [], []
    for case in v.cases:
        data = pd.concat([cache.setdefault(p, load_data(p)) for p in case.data], ignore_index=True)
        pts, dropped = select(case, data, v.excluded)
        res.excluded += [(v.name, case.name, n, what) for n, what in dropped]
        if pts.empty:
            res.skipped.append((v.name, case.name, "no measured points match"))
            continue
        case_points = []
        try:
            how = launches(case, pts)
        except ConfigError as e:
            raise ConfigError(f"{v.path}: {e}") from None
        dtypes = pts["dtype"].replace("", "float") if "dtype" in pts else pd.Series("float", pts.index)
        for (dtype, launch), part in pts.groupby([dtypes, how]):
            try:
                pred, nranks, why = predict(case, v.preset, part["size_bytes"], str(dtype), launch)
            except HcclSimError as e:
                raise ConfigError(f"{v.path}: case {case.name!r}: {e}") from None
            if pred.empty:
                res.skipped.append((v.name, case.name, "; ".join(why) or "the model returned no rows"))
                continue
            gpus = sorted({int(g) for g in part["gpus"]})
            if gpus != [nranks]:
                raise ConfigError(f"{v.path}: case {case.name!r}: the measurements have {gpus} GPUs, the preset "
                                  f"{v.preset} with {list(case.overrides)} has {nranks} ranks")
            case_points.append(compare(case, part.reset_index(drop=True), pred, nranks).assign(launch=launch))
        if case_points:
            points.append(pd.concat(case_points, ignore_index=True))
            summaries.append(summarize(case, points[-1]))
    if points:
        res.points = pd.concat(points, ignore_index=True).assign(validation=v.name, preset=v.preset)
        res.summary = pd.concat(summaries, ignore_index=True).assign(validation=v.name, preset=v.preset)
        res.points, res.summary = _ordered(res.points), _ordered(res.summary)
    return res


def _ordered(df: pd.DataFrame) -> pd.DataFrame:
    """validation and preset first, NCCL's model last: the columns a spreadsheet of earlier runs has keep their
    places."""
    first = ["validation", "preset"]
    last = [c for c in df.columns if c.startswith("nccl_model_")]
    return df[first + [c for c in df.columns if c not in first + last] + last]


def resolve(names=(), directory=None) -> list[tuple[Validation, bool]]:
    """The validation files to run: the named ones (file names or paths; explicit), or every shipped one."""
    files = validation_files(directory)
    if not names:
        return [(load_validation(p), False) for p in files.values()]
    out = []
    for n in names:
        if n.endswith(".toml") or "/" in n:
            out.append((load_validation(n), True))
        elif n in files:
            out.append((load_validation(files[n]), True))
        else:
            raise ConfigError(f"validate: unknown validated preset {n!r}{suggest(n, files)}; expected a .toml file "
                              f"or one of: {', '.join(files) or '(none found)'}")
    return out


@functools.lru_cache(maxsize=64)
def _run_cached(v: Validation, explicit: bool, memory_budget: int) -> Result:
    """run_validation, once per (validation file as loaded, explicit, memory budget) in a process: a validation
    file is frozen data and the model is the code, so `validate` and the docs' summary share one run; a
    run under another budget (--max-memory) is another run, which the budget may refuse."""
    return run_validation(v, explicit)


def validate(names=(), directory=None) -> Result:
    """Run the named (or all) validations; points and band summaries of every case, skips and exclusions."""
    # explicit only matters for a preset that is not available (an error instead of a skip)
    parts = [_run_cached(v, explicit and not available(v.preset), budget.current())
             for v, explicit in resolve(names, directory)]
    frames = [p for p in parts if not p.points.empty]
    return Result(pd.concat([p.points for p in frames], ignore_index=True) if frames else pd.DataFrame(),
                  pd.concat([p.summary for p in frames], ignore_index=True) if frames else pd.DataFrame(),
                  [s for p in parts for s in p.skipped], [e for p in parts for e in p.excluded])


def per_size(points: pd.DataFrame) -> pd.DataFrame:
    """The points of one case averaged per size (several nodes or logs measure the same size)."""
    g = points.groupby("size_bytes", sort=True)
    return pd.DataFrame({"points": g.size(), "measured_busbw_GBps": g["measured_busbw_GBps"].mean(),
                         "predicted_busbw_GBps": g["predicted_busbw_GBps"].first(),
                         "busbw_error": g["busbw_error"].mean(), "measured_time_us": g["measured_time_us"].mean(),
                         "predicted_time_us": g["predicted_time_us"].first(), "time_error": g["time_error"].mean(),
                         "chosen": g["chosen"].first(),
                         "nccl_model_busbw_GBps": g["nccl_model_busbw_GBps"].first(),
                         "nccl_model_busbw_error": g["nccl_model_busbw_error"].mean()}).reset_index()


def size_label(n: int) -> str:
    return format_size(int(n))
