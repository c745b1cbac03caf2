"""A QP pair across a fabric: a context in each of two hosts' namespaces
(with the fabric's path resolver), a region on each side, and a QP from the
first to the second connected over every plane and path. The demo, the
fabric benchmark, the fault campaign and the root tests all use it.

>>> with qp_pair(t, 0, 3, 64 << 20) as p:                       # doctest: +SKIP
...     p.qa.post_write(p.ms, 0, 1 << 20, p.remote.addr, p.remote.rkey, wr_id=1)
...     assert p.cq.wait()[0].ok and p.verify(1 << 20)
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass

from mrc import secure
from mrc.fabric import ns, resolver
from mrc.fabric.topology import Topology
from mrc.verbs import CompletionQueue, Context, MemoryRegion, QPAttr, QueuePair, RemoteInfo


def host_context(t: Topology, host: int | str, **kw) -> Context:
    """A Context in fabric host ``host``'s namespace, over its ports, with the
    fabric's resolver (its engine thread runs in that namespace)."""
    name = t.host(host) if isinstance(host, int) else host
    return ns.run_in(t.ns(name), lambda: Context(resolver=resolver.resolver(t, name), **kw))


@dataclass
class QPPair:
    """``qa`` on ``ca`` writes from ``src`` (registered as ``ms``) into ``dst``
    on ``cb`` (``md``; ``remote`` is what ``qa``'s side knows of it). ``cq``
    is ``qa``'s own CQ."""

    ca: Context
    cb: Context
    qa: QueuePair
    qb: QueuePair
    src: bytearray
    dst: bytearray
    ms: MemoryRegion
    md: MemoryRegion
    remote: RemoteInfo
    cq: CompletionQueue
    owns_contexts: bool = False

    def verify(self, nbytes: int | None = None) -> bool:
        """The first ``nbytes`` (all) of the destination equal the source."""
        n = len(self.src) if nbytes is None else nbytes
        return hashlib.sha256(memoryview(self.dst)[:n]).digest() == hashlib.sha256(memoryview(self.src)[:n]).digest()

    def close(self) -> None:
        """Destroy the QPs (and the contexts, when the pair made them)."""
        if self.owns_contexts:
            self.ca.close()
            self.cb.close()

    def __enter__(self) -> QPPair:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def connect_pair(ca: Context, cb: Context, size: int, attr: QPAttr | None = None, random: bool = True,
                 security: str = "off") -> QPPair:
    """QPs on two open contexts, ca -> cb, with a ``size``-byte region on each
    side (the source filled with random bytes), connected both ways
    (``security``: secured, with keys as connection setup makes them)."""
    src, dst = bytearray(os.urandom(size) if random else size), bytearray(size)
    ms, md = ca.reg_mr(src), cb.reg_mr(dst, remote_write=True)  # the MRs keep the buffers
    cq = ca.create_cq()
    qa, qb = ca.create_qp(cq=cq, attr=attr), cb.create_qp(attr=attr)
    ia, ib = ca.local_info(qa, ms), cb.local_info(qb, md)
    ka = kb = None
    if security != "off":
        ka, kb = secure.pair_keys(qa.qpn, qb.qpn, security)
    qb.connect(ia, kb)  # the receiver first: it is at RTS before the first packet
    qa.connect(ib, ka)
    return QPPair(ca, cb, qa, qb, src, dst, ms, md, cb.resolve(ib), cq)


def qp_pair(t: Topology, src: int, dst: int, size: int, attr: QPAttr | None = None, security: str = "off",
            **ctx_kw) -> QPPair:
    """Contexts in hosts ``src`` and ``dst`` and a connected QP pair between
    them; closing the pair closes both contexts."""
    ca = host_context(t, src, **ctx_kw)
    try:
        cb = host_context(t, dst, **ctx_kw)
    except BaseException:
        ca.close()
        raise
    try:
        p = connect_pair(ca, cb, size, attr, security=security)
    except BaseException:
        ca.close()
        cb.close()
        raise
    p.owns_contexts = True
    return p
