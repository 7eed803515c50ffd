package policy

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strings"

	"gopkg.in/yaml.v3"
)

// TestCase is one entry of a policy test file (`airlock policy test --cases`): a request and
// the decision expected for it.
type TestCase struct {
	// Name labels the case in failures; optional.
	Name string `yaml:"name"`
	// URL is the request's http(s) URL. Required.
	URL string `yaml:"url"`
	// Method is the HTTP method; empty means GET.
	Method string `yaml:"method"`
	// Expect is "allow" or "deny" (in report mode, "deny" matches would-deny).
	Expect string `yaml:"expect"`
	// Rule, when set, is the rule that must decide.
	Rule string `yaml:"rule"`
	// Identity, when set, decides the request with that identity's policy
	// (spec.identities); empty means the sandbox's own.
	Identity string `yaml:"identity"`
	// Line is the case's line in its file.
	Line int `yaml:"-"`
}

// LoadTestCases strictly decodes a test cases file: a list of cases, or a map with a "cases"
// list. Errors name the file, line and column.
func LoadTestCases(path string) ([]TestCase, error) {
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
	var cases []TestCase
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

func decodeCase(n *yaml.Node) (TestCase, error) {
	var tc TestCase
	raw, err := yaml.Marshal(n)
	if err != nil {
		return tc, err
	}
	dec := yaml.NewDecoder(bytes.NewReader(raw))
	dec.KnownFields(true)
	if err := dec.Decode(&tc); err != nil {
		return tc, errors.New(strings.TrimPrefix(err.Error(), "yaml: "))
	}
	tc.Line = n.Line
	tc.Expect = strings.ToLower(tc.Expect)
	if tc.URL == "" {
		return tc, errors.New("url is required")
	}
	if tc.Expect != "allow" && tc.Expect != "deny" {
		return tc, fmt.Errorf("expect %q: use allow or deny", tc.Expect)
	}
	return tc, nil
}

// Check runs tc against the policy and returns "" when it passes, else a one-line
// description of the failure.
func (p *Policy) Check(tc TestCase) string {
	method := tc.Method
	if method == "" {
		method = "GET"
	}
	label := fmt.Sprintf("%s %s", strings.ToUpper(method), tc.URL)
	if tc.Identity != "" {
		label += " as " + tc.Identity
	}
	if tc.Name != "" {
		label = tc.Name + " (" + label + ")"
	}
	req, err := RequestFromURL(tc.URL, method)
	if err != nil {
		return fmt.Sprintf("%s: url: %v", label, err)
	}
	pol := p
	if tc.Identity != "" {
		ip, ok := p.Identity(tc.Identity)
		if !ok {
			return fmt.Sprintf("%s: identity %q is not in spec.identities of policy %q", label, tc.Identity, p.name)
		}
		pol = ip
	}
	d := pol.DecideAddr(req)
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
