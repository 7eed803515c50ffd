package meter

import (
	"slices"

	"github.com/prometheus/client_golang/prometheus"
)

// collector exports the meter's totals as of its last sample (read at scrape time, so they
// carry on across sidecar restarts, as the ledger does).
type collector struct {
	m                                     *Meter
	cpu, peak, gibh, net, conns, usd, frz *prometheus.Desc
}

// Collector returns the meter's Prometheus collector: airlock_usage_* with the labels
// sandbox and identity. The sandbox's series have identity ""; each identity metered has
// its own CPU, memory and compute-spend series (the sandbox's count its processes too), but
// no network, connection, model or frozen series: those are the sandbox's only.
func (m *Meter) Collector() prometheus.Collector {
	labels := []string{"sandbox", "identity"}
	d := func(name, help string, extra ...string) *prometheus.Desc {
		return prometheus.NewDesc("airlock_usage_"+name, help, append(labels, extra...), nil)
	}
	return &collector{
		m:     m,
		cpu:   d("cpu_seconds_total", "CPU time of the sandbox's processes over its life (cgroup cpu.stat), by mode (user, system).", "mode"),
		peak:  d("memory_peak_bytes", "Highest memory use of the sandbox (cgroup memory.peak, or memory.max_usage_in_bytes on v1)."),
		gibh:  d("memory_gib_hours_total", "Memory in use integrated over the sandbox's life, in GiB-hours (sampled every spec.usage.interval)."),
		net:   d("network_bytes_total", "Bytes the sandbox sent (tx) and received (rx), IP headers included (kernel counters).", "direction"),
		conns: d("connections_total", "Connections the kernel allowed from the sandbox over its life."),
		usd:   d("cost_usd_total", "Spend over the sandbox's life: compute (CPU, memory, network at spec.usage.prices) and model (the model API's ledger).", "kind"),
		frz:   d("frozen", "1 while a cap of spec.usage.caps holds the sandbox frozen."),
	}
}

// Describe implements prometheus.Collector.
func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.cpu, c.peak, c.gibh, c.net, c.conns, c.usd, c.frz} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *collector) Collect(ch chan<- prometheus.Metric) {
	r := c.m.Current()
	counter, gauge := c.compute(ch, r)
	for _, ir := range c.m.Identities() {
		c.compute(ch, ir)
	}
	counter(c.net, float64(r.TxBytes), "tx")
	counter(c.net, float64(r.RxBytes), "rx")
	counter(c.conns, float64(r.Connections))
	counter(c.usd, r.ModelUSD, "model")
	frozen := 0.0
	if r.Frozen != "" {
		frozen = 1
	}
	gauge(c.frz, frozen)
}

// compute sends r's CPU, memory and compute-spend series, labelled with r's key, and returns
// the functions that send more series with that key.
func (c *collector) compute(ch chan<- prometheus.Metric, r Record) (counter func(*prometheus.Desc, float64, ...string), gauge func(*prometheus.Desc, float64)) {
	k := []string{r.Sandbox, r.Identity}
	counter = func(d *prometheus.Desc, v float64, extra ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v, append(slices.Clone(k), extra...)...)
	}
	gauge = func(d *prometheus.Desc, v float64) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, k...)
	}
	counter(c.cpu, float64(r.CPUUserUsec)/1e6, "user")
	counter(c.cpu, float64(r.CPUSystemUsec)/1e6, "system")
	gauge(c.peak, float64(r.MemoryPeakBytes))
	counter(c.gibh, r.MemoryGiBHours)
	counter(c.usd, r.ComputeUSD, "compute")
	return counter, gauge
}
