import ipaddress

import pytest

from mrc.errors import UsageError
from mrc.fabric.topology import Topology, container, usid


def small():
    return Topology(planes=2, spines=2, leaves=2, hosts=2, name="t")


def test_usid_layout_kind_plane_index():
    assert usid(0x1, 3, 1) == 0x1301
    assert usid(0x2, 15, 255) == 0x2FFF
    assert usid(0xB, 0, 7) == 0xB007


def test_container_is_block_then_usids():
    assert container([0x1000, 0x2001, 0x1001, 0xB002]) == "fc00:0:1000:2001:1001:b002::"
    with pytest.raises(ValueError):
        container([1] * 7)


def test_path_address_goes_t0_t1_t0_host():
    t = Topology()
    # host 0 is under leaf 0, host 3 under leaf 1 (4 hosts over 2 leaves)
    assert t.host_leaf(0) == 0 and t.host_leaf(3) == 1
    assert t.path_address(0, 3, plane=5, spine=2) == "fc00:0:1500:2502:1501:b503::"
    assert t.path_address("h0", "h3", 5, 2) == t.path_address(0, 3, 5, 2)


def test_after_all_shifts_the_host_port_address_remains():
    t = Topology()
    for p in t.paths()[:50]:
        value = int(ipaddress.IPv6Address(p["address"]))
        # three shifts of 16 bits inside the 96 bits after the block
        after = value
        for _ in range(3):
            head = after >> 96
            rest = (after << 16) & ((1 << 96) - 1)
            after = (head << 96) | rest
        assert str(ipaddress.IPv6Address(after)) == t.port_address(t.host_index(p["dst"]), p["plane"])


def test_paths_cover_every_src_dst_plane_spine_once():
    t = Topology()
    paths = t.paths()
    assert len(paths) == 4 * 3 * 8 * 4
    # the address names the source's leaf, not the source host itself
    keys = {(t.host_leaf(t.host_index(p["src"])), p["dst"], p["plane"], p["spine"]) for p in paths}
    assert len({p["address"] for p in paths}) == len(keys)
    assert {"src", "dst", "plane", "spine", "address"} <= set(paths[0])


def test_decode_address_inverts_the_plan():
    t = Topology()
    d = t.decode_address(t.path_address(1, 2, 6, 3))
    assert d == {"plane": 6, "hops": ["p6l0", "p6s3", "p6l1"], "host": "h2"}
    with pytest.raises(ValueError):
        t.decode_address("2001:db8::1")


def test_hosts_spread_over_leaves():
    t = Topology(hosts=5, leaves=2)
    assert [t.host_leaf(h) for h in range(5)] == [0, 0, 0, 1, 1]
    assert all(t.hosts_of_leaf(leaf) for leaf in range(2))


def test_links_named_lower_upper_and_counted():
    t = small()
    names = [link.name for link in t.links()]
    assert len(names) == 2 * (2 + 2 * 2)
    assert "h0-p0l0" in names and "p1l1-p1s0" in names
    assert t.link("p0l0-p0s1").plane == 0
    assert {link.name for link in t.links_of("p0s1")} == {"p0l0-p0s1", "p0l1-p0s1"}


@pytest.mark.parametrize("kw,msg", [
    (dict(planes=0), "planes=0"),
    (dict(planes=17), "planes=17"),
    (dict(spines=300), "spines=300"),
    (dict(hosts=1, leaves=1), "at least 2 hosts"),
    (dict(hosts=2, leaves=3), "every leaf needs"),
    (dict(name="Bad-Name"), "not valid"),
    (dict(name="waytoolongname"), "not valid"),
])
def test_impossible_topologies_are_refused_with_a_reason(kw, msg):
    with pytest.raises(UsageError, match=msg):
        Topology(**kw)


def test_unknown_link_and_host_say_what_exists():
    t = small()
    with pytest.raises(UsageError, match="unknown link 'p9l0-p0s0'.*h0-p0l0"):
        t.link("p9l0-p0s0")
    with pytest.raises(UsageError, match="h0..h1"):
        t.path_address(0, 5, 0, 0)
    with pytest.raises(UsageError, match="two different hosts"):
        t.path_address(1, 1, 0, 0)
    with pytest.raises(UsageError, match="unknown spine"):
        t.path_address(0, 1, 0, 2)


def test_interface_names_fit_ifnamsiz():
    t = Topology(planes=16, spines=255, leaves=255, hosts=255)
    assert max(len(n) for n in t.all_ifnames()) <= 15


def test_kernel_addresses_distinct_per_host_and_plane():
    t = Topology()
    inner = {t.inner_address(h, p) for h in range(t.hosts) for p in range(t.planes)}
    assert len(inner) == t.hosts * t.planes
    kp = t.kernel_path_address(0, 2, 1)
    assert kp.endswith(":d6:0") and kp.startswith("fc00:0:1100:")
