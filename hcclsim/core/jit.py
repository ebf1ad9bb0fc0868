"""Numba options, set in one place. Kernels are named ``*_kernel`` and take arrays and scalars only.

``NUMBA_DISABLE_JIT=1`` runs every kernel as plain Python (slow, but traceable and
measurable by coverage).

Numba is imported when a kernel first runs, not when a module defining one is imported: importing
numba takes about 0.3 s, and a command that reads files, prints help or refuses its input runs no
kernel (tests/test_startup.py). A kernel is a ``Kernel`` until then; a kernel that calls another
compiles against the other's Numba dispatcher (numba types a Kernel as that dispatcher).

Compiled kernels are cached on disk (``cache=True``). Numba keys a cached kernel by its own
source file only, so a kernel that calls a function from another module (every engine calls
``route_kernel``) would keep stale machine code after that module changed. The cache therefore
lives in a folder named after a digest of all of hcclsim's sources: any change starts a fresh
cache. ``NUMBA_CACHE_DIR`` still overrides it.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import threading
from pathlib import Path

_lock = threading.Lock()
_numba = None


def sources() -> list[Path]:
    """Every source file of the hcclsim package (this file is hcclsim/core/jit.py)."""
    return sorted(Path(__file__).resolve().parent.parent.rglob("*.py"))


# Cache folders of other sources (older versions, edited trees) kept: the newest few, and any used within
# two weeks (another installed version still in use); a choice, not a measurement.
KEEP_FOLDERS, KEEP_SECONDS = 3, 14 * 86400


def _cache_dir() -> str:
    digest = hashlib.sha1()
    for path in sources():
        digest.update(path.read_bytes())
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "hccl-bench"
    folder = base / f"numba-{digest.hexdigest()[:16]}"
    if not folder.is_dir():
        prune(base)
    folder.mkdir(parents=True, exist_ok=True)
    os.utime(folder)                            # marks it in use for prune()
    return str(folder)


def prune(base: Path, now: float | None = None) -> list[Path]:
    """Delete the cache folders of other sources that are neither among the newest KEEP_FOLDERS nor used
    within KEEP_SECONDS (each new digest left one behind: hundreds of MB after a few upgrades)."""
    import shutil
    import time

    now = time.time() if now is None else now
    used = {}
    for folder in base.glob("numba-*"):
        with contextlib.suppress(OSError):          # another process may be pruning too
            used[folder] = folder.stat().st_mtime
    newest = sorted(used, key=used.get, reverse=True)
    old = [f for f in newest[KEEP_FOLDERS:] if now - used[f] > KEEP_SECONDS]
    for folder in old:
        shutil.rmtree(folder, ignore_errors=True)
    return old


def _load_numba():
    """numba, imported once, with the cache folder set and Kernel known to its typing."""
    global _numba
    if _numba is None:
        import numba
        from numba.extending import typeof_impl

        if not os.environ.get("NUMBA_CACHE_DIR"):
            numba.config.CACHE_DIR = _cache_dir()
        typeof_impl.register(Kernel)(lambda kernel, c: numba.typeof(kernel.dispatcher()))
        _numba = numba
    return _numba


class Kernel:
    """A function that Numba compiles (or loads from the cache) on its first call.

    targetoptions and py_func are the names Numba's inlining pass reads off a dispatcher."""

    def __init__(self, fn, **options):
        functools.update_wrapper(self, fn)
        self.py_func = fn
        self.targetoptions = {"cache": True, "nogil": True, **options}
        self._dispatcher = None

    def dispatcher(self):
        if self._dispatcher is None:
            with _lock:
                if self._dispatcher is None:
                    self._dispatcher = _load_numba().njit(**self.targetoptions)(self.py_func)
        return self._dispatcher

    def __call__(self, *args):
        return self.dispatcher()(*args)


def njit(fn) -> Kernel:
    return Kernel(fn)


def njit_inline(fn) -> Kernel:
    """A small helper of hot loops: inlined into its caller at Numba IR level (no call, no refcounts)."""
    return Kernel(fn, inline="always")
