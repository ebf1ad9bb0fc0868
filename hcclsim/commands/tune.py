"""`hccl-bench tune`: the best algorithm per message-size range, like the table NCCL's tuner builds."""

from __future__ import annotations

import sys

import click

from .. import collectives as C
from ..config import DEFAULT_PRESET, load_topology
from ..errors import ConfigError
from ..provenance import metadata
from ..report import FORMATS, output_format, render_tune, to_csv, to_json, write
from ..sweep import parse_engines, size_grid, sweep
from ..tune import json_safe, size_ranges
from ..units import DTYPE_SIZE
from .sweep import SizeType


@click.command("tune")
@click.option("-t", "--topology", default=DEFAULT_PRESET, show_default=True, metavar="PRESET|FILE.toml",
              help="A built-in preset (see `hccl-bench topologies`) or a TOML file.")
@click.option("-c", "--collective", default=C.ALL_REDUCE, show_default=True, metavar="NAME[,NAME...]|all",
              help=f"Collective(s): {', '.join(C.COLLECTIVES)}.")
@click.option("--set", "overrides", multiple=True, metavar="KEY=VALUE", help="Override a topology key (repeatable).")
@click.option("-b", "--b", "--minbytes", "minbytes", type=SizeType(), default="8", show_default=True,
              help="Smallest size (8, 64K, 1M, 1G; K = 1024).")
@click.option("-e", "--e", "--maxbytes", "maxbytes", type=SizeType(), default="1G", show_default=True,
              help="Largest size.")
@click.option("-f", "--f", "--stepfactor", "factor", type=int, default=2, show_default=True,
              help="Multiply the size by this factor from -b to -e.")
@click.option("-d", "--dtype", default="float32", show_default=True, help=f"Element type: {', '.join(DTYPE_SIZE)}.")
@click.option("--engine", default="analytic", show_default=True, metavar="analytic|packet",
              help="The engine whose times decide.")
@click.option("--format", "fmt", type=click.Choice(FORMATS), default="table", show_default=True,
              help="What to print on stdout.")
@click.option("-o", "--output", metavar="FILE", help="Also write the ranges to FILE (.csv, .json or .parquet).")
def tune_cmd(topology, collective, overrides, minbytes, maxbytes, factor, dtype, engine, fmt, output):
    """Find the fastest algorithm for each message-size range (every applicable algorithm is swept).

    \b
    Examples:
      hccl-bench tune
      hccl-bench tune -t two-tier-128 -c all --format csv > tuner.csv
    """
    if output:
        output_format(output)
    if len(parse_engines(engine)) != 1:
        raise ConfigError(f"--engine: tune compares algorithms on one engine, got {engine!r}")
    topo = load_topology(topology, list(overrides))
    sizes = size_grid(minbytes, maxbytes, factor)
    colls = list(C.COLLECTIVES) if collective.strip() == "all" else [c for c in collective.split(",") if c.strip()]
    result = sweep(topo, colls, "all", sizes, dtype=dtype, engine=engine)
    for coll, algo, why in result.skipped:
        click.echo(f"hccl-bench: skipped {algo} for {coll} on {topo.name}: {why}", err=True)
    ranges = size_ranges(result.rows, engine)
    meta = metadata(topo, collectives=colls, algorithm="all", sizes=sizes, dtype=dtype, engine=engine,
                    given={"topology": topology, "collective": collective, "overrides": list(overrides),
                           "minbytes": minbytes, "maxbytes": maxbytes, "factor": factor})
    if output:
        write(json_safe(ranges) if output.lower().endswith(".json") else ranges, output, meta)
    if fmt == "csv":
        sys.stdout.write(to_csv(ranges))
    elif fmt == "json":
        sys.stdout.write(to_json(json_safe(ranges), meta))
    else:
        render_tune(ranges)
