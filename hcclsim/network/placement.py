"""Where several jobs sit on one fabric: which fabric ranks each job's ranks are.

A policy turns job sizes into rank lists, so that a study can ask "what does placement cost" without
writing the lists out: ``packed`` fills the fabric in rank order (job k on ranks k*G .. k*G+G-1 for
equal sizes), ``spread`` deals ranks round robin over the scale-up domains (every job gets a share of
every domain, and its traffic between domains crosses the scale-out network), ``random`` shuffles the
ranks with a seed. Explicit rank lists are checked the same way: a rank on the fabric, used once.
"""

from __future__ import annotations

import itertools

import numpy as np

from ..core.errors import ConfigError
from .topology import Topology

POLICIES = ("packed", "spread", "random")


def place(topo: Topology, sizes, policy="packed", seed: int = 0, what: str = "jobs",
          where: str = "") -> list[tuple[int, ...]]:
    """The fabric ranks of each job (job k has sizes[k] ranks); policy is one of POLICIES or a list of
    rank lists (one per job, sizes ignored). Errors name job k what[k], after where (e.g. a file)."""
    at = f"{where}: " if where else ""
    if not isinstance(policy, str):
        return check(topo, policy, what, where)
    if policy not in POLICIES:
        raise ConfigError(f"{at}{what}: placement {policy!r}: expected one of {', '.join(POLICIES)} or rank lists")
    sizes = [int(g) for g in sizes]
    if any(g < 1 for g in sizes) or sum(sizes) > topo.nranks:
        raise ConfigError(f"{at}{what}: {sum(sizes)} ranks of jobs sized {sizes}: expected at least 1 rank per job "
                          f"and at most the {topo.nranks} ranks of {topo.name}")
    D, L = topo.domains, topo.nranks // topo.domains
    if policy == "packed":
        order = np.arange(topo.nranks)
    elif policy == "spread":
        order = np.arange(topo.nranks).reshape(D, L).T.ravel()      # rank 0 of every domain, then rank 1, ...
    else:
        order = np.random.default_rng(seed).permutation(topo.nranks)
    ends = np.cumsum([0] + sizes)
    out = [order[a:b] for a, b in itertools.pairwise(ends)]
    return [tuple(int(r) for r in (ranks if policy == "packed" else np.sort(ranks))) for ranks in out]


def check(topo: Topology, lists, what: str = "jobs", where: str = "") -> list[tuple[int, ...]]:
    """Explicit rank lists, refused unless every rank is an integer on the fabric used by one job once."""
    at = f"{where}: " if where else ""
    owner: dict[int, int] = {}
    out = []
    for k, ranks in enumerate(lists):
        if isinstance(ranks, (str, bytes)) or not hasattr(ranks, "__iter__") or not len(ranks):
            raise ConfigError(f"{at}{what}[{k}].ranks: expected a non-empty list of ranks, got {ranks!r}")
        for r in ranks:
            if isinstance(r, bool) or not isinstance(r, (int, np.integer)) or not 0 <= r < topo.nranks:
                raise ConfigError(f"{at}{what}[{k}].ranks: rank {r!r}: expected an integer 0..{topo.nranks - 1} "
                                  f"({topo.name} has {topo.nranks} ranks)")
            if int(r) in owner:
                other = owner[int(r)]
                raise ConfigError(f"{at}{what}[{k}].ranks: rank {r} is " + ("listed twice" if other == k else
                                  f"also {what}[{other}]'s") + ": expected each rank in one job, once")
            owner[int(r)] = k
        out.append(tuple(int(r) for r in ranks))
    return out
