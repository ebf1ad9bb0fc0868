"""Trees: NCCL's pipelined double binary tree (AllReduce) and binomial trees (Broadcast, Reduce).

AllReduce -- double binary tree (NCCL's ncclGetDtree, after Sanders, Speck & Traeff 2009). Tree 0 is
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

from hcclsim.schedule import OUT, PUT, PUT_REDUCE, Layout, ScheduleBuilder, const, order
from hcclsim.schedule import collectives as C
from hcclsim.schedule.algorithm import Algorithm, Problem, auto_chunks, opt, register


@dataclass(frozen=True)
class TreeOptions:
    chunks: int = opt(0, "pipelined chunks per tree (0: AllReduce one per chunk_size bytes up to max_chunks; "
                         "Broadcast/Reduce 1)")
    chunk_size: int = opt(128 << 10, "bytes per pipelined chunk for AllReduce when chunks=0 (latency is "
                                      "paid per level, not per chunk, so finer chunks shorten the fill)")
    max_chunks: int = opt(64, "upper bound on automatic chunks")
    max_templates: int = opt(1 << 18, "cap on the schedule's templates (it bounds the chunks on large N)")

    def __post_init__(self):
        if self.chunks < 0 or self.chunk_size < 1 or self.max_chunks < 1 or self.max_templates < 1:
            raise ValueError("chunks must be >= 0; chunk_size, max_chunks and max_templates >= 1")


@register
class Tree(Algorithm):
    name = "tree"
    summary = "pipelined double binary tree AllReduce (NCCL-like); binomial Broadcast/Reduce; ~2 log2(N) alphas"
    collectives = (C.ALL_REDUCE, C.BROADCAST, C.REDUCE)
    requires = "any topology, any rank count"
    Options = TreeOptions

    def structure_key(self, problem, sizing, dtype_size):
        n, o = problem.nranks, self.options
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
        if problem.collective == C.ALL_REDUCE:
            return _double_tree(problem, self.label, P)
        return _binomial(problem, self.label, P)


# ------------------------------------------------------------------------------- tree shapes

def btree_parents(n: int) -> list[int]:
    """NCCL's ncclGetBtree: parent of each rank in the in-order binary tree with rank 0 on top (-1: root)."""
    parent = [-1] * n
    for r in range(1, n):
        bit = r & -r
        up = (r ^ bit) | (bit << 1)
        parent[r] = up if up < n else r ^ bit
    return parent


def dtree_parents(n: int) -> tuple[list[int], list[int]]:
    """NCCL's ncclGetDtree: the two trees' parent lists (tree 1 mirrors tree 0 if n is even, else shifts it)."""
    t0 = btree_parents(n)
    if n % 2 == 0:
        t1 = [-1 if t0[n - 1 - r] < 0 else n - 1 - t0[n - 1 - r] for r in range(n)]
    else:
        t1 = [-1 if t0[(r - 1) % n] < 0 else (t0[(r - 1) % n] + 1) % n for r in range(n)]
    return t0, t1


@dataclass(frozen=True)
class _Shape:
    root: int
    parent: list[int]
    children: list[list[int]]
    height: list[int]      # 0 for leaves
    depth: list[int]       # 0 for the root


def _shape(parent: list[int]) -> _Shape:
    n = len(parent)
    children: list[list[int]] = [[] for _ in range(n)]
    for r, p in enumerate(parent):
        if p >= 0:
            children[p].append(r)
    root = parent.index(-1)
    order, depth = [root], [0] * n
    for v in order:                      # breadth first: parents before children
        for c in children[v]:
            depth[c] = depth[v] + 1
            order.append(c)
    height = [0] * n
    for v in reversed(order):
        if parent[v] >= 0:
            height[parent[v]] = max(height[parent[v]], height[v] + 1)
    return _Shape(root, parent, children, height, depth)


# ------------------------------------------------------------------------------- AllReduce

def _double_tree(problem: Problem, label: str, P: int):
    n = problem.nranks
    b = ScheduleBuilder(C.ALL_REDUCE, label, n, (1, n), Layout(1, 2 * P))
    trees = [_shape(par) for par in dtree_parents(n)]
    node = [const(x) for x in range(max(n, 2 * P))]
    red = [[0] * (n * P) for _ in trees]     # red[t][p*n + v]: v's reduce send of chunk p
    bc = [[0] * (n * P) for _ in trees]      # bc[t][p*n + c]: the broadcast that delivered chunk p to c
    by_height = [_levels(sh.height) for sh in trees]
    by_depth = [_levels(sh.depth) for sh in trees]
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


def _levels(value: list[int]) -> list[list[int]]:
    """Ranks grouped by value (height or depth), in rank order."""
    out: list[list[int]] = [[] for _ in range(max(value) + 1)]
    for r, x in enumerate(value):
        out[x].append(r)
    return out


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
