"""``backend="mrc"`` for torch.distributed: ``import mrc.torch`` registers it.

>>> import torch.distributed as dist                                     # doctest: +SKIP
>>> import mrc.torch                                                      # doctest: +SKIP
>>> dist.init_process_group("mrc", rank=rank, world_size=4)               # doctest: +SKIP

One process per host, as with Gloo: each rank is a :mod:`mrc.coll`
communicator on the host's MRC ports, moved by a progress thread of its own
(:mod:`mrc.coll.progress`). The bootstrap goes through the store that
``init_process_group`` hands the backend, as NCCL's unique id does: rank 0
listens on a free port (on its management address where the topology names
one) and puts the address, the port and a fresh job id in the store; the
other ranks read it and join through ``mrc.cm``. With a pre-shared key
(``configure(psk_file=...)`` or ``MRC_PSK_FILE``) every rank proves it
holds it and the QP offers travel sealed, as ``mrc coll --psk-file`` does;
``security="auth"|"encrypt"`` also seals every QP's packets.

The backend's settings come from :func:`configure` or, for a script run
unchanged, from the environment: ``MRC_PSK_FILE``, ``MRC_SECURITY``,
``MRC_PORT_RATE`` (the fabric's link rate, e.g. ``25mbit``: the ports are
paced and the QPs get that rate's timers), ``MRC_CHANNELS``, ``MRC_ROOT_ADDR``
(rank 0's address where no topology names it; else ``MASTER_ADDR``).
"""

from __future__ import annotations

import json
import os
import secrets
from dataclasses import dataclass, fields
from datetime import timedelta

import torch.distributed as dist

from mrc.coll.comm import CollError, Communicator
from mrc.coll.progress import Progress
from mrc.errors import UsageError
from mrc.torch.pg import ProcessGroupMRC

__all__ = ["ProcessGroupMRC", "configure", "Settings"]

ROOT_KEY = "mrc/root"


@dataclass
class Settings:
    """What the backend builds each rank with (see the module's text)."""

    psk_file: str | None = None
    security: str = "off"
    port_rate: str | None = None
    channels: int = 2
    root_addr: str | None = None

    @classmethod
    def from_env(cls) -> Settings:
        """The settings the environment gives (MRC_PSK_FILE, MRC_SECURITY, MRC_PORT_RATE, MRC_CHANNELS,
        MRC_ROOT_ADDR)."""
        env = os.environ
        try:
            channels = int(env.get("MRC_CHANNELS", "2"))
        except ValueError:
            raise UsageError(f"MRC_CHANNELS={env['MRC_CHANNELS']!r} is not a number of QPs per peer") from None
        return cls(env.get("MRC_PSK_FILE") or None, env.get("MRC_SECURITY", "off"), env.get("MRC_PORT_RATE") or None,
                   channels, env.get("MRC_ROOT_ADDR") or None)


_settings: Settings | None = None


def configure(**kw) -> Settings:
    """Set the backend's settings for the groups made after it (the fields of :class:`Settings`);
    the rest come from the environment. Returns them."""
    global _settings
    names = {f.name for f in fields(Settings)}
    bad = sorted(set(kw) - names)
    if bad:
        raise UsageError(f"unknown setting(s) {', '.join(bad)}: use {', '.join(sorted(names))}")
    base = _settings or Settings.from_env()
    _settings = Settings(**{**base.__dict__, **kw})
    return _settings


def _net(store, rank: int, size: int, timeout: timedelta, s: Settings):
    from mrc import cm
    from mrc.coll.net import FabricNet

    psk = cm.read_psk(s.psk_file) if s.psk_file else None
    rate, prof = 0, None
    if s.port_rate:
        from mrc.fabric.qos import qp_profile
        from mrc.paths import from_environment
        from mrc.units import parse_rate

        rate = parse_rate(s.port_rate)
        prof = qp_profile(rate, len(from_environment().local_ports()) or 1)
    join = max(10.0, timeout.total_seconds())
    kw = {"psk": psk, "port_rate_bps": rate, "qp_attr": prof, "security": s.security, "join_timeout": join}
    if rank == 0:
        job = f"torch-{secrets.token_hex(6)}"

        def publish(addr: str, port: int) -> None:
            here = None if addr in ("::", "0.0.0.0") else addr
            store.set(ROOT_KEY, json.dumps({"addr": here or s.root_addr, "port": port, "job": job}))

        return FabricNet(0, size, "", 0, job, on_listen=publish, **kw)
    addr, port, job = root_of(store, rank, s)
    return FabricNet(rank, size, addr, port, job, **kw)


def root_of(store, rank: int, s: Settings) -> tuple[str, int, str]:
    """Where rank 0 listens, as it put it in ``store``: (address, port, job), every field checked
    (CollError for what is not rank 0's word, UsageError for an address nobody gave)."""
    try:
        raw = store.get(ROOT_KEY)
    except Exception as e:  # noqa: BLE001 (the store's own errors: a timeout, a closed store)
        raise CollError(f"rank {rank}: rank 0 of backend mrc did not say where it listens ({e})") from None
    try:
        root = json.loads(bytes(raw)[:4096])
    except (ValueError, TypeError):
        root = None
    ok = isinstance(root, dict) and isinstance(root.get("port"), int) and not isinstance(root["port"], bool) \
        and 1 <= root["port"] <= 65535 and isinstance(root.get("job"), str) and 0 < len(root["job"]) <= 64 \
        and (root.get("addr") is None or isinstance(root["addr"], str) and 0 < len(root["addr"]) <= 255)
    if not ok:
        raise CollError(f"rank {rank}: the store's {ROOT_KEY} is not rank 0's address, port and job id: "
                        f"{bytes(raw)[:80]!r}")
    addr = root.get("addr") or s.root_addr or os.environ.get("MASTER_ADDR")
    if not addr:
        raise UsageError("rank 0 listens on every address and no topology names its host: give MRC_ROOT_ADDR "
                         "(or MASTER_ADDR)")
    return addr, root["port"], root["job"]


def _create(store, rank: int, size: int, timeout: timedelta) -> ProcessGroupMRC:
    """The creator torch.distributed calls for ``backend="mrc"``."""
    s = _settings or Settings.from_env()
    net = _net(store, rank, size, timeout, s)
    try:
        comm = Communicator(rank, size, net, channels=s.channels, timeout=timeout.total_seconds())
    except BaseException:
        net.close()
        raise
    eng = Progress(net, [comm], name=f"mrc-progress-{rank}")
    return ProcessGroupMRC(comm, eng, owned=(eng, comm))


dist.Backend.register_backend("mrc", _create, devices=["cpu"])
