package sidecar

import (
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/ebpf"
)

func TestParsePorts(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []uint16
	}{
		{"80,443", []uint16{80, 443}},
		{" 8080 ", []uint16{8080}},
		{"0", nil},
		{"80,x", nil},
		{"70000", nil},
	} {
		got, err := ParsePorts(tc.in)
		if (err == nil) != (tc.want != nil) || !slices.Equal(got, tc.want) {
			t.Errorf("ParsePorts(%q): got %v, %v; want %v", tc.in, got, err, tc.want)
		}
	}
}

func TestListenAddrPort(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"127.0.0.1:5353", "127.0.0.1:5353"},
		{":53", "0.0.0.0:53"},
		{"[::1]:53", "[::1]:53"},
		{"localhost:53", ""},
	} {
		got, err := listenAddrPort(tc.in)
		if tc.want == "" {
			if err == nil {
				t.Errorf("listenAddrPort(%q): got %v, want an error", tc.in, got)
			}
			continue
		}
		if err != nil || got.String() != tc.want {
			t.Errorf("listenAddrPort(%q): got %v, %v; want %s", tc.in, got, err, tc.want)
		}
	}
}

func TestDenyAuditEvent(t *testing.T) {
	ev := denyAuditEvent(ebpf.DenyEvent{
		Time: time.Unix(1, 0), Hook: ebpf.HookConnect4, Reason: ebpf.DenyNotAllowed,
		PID: 42, Comm: "curl", Dest: netip.MustParseAddrPort("198.18.0.20:443"), Proto: 6, Suppressed: 3,
	})
	if ev.Kind != "connect" || ev.Decision != "deny" || ev.Reason != "kernel_not_allowed" || ev.Destination != "198.18.0.20:443" {
		t.Fatalf("got %+v", ev)
	}
	for _, s := range []string{"connect4", "pid 42 (curl)", "3 more"} {
		if !strings.Contains(ev.Detail, s) {
			t.Errorf("detail %q lacks %q", ev.Detail, s)
		}
	}
}
