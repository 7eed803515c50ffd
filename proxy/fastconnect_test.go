package proxy

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/textproto"
	"runtime"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http/httpguts"
)

// connectHeads are CONNECT heads, plain and adversarial, that the tests send through both
// paths: parseConnect must agree with net/http on each it accepts, and the proxy must answer
// each the same way whether the fast path or net/http and goproxy serve it.
var connectHeads = []string{
	"CONNECT api.test:443 HTTP/1.1\r\nHost: api.test:443\r\n\r\n",
	"CONNECT api.test:443 HTTP/1.1\r\n\r\n",
	"CONNECT api.test HTTP/1.1\r\nHost: api.test\r\n\r\n",
	"CONNECT API.Test:443 HTTP/1.1\r\n\r\n",
	"CONNECT api.test.:443 HTTP/1.1\r\n\r\n",
	"CONNECT api.test:443 HTTP/1.0\r\n\r\n",
	"CONNECT api.test:443 HTTP/1.1\nHost: api.test:443\n\n",
	"CONNECT api.test:443 HTTP/1.1\r\nX-Request-Id: abc-123\r\n\r\n",
	"CONNECT api.test:443 HTTP/1.1\r\nx-request-id:\t abc-123 \t\r\nX-Request-Id: second\r\n\r\n",
	"CONNECT api.test:443 HTTP/1.1\r\nX-Request-Id: " + strings.Repeat("a", 129) + "\r\n\r\n",
	"CONNECT api.test:443 HTTP/1.1\r\nX-Request-Id: \r\n\r\n",
	"CONNECT api.test:443 HTTP/1.1\r\nProxy-Authorization: Basic dXNlcjpwYXNz\r\nUser-Agent: curl/8.0\r\n\r\n",
	"CONNECT api.test:443 HTTP/1.1\r\nProxy-Connection: Keep-Alive\r\nConnection: close\r\n\r\n",
	"CONNECT api.test:8443 HTTP/1.1\r\n\r\n",
	"CONNECT evil.test:443 HTTP/1.1\r\n\r\n",
	"CONNECT meta.test:443 HTTP/1.1\r\n\r\n",
	"CONNECT api.test:99999 HTTP/1.1\r\n\r\n",
	"CONNECT api.test:0 HTTP/1.1\r\n\r\n",
	"CONNECT api.test: HTTP/1.1\r\n\r\n",
	"CONNECT api.test:443:443 HTTP/1.1\r\n\r\n",
	"CONNECT api.test:0443 HTTP/1.1\r\n\r\n",
	"CONNECT api.test:+443 HTTP/1.1\r\n\r\n",
	"CONNECT 198.18.0.10:443 HTTP/1.1\r\n\r\n",
	"CONNECT 127.0.0.1:443 HTTP/1.1\r\n\r\n",
	"CONNECT 2130706433:443 HTTP/1.1\r\n\r\n",
	"CONNECT [::1]:443 HTTP/1.1\r\n\r\n",
	"CONNECT [::ffff:127.0.0.1]:443 HTTP/1.1\r\n\r\n",
	"CONNECT [1.2.3.4]:443 HTTP/1.1\r\n\r\n",
	"CONNECT [::1] HTTP/1.1\r\n\r\n",
	"CONNECT [::1]x HTTP/1.1\r\n\r\n",
	"CONNECT [] HTTP/1.1\r\n\r\n",
	"CONNECT ::1:443 HTTP/1.1\r\n\r\n",
	"CONNECT under_score.test:443 HTTP/1.1\r\n\r\n",
	"CONNECT -api.test:443 HTTP/1.1\r\n\r\n",
	"CONNECT a..test:443 HTTP/1.1\r\n\r\n",
	"CONNECT :443 HTTP/1.1\r\n\r\n",
	"CONNECT user@api.test:443 HTTP/1.1\r\n\r\n",
	"CONNECT api.test%2e:443 HTTP/1.1\r\n\r\n",
	"CONNECT api.test/x:443 HTTP/1.1\r\n\r\n",
	"CONNECT http://api.test:443 HTTP/1.1\r\n\r\n",
	"CONNECT http://api.test:443/ HTTP/1.1\r\n\r\n",
	"CONNECT /api.test:443 HTTP/1.1\r\n\r\n",
	"CONNECT * HTTP/1.1\r\n\r\n",
	"CONNECT  api.test:443 HTTP/1.1\r\n\r\n",
	"CONNECT api.test:443  HTTP/1.1\r\n\r\n",
	"CONNECT api.test:443 HTTP/1.1 \r\n\r\n",
	"CONNECT\tapi.test:443 HTTP/1.1\r\n\r\n",
	"CONNECT api.test:443\tHTTP/1.1\r\n\r\n",
	" CONNECT api.test:443 HTTP/1.1\r\n\r\n",
	"\r\nCONNECT api.test:443 HTTP/1.1\r\n\r\n",
	"connect api.test:443 HTTP/1.1\r\n\r\n",
	"CONNECT api.test:443 HTTP/2.0\r\n\r\n",
	"CONNECT api.test:443 HTTP/1.2\r\n\r\n",
	"CONNECT api.test:443 HTTP/0.9\r\n\r\n",
	"CONNECT api.test:443 http/1.1\r\n\r\n",
	"CONNECT api.test:443\r\n\r\n",
	"CONNECT api.test:443 HTTP/1.1\r\r\n\r\n",
	"CONNECT api.test:443 HTTP/1.1\r\nHost: api.test:443\r\nHost: evil.test:443\r\n\r\n",
	"CONNECT api.test:443 HTTP/1.1\r\nHost: evil.test:443\r\n\r\n",
	"CONNECT api.test:443 HTTP/1.1\r\nHost: a b\r\n\r\n",
	"CONNECT api.test:443 HTTP/1.1\r\nHost: api.test/x\r\n\r\n",
	"CONNECT api.test:443 HTTP/1.1\r\nHost:\r\n\r\n",
	"CONNECT api.test:443 HTTP/1.1\r\nHost : api.test\r\n\r\n",
	"CONNECT api.test:443 HTTP/1.1\r\n Host: api.test\r\n\r\n",
	"CONNECT api.test:443 HTTP/1.1\r\nX-A: 1\r\n 2\r\n\r\n",
	"CONNECT api.test:443 HTTP/1.1\r\nX-A: 1\r\n\t2\r\n\r\n",
	"CONNECT api.test:443 HTTP/1.1\r\nX-A 1\r\n\r\n",
	"CONNECT api.test:443 HTTP/1.1\r\n: x\r\n\r\n",
	"CONNECT api.test:443 HTTP/1.1\r\nX(A): x\r\n\r\n",
	"CONNECT api.test:443 HTTP/1.1\r\nX-A: a\x00b\r\n\r\n",
	"CONNECT api.test:443 HTTP/1.1\r\nX-A: a\rb\r\n\r\n",
	"CONNECT api.test:443 HTTP/1.1\r\nX-A: caf\xc3\xa9\r\n\r\n",
	"CONNECT api.test:443 HTTP/1.1\r\nX-A: a\x7f\r\n\r\n",
	"CONNECT api.test:443 HTTP/1.1\r\nX-\xc3\xa9: a\r\n\r\n",
	"CONNECT api.test:443 HTTP/1.1\r\nContent-Length: 0\r\n\r\n",
	"CONNECT api.test:443 HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello",
	"CONNECT api.test:443 HTTP/1.1\r\nContent-Length: x\r\n\r\n",
	"CONNECT api.test:443 HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
	"CONNECT api.test:443 HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\n",
	"CONNECT api.test:443 HTTP/1.1\r\nExpect: 100-continue\r\n\r\n",
	"CONNECT api.test:443 HTTP/1.1\r\nExpect: x\r\n\r\n",
	"CONNECT api.test:443 HTTP/1.1\r\nUpgrade: h2c\r\nConnection: Upgrade\r\n\r\n",
	"CONNECT api.test:443 HTTP/1.1\r\n\r\nGET http://api.test/ HTTP/1.1\r\nHost: api.test\r\n\r\n",
	"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",
	"GET http://api.test/ HTTP/1.1\r\nHost: api.test\r\n\r\n",
	"CONNECT " + strings.Repeat("a", 63) + "." + strings.Repeat("b", 63) + "." + strings.Repeat("c", 63) + "." + strings.Repeat("d", 61) + ":443 HTTP/1.1\r\n\r\n",
	"CONNECT " + strings.Repeat("a.", 200) + "test:443 HTTP/1.1\r\n\r\n",
}

// netHTTPConnect is how net/http's server reads head, as far as a CONNECT's answer depends
// on it: ok when it would call the handler, with the request's URL.Host and request id.
func netHTTPConnect(head []byte) (target, reqID string, ok bool) {
	req, err := http.ReadRequest(bufio.NewReader(bytes.NewReader(head)))
	if err != nil || req.Method != http.MethodConnect || req.ProtoMajor != 1 || req.Header.Get("Expect") != "" {
		return "", "", false
	}
	for k, vv := range req.Header {
		if !httpguts.ValidHeaderFieldName(k) {
			return "", "", false
		}
		for _, v := range vv {
			if !httpguts.ValidHeaderFieldValue(v) {
				return "", "", false
			}
		}
	}
	// ReadRequest drops the Host header; the server checks its syntax first.
	tp := textproto.NewReader(bufio.NewReader(bytes.NewReader(head)))
	if _, err := tp.ReadLine(); err != nil {
		return "", "", false
	}
	mh, err := tp.ReadMIMEHeader()
	if err != nil || len(mh["Host"]) == 1 && !httpguts.ValidHostHeader(mh["Host"][0]) {
		return "", "", false
	}
	id := req.Header.Get(headerRequestID)
	if id == "" || len(id) > maxRequestID || !printable(id) {
		id = "(new)"
	}
	return req.URL.Host, id, true
}

// fastID is the request id parseConnect's result leads to, "(new)" for a generated one.
func fastID(ch connectHead) string {
	if id := requestIDFrom(ch.reqID, ch.hasID); id == ch.reqID {
		return id
	}
	return "(new)"
}

// TestFastConnectMatchesNetHTTP holds parseConnect to net/http: every head it accepts,
// net/http's server accepts too, with the same target and request id; and the plain heads
// real clients send are accepted.
func TestFastConnectMatchesNetHTTP(t *testing.T) {
	accepted := 0
	for _, head := range connectHeads {
		end := headEnd([]byte(head), 0)
		if end < 0 {
			t.Fatalf("test head %q is incomplete", head)
		}
		ch, ok := parseConnect([]byte(head[:end]))
		if !ok {
			continue
		}
		accepted++
		target, id, nok := netHTTPConnect([]byte(head[:end]))
		if !nok || target != ch.target || id != fastID(ch) {
			t.Errorf("head %q: parseConnect = %q, id %q; net/http = %q, id %q, ok %v", head, ch.target, fastID(ch), target, id, nok)
		}
	}
	if accepted < 20 {
		t.Errorf("parseConnect accepted %d of the test heads; want the plain ones (at least 20)", accepted)
	}
	for _, head := range []string{
		"CONNECT api.test:443 HTTP/1.1\r\nHost: api.test:443\r\nUser-Agent: curl/8.5.0\r\nProxy-Connection: Keep-Alive\r\n\r\n",
		"CONNECT api.test:443 HTTP/1.1\r\nHost: api.test:443\r\n\r\n", // Go's http.Transport
		"CONNECT [2001:db8::1]:443 HTTP/1.1\r\nHost: [2001:db8::1]:443\r\n\r\n",
	} {
		if _, ok := parseConnect([]byte(head)); !ok {
			t.Errorf("parseConnect(%q) = not plain, want the fast path", head)
		}
	}
}

// FuzzParseConnect holds parseConnect to net/http's parser on any head.
func FuzzParseConnect(f *testing.F) {
	for _, head := range connectHeads {
		if len(head) < maxFuzzInput {
			f.Add([]byte(head))
		}
	}
	f.Fuzz(func(t *testing.T, head []byte) {
		if len(head) > maxFuzzInput {
			return
		}
		end := headEnd(head, 0)
		if end < 0 {
			return
		}
		ch, ok := parseConnect(head[:end])
		if !ok {
			return
		}
		target, id, nok := netHTTPConnect(head[:end])
		if !nok || target != ch.target || id != fastID(ch) {
			t.Fatalf("head %q: parseConnect = %q, id %q; net/http = %q, id %q, ok %v", head, ch.target, fastID(ch), target, id, nok)
		}
	})
}

// answer is what a client sees of the proxy's answer to a CONNECT head, and the audit event.
type answer struct {
	status, decision, reqID, contentType, body string
	event                                      string
}

// TestFastConnectSameAnswers sends every test head to a proxy with the fast path and to
// one without it (net/http and goproxy for every CONNECT): status, headers, body and audit
// event must be the same. An accepted tunnel then carries a TLS handshake and a request
// sent in the same write as the head, so pipelined bytes must reach the upstream intact.
func TestFastConnectSameAnswers(t *testing.T) {
	egress := basicEgress + "    - name: meta\n      hosts: [\"meta.test\"]\n      ports: [443]\n"
	pol := mustPolicy(t, policyDoc("basic", "enforce", egress))
	fast, slow := newHarness(t, pol), newHarness(t, pol)
	slow.p.slowConnect.Store(true)
	for _, h := range []*harness{fast, slow} {
		h.res.names["meta.test"] = []netip.Addr{netip.MustParseAddr("169.254.169.254")}
		h.route(addrAPI, 443, h.upstream.tlsServer(t, echo(), "api.test"))
	}
	for i, head := range connectHeads {
		got := [2]answer{}
		for j, h := range []*harness{fast, slow} {
			got[j] = sendHead(t, h, head)
		}
		if got[0] != got[1] {
			t.Errorf("head %d %q:\n fast path: %+v\nnet/http:  %+v", i, head, got[0], got[1])
		}
	}
}

// sendHead sends head on a new connection to h's explicit listener and returns the answer;
// when the tunnel opens it carries a TLS handshake (pipelined with the head) and a GET.
func sendHead(t *testing.T, h *harness, head string) answer {
	t.Helper()
	events := len(h.log.events(t))
	c, err := net.Dial("tcp", h.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(waitTimeout))
	pc := &pipelineConn{Conn: c, head: []byte(head)}
	tunnel := strings.HasPrefix(head, "CONNECT api.test")
	if !tunnel {
		if _, err := io.WriteString(c, head); err != nil {
			t.Fatal(err)
		}
	}
	var a answer
	if tunnel {
		// The head goes out with the ClientHello; a refused tunnel fails the handshake.
		tc := tls.Client(pc, &tls.Config{ServerName: "api.test", RootCAs: h.upstream.pool})
		if err := tc.Handshake(); err == nil {
			fmt.Fprintf(tc, "GET /x HTTP/1.1\r\nHost: api.test\r\nConnection: close\r\n\r\n")
			b, _ := io.ReadAll(tc)
			a.body = "tunnel: " + firstLine(string(b))
		}
	}
	br := bufio.NewReader(c)
	if pc.br != nil {
		br = bufio.NewReader(io.MultiReader(bytes.NewReader(pc.resp), pc.br))
	}
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
	if err != nil {
		a.status = "no response"
	} else {
		a.status, a.decision, a.contentType = resp.Status, resp.Header.Get(headerDecision), resp.Header.Get("Content-Type")
		if id := resp.Header.Get(headerAirlockRequestID); id != "" {
			a.reqID = "(new)"
			if strings.Contains(head, id) {
				a.reqID = id
			}
		}
		if resp.StatusCode != http.StatusOK {
			b, _ := io.ReadAll(resp.Body)
			a.body = string(b)
		}
	}
	_ = c.Close()
	if a.reqID != "" { // the proxy answered: its event is written when the tunnel ends
		evs := h.log.wait(t, 1)[events:]
		if len(evs) > 0 {
			ev := evs[len(evs)-1]
			a.event = fmt.Sprintf("%v %v %v %v %v", ev["decision"], ev["reason"], ev["destination"], ev["status"], ev["addr"])
		}
	}
	return a
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\r\n")
	return line
}

// pipelineConn sends head in the same write as the first bytes written through it, and
// takes the CONNECT response off the front of what it reads (into resp).
type pipelineConn struct {
	net.Conn
	head []byte
	resp []byte
	br   *bufio.Reader
}

func (c *pipelineConn) Write(p []byte) (int, error) {
	if c.head != nil {
		b := append(c.head, p...)
		c.head = nil
		if _, err := c.Conn.Write(b); err != nil {
			return 0, err
		}
		return len(p), nil
	}
	return c.Conn.Write(p)
}

func (c *pipelineConn) Read(p []byte) (int, error) {
	if c.br == nil {
		c.br = bufio.NewReader(c.Conn)
		for {
			line, err := c.br.ReadString('\n')
			c.resp = append(c.resp, line...)
			if err != nil {
				return 0, err
			}
			if line == "\r\n" {
				break
			}
		}
		if !bytes.HasPrefix(c.resp, []byte("HTTP/1.1 200 ")) {
			return 0, io.EOF
		}
	}
	return c.br.Read(p)
}

// TestCloseFreshConnections: Close closes a new connection that has sent nothing (as
// net/http closes an idle one), but not one whose first head has begun: that CONNECT is
// still answered.
func TestCloseFreshConnections(t *testing.T) {
	h := newHarness(t, mustPolicy(t, policyDoc("basic", "enforce", basicEgress)))
	h.route(addrAPI, 443, h.upstream.tlsServer(t, echo(), "api.test"))
	idle, err := net.Dial("tcp", h.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer idle.Close()
	started, err := net.Dial("tcp", h.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer started.Close()
	if _, err := io.WriteString(started, "CONNECT api.test:443 HTTP/1.1\r\n"); err != nil {
		t.Fatal(err)
	}
	// Wait until the proxy tracks both connections and has the first bytes of one.
	deadline := time.Now().Add(waitTimeout)
	for !freshState(h.p, 2, 1) {
		if time.Now().After(deadline) {
			t.Fatal("the proxy did not take both connections")
		}
		runtime.Gosched()
	}
	if err := h.p.Close(); err != nil {
		t.Fatal(err)
	}
	_ = idle.SetReadDeadline(time.Now().Add(waitTimeout))
	if n, err := idle.Read(make([]byte, 1)); n != 0 || err == nil || isTimeout(err) {
		t.Errorf("idle connection after Close: read %d, %v; want it closed", n, err)
	}
	if _, err := io.WriteString(started, "Host: api.test:443\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	_ = started.SetReadDeadline(time.Now().Add(waitTimeout))
	resp, err := http.ReadResponse(bufio.NewReader(started), &http.Request{Method: http.MethodConnect})
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("CONNECT begun before Close: got %v, %v; want 200", resp, err)
	}
}

// freshState reports whether p tracks conns connections awaiting their first head, got of
// which have received a byte.
func freshState(p *Proxy, conns, got int) bool {
	p.active.mu.Lock()
	defer p.active.mu.Unlock()
	n, g := 0, 0
	for e := range p.active.conns {
		if e.fresh != nil {
			n++
			if e.fresh.got.Load() {
				g++
			}
		}
	}
	return n == conns && g == got
}
