"""The memory budget of one point, and the one-line refusal of a point estimated past it.

Every stage that allocates in proportion to what a user asked for estimates that first, from the
problem's dimensions, and calls ``check`` before it builds anything: topology construction
(hcclsim.network.topology), schedule compilation and the engines (hcclsim.sweeping.budget,
hcclsim.engine.packet), iteration samples, workload graphs (hcclsim.studies.workload). A point past the
budget is refused with exit status 2, its estimate, the budget and the way out (docs/config.md,
"Memory budget").

The budget is, first that is set: ``limited(SIZE)`` around a call (``--max-memory SIZE``, the API's
``max_memory=``, a sweep's workers), the environment variable HCCL_BENCH_MAX_MEMORY, else ``default()``.
"""

from __future__ import annotations

import os
from contextlib import contextmanager

from .errors import ConfigError
from .units import parse_size

ENV = "HCCL_BENCH_MAX_MEMORY"
# 4 GiB: the packet engine's budget since it was written (docs/packet.md): every test, `make run`,
# bench/ and scenario point fits in under 1 GiB, and a laptop of 8 GiB keeps room for the rest of
# the system. Capped at half the physical memory, so a small CI runner refuses before the OOM killer
# acts. It bounds one point: with --jobs N up to N points run at once.
CAP = 4 << 30


class BudgetError(ConfigError):
    """A point estimated past the memory budget (exit status 2)."""


def default() -> int:
    """min(CAP, half the physical memory); CAP where the machine does not say."""
    try:
        physical = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, OSError, ValueError):
        return CAP
    return min(CAP, physical // 2) if physical > 0 else CAP


def parse(value, where: str = "--max-memory") -> int:
    """A budget such as 512M, 8G or 2T (bytes; K = 1024), at least 1 byte."""
    n = parse_size(value, where)
    if n < 1:
        raise ConfigError(f"{where}: expected a memory budget of at least 1 byte (e.g. 8G), got {value!r}")
    return n


class Limit:
    """A budget in force: the innermost limited() value, else the environment variable `env` (read with
    parse(raw, env)), else default(). The memory budget here and the packet engine's event budget
    (hcclsim.sweeping.cost) are two of them."""

    def __init__(self, env: str, parse, default):
        self.env, self.parse, self.default, self._stack = env, parse, default, []

    def current(self) -> int:
        if self._stack:
            return self._stack[-1]
        raw = os.environ.get(self.env, "").strip()
        return self.parse(raw, self.env) if raw else self.default()

    @contextmanager
    def limited(self, value: int | None):
        """Run the body under this budget (None: keep the one in force)."""
        if value is None:
            yield
            return
        self._stack.append(int(value))
        try:
            yield
        finally:
            self._stack.pop()


MEMORY = Limit(ENV, parse, default)
current, limited = MEMORY.current, MEMORY.limited


def format_bytes(n: float) -> str:
    """1.5 GiB, 310 MiB, 12 KiB, 100 B (binary units, as the budget is given)."""
    for unit, scale in (("EiB", 1 << 60), ("PiB", 1 << 50), ("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20),
                        ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:.3g} {unit}"
    return f"{int(n)} B"


def check(nbytes: float, what: str, smaller: str) -> None:
    """Refuse (BudgetError) when nbytes is over the budget: what names the point ('--engine packet:
    all_reduce ring on switch8 at 1G'), smaller says how to ask for less ('use fewer ranks')."""
    limit = current()
    if nbytes > limit:
        raise BudgetError(f"{what} needs about {format_bytes(nbytes)}, over the {format_bytes(limit)} memory "
                          f"budget; {smaller}, or raise the budget with --max-memory SIZE or {ENV}=SIZE")
