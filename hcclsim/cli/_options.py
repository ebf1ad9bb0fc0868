"""Options shared by the commands that sweep sizes on a topology (sweep, tune), and the memory budget
every command that runs points takes (sweep, tune, run)."""

from __future__ import annotations

import click

from ..core import budget
from ..core.errors import ConfigError
from ..core.names import DEFAULT_PRESET
from ..core.units import DTYPE_SIZE, parse_size
from ..network.params import PROTOCOLS


class SizeType(click.ParamType):
    name = "SIZE"

    def convert(self, value, param, ctx):
        from ..network.config import MAX_COUNT

        try:
            n = parse_size(value, where=f"{param.opts[-1]}")
        except ConfigError as e:
            self.fail(str(e).split(": ", 1)[-1], param, ctx)
        if n > MAX_COUNT:
            self.fail(f"expected a size of at most 2^62 bytes (a 64-bit count), got {value!r}", param, ctx)
        return n


def grid_options(minbytes: str, factor: int):
    """-t/--topology, --set, -b/-e/-f (nccl-tests' size grid) and -d/--dtype, with these defaults."""
    options = [
        click.option("-t", "--topology", default=DEFAULT_PRESET, show_default=True, metavar="PRESET|FILE.toml",
                     help="A built-in preset (see `hccl-bench topologies`) or a TOML file."),
        click.option("--set", "overrides", multiple=True, metavar="KEY=VALUE",
                     help="Override a topology key, e.g. --set bandwidth=100GB/s or --set scale_out.domains=64 "
                          "(repeatable)."),
        click.option("-b", "--b", "--minbytes", "minbytes", type=SizeType(), default=minbytes, show_default=True,
                     help="Smallest size (8, 64K, 1M, 1G; K = 1024)."),
        click.option("-e", "--e", "--maxbytes", "maxbytes", type=SizeType(), default="1G", show_default=True,
                     help="Largest size."),
        click.option("-f", "--f", "--stepfactor", "factor", type=int, default=factor, show_default=True,
                     help="Multiply the size by this factor from -b to -e."),
        click.option("-d", "--dtype", default="float32", show_default=True,
                     help=f"Element type: {', '.join(DTYPE_SIZE)}."),
        click.option("--protocol", type=click.Choice(PROTOCOLS), default=None,
                     help="Force the NCCL-like protocol (the endpoint's protocol: auto on GPU presets, picking the "
                          "fastest per size; none on generic topologies). Same as --set endpoint.protocol=NAME."),
    ]

    def decorate(fn):
        for option in reversed(options):
            fn = option(fn)
        return fn
    return decorate


def matrix_option(fn):
    """--matrix FILE|DISTRIBUTION: all_to_allv's traffic matrix (hcclsim.schedule.matrix)."""
    return click.option(
        "--matrix", metavar="FILE|DIST", default=None,
        help="all_to_allv's traffic matrix: a CSV of N lines of N bytes or weights, a NumPy .npy, or uniform, "
             "zipf:S, hot:R[:F] or dlrm:TABLES, each optionally :seed=K; scaled to every size, a size being what a "
             "rank sends on average (docs/alltoallv.md). [default: uniform]")(fn)


def with_protocol(overrides, protocol) -> list[str]:
    """--set items with --protocol's override last (so it wins)."""
    return [*overrides, *([f"endpoint.protocol={protocol}"] if protocol else [])]


def _max_memory(ctx, param, value):
    if value is not None:
        ctx.with_resource(budget.limited(budget.parse(value, "--max-memory")))


def max_memory_option(fn):
    """--max-memory SIZE: the memory budget of one point for the rest of the command (hcclsim.core.budget)."""
    return click.option(
        "--max-memory", metavar="SIZE", callback=_max_memory, expose_value=False,
        help=f"Memory one point may use (e.g. 8G); a point estimated past it is refused before it allocates "
             f"anything. [default: ${budget.ENV}, else 4G or half the physical memory if less]")(fn)


def _max_events(ctx, param, value):
    if value is not None:
        from ..sweeping import cost  # numpy: only when the option is given, not for --help

        ctx.with_resource(cost.limited(cost.parse(value, "--max-events")))


def max_events_option(fn):
    """--max-events N: the packet-engine events a sweep may take for the rest of the command
    (hcclsim.sweeping.cost)."""
    return click.option(
        "--max-events", metavar="N", callback=_max_events, expose_value=False,
        help="Packet-engine events the sweep may take (e.g. 2e9); a sweep estimated past it is refused before it "
             "starts. [default: $HCCL_BENCH_MAX_EVENTS, else 1e10, about 8 minutes]")(fn)
