"""`hccl-bench plot FILE... -o OUT.png|OUT.svg`: busbw/time/algbw against size (logic in hcclsim/results/plot.py)."""

from __future__ import annotations

import click

BY = ("algorithm", "file")        # hcclsim.results.plot.BY (tests/test_startup.py checks they agree)


@click.command("plot")
@click.argument("files", nargs=-1, required=True, metavar="FILE...")
@click.option("-o", "--output", required=True, metavar="OUT.png|OUT.svg",
              help="The picture to write; PNG or SVG from the suffix.")
@click.option("--metric", default="busbw", show_default=True, metavar="busbw|time|algbw[,...]",
              help="What to plot against size; several, comma-separated, give one row of panels each.")
@click.option("--by", type=click.Choice(BY), default="algorithm", show_default=True,
              help="One line per algorithm, or per file (to compare runs).")
@click.option("-c", "--collective", metavar="NAME[,NAME...]",
              help="Only these collectives (default: every collective in the files, one panel each).")
def plot_cmd(files, output, metric, by, collective):
    """Plot results files (from `sweep -o`: .csv, .json or .parquet) against message size.

    A FILE may also be an nccl-tests log (or `hccl-bench import` output): its out-of-place rows are drawn.

    Sizes on a log2 axis, one panel per collective, one line per algorithm (or per file with
    --by file), the topology in the title. Needs the `plot` extra: pip install 'hccl-bench[plot]'.

    \b
    Examples:
      hccl-bench sweep -c all_reduce -a all -b 1K -e 1G -f 2 -o ar.csv
      hccl-bench plot ar.csv -o ar.png
      hccl-bench plot ar.csv -o ar.svg --metric busbw,time
      hccl-bench plot base.csv cur.csv --by file -c all_reduce -o runs.png
    """
    from ..results import plot as P

    collectives = [c for c in (collective or "").split(",") if c.strip()]
    written = P.plot_files(list(files), output, P.parse_metrics(metric), by, collectives or None)
    click.echo(f"hccl-bench: wrote {written}", err=True)
