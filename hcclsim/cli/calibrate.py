"""`hccl-bench calibrate`: fit a topology to nccl-tests measurements (docs/calibrate.md)."""

from __future__ import annotations

import tomllib
from pathlib import Path

import click

from ..core.errors import ConfigError
from ..core.names import TIERS
from ._options import max_memory_option


@click.command("calibrate")
@click.argument("measured", metavar="MEASURED")
@click.option("-t", "--topology", required=True, metavar="PRESET|FILE.toml",
              help="The topology to calibrate: a preset (see `hccl-bench topologies`) or a TOML file.")
@click.option("--set", "sets", multiple=True, metavar="KEY=VALUE",
              help="Override a key of the topology before fitting, e.g. --set scale_out.domains=2 for a 2-node "
                   "log (written into the calibrated file). Repeatable.")
@click.option("-c", "--collective", default=None, metavar="NAME",
              help="The measured collective; read from the file (program or file name) when omitted. "
                   "Must agree with the file when both say.")
@click.option("-a", "--algorithm", default="ring", show_default=True, metavar="NAME[:OPTS]",
              help="The algorithm the measured library ran (NCCL's default at large sizes is ring; auto: the "
                   "preset's choice per size).")
@click.option("--tier", type=click.Choice(["auto", *TIERS]), default="auto", show_default=True,
              help="Two-tier topologies: the tier to fit (auto = the one whose bandwidth the largest "
                   "measured size depends on most).")
@click.option("--launch", default=None, metavar="loop[:G][:n=N]|host|device",
              help="How the measured run launched (as in `sweep --launch`); default: what the log's banner says, "
                   "loop:G when one thread drove G > 1 GPUs ('nThread 1 nGpus 8', -g 8) and :n=N when it timed "
                   "N iterations other than 20 ('iters: 50'), else loop.")
@click.option("-d", "--dtype", default=None, help="Element type; default: the file's type column, else float32.")
@click.option("-o", "--output", required=True, metavar="CALIBRATED.toml",
              help="Where to write the calibrated topology (loadable with `sweep -t`).")
@max_memory_option
def calibrate_cmd(measured, topology, sets, collective, algorithm, tier, launch, dtype, output):
    """Fit TOPOLOGY to a measurement of one collective.

    A GPU preset (an [endpoint] with protocols) gets the physical constants of its execution model
    fitted: the exercised tier's efficiency, the launch overhead, the protocols' base latencies and caps,
    each one the measured sizes determine. Other topologies get their per-hop latency and bandwidth.

    MEASURED is nccl-tests output: its text table (e.g. `all_reduce_perf -b 8 -e 1G -f 2 > out.txt`),
    its JSON report (-J), or a JSON list of {"size": bytes, "time_us": us}. The out-of-place times are used.

    \b
    Examples:
      hccl-bench calibrate all_reduce.txt -t switch8 -o my_switch.toml
      hccl-bench calibrate ar_g8.txt -t dgx-h100 -o my_node.toml
      hccl-bench calibrate ar_2n.txt -t h100-cluster --set scale_out.domains=2 -a auto -o my_cluster.toml
      hccl-bench sweep -t my_node.toml -a ring --launch loop:8
    """
    from rich.table import Table

    from ..analysis.calibrate import (
        fit,
        fit_model,
        launch_of,
        model_toml,
        to_toml,
        uncertainty,
        uses_execution_model,
        with_errors,
        with_se,
    )
    from ..core.units import format_bandwidth, format_time
    from ..engine.execution import check_launch
    from ..network.config import apply_overrides, build, resolve
    from ..results.nccltests import read
    from ..results.report import _console
    from ..results.safefile import replace_text
    from ..schedule import collectives as C

    if not output.endswith(".toml"):
        raise ConfigError(f"-o/--output: expected a file ending in .toml, got {output!r}")
    if "," in algorithm or algorithm.strip() == "all":
        raise ConfigError(f"--algorithm: expected one algorithm (the one the measurement ran), got {algorithm!r}")
    if launch is not None:
        check_launch(launch)
    name, label, doc = resolve(topology)
    apply_overrides(doc, list(sets))
    topo = build(doc, name, label)
    m = read(measured, collective and C.canonical(collective))
    if collective is not None:
        collective = C.canonical(collective)
        if m.collective is not None and m.collective != collective:
            raise ConfigError(f"--collective: {measured} measures {m.collective}, not {collective}")
    elif m.collective is None:
        raise ConfigError(f"{measured}: cannot tell which collective was measured (no 'Collective test "
                          f"starting' line, program or file name); pass -c")
    coll = collective or m.collective
    if m.ranks is not None and m.ranks != topo.nranks:
        raise ConfigError(f"{measured}: measured on {m.ranks} ranks but {name} has {topo.nranks}; "
                          f"expected the same rank count (e.g. --set scale_out.domains=N, --set ranks=N)")
    dtype = dtype or m.dtype or "float32"
    if launch is None:
        try:
            launch = launch_of(Path(measured).read_text(errors="replace"))
        except ValueError as e:
            raise ConfigError(f"{measured}: {e}; pass --launch if it can stand for the run") from None
    flat = doc["topology"].get("kind") != "hierarchical"
    if uses_execution_model(topo):
        result = fit_model(doc, name, label, coll, algorithm, m, dtype, launch, tier=None if flat else tier)
        text = model_toml(doc, result, measured, name, coll, algorithm)
    else:
        result = fit(doc, name, label, coll, algorithm, m, dtype, tier=None if flat else tier)
        text = to_toml(doc, result, measured, name, coll, algorithm)
    build(tomllib.loads(text), Path(output).stem, output)        # the file must load
    try:
        replace_text(output, text)
    except OSError as e:
        raise ConfigError(f"-o/--output: cannot write {output!r} ({e.strerror or e})") from None

    con = _console()
    con.print(f"calibrate · {coll} · {algorithm} · {name} ({topo.nranks} ranks) · {Path(measured).name}")
    t = Table(box=None, header_style="bold")
    model = uses_execution_model(topo)
    for col in ("size (B)", "measured (us)", "model (us)", "error", *(["protocol"] if model else [])):
        t.add_column(col, justify="right")
    for i, (s, mu, mo, e) in enumerate(zip(result.sizes, result.measured_us, result.model_us, result.rel_error)):
        t.add_row(str(s), f"{mu:.2f}", f"{mo:.2f}", f"{e:+.2%}", *([result.protocols[i]] if model else []))
    con.print(t)
    con.print()
    tier_note = f" (tier {result.tier})" if result.tier else ""
    if model:
        con.print(f"fitted{tier_note}, --launch {launch}:", markup=False)
        for p in result.fitted:
            con.print(f"  {p.key} = {with_se(p)} (was {p.text(p.nominal)})", markup=False)
        for p in result.kept:
            con.print(f"  kept {p.key} = {p.text(p.nominal)}: {p.why_kept}", markup=False)
        con.print(f"protocols: {result.crossovers()}", markup=False)
        con.print(f"error over {len(result.sizes)} sizes: mean {result.mean_abs_error:.2%}, "
                  f"worst {result.worst_error:.2%}; ± is one standard error of the fit", markup=False)
        con.print(f"wrote {output} (predict: hccl-bench sweep -t {output} -a {algorithm} --launch {launch})",
                  markup=False)
        return 0
    lk, bk = result.keys()
    lat, bw = with_errors(result)
    con.print(f"fitted{tier_note}: {lk} = {lat} (was {format_time(result.nominal_latency)}), "
              f"{bk} = {bw} = efficiency {result.efficiency:.4g} x {format_bandwidth(result.nominal_bandwidth)}",
              markup=False)
    con.print(f"error over {len(result.sizes)} sizes: mean {result.mean_abs_error:.2%}, "
              f"worst {result.worst_error:.2%}")
    con.print(uncertainty(result), markup=False)
    con.print(f"wrote {output}")
    return 0
