"""The README's first command: build the default fabric, prove every path,
show the status table, tear down (always, also on Ctrl-C or an error)."""

from __future__ import annotations

import os
import sys
import time

from mrc.fabric import apply
from mrc.fabric.check import check, matrix
from mrc.fabric.topology import Topology


def main(name: str | None = None) -> int:
    from mrc.cli import status_text
    from mrc.fabric import ns

    name = name or f"demo{os.getpid() % 100000}"
    t = Topology(name=name)
    print(f"== building fabric {name}: {t.planes} planes x ({t.spines} T1 spines, {t.leaves} T0 leaves), "
          f"{t.hosts} hosts, one port per plane", flush=True)
    try:
        secs = apply.up(t)
        print(f"   up in {secs:.2f} s: {len(t.nodes())} namespaces, {len(t.links())} veth links")
        print("\n== status")
        print(status_text(t, apply.load_state(name), ns.list_netns())[1])
        example = t.path_address(0, t.hosts - 1, plane=3, spine=1)
        print(f"\n== a path: h0 -> h{t.hosts - 1}, plane 3, spine 1 is the destination address {example}")
        print(f"   {t.decode_address(example)}")
        print("\n== checking every (src, dst, plane, spine) path with one packet each")
        start = time.monotonic()
        r = check(t)
        print(matrix(t, r))
        print(f"   ({time.monotonic() - start:.2f} s)")
        link = f"{t.leaf(0, 0)}-{t.spine(0, 1)}"
        print(f"\n== fault: cutting {link}")
        apply.fail(name, link)
        r2 = check(t)
        print(f"   {r2['failed_count']} paths black-holed (every path through {link}), {r2['ok_count']} still deliver")
        apply.heal(name, link)
        r3 = check(t)
        print(f"   healed: {r3['ok_count']} of {len(r3['paths'])} paths deliver again")
        ok = r["failed_count"] == 0 and r3["failed_count"] == 0 and r2["failed_count"] > 0
        print("\n== result: " + ("every path works, faults are real and reversible" if ok else "SOME PATHS FAILED"))
        return 0 if ok else 1
    finally:
        removed = apply.down(name)
        print(f"== torn down: {len(removed)} namespaces removed", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
