"""Executors (docs/config.md, "Parallel and distributed sweeps"): a sweep run on a local Dask cluster gives
the same rows as the local executor, through the command line and the API; bad --executor/--scheduler
input is one line, exit 2, before anything is written; an interrupted Dask sweep cancels what has not
run and keeps its rows; the local executor forks its workers only when no unknown thread runs. A peer
that is not a Dask scheduler (silent, HTTP, a Dask worker) is one line, exit 2, within the connect limit."""

import contextlib
import io
import socket
import subprocess
import sys
import textwrap
import threading
import time

import pandas as pd
import pytest
from helpers import assert_one_line_error
from helpers import run_cli as run

import hcclsim
import hcclsim.cli._long as long_module
from hcclsim.core.errors import ConfigError
from hcclsim.network.config import load_topology
from hcclsim.results.incremental import RowWriter
from hcclsim.sweeping import executors
from hcclsim.sweeping.sweep import size_grid, sweep

# switch8, two collectives, every algorithm and auto, both engines, 16 B .. 64 KiB by 4: a dozen blocks, 7 sizes
SWEEP = ["sweep", "-t", "switch8", "-c", "all_reduce,reduce_scatter", "-a", "all,auto", "--engine",
         "analytic,packet", "-e", "64K", "-f", "4", "-q", "--format", "csv"]
API = {"topology": "switch8", "collective": "all_reduce,broadcast", "algorithm": "all,auto",
       "engine": "analytic,packet", "b": 16, "e": "64K", "f": 4}


@pytest.fixture(scope="module")
def cluster():
    distributed = pytest.importorskip("distributed")
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0") as c:
        yield c


@pytest.fixture(scope="module")
def client(cluster):
    from distributed import Client

    with Client(cluster.scheduler_address, set_as_default=False) as c:
        c.get_task_stream()                     # starts recording which tasks run where
        yield c


@pytest.fixture(scope="module")
def local_csv():
    """The sweep's CSV text with --jobs 1 (this process)."""
    from hcclsim.cli import main

    with contextlib.redirect_stdout(io.StringIO()) as out:
        assert main([*SWEEP, "-j", "1"]) == 0
    assert out.getvalue().count("\n") > 100 and ",auto," in out.getvalue()
    return out.getvalue()


def units_run_on(client, since) -> list[str]:
    """The workers that ran each hccl-bench task since `since` (time.time())."""
    return [t["worker"] for t in client.get_task_stream(start=since) if str(t["key"]).startswith("hccl-bench-")]


def test_dask_gives_the_rows_of_the_local_executor(capsys, tmp_path, cluster, client, local_csv):
    since = time.time()
    path = tmp_path / "out.csv"
    status, out, err = run(capsys, *SWEEP, "--executor", "dask", "--scheduler", cluster.scheduler_address,
                           "-o", path)
    assert status == 0 and "error" not in err, err
    assert out == local_csv and path.read_text() == local_csv
    ran = units_run_on(client, since)                               # on the cluster's workers, not here
    units = []                                                      # a task per unit: packet points, ...
    sweep(load_topology("switch8"), ["all_reduce", "reduce_scatter"], "all,auto", size_grid(16, 64 << 10, 4),
          engine="analytic,packet", on_start=units.extend)
    assert len(ran) == len(units) and set(ran) <= set(client.scheduler_info()["workers"])
    assert all(len(u.sizes) == 1 for u in units if u.engines == ("packet",) and u.label != "auto")


def test_the_console_script_on_a_dask_cluster(cluster, local_csv):
    """As a user runs it: a fresh process, nothing but skipped-algorithm notes on stderr."""
    done = subprocess.run([sys.executable, "-m", "hcclsim.cli", *SWEEP, "--executor", "dask", "--scheduler",
                           cluster.scheduler_address], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout == local_csv
    assert all(line.startswith("hccl-bench: skipped ") for line in done.stderr.splitlines()), done.stderr


def test_api_rows_are_identical_whichever_executor_runs_them(monkeypatch, cluster):
    one = hcclsim.sweep(**API)
    on_dask = hcclsim.sweep(**API, executor="dask", scheduler=cluster.scheduler_address)
    monkeypatch.setattr(executors, "SERIAL_SECONDS", 0.0)          # workers even for this short sweep
    two = hcclsim.sweep(**API, jobs=2)
    assert {"auto", "ring"} <= set(one.algorithm) and set(one.engine) == {"analytic", "packet"}
    for other in (on_dask, two):
        pd.testing.assert_frame_equal(one, other, check_exact=True)
        assert other.to_csv(index=False) == one.to_csv(index=False)


def test_noisy_rows_are_identical_whichever_executor_runs_them(monkeypatch, cluster):
    noisy = {"topology": "switch8", "collective": "all_reduce,all_gather", "algorithm": "ring,direct",
             "sizes": ["1K", "1M"], "engine": "analytic,packet", "iters": 4, "skew": "1us", "jitter": "300ns",
             "seed": 7}
    one = hcclsim.sweep(**noisy)
    on_dask = hcclsim.sweep(**noisy, executor="dask", scheduler=cluster.scheduler_address)
    monkeypatch.setattr(executors, "SERIAL_SECONDS", 0.0)
    two = hcclsim.sweep(**noisy, jobs=2)
    assert (one.time_us_max > one.time_us_min).any()
    for other in (on_dask, two):
        pd.testing.assert_frame_equal(one, other, check_exact=True)


def test_ctrl_c_on_dask_keeps_rows_and_resume_completes_them(capsys, monkeypatch, tmp_path, cluster, local_csv):
    path = tmp_path / "out.csv"
    dask = ["--executor", "dask", "--scheduler", cluster.scheduler_address]

    class Interrupting(RowWriter):
        kept = 0

        def __call__(self, frame):
            super().__call__(frame)
            if self.rows >= 2 * 7:              # units are points or blocks: the rows come in frames of any size
                Interrupting.kept = self.rows
                raise KeyboardInterrupt
    monkeypatch.setattr(long_module, "RowWriter", Interrupting)
    status, out, err = run(capsys, *SWEEP, *dask, "-o", path)
    assert status == 130 and out == ""
    assert err.count("\n") == 1 and f"interrupted; {Interrupting.kept} finished rows kept in" in err, err
    assert len(path.read_text().splitlines()) == 1 + Interrupting.kept
    monkeypatch.undo()
    status, out, _ = run(capsys, *SWEEP, *dask, "-o", path, "--resume")
    assert status == 0 and out == local_csv and path.read_text() == local_csv


def test_stopping_a_dask_sweep_cancels_what_has_not_run(monkeypatch, client):
    """Ctrl-C, or any error, ends the executor's generator: every unit not done is cancelled."""
    cancelled = []
    real = client.cancel

    def spy(futures, *a, **k):
        cancelled.extend(futures)
        return real(futures, *a, **k)
    monkeypatch.setattr(client, "cancel", spy)
    since = time.time()
    units = executors.run_dask(time.sleep, [0.0] + [1.0] * 8, client=client)
    assert next(units) == (0.0, None)
    units.close()
    assert len(cancelled) == 8 and all(f.status == "cancelled" for f in cancelled)
    time.sleep(1.2)                                                 # at most the two started can finish
    assert len(units_run_on(client, since)) <= 3


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize(("argv", "needles"), [
    (["--executor", "dask"], ["--executor dask needs --scheduler ADDRESS"]),
    (["--scheduler", "tcp://127.0.0.1:8786"], ["--scheduler: only with --executor dask"]),
    (["--executor", "local", "--scheduler", "tcp://127.0.0.1:8786"], ["--scheduler: only with --executor dask"]),
    (["--executor", "dask", "--scheduler", "tcp://127.0.0.1:{port}"], ["cannot reach a Dask scheduler", "{port}"]),
    (["--executor", "dask", "--scheduler", "nowhere"], ["--scheduler nowhere: cannot reach a Dask scheduler",
                                                         "missing port"]),
    (["--executor", "dask", "--scheduler", "tcp://127.0.0.1:{port}", "-j", "2"], ["--jobs: only with --executor local"]),
    (["--executor", "slurm"], ["Invalid value for '--executor'", "'local', 'dask'"]),
])
def test_executor_errors_are_one_line_exit_2_and_write_nothing(capsys, monkeypatch, tmp_path, argv, needles):
    pytest.importorskip("distributed")
    monkeypatch.setattr(executors, "CONNECT_TIMEOUT", 0.5)
    port = free_port()
    path = tmp_path / "out.csv"
    path.write_text("kept\n")
    t0 = time.monotonic()
    status, out, err = run(capsys, *SWEEP, *[a.format(port=port) for a in argv], "-o", path)
    assert_one_line_error(status, out, err, *[n.format(port=port) for n in needles])
    assert path.read_text() == "kept\n"                             # refused before the output is opened
    assert time.monotonic() - t0 < 10                               # a short connect timeout, no hang


class FakePeer(threading.Thread):
    """A TCP server on 127.0.0.1 that is not a Dask scheduler: it accepts, then stays silent, answers HTTP at
    once or after a request, or closes."""

    HTTP = b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 2\r\n\r\nok"

    def __init__(self, behaviour: str):
        super().__init__(daemon=True)
        self.behaviour, self.held = behaviour, []
        self.server = socket.create_server(("127.0.0.1", 0))
        self.server.settimeout(0.1)
        self.address = f"tcp://127.0.0.1:{self.server.getsockname()[1]}"
        self.stopping = threading.Event()
        self.start()

    def run(self):
        while not self.stopping.is_set():
            try:
                conn, _ = self.server.accept()
            except TimeoutError:
                continue
            self.held.append(conn)                                  # never closed by us before stop()
            if self.behaviour == "http":
                conn.sendall(self.HTTP)
            elif self.behaviour == "http-on-request":
                conn.settimeout(30)
                with contextlib.suppress(OSError):
                    if conn.recv(1024):
                        conn.sendall(self.HTTP)
            elif self.behaviour == "closes":
                conn.close()

    def stop(self):
        self.stopping.set()
        self.join()
        for conn in [*self.held, self.server]:
            conn.close()


def run_bounded(capsys, seconds: float, *argv):
    """run_cli in a thread, given `seconds` to answer: a hang fails the test instead of stopping it."""
    from hcclsim.cli import main

    done = []
    thread = threading.Thread(target=lambda: done.append(main([str(a) for a in argv])), daemon=True)
    t0 = time.monotonic()
    thread.start()
    thread.join(seconds)
    assert done, f"no answer within {seconds} s"
    out = capsys.readouterr()
    return done[0], out.out, out.err, time.monotonic() - t0


@pytest.mark.parametrize(("behaviour", "needles"), [
    ("silent", ["no Dask scheduler answered within 1 s", "HCCL_BENCH_CONNECT_TIMEOUT"]),
    ("http", ["not a Dask scheduler (it answered b'HTTP/1.1 200 OK"]),
    ("http-on-request", ["no Dask scheduler answered within 1 s"]),   # it waits for a request we never send
    ("closes", ["not a Dask scheduler (it closed the connection without a word)"]),
])
def test_a_peer_that_is_not_a_dask_scheduler_is_one_line_within_the_limit(capsys, monkeypatch, tmp_path,
                                                                           behaviour, needles):
    """Was: a silent peer hung for good (the handshake read has no limit); HTTP ended in exit 3, a MemoryError
    for the 3 EiB message 'HTTP/1.1' spells as a length."""
    pytest.importorskip("distributed")
    monkeypatch.setenv("HCCL_BENCH_CONNECT_TIMEOUT", "1")
    peer = FakePeer(behaviour)
    path = tmp_path / "out.csv"
    try:
        status, out, err, took = run_bounded(capsys, 20, *SWEEP, "--executor", "dask", "--scheduler",
                                             peer.address, "-o", path)
    finally:
        peer.stop()
    assert_one_line_error(status, out, err, f"--scheduler {peer.address}: ", *needles,
                          "expected the address `dask scheduler` prints")
    assert took < 1 + 2 and not path.exists()                      # the limit and the probe's grace second


def test_a_dask_worker_is_not_the_scheduler(capsys, cluster):
    worker = min(cluster.scheduler_info["workers"])
    status, out, err, _ = run_bounded(capsys, 30, *SWEEP, "--executor", "dask", "--scheduler", worker)
    assert_one_line_error(status, out, err, f"--scheduler {worker}: that is a Dask Worker, not the scheduler")


@pytest.mark.parametrize("value", ["soon", "0", "-1", "inf", "nan"])
def test_the_connect_limit_must_be_seconds(capsys, monkeypatch, value):
    pytest.importorskip("distributed")
    monkeypatch.setenv("HCCL_BENCH_CONNECT_TIMEOUT", value)
    status, out, err = run(capsys, *SWEEP, "--executor", "dask", "--scheduler", "tcp://127.0.0.1:8786")
    assert_one_line_error(status, out, err, f"HCCL_BENCH_CONNECT_TIMEOUT: expected seconds > 0 (e.g. 5), "
                                            f"got {value!r}")


def test_without_the_dask_extra(capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "distributed", None)           # import distributed -> ImportError
    status, out, err = run(capsys, *SWEEP, "--executor", "dask", "--scheduler", "tcp://127.0.0.1:8786")
    assert_one_line_error(status, out, err,
                          "--executor dask needs the dask extra: pip install 'hccl-bench[dask]'")
    with pytest.raises(ConfigError, match=r"pip install 'hccl-bench\[dask\]'"):
        hcclsim.sweep(**API, executor="dask", scheduler="tcp://127.0.0.1:8786")


@pytest.mark.parametrize(("kwargs", "needle"), [
    ({"executor": "dask"}, "--executor dask needs --scheduler ADDRESS"),
    ({"executor": "slurm"}, "unknown executor 'slurm'; expected one of: local, dask"),
    ({"scheduler": "tcp://127.0.0.1:8786"}, "--scheduler: only with --executor dask"),
    ({"jobs": 0}, "jobs: expected a whole number >= 1"),
    ({"executor": "dask", "scheduler": "tcp://127.0.0.1:8786", "jobs": 2}, "--jobs: only with --executor local"),
])
def test_api_executor_errors(kwargs, needle):
    if kwargs.get("executor") == "dask":
        pytest.importorskip("distributed")
    with pytest.raises(ConfigError, match=needle.replace("(", r"\(")):
        hcclsim.sweep(**API, **kwargs)


def test_workers_must_run_this_hccl_bench(capsys, monkeypatch):
    """A scheduler with no worker yet, then with a worker that cannot import hcclsim: both refused."""
    distributed = pytest.importorskip("distributed")
    monkeypatch.setattr(executors, "WORKERS_TIMEOUT", 0.5)
    with distributed.LocalCluster(n_workers=0, processes=False, protocol="tcp://", dashboard_address=":0") as bare:
        address = bare.scheduler_address
        status, out, err = run(capsys, *SWEEP, "--executor", "dask", "--scheduler", address)
        assert_one_line_error(status, out, err, "no Dask worker joined", "dask worker ADDRESS")
        worker = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
            import sys
            sys.modules["hcclsim"] = None                   # an environment without hccl-bench
            sys.argv = ["dask-worker", "{address}", "--no-nanny", "--nthreads", "1"]
            from distributed.cli.dask_worker import main
            main()
            """)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            monkeypatch.setattr(executors, "WORKERS_TIMEOUT", 30.0)
            status, out, err = run(capsys, *SWEEP, "--executor", "dask", "--scheduler", address)
            assert_one_line_error(status, out, err, "cannot import hcclsim", "every worker needs hccl-bench "
                                  f"{hcclsim.__version__}")
        finally:
            worker.terminate()
            worker.wait(10)


FORK_CHECK = """
import threading
import pandas as pd
from hcclsim.network.config import load_topology
from hcclsim.sweeping import executors
from hcclsim.sweeping.sweep import size_grid, sweep
import hcclsim.cli._long as long_module
from hcclsim.cli._long import _Progress
from hcclsim.network.config import load_topology
from hcclsim.sweeping.sweep import size_grid, sweep

assert executors._can_fork()
stop = threading.Event()
other = threading.Thread(target=stop.wait)
other.start()
assert not executors._can_fork()                    # an unknown thread may hold a lock a child needs
executors.fork_safe(other, threading.Lock())
assert executors._can_fork()
executors.forget_fork_safe(other)
stop.set()
other.join()

methods = []
real = executors._context
executors._context = lambda fork: methods.append(fork) or real(fork)
executors.SERIAL_SECONDS = 0.0
long_module.PROGRESS_DELAY = 0.0
bar = _Progress(enabled=True)                       # its drawing thread is registered: forking stays allowed
args = (load_topology("switch8"), ["all_reduce", "all_gather"], "all", size_grid(16, 64 << 10, 4))
one = sweep(*args, engine="analytic,packet", jobs=1).rows
two = sweep(*args, engine="analytic,packet", jobs=2, on_start=bar.start).rows
bar.stop()
pd.testing.assert_frame_equal(one, two, check_exact=True)
assert methods == [True], methods
print("ok")
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="workers are forked on Linux only")
def test_local_workers_fork_only_when_every_other_thread_is_known():
    """In a fresh interpreter (pytest's may run threads of its own): an unregistered thread turns forking
    off; the progress bar's thread does not, and forked workers give the rows of --jobs 1."""
    done = subprocess.run([sys.executable, "-c", FORK_CHECK], capture_output=True, text=True, timeout=120,
                          check=False)
    assert done.returncode == 0 and done.stdout == "ok\n", done.stderr
