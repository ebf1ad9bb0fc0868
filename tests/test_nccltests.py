"""nccl-tests / rccl-tests logs: the real corpus of tests/data/nccl-tests/ reads with the values of the file or
is refused naming the line; broken copies of it are refused; `hccl-bench import`, compare and plot take logs.

Expected values were read by eye from the files (row and line numbers counted in an editor)."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from hcclsim.cli import main
from hcclsim.core.errors import ConfigError
from hcclsim.results.nccltests import IN, OUT, parse_report, parse_text, read_blocks

DATA = Path(__file__).parent / "data" / "nccl-tests"


def blocks(name):
    return read_blocks(str(DATA / name))


def run(capsys, *args):
    status = main([str(a) for a in args])
    out, err = capsys.readouterr()
    return status, out, err


# ------------------------------------------------------------------------------------------ the corpus

@pytest.mark.parametrize("name,coll,nrows,first,last", [
    # first: (line, size, out-of-place time, algbw, busbw); last: (line, size, in-place time, busbw)
    ("superbench_a100_all_reduce_noroot.txt", "all_reduce", 68, (17, 0, 35.20, 0.0, 0.0),
     (50, 8589934592, 63959, 235.03)),
    ("superbench_a100_all_gather_noredop.txt", "all_gather", 68, (17, 0, 34.27, 0.0, 0.0),
     (50, 8589934592, 32669, 230.07)),
    ("superbench_a100_alltoall_blankredop.txt", "all_to_all", 68, (16, 0, 1.63, 0.0, 0.0),
     (49, 8589934592, 33234, 226.16)),
    ("keitaw_p5_h100_2n_all_reduce_mpi_tag.txt", "all_reduce", 64, (37, 8, 85.14, 0.0, 0.0),
     (68, 17179869184, 66143, 487.01)),
    ("rocmdocs_mi300x_all_reduce_rccl_nogroup.txt", "all_reduce", 62, (16, 8, 34.13, 0.0, 0.0),
     (46, 8589934592, 47594, 315.84)),
    ("gjaion_h100_2n_ring.txt", "all_reduce", 28, (26, 1048576, 156.9, 6.68, 12.53),
     (39, 8589934592, 41056, 392.30)),
])
def test_a_real_log_reads_with_its_values(name, coll, nrows, first, last):
    (b,) = blocks(name)
    assert b.collective == coll and len(b.rows) == nrows
    r = b.rows[0]
    assert (r.line, r.size_bytes, r.placement, r.time_us, r.algbw_GBps, r.busbw_GBps) == (*first[:2], OUT, *first[2:])
    r = b.rows[-1]
    assert (r.line, r.size_bytes, r.placement, r.time_us, r.busbw_GBps) == (*last[:2], IN, *last[2:])


def test_metadata_ranks_nodes_gpu_version_forced_algorithm():
    (b,) = blocks("keitaw_p5_h100_2n_all_reduce_mpi_tag.txt")            # 16 rank lines on 2 hosts
    assert (b.ranks, b.nodes, b.gpu, b.nccl_version) == (16, 2, "NVIDIA H100 80GB HBM3", "2.22.3")
    (b,) = blocks("rocmdocs_mi300x_all_reduce_rccl_nogroup.txt")         # '# Rank 0 Pid ...', no Group
    assert (b.ranks, b.nodes, b.gpu) == (8, 1, "AMD Instinct MI300X")
    (b,) = blocks("gjaion_h100_2n_ring.txt")                              # mpirun -x NCCL_ALGO=Ring
    assert (b.ranks, b.nodes, b.nccl_algo, b.program) == (16, 2, "ring", "all_reduce_perf")


def test_five_collectives_in_one_file_are_five_blocks():
    bs = blocks("xxrjun_h100_five_collectives.txt")
    assert [b.collective for b in bs] == ["all_reduce", "all_gather", "reduce_scatter", "all_to_all", "sendrecv"]
    assert [len(b.rows) for b in bs] == [20] * 5 and {b.ranks for b in bs} == {8}
    # 32 MiB, out-of-place: four different times, never averaged together
    assert [b.rows[0].time_us for b in bs] == [182.87, 123.44, 111.83, 124.79, 422.19]
    assert bs[0].rows[0].dtype == "float64" and bs[4].rows[-1].wrong is None            # '-d double', N/A


@pytest.mark.parametrize("name,needle", [
    ("hisohara_mi325x_noheader.txt", "line 3: a data row with no column header above it"),
    ("ncclt322_h100_128n_elided_ranks.txt",
     "line 21: out-of-place busbw 110.84 GB/s but algbw x 1.75 = 97.09 GB/s (all_reduce on 8 ranks)"),
])
def test_a_log_that_cannot_be_read_whole_is_refused(name, needle):
    with pytest.raises(ConfigError, match=rf"{name}: {needle}".replace("(", r"\(").replace(")", r"\)")):
        blocks(name)


# ------------------------------------------------------------------------------------- broken copies

def broken(tmp_path, name, edit):
    text = (DATA / name).read_text()
    p = tmp_path / name
    p.write_text(edit(text.splitlines()))
    return str(p)


def test_each_broken_copy_is_refused_naming_the_line(tmp_path):
    name = "superbench_a100_all_reduce_noroot.txt"

    def algbw(lines):        # line 45: 268435456 B in 2112.2 us is 127.09 GB/s, not 120.09
        lines[44] = lines[44].replace("127.09", "120.09", 1)
        return "\n".join(lines)

    def cut(lines):          # line 40 cut after the out-of-place columns
        lines[39] = lines[39][:lines[39].index("N/A") + 3]
        return "\n".join(lines)

    def no_header(lines):    # the column header (line 14) gone: its rows belong to no table
        return "\n".join(lines[:13] + lines[14:])

    def bus(lines):          # line 48: busbw of all_reduce on 8 ranks is 1.75 x algbw = 231.76
        lines[47] = lines[47].replace("231.76", "132.44", 1)
        return "\n".join(lines)

    for edit, needle in ((algbw, "line 45: out-of-place algbw 120.09 GB/s but size / time"),
                         (cut, "line 40: 8 fields, but the column header at line 14 has 12"),
                         (no_header, "line 16: a data row with no column header above it"),
                         (bus, "line 48: out-of-place busbw 132.44 GB/s but algbw x 1.75")):
        with pytest.raises(ConfigError, match=needle):
            read_blocks(broken(tmp_path, name, edit))


def test_check_takes_the_printed_rounding_not_a_percentage():
    head = ("#  Rank  0 Group  0 Pid 1 on h device  0 [0x1] G\n#  Rank  1 Group  0 Pid 2 on h device  1 [0x2] G\n"
            "#  out-of-place  in-place\n#  size  count  type  redop  root  time  algbw  busbw  #wrong  time  algbw  "
            "busbw  #wrong\n")
    # 2 ranks: busbw = algbw. 1000000 B / 10.00 us = 100.00 GB/s; 10.00 +- 0.005 us allows 99.95 .. 100.05
    ok = "1000000  250000  float  sum  -1  10.00  100.05  100.05  0  10.00  99.95  99.95  0\n"
    assert len(parse_text(head + ok, "x_all_reduce.txt")[0].rows) == 2
    with pytest.raises(ConfigError, match="line 5: in-place algbw 99.94"):
        parse_text(head + ok.replace("99.95  99.95", "99.94  99.94"), "x_all_reduce.txt")


def test_json_report_rows_are_checked_not_dropped():
    doc = {"version": 1, "args": ["./all_reduce_perf"], "config": {"nthreads": 1, "ngpus": 2, "devices": [{"rank": 0}]},
           "env": ["NCCL_PROTO=Simple"],
           "results": [{"size": 1000000, "count": 250000, "type": "float", "redop": "sum", "root": "    -1",
                        "out_of_place": {"time": 10.0, "alg_bw": 100.0, "bus_bw": 100.0, "nwrong": 0},
                        "in_place": None}]}
    (b,) = parse_report(doc, "r.json")
    assert (b.ranks, b.nccl_proto, len(b.rows), b.rows[0].time_us) == (2, "simple", 1, 10.0)
    doc["results"][0]["out_of_place"]["time"] = "fast"
    with pytest.raises(ConfigError, match=r"results\[0\].out_of_place: expected numbers"):
        parse_report(doc, "r.json")
    doc["results"][0]["out_of_place"].update(time=20.0)
    with pytest.raises(ConfigError, match=r"results\[0\]: out-of-place algbw 100"):
        parse_report(doc, "r.json")


# ------------------------------------------------------------------------------------ the commands

def test_import_writes_one_row_per_table_size_and_placement(capsys, tmp_path):
    out = tmp_path / "m.csv"
    status, _, err = run(capsys, "import", DATA / "xxrjun_h100_five_collectives.txt",
                         DATA / "superbench_a100_all_reduce_noroot.txt", "-o", out)
    assert status == 0, err
    assert "168 rows from 6 tables of 2 logs" in err
    rows = list(csv.DictReader(out.open()))
    assert len(rows) == 5 * 20 + 68
    r = rows[0]                                                # xxrjun line 20, out-of-place
    assert (r["collective"], r["engine"], r["ranks"], r["size_bytes"], r["dtype"], r["time_us"], r["busbw_GBps"],
            r["placement"], r["nccl_version"], r["line"]) == (
        "all_reduce", "measured", "8", "33554432", "float64", "182.87", "321.1", "out-of-place", "2.29.2", "20")
    zero = [r for r in rows if r["log"].endswith("noroot.txt") and r["size_bytes"] == "0"]
    assert [(r["topology"], r["time_us"]) for r in zero if r["placement"] == "out-of-place"] == [
        ("superbench_a100_all_reduce_noroot", "35.2"), ("superbench_a100_all_reduce_noroot#2", "34.18")]
    status, _, err = run(capsys, "import", DATA / "hisohara_mi325x_noheader.txt", "-o", tmp_path / "x.csv")
    assert status == 2 and "line 3: a data row with no column header" in err and not (tmp_path / "x.csv").exists()


def test_compare_gates_a_simulation_against_a_log(capsys, tmp_path):
    sim = tmp_path / "sim.json"
    status, _, err = run(capsys, "sweep", "-t", "switch8", "-c", "all_reduce", "-a", "ring", "-b", "256M", "-e",
                         "1G", "-f", "2", "-o", sim)
    assert status == 0, err
    log = DATA / "superbench_a100_all_reduce_noroot.txt"
    status, out, err = run(capsys, "compare", log, sim, "--tolerance", "1000%")
    assert status == 0, err
    assert "of 3 common rows" in out                          # 256M, 512M, 1G; matched on size and ranks


def test_plot_draws_a_log_beside_a_results_file(capsys, tmp_path):
    pytest.importorskip("matplotlib")
    status, _, err = run(capsys, "plot", DATA / "gjaion_h100_2n_ring.txt", "-o", tmp_path / "p.svg")
    assert status == 0, err and (tmp_path / "p.svg").stat().st_size > 0


def test_sendrecv_is_read_and_labelled():
    b = blocks("xxrjun_h100_five_collectives.txt")[4]
    assert b.collective == "sendrecv" and b.rows[0].busbw_GBps == b.rows[0].algbw_GBps     # factor 1
