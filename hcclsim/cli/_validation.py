"""How `hccl-bench validate` prints its result: per case the predicted vs measured busbw per size, then the
bands against their tolerances (cli/validate.py holds the command, which imports this when it runs)."""

from __future__ import annotations

import json
import math
import sys

from ..analysis import validate as V
from ..core.version import __version__
from ..results.report import Col, Console, print_table


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
    """Per case the measured and predicted busbw and time per size (and NCCL's own cost model's busbw, where it
    has one), then the bands, in tables that fit the terminal (hcclsim.results.report.print_table: NCCL's
    model's columns go first when it is narrow, then n and the time columns), on stderr."""
    file = file or sys.stderr
    con = Console(file=file, highlight=False, soft_wrap=True)
    if not r.points.empty:
        for (val, case), pts in r.points.groupby(["validation", "case"], sort=False):
            first = pts.iloc[0]
            where = f"{first.preset} {first.overrides}".strip()
            per = list(V.per_size(pts).itertuples(index=False))
            nccl = [Col("NCCL's model\nbusbw", [_num(x.nccl_model_busbw_GBps) for x in per], 5),
                    Col("\nerror", [_pct(x.nccl_model_busbw_error) for x in per], 5)] \
                if any(math.isfinite(x.nccl_model_busbw_GBps) for x in per) else []
            print_table(f"{val}: {case} -- {first.collective} -a {first.algorithm} on {where}", [
                Col("size", [V.size_label(x.size_bytes) for x in per]),
                Col("n", [str(x.points) for x in per], 4),
                Col("busbw\nmeasured", [_num(x.measured_busbw_GBps) for x in per]),
                Col("\npredicted", [_num(x.predicted_busbw_GBps) for x in per]),
                Col("\nerror", [_pct(x.busbw_error) for x in per]),
                Col("time (us)\nmeasured", [_num(x.measured_time_us) for x in per], 3),
                Col("\npredicted", [_num(x.predicted_time_us) for x in per], 2),
                Col("\nerror", [_pct(x.time_error) for x in per], 1),
                Col("chosen", [str(x.chosen) for x in per], left=True), *nccl], file)
        render_summary(r, file)
    for val, case, n, what in r.excluded:
        con.print(f"hccl-bench validate: {val}: {case}: excluded {n} rows of {what}", markup=False)
    for val, case, why in r.skipped:
        con.print(f"hccl-bench validate: skipped {val}{': ' + case if case else ''}: {why}", markup=False)
    s = r.summary
    gated = s[s.status != V.INFO] if len(s) else s
    failed = int((gated.status == V.FAIL).sum()) if len(gated) else 0
    con.print(f"hccl-bench validate: {len(r.points)} points, {len(gated)} bands with a tolerance, "
              f"{failed} out of tolerance", markup=False)


def render_summary(r: V.Result, file) -> None:
    rows = list(r.summary.itertuples(index=False))
    nccl = [Col("NCCL's model\nworst checked", [_pct(x.nccl_model_worst_checked_error) for x in rows], 2)] \
        if any(math.isfinite(x.nccl_model_worst_checked_error) for x in rows) else []
    print_table("bands (error = predicted / measured - 1; tolerance: every checked point)", [
        Col("preset", [x.preset for x in rows], 3, left=True),
        Col("case", [x.case for x in rows], left=True),
        Col("band", [V.BAND_LABELS[x.band] for x in rows], left=True),
        Col("metric", [x.metric for x in rows], left=True),
        Col("points", [str(x.points) for x in rows], 1),
        Col("mean\n|error|", [_pct(x.mean_abs_error)[1:] for x in rows]),
        Col("\nworst", [_pct(x.worst_error) for x in rows]),
        Col("\nchecked", [str(x.checked) for x in rows]),
        Col("worst\nchecked", [_pct(x.worst_checked_error) for x in rows]),
        Col("\ntolerance", ["" if not math.isfinite(x.tolerance) else f"{x.tolerance * 100:.0f}%" for x in rows]),
        Col("\nstatus", [x.status for x in rows], left=True), *nccl], file)
