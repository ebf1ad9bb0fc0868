"""`hccl-bench sweep`: time collectives over message sizes, like nccl-tests / PARAM comms.py."""

from __future__ import annotations

import sys
from functools import partial

import click

from ..core.errors import ConfigError
from ..core.names import ALL_REDUCE, ALL_TO_ALLV, COLLECTIVES, FORMATS, MATRIX_COLLECTIVES
from ._options import grid_options, matrix_option, max_events_option, max_memory_option, with_protocol


@click.command("sweep")
@click.option("-c", "--collective", default=ALL_REDUCE, show_default=True, metavar="NAME[,NAME...]|all",
              help=f"Collective(s): {', '.join(COLLECTIVES + MATRIX_COLLECTIVES)} (NCCL spellings such as allreduce "
                   f"accepted; 'all' means the first {len(COLLECTIVES)}).")
@click.option("-a", "--algorithm", default="all", show_default=True, metavar="NAME[,NAME...]|all",
              help="Algorithm(s), each optionally with options (ring:channels=2). 'all' = every applicable one; "
                   "see `hccl-bench algorithms`.")
@grid_options(minbytes="16", factor=4)
@click.option("-r", "--root", default=0, show_default=True, help="Root rank of broadcast and reduce.")
@matrix_option
@click.option("--engine", default="analytic", show_default=True, metavar="analytic|packet|analytic,packet",
              help="Timing engine(s): the alpha-beta model, the packet-level simulation, or both side by side.")
@click.option("--stats", is_flag=True,
              help="Add the packet engine's counters: events, peak queue, busiest link, reduction table.")
@click.option("--trace", "trace_file", metavar="FILE.json",
              help="Write a Chrome/Perfetto trace of one point (the first algorithm at the largest size) "
                   "simulated by the packet engine.")
@click.option("--launch", default="host", show_default=True, metavar="host|device|loop[:G][:n=N]",
              help="host: each collective pays the endpoint's launch_overhead; device: launched ahead and released "
                   "by a compute kernel (device-triggered), no launch on the critical path; loop: back-to-back "
                   "iterations as nccl-tests times them, each launch behind the previous iteration and the "
                   "window of N (default 20, its -n) from the first launch to the last collective's end; loop:G "
                   "with one host thread launching for G GPUs (nccl-tests -g G).")
@click.option("--iters", type=int, default=1, show_default=True, metavar="N",
              help="Iterations per point; with more than one (or with --skew/--jitter) rows get time_us_p50, _p75, "
                   "_p95, _min, _max and time_us is the p50.")
@click.option("--skew", default="0", show_default=True, metavar="TIME",
              help="Ranks arrive uniformly at random within this time of the first (e.g. 2us), per iteration.")
@click.option("--jitter", default="0", show_default=True, metavar="TIME",
              help="Mean of an exponential delay before every transfer (e.g. 500ns), per iteration.")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the skew and jitter draws.")
@click.option("--format", "fmt", type=click.Choice([*FORMATS, "nccl-tests"]), default="table", show_default=True,
              help="What to print on stdout; nccl-tests: nccl-tests' own text layout, one block per algorithm "
                   "(docs/nccl.md).")
@click.option("-o", "--output", metavar="FILE", help="Also write the rows to FILE (.csv, .json or .parquet), "
              "as they finish (JSON and Parquet: to FILE.partial.csv until the end).")
@click.option("--resume", is_flag=True,
              help="Keep the rows already in -o FILE (and FILE.partial.csv), compute only the rest and append; "
                   "refused when FILE was made with other inputs (the grid may differ: the union is written).")
@click.option("-j", "--jobs", type=int, default=None, metavar="N",
              help="Worker processes for (collective, algorithm) blocks  [default: all cores]")
@click.option("--executor", type=click.Choice(["local", "dask"]), default="local", show_default=True,
              help="Where blocks run: this machine's cores (--jobs), or an existing Dask cluster (--scheduler; "
                   "the dask extra). Same rows either way.")
@click.option("--scheduler", metavar="ADDRESS",
              help="The Dask scheduler of --executor dask, e.g. tcp://10.0.0.1:8786 (as `dask scheduler` prints).")
@click.option("--summary-only", is_flag=True,
              help="Table: print only the fastest algorithm per size, not each algorithm's block.")
@click.option("--zero-bytes", is_flag=True,
              help="Table: keep the sizes that round down to 0 bytes (AllGather, ReduceScatter and AllToAll split "
                   "the size among ranks); the rows written always keep them.")
@click.option("--vary", "varies", multiple=True, metavar="KEY=a,b,...",
              help="Sweep a topology or endpoint key over these values (as --set KEY=[a,b,...]): one sweep per "
                   "value (per combination with several), the value in a column named KEY (repeatable).")
@click.option("-q", "--quiet", is_flag=True, help="No progress bar and no notes on stderr (errors still print).")
@max_memory_option
@max_events_option
def sweep_cmd(collective, algorithm, topology, overrides, minbytes, maxbytes, factor, dtype, protocol, root, matrix,
              engine, stats, trace_file, launch, iters, skew, jitter, seed, fmt, output, resume, jobs, executor,
              scheduler, summary_only, zero_bytes, varies, quiet):
    """Sweep message sizes for collectives and algorithms on one topology.

    \b
    Examples:
      hccl-bench sweep
      hccl-bench sweep -c all_gather -a ring,direct -t two-tier-128 -b 1K -e 1G -f 2
      hccl-bench sweep -t my_fabric.toml --set latency=1us --format csv > out.csv
      hccl-bench sweep -t dgx-h100 -a ring,in_switch -b 8 -e 1G -f 2 --format nccl-tests > sim.log
      hccl-bench sweep -t mtia300-rack --launch device --iters 100 --skew 2us --jitter 500ns --seed 1
      hccl-bench sweep -c all_to_allv --matrix zipf:1.2:seed=3 -t two-tier-128 -a direct,hierarchical
    """
    from ..core.units import parse_time
    from ..engine.execution import Noise
    from ..network.config import load_topology
    from ..results.provenance import metadata
    from ..results.report import output_format, render_table, to_csv, to_json, without_zero_bytes, write
    from ..results.safefile import OutputLock
    from ..sweeping.sweep import parse_engines, size_grid, sweep
    from ..sweeping.vary import combinations, split
    from ._long import run as long_run

    if output is not None:
        output_format(output)
        click.get_current_context().with_resource(OutputLock(output))     # held until the command ends
    fixed, axes = split(overrides, varies)
    if axes and resume:
        raise ConfigError("--resume: not with a varied key (--set KEY=[...] or --vary); write each value's sweep "
                          "to its own file to resume it")
    overrides = with_protocol(fixed, protocol)
    combos = combinations(axes) or [[]]
    topos = [load_topology(topology, [*overrides, *(f"{k}={v}" for k, v in combo)]) for combo in combos]
    topo = topos[0]
    sizes = size_grid(minbytes, maxbytes, factor)
    colls = list(COLLECTIVES) if collective.strip() == "all" else [c for c in collective.split(",") if c.strip()]
    parse_engines(engine)
    noise = Noise(iters, parse_time(skew, "--skew"), parse_time(jitter, "--jitter"), seed)
    if trace_file and not trace_file.endswith(".json"):
        raise ConfigError(f"--trace: expected a file ending in .json, got {trace_file!r}")
    given = {"topology": topology, "collective": collective, "overrides": list(overrides), "minbytes": minbytes,
             "maxbytes": maxbytes, "factor": factor, **({"varied": dict(axes)} if axes else {}),
             **({"matrix": matrix} if matrix is not None else {})}
    meta = metadata(topo, collectives=colls, algorithm=algorithm, sizes=sizes, dtype=dtype, root=root, engine=engine,
                    stats=stats, launch=launch, noise=noise, given=given, matrix=matrix)
    results = []
    for combo, one in zip(combos, topos):           # a what-if: one sweep per value, written together at the end
        result, writer = long_run(partial(sweep, matrix=matrix), one, colls, algorithm, sizes, dtype=dtype, root=root,
                                  engine=engine, stats=stats, output=None if axes else output, resume=resume,
                                  jobs=jobs, quiet=quiet, executor=executor, scheduler=scheduler, launch=launch,
                                  noise=noise, meta=meta)
        results.append(result.with_columns(dict(combo)) if axes else result)
    result = results[0].joined(results[1:]) if axes else result
    note = (lambda text: None) if quiet else (lambda text: click.echo(f"hccl-bench: {text}", err=True))
    for coll, algo, why in result.skipped:
        note(f"skipped {algo} for {coll} on {topo.name}: {why}")
    if writer:
        writer.finish(result.rows)
    elif axes and output:
        write(result.rows, output, meta)
    if trace_file:
        from ..results.trace import write_trace
        from ..schedule.matrix import parse

        first = result.rows.iloc[0]
        traffic = parse(matrix, topo.nranks) if matrix is not None and first.collective == ALL_TO_ALLV else None
        write_trace(trace_file, topo, first.collective, first.algorithm, sizes[-1], dtype, root, traffic)
        note(f"wrote a packet-engine trace of {first.collective} {first.algorithm} at {sizes[-1]} bytes to "
             f"{trace_file}")
    if fmt == "csv":
        sys.stdout.write(to_csv(result.rows))
    elif fmt == "json":
        sys.stdout.write(to_json(result.rows))
    elif fmt == "nccl-tests":
        from ..results.nccltests_format import to_nccl_tests

        sys.stdout.write(to_nccl_tests(result.rows, topo.local, minbytes, maxbytes, factor, iters))
    else:
        rows, notes = (result.rows, []) if zero_bytes else without_zero_bytes(result.rows)
        for text in notes:
            note(text)
        for _, part in rows.groupby("topology", sort=False):      # a what-if: each value's tables in turn
            render_table(part, summary_only=summary_only)
