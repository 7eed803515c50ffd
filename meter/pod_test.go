package meter

import (
	"errors"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// podContainers plays the node agent's answer of a pod's running containers.
type podContainers struct {
	mu   sync.Mutex
	runs []ContainerStats
	err  error
}

func (p *podContainers) set(err error, runs ...ContainerStats) {
	p.mu.Lock()
	p.runs, p.err = runs, err
	p.mu.Unlock()
}

func (p *podContainers) read() ([]ContainerStats, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]ContainerStats(nil), p.runs...), p.err
}

func run(identity, id string, user, sys, mem, peak uint64) ContainerStats {
	return ContainerStats{Identity: identity, Run: id, CgroupStats: CgroupStats{CPUUserUsec: user, CPUSystemUsec: sys,
		MemoryBytes: mem, MemoryPeakBytes: peak, HasMemory: mem > 0}}
}

// TestPodIdentities: in a pod (no cgroup of its own to read) each identity's figures come
// from its containers: the CPU each container run used (a restarted container is a new run
// counting from zero, never a negative or a recount), memory summed over the identity's
// containers; a failed read samples no identity and loses nothing; a restarted meter
// carries each run's counters on from the ledger; the final sample writes a final record
// for every identity metered, running or not; the sandbox's own record has no CPU.
func TestPodIdentities(t *testing.T) {
	ledger := filepath.Join(t.TempDir(), LedgerFile)
	pols := newPolSource(t, "  usage: {prices: {cpuSecond: 1}}\n")
	pc := &podContainers{}
	clock := time.Unix(1000, 0)
	open := func() *Meter {
		m, err := New(Config{Key: Key{Sandbox: "ns.pod"}, Policy: pols, Ledger: ledger, Containers: pc.read,
			Now: func() time.Time { clock = clock.Add(time.Minute); return clock }})
		if err != nil {
			t.Fatal(err)
		}
		if err := m.Open(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { m.ledger.Close() })
		return m
	}
	m := open()
	cpu := func(name string) uint64 { r := ids(m)[name]; return r.CPUUserUsec + r.CPUSystemUsec }
	steps := []struct {
		name     string
		err      error
		runs     []ContainerStats
		reviewer uint64 // CPU µs in total after the step
		author   uint64
	}{
		{"first sample", nil, []ContainerStats{run("reviewer", "r1", 100, 50, 1<<20, 2<<20), run("author", "a1", 10, 0, 0, 0)}, 150, 10},
		{"growth", nil, []ContainerStats{run("reviewer", "r1", 300, 50, 1<<20, 3<<20), run("author", "a1", 15, 0, 0, 0)}, 350, 15},
		{"unreadable", errors.New("node agent unreachable"), nil, 350, 15},
		{"reviewer restarted, second author container", nil, []ContainerStats{run("reviewer", "r2", 20, 0, 1<<20, 1<<20),
			run("author", "a1", 25, 0, 4<<20, 5<<20), run("author", "a2", 5, 5, 4<<20, 6<<20)}, 370, 35},
	}
	for _, s := range steps {
		pc.set(s.err, s.runs...)
		_, err := m.Sample(KindSample)
		if (err != nil) != (s.err != nil) {
			t.Fatalf("%s: sample error %v", s.name, err)
		}
		if cpu("reviewer") != s.reviewer || cpu("author") != s.author {
			t.Errorf("%s: CPU reviewer %d author %d, want %d and %d", s.name, cpu("reviewer"), cpu("author"), s.reviewer, s.author)
		}
	}
	if r := ids(m)["reviewer"]; r.MemoryPeakBytes != 3<<20 || r.ComputeUSD != 370e-6 || r.Sandbox != "ns.pod" {
		t.Errorf("reviewer %+v: want the highest peak seen (3 MiB), $370e-6 at $1 per CPU-second, sandbox ns.pod", r)
	}
	if r := ids(m)["author"]; r.MemoryPeakBytes != 11<<20 || r.Raw.MemoryBytes != 8<<20 {
		t.Errorf("author memory peak %d, in use %d; want the sum of its two containers' (11 MiB, 8 MiB)", r.MemoryPeakBytes, r.Raw.MemoryBytes)
	}
	if sb := m.Current(); sb.CPUUserUsec != 0 || sb.Identity != "" {
		t.Errorf("sandbox record %+v: a pod's own figures have no CPU (its cgroup holds the sidecar)", sb)
	}

	// A sidecar restart: the runs' counters come back from the ledger.
	m.ledger.Close()
	m = open()
	pc.set(nil, run("reviewer", "r2", 50, 0, 1<<20, 1<<20))
	sample(t, m, KindSample)
	if cpu("reviewer") != 400 || cpu("author") != 35 {
		t.Errorf("after a restart: CPU reviewer %d author %d, want 400 (30 more of run r2) and 35", cpu("reviewer"), cpu("author"))
	}
	pc.set(nil)
	sample(t, m, KindFinal)
	recs, err := ReadFile(ledger)
	if err != nil {
		t.Fatal(err)
	}
	finals := map[string]uint64{}
	for _, r := range recs {
		if r.Identity != "" && r.Kind == KindFinal {
			finals[r.Identity] = r.CPUUserUsec + r.CPUSystemUsec
		}
	}
	if len(finals) != 2 || finals["reviewer"] != 400 || finals["author"] != 35 {
		t.Errorf("final identity records %v, want reviewer 400 and author 35", finals)
	}
}
