"""Provenance of results files (hcclsim.results.provenance), the schema-version refusal, and the Python API
(hcclsim.api, docs/api.md: its example runs here)."""

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from helpers import run_cli as run

import hcclsim
from hcclsim.core.errors import ConfigError
from hcclsim.network.config import ENDPOINT_KEYS, load_topology
from hcclsim.results import provenance

ROOT = Path(__file__).resolve().parents[1]
SWEEP = ["sweep", "-t", "switch8", "-a", "ring", "-e", "4K", "-f", "16"]




def sweep_json(capsys, tmp_path, *extra) -> dict:
    """The metadata of `sweep SWEEP EXTRA -o FILE.json`: its sidecar."""
    path = tmp_path / "meta-of.json"
    status, _, err = run(capsys, *SWEEP, *extra, "-o", str(path))
    assert (status, err) == (0, "")
    return json.loads(Path(f"{path}.meta.json").read_text())


# ------------------------------------------------------------------------------------------ metadata

def test_json_carries_provenance(capsys, tmp_path):
    doc = sweep_json(capsys, tmp_path)
    assert doc["schema_version"] == provenance.JSON_SCHEMA_VERSION == 2
    assert doc["hccl_bench_version"] == hcclsim.__version__
    assert re.fullmatch(r"[0-9a-f]{64}", doc["inputs_sha256"])
    topo = doc["topology"]
    assert topo["name"] == "switch8" and topo["bandwidth"] == "50GB/s"           # the table as written
    res = topo["resolved"]
    assert (res["kind"], res["ranks"], res["domains"], res["local"]) == ("switch", 8, 1, 8)
    [tier] = res["tiers"]
    assert tier["bandwidth_Bps"] == 50e9 and tier["latency_s"] == pytest.approx(500e-9)
    assert tier["packet"] == {"mtu": 4096, "switching": "cut_through", "switch_buffer": 1 << 20,
                              "switch_latency": 0.0, "reduction_table_entries": 1024, "merge_spread": 0.0,
                              "merge_order": "aligned", "merge_seed": 0, "table_full": "wait",
                              "efficiency": 1.0}   # defaults filled in
    assert res["endpoint"]["message_engines"] == 0 and res["endpoint"]["launch_overhead"] == 0.0
    assert res["endpoint"]["execution"] == "offload" and res["endpoint"]["hidden"] == []
    assert set(res["endpoint"]) == ENDPOINT_KEYS
    inputs = doc["inputs"]
    assert inputs["collectives"] == ["all_reduce"] and inputs["algorithm"] == "ring"
    assert inputs["sizes"] == [16, 256, 4096] and inputs["engines"] == ["analytic"]
    assert (inputs["dtype"], inputs["root"], inputs["stats"]) == ("float32", 0, False)
    assert inputs["maxbytes"] == 4096 and inputs["overrides"] == []             # the flags, as typed


def test_hash_is_stable_and_follows_the_inputs(capsys, tmp_path):
    first = sweep_json(capsys, tmp_path)["inputs_sha256"]
    assert sweep_json(capsys, tmp_path)["inputs_sha256"] == first                  # same inputs, same hash
    # the same sizes spelled differently (-b/-e/-f) and the collective by its NCCL name: same hash
    assert sweep_json(capsys, tmp_path, "-c", "allreduce", "-b", "16", "--e", "4096")["inputs_sha256"] == first
    changed = sweep_json(capsys, tmp_path, "--set", "latency=1us")
    assert changed["inputs_sha256"] != first
    assert changed["topology"]["resolved"]["tiers"][0]["latency_s"] == pytest.approx(1e-6)
    assert changed["inputs"]["overrides"] == ["latency=1us"]
    assert sweep_json(capsys, tmp_path, "--set", "mtu=1K")["inputs_sha256"] != first   # packet keys count too
    assert sweep_json(capsys, tmp_path, "-d", "bfloat16")["inputs_sha256"] != first


def test_hash_is_the_same_in_a_fresh_process(capsys, tmp_path):
    first = sweep_json(capsys, tmp_path)["inputs_sha256"]
    path = tmp_path / "fresh.json"
    code = "import sys; from hcclsim.cli import main; sys.exit(main(" + repr(SWEEP + ["-o", str(path)]) + "))"
    subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(Path(f"{path}.meta.json").read_text())["inputs_sha256"] == first


def test_api_and_cli_agree_on_the_hash(capsys, tmp_path):
    cli_hash = sweep_json(capsys, tmp_path)["inputs_sha256"]
    rows = hcclsim.sweep(topology="switch8", algorithm="ring", sizes=[4096, 16, "256"])
    assert rows.attrs["provenance"]["inputs_sha256"] == cli_hash


@pytest.mark.skipif(shutil.which("git") is None or not (ROOT / ".git").exists(), reason="not a git checkout")
def test_git_revision_in_a_checkout(capsys, tmp_path):
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                          check=True).stdout.strip()
    assert provenance.git_revision() == head
    assert sweep_json(capsys, tmp_path)["git_revision"] == head


def test_git_revision_absent_without_git(monkeypatch, capsys, tmp_path):
    provenance.git_revision.cache_clear()
    monkeypatch.setenv("PATH", "/nonexistent")
    try:
        assert provenance.git_revision() is None
        assert "git_revision" not in sweep_json(capsys, tmp_path)
    finally:
        provenance.git_revision.cache_clear()


@pytest.mark.parametrize("suffix", [".csv", ".parquet"])
def test_sidecar_for_csv_and_parquet(capsys, tmp_path, suffix):
    if suffix == ".parquet":
        pytest.importorskip("pyarrow")
    path = tmp_path / f"out{suffix}"
    status, _, err = run(capsys, *SWEEP, "-o", str(path))
    assert (status, err) == (0, "")
    side = Path(str(path) + ".meta.json")
    meta = json.loads(side.read_text())
    assert meta["schema_version"] == 1 and "rows" not in meta
    assert meta["inputs_sha256"] == sweep_json(capsys, tmp_path)["inputs_sha256"]
    if suffix == ".csv":
        assert not path.read_text().startswith("#")                                # no comments in the CSV
    back = hcclsim.read_results(path)
    assert back.attrs["provenance"] == meta and len(back) == 3


# two collectives (a root column of 0 and -1), --stats (counters null throughout): 2 x 3 rows
PAIR = [*SWEEP, "-c", "all_reduce,broadcast", "--stats"]


@pytest.fixture
def pair(capsys, tmp_path):
    """The same sweep (PAIR) written as r.csv and as r.json, each with its sidecar."""
    for name in ("r.csv", "r.json"):
        assert run(capsys, *PAIR, "-o", str(tmp_path / name))[0] == 0
    return tmp_path / "r.csv", tmp_path / "r.json"


def test_json_reads_with_pandas_as_the_rows_of_the_csv(pair):
    """`pandas.read_json(FILE.json)` in a notebook: the rows, typed as `pandas.read_csv` types the CSV."""
    csv, js = pair
    want = pd.read_csv(csv)
    assert len(want) == 6 and list(want.root) == [-1, -1, -1, 0, 0, 0]
    assert want.events.isna().all()                                   # the analytic engine leaves them empty
    exact = pd.read_json(js, precise_float=True)
    pd.testing.assert_frame_equal(exact, want, check_exact=True)                            # dtypes too
    assert [exact[c].dtype for c in ("ranks", "size_bytes", "count", "root")] == ["int64"] * 4
    assert exact.events.dtype == "float64"                            # null -> NaN, as an empty CSV field
    # pandas' default JSON float parser is fast, not exact (precise_float=False): last digits may differ
    for orient in (None, "records"):
        pd.testing.assert_frame_equal(pd.read_json(js, orient=orient), want, check_exact=False, rtol=1e-10)
    assert js.read_text().splitlines()[0] == "[" and "NaN" not in js.read_text()      # null: RFC 8259 JSON


def test_json_and_csv_read_back_alike_with_their_sidecars(pair):
    csv, js = pair
    a, b = hcclsim.read_results(csv), hcclsim.read_results(js)
    pd.testing.assert_frame_equal(b, a, check_exact=True)
    meta = json.loads(Path(f"{js}.meta.json").read_text())
    assert b.attrs["provenance"] == meta and "rows" not in meta
    assert meta["schema_version"] == 2 and a.attrs["provenance"]["schema_version"] == 1
    assert {k: v for k, v in meta.items() if k != "schema_version"} == \
        {k: v for k, v in a.attrs["provenance"].items() if k != "schema_version"}


def test_json_without_sidecar_reads_as_a_csv_without_one(capsys, pair):
    """No metadata: rows read (provenance None), compare works, --resume refuses -- as for a CSV."""
    for path in pair:
        Path(f"{path}.meta.json").unlink()
    a, b = (hcclsim.read_results(p) for p in pair)
    assert a.attrs["provenance"] is None and b.attrs["provenance"] is None
    pd.testing.assert_frame_equal(b, a, check_exact=True)
    status, out, _ = run(capsys, "compare", str(pair[0]), str(pair[1]))
    assert status == 0 and "of 6 common rows" in out
    for path in pair:
        status, _, err = run(capsys, *PAIR, "-o", str(path), "--resume")
        assert status == 2 and f"--resume: '{path}' has no sidecar '{path}.meta.json'" in err, err


def old_json(path: Path, rows: Path) -> None:
    """path as hccl-bench wrote JSON before schema_version 2: one object, the metadata beside "rows", NaN
    for empty counters (json.dumps' default), indent 2. rows: a CSV with its sidecar."""
    meta = {**json.loads(Path(f"{rows}.meta.json").read_text()), "schema_version": 1}
    records = pd.read_csv(rows).to_dict(orient="records")
    path.write_text(json.dumps({**meta, "rows": records}, indent=2) + "\n")


def test_a_schema_1_json_file_still_reads(capsys, pair):
    csv, js = pair
    old = js.with_name("old.json")
    old_json(old, csv)
    assert "NaN" in old.read_text()
    back = hcclsim.read_results(old)
    pd.testing.assert_frame_equal(back, hcclsim.read_results(csv), check_exact=True)
    assert back.attrs["provenance"]["schema_version"] == 1 and back.attrs["provenance"]["topology"]["name"] == "switch8"
    status, out, err = run(capsys, "compare", str(old), str(js))
    assert (status, err) == (0, "") and "of 6 common rows" in out


@pytest.mark.parametrize(("edit", "message"), [
    (lambda rows: [*rows[:2], 7, *rows[2:]],
     "not a hccl-bench results file: rows[2] is 7; expected a JSON list of row objects"),
    (lambda rows: {"rows_": rows}, "not a hccl-bench results file: it holds an object without 'rows'"),
    (lambda rows: [*rows[:1], {k: v for k, v in rows[1].items() if k != "time_us"}, *rows[2:]],
     "rows[1].time_us: expected a finite number >= 0, got nothing (the key is absent)"),
    (lambda rows: [*rows[:1], {k: v for k, v in rows[1].items() if k != "collective"}, *rows[2:]],
     "rows[1].collective: expected a non-empty string, got nothing (the key is absent)"),
])
def test_a_broken_json_file_is_refused_naming_it(capsys, pair, edit, message):
    _, js = pair
    bad = js.with_name("bad.json")
    bad.write_text(json.dumps(edit(json.loads(js.read_text()))))
    shutil.copy(f"{js}.meta.json", f"{bad}.meta.json")
    with pytest.raises(ConfigError, match=re.escape(f"results '{bad}': {message}")):
        hcclsim.read_results(bad)
    status, out, err = run(capsys, "compare", str(js), str(bad))
    assert status == 2 and out == "" and err.count("\n") == 1, err
    assert err.startswith(f"hccl-bench: error: CURRENT '{bad}': {message}"), err


def test_write_results_from_the_api(tmp_path):
    rows = hcclsim.sweep(topology="switch8", algorithm="ring", sizes=[16, 4096])
    hcclsim.write_results(rows, tmp_path / "r.csv")
    back = hcclsim.read_results(tmp_path / "r.csv")
    assert back.attrs["provenance"]["inputs_sha256"] == rows.attrs["provenance"]["inputs_sha256"]
    pd.testing.assert_frame_equal(back, rows, check_exact=False, rtol=1e-5)


# -------------------------------------------------------------------------------- schema versions

FIX_IT = "is not supported (this hccl-bench reads version 1); regenerate the file with this version's"


def test_unsupported_json_refused_with_fix_it_message(capsys, pair):
    """A JSON file's sidecar must say 2, a version-1 file's embedded object 1: schema 99 is refused either way."""
    csv, good = pair
    bad = good.with_name("bad.json")
    shutil.copy(good, bad)
    meta = json.loads(Path(f"{good}.meta.json").read_text())
    Path(f"{bad}.meta.json").write_text(json.dumps({**meta, "schema_version": 99}))
    fix = FIX_IT.replace("version 1", "version 2")
    with pytest.raises(ConfigError, match=re.escape(f"results '{bad}' sidecar '{bad}.meta.json': results "
                                                    f"schema_version 99 {fix}")):
        hcclsim.read_results(bad)
    status, out, err = run(capsys, "compare", str(good), str(bad))
    assert status == 2 and out == "" and f"CURRENT '{bad}' sidecar '{bad}.meta.json'" in err \
        and "schema_version 99 " + fix in err
    old_json(bad, csv)
    bad.write_text(bad.read_text().replace('"schema_version": 1', '"schema_version": 99', 1))
    with pytest.raises(ConfigError, match=re.escape(f"results '{bad}': results schema_version 99 {FIX_IT}")):
        hcclsim.read_results(bad)


def test_unsupported_sidecar_refused(capsys, tmp_path):
    good = tmp_path / "good.csv"
    assert run(capsys, *SWEEP, "-o", str(good))[0] == 0
    bad = tmp_path / "bad.csv"
    shutil.copy(good, bad)
    meta = json.loads(Path(str(good) + ".meta.json").read_text())
    Path(str(bad) + ".meta.json").write_text(json.dumps({**meta, "schema_version": 99}))
    with pytest.raises(ConfigError, match=re.escape("schema_version 99 " + FIX_IT)):
        hcclsim.read_results(bad)
    status, _, err = run(capsys, "compare", str(good), str(bad))
    assert status == 2 and "sidecar" in err and "schema_version 99 " + FIX_IT in err
    assert run(capsys, "compare", str(good), str(good))[0] == 0


def test_csv_without_sidecar_still_reads(capsys, tmp_path):
    path = tmp_path / "plain.csv"
    _, out, _ = run(capsys, *SWEEP, "--format", "csv")
    path.write_text(out)
    assert hcclsim.read_results(path).attrs["provenance"] is None
    assert run(capsys, "compare", str(path), str(path))[0] == 0


# ------------------------------------------------------------------------------------- Python API

def test_import_is_light():
    code = "import sys, hcclsim; print(sorted(m for m in ('pandas', 'numpy', 'numba') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


@pytest.mark.parametrize("first", ["attribute", "from_import"])
def test_sweep_and_tune_are_functions_whatever_was_imported_first(first):
    """In a fresh interpreter: importing the sweep and tune stages before or after `hcclsim.sweep(...)`
    leaves hcclsim.sweep and hcclsim.tune the API functions."""
    pre = ("from hcclsim.sweeping.sweep import sweep, size_grid; from hcclsim.analysis import tune; "
           if first == "from_import" else "")
    code = (f"{pre}import hcclsim; "
            "df = hcclsim.sweep(topology='switch8', algorithm='ring', sizes=[16]); "
            "from hcclsim.sweeping.sweep import sweep, SweepResult; from hcclsim.analysis.tune import size_ranges; "
            "r = hcclsim.tune(topology='switch8', sizes=[16, 1024]); "
            "assert isinstance(sweep(hcclsim.load_topology('switch8'), ['all_reduce'], 'ring', [16]), SweepResult); "
            "print(len(df), list(r.columns[:2]), hcclsim.sweep is hcclsim.run_sweep is hcclsim.api.run_sweep, "
            "hcclsim.tune is hcclsim.api.run_tune)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "1 ['collective', 'min_size_bytes'] True True"


def test_api_sweep_matches_the_core_sweep():
    from hcclsim.sweeping.sweep import sweep as core
    want = core(load_topology("switch8"), ["all_reduce", "all_gather"], "ring,direct", [64, 1 << 20]).rows
    got = hcclsim.sweep(topology="switch8", collective="all_reduce,all_gather", algorithm="ring,direct",
                        sizes=["64", "1M"])
    pd.testing.assert_frame_equal(got, want)
    grid = hcclsim.sweep(topology="switch8", algorithm="ring", b=16, e="4K", f=16)
    assert list(grid.size_bytes) == [16, 256, 4096]


def test_api_input_errors():
    with pytest.raises(ConfigError, match="either sizes"):
        hcclsim.sweep(topology="switch8", sizes=[16], b=16)
    with pytest.raises(ConfigError, match="collective"):
        hcclsim.sweep(topology="switch8", collective="allsum", sizes=[16])
    with pytest.raises(ConfigError, match="overrides"):
        hcclsim.sweep(topology=load_topology("switch8"), sizes=[16], overrides=["latency=0"])


def test_api_doc_example_runs(capsys):
    """docs/api.md's first python block, executed as written."""
    text = (ROOT / "docs" / "api.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```python\n(.*?)```", text, re.DOTALL)
    assert blocks, "docs/api.md has no python example"
    namespace: dict = {"__name__": "docs_api_example"}
    exec(compile(blocks[0], "docs/api.md", "exec"), namespace)  # noqa: S102 (our own docs, on purpose)
    assert {"rows", "ranges", "meta", "topo"} <= set(namespace)
    assert namespace["meta"]["inputs_sha256"] == namespace["rows"].attrs["provenance"]["inputs_sha256"]
    assert "in_switch" in capsys.readouterr().out


def test_read_results_checks_values_as_compare_does(capsys, tmp_path):
    """A negative time read through the Python API is refused as compare refuses it (line 2, time_us), not
    returned for a user to gate on."""
    good = tmp_path / "good.csv"
    assert run(capsys, *SWEEP, "-o", str(good))[0] == 0
    lines = good.read_text().splitlines(keepends=True)
    header = lines[0].rstrip("\n").split(",")
    cells = lines[1].rstrip("\n").split(",")
    cells[header.index("time_us")] = "-1"
    bad = tmp_path / "bad.csv"
    bad.write_text(lines[0] + ",".join(cells) + "\n" + "".join(lines[2:]))
    shutil.copy(str(good) + ".meta.json", str(bad) + ".meta.json")
    assert len(hcclsim.read_results(good)) == len(lines) - 1
    with pytest.raises(ConfigError, match="line 2, column time_us: expected a finite number >= 0"):
        hcclsim.read_results(bad)

