package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/dns/dnsmessage"
)

func query(t *testing.T, name string, typ dnsmessage.Type) []byte {
	t.Helper()
	b := dnsmessage.NewBuilder(nil, dnsmessage.Header{ID: 7, RecursionDesired: true})
	b.StartQuestions()
	b.Question(dnsmessage.Question{Name: dnsmessage.MustNewName(name), Type: typ, Class: dnsmessage.ClassINET})
	out, err := b.Finish()
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestBenchDNSAnswers: A gets 127.0.0.1 with TTL 300, AAAA gets NODATA with the SOA (so a
// resolver may cache it), a name outside bench.test gets NXDOMAIN.
func TestBenchDNSAnswers(t *testing.T) {
	for _, tc := range []struct {
		name            string
		typ             dnsmessage.Type
		rcode           dnsmessage.RCode
		answers, authns int
	}{
		{"bench.test.", dnsmessage.TypeA, dnsmessage.RCodeSuccess, 1, 0},
		{"inject.bench.test.", dnsmessage.TypeAAAA, dnsmessage.RCodeSuccess, 0, 1},
		{"example.org.", dnsmessage.TypeA, dnsmessage.RCodeNameError, 0, 0},
	} {
		out, err := benchAnswer(query(t, tc.name, tc.typ))
		if err != nil {
			t.Fatal(err)
		}
		var m dnsmessage.Message
		if err := m.Unpack(out); err != nil {
			t.Fatal(err)
		}
		if m.ID != 7 || m.RCode != tc.rcode || len(m.Answers) != tc.answers || len(m.Authorities) != tc.authns {
			t.Errorf("%s %v: got id %d %v, %d answers, %d authorities", tc.name, tc.typ, m.ID, m.RCode, len(m.Answers), len(m.Authorities))
		}
		if tc.answers == 1 {
			a, ok := m.Answers[0].Body.(*dnsmessage.AResource)
			if !ok || a.A != [4]byte{127, 0, 0, 1} || m.Answers[0].Header.TTL != 300 {
				t.Errorf("%s: answer %v", tc.name, m.Answers[0])
			}
		}
	}
}

// TestParseH2load: a clean summary is read; any failed or non-2xx request is an error.
func TestParseH2load(t *testing.T) {
	ok := `finished in 3.00s, 3333.33 req/s, 1.2MB/s
requests: 10000 total, 10000 started, 10000 done, 10000 succeeded, 0 failed, 0 errored, 0 timeout
status codes: 10000 2xx, 0 3xx, 0 4xx, 0 5xx
`
	res, err := parseH2load(ok)
	if err != nil || res.ops != 10000 || res.elapsed.Seconds() != 3 {
		t.Fatalf("got %+v, %v", res, err)
	}
	for _, bad := range []string{
		"finished in 3.00s\nrequests: 10 total, 10 started, 10 done, 9 succeeded, 1 failed, 0 errored, 0 timeout\nstatus codes: 9 2xx, 0 3xx, 0 4xx, 0 5xx\n",
		"finished in 3.00s\nrequests: 10 total, 10 started, 10 done, 10 succeeded, 0 failed, 0 errored, 0 timeout\nstatus codes: 9 2xx, 0 3xx, 1 4xx, 0 5xx\n",
		"No protocol negotiated\n",
	} {
		if _, err := parseH2load(bad); err == nil {
			t.Errorf("accepted %q", bad)
		}
	}
}

// TestGRPCStreamEchoes: the gRPC leg's client and the upstream's service agree (every
// message echoed, counted as served, the stream ended with the OK status), and a stream
// without the injected header is refused, so a proxy that does not inject fails the leg.
func TestGRPCStreamEchoes(t *testing.T) {
	pki, err := newPKI(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	cert, err := tls.LoadX509KeyPair(pki.certFile, pki.keyFile)
	if err != nil {
		t.Fatal(err)
	}
	var served atomic.Int64
	gs := newBenchGRPC(&served)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer "+tlsToken {
			http.Error(w, "no injected credential", http.StatusForbidden)
			return
		}
		if !isGRPC(r.ProtoMajor, r.Header.Get("Content-Type")) {
			t.Errorf("request %s %s is not gRPC", r.Proto, r.Header.Get("Content-Type"))
		}
		gs.ServeHTTP(w, r)
	}))
	srv.EnableHTTP2 = true
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
	srv.StartTLS()
	defer srv.Close()
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(pki.caPEM)
	c := tlsClient{upstream: srv.Listener.Addr().String(), roots: roots, inject: true}
	res, err := runGRPCStream(context.Background(), c, 2, 200*time.Millisecond)
	if err != nil || res.ops == 0 {
		t.Fatalf("gRPC leg: %d messages, %v", res.ops, err)
	}
	if served.Load() != res.ops {
		t.Errorf("upstream served %d messages, client counted %d", served.Load(), res.ops)
	}
	c.inject = false
	if _, err := runGRPCStream(context.Background(), c, 1, 100*time.Millisecond); err == nil {
		t.Error("a stream without the injected header succeeded")
	}
}
