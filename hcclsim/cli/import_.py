"""`hccl-bench import LOG... -o measured.csv`: nccl-tests / rccl-tests logs as a results table (docs/nccl-tests.md)."""

from __future__ import annotations

import csv
import io
from collections import Counter

import click

from ..core.errors import ConfigError


@click.command("import")
@click.argument("logs", nargs=-1, required=True, metavar="LOG...")
@click.option("-o", "--output", required=True, metavar="MEASURED.csv",
              help="The results table to write (CSV, replaced whole: written aside, then renamed).")
@click.option("-c", "--collective", default=None, metavar="NAME",
              help="The collective of tables the log does not name (no program name or "
                   "'Collective test starting' line, no collective in the file name).")
def import_cmd(logs, output, collective):
    """Convert nccl-tests / rccl-tests output (text or -J JSON) to hccl-bench's results columns.

    One row per table, size and placement (out-of-place, in-place), engine `measured`, with the log's
    GPUs, nodes, NCCL version and forced NCCL_ALGO / NCCL_PROTO as columns. Every row is checked
    (algbw = size / time, busbw = algbw x the collective's factor); a log that does not read whole is
    refused naming its line. `compare` and `plot` take the result, or a log directly.

    \b
    Examples:
      hccl-bench import all_reduce.log all_gather.log -o measured.csv
      hccl-bench compare measured.csv simulated.csv
      hccl-bench plot measured.csv simulated.csv --by file -o both.png
    """
    from ..results import nccltests
    from ..results.safefile import replace_text
    from ..schedule import collectives as C

    if not output.lower().endswith(".csv"):
        raise ConfigError(f"-o/--output: expected a file ending in .csv, got {output!r}")
    name = collective and (collective if collective in nccltests.POINT_TO_POINT else C.canonical(collective, "-c"))
    records, tables, seen = [], 0, Counter()
    for log in logs:
        blocks = nccltests.read_blocks(log, name)
        tables += len(blocks)
        records += nccltests.to_records(blocks, log, seen)
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=list(records[0]), lineterminator="\n")
    writer.writeheader()
    writer.writerows(records)
    try:
        replace_text(output, buf.getvalue())
    except OSError as e:
        raise ConfigError(f"-o/--output: cannot write {output!r} ({e.strerror or e})") from None
    click.echo(f"hccl-bench: wrote {output}: {len(records)} rows from {tables} table{'s' * (tables != 1)} "
               f"of {len(logs)} log{'s' * (len(logs) != 1)}", err=True)
    return 0
