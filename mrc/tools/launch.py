"""Start one rank per fabric host (``mrc fabric exec HOST -- ...``), as
mpirun starts one process per slot: the launcher picks a job id and a port,
gives every rank rank 0's management address, streams rank 0's output and
ends every rank if one fails or the launcher is interrupted."""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import sys
import threading
import time

from mrc.errors import UsageError


def fabric_hosts(name: str, hosts: str | None) -> tuple[list[str], str]:
    """The hosts that run a rank (all of the fabric's, or the ones named)
    and rank 0's management address."""
    from mrc.fabric import apply

    t = apply.load_topology(name)
    every = t.host_nodes()
    pick = [h for h in hosts.split(",") if h] if hosts else every
    bad = [h for h in pick if h not in every]
    if bad:
        raise UsageError(f"fabric {name} has no host {', '.join(bad)} (it has {', '.join(every)})")
    if len(set(pick)) != len(pick):
        raise UsageError("--hosts names a host twice: one rank per host")
    return pick, t.mgmt_address(t.host_index(pick[0]))


def launch(name: str, hosts: list[str], root: str, rank_argv: list[str], out=sys.stdout, err=sys.stderr,
           port: int | None = None, quiet_others: bool = True, timeout: float | None = None) -> int:
    """Run ``mrc <rank_argv> --rank K --nranks N --root ROOT --port P --job J`` in each host's
    namespace; rank 0's standard output and every rank's standard error are passed on (other
    ranks' standard output is dropped with ``quiet_others``). Returns the worst exit status."""
    from mrc.fabric import apply

    apply.require_root("mrc coll --fabric (it runs a process in each host's namespace)")
    job = secrets.token_hex(6)
    port = port or 20000 + secrets.randbelow(20000)
    n = len(hosts)
    procs: list[subprocess.Popen] = []
    pumps: list[threading.Thread] = []

    def pump(src, dst, prefix: str) -> None:
        for line in iter(src.readline, ""):
            dst.write(prefix + line if prefix and not line.startswith("\r") else line)
            dst.flush()
        src.close()

    try:
        for k, h in enumerate(hosts):
            argv = [sys.executable, "-m", "mrc", "fabric", "exec", "--name", name, h, "--", sys.executable, "-m",
                    "mrc", *rank_argv, "--rank", str(k), "--nranks", str(n), "--root-addr", root, "--port", str(port),
                    "--job", job]
            # one BLAS thread per rank: a rank's compute stands for its GPU's, not for the machine's cores
            env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
            p = subprocess.Popen(argv, stdout=subprocess.PIPE if k == 0 or not quiet_others else subprocess.DEVNULL,
                                 stderr=subprocess.PIPE, text=True, start_new_session=True, env=env)
            procs.append(p)
            if p.stdout:
                pumps.append(threading.Thread(target=pump, args=(p.stdout, out, "" if k == 0 else f"[{h}] "),
                                              daemon=True))
            pumps.append(threading.Thread(target=pump, args=(p.stderr, err, "" if k == 0 else f"[{h}] "),
                                          daemon=True))
        for t in pumps:
            t.start()
        deadline = None if timeout is None else time.monotonic() + timeout
        codes: dict[int, int] = {}
        while len(codes) < n:
            for k, p in enumerate(procs):
                if k not in codes and p.poll() is not None:
                    codes[k] = p.returncode
            if any(c != 0 for c in codes.values()):
                # one rank failed: the others got the abort; give them a moment to say so, then end them
                grace = time.monotonic() + 10
                while len(codes) < n and time.monotonic() < grace:
                    for k, p in enumerate(procs):
                        if k not in codes and p.poll() is not None:
                            codes[k] = p.returncode
                    time.sleep(0.05)
                break
            if deadline is not None and time.monotonic() > deadline:
                err.write(f"mrc coll: the ranks ran over {timeout:g} s; ending them\n")
                break
            time.sleep(0.05)
        return max((abs(c) for c in codes.values()), default=1) if len(codes) == n else 1
    finally:
        for p in procs:
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
        for p in procs:
            try:
                p.wait(5)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
        for t in pumps:
            t.join(2)
