"""Long sweeps: rows written to `-o` as they finish, and `--resume` from what is already there.

CSV output is appended one (collective, algorithm, engine) block at a time (header once), each block
in whole lines (a failed write is cut back), so a Ctrl-C or a crash keeps every finished block. JSON
and Parquet cannot be appended cheaply: the finished rows go to ``FILE.partial.csv`` and the final file
is written at the end, when the partial file is deleted. At the end a CSV is rewritten once, in the
sweep's stable order (a resumed or parallel sweep appends in completion order). Final files replace the old ones atomically (hcclsim.results.safefile).

While rows are appended, the file they go to has a sidecar (``FILE.csv.meta.json`` or
``FILE.partial.csv.meta.json``) with the sweep's metadata and ``"in_progress": true``: it is what lets
`--resume` trust the rows. `--resume` refuses, leaving every file as it is, a file without that record
(not ours), one whose setup (hcclsim.results.provenance: topology after --set, engines, launch, noise,
dtype, root, stats, all_to_allv's --matrix and a matrix file's digest) differs from this sweep's -- naming
what differs --, a header other than this sweep's columns, and any row that is not valid (line named). Its
grid (collectives, algorithms, sizes) may differ: the file then holds the union. A last line cut short is
dropped only in a file whose sidecar says it was still being written.

The matrix column (all_to_allv's traffic) exists only in files that hold all_to_allv rows, and not in
those written before it existed: rows are appended in the layout the file has, and the final file gets the
column when any row has it ('uniform' for an older file's all_to_allv rows, which had no --matrix to resume).
"""

from __future__ import annotations

import io
import os
from collections import Counter
from pathlib import Path

import numpy as np
import pandas as pd

from ..core.errors import ConfigError
from ..core.signals import held_back
from ..core.units import DTYPE_SIZE
from ..schedule import collectives as C
from ..schedule import matrix as M
from ..sweeping.sweep import MATRIX, ROW_KEY
from .provenance import (
    input_differences,
    json_rows,
    merged,
    read_metadata,
    read_sidecar,
    shown,
    sidecar_path,
    write_sidecar,
)
from .report import csv_float, output_format, write

LEFT = "the files are left as they are; rerun without --resume, or write to another file"


def sidecar(path: str) -> str:
    return f"{path}.partial.csv"


def _csv(df: pd.DataFrame, header: bool) -> str:
    buf = io.StringIO()
    df.to_csv(buf, index=False, header=header, float_format=csv_float, lineterminator="\n")
    return buf.getvalue()


# ------------------------------------------------------------------------------------ --resume

def load_previous(path: str, meta: dict, columns: list[str]) -> tuple[pd.DataFrame | None, dict, int, list | None]:
    """(the rows already made for path -- None when there are none --, the metadata of the file that
    will hold them and this sweep's, the bytes of the appended file to keep, that file's columns -- None when
    it has no rows yet). Refuses what it cannot trust (module docstring) before anything is written."""
    where = f"--resume: {path!r}"
    columns = [c for c in columns if c != MATRIX]
    final, partial = Path(path), Path(path if output_format(path) == ".csv" else sidecar(path))
    parts, keep, layout = [], 0, None          # (rows, their labels, the metadata of their file)
    if final != partial and _nonempty(final, where):
        frame, file_meta = _read_final(final, where)
        _same_setup(file_meta, meta, path)
        parts.append((frame, [f"--resume: {path!r} row {i + 1}" for i in range(len(frame))], file_meta, False))
    if _nonempty(partial, where):
        file_meta = _recorded(read_metadata(partial, f"--resume: {str(partial)!r}"), str(partial))
        _same_setup(file_meta, meta, str(partial))
        frame, keep = _read_appended(partial, file_meta, columns)
        layout = list(frame.columns) or None
        parts.append((frame, [f"--resume: {str(partial)!r} line {i + 2}" for i in range(len(frame))], file_meta, True))
    metas = [file_meta for _, _, file_meta, _ in parts]
    for file_meta in metas:
        meta = merged(file_meta, meta)
    parts = [(_typed(frame, labels, file_meta, columns, text), labels) for frame, labels, file_meta, text in parts
             if not frame.empty]
    if not parts:
        return None, meta, keep, layout
    if len(parts) == 2:                       # a crash between writing FILE and deleting FILE.partial.csv
        done = set(zip(*(parts[0][0][k] for k in ROW_KEY)))
        fresh = [k not in done for k in zip(*(parts[1][0][k] for k in ROW_KEY))]
        parts[1] = (parts[1][0][fresh], [lab for lab, f in zip(parts[1][1], fresh) if f])
    rows = pd.concat([f for f, _ in parts], ignore_index=True)
    grid = metas[0] if len(metas) == 1 else merged(metas[0], metas[1])
    _check_points(rows, [lab for _, labels in parts for lab in labels], grid)
    return rows, meta, keep, layout


def _nonempty(p: Path, where: str) -> bool:
    if p.exists() and not p.is_file():
        raise ConfigError(f"{where}: {str(p)!r} is not a file")
    return p.is_file() and p.stat().st_size > 0


def _read_final(p: Path, where: str) -> tuple[pd.DataFrame, dict]:
    """A finished JSON or Parquet file: its rows and its metadata (its sidecar, or embedded in a JSON file
    of schema_version 1, which the end of the sweep rewrites as version 2)."""
    if p.suffix.lower() == ".json":
        rows, embedded = json_rows(p, where)
        return pd.DataFrame(rows), _recorded(read_sidecar(p, where) if embedded is None else embedded, str(p))
    meta = _recorded(read_metadata(p, where), str(p))
    try:
        return pd.read_parquet(p), meta
    except (OSError, ValueError) as e:         # pyarrow.ArrowInvalid is a ValueError
        raise ConfigError(f"{where}: cannot read Parquet ({str(e).splitlines()[0] if str(e) else e}); {LEFT}") \
            from None


def _recorded(meta: dict | None, name: str) -> dict:
    """meta, when it records what made the file (as this version writes it)."""
    where = f"--resume: {name!r}"
    if meta is None:
        raise ConfigError(f"{where} has no sidecar {str(sidecar_path(name))!r}, so nothing says which sweep wrote "
                          f"it: not resumed; {LEFT}")
    inputs = meta.get("inputs")
    ok = isinstance(meta.get("setup"), dict) and isinstance(meta.get("topology"), dict) \
        and isinstance(meta.get("setup_sha256"), str) and isinstance(inputs, dict) \
        and isinstance(inputs.get("collectives"), list) and all(isinstance(c, str) for c in inputs["collectives"]) \
        and isinstance(inputs.get("algorithm"), str) \
        and isinstance(inputs.get("sizes"), list) \
        and all(isinstance(s, int) and not isinstance(s, bool) for s in inputs["sizes"])
    if not ok:
        raise ConfigError(f"{where}: its metadata does not record the sweep's setup (written by an older "
                          f"hccl-bench, or edited): not resumed; {LEFT}")
    if "matrix" in inputs and "matrix" not in meta["setup"]:
        raise ConfigError(f"{where}: made with --matrix {inputs['matrix']} by an older hccl-bench, whose setup does "
                          f"not record the matrix: not resumed; {LEFT}")
    return meta


def _same_setup(previous: dict, meta: dict, name: str) -> None:
    """Refuse rows made with another setup, naming the first input that differs."""
    differ = input_differences(previous, meta)
    if not differ:
        if previous["setup_sha256"] != meta["setup_sha256"]:
            raise ConfigError(f"--resume: {name!r}: its setup_sha256 does not match its setup (edited?): "
                              f"not resumed; {LEFT}")
        return
    (first, theirs, ours), rest = differ[0], [k for k, _, _ in differ[1:]]
    if first in ("matrix", "matrix_sha256"):
        raise ConfigError(f"--resume: {name!r} was made with {_matrix(previous['setup'])}, this sweep has "
                          f"{_matrix(meta['setup'])}: other traffic; resume with the same --matrix, or write to "
                          f"another file")
    more = f" ({len(rest)} more input{'s' * (len(rest) > 1)} differ{'s' * (len(rest) == 1)}: " \
           f"{', '.join(rest[:3])}{', ...' if len(rest) > 3 else ''})" if rest else ""
    raise ConfigError(f"--resume: {name!r} was made with {first}={shown(theirs)}, this sweep "
                      f"has {first}={shown(ours)}{more}; resume with the same inputs, or write to another file")


def _matrix(setup: dict) -> str:
    """A setup's all_to_allv traffic as an error shows it."""
    if "matrix" not in setup:
        return "no --matrix (uniform)"
    digest = setup.get("matrix_sha256")
    return f"--matrix {setup['matrix']}" + (f" (contents sha256 {digest[:12]}...)" if digest else "")


def _read_appended(p: Path, meta: dict, columns: list[str]) -> tuple[pd.DataFrame, int]:
    """The rows of a CSV we append to, as strings, and how many of its bytes to keep (all but a last
    line cut short, which only a file still being written may have)."""
    where = f"--resume: {str(p)!r}"
    try:
        data = p.read_bytes()
    except OSError as e:
        raise ConfigError(f"{where}: cannot read ({e.strerror or e}); {LEFT}") from None
    keep = len(data)
    if not data.endswith(b"\n"):
        if not meta.get("in_progress"):
            raise ConfigError(f"{where}: its last line is incomplete, but hccl-bench had finished writing it "
                              f"(changed since?): not resumed; {LEFT}")
        keep = data.rfind(b"\n") + 1
    try:
        text = data[:keep].decode("utf-8")
    except UnicodeDecodeError as e:
        raise ConfigError(f"{where}: not UTF-8 text (byte {e.start}): not resumed; {LEFT}") from None
    if not text:
        return pd.DataFrame(), keep
    header = text[:text.index("\n")]
    if header not in (",".join(columns), ",".join([*columns, MATRIX])):
        raise ConfigError(f"{where} has columns {header} but this sweep writes {','.join(columns)} (same --stats, "
                          f"-a auto and --iters/--skew/--jitter as the first run?); {LEFT}")
    try:
        return pd.read_csv(io.StringIO(text), dtype=str, keep_default_na=False), keep
    except (pd.errors.ParserError, pd.errors.EmptyDataError) as e:
        raise ConfigError(f"{where}: malformed CSV ({str(e).strip().splitlines()[0]}); {LEFT}") from None


def _typed(rows: pd.DataFrame, labels: list[str], meta: dict, columns: list[str], text: bool) -> pd.DataFrame:
    """rows with every value checked as any results file's (hcclsim.results.read: CSV text when text,
    else JSON or Parquet values), typed as the sweep types them, and consistent with the file's setup."""
    # imported here: a sweep that resumes nothing never loads the readers
    from .read import COLUMN_TYPES, parse_column

    if list(rows.columns) not in (columns, [*columns, MATRIX]):
        raise ConfigError(f"{labels[0].rsplit(' ', 2)[0]} has columns {','.join(map(str, rows.columns))} but this "
                          f"sweep writes {','.join(columns)} (same --stats, -a auto and --iters/--skew/--jitter as "
                          f"the first run?); {LEFT}")

    def refuse(bad, col: str, expected: str) -> None:
        bad = np.asarray(bad, bool)
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise ConfigError(f"{labels[i]}: {col} is {rows[col].iloc[i]!r}, expected {expected}; {LEFT}")

    setup, topology = meta["setup"], meta["topology"]
    out = {}
    for col in rows.columns:                   # every column a sweep writes has a type (tests/test_compare.py)
        kind = COLUMN_TYPES[col]
        values, bad = parse_column(rows[col].astype(object).reset_index(drop=True), kind, text)
        refuse(bad, col, kind.expected)
        out[col] = values
    collectives = meta["inputs"]["collectives"]
    refuse(~out["collective"].isin(collectives), "collective", f"one of the file's: {', '.join(collectives)}")
    refuse(out["topology"] != topology["name"], "topology", repr(topology["name"]))
    refuse(out["dtype"] != setup["dtype"], "dtype", repr(setup["dtype"]))
    refuse(~out["engine"].isin(setup["engines"]), "engine", f"one of {', '.join(setup['engines'])}")
    refuse(out["ranks"] != topology["resolved"]["ranks"], "ranks", str(topology["resolved"]["ranks"]))
    rooted = out["collective"].isin([C.BROADCAST, C.REDUCE]).to_numpy()
    refuse(out["root"].to_numpy() != np.where(rooted, setup["root"], -1), "root",
           f"{setup['root']} for broadcast and reduce, -1 otherwise")
    matrix = (out["collective"] == C.ALL_TO_ALLV).to_numpy()
    if MATRIX in out:
        given = setup.get("matrix", "uniform")
        refuse(out[MATRIX].to_numpy() != np.where(matrix, given, ""), MATRIX,
               f"{given!r} for all_to_allv (the file's --matrix), empty otherwise")
    elif matrix.any():                          # a file from before the column: its all_to_allv was uniform
        out[MATRIX] = pd.Series(np.where(matrix, setup.get("matrix", "uniform"), ""))
    return pd.DataFrame(out)[[*columns, *([MATRIX] if MATRIX in out else [])]]


def _check_points(rows: pd.DataFrame, labels: list[str], meta: dict) -> None:
    """Each point at most as often as the grid of the file(s) (meta) asks for it: tiny sizes that round to
    the same size_bytes (AllGather of 16 B on 8 ranks: 0 B) give identical rows, one per requested size."""
    setup, ranks = meta["setup"], meta["topology"]["resolved"]["ranks"]
    ws = DTYPE_SIZE[setup["dtype"]]
    traffic = M.parse(setup["matrix"], ranks, "--resume: --matrix") if "matrix" in setup else None
    asked = Counter((c, C.sizing(c, s, ws, ranks, traffic if c == C.ALL_TO_ALLV else None).size_bytes)
                    for c in meta["inputs"]["collectives"] for s in meta["inputs"]["sizes"])
    seen = rows.groupby(ROW_KEY, sort=False).cumcount().to_numpy() + 1
    differs = (rows.duplicated(ROW_KEY) & ~rows.duplicated()).to_numpy()
    for i, (coll, algo, engine, size) in enumerate(zip(*(rows[k] for k in ROW_KEY))):
        point = f"{coll} {algo} {engine} {size} B"
        if not asked[coll, size]:
            why = f"{point}: size_bytes {size} is not a size of the file's grid"
        elif differs[i]:
            why = f"{point} appears before with other values"
        elif seen[i] > asked[coll, size]:
            why = f"{point} appears {seen[i]} times, the file's grid asks for it {asked[coll, size]} time(s)"
        else:
            continue
        raise ConfigError(f"{labels[i]}: {why}; {LEFT}")


# ------------------------------------------------------------------------------------ writing

class RowWriter:
    """Appends finished blocks to FILE (CSV) or to FILE.partial.csv (JSON, Parquet); see the module doc.

    meta: this sweep's metadata (hcclsim.results.provenance.metadata); columns: its rows' columns. With
    resume, the rows already there are checked and kept (``previous``) and ``meta`` becomes the metadata
    of the whole file. The caller holds the output's lock (hcclsim.results.safefile.OutputLock)."""

    def __init__(self, path: str, meta: dict, columns: list[str], resume: bool = False):
        self.path = path
        self.suffix = output_format(path)
        self.target = path if self.suffix == ".csv" else sidecar(path)
        self.rows = 0
        self.previous, self.meta, keep, self.layout = load_previous(path, meta, columns) if resume else \
            (None, meta, 0, None)
        try:
            self.fd = os.open(self.target, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o666)
            os.ftruncate(self.fd, keep)            # before the sidecar says whose rows these are
            write_sidecar(self.target, {**self.meta, "in_progress": True})
        except OSError as e:
            raise ConfigError(f"-o/--output: cannot write {self.target!r} ({e.strerror or e})") from None
        self.size = keep

    def __call__(self, frame: pd.DataFrame) -> None:
        if self.layout:                                # a resumed file's columns, with or without MATRIX
            frame = frame.reindex(columns=self.layout, fill_value="")
        data = _csv(frame, self.size == 0).encode()
        view = memoryview(data)
        with held_back():                              # a Ctrl-C comes after the rows are written and counted
            try:
                while view:
                    view = view[os.write(self.fd, view):]
            except OSError as e:
                os.ftruncate(self.fd, self.size)       # whole lines only
                raise ConfigError(f"-o/--output: cannot write {self.target!r} ({e.strerror or e}); the rows "
                                  f"written before are kept") from None
            self.size += len(data)
            self.rows += len(frame)

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None

    def finish(self, rows: pd.DataFrame) -> None:
        """Close, write the final file (all rows, in order, with self.meta), and drop the partial file."""
        self.close()
        if MATRIX in rows:                             # a resumed file's rows without it: not all_to_allv
            rows = rows.assign(**{MATRIX: rows[MATRIX].fillna("")})
        write(rows, self.path, self.meta)
        if self.target != self.path:
            for p in (Path(self.target), sidecar_path(self.target)):
                p.unlink(missing_ok=True)
