"""The Python layout's rules, checked on the source (docs/architecture.md,
CONTRIBUTING.md): no import cycle among the modules, mrc/'s folders as rooms
that import only downwards, every command under mrc/tools/, no source file
over 600 lines, and documentation that points only inside the repository
(the C tree's rules: test_c_layout.py)."""
from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CSRC = ROOT / "csrc"
MAX_LINES = 600

#: mrc/'s folders are its rooms, lowest first: the library (the top level, the controller in ctl/,
#: the communicator in coll/), the namespace fabric (fabric/), the web view (dash/), the commands
#: (tools/), and the entry point ``python -m mrc``; PyTorch's backend (torch/) sits above the fabric, whose QP
#: settings it takes. A module imports only its own room or those before.
ROOMS = ["library", "fabric", "torch", "dash", "tools", "entry"]


def room(module: str) -> str:
    """The room of a module file of mrc/, from its folder."""
    for r in ("fabric", "torch", "dash", "tools"):
        if module.startswith(f"mrc/{r}/"):
            return r
    return "entry" if module == "mrc/__main__.py" else "library"


def py_imports() -> dict[str, set[str]]:
    """module file -> the module files of mrc/ it imports (at any depth of the code)."""
    files = {p.relative_to(ROOT).as_posix(): p for p in (ROOT / "mrc").rglob("*.py")}
    mods = {f[:-3].replace("/", ".").removesuffix(".__init__"): f for f in files}
    out = {}
    for f, p in files.items():
        deps = set()
        for node in ast.walk(ast.parse(p.read_text())):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            for n in names:
                while n and n not in mods:
                    n = n.rpartition(".")[0]
                if n and mods[n] != f and not mods[n].endswith("__init__.py"):
                    deps.add(mods[n])
        out[f] = deps
    return out


def cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(n):
        state[n] = 1
        stack.append(n)
        for m in sorted(graph.get(n, ())):
            if state.get(m) == 1:
                return stack[stack.index(m):] + [m]
            if not state.get(m):
                found = visit(m)
                if found:
                    return found
        stack.pop()
        state[n] = 2
        return None

    for n in sorted(graph):
        if not state.get(n):
            found = visit(n)
            if found:
                return found
    return None


def test_the_python_modules_import_each_other_without_a_cycle():
    imports = py_imports()
    assert "mrc/core.py" in imports["mrc/verbs.py"]  # the parse sees imports at all
    assert cycle(imports) is None, " -> ".join(cycle(imports))


def test_each_module_imports_only_its_own_room_or_those_below():
    """The library never imports the fabric, the web view or a command (the stack takes a path
    resolver; the commands' shared helpers are in mrc/units.py); the fabric never imports the web view
    or a command; the web view no command; only ``python -m mrc`` imports the commands' entry."""
    imports = py_imports()
    assert {room(m) for m in imports} == set(ROOMS)
    rank = {r: i for i, r in enumerate(ROOMS)}
    up = sorted((m, d) for m, deps in imports.items() for d in deps if rank[room(d)] > rank[room(m)])
    assert not up, up
    assert any(room(d) == "fabric" for d in imports["mrc/tools/demo.py"])  # the rooms are seen at all


def test_every_command_lives_under_tools():
    """A module that builds an argument parser or registers a subcommand is a command: mrc/tools/."""
    outside = [p.relative_to(ROOT).as_posix() for p in (ROOT / "mrc").rglob("*.py")
               if room(p.relative_to(ROOT).as_posix()) != "tools"
               and re.search(r"\bArgumentParser\(|def add_parser\(", p.read_text())]
    assert not outside, outside


def test_every_subcommand_is_a_module_with_add_parser_and_run():
    """One convention: cli.py registers modules, each with add_parser(subparsers) and run(args)."""
    from mrc.tools import cli

    for name in cli.COMMANDS:
        mod = importlib.import_module(name)
        assert callable(getattr(mod, "add_parser", None)) and callable(getattr(mod, "run", None)), name
    parser = cli.build_parser()
    sub = next(a for a in parser._actions if a.dest == "cmd")
    for cmd, p in sub.choices.items():
        assert p.get_default("run") is not None, f"mrc {cmd} has no run()"


def test_every_subcommand_of_a_command_runs_its_own_function():
    """The second level dispatches through ``set_defaults(run=...)``, never by testing the subcommand's name."""
    import argparse

    from mrc.tools import cli

    parser = cli.build_parser()
    seen = 0
    for cmd, p in next(a for a in parser._actions if a.dest == "cmd").choices.items():
        for act in p._actions:
            if isinstance(act, argparse._SubParsersAction):
                for name, sp in act.choices.items():
                    seen += 1
                    assert sp.get_default("run") not in (None, p.get_default("run")), f"mrc {cmd} {name}"
    assert seen >= 20
    for f in (ROOT / "mrc" / "tools" / "cmd").glob("*.py"):
        assert not re.search(r"if a\.\w+cmd ==", f.read_text()), f


def importers(package: str) -> set[str]:
    """The files of mrc/ that import ``package``."""
    users = set()
    for p in (ROOT / "mrc").rglob("*.py"):
        for node in ast.walk(ast.parse(p.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else []
            if any(n.split(".")[0] == package for n in names):
                users.add(p.relative_to(ROOT).as_posix())
    return users


def test_only_the_web_server_imports_aiohttp_and_only_torch_room_imports_torch():
    """The dash and torch extras are optional: nothing else may need them."""
    assert importers("aiohttp") == {"mrc/dash/server.py"}
    assert importers("torch") == {"mrc/torch/__init__.py", "mrc/torch/pg.py"}


def test_no_source_file_is_over_600_lines():
    long = []
    for p in [*(ROOT / "mrc").rglob("*.py"), *CSRC.rglob("*.[ch]"), *(ROOT / "bench").glob("*.py"),
              *(ROOT / "tools").glob("*.py"), *(ROOT / "tests").rglob("*.py")]:
        n = len(p.read_text().splitlines())
        if n > MAX_LINES:
            long.append((p.relative_to(ROOT).as_posix(), n))
    assert not long, long


LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")


def test_the_docs_point_only_inside_the_repository():
    """Everything a user needs lives in the repository: every relative link
    of the README and docs/ resolves to a file here, and nothing anywhere
    points at a directory beside the checkout."""
    broken = []
    for md in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for target in LINK.findall(md.read_text()):
            if target.startswith(("http://", "https://", "mailto:")):
                continue
            if not (md.parent / target).resolve().is_relative_to(ROOT) or not (md.parent / target).exists():
                broken.append((md.relative_to(ROOT).as_posix(), target))
    assert not broken, broken
    outside = []
    for p in [*ROOT.glob("*.md"), *(ROOT / "docs").rglob("*.md"), *(ROOT / "mrc").rglob("*.py"),
              *(ROOT / "tools").glob("*"), *CSRC.rglob("*.[ch]"), *(ROOT / "tests").rglob("*.py")]:
        if p.is_file() and p != Path(__file__) and "../shared" in p.read_text(errors="replace"):
            outside.append(p.relative_to(ROOT).as_posix())
    assert not outside, outside


MAX_FUNCTION_LINES = 80


def test_no_python_function_outside_the_tests_is_over_80_lines():
    """A function a reader can hold: split by its steps, not by the count (CONTRIBUTING.md)."""
    long = []
    for p in [*(ROOT / "mrc").rglob("*.py"), *(ROOT / "bench").glob("*.py"), *(ROOT / "tools").glob("*.py"),
              CSRC / "build_dp.py"]:
        for node in ast.walk(ast.parse(p.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = node.end_lineno - node.lineno + 1
                if n > MAX_FUNCTION_LINES:
                    long.append((n, f"{p.relative_to(ROOT).as_posix()}:{node.lineno} {node.name}"))
    assert not long, sorted(long)


def test_the_architecture_page_names_every_source_file():
    """docs/architecture.md is the map: every file of csrc/ (as its path there, `core/qp.c`) and every
    module of mrc/ (as its path there, `coll/comm.py`; a package's __init__ is named by its folder) is
    named on it, so a new file cannot land without its line."""
    page = (ROOT / "docs" / "architecture.md").read_text()
    want = [p.relative_to(CSRC).as_posix() for p in CSRC.rglob("*") if p.is_file()
            and p.suffix in (".c", ".h", ".py", ".map") and "__pycache__" not in p.parts]
    want += [p.relative_to(ROOT / "mrc").as_posix() for p in (ROOT / "mrc").rglob("*.py")
             if p.name not in ("__init__.py", "__main__.py")]
    assert len(want) > 150  # the walk sees the tree at all
    missing = sorted(f for f in want if f"`{f}`" not in page and not re.search(rf"(?<![\w/]){re.escape(f)}\b", page))
    assert not missing, f"name these in docs/architecture.md: {missing}"


DOC_REF = re.compile(r"\bdocs/([\w.-]+\.md)")


def test_the_code_points_only_at_docs_that_exist():
    """A comment or message that sends the reader to docs/X.md finds it there
    (the fabric's kernel traps once pointed at a document outside the tree)."""
    missing = []
    for p in [*ROOT.glob("*.md"), *(ROOT / "mrc").rglob("*.py"), *(ROOT / "bench").glob("*.py"),
              *(ROOT / "tools").glob("*"), *CSRC.rglob("*.[ch]"), *(ROOT / "tests").rglob("*.py")]:
        if not p.is_file() or p == Path(__file__):
            continue
        for name in set(DOC_REF.findall(p.read_text(errors="replace"))):
            if not (ROOT / "docs" / name).exists():
                missing.append((p.relative_to(ROOT).as_posix(), name))
    assert not missing, missing


def test_every_public_function_says_what_it_does():
    """A one-line docstring on every public function and method of mrc/ (CONTRIBUTING.md)."""
    bare = []
    for p in sorted((ROOT / "mrc").rglob("*.py")):
        def walk(node, prefix, p=p):
            for n in ast.iter_child_nodes(node):
                if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and not n.name.startswith("_"):
                    if not ast.get_docstring(n):
                        bare.append(f"{p.relative_to(ROOT).as_posix()}:{n.lineno} {prefix}{n.name}")
                elif isinstance(n, ast.ClassDef) and not n.name.startswith("_"):
                    walk(n, prefix + n.name + ".")
        walk(ast.parse(p.read_text()), "")
    assert not bare, bare
