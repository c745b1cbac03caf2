"""The section of docs/results.md for one QP on the fabric (bench/fabric_bench.py)."""

from __future__ import annotations

from results_fmt import fmt, get, routing_text, table
from results_fmt import run_median as med
from results_fmt import run_spread as spread


def fabric(runs: list[dict]) -> tuple[list[str], list[list]]:
    r = runs[-1]
    lines = ["One MRC QP from h0 to h3 over every plane of the default fabric, against a C blaster of pre-built "
             "packets on the same paths (the raw ceiling: no protocol), kernel TCP on one plane and MPTCP with a "
             "subflow per plane, in the same run (where the run has `ratio_tcp_hot`, MRC, TCP and MPTCP each move "
             "64 MiB buffers at each end). The switches cut TCP's GSO super-packets to wire-sized ones "
             "(`tcp_superpacket_gbps` keeps them whole). On this 2-core VM the kernel's forwarding of every hop "
             "runs on the sender's CPUs, so every cycle MRC spends on protocol work comes out of the forwarding "
             "budget that the blaster has for itself: the raw ceiling is this machine's, not the protocol's. "
             "MPTCP's hosts announce every plane, so each subflow stays on its plane both ways. "
             + (f"MRC and the second raw ceiling hand the kernel {r['packets_per_buffer']} packets of a path per "
                "buffer (UDP_SEGMENT, docs/engine.md \"Buffers of k packets\"); the leaf cuts them into packets as "
                "it cuts TCP's. " if (r.get("packets_per_buffer") or 1) > 1 else "")
             + ("The hosts receive with GRO, as a NIC driver does (mrc.fabric.apply.host_gro): TCP's segments "
                "and a path's MRC packets merge again at the receiving host. " if r.get("host_gro_ports") else "")
             + routing_text(r.get("routing"), r.get("bfd_ms")), ""]
    lines += table(["figure", "measured", "target"], [
        ["MRC / raw ceiling", f"{spread(runs, 'ratio_raw')} ({fmt(r.get('mrc_gbps'), 2)} vs "
                              f"{fmt(r.get('raw_gbps'), 2)} Gb/s)", f">= {get(r, 'targets.ratio_raw')}"],
        *([[f"MRC / raw ceiling at {r['packets_per_buffer']} packets per kernel buffer (MRC sends so too)",
            f"{spread(runs, 'ratio_raw_buffers')} ({fmt(r.get('raw_buffers_gbps'), 2)} Gb/s)",
            f">= {get(r, 'targets.ratio_raw_buffers')}"]] if (r.get("packets_per_buffer") or 1) > 1 else []),
        ["MRC / MPTCP, 8 subflows", f"{spread(runs, 'ratio_mptcp')} ({fmt(r.get('mptcp_gbps'), 2)} Gb/s)",
         f">= {get(r, 'targets.ratio_mptcp')}"],
        ["MRC / kernel TCP, one plane", f"{spread(runs, 'ratio_tcp')} ({fmt(r.get('tcp_gbps'), 2)} Gb/s)",
         f">= {get(r, 'targets.ratio_tcp')}"],
        *([[f"control: the copying blaster at {r['packets_per_buffer']} packets per buffer (no protocol) / kernel TCP",
            f"{spread(runs, 'copy_buffers_over_tcp')} ({fmt(r.get('copy_buffers_gbps'), 2)} Gb/s)", "-"],
           ["MRC / the copying blaster at the same packets per buffer", spread(runs, "ratio_copy_buffers"), "-"],
           *([["MRC's packets per kernel buffer sent (its stream's average)",
               spread(runs, "mrc_packets_per_buffer", 2), "-"]] if "mrc_packets_per_buffer" in r else [])]
          if "copy_buffers_over_tcp" in r else []),
        ["MRC / kernel TCP with whole super-packets", f"{fmt(r.get('ratio_tcp_superpacket'))} "
                                                      f"({fmt(r.get('tcp_superpacket_gbps'), 2)} Gb/s)", "-"]]
        + ([["MRC / kernel TCP, one plane, the same 1 MiB buffer at each end every time",
             f"{spread(runs, 'ratio_tcp_hot')} ({fmt(r.get('tcp_hot_gbps'), 2)} Gb/s)", "-"],
            ["data verified, QP errors", f"{r.get('data_verified')}, {fmt(r.get('qp_errors'))}", "True, 0"]]
           if "ratio_tcp_hot" in r else []) + [
        ["longest completion stall after a T0-T1 link cut, 64 KiB writes",
         f"{spread(runs, 'stall_ms', 2)} ms (no fault: {spread(runs, 'stall_ms_no_fault', 2)} ms, link black-holed "
         f"by nftables: {spread(runs, 'stall_ms_blackhole', 2)} ms)", f"<= {get(r, 'targets.stall_ms')} ms"]])
    raw = "ratio_raw_buffers" if (r.get("packets_per_buffer") or 1) > 1 else "ratio_raw"
    tg = f">= {get(r, 'targets.' + raw)} / {get(r, 'targets.ratio_mptcp')} / {get(r, 'targets.ratio_tcp')}"
    ceiling = (f"the raw ceiling at {r['packets_per_buffer']} packets per buffer" if raw == "ratio_raw_buffers"
               else "the raw ceiling")
    why = ""
    if "copy_buffers_over_tcp" in r:
        target = get(r, "targets.ratio_tcp")
        control = med(runs, "copy_buffers_over_tcp")
        short = isinstance(target, (int, float)) and float(control) < target
        why = (f"; control: a sender of MRC's packets at {r['packets_per_buffer']} per buffer that only copies each "
               f"payload with its ICRC, to a receiver that only counts, moves {control} x TCP"
               + (f" (short of {target} with no protocol at all: the target is beyond this VM)" if short else "")
               + f", and MRC {med(runs, 'ratio_copy_buffers')} x that sender: the rest is MRC's own work, on a "
               "sending CPU that also runs every hop's forwarding and the receiver's ring copy")
    head = [[f"fabric: one QP over 8 planes, over {ceiling} / MPTCP / kernel TCP{why}",
             f"{med(runs, raw)} / {med(runs, 'ratio_mptcp')} / {med(runs, 'ratio_tcp')}", tg]]
    if r.get("ratio_copy"):
        lines += ["", "CPU per byte (bench/cpu.py, docs/engine.md \"A byte's way\"): cycles per delivered byte of "
                  "each sender's and receiver's threads, from their CPU clocks, which on these VMs also hold the "
                  "fabric's forwarding that ran on their CPU. The copying blaster copies each payload from a 64 MiB "
                  "region with its ICRC and checksum in one pass before it sends it, as MRC must, and does nothing "
                  "else: MRC's protocol is what lies between it and MRC.", ""]
        lines += table(["figure", "measured", "target"], [
            ["MRC / copying blaster", f"{spread(runs, 'ratio_copy')} ({fmt(r.get('copy_gbps'), 2)} Gb/s)", "-"],
            ["cycles per delivered byte: MRC", spread(runs, "mrc_cycles_per_byte", 2), "-"],
            ["  raw blaster / copying blaster / kernel TCP",
             f"{spread(runs, 'raw_cycles_per_byte', 2)} / {spread(runs, 'copy_cycles_per_byte', 2)} / "
             f"{spread(runs, 'tcp_cycles_per_byte', 2)}", "-"],
            ["MRC's CPU per byte over the copying blaster's", spread(runs, "mrc_cpu_over_copy", 2), "-"],
            ["MRC's CPU per byte over the floor (one fused copy-and-CRC pass at each end, "
             f"{fmt(r.get('min_cycles_per_byte'), 3)} cycles per byte)", spread(runs, "cpu_vs_min", 1),
             f"<= {get(r, 'targets.cpu_vs_min')}"]])
        head.append(["fabric: CPU per delivered byte, MRC over the floor / over the copying blaster",
                     f"{med(runs, 'cpu_vs_min', 1)} / {med(runs, 'mrc_cpu_over_copy', 2)}",
                     f"<= {get(r, 'targets.cpu_vs_min')} / -"])
    return lines, head
