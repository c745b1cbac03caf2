"""Exceptions with messages a person can act on, and the one mapping from an
errno (what the C data path, the controller and connection setup return) to
an exception.

Every error that reaches a user says what is wrong and what to do. The CLI
prints ``str(exc)`` on one line and exits with ``exit_code``.

>>> check(0, "create QP")
0
>>> try:
...     check(-errno.ENOENT, "destroy QP 7")
... except ErrnoError as e:
...     print(e.errno == errno.ENOENT, str(e))
True ENOENT: destroy QP 7: No such file or directory (no such object: destroyed, or never created)
"""

from __future__ import annotations

import errno
import os


class MrcError(Exception):
    """Base class of every error this package raises on purpose."""

    exit_code = 1


class UsageError(MrcError, ValueError):
    """Bad input: an impossible topology, an unknown link, a bad option."""

    exit_code = 2


class FabricError(MrcError):
    """The fabric could not be built, found or changed."""

    exit_code = 2


class ErrnoError(MrcError, OSError):
    """A call refused with an errno: by the C data path, the controller or
    connection setup. ``errno`` is the code (the OCP API names them: EINVAL,
    E2BIG, ENOENT, EBUSY, EPERM, ...); ``str()`` is ``ENAME: what and why``;
    ``needed`` is the size a too-small query needed (E2BIG)."""

    exit_code = 2

    def __init__(self, code: int, message: str, needed: int | None = None) -> None:
        OSError.__init__(self, code, message)
        self.needed = needed

    def __str__(self) -> str:
        return f"{errno.errorcode.get(self.errno, self.errno)}: {self.strerror}"


class PrivilegeError(ErrnoError, PermissionError):
    """The operation needs root (CAP_NET_ADMIN, CAP_NET_RAW or CAP_SYS_ADMIN)."""

    def __init__(self, message: str, code: int = errno.EPERM) -> None:
        super().__init__(code, message)


#: What to do about each errno the data path returns.
HINTS = {
    errno.EINVAL: "an argument or a state transition is not allowed here",
    errno.ENOENT: "no such object: destroyed, or never created",
    errno.ENOSPC: "a queue or table is full: poll completions or create fewer objects",
    errno.EFAULT: "a scatter entry is outside its memory region (wrong lkey, offset or length), or the region "
                  "is in another protection domain than the QP (create_qp(pd=...) with the region's PD)",
    errno.EOPNOTSUPP: "this context cannot do that (only RDMA WRITE and WRITE_IMM exist in MRC; "
                      "a context driven by hand has no ports, thread or completion channel)",
    errno.EMSGSIZE: "a message may carry at most 4 GiB - 1",
    errno.ENOMEM: "out of memory",
    errno.E2BIG: "the output array is too small",
    errno.EBUSY: "the object is in use: release what uses it first",
    errno.EBADF: "the context is closed: open a new one",
    errno.EPERM: "this needs root or CAP_NET_ADMIN",
    errno.EACCES: "this needs root or CAP_NET_RAW",
    errno.ENOTCONN: "the engine thread is not running",
    errno.ECONNRESET: "the other side went away",
}


def errno_error(code: int, what: str, hint: str | None = None) -> ErrnoError:
    """The exception for errno ``code`` from the call described by ``what``."""
    text = f"{what}: {os.strerror(code)} ({hint or HINTS.get(code, 'see errno')})"
    if code in (errno.EPERM, errno.EACCES):
        return PrivilegeError(text, code)
    return ErrnoError(code, text)


def check(rc: int, what: str, hint: str | None = None) -> int:
    """A C return code (0, a count, or -errno) as a value, or the exception."""
    if rc < 0:
        raise errno_error(-rc, what, hint)
    return rc


def listen_error(e: OSError, flag: str, addr: str, port: int) -> UsageError:
    """A listening socket that could not bind ``addr``:``port`` (given as ``flag``), in one line that says
    why and what to do."""
    where = f"[{addr}]:{port}" if ":" in addr else f"{addr}:{port}"
    if e.errno == errno.EADDRINUSE:
        why = (f"the port is in use by another program (`ss -ltnp 'sport = :{port}'` shows which); stop it or "
               "give another port")
    elif e.errno == errno.EADDRNOTAVAIL:
        why = "no interface here has that address; give one this machine has (or 127.0.0.1)"
    elif e.errno == errno.EACCES:
        why = "ports below 1024 need root; give a higher one"
    else:
        why = f"{e.strerror or e}"
    return UsageError(f"{flag} {where}: cannot listen there: {why}")

