"""The C tree as the layout test reads it (test_c_layout.py): its folders, its
units (a source and the header of the same name beside it), which unit calls
or includes which, and which header declares each call.

Read as text, as a reader would: comments and strings are blanked first; a
definition is a name, a parameter list and a brace at the start of a line; a
call is a name and a parenthesis inside a function's body. A header's calls
are those inside its inline functions' bodies."""
from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CSRC = ROOT / "csrc"
#: the contract's headers, one per audience: declarations only, included from any layer
CONTRACT = CSRC / "include"

DEF = re.compile(r"^(static\s+)?(?:inline\s+)?[A-Za-z_][\w\s\*]*?\b([a-z_]\w*)\s*\([^;{]*?\)\s*\{", re.M | re.S)
DECL = re.compile(r"^(?!static)[A-Za-z_][\w \*]*?[\s\*]([a-z_]\w*)\s*\([^;{]*?\)\s*;", re.M | re.S)
CALL = re.compile(r"\b([a-z_]\w*)\s*\(")
INCLUDE = re.compile(r'^#include "([^"]+)"', re.M)


def strip(text: str) -> str:
    """The code alone: comments and string contents blanked (a comment's lines kept as empty lines)."""
    text = re.sub(r"/\*.*?\*/", lambda m: "\n" * m.group(0).count("\n") or " ", text, flags=re.S)
    text = re.sub(r"//[^\n]*", " ", text)
    # strings and character constants in one pass, so that '"' opens no string
    return re.sub(r""""(?:\\.|[^"\\\n])*"|'(?:\\.|[^'\\\n])+'""", lambda m: m.group(0)[0] * 2, text)


def files() -> list[str]:
    """Every C file of csrc/ outside the contract, as a path relative to csrc/."""
    return sorted(p.relative_to(CSRC).as_posix() for p in CSRC.rglob("*.[ch]")
                  if not p.is_relative_to(CONTRACT))


def unit(f: str) -> str:
    """A file's unit: its path without the extension (core/qp.c and core/qp.h are one)."""
    return f.rsplit(".", 1)[0].removesuffix(".bpf")


def folder(f: str) -> str:
    return f.split("/", 1)[0] if "/" in f else ""


def _bodies(text: str) -> list[tuple[str, bool, str]]:
    """(name, static, body) of every function defined in text."""
    return [(name, static, body) for name, static, body, _ in functions(text)]


def functions(text: str) -> list[tuple[str, bool, str, int]]:
    """(name, static, body, lines from its head to its closing brace) of every function defined in text."""
    out = []
    for m in DEF.finditer(text):
        depth, i = 1, m.end()
        while depth and i < len(text):
            depth += {"{": 1, "}": -1}.get(text[i], 0)
            i += 1
        out.append((m.group(2), bool(m.group(1)), text[m.end():i], text.count("\n", m.start(), i) + 1))
    return out


class Tree:
    """The C tree's definitions, declarations, includes and calls."""

    def __init__(self):
        self.text = {f: strip((CSRC / f).read_text()) for f in files()}
        self.owner: dict[str, str] = {}      # non-static function -> the .c file defining it
        self.declared: dict[str, set[str]] = {}  # function -> the headers declaring it
        for f, text in self.text.items():
            if f.endswith(".c"):
                for name, static, _ in _bodies(text):
                    if not static:
                        self.owner.setdefault(name, f)
            else:
                for name in DECL.findall(text):
                    self.declared.setdefault(name, set()).add(f)
        for h in CONTRACT.rglob("*.h"):
            for name in DECL.findall(strip(h.read_text())):
                self.declared.setdefault(name, set()).add("include/" + h.relative_to(CONTRACT).as_posix())

    def includes(self, f: str) -> set[str]:
        """The files of csrc/ that f includes (contract headers as include/NAME)."""
        out = set()
        for name in INCLUDE.findall((CSRC / f).read_text()):
            if "/" not in name and (CSRC / f).with_name(name).is_file():  # beside it (the BPF programs)
                out.add((Path(f).parent / name).as_posix())
            elif (CSRC / name).is_file():
                out.add(name)
            elif (CONTRACT / name).is_file():
                out.add("include/" + name)
            else:
                raise AssertionError(f"{f} includes {name}, which is neither under csrc/ nor csrc/include/")
        return out

    def reach(self, f: str) -> set[str]:
        """Every header f includes, directly or through others."""
        seen, todo = set(), list(self.includes(f))
        while todo:
            h = todo.pop()
            if h not in seen:
                seen.add(h)
                if not h.startswith("include/"):
                    todo += self.includes(h)
                else:
                    todo += ["include/" + n for n in INCLUDE.findall((CSRC / h).read_text())
                             if (CONTRACT / n).is_file()]
        return seen

    def calls(self, f: str) -> set[str]:
        """The non-static functions of other units that f calls (a header: inside its inlines)."""
        text = self.text[f]
        if f.endswith(".h"):
            text = " ".join(body for _, _, body in _bodies(text))
        return {n for n in set(CALL.findall(text)) if n in self.owner and unit(self.owner[n]) != unit(f)}

    def graph(self) -> dict[str, set[str]]:
        """unit -> the units it includes or calls."""
        g: dict[str, set[str]] = {}
        for f in self.text:
            deps = {unit(self.owner[n]) for n in self.calls(f)}
            deps |= {unit(h) for h in self.includes(f) if not h.startswith("include/")}
            g.setdefault(unit(f), set()).update(deps - {unit(f)})
        return g

    def undeclared(self, f: str) -> list[str]:
        """Calls of f to other units that no header it includes declares: an internal header
        must be included directly, a contract header may come through another."""
        direct, reach = self.includes(f), self.reach(f)
        bad = []
        for n in sorted(self.calls(f)):
            where = self.declared.get(n, set())
            if not (where & direct or {h for h in where if h.startswith("include/")} & reach):
                bad.append(n)
        return bad
