"""Trees: NCCL's pipelined double binary tree (AllReduce) and binomial trees (Broadcast, Reduce).

AllReduce, ``shape = chains`` (the default on a two-tier topology of several domains of several
ranks) -- NCCL's multi-node Tree (src/device/all_reduce.h runTreeUpDown; chains from the tree graph,
src/graph/connect.cc:140-175): inside each domain a chain through its L ranks reduces a row (1/L of
the buffer) into the rank whose NIC the channel uses, a double binary tree over the domains on that
rail (ncclGetDtree over nodes; channel c on tree 0, channel c + nChannels on tree 1, each half the
row) reduces it up and broadcasts it down, and the chain broadcasts it back: L chains side by side,
one NIC each. The phases pipeline chunk by chunk (_phases.tree_allreduce); a chunk is one step of
every channel, 2L x step_size bytes (NCCL: a Simple step is buffSize / NCCL_STEPS = 4 MiB / 8 =
512 KiB, chunkSteps 1 for trees, src/enqueue.cc:2023-2024, src/init.cc:699). Per-channel limit:
perChMaxTreeBws (src/graph/tuning.cc:190, Hopper 38.7 / 41.4 / 36.0 GB/s on 1 / 2 / 3+ domains;
min at :306) caps the bus bandwidth NCCL counts for a tree (2S per collective, ratio 0.5 at :348)
at L x channel_bw; the schedule states it as the rate of its ranks' busiest link (2(L-1)/L S on the
chains, nic_load(D) S/L on a NIC) in ``notes["rate_cap"]``, applied where the endpoint models
channels (docs/execution.md). NCCL's 0.92 and its 0.85 for the TREE pattern (tuning.cc:306, 309)
are corrections of its model, not mechanisms, and are left out. Contention-free with Q chunks,
T -> max(2(L-1)/L S / B_up, nic_load(D) S / (L B_out)) as Q grows.

AllReduce, ``shape = flat`` (the default elsewhere) -- double binary tree (NCCL's ncclGetDtree, after Sanders, Speck & Traeff 2009). Tree 0 is
the in-order binary tree over the ranks with rank 0 on top (ncclGetBtree: r's parent is
``(r ^ lowbit(r)) | (lowbit(r) << 1)``, or ``r ^ lowbit(r)`` when that is out of range); tree 1 is its
mirror ``r -> N-1-r`` when N is even and its shift ``r -> r+1`` when N is odd, so a rank interior in
one tree is a leaf in the other. Each tree carries half the data cut into P chunks. Reduce: chunk p
leaves node v for its parent (PUT_REDUCE into the parent's OUT) once all of v's children delivered
chunk p, in wave ``p + h(v)`` (h: height above the leaves). Broadcast: the root sends chunk p down
once it is fully reduced, node v forwards it to its children in wave ``p + H + depth(v)`` (H: the
root's height). One wave is one group, so both trees and both phases share the links they use at
the same time; every edge of a tree sends its chunks in order.

Alpha-beta on a switch, N even (a rank is interior in one tree only): there are P + 2H - 1 waves; in
the steady state a rank's uplink carries four half-chunks per wave (its reduce in both trees, the
broadcast to two children), so a wave costs at most ``a + 2S/(P B)`` and

    T <= (P + 2H - 1) (a + 2S/(P B)),    busbw -> B (N-1)/N  as P >> H

(fill and drain waves carry less). Measured on 8 ranks (H = 3), 50 GB/s, no latency: busbw 42.7 GB/s
at 1 GiB (P = 64; T = (P + 1.5) 2S/(P B); ideal 43.75); with 500 ns per hop 256 B takes 6.03 us
(2H alphas; ring: 14 us).

Broadcast / Reduce -- binomial tree on ranks relative to the root (v = r - root mod N): v's parent is v
without its lowest set bit; the root sends to ``2^(K-1)`` first (K = ceil(log2 N)), ``2^(K-1-s)`` in
step s; a node sends (Broadcast) to, or receives (Reduce) from, its children one step after another.
Pipelined over P chunks, chunk p of step s runs in wave p + s. With P = 1 (the default: on a
switch the root sends S to each of its K children whatever P is, so pipelining only adds alphas)
Broadcast and Reduce take ``K (a + S/B)``.

Pipeline chunks P (``structure_key``): ``chunks`` when set, else AllReduce uses
``clamp(ceil(S / chunk_size), 1, max_chunks)``: one chunk up to 1 MiB keeps small messages at 2H
alphas (each chunk adds a wave, and latency-bound sizes want few), and 64 chunks at 1 GiB hide the
2H - 1 fill/drain waves well enough for busbw >= 0.8 B on 8 ranks (32 chunks give 41.8 GB/s, 16
give 40.0). Either way P is capped so the schedule has at most ``max_templates`` templates (4 (N-1)
per chunk for AllReduce, N-1 for Broadcast/Reduce): a 4096-rank AllReduce gets P <= 16, i.e. 262k
one-transfer templates (the tree is irregular: its edges cannot share replicated templates).
"""

from __future__ import annotations

from dataclasses import dataclass

from hcclsim.algorithms._phases import dtree_parents, levels, nic_load, tree_allreduce, tree_shape

from hcclsim.schedule import OUT, PUT, PUT_REDUCE, Layout, ScheduleBuilder, const, order
from hcclsim.schedule import collectives as C
from hcclsim.schedule.algorithm import Algorithm, Problem, auto_chunks, opt, register

SHAPES = ("auto", "flat", "chains")


@dataclass(frozen=True)
class TreeOptions:
    shape: str = opt("auto", "AllReduce: chains (NCCL's multi-node tree: a chain in each domain, a double "
                             "binary tree over the domains per rail), flat (one double binary tree over all "
                             "ranks), auto (chains on a two-tier topology of several domains of several ranks)")
    chunks: int = opt(0, "pipelined chunks per tree (0: flat AllReduce one per chunk_size bytes, chains one per "
                         "2L x step_size bytes, up to max_chunks; Broadcast/Reduce 1)")
    chunk_size: int = opt(128 << 10, "bytes per pipelined chunk for a flat AllReduce when chunks=0 (latency is "
                                      "paid per level, not per chunk, so finer chunks shorten the fill)")
    max_chunks: int = opt(64, "upper bound on automatic chunks of an AllReduce")
    step_size: int = opt(512 << 10, "chains: bytes one channel moves per pipeline step (NCCL's Simple step, "
                                     "4 MiB / NCCL_STEPS)")
    channel_bw: float = opt(36.0, "chains: GB/s of bus bandwidth one channel carries at most from 3 domains "
                                  "(perChMaxTreeBws[Hopper][N4], src/graph/tuning.cc:190; 0: none)")
    channel_bw_2: float = opt(41.4, "the same on 2 domains (perChMaxTreeBws[Hopper][N2])")
    channel_bw_1: float = opt(38.7, "the same on 1 domain (perChMaxTreeBws[Hopper][N1])")
    max_templates: int = opt(1 << 18, "cap on the schedule's templates (it bounds the chunks on large N)")

    def __post_init__(self):
        if self.chunks < 0 or min(self.chunk_size, self.max_chunks, self.max_templates, self.step_size) < 1:
            raise ValueError("chunks must be >= 0; chunk_size, max_chunks, step_size and max_templates >= 1")
        if min(self.channel_bw, self.channel_bw_2, self.channel_bw_1) < 0:
            raise ValueError("channel_bw, channel_bw_2 and channel_bw_1 must be >= 0")
        if self.shape not in SHAPES:
            raise ValueError(f"shape must be one of {', '.join(SHAPES)}, got {self.shape!r}")


@register
class Tree(Algorithm):
    name = "tree"
    summary = ("pipelined double binary tree AllReduce (NCCL-like; two tiers: chains in each domain, trees per "
               "rail); binomial Broadcast/Reduce; ~2 log2(N) alphas")
    collectives = (C.ALL_REDUCE, C.BROADCAST, C.REDUCE)
    requires = "any topology, any rank count"
    Options = TreeOptions

    def _chains(self, problem: Problem) -> bool:
        topo = problem.topology
        if problem.collective != C.ALL_REDUCE or self.options.shape == "flat":
            return False
        return self.options.shape == "chains" or (topo.kind == "hierarchical" and topo.domains > 1 and topo.local > 1)

    def structure_key(self, problem, sizing, dtype_size):
        n, o = problem.nranks, self.options
        if self._chains(problem):
            D, L = problem.topology.domains, problem.topology.local
            cap = max(1, o.max_templates // (2 * (L - 1) + 4 * (D - 1)))
            want = o.chunks or min(-(-sizing.size_bytes // (2 * L * o.step_size)), o.max_chunks)
            return int(min(max(want, 1), cap))
        per_chunk = 4 * (n - 1) if problem.collective == C.ALL_REDUCE else n - 1
        cap = max(1, o.max_templates // per_chunk)
        if o.chunks:
            want = o.chunks
        elif problem.collective == C.ALL_REDUCE:
            want = auto_chunks(sizing.size_bytes, o.chunk_size, o.max_chunks)
        else:
            want = 1
        return int(min(want, cap))

    def compile(self, problem: Problem, key):
        P = int(key) if key else 1
        if self._chains(problem):
            return self._compile_chains(problem, P)
        if problem.collective == C.ALL_REDUCE:
            return _double_tree(problem, self.label, P)
        return _binomial(problem, self.label, P)

    def _compile_chains(self, problem: Problem, Q: int):
        topo, n = problem.topology, problem.nranks
        D, L = topo.domains, topo.local
        b = ScheduleBuilder(C.ALL_REDUCE, self.label, n, (D, L), Layout(1, Q * L * D * 2))
        tree_allreduce(b, Q, "ring")
        o = self.options
        bw = {1: o.channel_bw_1, 2: o.channel_bw_2}.get(D, o.channel_bw) * 1e9
        busiest = max(2 * (L - 1) / L, nic_load(D) / L)      # bytes / S on a rank's busiest link
        b.notes.update(shape="chains", chunks=Q, rate_cap=L * bw * busiest / 2)   # NCCL's tree bus bytes: 2S
        return b.build()


# ------------------------------------------------------------------------------- AllReduce

def _double_tree(problem: Problem, label: str, P: int):
    n = problem.nranks
    b = ScheduleBuilder(C.ALL_REDUCE, label, n, (1, n), Layout(1, 2 * P))
    trees = [tree_shape(par) for par in dtree_parents(n)]
    node = [const(x) for x in range(max(n, 2 * P))]
    red = [[0] * (n * P) for _ in trees]     # red[t][p*n + v]: v's reduce send of chunk p
    bc = [[0] * (n * P) for _ in trees]      # bc[t][p*n + c]: the broadcast that delivered chunk p to c
    by_height = [levels(sh.height) for sh in trees]
    by_depth = [levels(sh.depth) for sh in trees]
    nwaves = max(P - 1 + 2 * sh.height[sh.root] for sh in trees)   # the deepest broadcast runs in wave nwaves - 1
    for w in range(nwaves):
        g = b.next_group()
        for t, sh in enumerate(trees):
            for h, nodes in enumerate(by_height[t]):                    # reduce: chunk w - h leaves height h
                p = w - h
                if not 0 <= p < P:
                    continue
                for v in nodes:
                    if v == sh.root:
                        continue
                    deps = [red[t][p * n + c] for c in sh.children[v]]
                    if p > 0:
                        deps.append(order(red[t][(p - 1) * n + v]))     # the edge sends its chunks in order
                    red[t][p * n + v] = b.op(src=node[v], dst=node[sh.parent[v]], schunk=node[t * P + p],
                                             group=g, kind=PUT_REDUCE, deps=deps)
            H = sh.height[sh.root]
            for d, nodes in enumerate(by_depth[t]):                     # broadcast: chunk w - H - d leaves depth d
                p = w - H - d
                if not 0 <= p < P:
                    continue
                for v in nodes:
                    arrived = [red[t][p * n + c] for c in sh.children[v]] if v == sh.root else [bc[t][p * n + v]]
                    for c in sh.children[v]:
                        deps = arrived + ([order(bc[t][(p - 1) * n + c])] if p > 0 else [])
                        bc[t][p * n + c] = b.op(src=node[v], dst=node[c], schunk=node[t * P + p], group=g,
                                                kind=PUT, deps=deps)
    return b.build()


# ------------------------------------------------------------------------------- Broadcast / Reduce

def _binomial(problem: Problem, label: str, P: int):
    n, root, coll = problem.nranks, problem.root, problem.collective
    b = ScheduleBuilder(coll, label, n, (1, n), Layout(1, P), root=root)
    K = (n - 1).bit_length()                          # ceil(log2 n)
    # edge (parent u, child v) in relative ranks; broadcast step K-1-log2(lowbit(v)), reduce step log2(lowbit(v))
    todo = []
    for v in range(1, n):
        low = (v & -v).bit_length() - 1
        step = K - 1 - low if coll == C.BROADCAST else low
        for p in range(P):
            todo.append((p + step, v, p))
    todo.sort()
    tid: dict[tuple[int, int], int] = {}             # (child v, p) -> transfer on the edge parent(v) - v
    node = [const(x) for x in range(max(n, P))]
    wave, g = -1, -1
    for w, v, p in todo:
        if w != wave:
            wave, g = w, b.next_group()
        u, low = v & (v - 1), v & -v                  # parent; v = u + low
        if coll == C.BROADCAST:
            src, dst = u, v
            deps = [tid[(u, p)]] if u else []         # chunk p has arrived at u
            prev = u + 2 * low                        # u sends to its children one step after another
            if prev < n and (u == 0 or 2 * low < (u & -u)):
                deps.append(tid[(prev, p)])
        else:
            src, dst = v, u
            deps = [tid[(v + (1 << k), p)] for k in range(low.bit_length() - 1) if v + (1 << k) < n]
            if low > 1:                               # u receives from its children one step after another
                deps.append(tid[(u + low // 2, p)])
        if p > 0:
            deps.append(order(tid[(v, p - 1)]))       # the edge carries its chunks in order
        tid[(v, p)] = b.op(src=node[(src + root) % n], dst=node[(dst + root) % n], schunk=node[p], group=g,
                           kind=PUT if coll == C.BROADCAST else PUT_REDUCE, sbuf=OUT, dbuf=OUT, deps=deps)
    return b.build()
