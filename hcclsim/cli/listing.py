"""`hccl-bench topologies` and `hccl-bench algorithms`: what exists, what each needs."""

from __future__ import annotations

import click


@click.command("topologies")
@click.argument("name", required=False)
def topologies_cmd(name):
    """List the built-in topology presets, or print one preset's TOML (to copy and edit)."""
    from ..core.units import format_bandwidth, format_time
    from ..network.config import describe, load_topology, preset_names, source_text
    from ..results.report import render_list

    if name:
        click.echo(source_text(name, where="topologies NAME"), nl=False)   # validated first
        return
    rows = []
    for preset in preset_names():
        topo = load_topology(preset)
        tiers = "; ".join(f"{t.name if t.name != 'flat' else ''}{' ' if t.name != 'flat' else ''}{t.kind} "
                          f"{_per_rank(topo, k, format_bandwidth)} {format_time(t.latency)}".strip()
                          for k, t in enumerate(topo.tiers))
        extra = " +in-switch reduce" if topo.can_reduce_in_switch else ""
        rows.append([preset, topo.kind, str(topo.nranks), tiers + extra, describe(preset)])
    render_list("topology presets (hccl-bench topologies NAME prints one)",
                ["name", "kind", "ranks", "links (per rank, per direction; latency per hop)", "description"], rows)


def _per_rank(topo, tier: int, fmt) -> str:
    """What a rank's links of one tier carry each way: '450GB/s' (one link), '448GB/s (7 x 64GB/s)' (a full
    mesh), '150GB/s (4 links of 25-50GB/s)' (a graph wiring's NV1 and NV2): the rank with the least."""
    import numpy as np
    own = (topo.link_tier == tier) & (topo.link_src < topo.nranks) & (topo.link_src != topo.link_dst)
    src, bw = topo.link_src[own], topo.link_bw[own]
    total = np.bincount(src, bw, topo.nranks)
    r = int(np.argmin(total))
    mine = bw[src == r]
    if len(mine) == 1:
        return fmt(mine[0])
    each = f"{len(mine)} x {fmt(mine[0])}" if np.all(mine == mine[0]) else \
        f"{len(mine)} links of {fmt(mine.min())}-{fmt(mine.max())}"
    return f"{fmt(total[r])} ({each})"


@click.command("algorithms")
def algorithms_cmd():
    """List the algorithms: the collectives each implements, what it needs, and its options."""
    from ..results.report import render_list
    from ..schedule.algorithm import load_all, option_help

    rows = []
    for name, cls in load_all().items():
        opts = ", ".join(f"{o}={d}" for o, d, _ in option_help(cls)) or "-"
        rows.append([name, ", ".join(cls.collectives), cls.requires, opts, cls.summary])
    render_list("algorithms (options: -a NAME:key=value:key=value)",
                ["name", "collectives", "needs", "options (defaults)", "summary"], rows)
