"""The C tree's layout, checked on the source (docs/architecture.md, CONTRIBUTING.md):
its folders are its layers, lowest first; a unit (a source and its header)
calls and includes only units of its own folder or of folders below, with no
loop, counting the calls inside a header's inline functions; a file includes
the header of every unit it calls; the contract is split by audience."""
from __future__ import annotations

import re
import shutil
import subprocess
import sys

import pytest

from tests.unit.csrc_graph import CONTRACT, CSRC, Tree, files, folder, functions, strip, unit
from tests.unit.test_layers import cycle

sys.path.insert(0, str(CSRC))
import build_dp  # noqa: E402  (the build's list of the library's folders)

#: csrc/'s folders, lowest first: a file may call or include files of its own folder and of those
#: before it. The wire format; the sans-I/O core; the drivers (raw-socket ports, the engine thread);
#: the API calls; the in-memory link and the fabric simulator; a C program's side (opening by name,
#: connection setup); the libibverbs layer; benchmark support and the fuzzers; the kernel's programs,
#: which call nothing of ours. The contract (csrc/include/) is declarations only, beside them all.
FOLDERS = ["wire", "core", "drivers", "api", "sim", "app", "ibv", "bench", "fuzz", "bpf"]
#: the core's roles share state (core/types.h), never calls
ROLES = {"core/requester", "core/completer", "core/responder", "core/evprobe"}


@pytest.fixture(scope="module")
def tree():
    return Tree()


def test_every_file_sits_in_a_layer_folder(tree):
    assert {folder(f) for f in tree.text} == set(FOLDERS), "a file outside the layer folders"
    dirs = {p.name for p in CSRC.iterdir() if p.is_dir() and p != CONTRACT and p.name != "__pycache__"}
    assert dirs == set(FOLDERS), dirs ^ set(FOLDERS)
    # the library is built from its folders, in the same order
    assert build_dp.LAYERS == [d for d in FOLDERS if d in build_dp.LAYERS]


def test_the_units_depend_on_each_other_without_a_loop_and_only_downwards(tree):
    g = tree.graph()
    assert "core/rings" in g["core/requester"] or "core/ev" in g["core/requester"]  # the parse sees calls
    assert "core/types" in g["core/qp"]  # and includes
    assert cycle(g) is None, " -> ".join(cycle(g))
    rank = {d: i for i, d in enumerate(FOLDERS)}
    upward = sorted((a, b) for a, deps in g.items() for b in deps if rank[b.split("/")[0]] > rank[a.split("/")[0]])
    assert not upward, upward
    assert not [(a, b) for a in ROLES for b in g.get(a, ()) if b in ROLES]


def test_a_header_inline_counts_as_its_units_call(tree):
    """The calls inside a header's inline functions are seen (types.h's psn_lt calls wire.c), and
    the shared state's header calls nothing else: an owner's inline lives in the owner's header."""
    assert tree.calls("core/types.h") == {"mrc_psn_cmp"}, tree.calls("core/types.h")
    assert unit(tree.owner["ep_ctrl_to"]) == "core/rings" and "qp_ctrl_to" not in tree.text["core/types.h"]


def test_a_file_includes_the_header_of_every_unit_it_calls(tree):
    """Includes show who depends on whom: a call into another unit is declared by a header the file
    includes itself (a contract header may come through another)."""
    bad = {f: tree.undeclared(f) for f in tree.text}
    assert not {f: b for f, b in bad.items() if b}, bad
    assert tree.calls("core/dispatch.c") and tree.calls("api/verbs.c")


#: the most lines a function may take, from its head to its closing brace (CONTRIBUTING.md)
MAX_FUNCTION_LINES = 80


def test_no_c_function_is_over_80_lines():
    """A function a reader can hold: split by its steps (the fuzz harnesses included)."""
    long = sorted((n, f"{f}:{name}") for f in files() if f.endswith(".c")
                  for name, _, _, n in functions(strip((CSRC / f).read_text())) if n > MAX_FUNCTION_LINES)
    assert not long, long


def test_no_c_line_is_over_120_characters():
    """The Python code's limit (ruff), for the C of the library, the examples and the tests too."""
    root = CSRC.parent
    paths = [*CSRC.rglob("*.[ch]"), *(root / "examples" / "c").glob("*.[ch]"), *(root / "tests").rglob("*.c")]
    long = [f"{p.relative_to(root)}:{i}" for p in paths
            for i, line in enumerate(p.read_text().splitlines(), 1) if len(line) > 120]
    assert len(paths) > 40 and not long, long


#: header -> the prefixes of the calls it may declare (its audience)
AUDIENCE = {"mrc/mrc.h": ("mrc_ctx_", "mrc_pd_", "mrc_mr_", "mrc_cq_", "mrc_qp_", "mrc_post_", "mrc_poll_",
                          "mrc_ev_", "mrc_async_", "mrc_dp_version", "mrc_wc_", "mrc_event_", "mrc_drop_",
                          "mrc_last_error", "mrc_cm_", "mrc_sha256_", "mrc_sec_", "mrc_cc_"),
            "mrc_wire.h": ("mrc_pkt_", "mrc_crc32c", "mrc_psn_", "mrc_opcode_", "mrc_nack_"),
            "mrc_manual.h": ("mrc_ep_", "mrc_ctx_ep", "mrc_sim_"),
            "mrc_sim.h": ("mrc_fab_", "mrc_roce_"),
            "mrc_bench.h": ("mrc_bench_",)}
DECL = re.compile(r"^[a-z_][\w ]*?[\s\*](mrc_\w+)\(", re.M)


def test_each_call_is_declared_once_in_the_header_of_its_audience():
    """The contract is split by audience; the application's header declares no
    call for the simulator, the bench or hand-driving, and the cffi build reads
    every header (one declaration per call)."""
    src = (CSRC / "build_dp.py").read_text()
    assert all(f'"{h}"' in src for h in AUDIENCE), "build_dp.py reads every contract header"
    seen: dict[str, str] = {}
    wrong = []
    for h, prefixes in AUDIENCE.items():
        text = strip((CONTRACT / h).read_text())
        for name in DECL.findall(text):
            assert name not in seen, f"{name} declared in {seen[name]} and {h}"
            seen[name] = h
            if not name.startswith(prefixes):
                wrong.append((h, name))
    assert not wrong, wrong
    assert len(seen) > 80  # the parse sees the declarations at all
    assert sorted(p.relative_to(CONTRACT).as_posix() for p in CONTRACT.rglob("*.h")) == sorted(AUDIENCE)


def test_the_public_header_stands_alone():
    """A C program that includes only <mrc/mrc.h> compiles, strictly."""
    cc = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if not cc:
        pytest.skip("no C compiler")
    p = subprocess.run([cc, "-std=c99", "-Wall", "-Wextra", "-Wpedantic", "-Werror", "-fsyntax-only",
                        "-I", str(CONTRACT), "-x", "c", "-"], input="#include <mrc/mrc.h>\nint main(void) "
                       "{ struct mrc_ctx *c = 0; return c ? mrc_ctx_start(c) : MRC_MAX_PLANES > 0 ? 0 : 1; }\n",
                       capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
