"""``mrc ctl``: drive a running MRC process's control endpoint.

    mrc ctl list                        the endpoints on this machine
    mrc ctl ev list [--qpn N]           every EV of a QP: plane, state, path
    mrc ctl ev deny EV|--path ADDR      stop using an EV (or every EV of a path)
    mrc ctl ev allow EV|--path ADDR     use it again
    mrc ctl events [--follow]           EV state changes (GOOD, ASSUMED_BAD, ...)
    mrc ctl probe [DST] [--all-paths]   EV probes to a peer: RTT per plane or per path
    mrc ctl port down|up PLANE          a port's admin state
    mrc ctl cc show | cc set K=V ...    the NSCC profile new QPs get
    mrc ctl metrics [--listen A:P]      every context's counters for Prometheus (/metrics)

An EV is written PLANE/ENTROPY (2/5) or as its number (0x20005). With one
endpoint running, it is used; otherwise pick one with --pid or --endpoint.
Changing anything needs root (or CAP_NET_ADMIN).
"""
from __future__ import annotations

import argparse
import errno
import json
import os
import sys
import time

from mrc import wire
from mrc.ctl.endpoint import ControlClient
from mrc.ctl.profiles import NSCC_FIELDS
from mrc.ctl.sockets import ctl_dir, endpoints
from mrc.errors import ErrnoError
from mrc.tools.args import QPN
from mrc.units import bounded
from mrc.wire import ev_entropy, ev_make, ev_name, ev_plane


def parse_ev(text: str) -> int:
    """An EV from ``0x20005`` or ``plane/entropy`` (``2/5``)."""
    try:
        if "/" in text:
            plane, entropy = (int(x, 0) for x in text.split("/", 1))
            if not (0 <= plane < wire.MAX_PLANES and 0 <= entropy <= wire.EV_ENTROPY_MASK):
                raise ValueError
            return ev_make(plane, entropy)
        return int(text, 0)
    except ValueError:
        raise ErrnoError(errno.EINVAL, f"bad EV {text!r}: write PLANE/ENTROPY (2/5) or a number (0x20005)") from None


def probe_matrix(r: dict) -> str:
    """Plane x path table of RTTs (us) from a probe answer."""
    rows: dict[int, dict[int, str]] = {}
    for p in r["probes"]:
        cell = f"{p['rtt_ns'] / 1000:.1f}us" if p["status"] == "ok" else p["status"]
        rows.setdefault(ev_plane(p["ev"]), {})[ev_entropy(p["ev"])] = cell
    width = max((len(row) for row in rows.values()), default=0)
    ok = sum(p["status"] == "ok" for p in r["probes"])
    lines = [f"probe {r['host'] or '#' + str(r['peer'])}: {ok} of {len(r['probes'])} answered "
             f"(timeout {r['timeout_ms']:g} ms)",
             "plane " + "".join(f"{'path' + str(i):>10}" for i in range(width))]
    for plane in sorted(rows):
        lines.append(f"{plane:<5} " + "".join(f"{rows[plane].get(i, '-'):>10}" for i in range(width)))
    return "\n".join(lines)


def add_parser(sub) -> None:
    """Register ``mrc ctl`` and its subcommands."""
    ctl = sub.add_parser("ctl", help="the controller API of a running MRC process (EVs, events, ports, CC)",
                         description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ctl.set_defaults(run=run, parser=ctl)
    ctl.add_argument("--pid", type=bounded(int, 1, 1 << 22), help="the process whose endpoint to use")
    ctl.add_argument("--endpoint", help=f"a control socket path (default: the one under {ctl_dir()})")
    ctl.add_argument("--json", action="store_true", help="print JSON")
    cs = ctl.add_subparsers(dest="ccmd")
    cs.add_parser("list", help="the control endpoints on this machine").set_defaults(run=_list)
    ev = cs.add_parser("ev", help="list, deny or allow EVs")
    ev.set_defaults(run=_missing("ev", "list, deny or allow"))
    es = ev.add_subparsers(dest="evcmd")
    p = es.add_parser("list", help="every EV of a QP")
    p.add_argument("--qpn", type=QPN, help="the QP (needed when the process has several)")
    p.set_defaults(run=_ev_list)
    for name, what, state in (("deny", "stop using", "DENIED"), ("allow", "use again", "GOOD")):
        p = es.add_parser(name, help=f"{what} an EV, or every EV that takes a path")
        p.add_argument("ev", nargs="?", help="PLANE/ENTROPY or a number")
        p.add_argument("--path", help="a destination address: every EV that sends there")
        p.add_argument("--qpn", type=QPN)
        p.set_defaults(run=_ev_set, state=state)
    p = cs.add_parser("events", help="EV state changes since the endpoint started")
    p.add_argument("--follow", action="store_true", help="keep printing new events until interrupted")
    p.add_argument("--interval", type=bounded(float, 0.01, 3600),
                   default=0.2, help="seconds between polls with --follow")
    p.set_defaults(run=_events)
    p = cs.add_parser("probe", help="EV probes to a peer: the RTT of every plane (or of every path)",
                      description="Send EV probes (connectionless ENDPOINT_REQUESTs) to a peer the process "
                                  "is connected to and wait for the answers: one per plane, or with "
                                  "--all-paths one per path, printed as a plane x path matrix of RTTs.")
    p.add_argument("dst", nargs="?", help="the peer: its host name, one of its addresses or #INDEX "
                                          "(default: the only peer)")
    p.add_argument("--all-paths", action="store_true", help="probe every path, not one per plane")
    p.add_argument("--timeout-ms", type=bounded(float, 0, 60_000, above=True),
                   default=100.0, help="how long to wait for answers (default 100)")
    p.set_defaults(run=_probe)
    p = cs.add_parser("port", help="set a port's admin state (a disabled port reports DOWN)")
    p.add_argument("state", choices=["down", "up"])
    p.add_argument("plane", type=bounded(int, 0, 15))
    p.set_defaults(run=_port)
    cs.add_parser("qp", help="each QP's NSCC window, in flight, RTTs (smoothed, lowest, base) and counters"
                  ).set_defaults(run=_qp)
    p = cs.add_parser("metrics", help="serve every MRC context's counters to Prometheus (/metrics)",
                      description="Serve, at http://ADDR:PORT/metrics, the counters of every MRC context on this "
                                  "machine that has a control endpoint: each QP's packets, bytes, retransmissions, "
                                  "losses, timer expiries, tail loss probes, ECN marks and trims, its window, "
                                  "RTTs, state and EVs by plane and state; drops by reason; each port's counters "
                                  "and state; CQ overflows. Each scrape asks every endpoint afresh. Example: "
                                  "`mrc ctl metrics --listen 127.0.0.1:9464`, then scrape "
                                  "http://127.0.0.1:9464/metrics with the bearer token it prints (the counters "
                                  "come from root-only sockets: a scrape without it gets 401). `mrc dash` serves "
                                  "the same with the fabric's switch ports at /metrics.")
    p.add_argument("--listen", default="127.0.0.1:9464", metavar="ADDR:PORT",
                   help="where to serve (default 127.0.0.1:9464: this machine only)")
    p.add_argument("--once", action="store_true", help="print one scrape on stdout and exit")
    p.add_argument("--token-file", metavar="FILE", help="the bearer token scrapes must send, from FILE (default: a "
                                                        "random one, printed at start)")
    p.set_defaults(run=_metrics)
    cc = cs.add_parser("cc", help="show or set the NSCC profile new QPs get")
    cc.set_defaults(run=_cc_show)
    ccs = cc.add_subparsers(dest="cccmd")
    ccs.add_parser("show").set_defaults(run=_cc_show)
    p = ccs.add_parser("set", help=f"KEY=VALUE pairs; keys: {', '.join(NSCC_FIELDS)}")
    p.add_argument("pairs", nargs="+")
    p.set_defaults(run=_cc_set)
    _json_everywhere(cs)


def _json_everywhere(sub) -> None:
    """``--json`` after a subcommand too (`mrc ctl list --json`), as before it (`mrc ctl --json list`)."""
    for p in sub.choices.values():
        if not any("--json" in act.option_strings for act in p._actions):
            p.add_argument("--json", action="store_true", default=argparse.SUPPRESS, help="print JSON")
        for act in p._actions:
            if isinstance(act, argparse._SubParsersAction):
                _json_everywhere(act)


def _endpoint(a) -> str:
    if a.endpoint:
        return a.endpoint
    found = endpoints()
    if a.pid:   # <pid>.sock, or one of <pid>-<tag>.sock (a coll rank's, a demo host's)
        mine = [f for f in found if os.path.basename(f).split(".")[0].split("-")[0] == str(a.pid)]
        if len(mine) == 1:
            return mine[0]
        if not mine:
            raise ErrnoError(errno.ENOENT, f"process {a.pid} serves no control endpoint under {ctl_dir()} "
                                           "(`mrc ctl list` shows those that do)")
        raise ErrnoError(errno.EINVAL, f"process {a.pid} serves {len(mine)} endpoints: pick one with --endpoint "
                                       f"({', '.join(mine)})")
    if len(found) == 1:
        return found[0]
    if not found:
        raise ErrnoError(errno.ENOENT, f"no MRC process serves a control endpoint under {ctl_dir()}")
    raise ErrnoError(errno.EINVAL, f"{len(found)} endpoints: pick one with --pid ({', '.join(found)})")


def _out(a, obj, text: str) -> None:
    print(json.dumps(obj, indent=1) if a.json else text)


def _metrics(a) -> int:
    from mrc.ctl import metrics

    collector = metrics.ContextCollector()
    if a.once:
        sys.stdout.write(metrics.exposition(collector).decode())
        return 0
    import secrets

    from mrc.tools.args import read_token

    token = read_token(a.token_file) if a.token_file else secrets.token_urlsafe(18)
    server, thread = metrics.serve(a.listen, collector, token=token)
    addr, port = metrics.parse_listen(a.listen)
    host = f"[{addr}]" if ":" in addr else addr
    print(f"serving every MRC context's counters at http://{host}:{port}/metrics (Ctrl-C stops)\n"
          f"  bearer token: {'from ' + a.token_file if a.token_file else token} (Prometheus: bearer_token)",
          flush=True)
    try:
        while thread.is_alive():
            thread.join(1.0)
    finally:
        server.shutdown()
    return 0


def _missing(cmd: str, choices: str):
    def run_missing(a) -> int:
        raise ErrnoError(errno.EINVAL, f"missing {cmd} command: {choices}")
    return run_missing


def run(a) -> int:
    """``mrc ctl`` without a subcommand (each subcommand runs its own function)."""
    raise ErrnoError(errno.EINVAL, "missing command: see `mrc ctl --help`")


def _list(a) -> int:
    rows = []
    for path in endpoints():
        try:
            with ControlClient(path, timeout=2) as c:
                rows.append({"endpoint": path, **c.call("info")})
        except (ErrnoError, OSError) as e:
            rows.append({"endpoint": path, "error": str(e)})

    def ports(r: dict) -> str:
        return "".join(f"\n  plane {p['plane']} {p['ifname']}: {p['admin']}, link {p['link']}"
                       for p in r.get("ports", []))

    _out(a, rows, "\n".join(f"{r['endpoint']}: pid {r.get('pid')}"
                            + (f" ({r['role']})" if r.get("role") else "") + f" host {r.get('host')} QPs {r.get('qps')}"
                            + ports(r) for r in rows) or "no control endpoints")
    return 0


def _call(a, op: str, **args) -> dict:
    """One request to the chosen endpoint."""
    with ControlClient(_endpoint(a)) as c:
        return c.call(op, **args)


def _ev_list(a) -> int:
    r = _call(a, "ev_list", **({"qpn": a.qpn} if a.qpn is not None else {}))
    lines = [f"QP {r['qpn']}: {len(r['evs'])} EVs", f"{'EV':<8} {'state':<12} {'active':<7} path"]
    lines += [f"{ev_name(e['ev']):<8} {e['state']:<12} {'yes' if e['active'] else 'spare':<7} "
              f"{e['address'] or '-'}" for e in r["evs"]]
    _out(a, r, "\n".join(lines))
    return 0


def _ev_set(a) -> int:
    if (a.ev is None) == (a.path is None):
        raise ErrnoError(errno.EINVAL, "name one EV or one --path")
    args = {"state": a.state}
    args.update({"ev": parse_ev(a.ev)} if a.ev else {"path": a.path})
    if a.qpn is not None:
        args["qpn"] = a.qpn
    r = _call(a, "ev_set", **args)
    _out(a, r, f"QP {r['qpn']}: {', '.join(map(ev_name, r['evs']))} now {r['state']}")
    return 0


def _events(a) -> int:
    after = 0
    with ControlClient(_endpoint(a)) as c:
        while True:
            r = c.call("events", after=after)
            if r["dropped"]:
                print(json.dumps({"dropped": r["dropped"]}) if a.json else f"({r['dropped']} events dropped)")
            for e in r["events"]:
                print(json.dumps(e) if a.json else
                      f"{e['t_ns'] / 1e9:.6f} QP {e['qpn']} EV {ev_name(e['ev'])} {e['old']} -> {e['new']}"
                      f"{' ' + e['address'] if e.get('address') else ''}")
            after = r["last"]
            if not a.follow:
                return 0
            sys.stdout.flush()
            time.sleep(a.interval)


def _probe(a) -> int:
    args = {"all_paths": a.all_paths, "timeout_ms": a.timeout_ms}
    if a.dst is not None:
        args["dst"] = a.dst
    r = _call(a, "probe", **args)
    _out(a, r, probe_matrix(r))
    return 0 if any(p["status"] == "ok" for p in r["probes"]) else 1


def _qp(a) -> int:
    r = _call(a, "qps")
    head = (f"{'QP':>8} {'state':<6} {'window':>9} {'inflight':>9} {'srtt us':>8} {'min us':>8} "
            f"{'base us':>8} {'losses':>7} {'ecn':>7} {'trims':>6} {'good/bad EVs':>12}")
    _out(a, r, "\n".join([head] + [
        f"{q['qpn']:>8} {q['state_name']:<6} {q['cwnd']:>9} {q['inflight']:>9} {q['srtt_ns'] / 1e3:>8.1f} "
        f"{q['min_rtt_ns'] / 1e3:>8.1f} {q['base_rtt_ns'] / 1e3:>8.1f} {q['losses']:>7} {q['ecn_marks']:>7} "
        f"{q['trims']:>6} {q['good_evs']:>5}/{q['bad_evs']:<6}" for q in r["qps"]]))
    return 0


def _port(a) -> int:
    r = _call(a, "port", plane=a.plane, up=a.state == "up")
    _out(a, r, f"plane {r['plane']}: {r['admin']}")
    return 0


def _cc_set(a) -> int:
    cfg = {}
    for pair in a.pairs:
        k, sep, v = pair.partition("=")
        if not sep:
            raise ErrnoError(errno.EINVAL, f"write KEY=VALUE, got {pair!r}")
        try:
            cfg[k] = int(v, 0)
        except ValueError:
            raise ErrnoError(errno.EINVAL, f"{k}: {v!r} is not an integer") from None
    return _cc_print(a, _call(a, "cc_set", config=cfg))


def _cc_show(a) -> int:
    return _cc_print(a, _call(a, "cc_show"))


def _cc_print(a, r: dict) -> int:
    eff = r["effective"]
    _out(a, r, f"{r['profile']['algorithm']} ({r['profile']['state']}); new QPs get:\n" +
         "\n".join(f"  {k:<24} {eff[k]}" for k in sorted(eff)))
    return 0
