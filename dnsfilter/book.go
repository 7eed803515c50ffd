package dnsfilter

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"time"
)

// book remembers which addresses the filter handed out for which name, until when, and on
// which ports: the per-name cap, Resolved and revocation work from it. It is the filter's
// view of what it put in the AllowMap; the kernel expires its entries by itself.
type book struct {
	allow AllowMap // nil: addresses are tracked, not inserted
	now   func() time.Time

	// writeMu serialises record, so the cap and the revocation of one answer are computed
	// against the state the previous answer left, and AllowMap calls for one name never
	// interleave. Allow is a map update; holding the lock across it is cheap.
	writeMu sync.Mutex

	// mu guards names and holders; record holds writeMu too when it changes them.
	mu      sync.RWMutex
	names   map[string]map[netip.Addr]*entry // by normalised name
	holders map[netip.Addr]map[string]bool   // names holding each address
	records int                              // record calls since the last sweep
}

// entry is one address of one name.
type entry struct {
	ports    []uint16  // sorted; every port ever allowed for it while live
	until    time.Time // when the allow map entry expires
	answered time.Time // the last time an answer carried it (the cap evicts the oldest)
}

// grant is one address an answer carries, with what the policy allows for it.
type grant struct {
	addr  netip.Addr // unmapped
	ports []uint16   // sorted, non-empty
	until time.Time
}

// sweepEvery is how many record calls pass between sweeps of expired entries.
const sweepEvery = 1024

func newBook(allow AllowMap, now func() time.Time) *book {
	return &book{allow: allow, now: now, names: map[string]map[netip.Addr]*entry{}, holders: map[netip.Addr]map[string]bool{}}
}

// errAllowMap wraps an AllowMap failure.
var errAllowMap = errors.New("allow map update failed")

// record inserts the grants of one answer for name, at most max addresses of the name live
// at once: when the answer would pass the cap, the least recently answered addresses not in
// this answer are evicted and revoked; grants past the cap (an answer larger than the cap on
// its own) are dropped. It returns the grants that are now in the allow map, in order, and
// the addresses evicted. On an AllowMap error it returns errAllowMap; grants inserted before
// the failure stay recorded (they are in the kernel), and the answer must not be sent.
func (b *book) record(name string, grants []grant, max int) (kept []grant, evicted []netip.Addr, err error) {
	b.writeMu.Lock()
	defer b.writeMu.Unlock()
	now := b.now()
	b.maybeSweep(now)

	if len(grants) > max {
		grants = grants[:max]
	}
	// Only record (under writeMu) changes names, so reading it here needs no copy or lock.
	cur := b.names[name]
	inAnswer := make(map[netip.Addr]bool, len(grants))
	for _, g := range grants {
		inAnswer[g.addr] = true
	}
	evicted = pickEvictions(cur, inAnswer, max, now)
	for _, a := range evicted {
		if err := b.revoke(name, a); err != nil {
			return nil, evicted, err
		}
	}
	for _, g := range grants {
		if b.allow != nil {
			until := g.until
			if e := cur[g.addr]; e != nil && e.until.After(until) {
				until = e.until
			}
			if err := b.allow.Allow(g.addr, g.ports, until); err != nil {
				return kept, evicted, fmt.Errorf("%w: allow %s: %w", errAllowMap, g.addr, err)
			}
		}
		b.put(name, g, now)
		kept = append(kept, g)
	}
	return kept, evicted, nil
}

// pickEvictions chooses, from the live entries of cur, the least recently answered ones not
// in the answer until the live ones plus the answer's new ones fit max.
func pickEvictions(cur map[netip.Addr]*entry, inAnswer map[netip.Addr]bool, max int, now time.Time) []netip.Addr {
	live := func(a netip.Addr) bool { e := cur[a]; return e != nil && e.until.After(now) }
	total := 0
	for a := range cur {
		if live(a) {
			total++
		}
	}
	for a := range inAnswer {
		if !live(a) {
			total++
		}
	}
	if total <= max {
		return nil
	}
	var old []netip.Addr
	for a := range cur {
		if live(a) && !inAnswer[a] {
			old = append(old, a)
		}
	}
	slices.SortFunc(old, func(x, y netip.Addr) int {
		if c := cur[x].answered.Compare(cur[y].answered); c != 0 {
			return c
		}
		return x.Compare(y)
	})
	return old[:min(total-max, len(old))]
}

// revoke removes a from name and revokes, in the allow map, the ports no other name still
// holds for it.
func (b *book) revoke(name string, a netip.Addr) error {
	b.mu.Lock()
	e := b.names[name][a]
	delete(b.names[name], a)
	delete(b.holders[a], name)
	var ports []uint16
	if e != nil {
		ports = b.unheldPorts(a, e.ports)
	}
	if len(b.holders[a]) == 0 {
		delete(b.holders, a)
	}
	b.mu.Unlock()
	if b.allow == nil || len(ports) == 0 {
		return nil
	}
	if err := b.allow.Revoke(a, ports); err != nil {
		return fmt.Errorf("%w: revoke %s: %w", errAllowMap, a, err)
	}
	return nil
}

// unheldPorts returns the ports of ports that no live entry of another name holds for a.
// b.mu must be held.
func (b *book) unheldPorts(a netip.Addr, ports []uint16) []uint16 {
	now := b.now()
	var out []uint16
	for _, p := range ports {
		held := false
		for other := range b.holders[a] {
			if e := b.names[other][a]; e != nil && e.until.After(now) && slices.Contains(e.ports, p) {
				held = true
				break
			}
		}
		if !held {
			out = append(out, p)
		}
	}
	return out
}

// put records g for name, extending (never shortening) an existing entry.
func (b *book) put(name string, g grant, now time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	m := b.names[name]
	if m == nil {
		m = map[netip.Addr]*entry{}
		b.names[name] = m
	}
	e := m[g.addr]
	if e == nil || !e.until.After(now) {
		e = &entry{}
		m[g.addr] = e
	}
	e.ports = mergePorts(e.ports, g.ports)
	if g.until.After(e.until) {
		e.until = g.until
	}
	e.answered = now
	h := b.holders[g.addr]
	if h == nil {
		h = map[string]bool{}
		b.holders[g.addr] = h
	}
	h[name] = true
}

// resolved reports whether a was handed out for name and its entry has not expired.
func (b *book) resolved(name string, a netip.Addr) bool {
	b.mu.RLock()
	defer b.mu.RUnlock()
	e := b.names[name][a]
	return e != nil && e.until.After(b.now())
}

// liveName reports whether name has an unexpired address.
func (b *book) liveName(name string) bool {
	b.mu.RLock()
	defer b.mu.RUnlock()
	now := b.now()
	for _, e := range b.names[name] {
		if e.until.After(now) {
			return true
		}
	}
	return false
}

// maybeSweep drops expired entries every sweepEvery calls, so the book stays as large as the
// set of live answers. b.writeMu must be held.
func (b *book) maybeSweep(now time.Time) {
	if b.records++; b.records < sweepEvery {
		return
	}
	b.records = 0
	b.mu.Lock()
	defer b.mu.Unlock()
	for name, m := range b.names {
		for a, e := range m {
			if !e.until.After(now) {
				delete(m, a)
				delete(b.holders[a], name)
				if len(b.holders[a]) == 0 {
					delete(b.holders, a)
				}
			}
		}
		if len(m) == 0 {
			delete(b.names, name)
		}
	}
}

// mergePorts returns the sorted union of two sorted port lists.
func mergePorts(a, b []uint16) []uint16 {
	out := slices.Concat(a, b)
	slices.Sort(out)
	return slices.Compact(out)
}

// prune narrows the book to what allowed grants after a policy change: for each live entry,
// the ports allowed(name, addr) no longer returns are revoked in the allow map (those no other
// name still holds), and an entry left without ports is removed. It returns how many
// (address, name) entries lost ports; on an AllowMap error it stops and returns errAllowMap.
func (b *book) prune(allowed func(name string, a netip.Addr) []uint16) (int, error) {
	b.writeMu.Lock()
	defer b.writeMu.Unlock()
	now := b.now()
	type cut struct {
		name  string
		addr  netip.Addr
		ports []uint16 // ports to take away
		keep  []uint16
	}
	var cuts []cut
	for name, m := range b.names {
		for a, e := range m {
			if !e.until.After(now) {
				continue
			}
			keep := allowed(name, a)
			var drop, kept []uint16
			for _, p := range e.ports {
				if slices.Contains(keep, p) {
					kept = append(kept, p)
				} else {
					drop = append(drop, p)
				}
			}
			if len(drop) > 0 {
				cuts = append(cuts, cut{name, a, drop, kept})
			}
		}
	}
	for _, c := range cuts {
		b.mu.Lock()
		e := b.names[c.name][c.addr]
		e.ports = c.keep
		if len(c.keep) == 0 {
			delete(b.names[c.name], c.addr)
			delete(b.holders[c.addr], c.name)
		}
		revoke := b.unheldPorts(c.addr, c.ports)
		b.mu.Unlock()
		if b.allow != nil && len(revoke) > 0 {
			if err := b.allow.Revoke(c.addr, revoke); err != nil {
				return len(cuts), fmt.Errorf("%w: revoke %s: %w", errAllowMap, c.addr, err)
			}
		}
	}
	return len(cuts), nil
}
