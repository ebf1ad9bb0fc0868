"""Sweep and tune tables that fit the terminal (issue 12, item 6): sizes as nccl-tests users write them, no
number ever cut, --stats counters as columns, the fastest-per-size summary first, -q, the 0-byte rule."""

from __future__ import annotations

import io

import pandas as pd
import pytest
from helpers import assert_one_line_error
from helpers import run_cli as run
from rich.console import Console
from rich.table import Table

from hcclsim.results.report import render_table, render_tune, without_zero_bytes
from hcclsim.sweeping.sweep import COLUMNS

# sizes as a user writes them to -b/-e (K = 1024), by hand
LABELS = {0: "0", 16: "16", 1000: "1000", 4096: "4K", 64 << 20: "64M", 1 << 30: "1G"}
SIZES = [16, 1000, 4096, 64 << 20, 1 << 30]
SPREAD = ("time_us_p50", "time_us_p75", "time_us_p95", "time_us_min", "time_us_max")


def rows(algorithm: str, scale: float, engine: str = "analytic", sizes=SIZES, collective: str = "all_reduce",
         **extra) -> pd.DataFrame:
    """Hand-made sweep rows: time 170747.12 us x scale at 1 GiB (a number the old table cut), 8 ranks."""
    time = [10.25 * scale, 11.5 * scale, 12.75 * scale, 10670.44 * scale, 170747.12 * scale][:len(sizes)]
    algbw = [s / (t * 1e-6) / 1e9 for s, t in zip(sizes, time)]
    return pd.DataFrame({
        "collective": collective, "algorithm": algorithm, "topology": "switch8", "ranks": 8, "engine": engine,
        "size_bytes": sizes, "count": [s // 4 for s in sizes], "dtype": "float32", "root": -1, "time_us": time,
        "algbw_GBps": algbw, "busbw_GBps": [b * 2 * 7 / 8 for b in algbw], "protocol": "none", **extra})[
        COLUMNS + list(extra)]


def table(df: pd.DataFrame, width: int, monkeypatch, **kw) -> str:
    monkeypatch.setenv("COLUMNS", str(width))
    buf = io.StringIO()
    render_table(df, file=buf, **kw)
    return buf.getvalue()


def cells_of(df: pd.DataFrame) -> dict[str, set[str]]:
    """Per size label, every cell a table may print for it: the numbers at two decimals, as the CSV's."""
    out: dict[str, set[str]] = {}
    for r in df.itertuples(index=False):
        for label in (LABELS[r.size_bytes], str(r.size_bytes)):      # the old tables printed bytes
            out.setdefault(label, set()).update(
                {str(r.count), f"{r.time_us:.2f}", f"{r.algbw_GBps:.2f}", f"{r.busbw_GBps:.2f}", r.algorithm,
                 "-", r.protocol, *(f"{getattr(r, c):.2f}" for c in SPREAD if hasattr(r, c))})
    return out


def assert_whole(text: str, df: pd.DataFrame, width: int | None = None, extra=()):
    """Every data line (one starting with a size label) holds only whole cells of its size's rows (or extra),
    every row's time and busbw are on a line of its size, and no line is wider than the terminal."""
    cells = {size: c | set(extra) for size, c in cells_of(df).items()}
    lines = [line.split() for line in text.splitlines()]
    data = [t for t in lines if t and t[0] in cells]
    for tokens in data:
        assert set(tokens[1:]) <= cells[tokens[0]] | {t for t in tokens if t.endswith("%")}, tokens
    for r in df.itertuples(index=False):
        assert any(t[0] in (LABELS[r.size_bytes], str(r.size_bytes)) and f"{r.time_us:.2f}" in t and f"{r.busbw_GBps:.2f}" in t
                   for t in data), (r, text)
    if width is not None:
        assert max(len(line.rstrip()) for line in text.splitlines()) <= width, text


@pytest.mark.parametrize("width", [80, 100, 160])
def test_every_number_is_whole_at_every_width(monkeypatch, width):
    df = pd.concat([rows("ring", 1.0), rows("direct_twoshot", 0.5)], ignore_index=True)
    text = table(df, width, monkeypatch)
    assert_whole(text, df, width)
    assert "170747.12" in text and "1073741…" not in text


@pytest.mark.parametrize("width", [80, 100, 160])
def test_side_by_side_engines_never_cut(monkeypatch, width):
    """Two engines: where the table cannot fit it is printed wider, never cut."""
    df = pd.concat([rows("ring", 1.0), rows("ring", 1.01, "packet")], ignore_index=True)
    assert_whole(table(df, width, monkeypatch), df, extra={"1.010"})


@pytest.mark.parametrize("width", [80, 100, 160])
def test_percentiles_never_cut(monkeypatch, width):
    base = rows("ring", 1.0)
    df = base.assign(**{c: base.time_us * (1 + i / 10) for i, c in enumerate(SPREAD)})
    text = table(df, width, monkeypatch)
    assert_whole(text, df, width)
    assert "p95" in text.splitlines()[1] + text.splitlines()[2]


def test_the_whole_number_check_catches_a_cut_number():
    """The old rendering (rich's default columns in a console narrower than the table) cuts 1073741824 to
    '1073741…': the check above must fail on it."""
    df = rows("ring", 1.0)
    t = Table(box=None)
    for col in ("size (B)", "count (elems)", "type", "root", "time (us)", "algbw (GB/s)", "busbw (GB/s)",
                "p75 (us)", "p95 (us)", "min (us)", "max (us)"):
        t.add_column(col, justify="right")
    for r in df.itertuples(index=False):
        t.add_row(LABELS[r.size_bytes], str(r.count), r.dtype, "-1", *[f"{r.time_us:.2f}"] * 5,
                  f"{r.algbw_GBps:.2f}", f"{r.busbw_GBps:.2f}")
    buf = io.StringIO()
    Console(file=buf, width=80).print(t)
    assert "…" in buf.getvalue()
    with pytest.raises(AssertionError):
        assert_whole(buf.getvalue(), df)


def test_sizes_read_as_nccl_tests_flags_and_dtype_in_the_title(monkeypatch):
    text = table(rows("ring", 1.0), 160, monkeypatch)
    assert [line.split()[0] for line in text.splitlines() if line.split()[:1] and line.split()[0] in
            set(LABELS.values())] == ["16", "1000", "4K", "64M", "1G"]
    assert text.splitlines()[0] == "all_reduce · ring · switch8 (8 ranks) · analytic · float32"


def test_narrow_terminals_leave_out_count_first_and_say_so(monkeypatch):
    df = pd.concat([rows("ring", 1.0), rows("ring", 1.01, "packet")], ignore_index=True)
    narrow, wide = table(df, 80, monkeypatch), table(df, 160, monkeypatch)
    table_part, caption = narrow.split("left out to fit 80 columns (a wider terminal shows them): ")
    assert "count" not in table_part and caption.startswith("count (elems)")
    assert "count" in wide and "left out" not in wide
    assert "268435456" in wide and "268435456" not in narrow


def test_stats_counters_are_columns(monkeypatch):
    stats = {"events": [276.0, 552, 1000, 2.5e7, 3.2e7], "peak_queue_bytes": [4.0, 128, 8192, 1 << 20, 1 << 20],
             "table_peak_entries": [0.0] * 5, "table_stall_us": [0.0] * 5,
             "busiest_link_util": [0.0, 0.003, 0.141, 0.9, 0.985]}
    df = pd.concat([rows("ring", 1.0, **{k: [float("nan")] * 5 for k in stats}),
                    rows("ring", 1.0, "packet", **stats)], ignore_index=True)
    text = table(df, 200, monkeypatch)
    head = text.splitlines()[1:4]
    assert "events" in " ".join(head) and "busiest" in " ".join(head) and "peak" in " ".join(head)
    line_1g = next(line.split() for line in text.splitlines() if line.split()[:1] == ["1G"])
    assert line_1g[-5:] == ["32000000", "1M", "98.5%", "0", "0.00"]      # events, queue, link, table
    line_4k = next(line.split() for line in text.splitlines() if line.split()[:1] == ["4K"])
    assert line_4k[-5:] == ["1000", "8K", "14.1%", "0", "0.00"]
    assert "events" not in table(rows("ring", 1.0), 200, monkeypatch)     # no counters, no columns


def test_the_fastest_per_size_comes_first_and_alone_with_summary_only(monkeypatch):
    df = pd.concat([rows("ring", 1.0), rows("direct_twoshot", 0.5)], ignore_index=True)
    text = table(df, 80, monkeypatch)
    titles = [line for line in text.splitlines() if line.startswith("all_reduce · ")]
    assert titles == ["all_reduce · fastest algorithm per size · switch8 (8 ranks) · analytic · float32",
                      "all_reduce · ring · switch8 (8 ranks) · analytic · float32",
                      "all_reduce · direct_twoshot · switch8 (8 ranks) · analytic · float32"]
    only = table(df, 80, monkeypatch, summary_only=True)
    assert only == text.split("all_reduce · ring")[0]
    # direct_twoshot takes half of ring's time everywhere: margin +100.0%
    assert next(line.split() for line in only.splitlines() if line.split()[:1] == ["1G"]) == \
        ["1G", "direct_twoshot", "85373.56", f"{(1 << 30) / 85373.56e-6 / 1e9 * 7 / 4:.2f}", "ring", "+100.0%"]
    assert "fastest" not in table(rows("ring", 1.0), 80, monkeypatch)   # one algorithm: its block only


def test_zero_byte_rows_are_left_out_with_a_note():
    df = pd.concat([rows(a, 1.0, sizes=[0, 0, 4096], collective="all_gather") for a in ("ring", "direct")]
                   + [rows("ring", 1.0)], ignore_index=True)
    kept, notes = without_zero_bytes(df)
    assert (kept.size_bytes > 0).all() and len(kept) == len(df) - 4
    assert notes == [("all_gather: 2 of the sizes round down to 0 bytes on 8 ranks, left out of the table "
                      "(--zero-bytes shows them; the rows in -o and --format csv keep them)")]
    assert without_zero_bytes(rows("ring", 1.0))[1] == []


def test_tune_table_sizes(monkeypatch):
    ranges = pd.DataFrame({"collective": "all_reduce", "min_size_bytes": [8, 131072], "max_size_bytes": [65536, 1 << 30],
                           "algorithm": ["direct_oneshot", "in_switch"], "protocol": ["ll", "simple"],
                           "runner_up": ["direct_twoshot", ""], "margin": [0.052, float("nan")], "points": [14, 14],
                           "topology": "dgx-h100", "ranks": 8, "engine": "analytic"})
    monkeypatch.setenv("COLUMNS", "80")
    buf = io.StringIO()
    render_tune(ranges, file=buf)
    lines = [line.split() for line in buf.getvalue().splitlines()]
    assert lines[2:4] == [["8", "64K", "direct_oneshot", "ll", "direct_twoshot", "+5.2%", "14"],
                          ["128K", "1G", "in_switch", "simple", "-", "-", "14"]]


# ---------------------------------------------------------------------------------------------- the CLI

# switch8 AllGather, 16 B (0 bytes on 8 ranks), 256 B and 4 KiB: direct takes alpha + (N-1) S/N / B,
# ring (N-1)(alpha + S/N / B), alpha = 1 us (two 500 ns hops), B = 50 GB/s
AG = ["sweep", "-t", "switch8", "-c", "all_gather", "-a", "ring,direct", "-e", "4K", "-f", "16", "-j", "1"]
NOTE = ("hccl-bench: all_gather: 1 of the sizes round down to 0 bytes on 8 ranks, left out of the table "
        "(--zero-bytes shows them; the rows in -o and --format csv keep them)\n")


def summary_tokens(size: int) -> list[str]:
    direct = 1 + 7 * size / 8 / 50e3
    ring = 7 * (1 + size / 8 / 50e3)
    busbw = size / (direct * 1e-6) / 1e9 * 7 / 8
    return [LABELS.get(size, str(size)), "direct", f"{direct:.2f}", f"{busbw:.2f}", "ring",
            f"{ring / direct - 1:+.1%}"]


def test_summary_only_prints_the_fastest_algorithm_per_size(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    status, out, err = run(capsys, *AG, "--summary-only")
    assert (status, err) == (0, NOTE)
    lines = out.splitlines()
    assert lines[0] == "all_gather · fastest algorithm per size · switch8 (8 ranks) · analytic · float32"
    assert [line.split() for line in lines[3:]] == [summary_tokens(256), summary_tokens(4096), []]


def test_quiet_silences_notes_not_errors(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    status, out, err = run(capsys, *AG, "-a", "ring,direct,hierarchical", "--summary-only")
    assert status == 0 and err == ("hccl-bench: skipped hierarchical for all_gather on switch8: needs a two-tier "
                                   "topology (kind = hierarchical)\n" + NOTE)
    status, quiet, err = run(capsys, *AG, "-a", "ring,direct,hierarchical", "--summary-only", "-q")
    assert (status, err, quiet) == (0, "", out)
    assert_one_line_error(*run(capsys, *AG, "-a", "hierarchical", "-q"), "hierarchical cannot run all_gather")


def test_zero_bytes_shows_the_rows_nccl_tests_prints(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    args = (*AG, "-a", "ring", "-q")
    status, out, _ = run(capsys, *args)
    assert status == 0 and [line.split()[0] for line in out.splitlines()[3:-1]] == ["256", "4K"]
    status, out, _ = run(capsys, *args, "--zero-bytes")
    assert status == 0 and [line.split()[:2] for line in out.splitlines()[3:-1]] == [["0", "0"], ["256", "64"],
                                                                                     ["4K", "1024"]]
    status, out, _ = run(capsys, *args, "--format", "csv")
    assert status == 0 and [line.split(",")[5] for line in out.splitlines()[1:]] == ["0", "256", "4096"]
