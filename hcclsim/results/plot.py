"""Pictures of results files, behind `hccl-bench plot FILE... -o OUT.png|OUT.svg`.

A metric (busbw by default, time, algbw; several give several rows of panels) against message size:
sizes on a log2 axis labelled in binary units (1K, 1M, 1G), one panel per collective, one line per
algorithm (by="algorithm") or per input file (by="file", to compare runs), the topology in the
title. The files are read by load_results (CSV, JSON or Parquet, as `hccl-bench sweep -o`
writes them); algbw is recomputed from them exactly as nccl-tests defines it,

    algbw_GBps = size_bytes / (time_us * 1e-6) / 1e9.

matplotlib is an optional extra (`pip install 'hccl-bench[plot]'`), imported only when a picture is
drawn, with the Agg canvas and no pyplot (no global state). Every bad input raises ConfigError.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd

from ..core.errors import ConfigError, suggest
from ..core.units import format_size
from ..schedule import collectives as C
from .read import KEYS, describe, load_results
from .safefile import replace

# metric name -> (column, axis label, log-scaled y)
METRICS = {
    "busbw": ("busbw_GBps", "busbw (GB/s)", False),
    "time": ("time_us", "time (us)", True),
    "algbw": ("algbw_GBps", "algbw (GB/s)", False),
}
BY = ("algorithm", "file")
SUFFIXES = (".png", ".svg")
IDENTITY = ["topology", "ranks", "engine", "dtype"]      # beside algorithm/file: what tells lines apart
MISSING = "plotting needs matplotlib: pip install 'hccl-bench[plot]'"
MAX_TICKS = 9


# ------------------------------------------------------------------------------------------ inputs

def parse_metrics(text: str) -> list[str]:
    """'busbw' or 'busbw,time' -> ['busbw', 'time'] (also accepts the column names busbw_GBps...)."""
    aliases = {**{m: m for m in METRICS}, **{col: m for m, (col, _, _) in METRICS.items()}}
    out = []
    for name in (s.strip() for s in str(text).split(",")):
        if name not in aliases:
            raise ConfigError(f"--metric: unknown metric {name!r}{suggest(name, METRICS)}; "
                              f"expected one of: {', '.join(METRICS)} (or several, comma-separated)")
        if aliases[name] not in out:
            out.append(aliases[name])
    return out


def check_output(path: str) -> Path:
    p = Path(path)
    if p.suffix.lower() not in SUFFIXES:
        raise ConfigError(f"-o {path!r}: unknown picture format {p.suffix or '(no suffix)'!r}; "
                          f"expected a file ending in {' or '.join(SUFFIXES)}")
    return p


def file_labels(paths) -> list[str]:
    """Each file's name, or the path as given when two files share a name."""
    names = [Path(p).name for p in paths]
    return names if len(set(names)) == len(names) else [str(p) for p in paths]


def load(paths, by: str = "algorithm", collectives=None) -> pd.DataFrame:
    """The files as one frame with a `file` column and algbw_GBps; filtered to `collectives`."""
    if by not in BY:
        raise ConfigError(f"--by: expected one of {', '.join(BY)}, got {by!r}")
    if not paths:
        raise ConfigError("plot: give at least one results file")
    frames = []
    for path, label in zip(paths, file_labels(paths)):
        df = load_results(str(path), "plot")
        frames.append(df.assign(file=label))
    data = pd.concat(frames, ignore_index=True)
    if by == "algorithm" and len(paths) > 1:
        dup = data.duplicated(KEYS, keep=False)
        if dup.any():
            raise ConfigError(f"the files share {int(dup.sum())} rows (e.g. {describe(data[dup].iloc[0])}); "
                              f"to compare runs use --by file")
    if collectives:
        wanted = [C.canonical(c, "-c") for c in collectives]
        present = list(dict.fromkeys(data.collective))
        for c in wanted:
            if c not in present:
                raise ConfigError(f"-c {c}: no rows of that collective; the files hold: {', '.join(present)}")
        data = data[data.collective.isin(wanted)]
    time_s = data.time_us.to_numpy(float) * 1e-6
    with np.errstate(divide="ignore", invalid="ignore"):
        data = data.assign(algbw_GBps=np.where(time_s > 0, data.size_bytes / time_s / 1e9, 0.0))
    return data[data.size_bytes > 0].reset_index(drop=True)


# ------------------------------------------------------------------------------------------- axes

def size_ticks(lo: int, hi: int) -> list[int]:
    """Powers of two spanning [lo, hi], every 1, 2, 5, 10 or 20 doublings: at most MAX_TICKS of them,
    on 1K/1M/1G when the step allows."""
    a, b = math.floor(math.log2(max(lo, 1))), math.ceil(math.log2(max(hi, 1)))
    for step in (1, 2, 5, 10, 20, 40):
        exps = [e for e in range(a, b + 1) if e % step == 0]
        if len(exps) <= MAX_TICKS:
            break
    return [1 << e for e in exps] or [1 << a]


def line_label(key: dict, varying: list[str], by: str) -> str:
    head = key["file"] if by == "file" else key["algorithm"]
    rest = [str(key[c]) + (" ranks" if c == "ranks" else "") for c in varying]
    return head + (f" ({', '.join(rest)})" if rest else "")


def title(data: pd.DataFrame) -> str:
    """'dgx-h100 · 16 ranks · analytic engine', naming every topology when the files hold several."""
    tops = data[["topology", "ranks"]].drop_duplicates()
    parts = ["; ".join(f"{t} · {r} ranks" for t, r in tops.itertuples(index=False))]
    for col, unit in (("engine", " engine"), ("dtype", "")):
        values = list(dict.fromkeys(data[col]))
        if len(values) == 1:
            parts.append(f"{values[0]}{unit}")
    return " · ".join(parts)


# ------------------------------------------------------------------------------------------ drawing

def _matplotlib():
    try:
        import matplotlib
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
        from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator
    except ImportError:
        raise ConfigError(MISSING) from None
    return matplotlib, Figure, FigureCanvasAgg, FixedLocator, FuncFormatter, NullLocator


RC = {"svg.fonttype": "none", "svg.hashsalt": "hccl-bench", "font.size": 9, "axes.titlesize": 10,
      "legend.fontsize": 8, "axes.grid": True, "grid.alpha": 0.3}    # SVGs repeat byte for byte


def _save(fig, out: Path) -> None:
    meta = {"Date": None} if out.suffix.lower() == ".svg" else {}
    try:
        replace(out, lambda tmp: fig.savefig(tmp, format=out.suffix.lower()[1:], metadata=meta))
    except OSError as e:
        raise ConfigError(f"-o {str(out)!r}: cannot write ({e.strerror or e})") from None


def draw(data: pd.DataFrame, out, metrics=("busbw",), by: str = "algorithm") -> Path:
    """Write the picture of `data` (from load) to `out` (.png or .svg); returns the path written."""
    out = check_output(str(out))
    mpl, Figure, FigureCanvasAgg, FixedLocator, FuncFormatter, NullLocator = _matplotlib()
    if data.empty:
        raise ConfigError("plot: no rows to draw (every size is 0, or -c left nothing)")
    colls = list(dict.fromkeys(data.collective))
    line_by = ["file", "algorithm"] if by == "file" else ["algorithm"]
    varying = [c for c in (["algorithm"] if by == "file" else []) + IDENTITY if data[c].nunique() > 1]
    groups = list(data.groupby(line_by + IDENTITY, sort=False))
    colors = {name: i for i, name in enumerate(dict.fromkeys(k for k, _ in groups))}
    ticks = size_ticks(int(data.size_bytes.min()), int(data.size_bytes.max()))

    with mpl.rc_context(RC):
        fig = Figure(figsize=(5.6 * len(colls), 3.6 * len(metrics) + 0.4), dpi=100, layout="constrained")
        FigureCanvasAgg(fig)
        axes = fig.subplots(len(metrics), len(colls), squeeze=False)
        cycle = mpl.rcParams["axes.prop_cycle"].by_key()["color"]
        for row, metric in enumerate(metrics):
            col_name, ylabel, logy = METRICS[metric]
            for j, coll in enumerate(colls):
                ax = axes[row][j]
                for key, part in groups:
                    part = part[part.collective == coll].sort_values("size_bytes")
                    if logy:
                        part = part[part[col_name] > 0]
                    if part.empty:
                        continue
                    named = dict(zip(line_by + IDENTITY, key))
                    ax.plot(part.size_bytes, part[col_name], marker="o", markersize=2.5, linewidth=1.4,
                            color=cycle[colors[key] % len(cycle)], label=line_label(named, varying, by))
                ax.set_xscale("log", base=2)
                ax.xaxis.set_major_locator(FixedLocator(ticks))
                ax.xaxis.set_minor_locator(NullLocator())
                ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _pos: format_size(round(x))))
                if logy:
                    ax.set_yscale("log")
                else:
                    ax.set_ylim(bottom=0)
                ax.set_title(coll)
                ax.set_xlabel("message size (bytes)")
                ax.set_ylabel(ylabel)
                if ax.lines:
                    ax.legend(loc="upper left" if not logy else "lower right", frameon=False)
        fig.suptitle(title(data))
        _save(fig, out)
    return out


def draw_bars(values: pd.DataFrame, out, ylabel: str, title_text: str) -> Path:
    """A grouped bar chart: one group per row of `values` (its index labels the group), one bar per
    column (a series, e.g. a workload's variants). Written to `out` (.png or .svg)."""
    out = check_output(str(out))
    mpl, Figure, FigureCanvasAgg, *_ = _matplotlib()
    groups, series = [str(i) for i in values.index], [str(c) for c in values.columns]
    with mpl.rc_context(RC):
        fig = Figure(figsize=(max(5.6, 0.35 * len(groups) * len(series) + 2), 4.2), dpi=100, layout="constrained")
        FigureCanvasAgg(fig)
        ax = fig.subplots()
        cycle = mpl.rcParams["axes.prop_cycle"].by_key()["color"]
        width = 0.8 / max(len(series), 1)
        for k, name in enumerate(series):
            xs = [g + (k - (len(series) - 1) / 2) * width for g in range(len(groups))]
            ax.bar(xs, values.iloc[:, k].to_numpy(), width=width, label=name, color=cycle[k % len(cycle)])
        ax.set_xticks(range(len(groups)), groups, rotation=20 if max(map(len, groups)) > 14 else 0, ha="right"
                      if max(map(len, groups)) > 14 else "center")
        ax.set_ylabel(ylabel)
        ax.set_ylim(bottom=0)
        ax.grid(axis="x", visible=False)
        ax.legend(frameon=False, ncols=min(len(series), 4))
        fig.suptitle(title_text)
        _save(fig, out)
    return out


def plot_files(paths, out, metrics=("busbw",), by: str = "algorithm", collectives=None) -> Path:
    """load + draw: the Python side of `hccl-bench plot`."""
    check_output(str(out))
    metrics = parse_metrics(",".join(metrics)) if not isinstance(metrics, str) else parse_metrics(metrics)
    _matplotlib()
    return draw(load(paths, by, collectives), out, metrics, by)
