"""Chakra execution traces in protobuf (the `.et` files ASTRA-sim runs), read for `hccl-bench replay`.

A file is a stream of messages, each preceded by its length as a varint (chakra src/third_party/utils/
protolib.py encodeMessage): one GlobalMetadata, then Nodes. The messages are those of mlcommons/chakra
schema/protobuf/et_def.proto (commit 21585d8f, schema 0.0.4, unchanged since 2023-10), described below in
Python and built with the `protobuf` package (the optional extra `chakra`), so no generated code is kept
here. The framing is checked without protobuf, so a file cut short or not of this kind is refused naming
its byte offset whether or not protobuf is installed.

Sizes follow ASTRA-sim's reading of `comm_size` (astra-sim/system/astraccl/native_collectives/
collective_algorithm/Ring.cc, commit 518bd513): AllGather's is one rank's input (the output is N times
it), every other collective's the whole buffer (AllReduce, Broadcast, ReduceScatter's input, what a rank
sends in AllToAll, the message of a send or recv). A collective with no process group (`pg_name` absent,
"" or "0") spans every rank of the workload (astra-sim/workload/Workload.cc extract_comm_group); ASTRA-sim
runs one file per rank named PREFIX.RANK.et, so the workload has as many ranks as such files lie beside
the one read.
"""

from __future__ import annotations

import os
import re

from ...core.errors import ConfigError
from ...schedule import collectives as C

PACKAGE = "ChakraProtoMsg"
# AttributeProto's oneof `value`: field 3 + 2k is the scalar of SCALARS[k], field 4 + 2k its list message.
SCALARS = ["double", "float", "int32", "int64", "uint32", "uint64", "sint32", "sint64", "fixed32", "fixed64",
           "sfixed32", "sfixed64", "bool", "string", "bytes"]
NODE_TYPES = ["INVALID_NODE", "METADATA_NODE", "MEM_LOAD_NODE", "MEM_STORE_NODE", "COMP_NODE", "COMM_SEND_NODE",
              "COMM_RECV_NODE", "COMM_COLL_NODE"]
COMM_TYPES = ["ALL_REDUCE", "REDUCE", "ALL_GATHER", "GATHER", "SCATTER", "BROADCAST", "ALL_TO_ALL", "REDUCE_SCATTER",
              "REDUCE_SCATTER_BLOCK", "BARRIER"]
# CollectiveCommType -> hccl-bench's collective; GATHER, SCATTER and BARRIER are not modelled.
# REDUCE_SCATTER_BLOCK (MPI's equal-block form) is NCCL's ReduceScatter.
KINDS = {"ALL_REDUCE": C.ALL_REDUCE, "REDUCE": C.REDUCE, "ALL_GATHER": C.ALL_GATHER, "BROADCAST": C.BROADCAST,
         "ALL_TO_ALL": C.ALL_TO_ALL, "REDUCE_SCATTER": C.REDUCE_SCATTER, "REDUCE_SCATTER_BLOCK": C.REDUCE_SCATTER}
SEND, RECV, COLL = NODE_TYPES.index("COMM_SEND_NODE"), NODE_TYPES.index("COMM_RECV_NODE"), NODE_TYPES.index("COMM_COLL_NODE")
INSTALL = "pip install 'hccl-bench[chakra]'"
VERSION = re.compile(r"\d+\.\d+\.\d+")


def frames(data: bytes, path: str) -> list[tuple[int, int, int]]:
    """(offset of the length, start, end) of each message; refused unless the messages fill the file exactly."""
    out, pos = [], 0
    while pos < len(data):
        length, start = _varint(data, pos, path)
        if start + length > len(data):
            raise ConfigError(f"{path}: byte {pos}: a message of {length} bytes runs past the end of the file "
                              f"({len(data)} bytes): not a whole Chakra protobuf trace (cut short, or not one)")
        out.append((pos, start, start + length))
        pos = start + length
    if not out:
        raise ConfigError(f"{path}: byte 0: empty file: expected a Chakra protobuf trace")
    return out


def _varint(data: bytes, pos: int, path: str) -> tuple[int, int]:
    value, shift, at = 0, 0, pos
    while at < len(data) and shift < 64:
        b = data[at]
        value |= (b & 0x7F) << shift
        at += 1
        if not b & 0x80:
            return value, at
        shift += 7
    raise ConfigError(f"{path}: byte {pos}: not a message length (a varint "
                      f"{'cut short' if at == len(data) else 'longer than 10 bytes'}): not a whole Chakra protobuf trace")


def messages():
    """(GlobalMetadata, Node) message classes, built once from the schema above; ConfigError without protobuf."""
    global _CLASSES
    if _CLASSES is None:
        try:
            from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
        except ImportError:
            raise ConfigError(f"a Chakra protobuf trace: reading it needs the protobuf package: {INSTALL}") from None
        pool = descriptor_pool.DescriptorPool()     # our own: a chakra install's et_def_pb2 may hold the default
        pool.Add(_schema(descriptor_pb2))
        _CLASSES = tuple(message_factory.GetMessageClass(pool.FindMessageTypeByName(f"{PACKAGE}.{name}"))
                         for name in ("GlobalMetadata", "Node"))
    return _CLASSES


_CLASSES = None


def _schema(pb):
    """et_def.proto as a FileDescriptorProto (the fields the reader uses and every one a message holds, so a
    parse accounts for the whole message; the schema's Tensor message is in no other and is left out)."""
    F = pb.FieldDescriptorProto
    f = pb.FileDescriptorProto(name="hcclsim_chakra_et_def.proto", package=PACKAGE, syntax="proto3")

    def message(name, *fields, oneof=None):
        m = f.message_type.add(name=name)
        if oneof:
            m.oneof_decl.add(name=oneof)
        for fname, number, ftype, repeated, tname, in_oneof in fields:
            fd = m.field.add(name=fname, number=number, type=ftype,
                             label=F.LABEL_REPEATED if repeated else F.LABEL_OPTIONAL)
            if tname:
                fd.type_name = f".{PACKAGE}.{tname}"
            if in_oneof:
                fd.oneof_index = 0

    def enum(name, values):
        e = f.enum_type.add(name=name)
        for number, value in enumerate(values):
            e.value.add(name=value, number=number)

    def scalar(name):
        return getattr(F, f"TYPE_{name.upper()}")

    value = []
    for k, name in enumerate(SCALARS):
        lst = f"{name.capitalize()}List"
        message(lst, ("values", 1, scalar(name), True, None, False))
        value += [(f"{name}_val", 3 + 2 * k, scalar(name), False, None, True),
                  (f"{name}_list", 4 + 2 * k, F.TYPE_MESSAGE, False, lst, True)]
    S, M, U = F.TYPE_STRING, F.TYPE_MESSAGE, F.TYPE_UINT64
    message("AttributeProto", ("name", 1, S, False, None, False), ("doc_string", 2, S, False, None, False), *value,
            oneof="value")
    message("GlobalMetadata", ("version", 1, S, False, None, False), ("attr", 2, M, True, "AttributeProto", False))
    enum("NodeType", NODE_TYPES)
    enum("CollectiveCommType", COMM_TYPES)
    message("IOInfo", *[(n, i, S, False, None, False) for i, n in enumerate(("values", "shapes", "types"), 1)])
    message("Node", ("id", 1, U, False, None, False), ("name", 2, S, False, None, False),
            ("type", 3, F.TYPE_ENUM, False, "NodeType", False), ("ctrl_deps", 4, U, True, None, False),
            ("data_deps", 5, U, True, None, False), ("start_time_micros", 6, U, False, None, False),
            ("duration_micros", 7, U, False, None, False), ("inputs", 8, M, False, "IOInfo", False),
            ("outputs", 9, M, False, "IOInfo", False), ("attr", 10, M, True, "AttributeProto", False))
    return f


def attrs(msg) -> dict:
    """An attr list as {name: value} (a list attr as a Python list; an attr without a value as None)."""
    out = {}
    for a in msg.attr:
        which = a.WhichOneof("value")
        v = None if which is None else getattr(a, which)
        out[a.name] = list(v.values) if which and which.endswith("_list") else v
    return out


def parse(path: str, data: bytes) -> list:
    """The file's Nodes, in file order, each with the byte offset of its length; the framing and the
    GlobalMetadata checked first."""
    spans = frames(data, path)
    try:
        Meta, Node = messages()
    except ConfigError as e:
        raise ConfigError(f"{path}: {e}") from None
    from google.protobuf.message import DecodeError

    def decode(cls, at, start, end, what):
        msg = cls()
        try:
            msg.ParseFromString(data[start:end])
        except DecodeError as e:
            raise ConfigError(f"{path}: byte {at}: not a Chakra {what} message ({e}): not a whole Chakra "
                              f"protobuf trace") from None
        return msg

    at, start, end = spans[0]
    meta = decode(Meta, at, start, end, "GlobalMetadata")
    schema = attrs(meta).get("schema")
    if not VERSION.fullmatch(meta.version) and not (isinstance(schema, str) and "chakra" in schema):
        raise ConfigError(f"{path}: byte 0: expected a Chakra GlobalMetadata first (a version such as '0.0.4', or a "
                          f"'schema' attr), got version {meta.version[:40]!r}: not a Chakra protobuf trace of schema "
                          f"0.0.4 or later")
    nodes = []
    for at, start, end in spans[1:]:
        node = decode(Node, at, start, end, "Node")
        if not 0 <= node.type < len(NODE_TYPES):
            raise ConfigError(f"{path}: byte {at}: node id {node.id}: type {node.type}: expected one of "
                              f"{', '.join(NODE_TYPES)}")
        nodes.append((at, node))
    return nodes


def workload_ranks(path: str) -> int | None:
    """How many ranks the workload of PREFIX.RANK.et has: the files PREFIX.0.et, PREFIX.1.et, ... beside it
    (ASTRA-sim's naming), counted up to the first missing; None when the name is not of that form or the file
    is alone (a workload of one rank has no collective)."""
    folder, name = os.path.split(path)
    m = re.fullmatch(r"(.*)\.(\d+)\.et", name)
    if m is None:
        return None
    n = 0
    while os.path.isfile(os.path.join(folder, f"{m.group(1)}.{n}.et")):
        n += 1
    return n if n >= 2 and n > int(m.group(2)) else None


def collectives(path: str, data: bytes) -> list[dict]:
    """The communication nodes of a file, in file order, as Record fields (formats.Record): collectives,
    sends and receives; sizes in bytes (dtype uint8). Compute, memory and metadata nodes carry no collective."""
    world = workload_ranks(path)
    out = []
    for at, node in parse(path, data):
        if node.type not in (COLL, SEND, RECV):
            continue
        where = f"{path}: byte {at}: node id {node.id} ({node.name[:60]!r})"
        a = attrs(node)
        measured = float(node.duration_micros) or None       # proto3: 0 is "not given"
        if node.type != COLL:
            out.append({"name": "send" if node.type == SEND else "recv", "kind": C.SEND_RECV, "dtype": "uint8",
                        "count_in": _size(a, where), "count_out": _size(a, where), "group_size": 2,
                        "group": str(a.get("pg_name", "")), "measured_us": measured})
            continue
        comm = a.get("comm_type")
        if comm is None:
            raise ConfigError(f"{where}: COMM_COLL_NODE: no 'comm_type' attr")
        if isinstance(comm, bool) or not isinstance(comm, int) or not 0 <= comm < len(COMM_TYPES):
            raise ConfigError(f"{where}: COMM_COLL_NODE: comm_type {comm!r}: expected a CollectiveCommType "
                              f"0..{len(COMM_TYPES) - 1} ({', '.join(COMM_TYPES)})")
        name, group = COMM_TYPES[comm], str(a.get("pg_name", ""))
        n = world if group in ("", "0") else None
        rec = {"name": name.lower(), "kind": KINDS.get(name), "group": group, "measured_us": measured, "group_size": n}
        if rec["kind"] is not None:
            size = _size(a, where)     # AllGather's is one rank's input: the whole buffer is n times it
            gather = rec["kind"] == C.ALL_GATHER
            rec.update(dtype="uint8", count_in=size, count_out=(size * n if n else None) if gather else size)
        out.append(rec)
    return out


def _size(a: dict, where: str) -> int:
    v = a.get("comm_size")
    if v is None:
        raise ConfigError(f"{where}: no 'comm_size' attr")
    if isinstance(v, bool) or not isinstance(v, int) or v < 0:
        raise ConfigError(f"{where}: comm_size {v!r}: expected a whole number of bytes >= 0")
    return v
