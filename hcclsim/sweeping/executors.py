"""Executors: how a sweep's units (packet points, analytic structure keys: hcclsim.sweeping.sweep.Unit) get run.

An executor is a function ``executor(fn, units, jobs)`` that yields ``(unit, fn(unit))`` pairs as
units finish, in any order; the sweep writes each as it arrives and sorts at the end, so every
executor gives the same rows. ``fn`` is picklable (a functools.partial of a module-level function).

``local`` (the default) runs units in this process, or in worker processes when that pays. The
shortest unit of each engine runs here first, loading (or compiling) the Numba kernels the rest need.
On Linux ``jobs`` workers are then *forked*: they start in milliseconds with everything this process
has imported and loaded, kernels included, and take the units longest first, one at a time as each
ends (nothing is committed ahead, so they finish together). Forking is safe only when no other thread
can hold a lock the child needs, so it is used only when every other thread of this process is
registered with fork_safe() (the progress bar's, which does all its work under a lock held across the
fork). Otherwise, and where fork is unavailable or unsafe (macOS, Windows), workers start by
'forkserver' or 'spawn' and cost about a second each (interpreter, imports, kernels from the disk
cache): one more unit runs here, timed, and ``jobs - 1`` workers start only when the rest would take
SERIAL_SECONDS; they take units from the front of the queue (a unit running and one waiting each)
while this process takes them from the back, the units laid out so that both ends start with the
longest and meet at the shortest (_two_ended, by their estimated ``cost``). Either way a worker starts
once and stays warm: it gets ``fn`` (the sweep's topology, with its caches) once, at its start, not
with every unit, and keeps the kernels it loaded. Workers ignore SIGINT: on Ctrl-C the main process
gets KeyboardInterrupt, cancels what has not started and ends its workers.

Workers die with the main process however it ends (SIGKILL, the OOM killer included), since nothing
else would stop them (_die_with), and never hold the caller's stdout, stderr or any file of the main
process (_let_go): a caller reading our output to its end gets it when the main process ends. What a
worker has to say comes back with its results: its exceptions (raised here, so the user sees the
usual one line) and its warnings (shown here, _shown).

``dask`` runs every unit on an existing Dask distributed cluster (the ``dask`` extra):
open_executor("dask", scheduler) checks the peer is a Dask scheduler within CONNECT_TIMEOUT (_probe),
connects, checks the workers run the same hccl-bench version, and gives an executor that submits the
units and yields them as they complete; on Ctrl-C (or any error) the futures not yet done are cancelled.
"""

from __future__ import annotations

import math
import multiprocessing
import os
import signal
import socket
import struct
import sys
import threading
import time
import uuid
import warnings
from collections import deque
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from contextlib import contextmanager
from functools import partial

from ..core.errors import ConfigError
from ..core.signals import held_back

SERIAL_SECONDS = 2.0          # below this estimated remaining time, starting workers (~1 s each) does not pay
STEAL = True                  # this process runs queued units too (tests turn it off to exercise workers)
PDEATHSIG = sys.platform.startswith("linux")   # workers use PR_SET_PDEATHSIG (tests turn it off: the watchdog)
PR_SET_PDEATHSIG = 1          # <linux/prctl.h>
WATCH_SECONDS = 0.2           # how often a worker without PDEATHSIG looks for its parent (ours: a cheap syscall)
CONNECT_TIMEOUT = 5.0         # seconds to reach a Dask scheduler and hear it answer (HCCL_BENCH_CONNECT_TIMEOUT
                              # overrides); ours: a scheduler answers in milliseconds, even across a data centre
GREETING_BYTES = 1 << 16      # most a scheduler's first message may hold; it is 58 bytes (distributed 2026.8)
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


# ---- the workers' side

_FN: list = []                # in a worker: the function its units run (_worker_init)


def _worker_init(parent: int, inherited=(), fn=None):
    """First thing in every worker: Ctrl-C ignored (above), SIGTERM fatal (not the handler the command line
    installs, which fork copies), death with `parent` (the main process's pid), no file of the caller held,
    and fn kept for every unit it runs (inherited when forked, unpickled once otherwise)."""
    _FN[:] = [fn]
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    if hasattr(signal, "pthread_sigmask"):                      # blocked while we started (core.signals.held_back)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})
    _die_with(parent)
    _let_go(inherited)


def _die_with(parent: int) -> None:
    """Exit when the main process does, however it ends. On Linux the kernel kills us when our parent
    dies (PR_SET_PDEATHSIG, armed here; strictly, when the thread that started us ends: the one using the
    pool, alive while it is used), elsewhere a thread watches os.getppid(); with forkserver the parent is the server,
    which exits when the main process does. The parent may have died before this ran: checked after arming.
    (On Windows, where nobody is reparented, a worker finds out when it next asks for a unit.)"""
    prctl = _prctl() if PDEATHSIG else None
    armed = prctl is not None and prctl(PR_SET_PDEATHSIG, signal.SIGKILL) == 0
    ppid = os.getppid()
    if not _child_of(parent, ppid):
        os._exit(1)
    if not armed:
        threading.Thread(target=_watch, args=(ppid,), name="hccl-bench parent watch", daemon=True).start()


def _prctl():
    import ctypes

    try:
        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None


def _child_of(main: int, ppid: int) -> bool:
    """Whether our parent `ppid` is `main`, or a forkserver it started (Linux says; elsewhere trusted
    unless we were handed to init already)."""
    if ppid == main:
        return True
    if ppid == 1:
        return False
    try:
        with open(f"/proc/{ppid}/stat", encoding="ascii") as f:
            return int(f.read().rsplit(")", 1)[1].split()[1]) == main     # pid (comm) state ppid ...
    except OSError:
        return not sys.platform.startswith("linux")


def _watch(ppid: int) -> None:
    while os.getppid() == ppid:
        time.sleep(WATCH_SECONDS)
    os._exit(1)


def _let_go(inherited) -> None:
    """Point fd 1, fd 2 and the files inherited from the main process (`inherited`, see _inherited_fds) at
    /dev/null: a worker holding the caller's stdout or stderr keeps a caller that reads them to the end
    waiting, and one holding -o (or its lock) keeps the file busy."""
    null = os.open(os.devnull, os.O_RDWR)
    server = getattr(sys.modules.get("multiprocessing.forkserver"), "_forkserver", None)
    alive = getattr(server, "_forkserver_alive_fd", None)     # set in a forkserver's child
    try:
        for fd in (1, 2) if alive is None else (1, 2, alive):   # a forkserver lives while a child holds this
            os.dup2(null, fd)
        for fd, ident in inherited:
            try:
                st = os.fstat(fd)
            except OSError:
                continue
            if (st.st_dev, st.st_ino) == ident:                   # not a pipe of the pool's, opened since
                os.dup2(null, fd)
    finally:
        if null not in (1, 2):
            os.close(null)
    sys.stdout, sys.stderr = sys.__stdout__, sys.__stderr__    # not a forked progress bar's proxies


def _inherited_fds() -> tuple:
    """(fd, (device, inode)) of every file this process has open besides stdio, as a forked worker inherits
    them: the worker needs none (its pool's pipes are opened after this). Empty where /proc is missing."""
    try:
        names = os.listdir("/proc/self/fd")
    except OSError:
        return ()
    found = []
    for fd in sorted(int(n) for n in names if int(n) > 2):
        try:
            st = os.fstat(fd)
        except OSError:                                             # listdir's own, closed since
            continue
        found.append((fd, (st.st_dev, st.st_ino)))
    return tuple(found)


def _run_in_worker(unit):
    """fn(unit) (_worker_init) and the warnings it gave, which travel with the result since the worker's
    stderr is /dev/null (shown by the main process, _shown)."""
    with warnings.catch_warnings(record=True) as caught:
        result = _FN[0](unit)
    return result, [(str(w.message), w.category, w.filename, w.lineno) for w in caught]


_SHOWN: dict = {}             # the registry of warnings shown for workers: each once, as in one process


def _shown(packed):
    result, caught = packed
    for message, category, filename, lineno in caught:
        warnings.warn_explicit(message, category, filename, lineno, registry=_SHOWN)
    return result


# ---- local

def run_local(fn, units, jobs: int = 1):
    """Yield (unit, fn(unit)) for each unit; in parallel worker processes when it pays (above)."""
    units = list(units)
    if jobs <= 1 or len(units) <= 1:
        for unit in units:
            yield unit, fn(unit)
        return
    warm = _shortest_per_engine(units)     # here first: they load (or compile) the kernels the rest need
    for unit in warm:
        yield unit, fn(unit)
    rest = sorted((u for u in units if all(u is not w for w in warm)), key=lambda u: -_cost(u))   # longest first
    if len(rest) > 1 and _can_fork():      # workers cost milliseconds and inherit the kernels: jobs of them
        yield from _pool(fn, rest, min(jobs, len(rest)), _context(fork=True), helping=False)
        return
    if len(rest) > 2:                      # workers would cost about a second each: time a unit first
        t0 = time.perf_counter()
        yield rest[-1], fn(rest[-1])
        per_cost = (time.perf_counter() - t0) / _cost(rest[-1])
        rest = rest[:-1]
        if per_cost * sum(_cost(u) for u in rest) >= SERIAL_SECONDS:
            yield from _pool(fn, _two_ended(rest, jobs), min(jobs - 1, len(rest)), _context(fork=False))
            return
    for unit in rest:
        yield unit, fn(unit)


def _cost(unit) -> float:
    """A unit's estimated seconds (hcclsim.sweeping.sweep.Unit.cost), else its points."""
    return getattr(unit, "cost", 0.0) or max(getattr(unit, "points", 1), 1)


def _shortest_per_engine(units: list) -> list:
    """The shortest unit of each engine (units without engines: the first), in the sweep's order."""
    shortest: dict = {}
    for unit in units:
        key = getattr(unit, "engines", None)
        if key not in shortest or _cost(unit) < _cost(shortest[key]):
            shortest[key] = unit
    return [u for u in units if any(u is s for s in shortest.values())]


def _two_ended(units: list, jobs: int) -> list:
    """units longest first (by their estimated cost) for the workers, who take from the front, and for this
    process, which takes from the back: every jobs-th longest goes to the back, so that both ends meet at the
    shortest units and finish together."""
    ranked = sorted(units, key=lambda u: -_cost(u))      # stable: ties keep the sweep's order
    back = set(range(jobs - 1, len(ranked), jobs)) if jobs > 1 else set()
    return [u for i, u in enumerate(ranked) if i not in back] + [ranked[i] for i in sorted(back, reverse=True)]


def _pool(fn, units, workers: int, ctx, helping: bool = True):
    """Yield (unit, fn(unit)) as `workers` processes of ctx take units from the front; helping (and STEAL):
    this process takes them from the back meanwhile, and each worker has one more waiting, so as not to
    idle while this process is busy; otherwise this process hands out one unit at a time as each ends."""
    helping = helping and STEAL
    inherited = _inherited_fds() if ctx.get_start_method() == "fork" else ()
    pool = ProcessPoolExecutor(max_workers=workers, mp_context=ctx, initializer=_worker_init,
                               initargs=(os.getpid(), inherited, fn))
    queue, pending = deque(units), {}

    def top_up():                              # queued ones cannot be taken back: few, and only the next
        with held_back():                      # (a Ctrl-C while workers start reaches only this process;
                                               # children inherit the mask: SIGTERM unblocked once fatal)
            while queue and len(pending) < (2 if helping else 1) * workers:
                unit = queue.popleft()
                pending[pool.submit(_run_in_worker, unit)] = unit
    try:
        top_up()
        while pending or queue:
            for future in [f for f in pending if f.done()]:
                yield pending.pop(future), _shown(future.result())
            top_up()
            if helping and queue:              # this process works too, from the back of the queue
                unit = queue.pop()
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


def connect_timeout() -> float:
    """CONNECT_TIMEOUT, or the seconds in $HCCL_BENCH_CONNECT_TIMEOUT."""
    text = os.environ.get("HCCL_BENCH_CONNECT_TIMEOUT")
    if text is None:
        return CONNECT_TIMEOUT
    try:
        seconds = float(text)
    except ValueError:
        seconds = math.nan
    if not 0 < seconds < math.inf:
        raise ConfigError(f"HCCL_BENCH_CONNECT_TIMEOUT: expected seconds > 0 (e.g. 5), got {text!r}")
    return seconds


class _NotDask(Exception):
    """The peer answered, not as a Dask server does."""


def _probe(distributed, address: str, where: str, timeout: float) -> None:
    """Check within `timeout` seconds, in a thread of its own (this one may be running an event loop), that
    a Dask scheduler answers at `address`, before a Client touches it: a Client waits forever for a peer that
    accepts and never answers, and takes the first bytes of another server's answer for a message length
    (an HTTP server's asks for 3 EiB). ConfigError (one line) otherwise."""
    outcome = []

    def check():
        try:
            outcome.append(_peer_kind(distributed, address, time.monotonic() + timeout))
        except BaseException as e:  # noqa: BLE001 - handed to the waiting thread
            outcome.append(e)
    thread = threading.Thread(target=check, name="hccl-bench dask probe", daemon=True)
    thread.start()
    thread.join(timeout + 1.0)                 # bounded whatever hangs (a name lookup, say): then left behind
    expected = "expected the address `dask scheduler` prints, e.g. tcp://10.0.0.1:8786"
    got = outcome[0] if outcome else TimeoutError()
    if isinstance(got, TimeoutError):
        raise ConfigError(f"{where}: no Dask scheduler answered within {timeout:g} s "
                          f"(HCCL_BENCH_CONNECT_TIMEOUT sets the limit); {expected}") from None
    if isinstance(got, (OSError, ValueError)):
        reason = str(got).strip().splitlines()[0] if str(got).strip() else type(got).__name__
        raise ConfigError(f"{where}: cannot reach a Dask scheduler ({reason}); {expected}") from None
    if isinstance(got, BaseException):
        reason = str(got) if isinstance(got, _NotDask) else f"it answered, then {type(got).__name__}: {got}"
        raise ConfigError(f"{where}: not a Dask scheduler ({reason[:200]}); {expected}") from None
    if not got.endswith("Scheduler"):
        raise ConfigError(f"{where}: that is a Dask {got}, not the scheduler; {expected}")


def _peer_kind(distributed, address: str, deadline: float) -> str:
    """The type of Dask server at `address` ('Scheduler', 'Worker', ...), asked before `deadline`. Over TCP
    its first message is checked by hand first (_greeting)."""
    import asyncio

    scheme, loc = distributed.comm.parse_address(address)
    if scheme == "tcp":
        _greeting(*distributed.comm.parse_host_port(loc), deadline)

    async def identity():
        comm = await distributed.comm.connect(address, timeout=max(deadline - time.monotonic(), 0.01))
        try:
            await comm.write({"op": "identity", "reply": True})
            return await comm.read()
        finally:
            await comm.close()
    left = deadline - time.monotonic()
    if left <= 0:
        raise TimeoutError
    reply = asyncio.run(asyncio.wait_for(identity(), left))
    if not isinstance(reply, dict) or not isinstance(reply.get("type"), str):
        raise _NotDask(f"it answered {str(reply)[:60]!r} to an identity request")
    return reply["type"]


def _greeting(host: str, port: int, deadline: float) -> None:
    """Read the handshake a Dask server sends as soon as it accepts a connection (8 bytes: a length; then
    that many: a frame count, the frames' lengths, the frames) and send it back as ours, so that the server
    sees a client come and go. TimeoutError when nothing comes in time, _NotDask when it is not that."""
    def left() -> float:
        seconds = deadline - time.monotonic()
        if seconds <= 0:
            raise TimeoutError
        return seconds

    def read(n: int, so_far: bytes = b"") -> bytes:
        data = b""
        while len(data) < n:
            sock.settimeout(left())
            chunk = sock.recv(n - len(data))
            if not chunk:
                raise _NotDask(f"it answered {so_far + data!r}, then closed the connection" if so_far + data
                               else "it closed the connection without a word")
            data += chunk
        return data

    with socket.create_connection((host, port), timeout=left()) as sock:
        head = read(8)
        (size,) = struct.unpack("Q", head)
        if not 16 <= size <= GREETING_BYTES:                   # a frame count and a length at least
            sock.settimeout(0.1)
            try:
                head += sock.recv(24)
            except OSError:
                pass
            raise _NotDask(f"it answered {head!r}")
        body = read(size, head)
        (frames,) = struct.unpack_from("Q", body)
        if not 1 <= frames <= size // 8 - 1:
            raise _NotDask(f"it answered {(head + body)[:32]!r}")
        sock.sendall(head + body)


def connect(address: str | None):
    """A distributed.Client on the scheduler at `address`, with at least one worker running this
    hccl-bench version; ConfigError (one line) otherwise."""
    distributed = _distributed()
    if not address:
        raise ConfigError("--scheduler: --executor dask needs --scheduler ADDRESS, a running Dask scheduler "
                          "(e.g. tcp://10.0.0.1:8786; start one with `dask scheduler`)")
    where = f"--scheduler {address}"
    timeout = connect_timeout()
    _probe(distributed, address, where, timeout)
    try:
        client = distributed.Client(address, timeout=timeout, set_as_default=False)
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
