"""One rank of a job on real ports: a verbs Context, a CQ, and the bootstrap
that connects the ranks' QPs and carries aborts.

Bootstrap, as NCCL's unique id: rank 0 listens (``mrc.cm``, with a
pre-shared key when given) and the other ranks are given its address and a
job id. Every rank connects to rank 0 through ``cm.connect``; its hello
carries the job, its rank and the QPs it offers its ring neighbours (the
``info`` that cm requires is its QP toward its successor, channel 0).
Rank 0 checks each hello (the job, a rank not taken, the same size),
refuses strangers and goes on, and once every rank is in answers each with
the QPs its peers made for it. Every rank then connects its QPs, posts its
receives and says ``ready``; rank 0 says ``go`` when all have. Pairs an
algorithm needs later (all-to-all: every pair) are connected the same way
at the first call that needs them.

Secured (``security`` "auth" or "encrypt", with the job's pre-shared key):
the control connections are ``mrc.cm``'s, sealed after the handshake; every
QP offer carries an ephemeral X25519 public key (``kx``), and each QP pair's
keys come from the two ranks' exchange (HKDF salted with the key, bound to
the job, both ranks, both public keys and both QP numbers), so rank 0,
which relays the offers, never holds another pair's keys.

The TCP connections stay open as the control plane, one JSON line per
message (cm's framing, at most 64 KiB): ``abort`` from any rank is relayed
by rank 0 to every rank; a rank whose connection closes without ``bye``
has died, and rank 0 tells everyone (if rank 0 dies, every rank sees its
connection close). A watcher thread per rank reads the connection, so an
abort reaches a rank within milliseconds, even while it computes.
"""

from __future__ import annotations

import errno
import os
import queue
import select
import socket
import threading
import time

from mrc import cm, secure
from mrc.coll.comm import Communicator, Link
from mrc.errors import ErrnoError, MrcError, UsageError
from mrc.verbs import Context, QPAttr

JOIN_TIMEOUT = 60.0      # seconds for every rank to join, and for a connect round
CLOSE_WAIT_S = 5.0       # seconds a closing rank waits for the others to close (FabricNet._close_round)
#: a QP's doubling retries: some 17 s of silence before it fails (7 x 2.1 ms, then 4.2 ms doubling 12
#: times), the order of NCCL's over InfiniBand (NCCL_IB_TIMEOUT 20: 4.3 s a retry, 7 retries, ~30 s).
#: The engine's default, 0.55 s, and the 4 s this was,
#: are shorter than a loaded 2-core host can keep a rank's engine from answering (CI saw QPs of an
#: unfaulted 4-rank all-to-all fail so, 2 runs in 3); a rank that dies is found sooner, by its control
#: connection, and a call that waits too long by the communicator's timeout
QP_EXP_CNT = 12
MAX_JOB = 64


def check_hello(h: dict, job: str, nranks: int, taken: set[int], security: str = "off") -> str | None:
    """Why rank 0 refuses a hello (None: it is one of this job's ranks, not taken yet)."""
    who = h.get("rank")
    if h.get("job") != job:
        return f"job {str(h.get('job'))[:40]!r} is not this job"
    if h.get("qp_security", "off") != security:
        return (f"this job's QPs run security {security}, rank {str(who)[:20]} asked for "
                f"{str(h.get('qp_security'))[:20]!r} (give every rank the same --security)")
    if h.get("nranks") != nranks:
        return f"nranks {str(h.get('nranks'))[:20]} is not {nranks}"
    if not isinstance(who, int) or isinstance(who, bool) or not 1 <= who < nranks or who in taken:
        return f"rank {str(who)[:20]!r} is not a free rank of 1..{nranks - 1}"
    if not isinstance(h.get("qps"), dict):
        return "qps missing"
    return None


def parse_offers(theirs, nranks: int, channels: int, need_bytes: int, expected: set[int]) -> dict:
    """Peers' offered QPs (rank -> one RemoteInfo per channel), every field checked: only ranks
    this rank made QPs for, ``channels`` each, regions at least ``need_bytes`` (ErrnoError EPROTO)."""
    if not isinstance(theirs, dict):
        raise ErrnoError(errno.EPROTO, "the peers' QPs must be an object")
    out = {}
    for key, infos in theirs.items():
        try:
            peer = int(key)
        except (TypeError, ValueError):
            raise ErrnoError(errno.EPROTO, f"{str(key)[:20]!r} is not a rank") from None
        if not 0 <= peer < nranks or peer not in expected:
            raise ErrnoError(errno.EPROTO, f"rank {peer} offered QPs this rank did not ask for")
        if not isinstance(infos, list) or len(infos) != channels:
            raise ErrnoError(errno.EPROTO, f"rank {peer} offered {len(infos) if isinstance(infos, list) else 0} "
                                           f"QPs; this job runs {channels} channels per pair")
        out[peer] = [cm.info_from_json(j) for j in infos]
        small = [i.length for i in out[peer] if i.length < need_bytes]
        if small:
            raise ErrnoError(errno.EPROTO, f"rank {peer}'s region is {small[0]} bytes, under the {need_bytes} "
                                           f"its slots need (other --slots?)")
    return out


class _Peer:
    """One control connection (rank 0: one per other rank; others: to rank 0)."""

    def __init__(self, conn: cm.Connection, rank: int) -> None:
        self.conn, self.rank = conn, rank
        self.lock = threading.Lock()
        self.said_bye = False

    def send(self, obj: dict) -> None:
        with self.lock:
            try:
                self.conn.send(obj)
            except OSError:
                pass  # a dead peer: its watcher reports it


class FabricNet:
    """The net of one rank on real ports (``mrc fabric exec``, or any hosts a
    topology file names). ``root`` is rank 0's setup address."""

    def __init__(self, rank: int, nranks: int, root: str, port: int, job: str, psk: bytes | None = None,
                 ctx: Context | None = None, port_rate_bps: int = 0, spin_us: float | None = None,
                 join_timeout: float = JOIN_TIMEOUT, qp_attr: dict | None = None, security: str = "off",
                 on_listen=None, control: bool = True) -> None:
        """``qp_attr``: QPAttr fields every QP gets (timers and NSCC for a rate-limited fabric:
        ``mrc.fabric.qos.qp_profile``). ``security`` "auth" or "encrypt" (with ``psk``) secures every QP.
        ``on_listen(addr, port)``: rank 0 tells where it listens (``port`` 0 takes a free one), before it
        waits for the others (``mrc.torch`` puts it in torch's store, as NCCL's unique id). ``control``: the
        context it opens gets a control endpoint (``<pid>-rank<R>.sock``, for ``mrc ctl`` and the dash) where
        the socket directory can be written."""
        if not job or len(job) > MAX_JOB or not job.isprintable():
            raise UsageError(f"the job id must be 1 to {MAX_JOB} printable characters")
        secure.mode_of(security)
        if security != "off" and psk is None:
            raise UsageError(f"security {security} needs the job's pre-shared key: give --psk-file")
        self.security = security
        self._kx: dict[tuple[int, int], tuple[bytearray, bytes]] = {}  # (peer, channel) -> our X25519 pair
        if not 1 <= nranks <= 4096 or not 0 <= rank < nranks:
            raise UsageError(f"rank {rank} of {nranks}: ranks are 0 to nranks - 1")
        self.rank, self.nranks, self.root, self.port, self.job, self.psk = rank, nranks, root, port, job, psk
        self.on_listen = on_listen
        self.join_timeout = join_timeout
        self.qp_attr = dict(qp_attr or {})
        self.own_ctx = ctx is None
        kw = {"port_rate_bps": port_rate_bps} if port_rate_bps else {}
        if spin_us is not None:
            kw["spin_us"] = spin_us
        self.ctx = ctx if ctx is not None else Context(**kw)
        if self.own_ctx and control:
            # `mrc ctl` lists, steers and scrapes the rank as it does `mrc perf` (root: the socket directory;
            # without it the job runs on, unwatched); the context closes the endpoint
            from mrc.ctl import endpoint

            endpoint.serve(self.ctx, None, tag=f"rank{rank}", role=f"rank {rank} of {nranks}, job {job}")
        self.cq = self.ctx.create_cq()
        self.peers: dict[int, _Peer] = {}
        self.msgs: queue.Queue = queue.Queue()
        self.abort_info: tuple[int | None, str] | None = None
        self.departed: set[int] = set()     # ranks that closed their communicator (said bye)
        self._aborted = threading.Event()   # set with abort_info
        self._relay_lock = threading.Lock()  # an abort is recorded and relayed under it; close() takes it
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        self._threads: list[threading.Thread] = []
        self._listener: cm.Listener | None = None
        self._closing = False
        self.comm: Communicator | None = None
        self.hosts: dict[int, str | None] = {}

    # ------------------------------------------------------------ the net API
    def attach(self, comm: Communicator) -> None:
        """Join the job: connect to rank 0 (or, as rank 0, take every rank's hello) and the ring."""
        self.comm = comm
        n, r = self.nranks, self.rank
        ring = sorted({(r + 1) % n, (r - 1) % n} - {r}) if n > 1 else []
        offers = self._make(comm, ring)
        if r == 0:
            self._serve_join(comm, offers)
        else:
            self._join(comm, offers)
        self._start_watch()

    def reg_mr(self, comm: Communicator, buf, remote_write: bool):
        """Register ``buf`` in this rank's context."""
        return self.ctx.reg_mr(buf, remote_write=remote_write)

    def ensure(self, comm: Communicator, peers: list[int]) -> None:
        """Every rank calls this with the pairs of the same call: new pairs are connected in one round."""
        new = [p for p in peers if (p, 0) not in comm.links]
        if not new and not self._round_needed(comm, peers):
            return
        offers = self._make(comm, new)
        if self.rank == 0:
            got = {0: offers}
            deadline = time.monotonic() + self.join_timeout
            while len(got) < self.nranks:
                src, msg = self._next(deadline, "connect")
                got[src] = msg.get("connect", {})
            for dst in range(1, self.nranks):
                self.peers[dst].send({"peers": self._route(got, dst)})
            self._connect(comm, self._route(got, 0))
            self._barrier_root(deadline)
        else:
            self.peers[0].send({"connect": offers})
            _, msg = self._next(time.monotonic() + self.join_timeout, "peers")
            self._connect(comm, msg.get("peers", {}))
            self.peers[0].send({"ready": True})
            self._next(time.monotonic() + self.join_timeout, "go")

    def _round_needed(self, comm: Communicator, peers: list[int]) -> bool:
        # a rank that already has every pair still takes part when another rank has new ones: all-to-all
        # connects every pair at once, so a rank knows from the call alone
        return len(peers) == self.nranks - 1 and len(comm.links) < (self.nranks - 1) * comm.channels

    def poll(self, comm: Communicator):
        """This rank's completions."""
        return self.cq.poll()

    def wait(self, comm: Communicator, timeout: float) -> None:
        """Sleep until a completion, a control message or ``timeout`` seconds."""
        try:
            r, _, _ = select.select([self.cq.fd, self._wake_r], [], [], timeout)
        except (OSError, ValueError):
            return
        if self.cq.fd in r:
            try:
                os.read(self.cq.fd, 8)
            except BlockingIOError:
                pass

    def aborted(self, comm: Communicator, starting: bool = False):
        """(rank, cause) once the job aborted (or, when ``starting``, a rank left), else None."""
        if self.abort_info is None and starting and self.departed:
            gone = min(self.departed)
            return gone, f"rank {gone} closed its communicator"
        return self.abort_info

    def settle(self, comm: Communicator, timeout: float):
        """Wait up to ``timeout`` s for an abort from the control plane; what it says, or None."""
        self._aborted.wait(timeout)
        return self.abort_info

    def abort(self, comm: Communicator, rank: int | None, cause: str) -> None:
        """Remember it here and tell every rank (through rank 0)."""
        msg = {"abort": {"rank": rank, "cause": cause[:500], "from": self.rank}}
        with self._relay_lock:
            if self.abort_info is None:
                self.abort_info = (rank, cause)
                for p in list(self.peers.values()):
                    p.send(msg)
        self._set_abort(rank, cause)

    def gone(self) -> set[int]:
        """Ranks that closed their communicator."""
        return set(self.departed)

    def detach(self, comm: Communicator) -> None:
        """Leave the job: close the QPs, the listener and the control connections."""
        self.close()

    # ------------------------------------------------------------ QPs
    def _make(self, comm: Communicator, peers: list[int]) -> dict:
        """QPs and receive regions toward ``peers``; what each peer needs to connect them."""
        depth = 2 * comm.slots + 8
        offers = {}
        for peer in peers:
            infos = []
            for ch in range(comm.channels):
                qp = self.ctx.create_qp(cq=self.cq, attr=QPAttr(**{"exp_cnt": QP_EXP_CNT, **self.qp_attr,
                                                                   "rq_depth": depth, "sq_depth": depth,
                                                                   "max_wimm": min(256, depth)}))
                region = self.ctx.reg_mr(bytearray(comm.region_bytes()), remote_write=True)
                link = Link(peer, ch, qp, region, 0, 0)
                comm.links[(peer, ch)] = link
                comm.by_qpn[qp.qpn] = link
                info = cm.info_to_json(self.ctx.local_info(qp, region))
                if self.security != "off":
                    priv, pub = secure.keypair()
                    self._kx[(peer, ch)] = (bytearray(priv), pub)
                    info["kx"] = pub.hex()
                infos.append(info)
            offers[str(peer)] = infos
        return offers

    def _connect(self, comm: Communicator, theirs: dict) -> None:
        """Connect our QPs to what each peer offered us (secured: under the pair's keys), and post the receives."""
        mine = {peer for peer, _ in comm.links}
        for peer, infos in parse_offers(theirs, self.nranks, comm.channels, comm.region_bytes(), mine).items():
            for ch, info in enumerate(infos):
                link = comm.links[(peer, ch)]
                keys = self._pair_keys(peer, ch, link.qp.qpn, info.qpn, theirs[str(peer)][ch].get("kx"))
                link.qp.connect(info, keys)
                link.raddr, link.rkey = info.addr, info.rkey
                link.qp.post_recv([0] * (2 * comm.slots + 4))

    def _pair_keys(self, peer: int, ch: int, my_qpn: int, peer_qpn: int, peer_kx):
        """Our QP's keys toward ``peer``'s on channel ``ch`` (None: not secured). The lower rank
        is the initiator; the transcript is the job, both ranks, both public keys, both QP numbers,
        lower rank first, so both ends derive the same. Our private key is wiped once used."""
        if self.security == "off":
            return None
        theirs = cm._hex(peer_kx, 32, 32, f"rank {peer}'s QP offer's kx (an X25519 public key)")
        priv, pub = self._kx.pop((peer, ch))
        lo = self.rank < peer
        pubs = (pub, theirs) if lo else (theirs, pub)
        qpns = (my_qpn, peer_qpn) if lo else (peer_qpn, my_qpn)
        ranks = (self.rank, peer) if lo else (peer, self.rank)
        seen = (b"mrc coll v1 " + self.job.encode() + b"".join(r.to_bytes(4, "big") for r in (*ranks, ch)) +
                b"".join(pubs) + b"".join(q.to_bytes(4, "big") for q in qpns))
        try:
            return secure.derive(bytes(priv), theirs, self.psk, seen, lo, self.security)
        finally:
            priv[:] = bytes(len(priv))

    @staticmethod
    def _route(got: dict, dst: int) -> dict:
        """What each rank offered ``dst``."""
        return {str(src): offers[str(dst)] for src, offers in got.items() if str(dst) in offers}

    # ------------------------------------------------------------ bootstrap
    def _hello_extra(self, offers: dict) -> dict:
        return {"job": self.job, "rank": self.rank, "nranks": self.nranks, "qps": offers,
                "host": self.ctx.resolver.host, "qp_security": self.security}

    def _join(self, comm: Communicator, offers: dict) -> None:
        succ = str((self.rank + 1) % self.nranks)
        card = cm.info_from_json(offers[succ][0])
        deadline = time.monotonic() + self.join_timeout
        while True:  # rank 0 may not listen yet: it starts at the same time as we do
            try:
                conn = cm.connect(self.root, self.port, card, timeout=self.join_timeout, psk=self.psk,
                                  **self._hello_extra(offers))
                break
            except ErrnoError as e:
                if e.errno not in (errno.ECONNREFUSED, errno.ENETUNREACH, errno.EHOSTUNREACH) or \
                        time.monotonic() > deadline:
                    raise ErrnoError(e.errno, f"rank {self.rank} could not join job {self.job!r} at "
                                              f"[{self.root}]:{self.port}: {e}") from None
                time.sleep(0.1)
        self.peers[0] = _Peer(conn, 0)
        ans = conn.answer
        if ans.get("job") != self.job:
            raise ErrnoError(errno.EPROTO, f"rank 0 answered for job {str(ans.get('job'))[:40]!r}, not {self.job!r}")
        self.hosts = {int(k): v for k, v in ans.get("hosts", {}).items()} if isinstance(ans.get("hosts"), dict) else {}
        self._connect(comm, ans.get("qps", {}))
        conn.send({"ready": True})
        msg = conn.recv(self.join_timeout)
        if "go" not in msg:
            raise ErrnoError(errno.EPROTO, f"rank 0 sent {sorted(msg)[:3]} where go was due")

    def _serve_join(self, comm: Communicator, offers: dict) -> None:
        # this host's management address when the topology names it (as mrc perf server binds), else all
        host = self.ctx.resolver.host
        bind = (self.ctx.resolver.mgmt_address(host) if host else None) or "::"
        try:
            self._listener = cm.listen(bind, self.port, self.psk)
        except OSError as e:
            raise UsageError(f"rank 0 cannot listen on port {self.port}: {e}") from None
        if self.on_listen is not None:
            self.on_listen(bind, self._listener.sock.getsockname()[1])
        got = {0: offers}
        conns: dict[int, cm.Connection] = {}
        self.hosts = {0: self.ctx.resolver.host}
        deadline = time.monotonic() + self.join_timeout
        while len(conns) < self.nranks - 1:
            left = deadline - time.monotonic()
            if left <= 0:
                missing = sorted(set(range(1, self.nranks)) - set(conns))
                raise ErrnoError(errno.ETIMEDOUT, f"job {self.job!r}: rank(s) {', '.join(map(str, missing))} did not "
                                                  f"join within {self.join_timeout:g} s")
            try:
                c = self._listener.accept(timeout=left)
            except TimeoutError:
                continue
            except OSError:
                continue  # a bad hello was refused: the job goes on
            h = c.hello
            who = h.get("rank")
            why = check_hello(h, self.job, self.nranks, set(conns), self.security)
            if why:
                c.refuse(ErrnoError(errno.EPERM, why))
                continue
            conns[who] = c
            got[who] = h["qps"]
            self.hosts[who] = h.get("host") if isinstance(h.get("host"), str) else None
        card = cm.info_from_json(offers[str(1 % self.nranks)][0]) if self.nranks > 1 else None
        for who, c in conns.items():
            c.reply(card, job=self.job, qps=self._route(got, who), hosts={str(k): v for k, v in self.hosts.items()})
            self.peers[who] = _Peer(c, who)
        self._connect(comm, self._route(got, 0))
        self._barrier_root(deadline)

    def _barrier_root(self, deadline: float) -> None:
        ready = 0
        if not self._threads:  # before the watchers run, read the connections here
            for who, p in self.peers.items():
                msg = p.conn.recv(max(0.1, deadline - time.monotonic()))
                if "ready" not in msg:
                    raise ErrnoError(errno.EPROTO, f"rank {who} sent {sorted(msg)[:3]} where ready was due")
                ready += 1
        else:
            while ready < self.nranks - 1:
                self._next(deadline, "ready")
                ready += 1
        for p in self.peers.values():
            p.send({"go": True})

    def _next(self, deadline: float, want: str) -> tuple[int, dict]:
        """The next control message of kind ``want`` (the watcher threads queue them)."""
        while True:
            if self.abort_info is not None:
                raise MrcError(f"the job was aborted: {self.abort_info[1]}")
            try:
                src, msg = self.msgs.get(timeout=max(0.0, min(0.2, deadline - time.monotonic())))
            except queue.Empty:
                if time.monotonic() > deadline:
                    raise ErrnoError(errno.ETIMEDOUT, f"rank {self.rank}: no {want} from the job within "
                                                      f"{self.join_timeout:g} s") from None
                continue
            if want in msg:
                return src, msg

    # ------------------------------------------------------------ watching
    def _start_watch(self) -> None:
        for who, p in self.peers.items():
            t = threading.Thread(target=self._watch, args=(p,), daemon=True, name=f"coll-ctl-{who}")
            t.start()
            self._threads.append(t)

    def _watch(self, p: _Peer) -> None:
        while True:
            try:
                msg = p.conn.recv(timeout=None)
            except (MrcError, OSError):
                if self._closing:
                    return
                if p.said_bye:
                    return
                cause = f"rank {p.rank} died (its control connection closed)"
                self._relay(p.rank, cause, p.rank)
                return
            if "abort" in msg:
                a = msg["abort"] if isinstance(msg["abort"], dict) else {}
                rank = a.get("rank") if isinstance(a.get("rank"), int) else None
                self._relay(rank, str(a.get("cause", "aborted"))[:500], p.rank)
            elif "bye" in msg:
                # a rank that leaves has finished every call it made: the next call needs it, this one not
                p.said_bye = True
                self.departed.add(p.rank)
            else:
                self.msgs.put((p.rank, msg))

    def _relay(self, rank: int | None, cause: str, came_from: int) -> None:
        # the abort is known here and relayed under one lock, which close() takes before it says bye:
        # no rank hears this one's bye before its relay, and this rank acts on the first cause it heard
        with self._relay_lock:
            first = self.abort_info is None
            if first:
                self.abort_info = (rank, cause)
            if first and self.rank == 0:
                for who, q in list(self.peers.items()):
                    if who != came_from:
                        q.send({"abort": {"rank": rank, "cause": cause, "from": came_from}})
        self._set_abort(rank, cause)

    def _set_abort(self, rank: int | None, cause: str) -> None:
        if self.abort_info is None:
            self.abort_info = (rank, cause)
        self._aborted.set()
        try:
            os.write(self._wake_w, b"x")
        except OSError:
            pass

    # ------------------------------------------------------------ lifetime
    def _close_round(self) -> None:
        """Wait (at most CLOSE_WAIT_S) until every rank is closing: a rank's last writes to a peer complete
        only when that peer acknowledges them, and a peer that finished its calls and destroyed its QPs at
        once could leave them unacknowledged for good (its delayed ACK never sent): the sender's last call
        then waited out its QP's retries (RETRY_EXC_ERR) or the call's timeout, at the end of a job. An
        aborted job, or a rank that never comes, is not waited for."""
        if self.abort_info is not None or self.comm is None or not self._threads or self.nranks == 1:
            return
        deadline = time.monotonic() + CLOSE_WAIT_S
        try:
            if self.rank == 0:
                for _ in range(self.nranks - 1):
                    self._next(deadline, "closing")
                for p in self.peers.values():
                    p.send({"closed": True})
            else:
                self.peers[0].send({"closing": True})
                self._next(deadline, "closed")
        except (MrcError, OSError):
            pass  # dead, aborted or late: the bye below still goes

    def close(self) -> None:
        """Wait for the other ranks to close, say bye, close the control plane, free the QPs, regions
        and context."""
        if self._closing:
            return
        self._close_round()
        self._closing = True
        with self._relay_lock:  # a relay under way goes out before the bye
            pass
        for p in self.peers.values():
            p.send({"bye": True})
            try:
                p.conn.sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            p.conn.close()
        for t in self._threads:
            t.join(2)
        if self._listener is not None:
            self._listener.close()
        if self.comm is not None:
            for link in self.comm.links.values():
                try:
                    link.qp.destroy()
                except MrcError:
                    pass
            self.comm.links.clear()
        if self.own_ctx:
            self.ctx.close()
        for fd in (self._wake_r, self._wake_w):
            os.close(fd)
        for priv, _ in self._kx.values():
            priv[:] = bytes(len(priv))
        self._kx.clear()


def init(rank: int, nranks: int, root_addr: str, job: str, port: int = 18700, psk: bytes | None = None,
         channels: int = 2, slots: int = 8, slot_bytes: int = 1 << 19, timeout: float = 120.0,
         security: str = "off", **net_kw) -> Communicator:
    """Join job ``job`` as ``rank`` of ``nranks``: rank 0 listens on ``port`` (on its
    management address when the topology names it, else on all), the others connect
    to ``root_addr``. Returns the communicator once every rank has joined and the
    ring is connected (``net_kw``: FabricNet's options, e.g. ``port_rate_bps``).
    ``security`` "auth" or "encrypt" (with ``psk``) seals every QP's packets and the
    bootstrap's messages.

    >>> comm = init(rank, 4, "fd6e::1", job="step-42")              # doctest: +SKIP
    >>> grads = comm.all_reduce(np.ones(1 << 20, np.float32))       # doctest: +SKIP
    """
    net = FabricNet(rank, nranks, root_addr, port, job, psk=psk, security=security, **net_kw)
    try:
        return Communicator(rank, nranks, net, channels=channels, slots=slots, slot_bytes=slot_bytes,
                            timeout=timeout)
    except BaseException:
        net.close()
        raise
