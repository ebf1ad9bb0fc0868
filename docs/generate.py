"""Regenerate the numbers in docs/ from the code, or report where the committed docs drifted.

    python docs/generate.py            # rewrite every generated block in docs/*.md, docs/studies/*.md
    python docs/generate.py --check    # change nothing; list drifted blocks, exit status 1 if any

A generated block sits between two HTML comments, either on lines of its own (a table, a code block)
or inline in a sentence (one number)::

    <!-- generated: switch8-allreduce -->
    | size | winner | ... |
    <!-- /generated -->

    ... takes <!-- generated: time switch8 all_reduce ring 256 -->14.009<!-- /generated --> µs ...

The first word after ``generated:`` names a function registered below with ``@block``; the other
words are its arguments (strings). Every function calls the real code (``hcclsim.sweep``, the
algorithms' option defaults and ``structure_key``), so a block can only hold what the code computes
now. Results are cached per run: a block used in several places costs one computation.
Hand-written figures (benchmark speeds, quoted paper numbers) stay outside blocks.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import math
import os
import re
import sys
from collections.abc import Callable
from pathlib import Path

# Command output in the docs is what a 120-column terminal shows, whoever runs this (an 80-column terminal,
# a pipe, a test worker): tables fit and drop columns by the width (hcclsim.results.report.terminal_width).
os.environ["COLUMNS"] = "120"
DOCS = Path(__file__).resolve().parent
MARK = re.compile(r"<!-- generated: (?P<spec>[^>]*?) -->(?P<body>.*?)<!-- /generated -->", re.DOTALL)
BLOCKS: dict[str, Callable[..., str]] = {}


@dataclasses.dataclass(frozen=True)
class Drift:
    file: str           # relative to the repository root, e.g. docs/algorithms.md
    block: str          # the block's spec as written, e.g. "time switch8 all_reduce ring 256"
    committed: str
    generated: str

    def __str__(self) -> str:
        return (f"{self.file}: block '{self.block}' differs from what the code computes now\n"
                f"  committed: {self.committed.strip()[:300]!r}\n  generated: {self.generated.strip()[:300]!r}")


def block(name: str):
    """Register a block function under ``name``: it takes the block's arguments as strings and
    returns the text to put between the markers."""
    def deco(fn):
        if name in BLOCKS:
            raise ValueError(f"block {name!r} registered twice")
        BLOCKS[name] = fn
        return fn
    return deco


def doc_files() -> list[Path]:
    return sorted(DOCS.glob("*.md")) + sorted(DOCS.glob("studies/*.md"))


def generate(spec: str) -> str:
    name, *args = spec.split()
    if name not in BLOCKS:
        raise KeyError(f"unknown generated block {name!r} (known: {', '.join(sorted(BLOCKS))})")
    return BLOCKS[name](*args)


def render(text: str) -> tuple[str, list[tuple[str, str, str]]]:
    """The text with every block regenerated, and (spec, committed, generated) for each that changed."""
    changed: list[tuple[str, str, str]] = []

    def fill(m: re.Match) -> str:
        spec, body = m["spec"].strip(), m["body"]
        out = generate(spec)
        new = f"\n{out.strip(chr(10))}\n" if body.startswith("\n") else out.strip()
        if new != body:
            changed.append((spec, body, new))
        return f"<!-- generated: {spec} -->{new}<!-- /generated -->"

    return MARK.sub(fill, text), changed


def relative(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(DOCS.parent))
    except ValueError:
        return str(path)


def check_text(text: str, file: str) -> list[Drift]:
    """Drifted blocks of one document's text (the text is not changed)."""
    return [Drift(file, spec, old, new) for spec, old, new in render(text)[1]]


def run(files: list[Path], write: bool) -> list[Drift]:
    drifts: list[Drift] = []
    texts = {path: path.read_text(encoding="utf-8") for path in files}
    prefetch([p for p in study_sections(texts.values()) if p not in FRAMES and p not in PREFETCHED])
    for path in files:
        text = texts[path]
        new, changed = render(text)
        drifts += [Drift(relative(path), spec, old, gen) for spec, old, gen in changed]
        if write and new != text:
            path.write_text(new, encoding="utf-8")
    return drifts


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="report drifted blocks, change nothing (exit 1 on drift)")
    ap.add_argument("files", nargs="*", type=Path, help="markdown files (default: docs/*.md, docs/studies/*.md)")
    ap.add_argument("--frames-to", metavar="DIR", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.frames_to:
        return write_frames(args.frames_to, [str(f) for f in args.files])
    files = args.files or doc_files()
    drifts = run(files, write=not args.check)
    for d in drifts:
        print(d if args.check else f"updated {d.file}: {d.block}", file=sys.stderr)
    return 1 if args.check and drifts else 0


# --------------------------------------------------------------------------------------------------
# Computations: each cached, so the blocks that share one (a table and the prose around it) pay once.

@functools.cache
def sweep(topology: str, collective: str, algorithm: str, sizes: tuple, engine: str = "analytic",
          overrides: tuple = ()):
    import hcclsim
    return hcclsim.sweep(topology=topology, collective=collective, algorithm=algorithm, sizes=list(sizes),
                         engine=engine, overrides=list(overrides))


def row(topology: str, collective: str, algorithm: str, size: str, overrides: tuple = (), engine="analytic"):
    df = sweep(topology, collective, algorithm, (size,), engine, overrides)
    return df[df.engine == engine].iloc[0]


@functools.cache
def load_topology(topology: str, overrides: tuple = ()):
    import hcclsim
    return hcclsim.load_topology(topology, overrides=list(overrides))


def structure_key(spec: str, collective: str, topology: str, size: str, overrides: tuple = ()):
    from hcclsim.core.units import parse_size
    from hcclsim.schedule import collectives as C
    from hcclsim.schedule.algorithm import Problem, load_all, parse_spec
    load_all()
    topo = load_topology(topology, overrides)
    algo = parse_spec(spec)
    sizing = C.sizing(collective, parse_size(size), 4, topo.nranks)
    return algo.structure_key(Problem(collective, topo), sizing, 4)


def option_default(algorithm: str, option: str):
    from hcclsim.schedule.algorithm import load_all
    cls = load_all().get(algorithm)
    return getattr(cls.Options(), option)


def us(x: float) -> str:
    """A time in µs as the docs print it: 3 decimals below 100 µs, else 6 significant digits."""
    if x < 100:
        return f"{x:.3f}"
    return f"{x:.{max(0, 5 - len(str(int(x))) + 1)}f}"


def gbps(x: float, digits: int = 2) -> str:
    return f"{x:.{digits}f}"


def human_size(n: int) -> str:
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return f"{n >> shift} {unit}"
    return f"{n} B"


def splitopts(s: str) -> tuple:
    """Overrides written in a block spec as a,b (no spaces); '-' for none."""
    return () if s in ("-", "") else tuple(s.split(","))


# Inline values ---------------------------------------------------------------------------------------

@block("time")
def _time(topology, collective, algorithm, size, overrides="-"):
    """time_us of one point, analytic engine."""
    return us(row(topology, collective, algorithm, size, splitopts(overrides)).time_us)


@block("time-launch")
def _time_launch(topology, collective, algorithm, size, launch, overrides="-"):
    """time_us of one point under sweep --launch LAUNCH (analytic engine), with --set overrides (a,b or -)."""
    import hcclsim
    df = hcclsim.sweep(topology=topology, collective=collective, algorithm=algorithm, sizes=[size], launch=launch,
                       overrides=list(splitopts(overrides)))
    return us(df[df.engine == "analytic"].iloc[0].time_us)


@block("busbw")
def _busbw(topology, collective, algorithm, size, overrides="-", digits="2"):
    """busbw_GBps of one point, analytic engine."""
    return gbps(row(topology, collective, algorithm, size, splitopts(overrides)).busbw_GBps, int(digits))


@block("chunks")
def _chunks(algorithm, collective, topology, size, overrides="-"):
    """The pipeline chunk count an algorithm picks (its structure_key) at one size."""
    return str(structure_key(algorithm, collective, topology, size, splitopts(overrides)))


@block("default")
def _default(algorithm, option):
    """An algorithm option's default, sizes in KiB/MiB."""
    v = option_default(algorithm, option)
    return human_size(v) if option.endswith("size") else str(v)


# algorithms.md: the switch8 AllReduce table ----------------------------------------------------------

SWITCH8_SIZES = ("256", "64K", "1M", "64M", "1G")


def _points(overrides: tuple = ()):
    df = sweep("switch8", "all_reduce", "all", SWITCH8_SIZES, "analytic", overrides)
    return {s: df[df.size_bytes == s].sort_values(["time_us", "algorithm"]) for s in sorted(set(df.size_bytes))}


def _with_chunks(algorithm: str, size: int) -> str:
    name = f"`{algorithm}`"
    from hcclsim.schedule.algorithm import load_all
    if "chunks" in {f.name for f in dataclasses.fields(load_all().get(algorithm).Options)}:
        name += f" (P = {structure_key(algorithm, 'all_reduce', 'switch8', str(size))})"
    return name


@block("switch8-allreduce")
def _switch8_allreduce():
    lines = ["| size | winner | time | busbw | runner-up | ring | slowest |", "|---|---|---|---|---|---|---|"]
    for size, pts in _points().items():
        win, second, last = pts.iloc[0], pts.iloc[1], pts.iloc[-1]
        ring = pts[pts.algorithm == "ring"].iloc[0]
        slowest = "`ring`" if last.algorithm == "ring" else f"`{last.algorithm}` {us(last.time_us)}"
        lines.append(f"| {human_size(size)} | {_with_chunks(win.algorithm, size)} | {us(win.time_us)} | "
                     f"{gbps(win.busbw_GBps)} | `{second.algorithm}` {us(second.time_us)} | {us(ring.time_us)} | "
                     f"{slowest} |")
    return "\n".join(lines)


def _runs(ranked, place: int) -> str:
    """'`a` from X to Y, `b` at Z': the algorithm in ``place`` (0 fastest) at each size, as runs."""
    runs: list[list] = []
    for size, pts in ranked.items():
        algo = pts.iloc[place].algorithm
        if runs and runs[-1][0] == algo:
            runs[-1][2] = size
        else:
            runs.append([algo, size, size])
    return ", ".join(f"`{a}` " + (f"at {human_size(lo)}" if lo == hi else f"from {human_size(lo)} to {human_size(hi)}")
                     for a, lo, hi in runs)


@block("switch8-winners")
def _switch8_winners(place="0", overrides="-"):
    """Fastest (place 0) or second (1) AllReduce on switch8 over -b 256 -e 1G -f 4, as runs of sizes."""
    df = sweep("switch8", "all_reduce", "all", tuple(str(256 << 2 * k) for k in range(12)), "analytic",
               splitopts(overrides))
    ranked = {s: df[df.size_bytes == s].sort_values(["time_us", "algorithm"]) for s in sorted(set(df.size_bytes))}
    return _runs(ranked, int(place))


# packet.md: analytic vs packet ------------------------------------------------------------------------

def both_engines(topology, collective, algorithm, sizes: tuple, overrides: tuple):
    df = sweep(topology, collective, algorithm, sizes, "analytic,packet", overrides)
    p = df.pivot(index="size_bytes", columns="engine", values="time_us")
    return p.assign(ratio=p["packet"] / p["analytic"])


@block("engines")
def _engines(topology, collective, algorithm, size, overrides="-"):
    """'analytic X µs, packet Y µs' for one point."""
    p = both_engines(topology, collective, algorithm, (size,), splitopts(overrides)).iloc[0]
    return f"analytic {us(p.analytic)} µs, packet {us(p.packet)} µs"


# Port buffers deep enough never to fill, so head-of-line blocking (its own row of the table) stays out.
DEEP = ("scale_up.switch_buffer=1G", "scale_out.switch_buffer=1G")
SHARING_SIZES = ("3M", "12M", "48M")
SHARING_CASES = (("two-tier-128", "fat tree, 16 × 8", ()),
                 ("two-tier-128", "fat tree, 4 × 8", ("scale_out.domains=4",)),
                 ("h100-cluster", "rail, 16 × 8", ()))


def _sharing():
    out = []
    for topology, what, ov in SHARING_CASES:
        for algorithm in ("tree", "halving_doubling"):
            out.append((topology, what, algorithm, both_engines(topology, "all_reduce", algorithm, SHARING_SIZES,
                                                                ov + DEEP)))
    return out


def pct(r: float) -> str:
    x = round((r - 1) * 100, 1)
    return f"{x + 0.0:+.1f} %"     # + 0.0: no "-0.0"


@block("engines-gap")
def _engines_gap(topology, collective, algorithm, size, overrides="-"):
    """packet / analytic - 1 of one point's time."""
    return pct(both_engines(topology, collective, algorithm, (size,), splitopts(overrides)).iloc[0].ratio)


@block("sharing-gap")
def _sharing_gap():
    """packet / analytic time for tree and halving-doubling AllReduce on two-tier fabrics, deep buffers."""
    head = " | ".join(human_size(int(s[:-1]) << 20) for s in SHARING_SIZES)
    lines = [f"| topology | fabric | algorithm | {head} |", "|---|---|---|" + "---|" * len(SHARING_SIZES)]
    for topology, what, algorithm, p in _sharing():
        cells = " | ".join(pct(r) for r in p.ratio)
        lines.append(f"| `{topology}` | {what} | `{algorithm}` | {cells} |")
    return "\n".join(lines)


@block("sharing-range")
def _sharing_range(algorithm):
    """'from A to B': the range of packet/analytic - 1 over the sharing-gap table for one algorithm."""
    rs = [r for _, _, a, p in _sharing() if a == algorithm for r in p.ratio]
    return f"{pct(min(rs))} to {pct(max(rs))}"


# config.md: command lines and their output -----------------------------------------------------------

@functools.cache
def cli_output(args: tuple) -> str:
    import contextlib
    import io

    from hcclsim.cli import main as cli_main
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        status = cli_main(list(args))
    if status != 0:
        raise RuntimeError(f"hccl-bench {' '.join(args)}: exit status {status}: {err.getvalue().strip()}")
    return out.getvalue()


@block("cli")
def _cli(*args):
    """'$ hccl-bench ARGS' and its stdout, indented as a code block."""
    lines = [f"$ hccl-bench {' '.join(args)}", *cli_output(args).rstrip("\n").splitlines()]
    return "\n".join("    " + line for line in lines)


@functools.cache
def _calibrated(log: str, topology: str, algorithm: str, collective: str, sets: str) -> tuple[str, str]:
    """`hccl-bench calibrate` on a log: (its stdout, the calibrated TOML), once per run."""
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "fit.toml"
        args = ["calibrate", str(DOCS.parent / log), "-t", topology, "-a", algorithm, "-c", collective,
                "-o", str(path)]
        for item in splitopts(sets):
            args += ["--set", item]
        out = cli_output(tuple(args))
        return out, path.read_text(encoding="utf-8")


@block("calibrate-fit")
def _calibrate_fit(log, topology, algorithm, collective, sets="-"):
    """The fitted parameters calibrate prints (its 'fitted ...' and following lines), as a code block."""
    lines = _calibrated(log, topology, algorithm, collective, sets)[0].splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("fitted"))
    return "\n".join("    " + line for line in lines[start:] if not line.startswith("wrote "))


@block("calibrate-predict")
def _calibrate_predict(log, topology, algorithm, collective, sets, target_log, target_sets, minbytes):
    """Calibrated on `log`, the busbw error (predicted / measured - 1) at the target log's sizes from
    minbytes, as the range 'lo to hi': the error at a scale the fit did not see."""
    import tempfile

    from hcclsim.analysis.calibrate import launch_of
    from hcclsim.network.config import load_topology
    from hcclsim.results.nccltests import read
    from hcclsim.sweeping.sweep import sweep

    target = DOCS.parent / target_log
    m = read(str(target), collective)
    keep = m.size_bytes >= int(minbytes)
    launch = launch_of(target.read_text(errors="replace"))
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "fit.toml"
        path.write_text(_calibrated(log, topology, algorithm, collective, sets)[1], encoding="utf-8")
        rows = sweep(load_topology(str(path), splitopts(target_sets)), [collective], algorithm,
                     [int(x) for x in m.size_bytes[keep]], launch=launch).rows
    pred = dict(zip(rows.size_bytes, rows.time_us))
    errors = [t / pred[int(s)] - 1 for s, t in zip(m.size_bytes[keep], m.time_us[keep])]  # = busbw ratio - 1
    return f"{min(errors):+.0%} to {max(errors):+.0%}"


@block("tune-first")
def _tune_first(topology):
    """'`algo` at every size from X (T µs) to Y' or the list of ranges, from the tuner on one topology."""
    import hcclsim
    t = hcclsim.tune(topology=topology, collective="all_reduce")
    smallest = row(topology, "all_reduce", t.iloc[0].algorithm, str(int(t.iloc[0].min_size_bytes)))
    ranges = ", ".join(f"`{r.algorithm}` from {human_size(int(r.min_size_bytes))} to {human_size(int(r.max_size_bytes))}"
                       for r in t.itertuples())
    return f"{ranges} ({human_size(int(t.iloc[0].min_size_bytes))}: {us(smallest.time_us)} µs)"


@block("protocol-runs")
def _protocol_runs(topology, collective, algorithm):
    """'LL up to X, LL128 from Y to Z, Simple from W': the protocol auto picks over -b 8 -e 8G -f 2."""
    sizes = tuple(8 << k for k in range(31))
    df = sweep(topology, collective, algorithm, sizes)
    runs = []
    for size, proto in zip(df.size_bytes, df.protocol):
        if runs and runs[-1][0] == proto:
            runs[-1][2] = int(size)
        else:
            runs.append([proto, int(size), int(size)])
    names = {"ll": "LL", "ll128": "LL128", "simple": "Simple", "none": "none"}
    parts = []
    for i, (proto, lo, hi) in enumerate(runs):
        if i == 0:
            parts.append(f"{names[proto]} up to {human_size(hi)}")
        elif i == len(runs) - 1:
            parts.append(f"{names[proto]} from {human_size(lo)}")
        else:
            parts.append(f"{names[proto]} from {human_size(lo)} to {human_size(hi)}")
    return ", ".join(parts)


@block("crossover")
def _crossover(topology, collective, lo, hi, step, overrides="-"):
    """The first size in lo..hi (by step bytes) where -a auto changes algorithm: 'X MB (A to B)'; with --set
    overrides (a,b or -)."""
    from hcclsim.core.units import parse_size
    sizes = tuple(range(parse_size(lo), parse_size(hi) + 1, parse_size(step)))
    df = sweep(topology, collective, "auto", sizes, overrides=splitopts(overrides))
    first = df.chosen.iloc[0]
    for size, chosen in zip(df.size_bytes, df.chosen):
        if chosen != first:
            return f"{size / 1e6:.2f} MB ({first} to {chosen})"
    return f"none between {lo} and {hi}"


# validation.md: the band summary of `hccl-bench validate` ------------------------------------------------

@functools.cache
def validation():
    from hcclsim.analysis import validate as V
    return V.validate()


@block("validation-summary")
def _validation_summary():
    """Every band with a tolerance, over the shipped validation files (skipped presets listed below it)."""
    from hcclsim.analysis import validate as V
    r = validation()

    def pct(x):
        return "" if math.isnan(x) else f"{x * 100:+.1f} %"

    lines = [("| preset | case | band | metric | points | mean abs error | checked | worst checked | tolerance | status "
              "| NCCL's model worst checked |"), "|---|---|---|---|---|---|---|---|---|---|---|"]
    for s in r.summary[r.summary.status != V.INFO].itertuples(index=False):
        lines.append(f"| `{s.preset}` | {s.case} | {V.BAND_LABELS[s.band]} | {s.metric} | {s.points} | "
                     f"{s.mean_abs_error * 100:.1f} % | {s.checked} | {pct(s.worst_checked_error)} | {s.tolerance * 100:.0f} % | "
                     f"{s.status} | {pct(s.nccl_model_worst_checked_error)} |")
    lines += ["", *(f"Skipped: `{v}`{' ' + c if c else ''}: {why}." for v, c, why in r.skipped)]
    return "\n".join(lines)


# One preset's compared points. nccl-tests rounds a size down to whole elements per rank (1048560 B on 3 GPUs),
# so sizes are named by the nearest power of two.
#
#   validation-errors PRESET                                    busbw error per case (rows) and size (columns)
#   validation-value PRESET COLLECTIVE OVERRIDES SIZE COLUMN   one column of validate's points, mean over logs

def nominal(size) -> int:
    return 1 << round(math.log2(int(size)))


def validation_points(preset: str):
    r = validation()
    pts = r.points[r.points.preset == preset]
    return pts.assign(nominal=pts.size_bytes.map(nominal))


@block("validation-errors")
def _validation_errors(preset):
    """busbw error (predicted / measured - 1, mean over the logs of one size) per case and size."""
    from hcclsim.core.units import format_size
    pts = validation_points(preset)
    sizes = sorted(set(pts.nominal))
    lines = ["| case | " + " | ".join(format_size(s) for s in sizes) + " |", "|---|" + "---:|" * len(sizes)]
    for case, p in pts.groupby("case", sort=False):
        err = p.groupby("nominal").busbw_error.mean()
        lines.append(f"| {case} | " + " | ".join(f"{err[s] * 100:+.0f} %" if s in err.index else "" for s in sizes)
                     + " |")
    return "\n".join(lines)


def case_points(preset, collective, overrides, case="-"):
    """One case's points: its preset, collective and --set (a,b or -), and where several cases share them, the
    one whose name contains CASE (underscores for spaces)."""
    pts = validation_points(preset)
    p = pts[(pts.collective == collective) & (pts.overrides == " ".join(splitopts(overrides)))]
    if case != "-":
        p = p[p.case.str.contains(case.replace("_", " "), regex=False)]
    if p.case.nunique() != 1:
        raise ValueError(f"{preset} {collective} {overrides} {case}: {p.case.nunique()} cases")
    return p


def value_text(value, column, digits=0):
    return f"{value * 100:+.{digits}f} %" if column.endswith("_error") else f"{value:.{digits}f}"


@block("validation-value")
def _validation_value(preset, collective, overrides, size, column, case="-", digits="0"):
    """One column of one case's points at one size (OVERRIDES as the case's --set, joined by ',', or '-'; CASE a
    part of the case's name, underscores for spaces, where several cases share the rest; DIGITS after the
    point)."""
    from hcclsim.core.units import parse_size
    p = case_points(preset, collective, overrides, case)
    p = p[p.nominal == nominal(parse_size(size))]
    if p.empty:
        raise ValueError(f"validation-value {preset} {collective} {overrides} {size}: no point")
    return value_text(p[column].mean(), column, int(digits))


@block("validation-worst")
def _validation_worst(preset, collective):
    """The largest busbw error (signed) of a preset's case of one collective without --set, every size."""
    err = case_points(preset, collective, "-").groupby("nominal").busbw_error.mean()
    return value_text(err[err.abs().idxmax()], "busbw_error")


@block("validation-range")
def _validation_range(preset, collective, overrides, lo, hi, column, case="-"):
    """'A to B': the smallest and largest of one column of one case over its sizes LO..HI (means over logs)."""
    from hcclsim.core.units import parse_size
    p = case_points(preset, collective, overrides, case)
    v = p[p.nominal.between(nominal(parse_size(lo)), nominal(parse_size(hi)))].groupby("nominal")[column].mean()
    if v.empty:
        raise ValueError(f"validation-range {preset} {collective} {overrides} {lo} {hi}: no point")
    return f"{value_text(v.min(), column)} to {value_text(v.max(), column)}"


@block("validation-rate")
def _validation_rate(preset, collective, overrides, size1, size2):
    """GB/s of algorithm bandwidth between two sizes of one case's measured times, (S2 - S1) / (t2 - t1): the
    marginal rate, which a fixed cost does not change (means over the logs; OVERRIDES as validation-value)."""
    from hcclsim.core.units import parse_size
    pts = validation_points(preset)
    p = pts[(pts.collective == collective) & (pts.overrides == " ".join(splitopts(overrides)))]
    t = p.groupby("nominal").measured_time_us.mean()
    a, b = nominal(parse_size(size1)), nominal(parse_size(size2))
    return f"{(b - a) / (t[b] - t[a]) / 1e3:.0f}"


# replay.md, validation.md: traces of the test corpus replayed ------------------------------------------
#
#   trace-total TRACE TOPOLOGY COLUMN      one per-trace total
#   trace-bands TRACE... TOPOLOGY [KEY=VALUE...]   measured vs simulated per size band
#
# TRACE is a file, or a folder standing for its files (sorted): the rank files of one job replay as that
# job (hcclsim.results.replay.ranks); KEY=VALUE words are --set overrides of the topology.

@functools.cache
def trace_replay(traces: tuple, topology: str, overrides: tuple = ()):
    from hcclsim.results.replay.formats import read
    from hcclsim.results.replay.ranks import one_job
    from hcclsim.results.replay.timing import time_traces
    paths = [p for t in traces for p in (sorted((DOCS.parent / t).iterdir()) if (DOCS.parent / t).is_dir()
                                           else [DOCS.parent / t])]
    loaded = [read(str(p)) for p in paths]
    job = one_job(loaded)
    return time_traces(loaded if job is None else [job], topology, overrides)


@block("trace-total")
def _trace_total(trace, topology, column):
    """One per-trace total of `hccl-bench replay TRACE -t TOPOLOGY` (us, one decimal; counts as they are)."""
    value = trace_replay((trace,), topology)[2].iloc[0][column]
    return f"{value:.1f}" if isinstance(value, float) else str(value)


@block("trace-bands")
def _trace_bands(*words):
    """Measured vs simulated (auto) per size band, over the timed collectives with a measured time; for the
    ranks of one job, per band and collective, with the slowest rank's kernel over the fastest's."""
    overrides = tuple(w for w in words if "=" in w)
    *traces, topology = [w for w in words if "=" not in w]
    per = trace_replay(tuple(traces), topology, overrides)[0]
    per = per[per.auto_us.notna() & per.measured_us.notna()]
    bands = [(0, 64 << 10), (64 << 10, 1 << 20), (1 << 20, 16 << 20), (16 << 20, 1 << 62)]
    job = "measured_ranks" in per
    if job:
        lines = [("| size band | collective | collectives | ranks | measured: fastest rank (us, median) | "
                  "slowest rank / fastest (median) | simulated auto (us, median) | measured / simulated (median) | "
                  "measured / simulated (range) |"), "|---|---|---|---|---|---|---|---|---|"]
    else:
        lines = ["| size band | collectives | measured (us, median) | simulated auto (us, median) | measured / simulated (median) |",
                 "|---|---|---|---|---|"]
    for lo, hi in bands:
        part = per[(per.size_bytes >= lo) & (per.size_bytes < hi)]
        name = f"{human_size(lo)} – {human_size(hi)}" if hi < 1 << 62 else f"≥ {human_size(lo)}"
        if len(part) and not job:
            lines.append(f"| {name} | {len(part)} | {part.measured_us.median():.1f} | {part.auto_us.median():.1f} | "
                         f"{part.measured_over_auto.median():.2f} |")
        for kind, k in (part.groupby("collective") if job else ()):
            ratio = k.measured_over_auto
            lines.append(f"| {name} | {COLLECTIVE_NAMES.get(kind, kind)} | {len(k)} | "
                         f"{'/'.join(str(n) for n in sorted(set(k.measured_ranks)))} | {k.measured_us.median():.1f} | "
                         f"{(k.measured_max_us / k.measured_us).median():.1f} | {k.auto_us.median():.1f} | "
                         f"{ratio.median():.2f} | {ratio.min():.2f} – {ratio.max():.2f} |")
    return "\n".join(lines)


# docs/studies/*.md: the scenarios' tables ---------------------------------------------------------------
#
# A study block names a scenario and one of its sections and runs that section as `hccl-bench run` does
# (hcclsim.studies.study.run_section), once per generator run; the rest of its words pick rows and format:
#
#   study SCENARIO SECTION COLUMN FILTER...               one value (the filters must leave exactly one row)
#   study-ratio SCENARIO SECTION COLUMN FILTER... / FILTER...   COLUMN of the first row over the second's
#   study-table SCENARIO SECTION rows=A,B [cols=C] values=V,W FILTER...   a pivot of the section's rows
#
# FILTER is KEY=VALUE on a column of the section's table: VALUE as the table holds it, with `+` for a space
# and `|` between alternatives (size_bytes also takes sizes: `size_bytes=1M|1G`). Options: fmt=.2f or
# fmt=COL:.1f,COL:.2f (Python format specs; `pct` on study-ratio prints the ratio as "+x.x %", `x` as
# "1.23×", diff the difference), from=X (study: X minus the value), bold<X (study-table: bold the cells below X),
# head=a|b|c (study-table: the header, `+` for a space), sec=NAME (study-ratio, after `/`: the second row
# from another section of the same scenario).

STUDY_OPTIONS = ("rows", "cols", "values", "fmt", "head", "from", "sec")
COLLECTIVE_NAMES = {"all_reduce": "AllReduce", "all_gather": "AllGather", "reduce_scatter": "ReduceScatter",
                    "all_to_all": "AllToAll", "broadcast": "Broadcast", "reduce": "Reduce"}


@functools.cache
def scenario(name: str):
    from hcclsim.studies import scenario as S
    return S.load(name)


FRAMES: dict = {}


def study_frame(name: str, section: str):
    """The table `hccl-bench run NAME` writes to results/NAME/SECTION.csv (cached per run, like sweep)."""
    if (name, section) not in FRAMES:
        if (name, section) in PREFETCHED:
            FRAMES[name, section] = PREFETCHED.pop((name, section))()
        else:
            from hcclsim.studies import study as R
            sections = {s.name: s for s in scenario(name).sections}
            if section not in sections:
                raise KeyError(f"scenario {name!r} has no section {section!r} (it has: {', '.join(sections)})")
            FRAMES[name, section] = R.run_section(sections[section]).frame
    return FRAMES[name, section]


def _cell_matches(cell, want: str) -> bool:
    if isinstance(cell, (bool, np_bool())):
        return str(bool(cell)).lower() == want.lower()
    if isinstance(cell, str):
        return cell == want
    try:
        return float(cell) == float(want)
    except ValueError:
        from hcclsim.core.units import parse_size
        return float(cell) == parse_size(want)


def np_bool():
    import numpy as np
    return np.bool_


def _split_args(args) -> tuple[dict, dict]:
    """(filters, options) from KEY=VALUE words (bold<X is the option 'bold')."""
    filters, options = {}, {}
    for a in args:
        if a.startswith("bold<"):
            options["bold"] = float(a[5:])
            continue
        key, sep, value = a.partition("=")
        if not sep:
            raise ValueError(f"study block argument {a!r}: expected KEY=VALUE")
        (options if key in STUDY_OPTIONS else filters)[key] = value.replace("+", " ")
    return filters, options


def _select(frame, filters: dict):
    for key, value in filters.items():
        if key not in frame.columns:
            raise KeyError(f"no column {key!r} (columns: {', '.join(frame.columns)})")
        wants = value.split("|")
        frame = frame[[any(_cell_matches(c, w) for w in wants) for c in frame[key]]]
    return frame


def _one(frame, filters: dict, what: str):
    rows = _select(frame, filters)
    if len(rows) != 1:
        raise ValueError(f"{what}: {len(rows)} rows match {filters} (expected 1)")
    return rows.iloc[0]


def _formats(spec: str | None, columns, default: str = ".2f") -> dict:
    out = {c: default for c in columns}
    for part in (spec or "").split(","):
        if not part:
            continue
        col, sep, f = part.rpartition(":")
        if sep:
            out[col] = f
        else:
            out = {c: f for c in columns}
    return out


def _label(column: str, value) -> str:
    """A table cell naming a row or a column: sizes in KiB/MiB, collectives by name, algorithms as code."""
    if column == "size_bytes":
        return human_size(int(value))
    if column == "collective":
        return COLLECTIVE_NAMES.get(value, value)
    if column in ("algorithm", "variant"):
        return f"`{value}`"
    if isinstance(value, (bool, np_bool())):
        return "yes" if value else "no"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


@block("study")
def _study(name, section, column, *args):
    """One value of a scenario section's table."""
    filters, options = _split_args(args)
    v = float(_one(study_frame(name, section), filters, f"{name} {section}")[column])
    if "from" in options:
        v = float(options["from"]) - v
    return format(v, _formats(options.get("fmt"), [column])[column])


@block("study-ratio")
def _study_ratio(name, section, column, *args):
    """COLUMN of one row over COLUMN of another ('/' between their filters): '1.07', '+1.6 %' or '1.07×'."""
    if "/" not in args:
        raise ValueError("study-ratio: filters of the two rows separated by '/'")
    cut = args.index("/")
    fa, oa = _split_args(args[:cut])
    fb, ob = _split_args(args[cut + 1:])
    a = float(_one(study_frame(name, section), fa, f"{name} {section}")[column])
    other = ob.get("sec", section)
    b = float(_one(study_frame(name, other), fb, f"{name} {other}")[column])
    how = oa.get("fmt") or ob.get("fmt") or ".2f"
    if how == "pct":
        return pct(a / b)
    if how == "x":
        return f"{a / b:.2f}×"
    if how.startswith("diff"):                  # diff or diff.1f: the difference a - b
        return format(a - b, how[4:] or ".0f")
    return format(a / b, how)


@block("study-time")
def _study_time(name, section, collective, algorithm, size, launch="host"):
    """One collective's time (µs) on a section's topology with its `set` overrides, as a workload section's
    collectives are timed (hcclsim.sweep, host launch unless given)."""
    raw = next(s for s in scenario(name).sections if s.name == section).raw
    import hcclsim
    df = hcclsim.sweep(topology=raw.get("topology", "dgx-h100"), collective=collective, algorithm=algorithm,
                       sizes=[size], dtype=raw.get("dtype", "bfloat16"), overrides=list(raw.get("set", [])),
                       launch=launch)
    return f"{float(df.iloc[0].time_us):.0f}"


def _order(frame, columns) -> list:
    """Distinct combinations of ``columns`` in the order each value first appears in the table."""
    ranks = {c: {v: i for i, v in enumerate(dict.fromkeys(frame[c].astype(str)))} for c in columns}
    keys = dict.fromkeys(tuple(str(x) for x in r) for r in frame[list(columns)].itertuples(index=False))
    return sorted(keys, key=lambda k: tuple(ranks[c][v] for c, v in zip(columns, k)))


@block("study-table")
def _study_table(name, section, *args):
    """A pivot of a section's table: a row per combination of `rows`, a cell per `cols` value and `values`
    column; row labels repeated from the row above are left blank."""
    filters, options = _split_args(args)
    frame = _select(study_frame(name, section), filters)
    if frame.empty:
        raise ValueError(f"{name} {section}: no rows match {filters}")
    rows = options["rows"].split(",")
    values = options["values"].split(",")
    cols = options["cols"].split(",") if options.get("cols") else []
    fmts = _formats(options.get("fmt"), values)
    strs = frame.astype(str)
    col_keys = _order(frame, cols) if cols else [()]
    first = {c: frame[c].iloc[[list(strs[c]).index(v) for v in dict.fromkeys(strs[c])]].tolist() for c in cols}
    col_label = {c: dict(zip(dict.fromkeys(strs[c]), first[c])) for c in cols}

    def head_of(ck, v):
        parts = [_label(c, col_label[c][x]) for c, x in zip(cols, ck)]
        return " ".join(parts + ([v] if len(values) > 1 or not cols else []))

    head = options["head"].split("|") if "head" in options else \
        rows + [head_of(ck, v) for ck in col_keys for v in values]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    previous = None
    for rk in _order(frame, rows):
        mask = (strs[rows] == list(rk)).all(axis=1)
        part, pstrs = frame[mask], strs[mask]
        originals = part.iloc[0][rows].tolist()
        labels = [_label(c, v) for c, v in zip(rows, originals)]
        shown = list(labels)
        if previous:
            for i, (a, b) in enumerate(zip(labels, previous)):
                if a != b:
                    break
                shown[i] = ""
        previous = labels
        cells = []
        for ck in col_keys:
            sel = part[(pstrs[cols] == list(ck)).all(axis=1)] if cols else part
            for v in values:
                if sel.empty:
                    cells.append("–")
                    continue
                if len(sel) != 1:
                    raise ValueError(f"{name} {section}: {len(sel)} rows for {dict(zip(rows, rk))} {ck} (expected 1)")
                x = float(sel.iloc[0][v])
                text = format(x, fmts[v])
                cells.append(f"**{text}**" if "bold" in options and x < options["bold"] else text)
        lines.append("| " + " | ".join(shown + cells) + " |")
    return "\n".join(lines)


def _replay_sections(name, sections):
    return [(s, study_frame(name, s)) for s in sections]


@block("replay-totals")
def _replay_totals(name, *sections):
    """A replay's totals side by side: auto, best_fixed (+% over auto), every algorithm covering all ops
    (× auto), then the others, with how many ops each covers."""
    frames = _replay_sections(name, sections)
    nops = {s: int(f[f.kind == "op"].op.nunique()) for s, f in frames}
    totals = {s: f[f.kind == "total"].set_index("algorithm") for s, f in frames}
    first = totals[sections[0]]
    full = [a for a in first.index if a not in ("auto", "best_fixed") and first.ops_covered[a] == nops[sections[0]]]
    rest = sorted((a for a in first.index if a not in ("auto", "best_fixed", *full)),
                  key=lambda a: first.total_us[a])
    lines = ["| algorithm | " + " | ".join(f"{s} µs | ops" for s in sections) + " |",
             "|---|" + "---|---|" * len(sections)]
    for algo in ["auto", "best_fixed", *full, *rest]:
        cells = []
        for s in sections:
            t = totals[s]
            if algo not in t.index:
                cells += ["–", "–"]
                continue
            v, auto = float(t.total_us[algo]), float(t.total_us["auto"])
            text = f"{v:.1f}"
            if algo == "auto":
                text = f"**{text}**"
            elif algo == "best_fixed":
                text += f" ({pct(v / auto)})"
            elif algo in full:
                text += f" ({v / auto:.1f}×)"
            cells += [text, str(int(t.ops_covered[algo]))]
        lines.append(f"| `{algo}` | " + " | ".join(cells) + " |")
    return "\n".join(lines)


@block("replay-chosen")
def _replay_chosen(name, *sections):
    """Per op: what auto chose in each section and its time per call (µs)."""
    frames = _replay_sections(name, sections)
    autos = {s: f[(f.kind == "op") & (f.algorithm == "auto")].set_index("op") for s, f in frames}
    base = autos[sections[0]]
    lines = ["| op | label | size | " + " | ".join(f"{s} | µs" for s in sections) + " |",
             "|---|---|---|" + "---|---|" * len(sections)]
    for op, r in base.iterrows():
        cells = []
        for s in sections:
            a = autos[s].loc[op]
            cells += [f"`{a.chosen}`", f"{float(a.time_us):.2f}"]
        lines.append(f"| {op} | {r.label} | {human_size(int(r.size_bytes))} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


@block("replay-op")
def _replay_op(name, section, algorithm, op, column="time_us", fmt=".2f"):
    """One op's row of a replay for one algorithm: its time per call (or another column)."""
    f = study_frame(name, section)
    r = _one(f[f.kind == "op"], {"algorithm": algorithm, "op": op}, f"{name} {section}")
    return format(float(r[column]), fmt)


@block("replay-total")
def _replay_total(name, section, algorithm, fmt=".1f"):
    f = study_frame(name, section)
    return format(float(_one(f[f.kind == "total"], {"algorithm": algorithm}, f"{name} {section}").total_us), fmt)


@block("endpoint")
def _endpoint(topology, field, unit="us"):
    """A preset's [endpoint] value: launch_overhead in µs, ..."""
    v = getattr(load_topology(topology).endpoint, field)
    return f"{v * 1e6:g}" if unit == "us" else f"{v:g}"


# Studies run in a second process while this one computes the other blocks (the machine has at least two
# cores in CI; the study sections take ~15 s, the validation block ~20 s): `run` starts it, study_frame
# takes the frames from it. A failure there is raised here, where the block asks for its frame.
PREFETCHED: dict = {}


def study_sections(texts) -> list[tuple[str, str]]:
    """(scenario, section) of every study block in the texts, in order, once."""
    found = []
    for text in texts:
        for m in MARK.finditer(text):
            name, *args = m["spec"].split()
            if name.startswith(("study", "replay-")) and name != "study-time":
                found.append((args[0], args[1]))
                if name in ("replay-totals", "replay-chosen"):
                    found += [(args[0], s) for s in args[2:]]
                if "/" in args:
                    found += [(args[0], a[4:]) for a in args if a.startswith("sec=")]
    return list(dict.fromkeys(found))


def prefetch(pairs) -> None:
    import os
    import pickle
    import subprocess
    import tempfile
    if len(pairs) < 2 or (os.cpu_count() or 1) < 2:
        return
    out = Path(tempfile.mkdtemp(prefix="docs-studies-"))
    proc = subprocess.Popen([sys.executable, str(Path(__file__).resolve()), "--frames-to", str(out),
                             *(f"{n}:{s}" for n, s in pairs)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)

    def take(n, s):
        def get():
            err = proc.communicate()[1] if proc.returncode is None else b""
            path = out / f"{n}+{s}.pkl"
            if not path.is_file():
                raise RuntimeError(f"computing {n} {s} in the study process failed: {err.decode()[-2000:]}")
            frame = pickle.loads(path.read_bytes())
            path.unlink()
            if not any(out.iterdir()):
                out.rmdir()
            return frame
        return get
    for n, s in pairs:
        PREFETCHED[(n, s)] = take(n, s)


def write_frames(out: str, pairs) -> int:
    """--frames-to: compute the study sections and pickle each (the second process of prefetch)."""
    import pickle
    for pair in pairs:
        n, _, s = pair.partition(":")
        (Path(out) / f"{n}+{s}.pkl").write_bytes(pickle.dumps(study_frame(n, s)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
