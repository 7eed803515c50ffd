package learn

import (
	"fmt"
	"io"

	"github.com/airlock-dev/airlock/audit"
)

// ReadTrail reads an audit trail (an --audit-log file, or the sidecar's stderr, where audit
// lines sit among log lines) named name, and returns its events with where each was read
// ("name:line"). Errors name the file and line (audit.Read).
func ReadTrail(r io.Reader, name string) ([]Recorded, error) {
	var out []Recorded
	err := audit.Read(r, name, func(e audit.Event, line int) error {
		out = append(out, Recorded{Event: e, Source: fmt.Sprintf("%s:%d", name, line)})
		return nil
	})
	return out, err
}
