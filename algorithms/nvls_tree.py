"""NVLS-Tree AllReduce (NCCL's NVLSTree): NVLS inside each domain, a double binary tree across domains.

As NCCL 2.28.9 runs it (src/device/all_reduce.h, RunWorkColl<AllReduce, NVLS_TREE>; the trees of
src/graph/connect.cc connectNvls), on D domains of L ranks whose scale-up switch reduces:

1. in-switch reduce-scatter inside each domain, every rank's own piece included (NVLS's
   multimem.ld_reduce): rank (d, l) ends with its domain's sum of row l, 1/L of the buffer;
2. on every rail (the D ranks with the same l, each through its own NIC) a double binary tree over
   the domains (ncclGetDtree over nodes): NCCL's NVLS channel c runs tree c % 2, so each tree
   carries half the row, reduced up to its root and broadcast back down;
3. in-switch all-gather inside each domain, the owner included (multimem.st).

The three phases pipeline chunk by chunk (_phases.Pipeline): chunk p can be in the tree while chunk
p+1 is still being reduced in the switch, as the kernel's scatter, reduce, broadcast and gather
warps work on different chunks at once.

Chunks (``chunks = 0``): NCCL's calcCollChunking for NVLSTree (src/enqueue.cc:2056-2068). A
channel moves nHeads (= L: one NVLS head per GPU, each with its NIC) pieces of ``chunk`` bytes per
loop, all ``channels`` channels side by side (the endpoint's in_switch_channels, NCCL's 16 NVLS
channels on Hopper), so one pipeline chunk of the model is one loop of every channel,
``channels * L * chunk`` bytes: chunk = 128 KiB (NCCL_NVLS_CHUNKSIZE, nvls.cc:153), at most 64 KiB
from 4 domains (NCCL_NVLSTREE_MAX_CHUNKSIZE), 64 KiB while S < 4 ops chunk and 32 KiB while
S < ops chunk (ops = channels * L; NCCL applies the rule per channel to its S / channels bytes,
src/enqueue.cc:656-668, which is the same); at most ``max_chunks`` (the model's bound on the
schedule: the fill left to hide past 256 chunks is about 1 %).

Per-channel limit: NCCL caps an NVLSTree channel's bus bandwidth at perChMaxNVLSTreeBw
(src/graph/tuning.cc:196, Hopper 57.7 GB/s on 2 nodes, 45.5 on more, column index2 :250; min at
:299), over its L NVLS (search) channels: busbw <= L x channel_bw. The schedule states it as the
rate its ranks' links carry at most (``notes["rate_cap"]``): the busiest link of a rank carries
(1 + 1/L) S (the reduce-scatter's upload and the all-gather's), or nic_load(D) S/L on the NIC, while
the bus bandwidth counts 2(n-1)/n S; the execution model applies it where the endpoint models
channels (docs/execution.md).

Why NCCL counts the inter-node bandwidth twice at <= 2 nodes (tuning.cc:297-298): on two nodes
each node is the root of one tree and the leaf of the other, so a NIC sends each byte of its row
once (half up as a leaf, half down as a root); from 4 nodes a node interior in one tree sends half
the row up and twice down there, and half up as a leaf in the other: twice as much
(_phases.nic_load). The schedule carries exactly those transfers, so the factor comes out of it.

Alpha-beta, contention-free, pipelined over Q chunks: the busiest stage sets the pace, the others
add their fill once: on a reducing switch of rate B_up and NICs of rate B_out, with Q large,
T -> max((1 + 1/L) S / B_up, nic_load(D) S / (L B_out)) (tests/test_pipelined_phases.py times the
pipeline stage by stage, tests/test_nvls_tree.py the one-chunk schedule).
"""

from __future__ import annotations

from dataclasses import dataclass

from hcclsim.algorithms._phases import nic_load, switch_reduces, tree_allreduce

from hcclsim.schedule import Layout, ScheduleBuilder
from hcclsim.schedule import collectives as C
from hcclsim.schedule.algorithm import Algorithm, Problem, opt, register

NVLS_CHANNELS = 16      # NVLS_NCHANNELS_SM90 (NCCL v2.28.9 src/transport/nvls.cc:148), where the endpoint sets none


@dataclass(frozen=True)
class NvlsTreeOptions:
    chunks: int = opt(0, "pipelined chunks (0: NCCL's calcCollChunking for NVLSTree, one per loop of every "
                         "channel: channels x L x chunk bytes)")
    channels: int = opt(0, "NVLS channels of one loop (0: the endpoint's in_switch_channels, or 16 where it sets "
                           "none: NVLS_NCHANNELS_SM90, src/transport/nvls.cc:148)")
    chunk_size: int = opt(128 << 10, "bytes one channel moves per head and loop before NCCL's reductions "
                                     "(NCCL_NVLS_CHUNKSIZE, src/transport/nvls.cc:153)")
    channel_bw: float = opt(45.5, "GB/s of bus bandwidth one NVLS channel carries at most from 3 domains "
                                  "(perChMaxNVLSTreeBws[Hopper][N4], src/graph/tuning.cc:196; 0: none)")
    channel_bw_2: float = opt(57.7, "the same on 2 domains (perChMaxNVLSTreeBws[Hopper][N2])")
    max_chunks: int = opt(256, "upper bound on automatic chunks (NCCL's rule gives 1024 at 16 GiB on 2 domains; "
                               "256 come within 1 % of its time, for a quarter of the schedule)")
    max_templates: int = opt(1 << 18, "cap on the schedule's templates (it bounds the chunks)")

    def __post_init__(self):
        if self.chunks < 0 or self.channels < 0 or min(self.chunk_size, self.max_chunks, self.max_templates) < 1:
            raise ValueError("chunks and channels must be >= 0; chunk_size, max_chunks and max_templates >= 1")
        if self.channel_bw < 0 or self.channel_bw_2 < 0:
            raise ValueError("channel_bw and channel_bw_2 must be >= 0")


@register
class NvlsTree(Algorithm):
    name = "nvls_tree"
    summary = "NCCL's NVLSTree: NVLS reduce-scatter in each domain, double binary tree per rail, NVLS all-gather"
    collectives = (C.ALL_REDUCE,)
    requires = "a two-tier topology whose scale-up switch reduces (scale_up.in_switch_reduce = true)"
    Options = NvlsTreeOptions

    def why_not(self, problem: Problem) -> str | None:
        topo = problem.topology
        if topo.kind != "hierarchical":
            return "needs a two-tier topology (kind = hierarchical)"
        if not switch_reduces(topo):
            return "needs a scale-up switch that reduces (scale_up.in_switch_reduce = true)"
        return None

    def structure_key(self, problem, sizing, dtype_size):
        """Q, the pipelined chunks."""
        o, topo = self.options, problem.topology
        D, L = topo.domains, topo.local
        cap = max(1, o.max_templates // (2 * L + 2 + 4 * (D - 1)))
        if o.chunks:
            return min(o.chunks, cap)
        S, ops = sizing.size_bytes, (o.channels or topo.endpoint.in_switch_channels or NVLS_CHANNELS) * L
        chunk = min(o.chunk_size, 64 << 10) if D >= 4 else o.chunk_size
        for factor, floor in ((32, 256 << 10), (16, 128 << 10), (4, 64 << 10), (1, 32 << 10)):
            if S < factor * ops * chunk and chunk > floor:
                chunk = floor
        return int(min(max(1, -(-S // (ops * chunk))), o.max_chunks, cap))

    def compile(self, problem: Problem, key):
        topo = problem.topology
        D, L, n = topo.domains, topo.local, problem.nranks
        Q = int(key) if key else 1
        b = ScheduleBuilder(C.ALL_REDUCE, self.label, n, (D, L), Layout(1, Q * L * D * 2),
                            nnodes=n + D if L > 1 else n)
        tree_allreduce(b, Q, "switch")
        b.notes.update(chunks=Q, rate_cap=self._rate_cap(D, L))
        return b.build()

    def _rate_cap(self, D: int, L: int) -> float:
        """Bytes/s a rank's links carry at most under NCCL's per-channel limit (0: none): L channels of
        channel_bw bus bandwidth, on the busiest link of a rank (module docstring)."""
        bw = {1: 0.0, 2: self.options.channel_bw_2}.get(D, self.options.channel_bw) * 1e9
        n = D * L
        if not bw or n < 2:
            return 0.0
        busiest = max(1 + 1 / L if L > 1 else 0.0, nic_load(D) / L)
        return L * bw * busiest / (2 * (n - 1) / n)
