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

from dataclasses import dataclass

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
    D, L = shape
    if D * L != topo.nranks:
        return None
    o = _orbits(topo, (D, L), ((1 % D, 0), (0, 1 % L)))
    return None if o is None else (o.link, o.link_size)


@dataclass(frozen=True)
class Orbits:
    """Links and ranks grouped by a symmetry group of the schedule and the topology."""

    link: np.ndarray          # int64[nlinks]: orbit id of each link
    link_size: np.ndarray     # float64[orbits]: links per orbit
    rank: np.ndarray          # int64[nranks]: orbit id of each rank
    rank_size: np.ndarray     # float64[rank orbits]: ranks per orbit


def schedule_orbits(s: Schedule, topo: Topology) -> Orbits | None:
    """The orbits under which every instance of every template of s times alike, or None.

    The group G is made of rank shifts (d, l) -> (d + dd, l + dl) of the schedule's (D, L) grid. A step of
    instance i (or j) of a template moves both its ends by one shift (read off the Affine coefficients of
    its rank ends; a switch end must move by the same topology automorphism, checked node by node). When
    the shifts of every template generate the same G, G maps each template's instances onto themselves,
    one orbit (all of them finish together, whatever their dependencies), and if G's generators are
    automorphisms of the topology, a link's load is the same on its whole orbit: the engine walks instance
    (0, 0) alone. This covers equivariant schedules (G = every shift) and twisted ones such as the rail
    rings, whose domain step also turns the rail (G = <(1, a)>)."""
    D, L = s.shape
    if D * L != topo.nranks:
        return None
    steps = _steps(s)
    if steps is None:
        return None
    si, sj, has_switch = steps
    ci, cj = si[:, 0] * L + si[:, 1], sj[:, 0] * L + sj[:, 1]      # shifts as codes d*L + l
    pairs = np.unique(ci * (D * L) + cj)
    groups = {tuple(_subgroup(D, L, [divmod(int(c), L) for c in divmod(p, D * L)]).tolist()) for p in pairs}
    if len(groups) != 1 or len(next(iter(groups))) == 1:
        return None
    gens = [divmod(int(c), L) for c in np.unique(np.concatenate([ci, cj])) if c]
    maps = {g: _automorphism(topo, (D, L), g) for g in gens}
    if any(m is None for m in maps.values()):
        return None
    for t in np.flatnonzero(has_switch):
        if not _moves_with(s.tmpl[t], s.nranks, maps, si[t], sj[t]):
            return None
    return _orbits(topo, (D, L), tuple(gens))


def _steps(s: Schedule):
    """(sigma_i, sigma_j, has_switch): the rank shift (dd, dl) one step of i (of j) moves a template's
    ends by, int64[T, 2] each (zero along a grid side of one instance), and which templates have a switch
    end (their shift is read off the rank end); None when an end is neither a rank moving by a shift of
    the grid nor a switch, or the two ends move differently."""
    D, L = s.shape
    t = s.tmpl
    ID, IL = t[:, F_ID], t[:, F_IL]
    ends = []
    for base, c3 in ((F_SRC, F_C3), (F_DST, F_C3 + 1)):
        a1, b1, _, m1, w1, a2, b2, _, m2, w2 = (t[:, base + k] for k in range(10))
        dom, loc = m1 == D, m2 == L
        rank = ((m1 == 1) | dom & ((w1 == L) | (D == 1))) & ((m2 == 1) | loc & (w2 == 1)) & (t[:, c3] == 0)
        # ID steps of i (IL of j) come back to the same rank: the grid wraps
        rank &= (ID == 1) | ((a1 * ID) % D == 0) & ((a2 * ID) % L == 0)
        rank &= (IL == 1) | ((b1 * IL) % D == 0) & ((b2 * IL) % L == 0)
        if not np.all(rank | (t[:, c3] >= s.nranks)):
            return None
        si = np.stack([np.where(dom, a1 % D, 0), np.where(loc, a2 % L, 0)], 1)
        sj = np.stack([np.where(dom, b1 % D, 0), np.where(loc, b2 % L, 0)], 1)
        ends.append((rank, si, sj))
    (rs, si_s, sj_s), (rd, si_d, sj_d) = ends
    both = rs & rd
    if not np.all(rs | rd) or np.any(both[:, None] & ((si_s != si_d) | (sj_s != sj_d))):
        return None
    si, sj = np.where(rs[:, None], si_s, si_d), np.where(rs[:, None], sj_s, sj_d)
    si[ID == 1] = 0
    sj[IL == 1] = 0
    return si, sj, ~both


def _subgroup(D: int, L: int, gens) -> np.ndarray:
    """Sorted codes d*L + l of the subgroup of Z_D x Z_L that the shifts gens generate."""
    codes = np.zeros(1, np.int64)
    for dd, dl in gens:
        k = np.arange(np.lcm(D // np.gcd(D, int(dd)), L // np.gcd(L, int(dl))))   # the shift's multiples
        d = (codes[:, None] // L + k * int(dd)) % D
        l = (codes[:, None] % L + k * int(dl)) % L
        codes = np.unique(d * L + l)
    return codes


def _moves_with(row, nranks: int, maps, si, sj) -> bool:
    """A template's ends, evaluated on its whole grid, move by the automorphisms of its steps."""
    I, J = np.meshgrid(np.arange(row[F_ID]), np.arange(row[F_IL]), indexing="ij")
    for base, c3 in ((F_SRC, F_C3), (F_DST, F_C3 + 1)):
        v = _aff(row, base, c3, I, J)
        for step, axis in ((si, 0), (sj, 1)):
            g = (int(step[0]), int(step[1]))
            if g == (0, 0):
                continue
            if not np.array_equal(maps[g][0][v], np.roll(v, -1, axis)):
                return False
    return True


def _aff(row, base, c3, i, j):
    return ((row[base] * i + row[base + 1] * j + row[base + 2]) % row[base + 3]) * row[base + 4] \
        + ((row[base + 5] * i + row[base + 6] * j + row[base + 7]) % row[base + 8]) * row[base + 9] + row[c3]


def _automorphism(topo: Topology, shape, shift):
    """(node image, link image) of the rank shift (d, l) -> (d + dd, l + dl) if it is an automorphism of the
    topology (links onto links of equal bandwidth and latency, reduction switches onto theirs), else None.
    Cached on the topology."""
    key = ("automorphism", tuple(shape), tuple(shift))
    if key in topo.cache:
        return topo.cache[key]
    D, L = shape
    n = topo.nranks
    out = None
    # hashed multipath routes do not move with the shifts
    if not (topo.params[P_KIND] == HIERARCHICAL and topo.params[P_SPINES] > 1):
        r = np.arange(n)
        rank_img = ((r // L + shift[0]) % D) * L + (r % L + shift[1]) % L
        img = _extend(topo, rank_img, shape)
        ok = img is not None
        for red in (topo.reduce_switch, topo.out_reduce_switch):
            if ok and len(red):
                has = red >= 0
                ok = bool(np.all(img[red[has]] == red[rank_img][has]))
        perm = _link_perm(topo, img) if ok else None
        out = None if perm is None else (img, perm)
    topo.cache[key] = out
    return out


def _orbits(topo: Topology, shape, gens) -> Orbits | None:
    """Orbits of links and ranks under the group the shifts gens generate (cached on the topology)."""
    key = ("orbits", tuple(shape), tuple(gens))
    if key in topo.cache:
        return topo.cache[key]
    maps = [_automorphism(topo, shape, g) for g in gens if tuple(g) != (0, 0)]
    out = None
    if all(m is not None for m in maps):
        link = _closure(topo.nlinks, [m[1] for m in maps])
        rank = _closure(topo.nranks, [m[0][: topo.nranks] for m in maps])
        _, link, lsize = np.unique(link, return_inverse=True, return_counts=True)
        _, rank, rsize = np.unique(rank, return_inverse=True, return_counts=True)
        out = Orbits(link.astype(np.int64), lsize.astype(np.float64), rank.astype(np.int64),
                     rsize.astype(np.float64))
    topo.cache[key] = out
    return out


def _closure(n: int, perms) -> np.ndarray:
    """Smallest element of each orbit under the permutations: each element takes the least label along
    the powers p, p^2, p^4, ... of each permutation (its whole cycle), repeated until nothing changes."""
    label = np.arange(n)
    changed = True
    while changed:
        before = label
        for p in perms:
            q = p
            for _ in range(max(1, n.bit_length())):
                label = np.minimum(label, label[q])
                q = q[q]
        changed = not np.array_equal(before, label)
    return label
