"""Out-of-band connection setup over TCP (the management network).

One JSON object per line, each at most ``MAX_LINE`` bytes. The listener
speaks first: a greeting with a fresh 32-byte challenge and whether it
wants proof of a pre-shared key. The connecting side sends its ``RemoteInfo``
and a fresh 32-byte nonce of its own (with, under a key, ``auth`` =
HMAC-SHA256(key, challenge + the hello's canonical JSON)); the listener
checks the message and every field, creates and connects its QP, then
answers with its own (under a key, proven over the challenge, the
connector's nonce and ``b"answer"``, so the connector knows the answer
comes from a holder, now: a recorded greeting and answer do not pass), so
by the time the connector connects, the listener is already at RTS and no
first packet is lost. For authenticated MRC (``security`` "auth" or
"encrypt", which needs the key) both sides also send an ephemeral X25519
public key (``kx``, inside what the proofs cover) and derive each QP
pair's keys from the exchange, the key and everything both saw
(:meth:`Connection.keys`, :mod:`mrc.secure`). Under a key, what the two
messages carry (QP numbers, PSNs, regions and rkeys, the X25519 keys) is
sealed as well: AES-256-GCM under keys from the pre-shared key, the
challenge and the nonce (``sealed``), so a listener on the management
network learns none of it, and so does every message after them, each
direction numbered from the hello and the answer on (:class:`Connection`'s
``send`` and ``recv``): a relay without the key can neither read nor change,
replay, reorder or drop one unnoticed. Every number read from a peer is
checked by one strict reader (an int, not a bool, in range).

The listener runs each handshake in a thread of its own as connections
arrive (at most ``MAX_HANDSHAKES`` at once, ``MAX_PER_ADDRESS`` from one
address; more are told EBUSY), so a slow or silent client costs its own
bounded wait (``setup_timeout``), never another client's.

    # server (host b)                       # client (host a)
    lst = cm.listen(port=18515)             addr = cm.setup_address("b", resolver)
    conn = lst.accept()                     conn = cm.connect(addr, 18515, my_info)
    conn.peer -> RemoteInfo of a            conn.peer -> RemoteInfo of b
    conn.reply(my_info)

What is exchanged names the sender's host and topology; the receiving
context's path resolver turns that into paths (``Context.resolve``, mrc.paths).
"""

from __future__ import annotations

import errno
import hashlib
import hmac
import ipaddress
import json
import os
import queue
import socket
import threading
import time
from dataclasses import asdict

from mrc import secure
from mrc.errors import ErrnoError, UsageError, errno_error
from mrc.paths import PathResolver
from mrc.verbs import RemoteInfo

DEFAULT_PORT = 18515
MAX_LINE = 64 << 10          # bytes in one message
SETUP_TIMEOUT = 10.0         # seconds a peer has for each step of setup
MAX_NAME = 64                # characters of a host or topology name
DRAIN = 1 << 20              # bytes read and dropped from a refused peer before closing
PROTOCOL = 2                 # 2: the connector's nonce is part of the answer's proof
MAX_HANDSHAKES = 64          # handshakes in progress (or done and not yet accepted) at once
MAX_PER_ADDRESS = 4          # of them from one address
LOOPBACK = ("::1", "127.0.0.1", "localhost")


def _bad(what: str) -> ErrnoError:
    return ErrnoError(errno.EPROTO, f"bad connection-setup message: {what}")


def _canonical(obj: dict) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()


def _proof(key: bytes, challenge: bytes, msg: dict, role: bytes = b"") -> str:
    """HMAC-SHA256 of the challenge, the role and the message without its proof."""
    body = _canonical({k: v for k, v in msg.items() if k != "auth"})
    return hmac.new(key, challenge + role + body, hashlib.sha256).hexdigest()


def _uint(v, lo: int, hi: int) -> int | None:
    """``v`` when it is an integer (not a bool) in [lo, hi], else None: the
    one reader of every number a peer sends."""
    return v if type(v) is int and lo <= v <= hi else None


def _hex(v, lo: int, hi: int, what: str) -> bytes:
    """Bytes sent as hex (``lo`` to ``hi`` of them), or an EPROTO error naming ``what``."""
    try:
        b = bytes.fromhex(v) if isinstance(v, str) and len(v) <= 2 * hi else b""
    except ValueError:
        b = b""
    if not lo <= len(b) <= hi:
        raise _bad(f"{what} must be {lo} to {hi} bytes as hex")
    return b


def _check_proof(key: bytes, challenge: bytes, msg: dict, role: bytes, who: str) -> None:
    proof = msg.get("auth")
    if not isinstance(proof, str) or not hmac.compare_digest(proof, _proof(key, challenge, msg, role)):
        raise ErrnoError(errno.EACCES, f"the {who} did not prove it holds the pre-shared key")


def read_psk(path: str, what: str = "pre-shared key") -> bytes:
    """A pre-shared key (or another secret: ``what``) from a file: its bytes,
    surrounding white space removed, at least 16 of them."""
    try:
        with open(path, "rb") as f:
            key = f.read().strip()
    except OSError as e:
        raise UsageError(f"cannot read the {what} file {path}: {e.strerror}") from None
    if len(key) < 16:
        raise UsageError(f"the {what} in {path} is {len(key)} bytes: use at least 16 (e.g. `head -c 32 "
                         f"/dev/urandom | base64 > {path}`)")
    return key


def _nth(key_iv: tuple[bytes, bytes], n: int) -> tuple[bytes, bytes]:
    """(key, nonce) of a direction's message n: the IV XOR n in its last 8 bytes."""
    key, iv = key_iv
    return key, iv[:4] + (int.from_bytes(iv[4:], "big") ^ n).to_bytes(8, "big")


class _Sealed:
    """One direction's keys of a setup channel under a pre-shared key, and
    the number of its next message (the hello and the answer are 0)."""

    def __init__(self, key_iv: tuple[bytes, bytes], n: int) -> None:
        self.key, self.iv = bytearray(key_iv[0]), bytearray(key_iv[1])
        self.n = n

    def next(self) -> tuple[bytes, bytes]:
        """(key, nonce) for the next message, counted."""
        out = _nth((bytes(self.key), bytes(self.iv)), self.n)
        self.n += 1
        return out

    def wipe(self) -> None:
        self.key[:] = bytes(len(self.key))
        self.iv[:] = bytes(len(self.iv))


class Connection:
    """One connection-setup channel. Under a pre-shared key every message
    after the greeting travels sealed (AES-256-GCM, a key and a count per
    direction): a message that does not verify (changed, replayed, out of
    order, or one before it dropped) ends the channel with EACCES."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self._buf = b""
        self.peer: RemoteInfo | None = None
        self.hello: dict = {}      # the connector's hello (listener side)
        self.answer: dict = {}     # the listener's answer (connector side)
        self._key: tuple[bytes, bytes] | None = None  # (pre-shared key, challenge) when the setup is authenticated
        self._seal: tuple[bytes, bytes] | None = None  # (key, IV) the answer is sealed with, under a key
        self._hello_key: tuple[bytes, bytes] | None = None  # and the hello's: the listener reads with it after
        self.addr = ""             # the other end's address (listener side)
        #: the QPs' security mode both sides agreed on ("off", "auth", "encrypt")
        self.security = "off"
        self._kx: dict = {}        # the key exchange: our private and public keys, the peer's, the transcript
        self._tx: _Sealed | None = None  # under a key: what we send, sealed, once the answer is out
        self._rx: _Sealed | None = None  # and what we read, once the hello (answer) came

    def keys(self, my_qpn: int, peer_qpn: int):
        """The keys of our QP ``my_qpn`` toward the peer's ``peer_qpn`` (a
        ``struct mrc_qp_keys`` for :meth:`QueuePair.set_keys`); None when
        the connection is not secured."""
        if self.security == "off":
            return None
        kx = self._kx
        if not kx:
            raise ErrnoError(errno.EBADF, "the connection's keys were wiped when it closed: take a QP's keys before")
        pair = (my_qpn, peer_qpn) if kx["initiator"] else (peer_qpn, my_qpn)  # the connector's QP first
        seen = kx["transcript"] + b"".join(n.to_bytes(4, "big") for n in pair)
        return secure.derive(bytes(kx["priv"]), kx["peer"], bytes(kx["psk"]), seen, kx["initiator"], self.security)

    def send(self, obj: dict) -> None:
        """Send one JSON message (sealed under a key, once the answer is out)."""
        if self._tx is not None:
            obj = {"sealed": secure.seal(self._tx.next(), b"mrc message", json.dumps(obj).encode()).hex()}
        self.sock.sendall((json.dumps(obj) + "\n").encode())

    def recv(self, timeout: float | None = SETUP_TIMEOUT) -> dict:
        """One message, within ``timeout`` seconds in all (None: wait for ever)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while b"\n" not in self._buf:
            if len(self._buf) > MAX_LINE:
                raise ErrnoError(errno.EMSGSIZE, f"a connection-setup message over {MAX_LINE} bytes")
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise ErrnoError(errno.ETIMEDOUT, f"the peer sent no complete message within {timeout} s")
            self.sock.settimeout(left)
            try:
                chunk = self.sock.recv(65536)
            except TimeoutError:
                raise ErrnoError(errno.ETIMEDOUT, f"the peer sent no complete message within {timeout} s") from None
            except OSError as e:
                raise errno_error(e.errno or errno.EIO, "read the connection-setup channel") from None
            if not chunk:
                raise ErrnoError(errno.ECONNRESET, "the peer closed the connection-setup channel")
            self._buf += chunk
        line, self._buf = self._buf.split(b"\n", 1)
        if len(line) > MAX_LINE:
            raise ErrnoError(errno.EMSGSIZE, f"a connection-setup message over {MAX_LINE} bytes")
        try:
            msg = json.loads(line, parse_constant=lambda c: (_ for _ in ()).throw(ValueError(c)))
        except (ValueError, RecursionError) as e:
            raise _bad(f"not JSON ({str(e)[:60]})") from None
        if not isinstance(msg, dict):
            raise _bad("not a JSON object")
        if self._rx is not None:
            msg = self._open(msg)
        if "error" in msg:
            raise ErrnoError(_uint(msg.get("errno"), 1, 4095) or errno.EPROTO,
                             f"the peer refused: {str(msg['error'])[:200]}")
        return msg

    def _open(self, msg: dict) -> dict:
        """The message a sealed one carries, as the next of its direction."""
        what = f"setup-channel message {self._rx.n}"
        if set(msg) != {"sealed"}:
            raise ErrnoError(errno.EACCES, f"{what} came unsealed on a sealed channel (a relay without the key?): "
                                           "the connection ends")
        try:
            return _unseal_json(self._rx.next(), b"mrc message", msg["sealed"], what)
        except ErrnoError as e:
            if e.errno != errno.EACCES:
                raise
            raise ErrnoError(errno.EACCES, f"{what} did not verify: changed, replayed, out of order or one before "
                                           "it dropped on the way; the connection ends") from None

    def _arm(self, tx: tuple[bytes, bytes], rx: tuple[bytes, bytes]) -> None:
        """The hello and the answer went: from now on both directions are sealed, from message 1."""
        self._tx, self._rx = _Sealed(tx, 1), _Sealed(rx, 1)

    def reply(self, info: RemoteInfo, **extra) -> None:
        """Answer a request with our QP's description (signed when a key is set)."""
        ans = {"info": info_to_json(info), **extra}
        if self.security != "off":
            ans["kx"] = self._kx["pub"].hex()
        if self._seal is not None:
            ans = {"sealed": secure.seal(self._seal, b"mrc answer", json.dumps(ans).encode()).hex()}
        if self._key is not None:
            ans["auth"] = _proof(*self._key, ans, b"answer")
        self.send(ans)
        if self._seal is not None:
            self._arm(self._seal, self._hello_key)

    def refuse(self, err: Exception) -> None:
        """Tell the peer why (best effort), then close. What the peer still
        sends is read and dropped for a moment (at most DRAIN bytes), so
        that the close does not reset the connection before it reads why."""
        try:
            self.sock.settimeout(1.0)
            self.send({"error": str(err)[:200], "errno": getattr(err, "errno", None) or errno.EPROTO})
            self.sock.shutdown(socket.SHUT_WR)
            deadline, left = time.monotonic() + 0.5, DRAIN
            while left > 0 and (t := deadline - time.monotonic()) > 0:
                self.sock.settimeout(t)
                chunk = self.sock.recv(min(left, 65536))
                if not chunk:
                    break
                left -= len(chunk)
        except OSError:
            pass
        self.close()

    def close(self) -> None:
        """Close the setup connection and wipe its secrets (what Python lets us wipe:
        the bytearrays here; docs/security.md says what it cannot)."""
        self.sock.close()
        for d in (self._tx, self._rx):
            if d is not None:
                d.wipe()
        for k in ("priv", "psk"):
            v = self._kx.get(k)
            if isinstance(v, bytearray):
                v[:] = bytes(len(v))
        self._kx = {}


def _unseal_json(key_iv: tuple[bytes, bytes], aad: bytes, sealed, what: str) -> dict:
    """The JSON object a sealed message carries (EACCES when it does not verify, EPROTO when it is not one)."""
    data = _hex(sealed, 16, MAX_LINE, f"the {what}'s sealed part")
    try:
        inner = json.loads(secure.unseal(key_iv, aad, data),
                           parse_constant=lambda c: (_ for _ in ()).throw(ValueError(c)))
    except (ValueError, RecursionError) as e:
        raise _bad(f"the sealed {what} is not JSON ({str(e)[:60]})") from None
    if not isinstance(inner, dict):
        raise _bad(f"the sealed {what} is not a JSON object")
    return inner


def info_to_json(info: RemoteInfo) -> dict:
    """A RemoteInfo as a JSON-ready dict (the exchange's format)."""
    d = asdict(info)
    d["ports"] = {str(k): v for k, v in info.ports.items()}
    d["paths"] = {str(k): v for k, v in info.paths.items()}
    return d


def _int(d: dict, key: str, lo: int, hi: int, default: int | None = None) -> int:
    v = d.get(key, default)
    if not isinstance(v, int) or isinstance(v, bool) or not lo <= v <= hi:
        raise _bad(f"{key} must be an integer from {lo} to {hi}, not {str(v)[:40]!r}")
    return v


def _plane(k) -> int:
    try:
        p = int(k)
    except (TypeError, ValueError):
        raise _bad(f"plane {str(k)[:20]!r} is not a number") from None
    if not 0 <= p < 16:
        raise _bad(f"plane {p} is not 0..15")
    return p


def _address(a) -> str:
    if not isinstance(a, str) or len(a) > 64:
        raise _bad("an address must be an IPv6 address")
    try:
        return str(ipaddress.IPv6Address(a))
    except ValueError:
        raise _bad(f"{a[:40]!r} is not an IPv6 address") from None


def _name(d: dict, key: str) -> str | None:
    v = d.get(key)
    if v is not None and (not isinstance(v, str) or len(v) > MAX_NAME):
        raise _bad(f"{key} must be a name of at most {MAX_NAME} characters")
    return v


def info_from_json(d) -> RemoteInfo:
    """A peer's RemoteInfo, every field checked (ErrnoError EPROTO otherwise)."""
    if not isinstance(d, dict):
        raise _bad("info is not an object")
    ports, paths = d.get("ports"), d.get("paths") or {}
    if not isinstance(ports, dict) or not 1 <= len(ports) <= 16:
        raise _bad("ports must map 1 to 16 planes to addresses")
    if not isinstance(paths, dict) or len(paths) > 16:
        raise _bad("paths must map at most 16 planes to address lists")
    out_paths = {}
    for k, v in paths.items():
        if not isinstance(v, list) or len(v) > 16:
            raise _bad("a plane's paths are a list of at most 16 addresses")
        out_paths[_plane(k)] = [_address(a) for a in v]
    return RemoteInfo(qpn=_int(d, "qpn", 1, 0xFFFFFF), ports={_plane(k): _address(v) for k, v in ports.items()},
                      psn=_int(d, "psn", 0, 0xFFFFFF, 0), paths=out_paths, addr=_int(d, "addr", 0, 2**64 - 1, 0),
                      rkey=_int(d, "rkey", 0, 2**32 - 1, 0), length=_int(d, "length", 0, 2**64 - 1, 0),
                      topology=_name(d, "topology"), host=_name(d, "host"))


def setup_address(server: str, resolver: PathResolver) -> str:
    """Where to set up a connection with ``server``: an IPv6 address as it is,
    or a host name that the resolver knows the management address of."""
    try:
        return str(ipaddress.IPv6Address(server))
    except ValueError:
        pass
    addr = resolver.mgmt_address(server)
    if addr is None:
        if resolver.name:
            hosts = ", ".join(resolver.hosts()) if hasattr(resolver, "hosts") else "-"
            raise UsageError(f"unknown server {server!r}: not an IPv6 address, and topology {resolver.name} names "
                             f"no such host (hosts: {hosts})")
        raise UsageError(f"unknown server {server!r}: not an IPv6 address, and no topology names hosts here. Run "
                         f"it in a fabric host (`mrc fabric exec HOST -- ...` sets $MRC_TOPOLOGY to "
                         f"/run/mrc/fabrics/NAME.topology), or give --fabric NAME or --topology FILE")
    return addr


class Listener:
    """Takes connection setups on [addr]:port. With ``psk``, only peers that
    prove they hold the key get past the hello. Handshakes run in threads as
    connections arrive; :meth:`accept` hands them out in the order they end."""

    def __init__(self, addr: str = "::", port: int = DEFAULT_PORT, psk: bytes | None = None,
                 setup_timeout: float = SETUP_TIMEOUT, security: str = "off") -> None:
        secure.mode_of(security)
        if security != "off" and psk is None:
            raise UsageError(f"security {security} needs a pre-shared key: give --psk-file")
        self.psk = psk
        #: the mode every client must ask for (a hello asking another is refused)
        self.security = security
        #: seconds a client has for its hello (each handshake reads it when it starts)
        self.setup_timeout = setup_timeout
        self.sock = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            self.sock.bind((addr, port))
        except OSError as e:
            self.sock.close()
            raise errno_error(e.errno or errno.EINVAL, f"listen on [{addr}]:{port}",
                              "another server running? pick another --port") from None
        self.sock.listen(MAX_HANDSHAKES)
        #: a sentence for the log when anyone who can reach the port may set up connections
        self.warning = None if psk is not None or addr in LOOPBACK else (
            f"no pre-shared key: anyone who reaches [{addr}]:{self.sock.getsockname()[1]} can set up a connection "
            "(give --psk-file)")
        self._done: queue.Queue = queue.Queue()
        self._slots = threading.BoundedSemaphore(MAX_HANDSHAKES)
        self._per: dict[str, int] = {}
        self._lock = threading.Lock()
        self._closed = False
        self._thread = threading.Thread(target=self._accepting, name="mrc-cm-accept", daemon=True)
        self._thread.start()

    def _accepting(self) -> None:
        while not self._closed:
            try:
                s, where = self.sock.accept()
            except OSError:
                if self._closed:
                    return
                time.sleep(0.01)  # out of descriptors, say: try again
                continue
            who = where[0]
            with self._lock:
                busy = self._per.get(who, 0) >= MAX_PER_ADDRESS or not self._slots.acquire(blocking=False)
                if not busy:
                    self._per[who] = self._per.get(who, 0) + 1
            if busy:
                c = Connection(s)
                threading.Thread(target=c.refuse, daemon=True, args=(ErrnoError(
                    errno.EBUSY, f"busy: at most {MAX_PER_ADDRESS} setups from one address and {MAX_HANDSHAKES} in "
                                 "all at once; try again"),)).start()
                continue
            threading.Thread(target=self._handshake, args=(s, who), name="mrc-cm-hello", daemon=True).start()

    def _release(self, who: str) -> None:
        with self._lock:
            self._per[who] -= 1
            if not self._per[who]:
                del self._per[who]
            self._slots.release()

    def _handshake(self, s: socket.socket, who: str) -> None:
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        c = Connection(s)
        c.addr = who
        timeout = self.setup_timeout
        try:
            challenge = os.urandom(32)
            s.settimeout(timeout)
            c.send({"mrc": PROTOCOL, "challenge": challenge.hex(), "auth": self.psk is not None})
            hello = c.recv(timeout)
            if self.psk is not None:
                _check_proof(self.psk, challenge, hello, b"", "client")
                nonce = _hex(hello.get("nonce"), 16, 64, "the hello's nonce")
                c._key = (self.psk, challenge + nonce)
                keys = secure.setup_keys(self.psk, challenge, nonce)
                hello = {**_unseal_json(keys["c2s"], b"mrc hello", hello.get("sealed"), "hello"),
                         "nonce": hello["nonce"]}
                c._seal, c._hello_key = keys["s2c"], keys["c2s"]
            c.peer = info_from_json(hello.get("info"))
            c.hello = hello
            self._key_exchange(c, hello)
            self._done.put((who, c))
        except (ErrnoError, OSError) as e:
            c.refuse(e)
            why = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
            self._done.put((who, ErrnoError(getattr(e, "errno", None) or errno.EPROTO, f"client [{who}]: {why}")))
        except BaseException:
            c.close()
            self._release(who)
            raise

    def _key_exchange(self, c: Connection, hello: dict) -> None:
        """The security the client asks for must be ours; then our half of the X25519 exchange."""
        asked = hello.get("security", "off")
        if asked != self.security:
            raise ErrnoError(errno.EPROTO, f"this server's QPs run security {self.security}, the client asked for "
                                           f"{str(asked)[:20]!r} (give the same --security on both sides)")
        if asked == "off":
            return
        peer = _hex(hello.get("kx"), 32, 32, "the hello's kx (an X25519 public key)")
        priv, pub = secure.keypair()
        c.security = asked
        c._kx = {"priv": bytearray(priv), "pub": pub, "peer": peer, "psk": bytearray(self.psk), "initiator": False,
                 "transcript": c._key[1] + peer + pub}  # challenge + the client's nonce, then both public keys

    def accept(self, timeout: float | None = None) -> Connection:
        """The next connection whose hello is well formed (and authenticated).
        A refused one raises ErrnoError (the client was told why); the
        listener goes on. TimeoutError when none ends within ``timeout``."""
        try:
            who, got = self._done.get(timeout=timeout)
        except queue.Empty:
            raise TimeoutError(f"no connection setup within {timeout} s") from None
        self._release(who)
        if isinstance(got, Exception):
            raise got
        return got

    def close(self) -> None:
        """Stop listening; handshakes done and not accepted are closed."""
        self._closed = True
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()
        self._thread.join(2)
        while True:
            try:
                _, got = self._done.get_nowait()
            except queue.Empty:
                return
            if isinstance(got, Connection):
                got.close()


def listen(addr: str = "::", port: int = DEFAULT_PORT, psk: bytes | None = None,
           setup_timeout: float = SETUP_TIMEOUT, security: str = "off") -> Listener:
    """Listen for connection setups on ``addr``:``port`` (with ``psk``: only
    clients holding the key; ``security``: the mode the QPs run)."""
    return Listener(addr, port, psk, setup_timeout, security)


def connect(addr: str, port: int, info: RemoteInfo, timeout: float = SETUP_TIMEOUT, psk: bytes | None = None,
            security: str = "off", **extra) -> Connection:
    """Send our info (with proof of ``psk`` when the listener asks), wait for
    the peer's (it is at RTS when it answers). ``security`` "auth" or
    "encrypt" (with ``psk``) exchanges the keys of authenticated MRC."""
    secure.mode_of(security)
    if security != "off" and psk is None:
        raise UsageError(f"security {security} needs a pre-shared key: give --psk-file")
    try:
        s = socket.create_connection((addr, port), timeout=timeout)
    except OSError as e:
        raise errno_error(e.errno or errno.ETIMEDOUT, f"reach the connection-setup server at [{addr}]:{port}",
                          "is `mrc perf server` (or the listener) running there, and the management network up?"
                          ) from None
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    c = Connection(s)
    try:
        greeting = c.recv(timeout)
        if _uint(greeting.get("mrc"), PROTOCOL, PROTOCOL) is None or not isinstance(greeting.get("challenge"), str):
            raise _bad(f"the server does not speak this connection setup (version {PROTOCOL}; an older mrc?)")
        nonce = os.urandom(32)
        hello = {"info": info_to_json(info), **extra, "nonce": nonce.hex()}
        if security != "off":
            priv, pub = secure.keypair()
            hello.update(security=security, kx=pub.hex())
        if psk is not None and not greeting.get("auth"):
            raise ErrnoError(errno.EACCES, "we hold a pre-shared key but the server does not ask for one: is it "
                                           "the server you meant (started with --psk-file)?")
        if greeting.get("auth"):
            if psk is None:
                raise ErrnoError(errno.EACCES, "the server wants a pre-shared key: give --psk-file")
            challenge = _hex(greeting["challenge"], 16, 64, "the greeting's challenge")
            keys = secure.setup_keys(psk, challenge, nonce)
            inner = {k: v for k, v in hello.items() if k != "nonce"}
            hello = {"nonce": nonce.hex(), "sealed": secure.seal(keys["c2s"], b"mrc hello",
                                                                  json.dumps(inner).encode()).hex()}
            hello["auth"] = _proof(psk, challenge, hello)
        c.send(hello)
        ans = c.recv(timeout)
        if greeting.get("auth"):
            # proven over our nonce too: a recorded answer does not pass
            _check_proof(psk, challenge + nonce, ans, b"answer", "server")
            ans = _unseal_json(keys["s2c"], b"mrc answer", ans.get("sealed"), "answer")
            c._arm(keys["c2s"], keys["s2c"])
        c.peer = info_from_json(ans.get("info"))
        c.answer = ans
        if security != "off":
            peer = _hex(ans.get("kx"), 32, 32, "the answer's kx (an X25519 public key)")
            c.security = security
            c._kx = {"priv": bytearray(priv), "pub": pub, "peer": peer, "psk": bytearray(psk), "initiator": True,
                     "transcript": challenge + nonce + pub + peer}
        return c
    except BaseException:
        c.close()
        raise
