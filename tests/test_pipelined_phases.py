"""Two-tier phases pipelined chunk by chunk (algorithms/_phases.py Pipeline): hierarchical:pipeline=on,
tree (chains) and nvls_tree, against a pipeline computed here by hand, and on the checker."""

import dataclasses

import numpy as np
import pytest
from helpers import compile_for, time_of

from hcclsim.core.errors import ConfigError
from hcclsim.engine import analytic, packet
from hcclsim.network.config import load_topology
from hcclsim.network.topology import build_hierarchical
from hcclsim.schedule import collectives as C
from hcclsim.schedule.algorithm import Problem, parse_spec
from hcclsim.schedule.checker import check

H_UP, H_OUT = 500e-9, 2e-6          # two-tier-128: one scale-up hop, one scale-out hop
B_UP, B_OUT = 400e9, 50e9
BW = {"up": B_UP, "down": B_UP, "nic": B_OUT}


def two_tier(D, L, reduce=False, latency=True):
    """two-tier-128 resized (zero endpoint costs): a switch per domain, a fat tree with a leaf per domain."""
    sets = [f"scale_out.domains={D}", f"scale_up.ranks={L}", f"scale_up.in_switch_reduce={str(reduce).lower()}"]
    if not latency:
        sets += ["scale_up.latency=0", "scale_out.latency=0"]
    return load_topology("two-tier-128", sets)


def pipeline_time(stages, Q):
    """Makespan of Q chunks through a chain of stages that every rank runs alike, timed as the model
    states it (docs/model.md): stage k of chunk p is one transfer in wave p + k; it starts once stage
    k-1 of chunk p has arrived and stage k of chunk p-1 has left (its stream issues back to back),
    takes bytes x max over its links of (transfers of the wave on that link / bandwidth), and arrives
    its path latency later. A stage is (bytes, {link: transfers of this stage on it}, latency)."""
    K = len(stages)
    left = np.zeros((K, Q))
    arrived = np.zeros((K, Q))
    for p in range(Q):
        for k, (nbytes, links, lat) in enumerate(stages):
            share = {}
            for k2, (_, links2, _) in enumerate(stages):
                if 0 <= p + k - k2 < Q:
                    for link, m in links2.items():
                        share[link] = share.get(link, 0) + m
            start = max(arrived[k - 1, p] if k else 0.0, left[k, p - 1] if p else 0.0)
            left[k, p] = start + nbytes * max(share[link] / BW[link] for link in links)
            arrived[k, p] = left[k, p] + lat
    return arrived[-1, -1]


# every rank's stages; c = S / Q one chunk; the fat tree's leaf uplinks carry the L rails at L x B_OUT,
# which shares like the NIC, so a scale-out stage is charged on the NIC alone
def intra_ring(c, L, h=H_UP):        # one ring step inside a domain: the row, rank -> switch -> rank
    return (c / L, {"up": 1, "down": 1}, 2 * h)


def inter_ring(c, L, D, h=H_OUT):    # one ring step on a rail: a sub-piece, NIC -> leaf -> spine -> leaf -> NIC
    return (c / (L * D), {"nic": 1}, 4 * h)


def tree_step(c, L):                 # D = 2: each domain the leaf of one tree (half a row up) and the root of the other
    return (c / (2 * L), {"nic": 1}, 4 * H_OUT)


def nvls_stages(c, L):
    return [(c / L, {"up": L}, H_UP),       # every piece of the row, its own included, into the switch
            (c / L, {"down": 1}, H_UP),     # the sum of my row back
            tree_step(c, L), tree_step(c, L),
            (c / L, {"up": 1}, H_UP),       # my summed row to the switch
            (c / L, {"down": L}, H_UP)]     # multicast: every row, mine included


def chain_stages(c, L):
    return [intra_ring(c, L)] * (L - 1) + [tree_step(c, L)] * 2 + [intra_ring(c, L)] * (L - 1)


def hierarchical_stages(c, L, D, hops=(H_UP, H_OUT)):
    up, out = intra_ring(c, L, hops[0]), inter_ring(c, L, D, hops[1])
    return [up] * (L - 1) + [out] * (2 * (D - 1)) + [up] * (L - 1)


CASES = [  # spec, D, L, reduce, stages(c)
    ("nvls_tree:chunks={Q}", 2, 2, True, lambda c: nvls_stages(c, 2)),
    ("nvls_tree:chunks={Q}", 2, 4, True, lambda c: nvls_stages(c, 4)),
    ("tree:chunks={Q}", 2, 3, False, lambda c: chain_stages(c, 3)),
    ("hierarchical:pipeline=on:chunks={Q}", 3, 2, False, lambda c: hierarchical_stages(c, 2, 3)),
    ("hierarchical:pipeline=on:chunks={Q}", 4, 3, False, lambda c: hierarchical_stages(c, 3, 4)),
]


@pytest.mark.parametrize("spec,D,L,reduce,stages", CASES)
def test_pipelines_take_the_time_of_their_stages(spec, D, L, reduce, stages):
    topo = two_tier(D, L, reduce)
    S = 4 * 2 * L * D * 8 * 3 * 1024      # divides evenly into every chunk below
    for Q in (1, 3, 8):
        got = time_of(spec.format(Q=Q), "all_reduce", topo, S)
        assert got == pytest.approx(pipeline_time(stages(S / Q), Q), rel=1e-9), (spec, Q)
    # pipelining pays: 8 chunks beat the phases one after another
    assert time_of(spec.format(Q=8), "all_reduce", topo, S) < time_of(spec.format(Q=1), "all_reduce", topo, S)


def test_the_pipeline_oracle_rejects_a_broken_schedule():
    """Chunks that wait for the previous chunk to *arrive* (not to leave) pay the latency once per chunk
    and stage: the oracle must tell that schedule from the real one."""
    topo, Q, S = two_tier(2, 2, True), 4, 1 << 20
    s = compile_for(f"nvls_tree:chunks={Q}", "all_reduce", topo, S)
    sz = C.sizing("all_reduce", S, 4, topo.nranks)
    want = pipeline_time(nvls_stages(S / Q, 2), Q)
    assert analytic.run(s, topo, [sz.block_elems], 4).time[0] == pytest.approx(want, rel=1e-9)
    broken = dataclasses.replace(s, dep_kind=np.zeros_like(s.dep_kind))      # every ORDER made DATA
    assert analytic.run(broken, topo, [sz.block_elems], 4).time[0] > want * 1.05


def test_hierarchical_pipeline_approaches_the_slower_tier():
    """docs/algorithms.md, hierarchical: on the 128-rank fabric at zero latency the two bandwidth terms
    (2(L-1)/L S/B_up and 2(D-1)/D S/(L B_out)) are 4.4 and 4.7 ps per byte; one after another they
    add; pipelined, each of the 44 ring steps of the last chunk still waits for its wave, so the default
    64 chunks give 1.15 x the slower tier (256 chunks: 1.04 x)."""
    topo = load_topology("two-tier-128", ["scale_up.latency=0", "scale_out.latency=0"])
    L, D, S = 8, 16, 1 << 30
    up, out = 2 * (L - 1) / L * S / B_UP, 2 * (D - 1) / D * S / (L * B_OUT)
    assert time_of("hierarchical", "all_reduce", topo, S) == pytest.approx(up + out, rel=1e-9)
    piped = time_of("hierarchical:pipeline=on", "all_reduce", topo, S)      # Q = 64
    assert piped == pytest.approx(pipeline_time(hierarchical_stages(S / 64, L, D, (0, 0)), 64), rel=1e-9)
    assert out < piped < 1.16 * out


@pytest.mark.parametrize("D,L", [(2, 2), (3, 2), (2, 3), (1, 4), (3, 1)])
def test_pipelined_hierarchical_computes_the_collective(D, L):
    up = [("switch", True), ("ring", False)]
    for kind, reduce in up:
        t = build_hierarchical("t", kind, L, 100e9, 0.0, reduce, "rail", D, 25e9, 0.0)
        specs = ["hierarchical:pipeline=on:chunks=3", "hierarchical:pipeline=on:chunks=2:intra=direct:inter=direct",
                 "hierarchical:pipeline=on:chunks=2:channels=2"]
        if reduce:
            specs.append("hierarchical:pipeline=on:chunks=2:intra=in_switch")
        for coll in ("all_reduce", "reduce_scatter", "all_gather"):
            for spec in specs:
                if parse_spec(spec).unsupported(Problem(coll, t)):
                    assert D == 1
                    continue
                s = compile_for(spec, coll, t)
                for count in (1, 2 * D * L + 1):
                    check(s, count)


def test_pipeline_option_key_and_refusals():
    t = two_tier(2, 4)
    algo = parse_spec("hierarchical:pipeline=on")
    sz = C.sizing("all_reduce", 1 << 20, 4, t.nranks)
    assert algo.structure_key(Problem("all_reduce", t), sz, 4) == ("ring", 1, 32)     # 1 MiB / 32 KiB chunks
    assert parse_spec("hierarchical").structure_key(Problem("all_reduce", t), sz, 4) == ("ring", 1)
    for coll in ("all_to_all", "broadcast", "reduce"):
        assert "pipeline=on" in algo.unsupported(Problem(coll, t))
    with pytest.raises(ConfigError, match="pipeline must be one of off, on"):
        parse_spec("hierarchical:pipeline=yes")


@pytest.mark.parametrize("spec,D,L,reduce", [("tree:chunks=1", 3, 2, False), ("tree:chunks=4", 2, 2, False),
                                             ("hierarchical:pipeline=on:chunks=4", 3, 2, False),
                                             ("nvls_tree:chunks=8", 3, 3, True)])
def test_packet_engine_agrees_where_nothing_queues(spec, D, L, reduce):
    """Zero latency on two-tier-128: the stages of a wave overlap as the analytic engine assumes (with
    latency, or with stages of unequal length on one link, they are staggered and the engines part:
    docs/algorithms.md, nvls_tree)."""
    topo = two_tier(D, L, reduce, latency=False)
    S = 16 << 20
    s = compile_for(spec, "all_reduce", topo, S)
    sz = C.sizing("all_reduce", S, 4, topo.nranks)
    a = analytic.run(s, topo, [sz.block_elems], 4).time[0]
    p = packet.run(s, topo, [sz.block_elems], 4).time[0]
    assert p == pytest.approx(a, rel=0.03)
