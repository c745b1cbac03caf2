"""Root test: a control endpoint's life ends before its context's: closing
the context stops the endpoint and waits for every client thread, so none
calls into a freed context."""
import json
import os
import shutil
import socket
import tempfile
import threading
import time

import pytest

from mrc.ctl.endpoint import ControlServer
from mrc.fabric.pair import host_context

pytestmark = pytest.mark.root


def test_closing_the_context_waits_for_the_control_clients(fabric, monkeypatch, tmp_path):
    """Device.close stops the control endpoint first and joins its client
    threads: none is left to call into a freed context."""
    d = tempfile.mkdtemp(prefix="ctl-close-", dir="/run/mrc")
    monkeypatch.setenv("MRC_CTL_DIR", d)
    ca = host_context(fabric, 0)
    try:
        srv = ControlServer(ca)
        clients = []
        for _ in range(3):  # connected, one request answered, then idle inside the server's read
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.connect(srv.path)
            s.sendall(b'{"op": "info"}\n')
            assert json.loads(s.makefile("rb").readline())["ok"] is True
            clients.append(s)
        threads = [t for t in threading.enumerate() if t.name == "mrc-ctl-client"]
        assert len(threads) >= 3
        t0 = time.monotonic()
        ca.close()  # no srv.close(): the context's close hook does it
        assert time.monotonic() - t0 < 5
        assert not [t for t in threads if t.is_alive()], "a control client thread outlived the context"
        assert not os.path.exists(srv.path)
        for s in clients:
            assert s.recv(100) == b""  # the server hung up
            s.close()
    finally:
        ca.close()
        shutil.rmtree(d, ignore_errors=True)
