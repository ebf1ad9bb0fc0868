"""The memory budget (issue 15, "cost known before memory is spent"): every point is estimated from its
dimensions before anything is built, a point past the budget is refused with exit status 2 in one line
that gives the estimate, the budget and the way out, and values that would overflow a 64-bit count are
refused where they are read.

The budget is pinned to 4 GiB here (HCCL_BENCH_MAX_MEMORY), so these cases hold on any machine.
"""

from __future__ import annotations

import os
import re
import tracemalloc

import pytest

from hcclsim.cli import main
from hcclsim.core import budget
from hcclsim.core.errors import ConfigError
from hcclsim.engine import packet
from hcclsim.engine.execution import QUIET, Noise
from hcclsim.network.config import load_topology
from hcclsim.network.topology import build_flat, build_hierarchical
from hcclsim.schedule import collectives as C
from hcclsim.schedule.algorithm import Problem, parse_spec
from hcclsim.sweeping import budget as SB
from hcclsim.sweeping.sweep import sweep

REFUSED = re.compile(r"hccl-bench: error: [^\n]+ needs about [\d.e+]+ [KMGTPE]?i?B, over the [\d.]+ [KMGTPE]?i?B "
                     r"memory budget; [^\n]+, or raise the budget with --max-memory SIZE or HCCL_BENCH_MAX_MEMORY=SIZE\n")
SWEEP = ["sweep", "-q", "--format", "csv", "-b", "1K", "-e", "1K"]


@pytest.fixture(autouse=True)
def four_gib(monkeypatch):
    monkeypatch.setenv(budget.ENV, "4G")


def refused(capsys, args, what):
    """main(args) exits 2 with the one-line refusal naming `what`."""
    status = main(args)
    err = capsys.readouterr().err
    assert status == 2, err
    assert REFUSED.fullmatch(err), err
    assert what in err
    return err


def traced_peak(fn) -> int:
    """Bytes fn() allocates at its peak (Python objects and numpy arrays; Numba's own arrays are not seen)."""
    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize("args, what", [
    # 2 x 7 x 99999999 templates to compile
    ([*SWEEP, "-t", "switch8", "-a", "ring:channels=99999999"], "1.4e+09 templates"),
    ([*SWEEP, "-t", "switch8", "-a", "ring:chunks=100000000"], "1.4e+09 templates"),
    # 10^7 ranks: 2 x 10^7 links, refused before a link array exists
    ([*SWEEP, "-t", "switch8", "--set", "ranks=10000000"], "building topology 'switch8[ranks=10000000]' (10000000 ranks"),
    # 8 x 10^6 ranks on two tiers: 2n scale-up, 2n NIC and n/4 leaf-spine links
    ([*SWEEP, "-t", "two-tier-128", "--set", "scale_out.domains=1000000"], "(8000000 ranks, 34000000 links)"),
    # 10^9 iterations of one size: 48 bytes each
    ([*SWEEP, "-t", "switch8", "-a", "ring", "--iters", "1000000000"], "1000000000 iterations"),
    # the packet engine's calendar spans the skew: 1 s of 65 ns buckets
    ([*SWEEP, "-t", "switch8", "-a", "ring", "--engine", "packet", "--skew", "1s"], "less --skew/--jitter"),
])
def test_a_point_past_the_budget_is_refused_before_it_allocates(capsys, args, what):
    assert traced_peak(lambda: refused(capsys, args, what)) < 200e6


@pytest.mark.parametrize("ranks, coll, algo, what", [
    (20000, "all_reduce", "ring", "8e+08 transfers"),               # 2 x 19999 x 20000 for the transfer table
    (100000, "all_to_all", "direct", "1e+10 transfers"),            # 99999 x 100000
])
def test_a_packet_point_on_a_large_fabric_is_refused_before_it_allocates(capsys, ranks, coll, algo, what):
    """The fabric itself is legitimate (a few MB); the refusal allocates nothing past it (traced without the
    fabric's construction, which tracemalloc slows tenfold)."""
    refused(capsys, [*SWEEP, "-t", "switch8", "--set", f"ranks={ranks}", "--engine", "packet", "-a", algo, "-c", coll],
            what)
    topo = load_topology("switch8", [f"ranks={ranks}"])

    def refuse():
        with pytest.raises(budget.BudgetError, match=re.escape(what)):
            sweep(topo, [coll], algo, [1024], engine="packet")
    assert traced_peak(refuse) < 200e6


def test_a_workload_too_large_to_build_is_refused(capsys, tmp_path):
    """m = 10^12: a GEMM of 1.3e20 FLOPs at 989 TFLOP/s (1.4e5 s) covered by 16 MiB AllReduces of under a
    millisecond each: some 10^8 ops, which were built before anything was simulated."""
    path = tmp_path / "big.toml"
    path.write_text('[scenario]\ntitle = "t"\nreproduces = "r"\ndescription = "d"\ndoc = "d"\n\n[[workload]]\n'
                    'name = "w"\nkind = "overlap"\ntopology = "switch8"\nset = ["endpoint.peak_flops=989TFLOP/s"]\n'
                    'collective = "all_reduce"\nsize = "16M"\nalgorithm = "ring"\nm = 1000000000000\n'
                    'n = 8192\nk = 8192\n')
    args = ["run", str(path), "-o", str(tmp_path / "out"), "-q"]
    refused(capsys, args, "count = N")                    # once untraced: imports and kernels load at full speed
    assert traced_peak(lambda: refused(capsys, args, "count = N")) < 200e6
    assert not (tmp_path / "out").exists()


def test_the_flag_sets_the_budget_and_a_point_just_under_it_runs(capsys, monkeypatch):
    """ring AllReduce on switch8, one size, 500000 iterations: 48 bytes per sample = 24e6 bytes, plus ~30 KB to
    compile 14 templates. Under 24 MiB (25.2e6) it runs, under 22 MiB (23.1e6) it is refused."""
    args = [*SWEEP, "-t", "switch8", "-a", "ring", "--iters", "500000"]
    monkeypatch.setenv(budget.ENV, "24M")
    assert main(args) == 0
    assert capsys.readouterr().out.count("\n") == 2                        # header and one row
    monkeypatch.setenv(budget.ENV, "22M")
    assert main(args) == 2
    assert "over the 22 MiB memory budget; use fewer --iters" in capsys.readouterr().err
    monkeypatch.setenv(budget.ENV, "1K")                                    # the flag wins over the variable
    assert main([*args, "--max-memory", "24M"]) == 0


@pytest.mark.parametrize("args, message", [
    (["--max-memory", "0"], "--max-memory: expected a memory budget of at least 1 byte (e.g. 8G), got '0'"),
    (["--max-memory", "lots"], "--max-memory: expected a size such as 8, 64K, 1M or 1G, got 'lots'"),
])
def test_a_bad_budget_is_refused_in_one_line(capsys, args, message):
    assert main([*SWEEP, "-t", "switch8", *args]) == 2
    assert capsys.readouterr().err == f"hccl-bench: error: {message}\n"


def test_a_bad_environment_variable_is_named(capsys, monkeypatch):
    monkeypatch.setenv(budget.ENV, "-3G")
    assert main([*SWEEP, "-t", "switch8"]) == 2
    assert capsys.readouterr().err.startswith("hccl-bench: error: HCCL_BENCH_MAX_MEMORY: expected a ")


@pytest.mark.skipif(not hasattr(os, "sysconf"), reason="no sysconf: the default is 4 GiB")
def test_the_default_is_4_gib_or_half_the_memory(monkeypatch):
    monkeypatch.delenv(budget.ENV)
    physical = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    assert budget.current() == budget.default() == min(4 << 30, physical // 2)


# ------------------------------------------------------------------------------ 64-bit ranges at the door

@pytest.mark.parametrize("args, message", [
    (["-b", "1e30", "-e", "1e30"], "'--minbytes': expected a size of at most 2^62 bytes"),
    (["--set", "ranks=9223372036854775807"], "--set ranks: expected a whole number of at most 2^62"),
    (["--set", "mtu=1e300"], "--set mtu: expected a size of at most 2^62 bytes"),
    (["--set", "latency=1e30s"], "--set latency: expected a time of at most 53 days"),
    (["--set", "switch_latency=1e20s"], "--set switch_latency: expected a time of at most 53 days"),
    # the packet engine's picoseconds: skew, a link of 1e-30 B/s
    (["--engine", "packet", "--skew", "1e20s"], "its times could pass 2^62 picoseconds"),
    (["--engine", "packet", "--set", "bandwidth=1e-30B/s"], "its times could pass 2^62 picoseconds"),
])
def test_values_past_a_64_bit_count_are_refused(capsys, args, message):
    assert main([*SWEEP, "-t", "switch8", "-a", "ring", *args]) == 2
    err = capsys.readouterr().err
    assert err.startswith("hccl-bench: error: ") and err.count("\n") == 1 and message in err, err


def test_sizes_past_a_64_bit_count_are_refused_wherever_they_come_from():
    """A scenario's sizes and the API's reach the sweep without passing -b/-e."""
    import hcclsim

    with pytest.raises(ConfigError, match=r"^size 1267650600228229401496703205376: expected at most 2\^62 bytes"):
        hcclsim.sweep(topology="switch8", algorithm="ring", sizes=[2 ** 100])


# ------------------------------------------------------------------------------ the engines' own checks

def test_the_packet_engine_checks_before_it_expands():
    """direct AllToAll on 2000 ranks: 1999 templates stand for 4e6 transfers (~2 GB of table and state)."""
    topo = build_flat("s", "switch", 2000, 50e9, 500e-9)
    algo, problem = parse_spec("direct"), Problem("all_to_all", topo)
    schedule = algo.compile(problem, 1)
    assert packet.explicit_size(schedule) == (1999 * 2000, 0)
    tracemalloc.start()
    try:
        with budget.limited(100 << 20), pytest.raises(budget.BudgetError, match="4e[+]06 transfers"):
            packet.run(schedule, topo, [64], 4)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 50e6


def test_concurrent_collectives_are_checked_together():
    topo = build_flat("s", "switch", 64, 50e9, 500e-9)
    algo, problem = parse_spec("ring"), Problem("all_reduce", topo)
    job = packet.Job(algo.compile(problem, 1), 1024)
    one = packet.estimate(job.schedule, topo, 1024, 4).nbytes
    with budget.limited(int(3 * one)):
        packet.simulate_concurrent([job], topo)                            # one job (and its merge) fits
        with pytest.raises(budget.BudgetError, match="2 concurrent collectives"):
            packet.simulate_concurrent([job, job], topo)


# ------------------------------------------------------------------------------ the rules and the estimates

RULE_TOPOLOGIES = {
    "switch13": lambda: load_topology("switch8", ["ranks=13"]),
    "ring8": lambda: load_topology("ring8"),
    "two-tier": lambda: load_topology("two-tier-128", ["scale_up.in_switch_reduce=true", "scale_out.domains=3"]),
    "full-mesh": lambda: load_topology("mi300x-8gpu"),           # mesh rings: a template per position
    "graph": lambda: load_topology("dgx1-v100"),                 # rings on the wiring's cycles, the same
}
RULE_SPECS = ["ring", "ring:channels=3:chunks=2", "ring:rails=off", "direct:chunks=2", "direct_oneshot", "direct_twoshot",
              "halving_doubling", "tree:chunks=2", "in_switch", "in_switch:mode=push:chunks=2", "hierarchical",
              "hierarchical:intra=direct:inter=direct", "hierarchical:intra=in_switch:chunks=2"]


@pytest.mark.parametrize("where", RULE_TOPOLOGIES)
def test_every_rule_bounds_the_schedule_its_algorithm_compiles(where):
    """dims() before compiling: templates and chunks exact, transfers and dependencies never fewer than the
    compiled schedule has (transfers at most twice as many), so the up-front check never misses a cost."""
    topo = RULE_TOPOLOGIES[where]()
    checked = 0
    for spec in RULE_SPECS:
        algo = parse_spec(spec)
        for coll in C.COLLECTIVES:
            problem = Problem(coll, topo)
            if algo.unsupported(problem):
                continue
            key = algo.structure_key(problem, C.sizing(coll, 1 << 20, 4, topo.nranks), 4)
            rule = SB.dims(algo, problem, key)
            if rule is None:
                continue
            exact = SB.dims_of(algo.compile(problem, key))
            label = f"{spec} {coll}: rule {rule}, compiled {exact}"
            assert (rule.templates, rule.chunks) == (exact.templates, exact.chunks), label
            assert exact.transfers <= rule.transfers <= 2 * exact.transfers, label
            assert rule.tdeps >= exact.tdeps and rule.xdeps >= exact.xdeps, label
            checked += 1
    assert checked >= 12


def test_estimates_are_within_a_factor_of_what_is_allocated():
    """Three mid-size points: the estimate between 1 and 3 times the peak tracemalloc sees (the estimates also
    count what it cannot: Numba's arrays, the allocator's slack; they were set from peak RSS)."""
    small = build_flat("t", "switch", 8, 50e9, 0.0)
    packet.run(parse_spec("direct").compile(Problem("all_gather", small), 1), small, [16], 4)   # kernels loaded
    flat = build_flat("s", "switch", 256, 50e9, 500e-9)
    schedule = parse_spec("direct").compile(Problem("all_gather", flat), 1)   # 255 x 256 = 65280 transfers
    ring, problem = parse_spec("ring:channels=200"), Problem("all_reduce", small)       # 2 x 7 x 200 templates
    cases = {
        # 500 domains of 8 ranks: 8000 scale-up, 8000 NIC and 1000 leaf-spine links; 4000 + 500 + 500 + 1 nodes
        "topology": (lambda: build_hierarchical("h", "switch", 8, 1e11, 0.0, False, "fat_tree", 500, 1e10, 0.0),
                     150 * 17000 + 200 * 5001 + 1500 * 500),
        "packet": (lambda: packet.run(schedule, flat, [16], 4), packet.estimate(schedule, flat, 16, 4).nbytes),
        "compile": (lambda: ring.compile(problem, 1), SB.compile_bytes(SB.dims(ring, problem, 1))),
    }
    for name, (fn, estimate) in cases.items():
        real = traced_peak(fn)
        assert real <= estimate <= 3 * real, f"{name}: estimate {estimate / 1e6:.1f} MB, allocated {real / 1e6:.1f} MB"


def test_a_point_is_checked_before_and_after_it_is_compiled():
    """Before: from the rule (templates, transfers); after: from the schedule (an algorithm without a rule, or
    the general path that noise takes, with its exact pool)."""
    topo = load_topology("dgx-h100")
    problem = Problem("all_reduce", topo)
    sizing = C.sizing("all_reduce", 1 << 20, 4, 8)
    algo = parse_spec("ring")
    with budget.limited(1 << 10), pytest.raises(budget.BudgetError, match="all_reduce ring on dgx-h100"):
        SB.check_point(algo, problem, [sizing], [1], ("analytic",), QUIET)
    schedule = algo.compile(problem, 1)
    with budget.limited(1 << 10), pytest.raises(budget.BudgetError, match="14 templates"):
        SB.check_schedule(schedule, topo, ("analytic",), [sizing.size_bytes], Noise(iters=2, jitter=1e-9))


@pytest.mark.parametrize("argv", [
    ["calibrate", "tests/data/nccl-tests-all_reduce-synthetic.txt", "-t", "switch8", "-o", "{tmp}/fit.toml"],
    ["validate", "dgx-h200"],
])
def test_calibrate_and_validate_take_the_flag_too(argv, tmp_path, capsys):
    """Both time points, so --max-memory bounds them as it bounds sweep: 8 ranks on a switch build 16 links,
    more than 1 KiB, so the first topology they build is refused (and no calibrated file is written)."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    argv = [a.format(tmp=tmp_path) if "{tmp}" in a else (os.path.join(root, a) if a.startswith("tests/") else a)
            for a in argv]
    status = main([*argv, "--max-memory", "1K"])
    err = capsys.readouterr().err
    assert status == 2 and err.count("\n") == 1 and "over the 1 KiB memory budget" in err, err
    assert not (tmp_path / "fit.toml").exists()


def test_a_validation_already_run_in_the_process_does_not_lift_the_budget(capsys):
    """validate keeps its runs per process (the docs' summary shares them): a run without a budget must not
    serve one under --max-memory 1K, which refuses the first topology it builds."""
    from hcclsim.analysis.validate import validate

    assert not validate(["dgx-h200"]).points.empty
    status = main(["validate", "dgx-h200", "--max-memory", "1K"])
    err = capsys.readouterr().err
    assert status == 2 and "over the 1 KiB memory budget" in err, err
