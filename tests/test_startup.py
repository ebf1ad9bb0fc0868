"""Start-up: `hccl-bench --version`, `--help` and every command's `--help` load no numpy, pandas or numba
(hcclsim/cli/__init__.py imports a command when it runs; hcclsim/core/names.py holds the names the options
print). Timing is in bench/startup.py; here only what is imported."""

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


def heavy_imports(*args: str) -> list[str]:
    """The heavy packages a whole `hccl-bench ARGS` process imported (its last stdout line)."""
    out = subprocess.run([sys.executable, "-c", PROBE, *args], capture_output=True, text=True, timeout=120,
                         check=False)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1].replace("'", '"'))


@pytest.mark.parametrize("args", [["--version"], ["--help"], *[[name, "--help"] for name in sorted(COMMANDS)]],
                         ids=" ".join)
def test_help_and_version_import_no_numpy_pandas_or_numba(args):
    assert heavy_imports(*args) == []


def test_the_probe_sees_a_command_that_computes():
    """The oracle above is not blind: listing the presets builds topologies, which needs numpy and numba."""
    assert set(heavy_imports("topologies")) >= {"numpy", "numba"}


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
