"""One exception family. Library code raises these; only the CLI prints them.

Exit statuses (mapped in ``hcclsim.cli``): 0 success, 1 a performance gate
failed, 2 invalid input (every ``HcclSimError`` except ``InternalError``),
3 internal error.
"""

from __future__ import annotations

import difflib


class HcclSimError(Exception):
    """Base of every error hccl-bench raises on purpose."""

    exit_status = 2


class ConfigError(HcclSimError):
    """A flag, file or key holds something that is not what was expected."""


class TopologyError(HcclSimError):
    """A topology that cannot be built or routed (e.g. disconnected)."""


class ScheduleError(HcclSimError):
    """A schedule that is malformed or does not compute its collective."""


class UnsupportedError(HcclSimError):
    """An algorithm cannot run this collective on this topology or rank count."""


class InternalError(HcclSimError):
    exit_status = 3


def suggest(name: str, choices) -> str:
    """' (did you mean X?)' for the closest choice, or '' when none is close."""
    close = difflib.get_close_matches(str(name), [str(c) for c in choices], n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


def unknown(what: str, name: str, choices) -> ConfigError:
    """A uniform 'unknown X' error that lists what exists and suggests the closest."""
    choices = sorted(str(c) for c in choices)
    return ConfigError(f"unknown {what} {name!r}{suggest(name, choices)}; expected one of: {', '.join(choices)}")
