package proxy

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/policy"
)

// h1Egress intercepts api.test (L7 rules, an injected header) and allows plain.test:80.
const h1Egress = `    - name: api
      hosts: ["api.test"]
      ports: [443]
      http:
        - methods: [GET, HEAD, POST, PUT, DELETE]
          paths: ["/ok/**"]
      inject:
        - header: Authorization
          value: "Bearer {{ secret \"tok\" }}"
    - name: plain
      hosts: ["plain.test"]
      ports: [80]
      http:
        - methods: [GET, HEAD, POST]
          paths: ["/ok/**"]
  secrets:
    tok:
      env: TEST_TOKEN
`

// rawUpstream is an upstream that keeps the exact bytes of every request it reads and
// answers from a table of raw responses, by path (the path's last segment).
type rawUpstream struct {
	ln     net.Listener
	closed chan struct{} // a signal per connection closed after a "silent" answer

	// mu guards reqs and conns.
	mu    sync.Mutex
	reqs  []string
	conns map[net.Conn]bool
}

// rawAnswers are the upstream's responses: every framing the fast path relays.
var rawAnswers = map[string]string{
	"cl":      "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 13\r\nX-Up: 1\r\n\r\n{\"ok\":\"yes\"}\n",
	"chunked": "HTTP/1.1 201 Created\r\nContent-Type: text/plain\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n6;ext=1\r\n world\r\n0\r\n\r\n",
	"trailer": "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nTransfer-Encoding: chunked\r\nTrailer: X-Sum\r\n\r\n4\r\nbody\r\n0\r\nX-Sum: abc\r\n\r\n",
	"close":   "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nConnection: close\r\n\r\nuntil the end",
	"early":   "HTTP/1.1 103 Early Hints\r\nLink: </a.css>; rel=preload\r\n\r\nHTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 2\r\n\r\nok",
	"nocont":  "HTTP/1.1 204 No Content\r\nX-Up: 2\r\n\r\n",
	"notmod":  "HTTP/1.1 304 Not Modified\r\nEtag: \"x\"\r\n\r\n",
	"head":    "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 1234\r\n\r\n",
	"status":  "HTTP/1.1 299 Whatever\r\nContent-Type: text/plain\r\nContent-Length: 0\r\n\r\n",
	"gzip":    gzipAnswer(),
	"extra":   "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 2\r\n\r\nokHTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nforged",
	// Framing errors: 502 on the fast path.
	"cl+te":    "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
	"te-gzip":  "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n",
	"cl-twice": "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello!",
	"flood":    strings.Repeat("HTTP/1.1 102 Processing\r\n\r\n", 6) + "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n",
	"bigHead":  "HTTP/1.1 200 OK\r\nX-Big: " + strings.Repeat("a", 70<<10) + "\r\nContent-Length: 0\r\n\r\n",
	"bareLF":   "HTTP/1.1 200 OK\nContent-Length: 0\n\n",
	"upgrade":  "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n",
}

func gzipAnswer() string {
	var b bytes.Buffer
	zw := gzip.NewWriter(&b)
	_, _ = zw.Write([]byte(strings.Repeat(`{"name":"airlock","n":1}`, 100)))
	_ = zw.Close()
	return fmt.Sprintf("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Encoding: gzip\r\nTransfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n0\r\n\r\n", b.Len(), b.Bytes())
}

// newRawUpstream starts a raw upstream (TLS with a leaf for names when k is set) and routes
// addr:port of h to it.
func newRawUpstream(t testing.TB, h *harness, addr netip.Addr, port uint16, k *pki, names ...string) *rawUpstream {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	u := &rawUpstream{ln: ln, closed: make(chan struct{}, 16), conns: map[net.Conn]bool{}}
	var wg sync.WaitGroup
	t.Cleanup(func() {
		ln.Close()
		u.mu.Lock()
		for c := range u.conns { // kept alive by a proxy's pool: not waited for
			c.Close()
		}
		u.mu.Unlock()
		wg.Wait()
	})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			if k != nil {
				c = tls.Server(c, &tls.Config{Certificates: []tls.Certificate{k.leaf(t, names...)}})
			}
			u.mu.Lock()
			u.conns[c] = true
			u.mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				u.serveConn(c)
			}()
		}
	}()
	h.mu.Lock()
	h.routes[netip.AddrPortFrom(addr, port)] = ln.Addr().String()
	h.mu.Unlock()
	return u
}

// recorder keeps every byte read through it.
type recorder struct {
	r   io.Reader
	buf bytes.Buffer
}

func (r *recorder) Read(p []byte) (int, error) {
	n, err := r.r.Read(p)
	r.buf.Write(p[:n])
	return n, err
}

func (u *rawUpstream) serveConn(c net.Conn) {
	defer c.Close()
	rec := &recorder{r: c}
	br := bufio.NewReader(rec)
	consumed := 0
	for {
		req, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		body, err := io.ReadAll(req.Body)
		end := rec.buf.Len() - br.Buffered()
		raw := rec.buf.String()[consumed:end]
		switch {
		case err != nil:
			raw = "TRUNCATED " + raw // never served: the upstream saw the request end early
		case len(req.TransferEncoding) > 0:
			// Chunk boundaries are the forwarder's choice: keep the head and the decoded body.
			raw = raw[:strings.Index(raw, "\r\n\r\n")+4] + fmt.Sprintf("<decoded %q, err %v>", body, err)
		}
		u.mu.Lock()
		u.reqs = append(u.reqs, raw)
		u.mu.Unlock()
		consumed = end
		name := req.URL.Path[strings.LastIndexByte(req.URL.Path, '/')+1:]
		answer, ok := rawAnswers[name]
		if !ok {
			answer = fmt.Sprintf("HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: %d\r\n\r\n%s", len(req.URL.Path), req.URL.Path)
		}
		if _, err := io.WriteString(c, answer); err != nil || name == "close" || name == "upgrade" {
			return
		}
		if name == "silent" { // a server closing a kept-alive connection, as idle ones do
			c.Close()
			select {
			case u.closed <- struct{}{}:
			default: // nobody counts them (the fuzz target)
			}
			return
		}
	}
}

func (u *rawUpstream) requests() []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]string(nil), u.reqs...)
}

// h1Pair is the same policy and upstream behind two proxies: the fast path on and off.
type h1Pair struct {
	fast, slow       *harness
	fastUp, slowUp   *rawUpstream
	fastPlain, slowP *rawUpstream
}

func newH1Pair(t testing.TB) *h1Pair {
	pol := mustPolicy(t, policyDoc("h1", "enforce", h1Egress))
	inj := func(c *Config) { c.Injector = injector{} }
	fast := newHarness(t, pol, inj, func(c *Config) { c.DisableHTTP1FastPath = false })
	slow := newHarness(t, pol, inj, func(c *Config) { c.DisableHTTP1FastPath = true })
	return &h1Pair{fast: fast, slow: slow,
		fastUp: newRawUpstream(t, fast, addrAPI, 443, fast.upstream, "api.test"), slowUp: newRawUpstream(t, slow, addrAPI, 443, slow.upstream, "api.test"),
		fastPlain: newRawUpstream(t, fast, addrPlain, 80, nil), slowP: newRawUpstream(t, slow, addrPlain, 80, nil)}
}

// exchangeRaw sends raw bytes on a new intercepted tunnel to api.test (or, with explicit,
// on a new explicit connection) and reads n responses, as a client would see them.
func exchangeRaw(t testing.TB, h *harness, explicit bool, raw string, methods ...string) []string {
	t.Helper()
	return exchangeRawPieces(t, h, explicit, raw, len(raw), methods...)
}

// exchangeRawPieces is exchangeRaw writing raw in writes of piece bytes, so the proxy's reads
// end anywhere in a head or a body.
func exchangeRawPieces(t testing.TB, h *harness, explicit bool, raw string, piece int, methods ...string) []string {
	t.Helper()
	var c net.Conn
	if explicit {
		var err error
		if c, err = net.Dial("tcp", h.addr); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
	} else {
		tc, err := h.tunnelTLS("api.test:443", "api.test")
		if err != nil {
			t.Fatalf("tunnel: %v", err)
		}
		t.Cleanup(func() { tc.Close() })
		c = tc
	}
	for rest := raw; len(rest) > 0; {
		n := min(piece, len(rest))
		if _, err := io.WriteString(c, rest[:n]); err != nil {
			// The proxy closed the connection (after answering what it read): the answers
			// read below tell the two paths apart.
			t.Logf("write (fast path off %v): %v", h.p.cfg.DisableHTTP1FastPath, err)
			break
		}
		rest = rest[n:]
	}
	br := bufio.NewReader(c)
	var out []string
	for _, m := range methods {
		resp, err := http.ReadResponse(br, &http.Request{Method: m})
		if err != nil {
			out = append(out, "read error")
			break
		}
		if resp.StatusCode/100 == 1 && resp.StatusCode != http.StatusSwitchingProtocols {
			return append(out, exchangeRawRest(br, methods[len(out):])...) // 100 Continue: a client reads on
		}
		body, err := io.ReadAll(resp.Body)
		out = append(out, describeResponse(resp, body, err))
		if bytes.Contains(body, []byte(markerPath)) {
			break // the last request of a smuggling case: everything before it was answered
		}
	}
	return out
}

// markerPath ends every smuggling case: when its answer arrives, every request the proxy
// read before it has been forwarded or refused.
const markerPath = "/ok/marker"

// exchangeRawRest reads the responses to methods from br, skipping informational ones.
func exchangeRawRest(br *bufio.Reader, methods []string) []string {
	var out []string
	for len(out) < len(methods) {
		resp, err := http.ReadResponse(br, &http.Request{Method: methods[len(out)]})
		if err != nil {
			return append(out, "read error")
		}
		if resp.StatusCode/100 == 1 {
			continue
		}
		body, err := io.ReadAll(resp.Body)
		out = append(out, describeResponse(resp, body, err))
	}
	return out
}

// describeResponse is what a client sees of a response, without what the two paths may
// frame differently (Date, Content-Length or chunked, Connection) or make up (request ids).
func describeResponse(resp *http.Response, body []byte, err error) string {
	var keys []string
	for k := range resp.Header {
		switch k {
		case "Date", "Content-Length", "Connection", "Keep-Alive", "Trailer", headerAirlockRequestID:
			continue
		}
		keys = append(keys, k+": "+strings.Join(resp.Header[k], ","))
	}
	sort.Strings(keys)
	var trailers []string
	for k, v := range resp.Trailer {
		trailers = append(trailers, k+": "+strings.Join(v, ","))
	}
	sort.Strings(trailers)
	return fmt.Sprintf("%d\n%s\nbody %q (err %v)\ntrailers %s", resp.StatusCode, strings.Join(keys, "\n"), body, err != nil,
		strings.Join(trailers, ";"))
}

// h1Case is one client exchange: raw bytes and the methods of the responses it expects.
type h1Case struct {
	name    string
	raw     string
	methods []string
}

func get1(path string, extra ...string) string {
	return "GET " + path + " HTTP/1.1\r\nHost: api.test\r\nUser-Agent: t/1\r\n" + strings.Join(extra, "") + "\r\n"
}

var h1Cases = []h1Case{
	{"content-length response", get1("/ok/cl", "Accept: */*\r\nX-Multi: a\r\nX-Multi: b\r\n"), []string{"GET"}},
	{"chunked response", get1("/ok/chunked"), []string{"GET"}},
	{"trailers", get1("/ok/trailer", "TE: trailers\r\n"), []string{"GET"}},
	{"close-delimited", get1("/ok/close"), []string{"GET"}},
	{"103 then 200", get1("/ok/early"), []string{"GET"}},
	{"204", get1("/ok/nocont"), []string{"GET"}},
	{"304", get1("/ok/notmod", "If-None-Match: \"x\"\r\n"), []string{"GET"}},
	{"HEAD", "HEAD /ok/head HTTP/1.1\r\nHost: api.test\r\n\r\n", []string{"HEAD"}},
	{"unknown status", get1("/ok/status"), []string{"GET"}},
	{"gzip chunked", get1("/ok/gzip", "Accept-Encoding: gzip\r\n"), []string{"GET"}},
	{"query and escapes", get1("/ok/q%20x?a=1&b=%2F;c"), []string{"GET"}},
	{"request id", get1("/ok/id", "X-Request-Id: req-42\r\n"), []string{"GET"}},
	{"host with port", "GET /ok/hp HTTP/1.1\r\nHost: api.test:443\r\n\r\n", []string{"GET"}},
	{"proxy headers dropped", get1("/ok/ph", "Proxy-Connection: keep-alive\r\nProxy-Authorization: Basic eA==\r\nConnection: keep-alive\r\n"), []string{"GET"}},
	{"POST with Content-Length", "POST /ok/json HTTP/1.1\r\nHost: api.test\r\nContent-Type: application/json\r\nContent-Length: 11\r\n\r\n{\"a\":\"bcd\"}", []string{"POST"}},
	{"POST chunked", "POST /ok/chunks HTTP/1.1\r\nHost: api.test\r\nTransfer-Encoding: chunked\r\n\r\n3;x=\"y z\"\r\nabc\r\n2\r\nde\r\n0\r\nX-T: 1\r\n\r\n", []string{"POST"}},
	{"keep-alive sequence", get1("/ok/1") + get1("/ok/cl") + "HEAD /ok/head HTTP/1.1\r\nHost: api.test\r\n\r\n" + get1("/ok/2", "Connection: close\r\n"),
		[]string{"GET", "GET", "HEAD", "GET"}},
	{"denied path", get1("/denied") + get1("/ok/after"), []string{"GET", "GET"}},
	{"denied method with a body drained", "PATCH /ok/x HTTP/1.1\r\nHost: api.test\r\nContent-Length: 38\r\n\r\nGET /denied HTTP/1.1\r\nHost: api.test\r\n\r\n" + get1("/ok/next"),
		[]string{"PATCH", "GET"}},
	{"host mismatch", "GET /ok/x HTTP/1.1\r\nHost: other.test\r\n\r\n", []string{"GET"}},
	{"body over the limit", "POST /ok/big HTTP/1.1\r\nHost: api.test\r\nContent-Length: 200000000\r\n\r\nabc", []string{"POST"}},
	{"response with CL and TE", get1("/ok/cl+te"), []string{"GET"}},
	{"response with two codings", get1("/ok/te-gzip"), []string{"GET"}},
	{"response with two lengths", get1("/ok/cl-twice"), []string{"GET"}},
	{"response with bare LF", get1("/ok/bareLF"), []string{"GET"}},
	{"1xx flood", get1("/ok/flood"), []string{"GET"}},
	{"oversized response head", get1("/ok/bigHead"), []string{"GET"}},
	{"unasked 101", get1("/ok/upgrade"), []string{"GET"}},
}

// fastOnlyStricter names the cases where the fast path is stricter than net/http's: a
// response net/http's Transport relays (dropping Content-Length, taking LF line ends) is a
// 502 here.
var fastOnlyStricter = map[string]bool{"response with CL and TE": true, "1xx flood": true, "response with bare LF": true}

// TestH1SameAsNetHTTP sends every case through the fast path and through net/http, each
// proxy to its own copy of the same raw upstream: the upstream must receive the same bytes
// and the client must see the same answers.
func TestH1SameAsNetHTTP(t *testing.T) {
	pp := newH1Pair(t)
	for _, tc := range h1Cases {
		for _, piece := range []int{0, 7} {
			name := tc.name
			if piece > 0 {
				name += fmt.Sprintf(" in %d-byte writes", piece)
			} else {
				piece = len(tc.raw)
			}
			t.Run(name, func(t *testing.T) { sameAsNetHTTP(t, pp, tc, piece) })
		}
	}
	if n := pp.fast.metric("airlock_proxy_http1_requests_total", map[string]string{"path": pathNetHTTP}); n != 0 {
		t.Errorf("the fast path handed %v requests to net/http, want none of these", n)
	}
}

// sameAsNetHTTP runs one case through both proxies, writing piece bytes at a time.
func sameAsNetHTTP(t *testing.T, pp *h1Pair, tc h1Case, piece int) {
	{
		{
			before := len(pp.fastUp.requests())
			fast := exchangeRawPieces(t, pp.fast, false, tc.raw, piece, tc.methods...)
			slow := exchangeRawPieces(t, pp.slow, false, tc.raw, piece, tc.methods...)
			fu, su := pp.fastUp.requests()[before:], pp.slowUp.requests()[before:]
			if fastOnlyStricter[tc.name] {
				if !strings.HasPrefix(fast[0], "502") {
					t.Fatalf("fast path answered %q, want 502", fast[0])
				}
				return
			}
			if strings.Join(fast, "\n--\n") != strings.Join(slow, "\n--\n") {
				t.Errorf("answers differ:\nfast:\n%s\nnet/http:\n%s", strings.Join(fast, "\n--\n"), strings.Join(slow, "\n--\n"))
			}
			if strings.Join(fu, "") != strings.Join(su, "") {
				t.Errorf("upstream got different bytes:\nfast:\n%q\nnet/http:\n%q", fu, su)
			}
		}
	}
}

// TestH1ExplicitSameAsNetHTTP does the same for absolute-form requests to the explicit
// listener.
func TestH1ExplicitSameAsNetHTTP(t *testing.T) {
	pp := newH1Pair(t)
	abs := func(path string, extra ...string) string {
		return "GET http://plain.test" + path + " HTTP/1.1\r\nHost: plain.test\r\n" + strings.Join(extra, "") + "\r\n"
	}
	cases := []h1Case{
		{"content-length", abs("/ok/cl"), []string{"GET"}},
		{"chunked", abs("/ok/chunked"), []string{"GET"}},
		{"trailers", abs("/ok/trailer"), []string{"GET"}},
		{"keep-alive", abs("/ok/1") + abs("/ok/2") + abs("/denied"), []string{"GET", "GET", "GET"}},
		{"POST chunked", "POST http://plain.test/ok/p HTTP/1.1\r\nHost: plain.test\r\nTransfer-Encoding: chunked\r\n\r\n1\r\nx\r\n0\r\n\r\n", []string{"POST"}},
		{"Host disagrees", "GET http://plain.test/ok/x HTTP/1.1\r\nHost: api.test\r\n\r\n", []string{"GET"}},
		{"no Host", "GET http://plain.test/ok/x HTTP/1.1\r\n\r\n", []string{"GET"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := len(pp.fastPlain.requests())
			fast := exchangeRaw(t, pp.fast, true, tc.raw, tc.methods...)
			slow := exchangeRaw(t, pp.slow, true, tc.raw, tc.methods...)
			if strings.Join(fast, "\n--\n") != strings.Join(slow, "\n--\n") {
				t.Errorf("answers differ:\nfast:\n%s\nnet/http:\n%s", strings.Join(fast, "\n--\n"), strings.Join(slow, "\n--\n"))
			}
			fu, su := pp.fastPlain.requests()[before:], pp.slowP.requests()[before:]
			if strings.Join(fu, "") != strings.Join(su, "") {
				t.Errorf("upstream got different bytes:\nfast:\n%q\nnet/http:\n%q", fu, su)
			}
		})
	}
	if n := pp.fast.metric("airlock_proxy_http1_requests_total", map[string]string{"path": pathStrict}); n == 0 {
		t.Errorf("no request took the fast path")
	}
}

// TestH1HandOff: a keep-alive tunnel whose third request is outside the subset goes on
// through net/http from that request, and every request is answered and forwarded once.
func TestH1HandOff(t *testing.T) {
	pp := newH1Pair(t)
	raw := get1("/ok/1") + "POST /ok/2 HTTP/1.1\r\nHost: api.test\r\nContent-Length: 2\r\n\r\nhi" +
		"POST /ok/3 HTTP/1.1\r\nHost: api.test\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\nho" + get1("/ok/4")
	got := exchangeRaw(t, pp.fast, false, raw, "GET", "POST", "POST", "GET")
	for i, want := range []string{"/ok/1", "/ok/2", "/ok/3", "/ok/4"} {
		if i >= len(got) || !strings.HasPrefix(got[i], "200") || !strings.Contains(got[i], want) {
			t.Fatalf("response %d = %q, want 200 with %s", i, got, want)
		}
	}
	if n := len(pp.fastUp.requests()); n != 4 {
		t.Errorf("upstream got %d requests, want 4", n)
	}
	pp.fast.log.wait(t, 4) // each request's canonical event: its path is counted by then
	strict := pp.fast.metric("airlock_proxy_http1_requests_total", map[string]string{"path": pathStrict})
	netHTTP := pp.fast.metric("airlock_proxy_http1_requests_total", map[string]string{"path": pathNetHTTP})
	if strict != 2 || netHTTP != 2 {
		t.Errorf("paths: strict %v, nethttp %v; want 2 and 2", strict, netHTTP)
	}
}

// smuggling is the corpus of heads and bodies that must never get a second request past
// the decision: each starts with a request that is refused, and hides a request for a
// denied path (/secret) behind it.
var smuggling = []struct {
	name string
	raw  string
	// normalised: net/http's server accepts the head and reframes it (drops Content-Length
	// and re-chunks, joins a folded line), so with the fast path off the first request is
	// forwarded, reframed, never the hidden one. The fast path refuses these (ambiguousHead).
	normalised bool
}{
	{name: "CL and TE", raw: "POST /ok/a HTTP/1.1\r\nHost: api.test\r\nContent-Length: 44\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\nGET /secret HTTP/1.1\r\nHost: api.test\r\n\r\n", normalised: true},
	{name: "TE not chunked", raw: "POST /ok/a HTTP/1.1\r\nHost: api.test\r\nTransfer-Encoding: xchunked\r\n\r\n0\r\n\r\nGET /secret HTTP/1.1\r\nHost: api.test\r\n\r\n"},
	{name: "TE list", raw: "POST /ok/a HTTP/1.1\r\nHost: api.test\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\nGET /secret HTTP/1.1\r\nHost: api.test\r\n\r\n"},
	{name: "TE twice", raw: "POST /ok/a HTTP/1.1\r\nHost: api.test\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: identity\r\n\r\n0\r\n\r\nGET /secret HTTP/1.1\r\nHost: api.test\r\n\r\n"},
	{name: "TE with space before colon", raw: "POST /ok/a HTTP/1.1\r\nHost: api.test\r\nTransfer-Encoding : chunked\r\nContent-Length: 4\r\n\r\n0\r\n\r\nGET /secret HTTP/1.1\r\nHost: api.test\r\n\r\n"},
	{name: "two lengths", raw: "POST /ok/a HTTP/1.1\r\nHost: api.test\r\nContent-Length: 0\r\nContent-Length: 40\r\n\r\nGET /secret HTTP/1.1\r\nHost: api.test\r\n\r\n"},
	{name: "signed length", raw: "POST /ok/a HTTP/1.1\r\nHost: api.test\r\nContent-Length: +40\r\n\r\nGET /secret HTTP/1.1\r\nHost: api.test\r\n\r\n"},
	{name: "obs-fold", raw: "POST /ok/a HTTP/1.1\r\nHost: api.test\r\nX-A: b\r\n Transfer-Encoding: chunked\r\nContent-Length: 40\r\n\r\nGET /secret HTTP/1.1\r\nHost: api.test\r\n\r\n", normalised: true},
	{name: "bare LF in chunk size", raw: "POST /ok/a HTTP/1.1\r\nHost: api.test\r\nTransfer-Encoding: chunked\r\n\r\n2\nxx\r\n0\r\n\r\nGET /secret HTTP/1.1\r\nHost: api.test\r\n\r\n"},
	{name: "lenient chunk extension", raw: "POST /ok/a HTTP/1.1\r\nHost: api.test\r\nTransfer-Encoding: chunked\r\n\r\n2;\n\r\nxx\r\n0\r\n\r\nGET /secret HTTP/1.1\r\nHost: api.test\r\n\r\n"},
	{name: "chunk size overflow", raw: "POST /ok/a HTTP/1.1\r\nHost: api.test\r\nTransfer-Encoding: chunked\r\n\r\n10000000000000002\r\nxx\r\n0\r\n\r\nGET /secret HTTP/1.1\r\nHost: api.test\r\n\r\n"},
	{name: "bare LF in the head", raw: "GET /secret HTTP/1.1\nHost: api.test\n\n"},
	{name: "two Hosts", raw: "GET /ok/a HTTP/1.1\r\nHost: api.test\r\nHost: other.test\r\n\r\nGET /secret HTTP/1.1\r\nHost: api.test\r\n\r\n"},
	{name: "oversized head", raw: "GET /ok/a HTTP/1.1\r\nHost: api.test\r\nX-Big: " + strings.Repeat("a", 80<<10) + "\r\n\r\nGET /secret HTTP/1.1\r\nHost: api.test\r\n\r\n"},
	{name: "pipelined behind a denied one", raw: "POST /denied HTTP/1.1\r\nHost: api.test\r\nContent-Length: 40\r\n\r\nGET /secret HTTP/1.1\r\nHost: api.test\r\n\r\n"},
}

// TestH1SmugglingRefused: with the fast path on (where every head is screened, whichever
// server then reads it) and off, no hidden request reaches the upstream; with it on, the
// carrying request is refused, never forwarded whole; with it off, net/http refuses it too
// or, for the normalised cases, forwards it reframed. A request whose body breaks its
// framing may have its head forwarded, but the upstream sees it end early (TRUNCATED).
func TestH1SmugglingRefused(t *testing.T) {
	pp := newH1Pair(t)
	for _, tc := range smuggling {
		for _, side := range []struct {
			name string
			h    *harness
			up   *rawUpstream
		}{{"fast", pp.fast, pp.fastUp}, {"net/http", pp.slow, pp.slowUp}} {
			t.Run(tc.name+"/"+side.name, func(t *testing.T) {
				before := len(side.up.requests())
				got := exchangeRaw(t, side.h, false, tc.raw+get1(markerPath), "POST", "GET", "GET", "GET")
				for _, r := range side.up.requests()[before:] {
					if strings.Contains(r, "/secret") && !strings.HasPrefix(r, "POST") {
						t.Fatalf("the hidden request reached the upstream: %q", r)
					}
				}
				forwarded := false
				for _, r := range side.up.requests()[before:] {
					forwarded = forwarded || !strings.HasPrefix(r, "TRUNCATED") && !strings.Contains(r, markerPath)
				}
				if forwarded && !(tc.normalised && side.name == "net/http") {
					t.Errorf("the carrying request was forwarded: %q", side.up.requests()[before:])
				}
				if !forwarded && (len(got) == 0 || got[0] == "read error" || got[0] < "4") {
					t.Errorf("answer %q, want a 4xx or 5xx", got)
				}
			})
		}
	}
}

// TestH1UpstreamClosedIdle: an upstream closes a kept-alive connection without a word (as
// servers do with idle ones); the next request, with a body, goes on a new connection.
func TestH1UpstreamClosedIdle(t *testing.T) {
	pp := newH1Pair(t)
	tc, err := pp.fast.tunnelTLS("api.test:443", "api.test")
	if err != nil {
		t.Fatal(err)
	}
	defer tc.Close()
	br := bufio.NewReader(tc)
	send := func(raw, method string) string {
		if _, err := io.WriteString(tc, raw); err != nil {
			t.Fatal(err)
		}
		return exchangeRawRest(br, []string{method})[0]
	}
	if got := send(get1("/ok/silent"), "GET"); !strings.HasPrefix(got, "200") {
		t.Fatalf("first answer %q", got)
	}
	<-pp.fastUp.closed
	got := send("POST /ok/after HTTP/1.1\r\nHost: api.test\r\nContent-Length: 2\r\n\r\nhi", "POST")
	if !strings.HasPrefix(got, "200") || !strings.Contains(got, "/ok/after") {
		t.Fatalf("POST after the upstream closed: %q, want 200", got)
	}
	if got := send(get1("/ok/silent"), "GET"); !strings.HasPrefix(got, "200") {
		t.Fatalf("third answer %q", got)
	}
	<-pp.fastUp.closed
	if got := send(get1("/ok/last"), "GET"); !strings.HasPrefix(got, "200") {
		t.Fatalf("GET after the upstream closed: %q, want 200", got)
	}
}

// crlfInjector injects a value holding CR, LF or NUL (a secret store returned garbage, or
// an attacker who could write one).
type crlfInjector struct{ value string }

func (i crlfInjector) Inject(r *http.Request, _ policy.Decision) error {
	r.Header.Set("Authorization", i.value)
	return nil
}

// TestH1InjectedControlBytesRefused: on both paths an injected value holding CR, LF or NUL
// never goes upstream (net/http's Transport refuses it; the fast path checks as it does).
func TestH1InjectedControlBytesRefused(t *testing.T) {
	pol := mustPolicy(t, policyDoc("h1", "enforce", h1Egress))
	for _, v := range []string{"Bearer a\r\nX-Evil: 1", "Bearer a\nX-Evil: 1", "Bearer a\x00b"} {
		for _, off := range []bool{false, true} {
			h := newHarness(t, pol, func(c *Config) { c.Injector = crlfInjector{v}; c.DisableHTTP1FastPath = off })
			up := newRawUpstream(t, h, addrAPI, 443, h.upstream, "api.test")
			got := exchangeRaw(t, h, false, get1("/ok/x"), "GET")
			if !strings.HasPrefix(got[0], "502") {
				t.Errorf("value %q, fast path off %v: answer %q, want 502", v, off, got[0])
			}
			if reqs := up.requests(); len(reqs) != 0 {
				t.Errorf("value %q, fast path off %v: upstream got %q", v, off, reqs)
			}
		}
	}
}

// TestH1ExplicitHandOff: on the explicit listener, an HTTP/1.0 request after a fast-path one
// goes to net/http with the rest of the connection, and both are answered and forwarded.
func TestH1ExplicitHandOff(t *testing.T) {
	pp := newH1Pair(t)
	raw := "GET http://plain.test/ok/1 HTTP/1.1\r\nHost: plain.test\r\n\r\n" +
		"GET http://plain.test/ok/2 HTTP/1.0\r\nHost: plain.test\r\n\r\n"
	got := exchangeRaw(t, pp.fast, true, raw, "GET", "GET")
	for i, want := range []string{"/ok/1", "/ok/2"} {
		if i >= len(got) || !strings.HasPrefix(got[i], "200") || !strings.Contains(got[i], want) {
			t.Fatalf("response %d = %q, want 200 with %s", i, got, want)
		}
	}
	if n := len(pp.fastPlain.requests()); n != 2 {
		t.Errorf("upstream got %d requests, want 2", n)
	}
	pp.fast.log.wait(t, 2) // each request's canonical event: its path is counted by then
	strict := pp.fast.metric("airlock_proxy_http1_requests_total", map[string]string{"path": pathStrict})
	netHTTP := pp.fast.metric("airlock_proxy_http1_requests_total", map[string]string{"path": pathNetHTTP})
	if strict != 1 || netHTTP != 1 {
		t.Errorf("paths: strict %v, nethttp %v; want 1 and 1", strict, netHTTP)
	}
}

// TestH1UpstreamExtraBytes: an upstream that sends more than its response frames (a second,
// unasked response) loses its connection: the next request goes on a new one, and the extra
// bytes never reach the client as an answer.
func TestH1UpstreamExtraBytes(t *testing.T) {
	pp := newH1Pair(t)
	got := exchangeRaw(t, pp.fast, false, get1("/ok/extra")+get1("/ok/next"), "GET", "GET")
	if len(got) != 2 || !strings.Contains(got[0], `body "ok"`) || !strings.Contains(got[1], "/ok/next") {
		t.Fatalf("answers %q, want ok then /ok/next", got)
	}
}

// TestH1RequestBodyStreams: a request body that arrives bit by bit reaches the upstream as
// it arrives, not when it ends, and whole (the fast path coalesces writes only while the
// client's bytes are already there), chunked or with Content-Length.
func TestH1RequestBodyStreams(t *testing.T) {
	for _, tc := range []struct{ name, head, first, rest string }{
		{"chunked", "Transfer-Encoding: chunked\r\n", "5\r\nhello\r\n", "6\r\n world\r\n0\r\n\r\n"},
		{"content-length", "Content-Length: 11\r\n", "hello", " world"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pol := mustPolicy(t, policyDoc("h1", "enforce", h1Egress))
			h := newHarness(t, pol, func(c *Config) { c.Injector = injector{} })
			first := make(chan string, 1)
			h.route(addrAPI, 443, h.upstream.tlsServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				buf := make([]byte, 5)
				_, err := io.ReadFull(r.Body, buf)
				first <- fmt.Sprintf("%s %v", buf, err)
				rest, _ := io.ReadAll(r.Body)
				fmt.Fprintf(w, "rest %s", rest)
			}), "api.test"))
			tc2, err := h.tunnelTLS("api.test:443", "api.test")
			if err != nil {
				t.Fatal(err)
			}
			defer tc2.Close()
			if _, err := io.WriteString(tc2, "POST /ok/stream HTTP/1.1\r\nHost: api.test\r\n"+tc.head+"\r\n"+tc.first); err != nil {
				t.Fatal(err)
			}
			select {
			case got := <-first:
				if got != "hello <nil>" {
					t.Fatalf("upstream read %q", got)
				}
			case <-time.After(waitTimeout):
				t.Fatal("the first bytes did not reach the upstream before the body ended")
			}
			if _, err := io.WriteString(tc2, tc.rest); err != nil {
				t.Fatal(err)
			}
			got := exchangeRawRest(bufio.NewReader(tc2), []string{"POST"})
			if !strings.HasPrefix(got[0], "200") || !strings.Contains(got[0], `body "rest  world"`) {
				t.Fatalf("answer %q", got)
			}
		})
	}
}
