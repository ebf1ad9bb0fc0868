"""The hccl-bench command line: a thin click layer. Commands live in hcclsim/cli/.

Exit statuses: 0 success, 1 a performance gate failed, 2 invalid input,
3 internal error (traceback only with --debug), 130 interrupted (Ctrl-C), 141 a reader of stdout or
stderr went away before the output was written (`| head`), 143 terminated (SIGTERM).
"""

from __future__ import annotations

import importlib
import os
import select
import signal
import sys
import threading
import traceback

import click

from ..core.errors import HcclSimError
from ..core.version import __version__

# Each command's module and its one-line help: `hccl-bench --help` prints these without importing any
# command (they import numpy, pandas, numba when they run); tests/test_startup.py checks that each line is
# the command's own short help.
COMMANDS = {
    "algorithms": ("listing", "algorithms_cmd",
                   "List the algorithms: the collectives each implements, what it needs, and its options."),
    "calibrate": ("calibrate", "calibrate_cmd", "Fit TOPOLOGY to a measurement of one collective."),
    "compare": ("compare", "compare_cmd",
                "Compare two results files (from `sweep -o`: .csv, .json or .parquet) and gate on regressions."),
    "import": ("import_", "import_cmd",
               "Convert nccl-tests / rccl-tests output (text or -J JSON) to hccl-bench's results columns."),
    "plot": ("plot", "plot_cmd", "Plot results files (from `sweep -o`: .csv, .json or .parquet) against message size."),
    "replay": ("replay", "replay_cmd", ("Time the collectives of real traces: PyTorch profiler (Kineto), Chakra (JSON, "
                                        "or protobuf .et with the 'chakra' extra) and PARAM comms traces.")),
    "run": ("run", "run_cmd", "Run a study: sweeps, workload replays and overlap sections from a scenario TOML file."),
    "server": ("server", "server_cmd",
               "Keep a warm hccl-bench in the background, so that later commands start at once."),
    "sweep": ("sweep", "sweep_cmd", "Sweep message sizes for collectives and algorithms on one topology."),
    "topologies": ("listing", "topologies_cmd",
                   "List the built-in topology presets, or print one preset's TOML (to copy and edit)."),
    "tune": ("tune", "tune_cmd",
             "Find the fastest algorithm for each message-size range (every applicable algorithm is swept)."),
    "validate": ("validate", "validate_cmd",
                 "Compare presets with published nccl-tests / rccl-tests measurements (validation/*.toml)."),
}


class LazyGroup(click.Group):
    """A group whose commands are imported when one is run (or asked for its --help), not before."""

    def list_commands(self, ctx):
        return sorted(COMMANDS)

    def get_command(self, ctx, name):
        if name not in COMMANDS:
            return None
        module, attr, _ = COMMANDS[name]
        return getattr(importlib.import_module(f"{__name__}.{module}"), attr)

    def format_commands(self, ctx, formatter):
        limit = formatter.width - 6 - max(map(len, COMMANDS))
        rows = [(name, click.Command(name, help=COMMANDS[name][2]).get_short_help_str(limit)) for name in sorted(COMMANDS)]
        with formatter.section("Commands"):
            formatter.write_dl(rows)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 110})
@click.version_option(__version__, prog_name="hccl-bench")
@click.option("--debug", is_flag=True, help="Show a traceback on internal errors.")
@click.pass_context
def cli(ctx, debug):
    """Collective benchmarks on a simulated network: how fast will AllReduce & co. run, and why?

    Start with `hccl-bench sweep` (AllReduce, every applicable algorithm, the dgx-h100 preset).
    """
    ctx.obj = {"debug": debug}


NO_ARGS = getattr(click.exceptions, "NoArgsIsHelpError", ())   # click >= 8.2 raises it for a bare group


READER_GONE = 128 + signal.SIGPIPE           # what a shell reports for a writer that SIGPIPE ended


def _reader_gone() -> int:
    """A reader has gone (`| head`): the stream that lost it goes to /dev/null, so that what is left, and the
    interpreter's final flush, go nowhere (Python's advice, docs.python.org/3/library/signal.html, note on
    SIGPIPE), and the command ends 141, as `seq ... | head` does: the output was cut short, which is neither
    a pass nor a failed gate (a verdict reached before it is not turned into 0). stdout is the one gone when a
    poll says so; else it was stderr, and stdout (a results file, say) is left alone."""
    poll = select.poll()
    poll.register(sys.stdout.fileno(), select.POLLOUT)
    gone = any(ev & (select.POLLERR | select.POLLHUP) for _, ev in poll.poll(0))
    os.dup2(os.open(os.devnull, os.O_WRONLY), (sys.stdout if gone else sys.stderr).fileno())
    return READER_GONE


def _fail(message: str, status: int) -> int:
    click.echo(f"hccl-bench: error: {message}", err=True)
    return status


def main(argv=None) -> int:
    """The console script. SIGTERM (kill, a CI timeout, `timeout`) stops a command as Ctrl-C does (workers
    ended, finished rows kept, one line), with status 143; a second SIGTERM kills at once."""
    if threading.current_thread() is not threading.main_thread():
        return _main(argv)
    got = []

    def terminated(signum, frame):
        got.append(signum)
        signal.signal(signum, signal.SIG_DFL)
        raise KeyboardInterrupt
    previous = signal.signal(signal.SIGTERM, terminated)
    try:
        status = _main(argv)
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL if previous is None else previous)
    return 128 + got[0] if got and status == 130 else status


def _main(argv) -> int:
    args = sys.argv[1:] if argv is None else list(argv)
    if argv is None:                           # the console script: a warm server runs it, if one is up
        from ._client import forward
        status = forward(args)
        if status is not None:
            return status
    debug = "--debug" in args
    complete = os.environ.get("_HCCL_BENCH_COMPLETE")
    if complete:                               # click's shell completion (`eval "$(_HCCL_BENCH_COMPLETE=bash_source ...)"`)
        from click.shell_completion import shell_complete
        return shell_complete(cli, {}, "hccl-bench", "_HCCL_BENCH_COMPLETE", complete)
    try:
        # the group is invoked directly: click's main() turns a closed stdout (`| head`) into status 1, a failed
        # gate here (below: READER_GONE)
        with cli.make_context("hccl-bench", args) as ctx:
            rv = cli.invoke(ctx)
        sys.stdout.flush()                     # a closed stdout shows here, not at the interpreter's exit
        return rv if isinstance(rv, int) else 0
    except click.exceptions.Exit as e:
        return e.exit_code
    except (click.exceptions.Abort, EOFError):
        return _fail("interrupted", 130)
    except NO_ARGS as e:                       # bare `hccl-bench`: the help, as click 8.1 printed it
        try:
            click.echo(e.ctx.get_help())
            sys.stdout.flush()
        except BrokenPipeError:
            return _reader_gone()
        return 0
    except click.UsageError as e:
        hint = f" (see 'hccl-bench {e.ctx.command.name} --help')" if e.ctx and e.ctx.command.name != "cli" else ""
        return _fail(f"{e.format_message()}{hint}", 2)
    except click.ClickException as e:
        return _fail(e.format_message(), 2)
    except HcclSimError as e:
        return _fail(str(e), e.exit_status)
    except KeyboardInterrupt:
        return _fail("interrupted", 130)
    except BrokenPipeError:
        return _reader_gone()
    except Exception as e:  # noqa: BLE001 - the last line of defence: one line, status 3
        if debug:
            traceback.print_exc()
        return _fail(f"internal error: {type(e).__name__}: {e} (run with --debug for a traceback)", 3)
