"""AllToAllv: traffic matrices (files and distributions), the direct and hierarchical schedules, the checker's
proof that they move exactly the matrix, and the size semantics (a uniform matrix is AllToAll)."""

import dataclasses

import numpy as np
import pytest
from helpers import assert_one_line_error, run_cli

from hcclsim.core.errors import ConfigError, ScheduleError
from hcclsim.engine import analytic, packet
from hcclsim.network.config import load_topology
from hcclsim.network.topology import build_flat
from hcclsim.schedule import collectives as C
from hcclsim.schedule import matrix
from hcclsim.schedule.algorithm import Problem, parse_spec
from hcclsim.schedule.checker import check
from hcclsim.schedule.ir import F_C3, F_N
from hcclsim.sweeping import budget as SB
from hcclsim.sweeping.sweep import sweep

SHAPES = {2: (2, 1), 3: (3, 1), 4: (2, 2), 5: (5, 1), 6: (2, 3), 7: (7, 1), 8: (2, 4), 9: (3, 3), 10: (2, 5),
          11: (11, 1), 12: (3, 4), 13: (13, 1), 14: (2, 7), 15: (3, 5), 16: (4, 4), 17: (17, 1)}


def two_tier(D: int, L: int):
    return load_topology("two-tier-128", [f"scale_out.domains={D}", f"scale_up.ranks={L}"])


def compiled(spec: str, topo, traffic, size: int = 1 << 20):
    algo, problem = parse_spec(spec), Problem(C.ALL_TO_ALLV, topo)
    assert algo.unsupported(problem) is None
    sz = C.sizing(C.ALL_TO_ALLV, size, 4, topo.nranks, traffic)
    return algo.compile(problem, algo.structure_key(problem, sz, 4)), sz


def random_traffic(n: int, seed: int) -> matrix.Traffic:
    """Whole weights 0..4: zero pairs, unequal pairs and an uneven diagonal."""
    return matrix.from_weights(np.random.default_rng(seed).integers(0, 5, (n, n)))


# ------------------------------------------------------------------------------------- the checker

@pytest.mark.parametrize("n", range(2, 18))
def test_a_seeded_random_matrix_passes_the_checker_and_runs_on_both_engines(n):
    D, L = SHAPES[n]
    t = random_traffic(n, seed=n)
    for spec, topo in [("direct", build_flat("t", "switch", n, 50e9, 1e-6))] + \
            ([(s, two_tier(D, L)) for s in ("direct", "hierarchical", "hierarchical:inter=direct")] if D > 1 else []):
        s, sz = compiled(spec, topo, t)
        for unit in (1, 3):
            check(s, unit)
        for engine in (analytic, packet):
            assert engine.run(s, topo, [sz.block_elems], 4).time[0] > 0, (spec, engine)


def test_the_checker_rejects_a_block_sent_to_the_wrong_rank_or_one_element_short():
    topo = build_flat("t", "switch", 4, 50e9, 0.0)
    s, _ = compiled("direct", topo, random_traffic(4, seed=1))
    check(s, 1)
    assert list(s.tmpl[0, F_C3:F_C3 + 2]) == [0, 1]         # the first PUT: rank 0's units for rank 1 ...
    wrong = s.tmpl.copy()
    wrong[0, F_C3 + 1] = 2                                  # ... sent to rank 2 instead
    with pytest.raises(ScheduleError, match=r"rank 1, unit 0 \(from rank 0\), element 0 of the unit: holds .* "
                                            r"\(garbage: an unwritten position\)"):
        check(dataclasses.replace(s, tmpl=wrong), 1)
    short = s.tmpl.copy()
    t = np.argmax(short[:, F_N] > 1)                        # a pair of several units, one unit (= 1 element) short
    short[t, F_N] -= 1
    src, dst = short[t, F_C3:F_C3 + 2]
    with pytest.raises(ScheduleError, match=rf"rank {dst}, unit \d+ \(from rank {src}\).*garbage"):
        check(dataclasses.replace(s, tmpl=short), 1)


def test_the_checker_holds_a_matrix_schedule_to_its_own_matrix():
    """A schedule of one matrix checked against another (its notes swapped) fails: the spec is the matrix."""
    topo = build_flat("t", "switch", 5, 50e9, 0.0)
    s, _ = compiled("direct", topo, random_traffic(5, seed=2))
    other = dict(s.notes, traffic=random_traffic(5, seed=3))
    with pytest.raises(ScheduleError, match="expected"):
        check(dataclasses.replace(s, notes=other), 1)
    with pytest.raises(ScheduleError, match=r"carries its traffic matrix in notes\['traffic'\]"):
        check(dataclasses.replace(s, notes={}), 1)


# --------------------------------------------------------------------------- uniform = AllToAll

@pytest.mark.parametrize("where,algorithms", [("switch8", "direct"), ("two-tier", "direct,hierarchical")])
def test_a_uniform_matrix_gives_all_to_all_size_time_and_busbw_exactly(where, algorithms):
    topo = load_topology("switch8") if where == "switch8" else two_tier(2, 4)
    rows = sweep(topo, ["all_to_all", "all_to_allv"], algorithms, [4096, 1 << 20], engine="analytic,packet").rows
    cols = ["algorithm", "engine", "size_bytes", "count", "time_us", "algbw_GBps", "busbw_GBps"]
    a2a, a2av = (rows[rows.collective == c][cols].reset_index(drop=True) for c in ("all_to_all", "all_to_allv"))
    assert len(a2a) == 2 * 2 * len(algorithms.split(","))
    assert a2a.equals(a2av)


def test_a_size_is_what_a_rank_sends_on_average_and_the_matrix_scales_with_it():
    t = matrix.from_weights([[0, 1], [3, 0]])            # 4 units; rank 1 sends 3, rank 0 one
    sz = C.sizing(C.ALL_TO_ALLV, 1000, 4, 2, t)           # 250 elements a rank on average = 2 x 250 / 4 per unit
    assert (sz.block_elems, sz.count, sz.size_bytes) == (125, 250, 1000)
    big = C.sizing(C.ALL_TO_ALLV, 4000, 4, 2, t)
    assert big.block_elems == 4 * sz.block_elems
    assert C.sizing(C.ALL_TO_ALLV, 8, 4, 2, t).size_bytes == 8     # 2 x 2 elements: one a unit
    assert C.sizing(C.ALL_TO_ALLV, 7, 4, 2, t).size_bytes == 0     # 2 x 1 element cannot hold 4 units
    assert C.busbw_factor(C.ALL_TO_ALLV, 8) == 7 / 8


# ------------------------------------------------------------------------- hierarchical vs direct

def test_hierarchical_spreads_a_hot_senders_scale_out_traffic_over_its_domains_nics():
    """Rank 0 sends X to every other rank of 3 domains x 4 ranks (400 GB/s up, 50 GB/s out).

    direct: rank 0's NIC carries its L(D-1) cross-domain PUTs: max(a_up + (L-1)X/B_up, a_out + L(D-1)X/B_out).
    hierarchical: rank 0 hands each domain peer (0, l) the D X bound for rail l (its own domain's included),
    (L-1) D X on its scale-up link, then the L NICs each carry (D-1) X: inter=direct a_up + (L-1) D X/B_up
    + a_out + (D-1) X/B_out; pairwise (inter=ring) one step per domain, (D-1)(a_out + X/B_out)."""
    D, L = 3, 4
    topo = two_tier(D, L)
    n = D * L
    w = np.zeros((n, n))
    w[0, 1:] = 1
    t = matrix.from_weights(w)
    a_up, a_out, B_up, B_out = topo.path_latency(0, 1), topo.path_latency(0, L), 400e9, 50e9
    times = {}
    for spec in ("direct", "hierarchical:inter=direct", "hierarchical"):
        s, sz = compiled(spec, topo, t)
        times[spec] = float(analytic.run(s, topo, [sz.block_elems], 4).time[0])
    X = sz.block_elems * 4
    assert times["direct"] == pytest.approx(max(a_up + (L - 1) * X / B_up, a_out + L * (D - 1) * X / B_out), rel=1e-9)
    up = a_up + (L - 1) * D * X / B_up
    assert times["hierarchical:inter=direct"] == pytest.approx(up + a_out + (D - 1) * X / B_out, rel=1e-9)
    assert times["hierarchical"] == pytest.approx(up + (D - 1) * (a_out + X / B_out), rel=1e-9)
    assert times["hierarchical:inter=direct"] < times["direct"] / 2


def test_the_budget_rules_are_the_compiled_schedules_dimensions():
    t = random_traffic(12, seed=4)
    for spec in ("direct", "hierarchical", "hierarchical:inter=direct"):
        algo, problem = parse_spec(spec), Problem(C.ALL_TO_ALLV, two_tier(3, 4))
        s, _ = compiled(spec, problem.topology, t)
        assert SB.dims(algo, problem, t) == SB.dims_of(s), spec


# ------------------------------------------------------------------------------------ matrices

def test_named_distributions_by_hand():
    assert np.array_equal(matrix.parse("uniform", 3).units, np.ones((3, 3)))
    # hot:2 on 4 ranks: every row gives rank 2 one half, the others 1/6 each: 3 to 1
    assert np.array_equal(matrix.parse("hot:2", 4).units, np.tile([1, 1, 3, 1], (4, 1)))
    assert np.array_equal(matrix.parse("hot:1:0.25", 4).units, np.ones((4, 4)))       # 1/4 each: uniform
    assert np.array_equal(matrix.parse("hot:0:0.7", 3).units[0], [299, 64, 64])   # 0.7 / 0.15 x 64 = 298.7
    # dlrm:10 on 4 ranks: tables t on rank t mod 4 -> ranks own 3, 3, 2, 2; each rank sends each owner a unit a table
    assert np.array_equal(matrix.parse("dlrm:10", 4).units, np.tile([3, 3, 2, 2], (4, 1)))
    # zipf:1 on 4 ranks: every row a permutation of 1, 1/2, 1/3, 1/4, the lightest 64 units: 4/3 x 64 = 85.3
    z = matrix.parse("zipf:1:seed=5", 4).units
    assert all(sorted(row) == [64, 85, 128, 256] for row in z)
    assert not np.array_equal(z, matrix.parse("zipf:1:seed=6", 4).units)
    assert np.array_equal(z, matrix.parse("zipf:1:seed=5", 4).units)


def test_whole_numbers_are_kept_exactly_and_other_weights_rounded():
    assert np.array_equal(matrix.from_weights([[0, 4096], [2048, 0]]).units, [[0, 2], [1, 0]])   # common factor
    assert np.array_equal(matrix.from_weights([[0, 0.5], [0.25, 0]]).units, [[0, 2], [1, 0]])     # 2 : 1
    assert np.array_equal(matrix.from_weights([[0, 0.5], [0.2, 0]]).units, [[0, 160], [64, 0]])  # 2.5 x 64
    assert np.array_equal(matrix.from_weights([[0, 1], [0.3, 0]]).units, [[0, 213], [64, 0]])    # 1/0.3 x 64
    # a range past EXACT_LIMIT: the heaviest pair 4096 units, one a millionth of it still sends one unit
    assert np.array_equal(matrix.from_weights([[0, 1, 1e-6], [0.5, 0, 0], [0, 0, 0]]).units,
                          [[0, 4096, 1], [2048, 0, 0], [0, 0, 0]])
    with pytest.raises(ConfigError, match="only to itself"):
        matrix.from_weights(np.eye(3))


@pytest.mark.parametrize("spec,message", [
    ("zipf", "--matrix: 'zipf': expected zipf:S"),
    ("zipf:-1", "--matrix: 'zipf:-1': expected zipf:S with S >= 0"),
    ("hot:9", "--matrix: 'hot:9': expected hot:R[:F] with a rank R in 0..3 and a share 0 < F <= 1"),
    ("dlrm:0", "--matrix: 'dlrm:0': expected dlrm:TABLES with a whole number of tables >= 1"),
    ("zipf:1:seed=x", "--matrix: 'zipf:1:seed=x': expected seed=K with a whole number K"),
    ("nope.csv", ("--matrix: 'nope.csv' is neither a file nor a distribution; expected a .csv or .npy file or one "
                  "of uniform, zipf:S, hot:R[:F], dlrm:TABLES (each may end in :seed=K)")),
])
def test_bad_distributions_are_refused(spec, message):
    with pytest.raises(ConfigError) as e:
        matrix.parse(spec, 4)
    assert str(e.value) == message


BAD_CSV = {
    "not square": ("0,1,1,1\n1,0,1,1\n1,1,0\n1,1,1,0\n",
                   "line 3 has 3 columns, expected 4 (a square matrix: the file has 4 rows)"),
    "negative": ("0,1,1,1\n1,0,-2,1\n1,1,0,1\n1,1,1,0\n",
                 "line 2, column 3: '-2' is a negative number; expected bytes or a weight >= 0"),
    "non-numeric": ("# bytes\n0,1,1,1\n1,0,1,1\n1,1,0,x\n1,1,1,0\n",
                    "line 4, column 4: 'x' is not a number; expected bytes or a weight >= 0"),
    "wrong N": ("0,1\n1,0\n", "a 2 x 2 matrix, expected 4 x 4 (one row and one column per rank of the topology)"),
}


@pytest.mark.parametrize("case", BAD_CSV)
def test_a_bad_matrix_file_is_refused_with_one_line_naming_it(capsys, tmp_path, case):
    text, message = BAD_CSV[case]
    path = tmp_path / "m.csv"
    path.write_text(text)
    status, out, err = run_cli(capsys, "sweep", "-t", "switch8", "--set", "ranks=4", "-c", "all_to_allv",
                               "--matrix", path, "-e", "1M", "-q")
    assert_one_line_error(status, out, err)
    assert err == f"hccl-bench: error: --matrix {path}: {message}\n"


def test_npy_matrices_are_read_and_bad_ones_refused(tmp_path):
    good = tmp_path / "m.npy"
    np.save(good, np.arange(16, dtype=np.float32).reshape(4, 4))
    assert np.array_equal(matrix.parse(str(good), 4).units, np.arange(16).reshape(4, 4))
    for name, array, message in [("r.npy", np.ones((2, 3)), "an array of shape (2, 3), expected a square N x N matrix"),
                                 ("n.npy", -np.eye(2), ("row 1, column 1: -1 is not a number >= 0; expected bytes "
                                                        "or a weight >= 0"))]:
        np.save(tmp_path / name, array)
        with pytest.raises(ConfigError) as e:
            matrix.parse(str(tmp_path / name), 2)
        assert str(e.value) == f"--matrix {tmp_path / name}: {message}"
    (tmp_path / "t.npy").write_text("not numpy")
    with pytest.raises(ConfigError, match="not a NumPy .npy file"):
        matrix.parse(str(tmp_path / "t.npy"), 2)


def test_the_sweep_scales_a_matrix_file_and_refuses_matrix_without_all_to_allv(capsys, tmp_path):
    path = tmp_path / "m.csv"
    path.write_text("0,3\n1,0\n")
    status, out, err = run_cli(capsys, "sweep", "-t", "switch8", "--set", "ranks=2", "-c", "alltoallv", "-a", "direct",
                               "--matrix", path, "-b", "16", "-e", "1K", "-f", "64", "--format", "csv", "-q")
    assert status == 0, err
    lines = out.splitlines()
    assert [line.split(",")[5] for line in lines[1:]] == ["16", "1024"]      # 2 units per rank: whole elements
    status, out, err = run_cli(capsys, "sweep", "-t", "switch8", "-c", "all_reduce", "--matrix", "uniform", "-q")
    assert_one_line_error(status, out, err, "--matrix: sets all_to_allv's traffic; the collectives are all_reduce")


def test_auto_on_a_library_preset_runs_matrix_collectives_as_its_all_to_all():
    """dgx-h100's endpoint names direct for all_to_all, as NCCL runs AllToAll, AllToAllv and send/recv alike
    (grouped ncclSend/ncclRecv)."""
    rows = sweep(load_topology("dgx-h100"), ["all_to_allv", "send_recv", "pp_ring"], "auto", [1 << 20]).rows
    assert rows.chosen.tolist() == ["direct"] * 3
