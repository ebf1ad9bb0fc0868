"""The long-sweep side of `hccl-bench sweep`: incremental -o, --resume, Ctrl-C, progress bar, --jobs.

run() wraps hcclsim.sweep.sweep: finished blocks go to -o (or its sidecar) as they arrive
(hcclsim.incremental), a rich progress bar shows on stderr when the sweep lasts over PROGRESS_DELAY
seconds and stderr is a terminal, and Ctrl-C stops with exit status 130 and one line saying how many
rows were kept and how to resume.
"""

from __future__ import annotations

import sys
import threading

import click

from ..errors import ConfigError
from ..executors import default_jobs
from ..incremental import RowWriter, load_previous
from ..sweep import COLUMNS, STAT_COLUMNS, split_auto
from ..units import parse_dtype

PROGRESS_DELAY = 1.0            # seconds before the bar appears


class _Progress:
    """A rich bar on stderr, started only after PROGRESS_DELAY; a no-op when disabled."""

    def __init__(self, enabled: bool):
        self.bar = self.task = self.timer = None
        self.enabled = enabled

    def start(self, units):
        if not self.enabled or not units:
            return
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        self.bar = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                            TextColumn("points"), TimeElapsedColumn(),
                            console=Console(stderr=True), transient=True)
        first = units[0]
        self.task = self.bar.add_task(f"{first.collective} {first.label}", total=sum(u.points for u in units))
        self.timer = threading.Timer(PROGRESS_DELAY, self.bar.start)
        self.timer.daemon = True
        self.timer.start()

    def advance(self, frame):
        if self.bar is not None:
            row = frame.iloc[0]
            self.bar.update(self.task, advance=len(frame), description=f"{row.collective} {row.algorithm}")

    def stop(self):
        if self.timer is not None:
            self.timer.cancel()
        if self.bar is not None:
            self.bar.stop()


def _interrupted(e: BaseException) -> bool:
    seen = 0
    while e is not None and seen < 8:
        if isinstance(e, KeyboardInterrupt):
            return True
        e, seen = e.__cause__ or e.__context__, seen + 1
    return False


def run(sweep, topo, colls, algorithm, sizes, *, dtype, root, engine, stats, output, resume, jobs, quiet):
    """sweep(...) (hcclsim.sweep.sweep) as (SweepResult, RowWriter or None); exits 130 on Ctrl-C after reporting the rows kept."""
    if resume and not output:
        raise ConfigError("--resume: needs -o/--output FILE, the file to resume")
    if jobs is not None and jobs < 1:
        raise ConfigError(f"--jobs: expected a whole number >= 1, got {jobs}")
    jobs = jobs or default_jobs()
    previous = None
    if resume:
        columns = COLUMNS + (STAT_COLUMNS if stats else []) + (["chosen"] if split_auto(algorithm)[1] else [])
        previous = load_previous(output, topo, parse_dtype(dtype), root, columns)
    writer = RowWriter(output, resume) if output else None
    progress = _Progress(enabled=not quiet and sys.stderr.isatty())

    def on_row(frame):
        if writer:
            writer(frame)
        progress.advance(frame)

    try:
        result = sweep(topo, colls, algorithm, sizes, dtype=dtype, root=root, engine=engine, stats=stats,
                       on_row=on_row, previous=previous, jobs=jobs, on_start=progress.start)
    except (KeyboardInterrupt, SystemError) as e:
        # Ctrl-C inside a Numba kernel's call surfaces as "SystemError: ... returned a result with an
        # exception set", caused by the KeyboardInterrupt
        if not _interrupted(e):
            raise
        progress.stop()
        if not writer:
            raise KeyboardInterrupt from None
        writer.close()
        kept = writer.rows + (0 if previous is None else len(previous))
        click.echo(f"hccl-bench: interrupted; {kept} finished rows kept in {writer.target}; run the same command "
                   f"with --resume to compute the rest", err=True)
        raise click.exceptions.Exit(130) from None
    finally:
        progress.stop()
        if writer:
            writer.close()
    return result, writer
