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
                          f"{format_bandwidth(t.bandwidth)} {format_time(t.latency)}".strip() for t in topo.tiers)
        extra = " +in-switch reduce" if topo.can_reduce_in_switch else ""
        rows.append([preset, topo.kind, str(topo.nranks), tiers + extra, describe(preset)])
    render_list("topology presets (hccl-bench topologies NAME prints one)",
                ["name", "kind", "ranks", "links (per rank, per direction; latency per hop)", "description"], rows)


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
