"""The dgx-b200 preset against MGHPCC AICR's nccl-tests runs on 8x B200 (validation/dgx-b200.toml): the
measurement file against its logs, and every band with a tolerance. Bands that do not hold are strict
xfails, as in tests/test_hardware.py."""

from __future__ import annotations

import pandas as pd
import pytest

from hcclsim.analysis import validate as V
from hcclsim.results import nccltests

CSV = V.validation_dir() / "b200-8gpu.csv"
B0027, B0012 = "logs/b200_aicr_b0027_1node.txt", "logs/b200_aicr_b0012_sweep_g8.txt"
SWEEP = "logs/b200_aicr_b0012_sweep_g2-7.txt"
AR, AG, RS = "all_reduce (b0027, b0012)", "all_gather (b0027, b0012)", "reduce_scatter (b0027, b0012)"
EIGHT_GPU = [AR, AG, RS, "all_to_all (b0027, b0012)", "broadcast (b0027, b0012)", "reduce (b0027, b0012)"]
TOLERANCE = {(AR, "medium"): 0.25, (AR, "large"): 0.10, (AG, "large"): 0.15, (RS, "large"): 0.15}
MIB, GIB = 1 << 20, 1 << 30
KEY = ["log", "gpus", "collective", "size_bytes", "placement"]


@pytest.fixture(scope="module")
def data():
    return V.load_data(CSV)


@pytest.fixture(scope="module")
def result():
    return V.validate(["dgx-b200"])


@pytest.fixture(scope="module")
def bands(result):
    return result.summary.set_index(["case", "band", "metric"]).status


def log_rows(logs) -> pd.DataFrame:
    """Every row of the six compared collectives that hccl-bench's nccl-tests reader finds in the logs."""
    rows = [(log, b.ranks, b.collective, r.size_bytes, r.placement, r.time_us, r.algbw_GBps, r.busbw_GBps)
            for log in logs for b in nccltests.parse_text((V.validation_dir() / log).read_text(), log)
            if b.collective in {"all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast", "reduce"}
            for r in b.rows]
    return pd.DataFrame(rows, columns=KEY + ["time_us", "algbw_GBps", "busbw_GBps"])


def not_in_logs(df: pd.DataFrame) -> pd.DataFrame:
    """The CSV rows that differ from their log (or are missing from it), and the log rows missing from the CSV."""
    cols = KEY + ["time_us", "algbw_GBps", "busbw_GBps"]
    both = df[cols].merge(log_rows(sorted(df.log.unique())), how="outer", indicator=True)
    return both[both._merge != "both"]


def test_the_csv_is_exactly_the_logs_rows(data):
    assert len(data) == 576          # 2 logs x 6 collectives x 8 sizes x 2 + 6 GPU counts x 4 x 8 x 2
    assert not_in_logs(data).empty


def test_a_row_that_differs_from_its_log_is_found(data):
    bad = data.copy()
    bad.loc[0, "time_us"] += 0.01
    assert len(not_in_logs(bad)) == 2            # the changed CSV row and the log's row it no longer matches


@pytest.mark.parametrize("log,collective,gpus,size,placement,time_us,algbw,busbw", [
    # read by hand from the logs (b0027 lines 262, 229, 100, 298; the sweep's NGPUS=3 all_gather table)
    (B0027, "all_reduce", 8, 64 * MIB, "out-of-place", 280.90, 238.91, 418.09),
    (B0027, "all_gather", 8, 16 * MIB, "out-of-place", 103.66, 161.85, 141.62),
    (B0027, "broadcast", 8, 4 * MIB, "out-of-place", 36.90, 113.66, 113.66),
    (B0027, "all_to_all", 8, 16 * GIB, "in-place", 22259.0, 771.82, 675.34),
    (B0012, "reduce_scatter", 8, 16 * MIB, "out-of-place", 100.69, 166.62, 145.79),
    (SWEEP, "all_gather", 3, 1048560, "out-of-place", 15.45, 67.86, 45.24),
])
def test_csv_values_read_by_hand(data, log, collective, gpus, size, placement, time_us, algbw, busbw):
    row = data[(data.log == log) & (data.collective == collective) & (data.gpus == gpus) &
               (data.size_bytes == size) & (data.placement == placement)]
    assert len(row) == 1
    assert tuple(row[["time_us", "algbw_GBps", "busbw_GBps"]].iloc[0]) == (time_us, algbw, busbw)


def test_64_mib_allreduce_busbw_by_hand(data):
    """nccl-tests' arithmetic on one row: 67108864 B / 280.90 us = 238.91 GB/s; x 2 x 7/8 = 418.09."""
    row = data[(data.log == B0027) & (data.collective == "all_reduce") & (data.size_bytes == 64 * MIB) &
               (data.placement == "out-of-place")].iloc[0]
    assert 67108864 / 280.90e-6 / 1e9 == pytest.approx(row.algbw_GBps, abs=0.005)
    assert row.algbw_GBps * 1.75 == pytest.approx(row.busbw_GBps, abs=0.01)


def test_validates_with_enough_points(result):
    """Issue 10: at least 20 measured points for the preset; here 16 per 8-GPU case (8 sizes x 2 nodes)."""
    pts = result.points
    eight = pts[pts.case.isin(EIGHT_GPU)]
    assert eight.groupby("case").size().to_dict() == {c: 16 for c in EIGHT_GPU}
    assert len(pts[pts.case.isin([AR, AG, RS])]) >= 20
    assert set(pts.placement) == {"out-of-place"}
    fewer = pts[~pts.case.isin(EIGHT_GPU)]
    assert fewer.case.nunique() == 24 and len(fewer) == 24 * 8


def test_runs_on_fewer_gpus_are_printed_not_gated(result):
    s = result.summary
    assert set(s[~s.case.isin([AR, AG, RS])].status) == {V.INFO}


def not_yet(why: str):
    return pytest.mark.xfail(strict=True, reason=why)


@pytest.mark.parametrize("case,band", [
    pytest.param(AR, "medium", marks=not_yet(
        "16 MiB +30 % (268 GB/s measured, 348 NVLS model) and 4 MiB +19 %; 1 MiB +12 %")),
    pytest.param(AR, "large", marks=not_yet(
        "64 MiB +28 % (419 GB/s measured, 538 NVLS model); 256 MiB-16 GiB within 7 %")),
    pytest.param(AG, "large", marks=not_yet(
        "64 MiB +24 % (417 GB/s measured, 517 ring model); 256 MiB-16 GiB +7 to +12 %")),
    pytest.param(RS, "large", marks=not_yet(
        "64 MiB +24 % (418 GB/s measured, 517 ring model); 256 MiB-16 GiB +4 to +10 %")),
])
def test_dgx_b200_band(bands, case, band):
    assert bands[(case, band, "busbw")] == V.PASS


def test_what_leaves_the_tolerance_is_16_and_64_mib(result):
    """The failing bands fail on the 64 MiB points (and 16 MiB for AllReduce's medium band); every other
    gated point, both nodes, is within the issue's bar: from 256 MiB the bands would pass."""
    pts = result.points
    out = set()
    for (case, band), limit in TOLERANCE.items():
        p = pts[(pts.case == case) & (pts.band == band)]
        assert len(p) == (6 if band == "medium" else 10)          # 3 or 5 sizes x 2 nodes
        out |= {(case, int(s)) for s, e in zip(p.size_bytes, p.busbw_error) if abs(e) > limit}
    assert out == {(AR, 16 * MIB), (AR, 64 * MIB), (AG, 64 * MIB), (RS, 64 * MIB)}
