"""Faults from another process, as an operator's commands would come: the
demo, the benchmarks and the tests cut, heal, drop and limit links through
it, so that the fault's own setup (an interpreter, netlink and nftables
work) runs neither in the measuring process nor at the measured moment.

:class:`FaultScheduler` starts the process (``python -m mrc.fabric.faults
NAME``) before the measurement. The process keeps the normal priority: it
sleeps between steps and each step is a few milliseconds of netlink work,
while a process at SCHED_IDLE waits out busy ranks and its faults land
seconds after their time (outside the phase they were meant for). It takes
commands on its standard input, one JSON object per line:

- ``{"op": "fail", "target": "p0l0-p0s1"}``: do it now;
- ``{"plan": [[at_s, op, target, arg], ...]}``: do each step ``at_s``
  seconds after the command came (the clock starts there);

and prints one JSON object per step done: ``{"t_ns", "start_ns", "op",
"target", "arg"}`` (CLOCK_MONOTONIC when it began and ended; a plan's step
adds ``late_ms``, how long after its time it began), then ``end`` after a
plan. ``op`` is fail, heal (target ``null``: everything), loss
(arg: percent) or rate (arg: a tbf rate such as ``1gbit``); ``target`` is a
link, a switch, or a list of them.

>>> with FaultScheduler("lab") as f:                          # doctest: +SKIP
...     f.now("fail", "p0l0-p0s1")                            # returns once the link is down
...     f.plan([(1.0, "heal", "p0l0-p0s1", None)]); f.wait()
"""

from __future__ import annotations

import json
import queue
import random
import re
import subprocess
import sys
import threading
import time

from mrc.errors import UsageError
from mrc.fabric import apply
from mrc.fabric.topology import Topology

OPS = ("fail", "heal", "loss", "rate")
SPEC_HELP = ("t1-reboot/EVERY[+DOWN] (a T1 switch down, another each time), flap/EVERY[+DOWN] (a T0-T1 link), "
             "plane-cut@AT[+DOWN] (every T1 of a plane), loss/PERCENT (on one T0-T1 link per plane); times in s "
             "(10s, 500ms), e.g. t1-reboot/10s,flap/5s")


def _secs(text: str, spec: str) -> float:
    m = re.fullmatch(r"([0-9]*\.?[0-9]+)(ms|s)?", text)
    if not m:
        raise UsageError(f"fault {spec!r}: cannot read the time {text!r} (use 10s or 500ms)")
    return float(m.group(1)) / (1000 if m.group(2) == "ms" else 1)


def schedule(t: Topology, spec: str, seconds: float, seed: int = 7) -> list[tuple]:
    """A fault schedule for ``seconds`` from a spec such as ``t1-reboot/10s,flap/5s``
    (``SPEC_HELP``): (at_s, op, target, arg) steps for :meth:`FaultScheduler.plan`,
    every fault healed by the end. Which switch or link each time: a seeded
    rotation over the planes, so no plane takes every fault."""
    rng = random.Random(seed)
    plan: list[tuple] = []
    if not spec or not spec.strip():
        raise UsageError(f"an empty fault schedule: use {SPEC_HELP}")
    for item in (x.strip() for x in spec.split(",") if x.strip()):
        m = re.fullmatch(r"(t1-reboot|flap|plane-cut|loss)([/@])([0-9.]+(?:ms|s)?)(?:\+([0-9.]+(?:ms|s)?))?", item)
        if not m:
            raise UsageError(f"cannot read the fault {item!r}: use {SPEC_HELP}")
        kind, sep, val, down = m.groups()
        want = "@" if kind == "plane-cut" else "/"
        if sep != want:
            raise UsageError(f"fault {item!r}: {kind} takes {want} (e.g. {kind}{want}{'20s' if want == '@' else '5'})")
        if kind == "loss":
            pct = float(val)
            if not 0 < pct <= 100:
                raise UsageError(f"fault {item!r}: a loss percentage above 0 and at most 100")
            for p in range(t.planes):
                link = f"{t.leaf(p, rng.randrange(t.leaves))}-{t.spine(p, rng.randrange(t.spines))}"
                plan += [(0.0, "loss", link, pct), (seconds, "heal", link, None)]
            continue
        x = _secs(val, item)
        dur = _secs(down, item) if down else {"t1-reboot": 2.0, "flap": 0.5, "plane-cut": seconds}[kind]
        if kind == "plane-cut":
            p = rng.randrange(t.planes)
            spines = [t.spine(p, s) for s in range(t.spines)]
            if x < seconds:
                plan += [(x, "fail", spines, None), (min(seconds, x + dur), "heal", spines, None)]
            continue
        if x <= 0 or dur <= 0 or dur >= x:
            raise UsageError(f"fault {item!r}: the period must be above 0 and longer than the time down")
        k, at = 0, x / 2
        while at < seconds:
            p = (k + rng.randrange(t.planes)) % t.planes
            if kind == "t1-reboot":
                target = t.spine(p, rng.randrange(t.spines))
            else:
                target = f"{t.leaf(p, rng.randrange(t.leaves))}-{t.spine(p, rng.randrange(t.spines))}"
            plan += [(at, "fail", target, None), (min(seconds, at + dur), "heal", target, None)]
            k, at = k + 1, at + x
    return sorted(plan, key=lambda s: s[0])


def apply_fault(name: str, op: str, target, arg=None) -> None:
    """One fault, as ``mrc fabric fail|heal|loss|rate`` does it (``target``
    may be a list: a whole plane's spines at once, say)."""
    if isinstance(target, list):
        for one in target:
            apply_fault(name, op, one, arg)
        return
    if op == "fail":
        apply.fail(name, target)
    elif op == "heal":
        apply.heal(name, target)
    elif op == "loss":
        apply.loss(name, target, float(arg))
    elif op == "rate":
        apply.rate(name, target, str(arg))
    else:
        raise ValueError(f"unknown fault {op!r}: use one of {', '.join(OPS)}")


def _step(name: str, op: str, target, arg, due: float | None = None) -> None:
    start = time.monotonic_ns()
    apply_fault(name, op, target, arg)
    ev = {"t_ns": time.monotonic_ns(), "start_ns": start, "op": op, "target": target, "arg": arg}
    if due is not None:
        ev["late_ms"] = round(max(0.0, start / 1e6 - due * 1e3), 3)
    print(json.dumps(ev), flush=True)


def main(argv: list[str] | None = None) -> int:
    """The fault process."""
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print("usage: python -m mrc.fabric.faults FABRIC (commands on stdin; see the module)", file=sys.stderr)
        return 2
    name = argv[0]
    print("ready", flush=True)
    for line in sys.stdin:
        cmd = json.loads(line)
        if "plan" in cmd:
            t0 = time.monotonic()
            for at, op, target, arg in cmd["plan"]:
                wait = t0 + at - time.monotonic()
                if wait > 0:
                    time.sleep(wait)
                _step(name, op, target, arg, due=t0 + at)
            print("end", flush=True)
        else:
            _step(name, cmd["op"], cmd.get("target"), cmd.get("arg"))
    return 0


class FaultScheduler:
    """The fault process of one measurement (a context manager)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.proc = subprocess.Popen([sys.executable, "-m", "mrc.fabric.faults", name], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True)
        if self.proc.stdout.readline().strip() != "ready":
            self.proc.kill()
            raise RuntimeError("the fault process did not start")
        #: every step done, in order: {"t_ns", "start_ns", "op", "target", "arg"}
        self.events: list[dict] = []
        self._q: queue.Queue = queue.Queue()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            if line.startswith("{"):
                ev = json.loads(line)
                self.events.append(ev)
                self._q.put(ev)
            elif line.strip() == "end":
                self._q.put("end")
        self._q.put(None)

    def _send(self, obj: dict) -> None:
        self.proc.stdin.write(json.dumps(obj) + "\n")
        self.proc.stdin.flush()

    def now(self, op: str, target, arg=None, timeout: float = 30.0) -> dict:
        """Do one fault now; returns its event once it is in force."""
        self._send({"op": op, "target": target, "arg": arg})
        ev = self._q.get(timeout=timeout)
        if not isinstance(ev, dict):
            raise RuntimeError(f"the fault process ended before {op} {target} was done")
        return ev

    def plan(self, steps: list[tuple]) -> None:
        """Start a timed plan of (at_s, op, target, arg) steps; returns at once."""
        self._send({"plan": [list(s) for s in steps]})

    def wait(self, timeout: float = 120.0) -> list[dict]:
        """Wait for the plan to end; returns every event so far."""
        deadline = time.monotonic() + timeout
        while True:
            ev = self._q.get(timeout=max(0.0, deadline - time.monotonic()))
            if ev in ("end", None):
                return list(self.events)

    def close(self) -> None:
        """End the fault process once its plan is done (it heals nothing: the caller does)."""
        if self.proc.poll() is None:
            self.proc.stdin.close()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._reader.join(5)

    def __enter__(self) -> FaultScheduler:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


if __name__ == "__main__":
    sys.exit(main())
