package approval

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/airlock-dev/airlock/policy"
)

// GrantsFile is the file in the state directory that keeps the grants.
const GrantsFile = "grants.json"

// grantsDoc is the grants file.
type grantsDoc struct {
	Version int     `json:"version"`
	Grants  []Grant `json:"grants"`
}

// ReadGrants returns the grants kept in stateDir that are live at now (none when there is
// no grants file), as `airlock policy explain --state-dir` applies them.
func ReadGrants(stateDir string, now time.Time) ([]Grant, error) {
	b, err := os.ReadFile(filepath.Join(stateDir, GrantsFile))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read grants: %w", err)
	}
	var doc grantsDoc
	if err := json.Unmarshal(b, &doc); err != nil || doc.Version != 1 {
		return nil, fmt.Errorf("read grants: %s is not a version 1 grants file: %v", filepath.Join(stateDir, GrantsFile), err)
	}
	var out []Grant
	for _, g := range doc.Grants {
		if g.live(now) {
			out = append(out, g)
		}
	}
	return out, nil
}

// Rules turns grants into the policy's grant rules (policy.WithGrants).
func Rules(gs []Grant) []policy.GrantRule {
	out := make([]policy.GrantRule, len(gs))
	for i, g := range gs {
		out[i] = policy.GrantRule{ID: g.ID, Host: g.Host, Ports: g.Ports, Identity: g.Identity}
	}
	return out
}

// Load reads the grants kept in the state directory (a missing file is none) and ends, with
// an expiry event, those that expired while the sidecar was down. Call it before serving.
func (s *Stage) Load() error {
	if s.cfg.StateDir == "" {
		return nil
	}
	path := filepath.Join(s.cfg.StateDir, GrantsFile)
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("load grants: %w", err)
	}
	var doc grantsDoc
	if err := json.Unmarshal(b, &doc); err != nil || doc.Version != 1 {
		return fmt.Errorf("load grants: %s is not a version 1 grants file (move it away to start without grants): %v", path, err)
	}
	now := s.cfg.Now()
	s.mu.Lock()
	var expired []Grant
	for _, g := range doc.Grants {
		if g.live(now) {
			s.grants[g.ID] = g
		} else {
			expired = append(expired, g)
		}
	}
	if len(expired) > 0 {
		err = s.saveLocked()
	}
	s.invalidateLocked()
	s.mu.Unlock()
	for _, g := range expired {
		s.metrics.expiries.Inc()
		s.auditEnd(g, "expire", "expired while the sidecar was down")
	}
	return err
}

// saveLocked writes the grants file atomically (mode 0600).
func (s *Stage) saveLocked() error {
	if s.cfg.StateDir == "" {
		return nil
	}
	doc := grantsDoc{Version: 1, Grants: sortedGrants(s.grants)}
	b, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		return fmt.Errorf("keep grants: %w", err)
	}
	path := filepath.Join(s.cfg.StateDir, GrantsFile)
	tmp, err := os.CreateTemp(s.cfg.StateDir, ".grants-*")
	if err != nil {
		return fmt.Errorf("keep grants: %w", err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(append(b, '\n')); err != nil {
		tmp.Close()
		return fmt.Errorf("keep grants: %w", err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return fmt.Errorf("keep grants: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("keep grants: %w", err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("keep grants: %w", err)
	}
	return nil
}

// PolicyChanged ends what a reloaded policy no longer allows: every grant, and every
// pending ask, when it stops asking; the grants (and asks) of hosts a rule now names or
// never lists; duration grants longer than a shortened maxGrant; sandbox-life grants
// without sandboxGrants. Call it with the newly loaded policy before applying the effective
// one (Current). It returns how many grants ended.
func (s *Stage) PolicyChanged(base *policy.Policy) int {
	c, _ := base.Approval()
	s.mu.Lock()
	type ending struct{ id, why string }
	var ends []ending
	for _, g := range sortedGrants(s.grants) {
		if why := grantEndsUnder(base, c, g); why != "" {
			ends = append(ends, ending{g.ID, why})
		}
	}
	var asks []*Ask
	for _, a := range s.asks {
		if a.Status == StatusPending && grantEndsUnder(base, c, Grant{Host: a.Host, Scope: ScopeOnce}) != "" {
			asks = append(asks, a)
		}
	}
	s.mu.Unlock()
	for _, a := range asks {
		_, _ = s.Answer(a.ID, Answer{Approver: "policy", Detail: "the reloaded policy ends the ask"})
	}
	n := 0
	for _, e := range ends {
		if s.end(e.id, "revoke", "ended by policy reload: "+e.why) {
			n++
		}
	}
	return n
}

// grantEndsUnder says why g may not live under base (with approval settings c), or "".
func grantEndsUnder(base *policy.Policy, c policy.ApprovalConfig, g Grant) string {
	switch {
	case !base.Asks():
		return "the policy no longer asks"
	case base.NeverAsk(g.Host):
		return "the host is listed under spec.approval.never"
	case len(base.HostPorts(g.Host)) > 0:
		return "a rule names the host"
	case g.Scope == ScopeDuration && g.Until.Sub(g.Granted) > c.MaxGrant:
		return fmt.Sprintf("spec.approval.maxGrant is now %s", c.MaxGrant)
	case g.Scope == ScopeSandbox && !c.SandboxGrants:
		return "spec.approval.sandboxGrants is off"
	}
	return ""
}

// Sweep ends the grants and asks that expired by now, and writes the summary of misses not
// asked about when one is due. Run calls it; tests call it after moving their clock.
func (s *Stage) Sweep() {
	now := s.cfg.Now()
	s.mu.Lock()
	var expired []string
	for id, g := range s.grants {
		if !g.live(now) {
			expired = append(expired, id)
		}
	}
	var asks []Ask
	for id, a := range s.asks {
		if !now.Before(a.Expires) {
			delete(s.asks, id)
			if s.byKey[key{a.Host, a.Port, a.Identity}] == a {
				delete(s.byKey, key{a.Host, a.Port, a.Identity})
			}
			if a.Status == StatusPending {
				asks = append(asks, *a)
			}
		}
	}
	summary := s.summaryLocked(now, true)
	s.mu.Unlock()
	for _, a := range asks {
		s.metrics.open.Dec()
		s.metrics.expiries.Inc()
		s.auditAskExpired(a)
	}
	for _, id := range expired {
		s.end(id, "expire", "its time ended (a duration grant's, or a once grant's left unused for askTTL)")
	}
	s.logSummary(summary)
}

// nextDue is when Sweep has work next (zero: nothing).
func (s *Stage) nextDue() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	var next time.Time
	earlier := func(t time.Time) {
		if next.IsZero() || t.Before(next) {
			next = t
		}
	}
	for _, g := range s.grants {
		if !g.Until.IsZero() {
			earlier(g.Until)
		}
	}
	for _, a := range s.asks {
		earlier(a.Expires)
	}
	if s.dropped > 0 {
		earlier(s.lastSummary.Add(summaryInterval))
	}
	return next
}

// Run ends grants and asks as they expire until ctx ends. The timer runs on the wall
// clock; Config.Now only dates the events.
func (s *Stage) Run(ctx context.Context) {
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	for {
		s.Sweep()
		wait := time.Hour
		if next := s.nextDue(); !next.IsZero() {
			wait = max(next.Sub(s.cfg.Now()), 10*time.Millisecond)
		}
		t.Reset(wait)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-s.wake:
			if !t.Stop() {
				select {
				case <-t.C:
				default:
				}
			}
		}
	}
}

// summary is a summary event of misses not asked about.
type summary struct {
	count int64
	at    time.Time
}

// summaryLocked takes the misses not asked about into a summary when one is due (at most
// one per summaryInterval; flush: any left over).
func (s *Stage) summaryLocked(now time.Time, flush bool) summary {
	if s.dropped == 0 || (now.Sub(s.lastSummary) < summaryInterval && !flush) {
		return summary{}
	}
	if flush && now.Sub(s.lastSummary) < summaryInterval {
		return summary{}
	}
	out := summary{count: s.dropped, at: now}
	s.dropped, s.lastSummary = 0, now
	return out
}

// logSummary writes a summary event, if there is one.
func (s *Stage) logSummary(sm summary) {
	if sm.count > 0 {
		s.auditSummary(sm)
	}
}
