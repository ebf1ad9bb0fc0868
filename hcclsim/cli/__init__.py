"""The hccl-bench command line: a thin click layer. Commands live in hcclsim/cli/.

Exit statuses: 0 success, 1 a performance gate failed, 2 invalid input,
3 internal error (traceback only with --debug), 130 interrupted (Ctrl-C), 143 terminated (SIGTERM).
"""

from __future__ import annotations

import signal
import sys
import threading
import traceback

import click

from ..core.errors import HcclSimError
from ..core.version import __version__
from .calibrate import calibrate_cmd
from .compare import compare_cmd
from .import_ import import_cmd
from .listing import algorithms_cmd, topologies_cmd
from .plot import plot_cmd
from .run import run_cmd
from .sweep import sweep_cmd
from .tune import tune_cmd
from .validate import validate_cmd


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 110})
@click.version_option(__version__, prog_name="hccl-bench")
@click.option("--debug", is_flag=True, help="Show a traceback on internal errors.")
@click.pass_context
def cli(ctx, debug):
    """Collective benchmarks on a simulated network: how fast will AllReduce & co. run, and why?

    Start with `hccl-bench sweep` (AllReduce, every applicable algorithm, the dgx-h100 preset).
    """
    ctx.obj = {"debug": debug}


cli.add_command(sweep_cmd)
cli.add_command(tune_cmd)
cli.add_command(topologies_cmd)
cli.add_command(algorithms_cmd)
cli.add_command(calibrate_cmd)
cli.add_command(compare_cmd)
cli.add_command(plot_cmd)
cli.add_command(run_cmd)
cli.add_command(validate_cmd)
cli.add_command(import_cmd)


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
    debug = "--debug" in args
    try:
        rv = cli.main(args=args, prog_name="hccl-bench", standalone_mode=False)
        return rv if isinstance(rv, int) else 0
    except click.exceptions.Exit as e:
        return e.exit_code
    except click.exceptions.Abort:
        return _fail("interrupted", 130)
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
        return 0
    except Exception as e:  # noqa: BLE001 - the last line of defence: one line, status 3
        if debug:
            traceback.print_exc()
        return _fail(f"internal error: {type(e).__name__}: {e} (run with --debug for a traceback)", 3)
