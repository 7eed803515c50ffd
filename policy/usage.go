package policy

import (
	"fmt"
	"time"
)

// This file is spec.usage: how the sidecar meters the sandbox's compute, memory and network
// (issue 35), what they cost, and the caps that freeze the sandbox. The meter itself lives
// in package meter.

// Bounds and default of spec.usage.interval.
const (
	// DefaultUsageInterval is how often the sidecar samples the sandbox's counters, writes
	// them to the usage ledger and checks the caps, when spec.usage.interval is not set.
	DefaultUsageInterval = 10 * time.Second
	// MinUsageInterval and MaxUsageInterval bound spec.usage.interval.
	MinUsageInterval = 100 * time.Millisecond
	MaxUsageInterval = 5 * time.Minute
)

// UsageConfig is spec.usage. Its zero value meters at DefaultUsageInterval, prices nothing
// and caps nothing.
type UsageConfig struct {
	// Interval is how often the sidecar samples the sandbox's cgroup and kernel counters,
	// writes them to the usage ledger and checks the caps ("10s", between 100ms and 5m). A
	// cap is noticed at most one interval late. Zero means DefaultUsageInterval (10s).
	Interval time.Duration `yaml:"interval"`
	// Prices turn the figures into US dollars. Zero fields price nothing.
	Prices UsagePrices `yaml:"prices"`
	// Caps freeze the sandbox when its usage reaches them. Zero fields cap nothing.
	Caps UsageCaps `yaml:"caps"`
}

// UsagePrices are what compute, memory and network cost, in US dollars.
type UsagePrices struct {
	// CPUSecond is the price of one CPU-second (user plus system). Zero means free.
	CPUSecond float64 `yaml:"cpuSecond"`
	// GiBHour is the price of one GiB of memory held for an hour (memory in use, integrated
	// over the sandbox's life). Zero means free.
	GiBHour float64 `yaml:"gibHour"`
	// GiBTransferred is the price of one GiB (2^30 bytes) sent or received by the sandbox.
	// Zero means free.
	GiBTransferred float64 `yaml:"gibTransferred"`
}

// UsageCaps are the sandbox's lifetime caps. When one is reached the sidecar freezes the
// sandbox's cgroup until a policy reload raises the cap or the operator thaws it.
type UsageCaps struct {
	// CPUSeconds caps the CPU time (user plus system) of the sandbox's processes. Zero means
	// no cap.
	CPUSeconds float64 `yaml:"cpuSeconds"`
	// EgressBytes caps the bytes the sandbox sends plus the bytes it receives (its whole
	// traffic, which all goes through the sidecar). Zero means no cap.
	EgressBytes int64 `yaml:"egressBytes"`
	// USD caps compute, memory and network spend (from spec.usage.prices) plus model spend
	// (from the models' prices, reservations of calls in flight included). Zero means no
	// cap.
	USD float64 `yaml:"usd"`
}

// Usage returns the effective spec.usage with the interval's default applied.
func (p *Policy) Usage() UsageConfig {
	u := p.usage
	if u.Interval == 0 {
		u.Interval = DefaultUsageInterval
	}
	return u
}

// compileUsage checks spec.usage on its own.
func compileUsage(d *decoder, u UsageConfig) {
	const path = "spec.usage"
	if u.Interval != 0 && (u.Interval < MinUsageInterval || u.Interval > MaxUsageInterval) {
		d.errorf(path+".interval", "%s is out of range; use between %s and %s, or leave it out for %s",
			u.Interval, MinUsageInterval, MaxUsageInterval, DefaultUsageInterval)
	}
	checkNonNegative(d, path+".prices.cpuSecond", u.Prices.CPUSecond)
	checkNonNegative(d, path+".prices.gibHour", u.Prices.GiBHour)
	checkNonNegative(d, path+".prices.gibTransferred", u.Prices.GiBTransferred)
	checkNonNegative(d, path+".caps.cpuSeconds", u.Caps.CPUSeconds)
	checkNonNegative(d, path+".caps.egressBytes", float64(u.Caps.EgressBytes))
	checkNonNegative(d, path+".caps.usd", u.Caps.USD)
}

// inheritUsage merges the parents' spec.usage with the child's: a child's caps may only be
// lower (a missing one takes the parents' lowest), its prices and interval replace the
// parents' (where it sets none, the first parent's that does).
func inheritUsage(d *decoder, parents []*Policy, own UsageConfig) UsageConfig {
	out := own
	var limit UsageCaps
	for _, parent := range parents {
		if out.Interval == 0 {
			out.Interval = parent.usage.Interval
		}
		if out.Prices == (UsagePrices{}) {
			out.Prices = parent.usage.Prices
		}
		c := parent.usage.Caps
		limit = UsageCaps{
			CPUSeconds:  lowerCap(limit.CPUSeconds, c.CPUSeconds),
			EgressBytes: lowerCap(limit.EgressBytes, c.EgressBytes),
			USD:         lowerCap(limit.USD, c.USD),
		}
	}
	narrow := func(field string, own, limit float64) float64 {
		switch {
		case own == 0:
			return limit
		case limit != 0 && own > limit:
			d.errorf("spec.usage.caps."+field, "%v exceeds the parents' cap of %v; a child only narrows", own, limit)
			return limit
		}
		return own
	}
	out.Caps.CPUSeconds = narrow("cpuSeconds", own.Caps.CPUSeconds, limit.CPUSeconds)
	out.Caps.USD = narrow("usd", own.Caps.USD, limit.USD)
	out.Caps.EgressBytes = int64(narrow("egressBytes", float64(own.Caps.EgressBytes), float64(limit.EgressBytes)))
	return out
}

// String renders the caps for messages ("cpuSeconds 60, usd $1.00"), "none" without any.
func (c UsageCaps) String() string {
	s := ""
	add := func(f string, a ...any) {
		if s != "" {
			s += ", "
		}
		s += fmt.Sprintf(f, a...)
	}
	if c.CPUSeconds > 0 {
		add("cpuSeconds %g", c.CPUSeconds)
	}
	if c.EgressBytes > 0 {
		add("egressBytes %d", c.EgressBytes)
	}
	if c.USD > 0 {
		add("usd $%.2f", c.USD)
	}
	if s == "" {
		return "none"
	}
	return s
}
