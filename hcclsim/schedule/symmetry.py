"""Translation symmetry of a topology, so symmetric schedules can be timed from one instance.

A schedule over the rank grid (D, L) whose every template covers the whole grid
and whose sources and destinations move with the instance (``rank_of`` /
``switch_of``) is *equivariant* under the translations (d, l) -> (d+1, l) and
(d, l) -> (d, l+1). If those translations are also automorphisms of the
topology (links map onto links of equal bandwidth and latency), every instance
of a template has the same timing, and the load on a link is the same on
every link of its orbit. The analytic engine then evaluates instance (0, 0)
only: O(templates) instead of O(transfers).
"""

from __future__ import annotations

import numpy as np

from ..network.topology import HIERARCHICAL, P_KIND, P_SPINES, Topology
from .ir import F_C3, F_DST, F_ID, F_IL, F_SRC, Schedule


def equivariant(s: Schedule) -> bool:
    """Every template covers the whole (D, L) grid and its endpoints are translations."""
    D, L = s.shape
    t = s.tmpl
    if not (np.all(t[:, F_ID] == D) and np.all(t[:, F_IL] == L)):
        return False
    for base, c3 in ((F_SRC, F_C3), (F_DST, F_C3 + 1)):
        a = t[:, base:base + 10]
        rank = (a[:, 0] == 1) & (a[:, 1] == 0) & (a[:, 3] == D) & (a[:, 4] == L) & (a[:, 5] == 0) \
            & (a[:, 6] == 1) & (a[:, 8] == L) & (a[:, 9] == 1) & (t[:, c3] == 0)
        switch = (a[:, 0] == 1) & (a[:, 1] == 0) & (a[:, 3] == D) & (a[:, 4] == 1) & (a[:, 9] == 0) \
            & (t[:, c3] == s.nranks)
        if not np.all(rank | switch):
            return False
    return True


def _extend(topo: Topology, rank_img: np.ndarray, shape) -> np.ndarray | None:
    """Extend a rank permutation to all nodes (switches by their neighbourhoods), or None."""
    n, nn = topo.nranks, topo.nnodes
    img = np.full(nn, -1, np.int64)
    img[:n] = rank_img
    nbr: list[set[int]] = [set() for _ in range(nn)]
    for u, v in zip(topo.link_src.tolist(), topo.link_dst.tolist()):
        if u != v:
            nbr[u].add(v)
            nbr[v].add(u)
    # a switch next to ranks is known by the ranks it serves and its number of switch neighbours
    # (a leaf by its NICs, not by the spine; a scale-up switch and a leaf may serve the same ranks)
    def key(s, img_of):
        ranks = frozenset(img_of(x) for x in nbr[s] if x < n)
        return ranks, len(nbr[s]) - len(ranks)

    by_ranks: dict = {}
    for s in range(n, nn):
        by_ranks.setdefault(key(s, int), []).append(s)
    for s in range(n, nn):
        ranks, others = key(s, lambda x: int(img[x]))
        cands = by_ranks.get((ranks, others), []) if ranks else []
        if len(cands) == 1:
            img[s] = cands[0]
    # the rest (a spine) by their neighbours' images
    by_sig = {}
    for s in range(n, nn):
        by_sig.setdefault(frozenset(nbr[s]), []).append(s)
    todo = [s for s in range(n, nn) if img[s] < 0]
    while todo:
        left = []
        for s in todo:
            if any(img[x] < 0 for x in nbr[s]):
                left.append(s)
                continue
            cands = by_sig.get(frozenset(int(img[x]) for x in nbr[s]), [])
            if len(cands) != 1:
                return None
            img[s] = cands[0]
        if len(left) == len(todo):
            return None
        todo = left
    if len(set(img.tolist())) != nn:
        return None
    return img


def _link_perm(topo: Topology, img: np.ndarray) -> np.ndarray | None:
    table: dict[tuple[int, int], list[int]] = {}
    for e, (u, v) in enumerate(zip(topo.link_src.tolist(), topo.link_dst.tolist())):
        table.setdefault((u, v), []).append(e)
    perm = np.empty(topo.nlinks, np.int64)
    for (u, v), es in table.items():
        target = table.get((int(img[u]), int(img[v])))
        if target is None or len(target) != len(es):
            return None
        for e, f in zip(es, target):
            if topo.link_bw[e] != topo.link_bw[f] or topo.link_lat[e] != topo.link_lat[f]:
                return None
            perm[e] = f
    return perm


def link_orbits(topo: Topology, shape: tuple[int, int]):
    """(orbit id per link, orbit sizes) under the grid translations, or None if they are not symmetries.

    Computed once per topology and shape (cached on the topology)."""
    key = ("link_orbits", tuple(shape))
    if key not in topo.cache:
        topo.cache[key] = _link_orbits(topo, shape)
    return topo.cache[key]


def _link_orbits(topo: Topology, shape: tuple[int, int]):
    D, L = shape
    n = topo.nranks
    if D * L != n or topo.params[P_KIND] == HIERARCHICAL and topo.params[P_SPINES] > 1:
        return None              # hashed multipath routes do not move with the translations
    r = np.arange(n)
    d, l = r // L, r % L
    perms = []
    for rank_img in (((d + 1) % D) * L + l, d * L + (l + 1) % L):
        img = _extend(topo, rank_img, shape)
        if img is None:
            return None
        if np.any(img[topo.reduce_switch[topo.reduce_switch >= 0]] != topo.reduce_switch[rank_img][topo.reduce_switch >= 0]):
            return None
        p = _link_perm(topo, img)
        if p is None:
            return None
        perms.append(p)
    parent = np.arange(topo.nlinks)

    def find(x):
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for p in perms:
        for e in range(topo.nlinks):
            a, b = find(e), find(int(p[e]))
            if a != b:
                parent[max(a, b)] = min(a, b)
    roots = np.array([find(e) for e in range(topo.nlinks)])
    _, orbit, sizes = np.unique(roots, return_inverse=True, return_counts=True)
    return orbit.astype(np.int64), sizes.astype(np.float64)
