"""`hccl-bench compare BASELINE CURRENT`: the CI performance gate (logic in hcclsim/analysis/gate.py, docs/ci.md)."""

from __future__ import annotations

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
    result = gate.compare(*measured, limits, strict, metadata=gate.metadata_of(baseline, current))
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
    """The regressions and improvements as a table that fits the terminal (sizes as nccl-tests flags; the
    dtype, engine and ranks go first when it is narrow), the rows in one file only, then the summary."""
    from ..analysis import gate
    from ..core.units import format_size
    from ..results.report import Col, Console, print_table

    changed = gate.changed_rows(c)
    if len(changed):
        rows = list(changed.itertuples(index=False))
        cells = {k: [str(getattr(r, k)) for r in rows] for k in gate.KEYS}
        cells["size_bytes"] = [format_size(int(r.size_bytes)) for r in rows]
        drop = {"dtype": 3, "engine": 2, "ranks": 1}
        print_table("regressions and improvements", [
            Col("status", [r.status for r in rows], left=True),
            *[Col("size" if k == "size_bytes" else k, cells[k], drop.get(k, 0), left=k not in ("ranks", "size_bytes"))
              for k in gate.KEYS],
            Col("time\n(us)", [f"{gate.fmt_num(r.time_us_base)} → {gate.fmt_num(r.time_us_cur)}" for r in rows]),
            Col("", [gate.fmt_change(r.time_change) for r in rows]),
            Col("busbw\n(GB/s)", [f"{gate.fmt_num(r.busbw_GBps_base)} → {gate.fmt_num(r.busbw_GBps_cur)}"
                                  for r in rows]),
            Col("", [gate.fmt_change(r.busbw_change) for r in rows])], file)
    con = Console(file=file, highlight=False, soft_wrap=True)
    for line in gate.only_in_lines(c):
        con.print(line, markup=False)
    con.print(f"hccl-bench compare: {c.summary()}", markup=False)
