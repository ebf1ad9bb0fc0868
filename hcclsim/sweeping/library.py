"""The algorithm and protocol NVIDIA NCCL's own tuner would pick: `[endpoint] selection = "library"`.

NCCL does not time candidates; it evaluates a cost model (per algorithm and protocol a latency and a bus
bandwidth) and takes the argmin. `-a auto` on an NCCL-like preset must pick what NCCL picks, even where
the simulator would rank the candidates differently, because that is what the user's GPUs run; the
engines still time the pick (this module only chooses). Port of NCCL v2.28.9 (tag v2.28.9-1, commit
dbc86fd06e8b0c4517b95d8958a09ccacf9520c9): ncclTopoTuneModel (src/graph/tuning.cc:230-497),
ncclTopoGetAlgoTime (:584-601), the argmin of topoGetAlgoInfo (src/enqueue.cc:1785-1840).
validation/nccl_model/constants.md holds the reading behind every constant.

Left out: CollNet (off unless NCCL_COLLNET_ENABLE=1, src/init.cc:1927), PAT (only with one GPU per node,
tuning.cc:202-209), NCCL_ALGO/NCCL_PROTO (an endpoint protocol other than auto plays NCCL_PROTO).

NCCL's topology search (ncclTopoCompute, src/graph/search.cc) is not run; `comm_of` derives its result
from the topology (docs/execution.md, "Choosing like the library"):
* totalBw: a GPU's scale-up bandwidth x the tier's efficiency (NCCL: NVLink links x SM90_NVLINK_BW,
  18 x 20.6 = 370.8 GB/s on H100); the GPU->NIC path (maxBw across nodes): the scale-out tier's
  bandwidth x efficiency (min(NIC, PCIe) = 48 GB/s). One NIC per GPU (rail-optimised): an assumption.
* one node: rings at the search's first speed s <= totalBw, floor(totalBw / s) of them, then
  ncclTopoDupChannels; trees with the rings' channel count (init.cc:1026-1027) at the first speed that fits
  totalBw x n/(n-1) (search.cc:1072-1076); NVLS one channel per GPU at the first speed s with
  (channels + 1) x s <= totalBw (the head carries 2 s, search.cc:386-417), bwInter raised to the first
  speed >= 2 bwIntra or the array's top (pass 2, search.cc:1175-1178).
* several nodes: one ring (and tree chain) per NIC at the first speed <= the NIC path; the NVLink side of
  those rings is not checked (assumption, as the hand-run search of constants.md); trees use pattern
  TREE on SM90+ (BALANCED_TREE fails: the second GPU reaches the NIC only through PXN; assumption) and
  BALANCED_TREE below; NVLS bwInter capped by the NIC path.
* comm->nChannels: the endpoint's channels (NCCL doubles search channels, connect.cc:452); NVLS channels:
  the endpoint's in_switch_channels (NVLS_NCHANNELS_SM90 = 16, src/transport/nvls.cc:148-150).
* CPU: Intel x86 (netOverhead 1 us, llMaxBws row 0 across nodes; tuning.cc:216, :253), an assumption.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

from ..network.topology import Topology
from ..schedule import collectives as C

NCCL_VERSION = "2.28.9"

# hccl-bench algorithm -> NCCL's (NCCL_ALGO names, src/include/plugin/nccl_tuner.h:25-52). Others never picked.
NCCL_NAMES = {"tree": "Tree", "ring": "Ring", "in_switch": "NVLS", "nvls_tree": "NVLSTree"}
TREE, RING, NVLS, NVLS_TREE = "Tree", "Ring", "NVLS", "NVLSTree"
PROTOS = ("LL", "LL128", "Simple")
LL, LL128, SIMPLE = PROTOS
PROTOCOL_NAMES = {"LL": "ll", "LL128": "ll128", "Simple": "simple"}
FUNCS = {C.BROADCAST: "broadcast", C.REDUCE: "reduce", C.ALL_GATHER: "allgather",
         C.REDUCE_SCATTER: "reducescatter", C.ALL_REDUCE: "allreduce"}      # AllToAll: p2p sends, not tuned

# Path types (src/graph/topo.h:48-98) and tree patterns (src/include/graph.h:95-100).
PATH_NVL, PATH_NVB, PATH_PIX, PATH_PXB, PATH_PXN = 1, 2, 4, 5, 7
PATTERN_BALANCED_TREE, PATTERN_TREE = 1, 3

NVLS_EFFICIENCY = {90: 0.85, 100: 0.74}                  # nvlsEfficiency[Hopper, Blackwell], tuning.cc:134-139
BASE_LAT = {TREE: (6.8, 14.0, 8.4), RING: (6.6, 14.0, 8.4), NVLS: (0, 0, 0), NVLS_TREE: (0, 0, 0)}  # :143-148
HW_LAT = {  # hwLat[NVLINK | PCI | NET][algo][LL, LL128, Simple] in us, tuning.cc:149-168
    "nvlink": {TREE: (.6, 1.25, 4.0), RING: (.6, 1.9, 3.4), NVLS: (0, 0, 25), NVLS_TREE: (0, 0, 25)},
    "pci": {TREE: (1.0, 1.9, 4.0), RING: (1.0, 2.5, 5.7), NVLS: (0, 0, 0), NVLS_TREE: (0, 0, 0)},
    "net": {TREE: (5.0, 8.5, 14), RING: (2.7, 4.0, 14.0), NVLS: (0, 0, 18), NVLS_TREE: (0, 0, 20.9)},
}
# Per GPU generation (Volta, Ampere, Hopper, Blackwell; tuning.cc:249), [1 node, 2 nodes, more] in GB/s.
LL_MAX_BWS = ((39.0, 39.0, 20.4), (87.7, 22.5, 19.0), (141.0, 45.0, 35.0), (282.0, 90.0, 70.0))   # :169-174
PER_CH_MAX_RING_LL128_BWS = ((20.0,) * 3, (20.0,) * 3, (36.7,) * 3, (73.4, 34.6, 73.4))           # :175-180
PER_CH_MAX_TREE_LL128_BWS = ((20.0,) * 3, (20.0,) * 3, (36.7, 36.7, 29.0), (55.6, 31.67, 20.0))   # :181-186
PER_CH_MAX_TREE_BWS = ((26.5, 18.5, 10.0), (24.0, 23.6, 17.8), (38.7, 41.4, 36.0), (70.0, 42.8, 24.0))  # :187-192
PER_CH_MAX_NVLS_TREE_BWS = ((26.5, 18.5, 10.0), (24.0, 23.6, 17.8), (0.0, 57.7, 45.5), (0.0, 96.0, 43.8))  # :193-198
# treeCorrectionFactor[proto][log2(nBytes / 64)], tuning.cc:578-582
TREE_CORRECTION = {
    LL: (1.0, 1.0, 1.0, 1.0, .9, .8, .7, .7, .7, .7, .6, .5, .4, .4, .5, .6, .7, .8, .9, 1.0, 1.0, 1.0, 1.0),
    LL128: (1.0, 1.0, 1.0, 1.0, 1.0, .9, .8, .8, .8, .7, .6, .6, .6, .6, .6, .6, .8, .9, .9, .9, .9, 1.0, 1.0),
    SIMPLE: (.9, .9, .9, .9, .9, .9, .9, .8, .7, .6, .6, .5, .5, .5, .5, .6, .7, .8, .7, .7, .8, .9, .9),
}
# The search's speeds in GB/s, one node (intra) or several (inter): src/graph/search.cc:976-987.
SPEEDS = {  # (cc floor, across nodes) -> speeds
    (0, False): (40.0, 30.0, 20.0, 18.0, 15.0, 12.0, 10.0, 9.0, 7.0, 6.0, 5.0, 4.0, 3.0),
    (0, True): (48.0, 30.0, 28.0, 24.0, 20.0, 18.0, 15.0, 12.0, 10.0, 9.0, 7.0, 6.0, 5.0, 4.0, 3.0, 2.4, 1.2, .24, .12),
    (90, False): (60.0, 50.0, 40.0, 30.0, 24.0, 20.0, 15.0, 12.0, 11.0, 6.0, 3.0),
    (90, True): (48.0, 45.0, 42.0, 40.0, 30.0, 24.0, 22.0, 20.0, 17.5, 15.0, 12.0, 6.0, 3.0, 2.4, 1.2, .24, .12),
    (100, False): (90.0, 80.0, 70.0, 60.0, 50.0, 40.0, 30.0, 24.0, 20.0, 19.0, 18.0),
    (100, True): (96.0, 48.0, 45.1, 42.0, 40.0, 30.0, 24.0, 22.0, 20.0, 17.5, 15.0, 12.0, 6.0, 3.0, 2.4, 1.2, .24, .12),
}
MAX_RING_CHANNELS = 32          # ringGraph->maxChannels = MAXCHANNELS/2, src/init.cc:1019 (device.h:86)
NCCL_MAX_NVLS_ARITY = 32        # NVLS heads at most, search.cc:1038 (src/include/device.h)
NCCL_NVLS_MAX_LOCAL = 32        # NVLS off for AllGather/ReduceScatter above 32 local ranks, enqueue.cc:1805


@dataclass(frozen=True)
class Graph:
    """What ncclTopoCompute returns for one pattern (struct ncclTopoGraph): search channels and GB/s each."""

    channels: int
    bw_intra: float
    bw_inter: float
    pattern: int = 0
    type_intra: int = PATH_NVL
    type_inter: int = PATH_PIX


@dataclass(frozen=True)
class Comm:
    """The part of ncclComm the tuning model reads. graphs: NCCL algorithm -> Graph (NVLSTree shares NVLS's)."""

    nranks: int
    nnodes: int
    cc: int                          # minCompCap = maxCompCap (one GPU type)
    graphs: dict
    nchannels: int                   # comm->nChannels, after connect.cc's doubling
    nvls_channels: int = 0           # comm->nvlsChannels; 0: no NVLS
    cpu: str = "intel"
    model: dict = field(default_factory=dict, compare=False, repr=False)   # (func, algo, proto) -> (bw, lat)


def generation(cc: int) -> int:
    """compCapIndex, tuning.cc:249: 0 Volta, 1 Ampere, 2 Hopper, 3 Blackwell."""
    return 3 if cc >= 100 else 2 if cc >= 90 else 1 if cc >= 80 else 0


def _tune(comm: Comm) -> dict:
    """ncclTopoTuneModel (tuning.cc:230-404) with its enabling rules (:406-497): per (func, algo, proto)
    the model's algorithm bandwidth (GB/s) and latency (us), for the enabled ones."""
    n, nodes, ppn = comm.nranks, comm.nnodes, comm.nranks / comm.nnodes
    gi, i2 = generation(comm.cc), (comm.nnodes - 1 if comm.nnodes <= 2 else 2)
    ll_max = LL_MAX_BWS[gi if nodes == 1 else (1 if comm.cpu == "amd" else 0)][i2]
    tree_pattern = comm.graphs[TREE].pattern if TREE in comm.graphs else PATTERN_BALANCED_TREE
    out = {}
    for func in FUNCS.values():
        steps = 2 * (n - 1) if func == "allreduce" else n - 1 if func in ("allgather", "reducescatter") else n
        for algo, g in ((a, comm.graphs.get(NVLS if a == NVLS_TREE else a)) for a in (TREE, RING, NVLS, NVLS_TREE)):
            if g is None or (func in ("broadcast", "reduce") and algo != RING) \
                    or (func in ("allgather", "reducescatter") and algo not in (RING, NVLS)):     # :272-282
                continue
            if (nodes == 1 and algo == NVLS_TREE) or (algo == NVLS and nodes > 1):   # :462-471 (no CollNet)
                continue
            intra_hw = "nvlink" if g.type_intra == PATH_NVL else "pci"
            for pi, proto in enumerate(PROTOS):
                if algo in (NVLS, NVLS_TREE) and proto != SIMPLE:
                    continue
                if proto == LL128 and not _ll128_enabled(comm, g):
                    continue
                bw = g.bw_intra if nodes <= 2 else g.bw_inter                                    # :288
                if algo in (NVLS, NVLS_TREE):                                                    # :289-299
                    if g.channels < 2:
                        continue
                    intra = g.bw_intra * NVLS_EFFICIENCY[100 if comm.cc >= 100 else 90] * (g.channels - 1) / g.channels
                    intra *= 2.0 if func == "allreduce" else (ppn - 1) / ppn
                    inter = g.bw_inter * (2 if nodes <= 2 and algo == NVLS_TREE else 1)
                    bw = min(intra, inter, PER_CH_MAX_NVLS_TREE_BWS[gi][i2] if algo == NVLS_TREE else math.inf)
                bus = g.channels * bw                                                            # :301
                if algo == RING and proto == LL:                                                 # :304-312
                    bus = min(ll_max, bus * .5)
                if algo == RING and proto == LL128:
                    bus = min(bus * .92, g.channels * PER_CH_MAX_RING_LL128_BWS[gi][i2])
                if algo == TREE and func == "allreduce":
                    bus = min(bus * .92, g.channels * PER_CH_MAX_TREE_BWS[gi][i2])
                if algo == TREE and proto == LL:
                    bus = min(bus / 3.8, ll_max)
                if algo == TREE and proto == LL128:
                    bus = min(bus * (7.0 / 9.0 if nodes == 1 else 120.0 / 128.0),
                              g.channels * PER_CH_MAX_TREE_LL128_BWS[gi][i2])
                if algo == TREE and tree_pattern == PATTERN_TREE:
                    bus *= .85
                if algo == RING or func not in ("allgather", "reducescatter"):                   # :346-351
                    bus *= n / steps if algo in (RING, NVLS, NVLS_TREE) else .5
                lat = BASE_LAT[algo][pi]                                                         # :353-401
                intra_lat = HW_LAT[intra_hw][algo][pi]
                inter_lat = HW_LAT["net"][TREE if ppn == 1 else algo][pi]
                if algo == RING:
                    ring_lat = HW_LAT[intra_hw if nodes == 1 else "net"][RING][pi]
                    if func in ("broadcast", "reduce"):
                        lat += ring_lat                                      # sameChannels = 1
                    else:
                        overhead = (1.0 if comm.cpu == "intel" else 2.0) * (3 if proto == SIMPLE else 1) \
                            if nodes > 1 else 0.0                            # getNetOverhead, :214-219, :372-377
                        intra_lat = max(intra_lat, overhead)
                        inter_steps = 0 if nodes == 1 else 2 * (nodes - 1) if func == "allreduce" else nodes - 1
                        lat += (steps - inter_steps) * intra_lat + inter_steps * inter_lat
                elif algo == TREE:
                    if func == "allreduce":
                        lat += 2 * ((n // nodes - 1) * intra_lat + _log2(nodes) * inter_lat)
                elif algo == NVLS:
                    lat = intra_lat + (inter_lat if nodes > 1 else 0.0)              # '=', not '+=': :391-393
                else:
                    lat += intra_lat + 2 * _log2(nodes) * inter_lat
                if bus > 0:
                    out[func, algo, proto] = (bus, lat)
    return out


def _ll128_enabled(comm: Comm, g: Graph) -> bool:
    """LL128's default enabling (tuning.cc:478-490): short enough paths, one GPU type, Volta or later."""
    inter_ok = g.type_inter <= (PATH_PXN if comm.cc >= 90 else PATH_PXB)
    return inter_ok and g.type_intra <= PATH_NVB and comm.cc >= 70


def _log2(n: int) -> int:
    return int(n).bit_length() - 1          # log2Down, src/include/bitops.h:273


def model(comm: Comm) -> dict:
    """(func, algo, proto) -> (bus bandwidth in algbw units, GB/s; latency, us), computed once per Comm."""
    if not comm.model:
        comm.model.update(_tune(comm))
    return comm.model


def algo_time(comm: Comm, func: str, algo: str, proto: str, nbytes: int) -> float:
    """ncclTopoGetAlgoTime (tuning.cc:584-601) for one operation, in us; inf when disabled."""
    if (func, algo, proto) not in model(comm):
        return math.inf
    bw, lat = model(comm)[func, algo, proto]
    log_size = _log2(nbytes >> 6)
    if algo == TREE and func == "allreduce" and 0 <= log_size < 23:
        bw *= TREE_CORRECTION[proto][log_size]
    if algo == RING and proto == SIMPLE and comm.nnodes > 1 and func == "allreduce" \
            and nbytes // (comm.nchannels * comm.nranks) >= 64:
        lat *= 1.9 if comm.cc < 80 else 1.4
    return lat + nbytes / (1000 * bw)


def cost_table(comm: Comm, func: str, nbytes: int) -> dict:
    """(algo, proto) -> us for every enabled pair (updateCollCostTable, enqueue.cc:1785-1820)."""
    local = comm.nranks // comm.nnodes
    out = {}
    for (f, algo, proto) in model(comm):
        if f != func or (algo in (NVLS, NVLS_TREE) and func != "allreduce" and local > NCCL_NVLS_MAX_LOCAL):
            continue
        out[algo, proto] = algo_time(comm, func, algo, proto, nbytes)
    return out


# ------------------------------------------------------------------------------ from a topology

def _speeds(cc: int, inter: bool):
    return SPEEDS[(100 if cc >= 100 else 90 if cc >= 90 else 0), inter]


def _first(speeds, fits) -> float:
    """The search's first speed that fits (it starts at the top and steps down, search.cc:1077)."""
    return next((s for s in speeds if fits(s)), speeds[-1])


def _dup(g: Graph, cc: int) -> Graph:
    """ncclTopoDupChannels (search.cc:961-974, end of pass 1 :1159): twice a ring's channels at half the
    bandwidth, where allowed. Trees take the rings' channel count as their maximum (init.cc:1026-1027), so
    their duplication changes nothing."""
    if g.bw_intra < 25.0 or (cc > 80 and g.bw_intra < 50.0 and g.channels > 4):
        return g
    k = min(2 * g.channels, MAX_RING_CHANNELS)
    d = -(-k // g.channels)
    return Graph(k, g.bw_intra / d, g.bw_inter / d, g.pattern)


def comm_of(topo: Topology) -> Comm | str:
    """NCCL's view of the topology (the module docstring lists every derivation), or why there is none."""
    ep = topo.endpoint
    if not ep.compute_capability:
        return "endpoint.compute_capability is not set (which GPU generation NCCL would tune for)"
    if topo.nranks < 2:
        return "one rank"
    cc, nodes, local = ep.compute_capability, topo.domains, topo.local
    up = topo.tiers[0]
    total = up.bandwidth * up.packet.efficiency / 1e9 * (1 + 1e-12)     # GB/s; the margin absorbs rounding
    graphs = {}
    if nodes == 1:
        speeds = _speeds(cc, False)
        s = _first(speeds, lambda v: v <= total)
        ring = _dup(Graph(min(int(total // s), MAX_RING_CHANNELS), s, s), cc)
        t = _first(speeds, lambda v: ring.channels * v <= total * local / (local - 1))
        graphs[RING] = ring
        graphs[TREE] = Graph(ring.channels, t, t, PATTERN_BALANCED_TREE)
    else:
        out = topo.tiers[-1]
        nic = out.bandwidth * out.packet.efficiency / 1e9 * (1 + 1e-12)
        speeds = _speeds(cc, True)
        s = _first(speeds, lambda v: v <= nic)
        graphs[RING] = _dup(Graph(local, s, s), cc)
        graphs[TREE] = Graph(graphs[RING].channels, s, s, PATTERN_TREE if cc >= 90 else PATTERN_BALANCED_TREE)
    nvls_channels = 0
    if cc >= 90 and topo.can_reduce_in_switch and ep.in_switch_channels:
        k = min(NCCL_MAX_NVLS_ARITY, local)
        intra = _first(speeds, lambda v: (k + 1) * v <= total)
        inter = next((v for v in reversed(speeds) if v >= 2 * intra), speeds[0])
        if nodes > 1:
            inter = _first(speeds, lambda v: v <= min(inter, nic))
        graphs[NVLS] = Graph(k, intra, inter)
        nvls_channels = ep.in_switch_channels
    nchannels = ep.channels or min(64, 2 * graphs[RING].channels)
    return Comm(topo.nranks, nodes, cc, graphs, nchannels, nvls_channels)


@dataclass(frozen=True)
class Choice:
    """NCCL's pick at one size among the candidates, with the runner-up it beat (us, its model's times)."""

    algorithm: str           # hccl-bench name
    protocol: str            # hccl-bench protocol name (ll, ll128, simple)
    time_us: float
    runner_up: str = ""      # "NCCLAlgo/Proto", '' when nothing else was applicable
    runner_up_us: float = math.nan

    @property
    def why(self) -> str:
        """The reason `chosen_by` records."""
        mine = f"{NCCL_NAMES[self.algorithm]}/{_nccl_proto(self.protocol)} {self.time_us:.1f} us"
        if self.runner_up:
            mine += f" < {self.runner_up} {self.runner_up_us:.1f} us"
        return f"library (NCCL {NCCL_VERSION} cost model: {mine})"


def _nccl_proto(name: str) -> str:
    return next(k for k, v in PROTOCOL_NAMES.items() if v == name)


def choose(topo: Topology, collective: str, size_bytes: int, candidates) -> Choice | str:
    """NCCL's (algorithm, protocol) among the candidate hccl-bench algorithms NCCL has a name for, at the
    nccl-tests size (NCCL's nBytes: AllGather and ReduceScatter count the whole buffer, src/enqueue.cc:1923),
    under the endpoint's protocol when it is not auto (as NCCL_PROTO); or why NCCL's model does not decide."""
    func = FUNCS.get(C.canonical(collective))
    if func is None:
        return f"NCCL does not tune {collective} (point-to-point sends)"
    comm = topo.cache.get("nccl_comm")
    if comm is None:
        comm = topo.cache["nccl_comm"] = comm_of(topo)
    if isinstance(comm, str):
        return comm
    names = {NCCL_NAMES[a]: a for a in candidates if a in NCCL_NAMES}
    forced = topo.endpoint.protocol if topo.endpoint.protocol in PROTOCOL_NAMES.values() else None
    order = (TREE, RING, NVLS, NVLS_TREE)           # ties go to NCCL's loop order (enqueue.cc:1828-1840)
    table = sorted(((t, algo, proto) for (algo, proto), t in cost_table(comm, func, max(int(size_bytes), 1)).items()
                    if algo in names and math.isfinite(t) and forced in (None, PROTOCOL_NAMES[proto])),
                   key=lambda r: (r[0], order.index(r[1]), PROTOS.index(r[2])))
    if not table:
        listed = ", ".join(candidates) or "none"
        return f"no algorithm NCCL's model enables for {collective} among the library's ({listed})"
    t, algo, proto = table[0]
    rest = [r for r in table[1:] if r[1] != algo] or table[1:]
    runner = (f"{rest[0][1]}/{rest[0][2]}", rest[0][0]) if rest else ("", math.nan)
    return Choice(names[algo], PROTOCOL_NAMES[proto], t, *runner)


def selecting(topo: Topology) -> Topology:
    """The topology with `selection = "library"`: `tune` sweeps `-a auto` this way beside the algorithms,
    to show NCCL's pick whatever the preset's selection is."""
    return topo if topo.endpoint.selection == "library" else replace(topo, endpoint=replace(topo.endpoint,
                                                                                            selection="library"))
