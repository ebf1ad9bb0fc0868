"""Tuning: the fastest algorithm per size range, from sweep rows (hcclsim.sweeping.sweep.COLUMNS).

size_ranges merges consecutive sizes with the same fastest algorithm (hcclsim.sweeping.best.best_per_size,
the rule `sweep -a auto` uses too) into one range [min_size_bytes, max_size_bytes]; runner_up and margin
are the worst case over the range (the size where the runner-up came closest).
"""

from __future__ import annotations

import math

import pandas as pd

from ..sweeping.best import best_per_size

TUNE_COLUMNS = ["collective", "min_size_bytes", "max_size_bytes", "algorithm", "protocol", "runner_up", "margin",
                "points",
                "topology", "ranks", "engine", "dtype"]


def size_ranges(rows: pd.DataFrame, engine: str | None = None) -> pd.DataFrame:
    """The tuner table (TUNE_COLUMNS): one row per maximal run of consecutive swept sizes with the same
    fastest algorithm and protocol (as NCCL's tuner picks an (algorithm, protocol) pair), per collective,
    in size order. Ranges cover exactly the swept sizes; `points` is
    how many swept sizes a range holds."""
    if rows.empty:
        return pd.DataFrame(columns=TUNE_COLUMNS)
    engine = engine if engine is not None else list(dict.fromkeys(rows["engine"]))[-1]
    first = rows[rows["engine"] == engine].iloc[0]
    best = best_per_size(rows, engine)
    out = []
    for coll, part in best.groupby("collective", sort=False):
        pick = part["algorithm"] + "/" + part["protocol"]
        run = (pick != pick.shift()).cumsum()
        for _, r in part.groupby(run, sort=True):
            scored = r[r["runner_up"] != ""]
            if len(scored):
                worst = scored.loc[scored["margin"].idxmin()]
                runner, margin = worst.runner_up, float(worst.margin)
            else:
                runner, margin = "", math.nan
            out.append([coll, int(r["size_bytes"].iloc[0]), int(r["size_bytes"].iloc[-1]), r["algorithm"].iloc[0],
                        r["protocol"].iloc[0], runner, margin, len(r), first["topology"], int(first["ranks"]), engine, first["dtype"]])
    return pd.DataFrame(out, columns=TUNE_COLUMNS)


def json_safe(df: pd.DataFrame) -> pd.DataFrame:
    """NaN and infinite margins (no runner-up; a zero best time) as None, so JSON stays valid."""
    out = df.astype(object)
    for col in df.select_dtypes("number").columns:
        out[col] = pd.Series([v if isinstance(v, int) or math.isfinite(v) else None for v in df[col].tolist()],
                             index=df.index, dtype=object)
    return out

