"""Outputs other tools read: NCCL's tuner plugin config (tune --format nccl-tuner), nccl-tests' text layout
(sweep --format nccl-tests), CSV floats (docs/nccl.md, docs/results.md)."""
# ruff: noqa: UP031 -- nccl-tests' C printf formats, applied as printed (Python's % has the same conversions)

import io
import math
from itertools import pairwise

import numpy as np
import pandas as pd
import pytest
from helpers import run_cli as run

from hcclsim.results.nccl_tuner import MAX_LINE, tuner_config
from hcclsim.results.nccltests import parse_text
from hcclsim.results.nccltests_format import block, number
from hcclsim.results.report import to_csv

# ---------------------------------------------------------------- NCCL's example tuner plugin, as its C reads

# plugin.c (NVIDIA/nccl plugins/tuner/example): parseCollType, parseAlgorithm, parseProtocol. An unknown name
# silently becomes allreduce / ring / simple there; here it is a test failure.
PLUGIN_COLLECTIVES = {"broadcast", "reduce", "allgather", "reducescatter", "allreduce"}
PLUGIN_ALGORITHMS = {"tree", "ring", "collnet_direct", "collnet_chain", "nvls", "nvls_tree", "pat"}
PLUGIN_PROTOCOLS = {"ll", "ll128", "simple"}


def plugin_configs(text: str) -> list[dict]:
    """loadConfig: fgets of 255 characters, '#' and empty lines skipped, strtok on ',' with blanks
    trimmed, 8 to 10 fields; numbers by strtoull / atoi."""
    configs = []
    for raw in io.StringIO(text):
        assert len(raw) <= 255, f"fgets would cut this line: {raw!r}"
        if raw[0] in "#\n":
            continue
        tokens = [t.strip(" \t") for t in raw.rstrip("\n").split(",") if t]   # strtok drops empty fields
        assert 8 <= len(tokens) <= 10, raw
        assert tokens[0] in PLUGIN_COLLECTIVES and tokens[3] in PLUGIN_ALGORITHMS and tokens[4] in PLUGIN_PROTOCOLS
        ints = [int(t) for t in tokens[1:3] + tokens[5:]]
        configs.append(dict(zip(["coll", "lo", "hi", "algo", "proto", "channels", "nodes", "ranks", "pipe", "reg"],
                                tokens[:1] + ints[:2] + tokens[3:5] + ints[2:], strict=False)))
    return configs


def ranges(*rows, topology="t", ranks=16):
    """A tuner table (hcclsim.analysis.tune.TUNE_COLUMNS, the columns the config reads)."""
    return pd.DataFrame([{"collective": c, "min_size_bytes": lo, "max_size_bytes": hi, "algorithm": a,
                          "protocol": p, "topology": topology, "ranks": ranks, "engine": "analytic",
                          "dtype": "float32"} for c, lo, hi, a, p in rows])


def test_config_lines_by_hand():
    """Neighbours with one pick merge; a line reaches to the byte before the next line's smallest size;
    ranges NCCL cannot run are left out (the lines around them keep their bounds) with a note each."""
    text, notes = tuner_config(ranges(("all_reduce", 8, 4096, "ring", "ll"),
                                      ("all_reduce", 8192, 65536, "ring", "ll"),
                                      ("all_reduce", 131072, 131072, "direct_oneshot", "simple"),
                                      ("all_reduce", 262144, 1 << 20, "in_switch", "simple"),
                                      ("all_to_all", 8, 1 << 20, "direct", "simple"),
                                      ("broadcast", 8, 1024, "tree", "ll"),
                                      ("broadcast", 2048, 1 << 20, "ring", "ll128")), nodes=2)
    assert [line for line in text.splitlines() if not line.startswith("#")] == [
        "allreduce,0,131071,ring,ll,-1,2,16,-1,-1",
        "allreduce,262144,1048576,nvls,simple,-1,2,16,-1,-1",
        "broadcast,2048,1048576,ring,ll128,-1,2,16,-1,-1"]
    assert notes == [("left out all_reduce 131072-262143 bytes, direct_oneshot/simple: NCCL has no algorithm "
                      "direct_oneshot"),
                     "left out all_to_all 0-1048576 bytes, direct/simple: NCCL's tuner plugin has no all_to_all",
                     "left out broadcast 0-2047 bytes, tree/ll: NCCL runs broadcast with ring only"]
    assert all(f"# {n}" in text.splitlines() for n in notes)


@pytest.mark.parametrize("algorithm, protocol, reason", [
    ("in_switch", "ll", "NCCL runs nvls with the simple protocol only"),
    ("ring", "none", "no NCCL protocol (endpoint.protocol = none)"),
    ("halving_doubling", "simple", "NCCL has no algorithm halving_doubling"),
    ("ring:channels=2", "simple", "NCCL has no algorithm ring:channels=2")])
def test_what_nccl_cannot_run_never_appears(algorithm, protocol, reason):
    text, notes = tuner_config(ranges(("all_reduce", 8, 1024, algorithm, protocol)), nodes=1)
    assert plugin_configs(text) == [] and len(notes) == 1 and reason in notes[0]


def test_every_line_fits_the_plugins_buffer():
    text, _ = tuner_config(ranges(("all_to_all", 8, 1024, "direct", "simple"), topology="x" * 400), nodes=1)
    assert all(len(line) <= MAX_LINE for line in text.splitlines()) and plugin_configs(text) == []


def test_tune_writes_a_config_the_plugin_reads(capsys, tmp_path):
    path = tmp_path / "nccl_tuner.conf"
    status, out, err = run(capsys, "tune", "-t", "dgx-h100", "-c", "all", "-b", "8", "-e", "256M", "-f", "32",
                           "--format", "nccl-tuner", "-o", str(path))
    assert status == 0 and path.read_text() == out
    configs = plugin_configs(out)
    assert {c["coll"] for c in configs} == {"allreduce", "allgather", "reducescatter", "broadcast", "reduce"}
    for coll in {c["coll"] for c in configs}:
        mine = [c for c in configs if c["coll"] == coll]
        assert mine[0]["lo"] == 0 and mine[-1]["hi"] == 256 << 20           # the largest swept size
        assert all(a["hi"] + 1 == b["lo"] for a, b in pairwise(mine))       # contiguous, no overlap
        assert all((a["algo"], a["proto"]) != (b["algo"], b["proto"]) for a, b in pairwise(mine))
    assert {(c["channels"], c["nodes"], c["ranks"], c["pipe"], c["reg"]) for c in configs} == {(-1, 1, 8, -1, -1)}
    assert all(c["proto"] == "simple" for c in configs if c["algo"] == "nvls")
    assert "hccl-bench: left out all_to_all" in err and "# left out all_to_all" in out    # no alltoall in NCCL's


def test_tuner_config_to_an_unwritable_file(capsys, tmp_path):
    status, out, err = run(capsys, "tune", "-t", "switch8", "-b", "8", "-e", "8", "--format", "nccl-tuner",
                           "-o", str(tmp_path / "missing" / "nccl_tuner.conf"))
    assert status == 2 and out == "" and "Traceback" not in err       # after the sweep's skipped-notes:
    assert err.splitlines()[-1].startswith("hccl-bench: error: -o/--output: cannot write")


# ------------------------------------------------------------------ nccl-tests' text layout (src/util.cu)

@pytest.mark.parametrize("value, width, text", [
    (19.3456, 7, "  19.35"), (12345.678, 7, "12345.7"), (1234567.8, 7, "1234568"), (12345678.9, 7, "1.2e+07"),
    (338.554, 6, "338.55"), (1234.56, 6, "1234.6"), (123456.7, 6, "123457"), (1234567.0, 6, " 1e+06")])
def test_numbers_as_getFloatStr_prints_them(value, width, text):
    """%.2f, else %.1f, else %.0f, else %.1e (width >= 7) / %.0e, whichever fits the width."""
    assert number(value, width) == text


def ring_allreduce_us(size, n=8, alpha=1e-6, bw=50e9):
    """switch8's ring AllReduce: 2(N-1)(alpha + S/(N B)), the piece a whole float (tests/test_cli.py)."""
    return 2 * (n - 1) * (alpha + -(-size // 4 // n) * 4 / bw) * 1e6


def c_body(t, algbw, busbw):
    """writeBenchmarkLineBody with -c 0: "  %7s  %6s  %6s    N/A"."""
    return "  %7s  %6s  %6s    N/A" % (number(t, 7), number(algbw, 6), number(busbw, 6))


def test_sweep_prints_nccl_tests_layout(capsys):
    status, out, err = run(capsys, "sweep", "-t", "switch8", "-a", "ring", "-e", "4K", "-f", "16", "--format",
                           "nccl-tests")
    assert status == 0 and err == ""
    lines = out.splitlines()
    # util.cu writeResultHeader's format strings, printed by Python's printf-style % (the same conversions)
    assert "# %10s  %12s  %8s  %6s  %6s           out-of-place                       in-place          " \
           % ("", "", "", "", "") in lines
    assert "# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s %*s" \
           % ("size", "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong", "time", "algbw",
              "busbw", "#wrong", 0, "") in lines
    assert "# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s %*s" \
           % ("(B)", "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", "",
              0, "") in lines
    busbw = []
    for size in (16, 256, 4096):
        t = ring_allreduce_us(size)
        algbw = size / t / 1e3
        busbw.append(algbw * 2 * 7 / 8)
        # writeBenchmarkLinePreamble "%12li  %12li  %8s  %6s  %6s", then out-of-place and in-place bodies
        assert "%12li  %12li  %8s  %6s  %6s" % (size, size // 4, "float", "sum", -1) \
               + c_body(t, algbw, busbw[-1]) * 2 in lines
    assert "# %-20s : %d %s" % ("Out of bounds values", 0, "OK") in lines
    assert "# %-20s : %g %s" % ("Avg bus bandwidth", sum(busbw) / 3, "") in lines
    assert lines[0] == "# Collective test starting: all_reduce_perf"
    assert lines[1].startswith("# nThread 1 nGpus 1 minBytes 16 maxBytes 4096 step: 16(factor) ")
    assert "#  Rank  7 Group  0 Pid      8 on     node-0 device  7 [0000:00:00] simulated switch8" in lines
    assert "# hccl-bench algorithm: ring" in lines and "# NCCL_ALGO=Ring" in lines
    assert lines[-4:] == ["#", "# Collective test concluded: all_reduce_perf", "#", ""]


def test_counts_roots_and_hosts_as_nccl_tests():
    """all_gather's count is per rank (count / nranks, AllGatherGetCollByteCount) and its redop none;
    broadcast keeps its root; ranks of scale-up domain D run on node-D."""
    rows = pd.DataFrame([{"collective": c, "algorithm": "ring", "topology": "t", "ranks": 4, "engine": "analytic",
                          "size_bytes": 1024, "count": 256, "dtype": "bfloat16", "root": root, "time_us": 10.0,
                          "algbw_GBps": 0.1024, "busbw_GBps": b, "protocol": "simple"}
                         for c, root, b in (("all_gather", -1, 0.0768), ("broadcast", 2, 0.1024))])
    gather, bcast = (block(part, 2, 1024, 1024, 2, 1) for _, part in rows.groupby("collective", sort=False))
    assert "%12li  %12li  %8s  %6s  %6s" % (1024, 128, "bfloat16", "none", -1) + c_body(10, 0.1024, 0.0768) * 2 \
        in gather.splitlines()
    assert "%12li  %12li  %8s  %6s  %6s" % (1024, 512, "bfloat16", "none", 2) + c_body(10, 0.1024, 0.1024) * 2 \
        in bcast.splitlines()
    hosts = [line.split(" on ")[1].split()[0] for line in gather.splitlines() if line.startswith("#  Rank")]
    assert hosts == ["node-0", "node-0", "node-1", "node-1"]
    assert "# NCCL_PROTO=Simple" in gather


def test_nccl_tests_output_imports_back(capsys):
    """The log parser (hcclsim.results.nccltests.parse_text) reads every block with its rows, checked, each
    with its own algorithm: direct_oneshot (AllReduce only), which NCCL has no name for, must not inherit the
    NCCL_ALGO=NVLS of the block before it."""
    argv = ("sweep", "-t", "dgx-h100", "-c", "all_reduce,all_gather", "-a", "ring,in_switch,direct_oneshot",
            "-b", "8", "-e", "64M", "-f", "64")
    status, out, _ = run(capsys, *argv, "--format", "csv")
    rows = pd.read_csv(io.StringIO(out))
    status, out, _ = run(capsys, *argv, "--format", "nccl-tests")
    assert status == 0
    blocks = parse_text(out, "sim.log")
    assert [(b.collective, b.ranks, b.nodes) for b in blocks] == [("all_reduce", 8, 1)] * 3 + [("all_gather", 8, 1)] * 2
    assert [b.nccl_algo for b in blocks] == ["ring", "nvls", None, "ring", "nvls"]
    assert [b.algorithm for b in blocks] == ["ring", "in_switch", "direct_oneshot", "ring", "in_switch"]
    for b, (_, want) in zip(blocks, rows.groupby(["collective", "algorithm"], sort=False), strict=True):
        for placement in ("out-of-place", "in-place"):
            got = [r for r in b.rows if r.placement == placement]
            assert [r.size_bytes for r in got] == want["size_bytes"].tolist()
            assert [r.time_us for r in got] == pytest.approx(want["time_us"].tolist(), abs=0.005)
            assert [r.busbw_GBps for r in got] == pytest.approx(want["busbw_GBps"].tolist(), abs=0.005)


# ------------------------------------------------------------------------------------------ CSV floats

def test_csv_floats_are_positional_and_exact():
    """No e-notation (%g would print 1e-05 and 1.04858e+06), and every float reads back to itself."""
    values = [1e-05, 2.5e-12, 1048576.0, 1e22, 0.1, 14.001120000000006, 7.0]
    text = to_csv(pd.DataFrame({"time_us": values, "peak_queue_bytes": [math.nan] + values[1:]}))
    assert "e" not in text.replace("time_us", "").replace("peak_queue_bytes", "")
    assert "0.00001," in text and ",1048576\n" in text
    back = pd.read_csv(io.StringIO(text))
    assert back["time_us"].tolist() == values
    assert np.isnan(back["peak_queue_bytes"][0]) and back["peak_queue_bytes"][1:].tolist() == values[1:]
