"""Values of a scenario file shared by every kind of section (hcclsim.studies.scenario and the workload
sections): whole numbers, `vary` tables, a varied value as a --set literal or a table column, and a traffic
matrix."""

from __future__ import annotations

import json

from ..core.errors import ConfigError
from ..core.names import ALL_TO_ALLV, PP_RING, SEND_RECV
from ..schedule import matrix as M


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


def parse_matrix(v, where: str, collectives: list[str], topologies) -> str:
    """A `matrix` key: all_to_allv's traffic as --matrix takes it (a .csv or .npy file, or a distribution),
    read against every topology of the section now, so a bad file or rank count is refused on load."""
    if not isinstance(v, str) or not v.strip():
        raise ConfigError(f'{where}: expected a --matrix value such as "zipf:1.2" or "traffic.csv", got {v!r}')
    if ALL_TO_ALLV not in collectives:
        raise ConfigError(f"{where}: sets all_to_allv's traffic; the collectives are {', '.join(collectives)}")
    if {SEND_RECV, PP_RING} & set(collectives):
        raise ConfigError(f"{where}: sets all_to_allv's traffic, and send_recv and pp_ring keep their own pattern; "
                          f"give them their own section without matrix")
    for topo in topologies:
        M.parse(v, topo.nranks, where)
    return v.strip()
