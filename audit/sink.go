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
