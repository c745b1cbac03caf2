"""Root test: a real capture of a verified `mrc perf` transfer, taken with
`mrc capture` inside the receiving host, decodes with zero malformed packets
and packets on every plane; tshark with tools/mrc.lua reads the same PSNs
and EVs as scapy."""
import json
import re
import shutil
import signal
import subprocess
import sys

import pytest

from tests.integration.conftest import wait_for_line

pytestmark = pytest.mark.root
scapy = pytest.importorskip("scapy")

MRC = [sys.executable, "-m", "mrc"]




def test_capture_of_a_perf_transfer_decodes_cleanly(fabric, tmp_path):
    from scapy.layers.inet6 import IPv6
    from scapy.utils import rdpcap

    from mrc import dissect as d

    t = fabric
    pcap = str(tmp_path / "h1.pcap")
    server = subprocess.Popen(MRC + ["fabric", "exec", "h1", "--name", t.name, "--"] + MRC + ["perf", "server"],
                              stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
    cap = None
    try:
        wait_for_line(server, "waiting on")
        cap = subprocess.Popen(MRC + ["capture", "h1", "--name", t.name, "-w", pcap], stderr=subprocess.PIPE,
                               text=True)
        wait_for_line(cap, "Ctrl-C to stop")  # printed once tcpdump listens
        client = subprocess.run(MRC + ["fabric", "exec", "h0", "--name", t.name, "--"] + MRC
                                + ["perf", "client", "h1", "--sizes", "64K,1M", "--iters", "8", "--verify", "--json"],
                                capture_output=True, text=True, timeout=120)
        assert client.returncode == 0, client.stderr
        assert all(r["verified"] for r in json.loads(client.stdout))
        cap.send_signal(signal.SIGTERM)  # stops as cleanly as Ctrl-C
        assert cap.wait(20) == 0
        capmsg = cap.stderr.read()
        assert "packets written" in capmsg
    finally:
        for p in (cap, server):
            if p and p.poll() is None:
                p.kill()
                p.wait()
    assert not subprocess.run(["pgrep", "-f", f"tcpdump.*{pcap}"], capture_output=True).stdout  # nothing left

    from mrc.fabric import apply

    # hosts named by the fabric's topology file (`mrc fabric up` wrote it)
    out = subprocess.run(MRC + ["decode", pcap, "--json", "--topology", apply.topology_path(t.name)],
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    r = json.loads(out.stdout)
    # tcpdump may fall behind at line rate (it says so); what it wrote must all decode
    written = int(re.search(r"(\d+) packets written", capmsg).group(1))
    assert r["malformed"] == 0 and r["icrc_failures"] == 0 and r["packets"] == written > 300
    assert sorted(r["planes"]) == [str(p) for p in range(t.planes)]
    qps = {q["qp"].split(" qp ")[0]: q for q in r["qps"]}
    data, acks = qps["h0->h1"], qps["h1->h0"]
    assert sorted(data["planes"]) == sorted(r["planes"])
    assert acks["sacks"] > 0
    # received data is reordered by the spraying: the decoder sees it
    assert sum(data["reorder_histogram"].values()) >= data["data_packets"] - data["retransmissions"]

    if shutil.which("tshark"):
        rows = subprocess.run(["tshark", "-X", "lua_script:tools/mrc.lua", "-r", pcap, "-Y", "mrc", "-T", "fields",
                               "-e", "mrc.psn", "-e", "mrc.ev", "-e", "mrc.icrc_ok"],
                              capture_output=True, text=True, check=True).stdout.splitlines()
        ours = [(p[d.BTH].psn, d.ev_of(p)) for p in rdpcap(pcap) if d.BTH in p and IPv6 in p]
        theirs = [(int(a), int(b, 16)) for a, b, _ in (row.split("\t") for row in rows)]
        assert theirs == ours and len(ours) == r["packets"]
        assert {row.split("\t")[2] for row in rows} == {"1"}
