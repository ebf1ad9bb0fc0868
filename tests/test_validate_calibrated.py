"""`validate` refuses a topology `calibrate` wrote: constants fitted to measurements, compared with measurements,
validate nothing. The file is found however a validation file reaches it: its `preset` as a path, as a preset
name, or through `extends`; a `--set` in a case cannot point at a file."""

import json

import pytest

from hcclsim.analysis import validate as V
from hcclsim.cli import main
from hcclsim.network import config

HEADER = ("system,gpus,nodes,collective,nccl_algo,library,library_version,placement,size_bytes,time_us,"
          "algbw_GBps,busbw_GBps,source,log")
# switch8 ring AllReduce, 2(8-1) (1 us + S / (8 x 50 GB/s)): 1 MiB in 14 + 36.70 = 50.70 us, algbw 20.68 GB/s
ROW = "synthetic,8,1,all_reduce,ring,NCCL,0,out-of-place,1048576,50.70,20.68,36.19,by hand,logs/x.txt"
VALIDATION = """preset = "{preset}"
data = ["m.csv"]

[[case]]
name = "ring"
collective = "all_reduce"
algorithm = "ring"
{extra}tolerance = {{ medium = 0.10 }}
"""


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """m.csv, and cal.toml as `hccl-bench calibrate` writes it for switch8 (from three ring times)."""
    tmp_path = tmp_path_factory.mktemp("calibrated")
    (tmp_path / "m.csv").write_text(f"{HEADER}\n{ROW}\n")
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "x.txt").write_text("# the row above, by hand: no nccl-tests banner\n")
    measured = [{"size": s, "time_us": 1.2 * (14 + 14 * s / 400e3)} for s in (1 << 16, 1 << 20, 1 << 24)]
    (tmp_path / "all_reduce.json").write_text(json.dumps(measured))
    assert main(["calibrate", str(tmp_path / "all_reduce.json"), "-t", "switch8", "-o", str(tmp_path / "cal.toml")]) == 0
    assert (tmp_path / "cal.toml").read_text().startswith("# CALIBRATED")
    return tmp_path


def validation(files, preset, extra=""):
    path = files / "v.toml"
    path.write_text(VALIDATION.format(preset=preset, extra=extra))
    return str(path)


def test_a_plain_preset_or_file_is_validated(files):
    (files / "plain.toml").write_text(config.source_text("switch8"))
    for preset in ("switch8", str(files / "plain.toml")):
        assert len(V.validate([validation(files, preset)]).points) == 1


def test_a_calibrated_file_as_preset_is_one_line_exit_2(files, capsys):
    v = validation(files, files / "cal.toml")
    capsys.readouterr()
    assert main(["validate", v]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert f"v.toml: preset '{files / 'cal.toml'}': {files / 'cal.toml'} was written by `hccl-bench calibrate`" in err
    assert "fitted to measurements" in err


def test_a_file_extending_a_calibrated_one_is_refused(files):
    (files / "mine.toml").write_text(f'extends = "{files / "cal.toml"}"\n[topology]\nranks = 8\n')
    with pytest.raises(V.ConfigError, match=r"mine\.toml': .*cal\.toml was written by `hccl-bench calibrate`"):
        V.validate([validation(files, files / "mine.toml")])


def test_a_calibrated_file_among_the_presets_is_refused_by_name(files, monkeypatch, tmp_path_factory):
    presets = tmp_path_factory.mktemp("presets")
    (presets / "my-switch.toml").write_text((files / "cal.toml").read_text())
    monkeypatch.setattr(config, "preset_dir", lambda: presets)
    with pytest.raises(V.ConfigError, match="preset 'my-switch': preset my-switch was written by"):
        V.validate([validation(files, "my-switch")])


def test_a_set_in_a_case_cannot_reach_a_file(files):
    with pytest.raises(V.ConfigError, match="--set extends: unknown key"):
        V.validate([validation(files, "switch8", f'set = ["extends={files / "cal.toml"}"]\n')])
