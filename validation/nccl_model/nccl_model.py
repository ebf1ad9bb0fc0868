#!/usr/bin/env python3
"""Stand-alone re-implementation of NCCL's built-in tuning model (stdlib only).

Source: NVIDIA/nccl tag v2.28.9-1, commit dbc86fd06e8b0c4517b95d8958a09ccacf9520c9
(see constants.md in this directory for file:line references).

What is modelled (faithful to the source):
  * ncclTopoTuneModel()   src/graph/tuning.cc:230-404  -> per (coll, algo, proto) bandwidth + latency
  * proto/algo enabling   src/graph/tuning.cc:406-497  -> LL128 default-enable rules, NVLS-Tree/CollNet disabling
  * ncclTopoGetAlgoTime() src/graph/tuning.cc:584-601  -> time = lat*latCount + nBytes/(1000*bw)
  * updateCollCostTable() src/enqueue.cc:1785-1820     -> which algos are even considered
  * topoGetAlgoInfo()     src/enqueue.cc:1822-1912     -> argmin + nChannels/nThreads reduction for small sizes
  * nBytes definition     src/enqueue.cc:1923 + src/include/enqueue.h:36-38
      (AllGather/ReduceScatter use nRanks*count*eltSize, i.e. the *total* buffer)

What is NOT computed here (taken as inputs, see PRESETS): the topology search result
(ncclTopoCompute, src/graph/search.cc:991-1198) i.e. graph nChannels/bwIntra/bwInter/pattern,
and the post-search channel duplication (src/graph/connect.cc:452-491).  The PRESETS below were
derived by hand-simulating that search; they are assumptions and are marked as such.

Units: bandwidth in GB/s (1 GB = 1e9 B), latency and time in microseconds.
"""
import math

# ----------------------------------------------------------------------------------------------
# Enumerations (src/include/plugin/nccl_tuner.h:25-52)
ALGOS = ["Tree", "Ring", "CollNetDirect", "CollNetChain", "NVLS", "NVLSTree", "PAT"]
TREE, RING, COLLNET_DIRECT, COLLNET_CHAIN, NVLS, NVLS_TREE, PAT = range(7)
PROTOS = ["LL", "LL128", "Simple"]
LL, LL128, SIMPLE = range(3)
HW_NVLINK, HW_PCI, HW_NET = range(3)
VOLTA, AMPERE, HOPPER, BLACKWELL = range(4)
FUNCS = ["broadcast", "reduce", "allgather", "reducescatter", "allreduce"]

# Path / link types (src/graph/topo.h:48-98)
PATH_LOC, PATH_NVL, PATH_NVB, PATH_C2C, PATH_PIX, PATH_PXB, PATH_P2C, PATH_PXN, PATH_PHB, PATH_SYS, PATH_NET = range(11)
# Topology patterns (src/include/graph.h:95-100)
PATTERN_BALANCED_TREE, PATTERN_SPLIT_TREE, PATTERN_TREE, PATTERN_RING, PATTERN_NVLS, PATTERN_COLLNET_DIRECT = 1, 2, 3, 4, 5, 6

# ----------------------------------------------------------------------------------------------
# Constants (src/graph/tuning.cc:133-199)
NVLS_EFFICIENCY = [0.0, 0.0, 0.85, 0.74]  # tuning.cc:134-139

BASE_LAT = [  # [algo][proto]  tuning.cc:143-148
    [6.8, 14.0, 8.4], [6.6, 14.0, 8.4],   # Tree, Ring
    [0, 0, 0], [0, 0, 0],                 # CollNetDirect, CollNetChain
    [0, 0, 0], [0, 0, 0],                 # NVLS, NVLSTree
    [8.0, 8.0, 8.0],                      # PAT
]
HW_LAT = [  # [hw][algo][proto]  tuning.cc:149-168
    [[.6, 1.25, 4.0], [.6, 1.9, 3.4], [0, 0, 3.7], [0, 0, 2.8], [0, 0, 25], [0, 0, 25], [0, 0, 4.0]],   # NVLINK
    [[1.0, 1.9, 4.0], [1.0, 2.5, 5.7], [0, 0, 3.7], [0, 0, 2.8], [0, 0, 0], [0, 0, 0], [0, 0, 4.0]],    # PCI
    [[5.0, 8.5, 14], [2.7, 4.0, 14.0], [0, 0, 31], [0, 0, 30], [0, 0, 18], [0, 0, 20.9], [0, 0, 14]],  # NET
]
LL_MAX_BWS = [  # [index1][index2]  tuning.cc:169-174 (index1: compcap if 1 node, else 0=Intel/other,1=AMD)
    [39.0, 39.0, 20.4], [87.7, 22.5, 19.0], [141.0, 45.0, 35.0], [2 * 141.0, 2 * 45.0, 2 * 35.0]]
PER_CH_MAX_RING_LL128_BWS = [[20.0] * 3, [20.0] * 3, [36.7] * 3, [2 * 36.7, 34.6, 2 * 36.7]]  # :175-180
PER_CH_MAX_TREE_LL128_BWS = [[20.0] * 3, [20.0] * 3, [36.7, 36.7, 29.0], [55.6, 31.67, 20.0]]  # :181-186
PER_CH_MAX_TREE_BWS = [[26.5, 18.5, 10.0], [24.0, 23.6, 17.8], [38.7, 41.4, 36.0], [70.0, 42.8, 24.0]]  # :187-192
PER_CH_MAX_NVLS_TREE_BWS = [[26.5, 18.5, 10.0], [24.0, 23.6, 17.8], [0.0, 57.7, 45.5], [0.0, 96.0, 43.8]]  # :193-198

# treeCorrectionFactor[proto][log2(nBytes/64)]  tuning.cc:578-582
TREE_CORRECTION = [
    [1.0, 1.0, 1.0, 1.0, .9, .8, .7, .7, .7, .7, .6, .5, .4, .4, .5, .6, .7, .8, .9, 1.0, 1.0, 1.0, 1.0],
    [1.0, 1.0, 1.0, 1.0, 1.0, .9, .8, .8, .8, .7, .6, .6, .6, .6, .6, .6, .8, .9, .9, .9, .9, 1.0, 1.0],
    [.9, .9, .9, .9, .9, .9, .9, .8, .7, .6, .6, .5, .5, .5, .5, .6, .7, .8, .7, .7, .8, .9, .9],
]

# Device / buffer constants (src/include/device.h, src/include/comm.h, src/init.cc)
WARP_SIZE = 32                      # device.h:85
MAXCHANNELS = 64                    # device.h:86
NCCL_MAX_NTHREADS = 640             # device.h:88
NCCL_SIMPLE_MAX_NTHREADS = 512      # device.h:90
NCCL_LL_MAX_NTHREADS = 512          # device.h:92
NCCL_LL128_MAX_NTHREADS = 640       # device.h:109
NCCL_STEPS = 8                      # device.h:24
NCCL_LL_THREAD_THRESHOLD = 8        # comm.h:41
NCCL_LL128_THREAD_THRESHOLD = 8     # comm.h:42
NCCL_SIMPLE_THREAD_THRESHOLD = 64   # comm.h:43
NCCL_MAX_DEV_WORK_BATCH_COLLS = None  # 1024 B / sizeof(ncclDevWorkColl) (device.h:362-363); only matters if numPipeOps>1
PCI_BW = 12.0                       # topo.h:22
BUFFSIZE = [8 * 512 * 8 * 16,       # LL: NCCL_LL_LINES_PER_THREAD*NCCL_LL_MAX_NTHREADS*NCCL_STEPS*16B = 512 KiB (init.cc:697)
            120 * 640 * 8 * 8,      # LL128: ELEMS_PER_THREAD*MAX_NTHREADS*NCCL_STEPS*8B = 4,915,200 B (init.cc:698)
            1 << 22]                # Simple: 4 MiB (init.cc:699)


def log2i(n):
    """log2Down (src/include/bitops.h:273); returns -1 for 0."""
    return n.bit_length() - 1 if n > 0 else -1


def compcap_index(cc):  # tuning.cc:249
    return BLACKWELL if cc >= 100 else HOPPER if cc >= 90 else AMPERE if cc >= 80 else VOLTA


class Graph:
    """Result of ncclTopoCompute for one algorithm (struct ncclTopoGraph subset)."""

    def __init__(self, nChannels, bwIntra, bwInter, typeIntra=PATH_NVL, typeInter=PATH_PIX,
                 pattern=None, latencyInter=0.0, sameChannels=1):
        self.nChannels, self.bwIntra, self.bwInter = nChannels, bwIntra, bwInter
        self.typeIntra, self.typeInter, self.pattern = typeIntra, typeInter, pattern
        self.latencyInter, self.sameChannels = latencyInter, sameChannels


class Comm:
    """The subset of ncclComm that the tuning model reads."""

    def __init__(self, nRanks, nNodes, cc, graphs, nChannels, nvlsChannels=0, cpuVendor="intel",
                 cpuArch="x86", nvlsSupport=None, collnetEnable=False, collNetHeadsNum=0,
                 collnetIAllgather=False, collnetIReduceScatter=False, nvsCount=None,
                 netDeviceHost=True, ll128c2c=True, proto_enable=None, algo_enable=None,
                 net_overhead_us=None):
        self.nRanks, self.nNodes, self.minCompCap, self.maxCompCap = nRanks, nNodes, cc, cc
        self.graphs = graphs  # list indexed by algo; None -> nChannels 0
        self.nChannels = nChannels            # comm->nChannels (after connect.cc duplication)
        self.nvlsChannels = nvlsChannels      # comm->nvlsChannels (nvls.cc:178-199)
        self.cpuVendor, self.cpuArch = cpuVendor, cpuArch
        self.nvlsSupport = (nvlsChannels > 0) if nvlsSupport is None else nvlsSupport
        self.collnetEnable = collnetEnable
        self.collNetHeadsNum = collNetHeadsNum
        self.collnetIAllgather, self.collnetIReduceScatter = collnetIAllgather, collnetIReduceScatter
        self.nvsCount = (1 if cc >= 80 else 0) if nvsCount is None else nvsCount
        self.netDeviceHost = netDeviceHost
        self.ll128c2c = ll128c2c
        self.proto_enable = proto_enable      # e.g. {"LL128": 0} like NCCL_PROTO
        self.algo_enable = algo_enable        # e.g. {"NVLS": 0} like NCCL_ALGO
        self.net_overhead_us = net_overhead_us
        tp = graphs[TREE].pattern if graphs[TREE] is not None else PATTERN_BALANCED_TREE
        self.maxTreePattern = tp or PATTERN_BALANCED_TREE
        self.localRanks = nRanks // nNodes
        self._tune()

    # tuning.cc:202-209
    def pat_enable(self):
        if self.minCompCap < 60:
            return 0
        if self.nNodes != self.nRanks:
            return 0
        if not self.netDeviceHost:
            return 0
        return 1

    # tuning.cc:214-219
    def net_overhead(self):
        if self.net_overhead_us is not None:
            return self.net_overhead_us
        if self.cpuArch == "x86" and self.cpuVendor == "intel":
            return 1.0
        if self.cpuArch == "x86" and self.cpuVendor == "amd":
            return 2.0
        return 1.0

    def g(self, a):
        gr = self.graphs[a]
        return gr if gr is not None else Graph(0, 0.0, 0.0)

    def _tune(self):
        """ncclTopoTuneModel, src/graph/tuning.cc:230-404 (+ enabling 406-497, thresholds 541-549)."""
        nF, nA, nP = len(FUNCS), len(ALGOS), len(PROTOS)
        self.bw = [[[0.0] * nP for _ in range(nA)] for _ in range(nF)]
        self.lat = [[[0.0] * nP for _ in range(nA)] for _ in range(nF)]
        G = [self.g(a) for a in range(nA)]
        ring = G[RING]
        # maxThreads (tuning.cc:231-243)
        simpleDefault = 256 if ring.bwIntra * ring.nChannels <= PCI_BW else NCCL_SIMPLE_MAX_NTHREADS
        self.maxThreads = [[0] * nP for _ in range(nA)]
        self.maxThreads[RING][SIMPLE] = simpleDefault
        self.maxThreads[TREE][SIMPLE] = NCCL_SIMPLE_MAX_NTHREADS
        for a in (COLLNET_DIRECT, COLLNET_CHAIN, NVLS, NVLS_TREE):
            self.maxThreads[a][SIMPLE] = NCCL_MAX_NTHREADS
        self.maxThreads[RING][LL] = self.maxThreads[TREE][LL] = NCCL_LL_MAX_NTHREADS
        self.maxThreads[RING][LL128] = self.maxThreads[TREE][LL128] = NCCL_LL128_MAX_NTHREADS
        # threadThresholds (tuning.cc:542-549)
        self.threadThresholds = [[NCCL_LL_THREAD_THRESHOLD, NCCL_LL128_THREAD_THRESHOLD,
                                  NCCL_SIMPLE_THREAD_THRESHOLD] for _ in range(nA)]
        self.threadThresholds[RING][LL] *= self.nRanks
        self.threadThresholds[COLLNET_DIRECT][SIMPLE] = 512
        self.threadThresholds[COLLNET_CHAIN][SIMPLE] = 512

        nNodes, nRanks = self.nNodes, self.nRanks
        if nRanks <= 1:
            return
        cci = compcap_index(self.minCompCap)
        index2 = nNodes - 1 if nNodes <= 2 else 2
        index1 = cci if nNodes == 1 else (1 if self.cpuVendor in ("amd", "mixed") else 0)
        llMaxBw = LL_MAX_BWS[index1][index2]
        perChMaxTreeBw = PER_CH_MAX_TREE_BWS[cci][index2]
        perChMaxRingLL128Bw = PER_CH_MAX_RING_LL128_BWS[cci][index2]
        perChMaxTreeLL128Bw = PER_CH_MAX_TREE_LL128_BWS[cci][index2]
        perChMaxNVLSTreeBw = PER_CH_MAX_NVLS_TREE_BWS[cci][index2]
        hwlat = [[row[:] for row in hw] for hw in HW_LAT]
        if self.cpuArch == "power":  # tuning.cc:260
            hwlat[HW_PCI][TREE][SIMPLE] = hwlat[HW_PCI][RING][SIMPLE]
        ppn = nRanks / nNodes
        intraHw = [HW_NVLINK if G[a].typeIntra == PATH_NVL else HW_PCI for a in range(nA)]
        hw = [intraHw[a] if nNodes == 1 else HW_NET for a in range(nA)]

        for coll, fname in enumerate(FUNCS):
            nsteps = 2 * (nRanks - 1) if fname == "allreduce" else \
                (nRanks - 1) if fname in ("reducescatter", "allgather") else nRanks
            for a in range(nA):
                if fname in ("broadcast", "reduce") and a != RING:
                    continue
                if fname in ("reducescatter", "allgather") and a not in (PAT, RING, NVLS, COLLNET_DIRECT):
                    continue
                if fname == "allreduce" and a == PAT:
                    continue
                for p in range(nP):
                    if a in (NVLS, NVLS_TREE) and p != SIMPLE:
                        continue
                    if fname in ("reducescatter", "allgather") and a == PAT and (p != SIMPLE or self.pat_enable() == 0):
                        continue
                    collnet = a in (COLLNET_DIRECT, COLLNET_CHAIN)
                    bw = G[a].bwIntra if (nNodes <= 2 or collnet) else G[a].bwInter
                    if a in (NVLS, NVLS_TREE):
                        if G[a].nChannels < 2:
                            continue
                        intraBw = G[a].bwIntra * NVLS_EFFICIENCY[cci] * (G[a].nChannels - 1) / G[a].nChannels
                        if fname == "allreduce":
                            intraBw *= 2.0
                        else:
                            intraBw *= (ppn - 1) / ppn
                        interBw = G[a].bwInter * (2 if (nNodes <= 2 and a == NVLS_TREE) else 1)
                        bw = min(intraBw, interBw, perChMaxNVLSTreeBw if a == NVLS_TREE else float("inf"))
                    busBw = G[a].nChannels * bw
                    # "Various model refinements" tuning.cc:304-312
                    if a == RING and p == LL:
                        busBw = min(llMaxBw, busBw * .5)
                    if a == RING and p == LL128:
                        busBw = min(busBw * 0.92, G[a].nChannels * perChMaxRingLL128Bw)
                    if a == TREE and fname == "allreduce":
                        busBw = min(busBw * .92, G[a].nChannels * perChMaxTreeBw)
                    if a == TREE and p == LL:
                        busBw = min(busBw * 1.0 / 3.8, llMaxBw)
                    if a == TREE and p == LL128:
                        busBw = min(busBw * (7.0 / 9.0 if nNodes == 1 else 120.0 / 128.0), G[a].nChannels * perChMaxTreeLL128Bw)
                    if a == TREE and self.maxTreePattern == PATTERN_TREE:
                        busBw *= .85
                    if a == PAT:
                        busBw *= .75
                    if collnet and p != SIMPLE:
                        busBw = 0
                    if a == COLLNET_DIRECT and p == SIMPLE:
                        if fname in ("allgather", "reducescatter"):
                            busBw = ppn * min(G[a].bwIntra, G[a].bwInter * 0.9)
                        else:
                            factor = ppn / (1.0 * G[a].nChannels) if G[a].nChannels else float("inf")
                            factor -= (factor - 1) / 2
                            busBw /= factor
                            if self.minCompCap >= 90:
                                busBw *= .85
                    # tuning.cc:326-343
                    if a in (NVLS, COLLNET_DIRECT) and p == SIMPLE and fname in ("allgather", "reducescatter") and nNodes > 1:
                        nHeads = 0
                        if fname == "allgather" and not self.collnetIAllgather:
                            busBw = 0.0
                        if fname == "reducescatter" and not self.collnetIReduceScatter:
                            busBw = 0.0
                        if self.collnetEnable:
                            nHeads = self.collNetHeadsNum
                        else:
                            busBw = 0.0
                        if busBw > 0.0 and self.localRanks > nHeads:
                            busBw = 0.0
                    # bus BW -> algorithm BW (tuning.cc:346-351)
                    if not (a != RING and fname in ("allgather", "reducescatter")):
                        ratio = (1.0 * nRanks) / nsteps if a in (RING, NVLS, NVLS_TREE) else .5
                        busBw *= ratio
                    self.bw[coll][a][p] = busBw
                    # latency (tuning.cc:353-401)
                    lat = BASE_LAT[a][p]
                    intraLat = hwlat[intraHw[a]][a][p]
                    interLat = hwlat[HW_NET][TREE][p] if ppn == 1 else hwlat[HW_NET][a][p]
                    interLat += G[a].latencyInter
                    if p == SIMPLE:
                        interLat += G[a].latencyInter
                    if a == RING:
                        rlat = hwlat[hw[a]][a][p]
                        if fname in ("reduce", "broadcast"):
                            if G[a].sameChannels:
                                lat += rlat
                            else:
                                if p == SIMPLE:
                                    rlat = hwlat[hw[a]][TREE][p]
                                lat += nsteps * rlat
                        else:
                            netOverhead = 0.0
                            if nNodes > 1:
                                netOverhead = self.net_overhead()
                                if p == SIMPLE:
                                    netOverhead *= 3
                            intraLat = max(intraLat, netOverhead)
                            nInterSteps = 0 if nNodes == 1 else (2 * (nNodes - 1) if fname == "allreduce" else nNodes - 1)
                            lat += (nsteps - nInterSteps) * intraLat + nInterSteps * interLat
                    elif a == TREE:
                        if fname == "allreduce":
                            lat += 2 * ((nRanks // nNodes - 1) * intraLat + log2i(nNodes) * interLat)
                    elif a == COLLNET_DIRECT:
                        lat += 2 * (min(1, nRanks // nNodes - 1) * intraLat + (nRanks // nNodes - 1) * 0.4) + interLat
                    elif a == COLLNET_CHAIN:
                        lat += 2 * (nRanks // nNodes - 1) * intraLat + interLat
                    elif a == NVLS:
                        lat = intraLat  # note: '=' not '+=' (tuning.cc:392)
                        if nNodes > 1:
                            lat += interLat
                    elif a == NVLS_TREE:
                        lat += intraLat + 2 * log2i(nNodes) * interLat
                    elif a == PAT:
                        if fname in ("allgather", "reducescatter"):
                            lat += log2i(nNodes) * (interLat / 3.5) + nRanks * 2.8
                    self.lat[coll][a][p] = lat

        # Protocol / algorithm enabling (tuning.cc:406-497)
        for coll in range(nF):
            for a in range(nA):
                disable = False
                if nNodes == 1 and a == NVLS_TREE:
                    disable = True
                if not self.collnetEnable and (a in (COLLNET_DIRECT, COLLNET_CHAIN) or (a == NVLS and nNodes > 1)):
                    disable = True
                if self.nvsCount == 0 and a == COLLNET_DIRECT:
                    disable = True
                if self.algo_enable is not None and self.algo_enable.get(ALGOS[a], 1) == 0:
                    disable = True
                for p in range(nP):
                    pEnable = 2 if p == LL128 else 1
                    if self.proto_enable is not None and PROTOS[p] in self.proto_enable:
                        pEnable = self.proto_enable[PROTOS[p]]
                    if pEnable == 2 and p == LL128:
                        pEnable = 1
                        if self.ll128c2c and self.minCompCap >= 90:
                            pEnable &= int(G[a].typeInter <= PATH_PXN)
                        else:
                            pEnable &= int(G[a].typeInter <= PATH_PXB)
                        pEnable &= int(G[a].typeIntra <= PATH_NVB)
                        pEnable &= int(self.minCompCap == self.maxCompCap)
                        pEnable &= int(not (self.minCompCap < 70))  # (CUDA 11.8/SM90/2-rank special case ignored)
                    if pEnable == 0 or disable:
                        self.bw[coll][a][p] = 0

    # ------------------------------------------------------------------------------------------
    def algo_time(self, coll, a, p, nBytes, numPipeOps=1):
        """ncclTopoGetAlgoTime, tuning.cc:584-601. Returns -1 if unavailable."""
        bw = self.bw[coll][a][p]
        lat = self.lat[coll][a][p]
        if bw == 0:
            return -1.0
        logSize = log2i(nBytes >> 6)
        if a == TREE and FUNCS[coll] == "allreduce" and 0 <= logSize < 23:
            bw *= TREE_CORRECTION[p][logSize]
        if a == RING and p == SIMPLE and self.nNodes > 1 and FUNCS[coll] == "allreduce" \
                and nBytes // (self.nChannels * self.nRanks) >= 64:
            lat *= 1.9 if self.minCompCap < 80 else 1.4
        latCount = numPipeOps if a == RING else 1  # DIVUP(numPipeOps, NCCL_MAX_DEV_WORK_BATCH_COLLS) == 1 for 1 op
        return lat * latCount + nBytes / (1000 * bw)

    def cost_table(self, func, nBytes, numPipeOps=1, nvls_op_supported=True, collNetSupport=None):
        """updateCollCostTable, enqueue.cc:1785-1820. None = NCCL_ALGO_PROTO_IGNORE; -1 = disabled."""
        coll = FUNCS.index(func)
        table = [[None] * len(PROTOS) for _ in ALGOS]
        if self.nRanks == 1:
            table[RING][SIMPLE] = 0.0
            return table
        if collNetSupport is None:
            collNetSupport = 1 if self.collnetEnable else 0
        nvlsSupport = self.nvlsSupport and (nvls_op_supported or func == "allgather")
        for a in range(len(ALGOS)):
            if a in (COLLNET_DIRECT, COLLNET_CHAIN) and collNetSupport != 1:
                continue
            if a in (COLLNET_DIRECT, COLLNET_CHAIN) and self.localRanks > 8:  # NCCL_MAX_DIRECT_ARITY+1
                continue
            if a in (NVLS, NVLS_TREE) and (not nvlsSupport or (func != "allreduce" and self.localRanks > 32)):
                continue
            if a == NVLS and collNetSupport != 1 and self.nNodes > 1:
                continue
            for p in range(len(PROTOS)):
                table[a][p] = self.algo_time(coll, a, p, nBytes, numPipeOps)
        return table

    def select(self, func, nBytes, **kw):
        """topoGetAlgoInfo argmin (enqueue.cc:1828-1840) + channel/thread choice (1865-1910)."""
        table = self.cost_table(func, nBytes, **kw)
        best, bestT = None, 3600000000.0
        for a in range(len(ALGOS)):
            for p in range(len(PROTOS)):
                t = table[a][p]
                if t is None:
                    continue
                if 0.0 <= t < bestT:
                    best, bestT = (a, p), t
        if best is None:
            return table, None, None, None, None
        a, p = best
        nc = self.nChannels
        nt = self.maxThreads[a][p]
        thr = self.threadThresholds[a][p]
        if a == COLLNET_DIRECT:
            pass  # collnet channel tuning (enqueue.cc:1868-1878) needs collnetDirect.nHeads; not modelled
        elif a in (NVLS, NVLS_TREE):
            nc = min(self.nvlsChannels, self.nChannels) if (self.nNodes > 1 and a == NVLS) else self.nvlsChannels
        else:
            while nBytes < nc * nt * thr:
                if nc >= 2:
                    nc -= 1
                else:
                    break
        if a not in (NVLS, NVLS_TREE, COLLNET_DIRECT):
            while nBytes < nc * nt * thr:
                if nt % 128 == 0:
                    nt //= 2
                else:
                    break
        if p == SIMPLE:
            if a == RING:
                nt += WARP_SIZE
            if a == TREE:
                nt += 4 * WARP_SIZE
        if nt // WARP_SIZE < 3:
            nt = 3 * WARP_SIZE
        if a in (TREE, PAT):
            nt = NCCL_MAX_NTHREADS
        return table, best, bestT, nc, nt


# ----------------------------------------------------------------------------------------------
# Presets.  All graph numbers below are the author's hand-simulation of ncclTopoCompute()
# (search.cc:991-1198) + ncclTopoPostset() channel doubling (connect.cc:452-491) for idealised
# DGX topologies.  They are ASSUMPTIONS, not read from a real NCCL_DEBUG=GRAPH log; see
# predictions.md "Inputs" for the derivation of each.

def dgx_h100(nNodes=1):
    """DGX-H100: SM90, 18 NVLink4 links/GPU -> 18*20.6 = 370.8 GB/s to the NVSwitch node;
    8x CX-7 400 Gb/s (50 GB/s), PCIe Gen5 x16 (48 GB/s), Intel CPUs."""
    nRanks = 8 * nNodes
    if nNodes == 1:
        graphs = [Graph(12, 30.0, 30.0, pattern=PATTERN_BALANCED_TREE),   # Tree
                  Graph(12, 30.0, 30.0, pattern=PATTERN_RING),            # Ring
                  None, None,
                  Graph(8, 40.0, 60.0, pattern=PATTERN_NVLS),             # NVLS
                  Graph(8, 40.0, 60.0, pattern=PATTERN_NVLS),             # NVLSTree (same graph object in NCCL)
                  None]
        return Comm(nRanks, 1, 90, graphs, nChannels=24, nvlsChannels=16, cpuVendor="intel")
    graphs = [Graph(8, 48.0, 48.0, typeInter=PATH_PIX, pattern=PATTERN_TREE),
              Graph(8, 48.0, 48.0, typeInter=PATH_PIX, pattern=PATTERN_RING),
              None, None,
              Graph(8, 40.0, 48.0, typeInter=PATH_PIX, pattern=PATTERN_NVLS),
              Graph(8, 40.0, 48.0, typeInter=PATH_PIX, pattern=PATTERN_NVLS),
              None]
    return Comm(nRanks, nNodes, 90, graphs, nChannels=16, nvlsChannels=16, cpuVendor="intel")


def dgx_a100(nNodes=1):
    """DGX-A100: SM80, 12 NVLink3 links/GPU -> 12*20 = 240 GB/s; 8x HDR 200 Gb/s (25 GB/s),
    PCIe Gen4 x16 (24 GB/s), AMD EPYC CPUs; no NVLS (needs SM90, search.cc:1036)."""
    nRanks = 8 * nNodes
    if nNodes == 1:
        graphs = [Graph(12, 20.0, 20.0, pattern=PATTERN_BALANCED_TREE),
                  Graph(12, 20.0, 20.0, pattern=PATTERN_RING),
                  None, None, None, None, None]
        return Comm(nRanks, 1, 80, graphs, nChannels=24, nvlsChannels=0, cpuVendor="amd")
    graphs = [Graph(8, 24.0, 24.0, typeInter=PATH_PXB, pattern=PATTERN_BALANCED_TREE),
              Graph(8, 24.0, 24.0, typeInter=PATH_PXB, pattern=PATTERN_RING),
              None, None, None, None, None]
    return Comm(nRanks, nNodes, 80, graphs, nChannels=16, nvlsChannels=0, cpuVendor="amd")


def dgx_b200(nNodes=1):
    """DGX-B200: SM100, 18 NVLink5 links/GPU -> 18*40.1 = 721.8 GB/s; 8x CX-7 400 Gb/s,
    PCIe Gen5 x16 (48 GB/s), Intel CPUs."""
    nRanks = 8 * nNodes
    if nNodes == 1:
        graphs = [Graph(16, 40.0, 40.0, pattern=PATTERN_BALANCED_TREE),
                  Graph(16, 45.0, 45.0, pattern=PATTERN_RING),
                  None, None,
                  Graph(8, 80.0, 90.0, pattern=PATTERN_NVLS),
                  Graph(8, 80.0, 90.0, pattern=PATTERN_NVLS),
                  None]
        return Comm(nRanks, 1, 100, graphs, nChannels=32, nvlsChannels=24, cpuVendor="intel")
    graphs = [Graph(8, 48.0, 48.0, typeInter=PATH_PIX, pattern=PATTERN_TREE),
              Graph(8, 48.0, 48.0, typeInter=PATH_PIX, pattern=PATTERN_RING),
              None, None,
              Graph(8, 48.0, 48.0, typeInter=PATH_PIX, pattern=PATTERN_NVLS),
              Graph(8, 48.0, 48.0, typeInter=PATH_PIX, pattern=PATTERN_NVLS),
              None]
    return Comm(nRanks, nNodes, 100, graphs, nChannels=16, nvlsChannels=32, cpuVendor="intel")


PRESETS = {"dgx-a100": dgx_a100, "dgx-h100": dgx_h100, "dgx-b200": dgx_b200}


def make_comm(system, nNodes=1, **overrides):
    """Build a Comm from a preset, or from explicit values:
    make_comm('custom', nNodes, nRanks=.., cc=.., graphs=[...], nChannels=.., nvlsChannels=..)."""
    if system in PRESETS and not overrides:
        return PRESETS[system](nNodes)
    if system in PRESETS:
        base = PRESETS[system](nNodes)
        kw = dict(nRanks=base.nRanks, nNodes=base.nNodes, cc=base.minCompCap, graphs=base.graphs,
                  nChannels=base.nChannels, nvlsChannels=base.nvlsChannels, cpuVendor=base.cpuVendor)
        kw.update(overrides)
        return Comm(**kw)
    return Comm(**overrides)


def bus_factor(func, nRanks):
    """nccl-tests busbw = algbw * factor (allreduce 2(n-1)/n, ag/rs (n-1)/n, bcast/reduce 1)."""
    if func == "allreduce":
        return 2.0 * (nRanks - 1) / nRanks
    if func in ("allgather", "reducescatter"):
        return (nRanks - 1) / nRanks
    return 1.0


def predict(comm, func, nBytes):
    """Return dict with every (algo,proto) time in us, the chosen one, and implied algbw/busbw."""
    table, best, t, nc, nt = comm.select(func, nBytes)
    times = {}
    for a in range(len(ALGOS)):
        for p in range(len(PROTOS)):
            v = table[a][p]
            if v is not None and v >= 0:
                times[(ALGOS[a], PROTOS[p])] = v
    out = {"times": times, "choice": None}
    if best is not None:
        algbw = nBytes / (t * 1e3)  # GB/s
        out.update(choice=(ALGOS[best[0]], PROTOS[best[1]]), time_us=t, algbw=algbw,
                   busbw=algbw * bus_factor(func, comm.nRanks), nChannels=nc, nThreads=nt)
    return out


def _fmt_size(n):
    for unit, s in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= s and n % s == 0:
            return "%d %s" % (n // s, unit)
    return "%d B" % n


if __name__ == "__main__":
    import sys
    system = sys.argv[1] if len(sys.argv) > 1 else "dgx-h100"
    func = sys.argv[2] if len(sys.argv) > 2 else "allreduce"
    nNodes = int(sys.argv[3]) if len(sys.argv) > 3 else 1
    comm = make_comm(system, nNodes)
    sizes = [8, 64, 1 << 10, 8 << 10, 64 << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20,
             64 << 20, 256 << 20, 1 << 30, 4 << 30]
    print("%s %s nNodes=%d nRanks=%d" % (system, func, nNodes, comm.nRanks))
    for n in sizes:
        r = predict(comm, func, n)
        print("%10s  %-16s %10.2f us  busbw %8.2f GB/s  nc=%s nt=%s" % (
            _fmt_size(n), "%s/%s" % r["choice"], r["time_us"], r["busbw"], r["nChannels"], r["nThreads"]))
