"""The bootstrap's checks (rootless): what rank 0 refuses in a hello, and what a
rank refuses in the QPs its peers offer, hostile values included."""
from __future__ import annotations

import pytest

from mrc.coll.net import FabricNet, check_hello, parse_offers
from mrc.errors import ErrnoError, UsageError

INFO = {"qpn": 7, "ports": {"0": "fc00:0:b000::"}, "addr": 4096, "rkey": 9, "length": 1 << 20}
GOOD = {"job": "j", "nranks": 4, "rank": 2, "qps": {}}


def test_a_good_hello_passes():
    assert check_hello(GOOD, "j", 4, {1}) is None


@pytest.mark.parametrize("change,msg", [
    ({"job": "other"}, "is not this job"),
    ({"job": None}, "is not this job"),
    ({"nranks": 8}, "nranks 8 is not 4"),
    ({"rank": 1}, "not a free rank"),          # taken
    ({"rank": 0}, "not a free rank"),          # rank 0 is the listener
    ({"rank": 4}, "not a free rank"),
    ({"rank": True}, "not a free rank"),
    ({"rank": "2"}, "not a free rank"),
    ({"rank": 2 ** 80}, "not a free rank"),
    ({"qps": ["x"]}, "qps missing"),
])
def test_rank_zero_refuses_strangers_in_a_line(change, msg):
    why = check_hello({**GOOD, **change}, "j", 4, {1})
    assert why and msg in why and len(why) < 120


def test_offers_are_parsed():
    out = parse_offers({"1": [INFO, INFO]}, 4, 2, 1 << 20, {1, 3})
    assert list(out) == [1] and [i.qpn for i in out[1]] == [7, 7]


@pytest.mark.parametrize("theirs,msg", [
    (["not", "a", "dict"], "must be an object"),
    ({"one": [INFO, INFO]}, "is not a rank"),
    ({"9": [INFO, INFO]}, "did not ask for"),          # out of range
    ({"2": [INFO, INFO]}, "did not ask for"),          # a rank we made no QPs for
    ({"-1": [INFO, INFO]}, "did not ask for"),
    ({"1": [INFO]}, "offered 1 QPs"),
    ({"1": {"0": INFO}}, "offered 0 QPs"),
    ({"1": [INFO, {**INFO, "qpn": 0}]}, "qpn must be"),
    ({"1": [INFO, {**INFO, "ports": {"0": "not-an-address"}}]}, "is not an IPv6 address"),
    ({"1": [INFO, {**INFO, "rkey": -1}]}, "rkey must be"),
    ({"1": [INFO, {**INFO, "length": 64}]}, "region is 64 bytes"),
    ({"1": [INFO, "x" * 10_000]}, "info is not an object"),
])
def test_hostile_offers_get_one_error(theirs, msg):
    with pytest.raises(ErrnoError, match=msg):
        parse_offers(theirs, 4, 2, 1 << 20, {1, 3})


@pytest.mark.parametrize("kw,msg", [
    ({"job": ""}, "job id"), ({"job": "x" * 65}, "job id"), ({"job": "a\nb"}, "job id"),
    ({"rank": 4}, "rank 4 of 4"), ({"rank": -1}, "rank -1 of 4"), ({"nranks": 0, "rank": 0}, "rank 0 of 0"),
])
def test_bad_job_options_fail_before_any_socket(kw, msg):
    args = {"rank": 0, "nranks": 4, "root": "::1", "port": 1, "job": "j", **kw}
    with pytest.raises(UsageError, match=msg):
        FabricNet(**args)
