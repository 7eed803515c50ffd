package approval

import (
	"fmt"
	"time"
)

// Scope is how long a grant serves.
type Scope string

// The scopes of a grant.
const (
	// ScopeOnce serves one request or tunnel (on the transparent path: the DNS answer and
	// the first connection). The default of `airlock approvals grant`.
	ScopeOnce Scope = "once"
	// ScopeDuration serves until Grant.Until, at most spec.approval.maxGrant after the grant.
	ScopeDuration Scope = "duration"
	// ScopeSandbox serves for the sandbox's life (spec.approval.sandboxGrants).
	ScopeSandbox Scope = "sandbox"
)

// Status is where an ask stands.
type Status string

// The statuses of an ask.
const (
	StatusPending Status = "pending"
	StatusGranted Status = "granted"
	StatusDenied  Status = "denied"
)

// Ask is one question to the operator: may the sandbox reach Host on Port? Port 0 is a DNS
// ask, which a grant answers with ports 80 and 443.
type Ask struct {
	ID      string    `json:"id"`
	Sandbox string    `json:"sandbox"`
	Policy  string    `json:"policy"`
	Host    string    `json:"host"`
	Port    int       `json:"port"`
	Via     string    `json:"via"` // http, connect, transparent or dns
	Method  string    `json:"method,omitempty"`
	Path    string    `json:"path,omitempty"`
	Created time.Time `json:"created"`
	Expires time.Time `json:"expires"`
	Status  Status    `json:"status"`
	// Misses counts the requests this ask stands for (repeats share one ask).
	Misses   int64  `json:"misses"`
	Approver string `json:"approver,omitempty"`
	Detail   string `json:"detail,omitempty"` // why it was denied, for the audit event and list

	// Identity is the identity (spec.identities) whose request missed; empty for the
	// sandbox's own. Its grant serves that identity only.
	Identity string `json:"identity,omitempty"`

	done chan struct{} // closed once answered
}

// Ports are the ports a grant of the ask covers: the port asked, or 80 and 443 for a DNS ask.
func (a *Ask) Ports() []int {
	if a.Port == 0 {
		return []int{80, 443}
	}
	return []int{a.Port}
}

// Destination is host:port as audit events write it ("host:80,443" for a DNS ask).
func (a *Ask) Destination() string { return destination(a.Host, a.Ports()) }

func destination(host string, ports []int) string {
	s := fmt.Sprint(ports[0])
	for _, p := range ports[1:] {
		s += fmt.Sprintf(",%d", p)
	}
	return host + ":" + s
}

// Grant is an answered ask that lets the sandbox reach Host on Ports. Its ID is the ask's.
type Grant struct {
	ID      string    `json:"id"`
	Sandbox string    `json:"sandbox"`
	Policy  string    `json:"policy"`
	Host    string    `json:"host"`
	Ports   []int     `json:"ports"`
	Scope   Scope     `json:"scope"`
	Granted time.Time `json:"granted"`
	// Until ends a ScopeDuration grant, and a ScopeOnce grant never used (askTTL after it
	// was granted). Zero for ScopeSandbox.
	Until    time.Time `json:"until,omitzero"`
	Approver string    `json:"approver"`

	// Identity is the identity (spec.identities) the grant serves; empty for the sandbox's
	// own policy. A grant never serves another identity.
	Identity string `json:"identity,omitempty"`
}

// live reports whether g still serves at now.
func (g Grant) live(now time.Time) bool {
	return g.Until.IsZero() || now.Before(g.Until)
}

// Answer is an approver's answer to an ask.
type Answer struct {
	// Grant is true for a grant, false for a denial.
	Grant bool
	// Scope is the grant's scope; empty means ScopeOnce.
	Scope Scope
	// For is the duration of a ScopeDuration grant.
	For time.Duration
	// Approver names who answered: "uid:1000" (the CLI's peer) or "webhook:NAME".
	Approver string
	// Detail says why, for a denial (the webhook's failure when it fails closed).
	Detail string
}
