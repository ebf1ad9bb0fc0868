"""`hccl-bench validate`: the shipped measurement files, the loader's errors, the band maths and the exit status.

Whether dgx-h100 and h100-cluster pass is not asserted here (the model is still being changed).
"""

import json
import math

import pandas as pd
import pytest
from click.testing import CliRunner

from hcclsim.analysis import validate as V
from hcclsim.cli import cli, main
from hcclsim.schedule import collectives as C

SHIPPED = V.validation_dir()
HEADER = ("system,gpus,nodes,collective,nccl_algo,library,library_version,placement,size_bytes,time_us,"
          "algbw_GBps,busbw_GBps,source,log")


# ------------------------------------------------------------------------------------ shipped data

def shipped_csvs():
    return sorted(SHIPPED.glob("*.csv"))


def test_the_shipped_folder_holds_data_and_validation_files():
    assert len(shipped_csvs()) >= 3
    assert {"dgx-h100", "h100-cluster", "dgx-a100"} <= set(V.validation_files())
    assert (SHIPPED / "README.md").is_file()


@pytest.mark.parametrize("path", shipped_csvs(), ids=lambda p: p.name)
def test_every_row_has_a_source_and_its_log(path):
    df = V.load_data(path)
    assert (df.source.str.strip() != "").all()
    for log in df.log.unique():
        assert (SHIPPED / log).is_file(), log
        assert (SHIPPED / log).with_suffix(".source.md").is_file(), log


@pytest.mark.parametrize("path", shipped_csvs(), ids=lambda p: p.name)
def test_busbw_is_algbw_times_the_factor_and_algbw_is_size_over_time(path):
    df = V.load_data(path)
    assert V.check_data(df) == []
    timed = df[df.time_us.notna() & (df.algbw_GBps > 1)]
    if len(timed):
        assert (timed.algbw_GBps - timed.size_bytes / timed.time_us / 1e3).abs().max() <= 0.01 * timed.algbw_GBps.max()


def test_the_data_check_catches_a_wrong_factor(tmp_path):
    f = tmp_path / "bad.csv"
    # busbw = algbw x 1 instead of x 2(n-1)/n = 1.75
    f.write_text(f"{HEADER}\nX,8,1,all_reduce,ring,NCCL,2,out-of-place,1000000,10,100,100,src,logs/x.txt\n")
    assert V.check_data(V.load_data(f)) == ["bad.csv:2: busbw_GBps 100, expected 175"]


@pytest.mark.parametrize("name", sorted(V.validation_files()))
def test_every_shipped_validation_file_loads_and_matches_rows(name):
    v = V.load_validation(V.validation_files()[name])
    for case in v.cases:
        data = pd.concat([V.load_data(p) for p in case.data])
        pts, _ = V.select(case, data, v.excluded)
        assert len(pts) > 0, case.name


# ------------------------------------------------------------------------------------ synthetic case

N, ALPHA, B = 8, 1e-6, 50e9       # switch8: 8 ranks, 2 hops x 500 ns per step, 50 GB/s
SIZES = (1024, 1 << 20, 1 << 26, 1 << 30)


def ring_time_us(size):
    """Ring AllReduce on N ranks: 2(N-1) (alpha + S / (N B))."""
    return 2 * (N - 1) * (ALPHA + size / (N * B)) * 1e6


def measured_rows(scale, algo):
    rows = []
    for s in SIZES:
        t = ring_time_us(s) * scale
        algbw = s / t / 1e3
        rows.append(f"synthetic,8,1,all_reduce,{algo},NCCL,0,out-of-place,{s},{t:.6f},{algbw:.6f},"
                    f"{algbw * 2 * (N - 1) / N:.6f},hand-made from the alpha-beta formula,logs/synthetic.txt")
    return rows


VALIDATION = """
preset = "switch8"
data = ["m.csv"]

[[case]]
name = "close"
collective = "all_reduce"
algorithm = "ring"
match = { nccl_algo = "ring" }
tolerance = { large = 0.10, medium = 0.10 }
"""
FAILING = """
[[case]]
name = "far"
collective = "all_reduce"
algorithm = "ring"
match = { nccl_algo = "fast" }
tolerance = { large = 0.10 }
"""


@pytest.fixture
def synthetic(tmp_path):
    # 'ring': the hardware is 5 % slower than the model (busbw error +5 %: passes 10 %);
    # 'fast': 20 % faster (busbw error 0.8 - 1 = -20 %: fails 10 %).
    (tmp_path / "m.csv").write_text("\n".join([HEADER, *measured_rows(1.05, "ring"), *measured_rows(0.8, "fast")])
                                    + "\n")
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "synthetic.txt").write_text("# hand-made rows: no nccl-tests banner (nccl-tests' defaults)\n")
    (tmp_path / "pass.toml").write_text(VALIDATION)
    (tmp_path / "fail.toml").write_text(VALIDATION + FAILING)
    return tmp_path


def test_errors_per_point_follow_the_formula(synthetic):
    r = V.validate([str(synthetic / "fail.toml")])
    close = r.points[r.points.case == "close"]
    assert close.busbw_error.to_numpy() == pytest.approx([0.05] * 4, abs=1e-5)
    assert close.time_error.to_numpy() == pytest.approx([1 / 1.05 - 1] * 4, abs=1e-5)
    assert close.predicted_time_us.to_numpy() == pytest.approx([ring_time_us(s) for s in SIZES], rel=1e-9)
    far = r.summary[(r.summary.case == "far") & (r.summary.band == "large")].iloc[0]
    assert far.worst_error == pytest.approx(-0.2, abs=1e-5) and far.status == V.FAIL
    assert list(r.summary[r.summary.case == "close"].status) == [V.INFO, V.PASS, V.PASS]   # small has no tolerance


BANNER = ("# nThread 1 nGpus {g} minBytes 1024 maxBytes 1073741824 step: 2(factor) warmup iters: 5 iters: {n} "
          "agg iters: 1 validation: 1 graph: 0\n")
LAUNCHED = VALIDATION.replace('algorithm = "ring"\n', 'algorithm = "ring"\nset = ["endpoint.launch_overhead=10us"]\n', 1)


def test_a_case_is_launched_as_its_log_banner_says(synthetic):
    """The log says one thread drove 8 GPUs and timed 4 iterations: each iteration is max(D, H) and the window
    holds the shorter of the two once more (H = 8 x 10 us; D the ring's formula)."""
    (synthetic / "logs" / "synthetic.txt").write_text(BANNER.format(g=8, n=4))
    (synthetic / "l.toml").write_text(LAUNCHED)
    close = V.validate([str(synthetic / "l.toml")]).points
    h = 80.0
    want = [max(ring_time_us(s), h) + min(ring_time_us(s), h) / 4 for s in SIZES]
    assert close.predicted_time_us.to_numpy() == pytest.approx(want, rel=1e-9)
    assert set(close.launch) == {"loop:8:n=4"}


def test_a_case_launch_the_banner_contradicts_is_refused(synthetic):
    (synthetic / "logs" / "synthetic.txt").write_text(BANNER.format(g=8, n=20))
    (synthetic / "l.toml").write_text(LAUNCHED.replace('name = "close"', 'name = "close"\nlaunch = "loop"'))
    with pytest.raises(V.ConfigError, match=r"case 'close': launch 'loop', but logs/synthetic.txt says it ran as "
                                            r"'loop:8'") as e:
        V.validate([str(synthetic / "l.toml")])
    assert "\n" not in str(e.value)


def test_a_log_of_runs_launched_differently_needs_the_case_launch(synthetic):
    (synthetic / "logs" / "synthetic.txt").write_text(BANNER.format(g=8, n=20) + BANNER.format(g=2, n=20))
    (synthetic / "l.toml").write_text(LAUNCHED)
    with pytest.raises(V.ConfigError, match=r"runs launched differently \(loop:8, loop:2\); give the case the "
                                            r"launch of the run it compares"):
        V.validate([str(synthetic / "l.toml")])
    (synthetic / "l.toml").write_text(LAUNCHED.replace('name = "close"', 'name = "close"\nlaunch = "loop:2"'))
    assert set(V.validate([str(synthetic / "l.toml")]).points.launch) == {"loop:2"}
    (synthetic / "l.toml").write_text(LAUNCHED.replace('name = "close"', 'name = "close"\nlaunch = "loop:5"'))
    with pytest.raises(V.ConfigError, match=r"launch 'loop:5', but logs/synthetic.txt says it ran as 'loop:8' or "
                                            r"'loop:2'"):
        V.validate([str(synthetic / "l.toml")])


@pytest.mark.parametrize("text,why", [
    (BANNER.format(g=1, n=20).replace("agg iters: 1", "agg iters: 4"), "several collectives per iteration"),
    (BANNER.format(g=1, n=20).replace("graph: 0", "graph: 3"), "CUDA graphs"),
    (BANNER.format(g=1, n=20) + "# Blocking Enabled: wait and barrier after each inner iteration (-m) \n",
     "waits after each iteration")])
def test_a_log_the_loop_model_cannot_time_is_refused(synthetic, text, why):
    (synthetic / "logs" / "synthetic.txt").write_text(text)
    for toml in (VALIDATION, VALIDATION.replace('name = "close"', 'name = "close"\nlaunch = "loop"')):
        (synthetic / "l.toml").write_text(toml)
        with pytest.raises(V.ConfigError, match=f"case 'close': logs/synthetic.txt: .*{why}"):
            V.validate([str(synthetic / "l.toml")])


def test_a_missing_log_needs_the_case_launch(synthetic):
    (synthetic / "logs" / "synthetic.txt").unlink()
    with pytest.raises(V.ConfigError, match=r"synthetic.txt: cannot read the log \(No such file or directory\) "
                                            r"that says how it launched; give the case a launch"):
        V.validate([str(synthetic / "pass.toml")])
    (synthetic / "l.toml").write_text(VALIDATION.replace('name = "close"', 'name = "close"\nlaunch = "loop:8"'))
    assert set(V.validate([str(synthetic / "l.toml")]).points.launch) == {"loop:8"}


@pytest.mark.parametrize("text,launch", [
    (BANNER.format(g=8, n=20), "loop:8"), (BANNER.format(g=1, n=20), "loop"), (BANNER.format(g=1, n=50), "loop:n=50"),
    (BANNER.format(g=8, n=2), "loop:8:n=2"), ("| 1K | 0.07 |\n", "loop"),
    # the 2021 layout (no agg iters, no graph): microsoft/superbenchmark tests/data/nccl_allreduce.log
    ("# nThread 1 nGpus 8 minBytes 1 maxBytes 8589934592 step: 2(factor) warmup iters: 5 iters: 20 validation: 0\n",
     "loop:8")])
def test_launch_of_reads_the_banner(text, launch):
    from hcclsim.analysis.calibrate import launch_of
    assert launch_of(text) == launch
    assert launch_of(BANNER.format(g=8, n=20) + BANNER.format(g=2, n=20)) == "loop"     # runs launched differently


def test_band_maths_by_hand():
    case = V.Case("c", C.ALL_REDUCE, "ring", tolerance=(("large", 0.1), ("small_time", 0.3)),
                  checked_sizes=(("large", (1 << 28, math.inf)),))
    pts = pd.DataFrame({"band": ["small", "small", "large", "large", "large"],
                        "size_bytes": [8, 1024, 1 << 26, 1 << 28, 1 << 30],
                        "busbw_error": [0.5, -1.0, -0.30, 0.05, -0.08],
                        "time_error": [-0.2, 0.25, 0.4, -0.05, 0.09]})
    s = V.summarize(case, pts).set_index(["band", "metric"])
    small_time = s.loc[("small", "time")]
    assert small_time.points == 2 and small_time.mean_abs_error == pytest.approx(0.225)
    assert small_time.worst_error == pytest.approx(0.25) and small_time.status == V.PASS
    large = s.loc[("large", "busbw")]
    assert large.mean_abs_error == pytest.approx((0.30 + 0.05 + 0.08) / 3)
    assert large.worst_error == pytest.approx(-0.30)          # the 64 MiB point: reported, not checked
    assert large.checked == 2 and large.worst_checked_error == pytest.approx(-0.08) and large.status == V.PASS
    assert s.loc[("small", "busbw")].status == V.INFO and ("large", "time") not in s.index


# NCCL's own cost model beside the simulation, by hand, on dgx-a100 (NVIDIA/nccl v2.28.9 src/graph/tuning.cc;
# validation/nccl_model/constants.md): the ring graph is 12 channels x 20 GB/s = 240 GB/s of bus bandwidth. A ring
# collective of s steps (AllReduce 2(n-1) = 14, AllGather n-1 = 7) moves nRanks / s of it as algorithm bandwidth
# and costs baseLat + s x hwLat[NVLINK][Ring]: Simple 8.4 + s x 3.4 us; LL 6.6 + s x 0.6 us at half the bus
# bandwidth, at most llMaxBws[Ampere][1 node] = 87.7 GB/s (tuning.cc:171, :304). NCCL's nBytes is nccl-tests' size
# (AllGather: the whole output buffer).
H_US = 8 * 4.35                       # one thread launching for 8 GPUs: 8 x launch_overhead


def simple_us(size, steps):
    return 8.4 + steps * 3.4 + size / (1000 * 240.0 * 8 / steps)


def ll_allreduce_us(size):
    return 6.6 + 14 * 0.6 + size / (1000 * min(87.7, 240.0 / 2) * 8 / 14)


def loop_us(device):
    """nccl-tests' window of 20 iterations: max(D, H) + min(D, H) / 20."""
    return max(device, H_US) + min(device, H_US) / 20


# (case, collective, size, measured us, NCCL's model us under the case's launch)
A100_POINTS = (
    ("ring", "all_reduce", 1024, 40.0, loop_us(ll_allreduce_us(1024))),          # LL; the launches take longer
    ("ring", "all_reduce", 1 << 26, 700.0, loop_us(simple_us(1 << 26, 14))),     # Simple; the device takes longer
    ("ring", "all_reduce", 1 << 30, 8000.0, loop_us(simple_us(1 << 30, 14))),
    ("gather", "all_gather", 1 << 26, 300.0, loop_us(simple_us(1 << 26, 7))),
    ("host", "all_reduce", 1 << 26, 600.0, simple_us(1 << 26, 14) + 4.35),       # one launch, in series
    ("p2p", "all_to_all", 1 << 26, 400.0, math.nan),                              # NCCL does not tune AllToAll
)
A100 = "preset = \"dgx-a100\"\ndata = [\"a.csv\"]\n" + "".join(
    f"\n[[case]]\nname = \"{name}\"\ncollective = \"{coll}\"\nalgorithm = \"auto\"\nmatch = {{ nccl_algo = \"{name}\" }}\n"
    f"tolerance = {{ large = 0.10 }}\n" + ("launch = \"host\"\n" if name == "host" else "")
    for name, coll in dict.fromkeys((p[0], p[1]) for p in A100_POINTS))


@pytest.fixture
def a100(tmp_path):
    tmp_path = tmp_path / "a100"
    (tmp_path / "logs").mkdir(parents=True)
    rows = []
    for name, coll, size, t, _ in A100_POINTS:
        algbw = size / t / 1e3
        log = "logs/h.txt" if name == "host" else "logs/a.txt"
        rows.append(f"hand-made,8,1,{coll},{name},NCCL,0,out-of-place,{size},{t},{algbw:.6f},"
                    f"{algbw * C.busbw_factor(coll, 8):.6f},hand-made for the test,{log}")
    (tmp_path / "a.csv").write_text("\n".join([HEADER, *rows]) + "\n")
    (tmp_path / "logs" / "a.txt").write_text(BANNER.format(g=8, n=20))
    (tmp_path / "a.toml").write_text(A100)
    return tmp_path


def test_nccl_model_column_is_nccls_cost_model_under_the_launch(a100):
    r = V.validate([str(a100 / "a.toml")])
    pts = r.points.set_index(["case", "size_bytes"])
    for name, coll, size, measured, want in A100_POINTS:
        got = pts.loc[(name, size)]
        assert got.launch == ("host" if name == "host" else "loop:8")
        if math.isnan(want):
            assert math.isnan(got.nccl_model_time_us) and math.isnan(got.nccl_model_busbw_error)
            continue
        assert got.nccl_model_time_us == pytest.approx(want, rel=1e-6), (name, size)
        assert got.nccl_model_time_error == pytest.approx(want / measured - 1, rel=1e-6)
        assert got.nccl_model_busbw_GBps == pytest.approx(size / want / 1e3 * C.busbw_factor(coll, 8), rel=1e-6)
    large = r.summary[(r.summary.case == "ring") & (r.summary.band == "large")].iloc[0]
    errors = [measured / want - 1 for name, _, size, measured, want in A100_POINTS if name == "ring" and size >= 1 << 26]
    assert large.nccl_model_worst_checked_error == pytest.approx(max(errors, key=abs), rel=1e-6)
    assert r.summary[r.summary.case == "p2p"].nccl_model_worst_checked_error.isna().all()
    assert list(r.points.columns[-4:]) == ["nccl_model_time_us", "nccl_model_time_error", "nccl_model_busbw_GBps",
                                           "nccl_model_busbw_error"]      # after the columns earlier runs had


def test_nccl_model_is_blank_where_nccl_has_no_model(synthetic, a100):
    # a generic topology has no GPU generation to tune for; an algorithm with options is a variant NCCL lacks
    assert V.validate([str(synthetic / "pass.toml")]).points.nccl_model_time_us.isna().all()
    (a100 / "o.toml").write_text(A100.replace('algorithm = "auto"', 'algorithm = "ring:channels=2"', 1))
    r = V.validate([str(a100 / "o.toml")])
    assert r.points[r.points.case == "ring"].nccl_model_time_us.isna().all()


def test_nccl_model_is_printed_where_it_has_a_number(a100, synthetic, capsys):
    main(["validate", str(a100 / "a.toml")])
    err = capsys.readouterr().err
    ring = err[err.index("a: ring"):err.index("a: gather")]
    want = next(w for n, _, s, _, w in A100_POINTS if n == "ring" and s == 1 << 26)
    assert "NCCL's model" in ring and f"{(1 << 26) / want / 1e3 * 1.75:.2f}" in ring
    assert "NCCL's model" not in err[err.index("a: p2p"):err.index("bands")]
    assert "NCCL's model" in err[err.index("bands"):]
    main(["validate", str(synthetic / "pass.toml")])
    assert "NCCL's model" not in capsys.readouterr().err          # no column with nothing in it


def test_exit_status_is_0_within_and_1_out_of_tolerance(synthetic, capsys):
    assert main(["validate", str(synthetic / "pass.toml")]) == 0
    assert main(["validate", str(synthetic / "fail.toml")]) == 1
    err = capsys.readouterr().err
    assert "far" in err and "FAIL" in err and "out of tolerance" in err


def test_csv_and_json_output(synthetic, capsys):
    assert main(["validate", str(synthetic / "pass.toml"), "--format", "csv"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0].startswith("validation,preset,case") and len(out.splitlines()) == 1 + len(SIZES)
    assert main(["validate", str(synthetic / "pass.toml"), "--format", "json", "-o", str(synthetic / "o.csv")]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert len(doc["rows"]) == len(SIZES) and {s["status"] for s in doc["summary"]} == {V.INFO, V.PASS}
    assert (synthetic / "o.csv").read_text().startswith("validation,preset,case")


def test_excluded_sources_are_dropped_and_reported(synthetic, capsys):
    text = VALIDATION.replace('data = ["m.csv"]', 'data = ["m.csv"]\n[[excluded]]\nsource = "hand-made"\n'
                              'reason = "a constant was estimated from it"')
    (synthetic / "ex.toml").write_text(text)
    r = V.validate([str(synthetic / "ex.toml")])
    assert r.points.empty and r.excluded == [("ex", "close", 4, "source 'hand-made' (a constant was estimated from it)")]
    main(["validate", str(synthetic / "ex.toml")])
    assert "excluded 4 rows" in capsys.readouterr().err


def test_an_unavailable_preset_is_skipped_unless_asked_for(synthetic, tmp_path):
    (synthetic / "nope.toml").write_text(VALIDATION.replace('"switch8"', '"no-such-preset"'))
    r = V.validate(directory=synthetic)
    assert ("nope", "", "preset no-such-preset not available") in r.skipped and len(r.points)
    with pytest.raises(V.ConfigError, match="preset 'no-such-preset' not available"):
        V.validate([str(synthetic / "nope.toml")])


def test_a_case_on_too_few_ranks_is_an_error(synthetic):
    (synthetic / "ranks.toml").write_text(VALIDATION.replace('algorithm = "ring"', 'algorithm = "ring"\nset = ["ranks=4"]'))
    with pytest.raises(V.ConfigError, match=r"the measurements have \[8\] GPUs"):
        V.validate([str(synthetic / "ranks.toml")])


# ------------------------------------------------------------------------------------ bad input

BAD_TOMLS = {
    "unknown top key": (VALIDATION.replace("preset =", "presett = 1\npreset ="), "presett: unknown key"),
    "unknown case key": (VALIDATION.replace('name = "close"', 'name = "close"\ncolor = "red"'), "case 1: color"),
    "tolerance": (VALIDATION.replace("large = 0.10,", "huge = 0.10,"), "tolerance.huge: unknown key"),
    "negative": (VALIDATION.replace("large = 0.10,", "large = -1,"), "tolerance.large: expected a fraction"),
    "match column": (VALIDATION.replace("nccl_algo =", "algo ="), "match.algo: unknown column"),
    "size range": (VALIDATION.replace("[[case]]", '[[case]]\nsizes = "1M"'), "sizes: expected a size range"),
    "malformed": ("preset = ", "malformed TOML"),
}


@pytest.mark.parametrize("name", sorted(BAD_TOMLS))
def test_a_malformed_validation_file_is_one_line_exit_2(synthetic, name):
    text, expected = BAD_TOMLS[name]
    (synthetic / "bad.toml").write_text(text)
    res = CliRunner().invoke(cli, ["validate", str(synthetic / "bad.toml")])
    assert res.exit_code != 0
    with pytest.raises(V.ConfigError, match=expected.replace("(", r"\(").replace(".", r"\.")) as e:
        V.validate([str(synthetic / "bad.toml")])
    assert "\n" not in str(e.value) and str(synthetic / "bad.toml") in str(e.value)


def test_errors_name_the_line_of_the_key(synthetic):
    (synthetic / "bad.toml").write_text(VALIDATION.replace("large = 0.10,", "huge = 0.10,"))
    with pytest.raises(V.ConfigError) as e:
        V.load_validation(synthetic / "bad.toml")
    assert f"bad.toml:{VALIDATION.splitlines().index('tolerance = { large = 0.10, medium = 0.10 }') + 1}:" in str(e.value)


BAD_ROWS = {
    "column": ("\n".join([HEADER + ",colour", measured_rows(1, "ring")[0] + ",red"]), ":1: colour: unknown column"),
    "size": (HEADER + "\n" + measured_rows(1, "ring")[0].replace(",1024,", ",-5,"), ":2: size_bytes: expected"),
    "source": (HEADER + "\n" + measured_rows(1, "ring")[0].replace("hand-made from the alpha-beta formula", ""),
               ":2: source: expected a non-empty value"),
    "placement": (HEADER + "\n" + measured_rows(1, "ring")[0].replace("out-of-place", "sideways"), ":2: placement"),
    "fields": (HEADER + "\n" + "a,b", ":2: expected 14 fields"),
}


@pytest.mark.parametrize("name", sorted(BAD_ROWS))
def test_a_malformed_measurement_row_is_one_line_exit_2(synthetic, name, capsys):
    text, expected = BAD_ROWS[name]
    (synthetic / "m.csv").write_text(text + "\n")
    assert main(["validate", str(synthetic / "pass.toml")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err and f"m.csv{expected}" in err, err


def test_unknown_validated_preset_and_bad_output_are_exit_2(capsys):
    assert main(["validate", "dgx-h10"]) == 2
    assert "did you mean 'dgx-h100'" in capsys.readouterr().err
    assert main(["validate", "dgx-h100", "-o", "out.parquet"]) == 2
    assert main(["validate", "dgx-h100", "--plot", "out.gif"]) == 2


def test_plot(synthetic):
    pytest.importorskip("matplotlib")
    assert main(["validate", str(synthetic / "pass.toml"), "--plot", str(synthetic / "v.png")]) == 0
    assert (synthetic / "v.png").stat().st_size > 1000


def test_help():
    res = CliRunner().invoke(cli, ["validate", "--help"])
    assert res.exit_code == 0
    text = " ".join(res.output.split())
    for word in ("PRESET", "--format", "--plot", "-o", "Exit status: 0"):
        assert word in text
