"""Reading results files (CSV, JSON or Parquet, as `hccl-bench sweep -o` writes them) for compare,
plot and --resume: keys typed, metrics numeric, metadata of an unsupported schema version refused."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from ..core.errors import ConfigError
from .provenance import read_metadata, results_document

KEYS = ["collective", "algorithm", "topology", "ranks", "engine", "size_bytes", "dtype"]
INT_KEYS = ("ranks", "size_bytes")
METRIC_COLUMNS = ["time_us", "busbw_GBps"]


def load_results(path: str, label: str = "results") -> pd.DataFrame:
    """A results file as a DataFrame with normalised key types; label ('BASELINE') prefixes errors."""
    where = f"{label} {path!r}"
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"{label}: no such file {path!r}")
    suffix = p.suffix.lower()
    try:
        if suffix in (".csv", ".parquet"):
            read_metadata(p, where)           # a sidecar FILE.meta.json of an unsupported version is refused
        if suffix == ".csv":
            df = pd.read_csv(p)
        elif suffix == ".json":
            df = rows_from_json(p.read_text(encoding="utf-8"), where)
        elif suffix == ".parquet":
            df = _read_parquet(p, where)
        else:
            raise ConfigError(f"{where}: unknown results format {suffix or '(no suffix)'!r}; "
                              f"expected a file ending in .csv, .json or .parquet (as `hccl-bench sweep -o` writes)")
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"{where}: cannot read ({getattr(e, 'strerror', None) or e})") from None
    except (pd.errors.ParserError, pd.errors.EmptyDataError) as e:
        raise ConfigError(f"{where}: malformed CSV ({str(e).strip().splitlines()[0]})") from None
    return _normalise(df, where)


def rows_from_json(text: str, where: str) -> pd.DataFrame:
    return pd.DataFrame(results_document(text, where)["rows"])


def _read_parquet(p: Path, where: str) -> pd.DataFrame:
    try:
        import pyarrow  # noqa: F401
    except ImportError:
        raise ConfigError(f"{where}: reading .parquet needs pyarrow: pip install 'hccl-bench[parquet]'") from None
    try:
        return pd.read_parquet(p)
    except (OSError, ValueError) as e:       # pyarrow.ArrowInvalid is a ValueError
        raise ConfigError(f"{where}: cannot read Parquet ({e})") from None


def _normalise(df: pd.DataFrame, where: str) -> pd.DataFrame:
    """Keys as str/int, metrics as float; missing columns, bad values and keys repeated with different
    numbers are errors (identical repeated rows count once)."""
    needed = KEYS + METRIC_COLUMNS
    missing = [c for c in needed if c not in df.columns]
    if missing:
        raise ConfigError(f"{where}: missing column(s) {', '.join(missing)}; a results file needs "
                          f"{', '.join(needed)} (as `hccl-bench sweep -o` writes)")
    if df.empty:
        raise ConfigError(f"{where}: no rows")
    out = df[needed].copy()
    for col in needed:
        try:
            if col in INT_KEYS:
                out[col] = pd.to_numeric(out[col], errors="raise").astype("int64")
            elif col in KEYS:
                out[col] = out[col].astype(str)
            else:
                out[col] = pd.to_numeric(out[col], errors="raise").astype(float)
        except (ValueError, TypeError):
            raise ConfigError(f"{where}: column {col} holds a value that is not "
                              f"{'a whole number' if col in INT_KEYS else 'a number'}") from None
        if col not in KEYS and out[col].isna().any():
            raise ConfigError(f"{where}: column {col} has empty values")
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
