//go:build linux

package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/miekg/dns"

	"github.com/airlock-dev/airlock/test/fakellm"
)

// The demo's names, all served by its own DNS server in the outside namespace.
var demoNames = map[string]string{
	"api.demo.test.":  apiAddr,
	"evil.demo.test.": evilAddr,
	"llm.demo.test.":  llmAddr,
}

// outside is everything running in the outside namespace, served by this process.
type outside struct {
	caFile string
	ca     *x509.Certificate
	caKey  *ecdsa.PrivateKey

	llm *fakellm.Server

	mu       sync.Mutex
	lastAuth map[string]string // host -> the Authorization header of its last request

	closers []func()
}

func (o *outside) close() {
	for i := len(o.closers) - 1; i >= 0; i-- {
		o.closers[i]()
	}
}

// newCA creates a throwaway CA and writes its certificate to file: the upstreams' root,
// trusted by the sidecar (SSL_CERT_FILE) and copied by create into the sandbox's bundle.
func (o *outside) newCA(file string) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "airlock demo CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true, IsCA: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return err
	}
	if o.ca, err = x509.ParseCertificate(der); err != nil {
		return err
	}
	o.caKey, o.caFile = key, file
	return os.WriteFile(file, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644)
}

// leaf signs a certificate for the SNI name of a handshake.
func (o *outside) leaf(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	serial, _ := rand.Int(rand.Reader, big.NewInt(1<<62))
	tmpl := &x509.Certificate{
		SerialNumber: serial, Subject: pkix.Name{CommonName: hello.ServerName},
		DNSNames: []string{hello.ServerName}, NotBefore: time.Now().Add(-time.Hour),
		NotAfter: time.Now().Add(24 * time.Hour), KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, o.ca, &key.PublicKey, o.caKey)
	if err != nil {
		return nil, err
	}
	return &tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, nil
}

// start serves DNS, the HTTPS upstreams and the fake model provider in namespace ns.
func (o *outside) start(ns, openAIKey string) error {
	o.lastAuth = map[string]string{}
	// DNS: the demo names, REFUSED for anything else.
	pc, err := listenPacket(ns, "udp", dnsAddr+":53")
	if err != nil {
		return fmt.Errorf("dns: %w", err)
	}
	srv := &dns.Server{PacketConn: pc, Handler: dns.HandlerFunc(answerDNS)}
	started := make(chan struct{})
	srv.NotifyStartedFunc = func() { close(started) }
	go func() { _ = srv.ActivateAndServe() }()
	<-started
	o.closers = append(o.closers, func() { _ = srv.Shutdown() })

	// HTTPS upstreams on api and evil.
	for _, a := range []string{apiAddr, evilAddr} {
		l, err := listen(ns, "tcp", a+":443")
		if err != nil {
			return fmt.Errorf("upstream %s: %w", a, err)
		}
		o.serve(tls.NewListener(l, &tls.Config{GetCertificate: o.leaf}), http.HandlerFunc(o.upstream))
	}
	// The model provider, plain HTTP like a provider behind a local gateway.
	o.llm = fakellm.New(fakellm.Config{Flavor: fakellm.OpenAI, Key: openAIKey})
	l, err := listen(ns, "tcp", llmAddr+":8080")
	if err != nil {
		return fmt.Errorf("model provider: %w", err)
	}
	o.serve(l, o.llm)
	return nil
}

func (o *outside) serve(l net.Listener, h http.Handler) {
	s := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = s.Serve(l) }()
	o.closers = append(o.closers, func() { s.Close() })
}

// upstream answers every request with one line naming the host and path, and remembers the
// Authorization header it got (never echoing it).
func (o *outside) upstream(w http.ResponseWriter, r *http.Request) {
	o.mu.Lock()
	o.lastAuth[r.Host] = r.Header.Get("Authorization")
	o.mu.Unlock()
	fmt.Fprintf(w, "hello from %s%s\n", r.Host, r.URL.Path)
}

func (o *outside) authOf(host string) string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.lastAuth[host]
}

func answerDNS(w dns.ResponseWriter, req *dns.Msg) {
	m := new(dns.Msg)
	m.SetReply(req)
	m.Authoritative = true
	if len(req.Question) != 1 {
		m.Rcode = dns.RcodeRefused
		_ = w.WriteMsg(m)
		return
	}
	q := req.Question[0]
	addr, ok := demoNames[strings.ToLower(q.Name)]
	switch {
	case !ok:
		m.Rcode = dns.RcodeNameError
	case q.Qtype == dns.TypeA:
		m.Answer = append(m.Answer, &dns.A{
			Hdr: dns.RR_Header{Name: q.Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 60},
			A:   net.ParseIP(addr).To4(),
		})
	}
	_ = w.WriteMsg(m)
}
