"""What tools/results.py and its sections share: a value at a dotted path,
a figure as the page prints it, a Markdown table."""

from __future__ import annotations


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
