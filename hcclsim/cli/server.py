"""`hccl-bench server`: a warm process that runs later hccl-bench commands, so they start at once.

A cold command spends most of its time before any work: importing numpy, pandas and numba and loading
Numba's typing context and its cached kernels, about 1.8 s of the default sweep's 2.9 on a 2-core machine
(bench/startup.py). `hccl-bench server start` pays that once, in a background process; while it runs,
every hccl-bench call of the same installation hands its command to it and prints what the command
prints, exits with its status, and stops it on Ctrl-C. Nothing changes for a call when no server runs.

How (docs/performance.md, "A warm server"): the caller connects to the server's Unix socket and sends its
own stdin, stdout and stderr (the descriptors themselves, SCM_RIGHTS) with one JSON request: the
arguments, working directory, environment and umask. The server forks a worker, which takes over those
descriptors, directory and environment and runs the command as the caller would have; the server
answers the worker's pid, then its exit status. A worker is a fresh fork of the warm process: no state
of one command reaches the next.

The socket is named after a digest of what the warm process has loaded and cannot reload: the sources of
hcclsim, its algorithms and presets (path, size, modification time), the interpreter, and the environment
read at import (NUMBA_*, PYTHON*, XDG_CACHE_HOME). Any change gives another name, so an edited
installation never runs stale code; the old server stops when idle, or when `start` starts the new one. HCCL_BENCH_SERVER=0 keeps a call
local; HCCL_BENCH_SERVER_DIR moves the sockets (default $XDG_RUNTIME_DIR/hccl-bench, else
/tmp/hccl-bench-UID, mode 0700).
"""

from __future__ import annotations

import os
import signal
import socket
import sys
import time
from contextlib import suppress
from pathlib import Path

import click

from . import _client
from ._client import _recv, _send, folder, peer_is_me, private, socket_path

IDLE = 30 * 60           # seconds without a command before a server stops (a choice: an afternoon's pauses)
GONE = (OSError, KeyError, ValueError)   # a peer, file or registration already gone: nothing left to do
READY_WAIT = 600         # seconds `start` waits for the warm-up (a cold Numba cache compiles every kernel)


# -- the server ------------------------------------------------------------------------------------------

def warm_up() -> None:
    """Load what a command loads: the heavy packages, every command, and the kernels of both engines."""
    import contextlib
    import importlib
    import io

    from ..analysis import validate
    from ..results import provenance
    from . import COMMANDS, main

    for module, _, _ in COMMANDS.values():
        importlib.import_module(f"{__package__}.{module}")
    sink = io.StringIO()
    with contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink):
        for args in (["sweep", "-t", "switch8", "-c", "all", "-a", "all", "-b", "1K", "-e", "64K", "-q"],
                     ["sweep", "-t", "two-tier-128", "--set", "scale_out.domains=2", "-a", "all", "-b", "1K", "-e", "64K",
                      "--engine", "analytic,packet", "-q"]):
            main(args)
    provenance.git_revision.cache_clear()     # a worker asks git itself: HEAD may move while the server runs
    validate._run_cached.cache_clear()


def serve(path: Path, idle: float) -> None:
    """Accept commands on path until idle seconds pass with none running, or a stop request."""
    import selectors
    import threading

    if _client.digest() != path.stem:
        raise SystemExit(f"hccl-bench server: this process loaded other sources than {path.name} names "
                         f"(started from another tree?); not serving")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    partial = path.with_suffix(f".{os.getpid()}.tmp")
    listener.bind(str(partial))               # before the warm-up: a path too long fails at once
    warm_up()
    if threading.active_count() != 1:         # fork copies only this thread: another's locks would hang a worker
        partial.unlink()
        raise SystemExit(f"hccl-bench server: the warm-up left {threading.active_count() - 1} threads running; "
                         f"not serving")
    listener.listen(16)
    os.replace(partial, path)                 # callers see the socket only once it accepts
    ino = os.stat(path).st_ino
    sel = selectors.DefaultSelector()
    sel.register(listener, selectors.EVENT_READ)
    workers: dict[int, socket.socket] = {}
    info = {"pid": os.getpid(), "started": time.time(), "served": 0, "socket": str(path), "idle": idle,
            "installation": installation()}
    last = time.monotonic()
    stopping = []
    wake_r, wake_w = os.pipe()                 # a worker's end (SIGCHLD) wakes the loop at once
    os.set_blocking(wake_r, False)
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(True))
    sel.register(wake_r, selectors.EVENT_READ, "wake")
    try:
        while not stopping or workers:
            for key, _ in sel.select(timeout=1.0):
                if key.data == "wake":
                    with suppress(*GONE):
                        os.read(wake_r, 4096)
                elif key.fileobj is listener:
                    conn, _ = listener.accept()
                    if not _request(conn, sel, listener, workers, info, (wake_r, wake_w)):
                        stopping.append(True)
                    last = time.monotonic()
                else:                                  # a caller went away (killed): stop its worker
                    with suppress(*GONE):
                        os.kill(key.data, signal.SIGTERM)
                    sel.unregister(key.fileobj)
            while workers:
                pid, status = os.waitpid(-1, os.WNOHANG)
                if pid == 0:
                    break
                conn = workers.pop(pid, None)
                if conn is not None:
                    with suppress(*GONE):
                        sel.unregister(conn)
                    with suppress(*GONE):
                        _send(conn, {"status": _status(status)})
                    conn.close()
                last = time.monotonic()
            if _replaced(path, ino) or (not workers and time.monotonic() - last > idle):
                stopping.append(True)
            if stopping and listener.fileno() >= 0:     # no new commands once stopping
                sel.unregister(listener)
                _close(listener, path, ino)
    finally:
        sel.close()
        if listener.fileno() >= 0:
            _close(listener, path, ino)


def _replaced(path: Path, ino: int) -> bool:
    """Whether the socket's name is gone or another server's now."""
    try:
        return os.stat(path).st_ino != ino
    except OSError:
        return True


def installation() -> list[str]:
    """The interpreter and package folders this process runs: a server of the same installation with other
    sources (edited, upgraded) is one no call can reach any more."""
    return [sys.executable, *map(str, _client._package_dirs())]


def _close(listener: socket.socket, path: Path, ino: int) -> None:
    """Close the listening socket and remove its name, unless a newer server has taken the name."""
    listener.close()
    with suppress(*GONE):
        if os.stat(path).st_ino == ino:
            path.unlink()


def _status(wait_status: int) -> int:
    code = os.waitstatus_to_exitcode(wait_status)
    return code if code >= 0 else 128 - code


def _request(conn, sel, listener, workers, info, wake) -> bool:
    """Serve one connection; False when it asked the server to stop."""
    import selectors

    conn.settimeout(10)
    if not peer_is_me(conn):                  # only this user's calls (the folder is 0700; this checks the process)
        conn.close()
        return True
    try:
        msg, fds = _recv(conn, want_fds=3)
    except (OSError, ValueError):
        conn.close()
        return True
    conn.settimeout(None)
    op = (msg or {}).get("op")
    if op == "status":
        with suppress(*GONE):
            _send(conn, {**info, "workers": len(workers)})
        conn.close()
        return True
    if op == "stop":
        with suppress(*GONE):
            _send(conn, {"stopping": True, "workers": len(workers)})
        conn.close()
        return False
    if op != "run" or len(fds) != 3:
        for fd in fds:
            os.close(fd)
        conn.close()
        return True
    pid = os.fork()
    if pid == 0:
        status = 3
        try:
            signal.set_wakeup_fd(-1)
            sel.close()
            listener.close()
            conn.close()
            for other in workers.values():        # the other callers' connections and the wake pipe are the
                other.close()                     # server's: a worker holding them would delay their EOF
            for fd in wake:
                os.close(fd)
            status = _work(msg, fds)
        finally:
            os._exit(status)
    for fd in fds:
        os.close(fd)
    info["served"] += 1
    workers[pid] = conn
    with suppress(*GONE):
        _send(conn, {"pid": pid})
    sel.register(conn, selectors.EVENT_READ, pid)
    return True


def _work(msg: dict, fds: list[int]) -> int:
    """In the forked worker: become the caller (descriptors, directory, environment) and run its command."""
    _client.IN_WORKER = True
    for sig in (signal.SIGTERM, signal.SIGCHLD, signal.SIGHUP):
        signal.signal(sig, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        os.close(fd)
    enc, errors = msg.get("encoding") or "utf-8", msg.get("errors") or "strict"
    line = os.isatty(1) or bool(msg["env"].get("PYTHONUNBUFFERED"))
    # the worker's own streams, for the rest of its life (it ends with os._exit)
    sys.stdin = open(0, encoding=enc, closefd=False)  # noqa: SIM115
    sys.stdout = open(1, "w", encoding=enc, errors=errors, closefd=False,  # noqa: SIM115
                      buffering=1 if line else -1)
    sys.stderr = open(2, "w", encoding=enc, errors="backslashreplace", closefd=False, buffering=1)  # noqa: SIM115
    os.umask(int(msg.get("umask", 0o022)))
    os.environ.clear()
    os.environ.update(msg["env"])
    import warnings

    getattr(warnings, "_filters_mutated", lambda: None)()   # warnings the warm-up gave show again, as in a new process
    from . import main
    try:
        os.chdir(msg["cwd"])
        sys.argv = ["hccl-bench", *msg["argv"]]
        status = main(msg["argv"])
    except OSError as e:
        sys.stderr.write(f"hccl-bench: error: {e}\n")
        status = 2
    except KeyboardInterrupt:
        sys.stderr.write("hccl-bench: error: interrupted\n")
        status = 130
    except BaseException as e:  # noqa: BLE001 - the worker's last line of defence, as main()'s
        sys.stderr.write(f"hccl-bench: error: internal error in the server's worker: {type(e).__name__}: {e}\n")
        status = 3
    for stream in (sys.stdout, sys.stderr):
        with suppress(*GONE):
            stream.flush()
    return status


# -- `hccl-bench server start|stop|status` --------------------------------------------------------------

def _ask(path: Path, op: str) -> dict | None:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.settimeout(10)
        sock.connect(str(path))
        if not peer_is_me(sock):
            return None
        _send(sock, {"op": op})
        reply, _ = _recv(sock)
        return reply
    except OSError:
        return None
    finally:
        sock.close()


def status() -> dict | None:
    path = socket_path()
    return _ask(path, "status") if path.exists() else None


def start(idle: float) -> tuple[dict, bool]:
    """This installation's server (started unless one runs) and whether it was already running."""

    import fcntl

    from ..core.errors import HcclSimError

    path = socket_path()
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    if not private(path.parent):
        raise HcclSimError(f"server: {path.parent}: expected a folder of this user that no one else can read or "
                           f"write (mode 0700); fix it, or set HCCL_BENCH_SERVER_DIR to one")
    with open(path.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)       # two starts at once: the second finds the first's server
        running = status()
        if running:
            return running, True
        stop(others_only=True)
        return _spawn(path, idle), False


def _spawn(path: Path, idle: float) -> dict:
    import subprocess

    from ..core.errors import HcclSimError

    with suppress(*GONE):
        path.unlink()                          # a socket left by a server that died
    log = path.with_suffix(".log")
    with open(log, "w") as out:
        # -P and cwd /: the server imports the installation this call runs, not a tree in the caller's folder
        proc = subprocess.Popen([sys.executable, "-P", "-m", "hcclsim.cli.server", str(path), str(idle)],
                                stdin=subprocess.DEVNULL, stdout=out, stderr=out, start_new_session=True,
                                close_fds=True, cwd="/")
    deadline = time.monotonic() + READY_WAIT
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            tail = log.read_text(errors="replace").strip().splitlines()[-1:] or ["(no output)"]
            raise HcclSimError(f"server: it stopped while warming up (status {proc.returncode}): {tail[0]} "
                               f"(log: {log})")
        reply = status()
        if reply:
            return reply
        time.sleep(0.1)
    proc.terminate()
    raise HcclSimError(f"server: not ready after {READY_WAIT} s (log: {log})")


def stop(others_only: bool = False) -> dict | None:
    """Stop this user's servers: the one of this installation (its reply, or None when none ran) and those
    of other sources (an older version, an edited tree), which no call can reach any more."""
    mine, reply, ours = socket_path(), None, installation()
    for path in sorted(folder().glob("*.sock")) if private(folder()) else []:
        if path == mine:
            if not others_only:
                reply = _ask(path, "stop")
        elif (_ask(path, "status") or {}).get("installation") == ours:    # not another venv's or tree's
            _ask(path, "stop")
    return reply


def _describe(info: dict) -> str:
    up = time.time() - info["started"]
    return (f"pid {info['pid']}, up {up / 60:.1f} min, {info['served']} commands served, stops after "
            f"{info['idle'] / 60:g} min idle; socket {info['socket']}")


@click.command("server")
@click.argument("action", type=click.Choice(["start", "stop", "status"]))
@click.option("--idle", type=click.FloatRange(min=0, min_open=True), default=IDLE / 60, show_default=True,
              metavar="MINUTES", help="start: stop after this many minutes without a command.")
def server_cmd(action, idle):
    """Keep a warm hccl-bench in the background, so that later commands start at once.

    `start` loads numpy, pandas, numba and the kernels once (a few seconds; minutes with a cold Numba
    cache); every later hccl-bench call of this installation, from any shell of this user, then runs in a
    fork of it: same output, exit status and Ctrl-C, without the ~2 s of start-up. A call runs locally when
    no server runs, with HCCL_BENCH_SERVER=0, or after the sources change (a new server is needed:
    `start` again, which stops the old one). `status` says whether one runs; `stop` stops this user's
    servers, each after its running commands.
    """
    if action == "start":
        info, already = start(idle * 60)
        click.echo(f"hccl-bench server {'already running' if already else 'ready'}: {_describe(info)}")
    elif action == "status":
        info = status()
        click.echo(f"hccl-bench server: {_describe(info)}" if info else
                   f"hccl-bench server: not running for this installation (socket {socket_path()})")
    else:
        info = stop()
        click.echo(f"hccl-bench server: stopping after {info['workers']} running commands" if info else
                   "hccl-bench server: not running for this installation")
    return 0


if __name__ == "__main__":
    serve(Path(sys.argv[1]), float(sys.argv[2]))
