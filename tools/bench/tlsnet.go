package main

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"golang.org/x/net/dns/dnsmessage"
)

// The HTTPS section's names. Both resolve to 127.0.0.1 through the bench's own DNS server
// (airlock) or hosts file (Squid); the client dials 127.0.0.1 directly for the direct leg.
const (
	tlsTunnelHost   = "bench.test"        // passthrough tunnels: CONNECT, TLS to the upstream
	tlsInjectHost   = "inject.bench.test" // intercepted: the proxy injects Authorization
	tlsToken        = "bench-secret-value-0123456789abcdef"
	tlsUpstreamRole = "tls-upstream-child"
	// bulkPath streams ?n= bytes.
	bulkPath = "/bulk"
)

// tlsPKI is the bench's test PKI: a CA (which the proxies and the client trust for the
// upstream), the upstream's leaf, and a second CA Squid signs its bumped leaves with.
type tlsPKI struct {
	caFile, certFile, keyFile string // upstream CA, leaf and key (PEM)
	squidCA                   string // Squid's signing CA, certificate and key in one PEM
	squidCACert               []byte
	caPEM                     []byte
}

// newPKI writes the bench PKI into dir.
func newPKI(dir string) (*tlsPKI, error) {
	caKey, caCert, caDER, err := selfSigned("airlock bench upstream CA")
	if err != nil {
		return nil, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: tlsTunnelHost},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(48 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames: []string{tlsTunnelHost, tlsInjectHost}, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
	if err != nil {
		return nil, err
	}
	sqKey, _, sqDER, err := selfSigned("airlock bench squid ssl-bump CA")
	if err != nil {
		return nil, err
	}
	p := &tlsPKI{caFile: filepath.Join(dir, "upstream-ca.pem"), certFile: filepath.Join(dir, "upstream.pem"),
		keyFile: filepath.Join(dir, "upstream.key"), squidCA: filepath.Join(dir, "squid-ca.pem")}
	p.caPEM = pemBlock("CERTIFICATE", caDER)
	p.squidCACert = pemBlock("CERTIFICATE", sqDER)
	for _, f := range []struct {
		path string
		body []byte
	}{
		{p.caFile, p.caPEM},
		{p.certFile, pemBlock("CERTIFICATE", der)},
		{p.keyFile, pemKey(key)},
		{p.squidCA, append(append([]byte{}, p.squidCACert...), pemKey(sqKey)...)},
	} {
		if err := os.WriteFile(f.path, f.body, 0o644); err != nil {
			return nil, err
		}
	}
	return p, nil
}

// selfSigned makes a CA key and certificate.
func selfSigned(cn string) (*ecdsa.PrivateKey, *x509.Certificate, []byte, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: cn},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(48 * time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, nil, err
	}
	cert, err := x509.ParseCertificate(der)
	return key, cert, der, err
}

func pemBlock(typ string, der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
}

func pemKey(k *ecdsa.PrivateKey) []byte {
	der, _ := x509.MarshalPKCS8PrivateKey(k)
	return pemBlock("PRIVATE KEY", der)
}

// runTLSUpstreamChild serves HTTPS (HTTP/1.1 and h2) on 127.0.0.1:0 with the leaf named by
// BENCH_TLS_CERT and BENCH_TLS_KEY: "/" answers the small body, bulkPath?n=N streams N bytes,
// and a request for tlsInjectHost without the injected Authorization is refused with 403.
func runTLSUpstreamChild() int {
	var served atomic.Int64
	body := []byte(upstreamBody)
	zeros := make([]byte, 256<<10)
	gs := newBenchGRPC(&served)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == servedPath {
			fmt.Fprintf(w, "%d\n", served.Load())
			return
		}
		host, _, _ := strings.Cut(r.Host, ":")
		if host == tlsInjectHost && r.Header.Get("Authorization") != "Bearer "+tlsToken {
			http.Error(w, "no injected credential", http.StatusForbidden)
			return
		}
		if isGRPC(r.ProtoMajor, r.Header.Get("Content-Type")) {
			gs.ServeHTTP(w, r) // counts each echoed message
			return
		}
		if serveShape(w, r, &served) {
			return
		}
		served.Add(1)
		if r.URL.Path != bulkPath {
			w.Header().Set("Content-Length", strconv.Itoa(len(body)))
			w.Write(body)
			return
		}
		n, _ := strconv.ParseInt(r.URL.Query().Get("n"), 10, 64)
		w.Header().Set("Content-Length", strconv.FormatInt(n, 10))
		for n > 0 {
			k, err := w.Write(zeros[:min(n, int64(len(zeros)))])
			if err != nil {
				return
			}
			n -= int64(k)
		}
	})
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute,
		ErrorLog: log.New(io.Discard, "", 0)}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintf(os.Stderr, "tls upstream: listen: %v\n", err)
		return 1
	}
	go srv.ServeTLS(ln, os.Getenv("BENCH_TLS_CERT"), os.Getenv("BENCH_TLS_KEY"))
	fmt.Printf("listening %s\n", ln.Addr())
	io.Copy(io.Discard, os.Stdin)
	return 0
}

// benchDNS answers A queries for *.bench.test with 127.0.0.1 (TTL 300), other types with
// NODATA and the zone's SOA, and counts queries, so the report shows how often airlock asked.
// It is a few lines of golang.org/x/net/dns/dnsmessage: miekg/dns lives in dnsfilter only.
type benchDNS struct {
	addr    string
	queries atomic.Int64
	pc      net.PacketConn
}

func startBenchDNS() (*benchDNS, error) {
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("listen for bench DNS: %w", err)
	}
	b := &benchDNS{addr: pc.LocalAddr().String(), pc: pc}
	go b.serve()
	return b, nil
}

// close stops the server.
func (b *benchDNS) close() { b.pc.Close() }

func (b *benchDNS) serve() {
	buf := make([]byte, 1500)
	for {
		n, from, err := b.pc.ReadFrom(buf)
		if err != nil {
			return
		}
		b.queries.Add(1)
		if out, err := benchAnswer(buf[:n]); err == nil {
			b.pc.WriteTo(out, from)
		}
	}
}

// benchAnswer builds the answer to one query.
func benchAnswer(q []byte) ([]byte, error) {
	var p dnsmessage.Parser
	h, err := p.Start(q)
	if err != nil {
		return nil, err
	}
	qs, err := p.Question()
	if err != nil {
		return nil, err
	}
	rh := dnsmessage.Header{ID: h.ID, Response: true, Authoritative: true, RecursionDesired: h.RecursionDesired}
	name := strings.ToLower(qs.Name.String())
	if !strings.HasSuffix(name, "bench.test.") {
		rh.RCode = dnsmessage.RCodeNameError
	}
	bld := dnsmessage.NewBuilder(nil, rh)
	bld.EnableCompression()
	if err := bld.StartQuestions(); err != nil {
		return nil, err
	}
	if err := bld.Question(qs); err != nil {
		return nil, err
	}
	switch {
	case rh.RCode != dnsmessage.RCodeSuccess:
	case qs.Type == dnsmessage.TypeA:
		if err := bld.StartAnswers(); err != nil {
			return nil, err
		}
		rr := dnsmessage.ResourceHeader{Name: qs.Name, Type: dnsmessage.TypeA, Class: dnsmessage.ClassINET, TTL: 300}
		if err := bld.AResource(rr, dnsmessage.AResource{A: [4]byte{127, 0, 0, 1}}); err != nil {
			return nil, err
		}
	default:
		// NODATA with the zone's SOA, as a real server answers (RFC 2308), so the answer may
		// be cached for the SOA's minimum.
		if err := bld.StartAuthorities(); err != nil {
			return nil, err
		}
		zone := dnsmessage.MustNewName("bench.test.")
		rr := dnsmessage.ResourceHeader{Name: zone, Type: dnsmessage.TypeSOA, Class: dnsmessage.ClassINET, TTL: 300}
		soa := dnsmessage.SOAResource{NS: dnsmessage.MustNewName("ns.bench.test."), MBox: dnsmessage.MustNewName("hostmaster.bench.test."),
			Serial: 1, Refresh: 3600, Retry: 600, Expire: 86400, MinTTL: 300}
		if err := bld.SOAResource(rr, soa); err != nil {
			return nil, err
		}
	}
	return bld.Finish()
}

// tlsClient opens TLS connections to the upstream, directly or through a proxy's CONNECT.
type tlsClient struct {
	proxy    string // proxy address; "" = direct to upstream
	upstream string // 127.0.0.1:port of the TLS upstream
	roots    *x509.CertPool
	inject   bool // direct leg of the intercepted test: send the header the proxies inject
}

// open dials, CONNECTs (through a proxy) and completes the TLS handshake for host.
func (c tlsClient) open(ctx context.Context, host string, protos []string) (*tls.Conn, error) {
	conn, err := c.dialTunnel(ctx, host)
	if err != nil {
		return nil, err
	}
	tc := tls.Client(conn, &tls.Config{ServerName: host, RootCAs: c.roots, NextProtos: protos})
	hctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := tc.HandshakeContext(hctx); err != nil {
		conn.Close()
		return nil, fmt.Errorf("TLS handshake with %s: %w", host, err)
	}
	return tc, nil
}

// dialTunnel returns a TCP connection that reaches the upstream: direct, or a CONNECT tunnel.
func (c tlsClient) dialTunnel(ctx context.Context, host string) (net.Conn, error) {
	var d net.Dialer
	if c.proxy == "" {
		return d.DialContext(ctx, "tcp", c.upstream)
	}
	conn, err := d.DialContext(ctx, "tcp", c.proxy)
	if err != nil {
		return nil, err
	}
	_, port, _ := strings.Cut(c.upstream, ":")
	authority := net.JoinHostPort(host, port)
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(conn, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", authority, authority)
	br := bufio.NewReaderSize(conn, 512)
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("CONNECT %s: %s", authority, resp.Status)
	}
	if err == nil && br.Buffered() > 0 {
		err = errors.New("proxy sent bytes after its CONNECT response")
	}
	if err != nil {
		conn.Close()
		return nil, err
	}
	conn.SetDeadline(time.Time{})
	return conn, nil
}

// get sends one GET on conn and reads the response; anything but 200 with the expected
// body length is an error. It returns the body bytes read.
func (c tlsClient) get(conn net.Conn, br *bufio.Reader, host, path string, want int64) (int64, error) {
	_, port, _ := strings.Cut(c.upstream, ":")
	req := "GET " + path + " HTTP/1.1\r\nHost: " + net.JoinHostPort(host, port) + "\r\n"
	if c.inject {
		req += "Authorization: Bearer " + tlsToken + "\r\n"
	}
	if _, err := io.WriteString(conn, req+"\r\n"); err != nil {
		return 0, fmt.Errorf("send request: %w", err)
	}
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		return 0, fmt.Errorf("read response: %w", err)
	}
	n, err := io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	switch {
	case err != nil:
		return n, fmt.Errorf("read body: %w", err)
	case resp.StatusCode != http.StatusOK:
		return n, fmt.Errorf("status %s", resp.Status)
	case n != want:
		return n, fmt.Errorf("body of %d bytes, want %d", n, want)
	}
	return n, nil
}

// served asks the TLS upstream (directly) how many requests it has served.
func tlsServed(upstream string, roots *x509.CertPool) (int64, error) {
	cl := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{Proxy: nil,
		TLSClientConfig: &tls.Config{ServerName: tlsTunnelHost, RootCAs: roots}}}
	defer cl.CloseIdleConnections()
	resp, err := cl.Get("https://" + upstream + servedPath)
	if err != nil {
		return 0, fmt.Errorf("ask TLS upstream for its count: %w", err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, err
	}
	return strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
}

// procRSS returns the resident set of pid and its descendants, in bytes.
func procRSS(pid int) int64 { return procStatusBytes(pid, "VmRSS:") }

// procStatusBytes sums a "kB" field of /proc/PID/status (VmRSS:, RssFile:, ...) over pid and
// its descendants, in bytes.
func procStatusBytes(pid int, field string) int64 {
	var total int64
	for _, id := range descendants(pid) {
		b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(id), "status"))
		if err != nil {
			continue
		}
		for line := range strings.Lines(string(b)) {
			if v, ok := strings.CutPrefix(line, field); ok {
				kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
				total += kb << 10
			}
		}
	}
	return total
}

// descendants returns pid and every live process below it.
func descendants(pid int) []int {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return []int{pid}
	}
	parent := map[int]int{}
	for _, e := range ents {
		id, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		s := string(b)
		if k := strings.LastIndexByte(s, ')'); k >= 0 {
			if f := strings.Fields(s[k+1:]); len(f) > 1 {
				parent[id], _ = strconv.Atoi(f[1])
			}
		}
	}
	out := []int{pid}
	for id := range parent {
		for a := parent[id]; a > 1; a = parent[a] {
			if a == pid {
				out = append(out, id)
				break
			}
		}
	}
	return out
}
