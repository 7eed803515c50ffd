package main

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/airlock-dev/airlock/approval"
	"github.com/airlock-dev/airlock/credentials"
	"github.com/airlock-dev/airlock/internal/cli"
	"github.com/airlock-dev/airlock/policy"
)

const policyUsage = `Usage: airlock policy <check|explain|test|placeholders|learn|replay> [flags] FILE...

  check FILE...                         load and validate policy files
  explain FILE --url URL [--method M]   show the decision for one request
  test FILE --cases CASES.yaml          run expected-decision cases against a policy
  placeholders FILE [--state-dir DIR]   print each secret's placeholder (for the sandbox)
  learn AUDIT... [--from P] [-o FILE]   write a candidate policy from recorded traffic
  replay AUDIT... --policy CANDIDATE    show what a candidate would allow or deny differently
`

func policyCmd(args []string, stdout, stderr io.Writer) error {
	return cli.Dispatch("policy", policyUsage, map[string]cli.RunFunc{
		"check": policyCheck, "explain": policyExplain, "test": policyTest,
		"placeholders": policyPlaceholders, "learn": policyLearn, "replay": policyReplay,
	}, args, stdout, stderr)
}

// loadErr turns a policy load error into an exit-1 error whose message is one
// "file:line:col: field: message" line per problem.
func loadErr(err error) error {
	return &cli.ExitError{Code: 1, Msg: strings.TrimSpace(err.Error())}
}

func policyCheck(args []string, stdout, stderr io.Writer) error {
	fs := cli.NewFlagSet("policy check", "airlock policy check FILE...", `
Load every FILE with the strict loader (unknown fields, wrong types, bad hosts, CIDRs and
ports, duplicate rule names, undefined secrets and extends that widen a parent are errors)
and print "FILE: ok" or each error as "file:line:col: field: message". Exits 1 if any
file has an error.`, stderr)
	files, err := fs.ParseArgs(args, stdout, false)
	if err != nil {
		return err
	}
	if len(files) == 0 {
		fs.Usage()
		return cli.ErrUsage
	}
	failed := 0
	for _, f := range files {
		p, err := policy.Load(f)
		if err != nil {
			failed++
			fmt.Fprintln(stderr, strings.TrimSpace(err.Error()))
			continue
		}
		fmt.Fprintf(stdout, "%s: ok (policy %q, mode %s, %d rules%s)\n", f, p.Name(), p.Mode(), len(p.Rules()), identitiesNote(p))
	}
	if failed > 0 {
		return &cli.ExitError{Code: 1}
	}
	return nil
}

func policyExplain(args []string, stdout, stderr io.Writer) error {
	fs := cli.NewFlagSet("policy explain", "airlock policy explain FILE --url URL [--method M] [--identity NAME] [--state-dir DIR] [--json]", `
Show the decision the policy makes for one request: allow or deny, the rule, the reason, whether
the connection would be TLS-intercepted, and the names (never the values) of the secrets that
would be injected. The decision is made on names; at run time every address the name resolves
to is checked as well (internal addresses are denied unless a rule names them by CIDR).
With --state-dir, the live grants of that sidecar (spec.approval) apply too, and a decision a
grant makes names it ("grant:ID"). With --identity, the request is decided with that identity's
policy (spec.identities), as for a process started by "sandbox exec --as NAME".`, stderr)
	rawURL := fs.String("url", "", "request URL, e.g. https://api.github.com/repos/acme/app (required)")
	method := fs.String("method", "GET", "HTTP method")
	asJSON := fs.Bool("json", false, "print the decision as JSON")
	stateDir := fs.String("state-dir", "", "a sidecar's state directory: decide with its live grants too")
	identity := fs.String("identity", "", "decide as this identity of spec.identities (default: the sandbox's own policy)")
	files, err := fs.ParseArgs(args, stdout, false)
	if err != nil {
		return err
	}
	if len(files) != 1 || *rawURL == "" {
		fs.Usage()
		return cli.ErrUsage
	}
	p, err := policy.Load(files[0])
	if err != nil {
		return loadErr(err)
	}
	if *stateDir != "" {
		gs, err := approval.ReadGrants(*stateDir, time.Now())
		if err != nil {
			return cli.Failf("%v", err)
		}
		p = p.WithGrants(approval.Rules(gs))
	}
	if *identity != "" {
		ip, ok := p.Identity(*identity)
		if !ok {
			return cli.Failf("--identity: %q is not an identity of policy %q (it has: %s)", *identity, p.Name(), identityList(p))
		}
		p = ip
	}
	ex, err := p.Explain(*rawURL, *method)
	if err != nil {
		return cli.Failf("--url: %v", err)
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(ex)
	}
	_, err = io.WriteString(stdout, ex.String())
	return err
}

const testCasesHelp = `
Run every case in CASES.yaml against FILE and print each failure with its line. Exits 1 if
any case fails. CASES.yaml is a list (or a map with a "cases" list) of:

  - name: github api read      # optional
    url: https://api.github.com/repos/acme/app
    method: GET                # optional, default GET
    expect: allow              # allow | deny (in report mode, "deny" matches would-deny)
    rule: github-api           # optional: the rule that must decide
    identity: reviewer         # optional: decide as this identity of spec.identities`

func policyTest(args []string, stdout, stderr io.Writer) error {
	fs := cli.NewFlagSet("policy test", "airlock policy test FILE --cases CASES.yaml", testCasesHelp, stderr)
	casesFile := fs.String("cases", "", "YAML file of expected decisions (required)")
	files, err := fs.ParseArgs(args, stdout, false)
	if err != nil {
		return err
	}
	if len(files) != 1 || *casesFile == "" {
		fs.Usage()
		return cli.ErrUsage
	}
	p, err := policy.Load(files[0])
	if err != nil {
		return loadErr(err)
	}
	cases, err := policy.LoadTestCases(*casesFile)
	if err != nil {
		return cli.Failf("%v", err)
	}
	failed := 0
	for _, tc := range cases {
		if msg := p.Check(tc); msg != "" {
			failed++
			fmt.Fprintf(stdout, "FAIL %s:%d: %s\n", *casesFile, tc.Line, msg)
		}
	}
	fmt.Fprintf(stdout, "%d passed, %d failed\n", len(cases)-failed, failed)
	if failed > 0 {
		return &cli.ExitError{Code: 1}
	}
	return nil
}

// policyPlaceholders is `airlock policy placeholders`.
func policyPlaceholders(args []string, stdout, stderr io.Writer) error {
	fs := cli.NewFlagSet("policy placeholders", "airlock policy placeholders FILE [--state-dir DIR] [--json]", `
Print the placeholder of every secret of the policy: an opaque string a sandbox may hold
instead of the secret (for tools that insist on a token in an environment variable). airlock
run swaps it for the value only in requests the rule binds the secret to; anywhere else the
request is denied. Placeholders depend on the key in --state-dir (placeholder.key, made on
first use): give the same --state-dir as airlock run. They are not secret. airlock run also
writes them to placeholders.json in the state directory, at start and on each policy reload.`, stderr)
	stateDir := fs.String("state-dir", cli.DefaultStateDir(), "state directory of the airlock run that will serve the sandbox")
	asJSON := fs.Bool("json", false, "print a JSON object {name: placeholder}")
	files, err := fs.ParseArgs(args, stdout, true)
	if err != nil {
		return err
	}
	if len(files) != 1 {
		fs.Usage()
		return cli.ErrUsage
	}
	p, err := policy.Load(files[0])
	if err != nil {
		return loadErr(err)
	}
	ph, err := credentials.LoadPlaceholders(*stateDir)
	if err != nil {
		return cli.Failf("--state-dir: %v", err)
	}
	out := ph.ForPolicy(p)
	names := slices.Sorted(maps.Keys(out))
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(out)
	}
	for _, n := range names {
		fmt.Fprintf(stdout, "%s\t%s\n", n, out[n])
	}
	return nil
}

// identityList names a policy's identities for an error message.
func identityList(p *policy.Policy) string {
	if names := p.IdentityNames(); len(names) > 0 {
		return strings.Join(names, ", ")
	}
	return "no spec.identities"
}

// identitiesNote is ", identities a, b" for policy check's line, "" without identities.
func identitiesNote(p *policy.Policy) string {
	if names := p.IdentityNames(); len(names) > 0 {
		return ", identities " + strings.Join(names, ", ")
	}
	return ""
}
