"""The fabric's tc-BPF programs: building them, finding them on a port, their maps.

Every program of the fabric (``csrc/bpf/NAME.bpf.c``: the switch queues'
``port_queue``, and for a kernel without SRv6 ``usid_end``, ``host_encap`` and
``host_decap``) is compiled once with clang and the libbpf headers
(``tools/setup.sh`` installs them; :func:`build` says what is missing) and
attached with ``tc`` on clsact, one instance per port, so each port has its
own maps. They are found again through the port's tc filter (the program's
name is its C function's) and read and written with the bpf(2) system call:
no libbpf at run time, no pinned maps to clean up after a namespace is gone.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import shutil
import struct
import subprocess

from mrc.errors import FabricError
from mrc.fabric.topology import Topology

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


# ------------------------------------------------------------------ building
def build(name: str, what: str, force: bool = False) -> str:
    """Compile csrc/bpf/NAME.bpf.c once (clang -target bpf); returns the object's path. ``what``
    names who needs it in the errors."""
    source = os.path.join(ROOT, "csrc", "bpf", f"{name}.bpf.c")
    obj = os.path.join(os.path.dirname(os.path.abspath(__file__)), f"{name}.bpf.o")
    header = os.path.join(ROOT, "csrc", "bpf", "tc.h")  # every program includes it
    if not force and os.path.exists(obj) and os.path.getmtime(obj) >= max(os.path.getmtime(source),
                                                                          os.path.getmtime(header)):
        return obj
    clang = shutil.which("clang")
    if not clang:
        raise FabricError(f"{what} need clang to build their BPF program: "
                          "apt-get install clang libbpf-dev (tools/setup.sh installs both)")
    if not os.path.exists("/usr/include/bpf/bpf_helpers.h"):
        raise FabricError(f"{what} need the libbpf headers (/usr/include/bpf/bpf_helpers.h): "
                          "apt-get install libbpf-dev (tools/setup.sh installs it)")
    arch = subprocess.run(["gcc", "-print-multiarch"], capture_output=True, text=True).stdout.strip() or \
        "x86_64-linux-gnu"
    tmp = obj + f".{os.getpid()}.tmp"
    r = subprocess.run([clang, "-O2", "-g", "-target", "bpf", f"-I/usr/include/{arch}", "-Wall", "-Werror",
                        "-c", source, "-o", tmp], capture_output=True, text=True)
    if r.returncode != 0:
        raise FabricError(f"building {source} failed:\n{r.stderr.strip()}")
    os.replace(tmp, obj)
    return obj


# ------------------------------------------------------------------ bpf(2)
_libc = ctypes.CDLL(None, use_errno=True)
_SYS_BPF = 321
_MAP_LOOKUP, _MAP_UPDATE, _PROG_TEST_RUN, _PROG_GET_FD, _MAP_GET_FD, _INFO = 1, 2, 10, 13, 14, 15


def _bpf(cmd: int, attr: ctypes.Array) -> int:
    r = _libc.syscall(_SYS_BPF, cmd, attr, ctypes.sizeof(attr))
    if r < 0:
        e = ctypes.get_errno()
        raise OSError(e, f"bpf({cmd}): {os.strerror(e)}")
    return r


def _fd_by_id(cmd: int, ident: int) -> int:
    return _bpf(cmd, ctypes.create_string_buffer(struct.pack("<III", ident, 0, 0), 16))


def prog_fd(prog_id: int) -> int:
    """A file descriptor of the loaded program ``prog_id`` (the caller closes it)."""
    return _fd_by_id(_PROG_GET_FD, prog_id)


def prog_maps(prog_id: int) -> dict[str, int]:
    """The program's maps, name -> map fd (the caller closes them)."""
    fd = prog_fd(prog_id)
    try:
        ids = (ctypes.c_uint32 * 8)()
        info = ctypes.create_string_buffer(256)
        struct.pack_into("<IQ", info, 52, 8, ctypes.addressof(ids))  # nr_map_ids, map_ids
        _bpf(_INFO, ctypes.create_string_buffer(struct.pack("<IIQ", fd, 256, ctypes.addressof(info)), 16))
        n = struct.unpack_from("<I", info, 52)[0]
    finally:
        os.close(fd)
    out: dict[str, int] = {}
    try:
        for mid in list(ids)[:n]:
            mfd = _fd_by_id(_MAP_GET_FD, mid)
            try:
                minfo = ctypes.create_string_buffer(128)
                _bpf(_INFO, ctypes.create_string_buffer(struct.pack("<IIQ", mfd, 128, ctypes.addressof(minfo)), 16))
            except BaseException:
                os.close(mfd)
                raise
            out[minfo.raw[24:40].split(b"\0")[0].decode()] = mfd
    except BaseException:  # none of them leaks
        for fd in out.values():
            os.close(fd)
        raise
    return out


def prog_test_run(prog_fd: int, frame: bytes) -> tuple[int, bytes]:
    """Run a loaded tc program on ``frame`` in the kernel (BPF_PROG_TEST_RUN): (verdict, the frame
    as the program leaves it). For the programs' tests on crafted packets."""
    out = ctypes.create_string_buffer(len(frame) + 256)
    inp = ctypes.create_string_buffer(frame, len(frame))
    attr = ctypes.create_string_buffer(80)
    struct.pack_into("<IIIIQQI", attr, 0, prog_fd, 0, len(frame), len(out), ctypes.addressof(inp),
                     ctypes.addressof(out), 1)
    _bpf(_PROG_TEST_RUN, attr)
    _, verdict, _, size_out = struct.unpack_from("<IIII", attr, 0)
    return verdict, out.raw[:size_out]


def map_rw(fd: int, value: bytes | None, size: int, key: int = 0) -> bytes:
    """Read (``value`` None) or write entry ``key`` of an array map whose values are ``size``
    bytes; returns the value."""
    k = ctypes.c_uint32(key)
    buf = ctypes.create_string_buffer(value if value is not None else b"", size)
    attr = ctypes.create_string_buffer(struct.pack("<IIQQQ", fd, 0, ctypes.addressof(k), ctypes.addressof(buf), 0),
                                       32)
    _bpf(_MAP_UPDATE if value is not None else _MAP_LOOKUP, attr)
    return buf.raw


# ------------------------------------------------------------------ ports
def named_progs(text: str) -> dict[str, int] | None:
    """Program name -> id of one port's filters, from one line of ``tc -j filter show``; None when
    the line is not that list (what cannot be a program, an entry without a name or a whole-number
    id, is left out)."""
    try:
        filters = json.loads(text)
    except (ValueError, RecursionError):  # RecursionError: nesting past the parser's depth
        return None
    if not isinstance(filters, list):
        return None
    out = {}
    for f in filters:
        opts = f.get("options") if isinstance(f, dict) else None
        prog = opts.get("prog") if isinstance(opts, dict) else None
        pid = prog.get("id") if isinstance(prog, dict) else None
        if isinstance(prog, dict) and isinstance(prog.get("name"), str) and type(pid) is int:
            out[prog["name"]] = pid
    return out


def prog_ids(t: Topology, node: str, ports: list[tuple[str, str]]) -> list[dict[str, int]]:
    """For each (ifname, hook) of ``node``: its clsact filters' programs, name -> id, from one
    ``tc -batch`` (a fabric of 4 hosts has 100-odd ports: a tc process per port was a tenth of
    ``mrc fabric up``); port by port when the batch fails (a port missing) or says less (a port
    whose answer cannot be read has none)."""
    if len(ports) > 1:
        r = tc_batch(t, node, [f"filter show dev {i} {hook}" for i, hook in ports], json_out=True)
        got = [named_progs(ln) for ln in r.stdout.splitlines() if ln.strip()]
        if r.returncode == 0 and len(got) == len(ports) and None not in got:
            return got
    return [(named_progs(r.stdout) if r.returncode == 0 else None) or {}
            for r in (tc_batch(t, node, [f"filter show dev {i} {hook}"], json_out=True) for i, hook in ports)]


def prog_id(t: Topology, node: str, ifname: str, name: str, hook: str) -> int | None:
    """The id of program ``name`` on clsact ``hook`` (ingress, egress) of a port, or None."""
    return prog_ids(t, node, [(ifname, hook)])[0].get(name)


@contextlib.contextmanager
def port_maps(t: Topology, node: str, ifname: str, name: str, hook: str):
    """The port program's maps (name -> fd), or None when it has no such program; closed after."""
    pid = prog_id(t, node, ifname, name, hook)
    maps = prog_maps(pid) if pid is not None else None
    try:
        yield maps
    finally:
        for fd in (maps or {}).values():
            os.close(fd)


def tc_batch(t: Topology, node: str, lines: list[str], force: bool = False,
             json_out: bool = False) -> subprocess.CompletedProcess:
    """``tc -batch`` in ``node``'s namespace (``force``: go on past a failing line; ``json_out``:
    what each line shows, as one JSON line)."""
    return subprocess.run(["tc"] + (["-force"] if force else []) + (["-j"] if json_out else []) +
                          ["-n", t.ns(node), "-batch", "-"],
                          input="\n".join(lines) + "\n", text=True, capture_output=True)
