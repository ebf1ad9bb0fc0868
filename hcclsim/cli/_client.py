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

# what a process reads once, at start-up or import: Numba's and Python's settings, the cache folder, the
# dynamic loader's and the math libraries' threads
ENV_PREFIXES = ("NUMBA_", "PYTHON", "XDG_CACHE_HOME", "HOME", "LD_", "OMP_", "MKL_", "OPENBLAS_")
PACKAGES = ("hcclsim", "hcclsim.algorithms", "hcclsim.topologies", "hcclsim.scenarios", "hcclsim.validation")
LOCAL = {"--help", "-h", "--version"}   # answered faster here than by a fork of the server (no numpy to load)
REPLY_WAIT = 10.0        # seconds for the server to take a command before this call runs it itself (a choice)
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
    for entry in sys.path:                     # installed distributions: numpy, numba, pandas, plug-ins
        if entry.endswith("-packages") and os.path.isdir(entry):
            for name in sorted(os.listdir(entry)):
                if name.endswith((".dist-info", ".egg-info", ".pth")):
                    h.update(f"{name}\0{os.stat(os.path.join(entry, name)).st_mtime_ns}\0".encode())
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
        st = os.lstat(path)                    # a symlink, which another user could re-point, is not private
    except OSError:
        return False
    import stat

    return stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid() and not st.st_mode & 0o077


def peer_is_me(sock: socket.socket) -> bool:
    """Whether the process at the other end of a connected Unix socket runs as this user (Linux: SO_PEERCRED;
    elsewhere the folder's permissions alone)."""
    cred = getattr(socket, "SO_PEERCRED", None)
    if cred is None:
        return True
    _, uid, _ = struct.unpack("3i", sock.getsockopt(socket.SOL_SOCKET, cred, struct.calcsize("3i")))
    return uid == os.getuid()


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
            or LOCAL.intersection(argv) or any(_own_fd(a) for a in argv)):
        return None
    path = socket_path()
    if not path.exists() or not private(path.parent):
        return None
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(REPLY_WAIT)
    try:
        sock.connect(str(path))
        if not peer_is_me(sock):
            raise OSError("another user's socket")
    except OSError:
        sock.close()
        return None
    relay = _Relay()
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
    except OSError:                             # includes a server too busy to answer within REPLY_WAIT
        started = None
    finally:
        for fd in opened:
            os.close(fd)
    if not started or "pid" not in started:
        sock.close()
        relay.restore()
        if relay.pending:                       # Ctrl-C before the server took the command: nothing ran
            sys.stderr.write("hccl-bench: error: interrupted\n")
            return 128 + relay.pending[0]
        return None
    sock.settimeout(None)
    return _wait(sock, started["pid"], relay)


def _own_fd(arg: str) -> bool:
    """An argument naming one of this process's descriptors beyond stdio (`<(...)`, /dev/fd/3), which a
    worker of the server does not have."""
    for prefix in ("/dev/fd/", "/proc/self/fd/"):
        if arg.startswith(prefix) and arg[len(prefix):].isdigit() and int(arg[len(prefix):]) > 2:
            return True
    return False


class _Relay:
    """Signals to this process go on to the worker (Ctrl-C, kill, a closed terminal; Ctrl-Z stops both, and
    `fg` resumes both); those that come before the worker is known are kept and sent when it is."""

    FORWARD = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)

    def __init__(self):
        self.pid, self.pending = None, []
        self.previous = {s: signal.signal(s, self._forward) for s in self.FORWARD}
        for s, h in ((signal.SIGTSTP, self._stop), (signal.SIGCONT, self._cont)):
            self.previous[s] = signal.signal(s, h)

    def _send(self, signum):
        try:
            os.kill(self.pid, signum)
        except OSError:
            pass

    def _forward(self, signum, frame):
        if self.pid is None:
            self.pending.append(signum)
        else:
            self._send(signum)

    def _stop(self, signum, frame):
        if self.pid is not None:
            self._send(signal.SIGSTOP)
        os.kill(os.getpid(), signal.SIGSTOP)

    def _cont(self, signum, frame):
        if self.pid is not None:
            self._send(signal.SIGCONT)

    def started(self, pid: int) -> None:
        self.pid = pid
        for signum in self.pending:
            self._send(signum)

    def restore(self) -> None:
        for s, h in self.previous.items():
            signal.signal(s, h)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _wait(sock: socket.socket, pid: int, relay: _Relay) -> int:
    """The worker's exit status, signals relayed meanwhile."""
    relay.started(pid)
    try:
        while True:
            try:
                done, _ = _recv(sock)
                break
            except InterruptedError:
                continue
    finally:
        relay.restore()
        sock.close()
    if done is None or "status" not in done:
        sys.stderr.write("hccl-bench: error: the server's worker ended without a status "
                         "(see `hccl-bench server status`)\n")
        return 3
    return int(done["status"])
