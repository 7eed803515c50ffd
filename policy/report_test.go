package policy

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const interceptAllPolicy = `apiVersion: airlock/v1
kind: EgressPolicy
metadata:
  name: learn
spec:
  mode: %s
  report:
    interceptAll: true
  egress:
    - name: open
      hosts: ["open.test"]
`

func TestReportInterceptAll(t *testing.T) {
	p, err := Parse("learn.yaml", []byte(strings.Replace(interceptAllPolicy, "%s", "report", 1)))
	if err != nil {
		t.Fatal(err)
	}
	if !p.InterceptAll() {
		t.Fatal("InterceptAll: got false, want true")
	}
	tests := []struct {
		name      string
		req       Request
		wouldDeny bool
	}{
		{"a rule without L7 rules", Request{Host: "open.test", Port: 443}, false},
		{"no rule", Request{Host: "other.test", Port: 443}, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := p.Decide(tc.req)
			if !d.Allowed() || d.WouldDeny != tc.wouldDeny || !d.Intercept {
				t.Errorf("got %+v, want allow, would_deny %t, intercept", d, tc.wouldDeny)
			}
		})
	}
}

func TestReportInterceptAllNeedsReportMode(t *testing.T) {
	_, err := Parse("learn.yaml", []byte(strings.Replace(interceptAllPolicy, "%s", "enforce", 1)))
	if err == nil || !strings.Contains(err.Error(), "learn.yaml:8:19: spec.report.interceptAll: applies to report mode only") {
		t.Errorf("got %v, want an error at spec.report.interceptAll", err)
	}
	// Without the option, report mode intercepts only where a rule needs it.
	p, err := Parse("learn.yaml", []byte(strings.Replace(strings.Replace(interceptAllPolicy, "%s", "report", 1), "interceptAll: true", "interceptAll: false", 1)))
	if err != nil {
		t.Fatal(err)
	}
	if d := p.Decide(Request{Host: "open.test", Port: 443}); d.Intercept || p.InterceptAll() {
		t.Errorf("interceptAll false: got intercept %t, want false", d.Intercept)
	}
}

// TestReportInterceptAllNotInherited: a child of a recording parent intercepts only if it
// says so itself.
func TestReportInterceptAllNotInherited(t *testing.T) {
	dir := t.TempDir()
	parent := strings.Replace(interceptAllPolicy, "%s", "report", 1)
	if err := os.WriteFile(filepath.Join(dir, "parent.yaml"), []byte(parent), 0o644); err != nil {
		t.Fatal(err)
	}
	child := "apiVersion: airlock/v1\nkind: EgressPolicy\nmetadata:\n  name: child\nspec:\n  mode: report\n  extends: [\"./parent.yaml\"]\n"
	p, err := Parse(filepath.Join(dir, "child.yaml"), []byte(child))
	if err != nil {
		t.Fatal(err)
	}
	if p.InterceptAll() || p.Decide(Request{Host: "open.test", Port: 443}).Intercept {
		t.Error("the child inherited interceptAll")
	}
}
