package policy

import (
	"errors"
	"net/netip"
	"testing"
)

func TestParseUpstream(t *testing.T) {
	tests := []struct {
		name, in string
		want     string // "" means an error
	}{
		{"ipv4 with port", "198.18.0.53:5353", "198.18.0.53:5353"},
		{"bare ipv4 means 53", "198.18.0.53", "198.18.0.53:53"},
		{"bracketed ipv6", "[2001:db8::53]:53", "[2001:db8::53]:53"},
		{"bare ipv6 means 53", "2001:db8::53", "[2001:db8::53]:53"},
		{"bracketed bare ipv6", "[2001:db8::53]", "[2001:db8::53]:53"},
		{"a name", "dns.example:53", ""},
		{"port zero", "198.18.0.53:0", ""},
		{"port too large", "198.18.0.53:99999", ""},
		{"zone", "[fe80::1%eth0]:53", ""},
		{"empty", "", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseUpstream(tc.in)
			if tc.want == "" {
				if err == nil || !errors.Is(err, ErrInvalidUpstream) {
					t.Errorf("got %v, %v; want an ErrInvalidUpstream", got, err)
				}
				return
			}
			if err != nil || got != netip.MustParseAddrPort(tc.want) {
				t.Errorf("got %v, %v; want %s", got, err, tc.want)
			}
		})
	}
}

func TestParseUpstreamsKeepsOrderAndTrims(t *testing.T) {
	got, err := ParseUpstreams([]string{" 198.18.0.2:53", "198.18.0.1 "})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].String() != "198.18.0.2:53" || got[1].String() != "198.18.0.1:53" {
		t.Errorf("got %v, want [198.18.0.2:53 198.18.0.1:53]", got)
	}
	if _, err := ParseUpstreams([]string{"198.18.0.1", "nope"}); !errors.Is(err, ErrInvalidUpstream) {
		t.Errorf("got %v, want ErrInvalidUpstream", err)
	}
}
