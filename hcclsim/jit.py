"""Numba options, set in one place. Kernels are named ``*_kernel`` and take arrays and scalars only.

``NUMBA_DISABLE_JIT=1`` runs every kernel as plain Python (slow, but traceable and
measurable by coverage).
"""

from __future__ import annotations

import numba

njit = numba.njit(cache=True, nogil=True)

# small helpers of hot loops: inlined into their caller at Numba IR level (no call, no refcounts)
njit_inline = numba.njit(cache=True, nogil=True, inline="always")
