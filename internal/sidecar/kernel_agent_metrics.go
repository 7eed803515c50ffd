package sidecar

import "github.com/prometheus/client_golang/prometheus"

// agentCollector exports the pod's kernel counters, read from the node agent at scrape time,
// under the names the in-process enforcer uses (airlock_kernel_*), so dashboards do not
// care which one enforces.
type agentCollector struct {
	a                                   agentEnforcer
	bytes, packets, connections, denies *prometheus.Desc
	lost                                *prometheus.Desc
}

func newAgentCollector(a agentEnforcer, sandbox string) *agentCollector {
	labels := prometheus.Labels{"sandbox": sandbox}
	d := func(name, help string) *prometheus.Desc {
		return prometheus.NewDesc("airlock_kernel_"+name, help, nil, labels)
	}
	return &agentCollector{
		a:           a,
		bytes:       d("egress_bytes_total", "Bytes of packets the sandbox cgroup sent that the egress backstop passed."),
		packets:     d("egress_packets_total", "Packets the sandbox cgroup sent that the egress backstop passed."),
		connections: d("connections_total", "Connections (TCP, connected UDP) the kernel allowed from the sandbox cgroup."),
		denies:      d("denies_total", "Connects, sends, sockets and packets the kernel denied in the sandbox cgroup."),
		lost:        d("deny_events_lost_total", "Deny events the kernel could not queue (ring buffer full)."),
	}
}

// Describe implements prometheus.Collector.
func (c *agentCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.bytes, c.packets, c.connections, c.denies, c.lost} {
		ch <- d
	}
}

// Collect implements prometheus.Collector. While the agent is unreachable the scrape gets an
// error for the kernel metrics (the rest of the sidecar's metrics are unaffected).
func (c *agentCollector) Collect(ch chan<- prometheus.Metric) {
	s, err := c.a.Counters()
	if err != nil {
		ch <- prometheus.NewInvalidMetric(c.denies, err)
		return
	}
	for d, v := range map[*prometheus.Desc]uint64{c.bytes: s.Bytes, c.packets: s.Packets, c.connections: s.Connections, c.denies: s.Denies, c.lost: s.EventsLost} {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v))
	}
}
