"""Sweep rows in nccl-tests' text layout (`hccl-bench sweep --format nccl-tests`), so log parsers and
dashboards written for nccl-tests read simulated runs.

The layout is NVIDIA/nccl-tests 2.19.6 (a0b82b2) src/util.cu: writeDeviceReport (the '# nThread' line,
'# Using devices' and one '#  Rank' line per rank), writeResultHeader (three column-header lines),
writeBenchmarkLinePreamble/Body (a row: size, count, type, redop, root, then time, algbw, busbw, #wrong
out of place and in place, each number through getFloatStr), writeResultFooter ('# Out of bounds values',
'# Avg bus bandwidth': the mean busbw of every row, out of place and in place, src/common.cu:895).
One block per (collective, algorithm, engine), as a script running one nccl-tests binary per algorithm
with NCCL_ALGO set would print. What differs, each said in a comment line of the block:

* no '# nccl-tests version' line (no nccl-tests or NCCL ran); instead '# hccl-bench ...' lines name the
  topology, engine, algorithm ('# hccl-bench algorithm: NAME') and protocol, and '# NCCL_ALGO=' /
  '# NCCL_PROTO=' give NCCL's names when it has one (init.cc ncclAlgoStr, ncclProtoStr);
* validation 0, so #wrong is N/A, as nccl-tests prints it with -c 0;
* the in-place columns repeat the out-of-place ones: the simulator has no in-place difference;
* one process per rank (nThread 1 nGpus 1), on host node-D for scale-up domain D, device = rank in it.
"""

from __future__ import annotations

import pandas as pd

from ..core.units import DTYPE_SIZE
from ..core.version import __version__
from ..schedule import collectives as C
from .nccl_tuner import NCCL_NAMES, PROTOCOLS

PROGRAMS = {C.ALL_REDUCE: "all_reduce_perf", C.ALL_GATHER: "all_gather_perf", C.REDUCE_SCATTER: "reduce_scatter_perf",
            C.ALL_TO_ALL: "alltoall_perf", C.BROADCAST: "broadcast_perf", C.REDUCE: "reduce_perf",
            C.ALL_TO_ALLV: "alltoallv_perf", C.SEND_RECV: "sendrecv_perf", C.PP_RING: "sendrecv_perf"}
PER_RANK_COUNT = (C.ALL_GATHER, C.REDUCE_SCATTER, C.ALL_TO_ALL, C.ALL_TO_ALLV)   # count is per rank (getCollByteCount)
REDUCING = (C.ALL_REDUCE, C.REDUCE_SCATTER, C.REDUCE)                 # redop sum; the others print none
TYPES = {"float32": "float", "float16": "half", "float64": "double", "float8_e4m3": "f8e4m3",
         "float8_e5m2": "f8e5m2"}                                     # common.cu test_typenames; others as named


HEADER = ((f"# {'':>10}  {'':>12}  {'':>8}  {'':>6}  {'':>6}           out-of-place                       "
           f"in-place          "),
          (f"# {'size':>10}  {'count':>12}  {'type':>8}  {'redop':>6}  {'root':>6}  {'time':>7}  {'algbw':>6}  "
           f"{'busbw':>6}  {'#wrong':>6}  {'time':>7}  {'algbw':>6}  {'busbw':>6}  {'#wrong':>6} "),
          (f"# {'(B)':>10}  {'(elements)':>12}  {'':>8}  {'':>6}  {'':>6}  {'(us)':>7}  {'(GB/s)':>6}  "
           f"{'(GB/s)':>6}  {'':>6}  {'(us)':>7}  {'(GB/s)':>6}  {'(GB/s)':>6}  {'':>6} "))    # writeResultHeader


def number(value: float, width: int) -> str:
    """nccl-tests' getFloatStr: two decimals, else one, else none, else e-notation, within width."""
    for spec in (".2f", ".1f", ".0f"):
        text = f"{value:{width}{spec}}"
        if len(text) <= width:
            return text
    return f"{value:{width}{'.1e' if width >= 7 else '.0e'}}"


def _body(r) -> str:
    return f"  {number(r.time_us, 7)}  {number(r.algbw_GBps, 6)}  {number(r.busbw_GBps, 6)}    N/A"


def _protocols(part: pd.DataFrame) -> str:
    """'ll' or '8-524288 ll, 8388608-134217728 simple': the protocol of each run of sizes."""
    runs = part.groupby((part["protocol"] != part["protocol"].shift()).cumsum(), sort=True)
    spans = [(g["size_bytes"].iloc[0], g["size_bytes"].iloc[-1], g["protocol"].iloc[0]) for _, g in runs]
    return spans[0][2] if len(spans) == 1 else ", ".join(f"{lo}-{hi} {p}" for lo, hi, p in spans)


def block(part: pd.DataFrame, local: int, minbytes: int, maxbytes: int, factor: int, iters: int) -> str:
    """One nccl-tests run: the rows of one (collective, algorithm, engine), on ranks in domains of `local`."""
    first = part.iloc[0]
    coll, algo, ranks, program = first["collective"], first["algorithm"], int(first["ranks"]), PROGRAMS[first["collective"]]
    lines = [f"# Collective test starting: {program}",
             (f"# nThread 1 nGpus 1 minBytes {minbytes} maxBytes {maxbytes} step: {factor}(factor) warmup iters: 0 "
              f"iters: {iters} agg iters: 1 validation: 0 graph: 0 unalign: 0"),
             "#", "# Using devices"]
    lines += [(f"#  Rank {r:2d} Group  0 Pid {r + 1:6d} on {f'node-{r // local}':>10} device {r % local:2d} "
               f"[0000:00:00] simulated {first['topology']}") for r in range(ranks)]
    lines += [(f"# hccl-bench {__version__}: simulated, not measured: topology {first['topology']} ({ranks} ranks), "
               f"engine {first['engine']}"),
              f"# hccl-bench algorithm: {algo}",
              f"# hccl-bench protocol: {_protocols(part)}"]
    if algo in NCCL_NAMES:
        lines.append(f"# NCCL_ALGO={NCCL_NAMES[algo][1]}")
    if part["protocol"].nunique() == 1 and first["protocol"] in PROTOCOLS:
        lines.append(f"# NCCL_PROTO={PROTOCOLS[first['protocol']]}")
    if "time_us_p50" in part.columns:
        lines.append(f"# time: the median of {iters} simulated iterations")
    lines += ["# in-place columns repeat the out-of-place ones: the simulator has no in-place difference", "#",
              *HEADER]
    dtype = first["dtype"]
    per = DTYPE_SIZE[dtype] * (ranks if coll in PER_RANK_COUNT else 1)
    redop = "sum" if coll in REDUCING else "none"
    for r in part.itertuples(index=False):
        body = _body(r)
        lines.append(f"{r.size_bytes:12d}  {r.size_bytes // per:12d}  {TYPES.get(dtype, dtype):>8}  {redop:>6}  "
                     f"{r.root:6d}{body}{body}")
    lines += [f"# {'Out of bounds values':<20} : 0 OK",
              f"# {'Avg bus bandwidth':<20} : {part['busbw_GBps'].mean():g} ",
              "#", f"# Collective test concluded: {program}", "#", ""]
    return "\n".join(lines) + "\n"


def to_nccl_tests(rows: pd.DataFrame, local: int, minbytes: int, maxbytes: int, factor: int, iters: int = 1) -> str:
    """Every (collective, algorithm, engine) block of a sweep (hcclsim.sweeping.sweep.COLUMNS rows) on a
    topology with `local` ranks per scale-up domain, swept with nccl-tests' -b/-e/-f and --iters."""
    return "".join(block(part, local, minbytes, maxbytes, factor, iters)
                   for _, part in rows.groupby(["collective", "algorithm", "engine"], sort=False))
