"""Executors: how a sweep's units ((collective, algorithm) blocks, hcclsim.sweeping.sweep.Unit) get run.

An executor is a function ``executor(fn, units, jobs)`` that yields ``(unit, fn(unit))`` pairs as
units finish, in any order; the sweep writes each as it arrives and sorts at the end, so every
executor gives the same rows. ``fn`` is picklable (a functools.partial of a module-level function).

``local`` (the default) runs units in this process, and in ``jobs - 1`` worker processes when that
pays. On Linux the workers are *forked*: they start in milliseconds with everything this process has
imported (each loads the cached Numba kernels it needs, in parallel), so they start at once and share
every unit. Forking is safe only when no other thread can hold a lock the child needs, so it is used
only when every other thread of this process is registered with fork_safe() (the progress bar's, which
does all its work under a lock held across the fork). Otherwise, and where fork is unavailable or
unsafe (macOS, Windows), workers start by 'forkserver' or 'spawn' and cost about a second each
(interpreter, imports, kernels from the disk cache): the first unit runs here (loading the kernels),
the second too, timed, and workers start only when the rest would take SERIAL_SECONDS. Either way
workers take units from the front of the queue while this process takes them from the back
(cancelling their futures), so ``jobs`` processes run units in all. Workers ignore SIGINT: on Ctrl-C
the main process gets KeyboardInterrupt, cancels what has not started and ends its workers.

``dask`` runs every unit on an existing Dask distributed cluster (the ``dask`` extra):
open_executor("dask", scheduler) connects, checks the workers run the same hccl-bench version, and
gives an executor that submits the units and yields them as they complete; on Ctrl-C (or any
error) the futures not yet done are cancelled.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import sys
import threading
import time
import uuid
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from contextlib import contextmanager
from functools import partial

from ..core.errors import ConfigError

SERIAL_SECONDS = 2.0          # below this estimated remaining time, starting workers (~1 s each) does not pay
STEAL = True                  # this process runs queued units too (tests turn it off to exercise workers)
CONNECT_TIMEOUT = 5.0         # seconds to reach a Dask scheduler
WORKERS_TIMEOUT = 10.0        # seconds to wait for a first Dask worker to join
DASK_EXTRA = "--executor dask needs the dask extra: pip install 'hccl-bench[dask]'"


def default_jobs() -> int:
    return os.cpu_count() or 1


# ---- fork safety: threads that do all their work under a lock, held by the forking thread across fork()

_FORK_SAFE: dict = {}         # thread -> lock
_held: list = []


def fork_safe(thread: threading.Thread, lock) -> None:
    """Declare that `thread` touches shared state (stderr, imports...) only while holding `lock`; the lock
    is then held across every fork() of this process, so a child never inherits it half-way."""
    _FORK_SAFE[thread] = lock


def forget_fork_safe(thread: threading.Thread) -> None:
    _FORK_SAFE.pop(thread, None)


def _before_fork():
    _held[:] = list(_FORK_SAFE.values())
    for lock in _held:
        lock.acquire()


def _after_fork():
    for lock in reversed(_held):
        lock.release()
    _held.clear()


def _after_fork_in_child():
    _after_fork()
    _FORK_SAFE.clear()        # those threads do not exist here


if hasattr(os, "register_at_fork"):
    os.register_at_fork(before=_before_fork, after_in_parent=_after_fork, after_in_child=_after_fork_in_child)


def _can_fork() -> bool:
    if not sys.platform.startswith("linux") or "fork" not in multiprocessing.get_all_start_methods():
        return False
    me = threading.current_thread()
    return all(t is me or t in _FORK_SAFE for t in threading.enumerate())


def _context(fork: bool):
    if fork:
        return multiprocessing.get_context("fork")
    methods = multiprocessing.get_all_start_methods()
    ctx = multiprocessing.get_context("forkserver" if "forkserver" in methods else "spawn")
    if ctx.get_start_method() == "forkserver":
        ctx.set_forkserver_preload(["hcclsim.sweeping.sweep"])
    return ctx


def _worker_init():
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    sys.stdout, sys.stderr = sys.__stdout__, sys.__stderr__    # not a forked progress bar's proxies


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


# ---- local

def run_local(fn, units, jobs: int = 1):
    """Yield (unit, fn(unit)) for each unit; in parallel worker processes when it pays (above)."""
    units = list(units)
    if not units:
        return
    if jobs > 1 and len(units) > 1 and _can_fork():     # workers cost milliseconds: share every unit
        yield from _pool(fn, units, min(jobs - 1, len(units) - 1), _context(fork=True))
        return
    yield units[0], fn(units[0])              # the first unit also loads the kernels: time the second
    if len(units) == 1:
        return
    t0 = time.perf_counter()
    yield units[1], fn(units[1])
    rest = units[2:]
    per_point = (time.perf_counter() - t0) / max(units[1].points, 1)
    if jobs <= 1 or len(rest) <= 1 or per_point * sum(u.points for u in rest) < SERIAL_SECONDS:
        for unit in rest:
            yield unit, fn(unit)
        return
    yield from _pool(fn, rest, min(jobs - 1, len(rest)), _context(fork=False))


def _pool(fn, units, workers: int, ctx):
    pool = ProcessPoolExecutor(max_workers=workers, mp_context=ctx, initializer=_worker_init)
    pending = {}
    try:
        with _sigint_blocked():                # a Ctrl-C while workers start reaches only this process
            futures = [pool.submit(fn, unit) for unit in units]
            pending = dict(zip(futures, units))
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


# ---- dask

def _distributed():
    try:
        import distributed
    except ImportError:
        raise ConfigError(DASK_EXTRA) from None
    return distributed


def _probe(distributed, address: str) -> None:
    """Reach the scheduler once, in a thread of its own (this one may be running an event loop), so that
    an unreachable address fails here, quickly, rather than inside a Client (which complains at exit)."""
    import asyncio
    from concurrent.futures import ThreadPoolExecutor

    async def connect():
        comm = await distributed.comm.connect(address, timeout=CONNECT_TIMEOUT)
        await comm.close()

    with ThreadPoolExecutor(1) as thread:
        thread.submit(asyncio.run, connect()).result()


def connect(address: str | None):
    """A distributed.Client on the scheduler at `address`, with at least one worker running this
    hccl-bench version; ConfigError (one line) otherwise."""
    distributed = _distributed()
    if not address:
        raise ConfigError("--scheduler: --executor dask needs --scheduler ADDRESS, a running Dask scheduler "
                          "(e.g. tcp://10.0.0.1:8786; start one with `dask scheduler`)")
    where = f"--scheduler {address}"
    try:
        _probe(distributed, address)
        client = distributed.Client(address, timeout=CONNECT_TIMEOUT, set_as_default=False)
    except (OSError, ValueError, TypeError) as e:
        reason = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ConfigError(f"{where}: cannot reach a Dask scheduler ({reason}); expected the address "
                          f"`dask scheduler` prints, e.g. tcp://10.0.0.1:8786") from None
    try:
        _check_workers(client, where)
    except BaseException:
        client.close()
        raise
    return client


def _loaded_version() -> str:
    """Run on each worker: the hccl-bench it has imported (unpickling this needs hcclsim there)."""
    from ..core.version import __version__

    return __version__


def _check_workers(client, where: str) -> None:
    from ..core.version import __version__

    try:
        client.wait_for_workers(1, timeout=WORKERS_TIMEOUT)
    except TimeoutError:
        raise ConfigError(f"{where}: no Dask worker joined within {WORKERS_TIMEOUT:g} s; start some with "
                          f"`dask worker ADDRESS` on machines with hccl-bench {__version__} installed") from None
    found = client.run(_loaded_version, on_error="return")
    for worker, got in sorted(found.items()):
        if got != __version__:
            has = f"runs hccl-bench {got}" if isinstance(got, str) else f"cannot import hcclsim ({got})"
            raise ConfigError(f"{where}: worker {worker} {has}; every worker needs hccl-bench {__version__}, as "
                              f"here (pip install 'hccl-bench=={__version__}' where the workers run, then restart them)")


def run_dask(fn, units, jobs: int = 1, *, scheduler: str | None = None, client=None):
    """Yield (unit, fn(unit)) as the workers of a Dask cluster finish them. `client`: a connected
    distributed.Client (left open), else one is opened on `scheduler` and closed at the end. jobs is
    unused: the cluster runs as many units at once as its workers have threads."""
    units = list(units)
    if not units:
        return
    own = client is None
    if own:
        client = connect(scheduler)
    from distributed import as_completed

    futures = {}
    try:
        run = uuid.uuid4().hex[:8]
        futures = {client.submit(fn, unit, key=f"hccl-bench-{run}-{i}", pure=False): unit
                   for i, unit in enumerate(units)}
        for future in as_completed(futures, loop=client.loop):
            yield futures[future], future.result()
    finally:
        left = [f for f in futures if not f.done()]
        if left:                                 # interrupted or failed: nothing more runs for us
            client.cancel(left)
        if own:
            client.close()


EXECUTORS = {"local": run_local, "dask": run_dask}


def _name(name) -> str:
    name = name or "local"
    if name not in EXECUTORS:
        raise ConfigError(f"--executor: unknown executor {name!r}; expected one of: {', '.join(EXECUTORS)}")
    return name


def get_executor(name=None, scheduler: str | None = None):
    """An executor by name (None: local), or a callable passed through; dask connects when it runs."""
    if callable(name):
        return name
    name = _name(name)
    if scheduler and name != "dask":
        raise ConfigError("--scheduler: only with --executor dask")
    return partial(run_dask, scheduler=scheduler) if name == "dask" else EXECUTORS[name]


@contextmanager
def open_executor(name=None, scheduler: str | None = None, jobs: int | None = None):
    """The executor `name` ready to run: for dask, connected (and checked) now, so that bad input fails
    before any work or output, and disconnected at the end. jobs: the --jobs given, if any (local only)."""
    if callable(name):
        with _closing(name) as run:
            yield run
        return
    name = _name(name)
    if scheduler and name != "dask":
        raise ConfigError("--scheduler: only with --executor dask (the local executor runs on this machine)")
    if name != "dask":
        with _closing(EXECUTORS[name]) as run:
            yield run
        return
    if jobs is not None:
        raise ConfigError("--jobs: only with --executor local; a Dask cluster runs as many blocks at once as "
                          "its workers have threads (dask worker --nthreads)")
    client = connect(scheduler)
    try:
        with _closing(partial(run_dask, client=client)) as run:
            yield run
    finally:
        client.close()


@contextmanager
def _closing(executor):
    """executor, whose runs are all closed on exit: an error raised outside one (in a row callback, say)
    cancels its pending units and ends its workers now, not when the traceback is freed."""
    runs = []

    def run(fn, units, jobs: int = 1):
        runs.append(executor(fn, units, jobs))
        return runs[-1]
    try:
        yield run
    finally:
        for gen in runs:
            gen.close()
