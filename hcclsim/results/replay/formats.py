"""Reading the collectives of a real program from its traces, for `hccl-bench replay` (docs/replay.md).

Four formats, told apart by their content (gzipped or not):

* PyTorch profiler (Kineto) Chrome traces: the ``record_param_comms`` CPU ops and their args, and the
  NCCL / RCCL kernels. Arg names as PyTorch writes them (torch/csrc/distributed/c10d/ParamCommsUtils.hpp,
  PyTorch >= 2.1; checked against HolisticTraceAnalysis tests/data/nccl_parser_config/nccl_data.json.gz,
  NCCL 2.17.1, which also copies them onto the kernel). A kernel is linked to its record by its launch:
  the ``cuda_runtime`` / ``hip_runtime`` event of the same ``correlation``, inside the record's [ts, ts+dur]
  on the same thread. Older traces (no args on the record) give the kernel's kind and time, and the size
  where ProcessGroupNCCL's "nccl:NAME" annotation around the launch has its "Input Dims" and "Input type"
  (the input tensor; PyTorch 2.0, as facebookresearch/param example_input_files/chakra_traces/dlrm_kineto).
* Chakra / PyTorch execution traces, JSON (schema 1.0.3+, "1.1.0-chakra.0.0.4" as in facebookresearch/param
  et_replay/tests/inputs): ``record_param_comms`` nodes and their ``attrs`` (collective_name, dtype,
  in_msg_nelems, out_msg_nelems, in/out_split_size, pg_name, pg_size), as PARAM's et_replay reads them
  (et_replay/comm/commsTraceParser.py, commit 1e115ffc). No durations.
* PARAM's basic comms-replay traces: a JSON list of {"comms", "in_msg_size", "out_msg_size" (elements),
  "dtype", "world_size", "pg_id", "global_ranks", "startTime_ns", "in_split", "out_split"} and {"compute"}
  entries (train/comms/pt/commsTraceParser.py _parseBasicTraceComms, param commit c44b289^). No durations.
* Chakra execution traces in protobuf (.et, as ASTRA-sim runs them): chakra_pb.py.

A file that does not read whole is refused naming the file and the event or key; a record of a kind
hccl-bench does not model is kept, counted under its name, never dropped.
"""

from __future__ import annotations

import gzip
import json
import re
from collections import Counter
from dataclasses import dataclass, field

from ...core.errors import ConfigError
from ...core.units import DTYPE_SIZE
from ...schedule import collectives as C
from . import chakra_pb

# PyTorch's ScalarType names (c10/core/ScalarType.h) as record_param_comms writes them, lower-cased.
# The profiler's "Input type" spells them as C++ does (c10::Half, long int, unsigned char).
TORCH_DTYPES = {"float": "float32", "half": "float16", "bfloat16": "bfloat16", "double": "float64",
                "long": "int64", "int": "int32", "byte": "uint8", "char": "int8", "bool": "uint8",
                "float8_e4m3fn": "float8_e4m3", "float8_e5m2": "float8_e5m2", "long int": "int64",
                "unsigned char": "uint8", "signed char": "int8"}
# ProcessGroupNCCL's collective names (and PARAM's), letters only, lower-case -> hccl-bench's collective.
# all_to_allv when the splits are given, else all_to_all (alltoall_base is both in PyTorch).
KINDS = {"allreduce": C.ALL_REDUCE, "allgather": C.ALL_GATHER, "allgatherbase": C.ALL_GATHER,
         "allgatherintotensor": C.ALL_GATHER, "reducescatter": C.REDUCE_SCATTER,
         "reducescatterbase": C.REDUCE_SCATTER, "reducescattertensor": C.REDUCE_SCATTER,
         "broadcast": C.BROADCAST, "broadcastoop": C.BROADCAST, "reduce": C.REDUCE, "reduceoop": C.REDUCE,
         "alltoall": C.ALL_TO_ALL, "alltoallbase": C.ALL_TO_ALL, "alltoallsingle": C.ALL_TO_ALL,
         "alltoallv": C.ALL_TO_ALLV, "send": C.SEND_RECV, "recv": C.SEND_RECV, "sendrecv": C.SEND_RECV}
# NCCL / RCCL kernel names: ncclDevKernel_AllReduce_Sum_f32_RING_LL (NCCL >= 2.19), ncclKernel_AllReduce_
# RING_LL_Sum_float (older), ncclDevKernel_SendRecv; the word after "Kernel_" is the collective.
KERNEL = re.compile(r"^(?:nccl|rccl)(?:Dev)?Kernel_([A-Za-z]+)")
RUNTIME = {"cuda_runtime", "hip_runtime"}


@dataclass
class Record:
    """One collective as a trace has it. Counts in elements; times in microseconds (None: not in the trace)."""

    name: str                      # the trace's own name (record_param_comms' "Collective name", a kernel's)
    kind: str | None               # hccl-bench's collective; None: not modelled
    dtype: str | None = None
    count_in: int | None = None
    count_out: int | None = None
    group_size: int | None = None
    ranks: tuple = ()
    group: str = ""                # the process group's name (and description)
    stream: int | None = None
    start_us: float | None = None
    measured_us: float | None = None
    splits: tuple = ()             # all_to_allv: elements this rank sends to each peer
    over_ranks: int | None = None  # the ranks of one job (ranks.py): how many ranks measured_us is the minimum of
    measured_max_us: float | None = None     # ... and the slowest rank's kernel time

    @property
    def size_bytes(self) -> int | None:
        """The size as `sweep` takes it (nccl-tests' 'size': the whole buffer of one rank): AllGather's
        output, every other collective's input (AllToAll(v): what one rank sends; send/recv: the message)."""
        if self.kind is None or self.dtype is None or self.count_in is None:
            return None
        count = self.count_out if self.kind == C.ALL_GATHER else self.count_in
        return None if count is None else int(count) * DTYPE_SIZE[self.dtype]


@dataclass
class Trace:
    path: str
    format: str                    # kineto, chakra-json, param, chakra-pb
    records: list[Record]
    compute: list = field(default_factory=list)    # (stream, start_us, end_us) of non-NCCL kernels
    hardware: str = ""             # the trace's device name, where it says
    world: tuple = ()              # (rank, world size) from a Kineto trace's distributedInfo, where it says
    exposed: float | None = None   # the ranks of one job merged (ranks.merge): their exposed time, worked out there

    @property
    def unmodelled(self) -> Counter:
        return Counter(r.name for r in self.records if r.kind is None)


def kind_of(name: str, splits=()) -> str | None:
    key = "".join(ch for ch in str(name).lower() if ch.isalpha())
    kind = KINDS.get(key)
    return C.ALL_TO_ALLV if kind == C.ALL_TO_ALL and splits and key != "alltoall" else kind


def _dtype(value, where: str) -> str:
    key = str(value).strip().lower().replace("torch.", "").replace("c10::", "")
    if key in DTYPE_SIZE:
        return key
    if key not in TORCH_DTYPES:
        raise ConfigError(f"{where}: dtype {value!r}: expected one of {', '.join(sorted(TORCH_DTYPES))}")
    return TORCH_DTYPES[key]


def _count(value, where: str, key: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0 or value != int(value):
        raise ConfigError(f"{where}: {key}: expected a whole number of elements >= 0, got {value!r}")
    return int(value)


def _list(value, where: str, key: str) -> tuple:
    """A rank or split list, as PyTorch writes it: a JSON list or its text ("[0, 1]"; "" or "[]": none)."""
    if isinstance(value, str):
        text = value.strip()
        if text in ("", "[]"):
            return ()
        if "..." in text:      # PyTorch truncates long lists ("[0, 1, ..., ]"): the group size still holds
            return ()
        try:
            value = json.loads(text)
        except json.JSONDecodeError:
            raise ConfigError(f"{where}: {key}: expected a list of whole numbers, got {value!r}") from None
    if not isinstance(value, list) or not all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        raise ConfigError(f"{where}: {key}: expected a list of whole numbers, got {value!r}")
    return tuple(value)


def _record(name, args: dict, where: str, keys: dict) -> Record:
    """A record from record_param_comms-like args; keys maps the fields to the format's names."""
    splits = _list(args.get(keys["split"], ""), where, keys["split"])
    kind = kind_of(name, splits)
    rec = Record(str(name), kind, splits=splits)
    group = args.get(keys["group"])
    rec.group = "" if group is None else str(group)
    if keys["ranks"] in args:
        rec.ranks = _list(args[keys["ranks"]], where, keys["ranks"])
    size = args.get(keys["size"])
    if size is not None:
        rec.group_size = _count(size, where, keys["size"])
    if kind is None:
        return rec
    for attr in ("in", "out", "dtype"):
        if keys[attr] not in args:
            raise ConfigError(f"{where}: {name}: no {keys[attr]!r}")
    rec.count_in = _count(args[keys["in"]], where, keys["in"])
    rec.count_out = _count(args[keys["out"]], where, keys["out"])
    rec.dtype = _dtype(args[keys["dtype"]], where)
    if rec.group_size is None and rec.ranks:
        rec.group_size = len(rec.ranks)
    return rec


KINETO_KEYS = {"in": "In msg nelems", "out": "Out msg nelems", "dtype": "dtype", "size": "Group size",
               "group": "Process Group Name", "ranks": "Process Group Ranks", "split": "In split size"}
CHAKRA_KEYS = {"in": "in_msg_nelems", "out": "out_msg_nelems", "dtype": "dtype", "size": "pg_size",
               "group": "pg_name", "ranks": "global_ranks", "split": "in_split_size"}
PARAM_KEYS = {"in": "in_msg_size", "out": "out_msg_size", "dtype": "dtype", "size": "world_size",
              "group": "pg_id", "ranks": "global_ranks", "split": "in_split"}


def load(path: str) -> bytes:
    """The file's bytes, gunzipped when gzipped; refused whole when the gzip stream is cut short."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise ConfigError(f"{path}: cannot read ({e.strerror or e})") from None
    try:
        return gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data
    except (OSError, EOFError, gzip.BadGzipFile) as e:
        raise ConfigError(f"{path}: not a readable gzip file ({e})") from None


def _json(path: str, data: bytes):
    try:
        return json.loads(data)
    except UnicodeDecodeError:
        raise ConfigError(f"{path}: not UTF-8 JSON") from None
    except json.JSONDecodeError as e:
        raise ConfigError(f"{path}: line {e.lineno}: not JSON ({e.msg}); a trace must be read whole") from None


def read(path: str) -> Trace:
    """The collectives of one trace file, in the order they started. JSON when it starts as JSON does (a
    Chakra protobuf stream whose first length byte reads as '{' or '[' is tried when the JSON does not
    parse), else a Chakra protobuf stream."""
    data = load(path)
    if data.lstrip()[:1] not in (b"{", b"["):
        return _chakra_pb(path, data)
    try:
        data = _json(path, data)
    except ConfigError as not_json:
        try:
            chakra_pb.frames(data, path)
        except ConfigError:
            raise not_json from None
        return _chakra_pb(path, data)
    if isinstance(data, dict) and "traceEvents" in data:
        return _kineto(path, data)
    if isinstance(data, dict) and "nodes" in data and "schema" in data:
        return _chakra(path, data)
    if isinstance(data, list) and data and all(isinstance(e, dict) for e in data) and any("comms" in e for e in data):
        return _param(path, data)
    raise ConfigError(f"{path}: not a trace hccl-bench reads: expected a Kineto trace (a 'traceEvents' "
                          f"list), a Chakra execution trace ('schema' and 'nodes') or a PARAM comms trace "
                          f"(a list of {{'comms': ...}} entries)")


def _event_number(e: dict, key: str, where: str) -> float:
    v = e.get(key)
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise ConfigError(f"{where}: {key!r}: expected a number, got {v!r}")
    return float(v)


def _kineto(path: str, data: dict) -> Trace:
    events = data["traceEvents"]
    if not isinstance(events, list):
        raise ConfigError(f"{path}: traceEvents: expected a list")
    comms, kernels, launches, compute, annotations = [], [], {}, [], []
    for i, e in enumerate(events):
        if not isinstance(e, dict):
            raise ConfigError(f"{path}: traceEvents[{i}]: expected an object, got {type(e).__name__}")
        where = f"{path}: traceEvents[{i}] ({e.get('name')!r})"
        cat, name, args = e.get("cat"), str(e.get("name", "")), e.get("args") or {}
        if e.get("ph") != "X":
            continue
        if cat == "cpu_op" and name == "record_param_comms":
            comms.append((i, e, _event_number(e, "ts", where), _event_number(e, "dur", where), where))
        elif cat == "user_annotation" and name.startswith("nccl:") and "Input Dims" in args:
            annotations.append((e, _event_number(e, "ts", where), _event_number(e, "dur", where), where))
        elif cat in RUNTIME and "correlation" in args:
            launches[args["correlation"]] = e
        elif cat == "kernel":
            ts, dur = _event_number(e, "ts", where), _event_number(e, "dur", where)
            m = KERNEL.match(name)
            if m:
                kernels.append((e, ts, dur, m.group(1), where))
            else:
                compute.append((args.get("stream", e.get("tid")), ts, ts + dur))
    records, linked = [], {}
    for i, e, ts, dur, where in comms:
        args = e.get("args") or {}
        if "Collective name" not in args:
            continue                 # PyTorch < 2.1: no args; its kernels still count (below)
        rec = _record(args["Collective name"], args, where, KINETO_KEYS)
        rec.start_us = ts
        records.append(rec)
        linked[(e.get("pid"), e.get("tid"), ts, dur)] = rec
    if not records:              # PyTorch < 2.1: ProcessGroupNCCL's annotations carry the sizes
        for e, ts, dur, where in annotations:
            rec = _annotated(e, where)
            rec.start_us = ts
            records.append(rec)
            linked[(e.get("pid"), e.get("tid"), ts, dur)] = rec
    spans = sorted(linked)
    for e, ts, dur, word, where in kernels:
        rec = _kernel_record(e, ts, dur, word, where, launches, spans, linked)
        if rec is not None:
            records.append(rec)
    records.sort(key=lambda r: r.start_us)
    devices = data.get("deviceProperties") or []
    hardware = devices[0].get("name", "") if devices and isinstance(devices[0], dict) else ""
    return Trace(path, "kineto", records, compute, hardware, _world(path, data.get("distributedInfo")))


def _world(path: str, info) -> tuple:
    """(rank, world size) from distributedInfo; () without it."""
    if not isinstance(info, dict) or "rank" not in info or "world_size" not in info:
        return ()
    rank, size = info["rank"], info["world_size"]
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in (rank, size)) or not 0 <= rank < size:
        raise ConfigError(f"{path}: distributedInfo: rank {rank!r} of world_size {size!r}: expected whole numbers, "
                          f"0 <= rank < world_size")
    return rank, size


def _annotated(e: dict, where: str) -> Record:
    """A record from an "nccl:NAME" annotation: its first input is the collective's input tensor (shape and
    C++ element type). AllGather's output is not in it: no size (listed, not timed)."""
    args = e["args"]
    name = e["name"][len("nccl:"):]
    dims, types = args.get("Input Dims"), args.get("Input type")
    if not (isinstance(dims, list) and dims and isinstance(dims[0], list) and isinstance(types, list) and types):
        raise ConfigError(f"{where}: Input Dims / Input type: expected the input tensor's shape and type, got "
                          f"{dims!r} / {types!r}")
    count = 1
    for d in dims[0]:
        count *= _count(d, where, "Input Dims")
    rec = Record(name, kind_of(name))
    if rec.kind is not None:
        rec.dtype, rec.count_in = _dtype(types[0], where), count
        rec.count_out = None if rec.kind == C.ALL_GATHER else count
    return rec


def _kernel_record(e, ts, dur, word, where, launches, spans, linked):
    """The kernel's time on its record (returned None), or a record of its own when no record owns it."""
    args = e.get("args") or {}
    launch = launches.get(args.get("correlation"))
    owner = None
    if launch is not None:
        lt = launch.get("ts", -1)
        inside = [s for s in spans if s[0] == launch.get("pid") and s[1] == launch.get("tid") and s[2] <= lt <= s[2] + s[3]]
        owner = linked[min(inside, key=lambda s: s[3])] if inside else None
    if owner is not None and owner.measured_us is None:
        owner.measured_us, owner.stream, owner.start_us = dur, args.get("stream"), ts
        return None
    if owner is not None:        # one record, several kernels (a coalesced group): their times add
        owner.measured_us += dur
        return None
    if "Collective name" in args:
        rec = _record(args["Collective name"], args, where, KINETO_KEYS)
    else:
        rec = Record(f"{word} kernel", kind_of(word))     # a size-less record: listed, not timed
    rec.measured_us, rec.stream, rec.start_us = dur, args.get("stream"), ts
    return rec


def _attrs(node: dict, where: str) -> dict:
    attrs = node.get("attrs", [])
    if not isinstance(attrs, list) or not all(isinstance(a, dict) and "name" in a for a in attrs):
        raise ConfigError(f"{where}: attrs: expected a list of {{'name', 'value'}} objects")
    return {a["name"]: a.get("value") for a in attrs}


def _chakra(path: str, data: dict) -> Trace:
    nodes = data["nodes"]
    if not isinstance(nodes, list):
        raise ConfigError(f"{path}: nodes: expected a list")
    records = []
    for i, node in enumerate(nodes):
        if not isinstance(node, dict):
            raise ConfigError(f"{path}: nodes[{i}]: expected an object")
        if node.get("name") != "record_param_comms":
            continue
        where = f"{path}: node id {node.get('id')}"
        attrs = _attrs(node, where)
        if "collective_name" not in attrs:
            raise ConfigError(f"{where}: record_param_comms: no 'collective_name' attr (execution trace "
                              f"schema older than 1.0.3?)")
        rec = _record(attrs["collective_name"], attrs, where, CHAKRA_KEYS)
        rec.start_us = float(i)        # execution traces keep the order, not the time
        records.append(rec)
    return Trace(path, "chakra-json", records)


def _chakra_pb(path: str, data: bytes) -> Trace:
    records = [Record(**fields) for fields in chakra_pb.collectives(path, data)]
    for i, rec in enumerate(records):
        rec.start_us = float(i)        # the file's order; its dependency graph is not scheduled here
    return Trace(path, "chakra-pb", records)


def _param(path: str, data: list) -> Trace:
    records = []
    for i, entry in enumerate(data):
        where = f"{path}: entry {i}"
        if "compute" in entry:
            continue
        if "comms" not in entry:
            raise ConfigError(f"{where}: expected a 'comms' or 'compute' key, got {sorted(entry)}")
        rec = _record(entry["comms"], entry, where, PARAM_KEYS)
        start = entry.get("startTime_ns")
        rec.start_us = float(i) if start is None else _event_number(entry, "startTime_ns", where) / 1e3
        records.append(rec)
    return Trace(path, "param", records)


def exposed_us(trace: Trace) -> float | None:
    """The collectives' kernel time not overlapped by compute kernels on another stream: the union of the
    collective kernels' intervals minus the union of compute intervals elsewhere. None without compute."""
    if trace.exposed is not None or not trace.compute:
        return trace.exposed
    return sum(exposed_one(r, trace.compute) for r in trace.records if r.measured_us is not None)


def exposed_one(r: Record, compute: list) -> float:
    """The part of record r's kernel interval that no compute kernel on another stream covers."""
    a, b = r.start_us, r.start_us + r.measured_us
    return (b - a) - _union([(max(s, a), min(t, b)) for st, s, t in compute if st != r.stream and t > a and s < b])


def _union(spans) -> float:
    total, end = 0.0, float("-inf")
    for s, t in sorted(spans):
        if t > end:
            total += t - max(s, end)
            end = t
    return total
