"""Chrome / Perfetto traces of one packet-engine point: what every message engine and link did when.

Open the JSON in ui.perfetto.dev or chrome://tracing. Tracks: one per rank and message-engine lane
(transfers a rank issued, from start to the last packet's arrival), one per switch that sends
(multicasts), one per link that carried anything (merged busy intervals).
"""

from __future__ import annotations

import json

import numpy as np

from ..core.errors import ConfigError
from ..core.units import DTYPE_SIZE
from ..engine import packet
from ..engine import packet_kernel as K
from ..network.topology import Topology
from ..schedule import collectives as C
from ..schedule.algorithm import Problem, parse_spec
from ..schedule.ir import F_KIND, KIND_NAMES
from .safefile import replace_text

PID_RANKS, PID_SWITCHES, PID_LINKS = 1, 2, 3


def _lanes(starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Interval partitioning: the lowest free lane for each interval, in start order."""
    lane = np.zeros(len(starts), np.int64)
    free_at: list[int] = []
    for i in np.lexsort((ends, starts)):
        for k, t in enumerate(free_at):
            if t <= starts[i]:
                lane[i], free_at[k] = k, ends[i]
                break
        else:
            lane[i] = len(free_at)
            free_at.append(ends[i])
    return lane


def chrome_events(run: packet.PacketRun, topo: Topology, schedule) -> list[dict]:
    prob = run.problem
    xt, ex = prob.xt, prob.explicit
    kinds = schedule.tmpl[ex["tmpl"], F_KIND]
    events = [{"ph": "M", "name": "process_name", "pid": PID_RANKS, "args": {"name": "ranks (message engines)"}},
              {"ph": "M", "name": "process_name", "pid": PID_SWITCHES, "args": {"name": "switches (multicast)"}},
              {"ph": "M", "name": "process_name", "pid": PID_LINKS, "args": {"name": "links (busy)"}}]
    named = set()
    done = (run.start >= 0) & (run.finish >= 0) & (xt[:, K.X_NPK] > 0)
    for src in np.unique(xt[done, K.X_SRC]):
        mine = np.nonzero(done & (xt[:, K.X_SRC] == src))[0]
        lanes = _lanes(run.start[mine], run.finish[mine])
        pid = PID_RANKS if src < topo.nranks else PID_SWITCHES
        for x, lane in zip(mine.tolist(), lanes.tolist()):
            tid = int(src) * 1000 + lane
            if tid not in named:
                named.add(tid)
                events.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid,
                               "args": {"name": f"{topo.node_name(int(src))} engine {lane}"}})
            nbytes = int((xt[x, K.X_NPK] - 1) * xt[x, K.X_PKB] + xt[x, K.X_LASTB])
            events.append({"ph": "X", "pid": pid, "tid": tid, "ts": run.start[x] / 1e6,
                           "dur": (run.finish[x] - run.start[x]) / 1e6,
                           "name": f"{KIND_NAMES[int(kinds[x])]} {topo.node_name(int(src))}->"
                                   f"{topo.node_name(int(xt[x, K.X_DST]))}",
                           "args": {"transfer": x, "bytes": nbytes, "packets": int(xt[x, K.X_NPK])}})
    for link in np.unique(run.trace[:, 0]) if len(run.trace) else []:
        events.append({"ph": "M", "name": "thread_name", "pid": PID_LINKS, "tid": int(link),
                       "args": {"name": f"link {link}: {topo.node_name(int(topo.link_src[link]))}->"
                                        f"{topo.node_name(int(topo.link_dst[link]))}"}})
    for link, t0, t1 in run.trace.tolist():
        events.append({"ph": "X", "pid": PID_LINKS, "tid": int(link), "ts": t0 / 1e6, "dur": (t1 - t0) / 1e6,
                       "name": "busy"})
    return events


def write_trace(path: str, topo: Topology, collective: str, algorithm: str, size: int, dtype: str,
                root: int = 0, traffic=None) -> None:
    """Simulate one point with the packet engine and write its trace as Chrome trace-event JSON. traffic:
    all_to_allv's matrix (hcclsim.schedule.matrix.Traffic; None: uniform)."""
    algo = parse_spec(algorithm)
    problem = Problem(collective, topo, root)
    ws = DTYPE_SIZE[dtype]
    sz = C.sizing(collective, size, ws, topo.nranks, traffic)
    schedule = algo.compile(problem, algo.structure_key(problem, sz, ws))
    run = packet.simulate(packet.prepare(schedule, topo, sz.block_elems, ws), want_trace=True)
    doc = {"displayTimeUnit": "ns", "traceEvents": chrome_events(run, topo, schedule),
           "otherData": {"collective": collective, "algorithm": algorithm, "topology": topo.name,
                         "size_bytes": sz.size_bytes, **({"matrix": traffic.label} if traffic else {}), "time_us": run.time * 1e6, **run.stats}}
    try:
        replace_text(path, json.dumps(doc) + "\n")
    except OSError as e:
        raise ConfigError(f"--trace: cannot write {path!r} ({e.strerror or e})") from None
