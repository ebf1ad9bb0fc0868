"""`hccl-bench replay r0.json r1.json ...` (docs/replay.md, "Every rank of one job"): the rank files of one job
matched collective by collective, the measured time the fastest rank's kernel.

The DLRM values below were read from the original files (tests/data/traces/SOURCES.md) with jq:
  for r in 0 1 2 3 4 5 6 7; do jq -c '[.traceEvents[] | select(.cat=="kernel" and (.name|startswith("nccl")))
      | [.ts, .dur]] | sort | map(.[1])' worker${r}_step_12.*.pt.trace.json; done | jq -sc transpose
  jq -c '[.traceEvents[] | select(.name|startswith("nccl:")) | [.ts, .name, .args["Input Dims"][0][0],
         .args["Input type"][0]]] | sort' worker0_step_12.*.pt.trace.json
"""

import io
import json
from pathlib import Path

import pandas as pd
from helpers import assert_one_line_error
from helpers import run_cli as run

DATA = Path(__file__).parent / "data" / "traces"
DLRM = sorted((DATA / "v100_8gpu_dlrm_kineto").glob("worker*.json.gz"))
KINETO = DATA / "a100_2gpu_resnet_kineto.json.gz"          # rank 0 of a world of 2
OLD = DATA / "a100_8gpu_pt1.12_kineto.json.gz"             # rank 3 of a world of 8
# Kernel durations (us) per collective (rows) and rank (columns 0..7), in each rank's order of launch.
DLRM_US = [[2146, 7635, 518, 6132, 4882, 4679, 514, 10],
           [1032, 1025, 517, 1021, 1108, 1060, 520, 8],
           [176, 169, 173, 174, 170, 175, 175, 7],
           [131, 132, 131, 133, 132, 132, 131, 7],
           [246, 307, 198, 291, 95, 96, 213, 86],
           [514, 545, 468, 542, 61, 10, 483, 357],
           [601, 601, 572, 602, 70, 20, 602, 468],
           [952, 922, 915, 879, 69, 79, 920, 803]]
# nccl:NAME annotations: elements x element size of the input tensor (float 4, long int 8, int 4).
DLRM_SIZES = [6144 * 4, 24 * 8, 384 * 4, 3392 * 4, 394241 * 4, 6144 * 4, 112 * 4, 226960 * 4]
DLRM_KINDS = ["all_to_all"] * 4 + ["all_reduce", "all_to_all", "all_reduce", "all_reduce"]


def rows(capsys, *args):
    status, out, err = run(capsys, "replay", *args, "--format", "csv")
    assert status == 0, err
    return pd.read_csv(io.StringIO(out), keep_default_na=False, na_values=[""])


def test_the_eight_dlrm_ranks_are_matched_and_timed_by_their_fastest_rank(capsys):
    df = rows(capsys, *DLRM, "-t", "dgx1-v100", "-a", "ring,auto")             # the traced machine's preset
    assert list(df.collective) == DLRM_KINDS and list(df.size_bytes) == DLRM_SIZES
    assert list(df.measured_us) == [min(r) for r in DLRM_US]
    assert list(df.measured_max_us) == [max(r) for r in DLRM_US]
    assert (df.measured_ranks == 8).all()
    # no process group in these traces: every collective is on all 8 ranks of the world, so its group
    assert (df.ranks == 8).all() and df.auto_us.notna().all()
    assert df.trace.iloc[0] == f"{DLRM[0]} (+7 ranks)"


def test_a_part_of_a_world_is_matched_over_its_ranks_but_has_no_group_size(capsys):
    df = rows(capsys, DLRM[0], DLRM[1], "-t", "dgx-a100")
    assert list(df.measured_us) == [min(r[:2]) for r in DLRM_US] and (df.measured_ranks == 2).all()
    assert set(df.note) == {"no group size in the trace"}          # 2 of 8 ranks: the group is not known


# ------------------------------------------------------------------------------ hand-made pairs of ranks

def rank_trace(tmp_path, rank, collectives, world=2, name=None, compute=()):
    """A Kineto trace of one rank: per collective (name, process group, elements, kernel start, kernel us);
    compute: (stream, start, us) of compute kernels (the collectives run on stream 7)."""
    events = [{"ph": "X", "cat": "kernel", "name": "ampere_sgemm_128x64_nn", "pid": 0, "tid": st, "ts": ts,
               "dur": dur, "args": {"stream": st}} for st, ts, dur in compute]
    for i, (coll, group, nelems, ts, dur) in enumerate(collectives):
        args = {"Collective name": coll, "In msg nelems": nelems, "Out msg nelems": nelems, "Group size": 2,
                "dtype": "Float", "Process Group Name": group, "Process Group Ranks": "[0, 1]"}
        events += [{"ph": "X", "cat": "cpu_op", "name": "record_param_comms", "pid": 1, "tid": 1, "ts": ts - 10,
                    "dur": 5, "args": args},
                   {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": ts - 8,
                    "dur": 1, "args": {"correlation": i}},
                   {"ph": "X", "cat": "kernel", "name": f"ncclDevKernel_{coll}", "pid": 0, "tid": 7, "ts": ts,
                    "dur": dur, "args": {"correlation": i, "stream": 7}}]
    path = tmp_path / (name or f"rank{rank}.json")
    path.write_text(json.dumps({"distributedInfo": {"rank": rank, "world_size": world}, "traceEvents": events}))
    return path


def test_the_minimum_over_ranks_of_each_collective_of_each_group(capsys, tmp_path):
    # rank 0: group 0 AllReduce 100 us, group 1 Broadcast 5 us, group 0 AllReduce 40 us;
    # rank 1 launches group 1's Broadcast first: 12 us, then the AllReduces, 30 us and 70 us
    r0 = rank_trace(tmp_path, 0, [("allreduce", "0", 256, 1000, 100), ("broadcast", "1", 64, 1200, 5),
                                  ("allreduce", "0", 512, 1300, 40)])
    r1 = rank_trace(tmp_path, 1, [("broadcast", "1", 64, 900, 12), ("allreduce", "0", 256, 1050, 30),
                                  ("allreduce", "0", 512, 1310, 70)])
    df = rows(capsys, r1, r0, "-t", "switch8")                      # the order of the files does not matter
    assert list(df.collective) == ["all_reduce", "broadcast", "all_reduce"]           # rank 0's order
    assert list(df.size_bytes) == [1024, 256, 2048]
    assert list(df.measured_us) == [30, 5, 40] and list(df.measured_max_us) == [100, 12, 70]
    assert (df.measured_ranks == 2).all() and (df.ranks == 2).all()
    status, out, err = run(capsys, "replay", r0, r1, "-t", "switch8", "--format", "json")
    assert status == 0, err
    assert json.loads(out)["traces"][0]["measured_us"] == 30 + 5 + 40


def test_the_job_exposed_time_is_each_collective_on_its_fastest_rank(capsys, tmp_path):
    # the AllReduce runs fastest on rank 1 (1050-1080), where a compute kernel on stream 9 covers 1050-1060 and
    # one on the collectives' own stream 7 (1070-1075) covers nothing: 20 us exposed; the Broadcast runs
    # fastest on rank 0 (1200-1205), with 1200-1203 covered: 2 us. Rank 0's long AllReduce kernel (1000-1100,
    # its wait for rank 1) is not the collective's time, nor is its compute there
    ops0, ops1 = [("allreduce", "0", 256, 1000, 100), ("broadcast", "1", 64, 1200, 5)], \
        [("allreduce", "0", 256, 1050, 30), ("broadcast", "1", 64, 1190, 12)]
    r0 = rank_trace(tmp_path, 0, ops0, compute=[(9, 1020, 30), (9, 1195, 8)])
    r1 = rank_trace(tmp_path, 1, ops1, compute=[(9, 1040, 20), (7, 1070, 5)])
    status, out, err = run(capsys, "replay", r0, r1, "-t", "switch8", "--format", "json")
    assert status == 0, err
    job = json.loads(out)["traces"][0]
    assert (job["measured_us"], job["exposed_us"]) == (30 + 5, 20 + 2)
    # one file without compute kernels: no exposed time for the job
    bare = rank_trace(tmp_path, 1, ops1, name="bare1.json")
    status, out, _ = run(capsys, "replay", r0, bare, "-t", "switch8", "--format", "json")
    assert status == 0 and json.loads(out)["traces"][0]["exposed_us"] is None


def test_separate_traces_keep_replaying_alone(capsys):
    df = rows(capsys, KINETO, OLD, "-t", "dgx-a100")               # worlds of 2 and of 8: not one job
    assert list(df.trace.unique()) == [str(KINETO), str(OLD)]
    assert "measured_ranks" not in df and "measured_ranks" not in rows(capsys, KINETO, "-t", "dgx-a100")


def refused(capsys, message, *args):
    assert_one_line_error(*run(capsys, "replay", *args, "-t", "switch8"), message)


def test_ranks_that_do_not_agree_are_refused(capsys, tmp_path):
    r0 = rank_trace(tmp_path, 0, [("allreduce", "0", 256, 1000, 100), ("allreduce", "0", 512, 1300, 40)])
    kind = rank_trace(tmp_path, 1, [("allreduce", "0", 256, 1000, 9), ("allgather", "0", 512, 1300, 9)], name="k.json")
    refused(capsys, f"{kind}: record 1 ('allgather'), collective 1 of process group '0': all_gather of 2048 bytes "
                    f"(float32, group size 2), where {r0} record 1 is all_reduce of 2048 bytes (float32, group size 2): "
                    f"expected the same collective on every rank of one job", r0, kind)
    size = rank_trace(tmp_path, 1, [("allreduce", "0", 256, 1000, 9), ("allreduce", "0", 128, 1300, 9)], name="s.json")
    refused(capsys, f"{size}: record 1 ('allreduce'), collective 1 of process group '0': all_reduce of 512 bytes",
            r0, size)
    short = rank_trace(tmp_path, 1, [("allreduce", "0", 256, 1000, 9)], name="short.json")
    refused(capsys, f"{short}: process group '0': 1 collectives, {r0} has 2: expected the same steps traced on "
                    f"every rank of one job", r0, short)


def test_inputs_that_are_not_one_job_are_refused(capsys, tmp_path):
    r0 = rank_trace(tmp_path, 0, [("allreduce", "0", 256, 1000, 100)])
    again = rank_trace(tmp_path, 0, [("allreduce", "0", 256, 1000, 100)], name="again.json")
    r1 = rank_trace(tmp_path, 1, [("allreduce", "0", 256, 1000, 100)])
    refused(capsys, f"{r0} and {again} are both rank 0 of a world of 2: expected one file per rank of one job",
            r0, again)
    refused(capsys, f"{r0}, {r1}: ranks of one job (world size 2), given with {OLD}: expected the rank files of "
                    f"one job alone", r0, r1, OLD)
    refused(capsys, f"--placement: {r0}, {r1}: ranks 0, 1 of one job (distributedInfo world size 2): expected one "
                    f"trace per job", r0, r1, "--placement", "packed")


def test_bad_rank_metadata_and_annotations_are_refused(capsys, tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"distributedInfo": {"rank": 2, "world_size": 2}, "traceEvents": []}))
    refused(capsys, f"{bad}: distributedInfo: rank 2 of world_size 2: expected whole numbers, 0 <= rank < "
                    f"world_size", bad)
    note = {"ph": "X", "cat": "user_annotation", "name": "nccl:all_reduce", "ts": 0, "dur": 1,
            "args": {"Input Dims": [], "Input type": ["float"]}}
    bad.write_text(json.dumps({"traceEvents": [note]}))
    refused(capsys, f"{bad}: traceEvents[0] ('nccl:all_reduce'): Input Dims / Input type: expected the input "
                    f"tensor's shape and type, got [] / ['float']", bad)


def test_nameless_collectives_of_part_of_the_world_are_refused(capsys, tmp_path):
    """Without process group names, the collectives of two 2-rank groups of a 4-rank job (tensor-parallel pairs)
    would be matched by position across all ranks: refused. Of the whole world (2 of 2) they are matched."""
    r0 = rank_trace(tmp_path, 0, [("allreduce", "", 256, 1000, 100)], world=4)
    r2 = rank_trace(tmp_path, 2, [("allreduce", "", 256, 1000, 30)], world=4)
    refused(capsys, f"{r0}: record 0 ('allreduce'): a collective of 2 ranks without a process group name: with the "
                    f"rank files of one job (world 4) the collectives of different groups cannot be told apart",
            r0, r2)
    w0 = rank_trace(tmp_path, 0, [("allreduce", "", 256, 1000, 100)], name="w0.json")
    w1 = rank_trace(tmp_path, 1, [("allreduce", "", 256, 1000, 30)], name="w1.json")
    assert list(rows(capsys, w0, w1, "-t", "switch8").measured_us) == [30]
