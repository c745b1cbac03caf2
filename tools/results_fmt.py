"""What tools/results.py and its sections share: a value at a dotted path,
a figure as the page prints it, a Markdown table, a figure over several runs."""

from __future__ import annotations

import statistics


def get(d, path: str, default=None):
    """``d``'s value at a dotted path (``"mrc.all_reduce.busbw_gbps"``), or ``default``."""
    for k in path.split("."):
        if not isinstance(d, dict) or k not in d:
            return default
        d = d[k]
    return d


def fmt(x, nd: int = 3) -> str:
    if x is None:
        return "-"
    if isinstance(x, bool):
        return "yes" if x else "no"
    if isinstance(x, int):
        return f"{x:,}"
    if isinstance(x, float):
        text = f"{x:,.{nd}f}" if abs(x) < 1e6 else f"{x:,.0f}"
        return text.rstrip("0").rstrip(".") if "." in text else text
    return str(x)


def spread(xs, nd: int = 3, sep: str = "-") -> str:
    """A figure's spread as the pages show it: ``(lo-hi)``, or ``(lo to hi)`` for signed figures."""
    return "(" + sep.join(fmt(x, nd) for x in xs or []) + ")"


def table(header: list[str], rows: list[list]) -> list[str]:
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return out


def routing_text(routing: str | None, bfd_ms=None) -> str:
    """How the run's fabric carried the kernel's traffic."""
    if routing == "bgp":
        bfd = (f"BFD at {bfd_ms} ms x 3" if bfd_ms else "without BFD: a link's carrier down, which every fault here "
               "takes, withdraws its routes at once, and bfdd would take a core of this VM (see the BGP section)")
        return (f"Kernel traffic is routed by FRR's BGP in every switch (eBGP, ECMP over the spines by the 5-tuple, "
                f"{bfd}: `mrc fabric up --routing bgp`, docs/fabric.md), as a datacenter fabric routes TCP; MRC's "
                "uSID paths are the same static ones.")
    return ("Kernel traffic takes the fabric's static SRv6 encap through one spine per host pair (this run "
            "predates `--routing bgp`).")


def run_spread(runs: list[dict], path: str, nd: int = 3) -> str:
    """The latest run's value; with several runs, their median and range too."""
    vals = [v for v in (get(r, path) for r in runs) if isinstance(v, (int, float))]
    if not vals:
        return "-"
    last = fmt(vals[-1], nd)
    if len(vals) < 2:
        return last
    return f"{last} (median of {len(vals)} runs {fmt(statistics.median(vals), nd)}, {fmt(min(vals), nd)}-" \
           f"{fmt(max(vals), nd)})"


def run_median(runs: list[dict], path: str, nd: int = 3) -> str:
    """The median over the runs (the README's one figure per cell)."""
    vals = [v for v in (get(r, path) for r in runs) if isinstance(v, (int, float))]
    return fmt(statistics.median(vals), nd) if vals else "-"
