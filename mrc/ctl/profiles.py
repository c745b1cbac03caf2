"""Controller profiles (OCP ``mrc_ctl.h``): EV format profiles, EV profiles
and CC profiles, their shared state machine, and the EV field expansion.

Every profile moves INIT -> OFFLINE (configured, modifiable) -> ONLINE
(usable: only state queries and EV state changes) -> OFFLINE -> INIT.
Errors (:class:`mrc.errors.ErrnoError`) carry the errno the OCP API names:

- ``EINVAL`` a bad argument (a field wider than its format field, a mask
  outside the field, a state change the machine does not allow);
- ``E2BIG`` an array too large for the device, or too small for a query
  (``needed`` is the size needed);
- ``ENOENT`` an unknown profile id or an EV that is not in the profile;
- ``EBUSY`` a profile in use (a format profile under an ONLINE EV profile,
  an EV profile under an active QP) or an ONLINE profile being modified;
- ``EPERM`` a modification by an unprivileged caller.

Expansion of a GENERATED profile, per field (width, init_val, min_val,
max_val, mask): the field's generated value runs from min_val to max_val;
its bits are scattered into the set bits of ``mask``, lowest first; the
result is ORed into init_val; each field is left-padded to its format
field's width and the fields are concatenated, the first one most
significant. EV number i enumerates the combinations with the last field
varying fastest. A fixed part is a field with ``init_val`` and a zero mask.

>>> fmt = EVFormatProfile(1, STEV, [8, 4, 4])
>>> prof = EVProfile(1, GENERATED, fmt, fields=[EVField(8, mask=0xFF), EVField(4, mask=0xF), EVField(4, mask=0xF)])
>>> prof.ev_count, prof.value(0), prof.value(65535), prof.value(17)
(65536, 0, 65535, 17)
"""
from __future__ import annotations

import errno
import ipaddress
from dataclasses import dataclass

from mrc.errors import ErrnoError

# profile states
INIT, OFFLINE, ONLINE = "INIT", "OFFLINE", "ONLINE"
# EV format modes
SRV6, STEV, UDP = "SRV6", "STEV", "UDP"
#: widths of the packet fields each format mode writes the EV into (bits)
FORMAT_WIDTH = {SRV6: 128, STEV: 20 + 16, UDP: 16}
# EV profile modes
AUTO, EXPLICIT, GENERATED = "AUTO", "EXPLICIT", "GENERATED"
# EV states (mrc_ctl.h)
GOOD, ASSUMED_BAD, DENIED, UNKNOWN = "GOOD", "ASSUMED_BAD", "DENIED", "UNKNOWN"
EV_STATES = (GOOD, ASSUMED_BAD, DENIED, UNKNOWN)


@dataclass(frozen=True)
class Limits:
    """What this device supports (``mrc_ctl_query_device_ex``)."""

    max_fmt_profiles: int = 16
    max_ev_profiles: int = 64
    max_evs_per_profile: int = 65536
    max_evs_total: int = 1 << 20
    max_fields: int = 8
    format_modes: tuple = (SRV6, STEV, UDP)
    ev_modes: tuple = (AUTO, EXPLICIT, GENERATED)
    cc_algorithms: tuple = ("uet-1.0-nscc",)
    modify_online: bool = False
    ev_events: bool = True
    ev_probes: bool = True


LIMITS = Limits()


def _bad(msg: str) -> ErrnoError:
    return ErrnoError(errno.EINVAL, msg)


class _Profile:
    """The state machine shared by format, EV and CC profiles."""

    kind = "profile"

    def __init__(self, pid: int) -> None:
        if not isinstance(pid, int) or pid < 0:
            raise _bad(f"{self.kind} profile id must be a non-negative integer, got {pid!r}")
        self.id = pid
        self.state = INIT
        self.users = 0  # ONLINE profiles or active QPs that use this one

    def _modifiable(self) -> None:
        if self.state == ONLINE and not LIMITS.modify_online:
            raise ErrnoError(errno.EBUSY, f"{self.kind} profile {self.id} is ONLINE: take it OFFLINE to modify it")

    def online(self) -> None:
        if self.state != OFFLINE:
            raise _bad(f"{self.kind} profile {self.id} is {self.state}: only an OFFLINE profile can go ONLINE")
        self._check_complete()
        self.state = ONLINE

    def offline(self) -> None:
        if self.state == INIT:
            raise _bad(f"{self.kind} profile {self.id} is INIT: configure it first")
        if self.state == ONLINE and self.users:
            raise ErrnoError(errno.EBUSY, f"{self.kind} profile {self.id} is used by {self.users} "
                                        f"{'profile or QP' if self.users == 1 else 'profiles or QPs'}")
        self.state = OFFLINE

    def reset(self) -> None:
        if self.state == ONLINE:
            raise ErrnoError(errno.EBUSY, f"{self.kind} profile {self.id} is ONLINE: take it OFFLINE first")
        self.state = INIT

    def _check_complete(self) -> None:
        pass


class EVFormatProfile(_Profile):
    """Where the EV goes in a packet: ``mode`` and the format field widths
    (their sum is the expanded EV width)."""

    kind = "EV format"

    def __init__(self, pid: int, mode: str | None = None, widths: list[int] | None = None) -> None:
        super().__init__(pid)
        self.mode, self.widths = None, []
        if mode is not None:
            self.modify(mode, widths or [])

    def modify(self, mode: str, widths: list[int]) -> None:
        """Set the format's mode and field widths (refused while an EV profile uses it)."""
        self._modifiable()
        if self.users:
            raise ErrnoError(errno.EBUSY, f"EV format profile {self.id} is used by an EV profile")
        if mode not in FORMAT_WIDTH:
            raise _bad(f"unknown EV format mode {mode!r}: use one of {', '.join(FORMAT_WIDTH)}")
        if not widths or any(not isinstance(w, int) or w <= 0 for w in widths):
            raise _bad(f"format field widths must be positive integers, got {widths!r}")
        if len(widths) > LIMITS.max_fields:
            raise ErrnoError(errno.E2BIG, f"{len(widths)} format fields, at most {LIMITS.max_fields}")
        if sum(widths) > FORMAT_WIDTH[mode]:
            raise _bad(f"format fields {widths} total {sum(widths)} bits; {mode} carries at most "
                       f"{FORMAT_WIDTH[mode]}")
        self.mode, self.widths = mode, list(widths)
        self.state = OFFLINE

    @property
    def width(self) -> int:
        """The EV's width in bits, all fields together."""
        return sum(self.widths)

    def query(self) -> dict:
        """The profile as a dict."""
        return {"id": self.id, "state": self.state, "mode": self.mode, "widths": list(self.widths)}


@dataclass(frozen=True)
class EVField:
    """One field of a GENERATED EV profile (see the module docstring)."""

    width: int
    init_val: int = 0
    min_val: int = 0
    max_val: int | None = None  # default: every value the mask can hold
    mask: int = 0

    @property
    def bits(self) -> int:
        """The field's width in bits."""
        return bin(self.mask).count("1")

    @property
    def hi(self) -> int:
        """The field's largest value."""
        return (1 << self.bits) - 1 if self.max_val is None else self.max_val

    @property
    def count(self) -> int:
        """How many values the field takes."""
        return self.hi - self.min_val + 1

    def value(self, v: int) -> int:
        """init_val with the bits of v scattered into the mask, lowest first."""
        out, m, k = self.init_val, self.mask, 0
        while m:
            low = m & -m
            if (v >> k) & 1:
                out |= low
            m ^= low
            k += 1
        return out


@dataclass
class EVEntry:
    """One EV: its expanded value and the 1-based port it leaves on."""

    value: int
    port: int
    state: str = GOOD

    def as_dict(self, fmt: EVFormatProfile) -> dict:
        """The entry as a dict (with its SRv6 address in SRv6 mode)."""
        d = {"value": self.value, "port": self.port, "state": self.state}
        if fmt.mode == SRV6:
            d["address"] = srv6_address(self.value, fmt.width)
        elif fmt.mode == STEV:
            d["flow_label"], d["udp_sport"] = stev_fields(self.value, fmt.width)
        return d


def srv6_address(value: int, width: int) -> str:
    """An SRV6 EV as the destination address: the EV fills the top bits."""
    return str(ipaddress.IPv6Address(value << (128 - width)))


def stev_fields(value: int, width: int) -> tuple[int, int]:
    """An STEV EV as (flow label, UDP source port): the low 20 bits go into
    the flow label, the bits above them into the source port."""
    return value & 0xFFFFF, (value >> 20) & 0xFFFF


class EVProfile(_Profile):
    """The EVs a QP sprays over (``mrc_ctl_modify_ev_profile``).

    AUTO: the device picks its EVs (``ev_count`` of them over every port);
    EXPLICIT: the controller supplies the array, entry by entry
    (``replace``), which starts unpopulated (UNKNOWN) and must be complete
    before ONLINE; GENERATED: the device expands ``fields`` (all EVs leave
    on ``port``, 1-based)."""

    kind = "EV"

    def __init__(self, pid: int, mode: str | None = None, fmt: EVFormatProfile | None = None, *,
                 ev_count: int | None = None, fields: list[EVField] | None = None, port: int = 1,
                 ev_min_active: int = 1, event_mask: tuple = (GOOD, ASSUMED_BAD)) -> None:
        super().__init__(pid)
        self.mode, self.fmt, self.fields, self.port = None, None, [], 1
        self.entries: list[EVEntry | None] = []
        #: called as fn(address, state) when an SRV6 EV is denied or allowed (bound QPs follow)
        self.watchers: list = []
        self._reindex()
        self.ev_count, self.ev_min_active, self.event_mask = 0, 1, tuple(event_mask)
        if mode is not None:
            self.modify(mode, fmt, ev_count=ev_count, fields=fields, port=port, ev_min_active=ev_min_active,
                        event_mask=event_mask)

    # ------------------------------------------------------- configuration
    def modify(self, mode: str, fmt: EVFormatProfile | None, *, ev_count: int | None = None,
               fields: list[EVField] | None = None, port: int = 1, ev_min_active: int = 1,
               event_mask: tuple = (GOOD, ASSUMED_BAD)) -> None:
        """Set the profile's mode, format and EVs (refused while online)."""
        self._modifiable()
        if mode not in (AUTO, EXPLICIT, GENERATED):
            raise _bad(f"unknown EV profile mode {mode!r}: use AUTO, EXPLICIT or GENERATED")
        if mode != AUTO and (fmt is None or fmt.state == INIT):
            raise _bad(f"a {mode} EV profile needs a configured EV format profile")
        if not isinstance(port, int) or port < 1:
            raise _bad(f"ports are 1-based, got {port!r}")
        bad_mask = [s for s in event_mask if s not in (GOOD, ASSUMED_BAD)]
        if bad_mask:
            raise _bad(f"events can be asked for GOOD and ASSUMED_BAD, not {bad_mask}")
        fields = list(fields or [])
        if mode == GENERATED:
            n = self._check_fields(fmt, fields)
            ev_count = n if ev_count is None else ev_count
            if ev_count > n:
                raise _bad(f"ev_count {ev_count} but the fields generate only {n} EVs")
        elif fields:
            raise _bad(f"fields are for GENERATED profiles, not {mode}")
        if not isinstance(ev_count, int) or ev_count <= 0:
            raise _bad(f"ev_count must be a positive integer, got {ev_count!r}")
        if ev_count > LIMITS.max_evs_per_profile:
            raise ErrnoError(errno.E2BIG, f"{ev_count} EVs, at most {LIMITS.max_evs_per_profile} per profile",
                           needed=ev_count)
        if not 1 <= ev_min_active <= ev_count:
            raise _bad(f"ev_min_active must be 1..{ev_count}, got {ev_min_active}")
        self.mode, self.fmt, self.fields, self.port = mode, fmt, fields, port
        self.ev_count, self.ev_min_active, self.event_mask = ev_count, ev_min_active, tuple(event_mask)
        if mode == GENERATED:
            self.entries = [EVEntry(self.value(i), port) for i in range(ev_count)]
        else:
            self.entries = [None] * ev_count
        self._reindex()
        self.state = OFFLINE

    def _reindex(self) -> None:
        """value -> entry indices, and how many populated entries are DENIED."""
        self._by_value: dict[int, list[int]] = {}
        for i, e in enumerate(self.entries):
            if e is not None:
                self._by_value.setdefault(e.value, []).append(i)
        self._populated = sum(len(v) for v in self._by_value.values())
        self._denied = sum(1 for e in self.entries if e is not None and e.state == DENIED)

    @staticmethod
    def _check_fields(fmt: EVFormatProfile, fields: list[EVField]) -> int:
        if not fields:
            raise _bad("a GENERATED profile needs at least one field")
        if len(fields) > len(fmt.widths):
            raise _bad(f"{len(fields)} fields but format profile {fmt.id} has {len(fmt.widths)}")
        n = 1
        for i, (f, fw) in enumerate(zip(fields, fmt.widths, strict=False)):
            where = f"field {i}"
            if not isinstance(f.width, int) or not 0 < f.width <= fw:
                raise _bad(f"{where}: width {f.width} must be 1..{fw} (its format field)")
            top = 1 << f.width
            if not 0 <= f.init_val < top:
                raise _bad(f"{where}: init_val {f.init_val:#x} does not fit in {f.width} bits")
            if not 0 <= f.mask < top:
                raise _bad(f"{where}: mask {f.mask:#x} does not fit in {f.width} bits")
            if f.max_val is not None and not 0 <= f.max_val < (1 << f.bits):
                raise _bad(f"{where}: max_val {f.max_val} needs more than the mask's {f.bits} bits")
            if not 0 <= f.min_val <= f.hi:
                raise _bad(f"{where}: min_val {f.min_val} must be 0..max_val ({f.hi})")
            n *= f.count
        return n

    def value(self, i: int) -> int:
        """The expanded value of generated EV number ``i``."""
        parts = []
        for f in reversed(self.fields):
            parts.append(f.value(f.min_val + i % f.count))
            i //= f.count
        parts.reverse()
        out = 0
        for v, fw in zip(parts, self.fmt.widths, strict=False):
            out = (out << fw) | v
        # fields may be fewer than format fields: the rest are zero, low bits
        for fw in self.fmt.widths[len(parts):]:
            out <<= fw
        return out

    def _check_complete(self) -> None:
        if self.mode != AUTO and self.fmt.state != ONLINE:
            raise _bad(f"EV format profile {self.fmt.id} is {self.fmt.state}: bring it ONLINE first")
        missing = sum(1 for e in self.entries if e is None)
        if self.mode == EXPLICIT and missing:
            raise _bad(f"EV profile {self.id} has {missing} of {self.ev_count} EVs unpopulated: replace them all")

    def online(self) -> None:
        """Bring the profile online; its format is then in use."""
        super().online()
        if self.fmt is not None:
            self.fmt.users += 1

    def offline(self) -> None:
        """Take the profile offline; its format is free again."""
        was = self.state
        super().offline()
        if was == ONLINE and self.fmt is not None:
            self.fmt.users -= 1

    # ---------------------------------------------------------- operations
    def replace(self, index: int, value: int, port: int, all_copies: bool = False) -> int:
        """Replace EV ``index`` (or, with ``all_copies``, every entry that
        holds the same value as it) with ``value`` leaving on ``port``.
        Returns how many entries changed."""
        self._modifiable()
        if self.mode == AUTO:
            raise _bad("an AUTO profile's EVs are chosen by the device")
        if not 0 <= index < self.ev_count:
            raise ErrnoError(errno.ENOENT, f"EV index {index} is not in profile {self.id} (0..{self.ev_count - 1})")
        if not 0 <= value < (1 << self.fmt.width):
            raise _bad(f"EV value {value:#x} is wider than the format's {self.fmt.width} bits")
        if not isinstance(port, int) or port < 1:
            raise _bad(f"ports are 1-based, got {port!r}")
        old = self.entries[index]
        idx = [index]
        if all_copies and old is not None:
            idx = [i for i, e in enumerate(self.entries) if e is not None and e.value == old.value]
        for i in idx:
            self.entries[i] = EVEntry(value, port)
        self._reindex()
        return len(idx)

    def _find(self, value: int) -> list[EVEntry]:
        found = [self.entries[i] for i in self._by_value.get(value, ())]
        if not found:
            raise ErrnoError(errno.ENOENT, f"EV {value:#x} is not in profile {self.id}")
        return found

    def set_ev_state(self, value: int, state: str) -> None:
        """Deny an EV (DENIED) or allow it again (GOOD); allowed while ONLINE."""
        if self.state == INIT:
            raise _bad(f"EV profile {self.id} is INIT: configure it first")
        if state not in (GOOD, DENIED):
            raise _bad(f"the controller sets EVs GOOD or DENIED, not {state!r}")
        entries = self._find(value)
        change = sum(1 for e in entries if (e.state == DENIED) != (state == DENIED))
        if state == DENIED:
            usable = self._populated - self._denied - change
            if usable < self.ev_min_active:
                raise ErrnoError(errno.EBUSY, f"denying {value:#x} leaves {usable} usable EVs, below "
                                            f"ev_min_active {self.ev_min_active}")
        self._denied += change if state == DENIED else -change
        for e in entries:
            e.state = state
        if change and self.fmt is not None and self.fmt.mode == SRV6:
            for fn in list(self.watchers):
                fn(srv6_address(value, self.fmt.width), state)

    def ev_state(self, value: int) -> str:
        """The state of the EV with this value."""
        return self._find(value)[0].state

    def query_array(self, max_entries: int) -> list[dict | None]:
        """Every EV entry, in an array of ``max_entries`` (E2BIG when too small)."""
        if max_entries < self.ev_count:
            raise ErrnoError(errno.E2BIG, f"the array holds {self.ev_count} EVs; room for {max_entries} given",
                           needed=self.ev_count)
        return [None if e is None else e.as_dict(self.fmt) for e in self.entries]

    def query(self) -> dict:
        """The profile as a dict."""
        return {"id": self.id, "state": self.state, "mode": self.mode, "fmt": self.fmt.id if self.fmt else None,
                "ev_count": self.ev_count, "ev_min_active": self.ev_min_active, "event_mask": list(self.event_mask),
                "fields": [dict(vars(f)) for f in self.fields],
                "port": self.port if self.mode == GENERATED else None}

    def paths(self, include_denied: bool = False) -> dict[int, list[str]]:
        """For an SRV6 profile: the usable (not DENIED) destination addresses
        per plane (port - 1), in EV order; what a QP sprays over."""
        if self.fmt is None or self.fmt.mode != SRV6:
            raise _bad(f"EV profile {self.id} is not an SRV6 profile")
        out: dict[int, list[str]] = {}
        for e in self.entries:
            if e is not None and (include_denied or e.state != DENIED):
                a = srv6_address(e.value, self.fmt.width)
                if a not in out.setdefault(e.port - 1, []):
                    out[e.port - 1].append(a)
        return out


# ------------------------------------------------------------ CC profiles
#: NSCC's named parameters (mrc_ctl.h) and their units.
NSCC_FIELDS = {"disable_qa": "0/1", "adjust_bytes_threshold": "bytes", "adjust_period_threshold": "ns",
               "base_rtt": "ns", "eta": "", "fi": "", "fi_scale": "", "gamma": "", "max_md_jump": "",
               "max_cwnd": "bytes", "md_by_sample": "0/1", "qa_gate": "", "qa_threshold": "ns", "target_delay": "ns"}


class CCProfile(_Profile):
    """A congestion control profile: algorithm name and its configuration
    (``mrc_ctl_modify_cc_profile``)."""

    kind = "CC"

    def __init__(self, pid: int, algorithm: str | None = None, config: dict | None = None) -> None:
        super().__init__(pid)
        self.algorithm, self.config = None, {}
        if algorithm is not None:
            self.modify(algorithm, config or {})

    def modify(self, algorithm: str, config: dict) -> None:
        """Set the algorithm and its configuration (checked against the device's limits)."""
        self._modifiable()
        if algorithm not in LIMITS.cc_algorithms:
            raise _bad(f"unknown CC algorithm {algorithm!r}: this device has {', '.join(LIMITS.cc_algorithms)}")
        unknown = sorted(set(config) - set(NSCC_FIELDS))
        if unknown:
            raise _bad(f"unknown NSCC parameter(s) {', '.join(unknown)}; known: {', '.join(NSCC_FIELDS)}")
        for k, v in config.items():
            if not isinstance(v, int) or isinstance(v, bool) or v < 0:
                raise _bad(f"NSCC {k} must be a non-negative integer, got {v!r}")
            if k in ("disable_qa", "md_by_sample") and v not in (0, 1):
                raise _bad(f"NSCC {k} is 0 or 1, got {v}")
        if config.get("max_cwnd", 1) == 0 or config.get("base_rtt", 1) == 0:
            raise _bad("NSCC max_cwnd and base_rtt must be above 0")
        self.algorithm, self.config = algorithm, dict(config)
        self.state = OFFLINE

    def query(self) -> dict:
        """The profile as a dict."""
        return {"id": self.id, "state": self.state, "algorithm": self.algorithm, "config": dict(self.config)}


# ------------------------------------------------------------ the registry
class Registry:
    """A device's profiles by id, and which QPs use them.

    ``add`` configures a profile under its id (``mrc_ctl_modify_*_profile``);
    a QP created with ``ev_profile_id`` / ``cc_profile_id`` ``acquire``s the
    ONLINE profiles and holds them until it is destroyed, so taking a profile
    in use OFFLINE is EBUSY (and with it any change to it)."""

    KINDS = {"fmt": (EVFormatProfile, "max_fmt_profiles"), "ev": (EVProfile, "max_ev_profiles"),
             "cc": (CCProfile, None)}

    def __init__(self) -> None:
        self.fmt: dict[int, EVFormatProfile] = {}
        self.ev: dict[int, EVProfile] = {}
        self.cc: dict[int, CCProfile] = {}

    def add(self, profile):
        """Register ``profile`` under its id; an id in use by a configured
        profile is EBUSY (reset that one first)."""
        kind = next((k for k, (cls, _) in self.KINDS.items() if isinstance(profile, cls)), None)
        if kind is None:
            raise _bad(f"not a profile: {profile!r}")
        table, limit = getattr(self, kind), self.KINDS[kind][1]
        old = table.get(profile.id)
        if old is not None and old is not profile and old.state != INIT:
            raise ErrnoError(errno.EBUSY, f"{old.kind} profile {old.id} exists and is {old.state}: "
                                        f"take it to INIT (reset) before reusing its id")
        if limit and profile.id not in table and len(table) >= getattr(LIMITS, limit):
            raise ErrnoError(errno.E2BIG, f"this device holds at most {getattr(LIMITS, limit)} {profile.kind} profiles")
        table[profile.id] = profile
        return profile

    def get(self, kind: str, pid: int):
        """The profile of ``kind`` with id ``pid`` (ENOENT otherwise)."""
        prof = getattr(self, kind).get(pid)
        if prof is None:
            name = self.KINDS[kind][0].kind
            known = ", ".join(map(str, sorted(getattr(self, kind)))) or "none"
            raise ErrnoError(errno.ENOENT, f"no {name} profile {pid} (known: {known})")
        return prof

    def acquire(self, kind: str, pid: int):
        """The ONLINE profile ``pid`` for a new QP, counted as in use."""
        prof = self.get(kind, pid)
        if prof.state != ONLINE:
            raise _bad(f"{prof.kind} profile {pid} is {prof.state}: bring it ONLINE before a QP uses it")
        prof.users += 1
        return prof

    @staticmethod
    def release(prof) -> None:
        """A QP stops using ``prof``."""
        prof.users = max(0, prof.users - 1)


# ------------------------------------------------- from a resolver's paths
def srv6_format() -> list[int]:
    """SRV6 format fields of an F3216 uSID plan: the 32-bit locator block,
    then four 16-bit uSIDs (T0 source, T1, T0 destination, host)."""
    return [32, 16, 16, 16, 16]


def srv6_from_paths(paths: dict[int, list[str]], pid: int = 1, fmt: EVFormatProfile | None = None) -> EVProfile:
    """An EXPLICIT SRV6 EV profile holding the given destination addresses
    per plane (port = plane + 1), in OFFLINE state: what a resolver's
    ``paths_to`` gives for a peer (mrc.paths) becomes a profile without
    anyone writing an address by hand.

    >>> prof = srv6_from_paths({0: ["fc00:0:1000:2000:1001:b001::"], 1: ["fc00:0:1100:2100:1101:b101::"]})
    >>> prof.ev_count, prof.paths()[1]
    (2, ['fc00:0:1100:2100:1101:b101::'])
    """
    fmt = fmt or EVFormatProfile(pid, SRV6, srv6_format())
    entries = [(int(ipaddress.IPv6Address(a)) >> (128 - fmt.width), plane + 1)
               for plane, addrs in sorted(paths.items()) for a in addrs]
    prof = EVProfile(pid, EXPLICIT, fmt, ev_count=len(entries), ev_min_active=1)
    for i, (value, port) in enumerate(entries):
        prof.replace(i, value, port)
    return prof
