"""Start-up: `hccl-bench --version`, `--help` and every command's `--help` load no numpy, pandas or numba
(hcclsim/cli/__init__.py imports a command when it runs; hcclsim/core/names.py holds the names the options
print), and a command that runs no kernel loads no numba (hcclsim/core/jit.py imports it at the first kernel
call). Timing is in bench/startup.py; here only what is imported."""

from __future__ import annotations

import json
import subprocess
import sys

import click
import pytest

from hcclsim.cli import COMMANDS, cli
from hcclsim.core import jit

HEAVY = ("numpy", "pandas", "numba")
PROBE = ("import sys\nfrom hcclsim.cli import main\nstatus = main(sys.argv[1:])\n"
         f"print(sorted({{m.split('.')[0] for m in sys.modules}} & set({HEAVY!r})))\nsys.exit(status)")


def heavy_imports(*args: str, status: int = 0) -> list[str]:
    """The heavy packages a whole `hccl-bench ARGS` process imported (its last stdout line)."""
    out = subprocess.run([sys.executable, "-c", PROBE, *args], capture_output=True, text=True, timeout=120,
                         check=False)
    assert out.returncode == status, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1].replace("'", '"'))


@pytest.mark.parametrize("args", [["--version"], ["--help"], *[[name, "--help"] for name in sorted(COMMANDS)]],
                         ids=" ".join)
def test_help_and_version_import_no_numpy_pandas_or_numba(args):
    assert heavy_imports(*args) == []


def test_the_probe_sees_a_command_that_computes():
    """The oracles here are not blind: a sweep runs kernels (numba) and makes its rows a DataFrame (pandas)."""
    assert set(heavy_imports("sweep", "-t", "switch8", "-a", "ring", "-b", "1K", "-e", "1K", "-q")) == set(HEAVY)


def test_listing_presets_imports_neither_pandas_nor_numba():
    assert heavy_imports("topologies") == ["numpy"]


def test_a_refused_sweep_imports_no_numba():
    """-b above -e is refused (exit status 2) before any kernel runs."""
    assert "numba" not in heavy_imports("sweep", "-b", "1M", "-e", "1K", status=2)


def test_the_lazy_help_lines_are_the_commands_own():
    ctx = click.Context(cli)
    for name, (_, _, line) in COMMANDS.items():
        assert cli.get_command(ctx, name).get_short_help_str(limit=200) == line, name


def test_names_printed_before_import_agree_with_the_modules_that_use_them():
    from hcclsim.analysis import gate
    from hcclsim.cli import plot as plot_cli
    from hcclsim.results import plot

    assert plot_cli.BY == plot.BY
    assert list(gate.METRICS) == ["time", "busbw"]             # compare --fail-on's help names them


def test_the_numba_cache_is_keyed_by_every_source_file():
    """A kernel calling route_kernel (network/topology.py) must not keep machine code compiled against an older
    topology.py: the cache folder's digest covers the whole package, not only hcclsim/core."""
    names = {p.relative_to(jit.Path(jit.__file__).resolve().parent.parent).as_posix() for p in jit.sources()}
    assert {"network/topology.py", "engine/analytic.py", "engine/packet_kernel.py", "core/jit.py"} <= names


def test_old_numba_cache_folders_are_pruned_the_newest_and_recent_kept(tmp_path):
    """Each change of the sources starts a new cache folder; prune keeps the KEEP_FOLDERS newest and any used
    within KEEP_SECONDS, and deletes the rest (and nothing that is not a cache folder)."""
    import os

    day, now = 86400, 1e9
    ages = {"numba-a": 0, "numba-b": 1, "numba-c": 30, "numba-d": 5, "numba-e": 40, "numba-f": 20, "numba-g": 10}
    for name, age in ages.items():
        (tmp_path / name).mkdir()
        (tmp_path / name / "k.nbi").write_text("")
        os.utime(tmp_path / name, (now - age * day, now - age * day))
    (tmp_path / "notes").mkdir()
    os.utime(tmp_path / "notes", (now - 90 * day, now - 90 * day))
    assert (jit.KEEP_FOLDERS, jit.KEEP_SECONDS) == (3, 14 * day)
    # ages in days; newest three: a, b, d (kept); g is used within 14 days (kept); c, e, f are not: deleted
    removed = jit.prune(tmp_path, now=now)
    assert sorted(f.name for f in removed) == ["numba-c", "numba-e", "numba-f"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes", "numba-a", "numba-b", "numba-d", "numba-g"]


def test_tables_are_as_wide_as_rich_makes_them():
    """print_table counts a table's width itself (rich's measurement would walk every cell again): the count
    is rich's, whichever line is the widest -- a header's first or second line, a cell, a wide character."""
    from rich.console import Console
    from rich.measure import Measurement

    from hcclsim.results.report import Col, _rich_table, table_width

    cases = [[Col("size", ["16", "1G"]), Col("algorithm", ["ring", "tree"], left=True)],
             [Col("time\n(us)", ["1.00", "123456.78"]), Col("busbw\n(GB/s)\nanalytic", ["0.5", "-"])],
             [Col("ratio\npa/an", ["-"]), Col("chosen", ["\u6700\u901f ring"], left=True, drop=3)],
             [Col("x", [])]]
    probe = Console(width=1 << 16)
    for cols in cases:
        assert table_width(cols) == Measurement.get(probe, probe.options, _rich_table(cols, [], 80)).maximum
