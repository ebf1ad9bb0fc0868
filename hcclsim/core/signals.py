"""Ctrl-C and SIGTERM held back while something must not be cut in two."""

from __future__ import annotations

import signal
from contextlib import contextmanager


@contextmanager
def held_back():
    """SIGINT and SIGTERM blocked in this thread (delivered when the block ends), where the platform can: for
    work that a KeyboardInterrupt must not split (a results row written but not counted; a child process
    that inherits the mask while it starts)."""
    if not hasattr(signal, "pthread_sigmask"):
        yield
        return
    old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)
