"""The caller's side of `hccl-bench server` (hcclsim/cli/server.py): find this installation's warm server,
hand it the command, relay signals, return its exit status. Standard library only, as it runs before any
command is imported.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import socket
import struct
import sys
from pathlib import Path

ENV_PREFIXES = ("NUMBA_", "PYTHON", "XDG_CACHE_HOME")
PACKAGES = ("hcclsim", "hcclsim.algorithms", "hcclsim.topologies", "hcclsim.scenarios")   # as installed (pyproject)
LOCAL = {"--help", "-h", "--version"}   # answered faster here than by a fork of the server (no numpy to load)
IN_WORKER = False        # set in a forked worker: its command runs here, not in yet another server


# -- where the server is ------------------------------------------------------------------------------

def _package_dirs() -> list[Path]:
    import importlib.util

    out = []
    for name in PACKAGES:
        spec = importlib.util.find_spec(name)
        if spec is not None and spec.submodule_search_locations:
            out.extend(Path(p) for p in spec.submodule_search_locations)
    return out


def digest() -> str:
    """What a warm process depends on and cannot reload, as 16 hex digits."""
    h = hashlib.sha1()
    h.update(f"{sys.executable}\0{sys.version}\0".encode())
    for base in _package_dirs():
        for root, dirs, files in os.walk(base):
            dirs[:] = sorted(d for d in dirs if d != "__pycache__")
            for name in sorted(files):
                if name.endswith((".py", ".toml")):
                    st = os.stat(os.path.join(root, name))
                    h.update(f"{root}/{name}\0{st.st_size}\0{st.st_mtime_ns}\0".encode())
    for key in sorted(os.environ):
        if key.startswith(ENV_PREFIXES):
            h.update(f"{key}={os.environ[key]}\0".encode())
    return h.hexdigest()[:16]


def folder() -> Path:
    explicit = os.environ.get("HCCL_BENCH_SERVER_DIR")
    if explicit:
        return Path(explicit)
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    return Path(runtime) / "hccl-bench" if runtime else Path(f"/tmp/hccl-bench-{os.getuid()}")


def private(path: Path) -> bool:
    """Whether path is a folder of this user that no one else can write to (or read): only then are its
    sockets this user's servers, and only then does a server put its socket there."""
    try:
        st = os.stat(path)
    except OSError:
        return False
    import stat

    return stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid() and not st.st_mode & 0o077


def socket_path(key: str | None = None) -> Path:
    return folder() / f"{key or digest()}.sock"


# -- the framing: a 4-byte length, then JSON ----------------------------------------------------------

def _send(sock: socket.socket, obj: dict, fds: list[int] = ()) -> None:
    data = json.dumps(obj).encode()
    data = struct.pack("!I", len(data)) + data
    if fds:
        socket.send_fds(sock, [data], list(fds))
    else:
        sock.sendall(data)


def _recv(sock: socket.socket, want_fds: int = 0) -> tuple[dict | None, list[int]]:
    """One message and the descriptors that came with it; (None, []) at end of stream."""
    buf, fds = b"", []
    while len(buf) < 4 or len(buf) < 4 + struct.unpack("!I", buf[:4])[0]:
        if want_fds and not fds:
            chunk, got, _, _ = socket.recv_fds(sock, 1 << 16, want_fds)
            fds = list(got)
        else:
            chunk = sock.recv(1 << 16)
        if not chunk:
            for fd in fds:
                os.close(fd)
            return None, []
        buf += chunk
    return json.loads(buf[4:]), fds


# -- the caller's side ---------------------------------------------------------------------------------

def forward(argv: list[str]) -> int | None:
    """Run argv in this installation's server and return its exit status; None when no server takes it
    (none running, switched off, or it failed before starting the command), so the caller runs it itself."""
    if (IN_WORKER or os.environ.get("HCCL_BENCH_SERVER", "").strip() == "0" or not argv or argv[0] == "server"
            or LOCAL.intersection(argv)):
        return None
    path = socket_path()
    if not path.exists() or not private(path.parent):
        return None
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(str(path))
    except OSError:
        sock.close()
        return None
    opened = []
    try:
        fds = []
        for fd in (0, 1, 2):
            try:
                os.fstat(fd)
                fds.append(fd)
            except OSError:                     # a closed descriptor: the command gets /dev/null
                opened.append(os.open(os.devnull, os.O_RDWR))
                fds.append(opened[-1])
        out = sys.stdout
        _send(sock, {"op": "run", "argv": list(argv), "cwd": os.getcwd(), "env": dict(os.environ),
                     "umask": _umask(), "encoding": getattr(out, "encoding", None) or "utf-8",
                     "errors": getattr(out, "errors", None) or "strict"}, fds)
        started, _ = _recv(sock)
    except OSError:
        sock.close()
        return None
    finally:
        for fd in opened:
            os.close(fd)
    if not started or "pid" not in started:
        sock.close()
        return None
    return _wait(sock, started["pid"])


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _wait(sock: socket.socket, pid: int) -> int:
    """The worker's exit status; signals this process gets (Ctrl-C, kill, a closed terminal) go on to it."""
    def relay(signum, frame):
        try:
            os.kill(pid, signum)
        except OSError:
            pass
    caught = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)
    previous = {s: signal.signal(s, relay) for s in caught}
    try:
        while True:
            try:
                done, _ = _recv(sock)
                break
            except InterruptedError:
                continue
    finally:
        for s, h in previous.items():
            signal.signal(s, h)
        sock.close()
    if done is None or "status" not in done:
        sys.stderr.write("hccl-bench: error: the server's worker ended without a status "
                         "(see `hccl-bench server status`)\n")
        return 3
    return int(done["status"])
