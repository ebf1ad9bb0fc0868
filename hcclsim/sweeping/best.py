"""The fastest algorithm per message size, from sweep rows: the rule `sweep -a auto`, the sweep table's
"fastest algorithm per size" and `hccl-bench tune` (hcclsim.analysis.tune) share, so all three agree.

best_per_size: for each (collective, size_bytes) the algorithm with the smallest time_us (and the protocol
it ran with), the runner-up
(the fastest other algorithm) and margin = runner-up time / best time - 1. Ties go to the algorithm
listed first (the sweep's row order), so the choice is deterministic.
"""

from __future__ import annotations

import math

import pandas as pd

BEST_COLUMNS = ["collective", "size_bytes", "algorithm", "protocol", "time_us", "busbw_GBps", "runner_up",
                "runner_up_time_us", "margin"]
def relative_margin(best_us: float, second_us: float) -> float:
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
                margin = relative_margin(float(best.time_us), runner_us)
            else:
                runner, runner_us, margin = "", math.nan, math.nan
            out.append([coll, int(size), best.algorithm, str(best.get("protocol", "none")), float(best.time_us),
                        float(best.busbw_GBps), runner, runner_us, margin])
    return pd.DataFrame(out, columns=BEST_COLUMNS)


