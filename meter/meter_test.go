package meter

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/internal/crcline"
	"github.com/airlock-dev/airlock/policy"
)

// polSource is a policy store a test swaps policies in (a reload).
type polSource struct{ p atomic.Pointer[policy.Policy] }

func (s *polSource) Current() *policy.Policy { return s.p.Load() }

func newPolSource(t *testing.T, usage string) *polSource {
	s := &polSource{}
	s.set(t, usage)
	return s
}

func (s *polSource) set(t *testing.T, usage string) {
	t.Helper()
	p, err := policy.Parse("p.yaml", []byte("apiVersion: airlock/v1\nkind: EgressPolicy\nmetadata: {name: p}\nspec:\n"+usage))
	if err != nil {
		t.Fatal(err)
	}
	s.p.Store(p)
}

// events collects audit events.
type events struct {
	mu  sync.Mutex
	evs []audit.Event
}

func (e *events) Log(ev audit.Event) { e.mu.Lock(); e.evs = append(e.evs, ev); e.mu.Unlock() }
func (e *events) Health() error      { return nil }
func (e *events) all() []audit.Event {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]audit.Event(nil), e.evs...)
}

func TestLedgerRoundTrip(t *testing.T) {
	path := filepath.Join(t.TempDir(), LedgerFile)
	l, last, err := OpenLedger(path)
	if err != nil || len(last) != 0 {
		t.Fatalf("open: %v, %v", last, err)
	}
	since := time.Unix(1000, 0).UTC()
	a := Record{Kind: KindSample, Key: Key{Sandbox: "a"}, Totals: Totals{CPUUserUsec: 5, TxBytes: 7, Since: since}}
	a9 := a
	a9.CPUUserUsec = 9
	for _, r := range []Record{a, {Kind: KindSample, Key: Key{Sandbox: "b"}}, a9} {
		if err := l.Append(r); err != nil {
			t.Fatal(err)
		}
	}
	l.Close()
	// A torn last line (the sidecar died mid-write) is skipped, then cut off at open.
	f, _ := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	f.WriteString(`{"seq":9,"kind":"sample","sandbox":"a"`)
	f.Close()
	got, err := ReadFile(path)
	if err != nil || len(got) != 2 || got[0].CPUUserUsec != 9 || got[0].Seq != 3 || got[1].Sandbox != "b" {
		t.Fatalf("got %+v, %v; want a's last record (cpu 9, seq 3) and b's", got, err)
	}
	l, _, err = OpenLedger(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Append(Record{Kind: KindFinal, Key: Key{Sandbox: "b"}}); err != nil {
		t.Fatal(err)
	}
	l.Close()
	got, err = ReadFile(path)
	if err != nil || len(got) != 2 || got[1].Seq != 4 || got[1].Kind != KindFinal {
		t.Fatalf("after reopen: got %+v, %v; want b's final record with seq 4", got, err)
	}
	// A changed line before the last is corruption, named by line.
	data, _ := os.ReadFile(path)
	os.WriteFile(path, []byte(strings.Replace(string(data), `"cpu_user_usec":5`, `"cpu_user_usec":6`, 1)), 0o600)
	if _, err := ReadFile(path); !errors.Is(err, ErrLedgerCorrupt) || !strings.Contains(err.Error(), ":1:") {
		t.Errorf("edited line: got %v, want ErrLedgerCorrupt at line 1", err)
	}
}

// TestArchiveKeepsEveryLife: a sandbox name used twice leaves two bills in the archive.
func TestArchiveKeepsEveryLife(t *testing.T) {
	path := filepath.Join(t.TempDir(), ArchiveFile)
	for i, since := range []time.Time{time.Unix(1, 0), time.Unix(2, 0)} {
		if err := Archive(path, Record{Key: Key{Sandbox: "x"}, Totals: Totals{Since: since, TxBytes: uint64(i + 1)}}); err != nil {
			t.Fatal(err)
		}
	}
	got, err := ReadFile(path)
	if err != nil || len(got) != 2 || got[0].TxBytes != 1 || got[1].TxBytes != 2 || got[1].Kind != KindFinal {
		t.Errorf("got %+v, %v; want both lives of x", got, err)
	}
}

// TestLedgerCompacts: a ledger written past compactAt is rewritten with each life's last
// record, while it is written and when it is opened; the sequence carries on.
func TestLedgerCompacts(t *testing.T) {
	path := filepath.Join(t.TempDir(), LedgerFile)
	l, _, _ := OpenLedger(path)
	for i := 0; i < 8000; i++ {
		if err := l.Append(Record{Kind: KindSample, Key: Key{Sandbox: "a"}, Totals: Totals{TxBytes: uint64(i)}}); err != nil {
			t.Fatal(err)
		}
		if st, _ := os.Stat(path); st.Size() > compactAt+4096 {
			t.Fatalf("ledger grew to %d bytes at record %d, past compactAt", st.Size(), i)
		}
	}
	if err := l.Append(Record{Kind: KindSample, Key: Key{Sandbox: "b"}}); err != nil {
		t.Fatal(err)
	}
	l.Close()
	got, err := ReadFile(path)
	if err != nil || len(got) != 2 || got[0].TxBytes != 7999 || got[0].Seq != 8000 || got[1].Seq != 8001 {
		t.Fatalf("got %+v, %v; want a's last record (seq 8000) and b's (8001)", got, err)
	}
	l, _, err = OpenLedger(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Append(Record{Kind: KindSample, Key: Key{Sandbox: "a"}}); err != nil {
		t.Fatal(err)
	}
	l.Close()
	if got, err := ReadFile(path); err != nil || got[0].Seq != 8002 {
		t.Errorf("after reopening: %+v, %v; want seq to carry on (8002)", got, err)
	}
}

func TestAccumulate(t *testing.T) {
	t0 := time.Unix(0, 0)
	r := accumulate(Record{}, false, t0, Raw{CPUUserUsec: 100, TxBytes: 50, MemoryBytes: gib}, memReading{ok: true, peak: 2 * gib})
	if r.CPUUserUsec != 100 || r.TxBytes != 50 || r.MemoryPeakBytes != 2*gib || r.MemoryGiBHours != 0 || !r.Since.Equal(t0) {
		t.Fatalf("first sample: %+v", r)
	}
	// An hour later, memory went from 1 to 3 GiB: 2 GiB-hours (trapezoid). The kernel's
	// counters started again from zero (a new map): what they hold now is new.
	r = accumulate(r, true, t0.Add(time.Hour), Raw{CPUUserUsec: 300, TxBytes: 20, MemoryBytes: 3 * gib}, memReading{ok: true, peak: 2 * gib})
	if r.CPUUserUsec != 300 || r.TxBytes != 70 || r.MemoryGiBHours != 2 || r.MemoryPeakBytes != 3*gib {
		t.Errorf("second sample: got cpu %d tx %d gibh %v peak %d, want 300, 70, 2, 3 GiB", r.CPUUserUsec, r.TxBytes, r.MemoryGiBHours, r.MemoryPeakBytes)
	}
}

func TestCapReached(t *testing.T) {
	r := Record{Totals: Totals{CPUUserUsec: 1_500_000, CPUSystemUsec: 500_000, TxBytes: 600, RxBytes: 500}, ComputeUSD: 1, ModelUSD: 0.5}
	tests := []struct {
		name string
		caps policy.UsageCaps
		held float64
		want string
	}{
		{"none", policy.UsageCaps{}, 0, ""},
		{"cpu below", policy.UsageCaps{CPUSeconds: 2.5}, 0, ""},
		{"cpu reached", policy.UsageCaps{CPUSeconds: 2}, 0, "cpuSeconds"},
		{"egress counts both ways", policy.UsageCaps{EgressBytes: 1100}, 0, "egressBytes"},
		{"egress below", policy.UsageCaps{EgressBytes: 1101}, 0, ""},
		{"usd counts model spend", policy.UsageCaps{USD: 1.5}, 0, "usd"},
		{"usd counts reservations", policy.UsageCaps{USD: 1.6}, 0.2, "usd"},
		{"usd below", policy.UsageCaps{USD: 1.6}, 0, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got, _ := capReached(tc.caps, r, tc.held); got != tc.want {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}

// TestPrice: one CPU-second, one GiB-hour and one GiB each way at the policy's prices.
func TestPrice(t *testing.T) {
	r := Record{Totals: Totals{CPUUserUsec: 1e6, MemoryGiBHours: 1, TxBytes: gib, RxBytes: gib}}
	price(&r, policy.UsagePrices{CPUSecond: 0.5, GiBHour: 0.25, GiBTransferred: 0.125}, ModelSpend{UsedNano: 3e9, UsedTokens: 9})
	if r.ComputeUSD != 1 || r.ModelUSD != 3 || r.ModelTokens != 9 || r.TotalUSD() != 4 {
		t.Errorf("got compute %v model %v total %v, want 1, 3, 4", r.ComputeUSD, r.ModelUSD, r.TotalUSD())
	}
}

func TestFindCgroupHybrid(t *testing.T) {
	root := t.TempDir()
	mi := strings.Join([]string{
		"30 22 0:27 / " + root + " rw,relatime - tmpfs tmpfs rw,mode=755",
		"32 30 0:29 / " + root + "/cpuacct rw,relatime - cgroup cgroup rw,cpuacct",
		"34 30 0:31 / " + root + "/memory rw,relatime - cgroup cgroup rw,memory",
		"36 30 0:33 / " + root + "/freezer rw,relatime - cgroup cgroup rw,freezer",
		"38 30 0:35 / " + root + "/pids rw,relatime - cgroup cgroup rw,pids",
		"40 30 0:37 / " + root + "/unified rw,relatime - cgroup2 cgroup2 rw",
	}, "\n")
	got := FindCgroup(filepath.Join(root, "unified/airlock/s1"), []byte(mi))
	want := Cgroup{V2: filepath.Join(root, "unified/airlock/s1"), V1Memory: filepath.Join(root, "memory/airlock/s1"),
		V1CPUAcct: filepath.Join(root, "cpuacct/airlock/s1"), V1Freezer: filepath.Join(root, "freezer/airlock/s1")}
	if got != want {
		t.Errorf("got %+v, want %+v", got, want)
	}
	// A pure v2 host: no v1 directories.
	if got := FindCgroup("/sys/fs/cgroup/airlock/s1", []byte("40 30 0:37 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw")); got != (Cgroup{V2: "/sys/fs/cgroup/airlock/s1"}) {
		t.Errorf("pure v2: got %+v", got)
	}
}

// TestLedgerOldAndIdentityRecords: a ledger an older sidecar wrote (sandbox records only, no
// identity field) still opens and restores the sandbox's totals; once identity records sit
// beside it, a restarted meter restores the sandbox's record from the sandbox's lines only
// (an identity's line written after it is not taken for it) and each identity's from its own.
func TestLedgerOldAndIdentityRecords(t *testing.T) {
	path := filepath.Join(t.TempDir(), LedgerFile)
	since := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	old, err := crcline.Encode(map[string]any{"seq": 1, "time": since.Add(time.Minute), "kind": "sample", "sandbox": "s",
		"cpu_user_usec": 7000000, "cpu_system_usec": 1000000, "memory_peak_bytes": 1 << 20, "since": since,
		"raw": map[string]any{"cpu_user_usec": 7000000}, "compute_usd": 0.5})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, old, 0o600); err != nil {
		t.Fatal(err)
	}
	pols := newPolSource(t, "  identities: {author: {}}\n")
	m, err := New(Config{Key: Key{Sandbox: "s"}, Policy: pols, Ledger: path})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Open(); err != nil {
		t.Fatal(err)
	}
	if r := m.Current(); r.CPUUserUsec != 7000000 || r.ComputeUSD != 0.5 || !r.Since.Equal(since) || len(m.Identities()) != 0 {
		t.Fatalf("restored from an old ledger: %+v, identities %+v", r, m.Identities())
	}
	// An identity's record appended after the sandbox's (as a sample writes them).
	id := Record{Key: Key{Sandbox: "s", Identity: "author"}, Totals: Totals{CPUUserUsec: 3000000, Since: since}, Kind: KindSample}
	if err := m.ledger.Append(id); err != nil {
		t.Fatal(err)
	}
	m.ledger.Close()
	m2, err := New(Config{Key: Key{Sandbox: "s"}, Policy: pols, Ledger: path})
	if err != nil {
		t.Fatal(err)
	}
	if err := m2.Open(); err != nil {
		t.Fatal(err)
	}
	defer m2.ledger.Close()
	if r := m2.Current(); r.Identity != "" || r.CPUUserUsec != 7000000 {
		t.Errorf("sandbox record restored: %+v, want the sandbox's own", r.Totals)
	}
	if ids := m2.Identities(); len(ids) != 1 || ids[0].Identity != "author" || ids[0].CPUUserUsec != 3000000 {
		t.Errorf("identities restored: %+v, want author's", ids)
	}
	// Without a cgroup (a pod) the meter samples no identity: the sandbox's record only.
	if _, err := m2.Sample(KindSample); err != nil {
		t.Fatal(err)
	}
	recs, err := ReadFile(path)
	if err != nil || len(recs) != 2 || recs[0].Identity != "" || recs[1].Identity != "author" || recs[1].Seq != 2 {
		t.Errorf("ledger after a sample without a cgroup: %+v (%v)", recs, err)
	}
}
