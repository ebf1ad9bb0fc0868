"""Local workers die with the main process (docs/config.md, "Parallel and distributed sweeps"): after kill -9
or SIGTERM of a `--jobs 2` sweep no process of it is left within a second, and a caller reading its stdout
and stderr gets end-of-file; SIGTERM exits 143 with the one line that says how many rows -o kept, and they
are there. Forkserver, spawn and the watchdog used where Linux's parent-death signal is missing do the same.
What a worker says arrives through its results: its warnings are shown, its errors raised, here."""

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from hcclsim.sweeping import executors

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")

# a packet-engine sweep of 30 blocks that runs for seconds after its workers start
LONG = ["sweep", "-t", "switch8", "--engine", "packet", "-c", "all", "-a", "all", "-b", "1K", "-e", "4M", "-f", "2",
        "-q", "-j", "2"]
START = 120                   # seconds allowed for a start (a fresh clone compiles the kernels first)


def stat(pid: int):
    """(ppid, state, start time) of pid from /proc, None when it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return int(fields[1]), fields[0], fields[19]


def descendants(pid: int) -> dict[int, str]:
    """Every process under pid now: {pid: start time}."""
    procs = {int(n): stat(int(n)) for n in os.listdir("/proc") if n.isdigit()}
    found, todo = {}, [pid]
    while todo:
        parent = todo.pop()
        for child, st in procs.items():
            if st is not None and st[0] == parent and child not in found:
                found[child] = st[2]
                todo.append(child)
    return found


def running(procs: dict[int, str]) -> list[int]:
    """Those of procs still running: same start time (not a reused pid), not a zombie (init here may not reap)."""
    return [pid for pid, started in procs.items() if (st := stat(pid)) and st[2] == started and st[1] != "Z"]


def wait_for(proc, condition, what: str, timeout: float = START):
    """condition() once true, while proc runs."""
    deadline = time.monotonic() + timeout
    while not (got := condition()):
        assert proc.poll() is None, f"it ended before any {what}: {proc.stderr.read().decode()}"
        assert time.monotonic() < deadline, f"no {what} within {timeout} s"
        time.sleep(0.05)
    return got


class Reader(threading.Thread):
    """Reads a pipe to its end, noting when that came."""

    def __init__(self, pipe):
        super().__init__(daemon=True)
        self.pipe, self.data, self.eof = pipe, b"", None
        self.start()

    def run(self):
        self.data = self.pipe.read()
        self.eof = time.monotonic()


def kill_and_check(proc, sig):
    """Send sig to the main process: its workers and its pipes' ends must go within a second of its end."""
    workers = descendants(proc.pid)
    assert workers and proc.poll() is None, "the sweep ended before the test could kill it: make it longer"
    readers = Reader(proc.stdout), Reader(proc.stderr)
    proc.send_signal(sig)
    proc.wait(30)                                                   # SIGTERM: it stops its workers first
    gone = time.monotonic()
    deadline = gone + 1.0
    while running(workers) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert running(workers) == [], f"{running(workers)} of {sorted(workers)} outlived the main process"
    for r in readers:
        r.join(max(deadline - time.monotonic(), 0))
        assert r.eof is not None and r.eof <= deadline, "a worker still holds the caller's stdout or stderr"
    return readers[1].data.decode()


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM])
def test_killing_a_jobs_2_sweep_ends_its_workers_and_its_pipes(tmp_path, sig):
    out = tmp_path / "out.csv"
    proc = subprocess.Popen([sys.executable, "-m", "hcclsim.cli", *LONG, "-o", out], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, cwd=tmp_path)
    try:
        wait_for(proc, lambda: descendants(proc.pid), "forked worker")
        if sig == signal.SIGTERM:                                   # a block or more finished: kept
            wait_for(proc, lambda: out.is_file() and out.read_text().count("\n") > 1, "finished block in -o")
        err = kill_and_check(proc, sig)
    finally:
        if proc.poll() is None:
            proc.kill()
    if sig == signal.SIGKILL:
        assert proc.returncode == -signal.SIGKILL
        return
    assert proc.returncode == 128 + signal.SIGTERM, err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    kept = int(err.split("interrupted; ")[1].split(" finished rows kept in")[0])
    lines = out.read_text().splitlines()
    header = lines[0].split(",")
    assert kept >= 1 and len(lines) == 1 + kept and lines[0].startswith("collective,")
    assert all(len(line.split(",")) == len(header) for line in lines)


WORKERS = '''
import multiprocessing, os, sys, time, warnings
from pathlib import Path
from hcclsim.core.errors import ConfigError
from hcclsim.sweeping import executors


def busy(path):
    Path(path).write_text("")                       # started, initializer done
    time.sleep(600)                                 # a long block


def chatty(text):
    os.write(2, b"a worker writing to fd 2\\n")
    print("a worker printing")
    warnings.warn(text, RuntimeWarning)
    if text == "fail":
        raise ConfigError("--thing: a worker's error")
    return text.upper()


if __name__ == "__main__":
    mode, folder = sys.argv[1], sys.argv[2]
    executors.STEAL = False                         # only the workers run units
    if mode == "messages":
        ctx = multiprocessing.get_context("fork")
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("default")
            got = sorted(r for _, r in executors._pool(chatty, ["one", "two", "one"], 2, ctx))
        print(got, sorted(str(w.message) for w in caught), {w.category.__name__ for w in caught})
        try:
            list(executors._pool(chatty, ["fail"], 1, ctx))
        except ConfigError as e:
            print("raised:", e)
        sys.exit(0)
    if mode == "watchdog":                          # as where there is no PR_SET_PDEATHSIG
        executors.PDEATHSIG = False
    ctx = multiprocessing.get_context("fork" if mode == "watchdog" else mode)
    next(executors._pool(busy, [f"{folder}/{i}" for i in range(2)], 2, ctx))
'''


@pytest.fixture
def script(tmp_path):
    path = tmp_path / "workers.py"
    path.write_text(WORKERS)
    return path


@pytest.mark.parametrize("mode", ["forkserver", "spawn", "watchdog"])
def test_workers_die_with_the_main_process_however_they_started(tmp_path, script, mode):
    proc = subprocess.Popen([sys.executable, script, mode, tmp_path], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    try:
        wait_for(proc, lambda: all((tmp_path / str(i)).exists() for i in range(2)), "busy workers")
        kill_and_check(proc, signal.SIGKILL)
    finally:
        if proc.poll() is None:
            proc.kill()


def test_what_workers_say_reaches_the_user_through_their_results(tmp_path, script):
    done = subprocess.run([sys.executable, script, "messages", tmp_path], capture_output=True, text=True,
                          timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "['ONE', 'ONE', 'TWO'] ['one', 'two'] {'RuntimeWarning'}",  # shown here, each once, as by one process
        "raised: --thing: a worker's error",                        # the error itself, to be the one line
    ]
    assert "worker" not in done.stderr, done.stderr                 # their stdout and stderr are /dev/null


DIES = """
import os
from hcclsim.sweeping import executors

pid = os.fork()
if pid == 0:
    executors._die_with(os.getpid())               # not our parent: as if it had died before we armed
    os._exit(0)
print(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))
"""


def test_a_worker_whose_parent_is_already_gone_exits():
    done = subprocess.run([sys.executable, "-c", DIES], capture_output=True, text=True, timeout=60, check=False)
    assert done.stdout == "1\n", done.stderr
    me = os.getpid()
    assert executors._child_of(me, me)
    assert not executors._child_of(me, 1)                          # handed to init
    with subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"]) as server:
        try:
            assert executors._child_of(me, server.pid)             # a forkserver we started
            assert not executors._child_of(server.pid + 10**6, server.pid)
        finally:
            server.kill()


def test_forked_workers_let_go_of_every_file_of_the_main_process(tmp_path):
    """Not only stdio: -o, its lock, pipes the caller passed; the pool's own pipes stay (opened later)."""
    check = textwrap.dedent(f"""
        import multiprocessing, os
        from hcclsim.sweeping import executors
        kept = open({str(tmp_path / "out.csv")!r}, "w")
        r, w = os.pipe()
        executors.STEAL = False
        links = [f"/proc/self/fd/{{fd}}" for fd in (1, 2, kept.fileno(), w)]
        seen = dict(executors._pool(os.readlink, links, 1, multiprocessing.get_context("fork")))
        print([seen[link] for link in links])
    """)
    done = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True, timeout=60, check=False)
    assert done.stdout == f"{[os.devnull] * 4}\n", done.stderr
