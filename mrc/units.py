"""Units and helpers that tools and benches share: sizes, rates,
percentiles, a timed loop without the cyclic collector, and argparse types.
Pure Python, no import of the stack.

>>> parse_size("64K"), parse_rate("25mbit"), percentile([3, 1, 2], 0.5)
(65536, 25000000, 2)
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import math
import re
import statistics

from mrc.errors import UsageError


def parse_size(s: str) -> int:
    """Bytes from ``64``, ``4K``, ``1M``, ``2G``."""
    s = s.strip().upper()
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    try:
        if s[-1] in mult:
            return int(float(s[:-1]) * mult[s[-1]])
        return int(s)
    except (ValueError, IndexError):
        raise UsageError(f"cannot read size {s!r}: use bytes or K/M/G, e.g. 4K,64K,1M") from None


def parse_time(s: str) -> int:
    """'1us', '10ms', '2.5s', '500ns', '750' (ns) -> nanoseconds."""
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*(ns|us|ms|s)?\s*", s)
    if not m:
        raise UsageError(f"cannot read time {s!r}: use for example 500ns, 1us, 10ms or 2s")
    return int(float(m.group(1)) * {"ns": 1, "us": 1e3, "ms": 1e6, "s": 1e9}[m.group(2) or "ns"])


def parse_rate(rate: str) -> int:
    """'1gbit', '500mbit', '10m', '100G' -> bits per second."""
    s = rate.strip().lower().removesuffix("bit").removesuffix("bps").removesuffix("b")
    units = {"k": 1e3, "m": 1e6, "g": 1e9, "t": 1e12}
    try:
        if s and s[-1] in units:
            return int(float(s[:-1]) * units[s[-1]])
        return int(float(s))
    except ValueError:
        raise UsageError(f"cannot read rate {rate!r}: use for example 1gbit, 500mbit or 100m") from None


def percentile(xs: list[float], q: float) -> float:
    """The ``q`` quantile of ``xs`` (nearest rank; 0 for none)."""
    if not xs:
        return 0.0
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def median_spread(xs: list[float], nd: int = 3) -> tuple[float, list[float]]:
    """The median of ``xs`` (of the middle two for an even count) and [least, most], rounded to ``nd``
    places: how the benches report a figure measured in several alternated rounds."""
    return round(statistics.median(xs), nd), [round(min(xs), nd), round(max(xs), nd)]


@contextlib.contextmanager
def gc_paused():
    """No cyclic garbage collection inside a timed loop. A full (generation 2)
    collection walks every object the process holds and stops every Python
    thread while it does: 12-21 ms here once a run had logged ~10,000 EV
    events, long enough to be the longest gap between completions of a
    whole run (seen with ``gc.callbacks``: the collection and the gap
    coincided to the millisecond). The loop's own garbage is freed by
    reference counting as usual; what survives from before is frozen, and
    the collector comes back on (if it was on) when the loop ends."""
    was = gc.isenabled()
    gc.collect()
    gc.freeze()
    gc.disable()
    try:
        yield
    finally:
        gc.unfreeze()
        if was:
            gc.enable()


def _span(lo, hi, above: bool) -> str:
    if lo is not None and hi is not None:
        return f"above {lo} and at most {hi}" if above else f"from {lo} to {hi}"
    if lo is not None:
        return f"above {lo}" if above else f"of at least {lo}"
    return f"of at most {hi}" if hi is not None else ""


def bounded(kind: type, lo=None, hi=None, above: bool = False):
    """An argparse type: an int (``kind`` int) or a finite number (float) from ``lo`` to ``hi`` (with
    ``above``: more than ``lo``). A value outside gets one line that says what the option wants; the
    bounds ride on the function (``lo``, ``hi``, ``above``, ``kind``) for the tests that try them."""
    noun = "an integer" if kind is int else "a number"

    def parse(text: str):
        try:
            v = kind(text)
        except ValueError:
            v = None
        low = lo is not None and v is not None and (v <= lo if above else v < lo)
        if v is None or (kind is float and not math.isfinite(v)) or low or (hi is not None and v > hi):
            raise argparse.ArgumentTypeError(f"wants {noun} {_span(lo, hi, above)}, not {text!r}".replace("  ", " "))
        return v

    parse.kind, parse.lo, parse.hi, parse.above = kind, lo, hi, above
    parse.__name__ = kind.__name__
    return parse


#: a TCP or UDP port number
PORT = bounded(int, 1, 65535)


def _sz(n: int | None) -> str | None:
    """A bound in the units people write it in: 1G, 64K, 8 B."""
    if n is None:
        return None
    if n == 0:
        return "0"
    for unit, shift in (("G", 30), ("M", 20), ("K", 10)):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return f"{n >> shift}{unit}"
    return f"{n} B"


def size_type(minimum: int = 1, maximum: int | None = 1 << 40):
    """An argparse type: a size (bytes, or K/M/G) from ``minimum`` to ``maximum``."""

    def parse(text: str) -> int:
        try:
            n = parse_size(text)
        except UsageError as e:
            raise argparse.ArgumentTypeError(str(e)) from None
        if n < minimum or (maximum is not None and n > maximum):
            raise argparse.ArgumentTypeError(f"wants a size {_span(_sz(minimum), _sz(maximum), False)}, not {text!r}")
        return n

    parse.kind, parse.lo, parse.hi, parse.above = "size", minimum, maximum, False
    return parse


def checked_text(parse, kind: str, lo=None, hi=None, show=str, also: tuple = ()):
    """An argparse type that checks a value (``parse(text)``: a size, rate or time) lies from ``lo`` to ``hi``
    and gives back the text as it was, for the code that reads it later; ``also``: words taken as they are
    (``off``)."""

    def check(text: str) -> str:
        if text.strip().lower() in also:
            return text
        try:
            v = parse(text)
        except UsageError as e:
            raise argparse.ArgumentTypeError(str(e)) from None
        if (lo is not None and v < lo) or (hi is not None and v > hi):
            span = _span(None if lo is None else show(lo), None if hi is None else show(hi), False)
            raise argparse.ArgumentTypeError(f"wants a {kind} {span}, not {text!r}")
        return text

    check.kind, check.lo, check.hi, check.above = kind, lo, hi, False
    return check


def _rate(bps: int) -> str:
    for unit, k in (("tbit", 10**12), ("gbit", 10**9), ("mbit", 10**6), ("kbit", 10**3)):
        if bps >= k and bps % k == 0:
            return f"{bps // k}{unit}"
    return f"{bps}bit"


def rate_type(lo: int = 1000, hi: int = 10**13, also: tuple = ()):
    """An argparse type: a rate (``25mbit``, ``100G``) from ``lo`` to ``hi`` bit/s, given back as text."""
    return checked_text(parse_rate, "rate", lo, hi, _rate, also)


def size_text_type(lo: int = 1, hi: int = 1 << 40, also: tuple = ()):
    """An argparse type: a size from ``lo`` to ``hi`` bytes, given back as text."""
    return checked_text(parse_size, "size", lo, hi, _sz, also)


def size_list_type(minimum: int = 1, maximum: int | None = 1 << 40):
    """An argparse type: comma-separated sizes (``4K,64K,1M``), each from ``minimum`` to ``maximum``."""
    one = size_type(minimum, maximum)

    def parse(text: str) -> list[int]:
        sizes = [one(x) for x in text.split(",") if x.strip()]
        if not sizes:
            raise argparse.ArgumentTypeError(f"wants one size or more, comma-separated (4K,64K,1M), not {text!r}")
        return sizes

    parse.kind, parse.lo, parse.hi, parse.above = "sizes", minimum, maximum, False
    return parse
