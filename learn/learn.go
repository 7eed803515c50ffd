package learn

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/policy"
)

// ErrNothingLearned is returned by Learn with a parent when no traffic the parent allows was
// seen: a child without egress rules inherits every rule of its parents, which is wider than
// anything recorded, so no candidate is written.
var ErrNothingLearned = errors.New("no recorded traffic the parent allows")

// Options configures Learn. The zero value learns a standalone policy named "learned".
type Options struct {
	// Name is the candidate's metadata.name. Empty means "learned".
	Name string
	// Parent, when set, is the policy the candidate extends (and so only narrows): requests
	// it denies are listed in comments, never made rules. Nil means no extends.
	Parent *policy.Policy
	// ParentRef is how the candidate names Parent in spec.extends: a built-in profile name,
	// or a file path relative to the candidate's own file ("./base.yaml"). Required with
	// Parent.
	ParentRef string
	// Filename is where the candidate will be written; Learn loads the candidate under this
	// name to check it (a file parent is resolved from its directory). Empty means
	// "learned.yaml" in the working directory.
	Filename string
	// Sources names the audit logs read, for the candidate's header comment. Empty is fine.
	Sources []string
	// Report, when set, receives one line for each host or request left out of the
	// candidate, and why (the candidate lists them in comments too). Nil means none.
	Report io.Writer
}

// nameRE is what metadata.name accepts (the loader checks it again).
var nameRE = regexp.MustCompile(`^[a-z0-9]([a-z0-9.-]*[a-z0-9])?$`)

// stats counts the events behind something, and when they were seen.
type stats struct {
	count       int
	first, last time.Time
}

// add counts n events seen at at.
func (s *stats) add(at time.Time, n int) {
	s.count += n
	if !at.IsZero() && (s.first.IsZero() || at.Before(s.first)) {
		s.first = at
	}
	if at.After(s.last) {
		s.last = at
	}
}

func (s *stats) merge(o stats) {
	s.count += o.count
	if !o.first.IsZero() && (s.first.IsZero() || o.first.Before(s.first)) {
		s.first = o.first
	}
	if o.last.After(s.last) {
		s.last = o.last
	}
}

// String says "3 events, first 2026-11-23T20:00:00Z, last 2026-11-23T20:05:00Z".
func (s stats) String() string {
	noun := "events"
	if s.count == 1 {
		noun = "event"
	}
	switch {
	case s.first.IsZero():
		return fmt.Sprintf("%d %s", s.count, noun)
	case s.first.Equal(s.last):
		return fmt.Sprintf("%d %s, at %s", s.count, noun, s.first.UTC().Format(time.RFC3339))
	}
	return fmt.Sprintf("%d %s, first %s, last %s", s.count, noun,
		s.first.UTC().Format(time.RFC3339), s.last.UTC().Format(time.RFC3339))
}

// hostTraffic is what was seen of one destination host.
type hostTraffic struct {
	host        policy.Host
	all         stats
	ports       map[int]bool
	passthrough int                          // tunnels whose requests were not seen
	leftOut     int                          // requests seen but left out (inexpressible)
	tunnels     int                          // connect events
	requests    map[string]map[string]*stats // method → normalised path → stats
	grants      []string                     // the operator's grants of the host (approval events), for comments
	parentRule  string                       // the parent rule that allowed the connection, if any
}

// note is one line of a comment section: a destination (and maybe a request) and why.
type note struct {
	key   string // what was seen, e.g. "metadata.test:8080" or "POST evil.test:443 /x"
	why   string
	stats stats
}

// learner accumulates the trail.
type learner struct {
	opt       Options
	hosts     map[string]*hostTraffic
	leftOut   map[string]*note
	parentNo  map[string]*note
	dnsOnly   map[string]*stats
	ignored   map[audit.Kind]int
	all       stats
	intercept map[string]bool // client + " " + destination of http events
}

// Learn builds a candidate policy from a recorded trail and returns it as YAML with comments. The
// candidate loads with the strict loader (Learn checks it under Options.Filename). It
// returns ErrNothingLearned (with a parent), or an error when the candidate does not load,
// which is a bug.
func Learn(trail []Recorded, opt Options) ([]byte, error) {
	if opt.Name == "" {
		opt.Name = "learned"
	}
	if opt.Filename == "" {
		opt.Filename = "learned.yaml"
	}
	if !nameRE.MatchString(opt.Name) {
		return nil, fmt.Errorf("learn: invalid policy name %q; use lower-case letters, digits, \"-\" and \".\", e.g. \"learned\"", opt.Name)
	}
	if opt.Parent != nil && opt.ParentRef == "" {
		return nil, errors.New("learn: Options.ParentRef is required with a parent")
	}
	l := &learner{opt: opt, hosts: map[string]*hostTraffic{}, leftOut: map[string]*note{},
		parentNo: map[string]*note{}, dnsOnly: map[string]*stats{}, ignored: map[audit.Kind]int{},
		intercept: map[string]bool{}}
	for _, r := range trail {
		if e := r.Event; e.Kind == audit.KindHTTP && e.Client != "" {
			l.intercept[e.Client+" "+e.Destination] = true
		}
	}
	for _, r := range trail {
		l.observe(r.Event)
	}
	for name := range l.dnsOnly {
		if _, ok := l.hosts[name]; ok {
			delete(l.dnsOnly, name)
		}
	}
	return l.candidate()
}

// observe takes one event into account.
func (l *learner) observe(e audit.Event) {
	switch e.Kind {
	case audit.KindHTTP, audit.KindConnect:
	case audit.KindDNS:
		l.all.add(e.Time, weight(e))
		l.observeDNS(e)
		return
	case audit.KindApproval:
		l.observeGrant(e)
		return
	default:
		l.ignored[e.Kind]++
		return
	}
	l.all.add(e.Time, weight(e))
	h, port, why := classify(e)
	if why != "" {
		l.noteOut(l.leftOut, e.Destination, why, e)
		return
	}
	if l.opt.Parent != nil {
		if d := l.parentDecision(e, h, port); !d.Allowed() || d.WouldDeny {
			key := e.Destination
			if e.Kind == audit.KindHTTP {
				key = fmt.Sprintf("%s %s%s", e.Method, e.Destination, e.Path)
			}
			l.noteOut(l.parentNo, key, fmt.Sprintf("%s: %s", d.Reason, d.Detail), e)
			return
		} else if e.Kind == audit.KindConnect {
			l.host(h).parentRule = d.Rule
		}
	}
	t := l.host(h)
	t.all.add(e.Time, weight(e))
	t.ports[port] = true
	if e.Kind == audit.KindConnect {
		t.tunnels += weight(e)
		if e.Client == "" || !l.intercept[e.Client+" "+e.Destination] {
			t.passthrough += weight(e)
		}
		return
	}
	method := strings.ToUpper(e.Method)
	path, why := expressible(method, e.Path)
	if why != "" {
		// Fail narrow: the request is left out, so the host's rules (which it then does
		// not match) deny it; it is never a reason to drop the host's method and path rules.
		t.leftOut += weight(e)
		l.noteOut(l.leftOut, fmt.Sprintf("%s %s%s", e.Method, e.Destination, e.Path), why+"; the candidate denies it", e)
		return
	}
	byPath := t.requests[method]
	if byPath == nil {
		byPath = map[string]*stats{}
		t.requests[method] = byPath
	}
	if byPath[path] == nil {
		byPath[path] = &stats{}
	}
	byPath[path].add(e.Time, weight(e))
}

// expressible returns the normalised path of a request an L7 rule can name exactly, or why
// it cannot: a method the policy cannot list, a path it cannot normalise, or a path holding
// what a pattern cannot say literally ("*" is a glob; "%", "?" and "#" cannot be written).
func expressible(method, rawPath string) (string, string) {
	if !slices.Contains(knownMethods, method) {
		return "", fmt.Sprintf("method %q cannot be named in an L7 rule", method)
	}
	path, err := policy.NormalizePath(rawPath)
	if err != nil {
		return "", fmt.Sprintf("the path cannot be normalised (%v)", err)
	}
	if i := strings.IndexAny(path, "*%?#"); i >= 0 {
		return "", fmt.Sprintf("the path holds %q, which a path pattern cannot match literally", path[i:i+1])
	}
	return path, ""
}

// host returns the traffic record of h, creating it.
func (l *learner) host(h policy.Host) *hostTraffic {
	t := l.hosts[h.Name]
	if t == nil {
		t = &hostTraffic{host: h, ports: map[int]bool{}, requests: map[string]map[string]*stats{}}
		l.hosts[h.Name] = t
	}
	return t
}

// noteOut records that e (key) was left out of the candidate, and why.
func (l *learner) noteOut(m map[string]*note, key, why string, e audit.Event) {
	n := m[key+"\x00"+why]
	if n == nil {
		n = &note{key: key, why: why}
		m[key+"\x00"+why] = n
	}
	n.stats.add(e.Time, weight(e))
}

// observeDNS records a name the sandbox looked up (kept only if no connection to it shows).
func (l *learner) observeDNS(e audit.Event) {
	name := e.Destination
	if host, _, err := net.SplitHostPort(name); err == nil {
		name = host
	}
	h, err := policy.NormalizeHost(name)
	if err != nil || internalName(h.Name) != "" {
		return
	}
	s := l.dnsOnly[h.Name]
	if s == nil {
		s = &stats{}
		l.dnsOnly[h.Name] = s
	}
	s.add(e.Time, weight(e))
}

// grantDecision is the decision value of an approval event that granted an ask (package
// approval's EventGrant; learn reads the trail, not that package).
const grantDecision = "grant"

// observeGrant takes an operator's grant (an approval event "host:port[,port]") as a
// connection to the host on its ports, so that an approval becomes a reviewed rule of the
// candidate instead of a standing exception. Other approval events are ignored.
func (l *learner) observeGrant(e audit.Event) {
	if e.Decision != grantDecision {
		l.ignored[e.Kind]++
		return
	}
	host, ports, ok := strings.Cut(e.Destination, ":")
	for _, p := range strings.Split(ports, ",") {
		if !ok {
			break
		}
		one := e
		one.Kind, one.Decision, one.Destination = audit.KindConnect, audit.DecisionAllow, net.JoinHostPort(host, p)
		h, port, why := classify(one)
		if why != "" {
			l.noteOut(l.leftOut, one.Destination, why, e)
			continue
		}
		if l.opt.Parent != nil {
			if d := l.parentDecision(one, h, port); !d.Allowed() || d.WouldDeny {
				l.noteOut(l.parentNo, one.Destination, fmt.Sprintf("granted by the operator, but %s: %s", d.Reason, d.Detail), e)
				continue
			}
		}
		t := l.host(h)
		t.ports[port] = true
		t.all.add(e.Time, 1)
		if note := fmt.Sprintf("granted by the operator (%s; %s)", e.RequestID, e.Detail); !slices.Contains(t.grants, note) {
			t.grants = append(t.grants, note)
		}
	}
	if !ok {
		l.noteOut(l.leftOut, e.Destination, "the grant's destination is not host:ports", e)
	}
}

// parentDecision decides e under the parent as enforce would.
func (l *learner) parentDecision(e audit.Event, h policy.Host, port int) policy.Decision {
	req := policy.Request{Host: h.Name, Port: port}
	if e.Kind == audit.KindHTTP {
		req.Method, req.Path = e.Method, e.Path
	}
	return l.opt.Parent.Decide(req)
}

// ruleReasons are the deny reasons a rule can lift: the request was denied because no rule
// allowed it. Any other deny reason (a mismatch, a misplaced credential) is not a missing rule.
var ruleReasons = []policy.Reason{policy.ReasonNoRule, policy.ReasonPortNotAllowed,
	policy.ReasonMethodNotAllowed, policy.ReasonPathNotAllowed, policy.ReasonTCPOnly, policy.ReasonOffline}

// classify parses e's destination and says why it can never become a rule ("" when it can).
func classify(e audit.Event) (policy.Host, int, string) {
	hostStr, portStr, err := net.SplitHostPort(e.Destination)
	if err != nil {
		return policy.Host{}, 0, "the destination is not host:port"
	}
	port, err := strconv.Atoi(portStr)
	if err != nil || port < 1 || port > 65535 {
		return policy.Host{}, 0, "the destination's port is not valid"
	}
	h, err := policy.NormalizeHost(hostStr)
	if err != nil {
		return h, port, "the host is not a valid name or address"
	}
	if e.Decision == audit.DecisionDeny && !slices.Contains(ruleReasons, policy.Reason(e.Reason)) {
		if e.Reason == string(policy.ReasonInternalAddress) {
			return h, port, "it resolved to an internal address: " + e.Detail
		}
		return h, port, fmt.Sprintf("denied for %s, which no rule can allow", e.Reason)
	}
	if h.IsIP() {
		if c := policy.ClassifyAddr(h.Addr.Unmap()); c != policy.AddrPublic {
			return h, port, fmt.Sprintf("address %s is %s; internal addresses need a cidrs rule written by hand", h.Name, c)
		}
	} else if why := internalName(h.Name); why != "" {
		return h, port, why
	}
	if ap, err := netip.ParseAddrPort(e.Addr); err == nil {
		if c := policy.ClassifyAddr(ap.Addr().Unmap()); c != policy.AddrPublic {
			return h, port, fmt.Sprintf("it was dialled at %s, %s; internal addresses need a cidrs rule written by hand", ap.Addr(), c)
		}
	}
	return h, port, ""
}

// internalName says why a host name only exists inside a machine, cluster or cloud ("" if
// it does not look like one): such names reach metadata services and internal APIs.
func internalName(name string) string {
	switch {
	case name == "localhost" || strings.HasSuffix(name, ".localhost"):
		return "a loopback name (the sidecar's own listeners are reached without a rule)"
	case name == "metadata" || name == "metadata.google.internal" || name == "instance-data":
		return "a cloud metadata service name"
	case strings.HasSuffix(name, ".internal"), strings.HasSuffix(name, ".local"),
		strings.HasSuffix(name, ".svc"), strings.HasSuffix(name, ".cluster.local"),
		!strings.Contains(name, "."):
		return "a name internal to the machine, cluster or cloud"
	}
	return ""
}
