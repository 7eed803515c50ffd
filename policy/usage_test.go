package policy

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestUsageLoad(t *testing.T) {
	p, err := Parse("t.yaml", []byte(header+"  usage:\n    interval: 2s\n    prices: {cpuSecond: 0.001, gibHour: 0.01, gibTransferred: 0.1}\n    caps: {cpuSeconds: 60, egressBytes: 1000000, usd: 2.5}\n"))
	if err != nil {
		t.Fatal(err)
	}
	u := p.Usage()
	want := UsageConfig{Interval: 2 * time.Second, Prices: UsagePrices{0.001, 0.01, 0.1}, Caps: UsageCaps{60, 1000000, 2.5}}
	if u != want {
		t.Errorf("got %+v, want %+v", u, want)
	}
	p, err = Parse("t.yaml", []byte(header))
	if err != nil {
		t.Fatal(err)
	}
	if got := p.Usage(); got != (UsageConfig{Interval: DefaultUsageInterval}) {
		t.Errorf("got %+v, want the default interval and nothing else", got)
	}
}

func TestUsageErrors(t *testing.T) {
	tests := []struct{ name, yaml, want string }{
		{"interval too short", "  usage:\n    interval: 1ms\n", `t.yaml:7:15: spec.usage.interval: 1ms is out of range; use between 100ms and 5m0s, or leave it out for 10s`},
		{"negative price", "  usage:\n    prices:\n      cpuSecond: -1\n", `t.yaml:8:18: spec.usage.prices.cpuSecond: must be a finite number, 0 or more`},
		{"negative cap", "  usage:\n    caps:\n      egressBytes: -5\n", `t.yaml:8:20: spec.usage.caps.egressBytes: must be a finite number, 0 or more`},
		{"unknown cap", "  usage:\n    caps:\n      cpuSecond: 5\n", `t.yaml:8:7: spec.usage.caps.cpuSecond: unknown field "cpuSecond"; did you mean "cpuSeconds"?`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse("t.yaml", []byte(header+tc.yaml))
			if got := errorLines(err); len(got) != 1 || got[0] != tc.want {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}

// TestUsageExtends: a child inherits its parent's caps and prices and may only lower a cap.
func TestUsageExtends(t *testing.T) {
	dir := t.TempDir()
	parent := header + "  usage:\n    interval: 1s\n    prices: {cpuSecond: 0.5}\n    caps: {cpuSeconds: 10, usd: 3}\n"
	if err := os.WriteFile(filepath.Join(dir, "base.yaml"), []byte(parent), 0o600); err != nil {
		t.Fatal(err)
	}
	child := filepath.Join(dir, "child.yaml")
	write := func(body string) {
		t.Helper()
		if err := os.WriteFile(child, []byte(header+"  extends: [./base.yaml]\n"+body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("  usage:\n    caps: {cpuSeconds: 5}\n")
	p, err := Load(child)
	if err != nil {
		t.Fatal(err)
	}
	want := UsageConfig{Interval: time.Second, Prices: UsagePrices{CPUSecond: 0.5}, Caps: UsageCaps{CPUSeconds: 5, USD: 3}}
	if got := p.Usage(); got != want {
		t.Errorf("got %+v, want %+v", got, want)
	}
	write("  usage:\n    caps: {usd: 4}\n")
	_, err = Load(child)
	if got := errorLines(err); len(got) != 1 || got[0] != child+":8:17: spec.usage.caps.usd: 4 exceeds the parents' cap of 3; a child only narrows" {
		t.Errorf("got %q", got)
	}
}
