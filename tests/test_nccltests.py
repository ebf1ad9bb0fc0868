"""nccl-tests / rccl-tests logs: the real corpus of tests/data/nccl-tests/ reads with the values of the file or
is refused naming the line; broken copies of it are refused; `hccl-bench import`, compare and plot take logs.

Expected values were read by eye from the files (row and line numbers counted in an editor)."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from hcclsim.cli import main
from hcclsim.core.errors import ConfigError
from hcclsim.results.nccltests import IN, OUT, parse_report, parse_text, read_blocks, to_records

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
    ("awssamples_p5_h100_2n_all_reduce_srun_label.txt", "all_reduce", 64, (3, 8, 69.12, 0.0, 0.0),
     (34, 17179869184, 66109, 487.26)),                          # every line behind srun -l's '0: '
    ("ncclt290_h100_2n_all_reduce_srun_label.txt", "all_reduce", 22, (24, 8388608, 215.3, 38.96, 73.04),
     (34, 8589934592, 103538, 155.56)),                          # ' 0: ' before the rank lines too
    ("nvidia_nccl1_titanx_all_reduce_bytes_ms.txt", "all_reduce", 40, (10, 10000000, 1628.0, 6.14, 9.21),
     (29, 10000000, 1623.0, 9.24)),                              # 'bytes N ... res': 1.628 ms printed
    ("edcadet_t4_all_reduce_per_iter.log", "all_reduce", 2, (75, 134217728, 23418.7, 5.73, 5.73),
     (75, 134217728, 23475.4, 5.72)),                            # i_min i_max i_p99 i_cv% columns
    ("edcadet_t4_all_reduce_J.json", "all_reduce", 2, (0, 134217728, 23418.69756, 5.731221, 5.731221),
     (0, 134217728, 23475.41604, 5.717374)),                     # -J: line is the results index
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


def test_metadata_behind_launcher_prefixes_and_without_rank_lines():
    (b,) = blocks("ncclt290_h100_2n_all_reduce_srun_label.txt")          # 16 ' 0: #  Rank' lines, 2 hosts
    assert (b.ranks, b.nodes, b.gpu) == (16, 2, "NVIDIA H100 80GB HBM3")
    (b,) = blocks("awssamples_p5_h100_2n_all_reduce_srun_label.txt")    # no rank lines: busbw/algbw = 1.875
    assert (b.ranks, b.nodes) == (16, None)
    (b,) = blocks("nvidia_nccl1_titanx_all_reduce_bytes_ms.txt")         # 'Device 0 -> 0' lines: 9.21/6.14 = 1.5
    assert (b.ranks, b.nodes, [r.dtype for r in b.rows[::8]]) == (4, None, ["int8", "int32", "float16", "float32",
                                                                            "float64"])
    (b,) = blocks("edcadet_t4_all_reduce_J.json")                        # 1 process, -g 2: one device entry
    assert (b.ranks, b.nodes, b.gpu, b.nccl_version, b.program) == (2, 1, "Tesla T4", "2.29.3", "all_reduce_perf")


def test_a_2019_log_of_five_programs_with_the_old_all_gather_definition():
    bs = blocks("wohlbier_dgx2_v100_2019_five_collectives.txt")         # 12 of a DGX-2's V100s, one per 'Running:'
    assert [(b.collective, b.line, len(b.rows)) for b in bs] == [
        ("all_gather", 21, 62), ("all_reduce", 75, 62), ("broadcast", 129, 62), ("reduce", 183, 62),
        ("reduce_scatter", 237, 62)]
    assert {(b.ranks, b.nodes, b.gpu) for b in bs} == {(12, 1, "Tesla V100-SXM3-32GB")}
    # line 53: 8589934560 B in 106773 us is 80.45 GB/s; printed algbw = busbw = 80.45 x 11/12 = 73.75
    r = bs[0].rows[-2]
    assert (r.line, r.size_bytes, r.time_us, r.algbw_GBps, r.busbw_GBps, r.wrong) == (
        53, 8589934560, 106773, 73.75, 73.75, "1e+00")
    r = bs[2].rows[-1]                                                   # broadcast: a root column, no redop
    assert (r.line, r.root, r.redop, r.time_us, r.busbw_GBps) == (161, 0, None, 70368, 122.07)


def test_a_json_report_and_the_stdout_of_its_run_import_to_the_same_rows():
    keys = ("collective", "ranks", "size_bytes", "count", "dtype", "root", "placement", "nodes", "gpu",
            "nccl_version", "program", "wrong")
    json_rows = to_records(blocks("edcadet_t4_all_reduce_J.json"), "t4")
    text_rows = to_records(blocks("edcadet_t4_all_reduce_per_iter.log"), "t4")
    assert [{k: r[k] for k in keys} for r in json_rows] == [{k: r[k] for k in keys} for r in text_rows]
    assert [r["gpu"] for r in json_rows] == ["Tesla T4"] * 2 and [r["wrong"] for r in json_rows] == ["0"] * 2
    # the text prints the same times to 0.1 us (getFloatStr)
    assert [round(r["time_us"], 1) for r in json_rows] == [r["time_us"] for r in text_rows] == [23418.7, 23475.4]


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
    ("edcadet_t4_all_reduce_J_no_results.json", "a nccl-tests -J report with no 'results': the run stopped before"),
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


def test_broken_copies_of_prefixed_and_millisecond_logs_are_refused(tmp_path):
    def edit(line, old, new):
        return lambda lines: "\n".join(lines[:line - 1] + [lines[line - 1].replace(old, new, 1)] + lines[line:])

    for name, change, needle in (
            # line 33: 8589934592 B / 33605 us = 255.62 GB/s, not 215.62
            ("awssamples_p5_h100_2n_all_reduce_srun_label.txt", edit(33, "255.62", "215.62"),
             "line 33: out-of-place algbw 215.62 GB/s but size / time"),
            # line 10: 10000000 B / 1.528 ms = 6.54 GB/s, not the printed 6.14
            ("nvidia_nccl1_titanx_all_reduce_bytes_ms.txt", edit(10, "1.628", "1.528"),
             "line 10: out-of-place algbw 6.14 GB/s but size / time = 10000000 B / 1528 us"),
            # rank 15's line (19) gone: 15 ranks give busbw = 1.8667 x algbw = 72.73, not 73.04
            ("ncclt290_h100_2n_all_reduce_srun_label.txt", lambda lines: "\n".join(lines[:18] + lines[19:]),
             "line 23: out-of-place busbw 73.04 GB/s but algbw x 1.86667")):
        with pytest.raises(ConfigError, match=needle):
            read_blocks(broken(tmp_path, name, change))


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


# ------------------------------------------------------------------- hypercube, skipped tables, -C

HYPERCUBE = "aicr_b200_hypercube_2_3_4_8_ranks.txt"


def test_real_hypercube_tables_read_and_the_table_nccl_tests_skipped_is_left_out():
    bs = blocks(HYPERCUBE)             # 3 ranks (line 44): 'nRanks 3 is not a power of 2, skipping', no rows
    assert [(b.collective, b.line, b.ranks, len(b.rows)) for b in bs] == [
        ("hypercube", 16, 2, 16), ("hypercube", 62, 4, 16), ("hypercube", 106, 8, 16)]
    assert {(b.nodes, b.gpu, b.nccl_version, b.program) for b in bs} == {
        (1, "NVIDIA B200", "2.29.3", "hypercube_perf")}                  # nccl-library=22903
    # HyperCube's algbw = (n-1)/n x size / time = busbw. Line 18, 2 ranks: 1/2 x 1048576 B / 22.27 us = 23.54
    r = bs[0].rows[0]
    assert (r.line, r.size_bytes, r.count, r.root, r.time_us, r.algbw_GBps, r.busbw_GBps, r.wrong) == (
        18, 1048576, 131072, -1, 22.27, 23.54, 23.54, "0")
    # line 108, 8 ranks: 7/8 x 1048576 B / 60.66 us = 15.13; '#wrong' printed with %g (validation FAILED)
    r = bs[2].rows[0]
    assert (r.line, r.count, r.time_us, r.algbw_GBps, r.busbw_GBps, r.wrong) == (
        108, 32768, 60.66, 15.13, 15.13, "1.02893e+06")
    r = bs[1].rows[-1]                                                   # line 71, 4 ranks, in-place
    assert (r.line, r.size_bytes, r.placement, r.time_us, r.busbw_GBps, r.wrong) == (
        71, 17179869184, IN, 27602.8, 466.80, "1.45428e+07")


def test_only_the_skip_nccl_tests_prints_makes_an_empty_table_acceptable(tmp_path):
    lines = (DATA / HYPERCUBE).read_text().splitlines()
    gone = tmp_path / HYPERCUBE                              # the 'skipping' line (44) removed: a table cut short
    gone.write_text("\n".join(lines[:43] + lines[44:]))
    with pytest.raises(ConfigError, match="line 42: the table of hypercube has no data rows"):
        read_blocks(str(gone))
    alone = tmp_path / "skipped_hypercube.txt"               # lines 31-49: the skipped run only
    alone.write_text("\n".join(lines[30:49]))
    with pytest.raises(ConfigError, match="line 14: nccl-tests skipped every table it began "
                                          r"\('nRanks 3 is not a power of 2, skipping'\): nothing was measured"):
        read_blocks(str(alone))


def test_a_cputime_run_is_refused_not_read_as_the_collective_time():
    # -C 1 prints the host's launch time; algbw and busbw come from the GPU time, which is not printed
    # (nccl-tests src/common.cu since d313d20, 2022-09). 2 ranks, 1048576 B in 100 us on the GPU: 10.49 GB/s.
    head = ("#  Rank  0 Group  0 Pid 1 on h device  0 [0x1] G\n#  Rank  1 Group  0 Pid 2 on h device  1 [0x2] G\n"
            "#  out-of-place  in-place\n#  size  count  type  redop  root  cputime  algbw  busbw  #wrong  cputime  "
            "algbw  busbw  #wrong\n")
    row = "1048576  262144  float  sum  -1  5.12  10.49  10.49  0  5.10  10.49  10.49  0\n"
    with pytest.raises(ConfigError, match=r"line 4: column header: 'cputime' \(nccl-tests -C 1\)"):
        parse_text(head + row, "x_all_reduce.txt")
    doc = {"args": ["./all_reduce_perf"], "config": {"nthreads": 1, "ngpus": 2, "devices": [{"rank": 0}]},
           "results": [{"size": 1048576, "count": 262144, "type": "float", "redop": "sum", "root": -1,
                        "out_of_place": {"cpu_time": 5.12, "alg_bw": 10.49, "bus_bw": 10.49, "nwrong": 0}}]}
    with pytest.raises(ConfigError, match=r"results\[0\].out_of_place: 'cpu_time' \(nccl-tests -C 1\)"):
        parse_report(doc, "r.json")
