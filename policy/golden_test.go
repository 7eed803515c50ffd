package policy

import (
	"bufio"
	"flag"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/golden")

// TestGolden loads each testdata/golden/NAME.yaml and compares with NAME.golden either the
// load error or, when it loads, the decision for each line of NAME.requests:
//
//	GET https://api.github.com/repos/acme/x   a request (method, URL)
//	CONNECT api.github.com:443                a connection-level decision
//	ADDR api.github.com 443 127.0.0.1         CheckAddr(host, port, address)
//
// Run with -update to rewrite the golden files after an intended change, and review the diff.
func TestGolden(t *testing.T) {
	inputs, err := filepath.Glob(filepath.Join("testdata", "golden", "*.yaml"))
	if err != nil || len(inputs) == 0 {
		t.Fatalf("no golden inputs: %v", err)
	}
	for _, in := range inputs {
		name := strings.TrimSuffix(filepath.Base(in), ".yaml")
		t.Run(name, func(t *testing.T) {
			got := goldenOutput(t, in)
			goldenPath := strings.TrimSuffix(in, ".yaml") + ".golden"
			if *update {
				if err := os.WriteFile(goldenPath, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(goldenPath)
			if err != nil {
				t.Fatalf("read golden file (run with -update to create it): %v", err)
			}
			if got != string(want) {
				t.Errorf("%s differs (run with -update and review the diff)\ngot:\n%s\nwant:\n%s", goldenPath, got, want)
			}
		})
	}
}

// goldenOutput is the text a golden file holds for one input.
func goldenOutput(t *testing.T, in string) string {
	p, err := Load(in)
	if err != nil {
		return "load error:\n" + err.Error() + "\n"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "policy %s, mode %s, rules: %d\n", p.Name(), p.Mode(), len(p.Rules()))
	f, err := os.Open(strings.TrimSuffix(in, ".yaml") + ".requests")
	if os.IsNotExist(err) {
		return b.String()
	}
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		d, err := goldenDecide(p, line)
		if err != nil {
			t.Fatalf("bad request line %q: %v", line, err)
		}
		fmt.Fprintf(&b, "\n%s\n  %s\n", line, formatDecision(d))
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// formatDecision prints a decision on two lines: the facts, then the detail.
func formatDecision(d Decision) string {
	s := fmt.Sprintf("%s rule=%q reason=%s host=%s port=%d", d.Verdict, d.Rule, d.Reason, d.Host, d.Port)
	if d.WouldDeny {
		s += " would_deny"
	}
	if d.Intercept {
		s += " intercept"
	}
	if d.AllowMissingSNI {
		s += " allow_missing_sni"
	}
	if len(d.Secrets) > 0 {
		s += " secrets=" + strings.Join(d.Secrets, ",")
	}
	return s + "\n  " + d.Detail
}

// goldenDecide runs one request line against p.
func goldenDecide(p *Policy, line string) (Decision, error) {
	f := strings.Fields(line)
	switch {
	case len(f) == 4 && f[0] == "ADDR":
		port, err := strconv.Atoi(f[2])
		if err != nil {
			return Decision{}, err
		}
		a, err := netip.ParseAddr(f[3])
		if err != nil {
			return Decision{}, err
		}
		return p.CheckAddr(f[1], port, a), nil
	case len(f) == 2 && f[0] == "CONNECT":
		host, port, err := splitHostPort(f[1])
		if err != nil {
			return Decision{}, err
		}
		return p.Decide(Request{Host: host, Port: port}), nil
	case len(f) == 2:
		scheme, rest, ok := strings.Cut(f[1], "://")
		if !ok {
			return Decision{}, fmt.Errorf("want METHOD scheme://host[:port]/path")
		}
		hostport, path := rest, ""
		if i := strings.IndexAny(rest, "/?"); i >= 0 {
			hostport, path = rest[:i], rest[i:]
		}
		host, port, err := splitHostPort(hostport)
		if err != nil {
			return Decision{}, err
		}
		return p.Decide(Request{Scheme: scheme, Host: host, Port: port, Method: f[0], Path: path}), nil
	}
	return Decision{}, fmt.Errorf("want METHOD URL, CONNECT host:port or ADDR host port addr")
}

// splitHostPort splits "host", "host:port", "[v6]" or "[v6]:port" without validating the host.
func splitHostPort(s string) (string, int, error) {
	host, portText := s, ""
	if strings.HasPrefix(s, "[") {
		if i := strings.Index(s, "]"); i >= 0 {
			host, portText = s[:i+1], strings.TrimPrefix(s[i+1:], ":")
		}
	} else if i := strings.LastIndex(s, ":"); i >= 0 {
		host, portText = s[:i], s[i+1:]
	}
	if portText == "" {
		return host, 0, nil
	}
	port, err := strconv.Atoi(portText)
	return host, port, err
}
