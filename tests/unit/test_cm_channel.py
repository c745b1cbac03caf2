"""The setup channel after the handshake (mrc.cm, protocol.md section 8):
under a pre-shared key every message travels sealed and numbered, so a
relay that holds no key learns nothing, and each way it can meddle with a
message (flip a byte, send it again, drop it, swap it with the next, send
one in the clear) ends the channel with one clear line, never a changed
message taken as good. Without a key the same relay reads and rewrites
(the control)."""
from __future__ import annotations

import errno
import json
import sys
import threading
from pathlib import Path

import pytest

from mrc import cm
from mrc.errors import ErrnoError

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
from setup_relay import CLIENT, SECRETS, SERVER, converse  # noqa: E402

KEY = b"k" * 32


def test_under_a_key_the_relay_learns_nothing_and_the_talk_goes_through():
    got, errs, relay = converse(KEY, None)
    assert errs == {} and [m["rank"] for m in got["server"]] == [0, 1, 2]
    assert [m["peers"]["m"] for m in got["client"]] == [0, 1, 2]
    text = b"\n".join(relay.seen).decode()
    assert len(relay.seen) == 9  # greeting, hello, answer, then 3 and 3
    for secret in SECRETS:
        assert secret not in text, secret
    for line in relay.seen[3:]:
        assert set(json.loads(line)) == {"sealed"}


@pytest.mark.parametrize("way", ["c2s", "s2c"])
@pytest.mark.parametrize("attack", ["flip", "replay", "drop", "swap", "clear"])
def test_a_relay_without_the_key_that_meddles_ends_the_channel_with_one_clear_line(attack, way):
    got, errs, _ = converse(KEY, attack, way, n=1)
    receiver = "server" if way == "c2s" else "client"
    assert receiver in errs, f"the meddling went unnoticed: {errs}"
    e = errs[receiver]
    assert isinstance(e, ErrnoError) and e.errno == errno.EACCES, e
    assert "\n" not in str(e) and ("did not verify" in str(e) or "unsealed" in str(e))
    # nothing changed was taken: whatever each side got is what the other sent
    assert all(m.get("qpn") == CLIENT.qpn for m in got["server"])
    assert all(m["peers"].get("rkey") == SERVER.rkey for m in got["client"])
    assert len(got[receiver]) <= 1


def test_without_a_key_the_same_relay_reads_and_rewrites():
    """The control: no key, nothing sealed, and a message it rewrites is taken as it is."""
    got, errs, relay = converse(None, "clear", "c2s", n=1)
    assert errs == {} and got["server"][0] == {"go": True, "peers": {"0": "fd00::bad"}}
    assert str(CLIENT.qpn) in b"\n".join(relay.seen).decode()


def test_closing_a_connection_wipes_its_keys():
    got, errs, _ = converse(KEY, None)
    lst = cm.listen("::1", 0, KEY, security="auth")
    out: dict = {}

    def run():
        out["c"] = cm.connect("::1", lst.sock.getsockname()[1], CLIENT, timeout=5, psk=KEY, security="auth")

    th = threading.Thread(target=run, daemon=True)
    th.start()
    conn = lst.accept(timeout=5)
    conn.reply(SERVER)
    th.join(5)
    c = out["c"]
    priv, tx = c._kx["priv"], c._tx
    assert c.keys(1, 2) is not None and any(priv) and any(tx.key)
    c.close()
    conn.close()
    lst.close()
    assert not any(priv) and not any(tx.key) and not any(tx.iv)
    with pytest.raises(ErrnoError) as e:
        c.keys(1, 2)
    assert e.value.errno == errno.EBADF
