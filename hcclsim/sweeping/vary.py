"""What-ifs on the command line: `--set KEY=[a,b,c]` (or `--vary KEY=a,b,c`) sweeps a topology or endpoint
key, one topology per value (per combination, with several such keys), the value in a column of its own.

A list given to a key that takes one value varies it; a key that takes a list (dims, endpoint.algorithms,
endpoint.hidden; a graph's links, a list of lists) varies only with a list of such values (`--set
"dims=[[2,4],[4,4]]"`) or --vary.
"""

from __future__ import annotations

import itertools
import tomllib

from ..core.errors import ConfigError

# keys whose one value is a list, and how deep (a graph's links: a list of [a, b, count] lists)
LIST_KEYS = {"dims": 1, "endpoint.hidden": 1, "endpoint.algorithms": 1, "links": 2}


def _list_depth(key: str) -> int:
    key = key.removeprefix("topology.")
    return max((d for k, d in LIST_KEYS.items() if key == k or key.startswith(f"{k}.")), default=0)


def _nested(value, depth: int) -> bool:
    """value is a list nested depth deep (depth 0: anything)."""
    return depth == 0 or isinstance(value, list) and all(_nested(v, depth - 1) for v in value)


def split(overrides, varies=()) -> tuple[list[str], list[tuple[str, list[str]]]]:
    """(--set items that stay fixed, [(key, [value text, ...]) varied]) from --set and --vary items."""
    fixed, axes = [], []
    for item in overrides:
        key, eq, raw = item.partition("=")
        raw = raw.strip()
        try:
            value = tomllib.loads(f"v = {raw}")["v"] if eq else None
        except tomllib.TOMLDecodeError:            # [1us, 2us]: bare words, as --set reads one
            value = [v.strip() for v in raw[1:-1].split(",") if v.strip()] if raw[:1] == "[" and raw[-1:] == "]" \
                else None
        depth = _list_depth(key)
        many = isinstance(value, list) and all(_nested(v, depth) for v in value)
        if not many:
            fixed.append(item)
            continue
        if not value:
            raise ConfigError(f"--set {key.strip()}: an empty list varies nothing; expected [a, b, ...]")
        axes.append((key.strip(), [_toml(v) for v in value]))
    for item in varies:
        key, eq, raw = item.partition("=")
        values = [v.strip() for v in raw.split(",") if v.strip()] if eq else []
        if not key.strip() or not values:
            raise ConfigError(f"--vary: expected KEY=a,b,c (e.g. --vary scale_out.oversubscription=1,2,4), "
                              f"got {item!r}")
        axes.append((key.strip(), values))
    seen = [k for k, _ in axes]
    for key in seen:
        if seen.count(key) > 1 or any(f.partition("=")[0].strip() == key for f in fixed):
            raise ConfigError(f"--set/--vary {key}: given more than once; expected each key once")
    return fixed, axes


def _toml(value) -> str:
    """One element of a TOML array back as --set text (strings bare, as --set reads them)."""
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return "[" + ",".join(_toml(v) if not isinstance(v, str) else f'"{v}"' for v in value) + "]"
    return str(value)


def combinations(axes) -> list[list[tuple[str, str]]]:
    """Every combination of the varied values, in the order given (the first key slowest)."""
    return [list(zip([k for k, _ in axes], values)) for values in itertools.product(*(v for _, v in axes))]
