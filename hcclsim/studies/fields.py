"""Values of a scenario file shared by every kind of section (hcclsim.studies.scenario and the workload
sections): whole numbers, `vary` tables, and a varied value as a --set literal or a table column."""

from __future__ import annotations

import json

from ..core.errors import ConfigError


def whole_number(lo):
    def parse(v, where):
        if isinstance(v, bool) or not isinstance(v, int) or v < lo:
            raise ConfigError(f"{where}: expected a whole number >= {lo}, got {v!r}")
        return v
    return parse


def toml_literal(value, where: str, nested: bool = False) -> str:
    """A vary value as the right-hand side of a --set override (scalars, or a list of them)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)            # a TOML basic string
    if isinstance(value, list) and not nested:
        return "[" + ", ".join(toml_literal(x, where, True) for x in value) + "]"
    raise ConfigError(f"{where}: expected strings, numbers, booleans or lists of them, got {value!r}")


def column_value(value):
    """A varied value as its table column shows it: scalars as written, lists as their TOML text."""
    return toml_literal(value, "vary") if isinstance(value, list) else value


def parse_vary(v, where) -> list:
    if not isinstance(v, dict) or not v:
        raise ConfigError(f'{where}: expected a table of KEY = [values...], e.g. vary = {{ "scale_up.ranks" = '
                          f'[4, 8, 16] }}, got {v!r}')
    out = []
    for key, values in v.items():
        if not isinstance(values, list) or not values:
            raise ConfigError(f"{where}.{key}: expected a non-empty list of values, got {values!r}")
        for x in values:
            toml_literal(x, f"{where}.{key}")
        if len({toml_literal(x, key) for x in values}) != len(values):
            raise ConfigError(f"{where}.{key}: a value is listed twice in {values!r}")
        out.append((key, list(values)))
    return out
