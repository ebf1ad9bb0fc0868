import numpy as np
import pytest
from helpers import busbw, compile_for, counts_to_check, time_of

from hcclsim.core.errors import ConfigError
from hcclsim.engine import analytic
from hcclsim.network.topology import build_flat, build_hierarchical
from hcclsim.schedule import collectives as C
from hcclsim.schedule.algorithm import Problem, parse_spec
from hcclsim.schedule.checker import check
from hcclsim.schedule.ir import STREAM
from hcclsim.schedule.symmetry import equivariant, link_orbits

COLLS = ["all_reduce", "reduce_scatter", "all_gather", "broadcast", "reduce"]
ROOTED = ("broadcast", "reduce")
LAT, BW = 500e-9, 50e9


def nvls(n, lat=0.0):
    return build_flat("nvls", "switch", n, BW, lat, in_switch_reduce=True)


def roots(coll, n):
    return [0, n - 1] if coll in ROOTED else [0]


MODES = ["nvls", "push"]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("coll", COLLS)
def test_in_switch_computes_the_collective_on_2_to_17_ranks(coll, mode):
    for n in range(2, 18):
        topo = nvls(n)
        for root in roots(coll, n):
            s = compile_for(f"in_switch:mode={mode}:chunks=1", coll, topo, root=root)
            for count in counts_to_check(n):
                check(s, count)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("n", [2, 3, 7, 16])
@pytest.mark.parametrize("coll", COLLS)
def test_pipelined_in_switch_computes_the_collective(n, coll, mode):
    topo = nvls(n)
    for root in roots(coll, n):
        s = compile_for(f"in_switch:mode={mode}:chunks=3", coll, topo, root=root)
        for count in counts_to_check(n):
            check(s, count)


@pytest.mark.parametrize("mode", MODES)
def test_in_switch_on_a_one_domain_hierarchical_topology(mode):
    topo = build_hierarchical("h", "switch", 6, 100e9, 1e-7, True, "fat_tree", 1, 50e9, 1e-6)
    for coll in COLLS:
        s = compile_for(f"in_switch:mode={mode}:chunks=2", coll, topo, root=5)
        for count in counts_to_check(6):
            check(s, count)


def test_nvls_is_the_default_mode():
    assert parse_spec("in_switch").options.mode == "nvls"
    with pytest.raises(ConfigError, match="mode must be one of nvls, pull, push"):
        parse_spec("in_switch:mode=fetch")


@pytest.mark.parametrize("coll", [C.ALL_REDUCE, C.REDUCE_SCATTER, C.ALL_GATHER])
def test_pull_is_the_nvls_schedule_under_the_hardware_name(coll):
    topo = build_flat("s", "switch", 8, 50e9, 500e-9, in_switch_reduce=True)
    pull, nvls, push = (compile_for(f"in_switch:mode={m}:chunks=2", coll, topo) for m in ("pull", "nvls", "push"))
    assert np.array_equal(pull.tmpl, nvls.tmpl) and not np.array_equal(pull.tmpl, push.tmpl)


def closed_form(coll: str, n: int, size: float, P: int, mode: str) -> float:
    """One hop a = LAT (rank -> switch or switch -> rank); y = one chunk of the whole buffer over B.
    Chunks stream back to back (order dependencies), so the hop latencies are paid once, not per chunk.

    nvls AllReduce: U(p) -> D(p) -> G(p) -> M(p), four hops; in steady state the uplink carries U(q) and
    G(q-1) together, the downlink D(q) and M(q-1): N + 1 transfers of y/N, u = (1 + 1/N) y. The first
    upload and the last multicast run alone (y); D(0) and G(P-1) run alone (y/N) and hide behind them."""
    a, y = LAT, size / P / BW
    if mode == "nvls" and coll == "all_reduce":
        u = (1 + 1 / n) * y
        return 4 * a + (P + 1) * u + min(P - 1, 2) * y
    if mode == "nvls" and coll in ("all_gather", "reduce_scatter"):   # all N blocks on one link; a 1/N fill
        return 2 * a + P * y + y / n
    if coll in ("all_gather", "reduce_scatter"):      # push: N-1 blocks share a link; one 1/N block fills
        return 2 * a + y / n + P * (n - 1) * y / n
    return 2 * a + (P + 1) * y


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("n", [2, 5, 8, 16])
@pytest.mark.parametrize("P", [1, 4])
@pytest.mark.parametrize("coll", COLLS)
def test_in_switch_is_its_alpha_beta_formula(n, P, coll, mode):
    topo = nvls(n, LAT)
    size = n * P * 4 * 1024 * 3                 # divides evenly into N blocks (shards) of P chunks
    for root in roots(coll, n):
        t = time_of(f"in_switch:mode={mode}:chunks={P}", coll, topo, size, root=root)
        assert t == pytest.approx(closed_form(coll, n, size, P, mode), rel=1e-12)


def test_nvls_allreduce_is_the_closed_form_for_p_2_and_3():
    """The min(P-1, 2) term: P = 2 and 3 are where the fill stops growing."""
    topo = nvls(8, LAT)
    for P in (2, 3):
        size = 8 * P * 4 * 1024 * 3
        t = time_of(f"in_switch:chunks={P}", "all_reduce", topo, size)
        assert t == pytest.approx(closed_form("all_reduce", 8, size, P, "nvls"), rel=1e-12)


def test_issue_reference_points(switch8):
    zero = nvls(8)
    push = busbw("in_switch:mode=push", "all_reduce", zero, 1 << 30)
    ideal = 2 * 7 / 8 * 50.0                                 # 87.5 GB/s: every link carries S once
    assert push >= 1.6 * 50.0
    assert push == pytest.approx(ideal * 64 / 65, rel=1e-9)    # 64 chunks, 65 waves (fill + drain)
    assert push > 1.7 * busbw("ring", "all_reduce", zero, 1 << 30)
    # NVLS: every link carries (1 + 1/N) S; 64 chunks: 65 pairs of groups of (1 + 1/N) y, plus 2 y of fill
    bw = busbw("in_switch", "all_reduce", zero, 1 << 30)
    assert bw == pytest.approx(ideal * 64 / (65 * 9 / 8 + 2), rel=1e-9)       # 74.5 GB/s
    assert bw < 2 * 7 / 9 * 50.0                             # 77.8 GB/s = 2(N-1)/(N+1) B, the limit
    small = time_of("in_switch:mode=push", "all_reduce", nvls(8, 500e-9), 256)
    assert small == pytest.approx(2 * (500e-9 + 256 / 50e9), rel=1e-12)    # ~1.01 us: one chunk
    small = time_of("in_switch", "all_reduce", nvls(8, 500e-9), 256)
    assert small == pytest.approx(4 * 500e-9 + 2 * 9 / 8 * 256 / 50e9, rel=1e-12)     # four hops: ~2.01 us


def test_nvls_allreduce_busbw_tends_to_2_n_minus_1_over_n_plus_1_b():
    for n in (4, 8):
        limit = 2 * (n - 1) / (n + 1) * 50.0
        bw = busbw("in_switch:chunks=1024", "all_reduce", nvls(n), 1 << 30)
        assert limit * 0.99 < bw < limit


def test_default_chunk_count_follows_the_size():
    algo = parse_spec("in_switch")
    prob = Problem("all_reduce", nvls(8))

    def key(size, a=algo, p=prob):
        return a.structure_key(p, C.sizing(p.collective, size, 4, p.nranks), 4)

    assert key(256) == 1 and key(32 << 10) == 1 and key(1 << 20) == 32 and key(1 << 30) == 64
    assert key(1 << 30, parse_spec("in_switch:chunks=5")) == 5
    assert key(1 << 30, parse_spec("in_switch:max_chunks=8")) == 8
    push = parse_spec("in_switch:mode=push")
    for coll in ("all_gather", "reduce_scatter"):        # N (push: N-1) templates per chunk: capped on many ranks
        big = Problem(coll, nvls(1025))
        assert key(1 << 30, algo, big) == 4096 // 1025
        assert key(1 << 30, push, big) == 4096 // 1024
        assert key(1 << 30, algo, Problem(coll, nvls(8))) == 64
    big = Problem("all_reduce", nvls(1025))              # nvls: N + 1 templates per chunk and direction
    assert key(1 << 30, algo, big) == 4096 // 1026
    assert key(1 << 30, push, big) == 64


@pytest.mark.parametrize("chunking", ["fixed", "nccl"])       # nccl: STREAM dependencies
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("coll", COLLS)
def test_symmetric_path_equals_general_path(coll, mode, chunking):
    n = 12
    topo = nvls(n, 300e-9)
    if chunking == "nccl":
        from hcclsim.network.params import Endpoint
        topo = build_flat("nvls", "switch", n, BW, 300e-9, in_switch_reduce=True, endpoint=Endpoint(in_switch_channels=4))
    s = compile_for(f"in_switch:mode={mode}:chunks=3:chunking={chunking}", coll, topo, root=n - 1)
    assert (s.dep_kind == STREAM).any() == (chunking == "nccl")
    if coll not in ROOTED:
        assert equivariant(s) and link_orbits(topo, s.shape) is not None
    blocks = [n * 3 * 64, n * 3 * 4096]
    fast = analytic.run(s, topo, blocks, 4, want_links=True)
    slow = analytic.run(s, topo, blocks, 4, want_links=True, symmetric=False)
    np.testing.assert_allclose(fast.time, slow.time, rtol=1e-12)
    np.testing.assert_allclose(fast.link_bytes, slow.link_bytes, rtol=1e-12)


def test_refused_without_a_reducing_switch():
    algo = parse_spec("in_switch")
    plain = build_flat("s", "switch", 8, BW, 0.0)
    why = algo.unsupported(Problem("all_reduce", plain))
    assert "needs a switch that reduces (in_switch_reduce = true)" in why
    ring = build_flat("r", "ring", 8, BW, 0.0)
    why = algo.unsupported(Problem("all_gather", ring))
    assert "in_switch_reduce = true" in why and "'ring'" in why
    two = build_hierarchical("h", "switch", 4, 100e9, 1e-7, True, "fat_tree", 2, 50e9, 1e-6)
    assert "one reducing switch" in algo.unsupported(Problem("all_reduce", two))
    assert algo.unsupported(Problem("all_to_all", nvls(8))).startswith("does not implement all_to_all")
    assert algo.unsupported(Problem("all_reduce", nvls(8))) is None


@pytest.mark.parametrize("spec,coll,up,down", [
    ("in_switch", "all_reduce", 9 / 8, 9 / 8), ("in_switch", "reduce_scatter", 1.0, 1 / 8),
    ("in_switch", "all_gather", 1 / 8, 1.0),
    ("in_switch:mode=push", "all_reduce", 1.0, 1.0), ("in_switch:mode=push", "reduce_scatter", 7 / 8, 1 / 8),
    ("in_switch:mode=push", "all_gather", 1 / 8, 7 / 8)])
def test_every_link_carries_what_the_collective_needs(spec, coll, up, down):
    """Bytes per uplink / downlink as a fraction of S. NVLS: a rank contributes to (ReduceScatter) and
    receives (AllGather) every block, its own included; AllReduce is both, S + S/N each way.
    push: every rank's data crosses the switch once, and a rank's own block never."""
    topo = nvls(8)
    size = 8 * 4 * 4096
    s = compile_for(f"{spec}:chunks=4", coll, topo, size)
    t = analytic.run(s, topo, [C.sizing(coll, size, 4, 8).block_elems], 4, want_links=True)
    np.testing.assert_allclose(t.link_bytes[:8, 0], up * size)       # links 0..N-1: rank -> switch
    np.testing.assert_allclose(t.link_bytes[8:, 0], down * size)     # links N..2N-1: switch -> rank


# ------------------------------------------------------------- NCCL's NVLS steps and their per-step cost

KIB, MIB, GIB = 1 << 10, 1 << 20, 1 << 30


def gpu_like(channels=1, step=2e-6, fixed=10e-6):
    """switch8 (50 GB/s, 500 ns hops) with an NVLS endpoint: fixed latency, per-step cost, NVLS channels."""
    from hcclsim.network.params import Endpoint
    return build_flat("nvls", "switch", 8, BW, LAT, in_switch_reduce=True,
                      endpoint=Endpoint(in_switch_latency=fixed, in_switch_step_latency=step,
                                        in_switch_channels=channels))


def steps(coll, size, topo, spec="in_switch:chunking=nccl"):
    algo, prob = parse_spec(spec), Problem(coll, topo)
    return algo.structure_key(prob, C.sizing(coll, size, 4, topo.nranks), 4)


def test_nccl_chunking_is_calccollchunking_on_16_channels_of_8_heads():
    """Hand-derived from enqueue.cc:2052-2054 on S/16 bytes per channel, 8 heads: 4 MiB -> 256 K per channel
    is below 2 x 8 x 32 K, so 16 K chunks, 4 MiB / (16 x 8 x 16 K) = 2 steps; 8 MiB: 512 K is not below 512 K,
    32 K, 2 steps; 64 MiB: 4 M is not below 8 x 8 x 64 K, 64 K, 8 steps; 1 GiB: 64 M is not below 64 x 8 x 128 K,
    128 K, 64 steps; Broadcast has one head: 8 MiB / (16 x 32 K) = 16."""
    from hcclsim.algorithms.in_switch import nvls_chunk
    topo = gpu_like(channels=16)
    assert [nvls_chunk(s // 16, 8) for s in (4 * MIB, 8 * MIB, 64 * MIB, GIB)] == [16 * KIB, 32 * KIB, 64 * KIB,
                                                                                 128 * KIB]
    assert [steps("all_reduce", s, topo) for s in (1 * KIB, 4 * MIB, 8 * MIB, 16 * MIB, 64 * MIB, GIB)] == \
        [1, 2, 2, 4, 8, 64]
    assert steps("all_gather", 64 * MIB, topo) == steps("reduce_scatter", 64 * MIB, topo) == 8
    assert steps("broadcast", 8 * MIB, topo) == steps("reduce", 8 * MIB, topo) == 16
    assert steps("all_reduce", 8 * GIB, topo) == 4096 // 9               # NCCL's 512, capped as every P
    # 24 channels (one Blackwell node): 64 MiB / 24 = 2.67 M per channel, below 8 x 8 x 64 K: 32 K chunks,
    # ceil(64 MiB / (24 x 8 x 32 K)) = 11 steps
    assert steps("all_reduce", 64 * MIB, gpu_like(channels=24)) == 11
    # the default (auto) is nccl where the endpoint sets in_switch_channels: 1 MiB / 16 = 64 K per channel, below
    # 2 x 8 x 32 K, 16 K chunks, ceil(1 MiB / (16 x 8 x 16 K)) = 1 step; fixed: 1 MiB / 32 K = 32 chunks
    assert steps("all_reduce", MIB, topo, "in_switch") == 1
    assert steps("all_reduce", MIB, topo, "in_switch:chunking=fixed") == 32
    assert steps("all_reduce", GIB, topo, "in_switch:chunks=5") == 5


def test_generic_topologies_keep_fixed_chunks_and_refuse_nccl_chunking():
    generic = nvls(8)
    assert steps("all_reduce", GIB, generic, "in_switch") == 64 and steps("all_reduce", MIB, generic, "in_switch") == 32
    why = parse_spec("in_switch:chunking=nccl").unsupported(Problem("all_reduce", generic))
    assert why == "chunking=nccl needs the endpoint's NVLS channel count ([endpoint] in_switch_channels)"
    with pytest.raises(ConfigError, match="chunking must be one of auto, fixed, nccl"):
        parse_spec("in_switch:chunking=ncc")


@pytest.mark.parametrize("coll", COLLS)
def test_nccl_steps_compute_the_collective(coll):
    topo = gpu_like(channels=16)
    for size in (4 * MIB, 16 * MIB):                                      # P = 2, 4 (Broadcast, Reduce: 8, 32)
        s = compile_for("in_switch:chunking=nccl", coll, topo, size, root=3)
        for count in counts_to_check(8):
            check(s, count)


def timed(coll, size, topo, engine="analytic", spec="in_switch:chunking=nccl"):
    from hcclsim.sweeping.sweep import sweep
    rows = sweep(topo, [coll], spec, [size], engine=engine, launch="device").rows
    return dict(zip(rows.engine, rows.time_us * 1e-6))


def test_each_nvls_step_pays_the_step_latency_once_in_series_with_its_data():
    """AllReduce, one channel, 8 MiB: 64 K chunks (8 MiB is not below 8 x 8 x 64 K), P = 16; y = S/(P B),
    u = (1 + 1/N) y. The uploads U and the multicast stores G are two chains of P steps, each paying o
    before it starts; with NCCL's steps the switch streams what comes in (D as U arrives, M as G does), so a
    rank's reduced chunk is back a after its upload and its store follows (module docstring):
    U(P-1) leaves at o + y + (P-1)(o + u), the last store at + 2a + o + y/N, the last multicast (alone on
    the downlinks, y) a after its first byte: fixed + 4a + (P+1) o + 2y + (P-1) u. With whole chunks
    (chunking=fixed:chunks=16) each stage waits for the previous one's chunk: fixed + 4a + P o + 2y + P u
    + max(o + y/N, u), and without the per-step cost the generic closed form."""
    size, P, n, o, fixed = 8 * MIB, 16, 8, 2e-6, 10e-6
    y = size / P / BW
    u = (1 + 1 / n) * y
    t = timed("all_reduce", size, gpu_like(step=o, fixed=fixed))["analytic"]
    assert t == pytest.approx(fixed + 4 * LAT + (P + 1) * o + 2 * y + (P - 1) * u, rel=1e-9)
    whole = "in_switch:chunking=fixed:chunks=16"
    t = timed("all_reduce", size, gpu_like(step=o, fixed=fixed), spec=whole)["analytic"]
    assert t == pytest.approx(fixed + 4 * LAT + P * o + 2 * y + P * u + max(o + y / n, u), rel=1e-9)
    free = timed("all_reduce", size, gpu_like(step=0.0, fixed=fixed), spec=whole)["analytic"]
    assert free == pytest.approx(fixed + closed_form("all_reduce", n, size, P, "nvls"), rel=1e-9)


@pytest.mark.parametrize("coll", ["broadcast", "reduce"])
def test_engines_agree_on_the_per_step_cost(coll):
    """The root's uploads are one chain: P = 8 MiB / (1 x 64 K) = 128 steps of o + y; the switch streams
    each chunk on as it arrives, so the last multicast ends 2a after the last upload has left:
    fixed + 2a + P (o + y); the packet engine multicasts packet by packet, within 3 %."""
    size, P, o, fixed = 8 * MIB, 128, 2e-6, 10e-6
    y = size / P / BW
    t = timed(coll, size, gpu_like(step=o, fixed=fixed), "analytic,packet")
    assert t["analytic"] == pytest.approx(fixed + 2 * LAT + P * (o + y), rel=1e-9)
    assert t["packet"] == pytest.approx(t["analytic"], rel=0.03)


@pytest.mark.parametrize("coll", COLLS)
@pytest.mark.parametrize("size", [4 * MIB, 64 * MIB])
def test_engines_agree_on_nccl_steps(coll, size):
    """With NCCL's steps streamed through the switch (P = 2 and 8 on 16 channels) the analytic engine is the
    packet engine's fluid limit: within 3 % without a per-step cost (before streaming, 20-30 % apart)."""
    t = timed(coll, size, gpu_like(channels=16, step=0.0), "analytic,packet")
    assert t["analytic"] == pytest.approx(t["packet"], rel=0.03)
