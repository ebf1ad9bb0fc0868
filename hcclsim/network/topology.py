"""Topologies: nodes, directed links and routes, as flat arrays a Numba kernel can read.

Node ids: ranks ``0..N-1`` first, then switches. Link ids are arithmetic in the
rank ids (see ``LINK LAYOUT`` below), so a route is computed on the fly by
``route_kernel`` and no N x N route table is ever stored: a 4096-rank fabric
costs a few arrays of length ~N.

LINK LAYOUT (per kind; ``N`` ranks)
  switch      up r -> r (rank r to the switch), down r -> N + r. Switch node N.
  ring        clockwise r -> r (r to r+1), counter-clockwise r -> N + r (r to r-1).
  full_mesh   i -> j is link i*N + j (one dedicated link per ordered pair).
  torus2d     rank = y*X + x; links 4r+0 (+x), 4r+1 (-x), 4r+2 (+y), 4r+3 (-y).
  hierarchical  D domains of L ranks, rank = d*L + l. Domain d's scale-up links
              are the flat layout above on local ids, offset by d*U (U = scale-up
              links per domain); scale-up switch of domain d is node N + d. Then
              NIC up r -> B + r, NIC down r -> B + N + r (B = D*U); fat tree: leaf
              k's uplink to spine s B + 2N + k*S + s and spine s's downlink to leaf k
              B + 2N + K*S + k*S + s (S spines; a flow takes spine hash(src, dst) mod S,
              equal-cost multipath); with one spine these are leaf k's aggregate links
              B + 2N + K + k (K leaves). Rail switch l (rail kind) is node N + D' + l, D' the
              scale-up switches (D for a switch scale-up, else 0).
  graph       links listed per pair (network/wiring.py); routes are rows of a table in params.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..core import budget
from ..core.errors import TopologyError
from ..core.jit import njit
from .params import DEFAULT_ENDPOINT, DEFAULT_PACKET, Endpoint, PacketParams

# kind codes, shared with the kernels
SWITCH, RING, FULL_MESH, TORUS2D, HIERARCHICAL, GRAPH = 0, 1, 2, 3, 4, 5
FAT_TREE, RAIL = 0, 1
FLAT_KINDS = {"switch": SWITCH, "ring": RING, "full_mesh": FULL_MESH, "torus2d": TORUS2D}
SCALE_OUT_KINDS = {"fat_tree": FAT_TREE, "rail": RAIL}

# why a scale-out tier other than rails cannot reduce (config.py reports it on the key)
OUT_REDUCE_RAIL_ONLY = (
    "only a 'rail' scale-out reduces in its switches (rail switch l holds NIC l of every domain); on a fat "
    "tree a rail's ranks meet only in the spines, SHARP's aggregation tree over leaves and spines, which is "
    "not modelled")

# params[] layout
P_KIND, P_N, P_X, P_Y = 0, 1, 2, 3                      # flat kinds (X, Y: torus only)
P_D, P_L, P_UPKIND, P_U, P_OUTKIND, P_NICBASE, P_LEAF, P_NLEAF, P_SPINES = 2, 3, 4, 5, 6, 7, 8, 9, 10
P_NODES, P_HOST = 2, 3                                  # graph: nodes, the host node (-1: none)
NPARAMS = 11
ROUTE_ROW = 3                                           # graph: a route table row, (hops, link, link)


@dataclass(frozen=True)
class Tier:
    """One level of the network as the user described it (for reports and bounds)."""

    name: str            # "flat", "scale_up" or "scale_out"
    kind: str
    bandwidth: float     # bytes/s per rank link, per direction
    latency: float       # seconds per link hop
    packet: PacketParams = DEFAULT_PACKET


@dataclass(frozen=True)
class Topology:
    name: str
    kind: str
    nranks: int
    domains: int                 # D: scale-up domains (1 for flat kinds)
    local: int                   # L: ranks per domain (N for flat kinds)
    params: np.ndarray           # int64[NPARAMS], read by route_kernel
    link_bw: np.ndarray          # float64[nlinks], bytes/s
    link_lat: np.ndarray         # float64[nlinks], seconds
    link_src: np.ndarray         # int32[nlinks] node ids (for validation, listings, the packet engine)
    link_dst: np.ndarray
    nnodes: int
    max_hops: int
    reduce_switch: np.ndarray    # int32[N]: node id of a switch that reduces for this rank, or -1
    tiers: tuple[Tier, ...]
    link_tier: np.ndarray        # int8[nlinks]: index into tiers
    node_tier: np.ndarray        # int8[nnodes]: the tier of each switch node (-1 for ranks)
    endpoint: Endpoint = DEFAULT_ENDPOINT
    # int32[N]: the scale-out switch that reduces for this rank (its rail switch, scale_out.in_switch_reduce),
    # or -1; kept apart from reduce_switch, which algorithms read as the scale-up (NVLS) reduction point
    out_reduce_switch: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int32), compare=False)
    spec: dict = field(default_factory=dict, compare=False)   # the resolved [topology] table
    cache: dict = field(default_factory=dict, compare=False, repr=False, init=False)  # derived facts (orbits)

    @property
    def nlinks(self) -> int:
        return len(self.link_bw)

    @property
    def can_reduce_in_switch(self) -> bool:
        return bool(len(self.reduce_switch)) and bool(np.all(self.reduce_switch >= 0))

    @property
    def can_reduce_in_scale_out(self) -> bool:
        return bool(len(self.out_reduce_switch)) and bool(np.all(self.out_reduce_switch >= 0))

    def route(self, src: int, dst: int) -> list[int]:
        """Link ids of the path src -> dst (Python convenience over route_kernel)."""
        out = np.empty(self.max_hops, np.int64)
        n = route_kernel(self.params, src, dst, out)
        return [int(x) for x in out[:n]]

    @property
    def routes_partial(self) -> bool:
        """Some pair of ranks has no route (a graph wiring without a host path): the engines check each
        schedule's pairs (check_routes)."""
        return self.params[P_KIND] == GRAPH and self.params[P_HOST] < 0 and bool(np.any(self._hops() < 0))

    @property
    def cap_share(self) -> np.ndarray:
        """Per link, the share of a cap on its rank's rate it may carry (hcclsim.engine.execution): a graph
        wiring's rank spreads a ring's traffic over its links in proportion to their bandwidth, so each of its
        NVLink-tier links takes that share (exact for schedules that load every link so, the rings the presets
        run; low for one that sends over one link only, which the cap would let take it all). The other kinds
        keep the whole cap on every link, whatever their links per rank (ring 2, torus2d 4, full_mesh N-1), and
        a graph's host link keeps it too."""
        share = np.ones(self.nlinks)
        if self.params[P_KIND] == GRAPH:
            own = (self.link_tier == 0) & (self.link_src < self.nranks)
            total = np.bincount(self.link_src[own], self.link_bw[own], self.nranks)
            share[own] = self.link_bw[own] / total[self.link_src[own]]
        return share

    def _hops(self) -> np.ndarray:
        nn = int(self.params[P_NODES])
        return self.params[NPARAMS::ROUTE_ROW][: nn * nn]

    def hop_table(self) -> tuple[np.ndarray, int]:
        """(hops of every (source, destination) node pair, source-major, -1 where there is no route; the nodes)."""
        return self._hops(), int(self.params[P_NODES])

    def unrouted(self, src, dst) -> tuple[int, int] | None:
        """The first (source, destination) of the transfers src -> dst with no route between them, or None."""
        if not self.routes_partial:
            return None
        src, dst = np.asarray(src, np.int64), np.asarray(dst, np.int64)
        nn = int(self.params[P_NODES])
        ok = (src >= nn) | (dst >= nn)
        bad = np.flatnonzero(~ok & (self._hops()[np.where(ok, 0, src * nn + dst)] < 0))
        return (int(src[bad[0]]), int(dst[bad[0]])) if len(bad) else None

    def check_routes(self, src, dst, what: str) -> None:
        """Refuse (TopologyError) a schedule -- what names it -- that sends between two ranks with no route."""
        self.refuse_unrouted(self.unrouted(src, dst), what)

    @staticmethod
    def no_route(pair: tuple[int, int]) -> str:
        """How a skipped or refused schedule's unlinked pair is named: 'sends rank 0 -> rank 2, which ...'."""
        return f"sends rank {pair[0]} -> rank {pair[1]}, which have no link and no [topology.host] path"

    def refuse_unrouted(self, pair: tuple[int, int] | None, what: str) -> None:
        """Refuse (TopologyError) a schedule -- what names it -- that sends over pair, ranks with no route."""
        if pair:
            raise TopologyError(f"topology {self.name!r}: {what} sends rank {pair[0]} -> rank {pair[1]}, which have "
                                f"no link between them, and the topology has no [topology.host] path; add one, or "
                                f"run an algorithm that stays on the links (ring lays its rings on them)")

    def path_latency(self, src: int, dst: int) -> float:
        return float(sum(self.link_lat[link] for link in self.route(src, dst)))

    def node_name(self, v: int) -> str:
        """'r3' for rank 3, 'sw0' for the first switch: how traces and reports name a node."""
        return f"r{v}" if v < self.nranks else f"sw{v - self.nranks}"


# --------------------------------------------------------------------------- routing kernels

@njit
def _flat_route(kind, n, x_dim, a, b, base, out, k):
    """Route local rank a -> local rank b inside one flat fabric whose links start at ``base``.

    a == -1 means 'this fabric's switch' as source, b == -1 as destination (switch kind only).
    Appends link ids to out[k:], returns the new k.
    """
    if a == b:
        return k
    if kind == SWITCH:
        if a >= 0:
            out[k] = base + a
            k += 1
        if b >= 0:
            out[k] = base + n + b
            k += 1
        return k
    if kind == RING:
        d = (b - a) % n
        if d <= n - d:
            for _ in range(d):
                out[k] = base + a
                k += 1
                a = (a + 1) % n
        else:
            for _ in range(n - d):
                out[k] = base + n + a
                k += 1
                a = (a - 1) % n
        return k
    if kind == FULL_MESH:
        out[k] = base + a * n + b
        return k + 1
    # TORUS2D: dimension-order routing, x first, shortest direction (ties go +)
    y_dim = n // x_dim
    ax, ay, bx, by = a % x_dim, a // x_dim, b % x_dim, b // x_dim
    d = (bx - ax) % x_dim
    step, link = (1, 0) if d <= x_dim - d else (-1, 1)
    while ax != bx:
        out[k] = base + 4 * (ay * x_dim + ax) + link
        k += 1
        ax = (ax + step) % x_dim
    d = (by - ay) % y_dim
    step, link = (1, 2) if d <= y_dim - d else (-1, 3)
    while ay != by:
        out[k] = base + 4 * (ay * x_dim + ax) + link
        k += 1
        ay = (ay + step) % y_dim
    return k


@njit
def route_kernel(params, src, dst, out):
    """Write the link ids of the path src -> dst into out; return how many.

    Nodes >= N are switches: in flat 'switch' topologies node N, in hierarchical
    ones node N + d is domain d's scale-up switch (the in-switch reduction point) and,
    on a rail scale-out, the nodes after those the rail switches (the scale-out reduction
    points): a rank off the switch's rail reaches it over NVLink through its domain's
    rank on that rail, as cross-rail traffic does; on a fat tree, the nodes after the
    scale-up switches the leaves, which a rank reaches (and is reached from) over its NIC; in a graph
    wiring node N is the host (network/wiring.py).
    """
    kind = params[P_KIND]
    n = params[P_N]
    if kind == GRAPH:
        return _table_route(params, src, dst, out)
    if kind != HIERARCHICAL:
        a = src if src < n else -1
        b = dst if dst < n else -1
        return _flat_route(kind, n, params[P_X], a, b, 0, out, 0)
    loc, upkind, ulinks = params[P_L], params[P_UPKIND], params[P_U]
    nic = params[P_NICBASE]
    rail0 = n + (params[P_D] if upkind == SWITCH else 0)       # the first rail switch (fat tree: leaf)
    if params[P_OUTKIND] == RAIL and src >= rail0:             # rail switch -> its NIC in dst's domain -> dst
        rl, dd = src - rail0, dst // loc
        out[0] = nic + n + dd * loc + rl
        return _flat_route(upkind, loc, 0, rl, dst % loc, dd * ulinks, out, 1)
    if params[P_OUTKIND] == RAIL and dst >= rail0:             # src -> its domain's rank on the rail -> switch
        rl, sd = dst - rail0, src // loc
        k = _flat_route(upkind, loc, 0, src % loc, rl, sd * ulinks, out, 0)
        out[k] = nic + sd * loc + rl
        return k + 1
    leaves = rail0 + params[P_NLEAF]                           # on a fat tree, the leaves are rail0..leaves-1
    if src < n <= rail0 <= dst < leaves or dst < n <= rail0 <= src < leaves:
        return _leaf_route(params, src, dst, rail0, out)
    if src >= n:
        d = src - n
        return _flat_route(upkind, loc, 0, -1, dst - d * loc, d * ulinks, out, 0)
    if dst >= n:
        d = dst - n
        return _flat_route(upkind, loc, 0, src - d * loc, -1, d * ulinks, out, 0)
    sd, sl, dd, dl = src // loc, src % loc, dst // loc, dst % loc
    if sd == dd:
        return _flat_route(upkind, loc, 0, sl, dl, sd * ulinks, out, 0)
    k = 0
    if params[P_OUTKIND] == RAIL and sl != dl:
        # rail-optimized: cross-rail traffic first moves to the destination's rail
        # inside the source domain (PXN-style), then takes that rail.
        k = _flat_route(upkind, loc, 0, sl, dl, sd * ulinks, out, 0)
        src = sd * loc + dl
    out[k] = nic + src
    k += 1
    if params[P_OUTKIND] == FAT_TREE:
        leaf_size, nleaf, spines = params[P_LEAF], params[P_NLEAF], params[P_SPINES]
        ls, ld = src // leaf_size, dst // leaf_size
        if ls != ld:
            s = ecmp_hash(src, dst) % spines if spines > 1 else 0
            out[k] = nic + 2 * n + ls * spines + s
            out[k + 1] = nic + 2 * n + nleaf * spines + ld * spines + s
            k += 2
    out[k] = nic + n + dst
    return k + 1


@njit
def _table_route(params, src, dst, out):
    """A graph wiring's route src -> dst: row src * nodes + dst of the table after the header (hops, links);
    a pair without a route (hops -1, refused by Topology.check_routes) has none."""
    at = NPARAMS + (src * params[P_NODES] + dst) * ROUTE_ROW
    h = max(params[at], 0)
    for k in range(h):
        out[k] = params[at + 1 + k]
    return h


@njit
def _leaf_route(params, src, dst, leaf0, out):
    """A rank to fat-tree leaf k, or leaf k to a rank (leaf k is node leaf0 + k): over the rank's NIC, and a
    spine when k is not the rank's own leaf. A leaf relays a striped schedule's NIC share between two ranks
    of one domain (algorithms/striped.py)."""
    n, nic, leaf_size = params[P_N], params[P_NICBASE], params[P_LEAF]
    nleaf, spines = params[P_NLEAF], params[P_SPINES]
    up = dst >= leaf0
    rank, k = (src, dst - leaf0) if up else (dst, src - leaf0)
    h = 0
    if up:
        out[0] = nic + src
        h = 1
    own = rank // leaf_size
    if own != k:
        s = ecmp_hash(src, dst) % spines if spines > 1 else 0
        a, b = (own, k) if up else (k, own)
        out[h] = nic + 2 * n + a * spines + s
        out[h + 1] = nic + 2 * n + nleaf * spines + b * spines + s
        h += 2
    if not up:
        out[h] = nic + n + dst
        h += 1
    return h


@njit
def ecmp_hash(src, dst):
    """A deterministic flow hash (multiplicative mixing of the two ends) for equal-cost multipath."""
    h = (src * 0x9E3779B1 + dst * 0x85EBCA77 + 0x27D4EB2F) & 0xFFFFFFFF
    h ^= h >> 15
    h = (h * 0x2C1B3C6D) & 0xFFFFFFFF
    h ^= h >> 12
    return h


# --------------------------------------------------------------------------- cost

# Bytes building a topology takes per link, node and scale-up domain, measured as the peak RSS growth
# of load_topology (switch, ring, torus2d, full_mesh and two-tier fabrics of 10^5 to 10^6 ranks: 110-200
# per link, 130-690 per node, about 1.2 KiB per domain; tests/test_budget.py): the link arrays and
# check_connected's adjacency lists.
BYTES_PER_LINK, BYTES_PER_NODE, BYTES_PER_DOMAIN = 150, 200, 1500


def flat_size(kind: str, nranks: int) -> tuple[int, int]:
    """(links, nodes) of a flat fabric (LINK LAYOUT), from its dimensions alone."""
    links = {SWITCH: 2 * nranks, RING: 2 * nranks, FULL_MESH: nranks * nranks, TORUS2D: 4 * nranks}[FLAT_KINDS[kind]]
    return links, nranks + (kind == "switch")


def hierarchical_size(up_kind: str, local: int, out_kind: str, domains: int, leaf_size: int | None,
                      spines: int = 1) -> tuple[int, int]:
    """(links, nodes) of a two-tier fabric (LINK LAYOUT), from its dimensions alone."""
    n = domains * local
    up_links, up_nodes = flat_size(up_kind, local)
    leaves = n // (leaf_size or local) if out_kind == "fat_tree" else 0
    out_switches = leaves + spines if out_kind == "fat_tree" else local
    return domains * up_links + 2 * n + 2 * leaves * spines, n + domains * (up_nodes - local) + out_switches


def check_size(name: str, nranks: int, links: int, nodes: int, domains: int = 1) -> None:
    """Refuse, before any array is built, a topology whose construction would pass the memory budget."""
    need = BYTES_PER_LINK * links + BYTES_PER_NODE * nodes + BYTES_PER_DOMAIN * domains
    budget.check(need, f"building topology {name!r} ({nranks} ranks, {links} links)",
                 "use fewer ranks (ranks, dims, scale_up.ranks or scale_out.domains)")


# --------------------------------------------------------------------------- builders

def _flat_links(kind: int, n: int, x_dim: int, bw: float, lat: float, node0: int, switch_node: int):
    """(src, dst, bw, lat) arrays of one flat fabric of n ranks numbered node0..node0+n-1."""
    r = np.arange(n, dtype=np.int64)
    if kind == SWITCH:
        src = np.concatenate([node0 + r, np.full(n, switch_node)])
        dst = np.concatenate([np.full(n, switch_node), node0 + r])
    elif kind == RING:
        src = np.concatenate([node0 + r, node0 + r])
        dst = np.concatenate([node0 + (r + 1) % n, node0 + (r - 1) % n])
    elif kind == FULL_MESH:
        i, j = np.divmod(np.arange(n * n, dtype=np.int64), n)
        src, dst = node0 + i, node0 + j
    else:
        y_dim = n // x_dim
        x, y = r % x_dim, r // x_dim
        nbr = np.stack([y * x_dim + (x + 1) % x_dim, y * x_dim + (x - 1) % x_dim,
                        ((y + 1) % y_dim) * x_dim + x, ((y - 1) % y_dim) * x_dim + x], axis=1)
        src = np.repeat(node0 + r, 4)
        dst = node0 + nbr.reshape(-1)
    m = len(src)
    return src, dst, np.full(m, bw), np.full(m, lat)


def _max_hops_flat(kind: int, n: int, x_dim: int) -> int:
    if kind == RING:
        return max(1, n // 2)
    if kind == TORUS2D:
        return max(1, x_dim // 2 + (n // x_dim) // 2)
    return 2


def build_flat(name: str, kind: str, nranks: int, bandwidth: float, latency: float,
               in_switch_reduce: bool = False, dims: tuple[int, int] | None = None,
               spec: dict | None = None, packet: PacketParams = DEFAULT_PACKET,
               endpoint: Endpoint = DEFAULT_ENDPOINT) -> Topology:
    code = FLAT_KINDS[kind]
    x_dim = dims[0] if dims else 0
    if code == TORUS2D and (not dims or dims[0] * dims[1] != nranks):
        raise TopologyError(f"topology.dims: torus2d needs dims = [X, Y] with X*Y = ranks ({nranks})")
    if code != SWITCH and in_switch_reduce:
        raise TopologyError(f"topology.in_switch_reduce: only a 'switch' topology has a switch to reduce in, "
                            f"not {kind!r}")
    check_size(name, nranks, *flat_size(kind, nranks))
    switch_node = nranks
    src, dst, bw, lat = _flat_links(code, nranks, x_dim, bandwidth, latency, 0, switch_node)
    params = np.zeros(NPARAMS, np.int64)
    params[P_KIND], params[P_N], params[P_X] = code, nranks, x_dim
    params[P_Y] = nranks // x_dim if x_dim else 0
    nnodes = nranks + (1 if code == SWITCH else 0)
    red = np.full(nranks, switch_node if in_switch_reduce else -1, np.int32)
    topo = Topology(name=name, kind=kind, nranks=nranks, domains=1, local=nranks, params=params,
                    link_bw=bw, link_lat=lat, link_src=src.astype(np.int32), link_dst=dst.astype(np.int32),
                    nnodes=nnodes, max_hops=_max_hops_flat(code, nranks, x_dim), reduce_switch=red,
                    tiers=(Tier("flat", kind, bandwidth, latency, packet),), link_tier=np.zeros(len(src), np.int8),
                    node_tier=np.where(np.arange(nnodes) < nranks, -1, 0).astype(np.int8), endpoint=endpoint,
                    spec=spec or {})
    check_connected(topo)
    return topo


def build_hierarchical(name: str, up_kind: str, local: int, up_bw: float, up_lat: float, in_switch_reduce: bool,
                       out_kind: str, domains: int, out_bw: float, out_lat: float, oversubscription: float = 1.0,
                       leaf_size: int | None = None, spec: dict | None = None,
                       up_packet: PacketParams = DEFAULT_PACKET, out_packet: PacketParams = DEFAULT_PACKET,
                       endpoint: Endpoint = DEFAULT_ENDPOINT, spines: int = 1,
                       out_reduce: bool = False) -> Topology:
    ucode = FLAT_KINDS[up_kind]
    if ucode == TORUS2D:
        raise TopologyError("topology.scale_up.kind: expected switch, ring or full_mesh")
    if ucode != SWITCH and in_switch_reduce:
        raise TopologyError(f"topology.scale_up.in_switch_reduce: only a 'switch' scale-up can reduce, "
                            f"not {up_kind!r}")
    ocode = SCALE_OUT_KINDS[out_kind]
    if out_reduce and ocode != RAIL:
        raise TopologyError(f"topology.scale_out.in_switch_reduce: {OUT_REDUCE_RAIL_ONLY}, not {out_kind!r}")
    n = domains * local
    leaf_size = leaf_size or local
    if ocode == FAT_TREE and n % leaf_size:
        raise TopologyError(f"topology.scale_out.leaf_size: {leaf_size} does not divide the {n} ranks")
    nleaf = n // leaf_size if ocode == FAT_TREE else 0
    check_size(name, n, *hierarchical_size(up_kind, local, out_kind, domains, leaf_size, spines), domains)
    # nodes: ranks, D scale-up switches (if switch kind), then scale-out switches
    up_switch0 = n
    nup_sw = domains if ucode == SWITCH else 0
    out_sw0 = n + nup_sw
    parts = []
    for d in range(domains):
        parts.append(_flat_links(ucode, local, 0, up_bw, up_lat, d * local, up_switch0 + d))
    ulinks = len(parts[0][0])
    nup_links = domains * ulinks
    r = np.arange(n, dtype=np.int64)
    if ocode == FAT_TREE:
        leaf_of = out_sw0 + r // leaf_size
        spine0 = out_sw0 + nleaf
        nout_sw = nleaf + spines
    else:
        leaf_of = out_sw0 + r % local          # rail switch l serves NIC l of every domain
        nout_sw = local
    parts.append((r, leaf_of, np.full(n, out_bw), np.full(n, out_lat)))           # NIC up
    parts.append((leaf_of, r, np.full(n, out_bw), np.full(n, out_lat)))           # NIC down
    if ocode == FAT_TREE:
        k, s = np.divmod(np.arange(nleaf * spines, dtype=np.int64), spines)     # leaf k, spine s
        agg = np.full(nleaf * spines, leaf_size * out_bw / oversubscription / spines)
        lat = np.full(nleaf * spines, out_lat)
        parts.append((out_sw0 + k, spine0 + s, agg, lat))
        parts.append((spine0 + s, out_sw0 + k, agg, lat))
    src = np.concatenate([p[0] for p in parts]).astype(np.int32)
    dst = np.concatenate([p[1] for p in parts]).astype(np.int32)
    bw = np.concatenate([p[2] for p in parts]).astype(np.float64)
    lat = np.concatenate([p[3] for p in parts]).astype(np.float64)
    params = np.zeros(NPARAMS, np.int64)
    params[P_KIND], params[P_N], params[P_D], params[P_L] = HIERARCHICAL, n, domains, local
    params[P_UPKIND], params[P_U], params[P_OUTKIND] = ucode, ulinks, ocode
    params[P_NICBASE], params[P_LEAF], params[P_NLEAF] = domains * ulinks, leaf_size, nleaf
    params[P_SPINES] = spines if ocode == FAT_TREE else 1
    up_hops = _max_hops_flat(ucode, local, 0)
    red = (up_switch0 + r // local).astype(np.int32) if in_switch_reduce else np.full(n, -1, np.int32)
    red_out = (out_sw0 + r % local).astype(np.int32) if out_reduce else np.full(n, -1, np.int32)
    topo = Topology(name=name, kind="hierarchical", nranks=n, domains=domains, local=local, params=params,
                    link_bw=bw, link_lat=lat, link_src=src, link_dst=dst, nnodes=out_sw0 + nout_sw,
                    max_hops=up_hops + 4, reduce_switch=red,
                    tiers=(Tier("scale_up", up_kind, up_bw, up_lat, up_packet),
                           Tier("scale_out", out_kind, out_bw, out_lat, out_packet)),
                    link_tier=(np.arange(len(src)) >= nup_links).astype(np.int8),
                    node_tier=np.concatenate([np.full(n, -1), np.zeros(nup_sw), np.ones(nout_sw)]).astype(np.int8),
                    endpoint=endpoint, out_reduce_switch=red_out, spec=spec or {})
    check_connected(topo)
    return topo


def check_connected(topo: Topology) -> None:
    """Every rank must reach, and be reached from, rank 0 over the links (TopologyError otherwise)."""
    n = topo.nnodes
    for direction, (a, b) in (("be reached from", (topo.link_src, topo.link_dst)),
                              ("reach", (topo.link_dst, topo.link_src))):
        adj = [[] for _ in range(n)]
        for s, d in zip(a.tolist(), b.tolist()):
            if s != d:
                adj[s].append(d)
        seen = np.zeros(n, bool)
        stack, seen[0] = [0], True
        while stack:
            for v in adj[stack.pop()]:
                if not seen[v]:
                    seen[v] = True
                    stack.append(v)
        if not seen[: topo.nranks].all():
            cut = int(np.argmin(seen[: topo.nranks]))
            raise TopologyError(f"topology {topo.name!r} is disconnected: rank {cut} cannot {direction} rank 0")
