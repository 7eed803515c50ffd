package learn

import (
	"fmt"
	"io"

	"github.com/airlock-dev/airlock/audit"
)

// ReadTrail reads an audit trail (an --audit-log file, or the sidecar's stderr, where audit
// lines sit among log lines) named name, and returns its events with where each was read
// ("name:line"). Errors name the file and line (audit.Read, which reads each request once:
// decision-phase events are skipped for the canonical event that follows them).
func ReadTrail(r io.Reader, name string) ([]Recorded, error) {
	var out []Recorded
	err := audit.Read(r, name, func(e audit.Event, line int) error {
		out = append(out, Recorded{Event: e, Source: fmt.Sprintf("%s:%d", name, line)})
		return nil
	})
	return out, err
}

// weight is how many events e stands for: a flood summary's count (audit.Event.Count), else 1.
func weight(e audit.Event) int {
	return max(int(e.Count), 1)
}
