"""The compilers that build their schedules as arrays (ScheduleBuilder.ops / append) emit exactly the templates
and dependencies a plain loop of ScheduleBuilder.op calls does: the references below follow each algorithm's
definition one transfer at a time (slow and obvious; they are the loops the array forms replaced)."""

import numpy as np
import pytest
from hcclsim.algorithms import _phases
from hcclsim.algorithms.halving_doubling import _aligned
from hcclsim.algorithms.ring import _scaled, mesh_cycles, rail_order, rail_rank
from helpers import compile_for

from hcclsim.network.topology import build_flat, build_hierarchical
from hcclsim.schedule import (
    DEP_SHIFT,
    ORDER,
    PUT,
    PUT_REDUCE,
    Affine,
    Layout,
    ScheduleBuilder,
    const,
    order,
    rank_of,
    rot,
)
from hcclsim.schedule import collectives as C
from hcclsim.schedule.algorithm import Problem, parse_spec
from hcclsim.schedule.ir import ScheduleError

FIELDS = ("tmpl", "dep_ptr", "dep_t", "dep_mode", "dep_si", "dep_sj", "dep_kind", "group_ptr")


def assert_same(a, b):
    for f in FIELDS:
        np.testing.assert_array_equal(getattr(a, f), getattr(b, f), err_msg=f)


def _steps(coll, n):
    phases = {C.ALL_REDUCE: ("rs", "ag"), C.REDUCE_SCATTER: ("rs",), C.ALL_GATHER: ("ag",)}[coll]
    return [(ph, s) for ph in phases for s in range(n - 1)]


def _waves(b, steps, P):
    for w in range(len(steps) + P - 1):
        g = b.next_group()
        for p in range(P):
            if 0 <= w - p < len(steps):
                yield (g, w - p, p, *steps[w - p])


def ring_reference(problem, label, chans, P, layout, rails):
    """NCCL's ring, one op per (step, chunk, channel[, position]): flat (on two tiers by position in each
    domain), rail-aligned or on mesh cycles."""
    topo, n, coll = problem.topology, problem.nranks, problem.collective
    k = chans * P
    grid = topo.kind == "hierarchical" and topo.domains > 1 and topo.local > 1
    mesh = topo.kind == "full_mesh"
    D, L = (topo.domains, topo.local) if grid else (1, n)
    at = None if rails else (0, L - 1)                   # the rank order
    b = ScheduleBuilder(coll, label, n, (D, L), layout)
    tid = {}
    for g, s_idx, p, ph, s in _waves(b, _steps(coll, n), P):
        for c in range(chans):
            o, d = rail_order(D, L, c) if rails else (0, 1 if mesh or c % 2 == 0 else -1)
            where = (D, L, o)
            back = -d * (s + 1) if ph == "rs" else -d * s
            kind = PUT_REDUCE if ph == "rs" else PUT
            for j in range(L if grid else n if mesh else 1):
                deps = []
                if s_idx > 0:
                    if grid:
                        di, uj = divmod(j - d, L)
                        deps.append((tid[(s_idx - 1, p, c, uj)], DEP_SHIFT, di, 0))
                    elif mesh:
                        deps.append(tid[(s_idx - 1, p, c, (j - 1) % n)])
                    else:
                        deps.append((tid[(s_idx - 1, p, c, j)], 0, 0, -d))
                    deps.append(order(tid[(s_idx - 1, p, c, j)]))
                if p > 0:
                    deps.append(order(tid[(s_idx, p - 1, c, j)]))
                if grid:
                    ends = {"src": rail_rank(*where, j, 0, at), "dst": rail_rank(*where, j, d, at), "inst": (D, 1),
                            "schunk": Affine(**{**_scaled(rail_rank(*where, j, back, at), k).__dict__,
                                                "c3": c * P + p})}
                elif mesh:
                    ring = mesh_cycles(n)[c % len(mesh_cycles(n))]
                    ends = {"src": const(ring[j]), "dst": const(ring[(j + 1) % n]),
                            "schunk": const(ring[(j + back) % n] * k + c * P + p)}
                else:
                    ends = {"src": rank_of(1, n), "dst": rank_of(1, n, 0, d), "inst": (1, n),
                            "schunk": rot(1, back, n, weight=k, base=c * P + p)}
                tid[(s_idx, p, c, j)] = b.op(group=g, kind=kind, chan=c, deps=deps, **ends)
    return b.build()


RING_TOPOS = {"flat 7": lambda: build_flat("f", "switch", 7, 50e9, 1e-6),
              "mesh 8": lambda: build_flat("m", "full_mesh", 8, 50e9, 1e-6),
              **{f"{D}x{L}": (lambda D=D, L=L: build_hierarchical("h", "switch", L, 400e9, 300e-9, False, "fat_tree",
                                                                  D, 50e9, 1e-6))
                 for D, L in [(2, 4), (4, 4), (3, 4), (2, 6)]}}   # rail layouts: paired (L | D too), gcd 1


@pytest.mark.parametrize("topo", list(RING_TOPOS))
@pytest.mark.parametrize("spec", ["ring", "ring:channels=3:chunks=2", "ring:rails=off:chunks=2"])
@pytest.mark.parametrize("coll", ["all_reduce", "all_gather"])
def test_rings_equal_their_loop(topo, spec, coll):
    topo = RING_TOPOS[topo]()
    algo = parse_spec(spec)
    problem = Problem(coll, topo)
    s = compile_for(spec, coll, topo)
    P = int(algo.structure_key(problem, C.sizing(coll, 1 << 20, 4, topo.nranks), 4))
    assert_same(s, ring_reference(problem, algo.label, algo._channels(problem), P, s.layout, algo._rails(problem)))


def halving_doubling_reference(problem, label, layout):
    """Rabenseifner / recursive halving and doubling, one op per transfer; a transfer waits for every
    transfer its two ranks took part in at their latest step."""
    n, coll = problem.nranks, problem.collective
    pof2 = 1 << (n.bit_length() - 1)
    rem = n - pof2
    real = [2 * q if q < rem else q + rem for q in range(pof2 + 1)]
    span = (lambda a, b: (a, b - a)) if coll == C.ALL_REDUCE else (lambda a, b: (real[a], real[b] - real[a]))
    b = ScheduleBuilder(coll, label, n, (1, n), layout)
    ready = [[] for _ in range(n)]

    def step(transfers):
        if not transfers:
            return
        g = b.next_group()
        made = [(src, dst, b.op(src=const(src), dst=const(dst), schunk=const(chunk), nchunks=count, group=g,
                                kind=kind, deps=sorted(set(ready[src] + ready[dst]))))
                for src, dst, chunk, count, kind in transfers]
        for r in {x for src, dst, _ in made for x in (src, dst)}:
            ready[r] = [t for src, dst, t in made if r in (src, dst)]

    whole = layout.nchunks
    pairs = range(rem)
    first = [(2 * i + 1, 2 * i, 2 * i + 1, 1, PUT) for i in pairs] if coll == C.ALL_GATHER \
        else [(2 * i + 1, 2 * i, 0, whole, PUT_REDUCE) for i in pairs]
    step(first)
    if coll != C.ALL_GATHER:
        m = pof2 // 2
        while m:
            step([(real[q], real[q ^ m], *map(int, _aligned(np.int64(q ^ m), m, span)), PUT_REDUCE)
                  for q in range(pof2)])
            m //= 2
    if coll != C.REDUCE_SCATTER:
        m = 1
        while m < pof2:
            step([(real[q], real[q ^ m], *map(int, _aligned(np.int64(q), m, span)), PUT) for q in range(pof2)])
            m *= 2
    step([(2 * i, 2 * i + 1, 2 * i + 1, 1, PUT) for i in pairs] if coll == C.REDUCE_SCATTER
         else [(2 * i, 2 * i + 1, 0, whole, PUT) for i in pairs])
    return b.build()


@pytest.mark.parametrize("n", [2, 5, 6, 8, 12, 13])
@pytest.mark.parametrize("coll", ["all_reduce", "all_gather", "reduce_scatter"])
def test_halving_doubling_equals_its_loop(n, coll):
    topo = build_flat("f", "switch", n, 50e9, 1e-6)
    s = compile_for("halving_doubling", coll, topo)
    assert_same(s, halving_doubling_reference(Problem(coll, topo), "halving_doubling", s.layout))


def pipeline_reference(pipe):
    """Chunk p of a pipeline: chunk 0's templates moved p * stride chunks, p groups later, each after the
    same template of chunk p-1; written in group order, then chunk, then template."""
    b, T = pipe.b, len(pipe.ops)
    todo = sorted((g + p, p, t) for p in range(pipe.chunks) for t, (g, _, _) in enumerate(pipe.ops))
    real = {(p, t): x for x, (_, p, t) in enumerate(todo)}
    groups = {g: x for x, g in enumerate(sorted({g for g, _, _ in todo}))}
    for g, p, t in todo:
        kw = dict(pipe.ops[t][1])
        for name in ("schunk", "dchunk"):
            if kw.get(name) is not None:
                kw[name] = Affine(**{**kw[name].__dict__, "c3": kw[name].c3 + p * pipe.stride})
        deps = [(real[(p, u)], m, si, sj, kind) for u, m, si, sj, kind in pipe.ops[t][2]]
        deps += [(real[(p - 1, t)], DEP_SHIFT, 0, 0, ORDER)] if p else []
        b.op(group=groups[g], deps=deps, **kw)
    assert len(todo) == T * pipe.chunks


@pytest.mark.parametrize("spec,reduce", [("tree:chunks=3", False), ("nvls_tree:chunks=2", True),
                                         ("hierarchical:pipeline=on:chunks=3", False)])
def test_pipelines_equal_their_loop(monkeypatch, spec, reduce):
    topo = build_hierarchical("h", "switch", 4, 400e9, 300e-9, reduce, "fat_tree", 3, 50e9, 1e-6)
    fast = compile_for(spec, "all_reduce", topo)
    monkeypatch.setattr(_phases.Pipeline, "emit", pipeline_reference)
    assert_same(fast, compile_for(spec, "all_reduce", topo))


def test_ops_adds_what_as_many_op_calls_add():
    """Bulk templates between single ones keep their order, ids and dependencies; a dependency count
    that does not add up is refused."""
    n = 6
    one, bulk = (ScheduleBuilder("all_gather", "hand", n, (1, n), Layout(n, 1)) for _ in range(2))
    for b in (one, bulk):
        g = b.next_group()
        first = b.op(src=rank_of(1, n), dst=rank_of(1, n, 0, 1), schunk=rot(1, 0, n), group=g, inst=(1, n))
    g = one.next_group()
    ids = [one.op(src=rank_of(1, n), dst=rank_of(1, n, 0, k), schunk=rot(1, 0, n), group=g, inst=(1, n), chan=k,
                  deps=[(first, DEP_SHIFT, 0, -k)] + ([order(first)] if k == 2 else [])) for k in (2, 3)]
    g = bulk.next_group()
    k = np.array([2, 3])
    deps = [[first, DEP_SHIFT, 0, -2, 0], [first, DEP_SHIFT, 0, 0, ORDER], [first, DEP_SHIFT, 0, -3, 0]]
    assert bulk.ops(2, src=rank_of(1, n), dst=rank_of(1, n, 0, k), schunk=rot(1, 0, n), group=g, inst=(1, n),
                    chan=k, ndeps=[2, 1], deps=deps).tolist() == ids
    for b in (one, bulk):
        b.op(src=const(0), dst=const(1), schunk=const(0), group=b.next_group(), deps=[ids[1]])
    assert_same(one.build(), bulk.build())
    with pytest.raises(ScheduleError, match="2 dependencies for 3"):
        bulk.ops(1, src=const(0), dst=const(1), schunk=const(0), group=0, ndeps=3, deps=deps[:2])
