"""`hccl-bench replay` of Chakra protobuf traces (.et, docs/replay.md): read whole, or refused naming the byte.

Expected values come from the sources, not from the reader (tests/data/traces/SOURCES.md):
* chakra_all_reduce_4npus_1MB/, chakra_all_gather_4npus_1MB/: ASTRA-sim's generator_scripts/all_reduce.py
  and all_gather.py run with --npus-count 4 --coll-size 1: one file per NPU, each one COMM_COLL_NODE,
  comm_type ALL_REDUCE (0) or ALL_GATHER (2), comm_size 1 MiB. ASTRA-sim's ring AllGather takes comm_size
  as each rank's input and ends with 4 times it (Ring.cc: final_data_size = data_size * nodes_in_ring),
  so as `sweep` counts sizes (the whole output) it is an AllGather of 4 MiB.
* chakra_custom_ring_allreduce_8npus_1MB.0.et: GPU 0 of the MSCCL ring AllReduce in the same folder's
  custom_allreduce.xml (8 GPUs, nchunksperloop 8, 1 MB): 14 steps of type "s", 7 of "r" and 7 of "rrc"
  (receive, reduce, copy), so 14 sends, 14 receives and 7 reductions, each of 1 MiB / 8 = 131072 bytes.
The small wire decoder below reads the same files without protobuf, as a second opinion.
"""

import io
import sys
from collections import Counter
from pathlib import Path

import pandas as pd
import pytest
from helpers import assert_one_line_error
from helpers import run_cli as run

from hcclsim.network.config import load_topology
from hcclsim.results.replay import chakra_pb
from hcclsim.results.replay.formats import read
from hcclsim.sweeping.sweep import sweep

DATA = Path(__file__).parent / "data" / "traces"
ALL_REDUCE = DATA / "chakra_all_reduce_4npus_1MB"
ALL_GATHER = DATA / "chakra_all_gather_4npus_1MB"
RING = DATA / "chakra_custom_ring_allreduce_8npus_1MB.0.et"
MIB = 1 << 20
try:
    import google.protobuf  # noqa: F401
    HAVE_PROTOBUF = True
except ImportError:
    HAVE_PROTOBUF = False
needs_protobuf = pytest.mark.skipif(not HAVE_PROTOBUF, reason="the protobuf package (the 'chakra' extra, in the dev "
                                                              "install) is not installed")


def varint(b: bytes, i: int) -> tuple[int, int]:
    v = shift = 0
    while True:
        v |= (b[i] & 0x7F) << shift
        i += 1
        if b[i - 1] < 0x80:
            return v, i
        shift += 7


def fields(msg: bytes) -> list[tuple[int, object]]:
    """(field number, value) of a message: varints as int, length-delimited as bytes (wire types 0 and 2)."""
    out, i = [], 0
    while i < len(msg):
        key, i = varint(msg, i)
        if key & 7 == 0:
            v, i = varint(msg, i)
        else:
            n, i = varint(msg, i)
            v, i = msg[i:i + n], i + n
        out.append((key >> 3, v))
    return out


def decode(path: Path) -> list[list[tuple[int, object]]]:
    """The messages of a length-delimited stream, each as its fields."""
    data, i, out = path.read_bytes(), 0, []
    while i < len(data):
        n, i = varint(data, i)
        out.append(fields(data[i:i + n]))
        i += n
    return out


def node_summary(node) -> tuple[int, dict]:
    """(node type, {attr name: int value}) from Node fields 3 (type) and 10 (attr: name 1, int64_val 9)."""
    attrs = {}
    for f, v in node:
        if f == 10:
            a = dict(fields(v))
            attrs[a[1].decode()] = a.get(9)
    return dict(node).get(3, 0), attrs


def rows(capsys, *args):
    status, out, err = run(capsys, "replay", *args, "--format", "csv")
    assert status == 0, err
    return pd.read_csv(io.StringIO(out), keep_default_na=False, na_values=[""])


def test_the_test_decoder_agrees_with_the_generator_and_the_xml():
    ar = [node_summary(n) for n in decode(ALL_REDUCE / "all_reduce.2.et")[1:]]
    assert ar == [(7, {"is_cpu_op": None, "comm_type": 0, "comm_size": MIB})]       # bool_val is field 27
    kinds = Counter(t for t, _ in map(node_summary, decode(RING)[1:]))
    assert kinds == {5: 14, 6: 14, 4: 7}                   # COMM_SEND_NODE, COMM_RECV_NODE, COMP_NODE


@needs_protobuf
def test_an_all_reduce_workload_of_four_files_is_one_all_reduce_of_four_ranks(capsys):
    for rank in range(4):
        (rec,) = read(str(ALL_REDUCE / f"all_reduce.{rank}.et")).records
        assert (rec.kind, rec.size_bytes, rec.group_size, rec.measured_us) == ("all_reduce", MIB, 4, None)
    df = rows(capsys, ALL_REDUCE / "all_reduce.0.et", "-t", "switch8", "-a", "ring")
    want = sweep(load_topology("switch8", ["ranks=4"]), ["all_reduce"], "ring", [MIB]).rows.time_us.iloc[0]
    assert (df.ranks.iloc[0], df.size_bytes.iloc[0]) == (4, MIB)
    assert df.ring_us.iloc[0] == pytest.approx(want, rel=1e-12)


@needs_protobuf
def test_an_all_gathers_size_is_its_whole_output():
    (rec,) = read(str(ALL_GATHER / "all_gather.3.et")).records
    assert (rec.kind, rec.count_in, rec.group_size, rec.size_bytes) == ("all_gather", MIB, 4, 4 * MIB)


@needs_protobuf
def test_a_lone_file_has_no_group_size(tmp_path, capsys):
    lone = tmp_path / "all_reduce.0.et"
    lone.write_bytes((ALL_REDUCE / "all_reduce.0.et").read_bytes())
    assert read(str(lone)).records[0].group_size is None
    assert list(rows(capsys, lone, "-t", "switch8").note) == ["no group size in the trace"]


@needs_protobuf
def test_sends_and_receives_of_the_custom_ring(capsys):
    t = read(str(RING))
    assert t.format == "chakra-pb"
    assert Counter(r.name for r in t.records) == {"send": 14, "recv": 14}          # the 7 COMP nodes are no collective
    assert {(r.kind, r.size_bytes, r.group_size) for r in t.records} == {("send_recv", MIB // 8, 2)}
    df = rows(capsys, RING, "-t", "switch8")
    assert len(df) == 28 and (df.ranks == 2).all() and df.best_us.notna().all()


# ------------------------------------------------------------------------------ refused, one line, status 2

def refused(capsys, path: Path, message: str):
    status, out, err = run(capsys, "replay", path, "-t", "switch8")
    assert_one_line_error(status, out, err)
    assert err == f"hccl-bench: error: {path}: {message}\n"


def test_a_truncated_et_file_is_refused_at_its_byte(capsys, tmp_path):
    # all_reduce.0.et: byte 0 is 0x07 (GlobalMetadata, bytes 1-7), byte 8 is 0x48 = 72 (the Node, bytes 9-80)
    path = tmp_path / "cut.et"
    path.write_bytes((ALL_REDUCE / "all_reduce.0.et").read_bytes()[:50])
    refused(capsys, path, "byte 8: a message of 72 bytes runs past the end of the file (50 bytes): not a whole "
                          "Chakra protobuf trace (cut short, or not one)")


def test_garbage_is_refused_at_byte_0(capsys, tmp_path):
    path = tmp_path / "x.et"
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(20))      # 0x89 0x50: a varint of 9 + 0x50 << 7 = 10249
    refused(capsys, path, "byte 0: a message of 10249 bytes runs past the end of the file (28 bytes): not a whole "
                          "Chakra protobuf trace (cut short, or not one)")


@needs_protobuf
def test_a_stream_that_is_not_chakra_is_refused(capsys, tmp_path):
    path = tmp_path / "other.et"
    path.write_bytes(b"\x02\x08\x01")         # one message, field 1 as a varint: framed, but no Chakra metadata
    refused(capsys, path, "byte 0: expected a Chakra GlobalMetadata first (a version such as '0.0.4', or a 'schema' "
                          "attr), got version '': not a Chakra protobuf trace of schema 0.0.4 or later")
    path.write_bytes(b"\x03abc")              # 'a' = 0x61: field 12, wire type 1, needs 8 bytes
    status, out, err = run(capsys, "replay", path, "-t", "switch8")
    assert_one_line_error(status, out, err, f"{path}: byte 0: not a Chakra GlobalMetadata message (")


@needs_protobuf
def test_a_collective_node_without_its_type_is_refused(capsys, tmp_path):
    meta = b"\x0a\x050.0.4"
    attr = b"\x0a\x09comm_size\x48\x80\x80\x40"                       # comm_size = 1 MiB
    node = b"\x08\x05\x18\x07" + b"\x52" + bytes([len(attr)]) + attr   # id 5, COMM_COLL_NODE, one attr
    path = tmp_path / "bad.et"
    path.write_bytes(bytes([len(meta)]) + meta + bytes([len(node)]) + node)
    refused(capsys, path, f"byte {1 + len(meta)}: node id 5 (''): COMM_COLL_NODE: no 'comm_type' attr")


def test_without_protobuf_the_error_says_what_to_install(capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "google.protobuf", None)      # import google.protobuf now fails
    monkeypatch.setattr(chakra_pb, "_CLASSES", None)
    path = ALL_REDUCE / "all_reduce.0.et"
    refused(capsys, path, "a Chakra protobuf trace: reading it needs the protobuf package: "
                          "pip install 'hccl-bench[chakra]'")
