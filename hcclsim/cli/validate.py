"""`hccl-bench validate [PRESET...]`: predicted vs published busbw (logic in hcclsim/analysis/validate.py,
docs/validation.md)."""

from __future__ import annotations

from pathlib import Path

import click

from ..core.errors import ConfigError
from ..core.names import FORMATS
from ._options import max_memory_option


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
    mean |error| and the worst error against the tolerance the file documents; beside them, where the
    preset tunes like NCCL, what NCCL's own cost model gives (a baseline, not gated).
    Exit status: 0 every band within its tolerance, 1 a band out of it, 2 bad input.

    \b
    Examples:
      hccl-bench validate
      hccl-bench validate dgx-h100 --plot dgx-h100.png
      hccl-bench validate h100-cluster --format csv > points.csv
    """
    import sys

    from ..analysis import validate as V
    from ..results.report import to_csv
    from ..results.safefile import replace_text
    from ._validation import render, to_json

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
