"""What `hccl-bench run` does once its options are read: run a study's sections and print a short table
per section (cli/run.py holds the command, which imports this when it runs)."""

from __future__ import annotations

import math
import shutil
from pathlib import Path

import click
import pandas as pd
from rich.markup import escape
from rich.table import Table

from ..core.errors import HcclSimError
from ..core.units import format_size
from ..results.report import Console, render_list
from ..studies import scenario as S
from ..studies import study as R

MAX_ROWS = 16       # rows of a workload section's table printed (the CSV has them all)


def run_study(study, out: Path, quiet: bool) -> list[Path]:
    """Every section of the study, its files written to out (the paths written)."""
    figures = any(s.kind == "workload" or (s.kind == "sweep" and s.spec["plot"]) for s in study.sections)
    can_plot = figures and R.plot_available()
    if figures and not can_plot and not quiet:
        click.echo("hccl-bench: no figures: plotting needs matplotlib: pip install 'hccl-bench[plot]'", err=True)
    con = None if quiet else Console(width=max(shutil.get_terminal_size((120, 24)).columns, 100), highlight=False)
    written = [R.copy_source(study, out)]
    for section in study.sections:
        result = R.run_section(section)
        written += R.write_section(study, result, out, figures=can_plot)
        if con:
            RENDER[section.kind](con, result)
            for coll, algo, why in result.skipped:
                if why.startswith("does not implement"):     # listed for another collective of the section
                    continue
                click.echo(f"hccl-bench: {section.name}: skipped {algo} for {coll}: {why}", err=True)
    return written


def list_studies() -> None:
    rows = []
    for name, path in S.scenario_files().items():
        try:
            head = S.header(str(path))
        except HcclSimError as e:           # one broken file does not hide the others
            head = {"title": f"(cannot read: {e})"}
        rows.append([name, str(head.get("title", "")), str(head.get("reproduces", ""))])
    render_list("scenarios (hccl-bench run NAME)", ["name", "title", "reproduces"], rows)


# ------------------------------------------------------------------------------------------ tables

def _print(con: Console, table: Table) -> None:
    """At the table's natural width (a terminal wraps long lines; a file or pipe keeps every cell whole)."""
    natural = con.measure(table, options=con.options.update(max_width=1 << 16)).maximum
    Console(width=max(con.width, natural), file=con.file, highlight=False, soft_wrap=False).print(table)


def _num(x, digits: int = 2) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)) or x is pd.NA:
        return "-"
    return f"{x:.{digits}f}"


def _table(title: str, columns: list[str], numeric: set[str]) -> Table:
    t = Table(title=escape(title), title_justify="left", box=None, header_style="bold")
    for c in columns:
        t.add_column(c, justify="right" if c in numeric else "left", no_wrap=True)
    return t


def _varied(result: S.Result) -> list[str]:
    spec = result.section.spec
    return [k for k, _ in spec["vary"]] + (["launch"] if spec["launch"] else [])


def _title(result: S.Result) -> str:
    s = result.section
    desc = s.raw.get("description")
    return f"[[{s.kind}]] {s.name}" + (f" · {desc}" if isinstance(desc, str) and desc else "")


def render_sweep(con: Console, result: S.Result) -> None:
    """One line per (varied values, collective, algorithm, engine): time at the smallest and largest
    size, busbw at the largest."""
    df, lead = result.frame, _varied(result)
    many = df.engine.nunique() > 1
    keys = lead + ["collective", "algorithm"] + (["engine"] if many else [])
    lo, hi = int(df.size_bytes.min()), int(df.size_bytes.max())
    p95 = "time_us_p95" in df.columns          # noisy iterations: the spread beside the p50
    cols = keys + ["ranks", f"time (us) {format_size(lo)}", f"time (us) {format_size(hi)}",
                   *([f"p95 (us) {format_size(lo)}", f"p95 (us) {format_size(hi)}"] if p95 else []),
                   f"busbw (GB/s) {format_size(hi)}"]
    t = _table(_title(result), cols, set(cols[len(keys):]))
    for key, part in df.groupby(keys, sort=False):
        part = part.sort_values("size_bytes")
        first, last = part.iloc[0], part.iloc[-1]
        t.add_row(*map(str, key if isinstance(key, tuple) else (key,)), str(first.ranks),
                  _num(first.time_us), _num(last.time_us),
                  *([_num(first.time_us_p95), _num(last.time_us_p95)] if p95 else []), _num(last.busbw_GBps))
    _print(con, t)
    con.print()


def render_replay(con: Console, result: S.Result) -> None:
    """Totals per algorithm, fastest first among those that ran every op, then what auto chose per op."""
    df, lead = result.frame, _varied(result)
    nops = len(result.section.spec["ops"])
    for key, part in df.groupby(lead + ["engine"], sort=False):
        key = key if isinstance(key, tuple) else (key,)
        where = ", ".join(f"{k}={v}" for k, v in zip(lead + ["engine"], key))
        totals = part[part.kind == "total"].assign(complete=lambda x: x.ops_covered == nops)
        totals = totals.sort_values(["complete", "total_us"], ascending=[False, True], kind="stable")
        auto = float(totals[totals.algorithm == S.AUTO].total_us.iloc[0])
        t = _table(f"{_title(result)} · {part.topology.iloc[0]} ({part.ranks.iloc[0]} ranks) · {where} · "
                   f"one iteration", ["algorithm", "total (us)", "ops", "vs auto", "chosen"],
                   {"total (us)", "ops", "vs auto"})
        for r in totals.itertuples(index=False):
            ratio = f"{r.total_us / auto:.2f}x" if r.complete and auto > 0 else "-"
            t.add_row(r.algorithm, _num(r.total_us), f"{r.ops_covered}/{nops}", ratio,
                      r.chosen if r.algorithm in (S.AUTO, S.BEST_FIXED) else "")
        _print(con, t)
        ops = part[(part.kind == "op") & (part.algorithm == S.AUTO)]
        t = _table("auto, per op", ["op", "label", "collective", "size", "calls", "chosen", "time (us)",
                                    "x calls (us)"], {"op", "size", "calls", "time (us)", "x calls (us)"})
        for r in ops.itertuples(index=False):
            t.add_row(str(r.op), r.label, r.collective, format_size(int(r.size_bytes)), str(r.calls), r.chosen,
                      _num(r.time_us), _num(r.total_us))
        _print(con, t)
        con.print()


def _workload_columns(df) -> list[str]:
    """What the terminal shows of a workload table: the labels, the parameters that vary between rows,
    then the results (up to exposed_us); the CSV has every column."""
    cols = [str(c) for c in df.columns]
    labels = [c for c in ("variant", "case") if c in cols]
    results = cols[len(labels): cols.index("exposed_us") + 1] if "exposed_us" in cols else cols[len(labels):]
    varied = [c for c in cols if c not in labels and c not in results and df[c].nunique(dropna=False) > 1]
    return labels + varied + results


def render_workload(con: Console, result: S.Result) -> None:
    df = result.frame
    cols = _workload_columns(df)
    df = df[cols]
    t = _table(_title(result), cols, {str(c) for c in df.select_dtypes("number").columns})
    for row in df.head(MAX_ROWS).itertuples(index=False):
        t.add_row(*[f"{v:.4g}" if isinstance(v, float) else str(v) for v in row])
    _print(con, t)
    more = f"{len(df) - MAX_ROWS} more rows and " if len(df) > MAX_ROWS else ""
    con.print(f"({more}every parameter column in the CSV)")
    con.print()


def render_jobs(con: Console, result: S.Result) -> None:
    df = result.frame.drop(columns="busiest_links")
    t = _table(_title(result), list(df.columns), {str(c) for c in df.select_dtypes("number").columns})
    for row in df.head(MAX_ROWS).itertuples(index=False):
        t.add_row(*[f"{v:.4g}" if isinstance(v, float) else str(v) for v in row])
    _print(con, t)
    con.print("(the busiest links of each run in the CSV)")
    con.print()


RENDER = {"sweep": render_sweep, "replay": render_replay, "workload": render_workload, "jobs": render_jobs}
