package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"

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
	return dispatch("policy", policyUsage, map[string]runFunc{
		"check": policyCheck, "explain": policyExplain, "test": policyTest,
		"placeholders": policyPlaceholders, "learn": policyLearn, "replay": policyReplay,
	}, args, stdout, stderr)
}

// loadErr turns a policy load error into an exit-1 error whose message is one
// "file:line:col: field: message" line per problem.
func loadErr(err error) error {
	return &exitError{code: 1, msg: strings.TrimSpace(err.Error())}
}

func policyCheck(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("policy check", "airlock policy check FILE...", `
Load every FILE with the strict loader (unknown fields, wrong types, bad hosts, CIDRs and
ports, duplicate rule names, undefined secrets and extends that widen a parent are errors)
and print "FILE: ok" or each error as "file:line:col: field: message". Exits 1 if any
file has an error.`, stderr)
	files, err := fs.parse(args, stdout, false)
	if err != nil {
		return err
	}
	if len(files) == 0 {
		fs.Usage()
		return errUsage
	}
	failed := 0
	for _, f := range files {
		p, err := policy.Load(f)
		if err != nil {
			failed++
			fmt.Fprintln(stderr, strings.TrimSpace(err.Error()))
			continue
		}
		fmt.Fprintf(stdout, "%s: ok (policy %q, mode %s, %d rules)\n", f, p.Name(), p.Mode(), len(p.Rules()))
	}
	if failed > 0 {
		return &exitError{code: 1}
	}
	return nil
}

// explanation is the --json output of policy explain; names only, never secret values.
type explanation struct {
	URL       string   `json:"url"`
	Method    string   `json:"method"`
	Decision  string   `json:"decision"`
	WouldDeny bool     `json:"would_deny"`
	Rule      string   `json:"rule"`
	Reason    string   `json:"reason"`
	Detail    string   `json:"detail"`
	Host      string   `json:"host"`
	Port      int      `json:"port"`
	Intercept bool     `json:"intercept"`
	Secrets   []string `json:"secrets"`
}

func policyExplain(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("policy explain", "airlock policy explain FILE --url URL [--method M] [--json]", `
Show the decision the policy makes for one request: allow or deny, the rule, the reason, whether
the connection would be TLS-intercepted, and the names (never the values) of the secrets that
would be injected. The decision is made on names; at run time every address the name resolves
to is checked as well (internal addresses are denied unless a rule names them by CIDR).`, stderr)
	rawURL := fs.String("url", "", "request URL, e.g. https://api.github.com/repos/acme/app (required)")
	method := fs.String("method", "GET", "HTTP method")
	asJSON := fs.Bool("json", false, "print the decision as JSON")
	files, err := fs.parse(args, stdout, false)
	if err != nil {
		return err
	}
	if len(files) != 1 || *rawURL == "" {
		fs.Usage()
		return errUsage
	}
	p, err := policy.Load(files[0])
	if err != nil {
		return loadErr(err)
	}
	req, err := requestFromURL(*rawURL, *method)
	if err != nil {
		return failf("--url: %v", err)
	}
	d := decideWithAddr(p, req)
	ex := explanation{
		URL: *rawURL, Method: req.Method, Decision: d.Verdict.String(), WouldDeny: d.WouldDeny,
		Rule: d.Rule, Reason: string(d.Reason), Detail: d.Detail, Host: d.Host, Port: d.Port,
		Intercept: d.Intercept, Secrets: d.Secrets,
	}
	if ex.Secrets == nil {
		ex.Secrets = []string{}
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(ex)
	}
	printExplanation(stdout, ex)
	return nil
}

func printExplanation(w io.Writer, ex explanation) {
	decision := ex.Decision
	if ex.WouldDeny {
		decision = "allow (report mode: enforce would deny)"
	}
	fmt.Fprintf(w, "decision:  %s\n", decision)
	fmt.Fprintf(w, "request:   %s %s (host %s, port %d)\n", ex.Method, ex.URL, ex.Host, ex.Port)
	rule := ex.Rule
	if rule == "" {
		rule = "(none)"
	}
	fmt.Fprintf(w, "rule:      %s\n", rule)
	fmt.Fprintf(w, "reason:    %s: %s\n", ex.Reason, ex.Detail)
	if ex.Decision == "allow" {
		fmt.Fprintf(w, "intercept: %t\n", ex.Intercept)
		secrets := "(none)"
		if len(ex.Secrets) > 0 {
			secrets = strings.Join(ex.Secrets, ", ")
		}
		fmt.Fprintf(w, "secrets:   %s\n", secrets)
	}
}

// requestFromURL turns a URL into decision facts.
func requestFromURL(raw, method string) (policy.Request, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return policy.Request{}, err
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return policy.Request{}, fmt.Errorf("scheme %q: use http:// or https://", u.Scheme)
	}
	if u.Host == "" {
		return policy.Request{}, errors.New("no host: use a full URL such as https://example.com/")
	}
	port := 0
	if ps := u.Port(); ps != "" {
		port, err = strconv.Atoi(ps)
		if err != nil || port < 1 || port > 65535 {
			return policy.Request{}, fmt.Errorf("bad port %q", ps)
		}
	}
	path := u.EscapedPath()
	if path == "" {
		path = "/"
	}
	return policy.Request{Scheme: u.Scheme, Host: u.Hostname(), Port: port, Method: strings.ToUpper(method), Path: path}, nil
}

// decideWithAddr decides req and, when its host is an IP literal, also checks that address
// the way the proxy's SSRF guard will at run time.
func decideWithAddr(p *policy.Policy, req policy.Request) policy.Decision {
	d := p.Decide(req)
	if d.Verdict != policy.Allow || d.WouldDeny {
		return d
	}
	h, err := policy.NormalizeHost(req.Host)
	if err != nil || !h.IsIP() {
		return d
	}
	if a := p.CheckAddr(h.Name, d.Port, h.Addr); !a.Allowed() || a.WouldDeny {
		a.Host, a.Port = d.Host, d.Port
		if a.Rule == "" {
			a.Rule = d.Rule
		}
		return a
	}
	return d
}

// testCase is one entry of a policy test file.
type testCase struct {
	Name   string `yaml:"name"`
	URL    string `yaml:"url"`
	Method string `yaml:"method"`
	Expect string `yaml:"expect"`
	Rule   string `yaml:"rule"`
	line   int
}

const testCasesHelp = `
Run every case in CASES.yaml against FILE and print each failure with its line. Exits 1 if
any case fails. CASES.yaml is a list (or a map with a "cases" list) of:

  - name: github api read      # optional
    url: https://api.github.com/repos/acme/app
    method: GET                # optional, default GET
    expect: allow              # allow | deny (in report mode, "deny" matches would-deny)
    rule: github-api           # optional: the rule that must decide`

func policyTest(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("policy test", "airlock policy test FILE --cases CASES.yaml", testCasesHelp, stderr)
	casesFile := fs.String("cases", "", "YAML file of expected decisions (required)")
	files, err := fs.parse(args, stdout, false)
	if err != nil {
		return err
	}
	if len(files) != 1 || *casesFile == "" {
		fs.Usage()
		return errUsage
	}
	p, err := policy.Load(files[0])
	if err != nil {
		return loadErr(err)
	}
	cases, err := loadCases(*casesFile)
	if err != nil {
		return failf("%v", err)
	}
	failed := 0
	for _, tc := range cases {
		if msg := runCase(p, tc); msg != "" {
			failed++
			fmt.Fprintf(stdout, "FAIL %s:%d: %s\n", *casesFile, tc.line, msg)
		}
	}
	fmt.Fprintf(stdout, "%d passed, %d failed\n", len(cases)-failed, failed)
	if failed > 0 {
		return &exitError{code: 1}
	}
	return nil
}

// runCase returns "" when tc passes, else a one-line description of the failure.
func runCase(p *policy.Policy, tc testCase) string {
	method := tc.Method
	if method == "" {
		method = "GET"
	}
	label := fmt.Sprintf("%s %s", strings.ToUpper(method), tc.URL)
	if tc.Name != "" {
		label = tc.Name + " (" + label + ")"
	}
	req, err := requestFromURL(tc.URL, method)
	if err != nil {
		return fmt.Sprintf("%s: url: %v", label, err)
	}
	d := decideWithAddr(p, req)
	got := "allow"
	if !d.Allowed() || d.WouldDeny {
		got = "deny"
	}
	if got != tc.Expect {
		return fmt.Sprintf("%s: got %s (rule %q, %s: %s), want %s", label, got, d.Rule, d.Reason, d.Detail, tc.Expect)
	}
	if tc.Rule != "" && d.Rule != tc.Rule {
		return fmt.Sprintf("%s: decided by rule %q, want rule %q", label, d.Rule, tc.Rule)
	}
	return ""
}

// loadCases strictly decodes a cases file; errors name file and line.
func loadCases(path string) ([]testCase, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read cases %s: %w", path, err)
	}
	var root yaml.Node
	if err := yaml.Unmarshal(data, &root); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(root.Content) == 0 {
		return nil, fmt.Errorf("%s: no cases", path)
	}
	list := root.Content[0]
	if list.Kind == yaml.MappingNode {
		list = casesList(list)
	}
	if list == nil || list.Kind != yaml.SequenceNode {
		return nil, fmt.Errorf("%s:%d:%d: cases: want a list of {url, method, expect}", path, root.Content[0].Line, root.Content[0].Column)
	}
	var cases []testCase
	for i, n := range list.Content {
		tc, err := decodeCase(n)
		if err != nil {
			return nil, fmt.Errorf("%s:%d:%d: cases[%d]: %v", path, n.Line, n.Column, i, err)
		}
		cases = append(cases, tc)
	}
	if len(cases) == 0 {
		return nil, fmt.Errorf("%s: no cases", path)
	}
	return cases, nil
}

func casesList(m *yaml.Node) *yaml.Node {
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == "cases" {
			return m.Content[i+1]
		}
	}
	return nil
}

func decodeCase(n *yaml.Node) (testCase, error) {
	var tc testCase
	raw, err := yaml.Marshal(n)
	if err != nil {
		return tc, err
	}
	dec := yaml.NewDecoder(bytes.NewReader(raw))
	dec.KnownFields(true)
	if err := dec.Decode(&tc); err != nil {
		return tc, errors.New(strings.TrimPrefix(err.Error(), "yaml: "))
	}
	tc.line = n.Line
	tc.Expect = strings.ToLower(tc.Expect)
	if tc.URL == "" {
		return tc, errors.New("url is required")
	}
	if tc.Expect != "allow" && tc.Expect != "deny" {
		return tc, fmt.Errorf("expect %q: use allow or deny", tc.Expect)
	}
	return tc, nil
}
