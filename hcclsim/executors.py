"""Executors: how a sweep's units ((collective, algorithm) blocks, hcclsim.sweep.Unit) get run.

An executor is a function ``executor(fn, units, jobs)`` that yields ``(unit, fn(unit))`` pairs as
units finish, in any order; the sweep writes each as it arrives and sorts at the end, so every
executor gives the same rows. ``fn`` is picklable (a functools.partial of a module-level function).

``local`` (the default) runs units in this process when jobs is 1, there are few units, or the second
unit (the first loads the kernels) shows the rest is too short to repay starting workers
(SERIAL_SECONDS of estimated work); otherwise
``jobs - 1`` worker processes of a ProcessPoolExecutor ('forkserver' where available, else 'spawn';
Numba kernels are cached on disk, so workers load them rather than compile) take units from the front
of the queue while this process takes them from the back (cancelling their futures), so it works while
the workers start and ``jobs`` processes run units in all. Workers ignore SIGINT: on
Ctrl-C the main process gets KeyboardInterrupt, cancels what has not started and ends its workers.

A Dask executor (issue 4, item 6) is another entry of EXECUTORS with the same signature.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import time
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from contextlib import contextmanager

from .errors import ConfigError

SERIAL_SECONDS = 2.0          # below this estimated remaining time, starting workers (~1 s each) does not pay
STEAL = True                  # this process runs queued units too (tests turn it off to exercise workers)


def default_jobs() -> int:
    return os.cpu_count() or 1


def _ignore_sigint():
    signal.signal(signal.SIGINT, signal.SIG_IGN)


@contextmanager
def _sigint_blocked():
    """SIGINT held back (delivered at the end) while child processes start: they inherit the mask, so a
    Ctrl-C to the process group cannot kill the forkserver or a worker before it ignores SIGINT."""
    if not hasattr(signal, "pthread_sigmask"):
        yield
        return
    old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


def _context():
    methods = multiprocessing.get_all_start_methods()
    ctx = multiprocessing.get_context("forkserver" if "forkserver" in methods else "spawn")
    if ctx.get_start_method() == "forkserver":
        ctx.set_forkserver_preload(["hcclsim.sweep"])
    return ctx


def run_local(fn, units, jobs: int = 1):
    """Yield (unit, fn(unit)) for each unit; in parallel worker processes when it pays (above)."""
    units = list(units)
    if not units:
        return
    yield units[0], fn(units[0])              # the first unit also loads the kernels: time the second
    if len(units) == 1:
        return
    t0 = time.perf_counter()
    yield units[1], fn(units[1])
    rest = units[2:]
    per_point = (time.perf_counter() - t0) / max(units[1].points, 1)
    estimate = per_point * sum(u.points for u in rest)
    if jobs <= 1 or len(rest) <= 1 or estimate < SERIAL_SECONDS:
        for unit in rest:
            yield unit, fn(unit)
        return
    pool = ProcessPoolExecutor(max_workers=min(jobs - 1, len(rest)), mp_context=_context(),
                               initializer=_ignore_sigint)
    pending = {}
    try:
        with _sigint_blocked():                # a Ctrl-C while workers start reaches only this process
            futures = [pool.submit(fn, unit) for unit in rest]
            pending = dict(zip(futures, rest))
        while pending:
            for future in [f for f in pending if f.done()]:
                yield pending.pop(future), future.result()
            stolen = next((f for f in reversed(futures) if f in pending and f.cancel()), None) if STEAL else None
            if stolen is not None:             # this process works too, from the back of the queue
                unit = pending.pop(stolen)
                yield unit, fn(unit)
            elif pending:
                wait(pending, return_when=FIRST_COMPLETED)
    finally:
        if pending:                      # interrupted or failed: do not wait for long units to finish
            processes = list((getattr(pool, "_processes", None) or {}).values())
            pool.shutdown(wait=False, cancel_futures=True)
            for p in processes:
                p.terminate()
            for p in processes:
                p.join(5)
        else:
            pool.shutdown()


EXECUTORS = {"local": run_local}


def get_executor(name=None):
    """An executor by name (None: local), or a callable passed through."""
    if callable(name):
        return name
    try:
        return EXECUTORS[name or "local"]
    except KeyError:
        raise ConfigError(f"--executor: unknown executor {name!r}; expected one of: {', '.join(EXECUTORS)}") \
            from None
