"""The JSON the dash page consumes, built from plain data (no I/O here).

- :func:`layout`: the fabric's shape, once per page: planes, switches, hosts
  and every link with its plane and tier.
- :func:`link_view`: each link's state (up, down, lossy, limited) and load
  from two samples of the lower switch's interface counters.
- :func:`path_links`: the links an EV's destination address crosses.
- :func:`ev_grid`: a QP's EVs as a planes x EVs grid of states;
  :func:`qp_row`, :func:`ev_event`: what a control endpoint answered,
  checked field by field.
- :func:`check_fault`: a fault request from the page, checked.

Every function here is pure; :mod:`mrc.dash.collect` feeds them.
"""

from __future__ import annotations

from mrc.errors import UsageError
from mrc.fabric.topology import Topology
from mrc.units import parse_rate

#: the EV states a grid cell can show (mrc.core.EV_STATES)
EV_STATES = ("GOOD", "SKIP", "ASSUMED_BAD", "DENIED", "UNKNOWN")


def layout(t: Topology) -> dict:
    """The fabric as nodes and links (names as ``mrc fabric`` uses them)."""
    nodes = [{"id": t.host(h), "kind": "host", "index": h, "leaf": t.host_leaf(h)} for h in range(t.hosts)]
    for p in range(t.planes):
        nodes += [{"id": t.spine(p, s), "kind": "t1", "plane": p, "index": s} for s in range(t.spines)]
        nodes += [{"id": t.leaf(p, i), "kind": "t0", "plane": p, "index": i} for i in range(t.leaves)]
    links = [{"id": ln.name, "plane": ln.plane, "a": ln.a_node, "b": ln.b_node,
              "tier": "host-t0" if ln.a_node in t.host_nodes() else "t0-t1"} for ln in t.links()]
    return {"name": t.name, "planes": t.planes, "spines": t.spines, "leaves": t.leaves, "hosts": t.hosts,
            "nodes": nodes, "links": links}


def leaf_port(t: Topology, link) -> tuple[str, str, bool]:
    """Where a link's counters are read: (leaf node, its interface, whether
    the leaf is the link's lower end). Every link has a leaf at one end: a
    host's link at its upper end, a spine's at its lower."""
    if link.a_node in t.host_nodes():
        return link.b_node, link.b_if, False
    return link.a_node, link.a_if, True


def link_view(t: Topology, faults: dict, prev: dict, now: dict, dt: float, queues: dict | None = None) -> dict:
    """Each link's ``state`` and load. ``prev``/``now``: ``{leaf: {ifname:
    counters}}`` (mrc.fabric.nl.parse_links) ``dt`` seconds apart; ``faults``:
    the fabric state's faults; ``queues``: its switch queues (node/ifname ->
    PortQoS fields). ``up_gbps`` is the lower end's transmit (toward the
    spines), ``down_gbps`` the other way; ``capacity_bps`` a rate fault's or
    queue's rate (None: the veth's, unlimited); ``load`` the busier
    direction over it (None without a capacity)."""
    out = {}
    queues = queues or {}
    for ln in t.links():
        leaf, ifname, lower = leaf_port(t, ln)
        c1 = now.get(leaf, {}).get(ifname)
        c0 = prev.get(leaf, {}).get(ifname)
        f = faults.get(ln.name, {})
        up = down = None
        if c1 is not None and c0 is not None and dt > 0:
            tx = max(0, c1["tx_bytes"] - c0["tx_bytes"]) * 8 / dt / 1e9
            rx = max(0, c1["rx_bytes"] - c0["rx_bytes"]) * 8 / dt / 1e9
            up, down = (tx, rx) if lower else (rx, tx)
        if f.get("down") or (c1 is not None and not c1["up"]):
            state = "down"
        elif f.get("loss") is not None:
            state = "lossy"
        elif f.get("rate") is not None:
            state = "limited"
        elif c1 is None:
            state = "unknown"
        else:
            state = "up"
        cap = f.get("rate")
        if cap is None:
            q = queues.get(f"{leaf}/{ifname}")
            cap = q.get("rate_bps") if q else None
        load = None
        if cap and up is not None:
            load = round(min(1.0, max(up, down) * 1e9 / cap), 3)
        out[ln.name] = {"state": state, "loss": f.get("loss"), "capacity_bps": cap or None,
                        "up_gbps": None if up is None else round(up, 3),
                        "down_gbps": None if down is None else round(down, 3), "load": load}
    return out


def plane_host_rates(t: Topology, links: dict) -> tuple[list[float], dict]:
    """Per plane, what the hosts send into it; per host, what it sends and
    receives over all its planes (Gb/s), from :func:`link_view`'s host links."""
    planes = [0.0] * t.planes
    hosts = {t.host(h): {"tx": 0.0, "rx": 0.0} for h in range(t.hosts)}
    for ln in t.links():
        if ln.a_node not in hosts:
            continue
        v = links.get(ln.name, {})
        up, down = v.get("up_gbps") or 0.0, v.get("down_gbps") or 0.0
        planes[ln.plane] += up
        hosts[ln.a_node]["tx"] += up
        hosts[ln.a_node]["rx"] += down
    return ([round(x, 3) for x in planes],
            {h: {k: round(v, 3) for k, v in r.items()} for h, r in hosts.items()})


def path_links(t: Topology, src: str | None, address: str | None) -> list[str]:
    """The links a packet from host ``src`` to uSID container ``address``
    crosses, in order ([] when the address is not one of the fabric's)."""
    if not address:
        return []
    try:
        d = t.decode_address(address)
    except ValueError:
        return []
    hops, dst = d["hops"], d["host"]
    if len(hops) != 3 or dst is None:
        return []
    plane = d["plane"]
    out = [f"{src}-{hops[0]}"] if src else []
    out += [f"{hops[0]}-{hops[1]}", f"{hops[2]}-{hops[1]}", f"{dst}-{hops[2]}"]
    names = {ln.name for ln in t.links() if ln.plane == plane}
    return [ln for ln in out if ln in names]


QP_NUMBERS = ("qpn", "cwnd", "inflight", "srtt_ns", "min_rtt_ns", "base_rtt_ns", "tx_bytes", "rtx_bytes", "losses",
              "timeouts", "ecn_marks", "trims", "good_evs", "bad_evs")


def check_int(x) -> int:
    """``x`` if it is an integer (not a bool), else ValueError."""
    if isinstance(x, bool) or not isinstance(x, int):
        raise ValueError(f"{x!r} is not an integer")
    return x


def _state(x) -> str:
    if x not in EV_STATES and not (isinstance(x, str) and x.isupper() and len(x) <= 16):
        raise ValueError(f"{x!r} is not a state name")
    return x


def qp_row(q: dict) -> dict:
    """A QP of the control endpoint's ``qps`` answer, with only the fields
    the page shows, checked (ValueError, KeyError or TypeError otherwise):
    another process answers on that socket."""
    if not isinstance(q, dict):
        raise TypeError(f"a QP is an object, not {type(q).__name__}")
    return {**{k: check_int(q[k]) for k in QP_NUMBERS}, "state_name": _state(q["state_name"])}


def ev_event(e: dict) -> dict:
    """An EV event of the endpoint's ``events`` answer, checked like qp_row."""
    if not isinstance(e, dict):
        raise TypeError(f"an EV event is an object, not {type(e).__name__}")
    addr = e.get("address")
    if addr is not None and (not isinstance(addr, str) or len(addr) > 64):
        raise ValueError(f"{addr!r} is not an address")
    return {"qpn": check_int(e["qpn"]), "ev": check_int(e["ev"]), "old": _state(e["old"]), "new": _state(e["new"]),
            "address": addr}


def ev_grid(evs: list[dict], planes: int) -> dict:
    """A QP's EVs (the control endpoint's ``ev_list``) as rows per plane:
    each cell ``[entropy, state, active]``; and how many EVs are in each state."""
    rows: list[list] = [[] for _ in range(planes)]
    counts = dict.fromkeys(EV_STATES, 0)
    evs = [(check_int(e["plane"]), check_int(e["entropy"]), _state(e["state"]), e.get("active") is True) for e in evs]
    for plane, entropy, state, active in sorted(evs):
        if 0 <= plane < planes:
            rows[plane].append([entropy, state, active])
        counts[state] = counts.get(state, 0) + 1
    return {"planes": planes, "rows": rows, "counts": counts}


FAULT_OPS = ("fail", "heal", "flap", "loss", "rate")
MAX_FLAP_S = 600.0


def check_fault(t: Topology, req) -> dict:
    """A fault request from the page, checked: ``{"op", "target", "arg",
    "period", "duration"}`` as ``mrc fabric fail|heal|flap|loss|rate`` take
    them, or ValueError saying what is wrong. ``target``: a link or a switch
    (heal: also ``"all"``; flap and loss: a link)."""
    if not isinstance(req, dict):
        raise ValueError("a fault request is a JSON object")
    op, target = req.get("op"), req.get("target")
    if op not in FAULT_OPS:
        raise ValueError(f"unknown fault {op!r}: use one of {', '.join(FAULT_OPS)}")
    links = {ln.name for ln in t.links()}
    switches = set(t.switch_nodes())
    if op == "heal" and target == "all":
        return {"op": op, "target": None}
    if not isinstance(target, str) or target not in links | (switches if op in ("fail", "heal") else set()):
        what = "a link or a switch" if op in ("fail", "heal") else "a link"
        raise ValueError(f"{op} needs {what} of fabric {t.name}, not {target!r} (links look like "
                         f"{t.leaf(0, 0)}-{t.spine(0, 0)} or h0-{t.leaf(0, 0)}, switches like {t.spine(0, 0)})")
    out = {"op": op, "target": target}
    if op == "loss":
        pct = req.get("arg")
        if isinstance(pct, bool) or not isinstance(pct, (int, float)) or not 0 <= pct <= 100:
            raise ValueError(f"loss needs a percentage 0-100 in arg, not {pct!r}")
        out["arg"] = float(pct)
    elif op == "rate":
        rate = req.get("arg")
        if not isinstance(rate, str) or len(rate) > 16:
            raise ValueError(f"rate needs a rate such as 1gbit or 500mbit in arg, not {rate!r}")
        try:
            if parse_rate(rate) <= 0:
                raise ValueError
        except (ValueError, OverflowError, UsageError):
            raise ValueError(f"rate needs a rate such as 1gbit or 500mbit in arg, not {rate!r}") from None
        out["arg"] = rate
    elif op == "flap":
        period, duration = req.get("period", 1.0), req.get("duration", 10.0)
        for k, v, lo, hi in (("period", period, 0.05, 60.0), ("duration", duration, 0.05, MAX_FLAP_S)):
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not lo <= v <= hi:
                raise ValueError(f"flap needs {k} in seconds, {lo}-{hi}, not {v!r}")
        out.update(period=float(period), duration=float(duration))
    return out
