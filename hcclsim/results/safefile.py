"""Writing files so that no reader sees half of one and no two writers share one.

* ``replace(path, write)``: the file is written under a temporary name in its own folder, then renamed
  over ``path`` (os.replace is atomic on one filesystem): a crash leaves the old file or the new one.
* ``OutputLock(path)``: an exclusive, non-blocking lock on ``PATH.lock`` holding the writer's pid; a
  second writer is refused at once with that pid. The kernel drops the lock when its holder dies, so a
  lock file left by a killed run is taken over by the next one.
* ``StagedFolder(path)``: a folder of outputs (`hccl-bench run -o DIR`) filled under a temporary name and
  moved into place at the end; files of an existing folder that the run does not write are kept.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
from pathlib import Path
from typing import Self

from ..core.errors import ConfigError

try:
    import fcntl
except ImportError:                    # Windows
    fcntl = None
    import msvcrt


def _temporary(path: Path, kind: str) -> Path:
    return path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.{kind}")


def replace(path, write) -> None:
    """write(tmp) writes the new content to tmp, a fresh file beside path; it then replaces path.
    The temporary file is removed when write raises."""
    path = Path(path)
    tmp = _temporary(path, "tmp")
    os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))    # mode as open() would give
    try:
        write(str(tmp))
        with open(tmp, "rb") as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def replace_text(path, text: str) -> None:
    replace(path, lambda tmp: Path(tmp).write_text(text, encoding="utf-8"))


def _try_lock(fd: int) -> bool:
    try:
        if fcntl is not None:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        else:
            msvcrt.locking(fd, msvcrt.LK_NBLCK, 1)
    except OSError:
        return False
    return True


def _unlock(fd: int) -> None:
    if fcntl is not None:
        fcntl.flock(fd, fcntl.LOCK_UN)        # for every copy of the descriptor, forked workers' too
    else:
        os.lseek(fd, 0, os.SEEK_SET)
        msvcrt.locking(fd, msvcrt.LK_UNLCK, 1)


def _holder(fd: int) -> str:
    try:
        return os.read(fd, 32).decode("ascii", "replace").strip() or "unknown"
    except OSError:
        return "unknown"


class OutputLock:
    """The lock of one output file (module docstring); a context manager."""

    def __init__(self, path, flag: str = "-o/--output"):
        self.path = Path(f"{path}.lock")
        self.output, self.flag, self.fd = str(path), flag, None

    def __enter__(self) -> Self:
        while self.fd is None:
            try:
                fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o666)
            except OSError as e:
                raise ConfigError(f"{self.flag}: cannot write {self.output!r} ({e.strerror or e})") from None
            if not _try_lock(fd):
                holder = _holder(fd)
                os.close(fd)
                raise ConfigError(f"{self.flag}: {self.output!r} is being written by another hccl-bench (pid "
                                  f"{holder}, lock {str(self.path)!r}); wait for it to finish or write to another "
                                  f"file")
            try:
                same = os.path.samestat(os.fstat(fd), os.stat(self.path))
            except FileNotFoundError:
                same = False
            if not same:                      # its holder removed it between our open and our lock: again
                os.close(fd)
                continue
            os.ftruncate(fd, 0)
            os.write(fd, f"{os.getpid()}\n".encode())
            self.fd = fd
        return self

    def __exit__(self, *exc) -> None:
        if self.fd is None:
            return
        with contextlib.suppress(OSError):
            os.unlink(self.path)              # while still held, so no one locks a file about to vanish
        _unlock(self.fd)
        os.close(self.fd)
        self.fd = None


class StagedFolder:
    """An output folder filled under a temporary name (``.path``), moved into place by commit(), removed
    by discard(). Refused in one line, before any work, when the target is a file or cannot be written."""

    def __init__(self, target, flag: str = "-o/--output"):
        self.target, self.flag = Path(target), flag
        if not str(target).strip():
            raise ConfigError(f"{flag}: expected a folder name, got {str(target)!r}")
        blocking = next((p for p in (self.target, *self.target.parents) if p.exists() and not p.is_dir()), None)
        if blocking is not None:
            raise ConfigError(f"{flag}: {str(blocking)!r} is a file; expected a folder (new or existing) to write "
                              f"into")
        # inside an existing folder (its files are then replaced one by one), else beside the new one
        self.path = self.target / f".hccl-bench.{os.getpid()}.{secrets.token_hex(4)}.tmp" \
            if self.target.is_dir() else _temporary(self.target, "tmp")
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.path.mkdir()
        except OSError as e:
            raise ConfigError(f"{flag}: cannot write into {str(target)!r} ({e.strerror or e})") from None

    def commit(self) -> None:
        try:
            if self.target.is_dir():
                _merge(self.path, self.target)
                self.path.rmdir()
            else:
                os.rename(self.path, self.target)
        except OSError as e:
            raise ConfigError(f"{self.flag}: cannot write into {str(self.target)!r} ({e.strerror or e}); "
                              f"the files are in {str(self.path)!r}") from None

    def discard(self) -> None:
        shutil.rmtree(self.path, ignore_errors=True)


def _merge(src: Path, dest: Path) -> None:
    for entry in src.iterdir():
        if entry.is_dir() and (dest / entry.name).is_dir():
            _merge(entry, dest / entry.name)
            entry.rmdir()
        else:
            os.replace(entry, dest / entry.name)
