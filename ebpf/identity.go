package ebpf

import (
	"fmt"
	"maps"
	"slices"
)

// Per-identity raw TCP. An identity's tasks live in cgroups of their own below the enforced
// cgroup; the sidecar tells the kernel which identity each such cgroup is (id_cgroups:
// cgroup id -> the identity's index) and what each identity's protocol: tcp rules are
// (id_tcp: an LPM trie keyed by the index and the range). connect4/6 let an identity's task
// connect straight to a destination only when its own rules and the sandbox's both allow
// it; a cgroup the sidecar has not mapped gets no raw TCP at all (DenyIdentity).
//
// Indices are the Enforcer's own: a name keeps its index for the Enforcer's life and no
// index is ever given to another name, so rules and cgroups may be written in any order
// without one identity borrowing another's. A new Enforcer (a restarted sidecar) numbers
// afresh, so Open empties id_cgroups before anything else: until the sidecar maps the
// cgroups again, identities have no raw TCP (fail closed).

// maxIdentityCgroups is the size of id_cgroups (bpf/airlock.c).
const maxIdentityCgroups = 1024

// identityState is the Enforcer's view of id_tcp and id_cgroups.
type identityState struct {
	index   map[string]uint32     // every name seen, never reassigned
	rules   map[string][]CIDRRule // the rules last written
	cgroups map[uint64]string     // the cgroups last written
}

// indexOf returns name's index, giving it the next one when it has none.
func (s *identityState) indexOf(name string) uint32 {
	if i, ok := s.index[name]; ok {
		return i
	}
	if s.index == nil {
		s.index = map[string]uint32{}
	}
	i := uint32(len(s.index) + 1) // 0 is never an index
	s.index[name] = i
	return i
}

// compileIdentityTCP turns each identity's rules into id_tcp entries. Every rule is raw
// TCP, whatever its Raw says. Errors wrap ErrInvalidConfig.
func (s *identityState) compileIdentityTCP(rules map[string][]CIDRRule) (map[airlockIdCidrKey]airlockCidrVal, error) {
	out := map[airlockIdCidrKey]airlockCidrVal{}
	for _, name := range slices.Sorted(maps.Keys(rules)) {
		if name == "" {
			return nil, invalidf("identity raw TCP rules: an identity needs a name")
		}
		raw := make([]CIDRRule, 0, len(rules[name]))
		for _, r := range rules[name] {
			r.Raw = true
			raw = append(raw, r)
		}
		entries, err := compileCIDRs(raw)
		if err != nil {
			return nil, fmt.Errorf("identity %q: %w", name, err)
		}
		idx := s.indexOf(name)
		for k, v := range entries {
			out[airlockIdCidrKey{Prefixlen: 32 + k.Prefixlen, Ident: idx, Addr: k.Addr}] = v
		}
	}
	return out, nil
}

// SetIdentityTCP replaces every identity's protocol: tcp rules (at Open from
// Config.IdentityTCP, and on a policy reload): rules maps an identity's name to its rules,
// each of which is treated as raw TCP. An identity absent from rules has no raw TCP. The
// kernel also requires the sandbox's own protocol tcp rules (Config.CIDRs) to allow a
// connection, so rules outside them allow nothing. New entries are in force before stale
// ones go. Like Config.IdentityTCP, nil (as opposed to empty) switches the per-identity
// rule off (every identity's task has the sandbox's raw TCP) and non-nil switches it on,
// after the rules are written (a pod's node agent, told the rules after the attach).
// Errors wrap ErrInvalidConfig for bad rules.
func (e *Enforcer) SetIdentityTCP(rules map[string][]CIDRRule) error {
	e.idMu.Lock()
	defer e.idMu.Unlock()
	want, err := e.ids.compileIdentityTCP(rules)
	if err != nil {
		return err
	}
	if err := syncMap(e.objs.IdTcp, want); err != nil {
		return err
	}
	e.ids.rules = rules
	return e.setIdentityTCPFlag(rules != nil)
}

// setIdentityTCPFlag switches the config map's CFG_IDENTITY_TCP on or off, unless it is so.
func (e *Enforcer) setIdentityTCPFlag(on bool) error {
	e.cfgMu.Lock()
	defer e.cfgMu.Unlock()
	if (e.cfg.IdentityTCP != nil) == on {
		return nil
	}
	e.cfg.IdentityTCP = nil
	if on {
		e.cfg.IdentityTCP = map[string][]CIDRRule{} // the flag only: the rules are e.ids.rules
	}
	if err := e.objs.Config.Put(uint32(0), settings(&e.cfg)); err != nil {
		return fmt.Errorf("update config map: %w", err)
	}
	return nil
}

// SetIdentityCgroups replaces which cgroups (v2 ids, CgroupID) are which identity's: the
// sidecar calls it when an identity's cgroup appears or changes. The name "" is the
// sandbox's own identity: its cgroups' tasks are treated like the enforced cgroup's (the
// sandbox's rules, raw TCP and all; a pod's container that is no identity's). A cgroup below
// the enforced one that is absent here reaches only the sidecar, and gets no raw TCP. Stale
// mappings go after the new ones are in. Errors wrap ErrInvalidConfig for too many cgroups.
func (e *Enforcer) SetIdentityCgroups(cgroups map[uint64]string) error {
	if len(cgroups) > maxIdentityCgroups {
		return invalidf("%d identity cgroups: at most %d", len(cgroups), maxIdentityCgroups)
	}
	e.idMu.Lock()
	defer e.idMu.Unlock()
	want := make(map[uint64]uint32, len(cgroups))
	for id, name := range cgroups {
		if name == "" {
			want[id] = 0 // the sandbox's own
			continue
		}
		want[id] = e.ids.indexOf(name)
	}
	if err := syncMap(e.objs.IdCgroups, want); err != nil {
		return err
	}
	e.ids.cgroups = maps.Clone(cgroups)
	return nil
}

// IdentityCgroups returns the cgroups last given to SetIdentityCgroups.
func (e *Enforcer) IdentityCgroups() map[uint64]string {
	e.idMu.Lock()
	defer e.idMu.Unlock()
	return maps.Clone(e.ids.cgroups)
}

// writeIdentityTables is Open's part: it empties id_cgroups (a previous sidecar's indices
// are not this one's), then writes Config.IdentityTCP.
func (e *Enforcer) writeIdentityTables() error {
	if err := syncMap(e.objs.IdCgroups, map[uint64]uint32{}); err != nil {
		return err
	}
	return e.SetIdentityTCP(e.cfg.IdentityTCP)
}

// identityOf returns the identity cgroup id is mapped to, or "".
func (e *Enforcer) identityOf(cgroup uint64) string {
	if cgroup == 0 {
		return ""
	}
	e.idMu.Lock()
	defer e.idMu.Unlock()
	return e.ids.cgroups[cgroup]
}
