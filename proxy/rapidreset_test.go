package proxy

import (
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// A client that opens HTTP/2 streams on an allowed path and resets each at once (rapid
// reset, CVE-2023-44487) costs itself nothing; what it makes the upstream do must be bounded
// by the connection, not by how many streams it can open and reset.
func TestRapidResetBoundsUpstreamWork(t *testing.T) {
	h := newStreamHarness(t)
	var arrived atomic.Int64
	h.route(addrAPI, 443, h.upstream.tlsServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		arrived.Add(1)
		_, _ = w.Write([]byte("ok"))
	}), "api.test"))
	c := dialH2WS(t, h, "api.test")
	_ = c.conn.SetDeadline(time.Time{})
	ended := make(chan error, 1)
	go func() { // read (and drop) what the proxy answers, until it closes the connection
		for {
			if _, err := c.fr.ReadFrame(); err != nil {
				ended <- err
				return
			}
		}
	}()
	const flood = 3000
	sent := 0
	for i := range flood {
		id := uint32(2*i + 1)
		c.hbuf.Reset()
		for _, kv := range [][2]string{{":method", "GET"}, {":scheme", "https"}, {":path", fmt.Sprintf("/ok/%d", i)}, {":authority", "api.test"}} {
			_ = c.enc.WriteField(hpack.HeaderField{Name: kv[0], Value: kv[1]})
		}
		if c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: c.hbuf.Bytes(), EndHeaders: true, EndStream: true}) != nil ||
			c.fr.WriteRSTStream(id, http2.ErrCodeCancel) != nil {
			break // the proxy closed the connection
		}
		sent++
		c.next = id + 2
	}
	select {
	case <-ended:
	case <-time.After(waitTimeout):
		_ = c.conn.Close()
		t.Fatalf("the proxy kept the connection open after %d reset streams", sent)
	}
	t.Logf("%d of %d reset streams reached the upstream", arrived.Load(), sent)
	if n := arrived.Load(); n > maxStreamResets+maxH2Streams {
		t.Errorf("%d of %d reset streams reached the upstream, want at most %d", n, sent, maxStreamResets+maxH2Streams)
	}
}
