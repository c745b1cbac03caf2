"""Exceptions with messages a person can act on.

Every error that reaches a user says what is wrong and what to do. The CLI
prints ``str(exc)`` on one line and exits with ``exit_code``.
"""


class MrcError(Exception):
    """Base class of every error this package raises on purpose."""

    exit_code = 1


class UsageError(MrcError, ValueError):
    """Bad input: an impossible topology, an unknown link, a bad option."""

    exit_code = 2


class PrivilegeError(MrcError, PermissionError):
    """The operation needs root (CAP_NET_ADMIN / CAP_SYS_ADMIN)."""

    exit_code = 2


class FabricError(MrcError):
    """The fabric could not be built, found or changed."""

    exit_code = 2
