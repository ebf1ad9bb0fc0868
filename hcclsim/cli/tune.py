"""`hccl-bench tune`: the best algorithm per message-size range, like the table NCCL's tuner builds."""

from __future__ import annotations

import sys

import click

from ..core.errors import ConfigError
from ..core.names import ALL_REDUCE, COLLECTIVES, FORMATS, MATRIX_COLLECTIVES
from ._options import grid_options, matrix_option, max_events_option, max_memory_option, with_protocol


@click.command("tune")
@click.option("-c", "--collective", default=ALL_REDUCE, show_default=True, metavar="NAME[,NAME...]|all",
              help=f"Collective(s): {', '.join(COLLECTIVES + MATRIX_COLLECTIVES)} ('all' means the first "
                   f"{len(COLLECTIVES)}).")
@grid_options(minbytes="8", factor=2)
@matrix_option
@click.option("--engine", default="analytic", show_default=True, metavar="analytic|packet",
              help="The engine whose times decide.")
@click.option("--format", "fmt", type=click.Choice([*FORMATS, "nccl-tuner"]), default="table", show_default=True,
              help="What to print on stdout; nccl-tuner: the config NCCL's example tuner plugin reads (docs/nccl.md).")
@click.option("-o", "--output", metavar="FILE", help="Also write the ranges to FILE (.csv, .json or .parquet); with "
              "--format nccl-tuner, the config (any name, e.g. nccl_tuner.conf).")
@max_memory_option
@max_events_option
def tune_cmd(topology, collective, overrides, minbytes, maxbytes, factor, dtype, protocol, matrix, engine, fmt,
             output):
    """Find the fastest algorithm for each message-size range (every applicable algorithm is swept).

    \b
    Examples:
      hccl-bench tune
      hccl-bench tune -t two-tier-128 -c all --format csv > tuner.csv
      hccl-bench tune -t dgx-h100 -c all --format nccl-tuner -o nccl_tuner.conf
      hccl-bench tune -t two-tier-128 -c all_to_allv --matrix zipf:1.2 -b 64K
    """
    from ..analysis.tune import library_notes, size_ranges
    from ..network.config import load_topology
    from ..results.nccl_tuner import tuner_config
    from ..results.provenance import metadata
    from ..results.report import output_format, render_tune, to_csv, to_json, write, write_text
    from ..sweeping.library import selecting
    from ..sweeping.sweep import AUTO, LIBRARY, parse_engines, size_grid, sweep

    if output and fmt != "nccl-tuner":
        output_format(output)
    if len(parse_engines(engine)) != 1:
        raise ConfigError(f"--engine: tune compares algorithms on one engine, got {engine!r}")
    overrides = with_protocol(overrides, protocol)
    topo = load_topology(topology, overrides)
    sizes = size_grid(minbytes, maxbytes, factor)
    colls = list(COLLECTIVES) if collective.strip() == "all" else [c for c in collective.split(",") if c.strip()]
    # beside the library's algorithms, auto as NCCL's model picks (library_* columns)
    result = sweep(selecting(topo), colls, f"{LIBRARY},{AUTO}", sizes, dtype=dtype, engine=engine, matrix=matrix)
    for coll, algo, why in result.skipped:
        click.echo(f"hccl-bench: skipped {algo} for {coll} on {topo.name}: {why}", err=True)
    ranges = size_ranges(result.rows, engine)
    meta = metadata(topo, collectives=colls, algorithm=LIBRARY, sizes=sizes, dtype=dtype, engine=engine,
                    given={"topology": topology, "collective": collective, "overrides": list(overrides),
                           "minbytes": minbytes, "maxbytes": maxbytes, "factor": factor}, matrix=matrix)
    if output and fmt != "nccl-tuner":
        write(ranges, output, meta)
    if fmt == "nccl-tuner":
        text, notes = tuner_config(ranges, topo.domains)
        for note in notes:
            click.echo(f"hccl-bench: {note}", err=True)
        if output:
            write_text(output, text)
        sys.stdout.write(text)
    elif fmt == "csv":
        sys.stdout.write(to_csv(ranges))
    elif fmt == "json":
        sys.stdout.write(to_json(ranges))
    else:
        render_tune(ranges)
        for line in library_notes(ranges):
            click.echo(line)
