package audit

// Sink is where enforcement points send their audit events. Every caller (proxy, dnsfilter,
// llmproxy, credentials, the sidecar's wiring) takes a Sink, never a concrete *Logger, so
// that durability (a write-ahead file, a remote collector) and signing can be added behind
// it without touching them.
//
// Implementations must be safe for concurrent use and must never drop an event silently:
// one that cannot be written is reported by Health.
type Sink interface {
	// Log records one event; it may block while the sink is backed up, but not on the
	// disk for every event.
	Log(Event)
	// Health reports whether events are reaching their destination: nil when they are, the
	// first write failure otherwise (for a readiness check).
	Health() error
}

// Interface guard.
var _ Sink = (*Logger)(nil)

// Committer is a Sink that can write an event before its caller answers: Commit returns once
// the event's write is done, CommitDenial once an event covering the denial (itself, or a
// flood summary counting it) is. *Logger is one.
type Committer interface {
	Sink
	Commit(Event) error
	CommitDenial(Event) error
}

// Interface guard.
var _ Committer = (*Logger)(nil)

// Commit writes e through s and returns once it is written when s is a Committer; any other
// Sink logs it and returns s.Health(), so that a caller fails closed on a broken log either way.
func Commit(s Sink, e Event) error {
	if c, ok := s.(Committer); ok {
		return c.Commit(e)
	}
	s.Log(e)
	return s.Health()
}

// CommitDenial is Commit for a denial, which a Committer may fold into a flood summary.
func CommitDenial(s Sink, e Event) error {
	if c, ok := s.(Committer); ok {
		return c.CommitDenial(e)
	}
	s.Log(e)
	return s.Health()
}
