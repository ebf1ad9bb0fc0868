"""Provenance: the metadata every results file carries, and the check that refuses what we cannot read.

A results file is trusted later only if it says what made it. ``metadata`` returns:

    schema_version      the layout of the file it describes (schema_version(): JSON_SCHEMA_VERSION for
                        JSON, SCHEMA_VERSION for CSV and Parquet); readers refuse other versions
    hccl_bench_version  hcclsim.__version__
    git_revision        the commit of the source tree the package was loaded from, when it is a git
                        checkout (absent otherwise -- never an error)
    topology            {"name", <the [topology] table after --set, as written>, "resolved": the built
                        Topology with every default filled in: kind, ranks, domains, local, each tier's
                        bandwidth (bytes/s), latency (s) and packet parameters, the endpoint}
    inputs              the sweep inputs as given (flags) plus their canonical form (collectives,
                        algorithm, sizes in bytes, dtype, root, engines, stats)
    inputs_sha256       sha256 of the canonical JSON of {topology, canonical inputs}: equal inputs give
                        equal hashes whatever the flags' spelling or the hccl-bench version
    setup               what every row of the file shares, so what `--resume` must find unchanged: engines,
                        launch, noise (iters, skew, jitter, seed), dtype, root, stats, and with --matrix
                        all_to_allv's traffic: matrix (the value as given) and, for a file, matrix_sha256
                        (of its bytes: a changed file is other traffic)
    setup_sha256        sha256 of the canonical JSON of {topology, setup}: the inputs without the grid
                        (collectives, algorithms, sizes), which a resumed sweep may extend (merged())

Every results file gets it in a sidecar FILE.meta.json (docs/results.md), so the file holds only rows:
pandas.read_csv and pandas.read_json read them as they are. JSON files of schema_version 1 embedded it
in an object next to 'rows'; they are still read.
"""

from __future__ import annotations

import functools
import hashlib
import json
import subprocess
from dataclasses import asdict
from pathlib import Path

from ..core.errors import ConfigError
from ..core.version import __version__
from .safefile import replace_text

SCHEMA_VERSION = 1               # CSV and Parquet: the layout has not changed since the first one
JSON_SCHEMA_VERSION = 2          # JSON: a list of row objects; version 1 was an object embedding the metadata
SIDECAR_SUFFIX = ".meta.json"
CANONICAL_INPUTS = ("collectives", "algorithm", "sizes", "dtype", "root", "engines", "stats", "matrix",
                    "matrix_sha256")


@functools.lru_cache(maxsize=1)
def git_revision() -> str | None:
    """HEAD of the git checkout this package was loaded from; None when it was not (an installed
    wheel, no git, a tarball) -- never raises. The package's own files must be tracked, so a
    wheel installed into a virtualenv inside some other repository does not report that repository."""
    here = Path(__file__).resolve().parents[1]          # the hcclsim package folder

    def git(*args: str) -> str | None:
        try:
            done = subprocess.run(["git", *args], cwd=here, capture_output=True, text=True, timeout=5, check=False)
        except (OSError, subprocess.SubprocessError):
            return None
        return done.stdout.strip() if done.returncode == 0 else None

    if git("ls-files", "--error-unmatch", "__init__.py") is None:
        return None
    rev = git("rev-parse", "HEAD")
    return rev if rev and all(c in "0123456789abcdef" for c in rev) else None


def _plain(value):
    """JSON-ready copy: tuples to lists, numpy scalars to Python, other odd values (TOML dates) to str."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if hasattr(value, "item"):                       # numpy scalar
        return value.item()
    return str(value)


def resolved_topology(topo) -> dict:
    """The topology as built: the [topology] table as given (after --set) and every resolved value."""
    tiers = [{"name": t.name, "kind": t.kind, "bandwidth_Bps": t.bandwidth, "latency_s": t.latency,
              "packet": asdict(t.packet)} for t in topo.tiers]
    resolved = {"kind": topo.kind, "ranks": topo.nranks, "domains": topo.domains, "local": topo.local,
                "tiers": tiers, "endpoint": asdict(topo.endpoint)}
    return _plain({"name": topo.name, **topo.spec, "resolved": resolved})


def canonical_json(value) -> str:
    return json.dumps(_plain(value), sort_keys=True, separators=(",", ":"), ensure_ascii=True)


def inputs_hash(topology: dict, canonical_inputs: dict) -> str:
    return hashlib.sha256(canonical_json({"topology": topology, "inputs": canonical_inputs}).encode()).hexdigest()


def matrix_setup(matrix) -> dict:
    """{"matrix": the --matrix value as given, "matrix_sha256": a file's bytes' digest}; {} without one. A
    Traffic (the Python API) is recorded by its label and the digest of its units."""
    from ..schedule import matrix as M

    if matrix is None:
        return {}
    if isinstance(matrix, M.Traffic):
        return {"matrix": matrix.label, "matrix_sha256": hashlib.sha256(matrix.units.tobytes()).hexdigest()}
    spec = str(matrix).strip()
    if spec.split(":")[0] in {d.split(":")[0] for d in M.DISTRIBUTIONS} or not Path(spec).is_file():
        return {"matrix": spec}
    try:
        digest = hashlib.sha256(Path(spec).read_bytes()).hexdigest()
    except OSError as e:
        raise ConfigError(f"--matrix {spec}: cannot read ({e.strerror or e})") from None
    return {"matrix": spec, "matrix_sha256": digest}


def metadata(topo, *, collectives, algorithm: str, sizes, dtype: str = "float32", root: int = 0,
             engine="analytic", stats: bool = False, given: dict | None = None, launch: str = "host",
             noise=None, matrix=None) -> dict:
    """Everything a results file says about how it was made (module docstring). given: the flags as
    typed (kept for people; not hashed). launch and noise (hcclsim.engine.execution.Noise) are hashed when they
    differ from the defaults (host launch, one quiet iteration); matrix (all_to_allv's --matrix) when given."""
    from ..core.units import parse_dtype
    from ..schedule import collectives as C
    from ..sweeping.sweep import parse_engines

    colls = list(C.COLLECTIVES) if collectives == "all" else \
        [C.canonical(c) for c in (collectives.split(",") if isinstance(collectives, str) else collectives)
         if str(c).strip()]
    canonical = {"collectives": colls, "algorithm": str(algorithm), "sizes": sorted({int(s) for s in sizes}),
                 "dtype": parse_dtype(dtype), "root": int(root), "engines": parse_engines(engine),
                 "stats": bool(stats)}
    if launch != "host":
        canonical["launch"] = launch
    if noise is not None and noise.percentiles:
        canonical["noise"] = {"iters": noise.iters, "skew_s": noise.skew, "jitter_s": noise.jitter, "seed": noise.seed}
    iters, skew, jitter, seed = (1, 0.0, 0.0, 0) if noise is None else \
        (noise.iters, noise.skew, noise.jitter, noise.seed)
    setup = {"engines": canonical["engines"], "launch": launch, "dtype": canonical["dtype"], "root": int(root),
             "stats": bool(stats), "noise": {"iters": iters, "skew_s": skew, "jitter_s": jitter, "seed": seed},
             **matrix_setup(matrix)}
    canonical.update({k: setup[k] for k in ("matrix", "matrix_sha256") if k in setup})
    topology = resolved_topology(topo)
    meta = {"schema_version": SCHEMA_VERSION, "hccl_bench_version": __version__}
    rev = git_revision()
    if rev:
        meta["git_revision"] = rev
    meta["topology"] = topology
    meta["inputs"] = _plain({**(given or {}), **canonical})
    meta["inputs_sha256"] = inputs_hash(topology, canonical)
    meta["setup"] = _plain(setup)
    meta["setup_sha256"] = inputs_hash(topology, setup)
    return meta


def merged(previous: dict, meta: dict) -> dict:
    """meta for a file that holds previous's rows and this sweep's (`--resume`, same setup): the grid
    (collectives, algorithms, sizes) is the union of both, and inputs_sha256 covers that union."""
    a, b = previous["inputs"], meta["inputs"]
    canonical = {k: b[k] for k in (*CANONICAL_INPUTS, "launch", "noise") if k in b}
    canonical["collectives"] = list(dict.fromkeys([*a["collectives"], *b["collectives"]]))
    canonical["algorithm"] = ",".join(dict.fromkeys(t.strip() for x in (a, b) for t in x["algorithm"].split(",")
                                                    if t.strip()))
    canonical["sizes"] = sorted({*a["sizes"], *b["sizes"]})
    return {**meta, "inputs": {**b, **canonical}, "inputs_sha256": inputs_hash(meta["topology"], canonical)}


# --------------------------------------------------------------------------------------- files

def schema_version(path) -> int:
    """The schema_version this hccl-bench writes for a results file named path."""
    return JSON_SCHEMA_VERSION if Path(path).suffix.lower() == ".json" else SCHEMA_VERSION


def sidecar_path(path) -> Path:
    """results.csv -> results.csv.meta.json (results.json -> results.json.meta.json)"""
    return Path(str(path) + SIDECAR_SUFFIX)


def sidecar_where(path, where: str) -> str:
    return f"{where} sidecar {str(sidecar_path(path))!r}"


def write_sidecar(path, meta: dict) -> Path:
    """meta beside path, with path's schema_version."""
    side = sidecar_path(path)
    doc = {"schema_version": schema_version(path), **{k: v for k, v in meta.items() if k != "schema_version"}}
    replace_text(side, json.dumps(_plain(doc), indent=2) + "\n")
    return side


def check_schema(doc: dict, where: str, version: int) -> None:
    """Refuse a results document (a sidecar, or a version-1 JSON file) whose schema_version is not version."""
    if doc.get("schema_version") != version:     # true == 1: hcclsim.results.read.check_metadata refuses it
        raise ConfigError(f"{where}: results schema_version {doc.get('schema_version')!r} is not supported (this "
                          f"hccl-bench reads version {version}); regenerate the file with this version's "
                          f"`hccl-bench sweep -o`, or compare it with the hccl-bench version that wrote it")


def _text(path: Path, where: str) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"{where}: cannot read ({getattr(e, 'strerror', None) or e})") from None


def _load_json(text: str, where: str):
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise ConfigError(f"{where}: malformed JSON ({e})") from None
    except ValueError:                          # json's limit: integers of more than 4300 digits
        raise ConfigError(f"{where}: malformed JSON (a number of more than 4300 digits)") from None


def _not_results(where: str, what: str) -> ConfigError:
    return ConfigError(f"{where}: not a hccl-bench results file: {what}; expected a JSON list of row objects "
                       f"{{\"column\": value, ...}}, as `hccl-bench sweep -o FILE.json` writes")


def json_rows(path, where: str) -> tuple[list[dict], dict | None]:
    """A JSON results file's rows, checked to be objects, and the metadata a version-1 file embeds (None
    for version 2, a plain list of rows whose metadata is in the sidecar)."""
    doc = _load_json(_text(Path(path), where), where)
    meta = None
    if isinstance(doc, dict) and "rows" in doc:                         # schema_version 1
        check_schema(doc, where, 1)
        doc, meta = doc["rows"], {k: v for k, v in doc.items() if k != "rows"}
    if not isinstance(doc, list):
        shown = {dict: "an object without 'rows'", str: "a string", bool: json.dumps(doc), type(None): "null"}
        raise _not_results(where, f"it holds {shown.get(type(doc), 'a number')}")
    for i, row in enumerate(doc):
        if not isinstance(row, dict):
            raise _not_results(where, f"rows[{i}] is {json.dumps(row)[:40]}")
    return doc, meta


def read_sidecar(path, where: str) -> dict | None:
    """path's sidecar, checked to be an object of path's schema_version; None when there is none."""
    side = sidecar_path(path)
    if not side.is_file():
        return None
    where = sidecar_where(path, where)
    doc = _load_json(_text(side, where), where)
    if not isinstance(doc, dict):
        raise ConfigError(f"{where}: expected a JSON object")
    check_schema(doc, where, schema_version(path))
    return doc


def read_metadata(path, where: str | None = None) -> dict | None:
    """The metadata of a results file: its sidecar (embedded in a version-1 JSON file); None without
    one. A schema_version this hccl-bench does not read is refused."""
    where = where or f"results {str(path)!r}"
    if Path(path).suffix.lower() == ".json":
        embedded = json_rows(path, where)[1]
        if embedded is not None:
            return embedded
    return read_sidecar(path, where)


# ------------------------------------------------------------------------------------- inputs compared

MISSING = object()


def _flat(value, prefix: str = "") -> dict:
    """{'topology.bandwidth': '50GB/s', ...}: nested objects flattened; lists of scalars kept whole."""
    if isinstance(value, dict):
        return {k: v for key in sorted(value) for k, v in _flat(value[key], f"{prefix}{key}.").items()}
    if isinstance(value, list) and any(isinstance(v, (dict, list)) for v in value):
        return {k: v for i, item in enumerate(value) for k, v in _flat(item, f"{prefix}{i}.").items()}
    return {prefix[:-1]: value}


def shown(value) -> str:
    """An input's value as a message shows it."""
    if isinstance(value, list):
        return ",".join(map(str, value)) or "[]"
    return "(none)" if value is MISSING else str(value)


def input_differences(theirs: dict, ours: dict) -> list[tuple[str, object, object]]:
    """(key, their value, ours) for every input two metadata documents differ in (their topology and setup),
    in the order a user wrote them: keys as given before the resolved ones; the topology's name first when
    another topology was given, last when only its [--set ...] label differs (the keys set say more)."""
    a = _flat({"topology": theirs.get("topology", {}), **theirs.get("setup", {})})
    b = _flat({"topology": ours.get("topology", {}), **ours.get("setup", {})})
    base = {str(a.get("topology.name")).split("[")[0], str(b.get("topology.name")).split("[")[0]}
    name_rank = -1 if len(base) > 1 else 2

    def rank(k: str) -> tuple:
        return (name_rank if k == "topology.name" else int(".resolved." in k), k)
    keys = sorted((k for k in a.keys() | b.keys() if a.get(k, MISSING) != b.get(k, MISSING)), key=rank)
    return [(k, a.get(k, MISSING), b.get(k, MISSING)) for k in keys]

