"""Numba options, set in one place. Kernels are named ``*_kernel`` and take arrays and scalars only.

``NUMBA_DISABLE_JIT=1`` runs every kernel as plain Python (slow, but traceable and
measurable by coverage).

Compiled kernels are cached on disk (``cache=True``). Numba keys a cached kernel by its own
source file only, so a kernel that calls a function from another module (every engine calls
``route_kernel``) would keep stale machine code after that module changed. The cache therefore
lives in a folder named after a digest of all of hcclsim's sources: any change starts a fresh
cache. ``NUMBA_CACHE_DIR`` still overrides it.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import numba


def sources() -> list[Path]:
    """Every source file of the hcclsim package (this file is hcclsim/core/jit.py)."""
    return sorted(Path(__file__).resolve().parent.parent.rglob("*.py"))


def _cache_dir() -> str:
    digest = hashlib.sha1()
    for path in sources():
        digest.update(path.read_bytes())
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "hccl-bench"
    return str(base / f"numba-{digest.hexdigest()[:16]}")


if not os.environ.get("NUMBA_CACHE_DIR"):
    numba.config.CACHE_DIR = _cache_dir()

njit = numba.njit(cache=True, nogil=True)

# small helpers of hot loops: inlined into their caller at Numba IR level (no call, no refcounts)
njit_inline = numba.njit(cache=True, nogil=True, inline="always")
