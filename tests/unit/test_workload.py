"""The congestion bench's host worker (python -m mrc.tools.workload): a request it
cannot serve gets one error line and the worker exits 1, before it has
allocated, bound or connected anything."""

import json
import subprocess
import sys

import pytest

GOOD = {"host": "h0", "transport": "mrc", "msg": 4096, "flows": []}


def worker(*lines: str) -> tuple[int, list[dict]]:
    r = subprocess.run([sys.executable, "-m", "mrc.tools.workload"], input="".join(x + "\n" for x in lines),
                       capture_output=True, text=True, timeout=60)
    return r.returncode, [json.loads(x) for x in r.stdout.splitlines()]


@pytest.mark.parametrize("line,msg", [
    ("not json", "JSONDecodeError"),
    ("[1, 2]", "a request is a JSON object"),
    ('{"connect": {}}', "before setup"),
    ('{"start": {"at_ns": 0, "seconds": 1}}', "before setup"),
    ('{"nonsense": 1}', "before setup"),
    (json.dumps({"setup": {**GOOD, "transport": "carrier-pigeon"}}), "unknown transport"),
    (json.dumps({"setup": {**GOOD, "msg": 1 << 40}}), "msg must be an integer"),
    (json.dumps({"setup": {**GOOD, "msg": -1}}), "msg must be an integer"),
    (json.dumps({"setup": {**GOOD, "slots": 10**9}}), "slots must be an integer"),
    (json.dumps({"setup": {**GOOD, "msg": True}}), "msg must be an integer"),
    (json.dumps({"setup": {**GOOD, "flows": [{"id": 0, "src": "h0"}]}}), "src and dst"),
    (json.dumps({"setup": {**GOOD, "flows": [{"id": -5, "src": "h0", "dst": "h1"}]}}), "id must be"),
    (json.dumps({"setup": {**GOOD, "transport": "tcp_cubic",
                           "flows": [{"id": 0, "src": "h1", "dst": "h0", "port": 70000}]}}), "port must be"),
    (json.dumps({"setup": {**GOOD, "flows": [{"id": i, "src": "h0", "dst": "h1"} for i in range(5000)]}}),
     "at most 4096"),
    (json.dumps({"setup": "h0"}), "host name"),
    (json.dumps({"setup": {**GOOD, "port_rate_bps": -1}}), "port_rate_bps must be an integer"),
    (json.dumps({"setup": {**GOOD, "port_rate_bps": "100mbit"}}), "port_rate_bps must be an integer"),
    (json.dumps({"setup": {**GOOD, "port_rate_bps": 10**30}}), "port_rate_bps must be an integer"),
    (json.dumps({"setup": {**GOOD, "port_rate_bps": 1.5e8}}), "port_rate_bps must be an integer"),
    (json.dumps({"setup": {**GOOD, "port_rate_bps": 7999}}), "0 (no limit) or at least 8000"),
    (json.dumps({"setup": {**GOOD, "spin_us": -1}}), "spin_us must be an integer from 0 to 1000000"),
    (json.dumps({"setup": {**GOOD, "spin_us": 20.5}}), "spin_us must be an integer"),
    (json.dumps({"setup": {**GOOD, "spin_us": True}}), "spin_us must be an integer"),
    (json.dumps({"setup": {**GOOD, "spin_us": 10**7}}), "spin_us must be an integer"),
])
def test_a_bad_request_gets_one_error_line_and_the_worker_exits(line, msg):
    rc, out = worker(line)
    assert rc == 1 and len(out) == 1 and msg in out[0]["error"], out


def test_a_worker_whose_bench_goes_away_exits_with_an_error():
    rc, out = worker()
    assert rc == 1 and "went away" in out[0]["error"]


def test_bye_before_anything_is_a_clean_exit():
    assert worker('{"bye": true}') == (0, [])


@pytest.mark.parametrize("req,msg", [
    ({"start": {"at_ns": 0, "seconds": -1}}, "start needs seconds"),
    ({"start": {"at_ns": 0, "seconds": 1e9}}, "start needs seconds"),
    ({"start": {"at_ns": "soon", "seconds": 1}}, "at_ns must be"),
    ({"hash": [1, 2]}, "hash takes"),
    ({"setup": {**GOOD, "transport": "tcp_cubic"}}, "setup comes once"),
])
def test_after_setup_bad_requests_are_refused_too(req, msg):
    setup = json.dumps({"setup": {**GOOD, "transport": "tcp_cubic"}})  # no flows: binds nothing
    rc, out = worker(setup, json.dumps(req))
    assert rc == 1 and out[0] == {"infos": {}} and msg in out[1]["error"], out
