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


def size_type(minimum: int = 1):
    """An argparse type: a size (bytes, or K/M/G) of at least ``minimum``."""

    def parse(text: str) -> int:
        try:
            n = parse_size(text)
        except UsageError as e:
            raise argparse.ArgumentTypeError(str(e)) from None
        if n < minimum:
            raise argparse.ArgumentTypeError(f"a size of at least {minimum} bytes, not {text}")
        return n

    return parse
