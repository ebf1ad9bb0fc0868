"""`hccl-bench replay A B -t TOPO --placement ...` (docs/replay.md): traces as jobs sharing one fabric."""

import io
import json

import pandas as pd
import pytest
from helpers import assert_one_line_error
from helpers import run_cli as run

MIB = 1 << 20
SIZE = 8 * MIB
# two-tier-128 cut to 2 domains x 4 ranks: a 400 GB/s switch per domain, 50 GB/s NICs, one leaf per domain
FABRIC = ["-t", "two-tier-128", "--set", "scale_up.ranks=4", "--set", "scale_out.domains=2"]


def trace(tmp_path, name, *sizes, ranks=4):
    """A PARAM comms trace of AllReduces of the given sizes (bytes of float32) over `ranks` ranks."""
    path = tmp_path / name
    path.write_text(json.dumps([{"comms": "all_reduce", "in_msg_size": s // 4, "out_msg_size": s // 4,
                                 "dtype": "Float", "world_size": ranks} for s in sizes]))
    return path


def jobs(capsys, *args):
    status, out, err = run(capsys, "replay", *args, "-a", "ring", "--format", "json")
    assert status == 0, err
    got = json.loads(out)
    return pd.DataFrame(got["rounds"]), pd.DataFrame(got["jobs"])


def test_two_traces_packed_on_a_non_blocking_fabric_do_not_slow_each_other(capsys, tmp_path):
    a, b = trace(tmp_path, "a.json", SIZE), trace(tmp_path, "b.json", SIZE)
    rounds, per = jobs(capsys, a, b, *FABRIC, "--placement", "packed")
    assert list(per.placed) == ["0-3", "4-7"] and list(per.ranks) == [4, 4]
    assert list(rounds.slowdown) == [1.0, 1.0] and list(per.slowdown) == [1.0, 1.0]
    assert (rounds.algorithm == "ring").all() and (rounds.size_bytes == SIZE).all()


def test_spread_on_an_oversubscribed_fabric_slows_both_by_the_shared_uplink(capsys, tmp_path):
    """Oversubscription 4: a leaf's uplink is 4 x 50 GB/s / 4 = 50 GB/s. Spread, the rings are 0 1 4 5 and
    2 3 6 7: in each of the 2(N-1) = 6 steps each job sends one S/4 transfer up each leaf's uplink, at the
    NIC's 50 GB/s alone and at half of it together, so together - alone = 6 (S/4) / 50 GB/s per job."""
    a, b = trace(tmp_path, "a.json", SIZE), trace(tmp_path, "b.json", SIZE)
    rounds, per = jobs(capsys, a, b, *FABRIC, "--set", "scale_out.oversubscription=4", "--placement", "spread")
    assert list(per.placed) == ["0-1,4-5", "2-3,6-7"]
    extra = 6 * (SIZE / 4) / 50e9 * 1e6
    assert list(per.together_us - per.alone_us) == pytest.approx([extra, extra], rel=1e-9)
    assert (per.slowdown > 1).all()
    assert all("scale_out sw" in links for links in rounds.busiest_links)       # the leaf <-> spine links


def test_the_kth_collectives_run_together_and_a_shorter_trace_sits_out(capsys, tmp_path):
    a = trace(tmp_path, "a.json", SIZE, 2 * SIZE)
    b = trace(tmp_path, "b.json", SIZE)
    rounds, per = jobs(capsys, a, b, *FABRIC, "--set", "scale_out.oversubscription=4", "--placement", "spread")
    assert list(zip(rounds["round"], rounds.job)) == [(0, 0), (0, 1), (1, 0)]
    assert rounds.slowdown.iloc[0] > 1 and rounds.slowdown.iloc[2] == 1.0          # round 1: job 0 alone
    assert list(per.collectives) == [2, 1]
    assert per.alone_us.iloc[0] == pytest.approx(rounds[rounds.job == 0].alone_us.sum(), rel=1e-12)


def test_csv_has_a_row_per_round_and_job(capsys, tmp_path):
    a = trace(tmp_path, "a.json", SIZE)
    status, out, err = run(capsys, "replay", a, a, *FABRIC, "-a", "ring", "--placement", "random:7", "--format", "csv")
    assert status == 0, err
    df = pd.read_csv(io.StringIO(out))
    assert list(df.columns[:4]) == ["round", "job", "trace", "index"] and len(df) == 2


@pytest.mark.parametrize("extra, needles", [
    (["--placement", "stripes"], ["--placement: 'stripes': expected packed, spread, random or random:SEED"]),
    (["--placement", "random:x"], ["--placement: 'random:x': expected"]),
    (["--placement", "packed:3"], ["--placement: 'packed:3': expected"]),
    (["--placement", "packed", "-a", "ring,tree"], ["-a/--algorithm: 'ring,tree': with --placement", "one algorithm"]),
    (["--placement", "packed", "--scale-ranks", "8"], ["--placement: 16 ranks of jobs sized [8, 8]",
                                                       "at most the 8 ranks of"]),
])
def test_bad_combinations_are_one_line_errors(capsys, tmp_path, extra, needles):
    a = trace(tmp_path, "a.json", SIZE)
    assert_one_line_error(*run(capsys, "replay", a, a, *FABRIC, *extra), *needles)


def test_a_group_that_is_not_whole_domains_is_refused(capsys, tmp_path):
    a = trace(tmp_path, "a.json", SIZE, ranks=3)
    assert_one_line_error(*run(capsys, "replay", a, *FABRIC, "--placement", "packed"),
                          f"{a}: collective 0: ranks: 3: expected a multiple of the 4 ranks per domain")
