package proxy

import (
	"bufio"
	"bytes"
	"net/http"
	"net/url"
	"strings"
	"testing"
)

// requestWriteBytes returns what Request.Write sends for r, or ok false when it refuses r.
func requestWriteBytes(r *http.Request) ([]byte, bool) {
	var b bytes.Buffer
	if err := r.Write(&b); err != nil {
		return nil, false
	}
	return b.Bytes(), true
}

// bodylessBytes returns what writeBodylessHead sends for r, or ok false when it leaves r to
// Request.Write.
func bodylessBytes(t testing.TB, r *http.Request) ([]byte, bool) {
	var b bytes.Buffer
	w := bufio.NewWriter(&b)
	if !writeBodylessHead(w, r) {
		if w.Buffered() != 0 {
			t.Fatalf("writeBodylessHead declined %s %s after writing %d bytes", r.Method, r.URL, w.Buffered())
		}
		return nil, false
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes(), true
}

// bodylessRequest builds a request as the strict path hands it to the upstream.
func bodylessRequest(method, host, target string, header http.Header) *http.Request {
	u, err := url.ParseRequestURI(target)
	if err != nil {
		u = &url.URL{Path: target}
	}
	u.Scheme, u.Host = "https", host
	return &http.Request{Method: method, URL: u, Host: host, Header: header, Body: http.NoBody, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1}
}

// TestWriteBodylessHeadSameAsRequestWrite holds the strict path's writer of bodyless requests
// to the bytes net/http's Request.Write sends for the same request (today's path and the
// differential tests' reference), and checks that it leaves every other request to it.
func TestWriteBodylessHeadSameAsRequestWrite(t *testing.T) {
	hdr := func(kv ...string) http.Header {
		h := http.Header{}
		for i := 0; i < len(kv); i += 2 {
			h[kv[i]] = append(h[kv[i]], kv[i+1])
		}
		return h
	}
	same := []*http.Request{
		bodylessRequest("GET", "api.test", "/", nil),
		bodylessRequest("GET", "api.test:8443", "/repos/acme/app?x=1&y=%20z", hdr("Accept", "*/*", "Authorization", "Bearer t")),
		bodylessRequest("HEAD", "api.test", "/a", hdr("User-Agent", "curl/8.0", "X-B", "2", "X-A", "1", "X-A", "0")),
		bodylessRequest("GET", "api.test", "/a", hdr("User-Agent", "  spaced\t ")),
		bodylessRequest("GET", "api.test", "/a", http.Header{"User-Agent": {}}),
		bodylessRequest("GET", "api.test", "/a", hdr("User-Agent", "")),
		bodylessRequest("GET", "api.test", "/a", hdr("Content-Length", "5", "Transfer-Encoding", "chunked", "Trailer", "X", "Host", "other.test")),
		bodylessRequest("GET", "[2001:db8::1]:443", "/a", hdr("X-Value", " trimmed ")),
		bodylessRequest("GET", "api.test", "/%7Euser/a;b,c", hdr("X-Empty", "")),
	}
	noHost := bodylessRequest("GET", "api.test", "/a", nil)
	noHost.Host = ""
	same = append(same, noHost)
	for _, r := range same {
		got, ok := bodylessBytes(t, r)
		want, wok := requestWriteBytes(r)
		if !ok || !wok {
			t.Fatalf("%s %s %v: writeBodylessHead wrote %v, Request.Write %v; want both", r.Method, r.URL, r.Header, ok, wok)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s %s %v:\n got %q\nwant %q", r.Method, r.URL, r.Header, got, want)
		}
	}

	declined := map[string]*http.Request{}
	for _, m := range []string{"POST", "PUT", "DELETE", "OPTIONS", "PATCH"} {
		declined[m] = bodylessRequest(m, "api.test", "/", nil)
	}
	withBody := bodylessRequest("GET", "api.test", "/", nil)
	withBody.Body, withBody.ContentLength = http.NoBody, 3
	declined["GET with a length"] = withBody
	closing := bodylessRequest("GET", "api.test", "/", nil)
	closing.Close = true
	declined["Connection: close"] = closing
	declined["zone"] = bodylessRequest("GET", "[fe80::1%25eth0]:443", "/", nil)
	declined["non-ASCII host"] = bodylessRequest("GET", "bücher.test", "/", nil)
	declined["host with a space"] = bodylessRequest("GET", "api.test x", "/", nil)
	ctl := bodylessRequest("GET", "api.test", "/", nil)
	ctl.URL.RawQuery = "a\x7fb" // RequestURI keeps a query as it is
	declined["control byte in the target"] = ctl
	trailer := bodylessRequest("GET", "api.test", "/", nil)
	trailer.Trailer = http.Header{"X": nil}
	declined["trailer"] = trailer
	for name, r := range declined {
		if _, ok := bodylessBytes(t, r); ok {
			t.Errorf("%s: writeBodylessHead wrote it; Request.Write must", name)
		}
	}
}

// FuzzWriteBodylessHead holds writeBodylessHead to Request.Write on arbitrary hosts, targets
// and fields: whatever it writes, Request.Write writes byte for byte.
func FuzzWriteBodylessHead(f *testing.F) {
	f.Add("GET", "api.test", "/a?b", "User-Agent", "x", "X-A", " 1 ")
	f.Add("HEAD", "[2001:db8::1]", "/", "Accept", "*/*", "User-Agent", "")
	f.Fuzz(func(t *testing.T, method, host, target, k1, v1, k2, v2 string) {
		if strings.ContainsAny(v1+v2, "\r\n\x00") {
			return // refused before writing (validHeader)
		}
		h := http.Header{}
		if k1 != "" {
			h[k1] = append(h[k1], v1)
		}
		if k2 != "" {
			h[k2] = append(h[k2], v2)
		}
		if validHeader(h) != nil {
			return
		}
		r := bodylessRequest(method, host, target, h)
		got, ok := bodylessBytes(t, r)
		if !ok {
			return
		}
		want, wok := requestWriteBytes(r)
		if !wok || !bytes.Equal(got, want) {
			t.Fatalf("%q %q %q %v:\n got %q\nwant %q (Request.Write ok %v)", method, host, target, h, got, want, wok)
		}
	})
}
