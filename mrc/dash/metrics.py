"""The fabric's switch ports as Prometheus metrics, for ``mrc dash``'s
``/metrics`` (beside every MRC context's, from mrc.ctl.metrics): per port
with a queue (the switches', then the hosts' NIC queues), the packets and
bytes it sent, marked, trimmed and dropped, its queue now and its
high-water mark (to 0.1 KiB)."""

from __future__ import annotations

from collections.abc import Iterable

from mrc.fabric import qos
from mrc.fabric.topology import Topology

#: (the queue's counter, the metric, its help)
PORT_COUNTERS = [
    ("packets", "mrc_switch_port_sent_packets_total", "Packets the port sent"),
    ("bytes", "mrc_switch_port_sent_bytes_total", "Bytes the port sent"),
    ("marked", "mrc_switch_port_marked_packets_total", "Packets the port marked CE"),
    ("trimmed", "mrc_switch_port_trimmed_packets_total", "MRC data packets the port trimmed"),
    ("dropped", "mrc_switch_port_dropped_packets_total", "Packets the port dropped"),
]


class SwitchCollector:
    """A prometheus_client collector over the queue counters of fabric ``t``'s ports."""

    def __init__(self, t: Topology) -> None:
        self.t = t

    def collect(self) -> Iterable:
        """The metric families of one scrape."""
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        labels = ["fabric", "node", "port", "link"]
        fams = {name: CounterMetricFamily(name[:-6], help_, labels=labels) for _, name, help_ in PORT_COUNTERS}
        backlog = GaugeMetricFamily("mrc_switch_port_queue_bytes", "The port's queue estimate now", labels=labels)
        hwm = GaugeMetricFamily("mrc_switch_port_queue_high_water_bytes", "The largest queue the port has had",
                                labels=labels)
        for p in qos.stats(self.t):
            lab = [self.t.name, p["node"], p["ifname"], p["link"]]
            for key, name, _ in PORT_COUNTERS:
                fams[name].add_metric(lab, float(p.get(key, 0)))
            backlog.add_metric(lab, float(p.get("backlog_kb", 0)) * 1024)
            hwm.add_metric(lab, float(p.get("hwm_kb", 0)) * 1024)
        yield from fams.values()
        yield from (backlog, hwm)
