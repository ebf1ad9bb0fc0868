"""The picture of `hccl-bench validate --plot FILE.png`: predicted (line) vs measured (dots) busbw against
message size, one panel per case. matplotlib is the plot extra (hcclsim/results/plot.py's helpers)."""

from __future__ import annotations

import math

import pandas as pd

from ..core.units import format_size
from ..results import plot as P

COLUMNS = 3


def check(path: str):
    """The output path, checked before anything runs (suffix; matplotlib installed)."""
    out = P.check_output(path)
    P._matplotlib()
    return out


def draw(points: pd.DataFrame, path: str):
    out = check(path)
    mpl, Figure, FigureCanvasAgg, FixedLocator, FuncFormatter, NullLocator = P._matplotlib()
    cases = list(points.groupby(["validation", "case"], sort=False))
    ncols = min(COLUMNS, len(cases))
    nrows = math.ceil(len(cases) / ncols)
    with mpl.rc_context(P.RC):
        fig = Figure(figsize=(5.0 * ncols, 3.4 * nrows + 0.4), dpi=100, layout="constrained")
        FigureCanvasAgg(fig)
        axes = fig.subplots(nrows, ncols, squeeze=False)
        for k, ((val, case), pts) in enumerate(cases):
            ax = axes[k // ncols][k % ncols]
            pts = pts.sort_values("size_bytes")
            pred = pts.drop_duplicates("size_bytes")
            ax.plot(pts.size_bytes, pts.measured_busbw_GBps, "o", markersize=3, color="C1", label="measured")
            ax.plot(pred.size_bytes, pred.predicted_busbw_GBps, "-", linewidth=1.4, color="C0",
                    label=f"predicted (-a {pts.algorithm.iloc[0]})")
            ax.set_xscale("log", base=2)
            ticks = P.size_ticks(int(pts.size_bytes.min()), int(pts.size_bytes.max()))
            ax.xaxis.set_major_locator(FixedLocator(ticks))
            ax.xaxis.set_minor_locator(NullLocator())
            ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _pos: format_size(round(x))))
            ax.set_ylim(bottom=0)
            ax.set_title(f"{val}: {case}", fontsize=8)
            ax.set_xlabel("message size (bytes)")
            ax.set_ylabel("busbw (GB/s)")
            ax.legend(loc="upper left", frameon=False)
        for k in range(len(cases), nrows * ncols):
            axes[k // ncols][k % ncols].set_visible(False)
        fig.suptitle("hccl-bench validate: predicted vs published busbw (analytic engine)")
        P._save(fig, out)
    return out
