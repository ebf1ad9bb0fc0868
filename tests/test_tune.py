"""`hccl-bench tune` and `sweep -a auto` (docs/config.md): the fastest algorithm per size range."""

import io
import json
import math
from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner
from helpers import run_cli as run

import hcclsim.cli.tune as tune_module
import hcclsim.sweeping.sweep as sweeping
from hcclsim.analysis.tune import TUNE_COLUMNS, size_ranges
from hcclsim.cli import cli
from hcclsim.network.config import load_topology
from hcclsim.schedule.collectives import COLLECTIVES
from hcclsim.sweeping.best import best_per_size
from hcclsim.sweeping.sweep import COLUMNS, LIBRARY, size_grid, sweep

TUNE_HEADER = ("collective,min_size_bytes,max_size_bytes,algorithm,protocol,runner_up,margin,points,topology,ranks,"
               "engine,dtype,library_algorithm,library_protocol,library_loss")
GIB = 1 << 30
LATENCY_OPTIMAL = {"direct_oneshot", "in_switch", "halving_doubling"}




def strict_json(text):
    def refuse(name):
        raise ValueError(f"not JSON: {name}")
    return json.loads(text, parse_constant=refuse)


@pytest.fixture(scope="module")
def dgx_rows():
    return sweep(load_topology("dgx-h100"), ["all_reduce"], "all", size_grid(8, GIB, 2)).rows


@pytest.fixture(scope="module")
def two_tier_rows():
    return sweep(load_topology("two-tier-128"), list(COLLECTIVES), "all", size_grid(8, GIB, 2)).rows


# ------------------------------------------------------------------------------- the pure logic

def synthetic(times: dict[str, list[float]], sizes: list[int]) -> pd.DataFrame:
    """Sweep-shaped rows: one algorithm per key, times in us per size."""
    frames = [pd.DataFrame({"collective": "all_reduce", "algorithm": name, "topology": "t", "ranks": 8,
                            "engine": "analytic", "size_bytes": sizes, "count": [s // 4 for s in sizes],
                            "dtype": "float32", "root": -1, "time_us": t, "algbw_GBps": 0.0, "busbw_GBps": 0.0})
              for name, t in times.items()]
    return pd.concat(frames, ignore_index=True)


def test_size_ranges_on_a_known_crossover():
    """alpha-beta: 'lat' = 1 + s/1000, 'bw' = 5 + s/10000 (us) cross at s = 4/0.0009 = 4444 B."""
    sizes = [1000, 2000, 4000, 8000, 16000]
    rows = synthetic({"bw": [5 + s / 10000 for s in sizes], "lat": [1 + s / 1000 for s in sizes]}, sizes)
    got = size_ranges(rows)
    assert list(got.columns) == TUNE_COLUMNS
    assert got[["min_size_bytes", "max_size_bytes", "algorithm", "runner_up", "points"]].values.tolist() == [
        [1000, 4000, "lat", "bw", 3], [8000, 16000, "bw", "lat", 2]]
    # worst case over the range: the size closest to the crossover (4000 B: 5.4 vs 5; 8000 B: 9 vs 5.8)
    assert got.margin.tolist() == pytest.approx([5.4 / 5 - 1, 9 / 5.8 - 1], rel=1e-12)
    assert got[["topology", "ranks", "engine", "dtype"]].values.tolist() == [["t", 8, "analytic", "float32"]] * 2


def test_ties_go_to_the_algorithm_listed_first_and_one_algorithm_has_no_runner_up():
    rows = synthetic({"b": [2.0, 2.0], "a": [2.0, 3.0]}, [8, 16])
    best = best_per_size(rows)
    assert best.algorithm.tolist() == ["b", "b"] and best.runner_up.tolist() == ["a", "a"]
    assert best.margin.tolist() == pytest.approx([0.0, 0.5])
    alone = size_ranges(synthetic({"x": [1.0, 2.0]}, [8, 16]))
    assert alone.runner_up.tolist() == [""] and math.isnan(alone.margin[0]) and alone.points.tolist() == [2]


def test_dgx_h100_picks_latency_optimal_small_and_in_switch_large(dgx_rows):
    ranges = size_ranges(dgx_rows)
    small = ranges[ranges.min_size_bytes <= 8].iloc[0]
    large = ranges[ranges.max_size_bytes >= GIB].iloc[0]
    assert small.algorithm in LATENCY_OPTIMAL and small.algorithm != "ring"
    assert large.algorithm == "in_switch" and large.max_size_bytes == GIB
    ring = dgx_rows[dgx_rows.algorithm == "ring"].set_index("size_bytes").time_us
    best = best_per_size(dgx_rows).set_index("size_bytes").time_us
    assert (best[8] < ring[8]) and (best[GIB] < ring[GIB])


def check_ranges(rows: pd.DataFrame, ranges: pd.DataFrame):
    """Ordered, no gaps or overlaps, maximal, and each range's pick is the per-size winner."""
    best = best_per_size(rows)
    assert list(ranges.collective.unique()) == list(rows.collective.unique())
    for coll, part in ranges.groupby("collective", sort=False):
        swept = sorted(rows[rows.collective == coll].size_bytes.unique())
        winners = best[best.collective == coll].set_index("size_bytes")
        assert part.min_size_bytes.iloc[0] == swept[0] and part.max_size_bytes.iloc[-1] == swept[-1]
        assert (part.min_size_bytes <= part.max_size_bytes).all()
        assert (part.min_size_bytes.values[1:] > part.max_size_bytes.values[:-1]).all()       # ordered, disjoint
        for prev, nxt in zip(part.max_size_bytes.values[:-1], part.min_size_bytes.values[1:], strict=True):
            assert swept.index(nxt) == swept.index(prev) + 1                                  # no swept size skipped
        pick = (part.algorithm + "/" + part.protocol).values                                # NCCL-like: the pair
        assert (pick[1:] != pick[:-1]).all()                                                 # maximal runs
        assert part.points.sum() == len(swept)
        for r in part.itertuples(index=False):
            inside = [s for s in swept if r.min_size_bytes <= s <= r.max_size_bytes]
            assert len(inside) == r.points
            assert set(winners.loc[inside, "algorithm"]) == {r.algorithm}
            assert set(winners.loc[inside, "protocol"]) == {r.protocol}
            # margin: brute force, the worst case of (second fastest / fastest - 1) over the range
            at = rows[(rows.collective == coll) & rows.size_bytes.isin(inside)]
            margins = []
            for s in inside:
                times = sorted(at[at.size_bytes == s].drop_duplicates("algorithm").time_us)
                if len(times) > 1:
                    margins.append(times[1] / times[0] - 1)
            if margins:
                assert r.margin == pytest.approx(min(margins), rel=1e-12)
            else:
                assert r.runner_up == "" and math.isnan(r.margin)


def test_ranges_cover_the_swept_sizes_dgx(dgx_rows):
    check_ranges(dgx_rows, size_ranges(dgx_rows))


def test_ranges_cover_the_swept_sizes_two_tier_every_collective(two_tier_rows):
    ranges = size_ranges(two_tier_rows)
    check_ranges(two_tier_rows, ranges)
    assert len(ranges) > 6                         # several crossovers, not one algorithm everywhere
    assert set(ranges.collective) == set(two_tier_rows.collective)


# -------------------------------------------------------------------------------------------- CLI

def test_tune_csv_header_and_rows(capsys):
    status, out, _ = run(capsys, "tune", "-t", "dgx-h100", "--format", "csv")
    assert status == 0
    assert out.splitlines()[0] == TUNE_HEADER
    ranges = pd.read_csv(io.StringIO(out), keep_default_na=False)
    assert ranges.iloc[0].min_size_bytes == 8 and ranges.iloc[-1].max_size_bytes == GIB
    assert ranges.iloc[0].algorithm == "ring" and ranges.iloc[-1].algorithm == "in_switch"
    assert set(ranges.topology) == {"dgx-h100"} and set(ranges.dtype) == {"float32"}
    assert ranges.points.sum() == 28                # 8 B .. 1 GiB by factor 2


def test_tune_table_json_and_output_file(capsys, tmp_path):
    status, out, _ = run(capsys, "tune", "-t", "switch8", "-c", "all", "-e", "1M", "-f", "8")
    assert status == 0 and "all_to_all · best algorithm per size range · switch8 (8 ranks)" in out
    path = tmp_path / "t.json"
    status, out, _ = run(capsys, "tune", "-t", "switch8", "-c", "all", "-e", "1M", "-f", "8", "--format", "json",
                         "-o", str(path))
    assert status == 0
    doc = strict_json(out)                          # a missing runner-up is null, not NaN
    assert doc == strict_json(path.read_text())
    meta = json.loads(Path(f"{path}.meta.json").read_text())
    assert meta["inputs"]["factor"] == 8 and meta["topology"]["name"] == "switch8"
    assert list(doc[0]) == TUNE_COLUMNS
    alone = [r for r in doc if r["collective"] == "all_to_all"]   # only `direct` runs all_to_all here
    assert alone and all(r["runner_up"] == "" and r["margin"] is None for r in alone)
    csv_path = tmp_path / "t.csv"
    status, out, _ = run(capsys, "tune", "-t", "switch8", "-e", "1M", "-f", "8", "--format", "csv",
                         "-o", str(csv_path))
    assert status == 0 and csv_path.read_text() == out


def test_tune_with_the_packet_engine(capsys):
    status, out, _ = run(capsys, "tune", "-t", "switch8", "-e", "4K", "-f", "16", "--engine", "packet",
                         "--format", "csv")
    assert status == 0
    ranges = pd.read_csv(io.StringIO(out))
    assert set(ranges.engine) == {"packet"} and ranges.points.sum() == 3


@pytest.mark.parametrize("args", [["tune", "--help"], ["tune", "-h"]])
def test_tune_help_exits_0(args):
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0 and "Usage:" in result.output and "--collective" in result.output


TUNE_ERRORS = [
    (["tune", "-c", "allreduc"], "--collective: unknown collective 'allreduc'"),
    (["tune", "-t", "switch9"], "--topology: unknown preset 'switch9'"),
    (["tune", "-f", "1"], "-f/--f: expected a whole factor >= 2, got 1"),
    (["tune", "-b", "1K", "-e", "16"], "-b/--b (1024) is larger than -e/--e (16)"),
    (["tune", "--engine", "analytic,packet"], "--engine: tune compares algorithms on one engine"),
    (["tune", "--engine", "warp"], "--engine: unknown engine 'warp'"),
    (["tune", "-o", "x.txt"], "-o/--output: expected a file ending in .csv, .json or .parquet"),
    (["tune", "--set", "ranks=0"], "--set ranks: expected a whole number >= 1, got 0"),
    (["tune", "--format", "xml"], "'--format'"),
    (["sweep", "-a", "auto:x=1"], "--algorithm: auto takes no options, got 'auto:x=1'"),
]


@pytest.mark.parametrize("argv,needle", TUNE_ERRORS, ids=[" ".join(a) for a, _ in TUNE_ERRORS])
def test_bad_input_is_one_line_and_exit_2(capsys, argv, needle):
    status, out, err = run(capsys, *argv)
    assert status == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("hccl-bench: error: ") and needle in err, err


def test_bad_output_fails_before_the_sweep(capsys, monkeypatch):
    def boom(*a, **k):
        raise AssertionError("the sweep ran")
    monkeypatch.setattr(sweeping, "sweep", boom)   # the command imports it when it runs
    status, _, err = run(capsys, "tune", "-o", "x.xlsx")
    assert status == 2 and "-o/--output" in err


def test_dgx_h100_tunes_an_ll_ring_small_and_nvls_large_as_nccls_model_does():
    """NCCL 2.28.9's own cost model on a DGX-H100 picks Ring/LL up to 1,144,836 B and NVLS/Simple beyond
    (its ncclTopoGetAlgoTime over the search result: Ring/LL 15.0 us + S/80.6 GB/s against NVLS 25 us +
    S/272 GB/s, hcclsim/sweeping/library.py). The preset's selection ("library") crosses over there: above
    1 MiB, below 2 MiB, with LL under it and Simple over it; tune shows it beside the simulated fastest."""
    topo = load_topology("dgx-h100")
    sizes = [8, 1 << 10, 64 << 10, 1 << 20, 2 << 20, 64 << 20, GIB]
    auto = sweep(topo, ["all_reduce"], "auto", sizes).rows.set_index("size_bytes")
    assert auto.chosen.tolist() == ["ring"] * 4 + ["in_switch"] * 3
    assert auto.protocol.tolist() == ["ll"] * 4 + ["simple"] * 3
    assert auto.chosen_by.str.startswith("library (NCCL 2.28.9").all()       # the preset's selection
    ranges = size_ranges(pd.concat([sweep(topo, ["all_reduce"], LIBRARY, sizes).rows, auto.reset_index()]))
    lib = ranges.library_algorithm + "/" + ranges.library_protocol
    assert list(dict.fromkeys(lib)) == ["ring/ll", "in_switch/simple"]
    assert ranges[lib == "ring/ll"].max_size_bytes.max() == 1 << 20
    assert ranges[lib == "in_switch/simple"].min_size_bytes.min() == 2 << 20
    # the simulated fastest (what `tune` prints beside it): an LL ring small, NVLS large
    assert (ranges.algorithm.iloc[0], ranges.protocol.iloc[0]) == ("ring", "ll")
    assert (ranges.algorithm.iloc[-1], ranges.protocol.iloc[-1]) == ("in_switch", "simple")


# ------------------------------------------------------------------------------------- sweep -a auto

@pytest.mark.parametrize("preset", ["dgx-h100", "two-tier-128", "switch8"])
def test_auto_picks_what_tune_picks(preset):
    topo = load_topology(preset, ["endpoint.selection=fastest"])     # dgx-h100's library rule: test_selection.py
    colls = list(COLLECTIVES)
    sizes = size_grid(8, GIB, 4)
    full = sweep(topo, colls, LIBRARY, sizes).rows        # what the preset's library offers (all: generic)
    ranges = size_ranges(full)
    auto = sweep(topo, colls, "auto", sizes).rows
    assert list(auto.columns) == COLUMNS + ["chosen", "chosen_by"] and set(auto.algorithm) == {"auto"}
    assert len(auto) == len(sizes) * len(colls)
    for row in auto.itertuples(index=False):
        r = ranges[(ranges.collective == row.collective) & (ranges.min_size_bytes <= row.size_bytes)
                   & (ranges.max_size_bytes >= row.size_bytes)]
        assert len(r) == 1 and r.iloc[0].algorithm == row.chosen
        same = full[(full.collective == row.collective) & (full.algorithm == row.chosen)
                    & (full.size_bytes == row.size_bytes)]
        assert same.time_us.iloc[0] == row.time_us and same.busbw_GBps.iloc[0] == row.busbw_GBps
        others = full[(full.collective == row.collective) & (full.size_bytes == row.size_bytes)]
        assert row.time_us == others.time_us.min()


def test_auto_next_to_listed_algorithms_is_a_tidy_table(capsys):
    status, out, err = run(capsys, "sweep", "-t", "switch8", "-a", "auto,ring", "-e", "4K", "-f", "16",
                           "--format", "csv")
    assert (status, err) == (0, "")
    rows = pd.read_csv(io.StringIO(out))
    assert list(rows.columns) == COLUMNS + ["chosen", "chosen_by"]
    assert rows.chosen_by.tolist() == ["listed"] * 3 + ["fastest"] * 3
    assert rows.algorithm.tolist() == ["ring"] * 3 + ["auto"] * 3     # auto rows last in each collective
    # the algorithm that ran the row: direct_oneshot, 2a + (N-1)S/B, beats NVLS's 4a below 4 KiB
    assert rows.chosen.tolist() == ["ring"] * 3 + ["direct_oneshot"] * 3
    assert rows.notna().all().all()
    status, out, _ = run(capsys, "sweep", "-t", "switch8", "-a", "ring", "-e", "4K", "-f", "16", "--format", "csv")
    assert "chosen" not in out                       # without auto the columns are unchanged


def test_auto_with_the_packet_engine_times_the_analytic_pick(capsys):
    topo = load_topology("switch8")
    sizes = [16, 4096, 1 << 20]
    auto = sweep(topo, ["all_reduce"], "auto", sizes, engine="analytic,packet").rows
    assert auto.engine.tolist() == ["analytic"] * 3 + ["packet"] * 3
    chosen = auto[auto.engine == "analytic"].chosen.tolist()
    assert auto[auto.engine == "packet"].chosen.tolist() == chosen
    for algo in set(chosen):
        ref = sweep(topo, ["all_reduce"], algo, sizes, engine="packet").rows.set_index("size_bytes").time_us
        mine = auto[(auto.engine == "packet") & (auto.chosen == algo)]
        assert mine.time_us.tolist() == pytest.approx(ref[mine.size_bytes].tolist(), rel=1e-12)


def test_auto_table_shows_the_choice(capsys):
    status, out, _ = run(capsys, "sweep", "-t", "switch8", "-a", "auto", "-e", "4K", "-f", "16")
    assert status == 0 and "all_reduce · auto · switch8" in out and "chosen" in out and "direct_oneshot" in out


# -------------------------------------------------------------------------------------------- docs

def test_docs_cover_tune_and_auto():
    text = (Path(__file__).resolve().parents[1] / "docs" / "config.md").read_text(encoding="utf-8")
    assert "## `hccl-bench tune`" in text and "`-a auto`" in text
    for param in tune_module.tune_cmd.params:
        for flag in param.opts:
            assert f"`{flag}" in text, flag
    for column in TUNE_COLUMNS + ["chosen", "chosen_by"]:
        assert f"| `{column}` |" in text, column
    assert TUNE_HEADER in text


def _docs_example(command):
    """The lines docs/config.md shows under ``$ hccl-bench <command>`` (up to a blank line, an ellipsis
    or the end of a generated block)."""
    text = (Path(__file__).resolve().parents[1] / "docs" / "config.md").read_text(encoding="utf-8")
    block = text.split(f"$ hccl-bench {command}\n", 1)[1]
    shown = [line.strip() for line in block.splitlines()]
    return shown[:next(i for i, line in enumerate(shown) if not line or line == "…" or line.startswith("<!--"))]


SWEEP_EXAMPLE = "sweep -t switch8 -a auto -e 4K -f 16 --format csv"
TUNE_EXAMPLE = "tune -t two-tier-128 --format csv"


@pytest.mark.parametrize("command", [SWEEP_EXAMPLE, TUNE_EXAMPLE])
def test_docs_examples_are_the_real_output(capsys, command):
    """The docs show what the program prints (so they cannot go stale); whether those numbers are right
    is the next two tests' business, which derive them by hand."""
    shown = _docs_example(command)
    status, out, _ = run(capsys, *command.split())
    assert status == 0 and len(shown) >= 2
    assert out.splitlines()[:len(shown)] == shown


def test_docs_sweep_example_is_the_closed_form():
    """switch8 (8 ranks, 50 GB/s, a = 500 ns per link hop, a reducing switch), AllReduce of S <= 4 KiB:
    direct_oneshot (every rank PUT_REDUCEs S into its N-1 peers, sharing its uplink) takes
    2a + (N-1) S/B, at 16 B 1 us + 2.24 ns = 1.00224 us. The others pay more latency: in_switch as
    NVLS runs it (reduce-scatter to the switch and back, then all-gather through it) 4a, ring
    2(N-1) x 2a = 14 us, tree and halving_doubling at least 6 x 2a."""
    header, *rows = _docs_example(SWEEP_EXAMPLE)
    n, B, a = 8, 50e9, 500e-9
    assert rows
    for line in rows:
        got = dict(zip(header.split(","), line.split(",")))
        S = int(got["size_bytes"])
        t = 2 * a + (n - 1) * S / B
        assert S <= 4096 and t < 4 * a                                   # below in_switch's latency alone
        assert (got["collective"], got["chosen"]) == ("all_reduce", "direct_oneshot"), line
        assert float(got["time_us"]) == pytest.approx(t * 1e6, rel=1e-5), line   # printed to 6 digits
        assert float(got["algbw_GBps"]) == pytest.approx(S / t / 1e9, rel=1e-5), line
        assert float(got["busbw_GBps"]) == pytest.approx(S / t / 1e9 * 2 * (n - 1) / n, rel=1e-5), line


def test_docs_tune_example_is_the_closed_forms():
    """two-tier-128: D = 16 domains of L = 8 ranks; scale-up switch 400 GB/s, 500 ns per hop (a_up = 1 us
    rank to rank); fat tree 50 GB/s, 2 us per hop (a_out = 8 us: rank, leaf, spine, leaf, rank). AllReduce
    of S bytes up to 8 MiB, the three contenders by hand (the others pay far more latency there:
    ring 2(N-1) = 254 steps, tree and halving_doubling several scale-out hops per step):

    * direct_oneshot: every rank PUT_REDUCEs S to its 127 peers at once; the 120 outside its domain share
      its 50 GB/s NIC: a_out + 120 S/B_out (the 7 inside take 7 S/400 GB/s, less).
    * direct_twoshot: the same twice on S/128 pieces: 2 (a_out + 120 (S/128)/B_out).
    * tree (NCCL's multi-node shape on two tiers: a chain through each domain, rotated per rail so a rank
      sends for one chain per step, and per rail a double binary tree over the 16 domains, each tree
      carrying half of the rail's S/L; one chunk up to 2 L x 512 KiB = 8 MiB): the chain reduce and
      broadcast 2(L-1)(a_up + S/(L B_up)), the trees' 4 levels up and 4 down 8 a_out, and what the
      busiest NIC carries over those 8 steps, 7 S/(L B_out).

    oneshot beats twoshot while 120 S/B_out (1 - 1/64) < a_out: S < 3386 B, so up to 2048 B on the
    factor-2 grid; the tree beats twoshot from 4 MiB (169.75 against 173.28 us; at 2 MiB 123.9 against
    94.6). margin = runner-up / best - 1, at the size of a range where it is smallest: 2048 B, 4096 B
    and 4 MiB (each contender's lead shrinks towards the crossover). Where the tree's range ends, and
    what wins at the largest sizes (bandwidth, where ring's rail-aligned channels compete), is not
    derived here."""
    L, D, B_up, B_out, a_up, a_out = 8, 16, 400e9, 50e9, 1e-6, 8e-6
    N = L * D

    def oneshot(S):
        return a_out + (N - L) * S / B_out

    def twoshot(S):
        return 2 * (a_out + (N - L) * (S / N) / B_out)

    def tree(S):
        return 2 * (L - 1) * (a_up + S / (L * B_up)) + 8 * a_out + 7 * S / (L * B_out)

    assert oneshot(2048) < twoshot(2048) and twoshot(4096) < oneshot(4096)
    assert twoshot(2 << 20) < tree(2 << 20) and tree(4 << 20) < twoshot(4 << 20)
    want = [(8, 2048, "direct_oneshot", "direct_twoshot", 9, twoshot(2048) / oneshot(2048) - 1),
            (4096, 2 << 20, "direct_twoshot", "direct_oneshot", 10, oneshot(4096) / twoshot(4096) - 1),
            (4 << 20, None, "tree", "direct_twoshot", None, twoshot(4 << 20) / tree(4 << 20) - 1)]
    header, *rows = _docs_example(TUNE_EXAMPLE)
    assert header == TUNE_HEADER and len(rows) >= len(want)
    for line, (lo, hi, best, runner, points, margin) in zip(rows, want):
        got = dict(zip(header.split(","), line.split(",")))
        assert (int(got["min_size_bytes"]), got["algorithm"], got["runner_up"]) == (lo, best, runner), line
        if hi is not None:
            assert (int(got["max_size_bytes"]), int(got["points"])) == (hi, points), line
        assert float(got["margin"]) == pytest.approx(margin, rel=1e-5), line      # printed to 6 digits
