"""`hccl-bench replay TRACE... -t TOPOLOGY [--placement P]`: the collectives of profiler / execution traces,
timed alone or as jobs sharing the fabric (docs/replay.md)."""

from __future__ import annotations

import json
import math
import sys

import click

from ..core.names import FORMATS


@click.command("replay")
@click.argument("traces", nargs=-1, required=True, metavar="TRACE...")
@click.option("-t", "--topology", required=True, metavar="PRESET|FILE.toml",
              help="The fabric to time the collectives on: a preset (see `hccl-bench topologies`) or a TOML file.")
@click.option("--set", "overrides", multiple=True, metavar="KEY=VALUE",
              help="Override a topology key, e.g. --set bandwidth=100GB/s (repeatable).")
@click.option("-a", "--algorithm", default="all,auto", show_default=True, metavar="ALGO[,ALGO...]|auto",
              help="The algorithms to time each collective with ('all': every one that applies; auto: the "
                   "NCCL-like library's choice).")
@click.option("--scale-ranks", type=int, default=None, metavar="N",
              help="Grow or shrink the data-parallel groups (the trace's largest) to N ranks; sizes kept as data "
                   "parallelism implies (docs/replay.md, 'Rescaling').")
@click.option("--placement", default=None, metavar="packed|spread|random[:SEED]",
              help="Place the traces on the fabric together, each a job of its largest group, and time the k-th "
                   "collective of each at once (docs/replay.md, 'Several traces on one fabric'): each job's time "
                   "alone and together, its slowdown and the busiest links. Without it each trace runs alone.")
@click.option("--engine", default="analytic", show_default=True, type=click.Choice(["analytic", "packet"]),
              help="The engine that times the collectives.")
@click.option("--format", "fmt", type=click.Choice(FORMATS), default="table", show_default=True,
              help="stdout: tables, or the per-collective rows as CSV, or all three tables as one JSON object.")
@click.option("-o", "--output", default=None, metavar="FILE",
              help="Also write the per-collective rows (.csv, .json or .parquet, by the suffix).")
def replay_cmd(traces, topology, overrides, algorithm, scale_ranks, placement, engine, fmt, output):
    """Time the collectives of real traces: PyTorch profiler (Kineto), Chakra (JSON, or protobuf .et with the
    'chakra' extra) and PARAM comms traces.

    Per collective: the measured kernel time (Kineto traces), the simulated time per algorithm and with
    auto, and their ratio; per process group and per trace: totals, the part of the measured time not
    hidden behind compute on another stream (exposed), and what the best algorithm per collective saves
    against auto. Records hccl-bench does not model (wait, barrier, coalesced groups, old traces' kernels
    without sizes) are listed and counted. A file that does not read whole is refused. The Kineto files of
    the ranks of one job (distributedInfo: one world size, distinct ranks) replay as that job: each
    collective once, measured by its fastest rank's kernel. With --placement the traces share the fabric as
    jobs: each job's time alone and together, per round and in total.

    \b
    Examples:
      hccl-bench replay rank0.pt.trace.json.gz -t dgx-a100
      hccl-bench replay et_rank0.json -t dgx-h100 --scale-ranks 8 --format csv > replay.csv
      hccl-bench replay a.0.et b.0.et -t two-tier-128 --placement spread
      hccl-bench replay worker0.json.gz worker1.json.gz ... -t dgx-a100
    """
    from ..results.replay.formats import read
    from ..results.replay.ranks import one_job, separate_jobs
    from ..results.replay.timing import time_traces
    from ..results.report import output_format, to_csv, to_json, write

    if output is not None:
        output_format(output)
    loaded = [read(path) for path in traces]
    if placement is not None:
        separate_jobs(loaded)
        from ..results.replay.jobs import time_jobs
        per, jobs = time_jobs(loaded, topology, overrides, algorithm, scale_ranks, engine, placement)
        tables = (("rounds", per), ("jobs", jobs))
    else:
        job = one_job(loaded)
        loaded = loaded if job is None else [job]
        per, groups, totals = time_traces(loaded, topology, overrides, algorithm, scale_ranks, engine)
        tables = (("collectives", per), ("groups", groups), ("traces", totals))
    if output is not None:
        write(per, output)
    if fmt == "csv":
        sys.stdout.write(to_csv(per))
    elif fmt == "json":
        parts = {name: json.loads(to_json(df)) for name, df in tables}
        sys.stdout.write(json.dumps(parts, indent=1) + "\n")
    elif placement is not None:
        _job_tables(per, jobs)
    else:
        _tables(per, groups, totals)
    return 0


def _us(x) -> str:
    return "-" if x is None or not math.isfinite(x) else f"{x:.1f}"


def _tables(per, groups, totals) -> None:
    import pandas as pd

    from ..core.units import format_size
    from ..results.report import Col, print_table

    for path, part in per.groupby("trace", sort=False):
        size = ["-" if pd.isna(s) else format_size(int(s)) for s in part.size_bytes]
        print_table(f"{path}: collectives", [
            Col("#", [str(i) for i in part["index"]]),
            Col("group", list(part.group), left=True),
            Col("collective", [c or n for c, n in zip(part.collective, part.name)], left=True),
            Col("ranks", ["-" if pd.isna(r) else str(int(r)) for r in part.ranks]),
            Col("size", size),
            Col("measured\n(us)", [_us(x) for x in part.measured_us]),
            *_job_cols(part),
            Col("auto\n(us)", [_us(x) for x in part.get("auto_us", part.best_us * math.nan)]),
            Col("auto\npicks", [a if isinstance(a, str) else "-" for a in part.get("auto_algorithm", part.note)],
                drop=2, left=True),
            Col("best\n(us)", [_us(x) for x in part.best_us]),
            Col("best", [a if isinstance(a, str) else "-" for a in part.best_algorithm], left=True),
            Col("measured\n/ auto", [_us(x) for x in part.get("measured_over_auto", part.best_us * math.nan)]),
            Col("note", list(part.note), drop=1, left=True)])
    print_table("process groups", [
        Col("trace", list(groups.trace), left=True), Col("group", list(groups.group), left=True),
        Col("collectives", [str(n) for n in groups.collectives]), Col("timed", [str(n) for n in groups.timed]),
        Col("measured (us)", [_us(x) for x in groups.measured_us]), Col("auto (us)", [_us(x) for x in groups.auto_us]),
        Col("best (us)", [_us(x) for x in groups.best_us])])
    print_table("traces", [
        Col("trace", list(totals.trace), left=True), Col("format", list(totals.format), left=True),
        Col("collectives", [str(n) for n in totals.collectives]), Col("timed", [str(n) for n in totals.timed]),
        Col("measured (us)", [_us(x) for x in totals.measured_us]), Col("exposed (us)", [_us(x) for x in totals.exposed_us]),
        Col("auto (us)", [_us(x) for x in totals.auto_us]), Col("best (us)", [_us(x) for x in totals.best_us]),
        Col("best saves (us)", [_us(x) for x in totals.saves_us]),
        Col("not timed", [s or "-" for s in totals.not_timed], drop=1, left=True)])


def _job_cols(part) -> list:
    """The ranks of one job: how many ranks the measured time is the minimum of, and the slowest over it."""
    import pandas as pd

    from ..results.report import Col

    if "measured_ranks" not in part:
        return []
    return [Col("over\nranks", ["-" if pd.isna(r) else str(int(r)) for r in part.measured_ranks]),
            Col("slowest\n/ min", [_us(b / a) if a and b else "-" for a, b in zip(part.measured_us,
                                                                                 part.measured_max_us)], drop=3)]


def _job_tables(per, jobs) -> None:
    from ..core.units import format_size
    from ..results.report import Col, print_table

    print_table("rounds: the k-th collective of each trace, together", [
        Col("round", [str(k) for k in per["round"]]), Col("job", [str(j) for j in per.job]),
        Col("#", [str(i) for i in per["index"]]), Col("collective", list(per.collective), left=True),
        Col("ranks", [str(n) for n in per.ranks]), Col("size", [format_size(int(s)) for s in per.size_bytes]),
        Col("algorithm", list(per.algorithm), left=True), Col("alone (us)", [_us(x) for x in per.alone_us]),
        Col("together (us)", [_us(x) for x in per.together_us]),
        Col("slowdown", [f"{x:.3f}" for x in per.slowdown]),
        Col("busiest links", list(per.busiest_links), drop=1, left=True)])
    print_table("jobs", [
        Col("job", [str(j) for j in jobs.job]), Col("trace", list(jobs.trace), left=True),
        Col("ranks", [str(n) for n in jobs.ranks]), Col("placed on", list(jobs.placed), left=True),
        Col("collectives", [str(n) for n in jobs.collectives]), Col("alone (us)", [_us(x) for x in jobs.alone_us]),
        Col("together (us)", [_us(x) for x in jobs.together_us]),
        Col("slowdown", [f"{x:.3f}" for x in jobs.slowdown])])
