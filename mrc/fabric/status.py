"""What ``mrc fabric status`` (and the demo) print about a fabric: hosts with
their ports and addresses, the namespaces present, the faults in force."""

from __future__ import annotations

SRV6_TEXT = {
    "kernel": "SRv6: the kernel's (seg6local End next-CSID on the switches, seg6 encap and End.DT6 on the hosts)",
    "tc-bpf": "SRv6: tc-BPF programs on the ports, this kernel has none (End next-CSID on the switches' ingress, "
              "encap on the hosts' egress, End.DT6 on their ingress: docs/fabric.md)",
}


ROUTING_TEXT = {
    "static": "kernel traffic: static (SRv6 encap through one spine per host pair)",
    "bgp": "kernel traffic: routed by BGP (FRR in every switch: eBGP, ECMP over the spines)",
}


def status_text(t, state: dict, present: list[str], sessions: list[dict] | None = None) -> tuple[dict, str]:
    """The fabric's status: a dict and its text (nodes present, faults in force, and with BGP
    routing its ``sessions``: mrc.fabric.bgp.all_sessions)."""
    faults = state.get("faults", {})
    expected = [t.ns(n) for n in t.nodes()]
    missing = [n for n in expected if n not in present]
    hosts = []
    for h in range(t.hosts):
        hosts.append({
            "host": t.host(h), "namespace": t.ns(t.host(h)), "leaf": t.host_leaf(h), "mgmt": t.mgmt_address(h),
            "mgmt_ipv4": t.mgmt_ipv4(h),
            "ports": [{"plane": p, "ifname": t.port_ifname(p), "address": t.port_address(h, p),
                       "kernel_address": t.inner_address(h, p)} for p in range(t.planes)],
        })
    srv6 = state.get("srv6", "kernel")
    routing = state.get("routing", "static")
    obj = {"name": t.name, "topology": t.to_dict(), "namespaces": len(expected), "missing_namespaces": missing,
           "links": len(t.links()), "hosts": hosts, "faults": faults, "srv6": srv6, "routing": routing}
    lines = [f"fabric {t.name}: {t.planes} planes x ({t.spines} spines, {t.leaves} leaves), {t.hosts} hosts; "
             f"{len(expected) - len(missing)}/{len(expected)} namespaces, {len(t.links())} links",
             (SRV6_TEXT.get(srv6) if isinstance(srv6, str) else None)
             or f"SRv6: {str(srv6)[:40]!r} in the fabric's state is neither 'kernel' nor 'tc-bpf' "
                f"(an older or edited state file): `mrc fabric down` and up again"]
    lines.append(ROUTING_TEXT.get(routing, f"kernel traffic: {routing!r} (unknown)")
                 + (f"; BFD every {state['bfd_ms']} ms" if routing == "bgp" and state.get("bfd_ms")
                    else "; no BFD" if routing == "bgp" else ""))
    if sessions is not None:
        obj["bgp_sessions"] = sessions
        lines += _session_lines(sessions)
    lines.append(f"{'host':<5} {'leaf':<5} {'mgmt':<10} ports (plane: uSID address / kernel address)")
    for h in hosts:
        first = True
        for port in h["ports"]:
            pre = f"{h['host']:<5} {h['leaf']:<5} {h['mgmt']:<10}" if first else " " * 22
            lines.append(f"{pre} p{port['plane']}: {port['address']:<18} {port['kernel_address']}")
            first = False
    if faults:
        lines.append("faults in force:")
        for ln, f in sorted(faults.items()):
            lines.append(f"  {ln}: " + ", ".join(f"{k}={v}" for k, v in f.items()))
    else:
        lines.append("no faults in force")
    if missing:
        lines.append(f"MISSING namespaces: {', '.join(missing)} (run `mrc fabric down --name {t.name}` and up again)")
    return obj, "\n".join(lines)


def _session_lines(sessions: list[dict]) -> list[str]:
    """BGP sessions: a count, then one line per switch with its peers' state."""
    up = sum(1 for s in sessions if s["state"] == "Established")
    out = [f"BGP sessions: {up}/{len(sessions)} Established"]
    by_node: dict[str, list[str]] = {}
    for s in sessions:
        mark = "" if s["state"] == "Established" else f" {s['state']}"
        by_node.setdefault(s["node"], []).append(f"{s['peer']}{mark} ({s['prefixes']} pfx, bfd {s['bfd']})")
    out += [f"  {node:<6} " + ", ".join(peers) for node, peers in by_node.items()]
    return out
