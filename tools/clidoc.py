"""Render docs/cli.md from the ``mrc`` command's own parsers: every command,
subcommand and option, with its help, so the page cannot drift from the code.

    python tools/clidoc.py            # write docs/cli.md
    python tools/clidoc.py --check    # exit 1 when docs/cli.md differs from what the parsers give

The text around the reference (the opening and the example session) is here;
everything between comes from ``mrc.tools.cli.build_parser()``.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
DOC = ROOT / "docs" / "cli.md"
WIDTH = "100"  # argparse wraps usage lines at the terminal's width: fixed, so the page does not move

HEAD = """# The command line

This page is generated from the `mrc` command's parsers (`python tools/clidoc.py`;
a test fails when it differs), so it names every command and option there is.
`mrc COMMAND --help` prints the same.

All `mrc fabric` commands take `--name NAME` (default `mrc0`, or
`$MRC_FABRIC`), so several fabrics can coexist; most need root. Errors print
one line that says what to do, and exit with status 2.

"""

TAIL = """## Example session

<!-- docs: run: tests/integration/test_docs.py, under a fabric name of its own -->
```sh
mrc fabric up --name lab --planes 4
mrc fabric exec h2 --name lab -- ping -c1 fd6d:0:3::1     # h2 -> h0 over plane 3
mrc fabric fail p3l0-p3s1 --name lab
mrc fabric check --name lab                              # those paths show 3/4
mrc fabric heal --all --name lab
mrc fabric exec --name lab h3 -- mrc perf server &
mrc fabric exec --name lab h0 -- mrc perf client h3 --sizes 64K,1M --verify
mrc fabric down --name lab
```

The Python API (verbs nouns, mapped call by call to the OCP `mrc.h`):
[api.md](api.md).
"""


def _subparsers(p: argparse.ArgumentParser) -> dict[str, tuple[argparse.ArgumentParser, str]]:
    """A parser's subcommands, in order: name -> (parser, its one-line help)."""
    for a in p._actions:
        if isinstance(a, argparse._SubParsersAction):
            helps = {c.dest: c.help or "" for c in a._choices_actions}
            return {name: (sp, helps.get(name, "")) for name, sp in a.choices.items()}
    return {}


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def _options(p: argparse.ArgumentParser) -> list[str]:
    rows = []
    for a in p._actions:
        if isinstance(a, (argparse._HelpAction, argparse._SubParsersAction)) or a.help == argparse.SUPPRESS:
            continue
        if a.option_strings:
            name = ", ".join(a.option_strings)
            if a.nargs != 0:
                name += " " + (a.metavar if isinstance(a.metavar, str) else a.dest.upper())
        else:
            name = a.metavar if isinstance(a.metavar, str) else a.dest
        help_text = (a.help or "") % {"default": a.default, "prog": p.prog} if a.help else ""
        if a.choices and not isinstance(a.choices, dict) and "{" not in name:
            help_text += f" (one of: {', '.join(map(str, a.choices))})"
        rows.append(f"| `{_cell(name)}` | {_cell(help_text)} |")
    return ["| option | meaning |", "|---|---|", *rows] if rows else []


def _section(p: argparse.ArgumentParser, title: str, summary: str, depth: int) -> list[str]:
    out = [f"{'#' * depth} `{title}`", ""]
    about = summary or (p.description or "").strip().split("\n\n")[0]
    if about:
        out += [" ".join(about.split()), ""]
    usage = p.format_usage().rstrip().splitlines()
    usage = [usage[0].removeprefix("usage: ")] + [line[len("usage: "):] for line in usage[1:]]
    out += ["```text", *usage, "```", ""]
    opts = _options(p)
    if opts:
        out += [*opts, ""]
    for name, (sp, help_text) in _subparsers(p).items():
        out += _section(sp, f"{title} {name}", help_text, min(depth + 1, 4))
    return out


def render() -> str:
    """The whole page, from the parsers."""
    from mrc.tools import cli

    was = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = WIDTH
    try:
        top = cli.build_parser()
        body = []
        for name, (sp, help_text) in _subparsers(top).items():
            body += _section(sp, f"mrc {name}", help_text, 2)
    finally:
        if was is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = was
    return HEAD + "\n".join(body).rstrip() + "\n\n" + TAIL


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true", help="compare instead of writing; exit 1 on a difference")
    a = ap.parse_args()
    text = render()
    if a.check:
        if DOC.read_text() != text:
            print("clidoc: docs/cli.md differs from the parsers: run python tools/clidoc.py", file=sys.stderr)
            return 1
        return 0
    DOC.write_text(text)
    print("clidoc: wrote docs/cli.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
