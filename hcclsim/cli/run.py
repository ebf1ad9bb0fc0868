"""`hccl-bench run SCENARIO`: a study (scenarios/NAME.toml) into results/NAME/ (hcclsim.studies.scenario reads, hcclsim.studies.study runs).

The files are written to a temporary folder and moved into place when every section has run
(hcclsim.results.safefile.StagedFolder): a failed or interrupted run leaves the folder as it was."""

from __future__ import annotations

from pathlib import Path

import click

from ._options import max_memory_option


@click.command("run")
@click.argument("scenario", required=False, metavar="[SCENARIO]")
@click.option("--list", "list_", is_flag=True, help="List the scenarios: name, title, what each reproduces.")
@click.option("-o", "--output", "out_dir", metavar="DIR", help="Write the tables here  [default: results/NAME/]")
@click.option("-q", "--quiet", is_flag=True, help="Print nothing but errors.")
@max_memory_option
def run_cmd(scenario, list_, out_dir, quiet):
    """Run a study: sweeps, workload replays and overlap sections from a scenario TOML file.

    SCENARIO is a .toml file or the NAME of one in scenarios/ (see --list). Writes one CSV per section
    (with its provenance in CSV.meta.json) and, with the plot extra, a PNG per section that asks for one;
    prints a short table per section. The format is in docs/studies/README.md.

    \b
    Examples:
      hccl-bench run --list
      hccl-bench run hccl-inference-put
      hccl-bench run scenarios/workload-replay.toml -o /tmp/replay
    """
    from ..results.safefile import StagedFolder
    from ..studies import scenario as S
    from ._study import list_studies, run_study

    if list_:
        if scenario:
            raise click.UsageError("--list takes no SCENARIO")
        list_studies()
        return
    if not scenario:
        raise click.UsageError("give a scenario: a .toml file or a name from `hccl-bench run --list`")
    study = S.load(scenario)
    out = Path("results") / study.name if out_dir is None else out_dir
    staged = StagedFolder(out)              # refused here, before any work, when out cannot be written
    try:
        written = run_study(study, staged.path, quiet)
    except BaseException:                   # the folder stays as it was
        staged.discard()
        raise
    staged.commit()
    if not quiet:
        tables = sum(p.suffix == ".csv" for p in written)
        pngs = sum(p.suffix == ".png" for p in written)
        click.echo(f"hccl-bench: wrote {tables} table{'s' * (tables != 1)}"
                   f"{f' and {pngs} figure' + 's' * (pngs != 1) if pngs else ''} to {out}/", err=True)
