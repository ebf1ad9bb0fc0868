"""`hccl-bench server`: a warm process runs later commands (hcclsim/cli/server.py). What a caller sees must
not change: the same output, exit status, files, working directory, environment and Ctrl-C as a local run.
Whether a call went to the server is read from the server's own count of commands served."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="Unix sockets and fork")

ROOT = Path(__file__).resolve().parents[1]
# Many short packet-engine points (a kernel call is not interrupted; between points Ctrl-C stops a sweep).
LONG = ["sweep", "-t", "two-tier-128", "--engine", "packet", "-a", "ring", "-b", "256K", "-e", "64M", "-q"]
SWEEP = ["sweep", "-t", "switch8", "-c", "all_reduce,all_gather", "-a", "ring,direct_oneshot", "-b", "1K", "-e", "1M"]


def hb(env, *args, cwd=None, timeout=300):
    return subprocess.run([sys.executable, "-m", "hcclsim.cli", *args], env=env, cwd=cwd, capture_output=True,
                          text=True, timeout=timeout, check=False)


def served(env) -> int | None:
    out = hb(env, "server", "status").stdout
    if "not running" in out:
        return None
    return int(out.split(" commands served")[0].rsplit(" ", 1)[1])


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    folder = tmp_path_factory.mktemp("sockets")
    env = {**os.environ, "HCCL_BENCH_SERVER_DIR": str(folder), "COLUMNS": "120"}
    env.pop("HCCL_BENCH_SERVER", None)
    started = hb(env, "server", "start", "--idle", "10", timeout=900)
    assert started.returncode == 0 and "server ready" in started.stdout, started.stderr
    yield env
    hb(env, "server", "stop")


def local(env):
    return {**env, "HCCL_BENCH_SERVER": "0"}


def test_a_command_run_by_the_server_prints_what_a_local_run_prints(env):
    before = served(env)
    there, here = hb(env, *SWEEP), hb(local(env), *SWEEP)
    assert served(env) == before + 1                     # only the first call went to the server
    assert there.returncode == here.returncode == 0
    assert there.stdout == here.stdout and "all_gather" in there.stdout
    assert there.stderr == here.stderr


def test_a_refused_input_keeps_its_status_and_its_one_line(env):
    there, here = hb(env, "sweep", "-b", "1M", "-e", "1K"), hb(local(env), "sweep", "-b", "1M", "-e", "1K")
    assert there.returncode == here.returncode == 2
    assert there.stderr == here.stderr and there.stderr.startswith("hccl-bench: error: ")
    assert len(there.stderr.strip().splitlines()) == 1 and "Traceback" not in there.stderr


def test_the_worker_runs_in_the_callers_directory_and_environment(env, tmp_path):
    before = served(env)
    narrow = {**env, "COLUMNS": "50"}
    there = hb(narrow, *SWEEP, "-o", "rows.csv", cwd=tmp_path)
    assert served(env) == before + 1
    assert (tmp_path / "rows.csv").read_text().startswith("collective,")
    here = hb(local(narrow), *SWEEP, cwd=tmp_path)
    assert there.stdout == here.stdout                   # fitted to 50 columns, as locally
    assert there.stdout != hb(env, *SWEEP, cwd=tmp_path).stdout   # which 120 columns print otherwise


def test_ctrl_c_reaches_the_command_and_the_worker_stops(env):
    before = served(env)
    args = LONG
    proc = subprocess.Popen([sys.executable, "-m", "hcclsim.cli", *args], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while served(env) == before and time.monotonic() < deadline:      # the server has the command
        time.sleep(0.1)
    time.sleep(1.0)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert err.strip().endswith("interrupted")
    assert _workers_gone(env)


def test_a_caller_killed_outright_takes_its_worker_with_it(env):
    before = served(env)
    args = LONG
    proc = subprocess.Popen([sys.executable, "-m", "hcclsim.cli", *args], env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while served(env) == before and time.monotonic() < deadline:
        time.sleep(0.1)
    proc.kill()
    proc.wait(timeout=30)
    assert _workers_gone(env)


def _workers_gone(env, wait=30.0) -> bool:
    from hcclsim.cli import server

    deadline = time.monotonic() + wait
    old = os.environ.get("HCCL_BENCH_SERVER_DIR")
    os.environ["HCCL_BENCH_SERVER_DIR"] = env["HCCL_BENCH_SERVER_DIR"]
    try:
        while time.monotonic() < deadline:
            if server.status()["workers"] == 0:
                return True
            time.sleep(0.1)
        return False
    finally:
        if old is None:
            del os.environ["HCCL_BENCH_SERVER_DIR"]
        else:
            os.environ["HCCL_BENCH_SERVER_DIR"] = old


def test_another_installation_or_import_environment_is_not_served(env):
    """A NUMBA_ variable is read when numba is imported, so a call with another one needs another server."""
    before = served(env)
    other = {**env, "NUMBA_OPT": "2"}
    assert hb(other, *SWEEP).returncode == 0
    assert served(env) == before
    assert "not running" in hb(other, "server", "status").stdout


def test_a_socket_without_a_server_is_ignored(tmp_path):
    import socket as so

    env = {**os.environ, "HCCL_BENCH_SERVER_DIR": str(tmp_path)}
    env.pop("HCCL_BENCH_SERVER", None)
    probe = hb(env, "server", "status").stdout        # "... (socket PATH)"
    path = probe.rsplit("(socket ", 1)[1].rstrip(")\n")
    dead = so.socket(so.AF_UNIX, so.SOCK_STREAM)
    dead.bind(path)                                    # a name nobody listens on (a server that died)
    dead.close()
    out = hb(env, *SWEEP)
    assert out.returncode == 0 and "all_gather" in out.stdout


def test_stop_ends_the_server_and_calls_run_locally_again(tmp_path):
    env = {**os.environ, "HCCL_BENCH_SERVER_DIR": str(tmp_path), "COLUMNS": "120"}
    env.pop("HCCL_BENCH_SERVER", None)
    assert hb(env, "server", "start", "--idle", "5", timeout=900).returncode == 0
    assert hb(env, "server", "start").stdout.startswith("hccl-bench server already running")
    assert "stopping" in hb(env, "server", "stop").stdout
    deadline = time.monotonic() + 30
    while served(env) is not None and time.monotonic() < deadline:
        time.sleep(0.1)
    assert served(env) is None
    assert not list(tmp_path.glob("*.sock"))
    assert hb(env, *SWEEP).returncode == 0


def test_a_folder_others_can_write_to_is_neither_used_nor_started_in(tmp_path):
    """Another user who could write there could put a socket of theirs in place of a server of ours."""
    folder = tmp_path / "open"
    folder.mkdir(mode=0o755)
    folder.chmod(0o755)
    env = {**os.environ, "HCCL_BENCH_SERVER_DIR": str(folder)}
    env.pop("HCCL_BENCH_SERVER", None)
    out = hb(env, "server", "start")
    assert out.returncode == 2 and "expected a folder of this user" in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1
    from hcclsim.cli import _client

    assert not _client.private(folder)
    folder.chmod(0o700)
    assert _client.private(folder)


def test_an_argument_naming_one_of_the_callers_descriptors_runs_locally(env, tmp_path):
    """`<(...)` and /dev/fd/N name descriptors of the caller, which a worker of the server does not hold."""
    log = ROOT / "tests" / "data" / "nccl-tests-all_reduce-synthetic.txt"
    before = served(env)
    with open(log) as f:
        out = subprocess.run([sys.executable, "-m", "hcclsim.cli", "import", f"/dev/fd/{f.fileno()}", "-c", "all_reduce", "-o",
                              str(tmp_path / "m.csv")], env=env, capture_output=True, text=True, timeout=300,
                             check=False, pass_fds=(f.fileno(),))
    assert out.returncode == 0, out.stderr
    assert (tmp_path / "m.csv").read_text().startswith("collective,")
    assert served(env) == before


def test_two_starts_at_once_leave_one_server(tmp_path):
    env = {**os.environ, "HCCL_BENCH_SERVER_DIR": str(tmp_path)}
    env.pop("HCCL_BENCH_SERVER", None)
    starts = [subprocess.Popen([sys.executable, "-m", "hcclsim.cli", "server", "start", "--idle", "5"], env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outs = [p.communicate(timeout=900) for p in starts]
    assert all(p.returncode == 0 for p in starts), outs
    pids = {o.split("pid ")[1].split(",")[0] for o, _ in outs}
    assert len(pids) == 1, outs                            # the second found the first's server
    assert sorted(o.split(":")[0] for o, _ in outs) == ["hccl-bench server already running", "hccl-bench server ready"]
    assert hb(env, "server", "stop").returncode == 0
