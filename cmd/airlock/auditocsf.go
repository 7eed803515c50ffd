package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/airlock-dev/airlock/audit/ocsf"
	"github.com/airlock-dev/airlock/internal/cli"
)

const ocsfLong = `
Render native audit lines (an --audit-log file, its sealed parts, a shipped segment, or the
sidecar's stderr; "-" or no FILE is stdin) as OCSF ` + ocsf.SchemaVersion + ` events, one JSON object a line,
for log shippers and SIEMs: HTTP requests and model calls as HTTP Activity (4002), tunnels
and connections as Network Activity (4001), DNS queries as DNS Activity (4003). Each carries
the native seq, prev and hash, rule, reason and remedy under unmapped.airlock. Credential,
policy and audit-log events, decision-phase lines and non-audit lines are not rendered
(docs/audit.md, "OCSF"). The native log stays the record: verify it, not this.`

func auditOCSF(args []string, stdout, stderr io.Writer) error {
	fs := cli.NewFlagSet("audit ocsf", "airlock audit ocsf [FILE...]", ocsfLong, stderr)
	files, err := fs.ParseArgs(args, stdout, false)
	if err != nil {
		return err
	}
	if len(files) == 0 {
		files = []string{"-"}
	}
	w := bufio.NewWriter(stdout)
	defer w.Flush()
	for _, name := range files {
		if err := renderOCSF(name, w); err != nil {
			return cli.Failf("%v", err)
		}
	}
	return w.Flush()
}

// renderOCSF renders every line of one file.
func renderOCSF(name string, w io.Writer) error {
	var r io.Reader = os.Stdin
	if name != "-" {
		f, err := os.Open(name)
		if err != nil {
			return err
		}
		defer f.Close()
		r = f
	}
	br := bufio.NewReaderSize(r, 64<<10)
	for n := 1; ; n++ {
		line, rerr := br.ReadBytes('\n')
		if rerr != nil && !errors.Is(rerr, io.EOF) {
			return fmt.Errorf("read %s: %w", name, rerr)
		}
		if len(line) > 0 && line[0] == '{' {
			out, err := ocsf.Render(line, cli.VersionString())
			switch {
			case errors.Is(err, ocsf.ErrSkipped):
			case err != nil:
				return fmt.Errorf("%s:%d: %w", name, n, err)
			default:
				if _, err := w.Write(append(out, '\n')); err != nil {
					return err
				}
			}
		}
		if rerr != nil {
			return nil
		}
	}
}
