package meter

import (
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"time"

	"github.com/airlock-dev/airlock/policy"
)

// This file meters each identity of spec.identities apart: its processes run in a child
// cgroup of the sandbox's (policy.IdentityCgroupDir), which the meter reads as it reads the
// sandbox's. An identity's record holds its CPU and memory only: the kernel counts network
// bytes and connections per sandbox, not per cgroup, and the model API's ledger holds the
// identity's model spend (`airlock usage --identity`). Caps and freezing stay the
// sandbox's: the sandbox's record, which counts every identity's processes too, is unchanged.

// Child returns the cgroup dir below c in every hierarchy c uses (an identity's cgroup:
// `airlock sandbox exec --as` makes it in each of the sandbox's hierarchies).
func (c Cgroup) Child(dir string) Cgroup {
	join := func(p string) string {
		if p == "" {
			return ""
		}
		return filepath.Join(p, dir)
	}
	return Cgroup{V2: join(c.V2), V1Memory: join(c.V1Memory), V1CPUAcct: join(c.V1CPUAcct), V1Freezer: join(c.V1Freezer)}
}

// Identities returns the last record of each identity metered, sorted by name.
func (m *Meter) Identities() []Record {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]Record, 0, len(m.ids))
	for _, name := range slices.Sorted(maps.Keys(m.ids)) {
		out = append(out, m.ids[name])
	}
	return out
}

// restoreIdentity keeps r as its identity's last record when it is the newest seen. The
// caller holds mu.
func (m *Meter) restoreIdentity(r Record) {
	if r.Sandbox != m.cfg.Key.Sandbox || r.Identity == "" {
		return
	}
	if m.ids == nil {
		m.ids = map[string]Record{}
	}
	if old, ok := m.ids[r.Identity]; !ok || r.Seq > old.Seq {
		m.ids[r.Identity] = r
	}
}

// ContainerStats is one running container of a pod that is an identity's (Config.Containers):
// the pod's identities are its containers (the airlock.dev/identities annotation), whose
// cgroups the node agent reads.
type ContainerStats struct {
	// Identity is the identity the container is.
	Identity string
	// Run identifies this run of the container (the runtime's container ID): a restarted
	// container is a new run, with a new cgroup whose counters start from zero.
	Run string
	CgroupStats
}

// sampleIdentities samples the cgroup of every identity of pol, and of every identity
// metered before (one a reload removed keeps being metered while its cgroup exists), and
// appends their records. An identity whose cgroup does not exist (not made yet, or gone) is
// not sampled; at the final sample its last record is written again as final. In a pod
// (Config.Containers) the identities' cgroups are their containers' (samplePod).
func (m *Meter) sampleIdentities(kind string, now time.Time, pol *policy.Policy) []error {
	if m.cfg.Cgroup == nil {
		if m.cfg.Containers == nil {
			return nil // a pod without identities, or an agent that cannot tell
		}
		return m.samplePod(kind, now, pol)
	}
	m.mu.Lock()
	names := pol.IdentityNames()
	for name := range m.ids {
		if !slices.Contains(names, name) {
			names = append(names, name)
		}
	}
	m.mu.Unlock()
	var errs []error
	for _, name := range names {
		rec, ok, err := m.sampleIdentity(name, kind, now, pol)
		if err != nil {
			errs = append(errs, fmt.Errorf("identity %s: %w", name, err))
		}
		if ok {
			errs = append(errs, m.appendIdentity(name, kind, rec)...)
		}
	}
	return errs
}

// appendIdentity writes identity name's record and keeps it as its last.
func (m *Meter) appendIdentity(name, kind string, rec Record) []error {
	rec.Kind = kind
	if err := m.ledger.Append(rec); err != nil {
		return []error{err}
	}
	m.mu.Lock()
	if m.ids == nil {
		m.ids = map[string]Record{}
	}
	m.ids[name] = rec
	m.mu.Unlock()
	return nil
}

// samplePod samples a pod's identities: each identity with a running container gets a
// record with what its containers' runs used since the last sample; one metered before
// with no running container gets its last record again at the final sample. When the
// containers cannot be read, no identity is sampled (the next sample adds what grew).
func (m *Meter) samplePod(kind string, now time.Time, pol *policy.Policy) []error {
	runs, err := m.cfg.Containers()
	if err != nil {
		return []error{fmt.Errorf("read the identities' containers: %w", err)}
	}
	byID := map[string][]ContainerStats{}
	for _, c := range runs {
		byID[c.Identity] = append(byID[c.Identity], c)
	}
	m.mu.Lock()
	names := slices.Collect(maps.Keys(byID))
	for name := range m.ids {
		if _, ok := byID[name]; !ok && kind == KindFinal {
			names = append(names, name)
		}
	}
	m.mu.Unlock()
	slices.Sort(names)
	var errs []error
	for _, name := range names {
		errs = append(errs, m.appendIdentity(name, kind, m.podIdentity(name, byID[name], now, pol))...)
	}
	return errs
}

// podIdentity returns identity name's record with what its container runs used since its
// last record added: each run's CPU growth since that run's last sample (a run not seen
// before counts from zero), and their memory in use and peaks summed (the peaks' sum is an
// upper bound of the identity's peak when it has several containers; exact with one).
// Without runs (the final sample of an identity with none running) the record is its last.
func (m *Meter) podIdentity(name string, runs []ContainerStats, now time.Time, pol *policy.Policy) Record {
	m.mu.Lock()
	prev, have := m.ids[name]
	m.mu.Unlock()
	if !have {
		prev = Record{Key: Key{Sandbox: m.cfg.Key.Sandbox, Identity: name}}
	}
	if len(runs) == 0 {
		return prev
	}
	raw := prev.Raw
	raw.Runs = make(map[string]RunRaw, len(runs))
	var mem memReading
	raw.MemoryBytes = 0
	for _, c := range runs {
		last := prev.Raw.Runs[c.Run]
		raw.CPUUserUsec += grew(last.CPUUserUsec, c.CPUUserUsec)
		raw.CPUSystemUsec += grew(last.CPUSystemUsec, c.CPUSystemUsec)
		raw.Runs[c.Run] = RunRaw{CPUUserUsec: c.CPUUserUsec, CPUSystemUsec: c.CPUSystemUsec}
		if c.HasMemory {
			raw.MemoryBytes += c.MemoryBytes
			mem = memReading{ok: true, peak: mem.peak + c.MemoryPeakBytes}
		}
	}
	rec := accumulate(prev, have, now, raw, mem)
	price(&rec, pol.Usage().Prices, ModelSpend{})
	return rec
}

// sampleIdentity reads identity name's cgroup and returns its record with what grew added.
// ok is false when there is nothing to write: the cgroup does not exist, and this is not
// the final sample of an identity metered before.
func (m *Meter) sampleIdentity(name, kind string, now time.Time, pol *policy.Policy) (rec Record, ok bool, err error) {
	m.mu.Lock()
	prev, have := m.ids[name]
	m.mu.Unlock()
	if !have {
		prev = Record{Key: Key{Sandbox: m.cfg.Key.Sandbox, Identity: name}}
	}
	s, err := m.cfg.Cgroup.Child(policy.IdentityCgroupDir(name)).Read()
	if err != nil {
		if errors.Is(err, ErrNoCgroup) {
			err = nil
		}
		return prev, have && err == nil && kind == KindFinal, err
	}
	raw := prev.Raw
	raw.CPUUserUsec, raw.CPUSystemUsec = s.CPUUserUsec, s.CPUSystemUsec
	var mem memReading
	if s.HasMemory {
		raw.MemoryBytes = s.MemoryBytes
		mem = memReading{ok: true, peak: s.MemoryPeakBytes}
	}
	rec = accumulate(prev, have, now, raw, mem)
	price(&rec, pol.Usage().Prices, ModelSpend{})
	return rec, true, nil
}
