package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/airlock-dev/airlock/internal/cli"
	"github.com/airlock-dev/airlock/learn"
	"github.com/airlock-dev/airlock/policy"
)

const learnHelp = `
Read audit logs (an --audit-log file, or the sidecar's stderr; "-" is stdin) and write a
candidate policy: one rule per destination host seen, with the ports seen and, where the
requests were seen (plain http://, or TLS tunnels the sidecar intercepted), the methods and
path patterns seen. Ids, hashes, UUIDs, numbers and versions in paths become "*". Every rule
carries comments with its counts and first and last time seen. Record with a report-mode
policy (spec.mode: report); add spec.report.interceptAll: true to learn methods and paths of
HTTPS traffic too (the sandbox must then trust the sidecar CA: airlock ca export).

It never writes a rule for an internal, loopback, link-local (metadata) or sidecar address,
or for a request denied for a reason no rule can lift; it lists those, and names seen only
in DNS, as comments at the end. With --from, the candidate extends that policy (a built-in
profile or a file) and only narrows it: what the parent denies is listed, never a rule.
It fails narrow: a request no rule can name exactly (a method an L7 rule cannot list, a
path that does not normalise or that holds "*", "%", "?" or "#") is left out, so the
candidate denies it; every host or request left out is listed on stderr too.
The candidate loads with the strict loader; check it with airlock policy replay.`

func policyLearn(args []string, stdout, stderr io.Writer) error {
	fs := cli.NewFlagSet("policy learn", "airlock policy learn AUDIT... [--from POLICY] [-o FILE] [--name NAME]", learnHelp, stderr)
	from := fs.String("from", "", "parent policy the candidate extends: a built-in profile or a policy file")
	out := fs.String("o", "", "write the candidate to `FILE` (default: stdout)")
	name := fs.String("name", "learned", "the candidate's metadata.name")
	files, err := fs.ParseArgs(args, stdout, false)
	if err != nil {
		return err
	}
	if len(files) == 0 {
		fs.Usage()
		return cli.ErrUsage
	}
	opt := learn.Options{Name: *name, Filename: *out, Sources: files, Report: stderr}
	if opt.Filename == "" {
		opt.Filename = "learned.yaml" // relative paths resolve from the working directory
	}
	if *from != "" {
		if opt.Parent, opt.ParentRef, err = loadParent(*from, opt.Filename); err != nil {
			return err
		}
	}
	trail, err := readTrails(files)
	if err != nil {
		return cli.Failf("%v", err)
	}
	data, err := learn.Learn(trail, opt)
	if err != nil {
		return cli.Failf("%v", err)
	}
	if *out == "" {
		_, err = stdout.Write(data)
		return err
	}
	if err := os.WriteFile(*out, data, 0o644); err != nil {
		return cli.Failf("write candidate: %v", err)
	}
	fmt.Fprintf(stderr, "wrote %s from %d events\n", *out, len(trail))
	return nil
}

// loadParent loads --from: a built-in profile by name, else a policy file, which the
// candidate (written to out) then names by a path relative to its own directory.
func loadParent(from, out string) (*policy.Policy, string, error) {
	if slices.Contains(policy.BuiltinNames(), from) {
		p, err := policy.Builtin(from)
		if err != nil {
			return nil, "", cli.Failf("--from: %v", err)
		}
		return p, from, nil
	}
	p, err := policy.Load(from)
	if err != nil {
		return nil, "", loadErr(err)
	}
	absFrom, err1 := filepath.Abs(from)
	absDir, err2 := filepath.Abs(filepath.Dir(out))
	if err := errors.Join(err1, err2); err != nil {
		return nil, "", cli.Failf("--from: %v", err)
	}
	ref, err := filepath.Rel(absDir, absFrom)
	if err != nil {
		return p, absFrom, nil
	}
	if !strings.HasPrefix(ref, "..") {
		ref = "./" + ref
	}
	return p, ref, nil
}

// readTrails reads each audit log in turn ("-" is stdin).
func readTrails(files []string) ([]learn.Recorded, error) {
	var all []learn.Recorded
	for _, f := range files {
		var r io.Reader = os.Stdin
		if f != "-" {
			fh, err := os.Open(f)
			if err != nil {
				return nil, fmt.Errorf("open audit log: %w", err)
			}
			defer fh.Close()
			r = fh
		}
		trail, err := learn.ReadTrail(r, f)
		if err != nil {
			return nil, err
		}
		all = append(all, trail...)
	}
	return all, nil
}

const replayHelp = `
Decide every recorded request of the audit logs again under the candidate policy, as
enforce mode would, and print what flips: allow → deny (it went through when recorded, a
"report" decision included, and the candidate denies it) and deny → allow, with counts per
rule and destination and every flipped request with the file and line it was read from.
Tunnels that were not intercepted when recorded, which a candidate would intercept to decide
by method and path, are "undecidable" and listed on their own. DNS queries are replayed by
name. Denials for reasons no rule decides (a Host/SNI mismatch, a misplaced credential) stay
denials.

Exits 1 when an event of a change named by --fail-on was found (default: allow-to-deny),
2 on bad usage.`

func policyReplay(args []string, stdout, stderr io.Writer) error {
	fs := cli.NewFlagSet("policy replay", "airlock policy replay AUDIT... --policy CANDIDATE [--json] [--fail-on LIST]", replayHelp, stderr)
	candFile := fs.String("policy", "", "the candidate policy `FILE` (required)")
	asJSON := fs.Bool("json", false, "print the report as JSON")
	failOn := fs.String("fail-on", string(learn.AllowToDeny), "comma-separated changes that make the exit status 1: allow-to-deny, deny-to-allow, undecidable, any or none")
	files, err := fs.ParseArgs(args, stdout, false)
	if err != nil {
		return err
	}
	if len(files) == 0 || *candFile == "" {
		fs.Usage()
		return cli.ErrUsage
	}
	fail, err := parseFailOn(*failOn)
	if err != nil {
		return cli.Failf("--fail-on: %v", err)
	}
	cand, err := policy.Load(*candFile)
	if err != nil {
		return loadErr(err)
	}
	recs, err := readTrails(files)
	if err != nil {
		return cli.Failf("%v", err)
	}
	rep := learn.Replay(recs, cand)
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		err = enc.Encode(rep)
	} else {
		err = rep.WriteText(stdout)
	}
	if err != nil {
		return err
	}
	if rep.Fails(fail) {
		return &cli.ExitError{Code: 1}
	}
	return nil
}

// parseFailOn reads --fail-on.
func parseFailOn(s string) ([]learn.Change, error) {
	all := []learn.Change{learn.AllowToDeny, learn.DenyToAllow, learn.Undecidable}
	var out []learn.Change
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		switch c := learn.Change(f); {
		case f == "any":
			out = append(out, all...)
		case f == "none" || f == "":
		case slices.Contains(all, c):
			out = append(out, c)
		default:
			return nil, fmt.Errorf("unknown change %q; use allow-to-deny, deny-to-allow, undecidable, any or none", f)
		}
	}
	return out, nil
}
