"""Rendering sweep rows: nccl-tests-like tables (rich), CSV, JSON and Parquet."""

from __future__ import annotations

import io
import json
import math
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

import numpy as np
from rich.cells import cell_len
from rich.console import Console as _RichConsole
from rich.table import Table

from ..core.errors import ConfigError
from ..core.units import format_size
from ..core.version import __version__
from .provenance import sidecar_path, write_sidecar
from .safefile import replace, replace_text

if TYPE_CHECKING:
    import pandas as pd

class Console(_RichConsole):
    """rich's console, except that a reader who has gone (`hccl-bench sweep | head`) ends the command with
    status 0 through BrokenPipeError (hcclsim/cli), where rich would exit 1: a failed gate here."""

    def on_broken_pipe(self) -> None:
        self.quiet = True
        raise BrokenPipeError


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
    """Text lines are not wrapped (the terminal wraps them; a file or a pipe keeps one line per line)."""
    width = max(shutil.get_terminal_size((120, 24)).columns, 100)
    return Console(file=file, width=width, highlight=False, soft_wrap=True)


def terminal_width() -> int:
    """The width tables are fitted to: $COLUMNS, else the terminal's, else 120 (stdout is a file or a pipe)."""
    return shutil.get_terminal_size((120, 24)).columns


class Col(NamedTuple):
    """A column of print_table: its header ('\\n' between header lines, as nccl-tests prints units under the
    names), its cells, and `drop`: 0 for a column always shown, else its rank among the columns a narrow
    terminal leaves out (highest first)."""

    header: str
    cells: list[str]
    drop: int = 0
    left: bool = False


def print_table(title: str, cols: list[Col], file=None) -> None:
    """Print cols as a table that fits the terminal and never cuts a cell: every cell stays on one line, the
    columns with drop > 0 go, highest first, while the table is wider than the terminal (its caption names
    them), and a table that still does not fit is printed at its own width, which the terminal wraps."""
    width = terminal_width()
    shown, gone = list(cols), []
    while (need := table_width(shown)) > width and any(c.drop for c in shown):
        worst = max((c for c in shown if c.drop), key=lambda c: c.drop)
        shown.remove(worst)
        gone.append(worst)
    con = Console(file=file, width=max(width, need), highlight=False, soft_wrap=False)
    con.print(title, markup=False, style="italic")      # wrapped at the terminal, not at the table's width
    con.print(_rich_table(shown, gone, width))
    con.print()


def table_width(cols: list[Col]) -> int:
    """The width rich gives the table of these columns: each column its longest line, header or cell, and a
    space either side (box=None); counted here, as rich's own measurement of every cell takes half as long as
    printing the table."""
    return sum(max(cell_len(line) for text in (c.header, *c.cells) for line in text.split("\n")) + 2 for c in cols)


def _rich_table(cols: list[Col], gone: list[Col], width: int) -> Table:
    caption = (f"left out to fit {width} columns (a wider terminal shows them): "
               f"{', '.join(c.header.replace(chr(10), ' ') for c in gone)}") if gone else None
    t = Table(caption=caption, caption_justify="left", box=None, header_style="bold")
    for c in cols:
        t.add_column(c.header, justify="left" if c.left else "right", no_wrap=True)
    for cells in zip(*(c.cells for c in cols)):
        t.add_row(*cells)
    return t


def _num(x: float) -> str:
    return f"{x:.2f}" if math.isfinite(x) else "-"


def _count(x: float) -> str:
    return str(int(x)) if math.isfinite(x) else "-"


# --stats counters (hcclsim.engine.packet.STAT_NAMES): header, cell, drop rank
STATS = {"events": ("events", _count, 0),
         "peak_queue_bytes": ("peak\nqueue", lambda x: format_size(int(x)) if math.isfinite(x) else "-", 0),
         "busiest_link_util": ("busiest\nlink", lambda x: f"{x:.1%}" if math.isfinite(x) else "-", 0),
         "table_peak_entries": ("table\nentries", _count, 1),
         "table_stall_us": ("table\nstall (us)", _num, 1),
         "table_bypass": ("table\nbypass", _count, 1)}


def without_zero_bytes(rows: pd.DataFrame) -> tuple[pd.DataFrame, list[str]]:
    """The rows the sweep table shows, without the 0-byte ones, and a note per collective that had some.

    AllGather, ReduceScatter and AllToAll split the requested size among the ranks and round down
    (hcclsim.schedule.collectives.sizing), so the smallest sizes become 0 bytes: nccl-tests prints those as
    rows of size 0 (tests/data/nccl-tests/superbench_a100_all_gather_noredop.txt), and the rows written
    (-o, --format csv) keep them, but a table of identical 0-byte lines tells a reader nothing."""
    zero = rows["size_bytes"] == 0
    notes = []
    for coll, part in rows[zero].groupby("collective", sort=False):
        n = int(part.groupby(["algorithm", "engine"]).size().max())
        notes.append(f"{coll}: {n} of the sizes round down to 0 bytes on {part.ranks.iloc[0]} ranks, left out of "
                     f"the table (--zero-bytes shows them; the rows in -o and --format csv keep them)")
    return rows[~zero], notes


def render_table(df: pd.DataFrame, file=None, summary_only: bool = False) -> None:
    """The fastest algorithm per size (by the last engine listed) when several algorithms ran, then one
    nccl-tests-like block per (collective, algorithm), engines side by side when there are several;
    summary_only: the fastest-per-size tables alone."""
    engines = list(dict.fromkeys(df["engine"]))
    ranked = df[df.algorithm != "auto"]          # 'auto' rows repeat the winner's time
    if ranked["algorithm"].nunique() > 1 or summary_only:
        render_fastest(ranked if len(ranked) else df, engines[-1], file)
    if summary_only:
        return
    for (coll, algo), part in df.groupby(["collective", "algorithm"], sort=False):
        print_table(_title(part, algo, " vs ".join(engines)), _block(part, algo, engines), file)


def _title(part: pd.DataFrame, what: str, engines: str) -> str:
    first = part.iloc[0]
    root = f" · root {first.root}" if first.root >= 0 else ""
    return f"{first.collective} · {what} · {first.topology} ({first.ranks} ranks) · {engines} · {first['dtype']}{root}"


def _block(part: pd.DataFrame, algo: str, engines: list[str]) -> list[Col]:
    by_engine = {e: part[part.engine == e].reset_index(drop=True) for e in engines}
    base = by_engine[engines[0]]
    many = len(engines) > 1
    cols = [Col("size", [format_size(int(s)) for s in base.size_bytes]),
            Col("count\n(elems)", [str(c) for c in base["count"]], drop=6)]
    spread = "time_us_p95" in part.columns and not many       # noisy iterations: PARAM-like percentiles
    for e in engines:                                          # (side by side, the CSV has them)
        r, under = by_engine[e], f"\n{e}" if many else ""
        cols += [Col(f"time\n(us){under}", [_num(x) for x in r.time_us]),
                 Col(f"algbw\n(GB/s){under}", [_num(x) for x in r.algbw_GBps], drop=5),
                 Col(f"busbw\n(GB/s){under}", [_num(x) for x in r.busbw_GBps])]
        if spread:
            cols += [Col(f"{h[:3]}\n(us)", [_num(x) for x in r[c]], drop=d)
                     for c, h, d in zip(SPREAD_COLUMNS, SPREAD_HEADERS, (4, 0, 3, 3))]
    if many:
        last = by_engine[engines[-1]].time_us
        cols.append(Col(f"ratio\n{engines[-1][:2]}/{engines[0][:2]}",
                        [f"{t / b:.3f}" if b else "-" for t, b in zip(last, base.time_us)]))
    if "protocol" in part.columns and (part["protocol"] != "none").any():
        cols.append(Col("protocol", [str(p) for p in base.protocol]))
    if "chosen" in part.columns and algo == "auto":
        cols.append(Col("chosen", [str(c) for c in base.chosen], left=True))
    for e in engines:                     # the counters of the engines that keep them (packet)
        r = by_engine[e]
        for name, (header, cell, drop) in STATS.items():
            if name in r.columns and r[name].notna().any():
                cols.append(Col(header + (f"\n{e}" if many else ""), [cell(x) for x in r[name]], drop=drop))
    return cols


def render_fastest(rows: pd.DataFrame, engine: str, file=None) -> None:
    """Per collective, the fastest algorithm at each size (hcclsim.sweeping.best), its runner-up and margin."""
    from ..sweeping.best import best_per_size

    best = best_per_size(rows, engine)
    for coll, part in best.groupby("collective", sort=False):
        cols = [Col("size", [format_size(int(s)) for s in part.size_bytes]),
                Col("algorithm", list(part.algorithm), left=True)]
        if (part.protocol != "none").any():
            cols.append(Col("protocol", list(part.protocol)))
        cols += [Col("time\n(us)", [_num(x) for x in part.time_us]),
                 Col("busbw\n(GB/s)", [_num(x) for x in part.busbw_GBps]),
                 Col("runner-up", [r or "-" for r in part.runner_up], left=True),
                 Col("margin", [f"{m:+.1%}" if r else "-" for r, m in zip(part.runner_up, part.margin)])]
        print_table(_title(rows[rows.collective == coll], "fastest algorithm per size", engine), cols, file)


def render_tune(ranges: pd.DataFrame, file=None) -> None:
    """The tuner table (hcclsim.analysis.tune.size_ranges): one block per collective, one line per size range."""
    for coll, part in ranges.groupby("collective", sort=False):
        first = part.iloc[0]
        title = f"{coll} · best algorithm per size range · {first.topology} ({first.ranks} ranks) · {first.engine}"
        has_runner = part.runner_up != ""
        print_table(title, [
            Col("from", [format_size(int(s)) for s in part.min_size_bytes]),
            Col("to", [format_size(int(s)) for s in part.max_size_bytes]),
            Col("algorithm", list(part.algorithm), left=True),
            Col("protocol", list(part.protocol)),
            Col("runner-up", [r if h else "-" for r, h in zip(part.runner_up, has_runner)], left=True),
            Col("margin", [f"{m:+.1%}" if h else "-" for m, h in zip(part.margin, has_runner)]),
            Col("sizes", [str(n) for n in part.points])], file)


def render_list(title: str, columns: list[str], rows: list[list[str]], file=None) -> None:
    con = _console(file)
    t = Table(title=title, title_justify="left", box=None, header_style="bold")
    for c in columns:
        t.add_column(c, overflow="fold")
    for r in rows:
        t.add_row(*r)
    con.print(t)
