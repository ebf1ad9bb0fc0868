"""`hccl-bench replay` (docs/replay.md): real traces read whole, every collective accounted for, bad files refused.

Counts and durations below were taken from the original files with jq (tests/data/traces/SOURCES.md), e.g.
  jq '[.traceEvents[] | select(.name=="record_param_comms") | .args["Collective name"]] | group_by(.)
      | map({(.[0]): length})' nccl_data.json      -> allreduce 15, broadcast 6, wait 6
  jq '[.traceEvents[] | select(.cat=="kernel" and (.name|startswith("ncclKernel"))) | .name | split("_")[1]]
      | group_by(.) | map({(.[0]): length})' control.json     -> AllReduce 18, SendRecv 42
"""

import gzip
import io
import json
from collections import Counter
from pathlib import Path

import pandas as pd
import pytest
from helpers import assert_one_line_error
from helpers import run_cli as run

from hcclsim.network.config import load_topology
from hcclsim.results.replay.formats import exposed_us, read
from hcclsim.sweeping.sweep import sweep

DATA = Path(__file__).parent / "data" / "traces"
KINETO = DATA / "a100_2gpu_resnet_kineto.json.gz"       # PyTorch 2.x, NCCL 2.17.1, args on records and kernels
OLD = DATA / "a100_8gpu_pt1.12_kineto.json.gz"          # older PyTorch: kernels, records without args
CHAKRA = DATA / "resnet_2gpu_chakra_et.json"
PARAM = DATA / "resnet_2gpu_param_comms.json"
RESNET_KINDS = {"all_reduce": 15, "broadcast": 6, "": 6}     # "": wait, listed as not modelled


def rows(capsys, *args):
    status, out, err = run(capsys, "replay", *args, "--format", "csv")
    assert status == 0, err
    return pd.read_csv(io.StringIO(out), keep_default_na=False, na_values=[""])


@pytest.mark.parametrize("path", [KINETO, CHAKRA, PARAM])
def test_every_collective_of_the_resnet_traces_is_accounted_for(capsys, path):
    df = rows(capsys, path, "-t", "dgx-a100")
    assert Counter(df.collective.fillna("")) == RESNET_KINDS
    assert list(df[df.collective.isna()].name.unique()) == ["wait"]
    assert set(df[df.collective.isna()].note) == {"not modelled"}
    timed = df[df.collective.notna()]
    assert timed.best_us.notna().all() and (timed.ranks == 2).all()


def test_old_traces_list_their_kernels_without_sizes(capsys):
    df = rows(capsys, OLD, "-t", "dgx-a100")
    assert Counter(df.collective) == {"all_reduce": 18, "send_recv": 42}
    assert set(df.note) == {"no size in the trace"} and df.best_us.isna().all()
    assert df.measured_us.iloc[0] == 3088 and df.measured_us.iloc[1] == 4850      # the first two kernels
    assert df.measured_us.sum() == 163535                  # jq '[... ncclKernel ... | .dur] | add'


def test_measured_durations_and_sizes_are_the_files():
    recs = read(str(KINETO)).records
    # jq, kernels by ts: broadcast 53120 elems 30.975 us, broadcast 53 7.775 us, allreduce 2049000 3306.963 us
    first = [(r.kind, r.count_in, r.measured_us, r.stream) for r in recs[:5]]
    assert first == [("broadcast", 53120, 30.975, 40), ("broadcast", 53, 7.775, 40), (None, None, None, None),
                     (None, None, None, None), ("all_reduce", 2049000, 3306.963, 40)]
    assert recs[0].size_bytes == 53120 * 4 and recs[1].size_bytes == 53 * 8 and recs[1].dtype == "int64"


def test_simulated_time_and_ratio_are_the_sweeps(capsys):
    df = rows(capsys, KINETO, "-t", "dgx-a100", "-a", "ring,auto")
    row = df.iloc[4]                                      # AllReduce of 2049000 floats
    topo = load_topology("dgx-a100", ["ranks=2"])        # a 2-rank group on the 8-port switch
    want = sweep(topo, ["all_reduce"], "ring,auto", [2049000 * 4]).rows.set_index("algorithm").time_us
    assert row.size_bytes == 8196000
    assert row.ring_us == pytest.approx(want["ring"], rel=1e-12)
    assert row.auto_us == pytest.approx(want["auto"], rel=1e-12)
    assert row.measured_over_auto == pytest.approx(3306.963 / want["auto"], rel=1e-12)


def test_scale_ranks_grows_the_data_parallel_group_and_keeps_sizes(capsys):
    base = rows(capsys, PARAM, "-t", "switch8")
    scaled = rows(capsys, PARAM, "-t", "switch8", "--scale-ranks", "8")
    timed = base.collective.notna()
    assert (base[timed].ranks == 2).all() and (scaled[timed].ranks == 8).all()
    assert list(scaled.size_bytes.fillna(-1)) == list(base.size_bytes.fillna(-1))
    assert (scaled[timed].best_us > base[timed].best_us).all()    # 8 ranks on one switch: more steps


def test_a_group_that_does_not_fit_the_topology_is_refused(capsys):
    assert_one_line_error(*run(capsys, "replay", PARAM, "-t", "ring8"),
                          "-t/--topology: a group of 2 ranks on ring8 (ring, 8 ranks): expected a topology of 2 "
                          "ranks or a one-switch topology")
    assert rows(capsys, PARAM, "-t", "ring8", "--scale-ranks", "8").ranks.max() == 8
    assert_one_line_error(*run(capsys, "replay", PARAM, "-t", "ring8", "--scale-ranks", "1"),
                          "--scale-ranks: expected a number of ranks >= 2, got 1")


def test_totals_per_group_and_trace(capsys):
    status, out, err = run(capsys, "replay", KINETO, CHAKRA, "-t", "dgx-a100", "--format", "json")
    assert status == 0, err
    got = json.loads(out)
    per = pd.DataFrame(got["collectives"])
    trace = got["traces"][0]
    assert trace["collectives"] == 27 and trace["timed"] == 21 and trace["not_timed"] == "wait x6"
    assert trace["measured_us"] == pytest.approx(per[per.trace == str(KINETO)].measured_us.sum())
    assert trace["saves_us"] == pytest.approx(trace["auto_us"] - trace["best_us"])
    assert got["traces"][1]["measured_us"] is None and got["traces"][1]["exposed_us"] is None
    assert [g["collectives"] for g in got["groups"]] == [21, 6, 21, 6]


# ------------------------------------------------------------------------------ small hand-made traces

def kineto(tmp_path, events, name="t.json"):
    path = tmp_path / name
    path.write_text(json.dumps({"traceEvents": events}))
    return path


def comm(ts, dur, name="allreduce", nelems=1024, tid=1, **extra):
    args = {"Collective name": name, "In msg nelems": nelems, "Out msg nelems": nelems, "Group size": 8,
            "dtype": "Float", "Process Group Name": "0", "Process Group Ranks": "[0, 1, 2, 3, 4, 5, 6, 7]",
            "In split size": "[]", "Out split size": "[]", **extra}
    return {"ph": "X", "cat": "cpu_op", "name": "record_param_comms", "pid": 1, "tid": tid, "ts": ts, "dur": dur,
            "args": args}


def launch(ts, corr, tid=1):
    return {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": tid, "ts": ts, "dur": 1,
            "args": {"correlation": corr}}


def kernel(name, ts, dur, corr, stream=7):
    return {"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": stream, "ts": ts, "dur": dur,
            "args": {"correlation": corr, "stream": stream}}


def test_kernels_link_to_their_record_by_launch(tmp_path):
    events = [comm(0, 10), launch(5, 100), kernel("ncclDevKernel_AllReduce_Sum_f32_RING_LL", 20, 40, 100),
              comm(100, 10, name="allgather", nelems=128, **{"Out msg nelems": 1024}), launch(102, 101), launch(104, 102),      # a coalesced pair
              kernel("ncclDevKernel_AllGather_RING_LL", 120, 5, 101), kernel("ncclDevKernel_AllGather_RING_LL", 130, 6, 102),
              kernel("ncclDevKernel_SendRecv", 300, 9, 999),                               # no launch: no record
              kernel("void at::native::vectorized_elementwise_kernel<4>", 20, 10, 103, stream=3)]
    t = read(str(kineto(tmp_path, events)))
    got = [(r.name, r.kind, r.measured_us, r.start_us, r.stream) for r in t.records]
    assert got == [("allreduce", "all_reduce", 40, 20, 7), ("allgather", "all_gather", 11, 120, 7),
                   ("SendRecv kernel", "send_recv", 9, 300, 7)]
    assert t.records[1].size_bytes == 1024 * 4            # AllGather: the output (8 x 128), the whole buffer
    assert t.compute == [(3, 20, 30)]


def test_exposed_time_is_what_compute_on_another_stream_does_not_hide(tmp_path):
    # collective 0..100 on stream 7; compute 20..50 and 40..70 on stream 3 (union 50 us), 80..90 on stream 7
    events = [comm(0, 1), launch(0.5, 1), kernel("ncclKernel_AllReduce_RING_LL_Sum_float", 0, 100, 1),
              kernel("gemm", 20, 30, 2, stream=3), kernel("gemm", 40, 30, 3, stream=3), kernel("add", 80, 10, 4)]
    assert exposed_us(read(str(kineto(tmp_path, events)))) == 50


def test_kinds_not_modelled_are_listed_and_counted(tmp_path, capsys):
    path = tmp_path / "p.json"
    path.write_text(json.dumps([
        {"comms": "init"}, {"comms": "barrier"}, {"comms": "all_reduce", "in_msg_size": 256, "out_msg_size": 256,
                                                  "dtype": "Float", "world_size": 8},
        {"comms": "allreduce_coalesced", "in_msg_size": 8, "out_msg_size": 8, "dtype": "Float", "world_size": 8},
        {"comms": "barrier"}, {"compute": "gemm"},
        {"comms": "all_gather", "in_msg_size": 8, "out_msg_size": 64, "dtype": "Float"}]))     # no group size
    df = rows(capsys, path, "-t", "switch8")
    assert list(df.name) == ["init", "barrier", "all_reduce", "allreduce_coalesced", "barrier", "all_gather"]
    assert list(df.note.fillna("")) == ["not modelled", "not modelled", "", "not modelled", "not modelled",
                                        "no group size in the trace"]
    out = run(capsys, "replay", path, "-t", "switch8", "--format", "json")[1]
    assert json.loads(out)["traces"][0]["not_timed"] == "all_gather x1; allreduce_coalesced x1; barrier x2; init x1"


def test_all_to_allv_from_its_splits(tmp_path):
    events = [comm(0, 1, name="all_to_allv", nelems=6, **{"In split size": "[1, 2, 3]"})]
    rec = read(str(kineto(tmp_path, events))).records[0]
    assert (rec.kind, rec.splits, rec.size_bytes) == ("all_to_allv", (1, 2, 3), 24)


def test_a_gzipped_trace_reads_as_the_plain_one(tmp_path):
    plain = tmp_path / "plain.json"
    plain.write_bytes(gzip.decompress(KINETO.read_bytes()))
    assert read(str(plain)).records == read(str(KINETO)).records


# ------------------------------------------------------------------------------ refused, one line, status 2

def refused(capsys, tmp_path, content: bytes, message: str):
    path = tmp_path / "bad.json"
    path.write_bytes(content)
    status, out, err = run(capsys, "replay", path, "-t", "switch8")
    assert_one_line_error(status, out, err)
    assert err == f"hccl-bench: error: {path}: {message}\n"


def test_a_truncated_json_trace_is_refused(capsys, tmp_path):
    refused(capsys, tmp_path, b'{"traceEvents": [\n{"ph": "X",',
            "line 2: not JSON (Expecting property name enclosed in double quotes); a trace must be read whole")


def test_a_truncated_gzip_trace_is_refused(capsys, tmp_path):
    refused(capsys, tmp_path, KINETO.read_bytes()[:-100],
            "not a readable gzip file (Compressed file ended before the end-of-stream marker was reached)")


def test_an_unknown_json_is_refused(capsys, tmp_path):
    refused(capsys, tmp_path, b'{"rows": []}',
            "not a trace hccl-bench reads: expected a Kineto trace (a 'traceEvents' list), a Chakra execution "
            "trace ('schema' and 'nodes') or a PARAM comms trace (a list of {'comms': ...} entries)")


def test_a_record_without_its_size_is_refused(capsys, tmp_path):
    event = comm(0, 1)
    del event["args"]["In msg nelems"]
    refused(capsys, tmp_path, json.dumps({"traceEvents": [event]}).encode(),
            "traceEvents[0] ('record_param_comms'): allreduce: no 'In msg nelems'")


def test_bad_values_are_refused(capsys, tmp_path):
    refused(capsys, tmp_path, json.dumps({"traceEvents": [comm(0, 1, dtype="Quaternion")]}).encode(),
            "traceEvents[0] ('record_param_comms'): dtype 'Quaternion': expected one of bfloat16, bool, byte, "
            "char, double, float, float8_e4m3fn, float8_e5m2, half, int, long, long int, signed char, unsigned char")
    refused(capsys, tmp_path, json.dumps({"traceEvents": [comm(0, 1, nelems=-3)]}).encode(),
            "traceEvents[0] ('record_param_comms'): In msg nelems: expected a whole number of elements >= 0, got -3")
    refused(capsys, tmp_path, json.dumps({"traceEvents": [comm("soon", 1)]}).encode(),
            "traceEvents[0] ('record_param_comms'): 'ts': expected a number, got 'soon'")


def test_bad_execution_and_param_traces_are_refused(capsys, tmp_path):
    node = {"id": 7, "name": "record_param_comms", "attrs": [{"name": "rf_id", "value": 1}]}
    refused(capsys, tmp_path, json.dumps({"schema": "1.0.2", "nodes": [node]}).encode(),
            "node id 7: record_param_comms: no 'collective_name' attr (execution trace schema older than 1.0.3?)")
    refused(capsys, tmp_path, json.dumps([{"comms": "all_reduce", "dtype": "Float"}, {"x": 1}]).encode(),
            "entry 0: all_reduce: no 'in_msg_size'")
    refused(capsys, tmp_path, json.dumps([{"comms": "barrier"}, {"x": 1}]).encode(),
            "entry 1: expected a 'comms' or 'compute' key, got ['x']")


def test_without_auto_the_saving_is_against_the_best_single_algorithm_per_kind(capsys):
    # on 8 ranks Broadcast's winner between tree and direct changes with its size (424 B, 212480 B)
    status, out, err = run(capsys, "replay", PARAM, "-t", "switch8", "--scale-ranks", "8", "-a", "tree,direct",
                           "--format", "json")
    assert status == 0, err
    per = pd.DataFrame(json.loads(out)["collectives"]).dropna(subset=["best_us"])
    single = sum(min(k[a].sum(min_count=len(k)) for a in ("tree_us", "direct_us") if k[a].notna().all())
                 for _, k in per.groupby("collective"))
    best = per[["tree_us", "direct_us"]].min(axis=1).sum()
    total = json.loads(out)["traces"][0]
    assert total["auto_us"] is None and total["best_us"] == pytest.approx(best)
    assert total["saves_us"] == pytest.approx(single - best) and total["saves_us"] > 0


def test_an_unreadable_file_and_a_bad_output_are_refused(capsys, tmp_path):
    assert_one_line_error(*run(capsys, "replay", tmp_path / "none.json", "-t", "switch8"),
                          f"{tmp_path / 'none.json'}: cannot read (No such file or directory)")
    assert_one_line_error(*run(capsys, "replay", PARAM, "-t", "switch8", "-o", tmp_path / "x.txt"),
                          "-o/--output: expected a file ending in .csv, .json or .parquet")
