"""The fenced blocks of README.md and docs/*.md, for the docs tests (tests/unit/test_docs.py, rootless, and
tests/integration/test_docs.py, on a fabric).

Every block says what it is with its language: ``sh`` (commands), ``python``, ``c``, ``json``, ``yaml``, or
``text`` (output, a layout, a usage text: nothing to run). A block of code may be preceded by one marker
line, ``<!-- docs: KIND: why -->``, KIND one of:

- ``run``: a test runs it (the one the marker names);
- ``compile``, ``check``: a C block compiled, a data block read by what reads such files;
- ``outline``: not a program on its own (free names, a long or endless run, another machine): skipped
  by name, the marker saying why and where the same is tested.

A ``sh`` or ``python`` block without a marker is an error: it must be run or say why not.
"""

from __future__ import annotations

import glob
import os
import re
from dataclasses import dataclass

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LANGS = {"sh", "python", "c", "json", "yaml", "text"}
_MARK = re.compile(r"<!-- docs: (run|compile|check|outline): (.+) -->$")


@dataclass
class Block:
    """One fenced block: where it starts (the fence's line, 1-based), its language, body and marker."""

    path: str
    line: int
    lang: str
    body: str
    kind: str | None
    why: str | None

    @property
    def id(self) -> str:
        """``docs/api.md:24 python``: how the tests name it."""
        return f"{self.path}:{self.line} {self.lang or '(none)'}"


def blocks() -> list[Block]:
    """Every fenced block of README.md and docs/*.md, in order."""
    out = []
    for path in ["README.md", *sorted(os.path.relpath(p, ROOT) for p in glob.glob(os.path.join(ROOT, "docs", "*.md")))]:
        with open(os.path.join(ROOT, path)) as f:
            lines = f.read().split("\n")
        i = 0
        while i < len(lines):
            m = re.fullmatch(r"```(\w*)", lines[i])
            if m:
                j = i + 1
                while j < len(lines) and lines[j] != "```":
                    j += 1
                mark = _MARK.match(lines[i - 1]) if i else None
                out.append(Block(path, i + 1, m.group(1), "\n".join(lines[i + 1:j]) + "\n",
                                 mark.group(1) if mark else None, mark.group(2) if mark else None))
                i = j
            i += 1
    return out


def find(path: str, lang: str, contains: str) -> Block:
    """The block of ``path`` in ``lang`` whose body contains ``contains`` (exactly one)."""
    found = [b for b in blocks() if b.path == path and b.lang == lang and contains in b.body]
    assert len(found) == 1, (path, lang, contains, [b.id for b in found])
    return found[0]


def commands(body: str) -> list[str]:
    """A sh block's command lines: continuations joined, comments and blank lines dropped."""
    out, cur = [], ""
    for raw in body.split("\n"):
        line = raw.rstrip()
        if line.endswith("\\"):
            cur += line[:-1] + " "
            continue
        line = cur + line
        cur = ""
        line = re.sub(r"(^|\s)#.*$", "", line).strip()
        if line:
            out.append(line)
    return out
