"""The control client against sockets that do not answer as a control
endpoint does (another program on the path, or one that lies): a clear
ErrnoError every time, never a crash or an unbounded read."""
import errno
import os
import socket
import threading

import pytest

from mrc.ctl import endpoint, sockets
from mrc.ctl.endpoint import ControlClient
from mrc.ctl.sockets import endpoints
from mrc.errors import ErrnoError


def fake_endpoint(answer: bytes, d: str):
    """A UNIX socket in ``d`` that reads one request and answers ``answer``."""
    path = os.path.join(d, "1.sock")
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(path)
    srv.listen(1)

    def serve():
        conn, _ = srv.accept()
        with conn:
            conn.recv(65536)
            try:
                conn.sendall(answer)
            except OSError:
                pass
    threading.Thread(target=serve, daemon=True).start()
    return path, srv


@pytest.mark.parametrize("answer, code", [
    (b"garbage\n", errno.EIO),
    (b"[1, 2]\n", errno.EIO),
    (b'{"qps": []}\n', errno.EIO),                       # no "ok"
    (b'{"ok": "yes"}\n', errno.EIO),
    (b'{"ok": NaN}\n', errno.EIO),
    (b'{"ok": false}\n', errno.EIO),                     # a refusal without errno and error
    (b'{"ok": false, "errno": "x", "error": 5}\n', errno.EIO),
    (b"[" * 3000 + b"\n", errno.EIO),                    # nested past the recursion limit
    (b'{"ok": false, "errno": 1, "error": "EPERM: no"}\n', errno.EPERM),  # a real refusal
    (b"", errno.EIO),                                    # closed without a word
    (b'{"ok": true, "x": "' + b"a" * 5000, errno.EMSGSIZE),  # no end of line within the bound
])
def test_a_socket_that_is_not_a_control_endpoint_gets_a_clear_error(answer, code, monkeypatch, sockdir):
    monkeypatch.setattr(endpoint, "MAX_ANSWER", 4096)
    path, srv = fake_endpoint(answer, sockdir)
    try:
        with ControlClient(path, timeout=5) as c, pytest.raises(ErrnoError) as e:
            c.call("info")
        assert e.value.errno == code
    finally:
        srv.close()


def test_a_silent_endpoint_times_out(sockdir):
    # (it borrowed a fake endpoint's directory, whose server thread then waited in accept() until
    # the socket closed under it: an unhandled-thread warning in some runs)
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)  # accepts, never answers
    path = os.path.join(sockdir, "2.sock")
    srv.bind(path)
    srv.listen(1)
    try:
        with ControlClient(path, timeout=0.3) as c, pytest.raises(OSError):
            c.call("info")
    finally:
        srv.close()


def test_endpoints_lists_only_live_pid_sockets(monkeypatch, sockdir):
    d = sockdir
    monkeypatch.setenv("MRC_CTL_DIR", d)
    me = os.getpid()
    names = [f"{me}.sock", f"{me}-h0.sock", f"{me}-a.b_c.sock", "999999999.sock", f"{me}-../x.sock",
             f"{me}-{'x' * 33}.sock", f"{me}-h0.sock.tmp", "abc.sock", f"{me}-.sock", f"{me}-h 0.sock"]
    for n in names:
        if "/" not in n:
            open(os.path.join(d, n), "w").close()
    got = sorted(os.path.basename(p) for p in endpoints())
    assert got == sorted([f"{me}.sock", f"{me}-h0.sock", f"{me}-a.b_c.sock"])


@pytest.mark.parametrize("tag", ["", "../x", "h 0", "x" * 33, "h0/1", "h-0"])
def test_a_control_socket_tag_must_be_a_plain_name(tag):
    with pytest.raises(ValueError, match="tag"):
        endpoint.serve(object(), tag=tag)


def _socket_file(path: str, listen: bool) -> socket.socket:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(path)
    if listen:
        s.listen(1)
    return s


def test_sweep_removes_only_the_sockets_of_gone_or_deaf_processes(tmp_path):
    me, d = os.getpid(), str(tmp_path)
    live = _socket_file(os.path.join(d, f"{me}-live.sock"), listen=True)
    dead_pid = _socket_file(os.path.join(d, "999999999.sock"), listen=False)   # its process is gone
    reused = _socket_file(os.path.join(d, f"{me}-old.sock"), listen=False)     # a live PID that does not listen
    other = _socket_file(os.path.join(d, "not-ours.sock"), listen=False)       # not a control socket's name
    open(os.path.join(d, "999999998.sock"), "w").close()                       # a file, not a socket
    os.symlink(os.path.join(d, "999999999.sock"), os.path.join(d, "999999997.sock"))
    try:
        gone = sockets.sweep_stale(d)
        assert sorted(os.path.basename(p) for p in gone) == sorted(["999999999.sock", f"{me}-old.sock"])
        assert sorted(os.listdir(d)) == sorted([f"{me}-live.sock", "not-ours.sock", "999999998.sock",
                                                 "999999997.sock"])
        assert sockets.sweep_stale(d) == []  # nothing more to take
        assert sockets.sweep_stale(os.path.join(d, "missing")) == []
        os.mkdir(os.path.join(d, "999999996.sock"))  # a directory with a control socket's name: left alone
        assert sockets.sweep_stale(d) == [] and os.path.isdir(os.path.join(d, "999999996.sock"))
        assert sockets.sweep_stale(os.path.join(d, "999999998.sock")) == []  # a file, not a directory
    finally:
        for s in (live, dead_pid, reused, other):
            s.close()


def test_a_bound_control_socket_listens_as_soon_as_it_is_in_place(tmp_path):
    # (so a sweep by another starting server can never take it for a stale one)
    path = os.path.join(str(tmp_path), f"{os.getpid()}.sock")
    s = sockets.bind_socket(path)
    try:
        assert not sockets._refuses(path)
        assert sockets.sweep_stale(str(tmp_path)) == []
        assert os.path.exists(path)
    finally:
        s.close()


def test_sweep_leaves_another_users_stale_socket_alone(tmp_path, monkeypatch):
    d = str(tmp_path)
    left = _socket_file(os.path.join(d, "999999999.sock"), listen=False)  # stale, but this file's owner's
    try:
        owner = os.lstat(os.path.join(d, "999999999.sock")).st_uid
        monkeypatch.setattr(sockets.os, "geteuid", lambda: owner + 4242)  # a user who is neither it nor root
        assert sockets.sweep_stale(d) == [] and os.listdir(d) == ["999999999.sock"]
        monkeypatch.setattr(sockets.os, "geteuid", lambda: owner)
        assert sockets.sweep_stale(d) == [os.path.join(d, "999999999.sock")]
    finally:
        left.close()
