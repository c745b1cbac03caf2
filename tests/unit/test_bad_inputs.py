"""Every bad input of every ``mrc`` command gets one line that names the option and what it wants, exit 2,
and leaves nothing behind (docs/cli.md). Part one is generated from the parser: every numeric, size, rate
and time option, each beyond both ends of its range and malformed. Part two is a table of what only a run
can find: missing files, files of the wrong kind, ports in use, unknown names and addresses. The C
examples' arguments are in tests/integration/test_c_library.py's neighbour below (compiled here when cc and
libmrc are there). Each case's id says what it tried; pytest -v lists them all."""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import shutil
import socket
import subprocess
import sys

import pytest

from mrc.tools.cli import build_parser, main

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MRC = [sys.executable, "-m", "mrc"]


def _actions(parser=None, path=()):
    """(command words, action) for every argument of every mrc command."""
    for act in (parser or build_parser())._actions:
        if isinstance(act, argparse._SubParsersAction):
            for name, sub in act.choices.items():
                yield from _actions(sub, (*path, name))
        else:
            yield list(path), act


def _options():
    """(command words, option, its type) for every option whose type checks a range."""
    return [(path, act.option_strings[0] if act.option_strings else act.dest, act.type)
            for path, act in _actions() if act.type is not None and hasattr(act.type, "lo")]


#: the positionals that come before a numeric one
BEFORE = {"ctl port": ["down"], "fabric loss": ["p0l0-p0s0"], "fabric rate": ["p0l0-p0s0"]}


def _bad_values(t) -> list[tuple[str, str]]:
    """(why, value) beyond each end of ``t``'s range, and malformed."""
    kind, lo, hi, above = t.kind, t.lo, t.hi, t.above
    out = [("malformed", "x7")]
    if kind in (int, float):
        if lo is not None:
            out.append(("below", str(lo if above else (lo - 1 if kind is int else lo - 0.5))))
        if hi is not None:
            out.append(("above", str(hi + 1 if kind is int else hi * 2 + 1)))
        out.append(("huge", "1" + "0" * 30))
        if kind is float:
            out.append(("nan", "nan"))
    elif kind in ("size", "sizes"):
        out += [("negative", "-4K")] + ([("above", f"{hi // (1 << 10) * 4}K")] if hi else [])
        if kind == "sizes":
            out.append(("one of several", "4K,-1K"))
    elif kind == "rate":
        out += [("below", "1bit"), ("above", "900tbit")] if lo else []
    elif kind == "time":
        out += [("above", "99999s")]
    return out


PARSE_CASES = [pytest.param(path, opt, value, id=f"{' '.join(path)} {opt} {why} ({value})")
               for path, opt, t in _options() for why, value in _bad_values(t)]


def test_every_numeric_option_checks_its_range():
    """No option reads a number with a bare int or float, or without an upper bound (a bad value would pass
    through, or crash later in C)."""
    bare = [f"mrc {' '.join(path)} {act.option_strings or act.dest}" for path, act in _actions()
            if act.type in (int, float) or (hasattr(act.type, "lo") and act.type.hi is None)]
    assert not bare, bare
    assert len(PARSE_CASES) >= 60, len(PARSE_CASES)


@pytest.mark.parametrize("path,opt,value", PARSE_CASES)
def test_a_bad_value_is_one_line_naming_the_option(path, opt, value, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    argv = [*path, f"{opt}={value}" if opt.startswith("-") else value]
    if not opt.startswith("-"):   # a positional: the ones before it first
        argv = [*path, *BEFORE.get(" ".join(path), []), value]
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()), \
            pytest.raises(SystemExit) as e:
        main(argv)
    lines = err.getvalue().strip().splitlines()
    assert e.value.code == 2 and len(lines) == 1, (argv, err.getvalue())
    name = opt if opt.startswith("-") else f"argument {opt}"
    assert name in lines[0] and ("wants" in lines[0] or "cannot read" in lines[0]), lines[0]
    assert os.listdir(tmp_path) == [], os.listdir(tmp_path)


# ------------------------------------------------------------------ what only a run finds
def _busy_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen()
    return s


def _files(d):
    (d / "empty.pcap").write_bytes(b"")
    (d / "text.pcap").write_text("not a capture\n")
    (d / "bad.json").write_text("{bad")
    (d / "list.json").write_text("[1, 2]")
    (d / "empty.key").write_bytes(b"")


# (id, argv with {d} for the case's directory and {port} for a port in use, what the line must contain)
RUN_CASES = [
    ("decode: missing file", ["decode", "{d}/none.pcap"], "cannot read {d}/none.pcap"),
    ("decode: empty file", ["decode", "{d}/empty.pcap"], "is empty"),
    ("decode: not a capture", ["decode", "{d}/text.pcap"], "not a pcap or pcapng"),
    ("decode: a directory", ["decode", "{d}"], "is a directory"),
    ("decode: topology not JSON", ["decode", "{d}/empty.pcap", "--topology", "{d}/bad.json"], "is empty"),
    ("perf client: psk file missing", ["perf", "client", "h1", "--psk-file", "{d}/none.key"],
     "pre-shared key file {d}/none.key"),
    ("perf client: psk file empty", ["perf", "client", "h1", "--psk-file", "{d}/empty.key"], "empty.key"),
    ("perf client: topology missing", ["perf", "client", "h1", "--topology", "{d}/none.json"],
     "topology file {d}/none.json"),
    ("perf client: topology not JSON", ["perf", "client", "h1", "--topology", "{d}/bad.json"], "not valid JSON"),
    ("perf client: topology of the wrong kind", ["perf", "client", "h1", "--topology", "{d}/list.json"],
     "list.json"),
    ("perf client: no such fabric", ["perf", "client", "h1", "--fabric", "nosuchfab"], "--fabric nosuchfab"),
    ("perf client: ports malformed", ["perf", "client", "h1", "--ports", "eth1:x"], "bad port 'eth1:x'"),
    ("perf server: psk file missing", ["perf", "server", "--psk-file", "{d}/none.key"], "none.key"),
    ("sim sweep: grid missing", ["sim", "sweep", "{d}/none.yaml"], "{d}/none.yaml"),
    ("sim sweep: grid not JSON", ["sim", "sweep", "{d}/bad.json"], "not valid JSON"),
    ("sim sweep: grid of the wrong kind", ["sim", "sweep", "{d}/list.json"], "list.json"),
    ("sim: a fault malformed", ["sim", "--hosts", "16", "--fail", "t9"], "--fail 't9'"),
    ("sim: a flap malformed", ["sim", "--hosts", "16", "--flap", "link:x"], "--flap"),
    ("ctl metrics: listen port in use", ["ctl", "metrics", "--listen", "127.0.0.1:{port}"], "in use"),
    ("ctl metrics: listen malformed", ["ctl", "metrics", "--listen", "nonsense"], "--listen 'nonsense'"),
    ("ctl metrics: listen on an address not here", ["ctl", "metrics", "--listen", "192.0.2.77:9464"],
     "no interface here has that address"),
    ("ctl metrics: token file missing", ["ctl", "metrics", "--token-file", "{d}/none"], "token file {d}/none"),
    ("dash: token file missing", ["dash", "--token-file", "{d}/none", "--name", "nosuchfab"], "token file"),
    ("fabric up: name malformed", ["fabric", "up", "--name", "BAD!"], "'BAD!'"),
    ("fabric fail: no such fabric", ["fabric", "fail", "p0l0-p0s0", "--name", "nosuchfab"], "'nosuchfab'"),
    ("fabric exec: no such fabric", ["fabric", "exec", "h0", "--name", "nosuchfab", "--", "true"], "'nosuchfab'"),
    ("capture: no such fabric", ["capture", "h0", "-w", "{d}/x.pcap", "--name", "nosuchfab"], "'nosuchfab'"),
    ("coll: no such fabric", ["coll", "all_reduce", "--fabric", "nosuchfab"], "'nosuchfab'"),
    ("train: no such fabric", ["train", "--fabric", "nosuchfab"], "'nosuchfab'"),
    ("coll: rank without its job", ["coll", "all_reduce", "--rank", "0"], "--rank needs"),
    ("coll: -b above -e", ["coll", "all_reduce", "-b", "1M", "-e", "4K", "--fabric", "nosuchfab"], "-b"),
]


@pytest.mark.parametrize("case", RUN_CASES, ids=[c[0] for c in RUN_CASES])
def test_a_bad_input_found_by_a_run_is_one_line(case, tmp_path):
    _, argv, want = case
    busy = _busy_port()
    work = tmp_path / "work"
    work.mkdir()
    d = tmp_path / "in"
    d.mkdir()
    _files(d)
    try:
        fill = {"d": str(d), "port": str(busy.getsockname()[1])}
        argv = [a.format(**fill) for a in argv]
        p = subprocess.run([*MRC, *argv], capture_output=True, text=True, timeout=60, cwd=work,
                           env={**os.environ, "MRC_TOPOLOGY": ""})
    finally:
        busy.close()
    lines = p.stderr.strip().splitlines()
    assert p.returncode == 2 and len(lines) == 1 and "Traceback" not in p.stderr, (argv, p.returncode, p.stderr)
    assert want.format(**fill) in lines[0], (want, lines[0])
    assert os.listdir(work) == [], os.listdir(work)   # nothing written where it ran
    assert sorted(os.listdir(d)) == ["bad.json", "empty.key", "empty.pcap", "list.json", "text.pcap"]


# ------------------------------------------------------------------ the C examples
C_CASES = [
    ("write_bw", ["--size", "-5", "h1"], "--size wants a number from 1"),
    ("write_bw", ["--iters", "0", "h1"], "--iters wants"),
    ("write_bw", ["--depth", "99999", "h1"], "--depth wants"),
    ("write_bw", ["--port", "70000", "h1"], "--port wants"),
    ("write_bw", ["--size", "12x", "h1"], "not '12x'"),
    ("write_bw", ["--security", "maybe", "h1"], "--security wants off, auth or encrypt"),
    ("write_bw", ["--bogus", "h1"], "'--bogus' is an unknown option"),
    ("write_bw", [], "give one SERVER"),
    ("pingpong", ["--size", "0", "h1"], "--size wants"),
    ("pingpong", ["--iters", "-1", "h1"], "--iters wants"),
    ("pingpong", ["--server", "h1"], "--server takes no SERVER"),
    ("pingpong", ["-s"], "'-s' is an unknown option or lacks its value"),
]


@pytest.fixture(scope="module")
def examples(tmp_path_factory):
    lib = os.path.join(ROOT, "mrc", "libmrc.so")
    if not shutil.which("cc") or not os.path.exists(lib):
        pytest.skip("no C compiler or no libmrc.so (python setup.py build_ext --inplace builds it)")
    d = tmp_path_factory.mktemp("examples")
    for name in ("write_bw", "pingpong"):
        subprocess.run(["cc", "-Wall", "-Werror", "-o", str(d / name), os.path.join(ROOT, "examples", "c", f"{name}.c"),
                        "-I", os.path.join(ROOT, "csrc", "include"), "-L", os.path.dirname(lib),
                        f"-Wl,-rpath,{os.path.dirname(lib)}", "-lmrc"], check=True)
    return d


@pytest.mark.parametrize("prog,argv,want", C_CASES, ids=[f"{c[0]} {' '.join(c[1]) or '(nothing)'}" for c in C_CASES])
def test_a_c_example_names_the_wrong_argument(examples, prog, argv, want):
    p = subprocess.run([str(examples / prog), *argv], capture_output=True, text=True, timeout=30)
    lines = p.stderr.strip().splitlines()
    assert p.returncode == 2 and len(lines) == 1 and want in lines[0], (argv, p.stderr)
