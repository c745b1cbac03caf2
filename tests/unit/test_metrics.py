"""mrc.ctl.metrics: every control endpoint's answer as Prometheus metrics,
served over HTTP and read back with prometheus_client's own parser."""
from __future__ import annotations

import json
import os
import socket
import threading
import urllib.error
import urllib.request

import pytest

prometheus_client = pytest.importorskip("prometheus_client")
from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

from mrc.ctl import metrics  # noqa: E402
from mrc.errors import ErrnoError  # noqa: E402

#: the labels of SNAP's QP 7
QP7 = (("host", "h0"), ("pid", "4242"), ("qpn", "7"), ("role", "rank 1 of 2, job t"))
SNAP = {"pid": 4242, "host": "h0", "role": "rank 1 of 2, job t", "cq_overflow": 3,
        "qps": [{"qpn": 7, "state": "RTS", "tx_packets": 1000, "tx_bytes": 4096000, "rtx_packets": 5,
                 "rtx_bytes": 20480, "losses": 4, "timeouts": 0, "tlp_probes": 1, "ecn_marks": 9, "trims": 2,
                 "cwnd": 262144, "inflight": 8192, "srtt_ns": 12000, "min_rtt_ns": 9000,
                 "evs": {"0": {"GOOD": 3, "ASSUMED_BAD": 1}, "1": {"GOOD": 4}}}],
        "drops": {"icrc": 2, "rkey": 0},
        "ports": [{"ifname": "p0", "plane": 0, "tx_packets": 600, "tx_bytes": 5000000, "admin_up": 1, "carrier": 1},
                  {"ifname": "p1", "plane": 1, "tx_packets": 400, "admin_up": 1, "carrier": 0}]}


def serve_answers(path: str, answer: bytes, n: int = 1) -> socket.socket:
    """A UNIX socket that answers ``n`` requests with ``answer``."""
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(path)
    srv.listen(4)

    def loop():
        for _ in range(n):
            try:
                conn, _ = srv.accept()
            except OSError:
                return
            with conn:
                conn.recv(65536)
                conn.sendall(answer)
    threading.Thread(target=loop, daemon=True).start()
    return srv


def samples(text: str) -> dict:
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def test_an_endpoints_answer_becomes_labelled_metrics(sockdir):
    good = os.path.join(sockdir, "1.sock")
    srv = serve_answers(good, (json.dumps({"ok": True, **SNAP}) + "\n").encode())
    try:
        s = samples(metrics.exposition(metrics.ContextCollector(where=lambda: [good])).decode())
    finally:
        srv.close()
    qp = (("host", "h0"), ("pid", "4242"), ("qpn", "7"), ("role", "rank 1 of 2, job t"))
    assert s[("mrc_qp_sent_packets_total", qp)] == 1000
    assert s[("mrc_qp_retransmitted_bytes_total", qp)] == 20480
    assert s[("mrc_qp_tail_loss_probes_total", qp)] == 1
    assert s[("mrc_qp_srtt_seconds", qp)] == pytest.approx(12e-6)
    assert s[("mrc_qp_cwnd_bytes", qp)] == 262144
    assert s[("mrc_qp_state", tuple(sorted((*qp, ("state", "RTS")))))] == 1
    assert s[("mrc_qp_evs", tuple(sorted((*qp, ("plane", "0"), ("state", "ASSUMED_BAD")))))] == 1
    ctx = (("host", "h0"), ("pid", "4242"), ("role", "rank 1 of 2, job t"))
    assert s[("mrc_dropped_packets_total", tuple(sorted((*ctx, ("reason", "icrc")))))] == 2
    assert s[("mrc_port_up", tuple(sorted((*ctx, ("plane", "1"), ("port", "p1")))))] == 0
    assert s[("mrc_port_sent_packets_total", tuple(sorted((*ctx, ("plane", "0"), ("port", "p0")))))] == 600
    assert s[("mrc_cq_overflows_total", ctx)] == 3
    assert s[("mrc_scrape_errors_total", ())] == 0


def test_an_endpoint_that_does_not_answer_is_counted_not_fatal(sockdir):
    bad = os.path.join(sockdir, "2.sock")
    srv = serve_answers(bad, b"not json\n")
    try:
        c = metrics.ContextCollector(where=lambda: [bad, os.path.join(sockdir, "gone.sock")])
        s = samples(metrics.exposition(c).decode())
    finally:
        srv.close()
    assert s[("mrc_scrape_errors_total", ())] == 2
    assert not [k for k in s if k[0].startswith("mrc_qp_")]


def test_served_over_http_on_localhost(sockdir):
    good = os.path.join(sockdir, "1.sock")
    srv = serve_answers(good, (json.dumps({"ok": True, **SNAP}) + "\n").encode())
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server, thread = metrics.serve(f"127.0.0.1:{port}", metrics.ContextCollector(where=lambda: [good]),
                                   token="t" * 24)
    try:
        # the counters come from root-only sockets: a scrape needs the token
        for auth in (None, "Bearer wrong", "t" * 24):
            req = urllib.request.Request(f"http://127.0.0.1:{port}/metrics", headers={"Authorization": auth}
                                         if auth else {})
            with pytest.raises(urllib.error.HTTPError) as e:
                urllib.request.urlopen(req, timeout=5)
            assert e.value.code == 401
            e.value.close()
        req = urllib.request.Request(f"http://127.0.0.1:{port}/metrics",
                                     headers={"Authorization": "Bearer " + "t" * 24})
        with urllib.request.urlopen(req, timeout=5) as r:
            text = r.read().decode()
        for path in ("/", "/metrics/../etc", "/x" * 100):  # only /metrics is served, token or not
            bad = urllib.request.Request(f"http://127.0.0.1:{port}{path}",
                                         headers={"Authorization": "Bearer " + "t" * 24})
            with pytest.raises(urllib.error.HTTPError) as e:
                urllib.request.urlopen(bad, timeout=5)
            assert e.value.code == 404
            e.value.close()
        assert r.headers["Content-Type"].startswith("text/plain")
    finally:
        server.shutdown()
        server.server_close()
        srv.close()
    assert samples(text)[("mrc_qp_sent_packets_total", QP7)] == 1000


@pytest.mark.parametrize("bad", ["9464", "localhost", ":9464", "127.0.0.1:0", "127.0.0.1:70000", "a:b"])
def test_a_listen_address_that_is_not_one_gets_a_clear_error(bad):
    with pytest.raises(ErrnoError, match="ADDR:PORT"):
        metrics.parse_listen(bad)
    assert metrics.parse_listen("[::1]:9464") == ("::1", 9464)


@pytest.mark.parametrize("answer", [
    {"qps": "x"},                                           # not a list
    {"qps": [{"state": "RTS"}]},                            # no qpn
    {"qps": [{"qpn": 7, "tx_packets": "many"}]},            # a counter that is not a number
    {"qps": [{"qpn": 7, "evs": {"zero": {"GOOD": 1}}}]},    # a plane that is not a number
    {"ports": [{"ifname": "p0"}]},                          # a port without its plane
    {"drops": ["icrc"]},                                    # not a mapping
])
def test_an_answer_of_the_wrong_shape_adds_nothing_and_is_counted(sockdir, answer):
    """A lying endpoint cannot break the scrape or half-fill it: its answer is dropped and counted,
    and the honest endpoint beside it is still exported in full."""
    bad, good = os.path.join(sockdir, "1.sock"), os.path.join(sockdir, "2.sock")
    srvs = [serve_answers(bad, (json.dumps({"ok": True, "pid": 1, **answer}) + "\n").encode()),
            serve_answers(good, (json.dumps({"ok": True, **SNAP}) + "\n").encode())]
    try:
        s = samples(metrics.exposition(metrics.ContextCollector(where=lambda: [bad, good])).decode())
    finally:
        for srv in srvs:
            srv.close()
    assert s[("mrc_scrape_errors_total", ())] == 1
    assert not [k for k in s if ("pid", "1") in k[1]]
    assert s[("mrc_qp_sent_packets_total", QP7)] == 1000
