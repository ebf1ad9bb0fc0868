"""A fixed wiring of ranks (``kind = "graph"``): point-to-point links listed per pair, and an optional host.

A node such as NVIDIA's DGX-1 wires its GPUs to some peers with one link (NV1), to others with two (NV2),
and to the rest not at all: those pairs talk over PCIe through the host. ``links = [[a, b, count], ...]``
lists each linked pair once; ``count`` links of the tier's bandwidth run each way between a and b. A pair
with count links is one link of count x the bandwidth per direction (flows over it share it as they would
share the count links), so every route is a link or two and a route is one row of a table.

LINK LAYOUT: pair p, in the order listed, is links 2p (a -> b) and 2p + 1 (b -> a); with a host (node N),
up r -> 2P + r (rank r to the host) and down r -> 2P + N + r. A pair without a link goes up to the host and
down; without a host it has no route, and the engines refuse a schedule that needs one
(Topology.check_routes). The route of every (source, destination) node pair is a row of ROUTE_ROW int64
after the NPARAMS header of params: its hop count (-1: none) and its links (topology.route_kernel reads it).

``ring_cycles`` lays rings on the wiring: directed Hamiltonian cycles that together use each link, each
way, at most its count (algorithms/ring.py, ``permute``).
"""

from __future__ import annotations

import functools

import numpy as np

from ..core import budget
from ..core.errors import ConfigError
from .params import DEFAULT_ENDPOINT, DEFAULT_PACKET, Endpoint, PacketParams
from .topology import GRAPH, NPARAMS, P_HOST, P_KIND, P_N, P_NODES, ROUTE_ROW, Tier, Topology, check_size

# Undirected Hamiltonian cycles the ring search enumerates, ranks its depth-first walk visits, and branches of
# its packing search, at most: bounds on searches that are exponential in the worst case (estimates: an 8-GPU
# node has a few dozen cycles, found in a few hundred steps, and its packing in a few hundred branches; a
# million steps is about a second here). Past them the best found so far is taken (none: rank-order rings).
MAX_CYCLES, MAX_STEPS, MAX_BRANCHES = 20_000, 1_000_000, 200_000
# Rings a wiring takes at most, each both ways round: NCCL runs at most MAXCHANNELS = 64 channels
# (NVIDIA/nccl v2.28.9 src/include/device.h), 32 rings each way.
MAX_RINGS = 32


def check_wiring(n: int, links, where: str, host: bool) -> tuple[tuple[int, int, int], ...]:
    """The ``links`` value as ((a, b, count), ...), or a ConfigError naming the entry and what was expected:
    each entry [a, b, count] with two different ranks in 0..n-1 and count >= 1, each pair listed once (its
    count links run both ways, so [1, 0, c] after [0, 1, c'] is the same pair twice), and, without a host,
    every rank reachable over the links."""
    if not isinstance(links, list):
        raise ConfigError(f"{where}: expected a list of [a, b, count] entries (ranks a and b joined by count "
                          f"links each way), got {links!r}")
    out, seen = [], {}
    for i, entry in enumerate(links):
        at = f"{where}[{i}]"
        if not (isinstance(entry, list) and len(entry) == 3 and
                all(isinstance(x, int) and not isinstance(x, bool) for x in entry)):
            raise ConfigError(f"{at}: expected [a, b, count] (two ranks and a number of links >= 1), got {entry!r}")
        a, b, count = entry
        for r in (a, b):
            if not 0 <= r < n:
                raise ConfigError(f"{at}: rank {r} is out of range; expected ranks 0..{n - 1} (ranks = {n})")
        if a == b:
            raise ConfigError(f"{at}: {entry} links rank {a} to itself; expected two different ranks")
        if not 1 <= count <= 1 << 20:
            raise ConfigError(f"{at}: count {count!r}: expected a number of links between 1 and 2^20")
        key = (min(a, b), max(a, b))
        if key in seen:
            j = seen[key]
            raise ConfigError(f"{at}: ranks {a} and {b} are already linked by entry {j} ({links[j]}); list each "
                              f"pair once, its count links run both ways")
        seen[key] = i
        out.append((a, b, count))
    if not host:
        reach = _reachable(n, out)
        if not reach.all():
            r = int(np.argmin(reach))
            raise ConfigError(f"{where}: rank {r} has no path of links to rank 0 and there is no [topology.host] "
                              f"table; expected a connected wiring, or a host path for the pairs without a link")
    return tuple(out)


def _reachable(n: int, links) -> np.ndarray:
    seen, stack = np.zeros(n, bool), [0]
    seen[0] = n > 0
    adj = [[] for _ in range(n)]
    for a, b, _ in links:
        adj[a].append(b)
        adj[b].append(a)
    while stack:
        for v in adj[stack.pop()]:
            if not seen[v]:
                seen[v] = True
                stack.append(v)
    return seen


def build_graph(name: str, nranks: int, links, bandwidth: float, latency: float,
                host: tuple[float, float] | None = None, spec: dict | None = None,
                packet: PacketParams = DEFAULT_PACKET, host_packet: PacketParams = DEFAULT_PACKET,
                endpoint: Endpoint = DEFAULT_ENDPOINT) -> Topology:
    """A graph wiring: links as (a, b, count), each of count x bandwidth per direction; host (bandwidth,
    latency) of every rank's link to and from one host switch, or None."""
    links = check_wiring(nranks, [list(x) for x in links], "topology.links", host is not None)
    P, n = len(links), nranks
    nn = n + (host is not None)
    check_size(name, n, 2 * P + (2 * n if host else 0), nn)
    # the table, and params holding it while the table is still alive: two copies at the peak
    budget.check(2 * 8 * ROUTE_ROW * nn * nn, f"building topology {name!r} ({n} ranks): its route table",
                 "use fewer ranks")
    pairs = np.array([(a, b) for a, b, _ in links], np.int64).reshape(-1, 2)
    count = np.array([c for _, _, c in links], np.float64)
    src, dst = [pairs.ravel()], [pairs[:, ::-1].ravel()]
    bw = [np.repeat(count * bandwidth, 2)]
    lat = [np.full(2 * P, latency)]
    r = np.arange(n)
    if host:
        src += [r, np.full(n, n)]
        dst += [np.full(n, n), r]
        bw.append(np.full(2 * n, host[0]))
        lat.append(np.full(2 * n, host[1]))
    params = np.zeros(NPARAMS + ROUTE_ROW * nn * nn, np.int64)
    params[P_KIND], params[P_N], params[P_NODES], params[P_HOST] = GRAPH, n, nn, n if host else -1
    params[NPARAMS:] = _route_table(n, nn, pairs, host is not None).ravel()
    per_rank = np.zeros(n)
    np.add.at(per_rank, pairs.ravel(), np.repeat(count * bandwidth, 2))
    tiers = (Tier("flat", "graph", float(per_rank.min()), latency, packet),)
    if host:
        tiers += (Tier("host", "switch", host[0], host[1], host_packet),)
    nlinks = 2 * P + (2 * n if host else 0)
    return Topology(name=name, kind="graph", nranks=n, domains=1, local=n, params=params,
                    link_bw=np.concatenate(bw), link_lat=np.concatenate(lat),
                    link_src=np.concatenate(src).astype(np.int32), link_dst=np.concatenate(dst).astype(np.int32),
                    nnodes=nn, max_hops=2 if host else 1, reduce_switch=np.full(n, -1, np.int32), tiers=tiers,
                    link_tier=(np.arange(nlinks) >= 2 * P).astype(np.int8),
                    node_tier=np.where(np.arange(nn) < n, -1, 1).astype(np.int8), endpoint=endpoint,
                    spec={**(spec or {}), "links": [list(x) for x in links]})


def _route_table(n: int, nn: int, pairs: np.ndarray, host: bool) -> np.ndarray:
    """int64[nn * nn, ROUTE_ROW]: (hops, link, link) of every node pair (LINK LAYOUT)."""
    P = len(pairs)
    table = np.full((nn, nn, ROUTE_ROW), -1, np.int64)
    table[np.arange(nn), np.arange(nn), 0] = 0
    if host:
        r = np.arange(n)
        up, down = 2 * P + r, 2 * P + n + r
        table[:n, :n, 0] = 2
        table[:n, :n, 1], table[:n, :n, 2] = up[:, None], down[None, :]
        table[r, r, 0] = 0
        table[r, n, 0], table[r, n, 1] = 1, up
        table[n, r, 0], table[n, r, 1] = 1, down
    p = np.arange(P)
    a, b = pairs[:, 0], pairs[:, 1]
    table[a, b, 0], table[a, b, 1], table[a, b, 2] = 1, 2 * p, -1
    table[b, a, 0], table[b, a, 1], table[b, a, 2] = 1, 2 * p + 1, -1
    return table.reshape(nn * nn, ROUTE_ROW)


def wiring_of(topo: Topology) -> tuple[tuple[int, int, int], ...]:
    """A graph topology's links as ((a, b, count), ...), as its spec lists them (build_graph keeps them)."""
    return tuple(tuple(x) for x in topo.spec["links"])


@functools.cache
def ring_cycles(n: int, links: tuple[tuple[int, int, int], ...]) -> tuple[tuple[int, ...], ...]:
    """Directed Hamiltonian cycles of the wiring that together use each link, each way, at most its count:
    a largest set of undirected Hamiltonian cycles within the counts (a deterministic search), each taken
    both ways round, cycle 2m+1 the reverse of cycle 2m, every cycle starting at rank 0. () when the wiring
    has none. n = 2: count cycles 0 -> 1 -> 0.

    Each cycle leaves every rank once, so no set has more cycles than the fewest links a rank has (each way),
    nor more than MAX_RINGS; the search stops at a set that reaches this bound, else after MAX_BRANCHES
    branches with the best found.
    Counts in the order the cycles were enumerated (rank order from 0), so the result depends on the wiring
    only."""
    if n == 2:
        return tuple((0, 1) for _ in range(min(sum(c for *_, c in links), 2 * MAX_RINGS)))
    if n < 3:
        return ()
    cap = {}
    adj = [[] for _ in range(n)]
    for a, b, c in links:
        cap[min(a, b), max(a, b)] = c
        adj[a].append(b)
        adj[b].append(a)
    adj = [sorted(x) for x in adj]
    cycles = _hamiltonian(n, adj)
    edges = [[(min(c[i], c[(i + 1) % n]), max(c[i], c[(i + 1) % n])) for i in range(n)] for c in cycles]
    degree = np.zeros(n, np.int64)
    for (a, b), c in cap.items():
        degree[a] += c
        degree[b] += c
    bound = min(int(degree.min()) // 2, MAX_RINGS)   # an undirected cycle takes two link ends at every rank
    best, chosen, branches = [], [], 0

    def search(first: int) -> bool:
        nonlocal best, branches
        if len(chosen) > len(best):
            best = list(chosen)
        if len(best) == bound:
            return True
        for i in range(first, len(cycles)):
            branches += 1
            if branches > MAX_BRANCHES:
                return True
            if all(cap[e] > 0 for e in edges[i]):
                for e in edges[i]:
                    cap[e] -= 1
                chosen.append(i)
                done = search(i)                  # i again: a cycle may be taken as often as its counts allow
                chosen.pop()
                for e in edges[i]:
                    cap[e] += 1
                if done:
                    return True
        return False

    search(0)
    return tuple(d for i in best for d in (cycles[i], (0, *cycles[i][:0:-1])))


def _hamiltonian(n: int, adj) -> list[tuple[int, ...]]:
    """Undirected Hamiltonian cycles from rank 0, each once (its second rank below its last), in the order a
    depth-first search in rank order finds them; at most MAX_CYCLES, within MAX_STEPS ranks visited. The walk
    keeps its own stack: a wiring of thousands of ranks is deeper than Python's recursion."""
    out, path, nxt, used = [], [0], [0], np.zeros(n, bool)
    used[0] = True
    closes = set(adj[0])
    steps = 0
    while path:
        v = path[-1]
        if len(path) == n:
            if v in closes and path[1] < path[-1]:
                out.append(tuple(path))
                if len(out) >= MAX_CYCLES:
                    break
        elif nxt[-1] < len(adj[v]):
            w = adj[v][nxt[-1]]
            nxt[-1] += 1
            if not used[w]:
                steps += 1
                if steps > MAX_STEPS:
                    break
                used[w] = True
                path.append(w)
                nxt.append(0)
            continue
        used[path.pop()] = False
        nxt.pop()
    return out
