"""`hccl-bench compare BASELINE CURRENT`: the CI performance gate (logic in hcclsim/analysis/gate.py, docs/ci.md)."""

from __future__ import annotations

import shutil
import sys
from typing import TYPE_CHECKING

import click

from ..core.errors import ConfigError

if TYPE_CHECKING:
    from ..analysis import gate

FORMATS = ("table", "markdown")


@click.command("compare")
@click.argument("baseline", metavar="BASELINE")
@click.argument("current", metavar="CURRENT")
@click.option("--tolerance", default="5%", show_default=True, metavar="PERCENT",
              help="A row regresses when time_us rises or busbw_GBps falls by more than this.")
@click.option("--fail-on", "fail_on", multiple=True, metavar="METRIC:THRESHOLD",
              help="A per-metric limit overriding --tolerance: time:+10%, busbw:-3% (repeatable; metrics: "
                   "time, busbw: hcclsim.analysis.gate.METRICS).")
@click.option("--strict", is_flag=True, help="Also fail when a row is in only one of the two files.")
@click.option("--format", "fmt", type=click.Choice(FORMATS), default="table", show_default=True,
              help="What to print on stdout: a table, or markdown for a pull-request comment.")
@click.option("--junit", "junit_file", metavar="FILE.xml",
              help="Also write JUnit XML: one testcase per compared row, a <failure> for each regression.")
def compare_cmd(baseline, current, tolerance, fail_on, strict, fmt, junit_file):
    """Compare two results files (from `sweep -o`: .csv, .json or .parquet) and gate on regressions.

    Rows are matched on collective, algorithm, topology, ranks, engine, size_bytes and dtype. Either
    file may be a measurement: an nccl-tests log (any other suffix, or its -J JSON) or `hccl-bench
    import` output; its out-of-place rows are then matched with the simulation's one algorithm,
    topology and engine on collective, ranks, size_bytes and dtype.
    Exit status: 0 nothing regressed beyond the limits, 1 something did, 2 bad input
    (missing file, unknown format, no common rows, missing columns, a value that is not what its
    column holds: a negative or infinite time, ranks 8.7, an empty key; the file, line and column named).

    \b
    Examples:
      hccl-bench compare results/baselines/switch8-allreduce.csv out.csv
      hccl-bench compare base.json cur.json --fail-on busbw:-3% --fail-on time:+10%
      hccl-bench compare base.csv cur.csv --format markdown --junit gate.xml
    """
    from ..analysis import gate
    from ..results.nccltests import align
    from ..results.read import load_results
    from ..results.safefile import replace_text

    limits = gate.limits_from(gate.parse_tolerance(tolerance), fail_on)
    measured = align(load_results(baseline, "BASELINE"), load_results(current, "CURRENT"))
    result = gate.compare(*measured, limits, strict)
    if junit_file:
        try:
            replace_text(junit_file, gate.to_junit(result))
        except OSError as e:
            raise ConfigError(f"--junit: cannot write {junit_file!r} ({e.strerror or e})") from None
    if fmt == "markdown":
        sys.stdout.write(gate.to_markdown(result))
    else:
        render(result)
    return result.exit_status


def render(c: gate.Comparison, file=None) -> None:
    """The regressions and improvements as a rich table, the rows in one file only, then the summary."""
    from rich.console import Console
    from rich.table import Table

    from ..analysis import gate
    width = max(shutil.get_terminal_size((160, 24)).columns, 160)
    con = Console(file=file, width=width, highlight=False, soft_wrap=False)
    changed = gate.changed_rows(c)
    if len(changed):
        t = Table(title="regressions and improvements", title_justify="left", box=None, header_style="bold")
        for col in ("status", *gate.KEYS, "time (us)", "", "busbw (GB/s)", ""):
            t.add_column(col, justify="left" if col in ("status", *gate.KEYS[:3], "engine", "dtype") else "right",
                         no_wrap=True)
        for _, r in changed.iterrows():
            style = "red" if r.status == gate.REGRESSION else "green"
            t.add_row(f"[{style}]{r.status}[/]", *(str(r[k]) for k in gate.KEYS),
                      f"{gate.fmt_num(r.time_us_base)} → {gate.fmt_num(r.time_us_cur)}",
                      _change(r.time_change, r.time_status),
                      f"{gate.fmt_num(r.busbw_GBps_base)} → {gate.fmt_num(r.busbw_GBps_cur)}",
                      _change(r.busbw_change, r.busbw_status))
        con.print(t)
        con.print()
    for line in gate.only_in_lines(c):
        con.print(line, markup=False)
    con.print(f"hccl-bench compare: {c.summary()}", markup=False)


def _change(value: float, status: str) -> str:
    from ..analysis import gate

    text = gate.fmt_change(value)
    return {gate.REGRESSION: f"[red]{text}[/]", gate.IMPROVEMENT: f"[green]{text}[/]"}.get(status, text)
