"""Traffic matrices: how many bytes each rank sends each rank in an AllToAllv, send_recv or pp_ring.

A :class:`Traffic` holds whole *units*: rank i sends rank j ``units[i, j]`` units. The unit is what a
sweep scales (hcclsim.schedule.collectives.sizing): at a requested size it is a whole number of elements,
so one compiled schedule serves every size of a sweep (the IR's chunk is one unit, each pair moves its
count of chunks). Weights in small whole ratios are kept exactly; others are rounded, the lightest pair that
sends anything to ``RESOLUTION`` units (fewer when the heaviest would pass ``EXACT_LIMIT``), and never to
zero: the pairs that communicate stay the same.

Where the matrix comes from (``--matrix``): a CSV file (N lines of N comma-separated bytes or relative
weights), a NumPy ``.npy`` file (a 2-D array), or a named distribution with a seed:

* ``uniform``: every pair the same (AllToAll's traffic);
* ``zipf:S``: each rank's traffic Zipf-skewed over its peers, weight 1/k^S for its k-th favourite (a
  seeded permutation per rank);
* ``hot:R[:F]``: every rank sends the share F (default 0.5) of its traffic to rank R, the rest evenly;
* ``dlrm:TABLES``: DLRM's embedding exchange under table-wise model parallelism (Naumov et al., "Deep
  Learning Recommendation Model for Personalization and Recommendation Systems", arXiv:1906.00091, sec.
  4.1 and Fig. 2: the embedding tables are distributed over the devices, and the butterfly shuffle --
  an all-to-all -- exchanges every rank's minibatch slice of every table; torchrec's table-wise sharding
  does the same, TwPooledEmbeddingDist): table t lives on rank t mod N, every rank's batch looks up every
  table, so rank i sends the owner of table t its batch's rows of t. The paper's tables share one
  embedding dimension and the batch is split evenly, so each table is one unit per rank: units[i, j] =
  the number of tables rank j owns. The seed plays no part.

Any of them takes ``:seed=K`` (default 0).
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import numpy as np

from ..core.errors import ConfigError

RESOLUTION = 64          # units of the lightest pair when weights are rounded (an estimate: <= 1/128 error on a pair)
EXACT_LIMIT = 4096       # most units a pair gets (an estimate: bounds a rank's buffer, hence the smallest size)
DISTRIBUTIONS = ("uniform", "zipf:S", "hot:R[:F]", "dlrm:TABLES")


@dataclass(frozen=True, eq=False)
class Traffic:
    """units[i, j]: the units rank i sends rank j (int64, square, >= 0). Equal matrices are equal keys
    (a structure key: one compiled schedule per matrix)."""

    units: np.ndarray
    label: str = "matrix"

    @property
    def n(self) -> int:
        return len(self.units)

    @cached_property
    def total(self) -> int:
        return int(self.units.sum())

    @cached_property
    def send_offsets(self) -> np.ndarray:
        """send_offsets[i, j]: where rank i's units for rank j start in its input (MPI's sdispls)."""
        return np.cumsum(self.units, axis=1) - self.units

    @cached_property
    def recv_offsets(self) -> np.ndarray:
        """recv_offsets[j, i]: where rank j's output holds the units from rank i (MPI's rdispls)."""
        return (np.cumsum(self.units, axis=0) - self.units).T

    @cached_property
    def chunks(self) -> int:
        """Units a rank's input or output buffer needs: the largest row or column sum."""
        return int(max(self.units.sum(axis=1).max(), self.units.sum(axis=0).max()))

    @cached_property
    def _key(self) -> bytes:
        return self.units.tobytes()

    def __hash__(self) -> int:
        return hash(self._key)

    def __eq__(self, other) -> bool:
        return isinstance(other, Traffic) and self.n == other.n and self._key == other._key

    def __repr__(self) -> str:
        return f"Traffic({self.label}, {self.n} ranks, {self.total} units)"


def from_weights(weights, label: str = "matrix", where: str = "--matrix") -> Traffic:
    """Whole units in proportion to the weights: exact when they are whole multiples of one value (after
    dividing out the largest such) within EXACT_LIMIT; else rounded as the module says. Refused when
    nothing leaves a rank."""
    w = np.asarray(weights, np.float64)
    off = ~np.eye(len(w), dtype=bool)
    if not (w[off] > 0).any():
        raise ConfigError(f"{where}: every rank sends only to itself (or nothing): expected some traffic "
                          f"between ranks")
    for ratios in (w, w / w[w > 0].min()):
        whole = np.round(ratios)
        if np.allclose(ratios, whole, rtol=1e-9, atol=0) and whole.max() < 2 ** 62:
            units = whole.astype(np.int64)
            units //= math.gcd(*(int(x) for x in np.unique(units[units > 0])))
            if units.max() <= EXACT_LIMIT:
                return Traffic(units, label)
    scale = min(RESOLUTION / w[w > 0].min(), EXACT_LIMIT / w.max())
    units = np.where(w > 0, np.maximum(np.round(w * scale), 1), 0).astype(np.int64)
    return Traffic(units, label)


# ----------------------------------------------------------------------------- named distributions

def uniform(n: int) -> Traffic:
    return Traffic(np.ones((n, n), np.int64), "uniform")


def zipf(n: int, s: float, seed: int = 0) -> Traffic:
    rng = np.random.default_rng(seed)
    w = np.empty((n, n))
    for i in range(n):
        w[i, rng.permutation(n)] = 1.0 / np.arange(1, n + 1) ** s
    return from_weights(w, f"zipf:{s:g}")


def hot(n: int, rank: int, share: float = 0.5) -> Traffic:
    w = np.full((n, n), (1.0 - share) / (n - 1))
    w[:, rank] = share
    return from_weights(w, f"hot:{rank}:{share:g}")


def dlrm(n: int, tables: int) -> Traffic:
    owned = np.bincount(np.arange(tables) % n, minlength=n)
    return from_weights(np.tile(owned, (n, 1)), f"dlrm:{tables}")


def pair(n: int, src: int, dst: int) -> Traffic:
    """One message: rank src to rank dst (send_recv)."""
    units = np.zeros((n, n), np.int64)
    units[src, dst] = 1
    return Traffic(units, f"pair:{src}:{dst}")


def ring(n: int) -> Traffic:
    """Every rank sends one message to the next, the last to the first (pp_ring: nccl-tests' sendrecv)."""
    units = np.zeros((n, n), np.int64)
    units[np.arange(n), (np.arange(n) + 1) % n] = 1
    return Traffic(units, "ring")


# ----------------------------------------------------------------------------------------- parsing

def parse(spec: str, n: int, where: str = "--matrix") -> Traffic:
    """A --matrix value -> the traffic of n ranks: a named distribution, or a .csv / .npy file."""
    text = str(spec).strip()
    name, *args = text.split(":")
    seed, args = _seed(args, where, text)
    if name in ("uniform", "zipf", "hot", "dlrm"):
        return _distribution(name, args, seed, n, where, text)
    path = Path(text)
    if not path.is_file():
        raise ConfigError(f"{where}: {text!r} is neither a file nor a distribution; expected a .csv or .npy file "
                          f"or one of {', '.join(DISTRIBUTIONS)} (each may end in :seed=K)")
    w = read_npy(path, where) if path.suffix.lower() == ".npy" else read_csv(path, where)
    if len(w) != n:
        raise ConfigError(f"{where} {path}: a {len(w)} x {len(w)} matrix, expected {n} x {n} (one row and one "
                          f"column per rank of the topology)")
    return from_weights(w, path.name, f"{where} {path}")


def _seed(args: list[str], where: str, text: str) -> tuple[int, list[str]]:
    seeds = [a for a in args if a.startswith("seed=")]
    try:
        seed = int(seeds[-1][5:]) if seeds else 0
    except ValueError:
        raise ConfigError(f"{where}: {text!r}: expected seed=K with a whole number K") from None
    return seed, [a for a in args if not a.startswith("seed=")]


def _distribution(name: str, args: list[str], seed: int, n: int, where: str, text: str) -> Traffic:
    forms = {"uniform": (0, 0), "zipf": (1, 1), "hot": (1, 2), "dlrm": (1, 1)}
    lo, hi = forms[name]
    form = next(d for d in DISTRIBUTIONS if d.startswith(name))
    if not lo <= len(args) <= hi:
        raise ConfigError(f"{where}: {text!r}: expected {form}")
    try:
        if name == "uniform":
            return uniform(n)
        if name == "zipf":
            s = float(args[0])
            if not s >= 0 or math.isinf(s):
                raise ValueError
            return zipf(n, s, seed)
        if name == "hot":
            rank, share = int(args[0]), float(args[1]) if len(args) > 1 else 0.5
            if not 0 <= rank < n or not 0 < share <= 1:
                raise ValueError
            return hot(n, rank, share)
        tables = int(args[0])
        if tables < 1:
            raise ValueError
        return dlrm(n, tables)
    except ValueError:
        what = {"zipf": "S >= 0", "hot": f"a rank R in 0..{n - 1} and a share 0 < F <= 1",
                "dlrm": "a whole number of tables >= 1"}[name]
        raise ConfigError(f"{where}: {text!r}: expected {form} with {what}") from None


def read_csv(path: Path, where: str = "--matrix") -> np.ndarray:
    """N lines of N non-negative numbers (blank lines and lines starting with # skipped); refused whole,
    naming the line and column, when it is not so."""
    rows, lines = [], []
    try:
        with open(path, newline="", encoding="utf-8") as f:
            for lineno, fields in enumerate(csv.reader(f), 1):
                if not fields or not "".join(fields).strip() or fields[0].lstrip().startswith("#"):
                    continue
                rows.append([_number(x, path, lineno, col, where) for col, x in enumerate(fields, 1)])
                lines.append(lineno)
    except (OSError, UnicodeDecodeError, csv.Error) as e:
        raise ConfigError(f"{where} {path}: cannot read it as CSV ({e})") from None
    if not rows:
        raise ConfigError(f"{where} {path}: no rows; expected N lines of N comma-separated numbers")
    for lineno, row in zip(lines, rows):
        if len(row) != len(rows):
            raise ConfigError(f"{where} {path}: line {lineno} has {len(row)} columns, expected {len(rows)} (a square "
                              f"matrix: the file has {len(rows)} rows)")
    return np.array(rows, np.float64)


def _number(text: str, path: Path, line: int, col: int, where: str) -> float:
    try:
        x = float(text)
    except ValueError:
        x = math.nan
    if not math.isfinite(x) or x < 0:
        got = "a negative number" if x < 0 else "not a number"
        raise ConfigError(f"{where} {path}: line {line}, column {col}: {text.strip()!r} is {got}; expected bytes or a "
                          f"weight >= 0")
    return x


def read_npy(path: Path, where: str = "--matrix") -> np.ndarray:
    """A square 2-D numeric array of non-negative finite numbers."""
    try:
        a = np.load(path, allow_pickle=False)
    except (OSError, ValueError, EOFError) as e:
        raise ConfigError(f"{where} {path}: not a NumPy .npy file ({e})") from None
    if a.ndim != 2 or a.shape[0] != a.shape[1]:
        raise ConfigError(f"{where} {path}: an array of shape {a.shape}, expected a square N x N matrix")
    if a.dtype.kind not in "iuf":
        raise ConfigError(f"{where} {path}: an array of {a.dtype}, expected numbers (bytes or weights)")
    a = a.astype(np.float64)
    bad = ~np.isfinite(a) | (a < 0)
    if bad.any():
        r, c = np.argwhere(bad)[0]
        raise ConfigError(f"{where} {path}: row {r + 1}, column {c + 1}: {a[r, c]:g} is not a number >= 0; expected "
                          f"bytes or a weight >= 0")
    return a
