package policy

import (
	"strings"
	"testing"
)

// TestInjectFields checks placeholderIn and allowCleartext: loaded onto the rule, and
// rejected with file:line where they cannot apply.
func TestInjectFields(t *testing.T) {
	const head = "apiVersion: airlock/v1\nkind: EgressPolicy\nmetadata: {name: p}\nspec:\n  secrets:\n    s: {env: S}\n  egress:\n"
	p, err := Parse("ok.yaml", []byte(head+`    - name: r
      hosts: [a.test]
      placeholderIn: [header, body]
      allowCleartext: true
      inject:
        - {header: X-Key, value: '{{ secret "s" }}'}
`))
	if err != nil {
		t.Fatal(err)
	}
	r, _ := p.Rule("r")
	if !r.AllowCleartext || strings.Join(r.PlaceholderIn, ",") != "header,body" {
		t.Fatalf("rule: got %+v", r)
	}
	for _, tc := range []struct{ name, rule, want string }{
		{"unknown location", `    - name: r
      hosts: [a.test]
      placeholderIn: [cookie]
      inject:
        - {header: X-Key, value: '{{ secret "s" }}'}
`, `bad.yaml:10:23: spec.egress[0].placeholderIn[0]: unknown location "cookie"`},
		{"duplicate location", `    - name: r
      hosts: [a.test]
      placeholderIn: [query, query]
      inject:
        - {header: X-Key, value: '{{ secret "s" }}'}
`, `spec.egress[0].placeholderIn[1]: location "query" is listed twice`},
		{"placeholderIn without inject", `    - name: r
      hosts: [a.test]
      placeholderIn: [query]
`, `spec.egress[0].placeholderIn: placeholderIn needs inject`},
		{"allowCleartext without inject", `    - name: r
      hosts: [a.test]
      allowCleartext: true
`, `bad.yaml:10:23: spec.egress[0].allowCleartext: allowCleartext needs inject`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse("bad.yaml", []byte(head+tc.rule))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

// TestBasicTemplate: {{ basic "user" "name" }} expands to base64("user:" + value).
func TestBasicTemplate(t *testing.T) {
	in := Injection{Header: "Authorization", Value: `Basic {{ basic "x-access-token" "tok" }}`}
	if got := in.Secrets(); len(got) != 1 || got[0] != "tok" {
		t.Fatalf("Secrets: got %v, want [tok]", got)
	}
	v, err := in.Expand(func(string) (string, error) { return "s3cret", nil })
	if err != nil || v != "Basic eC1hY2Nlc3MtdG9rZW46czNjcmV0" {
		t.Fatalf("Expand: got %q, %v", v, err)
	}
	for _, bad := range []string{`{{ basic "a:b" "tok" }}`, `{{ basic "u" "" }}`, `{{ basic "u" }}`} {
		if parts, msg := parseTemplate(bad); msg == "" {
			t.Errorf("%s: parsed as %v, want an error", bad, parts)
		}
	}
}
