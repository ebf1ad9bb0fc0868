"""The graph kind (a fixed wiring, hcclsim/network/wiring.py), rings laid on it (ring's `permute`) and the
dgx1-v100 preset: closed forms on hand-made wirings, the cycle search, routing, the file errors, the checker.

Expected values are derived by hand in each test's docstring or comment."""

import pytest
from helpers import assert_one_line_error, compile_for, time_of
from helpers import run_cli as run

from hcclsim.core.errors import TopologyError
from hcclsim.engine import analytic, packet
from hcclsim.engine.execution import device_topology
from hcclsim.network.config import load_topology, preset_dir
from hcclsim.network.wiring import ring_cycles, wiring_of
from hcclsim.schedule import collectives as C
from hcclsim.schedule.algorithm import Problem, parse_spec
from hcclsim.schedule.checker import check
from hcclsim.sweeping.sweep import unsupported

B, A = 10e9, 1e-6                               # a link's bandwidth per direction, its latency per hop


def graph(tmp_path, links, ranks=4, host=True, name="wired.toml", latency="1us"):
    """A user's TOML file of kind graph, loaded as a user's -t FILE would be."""
    text = (f'[topology]\nkind = "graph"\nranks = {ranks}\nbandwidth = "10GB/s"\nlatency = "{latency}"\n'
            f"links = {links}\n" + ('[topology.host]\nbandwidth = "5GB/s"\nlatency = "2us"\n' if host else ""))
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return load_topology(str(path))


SQUARE = "[[0, 1, 2], [1, 2, 1], [2, 3, 1], [3, 0, 1]]"              # a 4-cycle, 0-1 a double link
K4 = "[[0, 1, 2], [0, 2, 1], [0, 3, 1], [1, 2, 1], [1, 3, 1], [2, 3, 2]]"   # every pair, 0-1 and 2-3 double
DGX1 = load_topology("dgx1-v100")


def cycle_problems(cycles, n, links) -> list[str]:
    """What keeps `cycles` from being directed Hamiltonian cycles within each link's count, each way."""
    count = {(a, b): c for a, b, c in links} | {(b, a): c for a, b, c in links}
    used, problems = {}, []
    for cyc in cycles:
        if sorted(cyc) != list(range(n)):
            problems.append(f"{cyc} does not visit every rank once")
        for a, b in zip(cyc, cyc[1:] + cyc[:1]):
            used[a, b] = used.get((a, b), 0) + 1
    for arc, k in used.items():
        if k > count.get(arc, 0):
            problems.append(f"link {arc} used {k} times, it has {count.get(arc, 0)}")
    return problems


# ------------------------------------------------------------------------------------------ closed forms

@pytest.mark.parametrize("links,rings,alpha", [(SQUARE, 2, 0.0), (K4, 4, A)])
def test_ring_allreduce_on_a_wiring_matches_its_closed_form_and_the_packet_engine(tmp_path, links, rings, alpha):
    """Ring AllReduce over C rings laid on the links: 2(N-1) steps, in each a ring's piece S/(N C) crosses one
    hop, and a link carries as many pieces as rings run over it. The square has one Hamiltonian cycle, run both
    ways (C = 2): the single links carry one piece each way per step, the double 0-1 link one at twice the
    bandwidth, so the single links set 2(N-1) S/(N 2 B) (with no latency: with one, the rank after the double
    link runs ahead and the steps no longer take equally long). K4 with 0-1 and 2-3 doubled holds two cycles,
    0-1-2-3 and 0-1-3-2, whose shared links are the double ones (C = 4): every link carries one piece per B of
    its bandwidth, every transfer takes a + S/(N 4 B), 2(N-1) of them; the plain K4 (every pair one link) holds
    one cycle only."""
    topo, S, N = graph(tmp_path, links, latency=f"{alpha * 1e6:g}us"), 1 << 20, 4
    expect = 2 * (N - 1) * (alpha + S / (N * rings * B))
    s = compile_for("ring", "all_reduce", topo, S)
    assert s.notes.get("permute")
    sz = C.sizing("all_reduce", S, 4, N)
    got = float(analytic.run(s, topo, [sz.block_elems], 4).time[0])
    assert got == pytest.approx(expect, rel=1e-9)
    assert float(packet.run(s, topo, [sz.block_elems], 4).time[0]) == pytest.approx(expect, rel=0.03)
    plain = graph(tmp_path, K4.replace(", 2]", ", 1]"), name="plain.toml")
    assert time_of("ring", "all_reduce", plain, S) == pytest.approx(2 * (N - 1) * (A + S / (N * 2 * B)), rel=1e-9)


def test_a_double_link_is_one_link_of_twice_the_bandwidth(tmp_path):
    topo = graph(tmp_path, SQUARE)
    assert [topo.link_bw[x] for x in (topo.route(0, 1), topo.route(1, 0), topo.route(1, 2))] == [[2 * B]] * 2 + [[B]]


# ------------------------------------------------------------------------------------------ the cycles

def test_the_dgx1_wiring_holds_six_rings_within_its_link_counts():
    """Every GPU of the cube mesh has 6 links each way and a ring leaves every GPU once, so at most 6 rings;
    6 exist: the NV2 cycle 0-3-2-1-5-6-7-4 twice (its links are double) and the NV1 cycle 0-1-3-7-5-4-6-2 once,
    each both ways round. Six rings use every link, each way, exactly its count."""
    links = wiring_of(DGX1)
    cycles = [list(c) for c in ring_cycles(8, links)]
    assert len(cycles) == 6
    assert cycle_problems(cycles, 8, links) == []
    assert sum(len(c) for c in cycles) == 2 * sum(c for *_, c in links)        # every link used to its count
    assert all(cycles[2 * m + 1] == [0, *cycles[2 * m][:0:-1]] for m in range(3))   # pairs: a ring, its reverse


def test_the_cycle_check_rejects_broken_sets():
    links = wiring_of(DGX1)
    good = [list(c) for c in ring_cycles(8, links)]
    assert any("used 3 times" in p for p in cycle_problems(good + [good[4]], 8, links))      # an NV2 link thrice
    assert any("has 0" in p for p in cycle_problems([[0, 1, 2, 3, 4, 5, 6, 7]], 8, links))   # 3-4: no link
    assert any("once" in p for p in cycle_problems([[0, 1, 3, 1, 5, 6, 7, 4]], 8, links))


def test_a_wiring_without_a_hamiltonian_cycle_runs_rank_order_rings_over_the_host(tmp_path):
    """A path 0-1-2-3 has no Hamiltonian cycle: ring falls back to rank order, whose 3 -> 0 goes over the host;
    permute=on says why it cannot run."""
    topo = graph(tmp_path, "[[0, 1, 1], [1, 2, 1], [2, 3, 1]]")
    assert ring_cycles(4, wiring_of(topo)) == ()
    assert not compile_for("ring", "all_reduce", topo).notes.get("permute")
    why = parse_spec("ring:permute=on").unsupported(Problem("all_reduce", topo))
    assert why and "Hamiltonian" in why


# ------------------------------------------------------------------------------------------ routing

def test_linked_pairs_take_their_link_and_the_rest_the_host():
    """dgx1-v100: 0-3 is NV2 (one hop, 50 GB/s), 0-5 has no NVLink (up to the host, down to 5: links 2P + 0
    and 2P + N + 5 with P = 16 pairs)."""
    assert DGX1.route(0, 3) == [4] and DGX1.link_bw[4] == 50e9
    assert DGX1.route(0, 5) == [32, 32 + 8 + 5]
    assert DGX1.path_latency(0, 5) == pytest.approx(1e-6) and DGX1.path_latency(0, 1) == pytest.approx(600e-9)


def test_a_large_wiring_without_a_host_is_refused_by_the_budget_before_anything_compiles(tmp_path, capsys,
                                                                                       monkeypatch):
    """A 256-rank ring wiring: ring's mesh rings are a template per position and channel, 2 x 255 steps x 2
    channels x 256 positions = 261,120 templates, ~340 MB to compile at 1300 B each (hcclsim.sweeping.budget).
    With a 64 MiB budget the sweep refuses the point from its rule, without compiling -- the route check that
    looks for unlinked pairs included."""
    n = 256
    path = tmp_path / "ring256.toml"
    path.write_text('[topology]\nkind = "graph"\nranks = 256\nbandwidth = "10GB/s"\n'
                    f"links = {[[i, (i + 1) % n, 1] for i in range(n)]}\n", encoding="utf-8")
    assert load_topology(str(path)).routes_partial
    ring = type(parse_spec("ring"))

    def no_compile(self, problem, key):
        raise AssertionError("compiled before the budget check")
    monkeypatch.setattr(ring, "compile", no_compile)
    status, out, err = run(capsys, "sweep", "-t", path, "-a", "ring", "-b", "1M", "-e", "1M", "--max-memory", "64M")
    assert_one_line_error(status, out, err, "all_reduce ring on ring256 (256 ranks", "2.61e+05 templates",
                          "over the 64 MiB memory budget", "use fewer ranks or smaller algorithm options")


def test_without_a_host_a_schedule_that_needs_an_unlinked_pair_is_refused(tmp_path, capsys):
    path = tmp_path / "nohost.toml"
    path.write_text('[topology]\nkind = "graph"\nranks = 4\nbandwidth = "10GB/s"\n'
                    f"links = {SQUARE}\n", encoding="utf-8")
    topo = load_topology(str(path))
    assert topo.routes_partial and time_of("ring", "all_reduce", topo, 1 << 20) > 0      # rings stay on links
    direct, problem = parse_spec("direct"), Problem("all_to_all", topo, 0)
    assert direct.unsupported(problem) is None       # the algorithm could run it on a wiring with a host path
    assert unsupported(direct, problem) == "sends rank 0 -> rank 2, which have no link and no [topology.host] path"
    sz = C.sizing("all_to_all", 1 << 20, 4, 4)       # compiled anyway (the API): the engines refuse it
    schedule = direct.compile(problem, direct.structure_key(problem, sz, 4))
    with pytest.raises(TopologyError):
        analytic.run(schedule, topo, [sz.block_elems], 4)
    with pytest.raises(TopologyError):
        packet.run(schedule, topo, [sz.block_elems], 4)
    for engine in ("analytic", "packet"):          # the sweep asks the algorithm first: refused before timing
        status, out, err = run(capsys, "sweep", "-t", path, "-c", "all_to_all", "-a", "direct", "-b", "1K", "-e",
                               "1K", "--engine", engine)
        assert_one_line_error(status, out, err, "--algorithm: direct cannot run all_to_all on nohost: sends rank 0 "
                                                "-> rank 2, which have no link and no [topology.host] path")
    # the default, every algorithm: the ones that need an unlinked pair are skipped, with the pair
    status, out, err = run(capsys, "sweep", "-t", path, "-b", "1M", "-e", "1M", "--format", "csv")
    assert status == 0 and [line.split(",")[1] for line in out.splitlines()[1:]] == ["ring"]
    assert ("hccl-bench: skipped direct_oneshot for all_reduce on nohost: sends rank 0 -> rank 2, which have no "
            "link and no [topology.host] path\n") in err


# ------------------------------------------------------------------------------------------ file errors

HEAD = '[topology]\nkind = "graph"\nranks = 4\nbandwidth = "10GB/s"\n'


@pytest.mark.parametrize("body,needle", [
    ("links = [[0, 0, 1], [1, 2, 1]]\n", "topology.links[0]: [0, 0, 1] links rank 0 to itself"),
    ("links = [[0, 1, 1], [1, 4, 1]]\n", "topology.links[1]: rank 4 is out of range; expected ranks 0..3"),
    ("links = [[0, 1, 1], [0, 1, 1]]\n", "topology.links[1]: ranks 0 and 1 are already linked by entry 0 ([0, 1, 1])"),
    ("links = [[0, 1, 1], [1, 0, 2]]\n", "topology.links[1]: ranks 1 and 0 are already linked"),     # asymmetric
    ("links = [[0, 1, 1], [2, 3, 1]]\n", "topology.links: rank 2 has no path of links to rank 0"),
    ("links = [[0, 1]]\n", "topology.links[0]: expected [a, b, count]"),
    ("links = [[0, 1, 0]]\n", "topology.links[0]: count 0"),
    ("links = 3\n", "topology.links: expected a list of [a, b, count] entries"),
    ("", "topology.links is missing"),
    ('links = [[0, 1, 1]]\n[topology.host]\nbandwith = "1GB/s"\n', "topology.host.bandwith: unknown key"),
])
def test_a_malformed_wiring_is_one_line_naming_the_key(tmp_path, capsys, body, needle):
    path = tmp_path / "bad.toml"
    path.write_text(HEAD + body, encoding="utf-8")
    status, out, err = run(capsys, "sweep", "-t", path, "-b", "1K", "-e", "1K")
    assert_one_line_error(status, out, err, f"{path}: {needle}")


def test_a_disconnected_wiring_with_a_host_loads(tmp_path):
    """The broken case above, with a host: 0-1 and 2-3 reach each other over it."""
    topo = graph(tmp_path, "[[0, 1, 1], [2, 3, 1]]")
    assert topo.route(1, 2) == [4 + 1, 4 + 4 + 2]


# ------------------------------------------------------------------------------------------ the preset

def test_topologies_lists_and_prints_the_preset(capsys):
    status, out, _ = run(capsys, "topologies")
    assert status == 0 and "dgx1-v100" in out and "graph 150GB/s" in out
    status, out, _ = run(capsys, "topologies", "dgx1-v100")
    assert status == 0 and out == (preset_dir() / "dgx1-v100.toml").read_text(encoding="utf-8")


def test_a_rank_wide_cap_is_shared_over_a_gpus_links():
    """LL on Volta: a GPU moves at most 39 GB/s (llMaxBws), over its 6 NVLinks in proportion to their
    bandwidth: an NV1 link 39 x 25/150 = 6.5 GB/s, an NV2 link 13 GB/s (below LL's half of 20 or 40 GB/s)."""
    dev = device_topology(DGX1, "ll", cap=39e9)
    own = (DGX1.link_src == 0) & (DGX1.link_tier == 0)
    assert sorted(dev.link_bw[own]) == pytest.approx([6.5e9, 6.5e9, 13e9, 13e9])
    assert dev.link_bw[own].sum() == pytest.approx(39e9)


# ------------------------------------------------------------------------------------------ the checker

@pytest.mark.parametrize("where", ["dgx1", "square", "path"])
@pytest.mark.parametrize("spec,coll", [("ring", "all_reduce"), ("ring", "all_gather"), ("ring", "reduce_scatter"),
                                       ("ring", "broadcast"), ("ring", "reduce"), ("ring:channels=12", "all_reduce"),
                                       ("ring:permute=off", "all_reduce"), ("direct", "all_to_all")])
def test_every_ring_schedule_on_a_wiring_computes_its_collective(tmp_path, where, spec, coll):
    topo = {"dgx1": lambda: DGX1, "square": lambda: graph(tmp_path, SQUARE),
            "path": lambda: graph(tmp_path, "[[0, 1, 1], [1, 2, 1], [2, 3, 1]]")}[where]()
    s = compile_for(spec, coll, topo)
    for count in (1, 97):
        check(s, count)


def test_the_ring_search_scales_and_stops():
    """A 1200-rank ring wiring is deeper than Python's recursion (the search recursed per rank: RecursionError,
    status 3); a triangle of 1000 links a side takes NCCL's 64 channels at most (32 rings each way), not 1000
    nested searches; K(7,8), bipartite with unequal sides, has no Hamiltonian cycle and the walk gives up
    within its step budget instead of enumerating every path."""
    n = 1200
    cycles = ring_cycles(n, tuple((i, (i + 1) % n, 1) for i in range(n)))
    assert [len(c) for c in cycles] == [n, n] and cycles[0][:3] == (0, 1, 2) and cycles[1][:3] == (0, n - 1, n - 2)
    assert len(ring_cycles(3, ((0, 1, 1000), (1, 2, 1000), (2, 0, 1000)))) == 64
    assert len(ring_cycles(2, ((0, 1, 1000),))) == 64
    assert ring_cycles(15, tuple((a, b, 1) for a in range(7) for b in range(7, 15))) == ()


def test_a_matrix_that_stays_on_the_links_runs_without_a_host(tmp_path, capsys):
    """all_to_allv's pairs are its matrix's: a path 0-1-2-3 without a host runs a matrix between neighbours,
    and refuses (one line, from the engine) the uniform one, which needs 0 -> 2."""
    path = tmp_path / "path.toml"
    path.write_text('[topology]\nkind = "graph"\nranks = 4\nbandwidth = "10GB/s"\n'
                    "links = [[0, 1, 1], [1, 2, 1], [2, 3, 1]]\n", encoding="utf-8")
    line = tmp_path / "line.csv"
    line.write_text("0,1,0,0\n1,0,1,0\n0,1,0,1\n0,0,1,0\n", encoding="utf-8")
    args = ("sweep", "-t", path, "-c", "all_to_allv", "-a", "direct", "-b", "1M", "-e", "1M", "--format", "csv")
    status, out, err = run(capsys, *args, "--matrix", line)
    assert status == 0 and out.count("all_to_allv,direct") == 1, err
    assert_one_line_error(*run(capsys, *args), "no link between them")


def test_the_route_table_is_budgeted_at_its_peak(tmp_path, capsys):
    """A 4096-rank ring wiring's route table is 4096^2 rows of 3 int64 (402,653,184 bytes), held twice while it
    is copied into the topology's params: refused under --max-memory 600M before anything is allocated (one
    copy would have passed)."""
    n = 4096
    path = tmp_path / "ring4096.toml"
    links = [[i, (i + 1) % n, 1] for i in range(n)]
    path.write_text(f'[topology]\nkind = "graph"\nranks = {n}\nbandwidth = "10GB/s"\nlinks = {links}\n',
                    encoding="utf-8")
    assert 8 * 3 * n * n < 600 * 2 ** 20 < 2 * 8 * 3 * n * n
    assert_one_line_error(*run(capsys, "sweep", "-t", path, "-a", "ring", "-b", "1M", "-e", "1M",
                               "--max-memory", "600M"), "route table")
