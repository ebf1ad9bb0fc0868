"""A non-editable install works from any directory, presets and algorithms included (DESIGN.md, Layout)."""

import os
import subprocess
import sys


def test_wheel_install_runs_from_another_directory(installed, tmp_path):
    env = {**os.environ, "PYTHONPATH": str(installed)}
    code = ("import hcclsim, hcclsim.algorithms, hcclsim.topologies, sys; "
            "from hcclsim.network.config import preset_names; from hcclsim.schedule.algorithm import load_all; "
            "assert str(hcclsim.__file__).startswith(sys.argv[1]), hcclsim.__file__; "
            "print(len(preset_names()) > 0, 'ring' in load_all().names())")
    out = subprocess.run([sys.executable, "-c", code, str(installed)], env=env, cwd=tmp_path, check=True,
                         capture_output=True, text=True)
    assert out.stdout.split() == ["True", "True"]
    # no bare top-level 'algorithms' or 'topologies' packages are installed
    assert not (installed / "algorithms").exists() and not (installed / "topologies").exists()
    cli = subprocess.run([sys.executable, "-c", "from hcclsim.cli import main; raise SystemExit(main())",
                          "sweep", "-t", "switch8", "-a", "ring", "-e", "1K", "--format", "csv"],
                         env=env, cwd=tmp_path, capture_output=True, text=True, check=False)
    assert cli.returncode == 0, cli.stderr
    assert cli.stdout.startswith("collective,algorithm,topology")
