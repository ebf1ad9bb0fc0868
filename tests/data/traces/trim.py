"""Trim a public trace to what `hccl-bench replay` reads, so the test corpus stays small (SOURCES.md).

    python tests/data/traces/trim.py ORIGINAL OUTPUT

Kineto traces keep the record_param_comms ops (with their args), the NCCL kernels and the runtime launches
that link them (by correlation), and every other kernel as (stream, ts, dur) under its name cut to 40
characters (the compute that overlaps the collectives); other events go. With --annotations they also keep
the "nccl:NAME" annotations (their Input Dims and Input type: the only sizes PyTorch < 2.1 traces carry). Execution traces keep their
record_param_comms and process_group:init nodes. With --param, an execution trace becomes the PARAM basic
comms trace its collectives make (the entries facebookresearch/param train/comms/pt/commsTraceParser.py
_parseBasicTraceComms reads: comms, in_msg_size, out_msg_size, dtype, pg_id, world_size). Output gzipped
when OUTPUT ends in .gz.

    python tests/data/traces/trim.py --param ORIGINAL_ET OUTPUT
    python tests/data/traces/trim.py --annotations ORIGINAL OUTPUT
"""

import gzip
import json
import re
import sys

NCCL = re.compile(r"^(?:nccl|rccl)(?:Dev)?Kernel_")
KEEP_ARGS = {"stream", "correlation", "External id", "device"}
SIZE_ARGS = {"Input Dims", "Input type"}


def _load(path):
    with open(path, "rb") as f:
        data = f.read()
    return json.loads(gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data)


def _event(e, args):
    return {**{k: e[k] for k in ("ph", "cat", "name", "pid", "tid", "ts", "dur") if k in e}, "args": args}


def trim_kineto(data, annotations=False):
    events = data["traceEvents"]
    nccl = {e["args"]["correlation"] for e in events if e.get("cat") == "kernel" and NCCL.match(e["name"])}
    out = []
    for e in events:
        cat, args = e.get("cat"), e.get("args") or {}
        if e.get("ph") != "X":
            continue
        if (cat == "cpu_op" and e["name"] == "record_param_comms") or (cat == "kernel" and NCCL.match(e["name"])):
            out.append(_event(e, args))
        elif cat == "kernel":
            out.append({**_event(e, {k: v for k, v in args.items() if k in KEEP_ARGS}), "name": e["name"][:40]})
        elif cat in ("cuda_runtime", "hip_runtime") and args.get("correlation") in nccl:
            out.append(_event(e, {k: v for k, v in args.items() if k in KEEP_ARGS}))
        elif annotations and cat == "user_annotation" and e["name"].startswith("nccl:"):
            out.append(_event(e, {k: v for k, v in args.items() if k in SIZE_ARGS}))
    head = {k: data[k] for k in ("schemaVersion", "distributedInfo") if k in data}
    head["deviceProperties"] = [{"id": d.get("id"), "name": d.get("name")} for d in data.get("deviceProperties", [])[:1]]
    return {**head, "traceEvents": out}


def trim_et(data):
    nodes = [n for n in data["nodes"] if n["name"] == "record_param_comms" or "process_group:init" in n["name"]]
    return {**{k: v for k, v in data.items() if k != "nodes"}, "nodes": nodes}


def et_to_param(data):
    out = []
    for n in data["nodes"]:
        if n["name"] != "record_param_comms":
            continue
        a = {x["name"]: x.get("value") for x in n["attrs"]}
        entry = {"comms": PARAM_NAMES.get(a["collective_name"], a["collective_name"])}
        if entry["comms"] not in ("wait", "barrier", "init"):
            entry.update(in_msg_size=a["in_msg_nelems"], out_msg_size=a["out_msg_nelems"], dtype=a["dtype"],
                         pg_id=int(a["pg_name"]), world_size=a["pg_size"])
        out.append(entry)
    return out


# PARAM's names (train/comms/pt/comms_utils.py paramToCommName) for PyTorch's.
PARAM_NAMES = {"allreduce": "all_reduce", "allgather": "all_gather", "reduce_scatter": "reduce_scatter"}


def main(src, dst, param=False, annotations=False):
    data = _load(src)
    out = et_to_param(data) if param else trim_kineto(data, annotations) if "traceEvents" in data else trim_et(data)
    text = json.dumps(out, separators=(",", ":")).encode()
    with open(dst, "wb") as f:
        f.write(gzip.compress(text, mtime=0) if dst.endswith(".gz") else text)


if __name__ == "__main__":
    args = sys.argv[1:]
    main(*[a for a in args if a not in ("--param", "--annotations")], param="--param" in args,
         annotations="--annotations" in args)
