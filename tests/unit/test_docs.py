"""Every block of code in README.md and docs/ is run, compiled, read or skipped by name (tests/docblocks.py
says how a block says which). Here, rootless: every command line of every sh block parses as the commands
take it and names files that exist; the C block compiles; the data blocks read as what they show; the
simulator's blocks run. tests/integration/test_docs.py runs the blocks that need a fabric.
`pytest -v tests/unit/test_docs.py` names each block with what was done to it."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys

import pytest

from mrc.tools.cli import build_parser
from tests.docblocks import LANGS, ROOT, Block, blocks, commands

ALL = blocks()
#: programs a sh block may call besides mrc and python (their arguments are not checked)
OTHER = {"cc", "bash", "tshark", "mkdir", "cp", "kill", "wait", "sleep", "for", "do", "done", "./write_bw",
         "./pingpong", "ib_write_bw", "ping"}


def test_every_block_says_what_it_is():
    bad = [b.id for b in ALL if b.lang not in LANGS]
    assert not bad, f"give these blocks a language ({', '.join(sorted(LANGS))}): {bad}"
    unmarked = [b.id for b in ALL if b.lang in ("sh", "python") and b.kind is None]
    assert not unmarked, f"say how these are run, or why not (<!-- docs: run|outline: ... -->): {unmarked}"
    wrong = [b.id for b in ALL if b.kind and (b.kind, b.lang) not in
             {("run", "sh"), ("run", "python"), ("outline", "sh"), ("outline", "python"), ("compile", "c"),
              ("check", "json"), ("check", "yaml")}]
    assert not wrong, wrong
    assert len(ALL) >= 40 and sum(b.kind == "run" for b in ALL) >= 6


def _split(line: str) -> list[list[str]]:
    """A command line's simple commands (split at ;, &&, || and &), environment assignments dropped."""
    out, cur = [], []
    for tok in shlex.split(line.replace(";", " ; ").replace("&&", " ; ").replace(" & ", " ; "), posix=True):
        if tok in (";", "&", "||", "|"):
            out.append(cur)
            cur = []
        elif tok.endswith("&") and tok != "&":
            cur.append(tok[:-1])
            out.append(cur)
            cur = []
        elif not cur and "=" in tok and tok.split("=")[0].isidentifier():
            continue
        else:
            cur.append(tok)
    out.append(cur)
    return [c for c in out if c]


def _check_mrc(argv: list[str], where: str) -> None:
    """``mrc ARGV`` parses as `mrc` takes it (the command after ``--`` checked too)."""
    cut = argv.index("--") if "--" in argv else len(argv)
    try:
        build_parser().parse_args(argv[:cut])
    except SystemExit as e:
        pytest.fail(f"{where}: `mrc {' '.join(argv)}` does not parse (exit {e.code})")
    if cut < len(argv):
        _check_command(argv[cut + 1:], where)


def _check_command(cmd: list[str], where: str) -> None:
    prog = cmd[0]
    if prog == "mrc":
        _check_mrc(cmd[1:], where)
    elif prog in ("python", "python3"):
        assert os.path.exists(os.path.join(ROOT, cmd[1])), f"{where}: {cmd[1]} is not in the repository"
    else:
        assert prog in OTHER, f"{where}: {prog!r}: a program these docs do not call yet (add it to OTHER)"
        for tok in cmd[1:]:
            if tok.startswith(("examples/", "tools/", "docs/", "bench/")):
                assert os.path.exists(os.path.join(ROOT, tok)), f"{where}: {tok} is not in the repository"


def _sh(b: Block) -> str:
    n = 0
    for line in commands(b.body):
        for cmd in _split(line):
            _check_command(cmd, b.id)
            n += 1
    return f"{n} commands parse"


def _c(b: Block, tmp_path) -> str:
    if not shutil.which("cc"):
        pytest.skip("no C compiler")
    head = [ln for ln in b.body.splitlines() if ln.startswith("#include")]
    rest = [ln for ln in b.body.splitlines() if not ln.startswith("#include")]
    src = tmp_path / "block.c"
    src.write_text("#include <stdint.h>\n#include <stdio.h>\n" + "\n".join(head)
                   + "\nint main(void)\n{\n    char buf[4096];\n    uint32_t len = sizeof buf;\n"
                   + "\n".join("    " + ln for ln in rest) + "\n    return 0;\n}\n")
    p = subprocess.run(["cc", "-Wall", "-Werror", "-Wno-unused-variable", "-fsyntax-only",
                        "-I", os.path.join(ROOT, "csrc", "include"), str(src)], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    return "compiles"


def _json(b: Block) -> str:
    from mrc.paths import TopologyResolver

    r = TopologyResolver(json.loads(b.body), None)
    assert r.hosts() == ["a", "b"]
    return "a topology of hosts a and b"


def _yaml(b: Block) -> str:
    import yaml

    from mrc.tools import sweep

    first = b.body.splitlines()[0]
    path = first.lstrip("# ").strip()
    with open(os.path.join(ROOT, path)) as f:
        assert yaml.safe_load(f) == yaml.safe_load(b.body), f"{b.id} is not {path} any more"
    cells = sweep.cells(sweep.load_grid(os.path.join(ROOT, path)))
    return f"{path}: {len(cells)} cells"


#: the rootless runs: block -> the command lines of it that run here
RUNS = {("docs/sim.md", "mrc sim --hosts 64 --workload permutation --size 16M --single-path")}


@pytest.mark.parametrize("b", ALL, ids=[b.id for b in ALL])
def test_block(b: Block, tmp_path):
    """What each block gets: parsed, compiled, read, run or skipped with its reason."""
    if b.lang == "text":
        pytest.skip("text: output or a layout, nothing to run")
    if b.lang == "python":
        compile(b.body, b.id, "exec")   # every Python block is Python; the runs are on a fabric
    if b.lang == "sh":
        _sh(b)
    elif b.lang == "c":
        _c(b, tmp_path)
    elif b.lang == "json":
        _json(b)
    elif b.lang == "yaml":
        _yaml(b)
    ran = 0
    for line in commands(b.body) if b.lang == "sh" else []:
        if (b.path, line) in RUNS:
            env = {**os.environ, "PYTHONPATH": ROOT}
            p = subprocess.run([sys.executable, "-m", "mrc", *shlex.split(line)[1:]], cwd=tmp_path, env=env,
                               capture_output=True, text=True, timeout=600)
            assert p.returncode == 0, (line, p.stderr[-2000:])
            ran += 1
    if b.kind == "outline":
        pytest.skip(f"outline ({'its commands parse' if b.lang == 'sh' else 'it compiles'}): {b.why}")
    if b.kind == "run" and "tests/integration" in (b.why or "") and not ran:
        pytest.skip(f"checked here; runs in {b.why}")
