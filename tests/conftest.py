import os
import subprocess
import sys
from pathlib import Path

import pytest

from hcclsim.network.topology import build_flat

# Output fitted to the terminal (tables, wrapped notes) is the same whether pytest runs in a terminal, a pipe
# or a worker process: what a 120-column terminal shows (tests of narrow terminals set their own COLUMNS).
os.environ["COLUMNS"] = "120"


@pytest.fixture
def switch8():
    """The issue's reference fabric: 8 ranks on one switch, 50 GB/s, 500 ns per hop."""
    return build_flat("switch8", "switch", 8, 50e9, 500e-9)


@pytest.fixture(scope="session")
def installed(tmp_path_factory):
    """A non-editable install of the repository (pip install --target), made once per run for test_packaging
    and test_scenarios."""
    target = tmp_path_factory.mktemp("site")
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation",
                    "--target", str(target), str(Path(__file__).resolve().parents[1])], check=True,
                   capture_output=True, cwd=target)
    return target
