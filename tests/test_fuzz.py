"""A seeded, bounded fuzz of the command line, the TOML loader, results files and nccl-tests logs.

Each case runs ``hccl-bench`` in this process (hcclsim.cli.main, as the console script does) on inputs
a seeded generator derives: command lines mixing good and bad flag values, presets with a key removed,
retyped or made huge, results files and nccl-tests logs with cells, lines or bytes broken. Whatever the
input, the answer is an exit status in {0, 1, 2}; a refusal (2) is one line that starts with
``hccl-bench: error:`` and has no traceback; and a refusal leaves every file the user gave
byte-identical. Sizes stay small (at most 64 KiB, a few ranks unless the value is meant to be refused),
so the whole module runs in well under a minute; ``HCCL_BENCH_FUZZ_CASES`` raises the case count for a
longer run (the seeds are the case numbers, so a failure names the seed that reproduces it).
"""

from __future__ import annotations

import os
import random
import resource
import shutil
import signal
import sys
from pathlib import Path

import pytest

from hcclsim.cli import main

ROOT = Path(__file__).resolve().parents[1]
CASES = int(os.environ.get("HCCL_BENCH_FUZZ_CASES", "40"))
MEMORY = 3 << 30        # bytes of address space a case may add to this process's: far below the machine's
SECONDS = 60            # a case still running after this is a failure (a point the budget should refuse)
SAMPLE_LOG = ROOT / "tests" / "data" / "nccl-tests-all_reduce-synthetic.txt"
REAL_LOGS = sorted((ROOT / "validation" / "logs").glob("h100_together_*all_reduce_ring.txt"))[:1] + \
    sorted((ROOT / "validation" / "logs").glob("a100_superbench_allreduce.txt"))[:1]
PRESETS = ["switch8.toml", "ring8.toml", "two-tier-128.toml", "dgx-h100.toml"]

# flag -> values: good ones and ones that must be refused, mixed on purpose
SWEEP_VALUES = {
    "-t": ["switch8", "ring8", "dgx-h100", "nonexistent", "", "two-tier-128"],
    "-a": ["ring", "tree", "direct", "in_switch", "auto", "ring,direct", "ring:chunks=3", "ring:chunks=-1",
           "ring:bogus=1", "ring:channels=0", "nope", "", "all"],
    "-c": ["all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast", "reduce", "allreduce",
           "bogus", "", "all"],
    "-b": ["8", "1K", "0", "-1", "1.5K", "abc", "1e3", str(2 ** 70), "64K"],
    "-e": ["1K", "64K", "8", "-5", "x", "4K"],
    "-f": ["2", "4", "1", "0", "-3", "1.5", "z"],
    "--set": ["bandwidth=5GB/s", "latency=2us", "ranks=4", "ranks=0", "ranks=-3", "bandwidth=-1GB/s",
              "latency=nan", "bandwidth=inf", "foo=1", "ranks=8.7", "bandwidth=", "=3", "noequals",
              "endpoint.protocol=ll", "endpoint.channels=-1", "scale_out.domains=2"],
    "--engine": ["analytic", "packet", "analytic,packet", "fluid", ""],
    "--iters": ["1", "3", "0", "-2", "x", "2.5"],
    "--seed": ["0", "7", "-1", "x"],
    "--skew": ["0", "1us", "-1us", "nan", "x"],
    "--jitter": ["0", "100ns", "-5ns", "inf"],
    "--launch": ["host", "device", "loop", "loop:8", "loop:0", "warp", "loop:x"],
    "-d": ["float32", "float16", "int8", "bfloat16", "float128", ""],
    "--protocol": ["none", "ll", "ll128", "simple", "auto", "fast"],
    "-r": ["0", "3", "-1", "99", "x"],
    "--format": ["table", "csv", "json", "xml"],
}


def run_cli(tmp: Path, *argv) -> tuple[int, str, str]:
    """main(argv) in a forked child of this process (imports and compiled kernels already loaded, so it
    starts in milliseconds) with its address space capped at MEMORY more than ours and SECONDS of time:
    (exit status, stdout, stderr). A case that would exhaust the machine then fails alone, as a
    MemoryError (exit 3) or a timeout (-SIGALRM), instead of taking the test run down with it."""
    out, err = tmp / "fuzz.stdout", tmp / "fuzz.stderr"
    sys.stdout.flush(), sys.stderr.flush()
    pid = os.fork()
    if pid == 0:                                   # the child: never returns into pytest
        status = 99
        try:
            with open(f"/proc/{os.getpid()}/statm") as f:
                used = int(f.read().split()[0]) * resource.getpagesize()
            resource.setrlimit(resource.RLIMIT_AS, (used + MEMORY, used + MEMORY))
            signal.alarm(SECONDS)
            for fd, path in ((1, out), (2, err)):
                os.dup2(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC), fd)
            sys.stdout = open(1, "w", closefd=False)      # noqa: SIM115 - the child's streams, until os._exit
            sys.stderr = open(2, "w", closefd=False)      # noqa: SIM115
            status = main([str(a) for a in argv])
            sys.stdout.flush(), sys.stderr.flush()
        finally:
            os._exit(status if isinstance(status, int) and 0 <= status < 256 else 99)
    _, wait = os.waitpid(pid, 0)
    status = os.waitstatus_to_exitcode(wait)
    return status, out.read_text(errors="replace"), err.read_text(errors="replace")


def _snapshot(paths):
    return {p: p.read_bytes() for p in paths if p.is_file()}


def _check(status, out, err, files_before, label):
    """The fuzz oracle: a known status, a one-line refusal without a traceback, files untouched on one."""
    assert status in (0, 1, 2), f"{label}: exit {status}: {err[-500:]}"
    assert "Traceback" not in err and "Traceback" not in out, f"{label}: {err[-500:]}"
    if status == 2:
        assert err.startswith("hccl-bench: error: ") and err.count("\n") == 1, f"{label}: {err!r}"
        for path, data in files_before.items():
            assert path.read_bytes() == data, f"{label}: refused, yet changed {path.name}"


def _sweep_argv(rng: random.Random, tmp: Path) -> list[str]:
    argv = ["sweep", "-t", "switch8", "-a", "ring", "-b", "8", "-e", "4K", "-f", "8", "--format", "csv", "-q"]
    for flag in rng.sample(sorted(SWEEP_VALUES), rng.randint(1, 4)):
        argv += [flag, rng.choice(SWEEP_VALUES[flag])]
    if rng.random() < 0.2:
        argv += ["-o", str(rng.choice([tmp / "out.csv", tmp / "out.json", tmp / "missing" / "x.csv", tmp]))]
    if "--engine" in argv and argv[argv.index("--engine") + 1] != "analytic":
        argv += ["-e", "4K"]               # keep packet-engine points small: the last -e wins
    return argv


@pytest.mark.parametrize("seed", range(CASES))
def test_fuzz_command_line(seed, tmp_path):
    """A sweep command line with some flags set to good or bad values."""
    argv = _sweep_argv(random.Random(seed), tmp_path)
    status, out, err = run_cli(tmp_path, *argv)
    _check(status, out, err, {}, f"seed {seed}: hccl-bench {' '.join(argv)}")


def _mutate_toml(rng: random.Random, text: str) -> str:
    """The preset with one thing broken: a key dropped, retyped or made huge, an unknown key, a truncation,
    or garbage bytes."""
    kind = rng.choice(["drop", "retype", "huge", "unknown", "truncate", "garbage"])
    lines = text.splitlines()
    keyed = [i for i, line in enumerate(lines) if "=" in line and not line.lstrip().startswith("#")]
    if kind == "truncate":
        return text[: rng.randrange(len(text))]
    if kind == "garbage":
        pos = rng.randrange(len(text))
        return text[:pos] + rng.choice(["\x00", "[[[", "= =", '"unterminated', "\ufffd", "]\n"]) + text[pos:]
    i = rng.choice(keyed)
    key = lines[i].split("=", 1)[0]
    if kind == "drop":
        del lines[i]
    elif kind == "unknown":
        lines.insert(i, f"bogus_key_{seed_tag(rng)} = 1")
    else:
        value = rng.choice(['"x"', "-1", "true", "[1, 2]", "{ a = 1 }", "nan", "inf", '""', "0"]) \
            if kind == "retype" else rng.choice(["1e300", str(2 ** 80), '"1e30GB/s"', "10000000", '"99999999h"'])
        lines[i] = f"{key}= {value}"
    return "\n".join(lines) + "\n"


def seed_tag(rng: random.Random) -> str:
    return format(rng.getrandbits(16), "x")


@pytest.mark.parametrize("seed", range(CASES))
def test_fuzz_topology_file(seed, tmp_path):
    """A preset file with one thing broken, swept: refused in one line or timed, never a traceback."""
    rng = random.Random(seed)
    name = PRESETS[seed % len(PRESETS)]
    path = tmp_path / name
    path.write_text(_mutate_toml(rng, (ROOT / "topologies" / "presets" / name).read_text()))
    before = _snapshot([path])
    argv = ["sweep", "-t", str(path), "-a", "ring", "-b", "8", "-e", "4K", "-f", "8", "--format", "csv", "-q"]
    status, out, err = run_cli(tmp_path, *argv)
    _check(status, out, err, before, f"seed {seed}: {name}")


@pytest.fixture(scope="module")
def baseline(tmp_path_factory):
    """One small sweep's results file (csv), made once."""
    path = tmp_path_factory.mktemp("fuzz") / "base.csv"
    status = main(["sweep", "-t", "switch8", "-a", "ring,direct", "-b", "8", "-e", "64K", "-f", "8", "-q",
                   "--format", "csv", "-o", str(path)])
    assert status == 0
    return path


def _mutate_csv(rng: random.Random, text: str) -> str:
    lines = text.splitlines(keepends=True)
    header, rows = lines[0], lines[1:]
    kind = rng.choice(["cell", "cell", "cell", "drop_column", "duplicate", "truncate", "blank", "bytes"])
    if kind == "truncate":
        return text[: rng.randrange(1, len(text))]
    if kind == "duplicate":
        return header + "".join(rows) + rng.choice(rows)
    if kind == "blank":
        return header + "\n" + "".join(rows)
    if kind == "bytes":
        pos = rng.randrange(len(text))
        return text[:pos] + rng.choice(["\x00", '"', ",,", "\r"]) + text[pos:]
    cells = [r.rstrip("\n").split(",") for r in [header, *rows]]
    col = rng.randrange(len(cells[0]))
    if kind == "drop_column":
        return "".join(",".join(c[:col] + c[col + 1:]) + "\n" for c in cells)
    row = rng.randrange(1, len(cells))
    cells[row][col] = rng.choice(["-1", "nan", "inf", "-inf", "", "abc", "1e400", "8.7", "true", "0", "-0.0"])
    return "".join(",".join(c) + "\n" for c in cells)


@pytest.mark.parametrize("seed", range(CASES))
def test_fuzz_results_file(seed, baseline, tmp_path):
    """A results file with a cell, a row, a column or bytes broken, given to compare and to sweep --resume."""
    rng = random.Random(seed)
    path = tmp_path / "current.csv"
    path.write_text(_mutate_csv(rng, baseline.read_text()))
    sidecar = baseline.with_name(baseline.name + ".toml")
    if sidecar.exists():
        shutil.copy(sidecar, path.with_name(path.name + ".toml"))
    before = _snapshot([baseline, path, path.with_name(path.name + ".toml")])
    status, out, err = run_cli(tmp_path, "compare", baseline, path)
    _check(status, out, err, before, f"seed {seed}: compare")
    before = _snapshot([path, path.with_name(path.name + ".toml")])
    status, out, err = run_cli(tmp_path, "sweep", "-t", "switch8", "-a", "ring,direct", "-b", "8", "-e", "64K",
                               "-f", "8", "-q", "--format", "csv", "-o", path, "--resume")
    _check(status, out, err, before, f"seed {seed}: sweep --resume")


def _mutate_log(rng: random.Random, text: str) -> str:
    lines = text.splitlines(keepends=True)
    data = [i for i, line in enumerate(lines) if line.strip() and not line.lstrip().startswith("#")]
    kind = rng.choice(["number", "number", "drop", "duplicate", "truncate", "columns", "bytes"])
    if kind == "truncate":
        return text[: rng.randrange(1, len(text))]
    if kind == "bytes":
        pos = rng.randrange(len(text))
        return text[:pos] + rng.choice(["\x00", "[", "{", "#"]) + text[pos:]
    if not data:
        return text
    i = rng.choice(data)
    if kind == "drop":
        del lines[i]
    elif kind == "duplicate":
        lines.insert(i, lines[i])
    elif kind == "columns":
        fields = lines[i].split()
        del fields[rng.randrange(len(fields))]
        lines[i] = "  ".join(fields) + "\n"
    else:
        fields = lines[i].split()
        j = rng.randrange(len(fields))
        fields[j] = rng.choice(["-1", "nan", "inf", "0", "abc", "1e400", "N/A", "0.00"])
        lines[i] = "  ".join(fields) + "\n"
    return "".join(lines)


@pytest.mark.parametrize("seed", range(CASES // 2))
def test_fuzz_nccl_tests_log(seed, tmp_path):
    """An nccl-tests log with a number, a line, a column or bytes broken, calibrated: a fit or a refusal."""
    rng = random.Random(seed)
    source = [SAMPLE_LOG, *REAL_LOGS][seed % (1 + len(REAL_LOGS))]
    path = tmp_path / source.name
    path.write_text(_mutate_log(rng, source.read_text()))
    out_toml = tmp_path / "fit.toml"
    before = _snapshot([path])
    status, out, err = run_cli(tmp_path, "calibrate", path, "-t", "switch8", "-o", out_toml)
    _check(status, out, err, before, f"seed {seed}: calibrate {source.name}")
    if status == 2:
        assert not out_toml.exists(), f"seed {seed}: refused, yet wrote {out_toml.name}"


def test_the_oracle_rejects_what_it_must():
    """The oracle itself: a traceback, exit 3, a two-line refusal and a changed file are each caught."""
    tmp = Path(os.environ.get("TMPDIR", "/tmp")) / f"fuzz-oracle-{os.getpid()}"
    tmp.write_text("a")
    before = _snapshot([tmp])
    bad = [(3, "", "hccl-bench: error: internal error\n", {}),
           (2, "", "Traceback (most recent call last):\n", {}),
           (2, "", "hccl-bench: error: one\ntwo\n", {}),
           (0, "Traceback", "", {})]
    for status, out, err, files in bad:
        with pytest.raises(AssertionError):
            _check(status, out, err, files, "oracle")
    tmp.write_text("b")
    with pytest.raises(AssertionError):
        _check(2, "", "hccl-bench: error: refused\n", before, "oracle")
    tmp.unlink()
    _check(2, "", "hccl-bench: error: refused\n", {}, "oracle")     # a clean refusal passes
