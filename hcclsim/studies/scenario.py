"""Scenarios: a study in one TOML file, run by `hccl-bench run` into results/NAME/ (docs/studies/README.md).

A scenario is a [scenario] header (title, what it reproduces, its docs page) and sections, each written
to its own table results/NAME/<section>.csv:

    [[sweep]]     run_sweep once per combination of `vary` overrides and launch modes, a column per varied key
    [[replay]]    a workload replay: a list of collectives with sizes and call counts, timed with every
                  applicable algorithm and with topology-aware selection (auto); a total per algorithm
    [[workload]]  handed to hcclsim.studies.workload.run_section(section, where) (compute/collective overlap)
    [[jobs]]      several collectives placed on one fabric at once, each job's slowdown (hcclsim.studies.jobs)

load() reads and checks the whole file -- every key, every size, every algorithm, and every topology
of every combination is built -- before anything runs, so a typo fails at once with the file and key.
hcclsim.studies.study runs the sections and writes their tables.
"""

from __future__ import annotations

import hashlib
import itertools
import re
from contextlib import contextmanager
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

import pandas as pd

from ..core.errors import ConfigError, HcclSimError, suggest
from ..core.units import parse_dtype, parse_size, parse_time
from ..engine.execution import LAUNCHES, check_launch
from ..network.config import DEFAULT_PRESET, find_toml, load_topology, read_toml
from ..schedule import collectives as C
from ..schedule.algorithm import parse_spec
from ..sweeping.sweep import parse_engines, size_grid, split_auto
from .fields import column_value, parse_matrix, parse_vary, toml_literal, whole_number

KINDS = ("sweep", "replay", "workload", "jobs")
HEADER_KEYS = {"title", "reproduces", "doc", "description"}
COMMON_KEYS = {"name", "description", "topology", "set", "vary", "engine", "launch", "iters", "skew", "jitter",
               "seed", "dtype"}
SWEEP_KEYS = COMMON_KEYS | {"collective", "collectives", "algorithm", "algorithms", "sizes", "b", "e", "f", "root",
                            "plot", "matrix"}
REPLAY_KEYS = COMMON_KEYS | {"algorithm", "algorithms", "ops"}
OP_KEYS = {"collective", "size", "count", "label", "dtype"}
PLOT_KEYS = {"metric", "collectives", "algorithms"}
EXECUTION_KEYS = ("iters", "skew", "jitter", "seed")    # passed through to run_sweep as given
NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")
AUTO, BEST_FIXED = "auto", "best_fixed"


# ------------------------------------------------------------------------------------------ model

@dataclass(frozen=True)
class Section:
    kind: str           # sweep | replay | workload
    name: str
    where: str          # 'FILE: [[sweep]] NAME', the prefix of every message about it
    spec: dict          # checked and normalised (sweep/replay) or the table as written (workload)
    raw: dict           # the table as written


@dataclass(frozen=True)
class Scenario:
    name: str
    path: Path
    label: str
    title: str
    reproduces: str
    doc: str
    description: str
    sections: tuple
    sha256: str


@dataclass
class Result:
    section: Section
    frame: pd.DataFrame
    skipped: list = field(default_factory=list)     # (collective, algorithm, reason), deduplicated


# ------------------------------------------------------------------------------------ locating

def scenario_dirs() -> list:
    """Where scenarios are looked up by name: the installed hcclsim.scenarios package (the repo's
    top-level scenarios/ folder), and the checkout's scenarios/ beside hcclsim/ when that differs."""
    dirs = []
    try:
        dirs.append(resources.files("hcclsim.scenarios"))
    except ModuleNotFoundError:
        pass
    checkout = Path(__file__).resolve().parents[1] / "scenarios"
    if checkout.is_dir() and all(str(d) != str(checkout) for d in dirs):
        dirs.append(checkout)
    return dirs


def scenario_files() -> dict:
    """name -> file of every scenario found by name (the first directory wins)."""
    found = {}
    for d in scenario_dirs():
        for p in sorted(d.iterdir(), key=lambda p: p.name):
            if p.name.endswith(".toml") and p.name[:-5] not in found:
                found[p.name[:-5]] = p
    return dict(sorted(found.items()))


def locate(ref: str):
    """A TOML path or a scenario name (scenarios/NAME.toml) -> (name, label for messages, file)."""
    return find_toml(ref, "run", scenario_files, "scenario", "scenarios/{}.toml")


# ------------------------------------------------------------------------------------ checking

def _str(v, where):
    if not isinstance(v, str) or not v.strip():
        raise ConfigError(f"{where}: expected a non-empty string, got {v!r}")
    return v


def _names(v, where, what="names"):
    """'a,b' or ['a', 'b'] -> ['a', 'b']."""
    items = v.split(",") if isinstance(v, str) else v
    if not isinstance(items, list) or not items or not all(isinstance(x, str) and x.strip() for x in items):
        raise ConfigError(f"{where}: expected {what} as a string or a list of strings, got {v!r}")
    return [x.strip() for x in items]


def _check_keys(table: dict, allowed: set, where: str) -> None:
    for key in table:
        if key not in allowed:
            raise ConfigError(f"{where}: {key}: unknown key{suggest(key, allowed)}; expected one of: "
                              f"{', '.join(sorted(allowed))}")


def _one_of(table: dict, singular: str, plural: str, where: str, default):
    if singular in table and plural in table:
        raise ConfigError(f"{where}: give {singular} or {plural}, not both")
    key = plural if plural in table else singular
    return key, table.get(key, default)


@contextmanager
def within(where: str):
    """Prefix an error raised inside with where it happened (the file and section)."""
    try:
        yield
    except HcclSimError as e:
        raise type(e)(f"{where}: {e}") from None


def _common(table: dict, where: str) -> dict:
    """The keys sweep and replay sections share, checked; topologies of every combination built."""
    if "description" in table:
        _str(table["description"], f"{where}: description")
    spec = {"topology": _str(table.get("topology", DEFAULT_PRESET), f"{where}: topology")}
    overrides = table.get("set", [])
    if isinstance(overrides, str) or not isinstance(overrides, list) or \
            not all(isinstance(x, str) for x in overrides):
        raise ConfigError(f'{where}: set: expected a list of "KEY=VALUE" strings, got {overrides!r}')
    spec["overrides"] = list(overrides)
    spec["vary"] = parse_vary(table["vary"], f"{where}: vary") if "vary" in table else []
    engine = table.get("engine", "analytic")
    spec["engine"] = ",".join(_names(engine, f"{where}: engine", "engine names"))
    with within(f"{where}: engine"):
        parse_engines(spec["engine"])
    launch = table.get("launch")
    spec["launch"] = None if launch is None else _names(launch, f"{where}: launch", "launch modes")
    for x in spec["launch"] or []:
        if x.partition(":")[0] not in LAUNCHES:
            raise ConfigError(f"{where}: launch: unknown launch {x!r}{suggest(x, LAUNCHES)}; expected host, "
                              f"device or loop[:G][:n=N] (or a list of them)")
        try:
            check_launch(x)
        except ConfigError as e:
            raise ConfigError(f"{where}: launch: {str(e).removeprefix('--launch: ')}") from None
    checks = {"iters": whole_number(1), "skew": parse_time, "jitter": parse_time, "seed": whole_number(0)}
    for key in EXECUTION_KEYS:
        if key in table:
            checks[key](table[key], f"{where}: {key}")
    spec["extra"] = {k: table[k] for k in EXECUTION_KEYS if k in table}
    with within(where):
        spec["dtype"] = parse_dtype(table.get("dtype", "float32"), "dtype")
    spec["topologies"] = [load_topology_in(spec, ov, where) for _, ov, _ in variants(spec)]
    return spec


def load_topology_in(spec: dict, overrides: list, where: str):
    with within(where):
        return load_topology(spec["topology"], overrides)


def variants(spec: dict):
    """(varied columns, overrides, launch or None) for every combination, vary keys in order, launch last."""
    keys = [k for k, _ in spec["vary"]]
    for combo in itertools.product(*[values for _, values in spec["vary"]]):
        overrides = spec["overrides"] + [f"{k}={toml_literal(v, k)}" for k, v in zip(keys, combo)]
        cols = {k: column_value(v) for k, v in zip(keys, combo)}
        for launch in spec["launch"] or [None]:
            yield cols, overrides, launch


def _algorithms(table: dict, where: str, default: str) -> str:
    key, value = _one_of(table, "algorithm", "algorithms", where, default)
    names = _names(value, f"{where}: {key}", "algorithm names")
    for name in names:
        if name not in ("all", AUTO):
            parse_spec(name, f"{where}: {key}")
    return ",".join(names)


def _sizes(table: dict, where: str) -> list[int]:
    if "sizes" in table:
        if any(k in table for k in "bef"):
            raise ConfigError(f"{where}: give sizes or b/e/f, not both")
        value = table["sizes"]
        items = value if isinstance(value, list) else [value]
        if not items:
            raise ConfigError(f"{where}: sizes: expected at least one size")
        return sorted({parse_size(s, f"{where}: sizes") for s in items})
    b = parse_size(table.get("b", 16), f"{where}: b")
    e = parse_size(table.get("e", "1G"), f"{where}: e")
    f = whole_number(2)(table.get("f", 4), f"{where}: f")
    with within(where):
        return size_grid(b, e, f)


def _sweep_spec(table: dict, where: str) -> dict:
    _check_keys(table, SWEEP_KEYS, where)
    spec = _common(table, where)
    key, colls = _one_of(table, "collective", "collectives", where, C.ALL_REDUCE)
    names = _names(colls, f"{where}: {key}", "collective names")
    names = list(C.COLLECTIVES) if names == ["all"] else names
    spec["collectives"] = [C.canonical(c, f"{where}: {key}") for c in names]
    spec["algorithm"] = _algorithms(table, where, "all")
    spec["sizes"] = _sizes(table, where)
    spec["root"] = whole_number(0)(table.get("root", 0), f"{where}: root")
    for topo in spec["topologies"]:
        if spec["root"] >= topo.nranks:
            raise ConfigError(f"{where}: root: expected a rank in 0..{topo.nranks - 1}, got {spec['root']}")
    spec["plot"] = _plot(table["plot"], spec, f"{where}: plot") if "plot" in table else None
    if "matrix" in table:                      # passed to run_sweep with the execution keys
        spec["extra"]["matrix"] = parse_matrix(table["matrix"], f"{where}: matrix", spec["collectives"],
                                               spec["topologies"])
    return spec


def _plot(plot, spec: dict, where: str) -> dict:
    """plot = { metric, collectives, algorithms } -> {'metrics': [...], and the lists given}."""
    from ..results.plot import parse_metrics

    if not isinstance(plot, dict):
        raise ConfigError(f'{where}: expected a table such as {{ metric = "busbw" }}, got {plot!r}')
    _check_keys(plot, PLOT_KEYS, where)
    metric = plot.get("metric", "busbw")
    with within(where):
        out = {"metrics": parse_metrics(",".join(metric) if isinstance(metric, list) else str(metric))}
    for key, listed in (("collectives", spec["collectives"]), ("algorithms", spec["algorithm"].split(","))):
        if key not in plot:
            continue
        names = _names(plot[key], f"{where}.{key}", key)
        if key == "collectives":
            names = [C.canonical(c, f"{where}.{key}") for c in names]
        for x in names:
            if "all" not in listed and x not in listed:
                raise ConfigError(f"{where}.{key}: {x!r} is not in the section's {key} ({', '.join(listed)})")
        out[key] = names
    return out


def _replay_spec(table: dict, where: str) -> dict:
    _check_keys(table, REPLAY_KEYS, where)
    spec = _common(table, where)
    spec["algorithm"] = split_auto(_algorithms(table, where, "all"))[0]     # auto is always timed
    ops = table.get("ops")
    if not isinstance(ops, list) or not ops or not all(isinstance(op, dict) for op in ops):
        raise ConfigError(f"{where}: ops: expected a list of tables such as {{ collective = \"all_reduce\", "
                          f"size = \"4M\", count = 2 }}")
    spec["ops"] = []
    for i, op in enumerate(ops, 1):
        at = f"{where}: ops[{i}]"
        _check_keys(op, OP_KEYS, at)
        if "collective" not in op or "size" not in op:
            raise ConfigError(f"{at}: {'collective' if 'collective' not in op else 'size'} is missing")
        with within(at):
            dtype = parse_dtype(op.get("dtype", spec["dtype"]), "dtype")
        spec["ops"].append({"collective": C.canonical(op["collective"], f"{at}: collective"),
                            "size": parse_size(op["size"], f"{at}: size"),
                            "count": whole_number(1)(op.get("count", 1), f"{at}: count"),
                            "label": _str(op["label"], f"{at}: label") if "label" in op else "",
                            "dtype": dtype})
    return spec


def _section(kind: str, table, index: int, label: str) -> Section:
    where = f"{label}: [[{kind}]] #{index}"
    if not isinstance(table, dict):
        raise ConfigError(f"{where}: expected a table [[{kind}]]")
    if "name" not in table:
        raise ConfigError(f"{where}: name is missing (it names the output file NAME.csv)")
    name = table["name"]
    if not isinstance(name, str) or not NAME_RE.fullmatch(name):
        raise ConfigError(f"{where}: name: expected letters, digits, '_', '-' or '.' (a file name), got {name!r}")
    where = f"{label}: [[{kind}]] {name}"
    if kind == "workload":
        return Section(kind, name, where, dict(table), table)
    if kind == "jobs":
        from .jobs import check_section

        return Section(kind, name, where, check_section(table, where), table)
    spec = _sweep_spec(table, where) if kind == "sweep" else _replay_spec(table, where)
    return Section(kind, name, where, spec, table)


def load(ref: str) -> Scenario:
    """Read and check a scenario (a path or a name from scenario_files())."""
    name, label, path = locate(ref)
    text = _read_text(path, label)
    doc = read_toml(path, label)
    for key in doc:
        if key not in ("scenario", *KINDS):
            raise ConfigError(f"{label}: {key}: unknown key{suggest(key, ('scenario', *KINDS))}; expected a "
                              f"[scenario] table and [[sweep]], [[replay]], [[workload]] or [[jobs]] sections")
    head = doc.get("scenario")
    if not isinstance(head, dict):
        raise ConfigError(f"{label}: the [scenario] table is missing (title, reproduces, doc, description)")
    _check_keys(head, HEADER_KEYS, f"{label}: scenario")
    for key in ("title", "reproduces"):
        if key not in head:
            raise ConfigError(f"{label}: scenario.{key} is missing")
    fields = {k: _str(head[k], f"{label}: scenario.{k}") if k in head else "" for k in HEADER_KEYS}
    sections = []
    for kind in KINDS:
        tables = doc.get(kind, [])
        if not isinstance(tables, list):
            raise ConfigError(f"{label}: {kind}: expected [[{kind}]] sections (an array of tables)")
        sections += [_section(kind, t, i, label) for i, t in enumerate(tables, 1)]
    if not sections:
        raise ConfigError(f"{label}: no sections; expected at least one [[sweep]], [[replay]], [[workload]] or [[jobs]]")
    order = {id(t): pos for kind in KINDS for pos, t in _positions(text, kind, doc.get(kind, []))}
    sections.sort(key=lambda s: order.get(id(s.raw), 0))
    seen = set()
    for s in sections:
        if s.name in seen:
            raise ConfigError(f"{s.where}: name: another section is named {s.name!r}; names must be unique")
        seen.add(s.name)
    for s in sections:
        if s.kind == "workload":             # checked by its module before anything runs
            from .workload import check_section

            check_section(dict(s.raw), s.where)
    return Scenario(name, Path(str(path)), label, fields["title"], fields["reproduces"], fields["doc"],
                    fields["description"], tuple(sections), hashlib.sha256(text.encode()).hexdigest())


def _positions(text: str, kind: str, tables: list) -> list:
    """(offset in the file, table) of each section of a kind: TOML groups arrays of tables by kind, the
    run keeps the order of the file."""
    starts = [m.start() for m in re.finditer(rf"^[ \t]*\[\[[ \t]*{kind}[ \t]*\]\]", text, re.MULTILINE)]
    return list(zip(starts, tables)) if len(starts) == len(tables) else [(0, t) for t in tables]


def _read_text(path, label: str) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except OSError as e:
        raise ConfigError(f"{label}: cannot read file ({e.strerror or e})") from None
    except UnicodeDecodeError:
        raise ConfigError(f"{label}: not a UTF-8 text file; expected a TOML file") from None


def header(ref) -> dict:
    """The [scenario] table of a file, for listing (not otherwise checked)."""
    _, label, path = locate(str(ref))
    head = read_toml(path, label).get("scenario", {})
    return head if isinstance(head, dict) else {}
