"""Switch queue settings and the QP settings that go with a slow fabric (no root)."""

import pytest

from mrc.errors import UsageError
from mrc.fabric.qos import PortQoS, qp_profile


def test_queue_settings_are_checked():
    assert PortQoS(100_000_000, 32, 96, 512).check()
    assert PortQoS(0).check() and PortQoS(1000).check()  # off; the slowest port
    for bad in (PortQoS(-1), PortQoS(999), PortQoS(10**9, ecn_kb=-1), PortQoS(10**9, trim_kb=600, buffer_kb=512),
                PortQoS(10**12)):
        with pytest.raises(UsageError):
            bad.check()


@pytest.mark.parametrize("rate", [25_000_000, 100_000_000, 1_000_000_000])
def test_the_qp_profile_outlasts_the_longest_queue_and_fills_the_planes(rate):
    q = PortQoS(rate, 32, 96, 512)
    p = qp_profile(rate, 8, q=q)
    trim_queue_s = 96 * 1024 * 8 / rate
    assert 1.024e-6 * (1 << p["timeout"]) > 2 * 3 * trim_queue_s  # a full queue each way is no timeout
    assert p["reorder_ns"] / 1e9 >= trim_queue_s  # nor a reordering loss
    one_packet_rtt = 3 * 8192 * 8 / rate
    assert p["cc"]["max_cwnd"] >= 8 * rate / 8 * one_packet_rtt  # a lone QP can fill its 8 planes
    assert p["cc"]["max_md_jump"] == 950 and p["cc"]["md_by_sample"] == 1  # a cut of 5 %, on the marked ACK's delay
    # the window moves once per base RTT, whatever its rate (eta per adjustment is then additive)
    assert p["cc"]["adjust_period_threshold"] == p["cc"]["base_rtt"]
    assert p["cc"]["adjust_bytes_threshold"] == p["cc"]["max_cwnd"]


@pytest.mark.parametrize("args,msg", [
    (["--workloads", "foo"], "unknown workload foo"),
    (["--hosts", "3", "--workloads", "victim"], "the victim workload 4"),
    (["--rate", "fast"], "cannot read rate"),
    (["--trim-kb", "900", "--buffer-kb", "512"], "must be below --buffer-kb"),
    (["--rounds", "0"], "--rounds 0: 1 to 20"),
    (["--rounds", "21"], "--rounds 21: 1 to 20"),
    (["--rounds", "-5"], "--rounds -5: 1 to 20"),
    (["--rounds", "99999999999999999999"], "1 to 20"),
    (["--cc", "md_by_sample=2"], "--cc md_by_sample=2: the engine refuses it"),
    (["--cc", "bogus=1"], "--cc bogus=1: the engine refuses it"),
    (["--cc", "gamma=-1"], "--cc gamma=-1: the engine refuses it"),
    (["--cc", "fi=" + "9" * 40], "the engine refuses it"),
    (["--spin-us", "-1"], "--spin-us -1: from 0"),
    (["--spin-us", "2000000"], "--spin-us 2000000: from 0"),
    (["--victim-nic-x", "0.5"], "--victim-nic-x 0.5: from 1"),
    (["--victim-nic-x", "17"], "--victim-nic-x 17.0: from 1"),
    (["--victim-nic-x", "nan"], "--victim-nic-x nan: from 1"),
    (["--victim-nic-x", "inf"], "--victim-nic-x inf: from 1"),
    (["--victim-nic-x", "2", "--workloads", "incast"], "--victim-nic-x goes with the victim workload"),
])
def test_the_congestion_bench_refuses_bad_arguments_in_a_line_before_building_anything(args, msg):
    import os
    import subprocess
    import sys

    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    r = subprocess.run([sys.executable, os.path.join(root, "bench", "congestion_bench.py"), *args],
                       capture_output=True, text=True, timeout=60)
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(lines) == 1 and lines[0].startswith("congestion_bench: ")
    if os.geteuid() == 0:
        assert msg in lines[0]


def test_counters_are_shown_in_kib_without_their_timestamp():
    from mrc.fabric.qos import shown
    c = {"packets": 3, "bytes": 9000, "marked": 1, "trimmed": 0, "dropped": 0, "hwm": 3072, "backlog": 1536,
         "last_ns": 123}
    assert shown(c) == {"packets": 3, "bytes": 9000, "marked": 1, "trimmed": 0, "dropped": 0, "hwm_kb": 3.0,
                        "backlog_kb": 1.5}
    assert c["hwm"] == 3072  # the reading itself is left as it was


def test_alternated_rounds_give_each_ratio_as_the_median_of_the_rounds_with_its_spread():
    import importlib.util
    import os
    import sys

    bench = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "bench")
    sys.path.insert(0, bench)  # congestion_bench imports campaign_report beside it
    try:
        spec = importlib.util.spec_from_file_location("congestion_bench", os.path.join(bench, "congestion_bench.py"))
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
    finally:
        sys.path.remove(bench)
    rounds = [{"mrc": 40.0, "tcp_cubic": 100.0, "mptcp": 80.0},
              {"mrc": 50.0, "tcp_cubic": 80.0, "mptcp": None},  # an mptcp run that failed is left out
              {"mrc": 45.0, "tcp_cubic": 120.0, "mptcp": 60.0}]
    out = mod.rounds_summary(rounds, ["mrc", "tcp_cubic", "mptcp"], ideal_ms=33.0)
    assert out["rounds"] == 3 and out["p99_ms_rounds"]["mptcp"] == [80.0, None, 60.0]
    assert out["p99_vs_tcp_cubic_median"] == 0.4 and out["p99_vs_tcp_cubic_spread"] == [0.375, 0.625]
    assert out["p99_vs_mptcp_median"] == 0.625 and out["p99_vs_mptcp_spread"] == [0.5, 0.75]
    assert out["ideal_vs_mptcp_median"] == round(33 / 70, 3) and out["p99_ms_median"] == 45.0
    assert out["p99_over_ideal_median"] == round(45 / 33, 3)


def test_a_tc_answer_that_is_not_a_filter_list_gives_no_program_and_no_crash():
    from mrc.fabric.tcbpf import named_progs
    good = '[{"kind":"bpf","options":{"prog":{"id":17,"name":"usid_end"}}},{"kind":"bpf"}]'
    assert named_progs(good) == {"usid_end": 17}
    assert named_progs("[]") == {}
    for bad in ("", "not json", "{}", "17", '"x"', "[1, null, []]", "[" * 10000):
        assert named_progs(bad) in (None, {}), bad
    # entries a hostile or broken tc could print: each left out, the good one kept
    hostile = "[" + ", ".join([
        '{"options": []}', '{"options": {"prog": "x"}}', '{"options": {"prog": {"id": "17", "name": "a"}}}',
        '{"options": {"prog": {"id": 1.5, "name": "b"}}}', '{"options": {"prog": {"id": true, "name": "t"}}}',
        '{"options": {"prog": {"id": 3, "name": ["c"]}}}', '{"options": {"prog": {"id": 4, "name": "port_queue"}}}',
    ]) + "]"
    assert named_progs(hostile) == {"port_queue": 4}
