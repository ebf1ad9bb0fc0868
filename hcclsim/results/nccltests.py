"""Reading nccl-tests output (measurements from a real system) for `hccl-bench calibrate`.

Three inputs are accepted, told apart by their content (JSON when it parses as JSON):

* the text table that ``all_reduce_perf`` & co. print: '#' header lines (``# Collective test starting:
  all_reduce_perf``, ``#  Rank  3 Group ...`` device lines, the column header) and data rows
  ``size count type redop root | time algbw busbw #wrong | time algbw busbw #wrong`` -- the
  out-of-place time (6th column, microseconds) is used; any other line (MPI/launcher noise) is ignored;
* nccl-tests' JSON report (``-J FILE``, src/util.cu, ``"version": 1``): ``{"args": [program, ...],
  "config": {"devices": [...]}, "results": [{"size", "count", "type", "redop", "root",
  "out_of_place": {"time" | "cpu_time", "alg_bw", "bus_bw", "nwrong"} | null, "in_place": {...}}]}``;
* a plain JSON list ``[{"size": BYTES, "time_us": MICROSECONDS}, ...]`` (optionally with
  ``"collective"``/``"type"`` per row), for measurements from other tools.

The collective comes from the program name (``all_reduce_perf``) when the output names it, else from the
file name (``...all_reduce...``); ``None`` when neither does. Rows with size 0 or a non-positive time are dropped.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..core.errors import ConfigError
from ..core.units import parse_dtype
from ..schedule import collectives as C

# Spellings in nccl-tests program names and file names, most specific first ('reduce' last).
_NAMES = [("all_reduce", C.ALL_REDUCE), ("allreduce", C.ALL_REDUCE), ("all_gather", C.ALL_GATHER),
          ("allgather", C.ALL_GATHER), ("reduce_scatter", C.REDUCE_SCATTER), ("reducescatter", C.REDUCE_SCATTER),
          ("all_to_all", C.ALL_TO_ALL), ("alltoall", C.ALL_TO_ALL), ("broadcast", C.BROADCAST),
          ("reduce", C.REDUCE)]
_PROGRAM = re.compile(r"#\s*Collective test starting:\s*(\S+)")
_RANK = re.compile(r"#\s*Rank\s+(\d+)\s+Group")


@dataclass
class Measurement:
    """Measured out-of-place times, sorted by size (bytes), one row per size (repeats averaged)."""

    source: str
    collective: str | None        # canonical name, or None when the file does not say
    program: str | None           # e.g. 'all_reduce_perf' (None for plain lists)
    ranks: int | None             # from the device lines, when present
    dtype: str | None
    size_bytes: np.ndarray        # int64
    time_us: np.ndarray           # float64


def collective_of(name: str) -> str | None:
    """'all_reduce_perf' / 'nccl-tests-all_reduce-synthetic.txt' -> 'all_reduce'; None if no name matches."""
    low = name.lower()
    for spelling, coll in _NAMES:
        if spelling in low:
            return coll
    return None


def _program_collective(program: str, where: str) -> str:
    """The collective a nccl-tests program measures; an error for programs hccl-bench does not model."""
    base = Path(program).name
    stem = base.removesuffix("_perf").removesuffix("_perf_mpi")
    coll = collective_of(stem)
    if coll is None or stem.replace("_", "") not in {s.replace("_", "") for s, _ in _NAMES}:
        raise ConfigError(f"{where}: unknown collective {stem!r} (program {base!r}); expected one of: "
                          f"{', '.join(C.COLLECTIVES)}")
    return coll


def _finish(source, collective, program, ranks, dtype, rows) -> Measurement:
    rows = [(s, t) for s, t in rows if s > 0 and t > 0 and np.isfinite(t)]
    if not rows:
        raise ConfigError(f"{source}: no data rows with a size > 0 and a time > 0; expected nccl-tests output "
                          f"(its text table or -J JSON) or a JSON list of {{size, time_us}}")
    by_size: dict[int, list[float]] = {}
    for s, t in rows:
        by_size.setdefault(int(s), []).append(float(t))
    sizes = sorted(by_size)
    return Measurement(source, collective, program, ranks, dtype, np.array(sizes, np.int64),
                       np.array([np.mean(by_size[s]) for s in sizes], np.float64))


def _dtype(name, where):
    return None if name is None else parse_dtype(str(name), where)


def parse_text(text: str, source: str) -> Measurement:
    program = collective = dtype = None
    ranks, rows = set(), []
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("#"):
            m = _PROGRAM.match(stripped)
            if m:
                program = m.group(1)
                collective = _program_collective(program, source)
            m = _RANK.match(stripped)
            if m:
                ranks.add(int(m.group(1)))
            continue
        f = stripped.split()
        if len(f) < 9 or not (f[0].isdigit() and f[1].isdigit()):
            continue
        try:
            t = float(f[5])
        except ValueError:              # trace replay rows without out-of-place columns
            continue
        rows.append((int(f[0]), t))
        dtype = dtype or _dtype(f[2], f"{source}: type column")
    if collective is None:
        collective = collective_of(Path(source).name)
    return _finish(source, collective, program, max(ranks) + 1 if ranks else None, dtype, rows)


def parse_json(doc, source: str) -> Measurement:
    bad = f"{source}: expected nccl-tests -J JSON (an object with 'results') or a list of {{size, time_us}}"
    if isinstance(doc, list):
        rows, colls, dtype = [], set(), None
        for i, r in enumerate(doc):
            if not isinstance(r, dict) or "size" not in r or "time_us" not in r:
                raise ConfigError(f"{bad}; row {i} is {r!r}")
            try:
                rows.append((int(r["size"]), float(r["time_us"])))
            except (TypeError, ValueError):
                raise ConfigError(f"{bad}; row {i} has a non-numeric size or time_us") from None
            if "collective" in r:
                colls.add(C.canonical(r["collective"], f"{source}: row {i} collective"))
            dtype = dtype or _dtype(r.get("type"), f"{source}: row {i} type")
        if len(colls) > 1:
            raise ConfigError(f"{source}: rows of several collectives ({', '.join(sorted(colls))}); "
                              f"expected one collective per file")
        coll = colls.pop() if colls else collective_of(Path(source).name)
        return _finish(source, coll, None, None, dtype, rows)
    if not isinstance(doc, dict) or not isinstance(doc.get("results"), list):
        raise ConfigError(bad)
    args = doc.get("args") or []
    program = str(args[0]) if args else None
    coll = _program_collective(program, source) if program else collective_of(Path(source).name)
    rows, dtype = [], None
    for r in doc["results"]:
        oop = r.get("out_of_place") if isinstance(r, dict) else None
        if not isinstance(oop, dict):
            continue
        t = oop.get("time", oop.get("cpu_time"))
        try:
            rows.append((int(r["size"]), float(t)))
        except (KeyError, TypeError, ValueError):
            continue
        dtype = dtype or _dtype(r.get("type"), f"{source}: type")
    config = doc.get("config") or {}
    devices = config.get("devices") if isinstance(config, dict) else None
    ranks = None
    if isinstance(devices, list) and devices and all(isinstance(d, dict) and "rank" in d for d in devices):
        # With MPI each process reports its first device only: nThreads*nGpus ranks per entry.
        ranks = len(devices) * int(config.get("nthreads", 1)) * int(config.get("ngpus", 1))
    return _finish(source, coll, program and Path(program).name, ranks, dtype, rows)


def read(path: str) -> Measurement:
    """Parse a measurement file (format detected from its content)."""
    try:
        text = Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError as e:
        raise ConfigError(f"{path}: cannot read the measurement ({e.strerror or e})") from None
    head = text.lstrip()[:1]
    if head in ("{", "["):
        try:
            return parse_json(json.loads(text), path)
        except json.JSONDecodeError as e:
            if not any(line.lstrip().startswith("#") for line in text.splitlines()):
                raise ConfigError(f"{path}: malformed JSON: {e}") from None
            # else: a text log whose first line is launcher noise such as '[node-0] ...'
    return parse_text(text, path)
