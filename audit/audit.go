// Package audit owns airlock's audit trail: the Event every enforcement point records (one per
// request, connection, DNS query or model call) and the Logger that writes events as JSON lines.
//
// An Event never carries a secret value: it holds names (rule, secret names), destinations and
// counts only. Every package that decides something (proxy, dnsfilter, llmproxy, ebpf) imports
// this one; audit imports nothing of ours.
package audit

import (
	"io"
	"os"
	"sync"
	"time"

	"github.com/sirupsen/logrus"
)

// Kind says which enforcement point produced an event.
type Kind string

// The kinds of the contract.
const (
	KindHTTP       Kind = "http"       // one HTTP request (absolute-form, or inside an intercepted tunnel)
	KindConnect    Kind = "connect"    // one CONNECT tunnel or transparent connection
	KindDNS        Kind = "dns"        // one DNS query
	KindLLM        Kind = "llm"        // one model call
	KindCredential Kind = "credential" // a credential injection, failure or misuse
	KindPolicy     Kind = "policy"     // a policy load or reload
)

// Decision values of the contract.
const (
	DecisionAllow  = "allow"
	DecisionDeny   = "deny"
	DecisionReport = "report" // report mode: allowed, but enforce would have denied
)

// Event is one audit record. Field names are the contract: scripts and SIEM rules rely on them.
// Zero-valued optional fields are left out of the JSON line.
type Event struct {
	// Time is when the decision was made; Logger.Log fills it when zero.
	Time time.Time
	// Sandbox is the sandbox name (airlock run --sandbox); Logger.Log fills it when empty.
	Sandbox string
	// Kind is the enforcement point.
	Kind Kind
	// Decision is "allow", "deny" or "report".
	Decision string
	// Rule is the policy rule that allowed (or came closest to) the request.
	Rule string
	// Reason is the policy reason code (e.g. "no_rule", "internal_address").
	Reason string
	// Detail is the human-readable reason.
	Detail string
	// Destination is host:port as the client asked for it.
	Destination string
	// Addr is the address actually dialled (ip:port), when one was.
	Addr string
	// Method and Path are set for HTTP events. Path excludes the query string.
	Method string
	Path   string
	// Status is the HTTP status returned to the client, when there is one.
	Status int
	// BytesUp and BytesDown count bytes sent upstream and returned to the client.
	BytesUp   int64
	BytesDown int64
	// Duration is how long the request or connection lasted.
	Duration time.Duration
	// Secrets names (never values) the credentials injected into the request.
	Secrets []string
	// Client is the sandbox-side address of the connection.
	Client string
	// Policy is the policy name in force.
	Policy string
	// Error describes a failure (resolve, dial, timeout) in words without secret values.
	Error string
}

// Logger writes events as JSON lines to stderr and optionally a file. It is safe for
// concurrent use. The zero value is not usable; call New.
type Logger struct {
	sandbox string
	now     func() time.Time

	// mu guards out, closers and the ring of recent events (recent, next, full).
	mu      sync.Mutex
	out     *logrus.Logger
	closers []io.Closer
	recent  []Event
	next    int
	full    bool
}

// Options configures a Logger. The zero value writes to stderr with sandbox name "".
type Options struct {
	// Sandbox is the name put in events that have none.
	Sandbox string
	// Writer receives the JSON lines; nil means os.Stderr.
	Writer io.Writer
	// File, when non-empty, is also appended to (created 0600 if missing).
	File string
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// Keep is how many recent events Recent returns (for the admin /v1/decisions endpoint);
	// 0 keeps none.
	Keep int
}

// New returns a Logger. It opens Options.File when set.
func New(o Options) (*Logger, error) {
	w := o.Writer
	if w == nil {
		w = os.Stderr
	}
	l := &Logger{sandbox: o.Sandbox, now: o.Now, recent: make([]Event, o.Keep)}
	if l.now == nil {
		l.now = time.Now
	}
	if o.File != "" {
		f, err := os.OpenFile(o.File, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
		if err != nil {
			return nil, err
		}
		l.closers = append(l.closers, f)
		w = io.MultiWriter(w, f)
	}
	out := logrus.New()
	out.SetOutput(w)
	out.SetLevel(logrus.InfoLevel)
	out.SetFormatter(&logrus.JSONFormatter{
		TimestampFormat:  time.RFC3339Nano,
		DisableTimestamp: true, // we put our own "time" field in, from the event
		// Our events carry their own "time"; logrus would rename it to "fields.time" if its
		// own (disabled) timestamp key were also "time".
		FieldMap: logrus.FieldMap{logrus.FieldKeyTime: "logrus_time"},
	})
	l.out = out
	return l, nil
}

// Discard returns a Logger that drops every event (for tests and tools that audit nothing).
func Discard() *Logger {
	l, _ := New(Options{Writer: io.Discard})
	return l
}

// Log records one event.
func (l *Logger) Log(e Event) {
	if e.Time.IsZero() {
		e.Time = l.now()
	}
	if e.Sandbox == "" {
		e.Sandbox = l.sandbox
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.out.WithFields(e.fields()).Info("audit")
	if len(l.recent) > 0 {
		l.recent[l.next] = e
		l.next = (l.next + 1) % len(l.recent)
		l.full = l.full || l.next == 0
	}
}

// Recent returns up to Options.Keep most recent events, newest first, as the JSON objects
// the audit log holds.
func (l *Logger) Recent() []map[string]any {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := l.next
	if l.full {
		n = len(l.recent)
	}
	out := make([]map[string]any, 0, n)
	for i := 1; i <= n; i++ {
		e := l.recent[(l.next-i+len(l.recent))%len(l.recent)]
		out = append(out, map[string]any(e.fields()))
	}
	return out
}

// Close closes the audit file, if any. It is idempotent.
func (l *Logger) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	var first error
	for _, c := range l.closers {
		if err := c.Close(); err != nil && first == nil {
			first = err
		}
	}
	l.closers = nil
	return first
}

// fields turns e into the JSON field set, leaving optional zero fields out.
func (e Event) fields() logrus.Fields {
	f := logrus.Fields{
		"time":     e.Time.UTC().Format(time.RFC3339Nano),
		"sandbox":  e.Sandbox,
		"kind":     string(e.Kind),
		"decision": e.Decision,
		"rule":     e.Rule,
	}
	put := func(k, v string) {
		if v != "" {
			f[k] = v
		}
	}
	put("reason", e.Reason)
	put("detail", e.Detail)
	put("destination", e.Destination)
	put("addr", e.Addr)
	put("method", e.Method)
	put("path", e.Path)
	put("client", e.Client)
	put("policy", e.Policy)
	put("error", e.Error)
	if e.Status != 0 {
		f["status"] = e.Status
	}
	f["bytes_up"] = e.BytesUp
	f["bytes_down"] = e.BytesDown
	if e.Duration != 0 {
		f["duration_ms"] = float64(e.Duration.Microseconds()) / 1000
	}
	if len(e.Secrets) > 0 {
		f["secrets"] = e.Secrets
	}
	f["would_deny"] = e.Decision == DecisionReport
	return f
}
