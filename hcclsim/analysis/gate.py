"""The performance gate behind `hccl-bench compare BASELINE CURRENT`: pure logic, no printing.

Two results files (CSV, JSON or Parquet, as `hccl-bench sweep -o` writes them) are matched row by
row on KEYS. For each common row and each metric the relative change is

    change = (current - baseline) / baseline          (0 when both are 0, +-inf when only baseline is 0)

time_us regresses when it rises, busbw_GBps when it falls. A row regresses when a metric moved in
its bad direction by more than that metric's limit (--tolerance, default 5 %, or --fail-on
METRIC:THRESHOLD; never below NOISE = 1e-5, CSV's 6-digit rounding), and improves when a metric
moved the good way by more than the limit and none regressed. Rows present in only one file are
counted and listed; they fail the gate only when strict.

Bad input (a missing or unreadable file, an unknown format, an unsupported schema version, missing
key or metric columns, a value that is not what its column holds -- a negative, infinite or NaN time,
ranks = 8.7, an empty key: hcclsim.results.read --, duplicate keys, no common rows, common all_to_allv rows
of different traffic matrices -- another --matrix, or one matrix file with other contents --) raises
ConfigError: exit status 2, never a pass.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from xml.etree import ElementTree as ET

import numpy as np
import pandas as pd

from ..core.errors import ConfigError, suggest
from ..results.provenance import input_differences, read_metadata, shown
from ..results.read import KEYS, describe, is_log, load_results
from ..sweeping.sweep import MATRIX

# metric name on the command line -> (column, +1 if a rise is a regression, -1 if a fall is)
METRICS = {"time": ("time_us", +1), "busbw": ("busbw_GBps", -1)}
ALIASES = {**{m: m for m in METRICS}, **{col: m for m, (col, _) in METRICS.items()}}
DEFAULT_TOLERANCE = 0.05
NOISE = 1e-5                      # CSV keeps 6 significant digits: smaller relative changes are rounding
SHOW_ONLY_IN = 5                  # rows only in one file: how many to list

REGRESSION, IMPROVEMENT, UNCHANGED = "regression", "improvement", "unchanged"


# ------------------------------------------------------------------------------------------- limits

def parse_percent(text: str, where: str) -> float:
    """'5', '5%', '+5%', '-3.5%' -> signed fraction (0.05, ..., -0.035)."""
    m = re.fullmatch(r"\s*([+-]?)(\d+(?:\.\d*)?|\.\d+)\s*%?\s*", str(text))
    if not m:
        raise ConfigError(f"{where}: expected a percentage such as 5% or 3.5, got {text!r}")
    value = float(m.group(2)) / 100
    return -value if m.group(1) == "-" else value


def parse_tolerance(text: str) -> float:
    value = parse_percent(text, "--tolerance")
    if value < 0:
        raise ConfigError(f"--tolerance: expected a percentage >= 0 such as 5%, got {text!r}")
    return value


def limits_from(tolerance: float, fail_on=()) -> dict[str, float]:
    """{metric: allowed relative change in the bad direction (>= 0)}: --tolerance for every metric,
    overridden per metric by --fail-on METRIC:THRESHOLD (time:+10%, busbw:-3%)."""
    limits, seen = {m: tolerance for m in METRICS}, set()
    for spec in fail_on:
        name, sep, threshold = str(spec).partition(":")
        if not sep or not name.strip() or not threshold.strip():
            raise ConfigError(f"--fail-on: expected METRIC:THRESHOLD such as busbw:-3% or time:+10%, got {spec!r}")
        if name.strip() not in ALIASES:
            raise ConfigError(f"--fail-on {spec}: unknown metric {name.strip()!r}{suggest(name.strip(), ALIASES)}; "
                              f"expected one of: {', '.join(ALIASES)}")
        metric = ALIASES[name.strip()]
        if metric in seen:
            raise ConfigError(f"--fail-on: {metric} given twice ({spec!r}); give each metric once")
        seen.add(metric)
        value = parse_percent(threshold, f"--fail-on {spec}")
        bad_sign = METRICS[metric][1]
        explicit = threshold.strip()[:1] in "+-"
        if explicit and value != 0 and math.copysign(1, value) != bad_sign:
            good = f"{metric}:{'+' if bad_sign > 0 else '-'}{abs(value) * 100:g}%"
            raise ConfigError(f"--fail-on {spec}: {metric} regresses when it {'rises' if bad_sign > 0 else 'falls'}; "
                              f"write {good}")
        limits[metric] = abs(value)
    return limits


def format_limits(limits: dict[str, float]) -> str:
    return ", ".join(f"{m} {'+' if METRICS[m][1] > 0 else '-'}{limits[m] * 100:g}%" for m in METRICS)


# ------------------------------------------------------------------------------------------ compare

@dataclass
class Comparison:
    """Every common row with baseline, current, change and status per metric, plus the unmatched rows."""

    rows: pd.DataFrame                # KEYS, <col>_base, <col>_cur, <metric>_change, <metric>_status, status
    only_baseline: pd.DataFrame       # KEYS of rows missing from CURRENT
    only_current: pd.DataFrame        # KEYS of rows missing from BASELINE
    limits: dict[str, float]
    strict: bool = False
    labels: tuple[str, str] = field(default=("BASELINE", "CURRENT"))
    inputs: list[str] = field(default_factory=list)     # how the two files' inputs differ (their metadata)

    @property
    def regressions(self) -> pd.DataFrame:
        return self.rows[self.rows.status == REGRESSION]

    @property
    def improvements(self) -> pd.DataFrame:
        return self.rows[self.rows.status == IMPROVEMENT]

    @property
    def unmatched(self) -> int:
        return len(self.only_baseline) + len(self.only_current)

    @property
    def failed(self) -> bool:
        return len(self.regressions) > 0 or (self.strict and self.unmatched > 0)

    @property
    def exit_status(self) -> int:
        return 1 if self.failed else 0

    def summary(self) -> str:
        n, r, i = len(self.rows), len(self.regressions), len(self.improvements)
        text = (f"{'FAIL' if self.failed else 'PASS'}: {r} regression{'s' * (r != 1)}, {i} improvement"
                f"{'s' * (i != 1)}, {n - r - i} within limits, of {n} common row{'s' * (n != 1)} "
                f"(limits: {format_limits(self.limits)})")
        if self.unmatched or self.strict:
            text += (f"; {len(self.only_baseline)} only in {self.labels[0]}, {len(self.only_current)} only in "
                     f"{self.labels[1]}{' (--strict: these fail)' if self.strict and self.unmatched else ''}")
        return text


def relative_change(base: pd.Series, cur: pd.Series) -> pd.Series:
    b, d = base.to_numpy(float), (cur - base).to_numpy(float)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):      # the inf is the answer, shown as +inf
        out = np.where(b != 0, d / np.where(b != 0, b, 1.0), np.where(d == 0, 0.0, np.copysign(np.inf, d)))
    return pd.Series(out, index=base.index)


def compare(baseline: pd.DataFrame, current: pd.DataFrame, limits: dict[str, float] | None = None,
            strict: bool = False, labels: tuple[str, str] = ("BASELINE", "CURRENT"),
            metadata: tuple[dict | None, dict | None] = (None, None)) -> Comparison:
    """Match the two normalised frames (load_results) on KEYS and classify each common row. With both files'
    metadata, say how their inputs differ; runs of one topology with other --set values (whose topology
    names differ only by their [...] label) are then matched on the topology's own name."""
    limits = dict(limits or {m: DEFAULT_TOLERANCE for m in METRICS})
    inputs = input_lines(*metadata, labels) if all(m is not None for m in metadata) else []
    if inputs:
        baseline, current = _unlabelled(baseline, current)
    merged = baseline.merge(current, on=KEYS, how="outer", suffixes=("_base", "_cur"), indicator=True)
    common = merged[merged["_merge"] == "both"].drop(columns="_merge").reset_index(drop=True)
    only_b = merged.loc[merged["_merge"] == "left_only", KEYS].reset_index(drop=True)
    only_c = merged.loc[merged["_merge"] == "right_only", KEYS].reset_index(drop=True)
    _same_traffic(common, metadata, labels)
    if common.empty:
        raise ConfigError(f"no common rows: none of {labels[0]}'s {len(baseline)} rows matches one of {labels[1]}'s "
                          f"{len(current)} on ({', '.join(KEYS)}); e.g. {labels[0]} has {describe(baseline.iloc[0])}"
                          f", {labels[1]} has {describe(current.iloc[0])}")
    regressed = pd.Series(False, index=common.index)
    improved = pd.Series(False, index=common.index)
    for metric, (col, bad_sign) in METRICS.items():
        change = relative_change(common[f"{col}_base"], common[f"{col}_cur"])
        limit = max(limits[metric], NOISE)
        worse, better = change * bad_sign > limit, change * bad_sign < -limit
        common[f"{metric}_change"] = change
        common[f"{metric}_status"] = [REGRESSION if w else IMPROVEMENT if b else UNCHANGED
                                      for w, b in zip(worse, better)]
        regressed |= worse
        improved |= better
    common["status"] = [REGRESSION if r else IMPROVEMENT if i else UNCHANGED for r, i in zip(regressed, improved)]
    return Comparison(common, only_b, only_c, limits, strict, labels, inputs)


def _same_traffic(common: pd.DataFrame, metadata: tuple, labels: tuple[str, str]) -> None:
    """Refuse common rows that timed different traffic: another matrix, or one file's other contents."""
    if f"{MATRIX}_base" not in common:            # frames made by hand, without the column
        return
    other = common[common[f"{MATRIX}_base"] != common[f"{MATRIX}_cur"]]
    if len(other):
        r = other.iloc[0]
        raise ConfigError(f"{describe(r)}: {labels[0]} timed --matrix {r[f'{MATRIX}_base']}, {labels[1]} --matrix "
                          f"{r[f'{MATRIX}_cur']}: different traffic, not compared; compare runs of one matrix")
    digests = [(m or {}).get("setup", {}).get("matrix_sha256") for m in metadata]
    shared = common[common[f"{MATRIX}_base"] != ""]
    if len(shared) and all(digests) and digests[0] != digests[1]:
        raise ConfigError(f"{describe(shared.iloc[0])}: --matrix {shared[f'{MATRIX}_base'].iloc[0]} has other "
                          f"contents in {labels[0]} (sha256 {digests[0][:12]}...) than in {labels[1]} (sha256 "
                          f"{digests[1][:12]}...): different traffic, not compared; compare runs of one matrix")


def compare_files(baseline: str, current: str, limits: dict[str, float] | None = None,
                  strict: bool = False) -> Comparison:
    return compare(load_results(baseline, "BASELINE"), load_results(current, "CURRENT"), limits, strict,
                   metadata=metadata_of(baseline, current))


def metadata_of(*paths: str) -> tuple:
    """Each results file's metadata (None for a log, or a file without any)."""
    return tuple(None if is_log(p) else read_metadata(p) for p in paths)


def input_lines(theirs: dict, ours: dict, labels: tuple[str, str], most: int = 4) -> list[str]:
    """'inputs differ: topology.bandwidth is 450GB/s in BASELINE, 380GB/s in CURRENT; ...' (empty: the same)."""
    differ = input_differences(theirs, ours)
    given = [d for d in differ if ".resolved." not in d[0]]
    if len(given) > 1 or (given and given[0][0] != "topology.name"):
        differ = given                      # what the user wrote; the resolved values follow from it
    if not differ:
        return []
    shown_ = "; ".join(f"{k} is {shown(a)} in {labels[0]}, {shown(b)} in {labels[1]}" for k, a, b in differ[:most])
    more = f"; and {len(differ) - most} more" if len(differ) > most else ""
    return [f"inputs differ: {shown_}{more}"]


def _unlabelled(baseline: pd.DataFrame, current: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Both frames with their topology names stripped of the [--set ...] label, when that makes them one
    topology (a what-if: the same preset, other values); else as they are."""
    def base(df):
        return df["topology"].astype(str).str.replace(r"\[.*\]$", "", regex=True)
    a, b = base(baseline), base(current)
    if set(a) != set(b) or (set(baseline["topology"]) == set(current["topology"])):
        return baseline, current
    return baseline.assign(topology=a), current.assign(topology=b)


# ---------------------------------------------------------------------------------------- rendering

def fmt_num(v: float) -> str:
    return f"{v:.2f}" if abs(v) >= 1 else f"{v:.3g}"


def fmt_change(v: float) -> str:
    return f"{v:+.1%}" if math.isfinite(v) else ("+inf" if v > 0 else "-inf")


def changed_rows(c: Comparison) -> pd.DataFrame:
    """Regressions first, then improvements; each in file order."""
    return pd.concat([c.regressions, c.improvements])


def only_in_lines(c: Comparison) -> list[str]:
    out = list(c.inputs)
    for label, part in ((c.labels[0], c.only_baseline), (c.labels[1], c.only_current)):
        if len(part):
            shown = "; ".join(describe(r) for _, r in part.head(SHOW_ONLY_IN).iterrows())
            more = f"; and {len(part) - SHOW_ONLY_IN} more" if len(part) > SHOW_ONLY_IN else ""
            out.append(f"{len(part)} row{'s' * (len(part) != 1)} only in {label}: {shown}{more}")
    return out


def _md(text) -> str:
    return str(text).replace("|", "\\|")


def to_markdown(c: Comparison) -> str:
    """A pull-request comment: a heading with PASS/FAIL, a table of regressions and improvements, notes."""
    lines = [f"### hccl-bench compare: {'❌' if c.failed else '✅'} {c.summary()}", ""]
    changed = changed_rows(c)
    if len(changed):
        head = ["status", *KEYS, "time_us base", "time_us current", "time change", "busbw_GBps base",
                "busbw_GBps current", "busbw change"]
        lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        for _, r in changed.iterrows():
            cells = [f"**{r.status}**" if r.status == REGRESSION else r.status, *(r[k] for k in KEYS),
                     fmt_num(r.time_us_base), fmt_num(r.time_us_cur), fmt_change(r.time_change),
                     fmt_num(r.busbw_GBps_base), fmt_num(r.busbw_GBps_cur), fmt_change(r.busbw_change)]
            lines.append("| " + " | ".join(_md(x) for x in cells) + " |")
        lines.append("")
    lines += [f"- {_md(s)}" for s in only_in_lines(c)]
    return "\n".join(lines).rstrip("\n") + "\n"


def to_junit(c: Comparison) -> str:
    """JUnit XML: one testcase per common row (a <failure> per regression); rows in one file only are
    <skipped>, or <failure> with --strict."""
    suite = ET.Element("testsuite", name="hccl-bench compare")
    failures = skipped = 0
    for _, r in c.rows.iterrows():
        case = _case(suite, r)
        case.set("time", f"{r.time_us_cur * 1e-6:.9g}")
        if r.status == REGRESSION:
            failures += 1
            bad = [f"{m} {fmt_change(r[f'{m}_change'])} ({fmt_num(r[f'{col}_base'])} -> {fmt_num(r[f'{col}_cur'])} "
                   f"{col.split('_')[1]}, limit {'+' if s > 0 else '-'}{c.limits[m] * 100:g}%)"
                   for m, (col, s) in METRICS.items() if r[f"{m}_status"] == REGRESSION]
            el = ET.SubElement(case, "failure", message="; ".join(bad), type="regression")
            el.text = f"{describe(r)}: " + "; ".join(bad)
    for label, part in ((c.labels[0], c.only_baseline), (c.labels[1], c.only_current)):
        for _, r in part.iterrows():
            case = _case(suite, r)
            if c.strict:
                failures += 1
                ET.SubElement(case, "failure", message=f"only in {label}", type="unmatched")
            else:
                skipped += 1
                ET.SubElement(case, "skipped", message=f"only in {label}")
    suite.set("tests", str(len(c.rows) + c.unmatched))
    suite.set("failures", str(failures))
    suite.set("errors", "0")
    suite.set("skipped", str(skipped))
    root = ET.Element("testsuites", name="hccl-bench", tests=suite.get("tests"), failures=str(failures))
    root.append(suite)
    ET.indent(root)
    return '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


def _case(suite: ET.Element, r) -> ET.Element:
    return ET.SubElement(suite, "testcase", classname=f"{r['collective']}.{r['algorithm']}",
                         name=f"{r['topology']} {r['ranks']}r {r['engine']} {r['size_bytes']}B {r['dtype']}")
