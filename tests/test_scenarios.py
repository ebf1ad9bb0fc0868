"""`hccl-bench run` (hcclsim/studies/scenario.py, hcclsim/cli/run.py): every scenario runs, tables and provenance,
--list, -o, one-line errors, and what the studies must show."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from helpers import assert_one_line_error
from helpers import run_cli as run

from hcclsim.network.config import load_topology
from hcclsim.studies import scenario as S
from hcclsim.studies import study as R

ROOT = Path(__file__).resolve().parents[1]
SCENARIOS = sorted((ROOT / "scenarios").glob("*.toml"))
HAS_MPL = R.plot_available()


def write(tmp_path, text: str, name: str = "study.toml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


HEAD = '[scenario]\ntitle = "t"\nreproduces = "r"\n'
SWEEP = '[[sweep]]\nname = "s"\ntopology = "switch8"\nalgorithms = ["ring", "direct_twoshot"]\nsizes = ["1K", "1M"]\n'


# ------------------------------------------------------------------------------- every scenario

def test_the_folder_holds_the_studies():
    names = {p.stem for p in SCENARIOS}
    assert {"hccl-intra-rack-bandwidth", "hccl-inference-put", "workload-replay"} <= names


@pytest.mark.parametrize("path", SCENARIOS, ids=[p.stem for p in SCENARIOS])
def test_every_scenario_runs_and_writes_its_tables(capsys, tmp_path, path):
    text = path.read_text(encoding="utf-8")
    status, out, err = run(capsys, "run", path, "-o", tmp_path, "-q")
    assert status == 0, err
    assert out == "" and err == ""
    study = S.load(str(path))
    assert study.title and study.reproduces
    if study.doc:
        assert (ROOT / study.doc).is_file(), study.doc
    assert (tmp_path / "scenario.toml").read_text(encoding="utf-8") == text
    for section in study.sections:
        csv = tmp_path / f"{section.name}.csv"
        rows = pd.read_csv(csv)
        assert len(rows) > 0, csv
        meta = json.loads((tmp_path / f"{section.name}.csv.meta.json").read_text(encoding="utf-8"))
        assert meta["schema_version"] == 1
        assert meta["scenario"]["section"] == section.name and meta["scenario"]["sha256"] == study.sha256
        png = tmp_path / f"{section.name}.png"
        wants_png = (section.kind == "workload" or (section.kind == "sweep" and section.spec["plot"] is not None)) \
            and HAS_MPL
        assert png.is_file() == wants_png, png


def test_list_names_every_scenario_with_its_title(capsys):
    status, out, err = run(capsys, "run", "--list")
    assert status == 0, err
    assert "reproduces" in out
    for path in SCENARIOS:
        assert path.stem in out
        assert S.header(str(path))["title"].split()[0] in out


def test_a_bare_name_runs_into_results_name(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    status, out, err = run(capsys, "run", "hccl-inference-put")
    assert status == 0, err
    assert (tmp_path / "results" / "hccl-inference-put" / "eager-vs-device.csv").is_file()
    assert "eager-vs-device" in out                       # the section's table
    assert f"wrote {len(S.load('hccl-inference-put').sections)} tables" in err


def test_without_matplotlib_a_one_line_note_and_the_tables(capsys, tmp_path, monkeypatch):
    monkeypatch.setattr(R, "plot_available", lambda: False)
    path = write(tmp_path, HEAD + SWEEP + 'plot = { metric = "time" }\n')
    status, out, err = run(capsys, "run", path, "-o", tmp_path / "out")
    assert status == 0, err
    assert "[[sweep]] s" in out
    assert err.count("no figures: plotting needs matplotlib") == 1
    assert (tmp_path / "out" / "s.csv").is_file() and not (tmp_path / "out" / "s.png").exists()


# --------------------------------------------------------------------------------- the runner

def test_vary_and_launch_make_one_run_per_combination_with_a_column_each(tmp_path):
    path = write(tmp_path, HEAD + SWEEP + 'vary = { "latency" = ["250ns", "1us"], "bandwidth" = ["50GB/s", '
                 '"100GB/s", "200GB/s"] }\nlaunch = ["host", "device"]\n')
    result = R.run_section(S.load(str(path)).sections[0])
    df = result.frame
    assert list(df.columns[:3]) == ["latency", "bandwidth", "launch"]
    assert len(df) == 2 * 3 * 2 * 2 * 2                # latencies x bandwidths x launches x algorithms x sizes
    one = df[(df.latency == "1us") & (df.bandwidth == "100GB/s") & (df.algorithm == "ring") & (df.launch == "host")]
    topo = load_topology("switch8", ["latency=1us", "bandwidth=100GB/s"])
    n, size = topo.nranks, 1 << 20
    want = 2 * (n - 1) * (2 * 1e-6 + size / (n * 100e9)) * 1e6     # ring: 2(N-1)(alpha + S/(N B)), alpha = 2 hops
    assert float(one[one.size_bytes == size].time_us.iloc[0]) == pytest.approx(want, rel=1e-9)


def test_replay_totals_are_time_times_calls_and_auto_is_never_slower(tmp_path):
    path = write(tmp_path, HEAD + '[[replay]]\nname = "r"\ntopology = "two-tier-128"\nops = [\n'
                 '  { collective = "all_reduce", size = "4M", count = 3 },\n'
                 '  { collective = "all_reduce", size = 1024 },\n'
                 '  { collective = "all_to_all", size = "1M", count = 2, label = "a2a" },\n]\n')
    df = R.run_section(S.load(str(path)).sections[0]).frame
    ops, totals = df[df.kind == "op"], df[df.kind == "total"].set_index("algorithm")
    assert (ops.total_us == ops.time_us * ops.calls).all()
    for algo, part in ops.groupby("algorithm"):
        assert totals.total_us[algo] == pytest.approx(part.total_us.sum(), rel=1e-12)
        assert totals.ops_covered[algo] == part.op.nunique()
    assert totals.ops_covered["auto"] == 3 and totals.calls["auto"] == 6
    complete = totals[(totals.ops_covered == 3) & ~totals.index.isin(["auto", "best_fixed"])]
    assert len(complete) >= 1                                        # hierarchical runs every op
    assert totals.total_us["auto"] <= totals.total_us["best_fixed"] <= complete.total_us.min()
    per_op_best = ops[ops.algorithm != "auto"].groupby("op").time_us.min()
    auto = ops[ops.algorithm == "auto"].set_index("op")
    assert (auto.time_us == per_op_best).all()


# ------------------------------------------------------------------------------------ errors

@pytest.mark.parametrize("text, needles", [
    (SWEEP, ["[scenario] table is missing"]),
    (HEAD, ["no sections"]),
    (HEAD + SWEEP.replace("algorithms =", "algoritms ="), ["[[sweep]] s: algoritms: unknown key",
                                                           "did you mean 'algorithms'"]),
    (HEAD + SWEEP + 'plot = { metrc = "busbw" }\n', ["plot: metrc: unknown key", "did you mean 'metric'"]),
    (HEAD.replace("title", "titel"), ["scenario: titel: unknown key", "did you mean 'title'"]),
    (HEAD + SWEEP.replace('"1M"', '"1Q"'), ["[[sweep]] s: sizes", "1Q"]),
    (HEAD + SWEEP.replace('"ring"', '"rign"'), ["[[sweep]] s: algorithms", "did you mean 'ring'"]),
    (HEAD + SWEEP + 'vary = { "latency" = [] }\n', ["vary.latency: expected a non-empty list"]),
    (HEAD + SWEEP + 'vary = { "scale_up.rankz" = [4] }\n', ["[[sweep]] s", "scale_up"]),
    (HEAD + SWEEP + 'launch = "gpu"\n', ["launch: unknown launch 'gpu'", "host, device or loop[:G][:n=N]"]),
    (HEAD + SWEEP + 'launch = ["host", "loop:8:n=0"]\n', ["[[sweep]] s: launch: expected host, device, loop",
                                                       "'loop:8:n=0'"]),
    (HEAD + SWEEP + 'iters = 0\n', ["iters: expected a whole number >= 1"]),
    (HEAD + SWEEP + SWEEP, ["another section is named 's'"]),
    (HEAD + '[[replay]]\nname = "r"\nops = [{ collective = "all_reduce" }]\n', ["ops[1]: size is missing"]),
    (HEAD + '[[replay]]\nname = "r"\nops = [{ collective = "allreduce", size = 8, cout = 2 }]\n',
     ["ops[1]: cout: unknown key", "did you mean 'count'"]),
    (HEAD + '[[sweep]]\nname = "a b"\n', ["name: expected letters"]),
    (HEAD + SWEEP + '[[workload]]\nname = "w"\nkind = "nope"\n', ["[[workload]] w", "kind", "nope"]),
    ("[scenario\n", ["malformed TOML"]),
])
def test_bad_scenarios_are_one_line_errors_naming_file_and_key(capsys, tmp_path, text, needles):
    path = write(tmp_path, text)
    assert_one_line_error(*run(capsys, "run", path, "-o", tmp_path / "out"), str(path), *needles)
    assert not (tmp_path / "out").exists()                 # checked before anything is written


def test_missing_file_and_unknown_name_are_one_line_errors(capsys, tmp_path):
    assert_one_line_error(*run(capsys, "run", tmp_path / "nope.toml"), "no such file", "nope.toml")
    assert_one_line_error(*run(capsys, "run", "hccl-inference-pot"), "unknown scenario 'hccl-inference-pot'",
                          "did you mean 'hccl-inference-put'")
    assert_one_line_error(*run(capsys, "run"), "give a scenario")
    assert_one_line_error(*run(capsys, "run", "--list", "workload-replay"), "--list takes no SCENARIO")


def test_help(capsys):
    status, out, _ = run(capsys, "run", "--help")
    assert status == 0 and "--list" in out and "results/NAME/" in out


# ---------------------------------------------------------------------------- what studies show

def test_a_section_can_time_a_loop_as_nccl_tests_does(tmp_path):
    """launch = "loop:8:n=1": one iteration of one thread's 8 launches, then the collective (switch8 with a
    10 us launch: 80 us more than device-triggered)."""
    path = write(tmp_path, HEAD + SWEEP + 'set = ["endpoint.launch_overhead=10us"]\nlaunch = ["device", "loop:8:n=1"]\n')
    df = R.run_section(S.load(str(path)).sections[0]).frame
    key = ["algorithm", "size_bytes"]
    loop, device = (df[df.launch == x].set_index(key).time_us for x in ("loop:8:n=1", "device"))
    assert (loop - device).to_numpy() == pytest.approx(80.0, abs=1e-6)


def test_device_triggered_is_faster_than_host_by_exactly_the_launch_overhead():
    study = S.load("hccl-inference-put")
    section = next(s for s in study.sections if s.name == "eager-vs-device")
    overhead = section.spec["topologies"][0].endpoint.launch_overhead
    assert overhead > 0
    df = R.run_section(section).frame
    key = ["collective", "algorithm", "size_bytes"]
    host = df[df.launch == "host"].set_index(key).time_us
    device = df[df.launch == "device"].set_index(key).time_us
    assert len(host) == len(device) > 0
    assert ((host - device) * 1e-6).to_numpy() == pytest.approx(overhead, rel=1e-9)


def test_no_single_tier_algorithm_passes_the_link_and_striping_or_in_switch_does():
    study = S.load("hccl-intra-rack-bandwidth")
    sections = {s.name: s for s in study.sections}
    df = R.run_section(sections["past-the-link"]).frame
    striped = df.algorithm.str.startswith("striped")
    assert df[~striped].busbw_GBps.max() <= 800 * (1 + 1e-12)          # one tier: at most its 800 GB/s link
    large = df[striped & (df.size_bytes >= 1 << 28)]                   # both: up to 800 + 200 GB/s
    assert set(large.collective) == {"all_reduce", "all_gather", "reduce_scatter"}
    assert 940 < large.busbw_GBps.min() and large.busbw_GBps.max() <= 1000 * (1 + 1e-12)
    switch = R.run_section(sections["in-switch"]).frame
    assert switch[(switch.algorithm == "in_switch") & (switch.collective == "all_reduce")].busbw_GBps.max() > 940


# --------------------------------------------------------------------------------- packaging

TINY_OVERLAP = HEAD + """[[workload]]
name = "tiny"
kind = "overlap"
topology = "switch8"
set = ['endpoint.peak_flops="1PFLOPS"', 'endpoint.memory_bandwidth="3000GB/s"']
collective = "all_reduce"
size = "1M"
algorithm = "ring"
m = 256
n = 256
k = 256
count = 2
"""


def test_an_installed_package_finds_the_scenarios_by_name(installed, tmp_path):
    target = installed
    env = {**os.environ, "PYTHONPATH": str(target)}
    code = ("import sys; from hcclsim.studies import scenario as S; f = S.scenario_files(); "
            "assert all(str(p).startswith(sys.argv[1]) for p in f.values()), f; print(' '.join(sorted(f)))")
    out = subprocess.run([sys.executable, "-c", code, str(target)], env=env, cwd=tmp_path, check=True,
                         capture_output=True, text=True)
    assert set(out.stdout.split()) == {p.stem for p in SCENARIOS}
    assert not (target / "scenarios").exists()            # installed as hcclsim/scenarios, not a bare package
    # a workload study runs from the installed copy (hcclsim.studies.workload and hcclsim.studies.study are
    # packaged): a small one, its kernels as plain Python (an installed copy's compiled kernels: test_packaging;
    # compiling them again here took a minute)
    run_ = subprocess.run([sys.executable, "-c", "from hcclsim.cli import main; raise SystemExit(main())", "run",
                           write(tmp_path, TINY_OVERLAP), "-o", str(tmp_path / "out"), "-q"],
                          env={**env, "NUMBA_DISABLE_JIT": "1"}, cwd=tmp_path, capture_output=True, text=True,
                          check=False)
    assert run_.returncode == 0, run_.stderr
    assert (tmp_path / "out" / "tiny.csv").is_file()


def test_a_workload_figure_groups_bars_by_case_and_swept_values(monkeypatch, tmp_path):
    from hcclsim.results import plot

    drawn = {}
    monkeypatch.setattr(plot, "draw_bars", lambda table, out, ylabel, title: drawn.update(table=table, ylabel=ylabel))
    study = S.load(str(ROOT / "scenarios" / "hccl-gemm-overlap.toml"))
    R.draw_workload_figure(R.run_section(study.sections[0]), tmp_path / "f.png")
    table = drawn["table"]
    assert drawn["ylabel"] == "GEMM slowdown (%)"
    assert list(table.columns) == ["offload", "sm-16ch", "sm-32ch"]
    assert len(table) == 3 * 2 * 2                      # 3 cases x skew on/off x jitter on/off
    assert all("skew_us=" in g and "jitter_us=" in g for g in table.index)
    quiet = table.loc["compute-bound, continuous, skew_us=0.0, jitter_us=0.0"]
    assert quiet["offload"] == 0 and quiet["sm-16ch"] > 0
