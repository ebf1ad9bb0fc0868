"""Reading nccl-tests / rccl-tests output: read correctly, or refused naming the line (docs/nccl-tests.md).

A real log is whatever a launcher captured, so the text reader assumes little:

* Layouts come from each table's own column header, never from a fixed position: every layout
  nccl-tests printed (src/common.cu, src/util.cu, 2017-2026) -- ``bytes N type op ... res`` (2017,
  times in ms), ``size count type [redop] [root] time algbw busbw error`` (2019-2022; all_gather has no
  redop, broadcast only a root), ``... redop root time algbw busbw #wrong`` (2022-), ``copybw``
  (2024-2025), per-iteration ``i_min i_max i_p99 i_cv%`` and a ``timestamp`` (2025-), and rccl-tests'
  in-place-only table (-O 0); which time group is out-of-place and which in-place comes from the line
  above the header. A ``cputime`` table (-C 1) is refused: its times are not the collective's.
* Launcher prefixes are removed: MPI's ``[1,0]<stdout>:`` wherever it appears (Open MPI tags each write,
  so one row carries several), and whatever precedes the header's ``#`` (``srun -l``'s ``0: ``) from the
  lines of that table. Any other line that is not a row (NCCL INFO/WARN, warnings) is noise.
* Each table is a block: a new ``# nThread`` banner, column header, ``# Testing N cycle.`` (rccl-tests)
  or the summary lines end the previous one. A block is named by ``# Collective test starting:``, else
  by a program name (``all_gather_perf``) on a line before it, else by the file name. A table nccl-tests
  skipped (hypercube on a rank count that is not a power of 2) measured nothing and is left out.
* Every row is checked: algbw = size / time and busbw = algbw x the collective's factor on the block's
  ranks (nccl-tests' GetBw functions), within half a unit of each printed last digit. A row that fails,
  a row cut short, a row outside any block: the file is refused with the line number.
* Ranks come from the ``# Rank`` lines (with or without ``Group``, and Pid); nodes from their hosts.
  Without rank lines the rank count is the one every row's busbw / algbw allows, if exactly one does; if
  none does, the row that disagrees with the count the other rows give is named.

nccl-tests' -J JSON report and a plain JSON list ``[{"size", "time_us"}]`` (measurements from other tools,
for calibrate) are read too. ``parse_text(text, source) -> [Block]`` is the entry point for text.
"""

from __future__ import annotations

import json
import math
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..core.errors import ConfigError
from ..core.units import parse_dtype
from ..schedule import collectives as C

OUT, IN = "out-of-place", "in-place"
MEASURED = "measured"            # the engine column of an imported row
NCCL_CHOICE = "nccl"             # the algorithm / protocol column when the log forced none
POINT_TO_POINT = ("sendrecv", "hypercube")
# nccl-tests program stems -> collective; gather/scatter and point-to-point tests keep their names.
PROGRAMS = {"all_reduce": C.ALL_REDUCE, "all_gather": C.ALL_GATHER, "reduce_scatter": C.REDUCE_SCATTER,
            "alltoall": C.ALL_TO_ALL, "broadcast": C.BROADCAST, "reduce": C.REDUCE, "gather": "gather",
            "scatter": "scatter", "sendrecv": "sendrecv", "hypercube": "hypercube"}
# Spellings in file names, most specific first ('reduce' last).
_NAMES = [("all_reduce", C.ALL_REDUCE), ("allreduce", C.ALL_REDUCE), ("all_gather", C.ALL_GATHER),
          ("allgather", C.ALL_GATHER), ("reduce_scatter", C.REDUCE_SCATTER), ("reducescatter", C.REDUCE_SCATTER),
          ("all_to_all", C.ALL_TO_ALL), ("alltoall", C.ALL_TO_ALL), ("broadcast", C.BROADCAST),
          ("sendrecv", "sendrecv"), ("hypercube", "hypercube"), ("reduce", C.REDUCE)]

_TAG = re.compile(r"\[\d+,\d+\]<std(?:out|err)>:")                      # mpirun --tag-output
_STARTING = re.compile(r"#\s*Collective test starting:\s*(\S+)")
_PROGRAM = re.compile(r"\b(?:all_reduce|all_gather|reduce_scatter|alltoallv?|broadcast|reduce|gather|scatter|sendrecv|"
                      r"hypercube)_perf(?:_mpi)?\b")
_HEADER = re.compile(r"#\s+(?:size|bytes)\s+(?:count|N)\s+type\b")
_RANK = re.compile(r"#\s*Rank\s+(\d+)\s+(?:Group\s+\d+\s+)?(?:Pid\s+\d+\s+)?on\s+(\S+)\s+device\s+\d+\s+"
                   r"\[[^\]]*\]\s*(.*)")
_OURS = re.compile(r"#\s*hccl-bench algorithm:\s*(\S+)")                   # sweep --format nccl-tests
_SKIPPED = re.compile(r"nRanks \d+ is not a power of 2, skipping")        # src/hypercube.cu: no rows follow
_END = re.compile(r"#\s*(?:Out of bounds values|Avg bus bandwidth|Collective test concluded|Testing \d+ cycle)")
_VERSION = re.compile(r"\b(?:NCCL|RCCL) version (\d+\.\d+\.\d+)|nccl-library=(\d+)")
_FORCED = {key: re.compile(rf"\b{key}(?:=|\s+set by environment to\s+)([A-Za-z0-9_^,;:]+)")
           for key in ("NCCL_ALGO", "NCCL_PROTO")}
_KEY_COLUMNS = {"size": "size", "bytes": "size", "count": "count", "n": "count", "type": "type",
                "redop": "redop", "op": "redop", "root": "root"}
_GROUP_COLUMNS = {"time": "time", "algbw": "algbw", "busbw": "busbw", "copybw": None,
                  "#wrong": "wrong", "error": "wrong", "res": "wrong",
                  "i_min": None, "i_max": None, "i_p99": None, "i_cv%": None}
_WRONG = re.compile(r"N/A|[0-9.]+(?:e[+-]?\d+)?\*?", re.IGNORECASE)
# -C 1 (src/common.cu, 2022-): the printed time is the host's, algbw / busbw come from the GPU's.
_CPUTIME = ("(nccl-tests -C 1): its times are the host's launch times, and algbw / busbw come from GPU times it "
            "does not print, so the collective's time is not in the file; expected a run without -C")
_NUMBER = re.compile(r"(\d+(?:\.(\d*))?|\.\d+)(?:e([+-]?\d+))?", re.IGNORECASE)


@dataclass(frozen=True)
class Row:
    """One measurement: one size, one placement. Numbers as printed (time in microseconds)."""

    line: int
    size_bytes: int
    count: int
    dtype: str
    redop: str | None
    root: int | None
    placement: str
    time_us: float
    algbw_GBps: float
    busbw_GBps: float
    wrong: str | None
    printed: tuple = field(default=(), repr=False, compare=False)     # time, algbw, busbw as printed; unit


@dataclass
class Block:
    """One table of a log: one run of one nccl-tests program."""

    source: str
    line: int                           # the column header's line (0 for JSON)
    collective: str
    program: str | None
    ranks: int
    nodes: int | None
    gpu: str | None
    nccl_version: str | None
    nccl_algo: str | None
    nccl_proto: str | None
    algorithm: str | None = None        # hccl-bench's name, in a log `sweep --format nccl-tests` wrote
    rows: list[Row] = field(default_factory=list)

    @property
    def name(self) -> str:
        return f"{self.collective} (line {self.line})" if self.line else self.collective


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


def program_collective(program: str, where: str) -> str:
    """The collective a nccl-tests program measures ('./build/all_reduce_perf' -> 'all_reduce')."""
    stem = Path(program).name.removesuffix("_mpi").removesuffix("_perf")
    if stem not in PROGRAMS:
        raise ConfigError(f"{where}: program {Path(program).name!r} is not one hccl-bench reads; expected one of "
                          f"{', '.join(p + '_perf' for p in PROGRAMS)}")
    return PROGRAMS[stem]


def conventions(collective: str, n: int) -> list[tuple[float, float, str]]:
    """(algbw / (size / time), busbw / algbw, label) nccl-tests used for a collective on n ranks (its GetBw)."""
    share = (n - 1) / n
    if collective == C.ALL_REDUCE:
        return [(1.0, 2 * share, "")]
    if collective in (C.ALL_GATHER, C.REDUCE_SCATTER):     # before nccl-tests ec1b5e2 (2020-06): algbw = busbw
        return [(1.0, share, ""), (share, 1.0, "the pre-2020-06 nccl-tests definition, algbw = busbw")]
    if collective in (C.ALL_TO_ALL, "gather", "scatter"):
        return [(1.0, share, "")]
    if collective == "hypercube":
        return [(share, 1.0, "")]
    return [(1.0, 1.0, "")]                                  # broadcast, reduce, sendrecv


# ------------------------------------------------------------------------------------------- numbers

def _half_unit(text: str) -> float:
    """Half a unit of the last printed digit: '84.00' -> 0.005, '66108' -> 0.5, '1.2e+03' -> 50."""
    m = _NUMBER.fullmatch(text)
    decimals = len(m.group(2) or "") if m else 0
    return 0.5 * 10.0 ** (int(m.group(3) or 0) - decimals)


def _number(text: str, what: str, where: str) -> float:
    if not _NUMBER.fullmatch(text):
        raise ConfigError(f"{where}: {what} {text!r} is not a number")
    return float(text)


def _whole(text: str, what: str, where: str) -> int:
    if not re.fullmatch(r"-?\d+", text):
        raise ConfigError(f"{where}: {what} {text!r} is not a whole number")
    return int(text)


def _overlap(lo1, hi1, lo2, hi2) -> bool:
    slack = 1e-9 * max(abs(hi1), abs(hi2), 1e-300)
    return lo1 <= hi2 + slack and lo2 <= hi1 + slack


def consistent(size: int, t: tuple[float, float], a: tuple[float, float], b: tuple[float, float],
               scale: float, factor: float) -> str | None:
    """None when printed time t, algbw a, busbw b (value, half unit) agree with algbw = scale x size / time
    and busbw = factor x algbw; else what disagrees."""
    t_lo, t_hi = max(t[0] - t[1], 0.0), t[0] + t[1]
    a_lo = scale * size / (t_hi * 1e3) if t_hi > 0 else math.inf
    a_hi = scale * size / (t_lo * 1e3) if t_lo > 0 else math.inf
    if not _overlap(a[0] - a[1], a[0] + a[1], a_lo, a_hi):
        want = scale * size / (t[0] * 1e3) if t[0] > 0 else math.inf
        return f"algbw {a[0]:g} GB/s but size / time = {size} B / {t[0]:g} us = {want:.4g} GB/s"
    lo, hi = max(a[0] - a[1], a_lo), min(a[0] + a[1], a_hi)
    if not _overlap(b[0] - b[1], b[0] + b[1], lo * factor, hi * factor):
        return f"busbw {b[0]:g} GB/s but algbw x {factor:.6g} = {a[0] * factor:.4g} GB/s"
    return None


# ---------------------------------------------------------------------------------------------- text

@dataclass
class _Layout:
    keys: list[str]                     # key column names, in order
    groups: list[tuple[str, list]]      # (placement, [field name or None per column])
    unit: float                         # microseconds per printed time unit
    timestamp: bool
    prefix: str
    line: int

    @property
    def width(self) -> int:
        return len(self.keys) + sum(len(g) for _, g in self.groups) + 2 * self.timestamp


def _layout(body: str, prefix: str, above: str, lineno: int, where: str) -> _Layout:
    tokens = body.lstrip("#").split()
    if "cputime" in tokens:
        raise ConfigError(f"{where}: line {lineno}: column header: 'cputime' {_CPUTIME}")
    keys, i = [], 0
    while i < len(tokens) and tokens[i].lower() in _KEY_COLUMNS:
        keys.append(_KEY_COLUMNS[tokens[i].lower()])
        i += 1
    groups, timestamp = [], False
    for tok in tokens[i:]:
        low = tok.lower()
        if low == "timestamp":
            timestamp = True
        elif low == "time":
            groups.append(["time"])
        elif low in _GROUP_COLUMNS and groups:
            groups[-1].append(_GROUP_COLUMNS[low])
        else:
            raise ConfigError(f"{where}: line {lineno}: column header: unknown column {tok!r}")
    if keys[:3] != ["size", "count", "type"] or not groups or any(
            not {"time", "algbw", "busbw"} <= set(g) for g in groups):
        raise ConfigError(f"{where}: line {lineno}: column header: expected size, count, type, then time, algbw, "
                          f"busbw columns")
    has_out, has_in = "out-of-place" in above, "in-place" in above
    if has_out and has_in or not (has_out or has_in) and len(groups) == 2:
        placements = [OUT, IN]
    else:
        placements = [OUT] if has_out else [IN] if has_in else []
    if len(placements) != len(groups):
        raise ConfigError(f"{where}: line {lineno}: {len(groups)} time column(s) but the line above the column "
                          f"header does not say which are out-of-place and which in-place")
    # 2017's 'bytes N' layout printed milliseconds (deltaSec * 1.0E3); later ones microseconds.
    return _Layout(keys, list(zip(placements, groups)), 1e3 if tokens[0] == "bytes" else 1.0, timestamp, prefix,
                   lineno)


@dataclass
class _State:
    collective: str | None = None       # for blocks the log does not name
    program: str | None = None          # the next block's program
    ranks: dict = field(default_factory=dict)
    version: str | None = None
    forced: dict = field(default_factory=dict)      # NCCL_ALGO / NCCL_PROTO of the current run
    file_forced: dict = field(default_factory=dict)  # ... printed before the first run: every run's
    banners: int = 0
    algorithm: str | None = None        # the next block's hccl-bench algorithm


def _version(m: re.Match) -> str:
    if m.group(1):
        return m.group(1)
    code = int(m.group(2))              # NCCL_VERSION_CODE: 22501 -> 2.25.1 (2.9.x and older: 2903 -> 2.9.3)
    return f"{code // 10000}.{code // 100 % 100}.{code % 100}" if code >= 10000 else \
        f"{code // 1000}.{code // 100 % 10}.{code % 100}"


def _clean(raw: str) -> str:
    return _TAG.sub("", raw).rstrip("\r\n")


def _looks_like_row(tokens: list[str]) -> bool:
    return len(tokens) >= 5 and tokens[0].isdigit() and tokens[1].isdigit() and tokens[2].lower() in _TYPES


def parse_text(text: str, source: str, collective: str | None = None) -> list[Block]:
    """The blocks of a nccl-tests / rccl-tests text log, every row checked; ConfigError naming the line.
    `collective` names the blocks the log does not name."""
    state, blocks = _State(collective=collective), []
    layout: _Layout | None = None
    block: Block | None = None
    above, closed_at, skipped = "", None, None
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = _clean(raw)
        if layout and layout.prefix and line.startswith(layout.prefix):
            line = line[len(layout.prefix):]
        tokens = line.split()
        header = _HEADER.search(line)
        if header:
            blocks += [block] if block else []
            layout = _layout(line[header.start():], line[:header.start()], above, lineno, source)
            block = _new_block(source, lineno, state)
        elif "#" in line and not _looks_like_row(tokens):
            hashed = line[line.index("#"):].strip()
            if hashed.startswith("# nThread") or _END.match(hashed):
                blocks += [block] if block else []
                if block and hashed.startswith("# Testing"):       # rccl-tests -s: the same table again
                    block = Block(**{**block.__dict__, "line": lineno, "rows": []})
                else:
                    block, layout, closed_at = None, None, lineno if block else closed_at
                if hashed.startswith("# nThread"):      # a new run: its own ranks and environment
                    state.ranks, state.forced = {}, dict(state.file_forced)
                    state.banners += 1
            if m := _STARTING.match(hashed):
                state.program = m.group(1)
            if m := _RANK.match(hashed):
                state.ranks[int(m.group(1))] = (m.group(2), m.group(3).strip())
            if (m := _OURS.match(hashed)) and block is None:
                state.algorithm = m.group(1)
            above = hashed
        elif block is not None and tokens and tokens[0].isdigit():
            block.rows += _row(tokens, layout, lineno, source)
        elif _looks_like_row(tokens):
            after = f" (the table above ended at line {closed_at})" if closed_at else ""
            raise ConfigError(f"{source}: line {lineno}: a data row with no column header above it{after}; "
                              f"expected the '#  size  count  type ...' header line of its table")
        elif block is not None and not block.rows and (m := _SKIPPED.search(line)):    # the run measured nothing
            block, layout, skipped = None, None, skipped or (lineno, m.group(0))
        elif "NCCL INFO" not in line and (m := _PROGRAM.search(line)):
            state.program = m.group(0)
        for m in _VERSION.finditer(line):
            state.version = _version(m)
        for key, rx in _FORCED.items():
            if m := rx.search(line):
                state.forced[key] = m.group(1).lower()
                if not state.banners:
                    state.file_forced[key] = state.forced[key]
                if block is not None:
                    setattr(block, key.lower(), state.forced[key])
    blocks += [block] if block else []
    if not blocks and skipped:
        raise ConfigError(f"{source}: line {skipped[0]}: nccl-tests skipped every table it began ({skipped[1]!r}): "
                          f"nothing was measured")
    if not blocks:
        raise ConfigError(f"{source}: no nccl-tests table (no '#  size  count  type  ...  time  algbw  busbw' "
                          f"column header); expected nccl-tests or rccl-tests output, its -J JSON, or a JSON "
                          f"list of {{size, time_us}}")
    for b in blocks:
        _finish_block(b, state, source)
    return blocks


_TYPES = {"int8", "uint8", "int32", "uint32", "int64", "uint64", "half", "float", "double", "bfloat16", "char",
          "int", "fp8_e4m3", "fp8_e5m2", "f8e4m3", "f8e5m2", "float8e4m3", "float8e5m2", "float16", "float32",
          "float64", "uint", "fp8"}


def _new_block(source: str, lineno: int, state: _State) -> Block:
    where = f"{source}: line {lineno}"
    coll = program_collective(state.program, where) if state.program else \
        collective_of(Path(source).name) or state.collective
    if coll is None:
        raise ConfigError(f"{where}: cannot tell which collective this table measures (no 'Collective test "
                          f"starting' line, program name such as all_reduce_perf before it, or collective in the "
                          f"file name); pass -c NAME")
    state.program, program, algorithm, state.algorithm = None, state.program, state.algorithm, None
    ranks = state.ranks
    hosts = {h for h, _ in ranks.values()} if set(ranks) == set(range(len(ranks))) else ()   # elided: unknown
    gpus = Counter(g for _, g in ranks.values() if g)
    return Block(source, lineno, coll, program and Path(program).name,
                 max(ranks) + 1 if ranks else 0, len(hosts) or None, gpus.most_common(1)[0][0] if gpus else None,
                 state.version, state.forced.get("NCCL_ALGO"), state.forced.get("NCCL_PROTO"), algorithm)


def _row(tokens: list[str], layout: _Layout, lineno: int, source: str) -> list[Row]:
    where = f"{source}: line {lineno}"
    if len(tokens) == layout.width - 1 and "redop" in layout.keys:     # redop printed blank (old all_to_all, hypercube)
        tokens = tokens[:layout.keys.index("redop")] + ["-"] + tokens[layout.keys.index("redop"):]
    if len(tokens) != layout.width:
        raise ConfigError(f"{where}: {len(tokens)} fields, but the column header at line {layout.line} has "
                          f"{layout.width}; a cut or merged line (interleaved output of another process?)")
    key = dict(zip(layout.keys, tokens))
    size = _whole(key["size"], "size", where)
    count = _whole(key["count"], "count", where)
    root = _whole(key["root"], "root", where) if "root" in key else None
    try:
        dtype = parse_dtype(key["type"], where)
    except ConfigError:
        dtype = key["type"]
    rows, i = [], len(layout.keys)
    for placement, fields in layout.groups:
        values = dict(zip(fields, tokens[i:i + len(fields)]))
        i += len(fields)
        wrong = values.get("wrong")
        if wrong is not None and not _WRONG.fullmatch(wrong):
            raise ConfigError(f"{where}: {placement} #wrong {wrong!r}: expected a number or N/A")
        rows.append(Row(lineno, size, count, dtype, key.get("redop"), root, placement,
                        _number(values["time"], f"{placement} time", where) * layout.unit,
                        _number(values["algbw"], f"{placement} algbw", where),
                        _number(values["busbw"], f"{placement} busbw", where),
                        None if wrong in (None, "N/A") else wrong,
                        (values["time"], values["algbw"], values["busbw"], layout.unit)))
    return rows


def _finish_block(b: Block, state: _State, source: str) -> None:
    if not b.rows:
        raise ConfigError(f"{source}: line {b.line}: the table of {b.collective} has no data rows")
    b.nccl_version = b.nccl_version or state.version
    if not b.ranks:
        b.ranks = _infer_ranks(b, source)
    for r in b.rows:
        _check(b, r, source)


def _printed(r: Row):
    t, a, bb, unit = r.printed
    return ((r.time_us, _half_unit(t) * unit), (r.algbw_GBps, _half_unit(a)), (r.busbw_GBps, _half_unit(bb)))


def _fits(r: Row, collective: str, n: int) -> bool:
    return any(consistent(r.size_bytes, *_printed(r), s, f) is None for s, f, _ in conventions(collective, n))


def _check(b: Block, r: Row, source: str, ranks_from: str = "") -> None:
    t, a, bb = _printed(r)
    first = None
    for scale, factor, label in conventions(b.collective, b.ranks):
        why = consistent(r.size_bytes, t, a, bb, scale, factor)
        if why is None:
            return
        first = first or why
    at = f"results[{r.line}]" if b.line == 0 else f"line {r.line}"          # a -J result: its index
    raise ConfigError(f"{source}: {at}: {r.placement} {first} ({b.collective} on {b.ranks} ranks"
                      f"{ranks_from}); the row disagrees with itself: refused rather than misread")


def _infer_ranks(b: Block, source: str) -> int:
    """The rank count every row's numbers allow (nccl-tests computed busbw from it), when exactly one does.
    When none does, the row that disagrees with the count the most telling rows give is named."""
    why = "the numbers of this collective do not depend on it"
    if conventions(b.collective, 2) != conventions(b.collective, 3):
        rows = sorted(b.rows, key=lambda r: -r.algbw_GBps)          # the most telling rows first
        fits = [n for n in range(2, 4097) if all(_fits(r, b.collective, n) for r in rows)]
        if len(fits) == 1:
            return fits[0]
        candidates = sorted({n for r in rows[:3] for n in range(2, 4097) if _fits(r, b.collective, n)})
        if not fits and candidates:
            b.ranks = max(candidates, key=lambda n: sum(_fits(r, b.collective, n) for r in rows))
            for r in b.rows:
                _check(b, r, source, ", the count most of its rows give: no '# Rank' lines")
        why = "its busbw / algbw fits no rank count" if not fits else \
            f"its busbw / algbw fits {len(fits)} rank counts ({fits[0]} ... {fits[-1]})"
    raise ConfigError(f"{source}: line {b.line}: no '# Rank N ...' device lines before this table, so the rank "
                      f"count is unknown ({why}); expected the device lines nccl-tests prints")


# ---------------------------------------------------------------------------------------------- JSON

def parse_report(doc: dict, source: str, collective: str | None = None) -> list[Block]:
    """nccl-tests' -J report (src/util.cu, "version" 1-3) as one block; each result checked like a text row,
    and carrying what the text row carries (the device name, #wrong), so a run's -J file and its stdout
    import to the same rows."""
    args = doc.get("args") or []
    program = str(args[0]) if args else None
    coll = program_collective(program, source) if program else collective_of(Path(source).name) or collective
    if coll is None:
        raise ConfigError(f"{source}: cannot tell which collective was measured (no args[0] program, no "
                          f"collective in the file name); pass -c NAME")
    config = doc.get("config") or {}
    devices = config.get("devices") if isinstance(config, dict) else None
    ranks, hosts, gpu = 0, None, None
    if isinstance(devices, list) and devices and all(isinstance(d, dict) and "rank" in d for d in devices):
        # With MPI each process reports its first device only: nThreads*nGpus ranks per entry.
        ranks = len(devices) * int(config.get("nthreads", 1)) * int(config.get("ngpus", 1))
        hosts = len({d.get("hostname") for d in devices}) if all("hostname" in d for d in devices) else None
        names = Counter(str(d["device_info"]) for d in devices if d.get("device_info"))
        gpu = names.most_common(1)[0][0] if names else None
    env = " ".join(str(e) for e in doc.get("env") or [])
    forced = {k: (m.group(1).lower() if (m := rx.search(env)) else None) for k, rx in _FORCED.items()}
    version = doc.get("nccl_version")
    block = Block(source, 0, coll, program and Path(program).name, ranks, hosts, gpu,
                  _version(_VERSION.search(f"nccl-library={version}")) if isinstance(version, int) else None,
                  forced["NCCL_ALGO"], forced["NCCL_PROTO"])
    for i, r in enumerate(doc["results"]):
        where = f"{source}: results[{i}]"
        if not isinstance(r, dict):
            raise ConfigError(f"{where}: expected an object, got {r!r}")
        try:
            size, count = int(r["size"]), int(r["count"])
            root = int(str(r.get("root", "-1")).strip())
        except (KeyError, TypeError, ValueError):
            raise ConfigError(f"{where}: size, count and root must be whole numbers") from None
        try:
            dtype = parse_dtype(str(r.get("type")), f"{where}.type")
        except ConfigError:
            dtype = str(r.get("type"))
        for key, placement in (("out_of_place", OUT), ("in_place", IN)):
            part = r.get(key)
            if part is None:
                continue
            if isinstance(part, dict) and "cpu_time" in part:
                raise ConfigError(f"{where}.{key}: 'cpu_time' {_CPUTIME}")
            try:
                t = float(part["time"])
                a, b = float(part["alg_bw"]), float(part["bus_bw"])
                wrong = None if part.get("nwrong") is None else f"{float(part['nwrong']):g}"   # text: %6g
            except (AttributeError, KeyError, TypeError, ValueError):
                raise ConfigError(f"{where}.{key}: expected numbers time, alg_bw, bus_bw, nwrong, got {part!r}") \
                    from None
            if not all(math.isfinite(v) and v >= 0 for v in (t, a, b)):
                raise ConfigError(f"{where}.{key}: time, alg_bw and bus_bw must be finite and >= 0, got {part!r}")
            block.rows.append(Row(i, size, count, dtype, r.get("redop"), root, placement, t, a, b, wrong,
                                  (f"{t:.6f}", f"{a:.6f}", f"{b:.6f}", 1.0)))         # jsonDouble prints %lf
    if not block.rows:
        raise ConfigError(f"{source}: results: no measurement (every out_of_place and in_place is null)")
    block.ranks = block.ranks or _infer_ranks(block, source)
    for r in block.rows:
        _check(block, r, source)
    return [block]


def _plain_list(doc: list, source: str) -> Measurement:
    bad = f"{source}: expected nccl-tests -J JSON (an object with 'results') or a list of {{size, time_us}}"
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
        if r.get("type") is not None:
            dtype = dtype or parse_dtype(str(r["type"]), f"{source}: row {i} type")
    if len(colls) > 1:
        raise ConfigError(f"{source}: rows of several collectives ({', '.join(sorted(colls))}); "
                          f"expected one collective per file")
    coll = colls.pop() if colls else collective_of(Path(source).name)
    return _measurement(source, coll, None, None, dtype, rows)


# ----------------------------------------------------------------------------------------------- files

def _text(path: str) -> str:
    try:
        return Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError as e:
        raise ConfigError(f"{path}: cannot read the measurement ({e.strerror or e})") from None


def _json(text: str, path: str):
    """The document when the file is JSON; None when it is text (a log whose first line is '[...] noise')."""
    head = text.lstrip()[:1]
    if head not in ("{", "["):
        return None
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        if head == "{" or not any(_HEADER.search(_clean(line)) for line in text.splitlines()):
            raise ConfigError(f"{path}: malformed JSON: {e}") from None
        return None


def read_blocks(path: str, collective: str | None = None) -> list[Block]:
    """Every block of a log (text or -J JSON); `collective` names the blocks the log does not name."""
    text = _text(path)
    doc = _json(text, path)
    if doc is None:
        return parse_text(text, path, collective)
    if isinstance(doc, dict) and isinstance(doc.get("results"), list):
        return parse_report(doc, path, collective)
    if _unfinished_report(doc):
        raise ConfigError(f"{path}: a nccl-tests -J report with no 'results': the run stopped before its first "
                          f"measurement (nccl-tests closes the file on an early error); nothing to import")
    raise ConfigError(f"{path}: expected nccl-tests output (its text table or -J JSON report)")


def _unfinished_report(doc) -> bool:
    """The header nccl-tests writes before any result (src/util.cu jsonOutputInit), with no 'results' list."""
    return isinstance(doc, dict) and "results" not in doc and {"args", "config", "nccl_version"} <= doc.keys()


def is_log(path: str) -> bool:
    """Whether compare/plot read path as a log: any suffix but .csv, .json and .parquet, or a -J report."""
    return Path(path).suffix.lower() not in (".csv", ".json", ".parquet") or _is_report(path)


def _is_report(path: str) -> bool:
    if Path(path).suffix.lower() != ".json" or not Path(path).is_file():
        return False
    try:
        doc = json.loads(_text(path))
    except json.JSONDecodeError:
        return False
    return isinstance(doc, dict) and ("results" in doc or _unfinished_report(doc)) and "rows" not in doc


def _measurement(source, collective, program, ranks, dtype, rows) -> Measurement:
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


def read(path: str, collective: str | None = None) -> Measurement:
    """One collective's out-of-place times, for calibrate: the file's only block, or its block of `collective`."""
    text = _text(path)
    doc = _json(text, path)
    if isinstance(doc, list):
        return _plain_list(doc, path)
    blocks = read_blocks(path, collective)
    if collective is not None:
        blocks = [b for b in blocks if b.collective == collective] or blocks
    if len(blocks) > 1:
        raise ConfigError(f"{path}: {len(blocks)} tables ({', '.join(b.name for b in blocks)}); calibrate fits "
                          f"one: pass -c NAME, or split the file")
    b = blocks[0]
    if b.collective not in C.COLLECTIVES:
        raise ConfigError(f"{path}: {b.collective} is point-to-point or not modelled; calibrate fits one of "
                          f"{', '.join(C.COLLECTIVES)}")
    dtypes = {r.dtype for r in b.rows}
    return _measurement(path, b.collective, b.program, b.ranks, dtypes.pop() if len(dtypes) == 1 else None,
                        [(r.size_bytes, r.time_us) for r in b.rows if r.placement == OUT])


# ------------------------------------------------------------------------------------ results rows

EXTRA_COLUMNS = ["placement", "repeat", "wrong", "nodes", "gpu", "nccl_version", "nccl_algo", "nccl_proto",
                 "program", "log", "line"]


def to_records(blocks: list[Block], source: str, seen: Counter | None = None) -> list[dict]:
    """One results row per (block, size, placement): hccl-bench's columns (sweeping/sweep.py COLUMNS) and
    the log's metadata. A key seen again (a size printed twice, a second table of the same collective)
    gets repeat 2, 3, ... and topology STEM#2, STEM#3, so every row is kept and keys stay unique (`seen`
    carries the keys across logs)."""
    stem, seen, out = Path(source).stem, Counter() if seen is None else seen, []
    for b in blocks:
        algorithm, protocol = b.algorithm or b.nccl_algo or NCCL_CHOICE, b.nccl_proto or NCCL_CHOICE
        for r in b.rows:
            key = (b.collective, algorithm, stem, b.ranks, r.size_bytes, r.dtype, r.placement)
            seen[key] += 1
            n = seen[key]
            out.append({"collective": b.collective, "algorithm": algorithm,
                        "topology": stem if n == 1 else f"{stem}#{n}", "ranks": b.ranks, "engine": MEASURED,
                        "size_bytes": r.size_bytes, "count": r.count, "dtype": r.dtype,
                        "root": -1 if r.root is None else r.root, "time_us": r.time_us,
                        "algbw_GBps": r.algbw_GBps, "busbw_GBps": r.busbw_GBps, "protocol": protocol,
                        "placement": r.placement, "repeat": n, "wrong": r.wrong or "", "nodes": b.nodes or "",
                        "gpu": b.gpu or "", "nccl_version": b.nccl_version or "", "nccl_algo": b.nccl_algo or "",
                        "nccl_proto": b.nccl_proto or "", "program": b.program or "", "log": source,
                        "line": r.line})
    return out


def log_table(path: str) -> tuple[list[str], list[list]]:
    """A log's out-of-place rows as (columns, rows), for results/read.py (compare and plot take logs)."""
    records = [r for r in to_records(read_blocks(path), path) if r["placement"] == OUT]
    if not records:
        raise ConfigError(f"{path}: no out-of-place rows (an in-place-only table: rccl-tests -O 0); import it "
                          f"with `hccl-bench import` to keep its in-place rows")
    columns = list(records[0])
    return columns, [[r[c] for c in columns] for r in records]


def align(baseline, current):
    """Two results frames (results/read.py load_results) made comparable when one is measured (engine
    `measured`) and the other simulated: the measured rows take the simulation's algorithm, topology and
    engine, which must each be one value; repeated measurements (topology STEM#2 ...) are left out."""
    sides = [baseline, current]
    measured = [bool(len(df)) and bool((df["engine"] == MEASURED).all()) for df in sides]
    if measured[0] == measured[1]:
        return baseline, current
    m, s = (0, 1) if measured[0] else (1, 0)
    sim = sides[s]
    for col in ("algorithm", "topology", "engine"):
        values = sorted(set(sim[col]))
        if len(values) > 1:
            raise ConfigError(f"{('BASELINE', 'CURRENT')[s]}: a measurement is compared with one simulated "
                              f"{col}, but the file holds {', '.join(map(str, values))}; sweep with one (-a NAME, "
                              f"-t PRESET, --engine NAME)")
    first = sides[m][~sides[m]["topology"].str.contains(r"#\d+$", regex=True)]
    sides[m] = first.assign(**{col: sim[col].iloc[0] for col in ("algorithm", "topology", "engine")})
    return sides[0], sides[1]
