"""Root tests: the control endpoint and `mrc ctl` against real connections
on a fabric (deny and allow EVs, events on a cut and heal, port admin, CC,
privilege)."""
import ctypes
import errno
import json
import os
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
import threading
import time

import pytest

from mrc.core import EV_STATE_CODES
from mrc.ctl import endpoint
from mrc.ctl.endpoint import ControlClient, ControlServer
from mrc.ctl.sockets import CAP_NET_ADMIN, peer_privileged
from mrc.errors import ErrnoError
from mrc.fabric import apply
from mrc.fabric.pair import connect_pair, host_context
from mrc.verbs import QPAttr
from mrc.wire import ev_make, ev_plane
from tests.waiting import wait_for

pytestmark = pytest.mark.root


@pytest.fixture
def ctl(fabric, monkeypatch):
    """A connected QP pair h0 -> h1 with a control endpoint on h0's context
    (in a directory of its own that every user can reach, as /run/mrc/ctl is)."""
    os.makedirs("/run/mrc", mode=0o755, exist_ok=True)
    d = tempfile.mkdtemp(prefix="ctl-test-", dir="/run/mrc")
    os.chmod(d, 0o755)
    monkeypatch.setenv("MRC_CTL_DIR", d)
    t = fabric
    ca = host_context(t, 0)
    cb = host_context(t, 1)
    p = connect_pair(ca, cb, 64 << 20, QPAttr(probe_interval_ns=100_000))
    srv = ControlServer(ca)
    try:
        yield t, ca, cb, p.qa, p.ms, p.remote, srv, p.src, p.dst
    finally:
        srv.close()
        ca.close()
        cb.close()
        apply.heal(t.name, None)
        shutil.rmtree(d, ignore_errors=True)


def mrc_ctl(srv, *args, check=True):
    r = subprocess.run([sys.executable, "-m", "mrc", "ctl", "--endpoint", srv.path, "--json", *args],
                       capture_output=True, text=True, timeout=30)
    if check:
        assert r.returncode == 0, r.stderr
    return r


def spine_packets(t, spine):
    """MRC packets a spine forwarded, from its interfaces' counters."""
    from pyroute2 import IPRoute

    total = 0
    with IPRoute(netns=t.ns(spine)) as ipr:
        for link in ipr.get_links():
            if link.get("IFLA_IFNAME") != "lo":
                total += link.get("IFLA_STATS64")["tx_packets"]
    return total


def write(ca, qa, ms, ib, size, wr_id=1, timeout=60):
    qa.post_write(ms, 0, size, ib.addr, ib.rkey, wr_id=wr_id)
    wc = qa.send_cq.wait(1, timeout=timeout)
    assert wc[0].ok, wc[0].status_name


def test_ev_list_shows_every_ev_with_its_path(ctl):
    t, ca, cb, qa, ms, ib, srv, *_ = ctl
    r = json.loads(mrc_ctl(srv, "ev", "list").stdout)
    assert r["qpn"] == qa.qpn and len(r["evs"]) == len(qa.evs())
    paths = {a for p in range(t.planes) for a in (t.path_address(0, 1, p, s) for s in range(t.spines))}
    assert {e["address"] for e in r["evs"]} == paths
    assert all(e["state"] == "GOOD" for e in r["evs"])


def test_qp_shows_the_window_and_the_rtts_nscc_works_with(ctl):
    t, ca, cb, qa, ms, ib, srv, *_ = ctl
    write(ca, qa, ms, ib, 8 << 20)
    r = json.loads(mrc_ctl(srv, "qp").stdout)
    (q,) = r["qps"]
    st = qa.stats()
    assert q["qpn"] == qa.qpn and q["state_name"] == "RTS" and q["cwnd"] == st["cwnd"] > 0
    assert 0 < q["min_rtt_ns"] <= q["srtt_ns"] * 4  # samples were taken
    cfg = ca.cc_config()["base_rtt"]
    # the configured base, or the lowest RTT when that is over 4 x the configured (a slower fabric)
    assert q["base_rtt_ns"] == (cfg if q["min_rtt_ns"] <= 4 * cfg else q["min_rtt_ns"])
    plain = subprocess.run([sys.executable, "-m", "mrc", "ctl", "--endpoint", srv.path, "qp"],
                           capture_output=True, text=True, timeout=30)
    assert plain.returncode == 0 and str(qa.qpn) in plain.stdout and "base us" in plain.stdout


def test_metrics_are_scraped_over_http_and_parse_with_prometheus_clients_parser(ctl):
    """`mrc ctl metrics --listen` serves every context's counters; a scrape
    reads the QP's packets and losses, its EVs by plane, the ports and drops."""
    import socket as socketlib
    import urllib.request

    from prometheus_client.parser import text_string_to_metric_families

    t, ca, cb, qa, ms, ib, srv, *_ = ctl
    write(ca, qa, ms, ib, 8 << 20)
    with socketlib.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    token = os.path.join(os.environ["MRC_CTL_DIR"], "token")
    with open(token, "w") as f:
        f.write("m" * 20)
    proc = subprocess.Popen([sys.executable, "-m", "mrc", "ctl", "metrics", "--listen", f"127.0.0.1:{port}",
                             "--token-file", token], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert f"http://127.0.0.1:{port}/metrics" in proc.stdout.readline()
        req = urllib.request.Request(f"http://127.0.0.1:{port}/metrics",
                                     headers={"Authorization": "Bearer " + "m" * 20})
        with urllib.request.urlopen(req, timeout=10) as r:
            text = r.read().decode()
    finally:
        proc.terminate()
        proc.wait(10)
    got = {}
    for fam in text_string_to_metric_families(text):
        for smp in fam.samples:
            got.setdefault(smp.name, []).append((smp.labels, smp.value))
    st = qa.stats()
    mine = [(lab, v) for lab, v in got["mrc_qp_sent_packets_total"] if lab["qpn"] == str(qa.qpn)
            and lab["pid"] == str(os.getpid())]
    assert len(mine) == 1 and st["tx_packets"] <= mine[0][1] + 16 and mine[0][1] > 0
    assert {lab["host"] for lab, _ in mine} == {"h0"}
    planes = {lab["plane"] for lab, v in got["mrc_qp_evs"] if lab["qpn"] == str(qa.qpn) and v > 0}
    assert planes == {str(p) for p in range(t.planes)}
    assert {lab["port"] for lab, v in got["mrc_port_up"] if lab["pid"] == str(os.getpid()) and v == 1} == \
        {f"p{p}" for p in range(t.planes)}
    assert {lab["reason"] for lab, _ in got["mrc_dropped_packets_total"]} >= {"icrc", "rkey"}
    assert got["mrc_scrape_errors_total"] == [({}, 0.0)]


def test_a_denied_path_is_never_used_and_allow_restores_it(ctl):
    t, ca, cb, qa, ms, ib, srv, *_ = ctl
    bad = t.path_address(0, 1, 1, 0)  # plane 1 through spine p1s0
    r = json.loads(mrc_ctl(srv, "ev", "deny", "--path", bad).stdout)
    assert r["state"] == "DENIED" and r["evs"]
    assert all(e["state"] == "DENIED" for e in qa.evs() if ca.ev_address(qa, e["ev"]) == bad)
    s0, s1 = t.spine(1, 0), t.spine(1, 1)
    before = spine_packets(t, s0), spine_packets(t, s1)
    from mrc.fabric.capture import Capture

    pcap = os.path.join(os.path.dirname(srv.path), "s0.pcap")
    with Capture(t.name, s0, pcap):
        write(ca, qa, ms, ib, 32 << 20)
        time.sleep(0.2)  # a grace period for stragglers to show up (an absence cannot be polled for)
    after = spine_packets(t, s0), spine_packets(t, s1)
    plane1 = (32 << 20) // qa.attr_mtu // t.planes
    assert after[1] - before[1] > plane1 // 2  # the other spine of plane 1 carried the plane's share
    assert after[0] - before[0] < 20, after[0] - before[0]  # neighbour discovery at most, no MRC
    from scapy.all import rdpcap

    assert len(rdpcap(pcap)) == 0  # tcpdump on the denied path's spine saw no MRC packet
    # allow it again: the spine carries its share once more
    mrc_ctl(srv, "ev", "allow", "--path", bad)
    b0 = spine_packets(t, s0)
    write(ca, qa, ms, ib, 32 << 20, wr_id=2)
    assert spine_packets(t, s0) - b0 > plane1 // 4


def test_events_follow_a_cut_and_a_heal(ctl):
    t, ca, cb, qa, ms, ib, srv, *_ = ctl
    link = f"{t.leaf(1, 0)}-{t.spine(1, 1)}"
    via = t.path_address(0, 1, 1, 1)
    qa.post_write(ms, 0, 64 << 20, ib.addr, ib.rkey, wr_id=1)
    wait_for(lambda: qa.stats()["tx_bytes"] >= 8 << 20, 30, 0.001, what="8 MiB going out")
    apply.fail(t.name, link)
    # the cut is felt: some EV on the path leaves GOOD (or the transfer ends first)
    wait_for(lambda: qa.stats()["losses"] + qa.stats()["timeouts"] or qa.stats()["una_psn"] == qa.stats()["next_psn"],
             10, 0.001, what="the cut being felt")
    apply.heal(t.name, link)
    assert qa.send_cq.wait(1, timeout=60)[0].ok
    # keep traffic going so probes see the path answer again (a probe that failed while the link
    # was down backs off, so give it seconds, not a count of writes that may all end sooner)
    deadline, i = time.monotonic() + 15, 0
    while time.monotonic() < deadline:
        evs = [e for e in qa.evs() if ca.ev_address(qa, e["ev"]) == via]
        if all(e["state"] == "GOOD" for e in evs):
            break
        write(ca, qa, ms, ib, 8 << 20, wr_id=10 + i)
        i += 1
    lines = mrc_ctl(srv, "events").stdout.splitlines()
    events = [json.loads(x) for x in lines if '"seq"' in x]
    on_path = [e for e in events if e["address"] == via]
    bad = [e for e in on_path if e["new"] == "ASSUMED_BAD"]
    assert bad, events
    first_bad = bad[0]["seq"]
    assert any(e["new"] == "GOOD" and e["seq"] > first_bad for e in on_path), on_path
    # (other paths may see a spurious ASSUMED_BAD too: on 2 shared CPUs a
    # descheduled thread looks like a loss; they come back the same way)
    assert all(e["dropped"] == 0 for e in events)


def test_probe_a_dead_path_times_out_and_a_live_one_returns_an_rtt(ctl):
    t, ca, cb, qa, ms, ib, srv, *_ = ctl
    cut = t.path_address(0, 1, 1, 1)  # plane 1 through its second spine
    # every path answers on a healthy fabric, on the plane it was sent on
    r = json.loads(mrc_ctl(srv, "probe", "--all-paths").stdout)
    assert len(r["probes"]) == t.planes * t.spines
    assert {p["address"] for p in r["probes"]} == {t.path_address(0, 1, p, s) for p in range(t.planes)
                                                  for s in range(t.spines)}
    for p in r["probes"]:
        assert p["status"] == "ok", p
        assert p["port"] == ev_plane(p["ev"])
        assert 0 < p["rtt_ns"] < 100_000_000
    apply.fail(t.name, f"{t.leaf(1, 0)}-{t.spine(1, 1)}")
    try:
        r = json.loads(mrc_ctl(srv, "probe", ib.ports[1], "--all-paths", "--timeout-ms", "200",
                               check=False).stdout)
        by_addr = {p["address"]: p for p in r["probes"]}
        assert by_addr[cut]["status"] == "timeout" and by_addr[cut]["rtt_ns"] is None
        assert all(p["status"] == "ok" for a, p in by_addr.items() if a != cut), by_addr
        # the table a person reads: plane 1's second path says timeout, the rest RTTs
        text = subprocess.run([sys.executable, "-m", "mrc", "ctl", "--endpoint", srv.path, "probe", "--all-paths",
                               "--timeout-ms", "200"], capture_output=True, text=True, timeout=30).stdout
    finally:
        apply.heal(t.name, None)
    print(text)  # docs/ctl.md shows this table (pytest -s)
    rows = {int(line.split()[0]): line.split()[1:] for line in text.splitlines() if line[:1].isdigit()}
    assert rows[1][1] == "timeout" and rows[1][0].endswith("us"), text
    assert all(c.endswith("us") for p, row in rows.items() if p != 1 for c in row), text
    # healed: it answers again (routes come back with the link)
    plane1 = [(qa.peer, ev_make(1, e)) for e in range(t.spines)]
    wait_for(lambda: all(x["status"] == "ok" for x in ca.probe(plane1, timeout=0.2)), 10,
             what="every path of plane 1 answering")
    # a probe to a peer the context does not know is refused, not sent
    bad = ca.probe([(qa.peer + 7, 0)], timeout=0.05)
    assert bad[0]["status"] == "unreachable"
    r = mrc_ctl(srv, "probe", "fc00:dead::1", check=False)
    assert r.returncode != 0 and "no peer" in r.stderr


def test_port_down_stops_the_plane_and_up_restores_it(ctl):
    t, ca, cb, qa, ms, ib, srv, *_ = ctl
    r = json.loads(mrc_ctl(srv, "port", "down", "2").stdout)
    assert r == {"plane": 2, "admin": "DISABLED"}
    e = ca.get_async_event(2)
    assert e is not None and (e.type, e.info) == ("PORT_ERR", 2), e
    sent = qa.stats()["plane_tx"][2]
    write(ca, qa, ms, ib, 16 << 20)
    assert qa.stats()["plane_tx"][2] == sent
    mrc_ctl(srv, "port", "up", "2")
    write(ca, qa, ms, ib, 16 << 20, wr_id=2)
    assert qa.stats()["plane_tx"][2] > sent
    info = ControlClient(srv.path).call("info")
    assert all(p["admin"] == "ENABLED" for p in info["ports"])


def test_cc_set_applies_to_new_qps_and_rejects_unknown_parameters(ctl):
    t, ca, cb, qa, ms, ib, srv, *_ = ctl
    r = json.loads(mrc_ctl(srv, "cc", "set", "max_cwnd=300000", "target_delay=50000").stdout)
    assert r["profile"]["state"] == "ONLINE" and r["effective"]["max_cwnd"] == 300000
    assert ca.create_qp().attr.cc["max_cwnd"] == 300000
    bad = mrc_ctl(srv, "cc", "set", "bogus=1", check=False)
    assert bad.returncode == 2 and "unknown NSCC parameter" in bad.stderr and "Traceback" not in bad.stderr
    shown = json.loads(mrc_ctl(srv, "cc", "show").stdout)
    assert shown["effective"]["target_delay"] == 50000 and shown["profile"]["algorithm"] == "uet-1.0-nscc"


def test_qps_bound_to_ev_and_cc_profiles_follow_them_and_hold_them_until_destroyed(ctl):
    """create_qp(ev_profile_id=, cc_profile_id=): the QP runs the CC profile's
    parameters and sprays over the EV profile's paths, a path the profile
    denies carries nothing (its spine's counters), allowing it brings it
    back; while the QP lives neither profile can go OFFLINE."""
    from mrc.ctl.profiles import CCProfile, srv6_address
    from mrc.fabric.profiles import srv6_from_fabric

    t, ca, cb, qa, ms, ib, srv, *_ = ctl
    prof = srv6_from_fabric(t, 0, 1, pid=4)
    bad = t.path_address(0, 1, 1, 0)  # plane 1 through spine p1s0
    value = next(e.value for e in prof.entries if srv6_address(e.value, prof.fmt.width) == bad)
    prof.set_ev_state(value, "DENIED")
    ca.profiles.add(prof.fmt).online()
    ca.profiles.add(prof).online()
    cc = ca.profiles.add(CCProfile(2, "uet-1.0-nscc", {"max_cwnd": 300_000, "md_by_sample": 1}))
    with pytest.raises(ErrnoError) as e:
        ca.create_qp(cc_profile_id=2)  # still OFFLINE
    assert e.value.errno == errno.EINVAL
    cc.online()
    with pytest.raises(ErrnoError) as e:
        ca.create_qp(ev_profile_id=99)
    assert e.value.errno == errno.ENOENT
    q = ca.create_qp(ev_profile_id=4, cc_profile_id=2)
    assert q.attr.cc["max_cwnd"] == 300_000 and q.attr.cc["md_by_sample"] == 1 and (prof.users, cc.users) == (1, 1)
    qr = cb.create_qp()
    md = cb.reg_mr(bytearray(32 << 20), remote_write=True)
    info = cb.local_info(qr, md)
    qr.connect(ca.local_info(q, ms))
    q.connect(info)
    states = {e["ev"]: e["state"] for e in q.evs()}
    on_bad = [ev for ev in states if ca.ev_address(q, ev) == bad]
    assert on_bad and all(states[ev] == "DENIED" for ev in on_bad)
    assert all(st == "GOOD" for ev, st in states.items() if ev not in on_bad)
    s0 = t.spine(1, 0)
    b0 = spine_packets(t, s0)
    write(ca, q, ms, info, 32 << 20)
    assert spine_packets(t, s0) - b0 < 20  # neighbour discovery at most, no MRC
    prof.set_ev_state(value, "GOOD")  # the bound QP follows the profile at once
    assert all(e["state"] == "GOOD" for e in q.evs() if e["ev"] in on_bad)
    b0 = spine_packets(t, s0)
    write(ca, q, ms, info, 32 << 20, wr_id=2)
    assert spine_packets(t, s0) - b0 > (32 << 20) // q.attr_mtu // t.planes // 4
    for p in (prof, cc):
        with pytest.raises(ErrnoError) as e:
            p.offline()
        assert e.value.errno == errno.EBUSY
    q.destroy()
    assert (prof.users, cc.users) == (0, 0)
    prof.offline()
    cc.offline()


def _drop_to_nobody(cap_net_admin: bool = False) -> None:
    """In a child: become user and group nobody, keeping CAP_NET_ADMIN if asked."""
    libc = ctypes.CDLL(None, use_errno=True)
    os.setgroups([])
    os.setgid(65534)
    if cap_net_admin:
        libc.prctl(8, 1, 0, 0, 0)  # PR_SET_KEEPCAPS: the permitted set survives setuid
    os.setuid(65534)
    if cap_net_admin:
        hdr = (ctypes.c_uint32 * 2)(0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3, this process
        data = (ctypes.c_uint32 * 6)(1 << CAP_NET_ADMIN, 1 << CAP_NET_ADMIN, 0, 0, 0, 0)
        assert libc.capset(hdr, data) == 0, ctypes.get_errno()


def _as_nobody(path, op, cap_net_admin=False, **args):
    """Call the endpoint from a child process running as user nobody."""
    rfd, wfd = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: drop to nobody, call, report, exit
        try:
            os.close(rfd)
            _drop_to_nobody(cap_net_admin)
            try:
                out = {"ok": True, **ControlClient(path).call(op, **args)}
            except ErrnoError as e:
                out = {"ok": False, "errno": e.errno, "error": str(e)}
            os.write(wfd, json.dumps(out).encode())
        finally:
            os._exit(0)
    os.close(wfd)
    with os.fdopen(rfd) as f:
        data = f.read()
    os.waitpid(pid, 0)
    return json.loads(data)


def test_the_control_socket_is_its_owners_alone_unless_a_group_is_named(ctl):
    """Finding 10: mode 0600 by default (another user cannot even connect);
    with a group, 0660: its members may query but not modify."""
    t, ca, cb, qa, ms, ib, srv, *_ = ctl
    st = os.lstat(srv.path)
    assert stat.S_ISSOCK(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o600 and st.st_uid == os.geteuid()
    r = _as_nobody(srv.path, "info")
    assert r["ok"] is False and r["errno"] == errno.EPERM, r
    with ControlServer(ca, path=os.path.join(os.path.dirname(srv.path), "group.sock"), group=65534) as g:
        st = os.lstat(g.path)
        assert stat.S_IMODE(st.st_mode) == 0o660 and st.st_gid == 65534
        ev = qa.evs()[0]["ev"]
        r = _as_nobody(g.path, "ev_set", ev=ev, state="DENIED")
        assert r["ok"] is False and r["errno"] == errno.EPERM and "root or CAP_NET_ADMIN" in r["error"], r
        assert qa.evs()[0]["state"] == "GOOD"  # nothing changed
        for op, args in (("port", {"plane": 1, "up": False}), ("cc_set", {"config": {"eta": 1}})):
            assert _as_nobody(g.path, op, **args)["errno"] == errno.EPERM
        assert ca.cc_overrides == {}
        r = _as_nobody(g.path, "ev_list")
        assert r["ok"] and len(r["evs"]) == len(qa.evs())
        # CAP_NET_ADMIN without root may modify, as the node's controller may
        r = _as_nobody(g.path, "ev_set", cap_net_admin=True, ev=ev, state="DENIED")
        assert r["ok"], r
        assert qa.evs()[0]["state"] == "DENIED"
        qa.set_ev_state(ev, EV_STATE_CODES["GOOD"])


def test_privilege_is_read_from_the_process_that_connected_while_it_lives(ctl):
    """The capability check follows a pidfd of the connecting process: alive
    with CAP_NET_ADMIN it counts; once that process has exited, its PID
    proves nothing (another process could have it by now)."""
    path = os.path.join(os.path.dirname(ctl[6].path), "p.sock")  # a directory every user can reach
    lst = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    lst.settimeout(10)
    lst.bind(path)
    os.chmod(path, 0o777)
    lst.listen(1)
    go_r, go_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(go_w)
            _drop_to_nobody(cap_net_admin=True)
            c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            c.connect(path)
            os.read(go_r, 1)  # live until told
        finally:
            os._exit(0)
    os.close(go_r)
    conn, _ = lst.accept()
    try:
        assert peer_privileged(conn) is True
        os.write(go_w, b"x")
        os.waitpid(pid, 0)
        assert peer_privileged(conn) is False
    finally:
        conn.close()
        lst.close()
        os.close(go_w)


def test_the_control_socket_is_made_without_following_links_or_trusting_open_directories(ctl, tmp_path):
    t, ca, cb, qa, ms, ib, srv, *_ = ctl
    d = os.path.dirname(srv.path)
    victim = tmp_path / "victim"
    victim.write_text("keep me")
    os.chmod(victim, 0o644)
    link = os.path.join(d, "link.sock")
    os.symlink(victim, link)
    with ControlServer(ca, path=link) as s2:
        assert stat.S_ISSOCK(os.lstat(s2.path).st_mode) and stat.S_IMODE(os.lstat(s2.path).st_mode) == 0o600
        assert stat.S_IMODE(os.stat(victim).st_mode) == 0o644 and victim.read_text() == "keep me"
        assert ControlClient(s2.path).call("info")["qps"] == [qa.qpn]
    assert not [n for n in os.listdir(d) if n.startswith(".bind-")]  # no private directory left behind
    open_dir = tmp_path / "open"
    open_dir.mkdir()
    os.chmod(open_dir, 0o777)
    with pytest.raises(ErrnoError) as e:
        ControlServer(ca, path=str(open_dir / "x.sock"))
    assert e.value.errno == errno.EPERM and "writable by others" in str(e.value)


def _raw(path):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(10)
    s.connect(path)
    return s


def _read_answer(s) -> dict:
    data = b""
    while not data.endswith(b"\n"):
        chunk = s.recv(65536)
        if not chunk:
            break
        data += chunk
    return json.loads(data)


def test_hostile_clients_get_errnos_and_cannot_grow_the_server(ctl):
    """Finding 10: a line without end is cut at 64 KiB (EMSGSIZE), the 17th
    idle connection is turned away (EBUSY), numbers JSON cannot hold and deep
    nesting are EINVAL; the endpoint serves on."""
    t, ca, cb, qa, ms, ib, srv, *_ = ctl
    keep = _raw(srv.path)
    keep.sendall(b'{"op": "info"}\n')
    assert _read_answer(keep)["ok"]
    rss0 = _rss_kib()
    s = _raw(srv.path)
    try:
        s.sendall(b"{" + b" " * (8 << 20))  # 8 MiB, no newline: the server stops reading at 64 KiB
    except OSError:
        pass  # it hung up mid-send: also fine
    ans = _read_answer(s)
    assert ans["ok"] is False and ans["errno"] == errno.EMSGSIZE
    s.close()
    assert _rss_kib() - rss0 < 16 << 10  # not the 8 MiB line, let alone twice
    for req, code in ((b'{"op": "ev_list", "qpn": 1e999}', errno.EINVAL),
                      (b'{"op": "ev_list", "qpn": NaN}', errno.EINVAL),
                      (b'{"op": "probe", "timeout_ms": Infinity}', errno.EINVAL),
                      (b"[" * 30_000 + b"]" * 30_000, errno.EINVAL),
                      (b'{"op": "ev_list", "qpn": [1]}', errno.EINVAL),
                      (b'"info"', errno.EINVAL), (b"\xff\xfe", errno.EINVAL)):
        keep.sendall(req + b"\n")
        ans = _read_answer(keep)
        assert ans["ok"] is False and ans["errno"] == code, (req[:40], ans)
    idle = [_raw(srv.path) for _ in range(endpoint.MAX_CLIENTS - 1)]  # with `keep`: every slot taken
    try:
        extra = _raw(srv.path)
        ans = _read_answer(extra)
        assert ans["ok"] is False and ans["errno"] == errno.EBUSY
        extra.close()
    finally:
        for c in idle:
            c.close()
    keep.sendall(b'{"op": "info"}\n')
    assert _read_answer(keep)["qps"] == [qa.qpn]
    wait_for(lambda: _try_info(srv.path), 5, what="a slot free again")


def _try_info(path) -> bool:
    try:
        return ControlClient(path, timeout=2).call("info")["qps"] is not None
    except ErrnoError:
        return False


def _rss_kib() -> int:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))


def test_closing_a_context_while_a_probe_waits_cancels_the_probe(ctl):
    """Finding 11b: a probe of a dead path waits up to its timeout in C;
    closing the context from another thread ends the wait at once
    (ECANCELED) instead of freeing what the waiting call still reads."""
    t, ca, cb, qa, ms, ib, srv, *_ = ctl
    apply.fail(t.name, f"{t.leaf(1, 0)}-{t.spine(1, 1)}")
    dead = [(qa.peer, ev_make(1, 1))] * 8
    out: dict = {}

    def probe():
        t0 = time.monotonic()
        try:
            out["res"] = ca.probe(dead, timeout=20)
        except ErrnoError as e:
            out["err"] = e
        out["took"] = time.monotonic() - t0

    th = threading.Thread(target=probe)
    th.start()
    time.sleep(0.3)
    t0 = time.monotonic()
    ca.close()
    closed = time.monotonic() - t0
    th.join(5)
    assert not th.is_alive() and closed < 2
    assert out["err"].errno == errno.ECANCELED and out["took"] < 3, out
    with pytest.raises(ErrnoError) as e:
        ca.probe(dead, timeout=1)
    assert e.value.errno == errno.EBADF


def test_bad_requests_get_an_errno_not_a_crash(ctl):
    t, ca, cb, qa, ms, ib, srv, *_ = ctl
    with ControlClient(srv.path) as c:
        for op, args, code in (("nope", {}, 22), ("ev_set", {"ev": 0x7FFFFFFF, "state": "DENIED"}, 2),
                               ("ev_set", {"ev": 0, "state": "ASSUMED_BAD"}, 22), ("ev_list", {"qpn": 999}, 2),
                               ("port", {"plane": 99, "up": True}, 2)):
            with pytest.raises(ErrnoError) as e:
                c.call(op, **args)
            assert e.value.errno == code, (op, e.value)
        assert c.call("info")["qps"] == [qa.qpn]  # the connection still serves
    r = mrc_ctl(srv, "ev", "deny", "9/99999", check=False)
    assert r.returncode == 2 and "bad EV" in r.stderr


def test_a_starting_server_removes_the_sockets_killed_processes_left(ctl):
    t, ca, cb, qa, ms, ib, srv, *_ = ctl
    d = os.path.dirname(srv.path)
    left = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)  # what a killed process leaves: bound, nobody listening
    left.bind(os.path.join(d, "999999999-h0.sock"))
    left.close()
    with ControlServer(ca, path=os.path.join(d, f"{os.getpid()}-second.sock")) as s2:
        assert s2.swept == [os.path.join(d, "999999999-h0.sock")]
        assert sorted(os.listdir(d)) == sorted([os.path.basename(srv.path), os.path.basename(s2.path)])
        assert ControlClient(srv.path).call("info")["qps"] == [qa.qpn]  # the live one was left alone
        # another server's sweep may take the socket once it refuses, between close's look and its unlink
        os.unlink(s2.path)
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(os.path, "exists", lambda p: True)  # it was there when close looked
            s2.close()  # quiet: nothing to remove is no error

