"""``mrc dash``: the web server (aiohttp).

Routes:

- ``GET /``: the page (``static/index.html``), ``GET /static/...`` its
  script, style and the charting library (Chart.js, shipped in the package:
  the page works offline);
- ``GET /api/state``: everything a page needs when it opens (layout,
  history, the last tick) as one JSON object;
- ``GET /metrics``: every context's counters and the switches' queues for
  Prometheus;
- ``GET /api/stream[?qp=CTX/QPN]``: server-sent events, one ``tick`` per
  sample (``hz`` a second), after a ``hello`` like /api/state; ``qp`` names
  the QP whose EV grid the page shows;
- ``POST /api/fault``: ``{"op": fail|heal|flap|loss|rate, "target", "arg",
  "period", "duration"}``, done through the same code as ``mrc fabric``.
  It needs the token printed at start in an ``X-MRC-Token`` header;
  without it (or from another origin) it is refused and nothing changes.

Reading (the state, the stream, /metrics) needs a token too: the change
token or the read-only one mrc dash prints beside it, in ``X-MRC-Token``,
``Authorization: Bearer`` (Prometheus's ``bearer_token``) or ``?token=``
(the page's event stream). What the dash reads comes from root-only
control sockets; without a token nobody on this machine sees it.

Every request must name this server in its ``Host`` header (a page on
another site cannot reach it through a DNS name that points here), pages
may not be framed (no click-jacking of the fault buttons), and the token
never leaves in a Referer.
"""

from __future__ import annotations

import asyncio
import hmac
import ipaddress
import json
import os
import re
import socket
import threading

from mrc.ctl.endpoint import no_constant
from mrc.dash import model
from mrc.dash.collect import Collector
from mrc.errors import listen_error
from mrc.fabric import apply
from mrc.fabric.faults import apply_fault

STATIC = os.path.join(os.path.dirname(__file__), "static")
MAX_STREAMS = 32      # pages connected at once
MAX_FLAPS = 8         # flaps running at once
MAX_BODY = 4096       # bytes in a fault request
TOKEN_HEADER = "X-MRC-Token"
READS = ("/api/state", "/api/stream", "/metrics")  # what needs a token to read
SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
    "X-Content-Type-Options": "nosniff",
    "Cache-Control": "no-store",
}


def _web():
    try:
        from aiohttp import web
    except ImportError:
        raise SystemExit("mrc dash needs aiohttp: pip install 'mrc[dash]' (or run tools/setup.sh)") from None
    return web


class Dash:
    """The server's state: the collector, the token, the faults it runs."""

    def __init__(self, collector: Collector, token: str, bind: str, port: int, can_modify: str | None = None,
                 view_token: str | None = None) -> None:
        self.c = collector
        self.token = token
        #: the token that allows reading only (None: the change token alone)
        self.view_token = view_token
        self.bind, self.port = bind, port
        self.can_modify = can_modify    # None, or why faults cannot be done here
        self.streams = 0
        self.flaps: dict[str, threading.Thread] = {}
        self.fault_lock = asyncio.Lock()

    # --------------------------------------------------------------- checks
    def host_ok(self, request) -> bool:
        """Whether the request's Host header names this server (no DNS rebinding)."""
        return host_allowed(request.headers.get("Host", ""), self.bind, self.port)

    def origin_ok(self, request) -> bool:
        """No Origin (not a browser's cross-site request) or this server's own."""
        origin = request.headers.get("Origin")
        return origin is None or origin == f"http://{request.headers.get('Host', '')}"

    def token_ok(self, request) -> bool:
        """Whether the request carries the token that allows changes (in its header)."""
        given = request.headers.get(TOKEN_HEADER, "")
        return bool(given) and hmac.compare_digest(given.encode(), self.token.encode())

    @staticmethod
    def _given(request) -> str:
        """The token a read names: in the header, as a bearer token, or in the query (the event stream)."""
        auth = request.headers.get("Authorization", "")
        return (request.headers.get(TOKEN_HEADER) or (auth[7:] if auth.startswith("Bearer ") else "")
                or request.query.get("token", ""))

    @staticmethod
    def _same(given: str, token: str | None) -> bool:
        return bool(given) and bool(token) and hmac.compare_digest(given.encode(), token.encode())

    def read_ok(self, request) -> bool:
        """Whether the request carries a token that allows reading: either one."""
        given = self._given(request)
        return self._same(given, self.token) or self._same(given, self.view_token)

    def reads_with_change_token(self, request) -> bool:
        """Whether a read came with the change token (its page may offer changes)."""
        return self._same(self._given(request), self.token)


def make_app(dash: Dash):
    """The aiohttp application: the page, the state API and the fault actions."""
    web = _web()

    @web.middleware
    async def guard(request, handler):
        if not dash.host_ok(request):
            return web.json_response({"error": f"unexpected Host {request.headers.get('Host', '')!r}: "
                                               f"open the page through the address mrc dash printed"}, status=421)
        if request.path in READS and not dash.read_ok(request):
            resp = web.json_response({"error": "reading needs a token: open the URL mrc dash printed (…/?token=...), "
                                               "or send the read-only token it printed (X-MRC-Token, or Authorization:"
                                               " Bearer for Prometheus)"}, status=401)
        else:
            resp = await handler(request)
        for k, v in SECURITY_HEADERS.items():
            resp.headers.setdefault(k, v)
        return resp

    app = web.Application(middlewares=[guard], client_max_size=MAX_BODY)
    app["dash"] = dash

    async def index(request):
        return web.FileResponse(os.path.join(STATIC, "index.html"))

    async def state(request):
        return web.json_response(_hello(dash, request), dumps=_dumps)

    async def stream(request):
        return await _stream(dash, request)

    async def fault(request):
        return await _fault(dash, request)

    from mrc.ctl.metrics import ContextCollector
    from mrc.dash.metrics import SwitchCollector

    collectors = (ContextCollector(), SwitchCollector(dash.c.t))

    async def prometheus(request):
        from mrc.ctl.metrics import exposition

        body = await asyncio.get_running_loop().run_in_executor(None, exposition, *collectors)
        return web.Response(body=body, headers={"Content-Type": "text/plain; version=0.0.4; charset=utf-8"})

    app.router.add_get("/", index)
    app.router.add_get("/metrics", prometheus)
    app.router.add_get("/api/state", state)
    app.router.add_get("/api/stream", stream)
    app.router.add_post("/api/fault", fault)
    app.router.add_static("/static", STATIC, follow_symlinks=False)
    return app


async def _stream(dash: Dash, request):
    """The page's event stream: a hello, then every new tick (one QP watched when it asks)."""
    web = _web()
    if dash.streams >= MAX_STREAMS:
        return web.json_response({"error": f"{MAX_STREAMS} pages are connected already"}, status=503)
    qp = request.query.get("qp")
    if qp is not None and len(qp) > 64:
        return web.json_response({"error": "qp is CONTEXT/QPN"}, status=400)
    dash.streams += 1
    try:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-store",
                                           "X-Accel-Buffering": "no"})
        await resp.prepare(request)
        await resp.write(_sse("hello", _hello(dash, request)))
        seq = 0
        while True:
            if qp:
                dash.c.watch(qp)
            tick = dash.c.latest
            if tick is not None and tick.get("seq", 0) != seq:
                seq = tick["seq"]
                await resp.write(_sse("tick", tick))
            await asyncio.sleep(0.5 / dash.c.hz)
    except ConnectionResetError:  # the page went away
        return resp
    finally:
        dash.streams -= 1

async def _fault(dash: Dash, request):
    """A fault the page asks for, once its origin and token are checked."""
    web = _web()
    refused = _fault_refused(dash, request)
    if refused:
        return refused
    try:
        req = model.check_fault(dash.c.t, json.loads(await request.read(), parse_constant=no_constant))
    except (ValueError, RecursionError) as e:  # UnicodeDecodeError is a ValueError
        return web.json_response({"error": f"bad fault request: {str(e)[:200]}"}, status=400)
    except web.HTTPRequestEntityTooLarge:
        return web.json_response({"error": f"a fault request is at most {MAX_BODY} bytes"}, status=413)
    name = dash.c.name
    op, target = req["op"], req["target"]
    if op == "flap":
        return _start_flap(dash, req)
    async with dash.fault_lock:
        try:
            await asyncio.to_thread(apply_fault, name, op, target, req.get("arg"))
        except Exception as e:
            return web.json_response({"error": f"{op} {target or 'all'} failed: {e}"}, status=500)
    dash.c.note({"op": op, "target": target or "all", "arg": req.get("arg"), "by": "dash"})
    return web.json_response({"ok": True, **req})


def _fault_refused(dash: Dash, request):
    """The answer that refuses a fault request from another origin, without the change token, or on a fabric
    this process may not change; None when it may go."""
    web = _web()
    if not dash.origin_ok(request):
        return web.json_response({"error": "refused: a request from another origin "
                                           f"({request.headers.get('Origin')}) may not change the fabric"},
                                 status=403)
    if not dash.token_ok(request):
        return web.json_response({"error": "refused: this page is read-only. Changing the fabric needs the "
                                           "token mrc dash printed at start: open the URL it printed "
                                           "(…/?token=...)"}, status=403)
    if dash.can_modify is not None:
        return web.json_response({"error": dash.can_modify}, status=403)
    return None


def _start_flap(dash: Dash, req: dict):
    """A flap runs in a thread of its own, one per link, at most MAX_FLAPS at once."""
    web = _web()
    target = req["target"]
    running = {k: th for k, th in dash.flaps.items() if th.is_alive()}
    dash.flaps = running
    if target in running or len(running) >= MAX_FLAPS:
        return web.json_response({"error": f"{target} is flapping already" if target in running else
                                  f"{MAX_FLAPS} links are flapping already"}, status=409)
    th = threading.Thread(target=_flap, args=(dash.c, target, req["period"], req["duration"]), daemon=True)
    dash.flaps[target] = th
    th.start()
    dash.c.note({"op": "flap", "target": target, "arg": req["period"], "by": "dash"})
    return web.json_response({"ok": True, **req, "started": True})


def _flap(c: Collector, target: str, period: float, duration: float) -> None:
    try:
        apply.flap(c.name, target, period, duration=duration)
    except Exception as e:  # the page's timeline says so; the link's samples show its state
        c.note({"op": "flap failed", "target": target, "arg": str(e)[:200], "by": "dash"})


def _dumps(obj) -> str:
    return json.dumps(obj, separators=(",", ":"))


def _sse(event: str, obj) -> bytes:
    return f"event: {event}\ndata: {_dumps(obj)}\n\n".encode()


def _hello(dash: Dash, request=None) -> dict:
    why = dash.can_modify
    if why is None and request is not None and not dash.reads_with_change_token(request):
        why = "read only: this is the read-only token (open the URL with the change token to change the fabric)"
    return {**dash.c.hello(), "read_only_reason": why, "pages": dash.streams}


WILDCARDS = ("0.0.0.0", "::", "")
LOOPBACK = ("127.0.0.1", "::1", "localhost")


def host_allowed(header: str, bind: str, port: int) -> bool:
    """Whether a request's Host header names this server: its port,
    and a name that cannot be a stranger's DNS name rebound to this machine:
    localhost and loopback addresses, the address it is bound to, and, bound
    to every address, any IP literal or this machine's host name."""
    m = re.fullmatch(r"(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9.-]+)(?::(\d{1,5}))?", header or "")
    if not m or int(m.group(2) or 80) != port:  # no port in the header: 80
        return False
    name = m.group(1).strip("[]").lower()
    try:
        ipaddress.ip_address(name)
        literal = True
    except ValueError:
        literal = False
    if bind in WILDCARDS:
        return literal or name in ("localhost", socket.gethostname().lower())
    if bind in LOOPBACK:
        return name in LOOPBACK
    return name == bind.strip("[]").lower()


def view_token_of(token: str) -> str:
    """The read-only token that goes with a change token (derived: the same
    change token always gives the same one, and it does not reveal it)."""
    return hmac.new(token.encode(), b"mrc dash: read only", "sha256").hexdigest()[:24]


def run(name: str, port: int = 8080, bind: str = "127.0.0.1", hz: float = 5.0, token: str | None = None,
        out=None, ready=None) -> int:
    """Serve until interrupted. ``ready(url)`` is called once it listens."""
    import secrets
    import sys
    out = out or sys.stdout
    web = _web()
    token = token or os.environ.get("MRC_DASH_TOKEN") or secrets.token_urlsafe(18)
    view = view_token_of(token)
    can_modify = None if os.geteuid() == 0 else "refused: changing the fabric needs root (run mrc dash as root)"
    collector = Collector(name, hz=hz).start_thread()
    dash = Dash(collector, token, bind, port, can_modify, view)
    app = make_app(dash)

    async def main() -> None:
        runner = web.AppRunner(app, access_log=None, shutdown_timeout=1.0)
        await runner.setup()
        site = web.TCPSite(runner, bind, port)
        try:
            await site.start()
        except OSError as e:
            await runner.cleanup()
            raise listen_error(e, "--port", bind, port) from None
        shown = "127.0.0.1" if bind in ("0.0.0.0", "::") else bind
        shown = f"[{shown}]" if ":" in shown else shown
        url = f"http://{shown}:{port}/?token={token}"
        scope = ("only this machine can reach it (--bind 0.0.0.0 opens it to the network)"
                 if bind in ("127.0.0.1", "::1", "localhost") else f"listening on {bind}: whoever holds a token "
                                                                   "and reaches this port can use it")
        print(f"mrc dash: fabric {name} at {url}\n  read only: http://{shown}:{port}/?token={view} (Prometheus: "
              f"/metrics with bearer_token {view})\n  {scope}; without a token nothing is shown. Ctrl-C stops it.",
              file=out, flush=True)
        if ready:
            ready(url)
        try:
            await asyncio.Event().wait()
        finally:
            await runner.cleanup()

    try:
        asyncio.run(main())
    except KeyboardInterrupt:
        pass
    finally:
        collector.close()
    return 0
