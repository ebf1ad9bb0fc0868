"""Topology configuration: TOML files and presets, ``--set`` overrides, units, defaults, validation.

The only module that reads topology files. It returns a built :class:`Topology`;
every error names the file (or ``--set``) and the key, and says what was expected.
The keys are documented in docs/config.md.
"""

from __future__ import annotations

import copy
import tomllib
from importlib import resources
from pathlib import Path

from ..core.errors import ConfigError, suggest, unknown
from ..core.names import DEFAULT_PRESET
from ..core.units import parse_bandwidth, parse_flops, parse_size, parse_time
from .params import (
    DEFAULT_ENDPOINT,
    DEFAULT_PACKET,
    DOORBELLS,
    EXECUTIONS,
    HIDEABLE,
    MERGE_ORDERS,
    PROTOCOL_DEFAULTS,
    PROTOCOLS,
    SELECTIONS,
    SWITCHING,
    TABLE_FULL,
    WIRE_PROTOCOLS,
    Endpoint,
    PacketParams,
    Protocol,
)
from .topology import (
    FLAT_KINDS,
    OUT_REDUCE_RAIL_ONLY,
    SCALE_OUT_KINDS,
    Topology,
    build_flat,
    build_hierarchical,
)
from .wiring import build_graph, check_wiring

PACKET_KEYS = {"mtu", "switching", "switch_buffer", "switch_latency", "reduction_table_entries", "merge_spread",
               "merge_order", "merge_seed", "table_full", "efficiency"}
ENDPOINT_KEYS = {"message_engines", "issue_overhead", "reduction_bandwidth", "launch_overhead", "graph_generation",
                 "metadata_copy", "subgraph_schedule", "hidden", "execution", "sm_share", "sm_reduction_bandwidth",
                 "protocol", "channels", "algorithms", "in_switch_latency", "in_switch_efficiency",
                 "in_switch_channels", "in_switch_step_latency", "peak_flops", "gemm_efficiency",
                 "memory_bandwidth", "selection", "compute_capability", "engine_reduction_bandwidth", "wqe_rate",
                 "doorbell", "wqe_fetch_latency", "queue_pairs", "qp_reuse", *WIRE_PROTOCOLS}
PROTOCOL_KEYS = {"share", "step_latency", "net_step_latency", "base_latency", "bandwidth_cap", "channel_bandwidth",
                 "net_channel_bandwidth", "channel_bytes"}
FLAT_KEYS = {"description", "kind", "ranks", "bandwidth", "latency", "in_switch_reduce", "dims"} | PACKET_KEYS
HIER_KEYS = {"description", "kind", "scale_up", "scale_out"}
GRAPH_KEYS = {"description", "kind", "ranks", "bandwidth", "latency", "links", "host"} | PACKET_KEYS
HOST_KEYS = {"bandwidth", "latency"} | PACKET_KEYS
TOP_TABLES = ("topology", "endpoint")
UP_KEYS = {"kind", "ranks", "bandwidth", "latency", "in_switch_reduce"} | PACKET_KEYS
OUT_KEYS = {"kind", "domains", "bandwidth", "latency", "oversubscription", "leaf_size", "spines",
            "in_switch_reduce"} | PACKET_KEYS


def preset_dir():
    return resources.files("hcclsim.topologies") / "presets"


def preset_names() -> list[str]:
    return sorted(p.name[:-5] for p in preset_dir().iterdir() if p.name.endswith(".toml"))


def read_toml(path, label: str) -> dict:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise ConfigError(f"{label}: cannot read file ({e.strerror or e})") from None
    except UnicodeDecodeError:
        raise ConfigError(f"{label}: not a UTF-8 text file; expected a TOML file") from None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{label}: malformed TOML: {e}") from None


def find_toml(ref: str, where: str, named, what: str, label: str):
    """A TOML path, or a name among named() (name -> file) -> (name, label for messages, the file).
    what names the kind in errors ('preset'); label formats a named file's label ('preset {}')."""
    path = Path(ref)
    if ref.endswith(".toml") or path.exists() or "/" in ref:
        if not path.is_file():
            raise ConfigError(f"{where}: no such file {ref!r}")
        return path.stem, str(path), path
    files = named()
    if ref not in files:
        raise ConfigError(f"{where}: unknown {what} {ref!r}{suggest(ref, list(files))}; expected a .toml file or "
                          f"one of: {', '.join(files) or '(none found)'}")
    return ref, label.format(ref), files[ref]


def locate(ref: str, where: str = "--topology"):
    """A preset name or a TOML path -> (name, label for messages, the file to read)."""
    return find_toml(ref, where, lambda: {n: preset_dir() / f"{n}.toml" for n in preset_names()}, "preset",
                     "preset {}")


def resolve(ref: str, where: str = "--topology", seen: tuple = ()) -> tuple[str, str, dict]:
    """A preset name or a TOML path -> (name, label for messages, the parsed document). A document with
    ``extends = "PRESET"`` is that preset's document with its own tables merged over it, key by key."""
    name, label, path = locate(ref, where)
    doc = read_toml(path, label)
    if "extends" not in doc:
        return name, label, doc
    base = doc.pop("extends")
    if not isinstance(base, str) or not base.strip():
        raise ConfigError(f"{label}: extends: expected the name of a preset or a TOML path, got {base!r}")
    if base in seen or base == name:
        raise ConfigError(f"{label}: extends: {base!r} extends itself (through {' -> '.join(seen + (name,))})")
    _, _, parent = resolve(base, f"{label}: extends", seen + (name,))
    return name, label, _merged(parent, doc)


def _merged(base: dict, over: dict) -> dict:
    """base with over's keys on top; tables merge recursively, everything else is replaced."""
    out = copy.deepcopy(base)
    for key, value in over.items():
        out[key] = _merged(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) \
            else copy.deepcopy(value)
    return out


def parse_override(item: str) -> tuple[list[str], object]:
    """'scale_out.domains=64' -> (['scale_out', 'domains'], 64). Values are TOML literals, else strings."""
    key, eq, raw = item.partition("=")
    key = key.strip()
    key = key.removeprefix("topology.")
    if not eq or not key:
        raise ConfigError(f"--set: expected KEY=VALUE (e.g. bandwidth=100GB/s), got {item!r}")
    try:
        value = tomllib.loads(f"v = {raw.strip()}")["v"]
    except tomllib.TOMLDecodeError:
        value = raw.strip()
    return key.split("."), value


class _Table:
    """A TOML table being validated; knows how to name each key in an error message."""

    def __init__(self, data: dict, prefix: str, label: str, overridden: set[str]):
        self.data, self.prefix, self.label, self.overridden = data, prefix, label, overridden

    def where(self, key: str) -> str:
        full = f"{self.prefix}.{key}"
        short = full.split(".", 1)[1]
        for given in (full, short):
            if given in self.overridden:
                return f"--set {given}"
        return f"{self.label}: {full}"

    def check_keys(self, allowed: set[str]) -> None:
        for key in self.data:
            if key not in allowed:
                raise ConfigError(f"{self.where(key)}: unknown key{suggest(key, allowed)}; "
                                  f"expected one of: {', '.join(sorted(allowed))}")

    def get(self, key: str, parse, default=None, required: bool = False):
        if key not in self.data:
            if required:
                raise ConfigError(f"{self.label}: {self.prefix}.{key} is missing")
            return default
        return parse(self.data[key], self.where(key))

    def sub(self, key: str, required: bool = True) -> _Table:
        value = self.data.get(key)
        if value is None and not required:
            return None
        if not isinstance(value, dict):
            raise ConfigError(f"{self.label}: [{self.prefix}.{key}] table is missing" if value is None else
                              f"{self.where(key)}: expected a table")
        return _Table(value, f"{self.prefix}.{key}", self.label, self.overridden)


# Counts, sizes (bytes) and times (picoseconds) are 64-bit integers in the engines: the largest value a key
# takes leaves room for sums of a few of them, so no arithmetic on them can wrap around.
MAX_COUNT = 1 << 62
MAX_SECONDS = (1 << 62) / 1e12           # 2^62 picoseconds, 53 days


def _int(lo: int):
    def parse(v, where):
        if isinstance(v, bool) or not isinstance(v, int) or v < lo:
            raise ConfigError(f"{where}: expected a whole number >= {lo}, got {v!r}")
        if v > MAX_COUNT:
            raise ConfigError(f"{where}: expected a whole number of at most 2^62, got {v!r}")
        return v
    return parse


def _time(v, where):
    t = parse_time(v, where)
    if t > MAX_SECONDS:
        raise ConfigError(f"{where}: expected a time of at most 53 days (2^62 ps, the engines count picoseconds in "
                          f"64 bits), got {v!r}")
    return t


def _number(lo: float):
    def parse(v, where):
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not lo <= v < float("inf"):
            raise ConfigError(f"{where}: expected a finite number >= {lo:g}, got {v!r}")
        return float(v)
    return parse


def _bool(v, where):
    if not isinstance(v, bool):
        raise ConfigError(f"{where}: expected true or false, got {v!r}")
    return v


def _choice(choices, what: str = "kind"):
    def parse(v, where):
        if v not in choices:
            raise ConfigError(f"{where}: {unknown(what, v, choices)}")
        return v
    return parse


def _str(v, where):
    if not isinstance(v, str):
        raise ConfigError(f"{where}: expected a string, got {v!r}")
    return v


def _dims(v, where):
    if not (isinstance(v, list) and len(v) == 2 and all(isinstance(x, int) and not isinstance(x, bool)
                                                        and 1 <= x <= MAX_COUNT for x in v)):
        raise ConfigError(f"{where}: expected [X, Y] (two whole numbers >= 1), got {v!r}")
    return (v[0], v[1])


def apply_overrides(doc: dict, overrides: list[str]) -> set[str]:
    """Set each --set KEY=VALUE in the parsed document, in place (calibrate writes the result out);
    the keys set, for messages. The values are checked where the document is built."""
    overridden = set()
    for item in overrides:
        path, value = parse_override(item)
        node = doc if path[0] == "endpoint" and len(path) > 1 else doc["topology"]
        if node is doc and "endpoint" not in doc:
            doc["endpoint"] = {}
        for part in path[:-1]:
            if node is doc.get("endpoint") and part in WIRE_PROTOCOLS and part not in node:
                node[part] = {}                      # --set endpoint.ll.share=...: the protocol's table
            if not isinstance(node.get(part), dict):
                raise ConfigError(f"--set {'.'.join(path)}: there is no table {part!r} to set a key in")
            node = node[part]
        node[path[-1]] = value
        overridden.add(".".join(path))
    return overridden


def build(doc: dict, name: str, label: str, overrides: list[str] = ()) -> Topology:
    """Validate a parsed document (with overrides applied) and build its topology."""
    doc = copy.deepcopy(doc)
    for key in doc:
        if key not in TOP_TABLES:
            raise ConfigError(f"{label}: unknown top-level table or key {key!r}{suggest(key, TOP_TABLES)}; "
                              f"expected [topology] and optionally [endpoint]")
    if not isinstance(doc.get("topology"), dict):
        raise ConfigError(f"{label}: the [topology] table is missing")
    if "endpoint" in doc["topology"]:
        raise ConfigError(f"{label}: topology.endpoint: the endpoint keys now live in a top-level [endpoint] "
                          f"table; rename [topology.endpoint] to [endpoint]")
    overridden = apply_overrides(doc, overrides)
    endpoint = _endpoint(doc, label, overridden)
    top = _Table(doc["topology"], "topology", label, overridden)
    kind = top.get("kind", _choice([*FLAT_KINDS, "graph", "hierarchical"]), required=True)
    spec = copy.deepcopy(doc["topology"])
    if kind == "graph":
        return _graph(name, top, spec, endpoint)
    if kind == "hierarchical":
        top.check_keys(HIER_KEYS)
        up, out = top.sub("scale_up"), top.sub("scale_out")
        up.check_keys(UP_KEYS)
        out.check_keys(OUT_KEYS)
        top.get("description", _str)
        up_kind = up.get("kind", _choice(["switch", "ring", "full_mesh"]), required=True)
        if up.get("in_switch_reduce", _bool, False) and up_kind != "switch":
            raise ConfigError(f"{up.where('in_switch_reduce')}: only a 'switch' scale-up can reduce in the switch")
        out_kind = out.get("kind", _choice(SCALE_OUT_KINDS), required=True)
        out_reduce = out.get("in_switch_reduce", _bool, False)
        if out_reduce and out_kind != "rail":
            raise ConfigError(f"{out.where('in_switch_reduce')}: {OUT_REDUCE_RAIL_ONLY}; this one is {out_kind!r}")
        if out_kind == "rail":
            for key in ("oversubscription", "leaf_size", "spines"):
                if key in out.data:
                    raise ConfigError(f"{out.where(key)}: only a fat_tree scale-out has {key}")
        local, domains = up.get("ranks", _int(1), required=True), out.get("domains", _int(1), required=True)
        leaf_size = out.get("leaf_size", _int(1), None)
        if leaf_size is not None and (local * domains) % leaf_size:
            raise ConfigError(f"{out.where('leaf_size')}: {leaf_size} does not divide the {local * domains} ranks "
                              f"({domains} domains x {local})")
        return build_hierarchical(
            name, up_kind, local, up.get("bandwidth", parse_bandwidth, required=True),
            up.get("latency", _time, 0.0), up.get("in_switch_reduce", _bool, False), out_kind,
            domains, out.get("bandwidth", parse_bandwidth, required=True),
            out.get("latency", _time, 0.0), out.get("oversubscription", _number(1.0), 1.0),
            leaf_size, spec=spec, up_packet=_packet(up), out_packet=_packet(out), endpoint=endpoint,
            spines=out.get("spines", _int(1), 1), out_reduce=out_reduce)
    top.check_keys(FLAT_KEYS)
    dims = top.get("dims", _dims)
    if dims is not None and kind != "torus2d":
        raise ConfigError(f"{top.where('dims')}: only a torus2d topology has dims")
    if kind == "torus2d" and dims is None:
        raise ConfigError(f"{label}: topology.dims is missing (torus2d needs dims = [X, Y])")
    ranks = top.get("ranks", _int(1), required=dims is None)
    if kind == "torus2d":
        if ranks is not None and ranks != dims[0] * dims[1]:
            raise ConfigError(f"{top.where('ranks')}: {ranks} ranks but dims {list(dims)} make "
                              f"{dims[0] * dims[1]}")
        ranks = dims[0] * dims[1]
    if top.get("in_switch_reduce", _bool, False) and kind != "switch":
        raise ConfigError(f"{top.where('in_switch_reduce')}: only a 'switch' topology can reduce in the switch")
    top.get("description", _str)
    return build_flat(name, kind, ranks, top.get("bandwidth", parse_bandwidth, required=True),
                      top.get("latency", _time, 0.0), top.get("in_switch_reduce", _bool, False), dims,
                      spec=spec, packet=_packet(top), endpoint=endpoint)


def _graph(name: str, top: _Table, spec: dict, endpoint: Endpoint) -> Topology:
    """kind = "graph": a fixed wiring, links listed per pair, an optional [topology.host] (docs/config.md)."""
    top.check_keys(GRAPH_KEYS)
    top.get("description", _str)
    ranks = top.get("ranks", _int(1), required=True)
    host = top.sub("host", required=False)
    if host is not None:
        host.check_keys(HOST_KEYS)
    links = top.get("links", lambda v, where: check_wiring(ranks, v, where, host is not None), required=True)
    route = None if host is None else (host.get("bandwidth", parse_bandwidth, required=True),
                                       host.get("latency", _time, 0.0))
    return build_graph(name, ranks, links, top.get("bandwidth", parse_bandwidth, required=True),
                       top.get("latency", _time, 0.0), route, spec=spec, packet=_packet(top),
                       host_packet=_packet(host) if host is not None else DEFAULT_PACKET, endpoint=endpoint)


def _packet(table: _Table) -> PacketParams:
    """The packet-level keys of one tier (docs/config.md), defaults from hcclsim.params."""
    d = DEFAULT_PACKET
    return PacketParams(mtu=table.get("mtu", _size(1), d.mtu),
                        switching=table.get("switching", _choice(SWITCHING, "switching"), d.switching),
                        switch_buffer=table.get("switch_buffer", _size(1), d.switch_buffer),
                        switch_latency=table.get("switch_latency", _time, d.switch_latency),
                        reduction_table_entries=table.get("reduction_table_entries", _int(1),
                                                          d.reduction_table_entries),
                        merge_spread=table.get("merge_spread", _time, d.merge_spread),
                        merge_order=table.get("merge_order", _choice(MERGE_ORDERS, "merge_order"), d.merge_order),
                        merge_seed=table.get("merge_seed", _int(0), d.merge_seed),
                        table_full=table.get("table_full", _choice(TABLE_FULL, "table_full"), d.table_full),
                        efficiency=table.get("efficiency", _fraction(True), d.efficiency))


def _endpoint(doc: dict, label: str, overridden: set[str]) -> Endpoint:
    """The [endpoint] table (docs/config.md, docs/execution.md), defaults from hcclsim.params."""
    if "endpoint" not in doc:
        return DEFAULT_ENDPOINT
    if not isinstance(doc["endpoint"], dict):
        raise ConfigError(f"{label}: endpoint: expected a table [endpoint]")
    table = _Table(doc["endpoint"], "endpoint", label, overridden)
    table.check_keys(ENDPOINT_KEYS)
    if "reduction_bandwidth" in table.data and "engine_reduction_bandwidth" in table.data:
        raise ConfigError(f"{table.where('engine_reduction_bandwidth')}: set the rank's reduction_bandwidth or the "
                          f"per-engine engine_reduction_bandwidth, not both")
    d = DEFAULT_ENDPOINT
    return Endpoint(
        message_engines=table.get("message_engines", _int(0), d.message_engines),
        issue_overhead=table.get("issue_overhead", _time, d.issue_overhead),
        reduction_bandwidth=table.get("reduction_bandwidth", _bandwidth_or_zero, d.reduction_bandwidth),
        launch_overhead=table.get("launch_overhead", _time, d.launch_overhead),
        graph_generation=table.get("graph_generation", _time, d.graph_generation),
        metadata_copy=table.get("metadata_copy", _time, d.metadata_copy),
        subgraph_schedule=table.get("subgraph_schedule", _time, d.subgraph_schedule),
        hidden=table.get("hidden", _names(HIDEABLE), d.hidden),
        execution=table.get("execution", _choice(EXECUTIONS, "execution"), d.execution),
        sm_share=table.get("sm_share", _fraction(False), d.sm_share),
        sm_reduction_bandwidth=table.get("sm_reduction_bandwidth", _bandwidth_or_zero, d.sm_reduction_bandwidth),
        protocol=table.get("protocol", _choice(PROTOCOLS, "protocol"), d.protocol),
        channels=table.get("channels", _int(0), d.channels),
        algorithms=table.get("algorithms", _algorithm_names, d.algorithms),
        selection=table.get("selection", _choice(SELECTIONS, "selection"), d.selection),
        compute_capability=table.get("compute_capability", _int(0), d.compute_capability),
        in_switch_latency=table.get("in_switch_latency", _time, d.in_switch_latency),
        in_switch_efficiency=table.get("in_switch_efficiency", _fraction(True), d.in_switch_efficiency),
        in_switch_channels=table.get("in_switch_channels", _int(0), d.in_switch_channels),
        in_switch_step_latency=table.get("in_switch_step_latency", _time, d.in_switch_step_latency),
        **{p: _protocol(table, p) for p in WIRE_PROTOCOLS},
        peak_flops=table.get("peak_flops", _flops_or_zero, d.peak_flops),
        gemm_efficiency=table.get("gemm_efficiency", _fraction(True), d.gemm_efficiency),
        memory_bandwidth=table.get("memory_bandwidth", _bandwidth_or_zero, d.memory_bandwidth),
        engine_reduction_bandwidth=table.get("engine_reduction_bandwidth", _bandwidth_or_zero,
                                             d.engine_reduction_bandwidth),
        wqe_rate=table.get("wqe_rate", _wqe_rate, d.wqe_rate),
        doorbell=table.get("doorbell", _choice(DOORBELLS, "doorbell"), d.doorbell),
        wqe_fetch_latency=table.get("wqe_fetch_latency", _time, d.wqe_fetch_latency),
        queue_pairs=table.get("queue_pairs", _int(0), d.queue_pairs),
        qp_reuse=table.get("qp_reuse", _time, d.qp_reuse))


def _wqe_rate(v, where):
    """WQEs per second; at least 1, so that a collective's unrolling stays within the engines' 2^62 ps."""
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not (v == 0 or 1 <= v < float("inf")):
        raise ConfigError(f"{where}: expected work-queue elements per second, 0 (no limit) or a finite number >= 1, "
                          f"got {v!r}")
    return float(v)


def _algorithm_names(v, where):
    """A list of algorithm names for every collective, or a table of such lists per collective; as
    ((collective or "*", (names...)), ...). Names are checked against the registry where they are used."""
    def names(items, at):
        items = [items] if isinstance(items, str) else items
        if not isinstance(items, list) or not items or not all(isinstance(x, str) and x.strip() for x in items):
            raise ConfigError(f"{at}: expected a list of algorithm names, e.g. [\"ring\", \"tree\"], got {items!r}")
        return tuple(dict.fromkeys(x.strip() for x in items))
    if isinstance(v, dict):
        return tuple((str(k), names(x, f"{where}.{k}")) for k, x in v.items())
    return (("*", names(v, where)),)


def _protocol(endpoint: _Table, name: str) -> Protocol:
    """One [endpoint.ll] / [endpoint.ll128] / [endpoint.simple] table over NCCL's defaults for it."""
    d = PROTOCOL_DEFAULTS[name]
    table = endpoint.sub(name, required=False)
    if table is None:
        return d
    table.check_keys(PROTOCOL_KEYS)
    return Protocol(share=table.get("share", _fraction(True), d.share),
                    step_latency=table.get("step_latency", _time, d.step_latency),
                    net_step_latency=table.get("net_step_latency", _time, d.net_step_latency),
                    base_latency=table.get("base_latency", _time, d.base_latency),
                    bandwidth_cap=table.get("bandwidth_cap", _bandwidth_or_zero, d.bandwidth_cap),
                    channel_bandwidth=table.get("channel_bandwidth", _bandwidth_or_zero, d.channel_bandwidth),
                    net_channel_bandwidth=table.get("net_channel_bandwidth", _bandwidth_or_zero,
                                                    d.net_channel_bandwidth),
                    channel_bytes=table.get("channel_bytes", _int(0), d.channel_bytes))


def _names(allowed):
    def parse(v, where):
        items = [v] if isinstance(v, str) else v
        if not isinstance(items, list) or not all(isinstance(x, str) for x in items):
            raise ConfigError(f"{where}: expected a list of names from: {', '.join(allowed)}; got {v!r}")
        for x in items:
            if x not in allowed:
                raise ConfigError(f"{where}: unknown name {x!r}{suggest(x, allowed)}; expected names from: "
                                  f"{', '.join(allowed)}")
        return tuple(dict.fromkeys(items))
    return parse


def _fraction(positive: bool):
    """A number in (0, 1] (positive) or [0, 1)."""
    def parse(v, where):
        ok = isinstance(v, (int, float)) and not isinstance(v, bool) and ((0 < v <= 1) if positive else (0 <= v < 1))
        if not ok:
            raise ConfigError(f"{where}: expected a number {'in (0, 1]' if positive else 'in [0, 1)'}, got {v!r}")
        return float(v)
    return parse


def _flops_or_zero(v, where):
    return 0.0 if v == 0 or v == "0" else parse_flops(v, where)


def _size(lo: int):
    def parse(v, where):
        n = parse_size(v, where)
        if n < lo:
            raise ConfigError(f"{where}: expected a size of at least {lo} bytes, got {v!r}")
        if n > MAX_COUNT:
            raise ConfigError(f"{where}: expected a size of at most 2^62 bytes, got {v!r}")
        return n
    return parse


def _bandwidth_or_zero(v, where):
    return 0.0 if v == 0 or v == "0" else parse_bandwidth(v, where)


def load_topology(ref: str = DEFAULT_PRESET, overrides: list[str] = ()) -> Topology:
    """A preset name or TOML path, with ``--set KEY=VALUE`` overrides, as a built Topology. Its name says
    the overrides (``dgx-h100[bandwidth=380GB/s]``), so rows and files show which inputs made them."""
    name, label, doc = resolve(ref)
    return build(doc, labelled(name, overrides), label, overrides)


def labelled(name: str, overrides) -> str:
    """``name[key=value,...]``: a topology's name with the --set items it was built with, as given."""
    items = [item.strip().removeprefix("topology.").replace(" ", "") for item in overrides]
    return f"{name}[{','.join(items)}]" if items else name


def source_text(ref: str, where: str = "--topology") -> str:
    """The text of a preset or TOML file, after checking that it loads (to print, copy and edit)."""
    name, label, path = locate(ref, where)
    build(resolve(ref, where)[2], name, label)
    return path.read_text(encoding="utf-8")


def describe(ref: str) -> str:
    """The preset's or file's one-line description ('' when it has none)."""
    _, _, doc = resolve(ref)
    return str(doc.get("topology", {}).get("description", ""))
