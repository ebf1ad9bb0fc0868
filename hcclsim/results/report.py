"""Rendering sweep rows: nccl-tests-like tables (rich), CSV, JSON and Parquet."""

from __future__ import annotations

import io
import json
import math
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
from rich.console import Console
from rich.table import Table

from ..core.errors import ConfigError
from ..core.units import format_size
from ..core.version import __version__
from ..sweeping.best import best_per_size
from .provenance import sidecar_path, write_sidecar
from .safefile import replace, replace_text

SPREAD_COLUMNS = ("time_us_p75", "time_us_p95", "time_us_min", "time_us_max")   # time (us) is the p50
SPREAD_HEADERS = ("p75 (us)", "p95 (us)", "min (us)", "max (us)")


def csv_float(x: float) -> str:
    """A float in CSV: the shortest digits that read back to the same number, never e-notation (%g and
    repr print 1e-05 for a tiny time and 1.04858e+06 for a byte count that became a float beside NaN)."""
    return np.format_float_positional(x, unique=True, trim="-")


def to_csv(df: pd.DataFrame) -> str:
    buf = io.StringIO()
    df.to_csv(buf, index=False, float_format=csv_float, lineterminator="\n")
    return buf.getvalue()


def to_json(df: pd.DataFrame) -> str:
    """Rows as a JSON list of objects, one a line, which pandas.read_json reads as the rows (the metadata
    goes to the sidecar). to_dict gives Python ints and floats, which json writes exactly (DataFrame.to_json
    would round to 10 decimal places: 6e-5 GB/s would keep one digit); NaN and infinities, which JSON
    lacks (RFC 8259, section 6), are written as null."""
    rows = [json.dumps({k: None if isinstance(v, float) and not math.isfinite(v) else v for k, v in r.items()})
            for r in df.to_dict(orient="records")]
    return "[" + ",".join(f"\n{r}" for r in rows) + "\n]\n"


def output_format(path: str) -> str:
    """'.csv', '.json' or '.parquet' from the file name; checked before a sweep starts, so bad -o fails fast."""
    suffix = Path(path).suffix.lower()
    if suffix not in (".csv", ".json", ".parquet"):
        raise ConfigError(f"-o/--output: expected a file ending in .csv, .json or .parquet, got {path!r}")
    if suffix == ".parquet":
        try:
            import pyarrow  # noqa: F401
        except ImportError:
            raise ConfigError("-o/--output: writing .parquet needs pyarrow: pip install 'hccl-bench[parquet]'") \
                from None
    return suffix


def write(df: pd.DataFrame, path: str, meta: dict | None = None) -> None:
    """Write rows to path; the format comes from the suffix (.csv, .json, .parquet), and meta
    (hcclsim.results.provenance.metadata) goes to a sidecar PATH.meta.json (without meta, a sidecar left
    by an earlier file is removed: it would describe other rows). Each file is written under a temporary
    name and renamed into place (hcclsim.results.safefile)."""
    suffix = output_format(path)
    try:
        if suffix == ".csv":
            replace_text(path, to_csv(df))
        elif suffix == ".json":
            replace_text(path, to_json(df))
        else:
            replace(path, lambda tmp: df.to_parquet(tmp, index=False))
        if meta is not None:
            write_sidecar(path, {"hccl_bench_version": __version__, **meta})
        else:
            sidecar_path(path).unlink(missing_ok=True)
    except OSError as e:
        raise ConfigError(f"-o/--output: cannot write {path!r} ({e.strerror or e})") from None


def write_text(path: str, text: str) -> None:
    """Write text to path atomically (hcclsim.results.safefile); a path that cannot be written is a one-line error."""
    try:
        replace_text(path, text)
    except OSError as e:
        raise ConfigError(f"-o/--output: cannot write {path!r} ({e.strerror or e})") from None


def _console(file=None) -> Console:
    width = max(shutil.get_terminal_size((120, 24)).columns, 100)
    return Console(file=file, width=width, highlight=False, soft_wrap=False)


def render_table(df: pd.DataFrame, file=None) -> None:
    """One nccl-tests-like block per (collective, algorithm) -- engines side by side when there are
    several -- then the fastest algorithm per size (by the last engine listed)."""
    con = _console(file)
    engines = list(dict.fromkeys(df["engine"]))
    for (coll, algo), part in df.groupby(["collective", "algorithm"], sort=False):
        first = part.iloc[0]
        t = Table(title=f"{coll} · {algo} · {first.topology} ({first.ranks} ranks) · {' vs '.join(engines)}",
                  title_justify="left", box=None, header_style="bold")
        for col in ("size (B)", "count (elems)", "type", "root"):
            t.add_column(col, justify="right")
        many = len(engines) > 1
        spread = "time_us_p95" in part.columns and not many   # noisy iterations: PARAM-like percentiles
                                                                # (side by side, the CSV has them)
        for e in engines:
            suffix = f" {e}" if many else ""
            for col in ("time (us)", "algbw (GB/s)", "busbw (GB/s)") + (SPREAD_HEADERS if spread else ()):
                t.add_column(col + suffix, justify="right")
        if many:
            t.add_column("ratio", justify="right")
        protocol = "protocol" in part.columns and (part["protocol"] != "none").any()
        if protocol:
            t.add_column("protocol", justify="right")
        chosen = "chosen" in part.columns and algo == "auto"
        if chosen:
            t.add_column("chosen", justify="right")
        by_engine = {e: part[part.engine == e].reset_index(drop=True) for e in engines}
        base = by_engine[engines[0]]
        for i, row in enumerate(base.itertuples(index=False)):
            cells = [str(row.size_bytes), str(row.count), row.dtype, str(row.root)]
            for e in engines:
                r = by_engine[e].iloc[i]
                cells += [f"{r.time_us:.2f}", f"{r.algbw_GBps:.2f}", f"{r.busbw_GBps:.2f}"]
                if spread:
                    cells += [f"{r[c]:.2f}" for c in SPREAD_COLUMNS]
            if many:
                cells.append(f"{by_engine[engines[-1]].iloc[i].time_us / row.time_us:.3f}" if row.time_us else "-")
            if protocol:
                cells.append(str(row.protocol))
            if chosen:
                cells.append(str(row.chosen))
            t.add_row(*cells)
        con.print(t)
        con.print()
    # 'auto' rows repeat the winner's time: leave them out of the ranking.
    ranked = df[df.algorithm != "auto"]
    if ranked["algorithm"].nunique() > 1:
        best = best_per_size(ranked, engines[-1])
        for coll, part in best.groupby("collective", sort=False):
            t = Table(title=f"{coll} · fastest algorithm per size ({engines[-1]})", title_justify="left", box=None,
                      header_style="bold")
            for col in ("size (B)", "algorithm", "time (us)", "busbw (GB/s)", "runner-up", "margin"):
                t.add_column(col, justify="right")
            for row in part.itertuples(index=False):
                runner, margin = (row.runner_up, f"{row.margin:+.1%}") if row.runner_up else ("-", "-")
                t.add_row(str(row.size_bytes), row.algorithm, f"{row.time_us:.2f}", f"{row.busbw_GBps:.2f}",
                          runner, margin)
            con.print(t)
            con.print()


def render_tune(ranges: pd.DataFrame, file=None) -> None:
    """The tuner table (hcclsim.analysis.tune.size_ranges): one block per collective, one line per size range."""
    con = _console(file)
    for coll, part in ranges.groupby("collective", sort=False):
        first = part.iloc[0]
        t = Table(title=f"{coll} · best algorithm per size range · {first.topology} ({first.ranks} ranks) · "
                        f"{first.engine}", title_justify="left", box=None, header_style="bold")
        for col in ("min size (B)", "max size (B)", "", "algorithm", "protocol", "runner-up", "margin", "sizes"):
            t.add_column(col, justify="right")
        for row in part.itertuples(index=False):
            runner, margin = (row.runner_up, f"{row.margin:+.1%}") if row.runner_up else ("-", "-")
            t.add_row(str(row.min_size_bytes), str(row.max_size_bytes),
                      f"{format_size(row.min_size_bytes)}-{format_size(row.max_size_bytes)}", row.algorithm,
                      row.protocol, runner, margin, str(row.points))
        con.print(t)
        con.print()


def render_list(title: str, columns: list[str], rows: list[list[str]], file=None) -> None:
    con = _console(file)
    t = Table(title=title, title_justify="left", box=None, header_style="bold")
    for c in columns:
        t.add_column(c, overflow="fold")
    for r in rows:
        t.add_row(*r)
    con.print(t)
