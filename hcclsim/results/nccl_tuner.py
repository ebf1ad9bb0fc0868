"""The tuner table as NCCL's example tuner plugin reads it (`hccl-bench tune --format nccl-tuner`).

NVIDIA/nccl plugins/tuner/example (README.md, plugin.c; master 5067397c) loads a CSV named by
NCCL_TUNER_CONFIG_FILE. What its parser does, and so what this writes:

* a line starting with '#' or empty is skipped; fgets reads at most 255 characters, so the rest of a
  longer line would be read as a config line: every line written is shorter (MAX_LINE below);
* a config line is split on ',' by strtok (an empty field vanishes and shifts the others: none is empty)
  into collective_type,min_bytes,max_bytes,algorithm,protocol,channels,nNodes,nRanks,numPipeOps,regBuff;
  -1 in channels keeps NCCL's own channel count, in nNodes/nRanks/numPipeOps/regBuff matches any;
* a name it does not know silently becomes allreduce, ring or simple, so only its names are written
  (COLLECTIVES, NCCL_NAMES, PROTOCOLS), and only the (collective, algorithm, protocol) triples NCCL's
  cost table offers (src/graph/tuning.cc:294-303; it ignores the others);
* the first line whose collective, [min_bytes, max_bytes], nNodes and nRanks match wins. NCCL's nBytes
  (src/enqueue.cc ncclGetAlgoInfo: count x type size, x nRanks for AllGather and ReduceScatter) is
  nccl-tests' size, hccl-bench's size_bytes; nNodes is NCCL's node count, one per NVLink domain
  (src/init.cc: nodes by the first rank of their ring; initNvlDomainInfo), hccl-bench's scale-up domains.

Neighbouring ranges with one (algorithm, protocol) make one line; a line reaches from its smallest swept
size (the first from 0) to the byte before the next line's, the last to the largest size swept, so a
collective's lines are contiguous and do not overlap. Ranges NCCL cannot be told to run are left out,
with a comment in their place and a note for stderr.
"""

from __future__ import annotations

import pandas as pd

from ..core.version import __version__
from ..sweeping import library

FIELDS = "collective_type,min_bytes,max_bytes,algorithm,protocol,channels,nNodes,nRanks,numPipeOps,regBuff"
MAX_LINE = 254                 # characters before the newline: plugin.c MAX_LINE_LENGTH 256 with fgets
COLLECTIVES = {"all_reduce": "allreduce", "all_gather": "allgather", "reduce_scatter": "reducescatter",
               "broadcast": "broadcast", "reduce": "reduce"}                       # plugin.c parseCollType
# NCCL's algorithm (init.cc ncclAlgoStr, as NCCL_ALGO takes it) -> the plugin's name (plugin.c parseAlgorithm)
PLUGIN_NAMES = {"Ring": "ring", "Tree": "tree", "NVLS": "nvls", "NVLSTree": "nvls_tree"}
# hccl-bench algorithm -> (the plugin's name, NCCL's own): hccl-bench -> NCCL from the cost model's table
NCCL_NAMES = {algo: (PLUGIN_NAMES[nccl], nccl) for algo, nccl in library.NCCL_NAMES.items()}
PROTOCOLS = {ours: nccl for nccl, ours in library.PROTOCOL_NAMES.items()}     # parseProtocol; ncclProtoStr
# The algorithms NCCL's cost table offers per collective (tuning.cc:294-298) and the Simple-only ones (301-303).
OFFERED = {"allreduce": {"ring", "tree", "collnet_direct", "collnet_chain", "nvls", "nvls_tree"},
           "allgather": {"ring", "pat", "nvls", "collnet_direct"},
           "reducescatter": {"ring", "pat", "nvls", "collnet_direct"},
           "broadcast": {"ring"}, "reduce": {"ring"}}
SIMPLE_ONLY = {"nvls", "nvls_tree", "pat"}


def why_not(collective: str, algorithm: str, protocol: str) -> str | None:
    """Why NCCL cannot be told to run this (collective, algorithm, protocol); None when it can."""
    coll = COLLECTIVES.get(collective)
    if coll is None:
        return f"NCCL's tuner plugin has no {collective}"
    if algorithm not in NCCL_NAMES:
        return f"NCCL has no algorithm {algorithm}"
    name = NCCL_NAMES[algorithm][0]
    if name not in OFFERED[coll]:
        return f"NCCL runs {coll} with {', '.join(sorted(OFFERED[coll]))} only"
    if protocol not in PROTOCOLS:
        return f"no NCCL protocol (endpoint.protocol = {protocol}): tune with --protocol auto, ll, ll128 or simple"
    if name in SIMPLE_ONLY and protocol != "simple":
        return f"NCCL runs {name} with the simple protocol only"
    return None


def tuner_config(ranges: pd.DataFrame, nodes: int) -> tuple[str, list[str]]:
    """(the config file's text, one note per range left out) from the tuner table
    (hcclsim.analysis.tune.size_ranges) of a topology with `nodes` scale-up domains."""
    where = "" if ranges.empty else (f"topology {ranges['topology'].iloc[0]}: {ranges['ranks'].iloc[0]} ranks, "
                                     f"{nodes} node{'s' * (nodes != 1)} (NVLink domains); engine {ranges['engine'].iloc[0]}; "
                                     f"dtype {ranges['dtype'].iloc[0]}")
    lines = [f"# NCCL tuner plugin config written by hccl-bench {__version__} (tune --format nccl-tuner)",
             f"# {where}",
             "# load: NCCL_TUNER_PLUGIN=<libnccl-tuner-example.so> NCCL_TUNER_CONFIG_FILE=<this file>",
             f"# {FIELDS}",
             "# channels -1: NCCL's own channel count; numPipeOps, regBuff -1: any",
             "# sizes above a collective's last line and in ranges left out: NCCL's own choice"]
    notes = []
    for coll, part in ranges.groupby("collective", sort=False):
        pick = part["algorithm"] + "/" + part["protocol"]
        starts = part.groupby((pick != pick.shift()).cumsum()).head(1)       # neighbours with one pick: one line
        lows = [0, *starts["min_size_bytes"].iloc[1:]]
        highs = [*(starts["min_size_bytes"].iloc[1:] - 1), part["max_size_bytes"].iloc[-1]]
        for r, lo, hi in zip(starts.itertuples(index=False), lows, highs, strict=True):
            reason = why_not(coll, r.algorithm, r.protocol)
            if reason:
                note = f"left out {coll} {lo}-{hi} bytes, {r.algorithm}/{r.protocol}: {reason}"
                lines.append(f"# {note}")
                notes.append(note)
            else:
                lines.append(f"{COLLECTIVES[coll]},{lo},{hi},{NCCL_NAMES[r.algorithm][0]},{r.protocol},-1,{nodes},"
                             f"{r.ranks},-1,-1")
    return "".join(line[:MAX_LINE] + "\n" for line in lines), notes
