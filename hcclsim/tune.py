"""Tuning: the fastest algorithm per message size and per size range, from sweep rows.

Pure functions over the sweep DataFrame (hcclsim.sweep.COLUMNS), like the table NCCL's tuner builds:

* best_per_size: for each (collective, size_bytes) the algorithm with the smallest time_us, the runner-up
  (the fastest other algorithm) and margin = runner-up time / best time - 1. Ties go to the algorithm
  listed first (the sweep's row order), so the choice is deterministic.
* size_ranges: consecutive sizes with the same fastest algorithm merged into one range
  [min_size_bytes, max_size_bytes]; runner_up and margin are the worst case over the range (the size
  where the runner-up came closest).

`hccl-bench tune` prints size_ranges; `sweep -a auto` and the sweep table's "fastest algorithm per size"
use best_per_size, so all three always agree.
"""

from __future__ import annotations

import math

import pandas as pd

BEST_COLUMNS = ["collective", "size_bytes", "algorithm", "time_us", "busbw_GBps", "runner_up", "runner_up_time_us",
                "margin"]
TUNE_COLUMNS = ["collective", "min_size_bytes", "max_size_bytes", "algorithm", "runner_up", "margin", "points",
                "topology", "ranks", "engine", "dtype"]


def _margin(best_us: float, second_us: float) -> float:
    if best_us > 0:
        return second_us / best_us - 1
    return 0.0 if second_us == 0 else math.inf


def best_per_size(rows: pd.DataFrame, engine: str | None = None) -> pd.DataFrame:
    """One row per (collective, size_bytes), sizes ascending: the fastest algorithm and its runner-up.

    engine: whose times decide; default the last engine in the rows (as the sweep table). runner_up is ''
    and margin NaN when only one algorithm ran at that size."""
    if rows.empty:
        return pd.DataFrame(columns=BEST_COLUMNS)
    engine = engine if engine is not None else list(dict.fromkeys(rows["engine"]))[-1]
    rows = rows[rows["engine"] == engine]
    out = []
    for coll, part in rows.groupby("collective", sort=False):
        for size, at in part.groupby("size_bytes", sort=True):
            # Several requested sizes can round to one size_bytes (AllGather, AllToAll): same times.
            order = at.drop_duplicates("algorithm").sort_values("time_us", kind="stable")
            best = order.iloc[0]
            if len(order) > 1:
                second = order.iloc[1]
                runner, runner_us = second.algorithm, float(second.time_us)
                margin = _margin(float(best.time_us), runner_us)
            else:
                runner, runner_us, margin = "", math.nan, math.nan
            out.append([coll, int(size), best.algorithm, float(best.time_us), float(best.busbw_GBps), runner,
                        runner_us, margin])
    return pd.DataFrame(out, columns=BEST_COLUMNS)


def size_ranges(rows: pd.DataFrame, engine: str | None = None) -> pd.DataFrame:
    """The tuner table (TUNE_COLUMNS): one row per maximal run of consecutive swept sizes with the same
    fastest algorithm, per collective, in size order. Ranges cover exactly the swept sizes; `points` is
    how many swept sizes a range holds."""
    if rows.empty:
        return pd.DataFrame(columns=TUNE_COLUMNS)
    engine = engine if engine is not None else list(dict.fromkeys(rows["engine"]))[-1]
    first = rows[rows["engine"] == engine].iloc[0]
    best = best_per_size(rows, engine)
    out = []
    for coll, part in best.groupby("collective", sort=False):
        run = (part["algorithm"] != part["algorithm"].shift()).cumsum()
        for _, r in part.groupby(run, sort=True):
            scored = r[r["runner_up"] != ""]
            if len(scored):
                worst = scored.loc[scored["margin"].idxmin()]
                runner, margin = worst.runner_up, float(worst.margin)
            else:
                runner, margin = "", math.nan
            out.append([coll, int(r["size_bytes"].iloc[0]), int(r["size_bytes"].iloc[-1]), r["algorithm"].iloc[0],
                        runner, margin, len(r), first["topology"], int(first["ranks"]), engine, first["dtype"]])
    return pd.DataFrame(out, columns=TUNE_COLUMNS)


def json_safe(df: pd.DataFrame) -> pd.DataFrame:
    """NaN and infinite margins (no runner-up; a zero best time) as None, so JSON stays valid."""
    out = df.astype(object)
    for col in df.select_dtypes("number").columns:
        out[col] = pd.Series([v if isinstance(v, int) or math.isfinite(v) else None for v in df[col].tolist()],
                             index=df.index, dtype=object)
    return out


# `hcclsim.tune(...)` calls hcclsim.api.run_tune; this module stays importable as before (hcclsim/_callable.py).
from ._callable import make_callable

make_callable(__name__, "run_tune")
