"""`hccl-bench sweep`: time collectives over message sizes, like nccl-tests / PARAM comms.py."""

from __future__ import annotations

import sys

import click

from .. import collectives as C
from ..config import DEFAULT_PRESET, load_topology
from ..errors import ConfigError
from ..provenance import metadata
from ..report import FORMATS, output_format, render_table, to_csv, to_json, write
from ..sweep import parse_engines, size_grid, sweep
from ..trace import write_trace
from ..units import DTYPE_SIZE, parse_size
from ._long import run as long_run


class SizeType(click.ParamType):
    name = "SIZE"

    def convert(self, value, param, ctx):
        try:
            return parse_size(value, where=f"{param.opts[-1]}")
        except ConfigError as e:
            self.fail(str(e).split(": ", 1)[-1], param, ctx)


@click.command("sweep")
@click.option("-c", "--collective", default=C.ALL_REDUCE, show_default=True, metavar="NAME[,NAME...]|all",
              help=f"Collective(s): {', '.join(C.COLLECTIVES)} (NCCL spellings such as allreduce accepted).")
@click.option("-a", "--algorithm", default="all", show_default=True, metavar="NAME[,NAME...]|all",
              help="Algorithm(s), each optionally with options (ring:channels=2). 'all' = every applicable one; "
                   "see `hccl-bench algorithms`.")
@click.option("-t", "--topology", default=DEFAULT_PRESET, show_default=True, metavar="PRESET|FILE.toml",
              help="A built-in preset (see `hccl-bench topologies`) or a TOML file.")
@click.option("--set", "overrides", multiple=True, metavar="KEY=VALUE",
              help="Override a topology key, e.g. --set bandwidth=100GB/s or --set scale_out.domains=64 (repeatable).")
@click.option("-b", "--b", "--minbytes", "minbytes", type=SizeType(), default="16", show_default=True,
              help="Smallest size (8, 64K, 1M, 1G; K = 1024).")
@click.option("-e", "--e", "--maxbytes", "maxbytes", type=SizeType(), default="1G", show_default=True,
              help="Largest size.")
@click.option("-f", "--f", "--stepfactor", "factor", type=int, default=4, show_default=True,
              help="Multiply the size by this factor from -b to -e.")
@click.option("-d", "--dtype", default="float32", show_default=True,
              help=f"Element type: {', '.join(DTYPE_SIZE)}.")
@click.option("-r", "--root", default=0, show_default=True, help="Root rank of broadcast and reduce.")
@click.option("--engine", default="analytic", show_default=True, metavar="analytic|packet|analytic,packet",
              help="Timing engine(s): the alpha-beta model, the packet-level simulation, or both side by side.")
@click.option("--stats", is_flag=True,
              help="Add the packet engine's counters: events, peak queue, busiest link, reduction table.")
@click.option("--trace", "trace_file", metavar="FILE.json",
              help="Write a Chrome/Perfetto trace of one point (the first algorithm at the largest size) "
                   "simulated by the packet engine.")
@click.option("--format", "fmt", type=click.Choice(FORMATS), default="table", show_default=True,
              help="What to print on stdout.")
@click.option("-o", "--output", metavar="FILE", help="Also write the rows to FILE (.csv, .json or .parquet), "
              "as they finish (JSON and Parquet: to FILE.partial.csv until the end).")
@click.option("--resume", is_flag=True,
              help="Keep the rows already in -o FILE (and FILE.partial.csv), compute only the rest and append.")
@click.option("-j", "--jobs", type=int, default=None, metavar="N",
              help="Worker processes for (collective, algorithm) blocks  [default: all cores]")
@click.option("-q", "--quiet", is_flag=True, help="No progress bar on stderr.")
def sweep_cmd(collective, algorithm, topology, overrides, minbytes, maxbytes, factor, dtype, root, engine, stats,
              trace_file, fmt, output, resume, jobs, quiet):
    """Sweep message sizes for collectives and algorithms on one topology.

    \b
    Examples:
      hccl-bench sweep
      hccl-bench sweep -c all_gather -a ring,direct -t two-tier-128 -b 1K -e 1G -f 2
      hccl-bench sweep -t my_fabric.toml --set latency=1us --format csv > out.csv
    """
    if output:
        output_format(output)
    topo = load_topology(topology, list(overrides))
    sizes = size_grid(minbytes, maxbytes, factor)
    colls = list(C.COLLECTIVES) if collective.strip() == "all" else [c for c in collective.split(",") if c.strip()]
    parse_engines(engine)
    if trace_file and not trace_file.endswith(".json"):
        raise ConfigError(f"--trace: expected a file ending in .json, got {trace_file!r}")
    result, writer = long_run(sweep, topo, colls, algorithm, sizes, dtype=dtype, root=root, engine=engine, stats=stats,
                              output=output, resume=resume, jobs=jobs, quiet=quiet)
    for coll, algo, why in result.skipped:
        click.echo(f"hccl-bench: skipped {algo} for {coll} on {topo.name}: {why}", err=True)
    meta = metadata(topo, collectives=colls, algorithm=algorithm, sizes=sizes, dtype=dtype, root=root, engine=engine,
                    stats=stats, given={"topology": topology, "collective": collective, "overrides": list(overrides),
                                        "minbytes": minbytes, "maxbytes": maxbytes, "factor": factor})
    if writer:
        writer.finish(lambda path: write(result.rows, path, meta))
    if trace_file:
        first = result.rows.iloc[0]
        write_trace(trace_file, topo, first.collective, first.algorithm, sizes[-1], dtype, root)
        click.echo(f"hccl-bench: wrote a packet-engine trace of {first.collective} {first.algorithm} at "
                   f"{sizes[-1]} bytes to {trace_file}", err=True)
    if fmt == "csv":
        sys.stdout.write(to_csv(result.rows))
    elif fmt == "json":
        sys.stdout.write(to_json(result.rows, meta))
    else:
        render_table(result.rows)
