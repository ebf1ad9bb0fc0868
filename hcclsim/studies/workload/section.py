"""[[workload]] sections of a scenario file: the schema (docs/studies/README.md, "Workload sections").

run_section(table, where) checks the whole table first (check_section: unknown keys with a suggestion, bad
values, every topology of every combination built), then builds and simulates one workload per variant x
case x combination of list-valued parameters x `vary` value, and returns one row for each.
"""

from __future__ import annotations

import itertools
import json

import pandas as pd

from ...core.errors import ConfigError, HcclSimError, suggest
from ...core.units import DTYPE_SIZE, parse_dtype, parse_size, parse_time
from ...engine.execution import LAUNCHES
from ...network.config import DEFAULT_PRESET, _bool, _choice, load_topology
from ...network.params import EXECUTIONS
from ...schedule import collectives as C
from ...sweeping.sweep import ENGINES
from ..fields import parse_vary, toml_literal, whole_number
from .collective import PERCENTILES, CollectiveTimer
from .fluid import simulate
from .ops import Device
from .patterns import COLLECTIVE_SETS, PATTERNS, SCHEDULES
from .summary import summarize

# ---------------------------------------------------------------------------------- value parsers

def _str(v, where):
    if not isinstance(v, str) or not v.strip():
        raise ConfigError(f"{where}: expected a non-empty string, got {v!r}")
    return v.strip()


def _share(v, where):
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v < 1:
        raise ConfigError(f"{where}: expected a fraction of the compute units in [0, 1), got {v!r}")
    return float(v)


def _time(v, where):
    parse_time(v, where)
    return v


def _size(v, where):
    n = parse_size(v, where)
    if n < 1:
        raise ConfigError(f"{where}: expected a size of at least 1 byte, got {v!r}")
    return n


def _collective(v, where):
    return C.canonical(_str(v, where), where)


def _algorithm(v, where):
    """An algorithm spec as `sweep -a` takes one ('ring', 'in_switch:chunks=8', 'auto'), checked by name."""
    spec = _str(v, where)
    if spec != "auto":
        from ...schedule.algorithm import parse_spec

        parse_spec(spec, where)
    return spec


# Parameters: (parser, default). May be given in the section or a variant; a list sweeps its values.
SHARED = {
    "engine": (_choice(tuple(ENGINES), "value"), "analytic"),
    "algorithm": (_algorithm, "auto"),
    "execution": (_choice(EXECUTIONS, "value"), None),       # None: the topology's [endpoint] execution
    "sm_share": (_share, None),                            # None: the topology's [endpoint] sm_share
    "gemm_tile": (whole_number(0), 0),
    "launch": (_choice(LAUNCHES, "value"), "host"),
    "skew": (_time, 0),
    "jitter": (_time, 0),
}
PARAMS = {
    "overlap": {"m": (whole_number(1), None), "n": (whole_number(1), None), "k": (whole_number(1), None),
                "collective": (_collective, "all_reduce"), "size": (_size, None), "count": (whole_number(0), 0)},
    "tp_layer": {"tokens": (whole_number(1), None), "hidden": (whole_number(1), None), "ffn": (whole_number(1), None),
                 "qkv": (whole_number(1), None), "seq": (whole_number(1), None), "causal": (_bool, True),
                 "gated": (_bool, False), "tp": (whole_number(0), 0), "schedule": (_choice(SCHEDULES, "value"), "sequential"),
                 "collectives": (_choice(COLLECTIVE_SETS, "value"), "all_reduce"), "chunks": (whole_number(1), 4),
                 "tiles": (whole_number(1), 64)},
}
REQUIRED = {"overlap": ("m", "n", "k", "size"), "tp_layer": ("tokens", "hidden")}
SECTION_ONLY = {"name", "description", "kind", "topology", "set", "vary", "iters", "seed", "percentile",
                "dtype", "baseline", "cases", "variant"}
VARIANT_ONLY = {"name", "description", "set", "vary"}


def _check_keys(table: dict, allowed, where: str) -> None:
    for key in table:
        if key not in allowed:
            raise ConfigError(f"{where}: {key}: unknown key{suggest(key, sorted(allowed))}; expected one of: "
                              f"{', '.join(sorted(allowed))}")


def _overrides(v, where) -> list:
    if isinstance(v, str) or not isinstance(v, list) or not all(isinstance(x, str) for x in v):
        raise ConfigError(f'{where}: expected a list of "KEY=VALUE" strings, got {v!r}')
    return list(v)


def _params(table: dict, kind: str, where: str) -> dict:
    """The parameters a table sets, each as a list of parsed values (a scalar is a one-value list)."""
    spec = {**SHARED, **PARAMS[kind]}
    out = {}
    for key, (parse, _) in spec.items():
        if key in table:
            raw = table[key]
            values = raw if isinstance(raw, list) else [raw]
            if not values:
                raise ConfigError(f"{where}: {key}: expected a value or a non-empty list of values")
            out[key] = [parse(x, f"{where}: {key}") for x in values]
    return out


# ------------------------------------------------------------------------------------------ plan

def plan(table: dict, where: str) -> dict:
    """The section checked: kind, base settings, cases, and the variants with their parameter lists."""
    if not isinstance(table, dict):
        raise ConfigError(f"{where}: expected a table [[workload]]")
    kind = table.get("kind")
    if kind is None:
        raise ConfigError(f"{where}: kind is missing; expected one of: {', '.join(PATTERNS)}")
    _choice(tuple(PATTERNS), "value")(kind, f"{where}: kind")
    _check_keys(table, SECTION_ONLY | set(SHARED) | set(PARAMS[kind]), where)
    base = {
        "name": _str(table.get("name", "workload"), f"{where}: name"),
        "topology": _str(table.get("topology", DEFAULT_PRESET), f"{where}: topology"),
        "set": _overrides(table.get("set", []), f"{where}: set"),
        "vary": parse_vary(table["vary"], f"{where}: vary") if "vary" in table else [],
        "iters": whole_number(1)(table.get("iters", 1), f"{where}: iters"),
        "seed": whole_number(0)(table.get("seed", 0), f"{where}: seed"),
        "percentile": _choice(PERCENTILES, "value")(table.get("percentile", "p50"), f"{where}: percentile"),
    }
    try:
        base["dtype"] = parse_dtype(table.get("dtype", "bfloat16"), "dtype")
    except HcclSimError as e:
        raise ConfigError(f"{where}: {e}") from None
    params = _params(table, kind, where)
    cases = _cases(table.get("cases"), kind, f"{where}: cases")
    raw_variants = table.get("variant", [{"name": "base"}])
    if not isinstance(raw_variants, list) or not raw_variants:
        raise ConfigError(f"{where}: variant: expected [[workload.variant]] tables")
    variants, names = [], []
    for i, v in enumerate(raw_variants, 1):
        vw = f"{where}: variant #{i}"
        if not isinstance(v, dict):
            raise ConfigError(f"{vw}: expected a table [[workload.variant]]")
        name = _str(v.get("name", f"variant{i}"), f"{vw}: name")
        vw = f"{where}: variant {name!r}"
        if name in names:
            raise ConfigError(f"{vw}: name: another variant is named {name!r}; names must be unique")
        names.append(name)
        _check_keys(v, VARIANT_ONLY | set(SHARED) | set(PARAMS[kind]), vw)
        own = _params(v, kind, vw)
        for key in REQUIRED[kind]:
            if not all(key in {**params, **c["params"], **own} for c in cases):
                raise ConfigError(f"{vw}: {key} is missing (give it in the section, a case or the variant)")
        variants.append({"name": name, "where": vw, "params": own,
                         "vary": parse_vary(v["vary"], f"{vw}: vary") if "vary" in v else [],
                         "set": base["set"] + _overrides(v.get("set", []), f"{vw}: set")})
    baseline = table.get("baseline")
    if baseline is not None and baseline not in names:
        raise ConfigError(f"{where}: baseline: no variant is named {baseline!r}{suggest(baseline, names)}")
    return {"kind": kind, "base": base, "params": params, "cases": cases, "variants": variants,
            "baseline": baseline, "where": where}


def _cases(raw, kind: str, where: str) -> list:
    """cases = [{name = "...", KEY = value, ...}, ...]: settings applied together (a row set each)."""
    if raw is None:
        return [{"name": None, "params": {}}]
    if not isinstance(raw, list) or not raw or not all(isinstance(c, dict) for c in raw):
        raise ConfigError(f'{where}: expected a list of tables, e.g. cases = [{{ name = "quiet", skew = "0" }}, '
                          f'{{ name = "noisy", skew = "2us" }}]')
    out = []
    for i, c in enumerate(raw, 1):
        cw = f"{where} #{i}"
        _check_keys(c, {"name"} | set(SHARED) | set(PARAMS[kind]), cw)
        ps = _params(c, kind, cw)
        for key, values in ps.items():
            if len(values) != 1:
                raise ConfigError(f"{cw}: {key}: expected one value in a case (lists sweep in the section or a "
                                  f"variant), got {c[key]!r}")
        out.append({"name": _str(c.get("name", f"case{i}"), f"{cw}: name"), "params": ps})
    names = [c["name"] for c in out]
    if len(set(names)) != len(names):
        raise ConfigError(f"{where}: two cases have the same name; names must be unique")
    return out


def _product(lists: dict):
    keys = list(lists)
    for values in itertools.product(*[lists[k] for k in keys]):
        yield dict(zip(keys, values))


def combinations(plan_: dict):
    """(variant, case name, parameters (one value each), vary columns, overrides, group) for every row, in
    a stable order: variants as listed, then cases, then list values and vary values as written. group
    identifies the section-level setting (case, section lists, section vary) a row belongs to, so rows of
    different variants under the same setting compare (the speedup column)."""
    kind = plan_["kind"]
    defaults = {k: d for k, (_, d) in {**SHARED, **PARAMS[kind]}.items()}
    vary_keys = [k for k, _ in plan_["base"]["vary"]]
    for v in plan_["variants"]:
        for ci, case in enumerate(plan_["cases"]):
            outer = {**plan_["params"], **case["params"]}
            for p_outer in _product({k: x for k, x in outer.items() if k not in v["params"]}):
                for p_own in _product(v["params"]):
                    p = {**defaults, **p_outer, **p_own}
                    for vary in _product({**dict(plan_["base"]["vary"]), **dict(v["vary"])}):
                        overrides = v["set"] + [f"{k}={toml_literal(x, k)}" for k, x in vary.items()]
                        for key in ("execution", "sm_share"):
                            if p[key] is not None:
                                overrides.append(f"endpoint.{key}={toml_literal(p[key], key)}")
                        group = (ci, tuple(sorted((k, repr(p[k])) for k in outer)),
                                 tuple(repr(vary.get(k)) for k in vary_keys))
                        yield v, case["name"], p, vary, overrides, group


class _Topologies:
    def __init__(self, ref: str):
        self.ref, self.cache = ref, {}

    def get(self, overrides: list, where: str):
        key = tuple(overrides)
        if key not in self.cache:
            try:
                self.cache[key] = load_topology(self.ref, list(overrides))
            except HcclSimError as e:
                raise type(e)(f"{where}: {e}") from None
        return self.cache[key]


def _fill_defaults(p: dict, kind: str) -> dict:
    if kind == "tp_layer":
        p = dict(p)
        p["ffn"] = p["ffn"] or 4 * p["hidden"]
        p["qkv"] = p["qkv"] or 3 * p["hidden"]
        p["seq"] = p["seq"] or p["tokens"]
    return p


def check_section(section: dict, where: str) -> tuple:
    """Check a [[workload]] table without running it: every key and value, and the topology of every
    combination built. Returns (the plan, the combinations run_section runs)."""
    plan_ = plan(section, where)
    topologies = _Topologies(plan_["base"]["topology"])
    todo = []
    for v, case, p, vary, overrides, group in combinations(plan_):
        topo = topologies.get(overrides, v["where"])
        todo.append((v, case, _fill_defaults(p, plan_["kind"]), vary, overrides, group, topo))
    return plan_, todo


def run_section(section: dict, where: str) -> pd.DataFrame:
    """One [[workload]] table -> its rows (module docstring; columns in docs/studies/README.md)."""
    plan_, todo = check_section(section, where)
    kind, base = plan_["kind"], plan_["base"]
    timers: dict = {}
    rows, groups = [], []
    for v, case, p, vary, overrides, group, topo in todo:
        noise = {"iters": base["iters"], "skew": p["skew"], "jitter": p["jitter"], "seed": base["seed"]}
        key = (tuple(overrides), p["engine"], p["launch"], json.dumps(noise, default=str))
        if key not in timers:
            timers[key] = CollectiveTimer(topo, p["engine"], base["dtype"], p["launch"], noise, base["percentile"])
        timer = timers[key]
        try:
            device = Device.of(topo.endpoint)
            ops = PATTERNS[kind](p, timer, device, DTYPE_SIZE[base["dtype"]])
            result = simulate(ops, device)
        except HcclSimError as e:
            raise type(e)(f"{v['where']}{'' if case is None else f', case {case!r}'}: {e}") from None
        row = summarize(kind, base, v, p, vary, topo, timer, ops, result, device)
        if case is not None:
            row = {"variant": row.pop("variant"), "case": case, **row}
        rows.append(row)
        groups.append(group)
    frame = pd.DataFrame(rows)
    if plan_["baseline"]:
        time_col = "layer_us" if kind == "tp_layer" else "makespan_us"
        ref = {}
        for g, name, t in zip(groups, frame.variant, frame[time_col]):
            if name == plan_["baseline"]:
                ref.setdefault(g, t)
        speedup = [ref[g] / t if g in ref and t > 0 else float("nan") for g, t in zip(groups, frame[time_col])]
        frame.insert(frame.columns.get_loc(time_col) + 1, "speedup", speedup)
    frame.attrs["provenance"] = _provenance(section, todo[0][-1])
    return frame


def _provenance(section: dict, topo) -> dict:
    from ...core.version import __version__
    from ...results.provenance import SCHEMA_VERSION, _plain, git_revision, inputs_hash, resolved_topology

    resolved = resolved_topology(topo)
    inputs = _plain({"workload": section})
    meta = {"schema_version": SCHEMA_VERSION, "hccl_bench_version": __version__}
    rev = git_revision()
    if rev:
        meta["git_revision"] = rev
    meta.update({"topology": resolved, "inputs": inputs, "inputs_sha256": inputs_hash(resolved, inputs)})
    return meta
