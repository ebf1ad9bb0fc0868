"""Reading results files (CSV, JSON or Parquet, as `hccl-bench sweep -o` writes them) for compare and plot.

A file is read whole or refused: every value of a known column (COLUMN_TYPES) is checked, and the first
bad one is named by file, place (CSV line, JSON path such as rows[3].time_us, Parquet row) and column,
with what was expected. Times and bandwidths are finite and >= 0; ranks, sizes, counts and roots are
whole numbers below 2**53 -- 8, "8", 8.0 and "8.0" alike (JSON does not tell integers from floats, RFC 8259 section 6;
pandas writes 8.0 when a column also held an empty value), but not 8.7, true or the JSON string "8";
names are non-empty strings. Metadata is typed too (schema_version an integer, not true). Columns this
reader does not know are not read. The frame also names each row's traffic (MATRIX: all_to_allv's --matrix,
'uniform' for a file without the column, empty for the other collectives), which compare matches.
"""

from __future__ import annotations

import csv
import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from ..core.errors import ConfigError
from ..engine.execution import PERCENTILE_COLUMNS
from ..schedule.collectives import ALL_TO_ALLV
from ..sweeping.sweep import MATRIX, STAT_COLUMNS
from .nccltests import is_log, log_table
from .provenance import json_rows, read_sidecar, sidecar_where

KEYS = ["collective", "algorithm", "topology", "ranks", "engine", "size_bytes", "dtype"]
METRIC_COLUMNS = ["time_us", "busbw_GBps"]
EXACT = 2 ** 53                  # whole numbers below are exact as floats (IEEE 754 double: 53-bit significand)
_MISSING = object()              # a key absent from a JSON row
_HEX = {"git_revision": 40}      # metadata ids: field -> hex digits; *_sha256 fields are 64


@dataclass(frozen=True)
class Kind:
    """What a column holds: 'name' (a non-empty string), 'text' (a string, maybe empty), 'whole' (an integer
    >= low), 'measure' (a finite number >= 0) or 'counter' (a measure, or empty: --stats counters are empty for
    the analytic engine)."""

    kind: str
    low: int = 0

    @property
    def expected(self) -> str:
        return {"name": "a non-empty string", "text": "a string", "whole": f"a whole number >= {self.low} and < 2**53",
                "measure": "a finite number >= 0", "counter": "a finite number >= 0 or nothing"}[self.kind]


NAME, TEXT, MEASURE, COUNTER = Kind("name"), Kind("text"), Kind("measure"), Kind("counter")
COLUMN_TYPES = {
    "collective": NAME, "algorithm": NAME, "topology": NAME, "ranks": Kind("whole", 1), "engine": NAME,
    "size_bytes": Kind("whole", 0), "count": Kind("whole", 0), "dtype": NAME, "root": Kind("whole", -1),
    "time_us": MEASURE, "algbw_GBps": MEASURE, "busbw_GBps": MEASURE, "protocol": NAME,
    **{c: MEASURE for c in PERCENTILE_COLUMNS}, **{c: COUNTER for c in STAT_COLUMNS}, "chosen": NAME,
    "chosen_by": NAME, MATRIX: TEXT,
}


def load_results(path: str, label: str = "results") -> pd.DataFrame:
    """KEYS, METRIC_COLUMNS and MATRIX of a results file, every known column checked; label ('BASELINE')
    prefixes errors. Identical repeated rows count once; keys repeated with different numbers are refused."""
    where = f"{label} {path!r}"
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"{label}: {'a directory, not a file' if p.is_dir() else 'no such file'} {path!r}")
    suffix = p.suffix.lower()
    if is_log(path):                                # an nccl-tests log, read as `hccl-bench import` would
        columns, rows = log_table(path)
        return _unique(_typed(columns, rows, False, lambda i, col: f"row {i + 1}, column {col}", where), where)
    try:
        records, embedded = json_rows(p, where) if suffix == ".json" else (None, None)
        if embedded is not None:                    # a JSON file of schema_version 1
            check_metadata(embedded, where)
        elif (meta := read_sidecar(p, where)) is not None:      # one of an unsupported version is refused
            check_metadata(meta, sidecar_where(p, where))
        if suffix == ".json":
            columns, rows, locate = _json_table(records, where)
        else:
            columns, rows, locate = _csv_table(p, where) if suffix == ".csv" else _parquet_table(p, where)
        text = suffix == ".csv"
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"{where}: cannot read ({getattr(e, 'strerror', None) or e})") from None
    return _unique(_typed(columns, rows, text, locate, where), where)


def check_metadata(doc: dict, where: str) -> None:
    """The typed fields of a results document or sidecar (docs/results.md, "Metadata"); others are not read."""
    version = doc.get("schema_version")
    if isinstance(version, bool) or not isinstance(version, int):
        raise ConfigError(f"{where}: schema_version: expected an integer such as 1, got {_show(version, False)}")
    for key, value in doc.items():
        digits = _HEX.get(key, 64 if key.endswith("_sha256") else None)
        if key == "hccl_bench_version" and not (isinstance(value, str) and value.strip()):
            raise ConfigError(f"{where}: hccl_bench_version: expected a non-empty string, got {_show(value, False)}")
        if key in ("topology", "inputs") and not isinstance(value, dict):
            raise ConfigError(f"{where}: {key}: expected an object, got {_show(value, False)}")
        if digits and not (isinstance(value, str) and re.fullmatch(f"[0-9a-f]{{{digits}}}", value)):
            raise ConfigError(f"{where}: {key}: expected {digits} lowercase hex digits, got {_show(value, False)}")


# ----------------------------------------------------------------------------------- the three formats

def _csv_table(p: Path, where: str):
    """Header and rows as text, with each row's line number; a row with another field count is refused."""
    lines: list[int] = []
    rows: list[list[str]] = []
    with p.open(encoding="utf-8-sig", newline="") as f:           # utf-8-sig: a spreadsheet's BOM
        reader = csv.reader(f, strict=True)
        try:
            header = next(reader, None)
            if header is None:
                raise ConfigError(f"{where}: malformed CSV (empty file; expected a header line)")
            for row in reader:
                if not row:
                    continue                                            # a blank line
                if len(row) != len(header):
                    raise ConfigError(f"{where}: malformed CSV: line {reader.line_num} has {len(row)} fields, "
                                      f"the header {len(header)}")
                rows.append(row)
                lines.append(reader.line_num)
        except csv.Error as e:
            raise ConfigError(f"{where}: malformed CSV: line {reader.line_num}: {e}") from None
    for i, name in enumerate(header):
        if not name.strip():
            raise ConfigError(f"{where}: malformed CSV: header field {i + 1} has no column name")
        if header.count(name) > 1:
            raise ConfigError(f"{where}: malformed CSV: the header names column {name!r} twice")
    return header, rows, lambda i, col: f"line {lines[i]}, column {col}"


def _json_table(records: list[dict], where: str):
    columns = list(dict.fromkeys(k for r in records for k in r))
    for name in columns:
        if not name.strip():
            i = next(i for i, r in enumerate(records) if name in r)
            raise ConfigError(f"{where}: rows[{i}] has a key with no column name ({name!r})")
    rows = [[r.get(c, _MISSING) for c in columns] for r in records]
    return columns, rows, lambda i, col: f"rows[{i}].{col}"


def _parquet_table(p: Path, where: str):
    try:
        import pyarrow  # noqa: F401
    except ImportError:
        raise ConfigError(f"{where}: reading .parquet needs pyarrow: pip install 'hccl-bench[parquet]'") from None
    try:
        df = pd.read_parquet(p)
    except (OSError, ValueError) as e:       # pyarrow.ArrowInvalid is a ValueError
        raise ConfigError(f"{where}: cannot read Parquet ({e})") from None
    rows = [list(r.values()) for r in df.to_dict(orient="records")]          # Python values, as from JSON
    return [str(c) for c in df.columns], rows, lambda i, col: f"row {i + 1}, column {col}"


# ------------------------------------------------------------------------------------------- values

def _typed(columns: list[str], rows: list, text: bool, locate: Callable[[int, str], str], where: str):
    """The needed columns as a frame: each known column checked whole, the first bad value refused."""
    needed = KEYS + METRIC_COLUMNS
    missing = [c for c in needed if c not in columns]
    if missing:
        raise ConfigError(f"{where}: missing column(s) {', '.join(missing)}; a results file needs "
                          f"{', '.join(needed)} (as `hccl-bench sweep -o` writes)")
    if "placement" in columns:                      # measured rows (hccl-bench import): the out-of-place ones
        rows = [r for r in rows if r[columns.index("placement")] != "in-place"]
    if not rows:
        raise ConfigError(f"{where}: no rows")
    out = {}
    for col, cells in zip(columns, zip(*rows)):
        kind = COLUMN_TYPES.get(col)
        if kind is None:
            continue
        raw = pd.Series(cells, dtype=object)
        values, bad = parse_column(raw, kind, text)
        if bad.any():
            i = int(bad.argmax())
            raise ConfigError(f"{where}: {locate(i, col)}: expected {kind.expected}, got {_show(raw[i], text)}")
        out[col] = values
    frame = pd.DataFrame({c: out[c] for c in needed})
    old = np.where(frame.collective == ALL_TO_ALLV, "uniform", "")       # a file from before the column
    return frame.assign(**{MATRIX: out.get(MATRIX, old)})


def parse_column(raw: pd.Series, kind: Kind, text: bool) -> tuple[pd.Series, np.ndarray]:
    """(the values as kind says, where they are not): raw holds CSV text when text, else JSON or Parquet
    values (Python values), whose types count: true and the string "8" are not numbers."""
    types = raw.map(type)
    strings = (types == str).to_numpy(bool)
    filled = strings.copy()                                           # a string with more than blanks
    filled[strings] = raw[strings].str.strip().ne("").to_numpy(bool)
    if kind is NAME:
        return raw, ~filled
    if kind is TEXT:
        return raw, ~strings
    numeric = raw if text else raw.where(types.isin([int, float]))     # type(True) is bool, not int
    with np.errstate(invalid="ignore"):
        try:
            num = pd.to_numeric(numeric, errors="coerce").to_numpy(float)     # not a number -> NaN
        except OverflowError:                                          # a JSON integer such as 10**400
            num = numeric.map(lambda v: v if type(v) is not int or abs(v) < EXACT else np.inf).to_numpy(float)
        ok = np.isfinite(num) & (num >= kind.low if kind.kind == "whole" else num >= 0)
    if kind.kind == "whole":
        ok &= (np.abs(num) < EXACT) & (num == np.floor(num))        # 2**53 + 1 would read as 2**53
        return pd.Series(np.where(ok, num, 0).astype("int64")), ~ok
    if kind is COUNTER:                                               # blank, null, NaN or absent
        ok |= ~filled & (strings | raw.isna().to_numpy(bool) | (types == object).to_numpy(bool))
    return pd.Series(num), ~ok


def _show(v, text: bool) -> str:
    """A bad value as the error shows it: JSON's spelling for JSON values, long ones cut short."""
    if v is _MISSING:
        return "nothing (the key is absent)"
    if isinstance(v, str) and not v.strip():
        return "an empty field" if text else repr(v)
    if v is None or isinstance(v, bool):
        return json.dumps(v)
    shown = repr(v) if text or not isinstance(v, str) else f"the string {v!r}"
    return shown if len(shown) <= 40 else f"{shown[:30]}... ({len(shown)} characters)"


def _unique(out: pd.DataFrame, where: str) -> pd.DataFrame:
    # Requested sizes that round to the same size (tiny AllGathers: several become 0 bytes) give identical
    # rows; one of each is kept. Rows with the same keys but different numbers are ambiguous: an error.
    out = out.drop_duplicates()
    dup = out.duplicated(KEYS, keep=False)
    if dup.any():
        raise ConfigError(f"{where}: {int(dup.sum())} rows share their keys, e.g. {describe(out[dup].iloc[0])}; "
                          f"each ({', '.join(KEYS)}) must appear once")
    return out.reset_index(drop=True)


def describe(row) -> str:
    """One row's keys, as a person reads them: 'all_reduce ring switch8 8r analytic 1024B float32'."""
    return (f"{row['collective']} {row['algorithm']} {row['topology']} {row['ranks']}r {row['engine']} "
            f"{row['size_bytes']}B {row['dtype']}")
