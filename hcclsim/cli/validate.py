"""`hccl-bench validate [PRESET...]`: predicted vs published busbw (logic in hcclsim/analysis/validate.py,
docs/validation.md)."""

from __future__ import annotations

import json
import math
import shutil
import sys
from pathlib import Path

import click
from rich.console import Console
from rich.table import Table

from ..analysis import validate as V
from ..core.errors import ConfigError
from ..core.version import __version__
from ..results.report import to_csv
from ..results.safefile import replace_text
from ._options import max_memory_option

FORMATS = ("table", "csv", "json")


@click.command("validate")
@click.argument("presets", nargs=-1, metavar="[PRESET...]")
@click.option("--format", "fmt", type=click.Choice(FORMATS), default="table", show_default=True,
              help="stdout: nothing beyond the tables on stderr (table), or every compared point (csv, json).")
@click.option("-o", "--output", metavar="FILE", help="Also write every compared point to FILE (.csv or .json).")
@click.option("--plot", "plot_file", metavar="FILE.png",
              help="Draw predicted vs measured busbw against size, one panel per case (needs the plot extra).")
@max_memory_option
def validate_cmd(presets, fmt, output, plot_file):
    """Compare presets with published nccl-tests / rccl-tests measurements (validation/*.toml).

    PRESET names a shipped validation file (dgx-h100, h100-cluster, ...) or is a path to one; default:
    every shipped file, skipping (with the reason) those whose preset does not exist. Per case it prints
    predicted vs measured busbw per size, then per size band (< 64 KiB, 64 KiB - 64 MiB, >= 64 MiB) the
    mean |error| and the worst error against the tolerance the file documents.
    Exit status: 0 every band within its tolerance, 1 a band out of it, 2 bad input.

    \b
    Examples:
      hccl-bench validate
      hccl-bench validate dgx-h100 --plot dgx-h100.png
      hccl-bench validate h100-cluster --format csv > points.csv
    """
    if output and Path(output).suffix.lower() not in (".csv", ".json"):
        raise ConfigError(f"-o/--output: expected a file ending in .csv or .json, got {output!r}")
    if plot_file:
        from ..analysis.validate_plot import check

        check(plot_file)
    result = V.validate(presets)
    render(result)
    if output:
        text = to_csv(result.points) if output.lower().endswith(".csv") else to_json(result)
        try:
            replace_text(output, text)
        except OSError as e:
            raise ConfigError(f"-o/--output: cannot write {output!r} ({e.strerror or e})") from None
    if fmt == "csv":
        sys.stdout.write(to_csv(result.points))
    elif fmt == "json":
        sys.stdout.write(to_json(result))
    if plot_file and not result.points.empty:
        from ..analysis.validate_plot import draw

        draw(result.points, plot_file)
        click.echo(f"hccl-bench: wrote {plot_file}", err=True)
    return 1 if result.failed else 0


def to_json(r: V.Result) -> str:
    def records(df):
        return [{k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in row.items()}
                for row in df.to_dict(orient="records")]

    doc = {"hccl_bench_version": __version__, "rows": records(r.points), "summary": records(r.summary),
           "skipped": [dict(zip(("validation", "case", "reason"), s)) for s in r.skipped],
           "excluded": [dict(zip(("validation", "case", "rows", "what"), e)) for e in r.excluded]}
    return json.dumps(doc, indent=2, default=str) + "\n"


def _pct(x: float) -> str:
    return "" if x is None or not math.isfinite(x) else f"{x * 100:+.1f}%"


def _num(x: float, digits: int = 2) -> str:
    return "" if x is None or not math.isfinite(x) else f"{x:.{digits}f}"


def render(r: V.Result, file=None) -> None:
    con = Console(file=file or sys.stderr, width=max(shutil.get_terminal_size((200, 24)).columns, 200),
                  highlight=False, soft_wrap=False)
    if not r.points.empty:
        for (val, case), pts in r.points.groupby(["validation", "case"], sort=False):
            first = pts.iloc[0]
            where = f"{first.preset} {first.overrides}".strip()
            t = Table(title=f"{val}: {case} -- {first.collective} -a {first.algorithm} on {where}",
                      title_justify="left", box=None, header_style="bold")
            for col in ("size", "n", "measured busbw", "predicted", "error", "measured time (us)", "predicted",
                        "error", "chosen"):
                t.add_column(col, justify="left" if col == "chosen" else "right", no_wrap=True)
            for s in V.per_size(pts).itertuples(index=False):
                t.add_row(V.size_label(s.size_bytes), str(s.points), _num(s.measured_busbw_GBps),
                          _num(s.predicted_busbw_GBps), _pct(s.busbw_error), _num(s.measured_time_us),
                          _num(s.predicted_time_us), _pct(s.time_error), str(s.chosen))
            con.print(t)
            con.print()
        render_summary(r, con)
    for val, case, n, what in r.excluded:
        con.print(f"hccl-bench validate: {val}: {case}: excluded {n} rows of {what}", markup=False)
    for val, case, why in r.skipped:
        con.print(f"hccl-bench validate: skipped {val}{': ' + case if case else ''}: {why}", markup=False)
    s = r.summary
    gated = s[s.status != V.INFO] if len(s) else s
    failed = int((gated.status == V.FAIL).sum()) if len(gated) else 0
    con.print(f"hccl-bench validate: {len(r.points)} points, {len(gated)} bands with a tolerance, "
              f"{failed} out of tolerance", markup=False)


def render_summary(r: V.Result, con: Console) -> None:
    t = Table(title="bands (error = predicted / measured - 1; tolerance: every checked point)",
              title_justify="left", box=None, header_style="bold")
    for col in ("preset", "case", "band", "metric", "points", "mean |error|", "worst", "checked",
                "worst checked", "tolerance", "status"):
        t.add_column(col, justify="left" if col in ("preset", "case", "band", "metric", "status") else "right",
                     no_wrap=True)
    for s in r.summary.itertuples(index=False):
        style = {V.FAIL: "red", V.PASS: "green"}.get(s.status, "dim")
        t.add_row(s.preset, s.case, V.BAND_LABELS[s.band], s.metric, str(s.points), _pct(s.mean_abs_error)[1:],
                  _pct(s.worst_error), str(s.checked), _pct(s.worst_checked_error),
                  "" if not math.isfinite(s.tolerance) else f"{s.tolerance * 100:.0f}%", f"[{style}]{s.status}[/]")
    con.print(t)
