"""Several jobs on one fabric (issue 14, item 3): placement, and each job's slowdown on both engines."""

import pandas as pd
import pytest
from helpers import assert_one_line_error, compile_for, run_cli

from hcclsim.core.errors import ConfigError
from hcclsim.engine import analytic, concurrent, packet
from hcclsim.engine.packet import Job
from hcclsim.network.config import load_topology
from hcclsim.network.placement import place
from hcclsim.network.topology import build_flat
from hcclsim.schedule import collectives as C

MIB = 1 << 20
SIZE = 8 * MIB
AGREE = 0.03            # docs/packet.md, "Where the engines agree": 3 %


def fabric(oversubscription=1, domains=2):
    """two-tier-128 cut to domains x 4 ranks: 400 GB/s scale-up switch, 50 GB/s NICs, one leaf per domain."""
    return load_topology("two-tier-128", ["scale_up.ranks=4", f"scale_out.domains={domains}",
                                          f"scale_out.oversubscription={oversubscription}"])


def rings(topo, policy):
    """Two 4-rank ring AllReduces of SIZE, compiled for a 4-rank switch and placed by policy."""
    s = compile_for("ring", "all_reduce", build_flat("g", "switch", 4, 50e9, 500e-9), SIZE)
    e = C.sizing("all_reduce", SIZE, 4, 4).block_elems
    return [Job(s, e, ranks=r) for r in place(topo, [4, 4], policy)]


def test_policies_place_jobs_by_hand():
    topo = fabric()
    assert place(topo, [4, 4], "packed") == [(0, 1, 2, 3), (4, 5, 6, 7)]
    assert place(topo, [4, 4], "spread") == [(0, 1, 4, 5), (2, 3, 6, 7)]        # rank 0 of each domain, then 1, ...
    assert place(topo, [2, 3], "packed") == [(0, 1), (2, 3, 4)]
    one, again, other = (place(topo, [4, 4], "random", seed=s) for s in (1, 1, 2))
    assert one == again != other
    assert sorted(one[0] + one[1]) == list(range(8))
    assert place(topo, (), [[7, 0], [3]]) == [(7, 0), (3,)]                        # explicit lists kept as written


@pytest.mark.parametrize("policy, sizes, message", [
    ([[0, 1, 2], [2, 5]], (), r"jobs\[1\].ranks: rank 2 is also jobs\[0\]'s"),
    ([[0, 1, 1]], (), r"jobs\[0\].ranks: rank 1 is listed twice"),
    ([[0, 8]], (), r"jobs\[0\].ranks: rank 8: expected an integer 0..7"),
    ([[0], "3"], (), r"jobs\[1\].ranks: expected a non-empty list"),
    ("striped", [4], r"placement 'striped': expected one of packed, spread, random"),
    ("packed", [4, 5], r"9 ranks .* at most the 8 ranks"),
])
def test_bad_placements_are_refused_naming_the_job_and_rank(policy, sizes, message):
    with pytest.raises(ConfigError, match=message):
        place(fabric(), sizes, policy)


@pytest.mark.parametrize("engine", concurrent.ENGINES)
def test_disjoint_jobs_on_a_non_blocking_fabric_do_not_slow_each_other(engine):
    r = concurrent.run(rings(fabric(), "packed"), fabric(), engine)
    assert r.slowdown == [1.0, 1.0]
    assert r.busiest[0][1].startswith("scale_up ")          # each job stays in its domain


def test_spread_jobs_on_an_oversubscribed_fabric_share_the_leaf_uplink():
    """Oversubscription 4: a leaf's uplink is 4 x 50 GB/s / 4 = 50 GB/s. Spread, each ring (0 1 4 5 and
    2 3 6 7) crosses between the leaves in every one of its 2(N-1) = 6 steps, one transfer of S/4 per
    job on each uplink: alone at the NIC's 50 GB/s, together at half of it. Everything else is the same,
    so together - alone = 6 (S/4) (2/B - 1/B) for both jobs, and the uplinks carry 2 x 6 x S/4 bytes."""
    topo = fabric(oversubscription=4)
    a = concurrent.run(rings(topo, "spread"), topo, "analytic")
    p = concurrent.run(rings(topo, "spread"), topo, "packet")
    extra = 6 * (SIZE / 4) / 50e9
    assert [t - s for t, s in zip(a.together, a.alone)] == pytest.approx([extra, extra], rel=1e-9)
    assert all(x > 1.9 for x in a.slowdown + p.slowdown)
    assert p.together == pytest.approx(a.together, rel=AGREE)
    assert p.alone == pytest.approx(a.alone, rel=AGREE)
    uplinks = {"scale_out sw2->sw4", "scale_out sw3->sw4", "scale_out sw4->sw2", "scale_out sw4->sw3"}
    for r in (a, p):
        assert {name for _, name, _ in r.busiest} <= uplinks            # leaf <-> spine (sw2, sw3 leaves; sw4 spine)
    assert a.busiest[0][2] == pytest.approx(2 * 6 * (SIZE / 4) / 50e9 / max(a.together), rel=1e-9)


def test_spread_jobs_on_a_non_blocking_fabric_keep_their_speed():
    """Non-blocking: the uplink (4 x 50 GB/s) carries two 50 GB/s transfers without slowing either."""
    a, p = (concurrent.run(rings(fabric(), "spread"), fabric(), e) for e in concurrent.ENGINES)
    assert a.slowdown == [1.0, 1.0]
    assert p.slowdown == pytest.approx([1.0, 1.0], rel=AGREE)


def test_one_job_merged_onto_its_own_ranks_times_as_the_analytic_engine_does():
    """The merge (explicit 1x1 templates, groups kept) changes nothing for one job on ranks 0..n-1."""
    topo = fabric(oversubscription=4)
    s = compile_for("ring", "all_reduce", topo, SIZE)
    e = C.sizing("all_reduce", SIZE, 4, 8).block_elems
    (alone,) = concurrent.run([Job(s, e)], topo, "analytic").alone
    assert alone == pytest.approx(analytic.run(s, topo, [e], 4, symmetric=False).time[0], rel=1e-12)


def test_the_analytic_engine_refuses_jobs_of_different_sizes():
    topo = fabric()
    jobs = rings(topo, "packed")
    jobs[1] = Job(jobs[1].schedule, jobs[1].block_elems // 2, ranks=jobs[1].ranks)
    with pytest.raises(ConfigError, match=r"jobs\[1\]: the analytic engine times concurrent jobs of one"):
        concurrent.run(jobs, topo, "analytic")
    assert len(concurrent.run(jobs, topo, "packet").together) == 2


def test_a_striped_job_relays_through_the_leaf_of_the_domain_it_is_placed_on():
    """striped addresses its domain's leaf (node nranks + 1 of a one-domain fabric); placed on domain 2
    of a 4 x 4 fabric (16 ranks, 4 scale-up switches, leaves from node 20) that is node 22, and the job
    runs as fast as on its own one-domain fabric (the same links: NIC up, NIC down)."""
    group = load_topology("two-tier-128", ["scale_up.ranks=4", "scale_out.domains=1"])
    topo = fabric(domains=4)
    s = compile_for("striped", "all_reduce", group, MIB)
    e = C.sizing("all_reduce", MIB, 4, 4).block_elems
    where = packet.node_map_for(s, topo, range(8, 12))
    assert where[group.nranks + group.domains] == 22
    (alone,), _ = packet.simulate_concurrent([Job(s, e, ranks=tuple(range(8, 12)))], topo)
    assert alone == packet.run(s, group, [e], 4).time[0]
    r = concurrent.run([Job(s, e, ranks=tuple(range(8, 12))), Job(s, e, ranks=(0, 1, 2, 3))], topo, "analytic")
    assert r.slowdown == [1.0, 1.0]


SECTION = """[scenario]
title = "t"
reproduces = "r"
[[jobs]]
name = "two"
topology = "two-tier-128"
set = ["scale_up.ranks=4", "scale_out.domains=2", "scale_out.oversubscription=4"]
engine = "analytic"
PLACEMENT
[[jobs.job]]
collective = "all_reduce"
algorithm = "ring"
size = "8MiB"
ranks = RANKS_A
[[jobs.job]]
label = "b"
collective = "all_reduce"
algorithm = "ring"
size = "8MiB"
ranks = RANKS_B
"""


def scenario_text(placement='placement = ["packed", "spread"]', a="4", b="4"):
    return SECTION.replace("PLACEMENT", placement).replace("RANKS_A", a).replace("RANKS_B", b)


def test_a_jobs_section_writes_a_row_per_placement_engine_and_job(capsys, tmp_path):
    path = tmp_path / "s.toml"
    path.write_text(scenario_text())
    status, out, err = run_cli(capsys, "run", path, "-o", tmp_path / "out", "-q")
    assert status == 0 and out == "", err
    rows = pd.read_csv(tmp_path / "out" / "two.csv").set_index(["placement", "label"])
    assert list(rows.index) == [("packed", "job0"), ("packed", "b"), ("spread", "job0"), ("spread", "b")]
    assert (rows.slowdown.loc["packed"] == 1.0).all()
    extra = 6 * (8 * MIB / 4) / 50e9 * 1e6          # the shared uplink, as in the test above
    spread = rows.loc["spread"]
    assert (spread.together_us - spread.alone_us).tolist() == pytest.approx([extra, extra], rel=1e-9)
    assert all("scale_out sw" in x for x in spread.busiest_links)


@pytest.mark.parametrize("placement, a, b, needles", [
    ("", "[0, 1, 2, 3]", "[3, 4, 5, 6]", ["[[jobs]] two: job[1].ranks: rank 3 is also job[0]'s"]),
    ("", "4", "[4, 5, 6, 7]", ["job: ranks: expected a group size in every job or a rank list in every job"]),
    ('placement = "packd"', "4", "4", ["placement: expected one of packed, spread, random", "'packd'"]),
    ("", "3", "4", ["job[0]: ranks: 3: expected a multiple of the 4 ranks per domain"]),
    ("", "8", "4", ["12 ranks of jobs sized [8, 4]", "at most the 8 ranks"]),
    ("", "[]", "[]", ["job[0]: ranks: expected a group size or a non-empty list of ranks"]),
])
def test_bad_jobs_sections_are_one_line_errors(capsys, tmp_path, placement, a, b, needles):
    path = tmp_path / "s.toml"
    path.write_text(scenario_text(placement, a, b))
    assert_one_line_error(*run_cli(capsys, "run", path, "-o", tmp_path / "out"), str(path), *needles)
    assert not (tmp_path / "out").exists()


def test_a_job_whose_schedule_needs_an_unlinked_pair_is_refused_naming_it(capsys, tmp_path):
    """A 4-rank square wiring without a host: direct_oneshot sends rank 0 -> rank 2, which share no link."""
    wiring = tmp_path / "sq.toml"
    wiring.write_text('[topology]\nkind = "graph"\nranks = 4\nbandwidth = "10GB/s"\n'
                      "links = [[0, 1, 2], [1, 2, 1], [2, 3, 1], [3, 0, 1]]\n", encoding="utf-8")
    path = tmp_path / "s.toml"
    path.write_text('[scenario]\ntitle = "t"\nreproduces = "r"\n\n[[jobs]]\nname = "j"\n'
                    f'topology = "{wiring}"\n\n[[jobs.job]]\ncollective = "all_reduce"\nalgorithm = "direct_oneshot"\n'
                    'size = "1MiB"\nranks = [0, 1, 2, 3]\n', encoding="utf-8")
    assert_one_line_error(*run_cli(capsys, "run", path, "-o", tmp_path / "out"), str(path),
                          "[[jobs]] j: job[0]: algorithm: direct_oneshot does not run here: it sends rank 0 -> rank 2, "
                          "which have no link and no [topology.host] path")
