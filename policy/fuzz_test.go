package policy

import (
	"net/netip"
	"strings"
	"testing"
)

// FuzzParse checks that the loader never panics, that every error it returns is a located
// *LoadError, and that Decide and CheckAddr never panic on a policy it accepts. Seeds are in
// testdata/fuzz/FuzzParse and below.
func FuzzParse(f *testing.F) {
	f.Add([]byte(decidePolicy))
	f.Add([]byte(base))
	f.Add([]byte(header + "  extends: [repo-read]\n  egress:\n    - {name: a, hosts: [api.github.com], ports: [443], http: [{methods: [GET], paths: [\"/repos/**\"]}]}\n"))
	f.Add([]byte(header + "  egress: [{name: a, hosts: [\"*.co.uk\"], cidrs: [10.0.0.1/8]}]\n"))
	f.Add([]byte("apiVersion: airlock/v1\nkind: EgressPolicy\nmetadata: {name: x}\n---\n"))
	f.Add([]byte("a: &a [*a, *a]\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		l := &loader{} // no file access: only built-in parents
		p, err := l.parse("fuzz.yaml", data, []string{"fuzz.yaml"})
		if err != nil {
			for _, le := range loadErrors(err) {
				if le.Message == "" || le.Err == nil {
					t.Fatalf("unlocated or empty error: %#v", le)
				}
			}
			return
		}
		exercise(p)
	})
}

// exercise runs every decision entry point over requests built from the policy's own rules.
func exercise(p *Policy) {
	hosts := []string{"example.com", "127.0.0.1", "[::1]", "0x7f.1"}
	for _, r := range p.Rules() {
		for _, h := range r.Hosts {
			hosts = append(hosts, strings.TrimPrefix(h, "*."), "a."+strings.TrimPrefix(h, "*."))
		}
		for _, c := range r.CIDRs {
			if pr, err := netip.ParsePrefix(c); err == nil {
				hosts = append(hosts, pr.Addr().String())
			}
		}
	}
	for _, h := range hosts {
		for _, m := range []string{"", "GET", "POST", "DELETE"} {
			for _, path := range []string{"", "/", "/repos/acme/x", "/a/../b", "/%2e%2e/x"} {
				p.Decide(Request{Scheme: "https", Host: h, Method: m, Path: path})
			}
		}
		p.HostPorts(h)
		for _, a := range []string{"127.0.0.1", "10.0.0.1", "8.8.8.8", "::ffff:10.0.0.1"} {
			p.CheckAddr(h, 443, netip.MustParseAddr(a))
		}
	}
	p.Rules()
	p.Secrets()
	p.DNS()
	p.LLM()
}

// FuzzNormalizeHost checks that NormalizeHost never panics and is idempotent: normalising
// its output again gives the same host. Seeds are in testdata/fuzz/FuzzNormalizeHost.
func FuzzNormalizeHost(f *testing.F) {
	for _, s := range []string{"example.com", "Example.COM.", "bücher.example", "xn--bcher-kva.example",
		"2130706433", "0x7f000001", "0177.0.0.1", "127.1", "[::1]", "[fe80::1%eth0]", "::ffff:127.0.0.1",
		"a..b", "１２７.０.０.１", "example\u3002com", "r3---sn-abc.googlevideo.com"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		h, err := NormalizeHost(s)
		if err != nil {
			return
		}
		again, err := NormalizeHost(h.Name)
		if err != nil {
			t.Fatalf("NormalizeHost(%q) = %q, which does not normalise: %v", s, h.Name, err)
		}
		if again != h {
			t.Fatalf("NormalizeHost(%q) = %+v, but NormalizeHost(%q) = %+v", s, h, h.Name, again)
		}
		if h.IsIP() && h.Addr.String() != h.Name {
			t.Fatalf("NormalizeHost(%q): name %q is not the address %v", s, h.Name, h.Addr)
		}
	})
}

// FuzzNormalizePath checks that NormalizePath never panics and that what it returns is an
// absolute path without dot-segments.
func FuzzNormalizePath(f *testing.F) {
	for _, s := range []string{"/", "/a/../b", "/%2e%2e/x", "/a%2Fb", "/a//../b", "/a/..;/b", "/a?x#y"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		p, err := NormalizePath(s)
		if err != nil {
			return
		}
		if !strings.HasPrefix(p, "/") {
			t.Fatalf("NormalizePath(%q) = %q, not absolute", s, p)
		}
		for _, seg := range strings.Split(p[1:], "/") {
			if seg == "." || seg == ".." {
				t.Fatalf("NormalizePath(%q) = %q, which has a dot-segment", s, p)
			}
		}
	})
}

// FuzzPathShortcuts holds the shortcuts of percentDecode and removeDotSegments (a path
// returned as it is) to the full work on the same path.
func FuzzPathShortcuts(f *testing.F) {
	for _, s := range []string{"/", "/a/b", "/a/../b", "/a/.;/b", "/a//b", "/a%2e/b", "/a\\b", "/a\x00b", "/.x", "/a."} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if s == "" || s[0] != '/' {
			return
		}
		got, gotReason := percentDecode(s)
		want, wantReason := decodeEscapes(s)
		if got != want || gotReason != wantReason {
			t.Fatalf("percentDecode(%q) = %q, %q; the full decoding gives %q, %q", s, got, gotReason, want, wantReason)
		}
		got, gotReason = removeDotSegments(s)
		want, wantReason = resolveDotSegments(s)
		if got != want || gotReason != wantReason {
			t.Fatalf("removeDotSegments(%q) = %q, %q; the full work gives %q, %q", s, got, gotReason, want, wantReason)
		}
	})
}

// FuzzOverrideNameShortcut holds isOverrideName's shortcut (no "method" in the name: none)
// to normalising every name.
func FuzzOverrideNameShortcut(f *testing.F) {
	for _, s := range []string{"X-HTTP-Method-Override", "Accept", "_METHOD[]", "x.method override", "\u212aMethod", "X-Méthod", "meth-od"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		if got, want := isOverrideName(name), isNormalisedOverride(normaliseOverrideName(name)); got != want {
			t.Fatalf("isOverrideName(%q) = %v; normalising it says %v", name, got, want)
		}
	})
}
