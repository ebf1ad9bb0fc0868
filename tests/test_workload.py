"""hcclsim.studies.workload: the one-rank fluid model (closed forms, invariants), the [[workload]] schema and its
errors, and the must-holds of the two overlap studies (scenarios/hccl-gemm-overlap.toml, cais-tp-layer.toml)."""

from __future__ import annotations

import math
import tomllib
from pathlib import Path

import numpy as np
import pytest
from helpers import assert_one_line_error, run_cli

from hcclsim.api import load_topology
from hcclsim.core.errors import ConfigError
from hcclsim.studies.workload import (
    CollectiveCost,
    Device,
    Op,
    collective,
    compute,
    fused,
    gemm,
    gemm_bytes,
    run_section,
    schedule_traffic,
    simulate,
    time_alone,
    waterfill,
)
from hcclsim.studies.workload.patterns import part

ROOT = Path(__file__).resolve().parents[1]
H100ISH = Device(peak_flops=1e15, gemm_efficiency=0.5, memory_bandwidth=0.0)


def coll(name, seconds, nbytes=0.0, share=0.0, stream="comm", deps=()):
    cost = CollectiveCost("all_reduce", "ring", "ring", 1 << 20, seconds, nbytes, share)
    return collective(name, cost, deps=deps, stream=stream)


def row(res, name):
    return res.ops.set_index("op").loc[name]


# ------------------------------------------------------------------------------------- closed forms

def test_gemm_alone_is_flops_over_peak_times_efficiency():
    g = gemm("g", 4096, 2048, 1024, 2)
    assert g.flops == 2 * 4096 * 2048 * 1024
    expected = g.flops / (1e15 * 0.5)
    assert time_alone(g, H100ISH) == pytest.approx(expected, rel=1e-15)
    res = simulate([g], H100ISH)
    assert res.makespan == pytest.approx(expected, rel=1e-15)
    assert row(res, "g").slowdown_pct == pytest.approx(0.0, abs=1e-9)


def test_gemm_alone_is_memory_bound_when_its_bytes_take_longer():
    dev = Device(1e15, 1.0, 1e12)
    g = gemm("g", 16, 8192, 8192, 2)            # 2*16*8192^2 FLOPs = 2.1 us; ~134 MB at 1 TB/s = 134 us
    assert g.bytes == (16 * 8192 + 8192 * 8192 + 16 * 8192) * 2
    assert time_alone(g, dev) == pytest.approx(max(g.flops / 1e15, g.bytes / 1e12), rel=1e-15)
    assert time_alone(g, dev) == pytest.approx(g.bytes / 1e12, rel=1e-15)


def test_tiled_gemm_traffic_rereads_operands_once_per_block():
    assert gemm_bytes(256, 512, 64, 2, tile=128) == (256 * 64 * 4 + 64 * 512 * 2 + 256 * 512) * 2
    assert gemm_bytes(256, 512, 64, 2) == (256 * 64 + 64 * 512 + 256 * 512) * 2


@pytest.mark.parametrize("share", [0.05, 0.121, 0.25, 0.5])
def test_gemm_under_an_sm_collective_for_its_whole_length_is_slowed_by_s_over_1_minus_s(share):
    g = gemm("g", 8192, 8192, 8192, 2, stream="compute")
    t = time_alone(g, H100ISH)
    res = simulate([g, coll("c", 10 * t, share=share)], H100ISH)
    assert row(res, "g").time_us / row(res, "g").alone_us - 1 == pytest.approx(share / (1 - share), rel=1e-12)
    assert row(res, "c").slowdown_pct == pytest.approx(0.0, abs=1e-9)


def test_memory_water_filling_worked_by_hand():
    # capacity 10: demands 2 and 6 and unbounded -> 2 is met, the other two split the remaining 8
    assert list(waterfill([2.0, 6.0, math.inf], 10.0)) == [2.0, 4.0, 4.0]
    assert list(waterfill([3.0, 3.0, 3.0], 6.0)) == [2.0, 2.0, 2.0]
    assert list(waterfill([1.0, 5.0], math.inf)) == [1.0, 5.0]
    # A memory-only op M (12 GB) beside a collective X (1 s on the network, 4 GB of memory traffic) on
    # 10 GB/s: X demands 4 GB/s < 5 (an equal share), so X gets 4 and runs at its network pace (ends at
    # 1 s); M gets 6 GB/s, has 6 GB done at 1 s, then the whole 10 GB/s: done at 1.6 s. Alone M takes 1.2 s.
    dev = Device(1e15, 1.0, 10e9)
    m = compute("M", 0.0, 12e9, stream="compute")
    res = simulate([m, coll("X", 1.0, nbytes=4e9)], dev)
    assert row(res, "X").finish_us == pytest.approx(1e6, rel=1e-12)
    assert row(res, "M").finish_us == pytest.approx(1.6e6, rel=1e-12)
    assert row(res, "M").slowdown_pct == pytest.approx(100 * (1.6 / 1.2 - 1), rel=1e-12)
    assert row(res, "X").slowdown_pct == pytest.approx(0.0, abs=1e-9)


def test_offload_with_ample_memory_bandwidth_does_not_slow_the_gemm():
    dev = Device(1e15, 0.7, 3.35e12)
    g = gemm("g", 8192, 8192, 8192, 2, stream="compute")
    t = time_alone(g, dev)
    ops = [g] + [coll(f"c{i}", t / 7, nbytes=1e8, stream="comm") for i in range(10)]
    res = simulate(ops, dev)
    assert row(res, "g").time_us == pytest.approx(row(res, "g").alone_us, rel=1e-12)     # exact but for round-off


def test_a_fused_body_is_the_two_stage_pipeline_formula():
    # head (one tile of the GEMM) + body (K-1 tiles of both, at the slower pace) + tail (one collective tile)
    g = gemm("g", 4096, 8192, 1024, 2)
    tg = time_alone(g, H100ISH)
    for tc in (0.3 * tg, tg, 2.5 * tg):
        K = 16
        cost = CollectiveCost("reduce_scatter", "in_switch", "in_switch", 1 << 26, tc, 0.0, 0.0)
        tail = CollectiveCost("reduce_scatter", "in_switch", "in_switch", 1 << 22, tc / K, 0.0, 0.0)
        ops = [part(g, 1 / K, "head", stream="s"), fused("body", g, cost, (K - 1) / K, stream="s"),
               collective("tail", tail, stream="s")]
        a, b = tg / K, tc / K
        assert simulate(ops, H100ISH).makespan == pytest.approx(a + (K - 1) * max(a, b) + b, rel=1e-12)


def test_collective_traffic_follows_the_schedule():
    topo = load_topology("dgx-h100")
    S, n = 64 << 20, 8
    assert schedule_traffic(topo, "all_reduce", "ring", S, "bfloat16") == pytest.approx(5 * (n - 1) / n * S)
    assert schedule_traffic(topo, "all_reduce", "in_switch:mode=push", S, "bfloat16") == pytest.approx(2 * S)
    # NVLS: S + S/N read (contributions, the reduced shard back out), S/N + S written (shard, multicast)
    assert schedule_traffic(topo, "all_reduce", "in_switch", S, "bfloat16") == pytest.approx(2 * (1 + 1 / n) * S)
    assert schedule_traffic(topo, "reduce_scatter", "ring", S, "bfloat16") == pytest.approx(3 * (n - 1) / n * S)


# --------------------------------------------------------------------------------------- invariants

def test_taking_more_compute_units_never_speeds_the_gemm():
    rng = np.random.default_rng(5)
    for _ in range(40):
        dev = Device(1e15, float(rng.uniform(0.3, 1.0)), float(rng.choice([0.0, rng.uniform(1e11, 5e12)])))
        g = gemm("g", int(rng.integers(16, 8192)), int(rng.integers(16, 8192)), int(rng.integers(16, 8192)), 2,
                 stream="compute")
        t = time_alone(g, dev)
        nets = rng.uniform(0.05, 1.0, 5) * t
        traffic = rng.uniform(0, 2e8, 5)
        prev = 0.0
        for share in (0.0, 0.05, 0.12, 0.24, 0.5, 0.9):
            ops = [g] + [coll(f"c{i}", nets[i], traffic[i], share) for i in range(5)]
            dur = row(simulate(ops, dev), "g").time_us
            assert dur >= prev * (1 - 1e-12)
            prev = dur


def _layer(variants, **extra):
    # No chunking overheads: zero link latency, launch cost and per-collective protocol or in-switch latency,
    # unlimited memory bandwidth (so re-reading a GEMM's weights per chunk costs nothing); ring and a
    # one-chunk in-switch schedule scale linearly in size.
    return {"name": "layer", "kind": "tp_layer", "topology": "dgx-h100",
            "set": ["latency=0", "endpoint.launch_overhead=0", "endpoint.memory_bandwidth=0", "endpoint.protocol=none",
                    "endpoint.in_switch_latency=0"],
            "tokens": 4096, "hidden": 4096, "variant": variants, **extra}


def test_chunked_overlap_is_never_slower_than_sequential_without_chunk_overheads():
    variants = []
    for alg in ("ring", "in_switch:chunks=1"):
        for execution, share in (("offload", 0.0), ("sm", 0.24)):
            tag = f"{alg}-{execution}"
            variants.append({"name": f"seq-{tag}", "schedule": "sequential", "algorithm": alg})
            for c in (2, 4, 8):
                variants.append({"name": f"chunked{c}-{tag}", "schedule": "chunked", "chunks": c, "algorithm": alg,
                                 "execution": execution, "sm_share": share})
    df = run_section(_layer(variants, cases=[{"name": "short", "hidden": 2048}, {"name": "wide", "hidden": 8192}]),
                     "test")
    for case, rows in df.groupby("case"):
        t = rows.set_index("variant").layer_us
        for name in t.index:
            if name.startswith("chunked"):
                seq = t["seq-" + name.split("-", 1)[1]]
                assert t[name] <= seq * (1 + 1e-12), (case, name)


def test_runs_are_deterministic():
    sec = _layer([{"name": "c", "schedule": "chunked", "algorithm": "ring", "execution": "sm", "sm_share": 0.2}])
    a, b = run_section(sec, "t"), run_section(sec, "t")
    assert a.equals(b)


# ------------------------------------------------------------------------------------------- errors

def test_graph_errors():
    with pytest.raises(ConfigError, match="depends on 'nope', which is not an op"):
        simulate([compute("a", 1.0, 0.0, deps=["nope"])], H100ISH)
    with pytest.raises(ConfigError, match="added after it"):
        simulate([compute("a", 1.0, 0.0, deps=["b"]), compute("b", 1.0, 0.0)], H100ISH)
    with pytest.raises(ConfigError, match="two ops are named 'a'"):
        simulate([compute("a", 1.0, 0.0), compute("a", 1.0, 0.0)], H100ISH)
    with pytest.raises(ConfigError, match="endpoint.peak_flops"):
        simulate([gemm("g", 8, 8, 8, 2)], Device())
    with pytest.raises(ConfigError, match="take 1.1 of the compute units"):
        simulate([coll("a", 1.0, share=0.6, stream="x"), coll("b", 1.0, share=0.5, stream="y")], H100ISH)
    with pytest.raises(ConfigError, match="sm_share"):
        Op("x", "collective", sm_share=1.0)


BASE = {"name": "w", "kind": "overlap", "topology": "dgx-h100", "m": 512, "n": 512, "k": 512, "size": "1M"}


@pytest.mark.parametrize("change, needles", [
    ({"sise": "1M"}, ["sise: unknown key", "did you mean 'size'"]),
    ({"kind": "overlapp"}, ["kind: unknown value 'overlapp'", "did you mean 'overlap'"]),
    ({"execution": "gpu"}, ["execution: unknown value 'gpu'", "offload, sm"]),
    ({"sm_share": 1.5}, ["sm_share: expected a fraction"]),
    ({"count": -1}, ["count: expected a whole number >= 0"]),
    ({"algorithm": "rnig"}, ["unknown algorithm 'rnig'", "did you mean 'ring'"]),
    ({"size": "1Q"}, ["size"]),
    ({"set": ["bandwith=1GB/s"]}, ["bandwith", "did you mean 'bandwidth'"]),
    ({"baseline": "nope"}, ["baseline: no variant is named 'nope'"]),
    ({"cases": [{"skew": ["0", "1us"]}]}, ["cases #1: skew: expected one value in a case"]),
    ({"variant": [{"name": "a", "chunks": 2}]}, ["variant 'a': chunks: unknown key"]),
    ({"variant": [{"name": "a"}, {"name": "a"}]}, ["another variant is named 'a'"]),
])
def test_section_errors_name_the_key(change, needles):
    with pytest.raises(ConfigError) as e:
        run_section({**BASE, **change}, "f.toml: [[workload]] w")
    msg = str(e.value)
    assert msg.startswith("f.toml: [[workload]] w") and "\n" not in msg
    for n in needles:
        assert n in msg, msg


def test_layer_errors():
    base = {"name": "l", "kind": "tp_layer", "tokens": 4096, "hidden": 8192}
    with pytest.raises(ConfigError, match="hidden: 8190 is not a multiple of tp = 8"):
        run_section({**base, "hidden": 8190}, "t")
    with pytest.raises(ConfigError, match="tokens: 4095 is not a multiple of 4"):
        run_section({**base, "tokens": 4095, "schedule": "chunked"}, "t")
    with pytest.raises(ConfigError, match="tp: 4, but the topology has 8 ranks"):
        run_section({**base, "tp": 4}, "t")
    with pytest.raises(ConfigError, match="variant 'base': hidden is missing"):
        run_section({"kind": "tp_layer", "tokens": 1}, "t")


def test_a_bad_workload_key_is_one_line_and_exit_2_from_the_cli(tmp_path, capsys):
    f = tmp_path / "bad.toml"
    f.write_text('[scenario]\ntitle = "t"\nreproduces = "r"\n\n[[workload]]\nname = "w"\nkind = "overlap"\n'
                 'm = 8\nn = 8\nk = 8\nsize = "1M"\ncolective = "all_reduce"\n', encoding="utf-8")
    status, out, err = run_cli(capsys, "run", str(f), "-o", str(tmp_path / "out"))
    assert_one_line_error(status, out, err, "colective: unknown key", "did you mean 'collective'")


# ---------------------------------------------------------------------------------- the two studies

def sections(name):
    doc = tomllib.loads((ROOT / "scenarios" / f"{name}.toml").read_text(encoding="utf-8"))
    return {t["name"]: run_section(t, f"scenarios/{name}.toml: [[workload]] {t['name']}") for t in doc["workload"]}


@pytest.fixture(scope="module")
def gemm_overlap():
    return sections("hccl-gemm-overlap")["gemm-overlap"]


@pytest.fixture(scope="module")
def cais():
    return sections("cais-tp-layer")


def test_offloaded_collectives_slow_the_gemm_less_than_sm_based_ones(gemm_overlap):
    df = gemm_overlap
    assert {"gemm_slowdown_pct", "coll_us", "coll_alone_us", "gemm_us"} <= set(df.columns)
    assert (df.coll_us > 0).all()
    keys = ["case", "skew_us", "jitter_us"]
    for key, rows in df.groupby(keys):
        s = rows.set_index("variant").gemm_slowdown_pct
        assert s["offload"] <= s["sm-16ch"] <= s["sm-32ch"], key
        assert s["offload"] < s["sm-32ch"], key
        if key[0].startswith("compute-bound"):
            assert s["offload"] < 0.5 < s["sm-16ch"], key          # the paper's bound, and above it


def test_sm_collectives_covering_the_gemm_give_the_closed_form(gemm_overlap):
    cont = gemm_overlap[gemm_overlap.case == "compute-bound, continuous"]
    for share, rows in cont.groupby("sm_share"):
        expected = 100 * share / (1 - share)
        assert rows.gemm_slowdown_pct.to_numpy() == pytest.approx(expected, rel=1e-9)


def test_noise_lengthens_the_collectives_and_the_sm_slowdown(gemm_overlap):
    df = gemm_overlap[gemm_overlap.case == "compute-bound, 8 collectives"].set_index(["variant", "skew_us",
                                                                                     "jitter_us"])
    for variant in ("offload", "sm-16ch", "sm-32ch"):
        quiet, noisy = df.loc[(variant, 0.0, 0.0)], df.loc[(variant, 2.0, 0.5)]
        assert noisy.coll_us > quiet.coll_us
        assert noisy.gemm_slowdown_pct >= quiet.gemm_slowdown_pct
    assert df.loc[("offload", 2.0, 0.5)].gemm_slowdown_pct == 0.0
    assert df.loc[("sm-16ch", 2.0, 0.5)].gemm_slowdown_pct > df.loc[("sm-16ch", 0.0, 0.0)].gemm_slowdown_pct


def test_cais_layer_ordering(cais):
    layer = cais["layer"]
    assert set(layer.case) == {"llama3-70b", "gpt3-175b"}
    for case, rows in layer.groupby("case"):
        t = rows.set_index("variant").layer_us
        assert t["sequential"] > t["t3"] > t["nvls"], case
        assert t["cais"] <= t["nvls"], case
        assert t["chunked-sm"] >= t["t3"], case             # the same overlap with compute units taken
        assert rows.set_index("variant").speedup["sequential"] == 1.0
    small = cais["small-layer"].set_index("variant").layer_us
    assert small["cais"] <= small["nvls"]


def test_reduction_table_sensitivity(cais):
    df = cais["reduction-table"]
    for variant, rows in df.groupby("variant"):
        t = rows.sort_values("reduction_table_entries").layer_us.to_numpy()
        assert (np.diff(t) <= 1e-9 * t[:-1]).all(), variant        # a larger table never hurts
    big = df[df.reduction_table_entries >= 32].set_index(["reduction_table_entries", "variant"]).layer_us
    for entries in (32, 1024):
        assert big[(entries, "cais")] <= big[(entries, "nvls")]
