"""Control sockets: where they live (``ctl_dir``), how one is made so that
nobody else can reach it first (``bind_socket``: mode 0600, or 0660 for a
group), who on the other end may modify (``peer_privileged``: root or
CAP_NET_ADMIN, checked through SO_PEERCRED and a pidfd), which are alive
(``endpoints``) and which killed processes left behind (``sweep_stale``).
The endpoint (mrc.ctl.endpoint) serves on them."""
from __future__ import annotations

import errno
import grp
import os
import re
import socket
import stat
import struct
import tempfile

from mrc.errors import ErrnoError

CTL_DIR = "/run/mrc/ctl"
CAP_NET_ADMIN = 12
SO_PEERPIDFD = 77        # Linux 6.5: a pidfd of the connecting process
_TAG = re.compile(r"[A-Za-z0-9_.]{1,32}")
_SOCK_NAME = re.compile(rf"(\d+)(?:-{_TAG.pattern})?\.sock")


def ctl_dir() -> str:
    """Where control sockets live ($MRC_CTL_DIR, else /run/mrc/ctl)."""
    return os.environ.get("MRC_CTL_DIR", CTL_DIR)


def _pidfd_pid(pidfd: int) -> int | None:
    """The PID a pidfd refers to now (-1 once the process has exited)."""
    try:
        with open(f"/proc/self/fdinfo/{pidfd}") as f:
            for line in f:
                if line.startswith("Pid:"):
                    return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return None


def _cap_net_admin(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("CapEff:"):
                    return bool(int(line.split()[1], 16) >> CAP_NET_ADMIN & 1)
    except (OSError, ValueError):
        pass
    return False


def peer_privileged(conn: socket.socket) -> bool:
    """Root, or CAP_NET_ADMIN in the connecting process's effective set.
    The capability is read from /proc/PID only while a pidfd taken from the
    socket still names that PID: the process that connected, not one that
    reused its number. Without pidfds (Linux < 6.5) only root may modify."""
    pid, uid, _gid = struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12))
    if uid == 0:
        return True
    try:
        pidfd = struct.unpack("i", conn.getsockopt(socket.SOL_SOCKET, SO_PEERPIDFD, 4))[0]
    except OSError:
        return False
    try:
        if _pidfd_pid(pidfd) != pid:
            return False
        ok = _cap_net_admin(pid)
        return ok and _pidfd_pid(pidfd) == pid
    finally:
        os.close(pidfd)


def _group_id(group) -> int | None:
    if group is None or group == "":
        return None
    if isinstance(group, int) or str(group).isdigit():
        return int(group)
    try:
        return grp.getgrnam(str(group)).gr_gid
    except KeyError:
        raise ErrnoError(errno.EINVAL, f"no group {group!r} for the control socket") from None


def _check_dir(d: str) -> None:
    """The socket's directory must be ours (or root's) and closed to others'
    writes, else someone could swap the socket for their own."""
    st = os.lstat(d)
    if not stat.S_ISDIR(st.st_mode):
        raise ErrnoError(errno.ENOTDIR, f"{d} is not a directory (a symbolic link?): the control socket needs "
                                        f"a real one")
    if st.st_uid not in (0, os.geteuid()):
        raise ErrnoError(errno.EPERM, f"{d} belongs to user {st.st_uid}: the control socket needs a directory "
                                      f"of its own user or root")
    if st.st_mode & 0o022 and not st.st_mode & stat.S_ISVTX:
        raise ErrnoError(errno.EPERM, f"{d} is writable by others: `chmod go-w {d}` (or set MRC_CTL_DIR)")


def bind_socket(path: str, group=None, backlog: int = 16) -> socket.socket:
    """A listening UNIX socket at ``path``, mode 0600 (0660 for ``group``),
    made where nobody else can reach it first: bound in a private directory,
    its mode set there, then renamed into place (which replaces a stale
    socket or a symbolic link, never follows one)."""
    d = os.path.dirname(path) or "."
    os.makedirs(d, mode=0o755, exist_ok=True)
    _check_dir(d)
    gid = _group_id(group)
    private = tempfile.mkdtemp(prefix=".bind-", dir=d)  # mode 0700
    tmp = os.path.join(private, "s")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.bind(tmp)
        if gid is not None:
            os.chown(tmp, -1, gid)
        os.chmod(tmp, 0o660 if gid is not None else 0o600)
        sock.listen(backlog)  # before it is in place: a socket there that refuses is stale (sweep_stale)
        os.rename(tmp, path)
    except BaseException:
        sock.close()
        if os.path.lexists(tmp):
            os.unlink(tmp)
        raise
    finally:
        os.rmdir(private)
    return sock


def _refuses(path: str) -> bool:
    """Nobody listens on the socket at ``path`` (a live endpoint listens
    before its socket is in place)."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.setblocking(False)
    try:
        s.connect(path)
    except ConnectionRefusedError:
        return True
    except OSError:  # busy (a full backlog), or not ours to reach: not proven stale
        return False
    finally:
        s.close()
    return False


def _control_sockets(d: str) -> list[tuple[str, bool]]:
    """(path, whether its process is alive) of every name in ``d`` that is a
    control socket's (none: no ``d``)."""
    try:
        names = sorted(os.listdir(d))
    except FileNotFoundError:
        return []
    return [(os.path.join(d, n), os.path.exists(f"/proc/{m.group(1)}"))
            for n in names if (m := _SOCK_NAME.fullmatch(n))]


def sweep_stale(d: str | None = None) -> list[str]:
    """Remove the control sockets left by processes that ended without
    removing theirs (killed): those whose process is gone, or whose PID now
    belongs to a process that does not listen there. Only UNIX sockets with
    a control socket's name, and only this user's (root: anyone's). A
    starting server calls it; the removed paths are returned."""
    try:
        socks = _control_sockets(d or ctl_dir())
    except OSError:  # not ours to read: nothing to sweep
        return []
    gone = []
    for path, alive in socks:
        try:
            st = os.lstat(path)
        except OSError:
            continue
        if not stat.S_ISSOCK(st.st_mode) or os.geteuid() not in (0, st.st_uid):
            continue
        if alive and not _refuses(path):
            continue
        try:
            os.unlink(path)
            gone.append(path)
        except OSError:
            pass
    return gone


def endpoints() -> list[str]:
    """Control sockets whose process is still alive (``<pid>.sock`` and
    ``<pid>-<tag>.sock``)."""
    return [path for path, alive in _control_sockets(ctl_dir()) if alive]
