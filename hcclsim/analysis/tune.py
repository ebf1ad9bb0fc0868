"""Tuning: the fastest algorithm per size range, from sweep rows (hcclsim.sweeping.sweep.COLUMNS), beside
what NCCL's own tuner would run.

size_ranges merges consecutive sizes with the same fastest algorithm (hcclsim.sweeping.best.best_per_size,
the rule `sweep -a auto` uses too) and the same library pick into one range [min_size_bytes,
max_size_bytes]; runner_up and margin are the worst case over the range (the size where the runner-up came
closest). The library pick comes from `-a auto` rows swept under `selection = "library"` (`tune` sweeps
them beside the algorithms); library_loss is the simulated time that pick loses against the fastest, the
worst over the range: what following NCCL's model costs on this fabric, as the simulator sees it.
"""

from __future__ import annotations

import math

import pandas as pd

from ..core.units import format_size
from ..sweeping.best import best_per_size, relative_margin
from ..sweeping.library import NCCL_VERSION
from ..sweeping.sweep import AUTO, MATRIX

TUNE_COLUMNS = ["collective", "min_size_bytes", "max_size_bytes", "algorithm", "protocol", "runner_up", "margin",
                "points",
                "topology", "ranks", "engine", "dtype", "library_algorithm", "library_protocol", "library_loss"]


def size_ranges(rows: pd.DataFrame, engine: str | None = None) -> pd.DataFrame:
    """The tuner table (TUNE_COLUMNS): one row per maximal run of consecutive swept sizes with the same
    fastest algorithm and protocol (as NCCL's tuner picks an (algorithm, protocol) pair) and the same
    library pick, per collective, in size order. Ranges cover exactly the swept sizes; `points` is
    how many swept sizes a range holds. The library columns are '' and NaN where no `auto` row chosen by
    the library is in the rows. Rows with a matrix column (a sweep of all_to_allv) give the ranges one too."""
    if rows.empty:
        return pd.DataFrame(columns=TUNE_COLUMNS)
    engine = engine if engine is not None else list(dict.fromkeys(rows["engine"]))[-1]
    first = rows[rows["engine"] == engine].iloc[0]
    best = _with_library(best_per_size(rows[rows["algorithm"] != AUTO], engine), rows[rows["engine"] == engine])
    out = []
    for coll, part in best.groupby("collective", sort=False):
        pick = part["algorithm"] + "/" + part["protocol"] + "|" + part["library_algorithm"] + "/" + part["library_protocol"]
        run = (pick != pick.shift()).cumsum()
        for _, r in part.groupby(run, sort=True):
            scored = r[r["runner_up"] != ""]
            if len(scored):
                worst = scored.loc[scored["margin"].idxmin()]
                runner, margin = worst.runner_up, float(worst.margin)
            else:
                runner, margin = "", math.nan
            out.append([coll, int(r["size_bytes"].iloc[0]), int(r["size_bytes"].iloc[-1]), r["algorithm"].iloc[0],
                        r["protocol"].iloc[0], runner, margin, len(r), first["topology"], int(first["ranks"]), engine,
                        first["dtype"], r["library_algorithm"].iloc[0], r["library_protocol"].iloc[0],
                        r["library_loss"].max()])
    ranges = pd.DataFrame(out, columns=TUNE_COLUMNS)
    if MATRIX in rows:
        traffic = rows.drop_duplicates("collective").set_index("collective")[MATRIX]
        ranges[MATRIX] = ranges["collective"].map(traffic).fillna("")
    return ranges


def _with_library(best: pd.DataFrame, rows: pd.DataFrame) -> pd.DataFrame:
    """best_per_size's rows with the library's pick at each size (the auto rows it chose) and its loss."""
    lib = rows[(rows["algorithm"] == AUTO) & rows.get("chosen_by", pd.Series("", index=rows.index)).astype(str)
               .str.startswith("library")].drop_duplicates(["collective", "size_bytes"])
    lib = lib.set_index(["collective", "size_bytes"])
    algos, protos, loss = [], [], []
    for r in best.itertuples(index=False):
        at = lib.loc[(r.collective, r.size_bytes)] if (r.collective, r.size_bytes) in lib.index else None
        algos.append("" if at is None else at["chosen"])
        protos.append("" if at is None else at["protocol"])
        loss.append(math.nan if at is None else relative_margin(r.time_us, float(at["time_us"])))
    return best.assign(library_algorithm=algos, library_protocol=protos, library_loss=loss)


def library_notes(ranges: pd.DataFrame) -> list[str]:
    """One line per collective: NCCL's pick per size range and the simulated time it loses (tune's table)."""
    out = []
    for coll, part in ranges.groupby("collective", sort=False):
        picked = part[part["library_algorithm"] != ""]
        if picked.empty:
            continue
        spans = [f"{format_size(r.min_size_bytes)}-{format_size(r.max_size_bytes)} {r.library_algorithm}/"
                 f"{r.library_protocol} ({r.library_loss:+.1%})" for r in picked.itertuples(index=False)]
        out.append(f"{coll}: NCCL {NCCL_VERSION}'s cost model picks (simulated time vs the fastest): " + ", ".join(spans))
    return out

