"""libmrc.so as a C program sees it (through ctypes, no root): one library
under the Python module, only ``mrc_*`` names exported, the digest the
exchange and `mrc perf server` rely on, and opening errors that say what to
do. tests/integration/test_c_library.py runs the C examples on a fabric."""
import ctypes
import errno
import hashlib
import json
import os
import re
import subprocess
from pathlib import Path

import mrc._dp
import pytest

from mrc import verbs

ROOT = Path(__file__).resolve().parents[2]
LIB_PATH = Path(mrc._dp.__file__).with_name("libmrc.so")


class OpenAttr(ctypes.Structure):
    _fields_ = [("ports", ctypes.c_char_p), ("topology", ctypes.c_char_p), ("host", ctypes.c_char_p),
                ("max_qps", ctypes.c_uint32), ("cq_depth", ctypes.c_uint32)]


@pytest.fixture(scope="module")
def lib():
    lib = ctypes.CDLL(str(LIB_PATH))
    lib.mrc_last_error.restype = ctypes.c_char_p
    lib.mrc_sha256_hex.argtypes = [ctypes.c_char_p, ctypes.c_size_t, ctypes.c_char_p]
    lib.mrc_ctx_open.argtypes = [ctypes.POINTER(OpenAttr), ctypes.POINTER(ctypes.c_void_p)]
    return lib


def test_the_python_module_links_the_one_library():
    needed = subprocess.run(["ldd", mrc._dp.__file__], capture_output=True, text=True).stdout
    assert re.search(rf"libmrc\.so => {re.escape(str(LIB_PATH))}", needed), needed
    syms = subprocess.run(["nm", "-D", "--defined-only", str(LIB_PATH)], capture_output=True, text=True).stdout
    names = [line.split()[-1] for line in syms.splitlines() if line.split()]
    assert "mrc_ctx_open" in names and "mrc_post_write" in names
    assert [n for n in names if not n.startswith("mrc_")] == [], "only the mrc_* calls are exported"


@pytest.mark.parametrize("size", [0, 1, 55, 56, 63, 64, 65, 1000, 1 << 16])
def test_sha256_matches_hashlib(lib, size):
    data = os.urandom(size)
    out = ctypes.create_string_buffer(65)
    lib.mrc_sha256_hex(data, size, out)
    assert out.value.decode() == hashlib.sha256(data).hexdigest()


def _open(lib, **kw) -> tuple[int, str]:
    attr = OpenAttr(**{k: v.encode() if isinstance(v, str) else v for k, v in kw.items()})
    ctx = ctypes.c_void_p()
    rc = lib.mrc_ctx_open(ctypes.byref(attr), ctypes.byref(ctx))
    assert rc < 0 and not ctx.value
    return -rc, lib.mrc_last_error().decode()


def test_opening_errors_say_what_to_do(lib, tmp_path, monkeypatch):
    monkeypatch.delenv("MRC_TOPOLOGY", raising=False)
    monkeypatch.delenv("MRC_HOST", raising=False)
    err, why = _open(lib)
    assert err == errno.EINVAL and "give a topology file" in why
    err, why = _open(lib, ports="nosuchif0")
    assert err == errno.ENODEV and "no interface named 'nosuchif0'" in why
    err, why = _open(lib, ports="lo:99")
    assert err == errno.EINVAL and "plane" in why
    bad = tmp_path / "bad.json"
    for text, says in [("{\"hosts\": {", "not valid JSON"), ("{\"hosts\": {}}", "at least one host"),
                       ("{\"hosts\": {\"a\": {\"ports\": [{\"plane\": 1.5}]}}}", "integers only"),
                       ("{\"hosts\": {\"a\": {\"ports\": [{\"plane\": 0, \"address\": \"nope\"}]}}}", "'address'"),
                       (json.dumps({"hosts": {"a": {"ports": [{"plane": 0, "address": "fc00::1"}]}}}),
                        "names no interface")]:
        bad.write_text(text)
        err, why = _open(lib, topology=str(bad), host="a")
        assert err and says in why and str(bad) in why, (text, why)
    err, why = _open(lib, topology=str(tmp_path / "missing.json"))
    assert err == errno.ENOENT and "cannot read topology file" in why
    err, why = _open(lib, topology=str(bad), host="zz")
    assert err == errno.ENOENT and "no host 'zz'" in why


def test_the_c_defaults_are_the_software_data_path_of_mrc_verbs():
    """A QP a C program makes (mrc_ctx_qp_attr_default) runs as one Python makes."""
    src = (ROOT / "csrc" / "app" / "open.c").read_text()
    c = {k.lower(): int(v) for k, v in re.findall(r"#define SW_(\w+) (\d+)", src)}
    assert {k: c[k] for k in verbs.SOFTWARE_TIMING} == verbs.SOFTWARE_TIMING
    assert {k: c[k] for k in verbs.SOFTWARE_CC if k != "disable_qa"} == {
        k: v for k, v in verbs.SOFTWARE_CC.items() if k != "disable_qa"}
    assert verbs.SOFTWARE_CC["disable_qa"] == 1 and "attr->cc.disable_qa = 1;" in src
    sizes = re.search(r"payload_sizes\[\] = \{([\d, ]+)\}", src).group(1)
    assert tuple(int(x) for x in sizes.split(",")) == verbs.PAYLOAD_SIZES
    room = re.search(r"#define HEADER_ROOM \(([\d +]+)\)", src).group(1)
    assert sum(int(x) for x in room.split("+")) == verbs.HEADER_ROOM


@pytest.mark.parametrize("ports,says", [("", "no MRC ports"), (",,", "no MRC ports"), ("x" * 20, "not an interface"),
                                        ("lo:x", "plane"), ("lo:-1", "plane"), (":0", "not an interface"),
                                        (",".join(["lo"] * 17), "at most 16"), ("a" * 600, "too long")])
def test_a_bad_port_list_is_refused_in_one_sentence(lib, ports, says):
    err, why = _open(lib, ports=ports)
    assert err == errno.EINVAL and says in why, why


def test_a_topology_with_bad_paths_is_refused(lib, tmp_path):
    host = {"ports": [{"plane": 0, "ifname": "lo", "address": "fc00::1"}]}
    for paths, says in [([{"src": "a", "dst": "nobody", "plane": 0, "addresses": ["fc00::1"]}], "paths[0]"),
                        ([{"src": "a", "dst": "a", "plane": 0, "addresses": ["fc00::1"] * 17}], "1 to 16"),
                        ([{"src": "a", "dst": "a", "plane": 0, "addresses": ["fc00::1", 5]}], "address 1"),
                        ([{"src": "a", "dst": "a", "plane": 16, "addresses": ["fc00::1"]}], "paths[0]")]:
        topo = tmp_path / "t.json"
        topo.write_text(json.dumps({"hosts": {"a": host}, "paths": paths}))
        err, why = _open(lib, topology=str(topo), host="a")
        assert err == errno.EINVAL and says in why, (paths, why)


def test_a_listener_refuses_a_bad_key_file_address_or_mode(lib, tmp_path):
    """The C library's listener (no context needed): each bad input is an errno and a sentence."""
    lib.mrc_cm_listen.argtypes = [ctypes.c_char_p, ctypes.c_uint16, ctypes.c_char_p, ctypes.POINTER(ctypes.c_void_p)]
    lib.mrc_cm_listener_security.argtypes = [ctypes.c_void_p, ctypes.c_uint32]
    lib.mrc_cm_listener_close.argtypes = [ctypes.c_void_p]
    short, good = tmp_path / "short", tmp_path / "good"
    short.write_bytes(b" secret \n")
    good.write_bytes(b"k" * 32)
    out = ctypes.c_void_p()
    for addr, key, err, says in [(b"::1", str(tmp_path / "missing").encode(), errno.ENOENT, "cannot read"),
                                 (b"::1", str(short).encode(), errno.EINVAL, "at least 16"),
                                 (b"not-an-address", None, errno.EINVAL, "not an IPv6 address")]:
        assert lib.mrc_cm_listen(addr, 0, key, ctypes.byref(out)) == -err
        assert says in lib.mrc_last_error().decode()
    assert lib.mrc_cm_listen(b"::1", 0, None, ctypes.byref(out)) == 0
    try:
        assert lib.mrc_cm_listener_security(out, 1) == -errno.EINVAL  # a secured mode needs the key
        assert "pre-shared key" in lib.mrc_last_error().decode()
        assert lib.mrc_cm_listener_security(out, 7) == -errno.EINVAL
    finally:
        lib.mrc_cm_listener_close(out)
    assert lib.mrc_cm_listen(b"::1", 0, str(good).encode(), ctypes.byref(out)) == 0
    try:
        assert lib.mrc_cm_listener_security(out, 2) == 0
    finally:
        lib.mrc_cm_listener_close(out)
