"""The long-sweep side of `hccl-bench sweep`: incremental -o, --resume, Ctrl-C, progress bar, --jobs,
--executor.

run() wraps hcclsim.sweeping.sweep.sweep: the executor is opened first (a Dask cluster connected and checked,
hcclsim.sweeping.executors.open_executor), finished units' rows go to -o (or its sidecar) as they arrive
(hcclsim.results.incremental), a rich progress bar shows on stderr when the sweep lasts over PROGRESS_DELAY
seconds and stderr is a terminal, and Ctrl-C stops with exit status 130 and one line saying how many
rows were kept and how to resume. Before a packet-engine sweep estimated past NOTE_SECONDS starts, one
line says its events and time (hcclsim.sweeping.cost); -q silences it and the bar.

The bar counts points as units finish (a packet-engine point is a unit) and measures progress in the
units' estimated seconds, so that its time left weighs a 64 MiB point as more than a 256 KiB one.

The bar is redrawn by one thread of ours that does everything under a lock, registered with
hcclsim.sweeping.executors.fork_safe, so the local executor may fork its workers while the bar runs.
"""

from __future__ import annotations

import sys
import threading
from functools import partial

import click

from ..core.errors import ConfigError
from ..engine.execution import QUIET
from ..results.incremental import RowWriter
from ..sweeping.executors import default_jobs, forget_fork_safe, fork_safe, open_executor
from ..sweeping.sweep import columns, split_auto

PROGRESS_DELAY = 1.0            # seconds before the bar appears
REFRESH = 4                     # redraws a second


class _Progress:
    """A rich bar on stderr, shown after PROGRESS_DELAY and redrawn REFRESH times a second by a thread
    that works only under self.lock (held across fork()); a no-op when disabled."""

    def __init__(self, enabled: bool):
        self.bar = self.task = self.thread = None
        self.enabled = enabled
        self.lock = threading.Lock()
        self.done = threading.Event()

    def start(self, units):
        if not self.enabled or not units:
            return
        from rich.console import Console
        from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

        self.bar = Progress(TextColumn("{task.description}"), BarColumn(),
                            TextColumn("{task.fields[done]}/{task.fields[points]} points"), TimeElapsedColumn(),
                            TextColumn("left"), TimeRemainingColumn(),
                            console=Console(stderr=True), transient=True, auto_refresh=False)
        first = units[0]
        self.task = self.bar.add_task(f"{first.collective} {first.label}", total=sum(_weight(u) for u in units),
                                      done=0, points=sum(u.points for u in units))
        self.thread = threading.Thread(target=self._draw, name="hccl-bench progress", daemon=True)
        fork_safe(self.thread, self.lock)
        self.thread.start()

    def _draw(self):
        if self.done.wait(PROGRESS_DELAY):
            return
        with self.lock:
            if self.done.is_set():
                return
            self.bar.start()
        while not self.done.wait(1 / REFRESH):
            with self.lock:
                if not self.done.is_set():
                    self.bar.refresh()

    def advance(self, unit):
        """One unit finished: its points done, its estimated seconds of the total."""
        if self.bar is not None:
            with self.lock:
                done = self.bar.tasks[0].fields["done"] + unit.points
                self.bar.update(self.task, advance=_weight(unit), done=done,
                                description=f"{unit.collective} {unit.label}")

    def stop(self):
        if self.thread is None:
            return
        self.done.set()
        with self.lock:
            self.bar.stop()                    # nothing when it never started
        self.thread.join()
        forget_fork_safe(self.thread)
        self.thread = None


def _weight(unit) -> float:
    return max(unit.cost, 1e-6)


def _note_estimate(units) -> None:
    """Say what a long packet-engine sweep will take, before it starts."""
    from ..sweeping import cost

    seconds = cost.packet_seconds(units)
    if seconds > cost.NOTE_SECONDS:
        click.echo(f"hccl-bench: the packet engine will process ~{cost.count(cost.packet_events(units))} events, about "
                   f"{cost.duration(seconds)} here (estimated from the schedules; --max-events caps it)", err=True)


def _interrupted(e: BaseException) -> bool:
    seen = 0
    while e is not None and seen < 8:
        if isinstance(e, KeyboardInterrupt):
            return True
        e, seen = e.__cause__ or e.__context__, seen + 1
    return False


def run(sweep, topo, colls, algorithm, sizes, *, dtype, root, engine, stats, output, resume, jobs, quiet,
        executor=None, scheduler=None, launch="host", noise=QUIET, meta=None):
    """sweep(...) (hcclsim.sweeping.sweep.sweep) as (SweepResult, RowWriter or None); exits 130 on Ctrl-C after reporting the rows kept.

    executor/scheduler: --executor local|dask and --scheduler ADDRESS, opened (checked, connected) before
    anything is read or written. launch and noise: as sweep's (hcclsim.engine.execution). meta: the sweep's
    metadata (hcclsim.results.provenance.metadata), which -o's files record and --resume checks."""
    if resume and not output:
        raise ConfigError("--resume: needs -o/--output FILE, the file to resume")
    if jobs is not None and jobs < 1:
        raise ConfigError(f"--jobs: expected a whole number >= 1, got {jobs}")
    with open_executor(executor, scheduler, jobs) as run_units:
        return _run(partial(sweep, executor=run_units, launch=launch, noise=noise), topo, colls, algorithm, sizes,
                    dtype=dtype, root=root, engine=engine, stats=stats, output=output, resume=resume,
                    jobs=jobs or default_jobs(), quiet=quiet, noise=noise, meta=meta)


def _run(sweep, topo, colls, algorithm, sizes, *, dtype, root, engine, stats, output, resume, jobs, quiet, noise,
         meta):
    writer = RowWriter(output, meta, columns(stats, split_auto(algorithm)[1], noise), resume) if output else None
    previous = writer.previous if writer else None
    progress = _Progress(enabled=not quiet and sys.stderr.isatty())

    def on_start(units):
        if not quiet:
            _note_estimate(units)
        progress.start(units)

    try:
        result = sweep(topo, colls, algorithm, sizes, dtype=dtype, root=root, engine=engine, stats=stats,
                       on_row=writer, previous=previous, jobs=jobs, on_start=on_start, on_unit=progress.advance)
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
