package policy

import (
	"errors"
	"strings"
	"testing"
)

func TestNormalizeHost(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want string // normalised name; "" means an error is expected
		ip   bool
	}{
		{"plain", "example.com", "example.com", false},
		{"upper case", "GitHub.COM", "github.com", false},
		{"trailing dot", "example.com.", "example.com", false},
		{"two trailing dots", "example.com..", "", false},
		{"IDN to punycode", "bücher.example", "xn--bcher-kva.example", false},
		{"IDN upper case", "BÜCHER.example", "xn--bcher-kva.example", false},
		{"punycode stays", "xn--bcher-kva.example", "xn--bcher-kva.example", false},
		{"punycode upper case", "XN--BCHER-KVA.example", "xn--bcher-kva.example", false},
		{"ideographic full stop", "example\u3002com", "example.com", false},
		{"fullwidth letters", "ｅｘａｍｐｌｅ.com", "example.com", false},
		{"invalid punycode", "xn--zz.example", "", false},
		{"ascii in punycode", "xn--abc-.example", "", false},
		{"double hyphen inside label", "r3---sn-abc.googlevideo.com", "r3---sn-abc.googlevideo.com", false},
		{"leading hyphen", "-a.example.com", "", false},
		{"trailing hyphen", "a-.example.com", "", false},
		{"underscore", "a_b.example.com", "", false},
		{"space", "a b.example.com", "", false},
		{"empty", "", "", false},
		{"dot only", ".", "", false},
		{"leading dot", ".example.com", "", false},
		{"empty label", "a..example.com", "", false},
		{"star", "*.example.com", "", false},
		{"percent", "exa%6dple.com", "", false},
		{"long label", strings.Repeat("a", 64) + ".com", "", false},
		{"long name", strings.Repeat("a.", 127) + "com", "", false},
		{"single label", "localhost", "localhost", false},
		{"with port", "example.com:443", "", false},
		{"bidi violation", "a\u05d0.com", "", false},

		{"IPv4", "127.0.0.1", "127.0.0.1", true},
		{"IPv4 trailing dot", "127.0.0.1.", "127.0.0.1", true},
		{"IPv4 decimal", "2130706433", "127.0.0.1", true},
		{"IPv4 hex", "0x7f000001", "127.0.0.1", true},
		{"IPv4 hex upper", "0X7F000001", "127.0.0.1", true},
		{"IPv4 octal", "0177.0.0.1", "127.0.0.1", true},
		{"IPv4 two parts", "127.1", "127.0.0.1", true},
		{"IPv4 three parts", "127.0.1", "127.0.0.1", true},
		{"IPv4 mixed", "0x7f.0.0.01", "127.0.0.1", true},
		{"IPv4 mixed 2", "0x7f.1", "127.0.0.1", true},
		{"IPv4 metadata decimal", "2852039166", "169.254.169.254", true},
		{"IPv4 leading zeros", "0000000127.0.0.1", "87.0.0.1", true},
		{"IPv4 hex empty", "0x.0.0.1", "0.0.0.1", true},
		{"IPv4 fullwidth digits", "１２７.０.０.１", "127.0.0.1", true},
		{"IPv4 part too big", "256.0.0.1", "", false},
		{"IPv4 last too big", "1.2.3.256", "", false},
		{"IPv4 32-bit overflow", "4294967296", "", false},
		{"IPv4 five parts", "1.2.3.4.5", "", false},
		{"IPv4 bad octal", "08.0.0.1", "", false},
		{"IPv4 empty part", "1..2.3", "", false},
		{"numeric last label", "example.123", "", false},
		{"hex last label", "example.0x1", "", false},
		{"numeric first label", "123.example", "123.example", false},
		{"not hex", "example.0xg", "example.0xg", false},

		{"IPv6 bracketed", "[::1]", "::1", true},
		{"IPv6 bare", "::1", "::1", true},
		{"IPv6 canonical", "[2001:DB8:0:0:0:0:0:1]", "2001:db8::1", true},
		{"IPv6 mapped", "[::ffff:127.0.0.1]", "::ffff:127.0.0.1", true},
		{"IPv6 zone", "[fe80::1%eth0]", "", false},
		{"IPv6 zone encoded", "[fe80::1%25eth0]", "", false},
		{"IPv6 unclosed", "[::1", "", false},
		{"IPv4 in brackets", "[127.0.0.1]", "", false},
		{"IPv6 bad", "[:::1]", "", false},
		{"IPv6 with port", "[::1]:80", "", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := NormalizeHost(tc.in)
			if tc.want == "" {
				if err == nil {
					t.Fatalf("NormalizeHost(%q) = %+v, want an error", tc.in, got)
				}
				if !errors.Is(err, ErrInvalidHost) {
					t.Errorf("error %v does not wrap ErrInvalidHost", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("NormalizeHost(%q): %v", tc.in, err)
			}
			if got.Name != tc.want || got.IsIP() != tc.ip {
				t.Errorf("NormalizeHost(%q) = %q (ip %v), want %q (ip %v)", tc.in, got.Name, got.IsIP(), tc.want, tc.ip)
			}
			if tc.ip && got.Addr.String() != got.Name {
				t.Errorf("Addr %v, want %v", got.Addr, got.Name)
			}
			again, err := NormalizeHost(got.Name)
			if err != nil || again != got {
				t.Errorf("NormalizeHost(%q) = %+v, %v; want %+v (idempotent)", got.Name, again, err, got)
			}
		})
	}
}

func TestNormalizeHostIPClass(t *testing.T) {
	// Alternate spellings must classify as what they are, never as a public name.
	for _, in := range []string{"2130706433", "0x7f000001", "0177.0.0.1", "127.1", "127.0.1", "0x7f.1", "[::ffff:7f00:1]"} {
		t.Run(in, func(t *testing.T) {
			h, err := NormalizeHost(in)
			if err != nil {
				t.Fatal(err)
			}
			if got := ClassifyAddr(h.Addr); got != AddrLoopback {
				t.Errorf("ClassifyAddr(%v) = %v, want %v", h.Addr, got, AddrLoopback)
			}
		})
	}
}

func TestHostPatternMatch(t *testing.T) {
	tests := []struct {
		name    string
		pattern string
		host    string
		want    bool
	}{
		{"exact", "example.com", "example.com", true},
		{"exact case", "Example.COM", "EXAMPLE.com", true},
		{"exact trailing dot", "example.com", "example.com.", true},
		{"pattern trailing dot", "example.com.", "example.com", true},
		{"exact not subdomain", "example.com", "www.example.com", false},
		{"exact not evil prefix", "example.com", "evilexample.com", false},
		{"exact not evil suffix", "example.com", "example.com.evil.net", false},
		{"wildcard one level", "*.example.com", "www.example.com", true},
		{"wildcard deep", "*.example.com", "a.b.c.example.com", true},
		{"wildcard not apex", "*.example.com", "example.com", false},
		{"wildcard not evil", "*.example.com", "evilexample.com", false},
		{"wildcard not suffix trick", "*.example.com", "www.example.com.evil.net", false},
		{"wildcard case", "*.Example.com", "WWW.EXAMPLE.COM.", true},
		{"IDN pattern, punycode host", "bücher.example", "xn--bcher-kva.example", true},
		{"punycode pattern, IDN host", "xn--bcher-kva.example", "BÜCHER.example", true},
		{"IDN wildcard", "*.bücher.example", "www.xn--bcher-kva.example", true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, msg := parseHostPattern(tc.pattern)
			if msg != "" {
				t.Fatalf("parseHostPattern(%q): %s", tc.pattern, msg)
			}
			h, err := NormalizeHost(tc.host)
			if err != nil {
				t.Fatal(err)
			}
			if got := p.match(h.Name); got != tc.want {
				t.Errorf("%q matches %q = %v, want %v", tc.pattern, tc.host, got, tc.want)
			}
		})
	}
}

func TestHostPatternErrors(t *testing.T) {
	tests := []struct {
		name    string
		pattern string
		want    string // substring of the message
	}{
		{"empty", "", "empty host"},
		{"star", "*", `"*" would allow every host`},
		{"public suffix com", "*.com", `public suffix "com"`},
		{"public suffix co.uk", "*.co.uk", `public suffix "co.uk"; name a registrable domain, e.g. "*.example.co.uk"`},
		{"private suffix github.io", "*.github.io", `public suffix "github.io"`},
		{"unlisted tld", "*.test", `public suffix "test"`},
		{"star in middle", "a.*.example.com", `use "*.example.com"`},
		{"star in label", "foo*.example.com", `use "*.example.com"`},
		{"star without dot", "*example.com", `use "*.example.com"`},
		{"star at end", "example.*", `whole first label`},
		{"double wildcard", "*.*.example.com", `use "*.example.com"`},
		{"leading dot", ".example.com", `use "*.example.com" for subdomains and "example.com"`},
		{"url", "https://example.com/x", `not a URL; use "example.com"`},
		{"path", "example.com/x", `not a path; use "example.com"`},
		{"port", "example.com:443", `put the port in ports`},
		{"ipv4", "10.0.0.1", `IP addresses go in cidrs, not hosts; use cidrs: ["10.0.0.1/32"]`},
		{"ipv4 alternate", "0x0a000001", `use cidrs: ["10.0.0.1/32"]`},
		{"ipv6", "::1", `use cidrs: ["::1/128"]`},
		{"ipv6 bracketed", "[2001:db8::1]", `use cidrs: ["2001:db8::1/128"]`},
		{"wildcard ip", "*.10.0.0.1", "wildcards apply to names"},
		{"empty label", "a..example.com", "empty label"},
		{"invalid char", "a_b.example.com", "not a valid host name"},
		{"numeric tld", "example.123", "not an IPv4 address"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, msg := parseHostPattern(tc.pattern)
			if !strings.Contains(msg, tc.want) {
				t.Errorf("parseHostPattern(%q) = %q, want it to contain %q", tc.pattern, msg, tc.want)
			}
		})
	}
}

func TestHostPatternCovers(t *testing.T) {
	tests := []struct {
		parent, child string
		want          bool
	}{
		{"api.github.com", "api.github.com", true},
		{"*.github.com", "api.github.com", true},
		{"*.example.com", "*.a.example.com", true},
		{"*.example.com", "*.example.com", true},
		{"*.a.example.com", "*.example.com", false},
		{"example.com", "*.example.com", false},
		{"*.example.com", "example.com", false},
		{"api.github.com", "github.com", false},
		{"*.example.com", "*.evilexample.com", false},
	}
	for _, tc := range tests {
		t.Run(tc.parent+" covers "+tc.child, func(t *testing.T) {
			p, _ := parseHostPattern(tc.parent)
			c, _ := parseHostPattern(tc.child)
			if got := p.covers(c); got != tc.want {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
}

func TestParseIPv4(t *testing.T) {
	tests := []struct {
		in   string
		want string // "" means not an address
	}{
		{"0", "0.0.0.0"},
		{"4294967295", "255.255.255.255"},
		{"0xffffffff", "255.255.255.255"},
		{"037777777777", "255.255.255.255"},
		{"040000000000", ""},
		{"1.16777215", "1.255.255.255"},
		{"1.16777216", ""},
		{"1.2.65535", "1.2.255.255"},
		{"1.2.65536", ""},
		{"0x100.0.0.1", ""},
		{"1.2.3.0x", "1.2.3.0"},
		{"09", ""},
		{"", ""},
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			a, ok := parseIPv4(tc.in)
			got := ""
			if ok {
				got = a.String()
			}
			if got != tc.want {
				t.Errorf("parseIPv4(%q) = %q, want %q", tc.in, got, tc.want)
			}
			if ok && !a.Is4() {
				t.Errorf("got %v, want an IPv4 address", a)
			}
		})
	}
}
