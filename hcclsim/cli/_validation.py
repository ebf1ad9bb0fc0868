"""How `hccl-bench validate` prints its result: per case the predicted vs measured busbw per size, then the
bands against their tolerances (cli/validate.py holds the command, which imports this when it runs)."""

from __future__ import annotations

import json
import math
import shutil
import sys

from rich.console import Console
from rich.table import Table

from ..analysis import validate as V
from ..core.version import __version__


def to_json(r: V.Result) -> str:
    def records(df):
        return [{k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in row.items()}
                for row in df.to_dict(orient="records")]

    doc = {"hccl_bench_version": __version__, "rows": records(r.points), "summary": records(r.summary),
           "skipped": [dict(zip(("validation", "case", "reason"), s)) for s in r.skipped],
           "excluded": [dict(zip(("validation", "case", "rows", "what"), e)) for e in r.excluded]}
    return json.dumps(doc, indent=2, default=str) + "\n"


def _pct(x: float) -> str:
    return "" if x is None or not math.isfinite(x) else f"{x * 100:+.1f}%"


def _num(x: float, digits: int = 2) -> str:
    return "" if x is None or not math.isfinite(x) else f"{x:.{digits}f}"


def render(r: V.Result, file=None) -> None:
    con = Console(file=file or sys.stderr, width=max(shutil.get_terminal_size((200, 24)).columns, 200),
                  highlight=False, soft_wrap=False)
    if not r.points.empty:
        for (val, case), pts in r.points.groupby(["validation", "case"], sort=False):
            first = pts.iloc[0]
            where = f"{first.preset} {first.overrides}".strip()
            t = Table(title=f"{val}: {case} -- {first.collective} -a {first.algorithm} on {where}",
                      title_justify="left", box=None, header_style="bold")
            for col in ("size", "n", "measured busbw", "predicted", "error", "measured time (us)", "predicted",
                        "error", "chosen"):
                t.add_column(col, justify="left" if col == "chosen" else "right", no_wrap=True)
            for s in V.per_size(pts).itertuples(index=False):
                t.add_row(V.size_label(s.size_bytes), str(s.points), _num(s.measured_busbw_GBps),
                          _num(s.predicted_busbw_GBps), _pct(s.busbw_error), _num(s.measured_time_us),
                          _num(s.predicted_time_us), _pct(s.time_error), str(s.chosen))
            con.print(t)
            con.print()
        render_summary(r, con)
    for val, case, n, what in r.excluded:
        con.print(f"hccl-bench validate: {val}: {case}: excluded {n} rows of {what}", markup=False)
    for val, case, why in r.skipped:
        con.print(f"hccl-bench validate: skipped {val}{': ' + case if case else ''}: {why}", markup=False)
    s = r.summary
    gated = s[s.status != V.INFO] if len(s) else s
    failed = int((gated.status == V.FAIL).sum()) if len(gated) else 0
    con.print(f"hccl-bench validate: {len(r.points)} points, {len(gated)} bands with a tolerance, "
              f"{failed} out of tolerance", markup=False)


def render_summary(r: V.Result, con: Console) -> None:
    t = Table(title="bands (error = predicted / measured - 1; tolerance: every checked point)",
              title_justify="left", box=None, header_style="bold")
    for col in ("preset", "case", "band", "metric", "points", "mean |error|", "worst", "checked",
                "worst checked", "tolerance", "status"):
        t.add_column(col, justify="left" if col in ("preset", "case", "band", "metric", "status") else "right",
                     no_wrap=True)
    for s in r.summary.itertuples(index=False):
        style = {V.FAIL: "red", V.PASS: "green"}.get(s.status, "dim")
        t.add_row(s.preset, s.case, V.BAND_LABELS[s.band], s.metric, str(s.points), _pct(s.mean_abs_error)[1:],
                  _pct(s.worst_error), str(s.checked), _pct(s.worst_checked_error),
                  "" if not math.isfinite(s.tolerance) else f"{s.tolerance * 100:.0f}%", f"[{style}]{s.status}[/]")
    con.print(t)
