//go:build linux

package testnet_test

import (
	"context"
	"io"
	"net"
	"net/netip"
	"os/exec"
	"strings"
	"testing"

	"github.com/miekg/dns"
	"go.uber.org/goleak"

	"github.com/airlock-dev/airlock/test/privtest"
	"github.com/airlock-dev/airlock/test/testnet"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// lookup asks the world's DNS server from inside the sidecar namespace.
func lookup(t *testing.T, w *testnet.World, network, name string, qtype uint16) *dns.Msg {
	t.Helper()
	c, err := w.Sidecar.DialContext(context.Background(), network, testnet.DNSAddr.String())
	if err != nil {
		t.Fatalf("dial dns: %v", err)
	}
	defer c.Close()
	m := new(dns.Msg)
	m.SetQuestion(dns.Fqdn(name), qtype)
	client := &dns.Client{Net: network}
	resp, _, err := client.ExchangeWithConn(m, &dns.Conn{Conn: c})
	if err != nil {
		t.Fatalf("query %s %s: %v", name, dns.TypeToString[qtype], err)
	}
	return resp
}

func answers(m *dns.Msg) []string {
	var out []string
	for _, rr := range m.Answer {
		switch rr := rr.(type) {
		case *dns.A:
			out = append(out, rr.A.String())
		case *dns.AAAA:
			a, _ := netip.AddrFromSlice(rr.AAAA)
			out = append(out, a.String())
		}
	}
	return out
}

func TestWorldDNS(t *testing.T) {
	privtest.Require(t)
	w := testnet.NewWorld(t)

	cases := []struct {
		name    string
		network string
		qtype   uint16
		rcode   int
		want    string
	}{
		{"allowed A over udp", "udp", dns.TypeA, dns.RcodeSuccess, "198.18.0.10"},
		{"api A over tcp", "tcp", dns.TypeA, dns.RcodeSuccess, "198.19.0.10"},
		{"loopback", "udp", dns.TypeA, dns.RcodeSuccess, "127.0.0.1"},
		{"metadata", "udp", dns.TypeA, dns.RcodeSuccess, "169.254.169.254"},
		{"private", "udp", dns.TypeA, dns.RcodeSuccess, "10.0.0.1"},
		{"mapped AAAA", "udp", dns.TypeAAAA, dns.RcodeSuccess, "::ffff:127.0.0.1"},
		{"mapped A is empty", "udp", dns.TypeA, dns.RcodeSuccess, ""},
		{"unknown name", "udp", dns.TypeA, dns.RcodeNameError, ""},
		{"outside the zone", "udp", dns.TypeA, dns.RcodeRefused, ""},
	}
	names := map[string]string{
		"allowed A over udp": testnet.NameAllowed, "api A over tcp": testnet.NameAPI,
		"loopback": testnet.NameLoopback, "metadata": testnet.NameMetadata,
		"private": testnet.NamePrivate, "mapped AAAA": testnet.NameMapped,
		"mapped A is empty": testnet.NameMapped, "unknown name": "nope.test",
		"outside the zone": "example.com",
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			m := lookup(t, w, tc.network, names[tc.name], tc.qtype)
			if m.Rcode != tc.rcode {
				t.Fatalf("rcode: got %s, want %s", dns.RcodeToString[m.Rcode], dns.RcodeToString[tc.rcode])
			}
			if got := strings.Join(answers(m), ","); got != tc.want {
				t.Errorf("answer: got %q, want %q", got, tc.want)
			}
		})
	}

	var seq []string
	for range 3 {
		m := lookup(t, w, "udp", testnet.NameRebind, dns.TypeA)
		seq = append(seq, strings.Join(answers(m), ","))
		if len(m.Answer) != 1 || m.Answer[0].Header().Ttl != 0 {
			t.Fatalf("rebind answer: got %v, want one record with TTL 0", m.Answer)
		}
	}
	if got, want := strings.Join(seq, " "), "198.18.0.10 127.0.0.1 127.0.0.1"; got != want {
		t.Errorf("rebind sequence: got %q, want %q", got, want)
	}
	if got := w.DNS.Queries(testnet.NameRebind); got != 3 {
		t.Errorf("rebind queries: got %d, want 3", got)
	}
}

func TestWorldUpstreamsAndTripwire(t *testing.T) {
	privtest.Require(t, "curl")
	w := testnet.NewWorld(t)

	r := w.Curl(t, "http://198.18.0.10/hello")
	if r.ExitCode != 0 || !strings.Contains(r.Stdout, "upstream=198.18.0.10 port=80 host=198.18.0.10 method=GET path=/hello") {
		t.Errorf("plain HTTP: exit %d, body %q, stderr %q", r.ExitCode, r.Stdout, r.Stderr)
	}
	r = w.Curl(t, "--cacert", w.CA.File, "--resolve", "api.allowed.test:443:198.19.0.10", "https://api.allowed.test/x")
	if r.ExitCode != 0 || !strings.Contains(r.Stdout, "upstream=198.19.0.10 port=443 host=api.allowed.test") {
		t.Errorf("HTTPS: exit %d, body %q, stderr %q", r.ExitCode, r.Stdout, r.Stderr)
	}
	reqs := w.API.Requests()
	if len(reqs) != 1 || reqs[0].SNI != "api.allowed.test" || !reqs[0].TLS {
		t.Errorf("api upstream requests: got %+v, want one TLS request with SNI api.allowed.test", reqs)
	}

	// IPv6 upstreams work the same way.
	v6 := w.AddUpstream(t, netip.MustParseAddr("2001:db8::10"), "v6.test")
	r = w.Curl(t, "http://[2001:db8::10]/six")
	if want := testnet.ResponseBody(v6.Addr, 80, "[2001:db8::10]", "GET", "/six"); r.ExitCode != 0 || r.Stdout != want {
		t.Errorf("IPv6: exit %d, body %q, stderr %q; want %q", r.ExitCode, r.Stdout, r.Stderr, want)
	}
	if m := lookup(t, w, "udp", "v6.test", dns.TypeAAAA); strings.Join(answers(m), ",") != "2001:db8::10" {
		t.Errorf("v6.test AAAA: got %v", answers(m))
	}

	// Go client from the sidecar namespace.
	resp, err := w.Sidecar.HTTPClient(t, w.CA.Pool()).Get("http://198.18.0.30/go")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.HasPrefix(string(body), "upstream=198.18.0.30 ") {
		t.Errorf("go client: got body %q", body)
	}

	w.AddSidecarLocalAddr(t, netip.MustParseAddr("169.254.169.254"))
	tw := testnet.NewTripwire(t, w.Sidecar, "169.254.169.254:8080")
	if n, err := tw.Connections(); err != nil || n != 0 {
		t.Fatalf("fresh tripwire: got %d connections (%v), want 0", n, err)
	}
	// Positive control: a tripwire that is hit must say so.
	c, err := w.Sidecar.DialContext(context.Background(), "tcp", "169.254.169.254:8080")
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	if n, err := tw.Connections(); err != nil || n != 1 {
		t.Errorf("tripwire after one connection: got %d (%v), want 1", n, err)
	}
	// The address exists only in the sidecar namespace, not in this one. (Look at the
	// interfaces; never dial it from here: this namespace may reach a real metadata service.)
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		if strings.HasPrefix(a.String(), "169.254.169.254/") {
			t.Errorf("169.254.169.254 was added to the machine's own namespace")
		}
	}
}

func TestTopologyIsolation(t *testing.T) {
	privtest.Require(t)
	var sc, up string
	t.Run("build", func(t *testing.T) {
		tp := testnet.NewTopology(t)
		sc, up = tp.Sidecar.Name, tp.Upstream.Name
		out, err := exec.Command("ip", "-n", sc, "route", "get", "198.51.100.1").CombinedOutput()
		if err == nil || !strings.Contains(string(out), "No route to host") {
			t.Errorf("route to a non-test address from the sidecar: got %q (%v), want unreachable", out, err)
		}
		out, err = exec.Command("ip", "-n", sc, "route", "get", "198.18.7.7").CombinedOutput()
		if err != nil || !strings.Contains(string(out), "dev sc0") {
			t.Errorf("route to the upstream range: got %q (%v), want dev sc0", out, err)
		}
	})
	out, err := exec.Command("ip", "netns", "list").Output()
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{sc, up} {
		if strings.Contains(string(out), n) {
			t.Errorf("netns %s still exists after the test ended", n)
		}
	}
	out, err = exec.Command("ip", "-br", "link").Output()
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range []string{"sc0", "up0"} {
		if strings.Contains(string(out), l) {
			t.Errorf("link %s appeared in the machine's own namespace", l)
		}
	}
}
