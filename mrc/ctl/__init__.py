"""The controller side of the OCP API (``mrc_ctl.h``): EV format, EV and CC
profiles (:mod:`mrc.ctl.profiles`), and the control endpoint each context
serves for ``mrc ctl`` (:mod:`mrc.ctl.endpoint`)."""
from mrc.ctl.profiles import (
                              ASSUMED_BAD,
                              AUTO,
                              DENIED,
                              EXPLICIT,
                              GENERATED,
                              GOOD,
                              INIT,
                              LIMITS,
                              OFFLINE,
                              ONLINE,
                              SRV6,
                              STEV,
                              UDP,
                              UNKNOWN,
                              CCProfile,
                              EVField,
                              EVFormatProfile,
                              EVProfile,
                              Registry,
                              srv6_from_paths,
)

__all__ = ["ASSUMED_BAD", "AUTO", "DENIED", "EXPLICIT", "GENERATED", "GOOD", "INIT", "LIMITS", "OFFLINE", "ONLINE",
           "SRV6", "STEV", "UDP", "UNKNOWN", "CCProfile", "EVField", "EVFormatProfile", "EVProfile",
           "Registry", "srv6_from_paths"]
