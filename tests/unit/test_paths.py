"""Path resolvers: a topology file (JSON or YAML), its checks, and the
fabric's export, which must answer exactly as the fabric's plan does."""
import json
import os
import subprocess
import sys

import pytest

from mrc.errors import MrcError, UsageError
from mrc.fabric.resolver import export, resolver
from mrc.fabric.topology import Topology
from mrc.paths import PathResolver, TopologyResolver, from_environment, usids

LAB = {"name": "lab", "hosts": {
    "a": {"mgmt": "fd11::a", "ports": [{"plane": 0, "ifname": "eth1", "address": "fd10:0:1::a"},
                                       {"plane": 1, "ifname": "eth2", "address": "fd10:1:1::a"}]},
    "b": {"mgmt": "fd11::b", "ports": [{"plane": 0, "ifname": "ens5", "address": "fd10:0:2::b"},
                                       {"plane": 1, "ifname": "ens6", "address": "fd10:1:2::b"}]}},
    "paths": [{"src": "a", "dst": "b", "plane": 1,
               "addresses": ["fc00:0:1100:2100:b101::", "fc00:0:1100:2101:b101::"]}]}


def test_a_topology_file_names_ports_setup_addresses_and_paths(tmp_path):
    f = tmp_path / "lab.json"
    f.write_text(json.dumps(LAB))
    a = TopologyResolver.from_file(str(f), "a")
    assert (a.name, a.host, a.local_ports()) == ("lab", "a", [("eth1", 0), ("eth2", 1)])
    assert a.mgmt_address("b") == "fd11::b"
    assert a.paths("b", 0) == ["fd10:0:2::b"]  # no paths given: the peer's port address (a routed network)
    assert a.paths("b", 1) == LAB["paths"][0]["addresses"]  # given: those
    assert a.paths("nobody", 0) is None
    assert a.paths_to("b", "lab", [0, 1]) == {0: ["fd10:0:2::b"], 1: LAB["paths"][0]["addresses"]}
    assert a.paths_to("b", "other", [0, 1]) == {}  # a host of another topology: nothing is assumed
    assert a.host_of("fd10:1:2::b") == "b" and a.host_of("2001:db8::1") is None
    b = TopologyResolver.from_file(str(f), "b")
    assert b.local_ports() == [("ens5", 0), ("ens6", 1)] and b.paths("a", 1) == ["fd10:1:1::a"]


def test_yaml_reads_the_same(tmp_path):
    yaml = pytest.importorskip("yaml")
    f = tmp_path / "lab.yaml"
    f.write_text(yaml.safe_dump(LAB))
    y, j = TopologyResolver.from_file(str(f), "a"), TopologyResolver(LAB, "a")
    assert (y.local_ports(), y.paths("b", 1), y.mgmt_address("b")) == (j.local_ports(), j.paths("b", 1),
                                                                       j.mgmt_address("b"))


@pytest.mark.parametrize("change,why", [
    (lambda d: d.pop("hosts"), "'hosts' mapping"),
    (lambda d: d["hosts"]["a"]["ports"][0].update(address="not-an-address"), "not an IPv6 address"),
    (lambda d: d["hosts"]["a"]["ports"][1].update(plane=0), "distinct integer"),
    (lambda d: d["hosts"]["a"]["ports"][0].pop("plane"), "needs 'plane' and 'address'"),
    (lambda d: d["paths"][0].update(dst="c"), "dst 'c' is not a host"),
    (lambda d: d["paths"][0].update(addresses=[]), "1 to 16 destination addresses"),
])
def test_a_bad_topology_says_what_is_wrong(change, why):
    d = json.loads(json.dumps(LAB))
    change(d)
    with pytest.raises(UsageError, match=why):
        TopologyResolver(d, "a")


def test_files_that_cannot_be_read_or_parsed(tmp_path):
    with pytest.raises(UsageError, match="cannot read topology file"):
        TopologyResolver.from_file(str(tmp_path / "missing.json"))
    bad = tmp_path / "bad.json"
    bad.write_text("{")
    with pytest.raises(UsageError, match="not valid JSON"):
        TopologyResolver.from_file(str(bad))
    with pytest.raises(UsageError, match="no host 'zz'"):
        TopologyResolver(LAB, "zz")


def test_the_fabric_export_answers_as_the_fabric_plan():
    t = Topology(planes=3, spines=2, leaves=2, hosts=3, name="ex")
    d = export(t)
    for h in range(t.hosts):
        r = TopologyResolver(json.loads(json.dumps(d)), t.host(h))  # through JSON, as the file is read
        assert r.local_ports() == [(t.port_ifname(p), p) for p in range(t.planes)]
        for o in range(t.hosts):
            assert r.mgmt_address(t.host(o)) == t.mgmt_address(o)
            for p in range(t.planes):
                want = [t.path_address(h, o, p, s) for s in range(t.spines)] if o != h else None
                assert (r.paths(t.host(o), p) if o != h else None) == want
                addr = t.path_address(h, o, p, 1) if o != h else t.port_address(o, p)
                info = t.decode_address(addr)
                assert r.describe(addr) == {"hops": info["hops"], "host": info["host"]}
    assert usids(t.path_address(0, 2, 2, 1), 32) == t.path_usids(0, 2, 2, 1)
    assert resolver(t, "h1").paths("h2", 0) == [t.path_address(1, 2, 0, s) for s in range(t.spines)]


def test_mrc_fabric_topology_prints_the_export(tmp_path, monkeypatch):
    from mrc.fabric import apply

    t = Topology(planes=2, spines=2, leaves=2, hosts=2, name="tx")
    monkeypatch.setattr(apply, "STATE_DIR", str(tmp_path))
    apply.save_state(t)
    env = {**os.environ, "MRC_STATE_DIR": str(tmp_path)}
    r = subprocess.run([sys.executable, "-m", "mrc", "fabric", "topology", "--name", "tx"], capture_output=True,
                       text=True, env=env)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout) == export(t)


def test_without_a_topology_ports_must_be_named(monkeypatch):
    from mrc.verbs import Context

    monkeypatch.delenv("MRC_TOPOLOGY", raising=False)
    plain = from_environment()
    assert type(plain) is PathResolver and plain.local_ports() is None and plain.paths("x", 0) is None
    with pytest.raises(MrcError, match="no MRC ports: name them"):
        Context(resolver=plain)
