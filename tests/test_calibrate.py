"""`hccl-bench calibrate` (docs/calibrate.md): nccl-tests parsing, recovering known latency/bandwidth, errors."""

import json
import tomllib
from pathlib import Path

import numpy as np
import pytest
from helpers import assert_one_line_error
from helpers import run_cli as run

from hcclsim.network.config import load_topology
from hcclsim.results.nccltests import collective_of, read
from hcclsim.sweeping.sweep import sweep

DATA = Path(__file__).parent / "data"
SAMPLE = DATA / "nccl-tests-all_reduce-synthetic.txt"
SIZES = [8 << i for i in range(0, 28, 2)]         # 8 B .. 512 MiB






def ring_us(size, n, path_latency, bw):
    """Ring AllReduce, alpha-beta: 2(N-1)(alpha + S/(N B)), in microseconds."""
    return 2 * (n - 1) * (path_latency + size / (n * bw)) * 1e6


def nccl_tests_text(times, program="all_reduce_perf", nranks=8, dtype="float"):
    """nccl-tests' text layout (src/util.cu) around the given out-of-place times, with launcher noise."""
    lines = ["[node-0] some MPI warning that is not part of the table",
             "# nccl-tests version 2.17.6 nccl-headers=22501 nccl-library=22501",
             f"# Collective test starting: {program}",
             "# nThread 1 nGpus 1 minBytes 8 maxBytes 536870912 step: 4(factor) warmup iters: 5 iters: 20",
             "#", "# Using devices"]
    lines += [f"#  Rank {r:2d} Group  0 Pid {100 + r:6d} on     node-0 device {r:2d} [0x18] GPU"
              for r in range(nranks)]
    lines += ["#", ("#                                                              out-of-place                       "
              "in-place          "),
              ("#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw"
              "   busbw #wrong"),
              ("#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)"
              "  (GB/s)       ")]
    for s, t in times:
        algbw = s / t / 1e3
        lines.append(f"{s:12d}  {s // 4:12d}  {dtype:>8s}     sum      -1  {t:7.2f}  {algbw:6.2f}  "
                     f"{algbw * 1.75:6.2f}      0  {t * 0.99:7.2f}  {algbw:6.2f}  {algbw * 1.75:6.2f}      0")
    lines += ["# Out of bounds values : 0 OK", "# Avg bus bandwidth    : 12.3 ", "#",
              f"# Collective test concluded: {program}"]
    return "\n".join(lines) + "\n"


def fitted(toml_path, tier=None):
    top = tomllib.loads(Path(toml_path).read_text())["topology"]
    table = top[tier] if tier else top
    from hcclsim.core.units import parse_bandwidth, parse_time
    return parse_time(table["latency"]), parse_bandwidth(table["bandwidth"])


# ---------------------------------------------------------------------------------------- parsing

def test_parses_the_sample_text_table():
    m = read(str(SAMPLE))
    assert m.collective == "all_reduce" and m.dtype == "float32" and m.ranks == 8 and m.program is None
    assert len(m.size_bytes) == 28 and m.size_bytes[0] == 8 and m.size_bytes[-1] == 1 << 30
    assert m.time_us[0] == 84.00 and m.time_us[-1] == 5303.58         # out-of-place column, not in-place


def test_parses_program_line_dtype_and_noise(tmp_path):
    p = tmp_path / "run.log"
    p.write_text(nccl_tests_text([(1024, 10.0), (4096, 12.5), (1024, 12.0)], "all_gather_perf", 4, "half"))
    m = read(str(p))
    assert (m.collective, m.program, m.ranks, m.dtype) == ("all_gather", "all_gather_perf", 4, "float16")
    assert m.size_bytes.tolist() == [1024, 4096] and m.time_us.tolist() == [11.0, 12.5]   # repeats averaged


def test_parses_nccl_tests_json_report(tmp_path):
    # The -J layout of nccl-tests' src/util.cu (JSON_FILE_VERSION 1).
    doc = {"version": 1, "args": ["./build/reduce_scatter_perf", "-b", "8"], "nccl_version": 22501,
           "config": {"nthreads": 1, "ngpus": 2, "devices": [{"rank": 0}, {"rank": 2}]},
           "results": [{"size": 0, "count": 0, "type": "bfloat16", "redop": "sum", "root": "    -1",
                        "out_of_place": {"time": 1.0, "alg_bw": 0, "bus_bw": 0, "nwrong": 0}},
                       {"size": 64, "count": 32, "type": "bfloat16", "redop": "sum", "root": "    -1",
                        "out_of_place": {"time": 20.5, "alg_bw": 0, "bus_bw": 0, "nwrong": 0},
                        "in_place": {"time": 19.0, "alg_bw": 0, "bus_bw": 0, "nwrong": 0}},
                       {"size": 128, "count": 64, "type": "bfloat16", "redop": "sum", "root": "    -1",
                        "out_of_place": None, "in_place": {"time": 19.0}}]}
    p = tmp_path / "out.json"
    p.write_text(json.dumps(doc))
    m = read(str(p))
    assert (m.collective, m.program, m.ranks, m.dtype) == ("reduce_scatter", "reduce_scatter_perf", 4, "bfloat16")
    assert m.size_bytes.tolist() == [64] and m.time_us.tolist() == [20.5]    # size 0 and null rows dropped


def test_collective_from_names():
    assert collective_of("nccl-tests-all_reduce-synthetic.txt") == "all_reduce"
    assert collective_of("reduce_scatter_perf") == "reduce_scatter"
    assert collective_of("my_reduce.txt") == "reduce"
    assert collective_of("run1.txt") is None


# ------------------------------------------------------------------------------------ calibration

def test_sample_recovers_6us_path_latency_and_360GBps(capsys, tmp_path):
    out_toml = tmp_path / "cal.toml"
    status, out, err = run(capsys, "calibrate", SAMPLE, "-t", "switch8", "-o", out_toml)
    assert status == 0, err
    lat, bw = fitted(out_toml)
    assert lat == pytest.approx(3e-6, rel=0.05)            # per hop; a switch path is 2 hops = 6 us
    assert bw == pytest.approx(360e9, rel=0.05)
    text = out_toml.read_text()
    assert "nccl-tests-all_reduce-synthetic.txt" in text and "algorithm ring" in text and "worst" in text
    assert "in_switch_reduce = true" in text                # the rest of the preset's table is kept
    for needle in ("measured (us)", "model (us)", "error", "mean", "worst", "efficiency 7.2"):
        assert needle in out
    # The calibrated file loads in `sweep -t` and reproduces the measurement.
    status, csv, err = run(capsys, "sweep", "-t", out_toml, "-a", "ring", "-b", "1G", "-e", "1G", "--format", "csv")
    assert status == 0, err
    assert float(csv.splitlines()[1].split(",")[9]) == pytest.approx(5303.58, rel=0.005)


@pytest.mark.parametrize("fmt", ["text", "json-report", "json-list"])
def test_recovers_a_known_alpha_beta_model(capsys, tmp_path, fmt):
    hop, bw = 1.25e-6, 120e9                                 # different from the sample and from switch8
    times = [(s, ring_us(s, 8, 2 * hop, bw)) for s in SIZES]
    if fmt == "text":
        p = tmp_path / "measured.txt"
        p.write_text(nccl_tests_text(times))
    elif fmt == "json-report":
        p = tmp_path / "measured.json"
        p.write_text(json.dumps({"version": 1, "args": ["all_reduce_perf"], "results": [
            {"size": s, "count": s // 4, "type": "float", "redop": "sum", "root": "-1",
             "out_of_place": {"time": t, "alg_bw": 0, "bus_bw": 0, "nwrong": 0}} for s, t in times]}))
    else:
        p = tmp_path / "measured.json"
        p.write_text(json.dumps([{"size": s, "time_us": t} for s, t in times]))
    extra = ["-c", "allreduce"] if fmt == "json-list" else []
    status, _out, err = run(capsys, "calibrate", p, "-t", "switch8", *extra, "-o", tmp_path / "c.toml")
    assert status == 0, err
    lat, fbw = fitted(tmp_path / "c.toml")
    assert lat == pytest.approx(hop, rel=0.05) and fbw == pytest.approx(bw, rel=0.05)


def test_two_tier_fits_the_exercised_tier(capsys, tmp_path):
    topo = tmp_path / "tt8.toml"
    topo.write_text('[topology]\nkind = "hierarchical"\n'
                    '[topology.scale_up]\nkind = "switch"\nranks = 4\nbandwidth = "400GB/s"\nlatency = "500ns"\n'
                    '[topology.scale_out]\nkind = "fat_tree"\ndomains = 2\nbandwidth = "50GB/s"\nlatency = "2us"\n')
    # "Measure" the model itself with a slower, higher-latency scale-out; the fit must find it again.
    truth = load_topology(str(topo), ["scale_out.latency=3us", "scale_out.bandwidth=20GB/s"])
    rows = sweep(truth, ["all_reduce"], "ring", SIZES).rows
    p = tmp_path / "all_reduce.json"
    p.write_text(json.dumps([{"size": int(s), "time_us": float(t)} for s, t in zip(rows.size_bytes, rows.time_us)]))
    status, out, err = run(capsys, "calibrate", p, "-t", topo, "-o", tmp_path / "c.toml")
    assert status == 0, err
    assert "tier scale_out" in out
    lat, bw = fitted(tmp_path / "c.toml", "scale_out")
    assert lat == pytest.approx(3e-6, rel=0.05) and bw == pytest.approx(20e9, rel=0.05)
    assert fitted(tmp_path / "c.toml", "scale_up") == (500e-9, 400e9)          # the other tier is kept


def test_fit_is_exact_on_model_generated_data(tmp_path):
    from hcclsim.analysis import calibrate
    from hcclsim.network import config
    from hcclsim.results import nccltests
    name, label, doc = config.resolve("switch8")
    truth = load_topology("switch8", ["latency=700ns", "bandwidth=80GB/s"])
    rows = sweep(truth, ["all_reduce"], "ring", SIZES).rows
    m = nccltests.Measurement("x", "all_reduce", None, 8, "float32", rows.size_bytes.to_numpy(),
                              rows.time_us.to_numpy())
    f = calibrate.fit(doc, name, label, "all_reduce", "ring", m, "float32")
    assert f.latency == pytest.approx(700e-9, rel=1e-6) and f.bandwidth == pytest.approx(80e9, rel=1e-6)
    assert f.efficiency == pytest.approx(1.6, rel=1e-6) and f.worst_error < 1e-6
    assert np.allclose(f.model_us, f.measured_us, rtol=1e-6)


# ------------------------------------------------------------------------------------------ errors

def test_missing_file_exits_2(capsys, tmp_path):
    assert_one_line_error(*run(capsys, "calibrate", tmp_path / "nope.txt", "-t", "switch8", "-o",
                               tmp_path / "c.toml"), "nope.txt", "cannot read")
    assert not (tmp_path / "c.toml").exists()


def test_no_data_rows_exits_2(capsys, tmp_path):
    p = tmp_path / "all_reduce.txt"
    p.write_text("# nccl-tests version 2.17.6\n#\n# Out of bounds values : 0 OK\n")
    assert_one_line_error(*run(capsys, "calibrate", p, "-t", "switch8", "-o", tmp_path / "c.toml"), "no data rows")


def test_collective_mismatch_exits_2(capsys, tmp_path):
    assert_one_line_error(*run(capsys, "calibrate", SAMPLE, "-t", "switch8", "-c", "all_gather", "-o",
                               tmp_path / "c.toml"), "measures all_reduce, not all_gather")


def test_unknown_collective_in_file_exits_2(capsys, tmp_path):
    p = tmp_path / "x.txt"
    p.write_text(nccl_tests_text([(1024, 10.0)], "sendrecv_perf"))
    assert_one_line_error(*run(capsys, "calibrate", p, "-t", "switch8", "-o", tmp_path / "c.toml"),
                          "unknown collective 'sendrecv'")
    p.write_text("\n".join(nccl_tests_text([(1024, 10.0)]).splitlines()[3:]))   # no program line, no name
    assert_one_line_error(*run(capsys, "calibrate", p, "-t", "switch8", "-o", tmp_path / "c.toml"), "pass -c")
    assert_one_line_error(*run(capsys, "calibrate", SAMPLE, "-t", "switch8", "-c", "gather", "-o",
                               tmp_path / "c.toml"), "unknown collective 'gather'")


def test_rank_mismatch_and_bad_flags_exit_2(capsys, tmp_path):
    assert_one_line_error(*run(capsys, "calibrate", SAMPLE, "-t", "two-tier-128", "-o", tmp_path / "c.toml"),
                          "8 ranks", "128")
    assert_one_line_error(*run(capsys, "calibrate", SAMPLE, "-t", "switch8", "-o", tmp_path / "c.csv"), ".toml")
    assert_one_line_error(*run(capsys, "calibrate", SAMPLE, "-t", "switch8", "-a", "ring,direct", "-o",
                               tmp_path / "c.toml"), "one algorithm")
    p = tmp_path / "bad.json"
    p.write_text("[{\"size\": 8}]")
    assert_one_line_error(*run(capsys, "calibrate", p, "-t", "switch8", "-c", "all_reduce", "-o",
                               tmp_path / "c.toml"), "time_us")

