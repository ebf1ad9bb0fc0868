"""Topology configuration (docs/config.md): the issue's two TOML schemas, validation, --set, and the shapes built."""

import dataclasses
import itertools
import textwrap

import numpy as np
import pytest

from hcclsim.core.errors import ConfigError, TopologyError
from hcclsim.network.config import load_topology, preset_names, source_text
from hcclsim.network.topology import build_flat, build_hierarchical, check_connected

# The issue's schemas, exactly as written (comments included).
FLAT = """\
[topology]
kind = "switch"          # switch | ring | full_mesh | torus2d | hierarchical
ranks = 8
bandwidth = "50GB/s"     # per rank link, per direction
latency = "500ns"        # per link hop (a path through one switch is two hops)
in_switch_reduce = true  # switch kind only: the switch can reduce and multicast (NVLS-like)
"""
TWO_TIER = """\
[topology]
kind = "hierarchical"
[topology.scale_up]      # one scale-up domain
kind = "switch"          # or ring / full_mesh
ranks = 8
bandwidth = "400GB/s"
latency = "500ns"
in_switch_reduce = false
[topology.scale_out]     # connects the domains; every rank has its own NIC
kind = "fat_tree"        # or "rail" (rail-optimized: NIC i of every domain on rail switch i)
domains = 16
bandwidth = "50GB/s"     # per rank NIC, per direction
latency = "2us"
oversubscription = 1     # >1: the fabric above the leaves has 1/oversubscription of the leaves' bandwidth
"""
RAIL = """\
[topology]
kind = "hierarchical"
[topology.scale_up]
kind = "switch"
ranks = 4
bandwidth = "400GB/s"
latency = "500ns"
[topology.scale_out]
kind = "rail"
domains = 3
bandwidth = "50GB/s"
latency = "2us"
"""


@pytest.fixture
def write(tmp_path):
    def write(text: str, name: str = "fabric.toml"):
        path = tmp_path / name
        path.write_text(textwrap.dedent(text), encoding="utf-8")
        return path
    return write


def load(path, *overrides):
    return load_topology(str(path), list(overrides))


def config_error(path, *overrides) -> str:
    with pytest.raises(ConfigError) as e:
        load(path, *overrides)
    return str(e.value)


def assert_route_is_a_path(topo, src, dst):
    """The route's links chain src -> ... -> dst, and it fits in max_hops."""
    route = topo.route(src, dst)
    assert len(route) <= topo.max_hops
    if src == dst:
        assert route == []
        return
    nodes = [int(topo.link_src[route[0]])] + [int(topo.link_dst[k]) for k in route]
    assert nodes[0] == src and nodes[-1] == dst, (src, dst, nodes)
    for a, b in itertools.pairwise(route):
        assert topo.link_dst[a] == topo.link_src[b], (src, dst, route)
    assert topo.path_latency(src, dst) == pytest.approx(sum(topo.link_lat[k] for k in route), rel=1e-15)


# ------------------------------------------------------------------------------ the issue's schemas

def test_issue_flat_schema(write):
    topo = load(write(FLAT, "my_switch.toml"))
    assert (topo.name, topo.kind, topo.nranks, topo.domains, topo.local) == ("my_switch", "switch", 8, 1, 8)
    assert topo.nnodes == 9 and topo.nlinks == 16                   # 8 ranks + the switch; one up, one down each
    assert np.all(topo.link_bw == 50e9) and np.all(topo.link_lat == 500e-9)
    assert topo.can_reduce_in_switch and np.all(topo.reduce_switch == 8)
    assert topo.route(0, 5) == [0, 8 + 5]                             # up from 0, down to 5: two hops
    assert topo.path_latency(0, 5) == pytest.approx(1e-6, rel=1e-15)
    assert topo.route(3, 8) == [3] and topo.route(8, 6) == [14]       # to / from the switch node: one hop
    assert topo.spec["in_switch_reduce"] is True and topo.spec["bandwidth"] == "50GB/s"
    assert [(t.name, t.kind, t.bandwidth, t.latency) for t in topo.tiers] == [("flat", "switch", 50e9, 500e-9)]


def test_issue_two_tier_schema(write):
    topo = load(write(TWO_TIER))
    n, L, D = 128, 8, 16
    assert (topo.kind, topo.nranks, topo.domains, topo.local) == ("hierarchical", n, D, L)
    assert not topo.can_reduce_in_switch
    assert topo.nnodes == n + D + D + 1                 # ranks, scale-up switches, one leaf per domain, the spine
    assert [(t.name, t.kind, t.bandwidth, t.latency) for t in topo.tiers] == [
        ("scale_up", "switch", 400e9, 500e-9), ("scale_out", "fat_tree", 50e9, 2e-6)]
    # inside a domain: through its scale-up switch, two hops at 400 GB/s
    r = topo.route(17, 22)
    assert len(r) == 2 and np.all(topo.link_bw[r] == 400e9)
    assert topo.path_latency(17, 22) == pytest.approx(1e-6, rel=1e-12)
    # across domains: NIC up, leaf up, leaf down, NIC down (leaf_size defaults to one domain per leaf)
    r = topo.route(3, 8 * 5 + 6)
    assert len(r) == 4
    assert list(topo.link_bw[r]) == [50e9, L * 50e9, L * 50e9, 50e9]   # a leaf's uplink carries all its NICs
    assert topo.path_latency(3, 46) == pytest.approx(8e-6, rel=1e-12)
    assert [int(topo.link_src[r[0]]), int(topo.link_dst[r[-1]])] == [3, 46]


def test_oversubscription_divides_the_fabric_above_the_leaves(write):
    topo = load(write(TWO_TIER), "scale_out.oversubscription=4")
    r = topo.route(0, 127)
    assert list(topo.link_bw[r]) == [50e9, 100e9, 100e9, 50e9]       # 8 x 50 GB/s / 4
    assert topo.spec["scale_out"]["oversubscription"] == 4


def test_leaf_size_groups_domains_under_one_leaf(write):
    topo = load(write(TWO_TIER), "scale_out.leaf_size=16")            # two domains per leaf
    assert len(topo.route(0, 8)) == 2                                 # same leaf: NIC up, NIC down
    assert topo.path_latency(0, 8) == pytest.approx(4e-6, rel=1e-12)
    assert len(topo.route(0, 16)) == 4                                # different leaves: through the spine
    assert topo.link_bw[topo.route(0, 16)[1]] == 16 * 50e9


def test_rail_cross_rail_goes_through_scale_up_first(write):
    topo = load(write(RAIL))
    L = 4
    assert topo.nranks == 12 and topo.tiers[1].kind == "rail"
    # same rail (local index 1) in domains 0 and 2: NIC up to rail switch 1, NIC down
    r = topo.route(1, 2 * L + 1)
    assert len(r) == 2 and np.all(topo.link_bw[r] == 50e9)
    assert topo.path_latency(1, 9) == pytest.approx(4e-6, rel=1e-12)
    # cross rail 0 -> (domain 1, local 3): scale-up to local 3 in domain 0 first, then rail 3
    r = topo.route(0, L + 3)
    assert len(r) == 4
    hops = [(int(topo.link_src[k]), int(topo.link_dst[k])) for k in r]
    assert hops[0][0] == 0 and hops[1][1] == 3 and hops[2][0] == 3 and hops[3][1] == L + 3
    assert list(topo.link_bw[r]) == [400e9, 400e9, 50e9, 50e9]
    assert topo.path_latency(0, 7) == pytest.approx(2 * 500e-9 + 2 * 2e-6, rel=1e-12)


@pytest.mark.parametrize("up", ["switch", "ring", "full_mesh"])
@pytest.mark.parametrize("out", ["fat_tree", "rail"])
def test_every_hierarchical_route_is_a_path(up, out):
    topo = build_hierarchical("h", up, 5, 400e9, 1e-7, False, out, 3, 50e9, 2e-6,
                              leaf_size=3 if out == "fat_tree" else None)
    for s, d in itertools.product(range(topo.nranks), repeat=2):
        assert_route_is_a_path(topo, s, d)
        if s // 5 == d // 5:
            assert all(topo.link_bw[k] == 400e9 for k in topo.route(s, d))    # never leaves the domain


@pytest.mark.parametrize("kind,n,dims", [("switch", 7, None), ("ring", 7, None), ("ring", 8, None),
                                         ("full_mesh", 6, None), ("torus2d", 12, (4, 3)),
                                         ("torus2d", 15, (5, 3))])
def test_every_flat_route_is_a_shortest_path(kind, n, dims):
    topo = build_flat("t", kind, n, 50e9, 1e-7, dims=dims)
    for s, d in itertools.product(range(n), repeat=2):
        assert_route_is_a_path(topo, s, d)
        hops = len(topo.route(s, d))
        if s == d:
            continue
        if kind == "switch":
            assert hops == 2
        elif kind == "full_mesh":
            assert hops == 1
        elif kind == "ring":
            assert hops == min((d - s) % n, (s - d) % n)
        else:
            X, Y = dims
            dx, dy = abs(s % X - d % X), abs(s // X - d // X)
            assert hops == min(dx, X - dx) + min(dy, Y - dy)
        assert topo.path_latency(s, d) == pytest.approx(hops * 1e-7, rel=1e-12)


def test_switch_routes_reach_the_reduction_switch():
    topo = build_hierarchical("h", "switch", 4, 400e9, 1e-7, True, "fat_tree", 2, 50e9, 2e-6)
    assert topo.can_reduce_in_switch and list(topo.reduce_switch) == [8, 8, 8, 8, 9, 9, 9, 9]
    for r in range(8):
        sw = int(topo.reduce_switch[r])
        assert_route_is_a_path(topo, r, sw)
        assert_route_is_a_path(topo, sw, r)
        assert len(topo.route(r, sw)) == 1


# -------------------------------------------------------------------------------------------- torus2d

def test_torus2d_dims(write):
    topo = load(write('[topology]\nkind = "torus2d"\ndims = [4, 3]\nbandwidth = "50GB/s"\nlatency = "1us"\n'))
    assert topo.nranks == 12 and topo.nlinks == 48
    assert len(topo.route(0, 4 * 2 + 2)) == 3            # (0,0) -> (2,2): x 2 hops, y 1 hop (wraps)
    assert load(write('[topology]\nkind = "torus2d"\nranks = 12\ndims = [4, 3]\nbandwidth = "1GB/s"\n')).nranks == 12


@pytest.mark.parametrize("body,expect", [
    ('ranks = 16\n', "topology.dims is missing (torus2d needs dims = [X, Y])"),
    ('dims = [4, 4]\nranks = 12\n', "topology.ranks: 12 ranks but dims [4, 4] make 16"),
    ('dims = [4]\n', "topology.dims: expected [X, Y] (two whole numbers >= 1), got [4]"),
    ('dims = [4, 0]\n', "topology.dims: expected [X, Y]"),
    ('dims = [4, "4"]\n', "topology.dims: expected [X, Y]"),
])
def test_torus2d_dims_errors(write, body, expect):
    path = write('[topology]\nkind = "torus2d"\nbandwidth = "50GB/s"\n' + body)
    msg = config_error(path)
    assert msg.startswith(f"{path}: ") and expect in msg


def test_dims_only_on_a_torus(write):
    path = write(FLAT + "dims = [2, 4]\n")
    assert config_error(path) == f"{path}: topology.dims: only a torus2d topology has dims"


# ------------------------------------------------------------------------------- unknown keys, syntax

@pytest.mark.parametrize("doc,bad,hint", [
    (FLAT.replace("latency", "latncy"), "topology.latncy", "latency"),
    (FLAT + "in_switch_reduction = true\n", "topology.in_switch_reduction", "in_switch_reduce"),
    (TWO_TIER.replace('bandwidth = "400GB/s"', 'bandwith = "400GB/s"'), "topology.scale_up.bandwith",
     "bandwidth"),
    (TWO_TIER.replace("domains = 16", "domain = 16"), "topology.scale_out.domain", "domains"),
    (TWO_TIER.replace("oversubscription = 1", "oversubscribe = 1"), "topology.scale_out.oversubscribe",
     "oversubscription"),
    (TWO_TIER.replace('kind = "hierarchical"', 'kind = "hierarchical"\nranks = 8'), "topology.ranks", None),
])
def test_unknown_keys_name_the_file_and_key_and_suggest(write, doc, bad, hint):
    path = write(doc)
    msg = config_error(path)
    assert msg.startswith(f"{path}: {bad}: unknown key")
    if hint:
        assert f"(did you mean {hint!r}?)" in msg
    assert "expected one of: " in msg and "\n" not in msg


def test_unknown_top_level_table_suggests_topology(write):
    path = write(FLAT.replace("[topology]", "[topolgy]"))
    msg = config_error(path)
    assert msg.startswith(f"{path}: unknown top-level table or key 'topolgy' (did you mean 'topology'?)")
    path = write(FLAT + "[extra]\nx = 1\n")
    assert config_error(path).startswith(f"{path}: unknown top-level table or key 'extra'; expected [topology]")
    path = write("# nothing here\n")
    assert config_error(path) == f"{path}: the [topology] table is missing"


def test_malformed_toml_names_the_file(write):
    path = write('[topology\nkind = "switch"\n')
    msg = config_error(path)
    assert msg.startswith(f"{path}: malformed TOML: ") and "line 1" in msg
    path = write('[topology]\nkind = "switch\n')
    assert config_error(path).startswith(f"{path}: malformed TOML: ")


def test_a_file_that_is_not_text_names_the_file(tmp_path):
    path = tmp_path / "binary.toml"
    path.write_bytes(b"\xff\xfe\x00\x81")
    assert config_error(path) == f"{path}: not a UTF-8 text file; expected a TOML file"


def test_missing_file_and_unknown_preset(tmp_path):
    with pytest.raises(ConfigError, match=r"^--topology: no such file '.*nope.toml'"):
        load_topology(str(tmp_path / "nope.toml"))
    with pytest.raises(ConfigError, match=r"^--topology: no such file"):
        load_topology(str(tmp_path))                       # a directory is not a topology file
    with pytest.raises(ConfigError) as e:
        load_topology("switch9")
    assert str(e.value).startswith("--topology: unknown preset 'switch9' (did you mean 'switch8'?); "
                                   "expected a .toml file or one of: ")
    assert "switch8" in preset_names()


# ------------------------------------------------------------------------------------- bad values

@pytest.mark.parametrize("old,new,expect", [
    ('"50GB/s"', '"50GBs"', "topology.bandwidth: unknown bandwidth unit 'GBs' in '50GBs'"),
    ('"50GB/s"', '"0GB/s"', "topology.bandwidth: expected a positive bandwidth, got '0GB/s'"),
    ('"50GB/s"', "50", "topology.bandwidth: expected a bandwidth such as 50GB/s"),
    ('"500ns"', '"500"', "topology.latency: expected a time such as 500ns, 1.5us or 2ms, got '500'"),
    ('"500ns"', '"-1us"', "topology.latency: expected a time"),
    ("ranks = 8", "ranks = 0", "topology.ranks: expected a whole number >= 1, got 0"),
    ("ranks = 8", "ranks = -3", "topology.ranks: expected a whole number >= 1, got -3"),
    ("ranks = 8", 'ranks = "8"', "topology.ranks: expected a whole number >= 1, got '8'"),
    ("ranks = 8", "ranks = 8.0", "topology.ranks: expected a whole number >= 1, got 8.0"),
    ("ranks = 8", "ranks = true", "topology.ranks: expected a whole number >= 1, got True"),
    ("= true ", '= "yes" ', "topology.in_switch_reduce: expected true or false, got 'yes'"),
    ('"switch"', '"swich"', "topology.kind: unknown kind 'swich' (did you mean 'switch'?)"),
])
def test_bad_values_name_the_file_and_key(write, old, new, expect):
    path = write(FLAT.replace(old, new, 1))
    msg = config_error(path)
    assert msg.startswith(f"{path}: {expect}"), msg


@pytest.mark.parametrize("old,new,expect", [
    ('"fat_tree"', '"fattree"', "topology.scale_out.kind: unknown kind 'fattree' (did you mean 'fat_tree'?)"),
    ('kind = "switch"', 'kind = "torus2d"', "topology.scale_up.kind: unknown kind 'torus2d'"),
    ("domains = 16", "domains = 0", "topology.scale_out.domains: expected a whole number >= 1, got 0"),
    ("ranks = 8", "ranks = 0", "topology.scale_up.ranks: expected a whole number >= 1, got 0"),
    ("oversubscription = 1", "oversubscription = 0.5", ("topology.scale_out.oversubscription: expected a "
                                                        "finite number >= 1, got 0.5")),
    ("oversubscription = 1", "oversubscription = inf", "topology.scale_out.oversubscription: expected a finite"),
    ("oversubscription = 1", "leaf_size = 7", "topology.scale_out.leaf_size: 7 does not divide the 128 ranks"),
    ('"2us"', '"2"', "topology.scale_out.latency: expected a time"),
    ('"50GB/s"', '"50GiB/s"', "topology.scale_out.bandwidth: unknown bandwidth unit 'GiB/s'"),
    ("in_switch_reduce = false", "in_switch_reduce = 0", ("topology.scale_up.in_switch_reduce: expected true "
                                                          "or false, got 0")),
    ('kind = "hierarchical"', 'kind = "hierarchical"\ndescription = 5', "topology.description: expected a string"),
])
def test_bad_two_tier_values_name_the_file_and_key(write, old, new, expect):
    path = write(TWO_TIER.replace(old, new, 1))
    msg = config_error(path)
    assert msg.startswith(f"{path}: {expect}"), msg


def test_missing_keys_and_tables(write):
    path = write(FLAT.replace('bandwidth = "50GB/s"', ""))
    assert config_error(path) == f"{path}: topology.bandwidth is missing"
    path = write(FLAT.replace('kind = "switch"', ""))
    assert config_error(path) == f"{path}: topology.kind is missing"
    path = write('[topology]\nkind = "hierarchical"\n[topology.scale_up]\nkind = "switch"\nranks = 8\n'
                 'bandwidth = "1GB/s"\n')
    assert config_error(path) == f"{path}: [topology.scale_out] table is missing"
    path = write(TWO_TIER.replace("domains = 16", ""))
    assert config_error(path) == f"{path}: topology.scale_out.domains is missing"


def test_defaults_fill_latency_and_in_switch_reduce(write):
    topo = load(write('[topology]\nkind = "ring"\nranks = 5\nbandwidth = "25GB/s"\n'))
    assert np.all(topo.link_lat == 0.0) and not topo.can_reduce_in_switch and np.all(topo.link_bw == 25e9)
    topo = load(write(RAIL.replace('latency = "2us"\n', "")))
    assert topo.tiers[1].latency == 0.0 and topo.path_latency(0, 4) == 0.0


def test_in_switch_reduce_needs_a_switch(write):
    path = write(FLAT.replace('"switch"', '"ring"', 1))
    assert config_error(path) == f"{path}: topology.in_switch_reduce: only a 'switch' topology can reduce in " \
                                 f"the switch"
    path = write(TWO_TIER.replace('kind = "switch"', 'kind = "full_mesh"').replace("reduce = false",
                                                                                       "reduce = true"))
    assert config_error(path) == f"{path}: topology.scale_up.in_switch_reduce: only a 'switch' scale-up can " \
                                 f"reduce in the switch"
    assert load(write(FLAT.replace('"switch"', '"ring"', 1)), "in_switch_reduce=false").kind == "ring"


def test_rail_has_no_oversubscription_or_leaves(write):
    path = write(TWO_TIER.replace('"fat_tree"', '"rail"'))
    assert config_error(path) == f"{path}: topology.scale_out.oversubscription: only a fat_tree scale-out has " \
                                 f"oversubscription"
    assert config_error(write(RAIL), "scale_out.leaf_size=4").startswith("--set scale_out.leaf_size: only a fat_tree")


# ------------------------------------------------------------------------------------------- --set

def test_set_overrides_values(write):
    path = write(FLAT)
    topo = load(path, "bandwidth=100GB/s", "latency=1us", "ranks=12")
    assert topo.nranks == 12 and np.all(topo.link_bw == 100e9) and np.all(topo.link_lat == 1e-6)
    assert topo.spec["bandwidth"] == "100GB/s" and topo.spec["ranks"] == 12
    assert load(path, "topology.ranks=4").nranks == 4                # the table prefix may be written
    assert load(path, 'bandwidth="400Gbps"').link_bw[0] == 50e9       # a quoted TOML string works too
    assert load(path, "latency=0").link_lat[0] == 0.0
    assert not load(path, "in_switch_reduce=false").can_reduce_in_switch
    assert load(path, "description=a fabric with spaces").nranks == 8  # not TOML: taken as a string
    assert load(path).link_bw[0] == 50e9                                # the file itself is unchanged


def test_set_nested_keys(write):
    path = write(TWO_TIER)
    topo = load(path, "scale_out.domains=64", "scale_up.ranks=4", "scale_up.in_switch_reduce=true")
    assert (topo.nranks, topo.domains, topo.local) == (256, 64, 4) and topo.can_reduce_in_switch
    topo = load(path, "scale_out.bandwidth=400Gb/s", "scale_out.latency=1.5us")
    assert topo.tiers[1].bandwidth == 50e9 and topo.tiers[1].latency == 1.5e-6
    # replacing the kind and dropping an incompatible key in one go
    topo = load(write(RAIL), "scale_out.kind=fat_tree", "scale_out.oversubscription=2")
    assert topo.tiers[1].kind == "fat_tree" and len(topo.route(0, 4)) == 4


@pytest.mark.parametrize("item,expect", [
    ("ranks=0", "--set ranks: expected a whole number >= 1, got 0"),
    ("ranks=two", "--set ranks: expected a whole number >= 1, got 'two'"),
    ("bandwidth=100GB", "--set bandwidth: unknown bandwidth unit 'GB' in '100GB'"),
    ("bandwidth=0GB/s", "--set bandwidth: expected a positive bandwidth"),
    ("bandwidth=inf", "--set bandwidth: expected a bandwidth such as 50GB/s"),
    ("latency=5", "--set latency: expected a time such as 500ns"),
    ("in_switch_reduce=maybe", "--set in_switch_reduce: expected true or false, got 'maybe'"),
    ("in_switch_reduce=1", "--set in_switch_reduce: expected true or false, got 1"),
    ("kind=tree", "--set kind: unknown kind 'tree'"),
    ("rank=4", ("--set rank: unknown key (did you mean 'ranks'?); expected one of: bandwidth, description, dims, "
                "efficiency, in_switch_reduce, kind, latency, merge_order, merge_seed, merge_spread, mtu, ranks, "
                "reduction_table_entries, switch_buffer, switch_latency, switching, table_full")),
    ("topology.rank=4", "--set rank: unknown key (did you mean 'ranks'?)"),
    ("scale_out.domains=64", "--set scale_out.domains: there is no table 'scale_out' to set a key in"),
    ("ranks.x=1", "--set ranks.x: there is no table 'ranks' to set a key in"),
    ("ranks", "--set: expected KEY=VALUE (e.g. bandwidth=100GB/s), got 'ranks'"),
    ("=8", "--set: expected KEY=VALUE"),
])
def test_set_errors_name_set_and_the_key(write, item, expect):
    msg = config_error(write(FLAT), item)
    assert msg.startswith(expect), msg


@pytest.mark.parametrize("item,expect", [
    ("scale_out.domains=0", "--set scale_out.domains: expected a whole number >= 1, got 0"),
    ("scale_out.domain=4", "--set scale_out.domain: unknown key (did you mean 'domains'?)"),
    ("scale_up.bandwith=1GB/s", "--set scale_up.bandwith: unknown key (did you mean 'bandwidth'?)"),
    ("scale_up=1", "--set scale_up: expected a table"),
    ("in_switch_reduce=true", "--set in_switch_reduce: unknown key"),
    ("scale_out.oversubscription=inf", "--set scale_out.oversubscription: expected a finite number >= 1"),
    ("scale_out.leaf_size=7", "--set scale_out.leaf_size: 7 does not divide the 128 ranks"),
])
def test_set_errors_in_two_tier(write, item, expect):
    msg = config_error(write(TWO_TIER), item)
    assert msg.startswith(expect), msg


def test_set_kind_reports_the_file_key_it_conflicts_with(write):
    path = write(FLAT)
    msg = config_error(path, "kind=full_mesh")        # the file's in_switch_reduce = true no longer fits
    assert msg == f"{path}: topology.in_switch_reduce: only a 'switch' topology can reduce in the switch"
    assert load(path, "kind=full_mesh", "in_switch_reduce=false").nlinks == 64


# ----------------------------------------------------------------------------------------- presets

def test_switch8_preset_is_the_issue_fabric():
    topo = load_topology("switch8")
    assert (topo.kind, topo.nranks, topo.can_reduce_in_switch) == ("switch", 8, True)
    assert np.all(topo.link_bw == 50e9) and topo.path_latency(0, 7) == pytest.approx(1e-6, rel=1e-12)
    assert "[topology]" in source_text("switch8")


def test_source_text_validates_and_returns_the_file(write):
    path = write(FLAT)
    assert source_text(str(path)) == FLAT
    bad = write(FLAT.replace("ranks = 8", "ranks = 0"), "bad.toml")
    with pytest.raises(ConfigError, match=r"bad.toml: topology.ranks"):
        source_text(str(bad))


# ------------------------------------------------------------------------------------ connectivity

def _without(topo, keep):
    return dataclasses.replace(topo, link_src=topo.link_src[keep], link_dst=topo.link_dst[keep],
                               link_bw=topo.link_bw[keep], link_lat=topo.link_lat[keep])


def test_built_topologies_are_connected(write):
    for text in (FLAT, TWO_TIER, RAIL):
        check_connected(load(write(text)))


def test_a_rank_nobody_can_reach_is_a_topology_error(switch8):
    keep = np.ones(switch8.nlinks, bool)
    keep[8 + 3] = False                                # the switch's down link to rank 3
    with pytest.raises(TopologyError, match=r"^topology 'switch8' is disconnected: rank 3 cannot be reached "
                                            r"from rank 0$"):
        check_connected(_without(switch8, keep))


def test_a_cut_ring_and_a_lost_domain_are_topology_errors():
    ring = build_flat("r", "ring", 6, 50e9, 0.0)
    keep = ~(((ring.link_src == 2) & (ring.link_dst == 3)) | ((ring.link_src == 5) & (ring.link_dst == 4)))
    with pytest.raises(TopologyError, match="rank 3 cannot be reached from"):    # both ways into {3, 4} cut
        check_connected(_without(ring, keep))
    h = build_hierarchical("h", "switch", 4, 400e9, 0.0, False, "fat_tree", 3, 50e9, 0.0)
    keep = h.link_dst != h.nnodes - 1                   # every leaf's uplink to the spine
    with pytest.raises(TopologyError, match="'h' is disconnected: rank 4 cannot be reached from"):
        check_connected(_without(h, keep))


def test_a_rank_that_cannot_send_is_a_topology_error(switch8):
    keep = np.ones(switch8.nlinks, bool)
    keep[3] = False                                    # rank 3's up link to the switch
    with pytest.raises(TopologyError, match="rank 3"):
        check_connected(_without(switch8, keep))


def test_spines_spread_flows_between_leaves_by_a_deterministic_hash():
    from hcclsim.network.config import load_topology
    one = load_topology("two-tier-128", ["scale_out.leaf_size=32"])
    four = load_topology("two-tier-128", ["scale_out.leaf_size=32", "scale_out.spines=4"])
    assert four.nlinks == one.nlinks + 2 * 4 * 3                  # 4 leaves: 3 more uplinks and downlinks each
    spines = {four.route(s, d)[1] for s in range(32) for d in range(32, 128) if s // 8 != d // 8}
    assert len(spines) == 4                                         # flows from leaf 0 use every spine
    assert four.route(3, 77) == four.route(3, 77)
    up = four.route(3, 77)[1]
    assert four.link_bw[up] == pytest.approx(32 * 50e9 / 4)
    with pytest.raises(ConfigError, match="only a fat_tree scale-out has spines"):
        load_topology("h100-cluster", ["scale_out.spines=2"])
