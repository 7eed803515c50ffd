package ebpf

import (
	"github.com/prometheus/client_golang/prometheus"
)

// collector exports the per-sandbox kernel counters. It reads the per-CPU stats map at
// scrape time, so the values survive a sidecar restart (the map is pinned).
type collector struct {
	e                                                     *Enforcer
	bytes, packets, connections, denies, lost, suppressed *prometheus.Desc
	rxBytes, rxPackets                                    *prometheus.Desc
	allowEntries                                          *prometheus.Desc
}

func newCollector(e *Enforcer) *collector {
	labels := prometheus.Labels{"sandbox": e.cfg.Sandbox}
	d := func(name, help string) *prometheus.Desc {
		return prometheus.NewDesc("airlock_kernel_"+name, help, nil, labels)
	}
	return &collector{
		e:            e,
		bytes:        d("egress_bytes_total", "Bytes of packets the sandbox cgroup sent that the egress backstop passed."),
		packets:      d("egress_packets_total", "Packets the sandbox cgroup sent that the egress backstop passed."),
		connections:  d("connections_total", "Connections (TCP, connected UDP) the kernel allowed from the sandbox cgroup."),
		denies:       d("denies_total", "Connects, sends, sockets and packets the kernel denied in the sandbox cgroup."),
		lost:         d("deny_events_lost_total", "Deny events the kernel could not queue (ring buffer full)."),
		suppressed:   d("deny_events_suppressed_total", "Deny events dropped by the sidecar's rate limit instead of being audited."),
		rxBytes:      d("ingress_bytes_total", "Bytes of packets delivered to the sandbox cgroup's sockets."),
		rxPackets:    d("ingress_packets_total", "Packets delivered to the sandbox cgroup's sockets."),
		allowEntries: d("allow_entries", "Entries in the kernel allow map (expired ones included until GC)."),
	}
}

// Describe implements prometheus.Collector.
func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.bytes, c.packets, c.connections, c.denies, c.lost, c.suppressed, c.rxBytes, c.rxPackets, c.allowEntries} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *collector) Collect(ch chan<- prometheus.Metric) {
	s, err := c.e.Counters()
	if err != nil {
		ch <- prometheus.NewInvalidMetric(c.denies, err)
		return
	}
	counter := func(d *prometheus.Desc, v uint64) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v))
	}
	counter(c.bytes, s.Bytes)
	counter(c.packets, s.Packets)
	counter(c.connections, s.Connections)
	counter(c.denies, s.Denies)
	counter(c.lost, s.EventsLost)
	counter(c.rxBytes, s.RxBytes)
	counter(c.rxPackets, s.RxPackets)
	counter(c.suppressed, c.e.suppressed.Load())
	if n, err := c.e.allowEntries(); err == nil {
		ch <- prometheus.MustNewConstMetric(c.allowEntries, prometheus.GaugeValue, float64(n))
	}
}

// Counters are the kernel's per-sandbox counters, summed over CPUs.
type Counters struct {
	Bytes, Packets, Connections, Denies, EventsLost uint64
	// RxBytes and RxPackets are what the sandbox's sockets received (cgroup_skb/ingress).
	RxBytes, RxPackets uint64
}

// Counters reads the kernel's per-sandbox counters.
func (e *Enforcer) Counters() (Counters, error) {
	var per []airlockCounters
	if err := e.objs.Stats.Lookup(uint32(0), &per); err != nil {
		return Counters{}, err
	}
	var s Counters
	for _, p := range per {
		s.Bytes += p.Bytes
		s.Packets += p.Packets
		s.Connections += p.Connections
		s.Denies += p.Denies
		s.EventsLost += p.EventsLost
		s.RxBytes += p.RxBytes
		s.RxPackets += p.RxPackets
	}
	return s, nil
}

func (e *Enforcer) allowEntries() (int, error) {
	var (
		k airlockAllowKey
		v airlockAllowVal
		n int
	)
	it := e.objs.Allow.Iterate()
	for it.Next(&k, &v) {
		n++
	}
	return n, it.Err()
}
