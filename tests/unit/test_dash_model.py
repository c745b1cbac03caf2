"""The JSON the dash page consumes (mrc.dash.model), from plain data."""

import pytest

from mrc.dash import model
from mrc.fabric.topology import Topology

T = Topology(name="dm", planes=2, spines=2, leaves=2, hosts=4)


def test_layout_has_every_node_and_link_with_its_tier():
    lay = model.layout(T)
    kinds = [n["kind"] for n in lay["nodes"]]
    assert kinds.count("host") == 4 and kinds.count("t1") == 4 and kinds.count("t0") == 4
    assert len(lay["links"]) == len(T.links()) == 2 * (4 + 2 * 2)
    tiers = {ln["id"]: ln["tier"] for ln in lay["links"]}
    assert tiers["h0-p0l0"] == "host-t0" and tiers["p1l1-p1s0"] == "t0-t1"


def _c(up=True, rx=0, tx=0):
    return {"up": up, "rx_bytes": rx, "tx_bytes": tx, "rx_packets": 0, "tx_packets": 0}


def test_link_view_reads_direction_state_and_load_from_the_leaf_end():
    # h0's plane-0 link ends at p0l0's interface h0; p0l0-p0s1 at p0l0's s1
    prev = {"p0l0": {"h0": _c(), "s1": _c(), "s0": _c()}}
    now = {"p0l0": {"h0": _c(rx=1_250_000_000, tx=125_000_000), "s1": _c(tx=250_000_000, rx=0),
                    "s0": _c(up=False)}}
    faults = {"h1-p0l0": {"loss": 5.0}, "p0l0-p0s1": {"rate": 4_000_000_000}}
    v = model.link_view(T, faults, prev, now, 1.0)
    assert v["h0-p0l0"]["state"] == "up"
    assert v["h0-p0l0"]["up_gbps"] == 10.0 and v["h0-p0l0"]["down_gbps"] == 1.0  # host -> leaf is up
    assert v["p0l0-p0s1"]["state"] == "limited" and v["p0l0-p0s1"]["up_gbps"] == 2.0
    assert v["p0l0-p0s1"]["load"] == 0.5 and v["p0l0-p0s1"]["capacity_bps"] == 4_000_000_000
    assert v["p0l0-p0s0"]["state"] == "down"          # the interface is not up
    assert v["h1-p0l0"]["state"] == "lossy" and v["h1-p0l0"]["loss"] == 5.0
    assert v["p1l0-p1s0"]["state"] == "unknown" and v["p1l0-p1s0"]["up_gbps"] is None  # never read
    assert v["h0-p0l0"]["load"] is None                # no capacity known: no load fraction
    # a failed link is down even while its counters still read up
    assert model.link_view(T, {"h0-p0l0": {"down": True}}, prev, now, 1.0)["h0-p0l0"]["state"] == "down"
    # a queue's rate is a capacity too
    q = model.link_view(T, {}, prev, now, 1.0, {"p0l0/h0": {"rate_bps": 20_000_000_000}})
    assert q["h0-p0l0"]["load"] == 0.5


def test_rates_per_plane_and_host_come_from_the_host_links():
    links = {ln.name: {"up_gbps": 0.0, "down_gbps": 0.0} for ln in T.links()}
    links["h0-p0l0"] = {"up_gbps": 3.0, "down_gbps": 0.5}
    links["h0-p1l0"] = {"up_gbps": 1.0, "down_gbps": 0.0}
    links["p0l0-p0s0"] = {"up_gbps": 9.0, "down_gbps": 9.0}  # not a host link: not counted twice
    planes, hosts = model.plane_host_rates(T, links)
    assert planes == [3.0, 1.0]
    assert hosts["h0"] == {"tx": 4.0, "rx": 0.5} and hosts["h3"] == {"tx": 0.0, "rx": 0.0}


def test_path_links_follow_the_address_plan():
    addr = T.path_address(0, 3, plane=1, spine=1)
    got = model.path_links(T, "h0", addr)
    assert got == ["h0-p1l0", "p1l0-p1s1", "p1l1-p1s1", "h3-p1l1"]
    assert set(got) <= {ln.name for ln in T.links()}
    assert model.path_links(T, None, addr) == got[1:]
    assert model.path_links(T, "h0", "2001:db8::1") == [] and model.path_links(T, "h0", None) == []
    assert model.path_links(T, "h0", "fc00:0:b001::") == []  # a port address, not a path


def test_ev_grid_rows_by_plane_and_counts():
    evs = [{"ev": 1, "plane": 1, "entropy": 1, "state": "GOOD", "active": True},
           {"ev": 2, "plane": 0, "entropy": 2, "state": "ASSUMED_BAD", "active": False},
           {"ev": 3, "plane": 0, "entropy": 0, "state": "GOOD", "active": True},
           {"ev": 4, "plane": 5, "entropy": 0, "state": "DENIED", "active": False}]  # beyond the planes
    g = model.ev_grid(evs, 2)
    assert g["rows"] == [[[0, "GOOD", True], [2, "ASSUMED_BAD", False]], [[1, "GOOD", True]]]
    assert g["counts"]["GOOD"] == 2 and g["counts"]["ASSUMED_BAD"] == 1 and g["counts"]["DENIED"] == 1


def test_check_fault_accepts_what_mrc_fabric_does():
    assert model.check_fault(T, {"op": "fail", "target": "p0l0-p0s1"}) == {"op": "fail", "target": "p0l0-p0s1"}
    assert model.check_fault(T, {"op": "fail", "target": "p1s0"})["target"] == "p1s0"
    assert model.check_fault(T, {"op": "heal", "target": "all"}) == {"op": "heal", "target": None}
    assert model.check_fault(T, {"op": "loss", "target": "h0-p0l0", "arg": 2.5})["arg"] == 2.5
    assert model.check_fault(T, {"op": "rate", "target": "h0-p0l0", "arg": "500mbit"})["arg"] == "500mbit"
    f = model.check_fault(T, {"op": "flap", "target": "p0l0-p0s0", "period": 0.5, "duration": 3})
    assert f == {"op": "flap", "target": "p0l0-p0s0", "period": 0.5, "duration": 3.0}


@pytest.mark.parametrize("req, words", [
    ([1, 2], "JSON object"),
    ({"op": "reboot", "target": "p0s0"}, "unknown fault"),
    ({"op": "fail", "target": "p9s9"}, "a link or a switch"),
    ({"op": "fail", "target": "h0"}, "a link or a switch"),          # hosts are not faulted here
    ({"op": "fail", "target": None}, "a link or a switch"),
    ({"op": "loss", "target": "p0s0", "arg": 5}, "needs a link"),     # loss and flap take links only
    ({"op": "loss", "target": "h0-p0l0", "arg": 101}, "percentage"),
    ({"op": "loss", "target": "h0-p0l0", "arg": True}, "percentage"),
    ({"op": "loss", "target": "h0-p0l0", "arg": "5"}, "percentage"),
    ({"op": "rate", "target": "h0-p0l0", "arg": "fast"}, "rate such as"),
    ({"op": "rate", "target": "h0-p0l0", "arg": "infg"}, "rate such as"),
    ({"op": "rate", "target": "h0-p0l0", "arg": "0"}, "rate such as"),
    ({"op": "rate", "target": "h0-p0l0", "arg": "1" * 40}, "rate such as"),
    ({"op": "flap", "target": "p0l0-p0s0", "period": 0}, "period"),
    ({"op": "flap", "target": "p0l0-p0s0", "duration": 1e9}, "duration"),
    ({"op": "heal", "target": "all; rm -rf /"}, "a link or a switch"),
])
def test_check_fault_refuses_with_a_reason(req, words):
    with pytest.raises(ValueError, match=words):
        model.check_fault(T, req)


@pytest.mark.parametrize("header, bind, ok", [
    ("127.0.0.1:8080", "127.0.0.1", True),
    ("localhost:8080", "127.0.0.1", True),
    ("[::1]:8080", "127.0.0.1", True),
    ("localhost", "127.0.0.1", False),                # no port: 80, not this one
    ("127.0.0.1:9999", "127.0.0.1", False),           # another port
    ("evil.example:8080", "127.0.0.1", False),        # a stranger's name rebound to this machine
    ("10.1.2.3:8080", "127.0.0.1", False),            # bound to loopback: no other address
    ("10.1.2.3:8080", "0.0.0.0", True),               # bound to all: any address literal
    ("[fd00::5]:8080", "::", True),
    ("evil.example:8080", "0.0.0.0", False),          # but never a name
    ("10.1.2.3:8080", "10.1.2.3", True),
    ("10.1.2.4:8080", "10.1.2.3", False),
    ("", "127.0.0.1", False),
    ("127.0.0.1:8080@evil", "127.0.0.1", False),
    ("127.0.0.1:80800", "127.0.0.1", False),
])
def test_the_host_header_must_name_this_server(header, bind, ok):
    from mrc.dash.server import host_allowed

    assert host_allowed(header, bind, 8080) is ok


GOOD_QP = {k: 1 for k in model.QP_NUMBERS} | {"state_name": "RTS", "extra": "<script>"}


def test_qp_rows_and_ev_events_keep_only_checked_fields():
    assert model.qp_row(GOOD_QP) == {k: 1 for k in model.QP_NUMBERS} | {"state_name": "RTS"}
    e = model.ev_event({"qpn": 5, "ev": 0x10002, "old": "GOOD", "new": "ASSUMED_BAD", "address": "fc00:0:1::",
                        "junk": [1]})
    assert e == {"qpn": 5, "ev": 0x10002, "old": "GOOD", "new": "ASSUMED_BAD", "address": "fc00:0:1::"}


@pytest.mark.parametrize("bad", [
    GOOD_QP | {"cwnd": "1"}, GOOD_QP | {"cwnd": True}, GOOD_QP | {"cwnd": 1.5}, GOOD_QP | {"state_name": "<b>x</b>"},
    GOOD_QP | {"state_name": None}, {k: v for k, v in GOOD_QP.items() if k != "qpn"}, [], "x",
])
def test_a_qp_row_that_is_not_one_is_refused(bad):
    with pytest.raises((ValueError, KeyError, TypeError)):
        model.qp_row(bad)


@pytest.mark.parametrize("bad", [
    {"qpn": 1, "ev": "2", "old": "GOOD", "new": "GOOD"},
    {"qpn": 1, "ev": 2, "old": "GOOD", "new": "<img src=x>"},
    {"qpn": 1, "ev": 2, "old": "GOOD", "new": "GOOD", "address": "x" * 65},
    {"qpn": 1, "ev": 2, "old": "GOOD", "new": "GOOD", "address": 7},
    {"qpn": 1, "old": "GOOD", "new": "GOOD"}, None,
])
def test_an_ev_event_that_is_not_one_is_refused(bad):
    with pytest.raises((ValueError, KeyError, TypeError)):
        model.ev_event(bad)


def test_an_ev_grid_of_nonsense_is_refused():
    with pytest.raises((ValueError, KeyError, TypeError)):
        model.ev_grid([{"plane": "0", "entropy": 1, "state": "GOOD"}], 2)
    with pytest.raises((ValueError, KeyError, TypeError)):
        model.ev_grid([{"plane": 0, "entropy": 1, "state": "<x>"}], 2)
