"""The simulator's targets, one place: what each scenario of bench/sim_bench.py
must show, as a sentence and as a test of the scenario's figures. The bench
marks a run with them, and tools/results.py judges every stored run by them
as they are now, so the results page never shows a target that has changed.

Goodput is held against the run's own wire bound (``vs_wire_bound``: the most
its flows could reach with the busiest NIC's data and its share of control
packets back to back), not the line rate, which no run of these workloads
can reach."""

from __future__ import annotations

#: the README's short form of the targets its headline rows quote, in the order of those rows' figures
SHORT = {
    "scale": "8,192 / <= 600 / <= 12,288 / <= 1 / >= 0.93",
    "speed": ">= 0.6; >= 0.8 x the engine alone (>= 0.667 at 8 NICs)",
    "sweep": "<= 1.2, True",
}

#: scenario -> (the target in words, a test of the scenario's figures)
TARGETS = {
    "permutation": ("spray >= 0.93 of the wire bound and >= 1.3 x single path, no QP errors; "
                    "the 1,024-NIC run <= 300 s",
                    lambda x: x["vs_wire_bound"] >= 0.93 and x["spray_over_single"] >= 1.3 and x["wall_s"] <= 300
                    and x["qp_errors"] == 0),
    "alltoall": (">= 0.90 of the wire bound, zero drops with trimming on, no QP errors",
                 lambda x: x["vs_wire_bound"] >= 0.90 and x["drops"] == 0 and x["qp_errors"] == 0),
    "t1": ("goodput >= (1 - 1/(P x S)) x the same run without the failure, zero QP errors",
           lambda x: x["vs_no_fault"] >= x["bound"] and x["qp_errors"] == 0),
    "flap": ("goodput >= 0.98 x no flap, no QP errors",
             lambda x: x["vs_no_flap"] >= 0.98 and x["qp_errors"] == 0),
    "victim": ("the victim >= 0.95 of its fair share beside a running incast and >= 0.97 of its lone flow "
               "when started together (medians over the seeds), no QP errors",
               lambda x: x["victim_in_running_incast_ratio"] >= 0.95 and x["vs_lone_flow"] >= 0.97
               and x["qp_errors"] == 0),
    "gap": ("longest completion gap <= 50 us after a link cut",
            lambda x: x["max_gap_us"] <= 50 and x["qp_errors"] == 0 and x["down_drops"] > 0),
    "speed": ("sim_over_engine >= 0.6; an all-to-all within 1.5 x the permutation's packets per second where "
              "its QP state fits the cache (8 NICs), and at 64 NICs >= 0.8 x the engine alone with 63 QPs",
              lambda x: x["sim_over_engine"] >= 0.6
              and _at(x.get("alltoall_pps_over_permutation_by_nics") or {}, 8) >= 1 / 1.5
              and x["alltoall_pps_over_permutation"] >= 0.8 * x["engine_63_qps_over_1"]),
    "sweep": ("2 Dask workers within 1.2 x half the serial time, the same table",
              lambda x: x["identical"] and x["dask_over_half_serial"] <= 1.2),
    "scale": ("8,192 NICs: <= 600 s, <= 12 GB, >= 0.93 of the wire bound, no QP errors; <= 1 MB per NIC beyond "
              "the engine's QP state",
              lambda x: x.get("nics", 0) >= 8192 and x["wall_s"] <= 600 and x["peak_rss_mb"] <= 12 * 1024
              and x["vs_wire_bound"] >= 0.93 and x["qp_errors"] == 0 and x["per_nic_beyond_qps_mb"] <= 1),
}


def _at(by_nics: dict, n: int) -> float:
    """A figure by NIC count, from a run in memory (int keys) or read back from JSON (str keys)."""
    return by_nics.get(n, by_nics.get(str(n), 0))


def judge(name: str, figures: dict) -> tuple[str, bool]:
    """(the scenario's target, whether the figures meet it); a figure missing from an old run fails it."""
    text, test = TARGETS[name]
    try:
        return text, bool(test(figures))
    except (KeyError, TypeError):
        return text, False
