"""Translation symmetry of a topology, so symmetric schedules can be timed from one instance.

A schedule over the rank grid (D, L) whose every template covers the whole grid
and whose sources and destinations move with the instance (``rank_of`` /
``switch_of``) is *equivariant* under the translations (d, l) -> (d+1, l) and
(d, l) -> (d, l+1). If those translations are also automorphisms of the
topology (links map onto links of equal bandwidth and latency), every instance
of a template has the same timing, and the load on a link is the same on
every link of its orbit. The analytic engine then evaluates instance (0, 0)
only: O(templates) instead of O(transfers). Where only the rail translation
(d, l) -> (d, l+1) is left (a tree over the domains), it evaluates one instance
per row of each template (schedule_orbits).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from ..core.jit import njit
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
    u, v = topo.link_src.astype(np.int64), topo.link_dst.astype(np.int64)
    pairs = np.unique(np.concatenate([u * nn + v, v * nn + u])[np.concatenate([u != v, u != v])])
    near, other = np.divmod(pairs, nn)
    ptr = np.searchsorted(near, np.arange(nn + 1))

    def nbr(s):                                      # s's neighbours, sorted
        return other[ptr[s]:ptr[s + 1]]

    # a switch next to ranks is known by the ranks it serves and its number of switch neighbours
    # (a leaf by its NICs, not by the spine; a scale-up switch and a leaf may serve the same ranks)
    def key(s, image):
        ranks = nbr(s)[nbr(s) < n]
        return np.sort(image[ranks]).tobytes(), len(nbr(s)) - len(ranks)

    switches = range(n, nn)
    ident = np.arange(nn)
    by_ranks: dict = {}
    for s in switches:
        by_ranks.setdefault(key(s, ident), []).append(s)
    for s in switches:
        ranks, others = key(s, img)
        cands = by_ranks.get((ranks, others), []) if ranks else []
        if len(cands) == 1:
            img[s] = cands[0]
    # the rest (a spine) by their neighbours' images
    by_sig: dict = {}
    for s in switches:
        by_sig.setdefault(nbr(s).tobytes(), []).append(s)
    todo = [s for s in switches if img[s] < 0]
    while todo:
        left = []
        for s in todo:
            if np.any(img[nbr(s)] < 0):
                left.append(s)
                continue
            cands = by_sig.get(np.sort(img[nbr(s)]).tobytes(), [])
            if len(cands) != 1:
                return None
            img[s] = cands[0]
        if len(left) == len(todo):
            return None
        todo = left
    if len(np.unique(img)) != nn:
        return None
    return img


def _link_perm(topo: Topology, img: np.ndarray) -> np.ndarray | None:
    """The image of every link under the node permutation img (parallel links in order), or None when
    a link has no image of equal bandwidth and latency."""
    nn = topo.nnodes
    src, dst = topo.link_src.astype(np.int64), topo.link_dst.astype(np.int64)
    key = src * nn + dst
    order = np.argsort(key, kind="stable")
    sorted_key = key[order]
    first = np.searchsorted(sorted_key, key)                     # where each link's (u, v) starts
    nth = np.empty(topo.nlinks, np.int64)
    nth[order] = np.arange(topo.nlinks) - first[order]          # parallel links of (u, v) before it
    target = img[src] * nn + img[dst]
    lo, hi = np.searchsorted(sorted_key, target), np.searchsorted(sorted_key, target, "right")
    if np.any(hi - lo != np.searchsorted(sorted_key, key, "right") - first):
        return None
    perm = order[lo + nth]
    if np.any(topo.link_bw[perm] != topo.link_bw) or np.any(topo.link_lat[perm] != topo.link_lat):
        return None
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
    """Links and ranks grouped by a symmetry group of the schedule and the topology, and the instances
    of each template the engine walks for it."""

    link: np.ndarray          # int64[nlinks]: orbit id of each link
    link_size: np.ndarray     # float64[orbits]: links per orbit
    rank: np.ndarray          # int64[nranks]: orbit id of each rank
    rank_size: np.ndarray     # float64[rank orbits]: ranks per orbit
    reps: np.ndarray | None = None   # int64[T]: 1 (instance (0, 0) stands for all) or ID (instance (r, 0) for row r)


def schedule_orbits(s: Schedule, topo: Topology) -> Orbits | None:
    """The orbits under which the instances of every template of s time alike, or None.

    The group G is made of rank shifts (d, l) -> (d + dd, l + dl) of the schedule's (D, L) grid. A step of
    instance i (or j) of a template moves both its ends by one shift (read off the Affine coefficients of
    its rank ends; a switch end must move by the same topology automorphism, checked node by node). If G's
    generators are automorphisms of the topology, a link's load is the same on its whole orbit, and:

    * when the i and j steps of every template generate the same G, G maps each template's instances
      onto themselves, one orbit (all of them finish together, whatever their dependencies, by induction
      over the groups): the engine walks instance (0, 0) alone. This covers equivariant schedules (G = every
      shift) and twisted ones such as the rail rings, whose domain step also turns the rail (G = <(1, a)>);
    * else, when the j steps of every template generate the same G (a tree over the domains, one template
      per domain and edge over the L rails: G = the rail shifts), G maps each row i of a template's
      instances onto itself: by induction the instances of a row finish together (a dependency shifts i
      alike for the whole row, and a dependency on a whole row, column or template is one on row
      maxima), and the engine walks instance (r, 0) for every row r.
    """
    D, L = s.shape
    if D * L != topo.nranks:
        return None
    steps = _steps(s)
    if steps is None:
        return None
    si, sj, has_switch = steps
    ci, cj = si[:, 0] * L + si[:, 1], sj[:, 0] * L + sj[:, 1]      # shifts as codes d*L + l
    none = np.zeros_like(ci)
    # every instance of a template alike (one representative each), else the rows of each alike
    for steps_i, reps in ((ci, np.ones(s.ntemplates, np.int64)), (none, s.tmpl[:, F_ID].copy())):
        if not _one_group(D, L, steps_i, cj):
            continue
        gens = [divmod(int(c), L) for c in np.unique(np.concatenate([steps_i, cj])) if c]
        maps = {g: _automorphism(topo, (D, L), g) for g in gens}
        if any(m is None for m in maps.values()):
            continue
        moving = si if steps_i is ci else np.zeros_like(si)          # rows: only j steps are symmetries
        if _moves_with(s.tmpl, np.flatnonzero(has_switch), L, gens, maps, moving, sj):
            o = _orbits(topo, (D, L), tuple(gens))
            if o is not None:
                return replace(o, reps=reps)
    return None


def _one_group(D: int, L: int, ci: np.ndarray, cj: np.ndarray) -> bool:
    """Whether the steps (ci[t], cj[t]) of every template t generate one and the same group, not trivial."""
    pairs = np.unique(ci * (D * L) + cj)
    groups = {tuple(_subgroup(D, L, [divmod(int(c), L) for c in divmod(p, D * L)]).tolist()) for p in pairs}
    return len(groups) == 1 and len(next(iter(groups))) > 1


def _steps(s: Schedule):
    """(sigma_i, sigma_j, has_switch): the rank shift (dd, dl) one step of i (of j) moves a template's
    ends by, int64[T, 2] each (zero along a grid side of one instance), and which templates have a switch
    end (their shift is read off the rank end); None when an end is neither a rank moving by a shift of
    the grid nor a switch, or the two ends move differently."""
    D, L = s.shape
    ok, si, sj, has_switch = steps_kernel(s.tmpl, D, L, s.nranks)
    return (si, sj, has_switch) if ok else None


@njit
def _end_kernel(row, base, c3, D, L, nranks, out):
    """One end of a template: out = (dd_i, dl_i, dd_j, dl_j) of a rank end; 1 for a rank, 0 for a switch,
    -1 for neither."""
    a1, b1, m1, w1 = row[base], row[base + 1], row[base + 3], row[base + 4]
    a2, b2, m2, w2 = row[base + 5], row[base + 6], row[base + 8], row[base + 9]
    ID, IL = row[F_ID], row[F_IL]
    dom, loc = m1 == D, m2 == L
    rank = (m1 == 1 or dom and (w1 == L or D == 1)) and (m2 == 1 or loc and w2 == 1) and row[c3] == 0
    # ID steps of i (IL of j) come back to the same rank: the grid wraps
    rank = rank and (ID == 1 or (a1 * ID) % D == 0 and (a2 * ID) % L == 0)
    rank = rank and (IL == 1 or (b1 * IL) % D == 0 and (b2 * IL) % L == 0)
    out[0] = a1 % D if dom else 0
    out[1] = a2 % L if loc else 0
    out[2] = b1 % D if dom else 0
    out[3] = b2 % L if loc else 0
    if rank:
        return 1
    return 0 if row[c3] >= nranks else -1


@njit
def steps_kernel(tmpl, D, L, nranks):
    """_steps over every template: (ok, sigma_i, sigma_j, has_switch)."""
    T = tmpl.shape[0]
    si = np.zeros((T, 2), np.int64)
    sj = np.zeros((T, 2), np.int64)
    has_switch = np.zeros(T, np.bool_)
    src = np.empty(4, np.int64)
    dst = np.empty(4, np.int64)
    for t in range(T):
        row = tmpl[t]
        rs = _end_kernel(row, F_SRC, F_C3, D, L, nranks, src)
        rd = _end_kernel(row, F_DST, F_C3 + 1, D, L, nranks, dst)
        if rs < 0 or rd < 0 or rs == 0 and rd == 0:
            return False, si, sj, has_switch
        if rs == 1 and rd == 1:
            for k in range(4):
                if src[k] != dst[k]:
                    return False, si, sj, has_switch
        end = src if rs == 1 else dst
        if row[F_ID] > 1:
            si[t, 0], si[t, 1] = end[0], end[1]
        if row[F_IL] > 1:
            sj[t, 0], sj[t, 1] = end[2], end[3]
        has_switch[t] = not (rs == 1 and rd == 1)
    return True, si, sj, has_switch


def _subgroup(D: int, L: int, gens) -> np.ndarray:
    """Sorted codes d*L + l of the subgroup of Z_D x Z_L that the shifts gens generate."""
    codes = np.zeros(1, np.int64)
    for dd, dl in gens:
        k = np.arange(np.lcm(D // np.gcd(D, int(dd)), L // np.gcd(L, int(dl))))   # the shift's multiples
        d = (codes[:, None] // L + k * int(dd)) % D
        l = (codes[:, None] % L + k * int(dl)) % L
        codes = np.unique(d * L + l)
    return codes


def _moves_with(tmpl, ts, L: int, gens, maps, si, sj) -> bool:
    """Templates ts' ends, evaluated on their whole grids, move by the automorphisms of their steps."""
    images = np.stack([maps[g][0] for g in gens])
    which = np.full((max(d for d, _ in gens) + 1) * L, -1, np.int64)     # step code d*L + l -> generator
    which[[d * L + l for d, l in gens]] = np.arange(len(gens))
    which[0] = -1                                                       # no step

    def of(steps):
        codes = steps[ts, 0] * L + steps[ts, 1]
        return np.where(codes < which.size, which[np.minimum(codes, which.size - 1)], -1)
    return moves_kernel(tmpl, ts.astype(np.int64), of(si), of(sj), images)


@njit
def _aff_kernel(row, base, c3, i, j):
    return ((row[base] * i + row[base + 1] * j + row[base + 2]) % row[base + 3]) * row[base + 4] \
        + ((row[base + 5] * i + row[base + 6] * j + row[base + 7]) % row[base + 8]) * row[base + 9] + row[c3]


@njit
def moves_kernel(tmpl, ts, gi, gj, images):
    """Whether, for every template ts[k], each end's node at instance (i, j) maps by images[gi[k]] onto its
    node at (i + 1, j) and by images[gj[k]] onto its node at (i, j + 1), around the grid (-1: no step)."""
    for k in range(ts.size):
        row = tmpl[ts[k]]
        ID, IL = row[F_ID], row[F_IL]
        for e in range(2):
            base = F_SRC if e == 0 else F_DST
            for i in range(ID):
                for j in range(IL):
                    v = _aff_kernel(row, base, F_C3 + e, i, j)
                    if gi[k] >= 0 and images[gi[k], v] != _aff_kernel(row, base, F_C3 + e, (i + 1) % ID, j):
                        return False
                    if gj[k] >= 0 and images[gj[k], v] != _aff_kernel(row, base, F_C3 + e, i, (j + 1) % IL):
                        return False
    return True


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
