"""What the dash shows, read from the running stack a few times a second.

A :class:`Collector` thread samples, at ``hz``:

- the fabric: each leaf switch's interfaces (one netlink dump per leaf, in
  its namespace: every link has a leaf at one end), the faults and queues in
  the fabric's state file, and the switch queues' counters when ports have
  queues (``mrc fabric up --link-rate``);
- every MRC context in the fabric's hosts, found through the control
  sockets (``mrc ctl list``; a context belongs to the fabric when its
  resolver is the fabric's topology): its QPs (``qps``), the EV events since
  the last read (``events``), and for the QPs someone watches their EVs
  (``ev_list``).

Each sample is a *tick* (a dict); the last 60 s of per-plane and per-host
rates, the last EV events and the links' state changes are kept for a page
that connects later (:meth:`Collector.hello`).
"""

from __future__ import annotations

import collections
import os
import socket
import threading
import time

from mrc.ctl.endpoint import ControlClient
from mrc.ctl.sockets import endpoints
from mrc.dash import model
from mrc.errors import ErrnoError
from mrc.fabric import apply, nl, ns, qos
from mrc.wire import ev_plane

MAX_CONTEXTS = 64        # contexts followed at once
MAX_GRIDS = 8            # QPs whose EVs are read every tick
WATCH_S = 5.0            # a QP stays watched this long after a page asked for it
EVENT_KEEP = 2000        # EV events kept for pages that connect later
TIMELINE_KEEP = 500      # link state changes and fault requests kept


def _ctx_id(path: str) -> str:
    """A context's id on the page: its control socket's name (``<pid>[-<tag>]``)."""
    return os.path.basename(path).removesuffix(".sock")


SLOW_MISSES = 5  # answers in a row a followed context may miss before it is passed over


class _Ctx:
    """One control endpoint of a context in the fabric."""

    def __init__(self, path: str, client: ControlClient, info: dict) -> None:
        self.path, self.client, self.info = path, client, info
        self.id = _ctx_id(path)
        self.host = info.get("host")
        self.seq = 0


class Collector:
    """Samples fabric ``name`` and its contexts every ``1/hz`` s in a thread."""

    def __init__(self, name: str, hz: float = 5.0, history_s: float = 60.0) -> None:
        if not 0.5 <= hz <= 20:
            raise ValueError(f"the update rate must be 0.5-20 per second, not {hz}")
        self.name = name
        self.t = apply.load_topology(name)
        self.hz = hz
        self.layout = model.layout(self.t)
        self.start = time.monotonic()
        self.series: collections.deque = collections.deque(maxlen=int(history_s * hz))
        self.events: collections.deque = collections.deque(maxlen=EVENT_KEEP)
        self.timeline: collections.deque = collections.deque(maxlen=TIMELINE_KEEP)
        self.latest: dict | None = None
        self.seq = 0
        self._lock = threading.Lock()
        self._nl: dict[str, nl.NetlinkRoute] = {}
        self._ctx: dict[str, _Ctx] = {}
        #: endpoints not followed: path -> why (None: another fabric's context)
        self._foreign: dict[str, str | None] = {}
        #: followed endpoints whose last answer did not come in time: path -> (events cursor, misses)
        self._slow: dict[str, tuple[int, int]] = {}
        self._watch: dict[str, float] = {}   # "ctx/qpn" -> when a page last asked
        self._known: set[str] = set()         # the QPs of the last sample
        self._prev: dict | None = None
        self._prev_at = 0.0
        self._states: dict[str, str] = {}
        self._next_discovery = 0.0
        self._ports = None
        self._ports_key = None
        self._event_id = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="mrc-dash-collect", daemon=True)

    # ----------------------------------------------------------- lifetime
    def start_thread(self) -> Collector:
        """Start sampling in a thread; returns the collector."""
        self._thread.start()
        return self

    def close(self) -> None:
        """Stop sampling and wait for the thread."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(5)
        for r in self._nl.values():
            r.close()
        for c in self._ctx.values():
            c.client.close()
        if self._ports is not None:
            self._ports.close()
        self._nl.clear()
        self._ctx.clear()

    def _run(self) -> None:
        while not self._stop.is_set():
            began = time.monotonic()
            try:
                tick = self.sample()
            except Exception as e:  # one bad sample must not end the view
                tick = {"t": round(began - self.start, 3), "errors": [f"sampling failed: {type(e).__name__}: {e}"]}
            with self._lock:
                self.seq += 1
                tick["seq"] = self.seq
                self.latest = tick
            self._stop.wait(max(0.0, 1.0 / self.hz - (time.monotonic() - began)))

    # ------------------------------------------------------------ watching
    def watch(self, key: str) -> None:
        """A page shows QP ``key`` ("<context id>/<qpn>"): read its EVs (a
        key that names no QP of the last sample is ignored, so no page can
        crowd the real ones out)."""
        with self._lock:
            if key in self._known and (key in self._watch or len(self._watch) < MAX_GRIDS):
                self._watch[key] = time.monotonic()

    def note(self, entry: dict) -> None:
        """Add a fault request (from the page) to the timeline."""
        with self._lock:
            self.timeline.append({"t": round(time.monotonic() - self.start, 3), **entry})

    def hello(self) -> dict:
        """What a page needs when it connects: the layout, the history, the last tick."""
        with self._lock:
            return {"layout": self.layout, "hz": self.hz, "series": list(self.series),
                    "events": list(self.events)[-300:], "timeline": list(self.timeline), "tick": self.latest}

    # ------------------------------------------------------------ sampling
    def _leaf_links(self, errors: list[str]) -> dict:
        out = {}
        for p in range(self.t.planes):
            for i in range(self.t.leaves):
                leaf = self.t.leaf(p, i)
                try:
                    if leaf not in self._nl:
                        sock = ns.run_in(self.t.ns(leaf), lambda: socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 0))
                        self._nl[leaf] = nl.NetlinkRoute(sock)
                    out[leaf] = self._nl[leaf].links()
                except OSError as e:
                    errors.append(f"{leaf}: cannot read its interfaces ({e.strerror or e})")
                    r = self._nl.pop(leaf, None)
                    if r is not None:
                        r.close()
        return out

    def _queues(self, queues: dict) -> dict:
        """Counters of the switch ports that have a queue."""
        key = tuple(sorted(queues))
        if key != self._ports_key:
            if self._ports is not None:
                self._ports.close()
            ports = [p for p in qos.switch_ports(self.t) if f"{p[0]}/{p[1]}" in queues]
            self._ports = qos.PortReader(self.t, ports) if ports else None
            self._ports_key = key
        if self._ports is None:
            return {}
        return {port: qos.shown(c) for port, c in self._ports.read().items()}

    def _discover(self) -> None:
        """Follow the new endpoints whose context is in this fabric. One that
        fails or answers nonsense is passed over (and listed in the ticks'
        ``passed_over``) until its socket goes."""
        for path in endpoints():
            if path in self._ctx or path in self._foreign or len(self._ctx) >= MAX_CONTEXTS:
                continue
            try:
                client = ControlClient(path, timeout=1.0)
            except (ErrnoError, OSError) as e:
                self._foreign[path] = str(e)
                continue
            try:
                info = client.call("info")
            except (ErrnoError, OSError) as e:
                client.close()
                if not self._missed(path, e):
                    self._foreign[path] = str(e)
                continue
            if info.get("topology") != self.name or info.get("host") not in self.t.host_nodes():
                client.close()
                self._foreign[path] = None
                continue
            self._ctx[path] = _Ctx(path, client, info)
            if path in self._slow:  # followed again where it left off (no event twice)
                self._ctx[path].seq = self._slow[path][0]

    def _missed(self, path: str, e: Exception, seq: int | None = None) -> bool:
        """A context that answered before and now did not answer in time (its process busy: a
        full-speed transfer riding out a fault on a loaded machine) is asked again at the next
        discovery, from its events cursor, up to SLOW_MISSES times in a row; an endpoint that never
        answered is passed over at once, as before. True: it will be asked again."""
        if not isinstance(e, TimeoutError) or (seq is None and path not in self._slow):
            return False
        cursor, misses = self._slow.get(path, (seq or 0, 0))
        if misses + 1 >= SLOW_MISSES:
            self._slow.pop(path, None)
            return False
        self._slow[path] = (cursor if seq is None else seq, misses + 1)
        return True

    def _contexts(self) -> tuple[list[dict], dict, list[dict]]:
        now = time.monotonic()
        if now >= self._next_discovery:
            self._discover()
            self._next_discovery = now + 1.0
            alive = set(endpoints())
            self._foreign = {p: why for p, why in self._foreign.items() if p in alive}
            self._slow = {p: v for p, v in self._slow.items() if p in alive}
        with self._lock:
            watched = {k for k, at in self._watch.items() if now - at < WATCH_S}
            self._watch = {k: at for k, at in self._watch.items() if k in watched}
        out, grids, new_events = [], {}, []
        for path, c in sorted(self._ctx.items(), key=lambda kv: (kv[1].host or "", kv[0])):
            try:
                qps = [model.qp_row(q) for q in c.client.call("qps")["qps"]]
                ev = c.client.call("events", after=c.seq)
                events = [model.ev_event(e) for e in ev["events"]]
                last, dropped = model.check_int(ev["last"]), model.check_int(ev.get("dropped", 0))
                if not watched and not grids and qps:  # nobody chose: the first QP found
                    watched = {f"{c.id}/{qps[0]['qpn']}"}
                for q in qps:
                    key = f"{c.id}/{q['qpn']}"
                    if key in watched and len(grids) < MAX_GRIDS:
                        evs = c.client.call("ev_list", qpn=q["qpn"])["evs"]
                        grids[key] = {"ctx": c.id, "qpn": q["qpn"], "host": c.host,
                                      **model.ev_grid(evs, self.t.planes)}
            except (ErrnoError, OSError, ValueError, KeyError, TypeError) as e:
                c.client.close()
                del self._ctx[path]
                if not self._missed(path, e, c.seq):
                    self._foreign[path] = f"answers nonsense or nothing: {e}"
                continue
            c.seq = last
            self._slow.pop(path, None)
            for e in events:
                self._event_id += 1
                new_events.append({"id": self._event_id, "t": round(now - self.start, 3), "ctx": c.id,
                                   "host": c.host, **e, "plane": ev_plane(e["ev"]),
                                   "links": model.path_links(self.t, c.host, e["address"])})
            out.append({"id": c.id, "pid": c.info.get("pid"), "role": c.info.get("role"), "host": c.host,
                        "dropped": dropped,
                        "qps": [{**q, "key": f"{c.id}/{q['qpn']}"} for q in qps]})
        return out, grids, new_events

    def sample(self) -> dict:
        """One tick: read everything once."""
        errors: list[str] = []
        now = time.monotonic()
        counters = self._leaf_links(errors)
        try:
            state = apply.load_state(self.name)
        except Exception as e:
            state = {}
            errors.append(f"fabric {self.name}: no state ({e}); was it taken down?")
        faults, queues = state.get("faults", {}), state.get("queues", {})
        links = model.link_view(self.t, faults, self._prev or {}, counters, now - self._prev_at, queues)
        self._prev, self._prev_at = counters, now
        planes, hosts = model.plane_host_rates(self.t, links)
        t = round(now - self.start, 3)
        changes: dict[tuple[str, str], list[str]] = {}
        for ln, v in links.items():
            old = self._states.get(ln)
            if old is not None and old != v["state"]:
                changes.setdefault((old, v["state"]), []).append(ln)
            self._states[ln] = v["state"]
        try:
            port_q = self._queues(queues)
        except OSError as e:
            port_q = {}
            errors.append(f"switch queues: {e}")
        contexts, grids, new_events = self._contexts()
        passed_over = [{"ctx": _ctx_id(p), "why": why} for p, why in sorted(self._foreign.items()) if why]
        point = {"t": t, "planes": planes, "hosts": hosts}
        with self._lock:
            self._known = {q["key"] for c in contexts for q in c["qps"]}
            self.series.append(point)
            self.events.extend(new_events)
            for (old, new), names in sorted(changes.items()):
                self.timeline.append({"t": t, "op": "state", "from": old, "to": new, "links": sorted(names)})
            timeline = list(self.timeline)[-50:]
        return {"t": t, "time": time.time(), "links": links, **point, "queues": port_q, "contexts": contexts,
                "grids": grids, "events": new_events, "timeline": timeline, "faults": faults, "errors": errors,
                "passed_over": passed_over}
