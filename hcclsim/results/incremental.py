"""Long sweeps: rows written to `-o` as they finish, and `--resume` from what is already there.

CSV output is appended one (collective, algorithm, engine) block at a time (header once), flushed,
so a Ctrl-C or a crash keeps every finished block. JSON and Parquet cannot be appended cheaply: the
finished rows go to a sidecar ``FILE.partial.csv`` (floats written exactly) and the final file is
written at the end, when the sidecar is deleted. At the end a CSV is rewritten once, in the sweep's
stable order (a resumed or parallel sweep appends in completion order).

`--resume` reads the rows in FILE (when it exists) and in its sidecar, checks they come from the same
topology, rank count, dtype, root and columns, and hands them to the sweep, which skips their points.
"""

from __future__ import annotations

import io
import os
from pathlib import Path

import pandas as pd

from ..core.errors import ConfigError
from .read import rows_from_json
from .report import FLOAT_FORMAT, output_format


def sidecar(path: str) -> str:
    return f"{path}.partial.csv"


def _csv(df: pd.DataFrame, header: bool, exact: bool) -> str:
    buf = io.StringIO()
    df.to_csv(buf, index=False, header=header, float_format=None if exact else FLOAT_FORMAT, lineterminator="\n")
    return buf.getvalue()


def _read_csv(path: str) -> pd.DataFrame:
    """A CSV we wrote, dropping a last line cut short by a crash (the file is then truncated to match)."""
    p = Path(path)
    data = p.read_bytes()
    if data and not data.endswith(b"\n"):
        data = data[:data.rfind(b"\n") + 1]
        p.write_bytes(data)
    if not data.strip():
        return pd.DataFrame()
    try:
        return pd.read_csv(io.BytesIO(data), keep_default_na=True)
    except (pd.errors.ParserError, pd.errors.EmptyDataError) as e:
        raise ConfigError(f"--resume: cannot read {path!r} ({str(e).strip().splitlines()[0]})") from None


def load_previous(path: str, topology, dtype: str, root: int, columns: list[str]) -> pd.DataFrame:
    """The rows already in path and its sidecar (empty when there are none), checked against this sweep."""
    suffix = output_format(path)
    parts = []
    if Path(path).is_file() and os.path.getsize(path) > 0:
        if suffix == ".csv":
            parts.append(_read_csv(path))
        elif suffix == ".json":                      # checks the schema version too
            parts.append(rows_from_json(Path(path).read_text(encoding="utf-8"), f"--resume: {path!r}"))
        else:
            parts.append(pd.read_parquet(path))
    if suffix != ".csv" and Path(sidecar(path)).is_file():
        parts.append(_read_csv(sidecar(path)))
    parts = [p for p in parts if not p.empty]
    if not parts:
        return pd.DataFrame(columns=columns)
    rows = pd.concat(parts, ignore_index=True)
    where = f"--resume: {path!r}"
    if list(rows.columns) != columns:
        raise ConfigError(f"{where} has columns {','.join(map(str, rows.columns))} but this sweep writes "
                          f"{','.join(columns)} (same --stats, -a auto and --iters/--skew/--jitter as the first run?)")
    for col, want in (("topology", topology.name), ("ranks", topology.nranks), ("dtype", dtype)):
        got = sorted({str(v) for v in rows[col]})
        if got != [str(want)]:
            raise ConfigError(f"{where} holds rows for {col} {', '.join(got)}, this sweep is {col} {want}; "
                              f"resume with the same -t/--set/-d, or write to another file")
    roots = {int(v) for v in rows["root"]} - {-1}
    if roots - {root}:
        raise ConfigError(f"{where} holds rows for root {', '.join(map(str, sorted(roots)))}, this sweep is "
                          f"root {root}; resume with the same -r")
    return rows


class RowWriter:
    """Appends finished blocks to FILE (CSV) or to its sidecar (JSON, Parquet); see the module doc."""

    def __init__(self, path: str, resume: bool):
        self.path = path
        self.suffix = output_format(path)
        self.target = path if self.suffix == ".csv" else sidecar(path)
        self.rows = 0
        try:
            keep = resume and Path(self.target).is_file()
            self.file = open(self.target, "a" if keep else "w", encoding="utf-8")  # noqa: SIM115 - kept open
        except OSError as e:
            raise ConfigError(f"-o/--output: cannot write {self.target!r} ({e.strerror or e})") from None
        self.header = self.file.tell() == 0

    def __call__(self, frame: pd.DataFrame) -> None:
        self.file.write(_csv(frame, self.header, exact=self.suffix != ".csv"))
        self.file.flush()
        self.header = False
        self.rows += len(frame)

    def close(self) -> None:
        if not self.file.closed:
            self.file.close()

    def finish(self, write) -> None:
        """Close, write the final file with write(path) (all rows, in order), and drop the sidecar."""
        self.close()
        write(self.path)
        if self.target != self.path and Path(self.target).exists():
            os.unlink(self.target)
