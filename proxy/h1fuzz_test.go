package proxy

import (
	"bufio"
	"bytes"
	"io"
	"net/http"
	"net/http/httputil"
	"reflect"
	"strings"
	"testing"
)

// FuzzStrictRequestHead holds the strict request grammar to net/http's: every head the fast
// path takes, net/http's server parser takes too, and reads the same method, target, Host,
// fields, framing and Connection; and no head it takes is one to refuse.
func FuzzStrictRequestHead(f *testing.F) {
	for _, s := range []string{
		"GET / HTTP/1.1\r\nHost: a.test\r\n\r\n",
		"POST /x?y=1 HTTP/1.1\r\nHost: a.test:8443\r\nContent-Length: 3\r\nX-A:  b \r\nX-A: c\r\n\r\n",
		"PUT /%41 HTTP/1.1\r\nHost: [::1]:80\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n",
		"GET http://a.test/p HTTP/1.1\r\nHost: a.test\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: a.test\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: a.test\r\nX: a\r\n b\r\n\r\n",
		"GET / HTTP/1.0\r\n\r\n",
	} {
		f.Add([]byte(s), false)
		f.Add([]byte(s), true)
	}
	f.Fuzz(func(t *testing.T, head []byte, absolute bool) {
		if len(head) > maxFuzzInput {
			return
		}
		end := headEnd(head, 0)
		if end < 0 {
			return
		}
		head = head[:end]
		got, v := parseRequestHead(head, absolute)
		if v != headStrict {
			return
		}
		if ambiguousHead(head) {
			t.Fatalf("took an ambiguous head %q", head)
		}
		r, err := http.ReadRequest(bufio.NewReader(bytes.NewReader(head)))
		if err != nil {
			t.Fatalf("took %q, which net/http refuses: %v", head, err)
		}
		want := h1Request{method: r.Method, target: r.RequestURI, header: r.Header, host: got.host, bodyLen: r.ContentLength, close: r.Close}
		if absolute {
			// net/http puts an absolute-form target's host in r.Host; the raw Host header is
			// what the fast path keeps (origin.hostHeader), as the explicit listener does.
			if _, h, _ := strings.Cut(r.RequestURI, "://"); !strings.HasPrefix(h, r.Host) {
				t.Fatalf("%q: net/http's host %q is not the target's", head, r.Host)
			}
		} else {
			want.host = r.Host
		}
		if len(r.TransferEncoding) > 0 {
			want.bodyLen = -1
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%q:\n got %+v\nwant %+v (net/http)", head, got, want)
		}
	})
}

// FuzzChunkedReader holds the strict chunked decoder to net/http's: what it decodes without
// an error, net/http's decoder decodes to the same bytes, ending at the same place.
func FuzzChunkedReader(f *testing.F) {
	for _, s := range []string{
		"5\r\nhello\r\n0\r\n\r\n",
		"3;a=b;c=\"d e\"\r\nabc\r\n0\r\nX-T: 1\r\n\r\nrest",
		"a\r\n0123456789\r\n000\r\n\r\n",
		"2\nxx\r\n0\r\n\r\n",
		"2;\r\nxx\r\n0\r\n\r\n",
		"10000000000000002\r\nxx\r\n0\r\n\r\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		if len(in) > maxFuzzInput {
			return
		}
		var trailer http.Header
		cr := newConnReader(&chunkConn{r: bytes.NewReader(in), chunk: 7}, nil)
		got, err := io.ReadAll(&chunkedReader{r: cr, trailer: &trailer, maxTrailer: 1024})
		if err != nil {
			return
		}
		rest := mustReadAll(t, cr)
		br := bufio.NewReader(bytes.NewReader(in))
		want, err := io.ReadAll(httputil.NewChunkedReader(br))
		if err != nil {
			t.Fatalf("decoded %q from %q, which net/http refuses: %v", got, in, err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("%q: got %q, net/http %q", in, got, want)
		}
		// net/http's decoder stops after the last chunk's line; the trailer section follows.
		tp, _ := io.ReadAll(br)
		if !bytes.HasSuffix(tp, rest) {
			t.Fatalf("%q: left %q after the body, net/http's reader left %q before the trailer", in, rest, tp)
		}
	})
}

func mustReadAll(t *testing.T, r io.Reader) []byte {
	b, err := io.ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// FuzzStrictResponseHead holds the response grammar to net/http's: a head it takes, net/http
// reads with the same status, fields and framing.
func FuzzStrictResponseHead(f *testing.F) {
	for _, s := range []string{
		"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\n",
		"HTTP/1.1 204 No Content\r\nX: y\r\n\r\n",
		"HTTP/1.0 200 OK\r\nConnection: keep-alive\r\n\r\n",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTrailer: X-A\r\n\r\n",
		"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n",
		"HTTP/1.1 599\r\n\r\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, head []byte) {
		if len(head) > maxFuzzInput {
			return
		}
		end := headEnd(head, 0)
		if end < 0 {
			return
		}
		head = head[:end]
		got, err := parseResponseHead(head)
		if err != nil {
			return
		}
		resp, err := http.ReadResponse(bufio.NewReader(bytes.NewReader(head)), &http.Request{Method: http.MethodGet})
		if err != nil {
			t.Fatalf("took %q, which net/http refuses: %v", head, err)
		}
		if resp.StatusCode != got.status {
			t.Fatalf("%q: status %d, net/http %d", head, got.status, resp.StatusCode)
		}
		bodied := got.status >= 200 && got.status != 204 && got.status != 304
		if bodied && got.te != (len(resp.TransferEncoding) > 0) {
			t.Fatalf("%q: chunked %v, net/http %v", head, got.te, resp.TransferEncoding)
		}
		if got.cl >= 0 && !got.te && got.status/100 != 1 && got.status != 204 && got.status != 304 && resp.ContentLength != got.cl {
			t.Fatalf("%q: length %d, net/http %d", head, got.cl, resp.ContentLength)
		}
		for k, vs := range got.header {
			if k == "Transfer-Encoding" || k == "Trailer" {
				continue // net/http moves them to TransferEncoding and Trailer (so does response)
			}
			if !reflect.DeepEqual(resp.Header[k], vs) {
				t.Fatalf("%q: field %s = %q, net/http %q", head, k, vs, resp.Header[k])
			}
		}
	})
}

// FuzzH1SameAsNetHTTP sends every request the fast path takes whole (its head in the strict
// subset, its body complete in the strict framing) through the fast path and through net/http,
// on the explicit listener, followed by a marker request: the upstream must receive the same
// bytes and the client must see the same answers.
func FuzzH1SameAsNetHTTP(f *testing.F) {
	for _, s := range []string{
		"GET http://plain.test/ok/cl HTTP/1.1\r\nHost: plain.test\r\nX-A: b\r\n\r\n",
		"POST http://plain.test/ok/chunked HTTP/1.1\r\nHost: plain.test\r\nContent-Length: 3\r\n\r\nabc",
		"PUT http://plain.test/ok/trailer HTTP/1.1\r\nHost: plain.test\r\nTransfer-Encoding: chunked\r\n\r\n3;a=b\r\nabc\r\n0\r\nX-T: 1\r\n\r\n",
		"HEAD http://plain.test/ok/head HTTP/1.1\r\nHost: plain.test:80\r\nConnection: close\r\n\r\n",
		"GET http://plain.test/denied?x=%41 HTTP/1.1\r\nHost: plain.test\r\nX-Request-Id: r1\r\n\r\n",
		"DELETE http://plain.test/ok/nocont HTTP/1.1\r\nHost: other.test\r\n\r\n",
	} {
		f.Add([]byte(s))
	}
	pp := newH1Pair(f)
	f.Fuzz(func(t *testing.T, req []byte) {
		if len(req) > maxFuzzInput {
			return
		}
		h, ok := wholeStrictRequest(req)
		if !ok {
			return
		}
		path := h.target[strings.LastIndexByte(h.target, '/')+1:]
		if fastOnlyStricterAnswers[path] {
			return // answers the fast path refuses on purpose (TestH1SameAsNetHTTP)
		}
		if path == "head" && h.method != http.MethodHead {
			// The canned answer to a HEAD (a length, no body) is a truncated response to
			// any other method ("HeAD" among them): both paths wait for the body.
			return
		}
		raw := string(req) + "GET http://plain.test" + markerPath + " HTTP/1.1\r\nHost: plain.test\r\n\r\n"
		before := len(pp.fastPlain.requests())
		fast := exchangeRaw(t, pp.fast, true, raw, h.method, "GET")
		slow := exchangeRaw(t, pp.slow, true, raw, h.method, "GET")
		if strings.Join(fast, "\n--\n") != strings.Join(slow, "\n--\n") {
			t.Fatalf("%q: answers differ:\nfast:\n%s\nnet/http:\n%s", req, strings.Join(fast, "\n--\n"), strings.Join(slow, "\n--\n"))
		}
		for len(pp.slowP.requests()) < len(pp.fastPlain.requests()) || len(pp.fastPlain.requests()) < len(pp.slowP.requests()) {
			t.Fatalf("%q: the upstreams got %d and %d requests", req, len(pp.fastPlain.requests()), len(pp.slowP.requests()))
		}
		fu, su := pp.fastPlain.requests()[before:], pp.slowP.requests()[before:]
		if strings.Join(fu, "") != strings.Join(su, "") {
			t.Fatalf("%q: upstream got different bytes:\nfast:\n%q\nnet/http:\n%q", req, fu, su)
		}
	})
}

// fastOnlyStricterAnswers are rawAnswers the fast path answers with 502 where net/http relays.
var fastOnlyStricterAnswers = map[string]bool{"cl+te": true, "flood": true, "bareLF": true}

// wholeStrictRequest reports whether req is one request the fast path takes, complete: its
// head in the subset and its body exactly there in the strict framing.
func wholeStrictRequest(req []byte) (h1Request, bool) {
	end := headEnd(req, 0)
	if end < 0 {
		return h1Request{}, false
	}
	h, v := parseRequestHead(req[:end], true)
	if v != headStrict {
		return h, false
	}
	body := req[end:]
	if h.bodyLen >= 0 {
		return h, int64(len(body)) == h.bodyLen
	}
	cr := newConnReader(&chunkConn{r: bytes.NewReader(body), chunk: len(body) + 1}, nil)
	if _, err := io.ReadAll(&chunkedReader{r: cr, maxTrailer: DefaultMaxHeaderBytes}); err != nil {
		return h, false
	}
	rest, err := io.ReadAll(cr)
	return h, err == nil && len(rest) == 0
}
