//go:build linux

package meter

import (
	"os"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/airlock-dev/airlock/policy"
)

// identityCgroup makes identity name's cgroup below the sandbox's, in the v2 hierarchy and
// (on a hybrid host) the v1 memory one, as `sandbox exec --as` does, and opens its v2
// directory.
func (s *sandboxCgroup) identityCgroup(t *testing.T, name string) (Cgroup, *os.File) {
	t.Helper()
	cg := s.cg.Child(policy.IdentityCgroupDir(name))
	if err := os.Mkdir(cg.V2, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { removeV1(t, cg.V2) }) // kills what is left and removes it (same files in v2)
	if cg.V1Memory != "" {
		if err := os.Mkdir(cg.V1Memory, 0o755); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { removeV1(t, cg.V1Memory) })
	}
	d, err := os.Open(cg.V2)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return cg, d
}

// TestIdentitiesMeteredApart: a busy loop run as identity busy and a 64 MiB hog run as
// identity hog are each charged to their own identity, read from their own cgroups (the v1
// memory one on a hybrid host); the sandbox's record counts both; an identity whose cgroup
// does not exist gets no record; a restarted meter carries the identities' totals on; the
// final sample writes a final record for each; /metrics has the identity label.
func TestIdentitiesMeteredApart(t *testing.T) {
	s := newSandboxCgroup(t)
	pols := newPolSource(t, "  identities: {busy: {}, hog: {}, idle: {}}\n")
	m := newMeter(t, s, pols, nil)
	busyCG, busyDir := s.identityCgroup(t, "busy")
	hogCG, hogDir := s.identityCgroup(t, "hog")
	busy, _, _ := startIn(t, busyDir, busyCG, "busy")
	hog, hogIn, hogOut := startIn(t, hogDir, hogCG, "hog")
	hogIn.Write([]byte("go\n"))
	if line, err := hogOut.ReadString('\n'); err != nil || line != "ready\n" {
		t.Fatalf("hog: %q, %v", line, err)
	}
	for ids(m)["busy"].CPUSeconds() < 0.3 { // poll the meter until the loop has burnt 0.3 s
		sample(t, m, KindSample)
	}
	busy.Process.Kill()
	busy.Wait()
	hogIn.Close()
	hog.Wait()
	// A restart: a new meter on the same ledger carries the identities' totals on.
	before := ids(m)
	m.ledger.Close()
	m = newMeter(t, s, pols, nil)
	if got := ids(m); got["busy"].CPUUserUsec != before["busy"].CPUUserUsec || got["hog"].MemoryPeakBytes != before["hog"].MemoryPeakBytes {
		t.Fatalf("restored identities %+v, want %+v", got, before)
	}
	sb := sample(t, m, KindFinal)
	got := ids(m)
	if _, ok := got["idle"]; ok || len(got) != 2 {
		t.Fatalf("identities metered: %+v, want busy and hog only (idle has no cgroup)", got)
	}
	for name, cg := range map[string]Cgroup{"busy": busyCG, "hog": hogCG} {
		st, err := cg.Read()
		if err != nil {
			t.Fatal(err)
		}
		r := got[name]
		if r.Kind != KindFinal || r.Sandbox != "s" || r.Identity != name {
			t.Errorf("%s: record %+v, want a final record keyed s/%s", name, r.Key, name)
		}
		if a, b := r.CPUUserUsec+r.CPUSystemUsec, st.CPUUserUsec+st.CPUSystemUsec; a != b {
			t.Errorf("%s: CPU meter %d µs, its cgroup %d µs; want equal once nothing runs", name, a, b)
		}
		if r.MemoryPeakBytes != st.MemoryPeakBytes {
			t.Errorf("%s: memory peak meter %d, its cgroup %d", name, r.MemoryPeakBytes, st.MemoryPeakBytes)
		}
		if r.TxBytes != 0 || r.Connections != 0 || r.ModelUSD != 0 || r.Frozen != "" {
			t.Errorf("%s: record %+v has network, model or freeze figures, which are the sandbox's only", name, r)
		}
	}
	if got["hog"].MemoryPeakBytes < 64<<20 || got["busy"].MemoryPeakBytes >= 64<<20 {
		t.Errorf("memory peaks: hog %d, busy %d; want the 64 MiB charged to hog only", got["hog"].MemoryPeakBytes, got["busy"].MemoryPeakBytes)
	}
	if sb.Identity != "" || sb.CPUUserUsec+sb.CPUSystemUsec < got["busy"].CPUUserUsec+got["busy"].CPUSystemUsec+got["hog"].CPUUserUsec+got["hog"].CPUSystemUsec {
		t.Errorf("sandbox record %+v: want its CPU to count both identities'", sb)
	}
	recs, err := ReadFile(m.cfg.Ledger)
	if err != nil || len(recs) != 3 {
		t.Fatalf("ledger: %d records (%v), want the sandbox's, busy's and hog's", len(recs), err)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(m.Collector())
	n, err := testutil.GatherAndCount(reg, "airlock_usage_cpu_seconds_total", "airlock_usage_network_bytes_total")
	if err != nil || n != 3*2+2 {
		t.Errorf("series: %d (%v), want cpu by mode for the sandbox and both identities, network for the sandbox only", n, err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	seen := 0
	for _, mf := range mfs {
		if mf.GetName() != "airlock_usage_cpu_seconds_total" {
			continue
		}
		for _, mt := range mf.GetMetric() {
			l := map[string]string{}
			for _, lp := range mt.GetLabel() {
				l[lp.GetName()] = lp.GetValue()
			}
			r, ok := got[l["identity"]]
			if l["identity"] == "" {
				r, ok = sb, true
			}
			want := float64(r.CPUUserUsec) / 1e6
			if l["mode"] == "system" {
				want = float64(r.CPUSystemUsec) / 1e6
			}
			if !ok || l["sandbox"] != "s" || mt.GetCounter().GetValue() != want {
				t.Errorf("series %v = %v, want %v", l, mt.GetCounter().GetValue(), want)
			}
			seen++
		}
	}
	if seen != 6 {
		t.Errorf("%d cpu series, want 6", seen)
	}
}

// ids returns the meter's identity records by name.
func ids(m *Meter) map[string]Record {
	out := map[string]Record{}
	for _, r := range m.Identities() {
		out[r.Identity] = r
	}
	return out
}
